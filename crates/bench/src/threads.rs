//! Multi-thread patterns: order-0 pages on T threads for a fixed time.
//!
//! - `local`: every thread allocates a batch of pages, touches them, and frees them
//!   itself (the per-CPU caches' best case).
//! - `remote`: threads pair up; the producer of a pair allocates batches of pages and
//!   sends them to the consumer, which frees them (lmbench's AF_UNIX bandwidth test:
//!   the sender's kernel allocates socket-buffer pages, the receiver frees them; a
//!   batch of 16 pages is one 64 KiB message). Freed pages pile up on the consumer's
//!   side; the producer must get them back through the allocator's shared structures.
//! - `bulk-remote`: `remote` with each batch allocated in one `alloc_bulk` call and freed
//!   in one `free_bulk` call; allocators without a bulk API do a loop of single calls.
//!
//! Batches travel in vectors through a bounded `std::sync::mpsc::sync_channel` (4
//! batches deep), and empty vectors come back through a second one, so no heap
//! allocation happens per batch; every allocator uses the same channels. Both ends poll
//! (`try_send`/`try_recv` with `spin_loop`, yielding after a while) instead of blocking:
//! a blocking hand-off parks the waiting thread in the kernel, and its futex wake-up
//! (≈ 16 µs a batch on the measuring VM) then measured the channel, not the allocator.
//! Each page gets one `u64` written after allocation and read (and checked) before its
//! free.
//!
//! Latency: one operation in `sample_every` (a single alloc or free, or one bulk call)
//! is timed with `rdtsc`, less an empty pair's cost; the others run untimed, so the
//! clock costs little. A `sample_every` that divides an allocator's batch period (64:
//! the page_pool cache's refill and its recyclers' flush) times the same operation of
//! every batch and skews the percentiles; `mmkit bench threads` defaults to 61. Throughput is pages freed ÷ wall time from the start barrier to
//! the last thread's exit.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mmkit_core::Order;
use serde::Serialize;

use crate::contestant::{Contestant, Touch};
use crate::tsc;
use crate::BenchError;

/// Batches in flight between a producer and its consumer.
const CHANNEL_DEPTH: usize = 4;

/// Polls of an empty or full channel before a waiting thread starts yielding its CPU.
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

/// Latency samples kept per thread and operation (8 MiB of `u64`).
const SAMPLES_MAX: usize = 1 << 20;

/// A multi-thread pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Each thread frees what it allocated.
    Local,
    /// Producers allocate, consumers on other threads free.
    Remote,
    /// `Remote` with bulk calls.
    BulkRemote,
}

impl Pattern {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Local => "local",
            Pattern::Remote => "remote",
            Pattern::BulkRemote => "bulk-remote",
        }
    }
}

/// What to run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ThreadsConfig {
    /// Threads (for the remote patterns, pairs of them: an odd last thread idles).
    pub threads: u32,
    /// The pattern.
    pub pattern: Pattern,
    /// Run time per allocator.
    pub seconds: f64,
    /// Pages per batch.
    pub batch: usize,
    /// One operation in this many is timed.
    pub sample_every: u64,
    /// What is written into each page and read back.
    pub touch: Touch,
    /// Cycles of an empty timed region.
    pub overhead_cycles: u64,
}

/// What one allocator did in one run.
#[derive(Clone, Debug, Default)]
pub struct ThreadsOutcome {
    /// Pages allocated and freed.
    pub pages: u64,
    /// Wall time.
    pub seconds: f64,
    /// Timed alloc operations, TSC cycles each.
    pub alloc_cycles: Vec<u64>,
    /// Timed free operations, TSC cycles each.
    pub free_cycles: Vec<u64>,
    /// Pages per timed operation (1, or the batch for bulk calls).
    pub pages_per_op: usize,
}

/// Per-thread latency sampler.
struct Sampler {
    every: u64,
    count: u64,
    overhead: u64,
    cycles: Vec<u64>,
}

impl Sampler {
    fn new(config: &ThreadsConfig) -> Sampler {
        Sampler {
            every: config.sample_every.max(1),
            count: 0,
            overhead: config.overhead_cycles,
            cycles: Vec::with_capacity(SAMPLES_MAX.min(1 << 16)),
        }
    }

