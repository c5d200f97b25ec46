//! `mmkit demo`: the main job on built-in defaults. Simulates the three PCP experiments of
//! Huang 2023 — kbuild on 224 CPUs, netperf SCTP_STREAM_MANY and lmbench AF_UNIX on 128 —
//! for base, patch1, patch3, patch5, patch7 and patch9, prints each table beside the
//! numbers Huang 2023 published (`docs/reference/workloads.md` §2.0), and writes the plots.

use std::path::PathBuf;

use clap::Args;
use mmkit_core::Policy;
use mmkit_sim::published::{self, Cell, Column};
use mmkit_sim::{table, RunResult, RunSpec, WorkloadKind};

use crate::shard::{Shard, Sweep};
use crate::sim_cmd::{render_json, run_all};
use crate::CliError;

/// Arguments of `mmkit demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for the plots.
    #[arg(long, default_value = "mmkit-demo-out")]
    pub out: PathBuf,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Size of the runs (1 = the default scale; see `mmkit sim --help`).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Parallel runs; default: the available cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also write each workload's runs as JSON into the folder.
    #[arg(long)]
    pub json: bool,
    /// Run one shard of the demo's runs (`--shard I/N`, or a Slurm array's or a Kubernetes
    /// Indexed Job's index) and write a shard file for `--merge`.
    #[command(flatten)]
    pub shard: crate::shard::ShardArgs,
    /// Merge these shard files of one demo (`mmkit demo --shard I/N`), checking that they
    /// hold every run exactly once, and print and write what the single run does.
    #[arg(
        long,
        num_args = 1..,
        value_name = "FILE",
        conflicts_with_all = ["shard", "shards", "shard_out", "seed", "scale", "threads"]
    )]
    pub merge: Vec<PathBuf>,
}

/// The presets the published tables compare.
pub const DEMO_POLICIES: [&str; 6] = published::POLICIES;

fn title(workload: WorkloadKind) -> &'static str {
    match workload {
        WorkloadKind::Kbuild => "kbuild (2S, 224 CPUs, 8 x make -j28)",
        WorkloadKind::Netperf => "netperf SCTP_STREAM_MANY (2S, 128 CPUs, 64 pairs)",
        _ => "lmbench3 UNIX/AF_UNIX (2S, 128 CPUs, 16 pairs)",
    }
}

/// The mark of a scored cell: within tolerance or not, and `t` for a training target.
fn mark(cell: Option<&Cell>) -> &'static str {
    match cell {
        None => "  ",
        Some(c) if c.trained && c.within => "t✓",
        Some(c) if c.trained => "t✗",
        Some(c) if c.within => " ✓",
        Some(_) => " ✗",
    }
}

/// The table of one workload: simulated | published and its mark, per column; and the
/// workload's scored cells.
pub fn render_beside_published(results: &[RunResult]) -> (String, Vec<Cell>) {
    use std::fmt::Write;
    let mut out = String::new();
    let Some(first) = results.first() else {
        return (out, Vec::new());
    };
    let workload = first.workload;
    let Some(publ) = published::table(workload) else {
        return (out, Vec::new());
    };
    let rows = table(results);
    let cells = published::score(workload, &rows);
    let find = |policy: &str, column: Column| {
        cells
            .iter()
            .find(|c| c.policy == policy && c.column == column)
    };
    let p = &first.pageset;
    let _ = writeln!(
        out,
        "{} — simulated | published (Huang 2023)   (pageset batch {}, high {}..{}; {:.0} of {:.0} virtual ms measured)",
        title(workload),
        p.batch,
        p.high_min,
        p.high_max,
        first.measured_ns as f64 / 1e6,
        first.wall_ns as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "{:<8} {:>17} {:>17} {:>17} {:>17} {:>15} {:>9}",
        "policy",
        first.score_name,
        "lock contend%",
        "free_high",
        "alloc_zone",
        "cache miss%",
        "PCP mean"
    );
    for (row, publ) in rows.iter().zip(publ) {
        let policy = row.policy.as_str();
        let cell = |sim: f64, publ: f64, column| {
            format!("{sim:>6.1} |{publ:>6.1} {}", mark(find(policy, column)))
        };
        let miss = match publ.cache_miss_pct {
            Some(m) => format!(
                "{:>5.2} |{m:>4.1} {}",
                row.cache_miss_pct,
                mark(find(policy, Column::CacheDirection))
            ),
            None => format!("{:>5.2} |   - {}", row.cache_miss_pct, mark(None)),
        };
        let _ = writeln!(
            out,
            "{:<8} {:>17} {:>17} {:>17} {:>17} {:>15} {:>9.1}",
            policy,
            cell(row.score, publ.score, Column::Score),
            format!(
                "{:>6.2} |{:>6.1} {}",
                row.lock_contend_pct,
                publ.lock_contend_pct,
                mark(find(policy, Column::LockContend))
            ),
            cell(row.free_high, publ.free_high, Column::FreeHigh),
            cell(row.alloc_zone, publ.alloc_zone, Column::AllocZone),
            miss,
            row.pcp_pages_mean
        );
    }
    if workload == WorkloadKind::Kbuild {
        let _ = writeln!(
            out,
            "used memory (pages held + pagesets, mean over the build) vs base: patch7 {:+.1} %, patch9 {:+.1} %; published: up to +{} %",
            rows.get(4).map_or(0.0, |r| r.used_memory_mean_pct),
            rows.get(5).map_or(0.0, |r| r.used_memory_mean_pct),
            published::KBUILD_USED_MEMORY_PCT
        );
    }
    (out, cells)
}

