//! `/proc/zoneinfo`: watermarks, sizes, protection and pagesets of every zone.
//!
//! Linux counterpart: `zoneinfo_show_print` in `mm/vmstat.c`. [`collect`] gathers the data;
//! [`render`] prints it in the layout of the preset's kernel ([`ZoneinfoLayout`]), byte for
//! byte for the lines we model: v6.6 and v6.7 print a pageset's `count`, `high` and
//! `batch`; MengEn Sun's patch (October 2024, merged for 6.13) added `high_min` and
//! `high_max` and widened the labels, which 6.18 prints. We omit the `per-node stats`
//! block and the zone counters other than `nr_free_pages`, which the core does not keep
//! yet.
//!
//! A kernel prints its allocator's zoneinfo in the layout of the policy it runs (the
//! policy's [`zoneinfo`](crate::policy::Policy::zoneinfo) field):
//!
//! ```
//! use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits};
//! use mmkit_core::views::zoneinfo::{collect, render};
//! use mmkit_core::{PageAllocator, Policy, Settings, Topology};
//!
//! // 63 MiB from 1 MiB, the first 2 MiB of it the kernel image.
//! let usable = [MemoryRange::from_bytes(1 << 20, 64 << 20, 0)];
//! let reserved = [PfnRange::covering_bytes(1 << 20, 3 << 20)];
//! let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
//! let machine = Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, &[0], llc)?;
//! let allocator = PageAllocator::new(machine, Settings::default(), Policy::V6_7)?;
//! let text = render(&collect(&allocator), allocator.policy().zoneinfo);
//! assert!(text.starts_with("Node 0, zone      DMA\n"));
//! assert!(text.contains("        present  3840\n        managed  3328\n"), "{text}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use crate::page_alloc::{NodeId, PageAllocator, WatermarkKind, ZoneType};
use crate::sync::RawMutex;

/// Which kernel's pageset lines `/proc/zoneinfo` has.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ZoneinfoLayout {
    /// Linux ≤ 6.12 (v6.6, v6.7 and the PCP series between them): `count: `, `high:  `,
    /// `batch: `.
    #[default]
    CountHighBatch,
    /// Linux ≥ 6.13: `count:    `, `high:     `, `batch:    `, `high_min: `, `high_max: `.
    WithHighMinMax,
}

/// One CPU's pageset as zoneinfo shows it.
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PagesetInfo {
    /// The CPU.
    pub cpu: u32,
    /// Pages on the pageset's lists.
    pub count: u64,
    /// Current drain threshold (0 until first use).
    pub high: u64,
    /// Refill and drain step.
    pub batch: u64,
    /// Lower bound of `high`.
    pub high_min: u64,
    /// Upper bound of `high`.
    pub high_max: u64,
    /// `vm stats threshold`.
    pub vm_stats_threshold: u32,
    /// `PCPF_FREE_HIGH_BATCH` (not printed by Linux).
    pub free_high_batch: bool,
}

/// One zone as zoneinfo shows it.
///
/// ```
/// # use mmkit_core::{CacheInfo, PageAllocator, Policy, Settings, Topology, ZoneSize, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 2 };
/// # let topology = Topology::x86_64(&zones, vec![2], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::views::zoneinfo;
/// use mmkit_core::ZoneInfo;
///
/// let zones: Vec<ZoneInfo> = zoneinfo::collect(&allocator);
/// let normal = zones.iter().find(|z| z.zone == ZoneType::Normal).unwrap();
/// assert_eq!((normal.managed, normal.pagesets.len()), (16_384, 2));
/// assert!(normal.min < normal.low && normal.low < normal.high);
/// // The same data as Linux prints it in `/proc/zoneinfo`.
/// let text = zoneinfo::render(&zones, allocator.policy().zoneinfo);
/// assert!(text.contains("Node 0, zone   Normal"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ZoneInfo {
    /// The node.
    pub node: NodeId,
    /// The zone type.
    pub zone: ZoneType,
    /// `pages free`: `NR_FREE_PAGES`.
    pub pages_free: i64,
    /// `boost`: the watermark boost.
    pub boost: u64,
    /// `min` (boost included, as Linux prints it).
    pub min: u64,
    /// `low`.
    pub low: u64,
    /// `high`.
    pub high: u64,
    /// `promo`.
    pub promo: u64,
    /// `spanned`.
    pub spanned: u64,
    /// `present`.
    pub present: u64,
    /// `managed`.
    pub managed: u64,
    /// `cma` (CMA is not configured: 0).
    pub cma: u64,
    /// `protection`: `lowmem_reserve[]`, one entry per zone type.
    pub protection: Vec<u64>,
    /// The pagesets; empty for an unpopulated zone.
    pub pagesets: Vec<PagesetInfo>,
    /// `start_pfn`.
    pub start_pfn: u64,
}

