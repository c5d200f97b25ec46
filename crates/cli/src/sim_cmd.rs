//! `mmkit sim`: one workload on many virtual CPUs under a list of policies, through
//! mmkit-sim; prints a table in the form of Huang 2023's (or JSON) and writes SVG plots.
//!
//! Runs are independent simulations, so they run on parallel threads; each is
//! deterministic, and results are printed in the order the policies were given. A sweep
//! also splits into shards run by separate processes or machines (`--shard I/N`, see
//! `shard`) whose files `mmkit sim merge` prints as this one process would.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mmkit_core::Policy;
use mmkit_sim::speed::RunSpeed;
use mmkit_sim::workload::pageout::{DirectReclaim, PageoutParams};
use mmkit_sim::workload::stream::StreamParams;
use mmkit_sim::{run, table, RunResult, RunSpec, TableRow, WorkloadKind, WorkloadParams};
use serde::Serialize;

use crate::machine::policy_preset;
use crate::CliError;

/// Arguments of `mmkit sim`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    /// `calibrate`: fit the cost model instead of running one workload.
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    /// Workload: kbuild, netperf, unix, pagealloc or pageout.
    #[arg(long, required = true)]
    pub workload: Option<String>,
    /// Virtual CPUs; default: the workload's machine (kbuild 112, one socket of the
    /// published 224; netperf/unix 128, pageout 96, pagealloc 1).
    #[arg(long)]
    pub cpus: Option<u32>,
    /// Policy presets, comma-separated; values are relative to the first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "base,patch1,patch3,patch5,patch7,patch9"
    )]
    pub policies: Vec<String>,
    /// Seed of every random choice of the workload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Size of the run: 1 = the default scale (kbuild: 48 processes per CPU, more makes
    /// the build longer; netperf: 1.25 s of virtual time, of which 0.25 s warm-up; unix:
    /// 3.5 s, of which 3 s warm-up, or 1.5 s and 1 s for patches 3–9); smaller is faster.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write SVG plots into this folder.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Parallel runs; default: the available cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// After the runs, print each one's speed on standard error: the virtual seconds it
    /// simulated per second of its thread's CPU time and of wall time (set-up included),
    /// the simulator's speed target being at least 1× for kbuild on one core. Host times
    /// are never part of the table or the JSON, which stay the same on every machine.
    #[arg(long)]
    pub timing: bool,
    /// Cost-model sensitivity: descriptor cache lines, written last by another CPU, that
    /// one buddy merge level touches under the zone lock, each a same-socket transfer;
    /// default: the model's 3 (the buddy and its two list neighbours).
    #[arg(long, value_name = "LINES")]
    pub merge_lines: Option<f64>,
    /// Cost-model sensitivity: such lines of one split level; default: the model's 2 (the
    /// freed half and the list's old first entry).
    #[arg(long, value_name = "LINES")]
    pub split_lines: Option<f64>,
    /// Cost-model sensitivity: zone-lock hold per block moved, ns; default: the
    /// committed calibration's.
    #[arg(long, value_name = "NS")]
    pub hold_per_block_ns: Option<f64>,
    /// Cost-model sensitivity: zone cache lines that follow the lock to a new holder;
    /// default: the committed calibration's.
    #[arg(long, value_name = "LINES")]
    pub lock_lines: Option<f64>,
    /// Cost-model sensitivity: the throughput of a core running both its hyperthreads over
    /// one running alone (Intel gives 1.15–1.30); a CPU runs its work as if alone while its
    /// sibling spins on a zone lock. 2 gains nothing from a spinning sibling. Default: the
    /// model's 1.225.
    #[arg(long, value_name = "Y")]
    pub smt_yield: Option<f64>,
    /// Cost-model sensitivity: the share of each socket's caches (its LLC, and with a
    /// non-inclusive LLC its cores' L2s too) that holds page data, which sets how long a
    /// page stays in the cache model's reach; above 1 it stands for caches the model
    /// does not count. Default: the model's 0.5.
    #[arg(long, value_name = "SHARE")]
    pub llc_share: Option<f64>,
    /// Workload sensitivity: kbuild's page faults per second of a running process;
    /// default: the committed calibration's.
    #[arg(long, value_name = "RATE")]
    pub kbuild_faults_per_s: Option<f64>,
    /// Workload sensitivity (kbuild): processes per CPU, the build's length; default 48
    /// (times `--scale` above 1). 96 measures twice the middle, with about 1/√2 of one
    /// run's spread of lock contention, at twice the simulator's time.
    #[arg(long, value_name = "N")]
    pub jobs_per_cpu: Option<u32>,
    /// Workload sensitivity (kbuild): measure the whole build, its start-up (every empty
    /// pageset filling from fresh memory) and its tail (a few long compilers) included,
    /// with the build time the last exit's. By default only the middle is measured,
    /// from when half the processes have exited to when the last one starts, and the
    /// build time is the middle's pace, as the published test's long run was nearly all
    /// middle.
    #[arg(long)]
    pub whole_build: bool,
    /// Workload sensitivity (kbuild): the objects SLUB wants in a slab, as Linux's
    /// `slub_min_objects=` boot option; default: Linux's for the CPU count,
    /// 4 × (fls(CPUs) + 1). It sets the order of the VMA slabs an exit frees (order 1 from 28 objects,
    /// 32 CPUs): 36 gives a small machine the published 224-CPU machine's slab orders.
    #[arg(long, value_name = "N")]
    pub slub_min_objects: Option<u32>,
    /// Workload sensitivity: where the unix workload's pairs run, `spread` evenly over the
    /// sockets or all on `one-node`; default: the committed calibration's.
    #[arg(long, value_name = "PLACEMENT")]
    pub placement: Option<String>,
    /// Workload sensitivity (netperf, unix): messages in flight before the sender blocks
    /// (the socket buffer); default: the workload's (netperf 16, unix 3). A window of 1
    /// makes the pair's two ends take turns.
    #[arg(long, value_name = "N")]
    pub window: Option<u32>,
    /// Workload sensitivity (netperf, unix): the sender's and the receiver's fixed CPU work
    /// per message in ns, as SEND,RECV; default: the workload's (netperf 9000,8000, unix
    /// 1500,1500). Which end is slower decides which end sets a pipelined stream's pace.
    #[arg(long, value_name = "SEND,RECV", value_delimiter = ',', num_args = 1)]
    pub work_ns: Option<Vec<u64>>,
    /// Workload sensitivity (netperf, unix): how often a pair may swap its two CPUs'
    /// roles, in ms (at each boundary a coin flip, as scheduling moves the sender and the
    /// receiver); default: netperf's 10, unix's 0 (roles never move). The published runs'
    /// rates are not known (what this machine measures: docs/EXPERIMENTS.md, "The pairs'
    /// swap rate, measured"), and a former sender's pageset (large `high`,
    /// `alloc_factor` grown) serves its next receiving, so patch 5 and 7's rows depend on
    /// it.
    #[arg(long, value_name = "MS")]
    pub role_epoch_ms: Option<f64>,
    /// Workload sensitivity (netperf, unix): the mean delay from a sent message to its
    /// receiver seeing it, in µs (exponential: the wake-up and, for netperf, the loopback
    /// path); default: the workload's (netperf 5, unix 2), which no measurement fixes
    /// (docs/EXPERIMENTS.md, "Parameters").
    #[arg(long, value_name = "US")]
    pub wakeup_us: Option<f64>,
    /// Workload sensitivity (netperf, unix): virtual ms run before the measured window,
    /// which keeps its length (netperf 1000 ms, unix 500, times `--scale`), for every
    /// policy; default: the workload's (netperf 250; unix 3000, and 1000 for a policy whose
    /// pagesets keep a batch at a `free_high` drain, patches 3–9; times `--scale`). Shows
    /// how far a row is from settled (docs/EXPERIMENTS.md, "lmbench's base row settles in
    /// three seconds").
    #[arg(long, value_name = "MS")]
    pub warmup_ms: Option<f64>,
    /// Machine sensitivity: memory per node in GiB (default: the published machines' 128).
    /// The low watermark per node, hence `high`, stays the published machine's; `high_max`
    /// (managed / 8 / CPUs of the node) follows the memory.
    #[arg(long, value_name = "GIB")]
    pub node_gib: Option<u64>,
    /// Simulate this many of the published machine's sockets, each as it was (CPUs, node
    /// memory, LLC, low watermark). kbuild's sockets share no zone, zone lock or LLC, so
    /// it runs on one by default (the same experiment on half the processes, at about
    /// 40 % of the simulator's time); `--sockets 2` simulates the whole 224-CPU machine.
    #[arg(long, value_name = "N")]
    pub sockets: Option<u32>,
    /// CONFIG_PCP_BATCH_SCALE_MAX and vm.stat_interval of the simulated kernel.
    #[command(flatten)]
    pub pcp: crate::machine::PcpKnobArgs,
    /// How drain_all_pages reaches other CPUs' pagesets, for every policy: `direct` (the
    /// caller drains each one, Linux ≥ 6.0) or `workqueue` (each CPU drains itself when
    /// it runs the queued work and the caller waits, 4.11 – 5.19; rows say `/wq`). Only
    /// direct reclaim drains: see --direct-reclaim.
    #[arg(long, value_enum, default_value_t = crate::pcp_script::DrainArg::Direct)]
    pub drain: crate::pcp_script::DrainArg,
    /// pageout only: run on a node full of page cache, so that faults reclaim directly
    /// and drain the pagesets when a retry still fails (`__alloc_pages_direct_reclaim`);
    /// the pages of a loop stay cached. Nodes default to 1 GiB here (--node-gib).
    #[arg(long)]
    pub direct_reclaim: bool,
    /// Simulate the machine a /proc/zoneinfo snapshot describes instead of the published
    /// one (`--zoneinfo /proc/zoneinfo`: this machine): one socket per node, its Normal
    /// zone's managed pages and low watermark, its CPUs, so that the pagesets get its
    /// batch, high_min and high_max; `--cpus` and `--node-gib` still apply.
    #[arg(long, value_name = "FILE")]
    pub zoneinfo: Option<PathBuf>,
    /// With --zoneinfo: start each CPU's Normal pageset as the snapshot shows it (its count,
    /// spread over the order-0 to order-3 lists, and its high) instead of empty; a running
    /// kernel's pagesets are warm.
    #[arg(long, requires = "zoneinfo")]
    pub warm_pagesets: bool,
    /// Run one shard of the sweep (`--shard I/N`, or a Slurm array's or a Kubernetes
    /// Indexed Job's index) and write a shard file for `mmkit sim merge`.
    #[command(flatten)]
    pub shard: crate::shard::ShardArgs,
}

