//! `mmkit trace lives`: how a recorded build's processes fault over their lives, per
//! program and by length of life, beside what the kbuild model assumes (one fault rate
//! for a whole life, so a footprint that grows with it). The counting is
//! `mmkit_trace::lives`'s; this module loads, pools the recordings and prints.

use std::path::PathBuf;

use clap::Args;
use mmkit_trace::lives::{self, Life, Program};
use serde::Serialize;

use crate::CliError;

/// Arguments of `mmkit trace lives`.
#[derive(Args, Debug)]
pub struct LivesArgs {
    /// Recordings of builds (`mmkit trace record`, e.g. by
    /// crates/trace/workloads/kernel-build.sh with KEEP=1); their lives are pooled.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Programs to print, those with the most faults first.
    #[arg(long, default_value_t = 8, value_name = "N")]
    top: usize,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Output {
    /// Whole lives found in each file.
    files: Vec<(String, usize)>,
    /// The kbuild model's faults per ms of a running process (the committed calibration).
    model_faults_per_ms: f64,
    programs: Vec<Program>,
}

/// `mmkit trace lives`.
pub fn run(args: &LivesArgs) -> Result<(), CliError> {
    if args.top == 0 {
        return Err(CliError::usage("--top must be at least 1"));
    }
    let mut files = Vec::new();
    let mut pooled: Vec<Life> = Vec::new();
    for file in &args.files {
        let trace = crate::trace_cmd::load_complete(file)?;
        let found = lives::measure(&trace);
        files.push((file.display().to_string(), found.len()));
        pooled.extend(found);
    }
    let mut programs = lives::by_program(&pooled);
    programs.truncate(args.top);
    let output = Output {
        files,
        model_faults_per_ms: mmkit_sim::cost::calibrated_fit().kbuild_faults_per_s / 1e3,
        programs,
    };
    if args.json {
        return crate::output::print_json(&output);
    }
    print!("{}", render(&output));
    Ok(())
}

fn render(output: &Output) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for (file, n) in &output.files {
        let _ = writeln!(out, "{file}: {n} whole lives");
    }
    let _ = writeln!(
        out,
        "the kbuild model: {:.1} faults per ms of life at every length, spread evenly (fault position 0.50)",
        output.model_faults_per_ms
    );
    let _ = writeln!(
        out,
        "{:<16} {:>6} {:>10} {:>11} {:>10} {:>9}  thirds by life, shortest first: life ms / faults / faults per ms / position",
        "program", "lives", "life ms", "faults", "per ms", "position"
    );
    for p in &output.programs {
        let thirds: Vec<String> = p
            .by_life
            .iter()
            .filter(|g| g.processes > 0)
            .map(|g| {
                format!(
                    "{:.0} / {:.0} / {:.1} / {:.2}",
                    g.mean_life_ms, g.mean_faults, g.faults_per_ms, g.fault_position
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<16} {:>6} {:>10.1} {:>11.1} {:>10.2} {:>9.2}  {}",
            p.comm,
            p.all.processes,
            p.all.mean_life_ms,
            p.all.mean_faults,
            p.all.faults_per_ms,
            p.all.fault_position,
            thirds.join("  |  ")
        );
    }
    out
}
