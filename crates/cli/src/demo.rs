//! `mmkit demo`: the main job on built-in defaults. Simulates the three PCP experiments of
//! Huang 2023 — kbuild on 224 CPUs (one of its two sockets simulated), netperf
//! SCTP_STREAM_MANY and lmbench AF_UNIX on 128 —
//! for base, patch1, patch3, patch5, patch7 and patch9, prints each table beside the
//! numbers Huang 2023 published (`docs/reference/workloads.md` §2.0), and writes the plots
//! and report.html (`demo_report.rs`), which shows the same tables and the plots in one page.

use std::path::PathBuf;

use clap::Args;
use mmkit_core::Policy;
use mmkit_sim::measured;
use mmkit_sim::published::{self, Cell, Column};
use mmkit_sim::speed::RunSpeed;
use mmkit_sim::{table, RunResult, RunSpec, TableRow, WorkloadKind};

use crate::demo_report;
use crate::shard::{Shard, Sweep};
use crate::sim_cmd::{render_json, run_all_timed, speed_line};
use crate::CliError;

/// Arguments of `mmkit demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for the plots and report.html (the tables and plots in one page).
    #[arg(long, default_value = "mmkit-demo-out")]
    pub out: PathBuf,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the demo at each of these seeds (`A-B` or `A,B,C`) and print which cells are
    /// within tolerance at every seed, at some, or at none, with each seed's values;
    /// writes nothing (one seed's tables and plots: `--seed`).
    #[arg(
        long,
        value_name = "LIST",
        value_parser = |s: &str| crate::demo_seeds::parse_seeds(s).map(Seeds),
        conflicts_with_all = ["out", "seed", "json", "merge", "shard", "shards", "shard_out"]
    )]
    pub seeds: Option<Seeds>,
    /// Size of the runs (1 = the default scale; see `mmkit sim --help`).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Parallel runs; default: the available cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also write each workload's runs as JSON into the folder.
    #[arg(long)]
    pub json: bool,
    /// After the runs, print each one's speed on standard error, as `mmkit sim --timing`
    /// does: the virtual seconds it simulated per second of its thread's CPU time and of
    /// wall time. kbuild's base run is the simulator's speed target (at least 1× on one
    /// core); the tables and plots stay the same.
    #[arg(long, conflicts_with = "merge")]
    pub timing: bool,
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

/// The seeds of `mmkit demo --seeds`.
#[derive(Clone, Debug)]
pub struct Seeds(pub Vec<u64>);

/// The presets the published tables compare.
pub const DEMO_POLICIES: [&str; 6] = published::POLICIES;

/// The workloads of the demo, in the order it prints them.
const WORKLOADS: [WorkloadKind; 3] = [
    WorkloadKind::Kbuild,
    WorkloadKind::Netperf,
    WorkloadKind::Unix,
];

/// `--timing`: each run's speed on standard error, as `mmkit sim --timing` prints it, then
/// which run is the speed target's.
pub(crate) fn print_speeds(timed: &[(RunResult, RunSpeed)]) {
    for (result, speed) in timed {
        eprintln!("{}", speed_line(result, speed));
    }
    eprintln!(
        "speed target: kbuild / base at scale 1, at least 1× real time on one core (docs/EXPERIMENTS.md, \"Speed\"; crates/bench/realtime.sh alternates builds)"
    );
}

/// The demo's runs at `seed` and `scale`: each workload under each of [`DEMO_POLICIES`].
pub fn jobs(seed: u64, scale: f64) -> Vec<(RunSpec, Policy)> {
    let policies: Vec<Policy> = DEMO_POLICIES
        .iter()
        .map(|p| Policy::preset(p).expect("demo presets exist"))
        .collect();
    let mut jobs = Vec::new();
    for workload in WORKLOADS {
        let spec = RunSpec {
            seed,
            scale,
            ..RunSpec::new(workload)
        };
        jobs.extend(policies.iter().map(|p| (spec.clone(), *p)));
    }
    jobs
}

