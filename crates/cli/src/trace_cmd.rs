//! `mmkit trace record` and `mmkit trace replay`: record the kernel's kmem page events
//! while a command runs, and replay a trace through mmkit's policies to compare the
//! predicted PCP refills and drains with the kernel's (issue 7; `docs/FIDELITY.md`).
//! The work is in the `mmkit-trace` crate; this module parses arguments and prints.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mmkit_core::policy::Policy;
use mmkit_trace::parse;
use mmkit_trace::record::{self, RecordError, RecordOptions};
use mmkit_trace::replay::{self, Machine, SeedRule, TickPhase};
use mmkit_trace::report;

use crate::machine::policy_preset;
use crate::CliError;

/// `mmkit trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Trace mm_page_alloc, mm_page_free, mm_page_free_batched, mm_page_alloc_zone_locked
    /// and mm_page_pcpu_drain while CMD runs (needs root), with /proc/zoneinfo and
    /// /proc/vmstat before and after, into one gzip file. Every tracefs setting is
    /// restored afterwards; a run that lost events writes no file.
    Record(RecordArgs),
    /// Replay a trace (the recorder's file, or plain `cat /sys/kernel/tracing/trace` text
    /// with --zoneinfo) under each policy and print predicted against observed refills
    /// and drains, per CPU and in total.
    Replay(ReplayArgs),
    /// Simulate the work each recording shows (its machine from the recording's
    /// zoneinfo, its messages or processes as measured) and print the simulator's PCP
    /// refill and drain pages per unit of work beside the kernel's, with the mean and
    /// spread over the recordings (docs/FIDELITY.md; crates/trace/workloads/live-check.sh
    /// records and compares).
    CompareSim(crate::compare_sim::CompareSimArgs),
    /// Count when recorded builds free blocks of orders 1–3 to the pagesets and what each
    /// pageset freed just before (patch 1's free_high condition): per process and per
    /// fault, after a high-order free, runs, and where in a process's life (exit, mid-life,
    /// kernel thread, softirq), with the mean ± sd over the recordings.
    HighOrder(crate::high_order_cmd::HighOrderArgs),
    /// Count the blocks a recorded workload allocated, by order, and where each was freed:
    /// on the allocating CPU or another, in a task's context or in softirq (per unit of
    /// work with --per, e.g. the messages a stream sent).
    Blocks(crate::blocks_cmd::BlocksArgs),
    /// Count the kernel's pageset refills by CPU, order and migratetype: how many, blocks
    /// per refill, and the first refills' sizes in order with the frees the CPU made before
    /// each (an order-0 refill doubles while its pageset frees nothing: `alloc_factor`).
    Refills(crate::refills_cmd::RefillsArgs),
    /// How a recorded build's processes fault over their lives: per program, each whole
    /// life's length, faults, faults per ms and where in the life they came, in thirds by
    /// length of life, beside the kbuild model's one rate for a whole life.
    Lives(crate::lives_cmd::LivesArgs),
}