/// Subcommands of `mmkit sim`.
#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Fit the cost model's free parameters against a declared training set of base-row
    /// figures (never a patch row) and write the calibration as JSON
    /// (`crates/sim/calibration.json` is what this wrote).
    Calibrate(Box<crate::calibrate_cmd::CalibrateArgs>),
    /// Merge the shard files of one sweep (`mmkit sim --shard I/N`), checking that they
    /// hold every run exactly once, and print what the single run prints.
    Merge(MergeArgs),
}

/// Arguments of `mmkit sim merge`.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shard files, in any order.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write SVG plots into this folder.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// `mmkit sim merge`.
fn run_merge(args: &MergeArgs) -> Result<(), CliError> {
    crate::output::check_optional_dir("--plot", args.plot.as_deref())?;
    let results = crate::shard::merge(crate::shard::Sweep::Sim, &args.files)?;
    report(&results, args.json, args.plot.as_deref())
}

/// Refuse a `--scale` outside (0, 100], naming the flag and the value as it was given
/// in spirit (1e300, not three hundred digits).
pub fn check_scale(scale: f64) -> Result<(), CliError> {
    if scale > 0.0 && scale <= 100.0 {
        return Ok(());
    }
    let shown = if scale.is_finite() && scale.abs() >= 1e6 {
        format!("{scale:e}")
    } else {
        format!("{scale}")
    };
    Err(CliError::usage(format!(
        "--scale {shown} is invalid: use a number in (0, 100]"
    )))
}

