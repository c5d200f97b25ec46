//! `/proc/vmstat`: the page-allocator counters, in Linux's names.
//!
//! Linux counterpart: `vmstat_text[]` in `mm/vmstat.c`. Only the lines the core keeps are
//! printed: `nr_free_pages`, `pgalloc_<zone>` per zone type (summed over nodes), `pgfree`.

use alloc::string::String;
use core::fmt::Write;

use crate::page_alloc::{PageAllocator, ZoneType};
use crate::sync::RawMutex;

/// Render the vmstat lines.
pub fn render<R: RawMutex>(allocator: &PageAllocator<R>) -> String {
    let zones = allocator.zones();
    let nr_free: i64 = zones.iter().map(|z| z.free_pages()).sum();
    let mut out = String::new();
    let _ = writeln!(out, "nr_free_pages {nr_free}");
    for zone_type in &ZoneType::ALL[..allocator.topology().nr_zone_types()] {
        let pages: u64 = zones
            .iter()
            .filter(|z| z.zone_type() == *zone_type)
            .map(|z| z.pgalloc())
            .sum();
        let _ = writeln!(
            out,
            "pgalloc_{} {pages}",
            zone_type.name().to_ascii_lowercase()
        );
    }
    let pgfree: u64 = zones.iter().map(|z| z.pgfree()).sum();
    let _ = writeln!(out, "pgfree {pgfree}");
    out
}