#[derive(Args, Debug)]
struct RecordArgs {
    /// Stop tracing (and kill CMD's process group) after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
    /// Let CMD run this many seconds before tracing starts (steady state; the "before"
    /// snapshot is taken then).
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Output file.
    #[arg(long, default_value = "trace.mmkit.gz")]
    out: PathBuf,
    /// Ring-buffer size per CPU, KiB (RAM, not disk).
    #[arg(long, default_value_t = record::DEFAULT_BUFFER_KB)]
    buffer_kb: u64,
    /// Trace only CMD and the processes it forks, not the whole machine (on a machine
    /// shared with other work: what CMD's own allocations and frees did).
    #[arg(long)]
    command_only: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// The trace file.
    file: PathBuf,
    /// A /proc/zoneinfo snapshot taken before the trace (needed for plain tracefs text;
    /// overrides the recording's own).
    #[arg(long)]
    zoneinfo: Option<PathBuf>,
    /// Policies to replay, comma-separated presets.
    #[arg(long, value_delimiter = ',', default_value = "base,v6.7,linux-6.18")]
    policies: Vec<String>,
    /// How each pageset's starting count is spread over its lists (the snapshot gives only
    /// the total): empties (the default: from when the kernel refilled each list),
    /// frees, drains, movable0 or stale (docs/FIDELITY.md).
    #[arg(long, value_enum, default_value_t = SeedArg::Empties)]
    seed_lists: SeedArg,
    /// Where each CPU's vmstat tick (the decay of `high`) falls: decay (the default: at
    /// the kernel's first decay drain on that CPU, a kworker's, where the trace shows
    /// one, else on the jiffies grid the recording measured, else one stat_interval after
    /// the first event) or first-event (every CPU one stat_interval after the first
    /// event).
    #[arg(long, value_enum, default_value_t = TickArg::Decay)]
    tick_phase: TickArg,

    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Replay a trace whose file ends early (gzip stream cut, or no end marker) instead
    /// of refusing it; the end of the run is then missing from every count.
    #[arg(long)]
    allow_truncated: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum TickArg {
    Decay,
    FirstEvent,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum SeedArg {
    Frees,
    Drains,
    Movable0,
    Stale,
    Empties,
}

impl From<SeedArg> for SeedRule {
    fn from(arg: SeedArg) -> SeedRule {
        match arg {
            SeedArg::Frees => SeedRule::Frees,
            SeedArg::Drains => SeedRule::Drains,
            SeedArg::Movable0 => SeedRule::Movable0,
            SeedArg::Stale => SeedRule::Stale,
            SeedArg::Empties => SeedRule::Empties,
        }
    }
}

/// Run `mmkit trace`.
/// A recording read whole for counting (`high-order`, `blocks`, `refills`, `lives`, `compare-sim`): a file
/// that cannot be read, parsed, was truncated or holds no page events is a usage error
/// naming the file.
pub(crate) fn load_complete(file: &std::path::Path) -> Result<parse::Trace, CliError> {
    let name = file.display();
    let bytes = crate::limits::read_input(file)
        .map_err(|e| CliError::usage(format!("cannot read {name}: {e}")))?;
    let trace = parse::load(&bytes).map_err(|e| CliError::usage(format!("{name}: {e}")))?;
    if let Some(why) = trace.truncation() {
        return Err(CliError::usage(format!("{name} is truncated: {why}")));
    }
    if trace.events.is_empty() {
        return Err(CliError::usage(format!(
            "{name}: no kmem page events found"
        )));
    }
    Ok(trace)
}

pub fn run(args: &TraceArgs) -> Result<(), CliError> {
    match &args.command {
        TraceCommand::Record(args) => run_record(args),
        TraceCommand::Replay(args) => run_replay(args),
        TraceCommand::CompareSim(args) => crate::compare_sim::run(args),
        TraceCommand::HighOrder(args) => crate::high_order_cmd::run(args),
        TraceCommand::Blocks(args) => crate::blocks_cmd::run(args),
        TraceCommand::Refills(args) => crate::refills_cmd::run(args),
        TraceCommand::Lives(args) => crate::lives_cmd::run(args),
    }
}

fn run_record(args: &RecordArgs) -> Result<(), CliError> {
    if args.seconds.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
        return Err(CliError::usage("--seconds must be a positive number"));
    }
    if !(args.warmup.is_finite() && args.warmup >= 0.0) {
        return Err(CliError::usage(
            "--warmup must be a number of seconds, 0 or more",
        ));
    }
    // Refused before tracefs is touched: a recording that could not be written, or a
    // ring buffer (per CPU, in RAM) larger than the machine.
    crate::output::check_file("--out", &args.out)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u128;
    crate::limits::check_memory(
        &format!("--buffer-kb {} per CPU × {cpus} CPUs", args.buffer_kb),
        u128::from(args.buffer_kb) * 1024 * cpus,
    )?;
    let options = RecordOptions {
        seconds: args.seconds,
        warmup: args.warmup,
        out: args.out.clone(),
        buffer_kb: args.buffer_kb,
        command: args.command.clone(),
        command_only: args.command_only,
    };
    let mut bar = RecordBar::new();
    let result = record::record_with_progress(&options, &mut |p| bar.show(p));
    bar.finish();
    match result {
        Ok(summary) => {
            eprintln!(
                "mmkit trace: {:.2} s{} traced, {} lines, {} bytes compressed in {}",
                summary.seconds,
                if summary.stopped {
                    " (command stopped)"
                } else {
                    ""
                },
                summary.lines,
                summary.bytes,
                args.out.display()
            );
            Ok(())
        }
        Err(RecordError::Setup(m)) => Err(CliError::usage(m)),
        Err(e) => Err(CliError::failed(e.to_string())),
    }
}

/// `trace record`'s progress on stderr: the warm-up and a time limit as bars, tracing
/// without one as a spinner, with the events recorded so far, then the lines written.
/// indicatif draws nothing when stderr is not a terminal, so logs and pipes get only the
/// summary line.
struct RecordBar {
    bar: ProgressBar,
    /// The style shown, so it is set only when the phase changes.
    phase: Option<Phase>,
}

/// Which style [`RecordBar`] shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    WarmingUp,
    TracingUntil,
    TracingUntilExit,
    Writing,
}

