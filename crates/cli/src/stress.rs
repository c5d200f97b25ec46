//! `mmkit stress`: long randomized runs of the runtime on real threads, with a canary
//! painted across every block (its address and a generation) and checked when it is
//! freed, and a full accounting of every page at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use mmkit_core::topology::CacheInfo;
use mmkit_core::topology::ZoneSpec;
use mmkit_core::{Order, PageAllocator, Pfn, Policy, Topology, ZoneType};
use mmkit_runtime::{FaultConfig, PageBlock, PagePool, PoolError};
use serde::Serialize;

use crate::size::parse_bytes;
use crate::{limits, CliError};

/// What the threads do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Random orders (mostly cheap, some THP and MAX_ORDER), random frees.
    Random,
    /// Half the threads allocate and hand blocks to the other half, who free them
    /// (lmbench AF_UNIX's shape: remote frees).
    ProducerConsumer,
    /// Bulk allocation of order-0 arrays and batched frees.
    Bulk,
    /// All of the above plus drains of every CPU, vmstat ticks, setting changes, CPU
    /// offline/online and fault injection.
    Mixed,
}

/// Arguments of `mmkit stress`.
#[derive(Args, Debug)]
pub struct StressArgs {
    /// Threads to run.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// How long to run, in seconds (every thread takes at least 1,000 steps).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// What the threads do.
    #[arg(long, value_enum, default_value_t = Pattern::Mixed)]
    pub pattern: Pattern,
    /// Pool size (bytes, or with K/M/G).
    #[arg(long, default_value = "256M")]
    pub memory: String,
    /// Virtual CPUs of the pool; default: the threads.
    #[arg(long)]
    pub cpus: Option<u32>,
    /// Policy preset.
    #[arg(long, default_value = "v6.7")]
    pub policy: String,
    /// Seed of the threads' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    frees: AtomicU64,
    pages: AtomicU64,
    out_of_memory: AtomicU64,
    injected: AtomicU64,
    violations: AtomicU64,
    drains: AtomicU64,
}

#[derive(Serialize)]
struct Report {
    pattern: Pattern,
    policy: &'static str,
    threads: u32,
    cpus: u32,
    seconds: f64,
    operations: u64,
    operations_per_second: f64,
    allocations: u64,
    frees: u64,
    pages_allocated: u64,
    out_of_memory: u64,
    injected_failures: u64,
    drains: u64,
    violations: u64,
    accounting: String,
}

/// Run `mmkit stress`.
pub fn run(args: &StressArgs) -> Result<(), CliError> {
    if args.threads == 0 {
        return Err(CliError::usage("--threads: need at least one thread"));
    }
    limits::check_threads("--threads", u64::from(args.threads))?;
    let duration = limits::check_seconds("--seconds", args.seconds)?;
    let policy = crate::machine::policy_preset(&args.policy)?;
    let cpus = args.cpus.unwrap_or(args.threads);
    let memory_bytes = parse_bytes(&args.memory)
        .ok()
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| CliError::usage(format!("--memory {:?} is not a size", args.memory)))?;
    // The pool maps --memory and boots an allocator for it: a mem_map of 16 bytes per
    // 4 KiB page and a pageset per CPU in each zone (boot_bytes), beside the memory itself.
    limits::check_memory(
        &format!("--memory {} on --cpus {cpus}", args.memory),
        u128::from(pool_boot_bytes(memory_bytes, cpus)) + memory_bytes as u128,
    )?;
    let pool = PagePool::builder()
        .memory_bytes(memory_bytes)
        .cpus(cpus)
        .policy(policy)
        .build()
        .map_err(|e| CliError::usage(format!("--memory and --cpus: {e}")))?;
    let counters = Counters::default();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let bar = progress(args, duration);
    let (tx, rx) = mpsc::channel::<(PageBlock<'_>, u64)>();
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|s| {
        for t in 0..args.threads {
            let worker = Worker {
                pool: &pool,
                counters: &counters,
                stop: &stop,
                rng: Rng::new(args.seed, t),
                thread: t,
                pattern: args.pattern,
            };
            let (tx, rx) = (tx.clone(), &rx);
            s.spawn(move || worker.run(&tx, rx));
        }
        drop(tx);
        while started.elapsed() < duration {
            std::thread::sleep(Duration::from_millis(100));
            bar.set_position(started.elapsed().as_millis() as u64);
        }
        stop.store(true, Relaxed);
    });
    bar.finish_and_clear();
    // Blocks sent after the last consumer left: check and free them before accounting.
    let leftovers: Vec<_> = rx
        .into_inner()
        .map(|rx| rx.try_iter().collect())
        .unwrap_or_default();
    for (block, generation) in leftovers {
        counters
            .violations
            .fetch_add(block.canary_damage(generation), Relaxed);
        counters.frees.fetch_add(1, Relaxed);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let accounting = account(&pool);
    let report = report(args, policy, cpus, elapsed, &counters, accounting);
    print(&report, args.json)?;
    if report.violations > 0 || report.accounting != "ok" {
        return Err(CliError::failed(format!(
            "{} canary violations; accounting: {}",
            report.violations, report.accounting
        )));
    }
    Ok(())
}