/// `value` of `flag` if it is a finite number in `[lo, hi]`, else a usage error naming both.
fn in_range(flag: &str, value: f64, lo: f64, hi: f64) -> Result<f64, CliError> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(CliError::usage(format!(
            "{flag} {value}: use a number in [{lo}, {hi}]"
        )))
    }
}

/// Parse a workload name.
pub fn workload(name: &str) -> Result<WorkloadKind, CliError> {
    WorkloadKind::from_name(name).ok_or_else(|| {
        let names: Vec<_> = WorkloadKind::ALL.iter().map(|w| w.name()).collect();
        CliError::usage(format!(
            "unknown workload {name:?}: use one of {}",
            names.join(", ")
        ))
    })
}

/// Run every (spec, policy) on `threads` threads with one progress bar; results come back
/// in input order.
pub fn run_all(
    jobs: &[(RunSpec, Policy)],
    threads: Option<usize>,
    quiet: bool,
) -> Result<Vec<RunResult>, CliError> {
    let timed = run_all_timed(jobs, threads, quiet)?;
    Ok(timed.into_iter().map(|(result, _)| result).collect())
}

/// [`run_all`], with each run's speed: the host time its thread took, measured around it.
pub fn run_all_timed(
    jobs: &[(RunSpec, Policy)],
    threads: Option<usize>,
    quiet: bool,
) -> Result<Vec<(RunResult, RunSpeed)>, CliError> {
    if threads == Some(0) {
        return Err(CliError::usage("--threads must be at least 1"));
    }
    let threads = threads
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .clamp(1, jobs.len().max(1));
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(jobs.len() as u64 * 1000);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} simulating {msg} [{bar:40}] {percent}% {elapsed}",
        ) {
            bar.set_style(style);
        }
        bar
    };
    let next = AtomicUsize::new(0);
    type Slot = Option<(Result<RunResult, String>, Option<RunSpeed>)>;
    let slots: Vec<Mutex<Slot>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Relaxed);
                let Some((spec, policy)) = jobs.get(index) else {
                    break;
                };
                bar.set_message(format!("{} / {}", spec.workload, policy.name));
                let mut reported = 0u64;
                let mut progress = |fraction: f64| {
                    let permille = (fraction.clamp(0.0, 1.0) * 1000.0) as u64;
                    if permille > reported {
                        bar.inc(permille - reported);
                        reported = permille;
                    }
                };
                let (result, speed) = RunSpeed::measure(
                    || run(spec, *policy, &mut progress).map_err(|e| e.to_string()),
                    |result| result.as_ref().ok().map(|r| r.wall_ns),
                );
                bar.inc(1000 - reported.min(1000));
                *slots[index].lock().expect("no thread panicked") = Some((result, speed));
            });
        }
    });
    bar.finish_and_clear();
    slots
        .into_iter()
        .map(|slot| {
            let (result, speed) = slot
                .into_inner()
                .expect("no thread panicked")
                .expect("every job ran");
            let result = result.map_err(|e| CliError::failed(format!("simulation failed: {e}")))?;
            Ok((result, speed.expect("a run that succeeded was timed")))
        })
        .collect()
}