/// The 66 scored cells of one seed's runs, in [`jobs`]' order.
pub fn scored_cells(results: &[RunResult]) -> Result<Vec<Cell>, CliError> {
    let mut cells = Vec::new();
    for (workload, runs) in WORKLOADS.iter().zip(results.chunks(DEMO_POLICIES.len())) {
        let table = beside_published(runs).ok_or_else(|| {
            CliError::failed(format!("{workload}: no runs or no published table"))
        })?;
        cells.extend(table.cells);
    }
    Ok(cells)
}

fn title(workload: WorkloadKind) -> &'static str {
    match workload {
        // The published machine has two sockets that share nothing in the model; the
        // demo simulates one (`WorkloadKind::machine`).
        WorkloadKind::Kbuild => "kbuild (one socket of 2S 224 CPUs: 112 CPUs, 4 x make -j28)",
        WorkloadKind::Netperf => "netperf SCTP_STREAM_MANY (2S, 128 CPUs, 64 pairs)",
        _ => "lmbench3 UNIX/AF_UNIX (2S, 128 CPUs, 16 pairs)",
    }
}

/// The mark of a scored cell: within tolerance or not, and `t` for a training target.
pub fn mark(cell: Option<&Cell>) -> &'static str {
    match cell {
        None => "  ",
        Some(c) if c.trained && c.within => "t✓",
        Some(c) if c.trained => "t✗",
        Some(c) if c.within => " ✓",
        Some(_) => " ✗",
    }
}

/// A value column of a demo table: its name and how its numbers are written. The terminal
/// uses the widths; the terminal and report.html both use the decimals.
#[derive(Clone, Debug)]
pub struct TableColumn {
    /// The header.
    pub name: String,
    /// The scored column of the published table it is compared with, if any.
    scored: Option<Column>,
    /// The column's width on the terminal.
    width: usize,
    /// Width and decimals of the simulated value.
    simulated: (usize, usize),
    /// Width and decimals of the published value; `None`: nothing was published to compare.
    published: Option<(usize, usize)>,
}

impl TableColumn {
    fn new(name: &str, scored: Option<Column>, width: usize) -> TableColumn {
        TableColumn {
            name: name.into(),
            scored,
            width,
            simulated: (6, 1),
            published: Some((6, 1)),
        }
    }

    /// The simulated value as written.
    pub fn simulated_text(&self, value: &Value) -> String {
        format!("{:.*}", self.simulated.1, value.simulated)
    }

    /// The published value as written (`-` where none was published for the row), or
    /// `None` for a column with nothing published.
    pub fn published_text(&self, value: &Value) -> Option<String> {
        let (_, decimals) = self.published?;
        Some(
            value
                .published
                .map_or("-".into(), |p| format!("{p:.decimals$}")),
        )
    }

    /// The cell as the terminal shows it: `simulated |published mark`, right-aligned.
    fn terminal_text(&self, value: &Value) -> String {
        let simulated = format!("{:>1$}", self.simulated_text(value), self.simulated.0);
        let text = match (self.published, self.published_text(value)) {
            (Some((width, _)), Some(published)) => format!(
                "{simulated} |{published:>width$} {}",
                mark(value.cell.as_ref())
            ),
            _ => simulated,
        };
        format!("{text:>width$}", width = self.width)
    }
}

/// One value of a demo table.
#[derive(Clone, Debug)]
pub struct Value {
    /// The simulated value.
    pub simulated: f64,
    /// The published value beside it; `None` where none was published.
    pub published: Option<f64>,
    /// The scored cell this value is, if it is one.
    pub cell: Option<Cell>,
}

/// The table of one workload, simulated beside published, as both the terminal and
/// report.html show it: built once from the runs and the scored cells, written twice.
#[derive(Clone, Debug)]
pub struct DemoTable {
    /// The workload and the machine it runs on.
    pub title: &'static str,
    /// The line above the table: workload, machine, pageset and measured time.
    pub heading: String,
    /// The value columns, after the policy.
    pub columns: Vec<TableColumn>,
    /// Each policy and its values, one per column.
    pub rows: Vec<(String, Vec<Value>)>,
    /// The line below the table on memory used (kbuild only).
    pub used_memory: Option<String>,
    /// The line below the table on high-order frees after another (kbuild only).
    pub high_order: Option<String>,
    /// The workload's scored cells, in scoring order.
    pub cells: Vec<Cell>,
}

