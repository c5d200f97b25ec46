//! This machine's zones, sysctls and last-level cache, read from `/proc` and `/sys` (live)
//! or from the copies a recording keeps, and turned into mmkit-core's [`Topology`] and
//! [`Settings`]. Shared by `mmkit zoneinfo --live` and the trace replay.
//!
//! Linux counterpart: what boot learns from memblock and cacheinfo, as
//! `/proc/zoneinfo`, `/proc/sys/vm/*` and `/sys/devices/system/cpu/cpu0/cache` show it.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSpec};
use mmkit_core::views::zoneinfo::ZoneInfo;
use mmkit_core::{Pfn, Settings, Topology, ZoneType};

/// The sysctl files the settings come from, relative to the filesystem root.
pub const SYSCTL_FILES: [&str; 5] = [
    "proc/sys/vm/min_free_kbytes",
    "proc/sys/vm/watermark_scale_factor",
    "proc/sys/vm/watermark_boost_factor",
    "proc/sys/vm/percpu_pagelist_high_fraction",
    "proc/sys/vm/lowmem_reserve_ratio",
];

/// This machine's RAM in bytes (`MemTotal` of `/proc/meminfo`), if it can be read.
pub fn ram_bytes() -> Option<u64> {
    meminfo_kbytes(&fs::read_to_string("/proc/meminfo").ok()?, "MemTotal:")
        .map(|kb| kb.saturating_mul(1024))
}

/// The value of `key` (`MemTotal:`) in `/proc/meminfo`'s text, in kB.
pub fn meminfo_kbytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A size in bytes as a person reads it, in binary units: `512 bytes`, `1.5 GiB`, `24.0 TiB`, `12.0 EiB`.
pub fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 7] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else if value >= 1024.0 {
        format!("{value:.1e} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A file reader: path relative to the root → contents, or a message.
pub type Reader<'a> = dyn Fn(&str) -> Result<String, String> + 'a;

/// A reader of the real files under `root` (`/` on a live machine).
pub fn fs_reader(root: &Path) -> impl Fn(&str) -> Result<String, String> + '_ {
    move |path: &str| {
        let full = root.join(path);
        fs::read_to_string(&full).map_err(|e| format!("cannot read {}: {e}", full.display()))
    }
}

/// A reader over `path<TAB>contents` lines, as a recording's `sysctl` section keeps them.
pub fn section_reader(section: &str) -> impl Fn(&str) -> Result<String, String> {
    let map: BTreeMap<String, String> = section
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |path: &str| {
        map.get(path)
            .cloned()
            .ok_or_else(|| format!("the recording has no {path}"))
    }
}

fn read_number(read: &Reader<'_>, path: &str) -> Result<u32, String> {
    let text = read(path)?;
    text.trim()
        .parse()
        .map_err(|_| format!("{path}: {:?} is not a number", text.trim()))
}

/// The settings in force: `min_free_kbytes`, watermark scale and boost factors,
/// `percpu_pagelist_high_fraction`, `lowmem_reserve_ratio`.
pub fn settings(read: &Reader<'_>) -> Result<Settings, String> {
    let mut settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(read_number(read, SYSCTL_FILES[0])? as u64),
        watermark_scale_factor: read_number(read, SYSCTL_FILES[1])?,
        watermark_boost_factor: read_number(read, SYSCTL_FILES[2])?,
        percpu_pagelist_high_fraction: read_number(read, SYSCTL_FILES[3])?,
        ..Settings::DISTRIBUTION_KERNEL
    };
    let ratios = read(SYSCTL_FILES[4])?;
    for (slot, value) in settings
        .lowmem_reserve_ratio
        .iter_mut()
        .zip(ratios.split_whitespace())
    {
        *slot = value
            .parse()
            .map_err(|_| format!("lowmem_reserve_ratio: bad value {value:?}"))?;
    }
    settings.validate().map_err(|e| e.to_string())?;
    Ok(settings)
}

/// Settings when only a zoneinfo snapshot is known: `min_free_kbytes` from the zones' min
/// watermarks (pages_min = Σ min over DMA, DMA32 and Normal, boost removed; each zone's
/// share was truncated, so this can be a few pages low), the rest at Linux's defaults.
pub fn settings_from_zoneinfo(zones: &[ZoneInfo]) -> Settings {
    let pages_min: u64 = zones
        .iter()
        .filter(|z| z.zone <= ZoneType::Normal)
        .map(|z| z.min.saturating_sub(z.boost))
        .sum();
    Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(pages_min * 4),
        ..Settings::DISTRIBUTION_KERNEL
    }
}