/// The table in the form of Huang 2023's, aligned, with the absolute values below it.
pub fn render_table(results: &[RunResult]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let Some(first) = results.first() else {
        return out;
    };
    let rows = table(results);
    let p = &first.pageset;
    let _ = writeln!(
        out,
        "{} on {} ({} CPUs; pageset batch {}, high {}..{}), seed {}, scale {}",
        first.workload,
        first.machine.name,
        first.machine.nr_cpus(),
        p.batch,
        p.high_min,
        p.high_max,
        first.seed,
        first.scale
    );
    let _ = writeln!(
        out,
        "{:<8} {:>10} {:>14} {:>10} {:>11} {:>12} {:>9} {:>9}",
        "policy",
        first.score_name,
        "lock contend%",
        "free_high",
        "alloc_zone",
        "cache miss%",
        "PCP mean",
        "PCP peak"
    );
    for row in &rows {
        let _ = writeln!(
            out,
            "{:<8} {:>10.1} {:>14.2} {:>10.1} {:>11.1} {:>12.2} {:>9.1} {:>9.1}",
            row.policy,
            row.score,
            row.lock_contend_pct,
            row.free_high,
            row.alloc_zone,
            row.cache_miss_pct,
            row.pcp_pages_mean,
            row.pcp_pages_peak
        );
    }
    let _ = writeln!(
        out,
        "absolute: {:<8} {:>14} {:>10} {:>12} {:>12} {:>12} {:>11} {:>10}",
        "policy",
        "score",
        "free_high",
        "alloc_zone",
        "page events",
        "run events",
        "PCP mean",
        "virtual ms"
    );
    for r in results {
        let _ = writeln!(
            out,
            "          {:<8} {:>14.1} {:>10} {:>12} {:>12} {:>12} {:>11.0} {:>10.1}",
            r.policy,
            r.score,
            r.free_high,
            r.alloc_zone,
            r.page_events,
            r.run_page_events,
            r.pcp_pages_mean,
            r.wall_ns as f64 / 1e6
        );
    }
    render_breakdown(&mut out, results);
    if results.iter().any(|r| r.direct_reclaim.is_some()) {
        let _ = writeln!(
            out,
            "direct reclaim: {:<8} {:>8} {:>8} {:>8} {:>8} {:>13} {:>10} {:>11}",
            "policy",
            "stalls",
            "rounds",
            "drains",
            "skipped",
            "drain wait ms",
            "drain ms",
            "pages drained"
        );
        for r in results {
            let Some(d) = r.direct_reclaim else { continue };
            let explicit = mmkit_core::page_alloc::DrainReason::Explicit as usize;
            let _ = writeln!(
                out,
                "                {:<8} {:>8} {:>8} {:>8} {:>8} {:>13.1} {:>10.1} {:>11}",
                r.policy,
                d.stalls,
                d.rounds,
                d.drains,
                d.drains_skipped,
                d.drain_wait_ns as f64 / 1e6,
                r.stats.drain_ns as f64 / 1e6,
                r.pcp_drain_pages[explicit]
            );
        }
    }
    out
}

