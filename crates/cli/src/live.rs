//! `mmkit zoneinfo --live`: rebuild this machine's zones in mmkit and compare every value
//! Linux computes at boot or on a sysctl write with what the kernel shows.
//!
//! Inputs read: `/proc/zoneinfo` (zone sizes, start pfns, CPUs), `/proc/sys/vm/*` (the
//! sysctls in force) and the last cache leaf of CPU 0 in sysfs. Values compared:
//! watermarks (minus the live boost), spanned/present/managed, protection, start_pfn, and
//! each pageset's batch, high_min, high_max and vm stats threshold. Run-time state (free
//! pages, pageset count and high) is not compared.

use std::fs;
use std::path::Path;

use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSpec};
use mmkit_core::views::zoneinfo::{self, ZoneInfo};
use mmkit_core::{PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};
use serde::Serialize;

use crate::size::parse_bytes;
use crate::zoneinfo::print_json;
use crate::CliError;

/// One compared value.
#[derive(Serialize, Debug)]
struct Comparison {
    zone: String,
    field: String,
    kernel: String,
    mmkit: String,
    matches: bool,
}

#[derive(Serialize)]
struct LiveReport {
    min_free_kbytes: u64,
    boot_formula_min_free_kbytes: u64,
    compared: usize,
    mismatches: usize,
    comparisons: Vec<Comparison>,
}

/// Run the comparison against the machine under `root`.
pub fn run(root: &Path, json: bool) -> Result<(), CliError> {
    let text = read(root, "proc/zoneinfo")?;
    let kernel = zoneinfo::parse(&text).map_err(|e| CliError::usage(e.to_string()))?;
    let settings = live_settings(root)?;
    let topology = live_topology(root, &kernel)?;
    let allocator = PageAllocator::new(topology.clone(), settings.clone(), Policy::V6_7)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let ours = zoneinfo::collect(&allocator);
    let comparisons = compare(&kernel, &ours);
    let boot = PageAllocator::new(
        topology,
        Settings {
            min_free_kbytes: MinFreeKbytes::Default,
            ..settings
        },
        Policy::V6_7,
    )
    .map_err(|e| CliError::usage(e.to_string()))?;
    let report = LiveReport {
        min_free_kbytes: allocator.min_free_kbytes(),
        boot_formula_min_free_kbytes: boot.min_free_kbytes(),
        compared: comparisons.len(),
        mismatches: comparisons.iter().filter(|c| !c.matches).count(),
        comparisons,
    };
    if json {
        print_json(&report)?;
    } else {
        print_table(&report);
    }
    if report.mismatches > 0 {
        return Err(CliError::failed(format!(
            "{} of {} values differ from the live kernel",
            report.mismatches, report.compared
        )));
    }
    Ok(())
}

fn print_table(report: &LiveReport) {
    println!(
        "{:<16} {:<22} {:>12} {:>12}",
        "zone", "field", "kernel", "mmkit"
    );
    for c in &report.comparisons {
        let mark = if c.matches { "" } else { "  <-- differs" };
        println!(
            "{:<16} {:<22} {:>12} {:>12}{mark}",
            c.zone, c.field, c.kernel, c.mmkit
        );
    }
    println!(
        "min_free_kbytes in force: {}; Linux's boot formula (THP on) on these zones gives {}",
        report.min_free_kbytes, report.boot_formula_min_free_kbytes
    );
    println!(
        "compared {} values: {} differ",
        report.compared, report.mismatches
    );
}

fn compare(kernel: &[ZoneInfo], ours: &[ZoneInfo]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for k in kernel {
        let name = format!("{} {}", k.node, k.zone.name());
        let Some(o) = ours.iter().find(|o| o.node == k.node && o.zone == k.zone) else {
            out.push(Comparison {
                zone: name,
                field: "zone".into(),
                kernel: "present".into(),
                mmkit: "missing".into(),
                matches: false,
            });
            continue;
        };
        let mut push = |field: String, kernel: String, mmkit: String| {
            let matches = kernel == mmkit;
            out.push(Comparison {
                zone: name.clone(),
                field,
                kernel,
                mmkit,
                matches,
            });
        };
        // zoneinfo prints watermarks with the boost included; ours start unboosted.
        let unboost = |v: u64| v.saturating_sub(k.boost).to_string();
        push("min".into(), unboost(k.min), o.min.to_string());
        push("low".into(), unboost(k.low), o.low.to_string());
        push("high".into(), unboost(k.high), o.high.to_string());
        push("promo".into(), unboost(k.promo), o.promo.to_string());
        push(
            "spanned".into(),
            k.spanned.to_string(),
            o.spanned.to_string(),
        );
        push(
            "present".into(),
            k.present.to_string(),
            o.present.to_string(),
        );
        push(
            "managed".into(),
            k.managed.to_string(),
            o.managed.to_string(),
        );
        push(
            "protection".into(),
            format!("{:?}", k.protection),
            format!("{:?}", o.protection),
        );
        if k.present > 0 {
            push(
                "start_pfn".into(),
                k.start_pfn.to_string(),
                o.start_pfn.to_string(),
            );
        }
        for kp in &k.pagesets {
            let Some(op) = o.pagesets.iter().find(|p| p.cpu == kp.cpu) else {
                push(
                    format!("cpu {} pageset", kp.cpu),
                    "present".into(),
                    "missing".into(),
                );
                continue;
            };
            let cpu = kp.cpu;
            push(
                format!("cpu {cpu} batch"),
                kp.batch.to_string(),
                op.batch.to_string(),
            );
            push(
                format!("cpu {cpu} high_min"),
                kp.high_min.to_string(),
                op.high_min.to_string(),
            );
            push(
                format!("cpu {cpu} high_max"),
                kp.high_max.to_string(),
                op.high_max.to_string(),
            );
            push(
                format!("cpu {cpu} stat threshold"),
                kp.vm_stats_threshold.to_string(),
                op.vm_stats_threshold.to_string(),
            );
        }
    }
    out
}