/// The closing line: cells within tolerance, held-out and training apart.
pub fn render_score(cells: &[Cell]) -> String {
    let within = cells.iter().filter(|c| c.within).count();
    let held_out: Vec<&Cell> = cells.iter().filter(|c| !c.trained).collect();
    let held_within = held_out.iter().filter(|c| c.within).count();
    format!(
        "{within} of {} cells within tolerance ({held_within} of {} held-out patch-row cells, {} of {} base-row training cells marked t)",
        cells.len(),
        held_out.len(),
        within - held_within,
        cells.len() - held_out.len()
    )
}

/// `mmkit demo --shard I/N`: run the shard's jobs and write its shard file (default:
/// OUT/shard-I-of-N.json); tables, plots and JSON are the merge's.
fn run_shard(args: &DemoArgs, jobs: &[(RunSpec, Policy)], shard: &Shard) -> Result<(), CliError> {
    let out = match &args.shard.shard_out {
        Some(file) => {
            crate::output::check_file("--shard-out", file)?;
            file.clone()
        }
        None => {
            std::fs::create_dir_all(&args.out)
                .map_err(|e| CliError::failed(format!("{}: {e}", args.out.display())))?;
            let name = format!("shard-{}-of-{}.json", shard.index, shard.count);
            args.out.join(name)
        }
    };
    crate::shard::run_shard(Sweep::Demo, jobs, shard, args.threads, Some(&out), false)?;
    println!(
        "mmkit demo: shard {}/{} written to {}",
        shard.index,
        shard.count,
        out.display()
    );
    Ok(())
}

/// `mmkit demo`.
pub fn run_demo(args: &DemoArgs) -> Result<(), CliError> {
    crate::output::check_dir("--out", &args.out)?;
    crate::sim_cmd::check_scale(args.scale)?;
    if args.threads == Some(0) {
        return Err(CliError::usage("--threads must be at least 1"));
    }
    let workloads = [
        WorkloadKind::Kbuild,
        WorkloadKind::Netperf,
        WorkloadKind::Unix,
    ];
    let policies: Vec<Policy> = DEMO_POLICIES
        .iter()
        .map(|p| Policy::preset(p).expect("demo presets exist"))
        .collect();
    let mut jobs = Vec::new();
    for workload in workloads {
        let spec = RunSpec {
            seed: args.seed,
            scale: args.scale,
            ..RunSpec::new(workload)
        };
        jobs.extend(policies.iter().map(|p| (spec.clone(), *p)));
    }
    let merged = if args.merge.is_empty() {
        None
    } else {
        Some(crate::shard::merge(Sweep::Demo, &args.merge)?)
    };
    if merged.is_none() {
        if let Some(shard) = crate::shard::select(&args.shard, &crate::shard::process_env)? {
            return run_shard(args, &jobs, &shard);
        }
    }
    // A merge prints what the single run printed: its run count, seed and scale.
    let (runs, seed, scale) = match merged.as_deref() {
        Some(results @ [first, ..]) => (results.len(), first.seed, first.scale),
        _ => (jobs.len(), args.seed, args.scale),
    };
    println!(
        "mmkit demo: the PCP experiments of Huang 2023 (\"mm: PCP high auto-tuning\") in the simulator ({} runs; random seed {}, scale {})",
        runs,
        seed,
        scale
    );
    println!(
        "values relative to base = 100, except lock contend% and cache miss rate% (absolute); ✓ within tolerance, ✗ not, t: a base-row training target of `mmkit sim calibrate`\n"
    );
    let results = match merged {
        Some(results) => results,
        None => run_all(&jobs, args.threads, false)?,
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::failed(format!("{}: {e}", args.out.display())))?;
    let mut plots = 0;
    let mut cells = Vec::new();
    for (workload, runs) in workloads.iter().zip(results.chunks(policies.len())) {
        let (text, scored) = render_beside_published(runs);
        println!("{text}");
        cells.extend(scored);
        plots += mmkit_sim::plot::write_plots(runs, &args.out, workload.name())
            .map_err(CliError::failed)?
            .len();
        if args.json {
            let path = args.out.join(format!("{}.json", workload.name()));
            std::fs::write(&path, render_json(runs)?)
                .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        }
    }
    println!("{}", render_score(&cells));
    println!(
        "tolerances: score ±2 points (kbuild, netperf) or ±10 % (lmbench); lock contend% ±30 % or ±0.5; free_high and alloc_zone ±25 % or ±3 points; cache miss: the published direction"
    );
    println!("{plots} plots written to {}/", args.out.display());
    Ok(())
}