/// Where each unit of work's time goes, per policy: the zone-lock traffic, the spin, the
/// CPU time and the cold pages behind each score. A stream whose zone lock is busy all the
/// time runs at the lock's pace, so its score follows the lock time per message; one
/// whose lock is idle runs at its slower end's pace. CPU busy% is the measured window's
/// busy share of every CPU's time.
fn render_breakdown(out: &mut String, results: &[RunResult]) {
    use std::fmt::Write;
    let Some(first) = results.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "per {}: {:<8} {:>9} {:>10} {:>10} {:>11} {:>12} {:>9} {:>9} {:>10} {:>9}",
        first.workload.unit(),
        "policy",
        "lock acq",
        "blocks/acq",
        "levels/acq",
        "hold ns/acq",
        "lock held ns",
        "spin ns",
        "busy ns",
        "cold pages",
        "CPU busy%"
    );
    let indent = " ".repeat("per : ".len() + first.workload.unit().len());
    for r in results {
        let s = &r.stats;
        let units = r.work_done.max(1) as f64;
        let per_acq = |v: u64| v as f64 / s.lock_acquisitions.max(1) as f64;
        let cold_pages = r.cache.cold_lines as f64 / mmkit_sim::cache::LINES_PER_PAGE as f64;
        let _ = writeln!(
            out,
            "{indent}{:<8} {:>9.3} {:>10.2} {:>10.2} {:>11.0} {:>12.0} {:>9.0} {:>9.0} {:>10.2} {:>9.1}",
            r.policy,
            s.lock_acquisitions as f64 / units,
            per_acq(s.lock_blocks),
            per_acq(s.lock_levels),
            per_acq(s.lock_hold_ns),
            s.lock_hold_ns as f64 / units,
            s.spin_ns as f64 / units,
            s.busy_ns as f64 / units,
            cold_pages / units,
            busy_pct(r)
        );
    }
}

/// Share of the CPUs' time in the measured window that was busy (work, allocator,
/// spinning): what `mpstat`'s 100 − idle% or turbostat's `Busy%` report.
fn busy_pct(r: &RunResult) -> f64 {
    let capacity = r.machine.nr_cpus() as f64 * r.measured_ns.max(1) as f64;
    100.0 * r.stats.busy_ns as f64 / capacity
}

