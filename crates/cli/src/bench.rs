//! `mmkit bench`: the page-allocator micro-benchmark of Gorman 2017 (`pagealloc`) and the
//! multi-thread patterns (`threads`), mmkit against peer allocators in one run. The
//! measuring is `mmkit-bench`'s; this module parses flags, shows progress and prints.
//!
//! The C/C++ peers (mimalloc, jemalloc, snmalloc) are built only with the cargo feature
//! `peers`: compiling them takes minutes that a user of the demo should not wait for.
//! Without it the Rust peers run, and one line on stderr names the peers that were not
//! built and the command that builds them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use mmkit_bench::contestant::Touch;
use mmkit_bench::pagealloc::PageallocConfig;
use mmkit_bench::peers::{self, BuildParams};
use mmkit_bench::runner::Runner;
use mmkit_bench::threads::{Pattern, ThreadsConfig};
use mmkit_bench::tsc::TscClock;
use mmkit_bench::{plot, table, Progress};

use crate::{limits, output, CliError};

/// Arguments of `mmkit bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Gorman 2017's micro-benchmark: one thread allocates N blocks, then frees them, for
    /// N = 1, 2, 4, … MAX_N; per-page alloc, free and total cost of every allocator.
    Pagealloc(PageallocArgs),
    /// T threads allocating and freeing order-0 pages for a while: pages per second,
    /// latency percentiles, and each peer against mmkit.
    Threads(ThreadsArgs),
    /// The hand-off of a cache line between two CPUs (the simulator's
    /// `handoff_socket_ns`): two pinned threads take turns writing one word.
    Handoff(HandoffArgs),
    /// The latency of a load that misses the caches: one pointer chased through a random
    /// cycle over a buffer (what the simulator's speed waits on; `crates/bench/realtime.sh`
    /// measures it beside each round).
    Latency(LatencyArgs),
}

/// Arguments of `mmkit bench latency`.
#[derive(Args, Debug)]
struct LatencyArgs {
    /// The buffer, in MiB (a cycle through every 64-byte line of it).
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Dependent loads per run.
    #[arg(long, default_value_t = 2_000_000)]
    loads: u64,
    /// Runs; the median is the figure.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Seed of the cycle's order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `mmkit bench handoff`.
#[derive(Args, Debug)]
struct HandoffArgs {
    /// The two CPUs, as A,B.
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    cpus: Vec<usize>,
    /// Hand-offs per run.
    #[arg(long, default_value_t = 1_000_000)]
    handoffs: u64,
    /// Runs; the median is the figure.
    #[arg(long, default_value_t = 7)]
    repeat: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What is written into each block after allocation and read back before its free.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum TouchArg {
    /// Nothing.
    None,
    /// One u64 at the start of the block.
    Block,
    /// One u64 at the start of every 4 KiB page of the block.
    Page,
}

impl From<TouchArg> for Touch {
    fn from(t: TouchArg) -> Touch {
        match t {
            TouchArg::None => Touch::None,
            TouchArg::Block => Touch::Block,
            TouchArg::Page => Touch::Page,
        }
    }
}

/// Arguments of `mmkit bench pagealloc`.
#[derive(Args, Debug)]
struct PageallocArgs {
    /// Block orders, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,3,9")]
    orders: Vec<u8>,
    /// The largest N (N runs over the powers of two up to it; a round never moves more
    /// than 512 MiB, so order 9 stops at 256).
    #[arg(long, default_value_t = 16384)]
    max_n: usize,
    /// Samples of every cell; the table shows their median.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Each sample repeats rounds until it has moved this many pages.
    #[arg(long, default_value_t = 65536)]
    sample_pages: u64,
    /// What the benchmark writes into each block and reads back.
    #[arg(long, value_enum, default_value = "page")]
    touch: TouchArg,
    /// Only these allocators, comma-separated (mmkit, mmkit-bulk, mmkit-handle,
    /// mmkit-cache, buddy, talc, mimalloc, jemalloc, snmalloc, system), and the reference
    /// rows "floor: spinlock", "floor: lifo" (on by default, order 0 only). mimalloc,
    /// jemalloc and snmalloc need a build with `--features peers`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Show TSC cycles instead of nanoseconds in the tables.
    #[arg(long)]
    cycles: bool,
    /// Write SVG plots (one per order) into this directory.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    save_json: Option<PathBuf>,
}

/// The patterns of `mmkit bench threads`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum PatternArg {
    /// Each thread allocates and frees its own pages.
    Local,
    /// Producers allocate, consumers on other threads free (lmbench AF_UNIX).
    Remote,
    /// Remote with the bulk API (peers: loops of single calls).
    BulkRemote,
}

/// Arguments of `mmkit bench threads`.
#[derive(Args, Debug)]
struct ThreadsArgs {
    /// Threads; default: the CPUs available.
    #[arg(long)]
    threads: Option<u32>,
    /// What the threads do.
    #[arg(long, value_enum, default_value = "remote")]
    pattern: PatternArg,
    /// Seconds per allocator.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Pages per batch (16 pages = one 64 KiB AF_UNIX message).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Time one operation in this many. The default is prime, so that the timed operation
    /// does not land on the same place of a power-of-two batch every time (with 64, every
    /// timed mmkit-cache free was the one that flushes a 64-page batch to the ring).
    #[arg(long, default_value_t = 61)]
    sample_every: u64,
    /// What the benchmark writes into each page and reads back.
    #[arg(long, value_enum, default_value = "page")]
    touch: TouchArg,
    /// Only these allocators, comma-separated (as for `pagealloc`, without the floors).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    save_json: Option<PathBuf>,
}

/// Run `mmkit bench`.
pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    match &args.command {
        BenchCommand::Pagealloc(args) => pagealloc(args),
        BenchCommand::Threads(args) => threads(args),
        BenchCommand::Handoff(args) => handoff(args),
        BenchCommand::Latency(args) => latency(args),
    }
}