/// What the pool's allocator allocates at boot for `memory_bytes` in 4 KiB pages on
/// `cpus` CPUs (one node), or 0 when the builder will refuse the machine itself.
fn pool_boot_bytes(memory_bytes: usize, cpus: u32) -> u64 {
    let pages = memory_bytes as u64 >> 12;
    let zone = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: Pfn(0),
        spanned: pages,
        present: pages,
        managed: pages,
    };
    let llc = CacheInfo {
        llc_bytes: 32 << 20,
        llc_shared_cpus: 1,
    };
    Topology::new(vec![zone], vec![cpus], llc, false)
        .map_or(0, |topology| PageAllocator::boot_bytes(&topology))
}

fn progress(args: &StressArgs, duration: Duration) -> ProgressBar {
    if args.json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(duration.as_millis() as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} stress {elapsed}/{duration} [{bar:40}]")
    {
        bar.set_style(style);
    }
    bar
}

/// After the threads: every block was freed, so drain the pagesets and check that every
/// page is back on the buddy lists and the structures verify.
fn account(pool: &PagePool) -> String {
    for cpu in 0..pool.topology().nr_cpus() {
        pool.set_cpu_online(cpu, true);
    }
    pool.drain_all(None);
    match pool.verify() {
        Err(e) => format!("verify failed: {e}"),
        Ok(census) => {
            let allocated: u64 = census.iter().map(|c| c.allocated).sum();
            let pcp: u64 = census.iter().map(|c| c.pcp).sum();
            let free: u64 = census.iter().map(|c| c.free).sum();
            let managed: u64 = pool.zones().map(|z| z.managed()).sum();
            if allocated == 0 && pcp == 0 && free == managed {
                "ok".into()
            } else {
                format!("{allocated} pages still allocated, {pcp} on pagesets, {free} of {managed} free")
            }
        }
    }
}

fn report(
    args: &StressArgs,
    policy: Policy,
    cpus: u32,
    elapsed: f64,
    c: &Counters,
    accounting: String,
) -> Report {
    let operations = c.allocs.load(Relaxed) + c.frees.load(Relaxed);
    Report {
        pattern: args.pattern,
        policy: policy.name,
        threads: args.threads,
        cpus,
        seconds: elapsed,
        operations,
        operations_per_second: operations as f64 / elapsed,
        allocations: c.allocs.load(Relaxed),
        frees: c.frees.load(Relaxed),
        pages_allocated: c.pages.load(Relaxed),
        out_of_memory: c.out_of_memory.load(Relaxed),
        injected_failures: c.injected.load(Relaxed),
        drains: c.drains.load(Relaxed),
        violations: c.violations.load(Relaxed),
        accounting,
    }
}

fn print(report: &Report, json: bool) -> Result<(), CliError> {
    if json {
        return crate::output::print_json(report);
    }
    println!(
        "pattern {:?}, policy {}, {} threads on {} CPUs, {:.1} s",
        report.pattern, report.policy, report.threads, report.cpus, report.seconds
    );
    println!(
        "operations      {:>14} ({:.0}/s)",
        report.operations, report.operations_per_second
    );
    println!(
        "allocations     {:>14} ({} pages)",
        report.allocations, report.pages_allocated
    );
    println!("frees           {:>14}", report.frees);
    println!("out of memory   {:>14}", report.out_of_memory);
    println!("injected faults {:>14}", report.injected_failures);
    println!("drains          {:>14}", report.drains);
    println!("violations      {:>14}", report.violations);
    println!("accounting      {:>14}", report.accounting);
    Ok(())
}

/// xorshift64*, seeded per thread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, thread: u32) -> Rng {
        Rng((seed ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(thread as u64 * 2 + 1) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

type Mailbox<'p> = mpsc::Sender<(PageBlock<'p>, u64)>;
type Inbox<'p> = std::sync::Mutex<mpsc::Receiver<(PageBlock<'p>, u64)>>;

struct Worker<'p> {
    pool: &'p PagePool,
    counters: &'p Counters,
    stop: &'p AtomicBool,
    rng: Rng,
    thread: u32,
    pattern: Pattern,
}

/// Steps every thread takes whatever `--seconds` says: a short run on a busy machine,
/// whose threads the scheduler starts late, still exercises every path (a test's 1 s run
/// did almost nothing under a parallel build). A few milliseconds on an idle machine.
const MIN_STEPS: u64 = 1000;

