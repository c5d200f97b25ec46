//! `mmkit trace high-order`: when recorded builds free blocks of orders 1–3 to the
//! pagesets, and what each pageset freed just before (the input of the `free_high`
//! rule). One column per recording and the mean ± sample standard deviation over them;
//! the counting is `mmkit_trace::high_order`'s, this module loads and prints.

use std::path::PathBuf;

use clap::Args;
use mmkit_trace::high_order::{self, HighOrderFrees, EXIT_TAIL_FREES, RUN_BUCKETS};
use mmkit_trace::replay::Machine;
use serde::Serialize;

use crate::CliError;

/// Arguments of `mmkit trace high-order`.
#[derive(Args, Debug)]
pub struct HighOrderArgs {
    /// Recordings, one per repeat (`mmkit trace record --command-only -- sh
    /// crates/trace/workloads/compile.sh 3`).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Leave out the events of tasks whose name starts with PREFIX (repeatable), as if
    /// they had not run: e.g. `kdamond`, DAMON's reclaim thread on the measuring VM,
    /// whose runs of high-order page-cache frees a whole-machine recording holds beside
    /// the workload's.
    #[arg(long, value_name = "PREFIX")]
    without_task: Vec<String>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// One recording's counts.
#[derive(Serialize)]
struct Row {
    file: String,
    /// Events left out by `--without-task`.
    dropped_events: usize,
    counts: HighOrderFrees,
}

/// One metric: each recording's value, then the mean and sample standard deviation.
#[derive(Serialize)]
struct Metric {
    name: &'static str,
    values: Vec<f64>,
    mean: f64,
    sd: f64,
}

#[derive(Serialize)]
struct Report {
    rows: Vec<Row>,
    metrics: Vec<Metric>,
}

fn load(file: &std::path::Path, without: &[String]) -> Result<Row, CliError> {
    let mut trace = crate::trace_cmd::load_complete(file)?;
    let dropped_events = trace.drop_tasks(without);
    // A plain trace without a snapshot splits frees by CPU only.
    let zones = Machine::from_trace(&trace, None)
        .map(|m| m.zones)
        .unwrap_or_default();
    Ok(Row {
        file: file.display().to_string(),
        dropped_events,
        counts: high_order::measure(&trace, &zones),
    })
}

fn percent(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        100.0 * n as f64 / d as f64
    }
}