    /// Run `op`, timing it if its turn has come: the first operation, then one in
    /// `every`. With the first batch of every thread run whatever the clock says, each
    /// thread's result has pages and samples however late the scheduler started it, so a
    /// short run on a loaded machine still reports (a test's 0.05 s run once had none).
    #[inline(always)]
    fn run<R>(&mut self, op: impl FnOnce() -> R) -> R {
        self.count += 1;
        if (self.count - 1) % self.every != 0 || self.cycles.len() >= SAMPLES_MAX {
            return op();
        }
        let t0 = tsc::now();
        let result = op();
        let t1 = tsc::now();
        self.cycles.push((t1 - t0).saturating_sub(self.overhead));
        result
    }
}

/// What a thread reports.
struct ThreadResult {
    pages: u64,
    alloc: Sampler,
    free: Sampler,
    intact: bool,
}

/// Run `config.pattern` on `contestant`. `bulk` forces bulk calls in every pattern.
pub fn run_pattern<C: Contestant>(
    contestant: &C,
    bulk: bool,
    config: &ThreadsConfig,
) -> Result<ThreadsOutcome, BenchError> {
    if config.threads == 0 || config.batch == 0 || config.seconds.is_nan() || config.seconds <= 0.0
    {
        return Err(BenchError::new(
            "need at least one thread, a batch and a positive duration",
        ));
    }
    let bulk = bulk || config.pattern == Pattern::BulkRemote;
    let stop = AtomicBool::new(false);
    let (results, seconds) = match config.pattern {
        Pattern::Local => run_local(contestant, bulk, config, &stop),
        Pattern::Remote | Pattern::BulkRemote => {
            if config.threads < 2 {
                return Err(BenchError::new(
                    "the remote patterns need at least two threads",
                ));
            }
            run_remote(contestant, bulk, config, &stop)
        }
    };
    if results.iter().any(|r| !r.intact) {
        return Err(BenchError::new(
            "a page's contents changed between allocation and free: pages overlap",
        ));
    }
    let mut outcome = ThreadsOutcome {
        seconds,
        pages_per_op: if bulk { config.batch } else { 1 },
        ..ThreadsOutcome::default()
    };
    for result in results {
        outcome.pages += result.pages;
        outcome.alloc_cycles.extend(result.alloc.cycles);
        outcome.free_cycles.extend(result.free.cycles);
    }
    Ok(outcome)
}

/// Start the threads' clocks together; stop them after `seconds`. Returns the wall time.
fn time_run(barrier: &Barrier, stop: &AtomicBool, seconds: f64) -> Instant {
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Relaxed);
    start
}

fn run_local<C: Contestant>(
    contestant: &C,
    bulk: bool,
    config: &ThreadsConfig,
    stop: &AtomicBool,
) -> (Vec<ThreadResult>, f64) {
    let barrier = Barrier::new(config.threads as usize + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..config.threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || local_worker(contestant, bulk, config, t, barrier, stop))
            })
            .collect();
        let start = time_run(&barrier, stop, config.seconds);
        let results = workers
            .into_iter()
            .map(|w| w.join().expect("a benchmark thread panicked"))
            .collect();
        (results, start.elapsed().as_secs_f64())
    })
}

fn local_worker<C: Contestant>(
    contestant: &C,
    bulk: bool,
    config: &ThreadsConfig,
    thread: u32,
    barrier: &Barrier,
    stop: &AtomicBool,
) -> ThreadResult {
    contestant.enter_thread(thread);
    let mut result = ThreadResult {
        pages: 0,
        alloc: Sampler::new(config),
        free: Sampler::new(config),
        intact: true,
    };
    let mut blocks = Vec::with_capacity(config.batch);
    barrier.wait();
    // The first batch goes whatever `stop` says (see `Sampler::run`).
    loop {
        allocate_batch(contestant, bulk, config, &mut result.alloc, &mut blocks);
        result.pages += blocks.len() as u64;
        result.intact &= free_batch(contestant, bulk, config, &mut result.free, &mut blocks);
        if stop.load(Relaxed) {
            break;
        }
    }
    result
}

