//! `mmkit trace blocks`: a recorded workload's blocks by order, and where each was freed
//! (the allocating CPU or another, a task's context or softirq). Per recording and pooled,
//! and per unit of work when `--per` gives each recording's count (the messages a stream
//! sent). The counting is `mmkit_trace::blocks`'s; this module loads and prints.

use std::path::PathBuf;

use clap::Args;
use mmkit_trace::blocks::{self, BlockFates, Fates, ORDERS};
use serde::Serialize;

use crate::CliError;

/// Arguments of `mmkit trace blocks`.
#[derive(Args, Debug)]
pub struct BlocksArgs {
    /// Recordings (`mmkit trace record --command-only`, e.g. by
    /// crates/trace/workloads/sctp-vm.sh).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Units of work in each recording, in the files' order (the messages
    /// `sctp_stream.py` reports): the table then gives blocks per unit.
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    per: Vec<u64>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// One recording's counts.
#[derive(Serialize)]
struct Row {
    file: String,
    units: Option<u64>,
    fates: BlockFates,
}

#[derive(Serialize)]
struct Report {
    rows: Vec<Row>,
    pooled: BlockFates,
    pooled_units: Option<u64>,
}

fn load(file: &std::path::Path) -> Result<BlockFates, CliError> {
    let trace = crate::trace_cmd::load_complete(file)?;
    Ok(blocks::measure(&trace))
}

/// `mmkit trace blocks`.
pub fn run(args: &BlocksArgs) -> Result<(), CliError> {
    if !args.per.is_empty() && args.per.len() != args.files.len() {
        return Err(CliError::usage(format!(
            "--per gives {} counts for {} recordings: give one per recording, in their order",
            args.per.len(),
            args.files.len()
        )));
    }
    if args.per.contains(&0) {
        return Err(CliError::usage(
            "--per: a recording's units must be at least 1",
        ));
    }
    let mut rows = Vec::new();
    let mut pooled = BlockFates::default();
    for (i, file) in args.files.iter().enumerate() {
        let fates = load(file)?;
        pooled.add(&fates);
        rows.push(Row {
            file: file.display().to_string(),
            units: args.per.get(i).copied(),
            fates,
        });
    }
    let report = Report {
        pooled_units: (!args.per.is_empty()).then(|| args.per.iter().sum()),
        rows,
        pooled,
    };
    if args.json {
        return crate::output::print_json(&report);
    }
    print!("{}", render(&report));
    Ok(())
}

/// The table of one set of counts: a line per order and kind that allocated anything.
fn table(out: &mut String, fates: &BlockFates, units: Option<u64>) {
    use std::fmt::Write;
    let per = |n: u64| match units {
        Some(u) => format!("{:.4}", n as f64 / u as f64),
        None => n.to_string(),
    };
    let _ = writeln!(
        out,
        "  {:<5} {:<7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "order",
        "kind",
        "allocated",
        "same task",
        "same sirq",
        "other task",
        "other sirq",
        "not freed"
    );
    for (kind, by_order) in [("kernel", &fates.kernel), ("movable", &fates.movable)] {
        for (order, f) in by_order.iter().enumerate().take(ORDERS) {
            if f.allocated == 0 {
                continue;
            }
            let Fates {
                allocated,
                same_cpu_task,
                same_cpu_softirq,
                other_cpu_task,
                other_cpu_softirq,
            } = *f;
            let _ = writeln!(
                out,
                "  {order:<5} {kind:<7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                per(allocated),
                per(same_cpu_task),
                per(same_cpu_softirq),
                per(other_cpu_task),
                per(other_cpu_softirq),
                per(f.not_freed()),
            );
        }
    }
}

fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let unit = if report.pooled_units.is_some() {
        "per unit of --per"
    } else {
        "counts"
    };
    let _ = writeln!(
        out,
        "blocks allocated while recording, by order and kind, and where each was freed ({unit}): on the allocating CPU (same) or another (other), in a task's context (task) or in softirq (sirq)"
    );
    for row in &report.rows {
        let units = row.units.map_or(String::new(), |u| format!(", {u} units"));
        let _ = writeln!(out, "{}{units}", row.file);
        table(&mut out, &row.fates, row.units);
    }
    if report.rows.len() > 1 {
        let units = report
            .pooled_units
            .map_or(String::new(), |u| format!(", {u} units"));
        let _ = writeln!(out, "pooled, {} recordings{units}", report.rows.len());
        table(&mut out, &report.pooled, report.pooled_units);
    }
    out
}