#[derive(Serialize)]
struct SimJson<'a> {
    table: Vec<TableRow>,
    runs: &'a [RunResult],
}

/// JSON of a set of runs of one workload: the table and every run.
pub fn render_json(results: &[RunResult]) -> Result<String, CliError> {
    crate::output::json(&SimJson {
        table: table(results),
        runs: results,
    })
}

/// The stream workload `args`' `--window`, `--work-ns`, `--role-epoch-ms`,
/// `--wakeup-us` and `--warmup-ms` describe: the published workload with those changed.
fn stream_params(
    args: &SimArgs,
    spec: &RunSpec,
    workload: WorkloadKind,
) -> Result<StreamParams, CliError> {
    let mut params = match workload {
        WorkloadKind::Netperf => StreamParams::netperf(args.scale),
        WorkloadKind::Unix => StreamParams {
            placement: spec.unix_placement,
            ..StreamParams::unix(args.scale)
        },
        _ => {
            return Err(CliError::usage(format!(
                "--window, --work-ns, --role-epoch-ms, --wakeup-us and --warmup-ms change a stream (netperf, unix), not {workload}"
            )))
        }
    };
    if let Some(window) = args.window {
        if !(1..=4096).contains(&window) {
            return Err(CliError::usage(format!(
                "--window {window}: a sender needs 1 to 4096 messages in flight"
            )));
        }
        params.window = window;
    }
    if let Some(us) = args.wakeup_us {
        if !(0.0..=1e6).contains(&us) {
            return Err(CliError::usage(format!(
                "--wakeup-us {us}: 0 to 1000000 µs"
            )));
        }
        params.wakeup_us = us;
    }
    if let Some(ms) = args.warmup_ms {
        if !(0.0..=1e6).contains(&ms) {
            return Err(CliError::usage(format!(
                "--warmup-ms {ms}: 0 to 1000000 ms"
            )));
        }
        params.duration_ms += ms - params.warmup_ms;
        params.warmup_ms = ms;
        params.batched_warmup_ms = ms;
    }
    if let Some(work) = &args.work_ns {
        let &[send, recv] = work.as_slice() else {
            return Err(CliError::usage(format!(
                "--work-ns takes SEND,RECV (two numbers of ns), not {} number(s)",
                work.len()
            )));
        };
        if send > 1_000_000_000 || recv > 1_000_000_000 {
            return Err(CliError::usage(format!(
                "--work-ns {send},{recv}: at most 1 s (1000000000 ns) per message and end"
            )));
        }
        params.send_work_ns = send;
        params.recv_work_ns = recv;
    }
    if let Some(ms) = args.role_epoch_ms {
        if !(0.0..=1e6).contains(&ms) {
            return Err(CliError::usage(format!(
                "--role-epoch-ms {ms}: 0 (never) to 1000000 ms"
            )));
        }
        params.epoch_ms = ms;
        if workload == WorkloadKind::Unix {
            // lmbench's pairs never swap by default (share 0): asked to, they swap by
            // netperf's rule, one coin flip per boundary.
            params.swap_share = StreamParams::netperf(1.0).swap_share;
        }
    }
    Ok(params)
}