/// Fill `blocks` with a batch of order-0 pages and write their indexes.
#[inline(always)]
fn allocate_batch<'a, C: Contestant>(
    contestant: &'a C,
    bulk: bool,
    config: &ThreadsConfig,
    sampler: &mut Sampler,
    blocks: &mut Vec<C::Block<'a>>,
) {
    if bulk {
        sampler.run(|| contestant.alloc_bulk(config.batch, blocks));
        for (i, block) in blocks.iter_mut().enumerate() {
            config.touch.write(block, i as u64);
        }
    } else {
        for i in 0..config.batch {
            let Some(mut block) = sampler.run(|| contestant.alloc(Order::ZERO)) else {
                break;
            };
            config.touch.write(&mut block, i as u64);
            blocks.push(block);
        }
    }
}

/// Check and free every block of `blocks`, last first; `false` if a word changed.
#[inline(always)]
fn free_batch<'a, C: Contestant>(
    contestant: &'a C,
    bulk: bool,
    config: &ThreadsConfig,
    sampler: &mut Sampler,
    blocks: &mut Vec<C::Block<'a>>,
) -> bool {
    let mut intact = true;
    if bulk {
        for (i, block) in blocks.iter().enumerate().rev() {
            intact &= config.touch.check(block, i as u64);
        }
        sampler.run(|| contestant.free_bulk(blocks));
    } else {
        while let Some(block) = blocks.pop() {
            intact &= config.touch.check(&block, blocks.len() as u64);
            sampler.run(|| contestant.free(block));
        }
    }
    intact
}

fn run_remote<C: Contestant>(
    contestant: &C,
    bulk: bool,
    config: &ThreadsConfig,
    stop: &AtomicBool,
) -> (Vec<ThreadResult>, f64) {
    let pairs = config.threads / 2;
    let barrier = Barrier::new(2 * pairs as usize + 1);
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for pair in 0..pairs {
            let (full_tx, full_rx) = sync_channel(CHANNEL_DEPTH);
            let (empty_tx, empty_rx) = sync_channel(CHANNEL_DEPTH + 2);
            for _ in 0..=CHANNEL_DEPTH {
                empty_tx
                    .send(Vec::with_capacity(config.batch))
                    .expect("the receiver is alive");
            }
            let barrier = &barrier;
            workers.push(s.spawn(move || {
                producer(
                    contestant,
                    bulk,
                    config,
                    2 * pair,
                    barrier,
                    stop,
                    full_tx,
                    empty_rx,
                )
            }));
            workers.push(s.spawn(move || {
                consumer(
                    contestant,
                    bulk,
                    config,
                    2 * pair + 1,
                    barrier,
                    full_rx,
                    empty_tx,
                )
            }));
        }
        let start = time_run(&barrier, stop, config.seconds);
        let results = workers
            .into_iter()
            .map(|w| w.join().expect("a benchmark thread panicked"))
            .collect();
        (results, start.elapsed().as_secs_f64())
    })
}

#[expect(clippy::too_many_arguments, reason = "one thread's whole setup")]
fn producer<'a, C: Contestant>(
    contestant: &'a C,
    bulk: bool,
    config: &ThreadsConfig,
    thread: u32,
    barrier: &Barrier,
    stop: &AtomicBool,
    full: SyncSender<Vec<C::Block<'a>>>,
    empty: Receiver<Vec<C::Block<'a>>>,
) -> ThreadResult {
    contestant.enter_thread(thread);
    let mut sampler = Sampler::new(config);
    barrier.wait();
    // The first batch goes whatever `stop` says (see `Sampler::run`): the channel of
    // empty vectors starts full, so it is there at once.
    let mut first = true;
    while let Some(mut blocks) = receive(&empty, (!first).then_some(stop)) {
        first = false;
        allocate_batch(contestant, bulk, config, &mut sampler, &mut blocks);
        if !send(&full, blocks) {
            break;
        }
    }
    ThreadResult {
        pages: 0,
        alloc: sampler,
        free: Sampler::new(config),
        intact: true,
    }
}

