//! `mmkit demo`: the main job on built-in defaults. Simulates the three PCP experiments of
//! seed 000 — kbuild on 224 CPUs, netperf SCTP_STREAM_MANY and lmbench AF_UNIX on 128 —
//! for base, patch1, patch3, patch5, patch7 and patch9, prints each table beside the
//! numbers the seed published (`workloads.md` §2.0), and writes the plots.

use std::path::PathBuf;

use clap::Args;
use mmkit_core::Policy;
use mmkit_sim::{table, RunResult, RunSpec, WorkloadKind};

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
}

/// The presets the seed tables compare.
pub const DEMO_POLICIES: [&str; 6] = ["base", "patch1", "patch3", "patch5", "patch7", "patch9"];

/// A published row: score or build time, lock contend%, free_high, alloc_zone, cache
/// miss rate% (`None` where the seed gives none).
type SeedRow = (f64, f64, f64, f64, Option<f64>);

/// Huang Ying, "[PATCH -V3 0/9] mm: PCP high auto-tuning", 2023-10-16, as copied into
/// `workloads.md` §2.0, in [`DEMO_POLICIES`] order.
fn seed_table(workload: WorkloadKind) -> [SeedRow; 6] {
    match workload {
        WorkloadKind::Kbuild => [
            (100.0, 14.0, 100.0, 100.0, None),
            (99.5, 12.8, 19.5, 95.6, None),
            (99.4, 12.6, 7.1, 95.6, None),
            (98.6, 11.0, 8.1, 97.1, None),
            (95.1, 0.5, 2.8, 15.6, None),
            (95.0, 1.0, 8.8, 20.0, None),
        ],
        WorkloadKind::Netperf => [
            (100.0, 2.1, 100.0, 100.0, Some(1.3)),
            (99.4, 2.1, 99.4, 99.4, Some(1.3)),
            (106.4, 1.3, 13.3, 106.3, Some(1.3)),
            (106.0, 1.2, 13.2, 105.9, Some(1.3)),
            (103.4, 1.9, 6.7, 90.3, Some(7.6)),
            (108.6, 1.3, 13.7, 108.6, Some(1.3)),
        ],
        _ => [
            (100.0, 51.4, 100.0, 100.0, Some(0.2)),
            (116.8, 46.1, 69.5, 104.3, Some(0.2)),
            (199.1, 21.3, 7.0, 104.9, Some(0.2)),
            (200.0, 20.8, 7.1, 106.9, Some(0.3)),
            (191.6, 19.9, 6.8, 103.8, Some(2.8)),
            (193.4, 21.7, 7.0, 104.7, Some(2.1)),
        ],
    }
}

fn title(workload: WorkloadKind) -> &'static str {
    match workload {
        WorkloadKind::Kbuild => "kbuild (2S, 224 CPUs, 8 x make -j28)",
        WorkloadKind::Netperf => "netperf SCTP_STREAM_MANY (2S, 128 CPUs, 64 pairs)",
        _ => "lmbench3 UNIX/AF_UNIX (2S, 128 CPUs, 16 pairs)",
    }
}

/// The table of one workload: simulated | published, per column.
pub fn render_beside_seed(results: &[RunResult]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let Some(first) = results.first() else {
        return out;
    };
    let workload = first.workload;
    let seed = seed_table(workload);
    let p = &first.pageset;
    let _ = writeln!(
        out,
        "{} — simulated | seed   (pageset batch {}, high {}..{}; {:.0} virtual ms for base)",
        title(workload),
        p.batch,
        p.high_min,
        p.high_max,
        first.wall_ns as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "{:<8} {:>15} {:>15} {:>15} {:>15} {:>13} {:>9}",
        "policy",
        first.score_name,
        "lock contend%",
        "free_high",
        "alloc_zone",
        "cache miss%",
        "PCP mean"
    );
    let cell = |sim: f64, seed: f64| format!("{sim:>6.1} | {seed:>5.1}");
    for (row, seed) in table(results).iter().zip(seed) {
        let miss = match seed.4 {
            Some(m) => format!("{:>5.2} | {m:>4.1}", row.cache_miss_pct),
            None => format!("{:>5.2} |    -", row.cache_miss_pct),
        };
        let _ = writeln!(
            out,
            "{:<8} {:>15} {:>15} {:>15} {:>15} {:>13} {:>9.1}",
            row.policy,
            cell(row.score, seed.0),
            format!("{:>6.2} | {:>5.1}", row.lock_contend_pct, seed.1),
            cell(row.free_high, seed.2),
            cell(row.alloc_zone, seed.3),
            miss,
            row.pcp_pages_mean
        );
    }
    out
}

/// `mmkit demo`.
pub fn run_demo(args: &DemoArgs) -> Result<(), CliError> {
    crate::output::check_dir("--out", &args.out)?;
    if !(args.scale > 0.0 && args.scale <= 100.0) {
        return Err(CliError::usage(format!(
            "scale {} is invalid: use a number in (0, 100]",
            args.scale
        )));
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
    println!(
        "mmkit demo: seed 000's PCP experiments in the simulator ({} runs; seed {}, scale {})",
        jobs.len(),
        args.seed,
        args.scale
    );
    println!(
        "values relative to base = 100, except lock contend% and cache miss rate% (absolute)\n"
    );
    let results = run_all(&jobs, args.threads, false)?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::failed(format!("{}: {e}", args.out.display())))?;
    let mut plots = 0;
    for (workload, runs) in workloads.iter().zip(results.chunks(policies.len())) {
        println!("{}", render_beside_seed(runs));
        plots += mmkit_sim::plot::write_plots(runs, &args.out, workload.name())
            .map_err(CliError::failed)?
            .len();
        if args.json {
            let path = args.out.join(format!("{}.json", workload.name()));
            std::fs::write(&path, render_json(runs)?)
                .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        }
    }
    println!("{plots} plots written to {}/", args.out.display());
    Ok(())
}