/// `mmkit sim`.
pub fn run_sim(args: &SimArgs) -> Result<(), CliError> {
    match &args.command {
        Some(SimCommand::Calibrate(calibrate)) => {
            return crate::calibrate_cmd::run_calibrate(calibrate)
        }
        Some(SimCommand::Merge(merge)) => return run_merge(merge),
        None => {}
    }
    crate::output::check_optional_dir("--plot", args.plot.as_deref())?;
    let name = args
        .workload
        .as_deref()
        .ok_or_else(|| CliError::usage("--workload is required"))?;
    let workload = workload(name)?;
    check_scale(args.scale)?;
    let drain = match args.drain {
        crate::pcp_script::DrainArg::Direct => mmkit_core::policy::DrainMode::Direct,
        crate::pcp_script::DrainArg::Workqueue => mmkit_core::policy::DrainMode::Workqueue,
    };
    let policies: Vec<Policy> = args
        .policies
        .iter()
        .map(|p| policy_preset(p.trim()).map(|policy| Policy { drain, ..policy }))
        .collect::<Result<_, _>>()?;
    if policies.is_empty() {
        return Err(CliError::usage("--policies names no preset"));
    }
    let mut spec = RunSpec {
        cpus: args.cpus,
        seed: args.seed,
        scale: args.scale,
        pcp_knobs: Some((
            args.pcp.pcp_batch_scale_max()?,
            args.pcp.stat_interval_ms()?,
        )),
        machine: args
            .zoneinfo
            .as_deref()
            .map(|path| zoneinfo_machine(path, args.warm_pagesets))
            .transpose()?,
        ..RunSpec::new(workload)
    };
    spec.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    if let Some(lines) = args.merge_lines {
        spec.cost.merge_lines = in_range("--merge-lines", lines, 0.0, 64.0)?;
    }
    if let Some(lines) = args.split_lines {
        spec.cost.split_lines = in_range("--split-lines", lines, 0.0, 64.0)?;
    }
    if let Some(ns) = args.hold_per_block_ns {
        spec.cost.hold_per_block_ns = in_range("--hold-per-block-ns", ns, 0.0, 10_000.0)?;
    }
    if let Some(lines) = args.lock_lines {
        spec.cost.lock_lines = in_range("--lock-lines", lines, 0.0, 64.0)?;
    }
    if let Some(y) = args.smt_yield {
        spec.cost.smt_yield = Some(in_range("--smt-yield", y, 1.0, 2.0)?);
    }
    if let Some(share) = args.llc_share {
        spec.cost.llc_share = in_range("--llc-share", share, 0.01, 64.0)?;
    }
    if let Some(rate) = args.kbuild_faults_per_s {
        spec.kbuild_faults_per_s = in_range("--kbuild-faults-per-s", rate, 1.0, 1e7)?;
    }
    if let Some(jobs) = args.jobs_per_cpu {
        // `RunSpec::validate` refuses it for another workload or out of range.
        spec.kbuild_jobs_per_cpu = Some(jobs);
        spec.validate()
            .map_err(|e| CliError::usage(format!("--jobs-per-cpu {jobs}: {e}")))?;
    }
    if let Some(objects) = args.slub_min_objects {
        spec.kbuild_slub_min_objects = Some(objects);
        spec.validate()
            .map_err(|e| CliError::usage(format!("--slub-min-objects {objects}: {e}")))?;
    }
    if args.whole_build {
        if workload != WorkloadKind::Kbuild {
            return Err(CliError::usage(
                "--whole-build: only kbuild has a start-up and a tail to measure or leave out",
            ));
        }
        spec.kbuild_steady_window = false;
    }
    if let Some(placement) = &args.placement {
        if workload != WorkloadKind::Unix {
            return Err(CliError::usage(format!(
                "--placement {placement}: only the unix workload has a placement to choose"
            )));
        }
        spec.unix_placement = placement
            .parse()
            .map_err(|e| CliError::usage(format!("--placement: {e}")))?;
    }
    if args.window.is_some()
        || args.work_ns.is_some()
        || args.role_epoch_ms.is_some()
        || args.wakeup_us.is_some()
        || args.warmup_ms.is_some()
    {
        spec.params = Some(WorkloadParams::Stream(stream_params(
            args, &spec, workload,
        )?));
    }
    if let Some(sockets) = args.sockets {
        let most = mmkit_sim::engine::MAX_ZONES as u32;
        if args.zoneinfo.is_some() || !(1..=most).contains(&sockets) {
            return Err(CliError::usage(format!(
                "--sockets {sockets}: 1 to {most} sockets of the published machine (not with --zoneinfo)"
            )));
        }
        spec.machine = Some(workload.published_machine().with_sockets(sockets));
    }
    if let Some(gib) = args.node_gib {
        if !(1..=512).contains(&gib) {
            return Err(CliError::usage(format!(
                "--node-gib {gib}: simulate 1 to 512 GiB per node (each GiB costs 4 MiB of descriptors)"
            )));
        }
        spec.node_bytes = Some(gib << 30);
    }
    if args.direct_reclaim {
        if workload != WorkloadKind::Pageout {
            return Err(CliError::usage(format!(
                "--direct-reclaim: only the pageout workload has a direct-reclaim variant, not {workload}"
            )));
        }
        spec.params = Some(WorkloadParams::Pageout(PageoutParams {
            direct_reclaim: Some(DirectReclaim::DEFAULT),
            ..PageoutParams::scaled(args.scale)
        }));
        // Filling 128 GiB nodes with page cache one page at a time would take minutes.
        spec.node_bytes = spec.node_bytes.or(Some(1 << 30));
    }
    // Again with the machine and parameters the flags above changed: a refusal here, not
    // a failed run.
    spec.validate()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let jobs: Vec<(RunSpec, Policy)> = policies.iter().map(|p| (spec.clone(), *p)).collect();
    if let Some(shard) = crate::shard::select(&args.shard, &crate::shard::process_env)? {
        return run_shard(args, &jobs, &shard);
    }
    let timed = run_all_timed(&jobs, args.threads, args.json)?;
    if args.timing {
        for (result, speed) in &timed {
            eprintln!("{}", speed_line(result, speed));
        }
    }
    let results: Vec<RunResult> = timed.into_iter().map(|(result, _)| result).collect();
    report(&results, args.json, args.plot.as_deref())
}