fn consumer<'a, C: Contestant>(
    contestant: &'a C,
    bulk: bool,
    config: &ThreadsConfig,
    thread: u32,
    barrier: &Barrier,
    full: Receiver<Vec<C::Block<'a>>>,
    empty: SyncSender<Vec<C::Block<'a>>>,
) -> ThreadResult {
    contestant.enter_thread(thread);
    let mut result = ThreadResult {
        pages: 0,
        alloc: Sampler::new(config),
        free: Sampler::new(config),
        intact: true,
    };
    barrier.wait();
    // Ends when the producer has stopped and every batch it sent is freed.
    while let Some(mut blocks) = receive(&full, None) {
        result.pages += blocks.len() as u64;
        result.intact &= free_batch(contestant, bulk, config, &mut result.free, &mut blocks);
        // The producer may have left already; then the vector is simply dropped.
        send(&empty, blocks);
    }
    result
}

/// Wait for a batch by polling; `None` once the sender is gone (or `stop` is set).
fn receive<T>(channel: &Receiver<T>, stop: Option<&AtomicBool>) -> Option<T> {
    let mut spins = 0u32;
    loop {
        if stop.is_some_and(|s| s.load(Relaxed)) {
            return None;
        }
        match channel.try_recv() {
            Ok(value) => return Some(value),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => wait(&mut spins),
        }
    }
}

/// Hand a batch over by polling; `false` if the receiver is gone.
fn send<T>(channel: &SyncSender<T>, value: T) -> bool {
    let mut value = value;
    let mut spins = 0u32;
    loop {
        match channel.try_send(value) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                value = back;
                wait(&mut spins);
            }
        }
    }
}

/// One poll's pause: a spin hint, or a yield once the wait has gone on (more threads
/// than CPUs).
fn wait(spins: &mut u32) {
    *spins += 1;
    if *spins < SPINS_BEFORE_YIELD {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One allocator's line in the report.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadsResult {
    /// Allocator name.
    pub allocator: &'static str,
    /// Pages allocated and freed.
    pub pages: u64,
    /// Wall time.
    pub seconds: f64,
    /// Pages ÷ wall time.
    pub pages_per_second: f64,
    /// What one timed operation is: `"page"` or `"call of B pages"`.
    pub op: String,
    /// Median alloc operation, ns.
    pub alloc_ns_p50: Option<f64>,
    /// 99th percentile alloc operation, ns.
    pub alloc_ns_p99: Option<f64>,
    /// Median free operation, ns.
    pub free_ns_p50: Option<f64>,
    /// 99th percentile free operation, ns.
    pub free_ns_p99: Option<f64>,
    /// Timed alloc operations.
    pub alloc_samples: usize,
    /// Timed free operations.
    pub free_samples: usize,
    /// mmkit's pages per second ÷ this allocator's (> 1: mmkit is faster).
    pub ratio_to_mmkit: Option<f64>,
}

/// Everything `mmkit bench threads` reports.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadsReport {
    /// `"threads"`.
    pub benchmark: &'static str,
    /// Where it ran.
    pub machine: crate::Machine,
    /// What ran.
    pub config: ThreadsConfig,
    /// Threads that worked (the remote patterns use pairs).
    pub threads_used: u32,
    /// Who.
    pub allocators: Vec<crate::pagealloc::AllocatorInfo>,
    /// One line per allocator.
    pub results: Vec<ThreadsResult>,
    /// The product target this pattern checks.
    pub targets: Vec<crate::TargetCheck>,
}

