//! `mmkit zoneinfo --live`: rebuild this machine's zones in mmkit and compare every value
//! Linux computes at boot or on a sysctl write with what the kernel shows.
//!
//! Inputs read: `/proc/zoneinfo` (zone sizes, start pfns, CPUs), `/proc/sys/vm/*` (the
//! sysctls in force) and the last cache leaf of CPU 0 in sysfs. Values compared:
//! watermarks (minus the live boost), spanned/present/managed, protection, start_pfn, and
//! each pageset's batch, high_min, high_max and vm stats threshold. Run-time state (free
//! pages, pageset count and high) is not compared.

use std::path::Path;

use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::views::zoneinfo::{self, ZoneInfo};
use mmkit_core::{PageAllocator, Policy, Settings, Topology};
use mmkit_trace::machine::{self, Layout};
use serde::Serialize;

use crate::output::print_json;
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
    machine::fs_reader(root)(path).map_err(CliError::usage)
}

fn live_settings(root: &Path) -> Result<Settings, CliError> {
    machine::settings(&machine::fs_reader(root)).map_err(CliError::usage)
}

fn live_topology(root: &Path, kernel: &[ZoneInfo]) -> Result<Topology, CliError> {
    let llc = machine::llc(root).map_err(CliError::usage)?;
    machine::topology(kernel, llc, Layout::AsKernel).map_err(CliError::usage)
}