/// The value columns of a demo table, `score_name` (score or build time) first, with the
/// terminal's widths and decimals.
fn columns(score_name: &str) -> Vec<TableColumn> {
    vec![
        TableColumn::new(score_name, Some(Column::Score), 17),
        TableColumn {
            simulated: (6, 2),
            ..TableColumn::new("lock contend%", Some(Column::LockContend), 17)
        },
        TableColumn::new("free_high", Some(Column::FreeHigh), 17),
        TableColumn::new("alloc_zone", Some(Column::AllocZone), 17),
        TableColumn {
            simulated: (5, 2),
            published: Some((4, 1)),
            ..TableColumn::new("cache miss%", Some(Column::CacheDirection), 15)
        },
        TableColumn {
            simulated: (9, 1),
            published: None,
            ..TableColumn::new("PCP mean", None, 9)
        },
    ]
}

/// One row's values in [`columns`]' order: simulated, published, and the scored cell.
fn values(
    columns: &[TableColumn],
    row: &TableRow,
    publ: &published::Row,
    cells: &[Cell],
) -> Vec<Value> {
    let simulated = [
        row.score,
        row.lock_contend_pct,
        row.free_high,
        row.alloc_zone,
        row.cache_miss_pct,
        row.pcp_pages_mean,
    ];
    let published = [
        Some(publ.score),
        Some(publ.lock_contend_pct),
        Some(publ.free_high),
        Some(publ.alloc_zone),
        publ.cache_miss_pct,
        None,
    ];
    let cell = |scored: Column| {
        cells
            .iter()
            .find(|c| c.policy == row.policy && c.column == scored)
            .cloned()
    };
    columns
        .iter()
        .zip(simulated.into_iter().zip(published))
        .map(|(column, (simulated, published))| Value {
            simulated,
            published,
            cell: column.scored.and_then(cell),
        })
        .collect()
}

/// "M of W virtual ms measured", the first row's window and run; rows that measure as long
/// but ran longer or shorter (a shorter warm-up: `StreamParams::batched`) are named with
/// their run's length.
fn measured_phrase(results: &[RunResult]) -> String {
    let ms = |ns: u64| format!("{:.0}", ns as f64 / 1e6);
    let Some(first) = results.first() else {
        return String::new();
    };
    let mut phrase = format!(
        "{} of {} virtual ms measured",
        ms(first.measured_ns),
        ms(first.wall_ns)
    );
    let others: Vec<&RunResult> = results
        .iter()
        .filter(|r| {
            ms(r.measured_ns) == ms(first.measured_ns) && ms(r.wall_ns) != ms(first.wall_ns)
        })
        .collect();
    if let Some(other) = others.first() {
        if others.iter().all(|r| ms(r.wall_ns) == ms(other.wall_ns)) {
            let names: Vec<&str> = others.iter().map(|r| r.policy.as_str()).collect();
            phrase += &format!(", of {} for {}", ms(other.wall_ns), names.join(", "));
        } else {
            for r in others {
                phrase += &format!(", of {} for {}", ms(r.wall_ns), r.policy);
            }
        }
    }
    phrase
}

/// The table of one workload beside the published one (`None` for no runs or a workload
/// without a published table).
pub fn beside_published(results: &[RunResult]) -> Option<DemoTable> {
    let first = results.first()?;
    let workload = first.workload;
    let publ = published::table(workload)?;
    let rows = table(results);
    let cells = published::score(workload, &rows);
    let p = &first.pageset;
    let heading = format!(
        "{} — simulated | published (Huang 2023)   (pageset batch {}, high {}..{}; {})",
        title(workload),
        p.batch,
        p.high_min,
        p.high_max,
        measured_phrase(results)
    );
    let columns = columns(&first.score_name);
    let shown = rows
        .iter()
        .zip(&publ)
        .map(|(row, publ)| (row.policy.clone(), values(&columns, row, publ, &cells)))
        .collect();
    let used_memory = (workload == WorkloadKind::Kbuild).then(|| {
        let used = |i: usize| rows.get(i).map_or(0.0, |r| r.used_memory_mean_pct);
        let pcp = |i: usize| rows.get(i).map_or(0.0, |r| r.pcp_of_used_pct);
        format!(
            "used memory (pages held + pagesets, mean over the measured window) vs base: patch7 {:+.1} %, patch9 {:+.1} %; published: up to +{} %; pagesets hold {:.1} % of it with base, {:.1} % with patch7, {:.1} % with patch9",
            used(4),
            used(5),
            published::KBUILD_USED_MEMORY_PCT,
            pcp(0),
            pcp(4),
            pcp(5),
        )
    });
    let high_order = (workload == WorkloadKind::Kbuild).then(|| high_order_line(first));
    Some(DemoTable {
        title: title(workload),
        heading,
        columns,
        rows: shown,
        used_memory,
        high_order,
        cells,
    })
}