impl RecordBar {
    fn new() -> RecordBar {
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template("{spinner} setting up tracefs") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        RecordBar { bar, phase: None }
    }

    fn phase(&mut self, phase: Phase) {
        if self.phase == Some(phase) {
            return;
        }
        self.phase = Some(phase);
        let template = match phase {
            Phase::WarmingUp => "{spinner} warm-up, not tracing [{bar:30}] {msg}",
            Phase::TracingUntil => "{spinner} tracing [{bar:30}] {msg}",
            Phase::TracingUntilExit => "{spinner} tracing until the command exits: {msg}",
            Phase::Writing => "{spinner} writing [{bar:30}] {msg}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            self.bar.set_style(style.progress_chars("=> "));
        }
    }

    fn show(&mut self, progress: record::Progress) {
        // Bars count milliseconds (and lines), so a fraction of a second still moves them.
        // The values go in before the style, so a new style never shows the old phase's.
        let ms = |s: f64| (s * 1e3) as u64;
        let (phase, length, position, message) = match progress {
            record::Progress::WarmingUp { elapsed, warmup } => (
                Phase::WarmingUp,
                ms(warmup),
                ms(elapsed),
                format!("{elapsed:.1} of {warmup} s"),
            ),
            record::Progress::Tracing {
                elapsed,
                limit: Some(limit),
                events,
            } => (
                Phase::TracingUntil,
                ms(limit),
                ms(elapsed),
                format!("{elapsed:.1} of {limit} s, {events} events"),
            ),
            record::Progress::Tracing {
                elapsed,
                limit: None,
                events,
            } => (
                Phase::TracingUntilExit,
                0,
                0,
                format!("{elapsed:.1} s, {events} events"),
            ),
            record::Progress::Writing { lines, total } => (
                Phase::Writing,
                total.max(lines),
                lines,
                format!("{lines} of {total} lines"),
            ),
        };
        self.bar.set_length(length);
        self.bar.set_position(position);
        self.bar.set_message(message);
        self.phase(phase);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn run_replay(args: &ReplayArgs) -> Result<(), CliError> {
    let bytes = crate::limits::read_input(&args.file)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", args.file.display())))?;
    let trace = parse::load(&bytes)
        .map_err(|e| CliError::usage(format!("{}: {e}", args.file.display())))?;
    if let Some(why) = trace.truncation().filter(|_| !args.allow_truncated) {
        return Err(CliError::usage(format!(
            "{} is truncated: {why}; replay what is left with --allow-truncated",
            args.file.display()
        )));
    }
    if trace.events.is_empty() {
        return Err(CliError::usage(format!(
            "{}: no kmem page events found ({} lines, {} problems)",
            args.file.display(),
            trace.lines,
            trace.problems.total()
        )));
    }
    let zoneinfo = match &args.zoneinfo {
        Some(path) => Some(
            crate::limits::read_input_text(path)
                .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?,
        ),
        None => None,
    };
    // Errors about the snapshot name the flag and the file.
    let zoneinfo_name = args
        .zoneinfo
        .as_ref()
        .map(|path| format!("--zoneinfo {}", path.display()));
    let mut machine =
        Machine::from_trace(&trace, zoneinfo.as_deref()).map_err(|e| match &zoneinfo_name {
            Some(name) => CliError::usage(format!("{name}: {e}")),
            None => CliError::usage(e),
        })?;
    machine.tick_phase = match args.tick_phase {
        TickArg::Decay => TickPhase::Decay,
        TickArg::FirstEvent => TickPhase::FirstEvent,
    };
    let policies: Vec<Policy> = args
        .policies
        .iter()
        .map(|name| policy_preset(name))
        .collect::<Result<_, _>>()?;
    let result =
        replay::replay(&trace, &machine, &policies, args.seed_lists.into()).map_err(|e| {
            let message = e.to_string();
            match &zoneinfo_name {
                // The snapshot is as likely the culprit as the trace: name both.
                Some(name) => CliError::usage(format!(
                    "{} with {name}: {}",
                    args.file.display(),
                    message.replace("--zoneinfo file", "the zoneinfo")
                )),
                None => CliError::usage(format!("{}: {message}", args.file.display())),
            }
        })?;
    if args.json {
        println!("{}", report::json(&result));
    } else {
        print!("{}", report::table(&result));
    }
    Ok(())
}