/// What `--timing` prints of one run: which run, on how many CPUs, and its speed.
pub(crate) fn speed_line(result: &RunResult, speed: &RunSpeed) -> String {
    format!(
        "speed: {} / {} on {} CPUs: {speed}",
        result.workload,
        result.policy,
        result.machine.nr_cpus()
    )
}

/// The machine of `--zoneinfo FILE`. The caches are not in zoneinfo: this machine's
/// last-level cache when sysfs shows it (else 32 MiB) and a 2 MiB L2; only the cache
/// model reads them.
fn zoneinfo_machine(
    path: &std::path::Path,
    warm_pagesets: bool,
) -> Result<mmkit_sim::MachineSpec, CliError> {
    let refuse = |why: String| CliError::usage(format!("--zoneinfo {}: {why}", path.display()));
    let text = crate::limits::read_input_text(path).map_err(|e| refuse(e.to_string()))?;
    let zones = mmkit_core::views::zoneinfo::parse(&text).map_err(|e| refuse(e.to_string()))?;
    let llc_bytes =
        mmkit_trace::machine::llc(std::path::Path::new("/")).map_or(32 << 20, |llc| llc.llc_bytes);
    let name = format!("zoneinfo {}", path.display());
    let machine =
        mmkit_sim::MachineSpec::from_zoneinfo(&name, &zones, llc_bytes, 2 << 20).map_err(refuse)?;
    Ok(if warm_pagesets {
        machine.with_warm_pagesets(&zones)
    } else {
        machine
    })
}

/// `mmkit sim --shard I/N`: run the shard's jobs and write its shard file (stdout unless
/// `--shard-out`); plots are the merge's.
fn run_shard(
    args: &SimArgs,
    jobs: &[(RunSpec, Policy)],
    shard: &crate::shard::Shard,
) -> Result<(), CliError> {
    if let Some(dir) = &args.plot {
        return Err(CliError::usage(format!(
            "--plot {}: a shard writes no plots; give --plot to `mmkit sim merge`",
            dir.display()
        )));
    }
    let out = args.shard.shard_out.as_deref();
    crate::output::check_optional_file("--shard-out", out)?;
    let sweep = crate::shard::Sweep::Sim;
    crate::shard::run_shard(
        sweep,
        jobs,
        shard,
        args.threads,
        out,
        args.json,
        args.timing,
    )
}

/// Print the runs of one workload as a table or JSON and write the plots: what `mmkit sim`
/// and `mmkit sim merge` print.
fn report(
    results: &[RunResult],
    json: bool,
    plot: Option<&std::path::Path>,
) -> Result<(), CliError> {
    if json {
        println!("{}", render_json(results)?);
    } else {
        print!("{}", render_table(results));
    }
    if let (Some(dir), Some(first)) = (plot, results.first()) {
        let files = mmkit_sim::plot::write_plots(results, dir, first.workload.name())
            .map_err(CliError::failed)?;
        if !json {
            println!("plots: {}", files.len());
            for plot in files {
                println!("  {}", plot.path.display());
            }
        }
    }
    Ok(())
}