/// kbuild's high-order frees after another on their pageset in the first run (base),
/// beside the recorded builds': what the `free_high` cells of patches 1–9 rest on.
fn high_order_line(base: &RunResult) -> String {
    let stats = &base.stats;
    let pct = 100.0 * stats.high_order_after_high as f64 / stats.high_order_frees.max(1) as f64;
    let mut recorded: Vec<(u32, Vec<f64>)> = Vec::new();
    for (cpus, share) in measured::KBUILD_RECORDED_AFTER_HIGH_PCT {
        match recorded.last_mut() {
            Some((last, shares)) if *last == cpus => shares.push(share),
            _ => recorded.push((cpus, vec![share])),
        }
    }
    let recorded: Vec<String> = recorded
        .iter()
        .map(|(cpus, shares)| {
            let shares: Vec<String> = shares.iter().map(|s| format!("{s:.2}")).collect();
            format!("{cpus}: {}", shares.join(" / "))
        })
        .collect();
    let published_slabs: Vec<String> = measured::KBUILD_RECORDED_AFTER_HIGH_PCT_PUBLISHED_SLABS
        .iter()
        .map(|(cpus, share)| format!("{cpus}: {share:.2}"))
        .collect();
    format!(
        "high-order frees after another on their pageset (patch 1's free_high condition): {} {pct:.2} % of {}; recorded builds (CPUs: %) {}; with the published machine's slab orders {}; the published machine's not known",
        base.policy,
        stats.high_order_frees,
        recorded.join(", "),
        published_slabs.join(", ")
    )
}

/// The table as the terminal shows it.
pub fn render_terminal(table: &DemoTable) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "{}", table.heading);
    let _ = write!(out, "{:<8}", "policy");
    for column in &table.columns {
        let _ = write!(out, " {:>1$}", column.name, column.width);
    }
    out.push('\n');
    for (policy, values) in &table.rows {
        let _ = write!(out, "{policy:<8}");
        for (column, value) in table.columns.iter().zip(values) {
            let _ = write!(out, " {}", column.terminal_text(value));
        }
        out.push('\n');
    }
    for line in [&table.used_memory, &table.high_order]
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "{line}");
    }
    out
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
    crate::shard::run_shard(
        Sweep::Demo,
        jobs,
        shard,
        args.threads,
        Some(&out),
        false,
        args.timing,
    )?;
    println!(
        "mmkit demo: shard {}/{} written to {}",
        shard.index,
        shard.count,
        out.display()
    );
    Ok(())
}

/// The line under the heading that says how to read the tables.
pub const LEGEND: &str = "values relative to base = 100, except lock contend% and cache miss rate% (absolute); ✓ within tolerance, ✗ not, t: a base-row training target of `mmkit sim calibrate`";

/// The line after the score that gives the tolerances (`published::within`'s rules).
pub const TOLERANCES: &str = "tolerances: score ±2 points (kbuild, netperf) or ±10 % (lmbench); lock contend% ±30 % or ±0.5; free_high and alloc_zone ±25 % or ±3 points; cache miss: the published direction, by at least 0.05 points";