impl<'p> Worker<'p> {
    fn run(mut self, tx: &Mailbox<'p>, rx: &Inbox<'p>) {
        let mut held: Vec<(PageBlock<'p>, u64)> = Vec::new();
        let mut generation = (self.thread as u64) << 48;
        let mut steps = 0u64;
        while steps < MIN_STEPS || !self.stop.load(Relaxed) {
            steps += 1;
            generation += 1;
            match self.pattern {
                Pattern::Random => self.random_step(&mut held, generation),
                Pattern::ProducerConsumer => {
                    self.producer_consumer_step(&mut held, generation, tx, rx)
                }
                Pattern::Bulk => self.bulk_step(generation),
                Pattern::Mixed => self.mixed_step(&mut held, generation, tx, rx),
            }
        }
        for (block, g) in held.drain(..) {
            self.free(block, g);
        }
        // Consumers empty the channel on the way out.
        while let Ok(Ok((block, g))) = rx.lock().map(|rx| rx.try_recv()) {
            self.free(block, g);
        }
    }

    fn alloc(&mut self, order: Order, generation: u64) -> Option<(PageBlock<'p>, u64)> {
        match self.pool.alloc(order) {
            Ok(mut block) => {
                block.write_canary(generation);
                self.counters.allocs.fetch_add(1, Relaxed);
                self.counters.pages.fetch_add(order.pages(), Relaxed);
                Some((block, generation))
            }
            Err(PoolError::Injected) => {
                self.counters.injected.fetch_add(1, Relaxed);
                None
            }
            Err(_) => {
                self.counters.out_of_memory.fetch_add(1, Relaxed);
                None
            }
        }
    }

    fn free(&self, block: PageBlock<'p>, generation: u64) {
        self.counters
            .violations
            .fetch_add(block.canary_damage(generation), Relaxed);
        self.counters.frees.fetch_add(1, Relaxed);
        drop(block);
    }

    fn random_order(&mut self) -> Order {
        let order = match self.rng.below(100) {
            0..=59 => 0,
            60..=74 => 1,
            75..=84 => 2,
            85..=94 => 3,
            95..=98 => 9,
            _ => 10,
        };
        Order::new(order).expect("≤ MAX_ORDER")
    }

    fn random_step(&mut self, held: &mut Vec<(PageBlock<'p>, u64)>, generation: u64) {
        if held.len() < 64 && self.rng.below(2) == 0 {
            let order = self.random_order();
            if let Some(item) = self.alloc(order, generation) {
                held.push(item);
            }
        } else if !held.is_empty() {
            let (block, g) = held.swap_remove(self.rng.below(held.len() as u64) as usize);
            self.free(block, g);
        }
    }

    fn producer_consumer_step(
        &mut self,
        held: &mut Vec<(PageBlock<'p>, u64)>,
        generation: u64,
        tx: &Mailbox<'p>,
        rx: &Inbox<'p>,
    ) {
        if self.thread % 2 == 0 {
            let order = Order::new(self.rng.below(4) as u8).expect("≤ 3");
            if let Some(item) = self.alloc(order, generation) {
                if let Err(mpsc::SendError(item)) = tx.send(item) {
                    held.push(item);
                }
            }
        } else {
            let item = rx
                .lock()
                .ok()
                .and_then(|rx| rx.recv_timeout(Duration::from_millis(1)).ok());
            if let Some((block, g)) = item {
                self.free(block, g);
            }
        }
    }

    fn bulk_step(&mut self, generation: u64) {
        let wanted = 1 + self.rng.below(64) as usize;
        let mut blocks = match self.pool.alloc_bulk_blocks(wanted) {
            Ok(blocks) => blocks,
            Err(_) => {
                self.counters.out_of_memory.fetch_add(1, Relaxed);
                return;
            }
        };
        self.counters.allocs.fetch_add(blocks.len() as u64, Relaxed);
        self.counters.pages.fetch_add(blocks.len() as u64, Relaxed);
        for block in &mut blocks {
            block.write_canary(generation);
        }
        for block in &blocks {
            self.counters
                .violations
                .fetch_add(block.canary_damage(generation), Relaxed);
        }
        self.counters.frees.fetch_add(blocks.len() as u64, Relaxed);
        self.pool.free_blocks(blocks);
    }

    fn mixed_step(
        &mut self,
        held: &mut Vec<(PageBlock<'p>, u64)>,
        generation: u64,
        tx: &Mailbox<'p>,
        rx: &Inbox<'p>,
    ) {
        match self.rng.below(1000) {
            0..=899 => self.random_step(held, generation),
            900..=949 => self.producer_consumer_step(held, generation, tx, rx),
            950..=979 => self.bulk_step(generation),
            980..=989 => {
                self.pool.drain_all(None);
                self.counters.drains.fetch_add(1, Relaxed);
            }
            990..=993 => {
                self.pool.vmstat_tick(self.pool.caller().cpu);
            }
            994..=996 => {
                let mut settings = self.pool.settings();
                settings.percpu_pagelist_high_fraction = [0, 8, 32][self.rng.below(3) as usize];
                settings.min_free_kbytes =
                    mmkit_core::settings::MinFreeKbytes::Explicit(1024 << self.rng.below(4));
                let _ = self.pool.set_settings(settings);
            }
            997..=998 => {
                let cpus = self.pool.topology().nr_cpus();
                let cpu = self.rng.below(cpus as u64) as u32;
                let online = self.rng.below(2) == 0;
                self.pool.set_cpu_online(cpu, online);
            }
            _ => {
                let probability = [0.0, 0.01, 0.1][self.rng.below(3) as usize];
                self.pool.set_fault_injection(FaultConfig {
                    probability,
                    ..FaultConfig::default()
                });
            }
        }
    }
}