/// The command that builds `mmkit` with the C/C++ peers.
const BUILD_WITH_PEERS: &str = "cargo build --release -p mmkit-cli --features peers";

/// The peers this build left out, as one line for stderr (`None` when all are built).
fn not_built_note() -> Option<String> {
    let missing = peers::not_built();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "mmkit bench: not built: {} (C/C++ peers); build them with `{BUILD_WITH_PEERS}`",
        missing.join(", ")
    ))
}

/// Which contestants run: `--only`'s, or every one this build has (and then a note on
/// stderr names the peers it lacks). Asking for a peer that is not built is a usage error
/// that says how to build it.
fn choose(
    only: &[String],
    select: fn(&[String]) -> Result<Vec<&'static str>, mmkit_bench::BenchError>,
) -> Result<Vec<&'static str>, CliError> {
    let missing = peers::not_built();
    if let Some(name) = only.iter().find(|n| missing.contains(&n.as_str())) {
        return Err(CliError::usage(format!(
            "{name} is not in this build: build mmkit with `{BUILD_WITH_PEERS}`"
        )));
    }
    let names = select(only).map_err(|e| CliError::usage(e.to_string()))?;
    if only.is_empty() {
        if let Some(note) = not_built_note() {
            eprintln!("{note}");
        }
    }
    Ok(names)
}