/// Run `config` for every runner in turn.
pub fn run(
    config: &ThreadsConfig,
    runners: &[Box<dyn crate::runner::Runner>],
    clock: &tsc::TscClock,
    progress: &mut dyn FnMut(crate::Progress<'_>),
) -> Result<ThreadsReport, BenchError> {
    let mut results = Vec::new();
    for (done, runner) in runners.iter().enumerate() {
        progress(crate::Progress {
            done,
            total: runners.len(),
            label: runner.name(),
        });
        let mut outcome = runner.threads(config)?;
        runner
            .audit()
            .map_err(|e| BenchError::new(format!("{} after the run: {e}", runner.name())))?;
        let ns = |cycles: &mut Vec<u64>, q: f64| {
            crate::stats::quantile_u64(cycles, q).map(|c| clock.ns(c as f64))
        };
        results.push(ThreadsResult {
            allocator: runner.name(),
            pages: outcome.pages,
            seconds: outcome.seconds,
            pages_per_second: outcome.pages as f64 / outcome.seconds,
            op: if outcome.pages_per_op == 1 {
                "page".into()
            } else {
                format!("call of {} pages", outcome.pages_per_op)
            },
            alloc_ns_p50: ns(&mut outcome.alloc_cycles, 0.5),
            alloc_ns_p99: ns(&mut outcome.alloc_cycles, 0.99),
            free_ns_p50: ns(&mut outcome.free_cycles, 0.5),
            free_ns_p99: ns(&mut outcome.free_cycles, 0.99),
            alloc_samples: outcome.alloc_cycles.len(),
            free_samples: outcome.free_cycles.len(),
            ratio_to_mmkit: None,
        });
    }
    let reference = results
        .iter()
        .find(|r| r.allocator == crate::peers::REFERENCE)
        .map(|r| r.pages_per_second);
    for result in &mut results {
        result.ratio_to_mmkit = reference.map(|m| m / result.pages_per_second);
    }
    let threads_used = match config.pattern {
        Pattern::Local => config.threads,
        Pattern::Remote | Pattern::BulkRemote => config.threads / 2 * 2,
    };
    Ok(ThreadsReport {
        benchmark: "threads",
        machine: crate::Machine::probe(clock),
        config: *config,
        threads_used,
        allocators: runners
            .iter()
            .map(|r| crate::pagealloc::AllocatorInfo {
                name: r.name(),
                setup: r.describe(),
            })
            .collect(),
        targets: vec![throughput_target(config.pattern, &results)],
        results,
    })
}

fn throughput_target(pattern: Pattern, results: &[ThreadsResult]) -> crate::TargetCheck {
    let target = match pattern {
        Pattern::Remote => "remote (producer/consumer) throughput above every peer in the same run",
        Pattern::Local => "local throughput above every peer in the same run (no product target; for reference)",
        Pattern::BulkRemote => "bulk-remote throughput above every peer in the same run (no product target; for reference)",
    }
    .to_owned();
    let mmkit = results
        .iter()
        .find(|r| r.allocator == crate::peers::REFERENCE);
    let peers: Vec<&ThreadsResult> = results
        .iter()
        .filter(|r| !r.allocator.starts_with("mmkit"))
        .collect();
    let (Some(mmkit), false) = (mmkit, peers.is_empty()) else {
        return crate::TargetCheck {
            target,
            measured: "not measured (needs mmkit and a peer)".into(),
            met: None,
        };
    };
    let behind: Vec<String> = peers
        .iter()
        .filter(|p| p.pages_per_second >= mmkit.pages_per_second)
        .map(|p| {
            format!(
                "{} ({:.2} M pages/s, mmkit {:.2}× its throughput)",
                p.allocator,
                p.pages_per_second / 1e6,
                mmkit.pages_per_second / p.pages_per_second
            )
        })
        .collect();
    let measured = if behind.is_empty() {
        format!(
            "mmkit {:.2} M pages/s, above all {} peers",
            mmkit.pages_per_second / 1e6,
            peers.len()
        )
    } else {
        format!(
            "mmkit {:.2} M pages/s; at or below {}",
            mmkit.pages_per_second / 1e6,
            behind.join(", ")
        )
    };
    crate::TargetCheck {
        target,
        measured: measured + &other_entries(mmkit, &peers, results),
        met: Some(behind.is_empty()),
    }
}

/// How mmkit's other entries (`mmkit-bulk`, `mmkit-cache`, …) fare against the peers, for
/// the record: the verdict is the `mmkit` contestant's.
fn other_entries(
    mmkit: &ThreadsResult,
    peers: &[&ThreadsResult],
    results: &[ThreadsResult],
) -> String {
    let best_peer = peers.iter().map(|p| p.pages_per_second).fold(0.0, f64::max);
    let others: Vec<String> = results
        .iter()
        .filter(|r| r.allocator.starts_with("mmkit") && r.allocator != mmkit.allocator)
        .map(|r| {
            format!(
                "{} {:.2} ({})",
                r.allocator,
                r.pages_per_second / 1e6,
                if r.pages_per_second > best_peer {
                    "above all peers"
                } else {
                    "not above all peers"
                }
            )
        })
        .collect();
    if others.is_empty() {
        String::new()
    } else {
        format!(". Other mmkit entries, M pages/s: {}", others.join(", "))
    }
}