/// The metrics, in the order printed.
fn metrics(rows: &[Row]) -> Vec<Metric> {
    type Of = fn(&HighOrderFrees) -> f64;
    let table: [(&'static str, Of); 40] = [
        ("processes (tasks with faults)", |c| c.processes as f64),
        ("faults (order-0 movable allocations)", |c| c.faults as f64),
        ("pageset frees of order 0", |c| c.frees[0] as f64),
        ("pageset frees of order 1", |c| c.frees[1] as f64),
        ("pageset frees of order 2", |c| c.frees[2] as f64),
        ("pageset frees of order 3", |c| c.frees[3] as f64),
        ("high-order frees per process", HighOrderFrees::per_process),
        ("high-order frees per 100,000 faults", |c| {
            1e5 * c.per_fault()
        }),
        ("% after a high-order free", |c| {
            percent(c.after_high, c.high())
        }),
        ("% … with no allocation between", |c| {
            percent(c.after_high_no_alloc, c.high())
        }),
        ("runs of high-order frees", |c| c.run_count() as f64),
        ("mean run length", |c| {
            c.high() as f64 / c.run_count().max(1) as f64
        }),
        ("% in runs of 2 or more", |c| {
            percent(c.in_runs_of_two_or_more(), c.high())
        }),
        ("% at the exit's end (last frees)", |c| {
            percent(c.when.exit_tail, c.high())
        }),
        ("% earlier in the exit", |c| percent(c.when.exit, c.high())),
        ("% mid-life", |c| percent(c.when.midlife, c.high())),
        ("% in a task without faults", |c| {
            percent(c.when.no_faults, c.high())
        }),
        ("% in a kernel thread", |c| {
            percent(c.when.kernel_thread, c.high())
        }),
        ("% in softirq (RCU)", |c| percent(c.when.softirq, c.high())),
        ("% freed at once after allocation", |c| {
            percent(c.freed_at_once, c.high())
        }),
        // Whose blocks: the lazy `mm` reference dropped at a context switch shows as
        // another task's block freed at the freeing task's first event on the CPU.
        ("% blocks allocated before or outside", |c| {
            percent(c.owners.untraced, c.high())
        }),
        ("% blocks of the freeing task", |c| {
            percent(c.owners.own, c.high())
        }),
        ("% another task's, at a switch", |c| {
            percent(c.owners.other_at_switch, c.high())
        }),
        ("% another task's, later in a run", |c| {
            percent(c.owners.other, c.high())
        }),
        // The frees after another, each as a share of them.
        ("after another: % < 1 ms after it", |c| {
            percent(c.pairs.within_1ms, c.after_high)
        }),
        ("after another: % 1-100 ms after", |c| {
            percent(c.pairs.within_100ms, c.after_high)
        }),
        ("after another: % >= 100 ms after", |c| {
            percent(c.pairs.later, c.after_high)
        }),
        ("after another: % CPU quiet between", |c| {
            percent(c.pairs.cpu_quiet, c.after_high)
        }),
        ("after another: % 1st outside/before", |c| {
            percent(c.pairs.first.untraced, c.after_high)
        }),
        ("after another: % 1st own", |c| {
            percent(c.pairs.first.own, c.after_high)
        }),
        ("after another: % 1st other, switch", |c| {
            percent(c.pairs.first.other_at_switch, c.after_high)
        }),
        ("after another: % 1st other, later", |c| {
            percent(c.pairs.first.other, c.after_high)
        }),
        ("after another: % 2nd outside/before", |c| {
            percent(c.pairs.second.untraced, c.after_high)
        }),
        ("after another: % 2nd own", |c| {
            percent(c.pairs.second.own, c.after_high)
        }),
        ("after another: % 2nd other, switch", |c| {
            percent(c.pairs.second.other_at_switch, c.after_high)
        }),
        ("after another: % 2nd other, later", |c| {
            percent(c.pairs.second.other, c.after_high)
        }),
        // The blocks an exit lets go of, per process: its emptied slabs.
        ("processes freeing 1 other block at exit", |c| {
            c.exit_blocks[0] as f64
        }),
        ("… 2 other blocks", |c| c.exit_blocks[1] as f64),
        ("… 3 other blocks", |c| c.exit_blocks[2] as f64),
        ("… 4 or more", |c| c.exit_blocks[3] as f64),
    ];
    table
        .iter()
        .map(|&(name, of)| {
            let values: Vec<f64> = rows.iter().map(|r| of(&r.counts)).collect();
            let n = values.len() as f64;
            let mean = values.iter().sum::<f64>() / n;
            let sd = if values.len() > 1 {
                (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
            } else {
                0.0
            };
            Metric {
                name,
                values,
                mean,
                sd,
            }
        })
        .collect()
}

/// `mmkit trace high-order`.
pub fn run(args: &HighOrderArgs) -> Result<(), CliError> {
    let rows = args
        .files
        .iter()
        .map(|file| load(file, &args.without_task))
        .collect::<Result<Vec<_>, CliError>>()?;
    let report = Report {
        metrics: metrics(&rows),
        rows,
    };
    if args.json {
        return crate::output::print_json(&report);
    }
    print!("{}", render(&report));
    Ok(())
}

fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "high-order (1–3) pageset frees, {} recording{}; \"exit's end\": after the task's last fault, among its last {EXIT_TAIL_FREES} frees",
        report.rows.len(),
        if report.rows.len() == 1 { "" } else { "s" },
    );
    for (i, row) in report.rows.iter().enumerate() {
        let c = &row.counts;
        let _ = writeln!(
            out,
            "  {}: {} ({}, {:.2} s); runs by length 1..{RUN_BUCKETS}+: {:?}{}",
            i + 1,
            row.file,
            c.scope.as_deref().unwrap_or("system"),
            c.seconds,
            c.runs,
            match row.dropped_events {
                0 => String::new(),
                n => format!("; {n} events of tasks left out (--without-task)"),
            }
        );
    }
    let _ = write!(out, "{:<38}", "metric");
    for i in 0..report.rows.len() {
        let _ = write!(out, " {:>10}", i + 1);
    }
    let _ = writeln!(out, " {:>18}", "mean ± sd");
    for m in &report.metrics {
        let _ = write!(out, "{:<38}", m.name);
        for v in &m.values {
            let _ = write!(out, " {:>10.2}", v);
        }
        let _ = writeln!(out, " {:>18}", format!("{:.2} ± {:.2}", m.mean, m.sd));
    }
    out
}
