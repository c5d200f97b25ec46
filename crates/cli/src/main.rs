//! `mmkit`: the command-line front end of mmkit.
//!
//! Each subcommand lives in its own module and drives `mmkit-core`; none re-implements
//! allocator behaviour.

mod bench;
mod blocks_cmd;
mod calibrate_cmd;
mod compare_sim;
mod demo;
mod demo_report;
mod demo_seeds;
mod high_order_cmd;
mod limits;
mod live;
mod lives_cmd;
mod machine;
mod output;
mod pcp_script;
mod percpu_cmd;
mod percpu_live;
mod reclaim_cmd;
mod refills_cmd;
mod shard;
mod sim_cmd;
mod size;
mod stress;
mod trace_cmd;
mod zoneinfo;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Linux-grade memory management: embed it, run it, measure it.
#[derive(Parser, Debug)]
#[command(name = "mmkit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print what Linux prints in /proc/zoneinfo for a machine you describe, or compare
    /// mmkit's computation with this machine's live /proc/zoneinfo (--live).
    Zoneinfo(zoneinfo::ZoneinfoArgs),
    /// Run a script of per-CPU page allocator operations and print, after each step, the
    /// pageset it affected and the events it caused (`mmkit pcp-script FILE|-`).
    PcpScript(pcp_script::PcpScriptArgs),
    /// Benchmarks against peer allocators in one run: Gorman 2017's page-allocator
    /// micro-benchmark (`pagealloc`) and multi-thread patterns (`threads`).
    Bench(bench::BenchArgs),
    /// Long randomized runs of the runtime on real threads, with canaries in every block
    /// and a full page accounting at the end.
    Stress(stress::StressArgs),
    /// Simulate one workload on many virtual CPUs under a list of policies and print the
    /// published study's table (Huang 2023) of lock contention, free_high, alloc_zone, cache misses and PCP
    /// memory (or JSON), with optional SVG plots.
    Sim(Box<sim_cmd::SimArgs>),
    /// The main job: reproduce Huang 2023's three PCP tables (kbuild, netperf, lmbench) in
    /// the simulator, print them beside the published numbers, and write plots.
    Demo(demo::DemoArgs),
    /// Reclaim experiments: Yin 2023's MADV_PAGEOUT loop (per-page against batched rmap
    /// removal), Wang 2019's LRU sizing under many cgroups, and the congestion bits.
    Reclaim(reclaim_cmd::ReclaimArgs),
    /// Linux's percpu allocator on real memory: `mmkit percpu test` runs the partial
    /// chunk depopulation thread's percpu_test.sh (memory cgroups created and deleted).
    Percpu(percpu_cmd::PercpuArgs),
    /// Record the kernel's page-allocator events while a command runs (root), or replay a
    /// trace under mmkit's policies and compare predicted PCP refills and drains with the
    /// kernel's.
    Trace(trace_cmd::TraceArgs),
}

/// A failure the user can act on: a one-line message and an exit status.
#[derive(Debug)]
pub struct CliError {
    message: String,
    status: u8,
}

impl CliError {
    /// Invalid input: exit status 2, like a usage error.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            status: 2,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The command ran but found a failure (e.g. a fidelity mismatch): exit status 1.
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            status: 1,
        }
    }
}

/// The command line as clap sees it, with every option that takes a value willing to take
/// one that looks like a negative number: `--outer -1` is then refused as a bad value of
/// `--outer` (naming the flag), not as an unknown argument `-1`.
fn command() -> clap::Command {
    fn negative_numbers_are_values(command: clap::Command) -> clap::Command {
        command
            .mut_args(|arg| {
                let takes_values = arg.get_action().takes_values();
                arg.allow_negative_numbers(takes_values)
            })
            .mut_subcommands(negative_numbers_are_values)
    }
    negative_numbers_are_values(Cli::command())
}

/// Exit on a command line clap refused: help and version as clap prints them, a usage
/// error as one line naming the argument (clap's message without the usage block), with
/// exit status 2 like every other usage error.
fn refuse_command_line(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if !error.use_stderr() || error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        error.exit();
    }
    eprintln!("mmkit: error: {}", one_line(&error.to_string()));
    std::process::exit(2);
}

/// clap's message on one line: its paragraphs but the usage and the pointer to `--help`,
/// each with its lines joined.
fn one_line(message: &str) -> String {
    let message = message.trim().strip_prefix("error: ").unwrap_or(message);
    let paragraphs: Vec<String> = message
        .split("\n\n")
        .filter(|p| !p.starts_with("Usage:") && !p.starts_with("For more information"))
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect();
    paragraphs.join("; ")
}

fn main() -> ExitCode {
    let matches = command()
        .try_get_matches()
        .unwrap_or_else(|e| refuse_command_line(e));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| refuse_command_line(e));
    let result = match cli.command {
        Command::Zoneinfo(args) => zoneinfo::run(&args),
        Command::Stress(args) => stress::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::PcpScript(args) => pcp_script::run(&args),
        Command::Sim(args) => sim_cmd::run_sim(&args),
        Command::Demo(args) => demo::run_demo(&args),
        Command::Reclaim(args) => reclaim_cmd::run(&args),
        Command::Percpu(args) => percpu_cmd::run(&args),
        Command::Trace(args) => trace_cmd::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mmkit: error: {}", err.message);
            ExitCode::from(err.status)
        }
    }
}