/// Gather zoneinfo for every zone of every node.
pub fn collect<R: RawMutex>(allocator: &PageAllocator<R>) -> Vec<ZoneInfo> {
    let nr_zone_types = allocator.topology().nr_zone_types();
    allocator
        .zones()
        .iter()
        .map(|zone| {
            let populated = zone.present() > 0;
            let pagesets = if populated {
                (0..zone.nr_pagesets() as u32)
                    .filter_map(|cpu| {
                        let pcp = zone.pageset(cpu)?;
                        Some(PagesetInfo {
                            cpu,
                            count: pcp.count,
                            high: pcp.high,
                            batch: pcp.batch,
                            high_min: pcp.high_min,
                            high_max: pcp.high_max,
                            vm_stats_threshold: zone.stat_threshold(),
                            free_high_batch: pcp.flags.free_high_batch,
                        })
                    })
                    .collect()
            } else {
                Vec::new()
            };
            ZoneInfo {
                node: zone.node(),
                zone: zone.zone_type(),
                pages_free: zone.free_pages(),
                boost: zone.watermarks().boost(),
                min: zone.wmark(WatermarkKind::Min),
                low: zone.wmark(WatermarkKind::Low),
                high: zone.wmark(WatermarkKind::High),
                promo: zone.wmark(WatermarkKind::Promo),
                spanned: zone.spanned(),
                present: zone.present(),
                managed: zone.managed(),
                cma: 0,
                protection: zone.lowmem_reserve()[..nr_zone_types].to_vec(),
                pagesets,
                start_pfn: zone.start_pfn().0,
            }
        })
        .collect()
}

/// Render zoneinfo in the layout of a kernel (a policy's `zoneinfo`).
pub fn render(zones: &[ZoneInfo], layout: ZoneinfoLayout) -> String {
    let mut out = String::new();
    for zone in zones {
        // Writing to a String cannot fail.
        let _ = render_zone(&mut out, zone, layout);
    }
    out
}

fn render_zone(out: &mut String, z: &ZoneInfo, layout: ZoneinfoLayout) -> core::fmt::Result {
    write!(out, "Node {}, zone {:>8}", z.node, z.zone.name())?;
    write!(out, "\n  pages free     {}", z.pages_free)?;
    write!(out, "\n        boost    {}", z.boost)?;
    write!(out, "\n        min      {}", z.min)?;
    write!(out, "\n        low      {}", z.low)?;
    write!(out, "\n        high     {}", z.high)?;
    write!(out, "\n        promo    {}", z.promo)?;
    write!(out, "\n        spanned  {}", z.spanned)?;
    write!(out, "\n        present  {}", z.present)?;
    write!(out, "\n        managed  {}", z.managed)?;
    write!(out, "\n        cma      {}", z.cma)?;
    let protection: Vec<String> = z.protection.iter().map(|p| alloc::format!("{p}")).collect();
    write!(out, "\n        protection: ({})", protection.join(", "))?;
    if z.present == 0 {
        out.push('\n');
        return Ok(());
    }
    write!(out, "\n      {:<12} {}", "nr_free_pages", z.pages_free)?;
    write!(out, "\n  pagesets")?;
    for p in &z.pagesets {
        write!(out, "\n    cpu: {}", p.cpu)?;
        match layout {
            ZoneinfoLayout::CountHighBatch => {
                write!(out, "\n              count: {}", p.count)?;
                write!(out, "\n              high:  {}", p.high)?;
                write!(out, "\n              batch: {}", p.batch)?;
            }
            ZoneinfoLayout::WithHighMinMax => {
                write!(out, "\n              count:    {}", p.count)?;
                write!(out, "\n              high:     {}", p.high)?;
                write!(out, "\n              batch:    {}", p.batch)?;
                write!(out, "\n              high_min: {}", p.high_min)?;
                write!(out, "\n              high_max: {}", p.high_max)?;
            }
        }
        write!(out, "\n  vm stats threshold: {}", p.vm_stats_threshold)?;
    }
    write!(out, "\n  node_unreclaimable:  0")?;
    write!(out, "\n  start_pfn:           {}", z.start_pfn)?;
    out.push('\n');
    Ok(())
}

/// A line of zoneinfo text that could not be read.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "zoneinfo line {}: {}", self.line, self.message)
    }
}

impl core::error::Error for ParseError {}

