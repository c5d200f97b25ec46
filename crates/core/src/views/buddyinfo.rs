//! `/proc/buddyinfo`: free blocks per order, per zone.
//!
//! Linux counterpart: `frag_show_print` in `mm/vmstat.c`. Only zones with managed pages
//! are listed, as Linux does (`populated_zone`).

use alloc::string::String;
use core::fmt::Write;

use crate::page_alloc::PageAllocator;
use crate::sync::RawMutex;

/// Render `/proc/buddyinfo`.
pub fn render<R: RawMutex>(allocator: &PageAllocator<R>) -> String {
    let mut out = String::new();
    for zone in allocator.zones().iter().filter(|z| z.present() > 0) {
        let _ = write!(
            out,
            "Node {}, zone {:>8} ",
            zone.node(),
            zone.zone_type().name()
        );
        for count in zone.buddyinfo() {
            let _ = write!(out, "{count:>6} ");
        }
        out.push('\n');
    }
    out
}