fn build(names: &[&str], params: &BuildParams) -> Result<Vec<Box<dyn Runner>>, CliError> {
    names
        .iter()
        .map(|name| peers::build(name, params).map_err(|e| CliError::failed(e.to_string())))
        .collect()
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} bench {elapsed} [{bar:30}] {pos}/{len} {msg}")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn pagealloc(args: &PageallocArgs) -> Result<(), CliError> {
    output::check_optional_dir("--plot", args.plot.as_deref())?;
    output::check_optional_file("--save-json", args.save_json.as_deref())?;
    if args.max_n == 0 || args.repeat == 0 || args.sample_pages == 0 || args.orders.is_empty() {
        return Err(CliError::usage(
            "--max-n, --repeat, --sample-pages and --orders must be positive",
        ));
    }
    let config = PageallocConfig {
        orders: args.orders.clone(),
        max_n: args.max_n,
        repeat: args.repeat,
        touch: args.touch.into(),
        sample_pages: args.sample_pages,
    };
    let cells = config
        .cells()
        .map_err(|e| CliError::usage(format!("--orders: {e}")))?;
    // Every cell keeps each of its samples: an alloc and a free cost of 8 bytes each, for
    // every allocator (at most 16 peers and floors).
    limits::check_memory(
        &format!("--repeat {} samples of {} cells", args.repeat, cells.len()),
        limits::product(&[args.repeat as u128, cells.len() as u128, 16, 16]),
    )?;
    let names = choose(&args.only, peers::select_pagealloc)?;
    let params = BuildParams {
        arena_bytes: config.arena_bytes(),
        cpus: 1,
    };
    let runners = build(&names, &params)?;
    let clock = TscClock::calibrate(Duration::from_millis(50));
    let bar = progress_bar(0);
    let report = mmkit_bench::pagealloc::run(&config, &runners, &clock, &mut |p: Progress<'_>| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.label.to_owned());
    });
    bar.finish_and_clear();
    let report = report.map_err(|e| CliError::failed(e.to_string()))?;
    if args.json {
        crate::output::print_json(&report)?;
    } else {
        print!("{}", table::pagealloc(&report, args.cycles));
    }
    save_json(args.save_json.as_deref(), &report)?;
    if let Some(dir) = &args.plot {
        for path in plot::pagealloc(&report, dir).map_err(|e| CliError::failed(e.to_string()))? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn threads(args: &ThreadsArgs) -> Result<(), CliError> {
    output::check_optional_file("--save-json", args.save_json.as_deref())?;
    let threads = match args.threads {
        Some(t) => t,
        None => std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    };
    let pattern = match args.pattern {
        PatternArg::Local => Pattern::Local,
        PatternArg::Remote => Pattern::Remote,
        PatternArg::BulkRemote => Pattern::BulkRemote,
    };
    if threads == 0
        || args.batch == 0
        || !args.seconds.is_finite()
        || args.seconds <= 0.0
        || args.sample_every == 0
    {
        return Err(CliError::usage(
            "--threads, --batch, --seconds and --sample-every must be positive",
        ));
    }
    limits::check_threads("--threads", u64::from(threads))?;
    limits::check_seconds("--seconds", args.seconds)?;
    check_batch_fits(threads, args.batch, ARENA_BYTES)?;
    if pattern != Pattern::Local && threads < 2 {
        return Err(CliError::usage(
            "the remote patterns need --threads 2 or more",
        ));
    }
    let names = choose(&args.only, peers::select)?;
    let params = BuildParams {
        arena_bytes: ARENA_BYTES,
        cpus: threads,
    };
    let runners = build(&names, &params)?;
    let clock = TscClock::calibrate(Duration::from_millis(50));
    let config = ThreadsConfig {
        threads,
        pattern,
        seconds: args.seconds,
        batch: args.batch,
        sample_every: args.sample_every,
        touch: args.touch.into(),
        overhead_cycles: clock.overhead_cycles,
    };
    let bar = progress_bar(runners.len() as u64);
    let report = mmkit_bench::threads::run(&config, &runners, &clock, &mut |p: Progress<'_>| {
        bar.set_position(p.done as u64);
        bar.set_message(p.label.to_owned());
    });
    bar.finish_and_clear();
    let report = report.map_err(|e| CliError::failed(e.to_string()))?;
    if args.json {
        crate::output::print_json(&report)?;
    } else {
        print!("{}", table::threads(&report));
    }
    save_json(args.save_json.as_deref(), &report)?;
    Ok(())
}

/// The memory each allocator of `mmkit bench threads` gets: 256 MiB, 65536 pages.
const ARENA_BYTES: usize = 256 << 20;

