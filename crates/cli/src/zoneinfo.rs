//! `mmkit zoneinfo`: what Linux prints in `/proc/zoneinfo` for a described machine.
//!
//! The numbers come from a real `PageAllocator` built with the given zones, CPUs and
//! sysctls (boot-time watermark, reserve and PCP sizing code), not from a separate
//! calculator.

use std::path::PathBuf;

use clap::Args;
use mmkit_core::views::zoneinfo;
use mmkit_core::Settings;
use serde::Serialize;

use crate::machine::{policy_preset, MachineArgs};
use crate::output::print_json;
use crate::{live, CliError};

/// Arguments of `mmkit zoneinfo`.
#[derive(Args, Debug)]
#[command(mut_arg("cpus", |arg| arg.default_value("1")))]
pub struct ZoneinfoArgs {
    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,

    /// Compare with this machine's /proc/zoneinfo instead: zones, CPUs, sysctls and cache
    /// are read from /proc and /sys, and every computed value is checked.
    #[arg(
        long,
        conflicts_with_all = [
            "zones",
            "min_free_kbytes",
            "no_thp",
            "zone_device",
            "pcp_batch_scale_max",
            "stat_interval",
        ]
    )]
    pub live: bool,

    /// With --live: read proc/ and sys/ under this directory instead of / (for recorded
    /// snapshots).
    #[arg(long, value_name = "DIR", requires = "live", default_value = "/")]
    pub root: PathBuf,

    /// The policy preset (base, patch1 … patch9, v6.7, linux-6.18). Before patch 7 a
    /// pageset's `high` is fixed at `high_min`; from patch 7 it is tuned and shows 0 until
    /// first use. The text is the preset's kernel's: `high_min` and `high_max` lines only
    /// for linux-6.18 (they came with 6.13); JSON always has them.
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
    let policy = policy_preset(&args.policy)?;
    let allocator = args.machine.allocator(policy)?;
    let settings = allocator.settings();
    let zones = zoneinfo::collect(&allocator);
    if args.json {
        let report = ZoneinfoReport {
            min_free_kbytes: allocator.min_free_kbytes(),
            settings,
            zones,
        };
        print_json(&report)
    } else {
        print!("{}", zoneinfo::render(&zones, policy.zoneinfo));
        Ok(())
    }
}