fn read(root: &Path, path: &str) -> Result<String, CliError> {
    let full = root.join(path);
    fs::read_to_string(&full)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", full.display())))
}

fn read_number(root: &Path, path: &str) -> Result<i64, CliError> {
    let text = read(root, path)?;
    text.trim()
        .parse()
        .map_err(|_| CliError::usage(format!("{path}: {:?} is not a number", text.trim())))
}

fn live_settings(root: &Path) -> Result<Settings, CliError> {
    let unsigned = |path: &str| -> Result<u32, CliError> {
        u32::try_from(read_number(root, path)?)
            .map_err(|_| CliError::usage(format!("{path} is out of range")))
    };
    let mut settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(unsigned("proc/sys/vm/min_free_kbytes")? as u64),
        watermark_scale_factor: unsigned("proc/sys/vm/watermark_scale_factor")?,
        watermark_boost_factor: unsigned("proc/sys/vm/watermark_boost_factor")?,
        percpu_pagelist_high_fraction: unsigned("proc/sys/vm/percpu_pagelist_high_fraction")?,
        ..Settings::default()
    };
    let ratios = read(root, "proc/sys/vm/lowmem_reserve_ratio")?;
    for (slot, value) in settings
        .lowmem_reserve_ratio
        .iter_mut()
        .zip(ratios.split_whitespace())
    {
        *slot = value
            .parse()
            .map_err(|_| CliError::usage(format!("lowmem_reserve_ratio: bad value {value:?}")))?;
    }
    settings
        .validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(settings)
}

fn live_topology(root: &Path, kernel: &[ZoneInfo]) -> Result<Topology, CliError> {
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
        .map(|z| ZoneSpec {
            node: z.node,
            zone_type: z.zone,
            start_pfn: Pfn(if z.spanned > 0 { z.start_pfn } else { 0 }),
            spanned: z.spanned,
            present: z.present,
            managed: z.managed,
        })
        .collect();
    Topology::new(zones, node_cpus, live_llc(root)?, zone_device)
        .map_err(|e| CliError::usage(e.to_string()))
}

/// The last cache leaf of CPU 0 (must be Data or Unified, as Linux's cacheinfo requires).
fn live_llc(root: &Path) -> Result<CacheInfo, CliError> {
    let dir = root.join("sys/devices/system/cpu/cpu0/cache");
    let mut leaves: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", dir.display())))?
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
    let last = leaves
        .last()
        .ok_or_else(|| CliError::usage("no cache leaves in sysfs"))?;
    let field = |name: &str| {
        fs::read_to_string(last.join(name))
            .map(|s| s.trim().to_string())
            .map_err(|e| CliError::usage(format!("cannot read {}/{name}: {e}", last.display())))
    };
    let kind = field("type")?;
    if kind != "Data" && kind != "Unified" {
        return Err(CliError::usage(format!(
            "the last cache leaf is {kind}, not Data or Unified"
        )));
    }
    Ok(CacheInfo {
        llc_bytes: parse_bytes(&field("size")?).map_err(CliError::usage)?,
        llc_shared_cpus: count_cpu_list(&field("shared_cpu_list")?)?,
    })
}

/// Count the CPUs in a list like "0-3,8,10-11".
fn count_cpu_list(list: &str) -> Result<u32, CliError> {
    let bad = || CliError::usage(format!("bad CPU list {list:?}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_ranges() {
        assert_eq!(count_cpu_list("0-1").unwrap(), 2);
        assert_eq!(count_cpu_list("0-3,8,10-11").unwrap(), 7);
        assert!(count_cpu_list("3-1").is_err());
    }
}