/// `mmkit demo`.
pub fn run_demo(args: &DemoArgs) -> Result<(), CliError> {
    crate::sim_cmd::check_scale(args.scale)?;
    if args.threads == Some(0) {
        return Err(CliError::usage("--threads must be at least 1"));
    }
    if let Some(Seeds(seeds)) = &args.seeds {
        return crate::demo_seeds::run(args, seeds);
    }
    crate::output::check_dir("--out", &args.out)?;
    let shard = match args.merge.is_empty() {
        true => crate::shard::select(&args.shard, &crate::shard::process_env)?,
        false => None,
    };
    let report = args.out.join(demo_report::FILE_NAME);
    if shard.is_none() && args.out.is_dir() {
        // A new --out folder was checked above; in an existing one, report.html may be a
        // folder or read-only.
        crate::output::check_file("--out", &report)?;
    }
    let jobs = jobs(args.seed, args.scale);
    if let Some(shard) = shard {
        return run_shard(args, &jobs, &shard);
    }
    let merged = match args.merge.is_empty() {
        true => None,
        false => Some(crate::shard::merge(Sweep::Demo, &args.merge)?),
    };
    // A merge prints what the single run printed: its run count, seed and scale.
    let (runs, seed, scale) = match merged.as_deref() {
        Some(results @ [first, ..]) => (results.len(), first.seed, first.scale),
        _ => (jobs.len(), args.seed, args.scale),
    };
    let intro = format!(
        "mmkit demo: the PCP experiments of Huang 2023 (\"mm: PCP high auto-tuning\") in the simulator ({runs} runs; random seed {seed}, scale {scale})"
    );
    println!("{intro}");
    println!("{LEGEND}\n");
    let results = match merged {
        Some(results) => results,
        None => {
            let timed = run_all_timed(&jobs, args.threads, false)?;
            if args.timing {
                print_speeds(&timed);
            }
            timed.into_iter().map(|(result, _)| result).collect()
        }
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::failed(format!("{}: {e}", args.out.display())))?;
    let mut sections = Vec::new();
    for (workload, runs) in WORKLOADS.iter().zip(results.chunks(DEMO_POLICIES.len())) {
        let table = beside_published(runs).ok_or_else(|| {
            CliError::failed(format!("{workload}: no runs or no published table"))
        })?;
        println!("{}", render_terminal(&table));
        let plots = mmkit_sim::plot::write_plots(runs, &args.out, workload.name())
            .map_err(CliError::failed)?;
        if args.json {
            let path = args.out.join(format!("{}.json", workload.name()));
            std::fs::write(&path, render_json(runs)?)
                .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
        }
        sections.push(demo_report::Section { table, plots });
    }
    let cells: Vec<Cell> = sections
        .iter()
        .flat_map(|s| s.table.cells.iter().cloned())
        .collect();
    let score = render_score(&cells);
    println!("{score}");
    println!("{TOLERANCES}");
    let html = demo_report::render(&demo_report::Report {
        command: demo_report::command_line(),
        intro: &intro,
        seed,
        scale,
        sections: &sections,
        score: &score,
    })?;
    std::fs::write(&report, html)
        .map_err(|e| CliError::failed(format!("{}: {e}", report.display())))?;
    println!(
        "{} plots and {} written to {}/",
        sections.iter().map(|s| s.plots.len()).sum::<usize>(),
        demo_report::FILE_NAME,
        args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heading names the rows that ran another length for the same window: a unix
    /// row that keeps a batch warms up shorter (`StreamParams::batched`).
    #[test]
    fn the_heading_names_rows_that_warmed_up_another_length() {
        let spec = RunSpec {
            cpus: Some(16),
            scale: 0.02,
            node_bytes: Some(1 << 30),
            ..RunSpec::new(WorkloadKind::Unix)
        };
        let runs: Vec<RunResult> = ["base", "patch1", "patch3", "patch5"]
            .into_iter()
            .map(|p| mmkit_sim::run(&spec, Policy::preset(p).unwrap(), &mut |_| {}).unwrap())
            .collect();
        assert_eq!(
            measured_phrase(&runs),
            "10 of 70 virtual ms measured, of 30 for patch3, patch5"
        );
        assert_eq!(measured_phrase(&runs[..2]), "10 of 70 virtual ms measured");
    }

    #[test]
    fn the_tolerance_line_states_the_scoring_rules_threshold() {
        let threshold = format!("by at least {} points", published::DIRECTION_MIN_CHANGE);
        assert!(TOLERANCES.contains(&threshold), "{TOLERANCES}");
    }
}