/// The last cache leaf of CPU 0 under `root` (must be Data or Unified, as Linux's
/// cacheinfo requires).
pub fn llc(root: &Path) -> Result<CacheInfo, String> {
    let dir = root.join("sys/devices/system/cpu/cpu0/cache");
    let mut leaves: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .map(|e| e.path())
        .collect();
    leaves.sort_by_key(|p| {
        p.file_name().and_then(|n| {
            n.to_string_lossy()
                .trim_start_matches("index")
                .parse::<u32>()
                .ok()
        })
    });
    let last = leaves.last().ok_or("no cache leaves in sysfs")?;
    let field = |name: &str| {
        fs::read_to_string(last.join(name))
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read {}/{name}: {e}", last.display()))
    };
    let kind = field("type")?;
    if kind != "Data" && kind != "Unified" {
        return Err(format!(
            "the last cache leaf is {kind}, not Data or Unified"
        ));
    }
    Ok(CacheInfo {
        llc_bytes: parse_cache_size(&field("size")?)?,
        llc_shared_cpus: count_cpu_list(&field("shared_cpu_list")?)?,
    })
}

/// A cache size as sysfs prints it: `266240K`, `32M`, or bytes.
pub fn parse_cache_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.chars().last() {
        Some('K') => (&text[..text.len() - 1], 10),
        Some('M') => (&text[..text.len() - 1], 20),
        Some('G') => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits
        .parse::<u64>()
        .map(|n| n << shift)
        .map_err(|_| format!("bad cache size {text:?}"))
}

/// Count the CPUs in a list like "0-3,8,10-11".
pub fn count_cpu_list(list: &str) -> Result<u32, String> {
    let bad = || format!("bad CPU list {list:?}");
    let mut count = 0;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        count += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                b.checked_sub(a).ok_or_else(bad)? + 1
            }
            None => part.parse::<u32>().map(|_| 1).map_err(|_| bad())?,
        };
    }
    Ok(count)
}

/// How zones are laid out in pfn space.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Layout {
    /// As the kernel reports them: spanned and present as shown (for comparing the
    /// computed values with `/proc/zoneinfo`).
    AsKernel,
    /// Each zone from its start pfn with exactly its managed pages and no holes: where a
    /// zone's managed pages really lie is not in zoneinfo, so a replay gives each zone the
    /// pages it manages and no more memory than that.
    Compact,
}

/// The topology of the zones in a zoneinfo snapshot: CPUs per node = pagesets shown.
pub fn topology(kernel: &[ZoneInfo], llc: CacheInfo, layout: Layout) -> Result<Topology, String> {
    let nr_nodes = kernel
        .iter()
        .map(|z| z.node as usize + 1)
        .max()
        .unwrap_or(0);
    let node_cpus: Vec<u32> = (0..nr_nodes)
        .map(|n| {
            kernel
                .iter()
                .filter(|z| z.node as usize == n)
                .map(|z| z.pagesets.len() as u32)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let zone_device = kernel.iter().any(|z| z.zone == ZoneType::Device);
    let zones = kernel
        .iter()
        .map(|z| {
            let (spanned, present) = match layout {
                Layout::AsKernel => (z.spanned, z.present),
                Layout::Compact => (z.managed, z.managed),
            };
            ZoneSpec {
                node: z.node,
                zone_type: z.zone,
                start_pfn: Pfn(if spanned > 0 { z.start_pfn } else { 0 }),
                spanned,
                present,
                managed: z.managed,
            }
        })
        .collect();
    Topology::new(zones, node_cpus, llc, zone_device).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(24_000_000_000_000), "21.8 TiB");
        assert_eq!(human_bytes(u128::MAX), "3.0e20 EiB");
    }

    #[test]
    fn cpu_lists_count_ranges() {
        assert_eq!(count_cpu_list("0-1").unwrap(), 2);
        assert_eq!(count_cpu_list("0-3,8,10-11").unwrap(), 7);
        assert!(count_cpu_list("3-1").is_err());
    }

    #[test]
    fn cache_sizes_have_units() {
        assert_eq!(parse_cache_size("266240K").unwrap(), 266_240 << 10);
        assert_eq!(parse_cache_size("32M").unwrap(), 32 << 20);
        assert!(parse_cache_size("lots").is_err());
    }

    #[test]
    fn settings_come_from_a_sysctl_section() {
        let section = "proc/sys/vm/min_free_kbytes\t67584\nproc/sys/vm/watermark_scale_factor\t10\nproc/sys/vm/watermark_boost_factor\t15000\nproc/sys/vm/percpu_pagelist_high_fraction\t0\nproc/sys/vm/lowmem_reserve_ratio\t256 256 32 0 0\n";
        let read = section_reader(section);
        let s = settings(&read).unwrap();
        assert_eq!(s.min_free_kbytes, MinFreeKbytes::Explicit(67584));
        assert!(settings(&section_reader("")).is_err());
    }
}
