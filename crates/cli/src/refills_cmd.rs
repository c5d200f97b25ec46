//! `mmkit trace refills`: the kernel's pageset refills as a recording shows them, per
//! CPU, order and migratetype: how many, blocks per refill (mean, largest), and the first
//! sizes in order with the frees the CPU made before each (what halves `alloc_factor`).
//! The counting is `mmkit_trace::refills`'s; this module loads and prints.

use std::path::PathBuf;

use clap::Args;
use mmkit_trace::refills::{self, ListRefills};
use serde::Serialize;

use crate::CliError;

/// Arguments of `mmkit trace refills`.
#[derive(Args, Debug)]
pub struct RefillsArgs {
    /// Recordings (`mmkit trace record`, e.g. of crates/trace/workloads/bw_unix.c).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// One list's refills in one recording.
#[derive(Serialize)]
struct Line {
    cpu: u32,
    order: u8,
    migratetype: i32,
    mean_blocks: f64,
    #[serde(flatten)]
    refills: ListRefills,
}

#[derive(Serialize)]
struct Row {
    file: String,
    lists: Vec<Line>,
}

/// `mmkit trace refills`.
pub fn run(args: &RefillsArgs) -> Result<(), CliError> {
    let mut rows = Vec::new();
    for file in &args.files {
        let trace = crate::trace_cmd::load_complete(file)?;
        let lists = refills::measure(&trace)
            .into_iter()
            .map(|((cpu, order, migratetype), refills)| Line {
                cpu,
                order,
                migratetype,
                mean_blocks: refills.mean(),
                refills,
            })
            .collect();
        rows.push(Row {
            file: file.display().to_string(),
            lists,
        });
    }
    if args.json {
        return crate::output::print_json(&rows);
    }
    print!("{}", render(&rows));
    Ok(())
}

fn render(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pageset refills (rmqueue_bulk) by CPU, order and migratetype: blocks per refill, and the first {} refills' sizes with the frees the CPU made before each",
        refills::KEPT_SIZES
    );
    for row in rows {
        let _ = writeln!(out, "{}", row.file);
        let _ = writeln!(
            out,
            "  {:>4} {:>5} {:>4} {:>8} {:>9} {:>8}  first sizes (frees before)",
            "cpu", "order", "mt", "refills", "mean", "largest"
        );
        for line in &row.lists {
            let first: Vec<String> = line
                .refills
                .first
                .iter()
                .zip(&line.refills.frees_before)
                .map(|(size, frees)| format!("{size} ({frees})"))
                .collect();
            let _ = writeln!(
                out,
                "  {:>4} {:>5} {:>4} {:>8} {:>9.1} {:>8}  {}",
                line.cpu,
                line.order,
                line.migratetype,
                line.refills.refills,
                line.mean_blocks,
                line.refills.largest,
                first.join(" ")
            );
        }
    }
    out
}