/// Parse `/proc/zoneinfo` text of either [`ZoneinfoLayout`] (later kernels' extra lines
/// are ignored; without `high_min`/`high_max` lines they read 0). Only the fields of
/// [`ZoneInfo`] are read; counters are skipped.
pub fn parse(text: &str) -> Result<Vec<ZoneInfo>, ParseError> {
    let mut zones: Vec<ZoneInfo> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let err = |message: &str| ParseError {
            line,
            message: alloc::format!("{message}: {raw:?}"),
        };
        let trimmed = raw.trim();
        if let Some(rest) = trimmed.strip_prefix("Node ") {
            let (node, zone) = rest
                .split_once(", zone")
                .ok_or_else(|| err("bad zone header"))?;
            let node = node.trim().parse().map_err(|_| err("bad node id"))?;
            let zone = ZoneType::from_name(zone.trim()).ok_or_else(|| err("unknown zone"))?;
            zones.push(empty_zone(node, zone));
            continue;
        }
        let Some(zone) = zones.last_mut() else {
            continue;
        };
        if let Some(list) = trimmed.strip_prefix("protection: (") {
            let list = list
                .strip_suffix(')')
                .ok_or_else(|| err("unterminated protection"))?;
            zone.protection = list
                .split(',')
                .map(|v| v.trim().parse())
                .collect::<Result<_, _>>()
                .map_err(|_| err("bad protection value"))?;
            continue;
        }
        if let Some(cpu) = trimmed.strip_prefix("cpu: ") {
            let cpu = cpu.trim().parse().map_err(|_| err("bad cpu"))?;
            zone.pagesets.push(PagesetInfo {
                cpu,
                count: 0,
                high: 0,
                batch: 0,
                high_min: 0,
                high_max: 0,
                vm_stats_threshold: 0,
                free_high_batch: false,
            });
            continue;
        }
        let (key, value) = match trimmed.split_once(':') {
            Some((key, value)) => (key.trim(), value.trim()),
            None => match trimmed.rsplit_once(' ') {
                Some((key, value)) => (key.trim(), value.trim()),
                None => continue,
            },
        };
        // Wider than any field, so that a value beyond a field's range is refused
        // below rather than skipped as if it were not a number.
        let Ok(number) = value.parse::<i128>() else {
            continue;
        };
        apply_field(zone, key, number).map_err(err)?;
    }
    Ok(zones)
}

fn empty_zone(node: NodeId, zone: ZoneType) -> ZoneInfo {
    ZoneInfo {
        node,
        zone,
        pages_free: 0,
        boost: 0,
        min: 0,
        low: 0,
        high: 0,
        promo: 0,
        spanned: 0,
        present: 0,
        managed: 0,
        cma: 0,
        protection: Vec::new(),
        pagesets: Vec::new(),
        start_pfn: 0,
    }
}