/// Refuse batches the arena cannot hold: every thread holds a batch of 4 KiB pages at
/// once, so `threads × batch × 4 KiB` above the arena makes mmkit fail where the peers,
/// which take memory from the OS, go on (`--batch 100000000` had them map 400 GB).
fn check_batch_fits(threads: u32, batch: usize, arena_bytes: usize) -> Result<(), CliError> {
    let bytes = limits::product(&[u128::from(threads), batch as u128, 4096]);
    if bytes <= arena_bytes as u128 {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "--batch {batch} on {threads} threads holds {} at once; the arena each allocator \
         gets is {}: at most {} pages per thread",
        limits::human_bytes(bytes),
        limits::human_bytes(arena_bytes as u128),
        arena_bytes / 4096 / threads as usize
    )))
}

fn save_json(
    path: Option<&std::path::Path>,
    report: &impl serde::Serialize,
) -> Result<(), CliError> {
    if let Some(path) = path {
        std::fs::write(path, crate::output::json(report)? + "\n")
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// `mmkit bench handoff`: the median ns per hand-off of a cache line between two CPUs.
fn handoff(args: &HandoffArgs) -> Result<(), CliError> {
    use mmkit_bench::handoff::{measure, HandoffConfig};
    if args.handoffs > 1_000_000_000 || args.repeat > 1_000 {
        return Err(CliError::usage(
            "--handoffs up to 1000000000 and --repeat up to 1000",
        ));
    }
    let [a, b] = args.cpus[..] else {
        return Err(CliError::usage("--cpus takes two CPUs, as A,B"));
    };
    let config = HandoffConfig {
        cpus: (a, b),
        handoffs: args.handoffs,
        repeat: args.repeat,
    };
    let result = measure(&config).map_err(|e| CliError::usage(e.to_string()))?;
    if args.json {
        let json = serde_json::json!({
            "cpus": args.cpus,
            "handoffs": args.handoffs,
            "runs_ns": result.runs_ns,
            "median_ns": result.median_ns,
        });
        println!("{json}");
    } else {
        let runs: Vec<String> = result.runs_ns.iter().map(|ns| format!("{ns:.1}")).collect();
        println!(
            "cache-line hand-off CPU {} <-> CPU {}: {:.1} ns (median of {} runs of {} hand-offs; runs: {})",
            a,
            b,
            result.median_ns,
            args.repeat,
            args.handoffs,
            runs.join(", ")
        );
    }
    Ok(())
}

/// `mmkit bench latency`: the median ns per dependent load through a random cycle.
fn latency(args: &LatencyArgs) -> Result<(), CliError> {
    use mmkit_bench::latency::{measure, LatencyConfig};
    const MAX_MIB: usize = 64 << 10;
    if args.mib > MAX_MIB || args.loads > 10_000_000_000 || args.repeat > 1_000 {
        return Err(CliError::usage(format!(
            "--mib up to {MAX_MIB}, --loads up to 10000000000 and --repeat up to 1000"
        )));
    }
    let config = LatencyConfig {
        bytes: args.mib << 20,
        loads: args.loads,
        repeat: args.repeat,
        seed: args.seed,
    };
    let result = measure(&config).map_err(|e| CliError::usage(e.to_string()))?;
    if args.json {
        let json = serde_json::json!({
            "mib": args.mib,
            "loads": args.loads,
            "lines": result.lines,
            "runs_ns": result.runs_ns,
            "median_ns": result.median_ns,
            "huge_page_bytes": result.huge_page_bytes,
        });
        println!("{json}");
    } else {
        let runs: Vec<String> = result.runs_ns.iter().map(|ns| format!("{ns:.1}")).collect();
        let huge = match result.huge_page_bytes {
            Some(bytes) => format!("{} MiB of it in huge pages", bytes >> 20),
            None => "huge pages unknown".to_string(),
        };
        println!(
            "load latency over {} MiB: {:.1} ns (median of {} runs of {} dependent loads; runs: {}; {})",
            args.mib,
            result.median_ns,
            args.repeat,
            args.loads,
            runs.join(", "),
            huge
        );
    }
    Ok(())
}
