//! `mmkit zoneinfo`: what Linux prints in `/proc/zoneinfo` for a described machine.
//!
//! The numbers come from a real `PageAllocator` built with the given zones, CPUs and
//! sysctls (boot-time watermark, reserve and PCP sizing code), not from a separate
//! calculator.

use std::path::PathBuf;

use clap::Args;
use mmkit_core::policy::PRESETS;
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::views::zoneinfo;
use mmkit_core::{PageAllocator, Policy, Settings, Topology};
use serde::Serialize;

use crate::size::{parse_bytes, parse_zone};
use crate::{live, CliError};

/// Arguments of `mmkit zoneinfo`.
#[derive(Args, Debug)]
pub struct ZoneinfoArgs {
    /// A zone as `[NODE:]NAME=MANAGED[/PRESENT[/SPANNED]]` in 4 KiB pages; repeat, in zone
    /// order (DMA, DMA32, Normal, Movable), node by node. Zones are laid out at the x86-64
    /// boundaries: DMA from pfn 1 below 16 MiB, DMA32 below 4 GiB, Normal from 4 GiB.
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,

    /// CPUs per node: one number for every node, or one per node separated by commas.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub cpus: Vec<u32>,

    /// vm.min_free_kbytes; default: Linux's boot formula (raised for THP unless --no-thp).
    #[arg(long, allow_negative_numbers = true)]
    pub min_free_kbytes: Option<i64>,

    /// vm.watermark_scale_factor (1..=3000).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub watermark_scale_factor: i64,

    /// vm.watermark_boost_factor.
    #[arg(long, default_value_t = 15000, allow_negative_numbers = true)]
    pub watermark_boost_factor: i64,

    /// vm.percpu_pagelist_high_fraction (0, or at least 8).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub percpu_pagelist_high_fraction: i64,

    /// Size of the last-level cache (bytes, or with K/M/G).
    #[arg(long, default_value = "32M")]
    pub llc_size: String,

    /// CPUs sharing one last-level cache; default: all CPUs.
    #[arg(long)]
    pub llc_shared_cpus: Option<u32>,

    /// Transparent huge pages off: khugepaged does not raise min_free_kbytes.
    #[arg(long)]
    pub no_thp: bool,

    /// Model CONFIG_ZONE_DEVICE: a fifth, empty zone per node, as distribution kernels have.
    #[arg(long)]
    pub zone_device: bool,

    /// Compare with this machine's /proc/zoneinfo instead: zones, CPUs, sysctls and cache
    /// are read from /proc and /sys, and every computed value is checked.
    #[arg(long, conflicts_with_all = ["zones", "min_free_kbytes", "no_thp", "zone_device"])]
    pub live: bool,

    /// With --live: read proc/ and sys/ under this directory instead of / (for recorded
    /// snapshots).
    #[arg(long, value_name = "DIR", requires = "live", default_value = "/")]
    pub root: PathBuf,

    /// The policy preset (base, patch1 … patch9, v6.7). Before patch 7 a pageset's `high`
    /// is fixed at `high_min`; from patch 7 it is tuned and shows 0 until first use.
    #[arg(long, default_value = "v6.7")]
    pub policy: String,

    /// Print JSON instead of Linux's text layout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct ZoneinfoReport {
    min_free_kbytes: u64,
    settings: Settings,
    zones: Vec<zoneinfo::ZoneInfo>,
}

/// Run `mmkit zoneinfo`.
pub fn run(args: &ZoneinfoArgs) -> Result<(), CliError> {
    if args.live {
        return live::run(&args.root, args.json);
    }
    let settings = settings_from_args(args)?;
    let topology = topology_from_args(args)?;
    let policy = Policy::preset(&args.policy).ok_or_else(|| {
        CliError::usage(format!("unknown policy {:?}: use one of {}", args.policy, PRESETS.join(", ")))
    })?;
    let allocator = PageAllocator::new(topology, settings.clone(), policy)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let zones = zoneinfo::collect(&allocator);
    if args.json {
        let report = ZoneinfoReport {
            min_free_kbytes: allocator.min_free_kbytes(),
            settings,
            zones,
        };
        print_json(&report)
    } else {
        print!("{}", zoneinfo::render(&zones));
        Ok(())
    }
}

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::failed(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn settings_from_args(args: &ZoneinfoArgs) -> Result<Settings, CliError> {
    let non_negative = |name: &str, value: i64| {
        u32::try_from(value).map_err(|_| {
            CliError::usage(format!(
                "{name} {value} is invalid: must be between 0 and {}",
                u32::MAX
            ))
        })
    };
    let min_free_kbytes = match args.min_free_kbytes {
        None => MinFreeKbytes::Default,
        Some(kbytes) => MinFreeKbytes::Explicit(
            u64::try_from(kbytes)
                .map_err(|_| CliError::usage(format!("min_free_kbytes {kbytes} is negative")))?,
        ),
    };
    let settings = Settings {
        min_free_kbytes,
        watermark_scale_factor: non_negative(
            "watermark_scale_factor",
            args.watermark_scale_factor,
        )?,
        watermark_boost_factor: non_negative(
            "watermark_boost_factor",
            args.watermark_boost_factor,
        )?,
        percpu_pagelist_high_fraction: non_negative(
            "percpu_pagelist_high_fraction",
            args.percpu_pagelist_high_fraction,
        )?,
        transparent_hugepage: !args.no_thp,
        ..Settings::default()
    };
    settings
        .validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(settings)
}

fn topology_from_args(args: &ZoneinfoArgs) -> Result<Topology, CliError> {
    let sizes: Vec<ZoneSize> = args
        .zones
        .iter()
        .map(|z| parse_zone(z))
        .collect::<Result<_, _>>()
        .map_err(CliError::usage)?;
    let nr_nodes = sizes.iter().map(|s| s.node as usize + 1).max().unwrap_or(1);
    let node_cpus = match args.cpus[..] {
        [each] => vec![each; nr_nodes],
        ref list if list.len() == nr_nodes => list.to_vec(),
        ref list => {
            return Err(CliError::usage(format!(
                "--cpus lists {} nodes but the zones use {nr_nodes}",
                list.len()
            )))
        }
    };
    let nr_cpus: u32 = node_cpus.iter().sum();
    let llc = CacheInfo {
        llc_bytes: parse_bytes(&args.llc_size).map_err(CliError::usage)?,
        llc_shared_cpus: args.llc_shared_cpus.unwrap_or(nr_cpus.max(1)),
    };
    Topology::x86_64(&sizes, node_cpus, llc, args.zone_device)
        .map_err(|e| CliError::usage(e.to_string()))
}