fn apply_field(zone: &mut ZoneInfo, key: &str, value: i128) -> Result<(), &'static str> {
    let unsigned = u64::try_from(value).map_err(|_| {
        if value < 0 {
            "negative value"
        } else {
            "value out of range"
        }
    });
    if let Some(pcp) = zone.pagesets.last_mut() {
        match key {
            "count" => return unsigned.map(|v| pcp.count = v),
            // Zone-level `high` comes before the first `cpu:` line.
            "high" => return unsigned.map(|v| pcp.high = v),
            "batch" => return unsigned.map(|v| pcp.batch = v),
            "high_min" => return unsigned.map(|v| pcp.high_min = v),
            "high_max" => return unsigned.map(|v| pcp.high_max = v),
            "vm stats threshold" => {
                pcp.vm_stats_threshold = u32::try_from(value).map_err(|_| "bad threshold")?;
                return Ok(());
            }
            _ => {}
        }
    }
    match key {
        "pages free" => zone.pages_free = i64::try_from(value).map_err(|_| "value out of range")?,
        "boost" => zone.boost = unsigned?,
        "min" => zone.min = unsigned?,
        "low" => zone.low = unsigned?,
        "high" => zone.high = unsigned?,
        "promo" => zone.promo = unsigned?,
        "spanned" => zone.spanned = unsigned?,
        "present" => zone.present = unsigned?,
        "managed" => zone.managed = unsigned?,
        "cma" => zone.cma = unsigned?,
        "start_pfn" => zone.start_pfn = unsigned?,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE_NORMAL: &str = "\
Node 0, zone   Normal
  pages free     41477
        boost    0
        min      3412
        low      4265
        high     5118
        promo    5971
        spanned  5505024
        present  5505024
        managed  196608
        cma      0
        protection: (0, 0, 0, 0, 0)
      nr_free_pages 41477
  pagesets
    cpu: 0
              count:    1159
              high:     4756
              batch:    63
              high_min: 2132
              high_max: 12288
  vm stats threshold: 16
    cpu: 1
              count:    979
              high:     4368
              batch:    63
              high_min: 2132
              high_max: 12288
  vm stats threshold: 16
  node_unreclaimable:  0
  start_pfn:           1048576
Node 0, zone  Movable
  pages free     0
        boost    0
        min      32
        low      32
        high     32
        promo    32
        spanned  0
        present  0
        managed  0
        cma      0
        protection: (0, 0, 0, 0, 0)
";

    /// A field beyond its range is an error naming its line; it was skipped as if it were
    /// not a number, so a `managed` of 2^64 read as 0 ("no populated Normal zone").
    #[test]
    fn a_value_beyond_its_fields_range_is_an_error() {
        let with = |from: &str, to: &str| LIVE_NORMAL.replacen(from, to, 1);
        let max = with("managed  196608", "managed  18446744073709551615");
        assert_eq!(parse(&max).unwrap()[0].managed, u64::MAX);
        let line = LIVE_NORMAL
            .lines()
            .position(|l| l.trim() == "managed  196608")
            .unwrap()
            + 1;
        for (from, to) in [
            ("managed  196608", "managed  18446744073709551616"),
            ("managed  196608", "managed  -1"),
            ("pages free     ", "pages free     9223372036854775808"),
        ] {
            let text = if from.starts_with("pages") {
                // The first zone's `pages free` line, its number replaced.
                let start = LIVE_NORMAL.find(from).unwrap();
                let end = start + LIVE_NORMAL[start..].find('\n').unwrap();
                alloc::format!("{}{}{}", &LIVE_NORMAL[..start], to, &LIVE_NORMAL[end..])
            } else {
                with(from, to)
            };
            let error = parse(&text).unwrap_err();
            assert!(
                error.message.contains("out of range") || error.message.contains("negative"),
                "{to}: {error}"
            );
            if from.starts_with("managed") {
                assert_eq!(error.line, line, "{to}: {error}");
            }
        }
    }

    #[test]
    fn parses_a_live_zoneinfo_excerpt() {
        let zones = parse(LIVE_NORMAL).unwrap();
        assert_eq!(zones.len(), 2);
        let normal = &zones[0];
        assert_eq!(normal.zone, ZoneType::Normal);
        assert_eq!(
            (normal.min, normal.low, normal.high, normal.promo),
            (3412, 4265, 5118, 5971)
        );
        assert_eq!(
            (normal.spanned, normal.managed, normal.start_pfn),
            (5_505_024, 196_608, 1_048_576)
        );
        assert_eq!(normal.protection, [0, 0, 0, 0, 0]);
        assert_eq!(normal.pagesets.len(), 2);
        let cpu1 = &normal.pagesets[1];
        assert_eq!((cpu1.count, cpu1.high, cpu1.batch), (979, 4368, 63));
        assert_eq!(
            (cpu1.high_min, cpu1.high_max, cpu1.vm_stats_threshold),
            (2132, 12288, 16)
        );
        assert_eq!(zones[1].zone, ZoneType::Movable);
        assert_eq!(zones[1].min, 32);
    }

    #[test]
    fn rendering_then_parsing_round_trips() {
        let zones = parse(LIVE_NORMAL).unwrap();
        let text = render(&zones, ZoneinfoLayout::WithHighMinMax);
        assert_eq!(text, LIVE_NORMAL, "6.18's text, byte for byte");
        assert_eq!(parse(&text).unwrap(), zones);
    }

    #[test]
    fn v6_6_layout_has_no_high_min_or_high_max_lines() {
        let zones = parse(LIVE_NORMAL).unwrap();
        let text = render(&zones, ZoneinfoLayout::CountHighBatch);
        let cpu0 =
            "    cpu: 0\n              count: 1159\n              high:  4756\n              \
                    batch: 63\n  vm stats threshold: 16\n";
        assert!(text.contains(cpu0), "{text}");
        assert!(!text.contains("high_min") && !text.contains("high_max"));
        let again = parse(&text).unwrap();
        let pcp = &again[0].pagesets[1];
        assert_eq!((pcp.count, pcp.high, pcp.batch), (979, 4368, 63));
        assert_eq!(
            (pcp.high_min, pcp.high_max),
            (0, 0),
            "not printed, so not read"
        );
    }

    #[test]
    fn a_bad_protection_line_names_its_line() {
        let err = parse("Node 0, zone   Normal\n        protection: (0, x)\n").unwrap_err();
        assert_eq!(err.line, 2);
    }
}
