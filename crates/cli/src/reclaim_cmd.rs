//! `mmkit reclaim`: the reclaim experiments of Yin 2023 and Wang 2019, and Yosry Ahmed's
//! congestion-bit fix (threads: `docs/reference/sources.md`).
//!
//! - `pageout`: Yin 2023's MADV_PAGEOUT loop on real memory and real files, per-page
//!   against batched rmap removal; `--fork N` has each worker's process fork N children
//!   that map the same folios and exit, so the batched removal also runs on folios mapped
//!   by several processes.
//! - `lru-size`: Wang 2019's many-cgroups direct-reclaim case, `lruvec_lru_size` from zone
//!   sizes against per-CPU counter sums, for several CPU counts.
//! - `congestion`: kswapd marks a node congested, then root `memory.reclaim` runs; with one
//!   shared bit the node is unthrottled before it is balanced.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mmkit_core::mm::lru::LruList;
use mmkit_core::mm::memcg::MemcgId;
use mmkit_core::mm::vmscan::MAX_RECLAIM_RETRIES;
use mmkit_core::mm::{Memory, MmError, NoIo};
use mmkit_core::page_alloc::{Caller, WatermarkKind};
use mmkit_core::policy::{CongestionBits, LruSizePolicy, MmPolicy, PageoutSplit, RmapRemoval};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::CacheInfo;
use mmkit_core::topology::ZoneSpec;
use mmkit_core::{Order, PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};
use mmkit_runtime::{MappedMemory, PagePool};
use serde::Serialize;

use crate::output::print_json;
use crate::{limits, output, CliError};

/// Arguments of `mmkit reclaim`.
#[derive(Args, Debug)]
pub struct ReclaimArgs {
    #[command(subcommand)]
    command: ReclaimCommand,
}

#[derive(Subcommand, Debug)]
enum ReclaimCommand {
    /// Yin 2023: W workers each map a file with large page-cache folios, read every page,
    /// then MADV_PAGEOUT the mapping, in a loop; loops per second for per-page against
    /// batched rmap removal. Real memory, real files.
    Pageout(PageoutArgs),
    /// Wang 2019: many cgroups under direct reclaim; the cost of sizing LRU lists from zone
    /// sizes against summing per-CPU counters, for several CPU counts.
    LruSize(LruSizeArgs),
    /// Linux 6.5's congestion bits (1bc545bff45c): kswapd marks a node congested, root memory.reclaim runs; one shared bit
    /// against separate cgroup and node bits.
    Congestion(CongestionArgs),
}

/// Arguments of `mmkit reclaim pageout`.
#[derive(Args, Debug)]
struct PageoutArgs {
    /// Worker threads, each with its own file and mapping (Yin 2023: 96 processes).
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Seconds each policy runs per repetition.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Repetitions, alternating the policies; the table shows medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// File size per worker in KiB (Yin 2023: 2048).
    #[arg(long, default_value_t = 2048)]
    file_kib: u64,
    /// Order of the page-cache folios (4 = 64 KiB).
    #[arg(long, default_value_t = 4)]
    folio_order: u8,
    /// Children each worker's process forks in every loop, after reading the mapping: each
    /// reads every page (mapping the file's folios a second, third, … time) and exits
    /// before the pageout, so zap's rmap removal runs on folios that other processes
    /// still map.
    #[arg(long, default_value_t = 0)]
    fork: u32,
    /// Split large folios as Linux 6.7's MADV_PAGEOUT does; by default they are kept
    /// whole, as in Yin 2023's patched kernel (and Linux ≥ 6.10 for covered folios).
    #[arg(long)]
    split: bool,
    /// Where the files and the swap file go (default: a folder in the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// `file`: faults read the real file into the frames (the loop then mostly measures
    /// that copy); `none`: the same mapping-layer work with no data movement, to isolate
    /// what the rmap policies change.
    #[arg(long, value_enum, default_value = "file")]
    io: IoMode,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Whether the pageout loop moves page data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum IoMode {
    /// Real files on disk.
    File,
    /// No data movement.
    None,
}

/// Arguments of `mmkit reclaim lru-size`.
#[derive(Args, Debug)]
struct LruSizeArgs {
    /// Cgroups, each with a process of its own (the report: 500).
    #[arg(long, default_value_t = 500)]
    memcgs: u32,
    /// CPU counts to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,16,64,96")]
    cpus: Vec<u32>,
    /// Pages each process touches in a cycle.
    #[arg(long, default_value_t = 64)]
    pages: u64,
    /// Page touches per cgroup.
    #[arg(long, default_value_t = 128)]
    touches: u64,
    /// Zombie cgroups made before the run: each had a process whose
    /// `--zombie-pages` anonymous pages went to swap; the process moved to the root
    /// cgroup and the cgroup was removed. Its swap slots still pin it, so it stays
    /// offline with empty LRU lists for the whole run, and reclaim visits it as it does
    /// the live ones.
    #[arg(long, default_value_t = 0)]
    zombies: u32,
    /// Swapped-out pages each zombie's process keeps.
    #[arg(long, default_value_t = 4)]
    zombie_pages: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `mmkit reclaim congestion`.
#[derive(Args, Debug)]
struct CongestionArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `mmkit reclaim`.
pub fn run(args: &ReclaimArgs) -> Result<(), CliError> {
    match &args.command {
        ReclaimCommand::Pageout(a) => pageout(a),
        ReclaimCommand::LruSize(a) => lru_size(a),
        ReclaimCommand::Congestion(a) => congestion(a),
    }
}

#[derive(Serialize)]
struct PageoutRow {
    policy: &'static str,
    loops_per_second: f64,
    loops_per_second_runs: Vec<f64>,
    rmap_counter_updates_per_loop: f64,
    pages_reclaimed_per_loop: f64,
    relative_percent: f64,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pageout(args: &PageoutArgs) -> Result<(), CliError> {
    output::check_optional_dir("--dir", args.dir.as_deref())?;
    if args.workers == 0 || args.workers > 1024 {
        return Err(CliError::usage("--workers must be 1..=1024"));
    }
    if args.fork > MAX_FORK {
        return Err(CliError::usage(format!(
            "--fork {}: at most {MAX_FORK} children per worker (a file page's map count is \
             16 bits, and every child maps every page)",
            args.fork
        )));
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0) || args.repeat == 0 {
        return Err(CliError::usage(
            "--seconds must be in (0, 600] and --repeat at least 1",
        ));
    }
    let folio_order = Order::new(args.folio_order)
        .filter(|o| o.get() <= 9)
        .ok_or_else(|| CliError::usage("--folio-order must be 0..=9"))?;
    let file_pages = args.file_kib / 4;
    if file_pages == 0 || file_pages % folio_order.pages() != 0 || file_pages > 1 << 20 {
        return Err(CliError::usage(
            "--file-kib must be a positive multiple of the folio size, at most 4 GiB",
        ));
    }
    check_pageout_fits(args, file_pages)?;
    let base_dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("mmkit-reclaim-{}", std::process::id()))
    });
    // What the run creates (the folder, or its first ancestor that does not exist) goes
    // when it ends, however it ends; a folder that was there stays.
    let created = base_dir
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty() && !a.exists())
        .last()
        .map(Path::to_path_buf);
    let remove_created = || {
        if let Some(created) = &created {
            let _ = std::fs::remove_dir_all(created);
        }
    };
    let policies = [
        ("per-page", RmapRemoval::PerPage),
        ("batched", RmapRemoval::Batched),
    ];
    let pageout = if args.split {
        PageoutSplit::SplitLarge
    } else {
        PageoutSplit::KeepCovered
    };
    let mut runs: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); policies.len()];
    for round in 0..args.repeat {
        // Alternate the order so that neither policy always runs on a warmer machine.
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1]
        } else {
            vec![1, 0]
        };
        for i in order {
            let policy = MmPolicy {
                rmap_removal: policies[i].1,
                pageout,
                ..MmPolicy::V6_7
            };
            match pageout_run(args, file_pages, folio_order, policy, &base_dir) {
                Ok(run) => runs[i].push(run),
                Err(e) => {
                    remove_created();
                    return Err(e);
                }
            }
        }
    }
    remove_created();
    let first = median(&runs[0].iter().map(|r| r.0).collect::<Vec<_>>());
    let rows: Vec<PageoutRow> = policies
        .iter()
        .zip(&runs)
        .map(|((name, _), runs)| {
            let loops: Vec<f64> = runs.iter().map(|r| r.0).collect();
            let m = median(&loops);
            PageoutRow {
                policy: name,
                loops_per_second: m,
                loops_per_second_runs: loops,
                rmap_counter_updates_per_loop: median(
                    &runs.iter().map(|r| r.1).collect::<Vec<_>>(),
                ),
                pages_reclaimed_per_loop: median(&runs.iter().map(|r| r.2).collect::<Vec<_>>()),
                relative_percent: 100.0 * m / first,
            }
        })
        .collect();
    if args.json {
        return print_json(&rows);
    }
    println!(
        "MADV_PAGEOUT loop (Yin 2023): {} workers, {} KiB file each, page-cache folios of {} KiB, large folios {}, data {}{}; median of {} × {} s",
        args.workers,
        args.file_kib,
        4u64 << folio_order.get(),
        if args.split { "split (6.7)" } else { "kept whole (Yin 2023's patched kernel)" },
        match args.io {
            IoMode::File => "read from the real file",
            IoMode::None => "not moved",
        },
        if args.fork == 0 {
            String::new()
        } else {
            format!(
                "; each loop forks {} children that read every page and exit",
                args.fork
            )
        },
        args.repeat,
        args.seconds
    );
    println!(
        "policy     loops/s   relative  rmap counter updates/loop  pages reclaimed/loop  runs"
    );
    for row in &rows {
        println!(
            "{:<9} {:>9.0}  {:>8.1}%  {:>25.0}  {:>20.0}  {:?}",
            row.policy,
            row.loops_per_second,
            row.relative_percent,
            row.rmap_counter_updates_per_loop,
            row.pages_reclaimed_per_loop,
            row.loops_per_second_runs
                .iter()
                .map(|l| l.round() as u64)
                .collect::<Vec<_>>()
        );
    }
    println!(
        "published, Yin 2023 (96 processes, IceLake 48C/96T, xfs): 58,865 → 63,247 loops (+7.4 %)"
    );
    Ok(())
}

/// Refuse a pageout run this machine cannot hold or that would run for more than a day.
/// Each worker's file is mapped from a pool of twice its pages (the page cache and the
/// pages being written back) and filled from one buffer of the file's size:
/// `workers × file × 2 + file` bytes, 8 MiB + 2 MiB for the default 2 × 2 MiB.
fn check_pageout_fits(args: &PageoutArgs, file_pages: u64) -> Result<(), CliError> {
    let file_bytes = u128::from(file_pages) * 4096;
    limits::check_memory(
        &format!("--workers {} × --file-kib {}", args.workers, args.file_kib),
        limits::product(&[u128::from(args.workers), file_bytes, 2]) + file_bytes,
    )?;
    let seconds = args.repeat as f64 * 2.0 * args.seconds;
    if seconds > limits::MAX_RUN_SECONDS {
        return Err(CliError::usage(format!(
            "--repeat {} × 2 policies × --seconds {} is {seconds:.0} s of running: at most \
             {} (a day)",
            args.repeat,
            args.seconds,
            limits::MAX_RUN_SECONDS
        )));
    }
    Ok(())
}

/// The most children `--fork` may ask for per worker: far below the 65535 maps a page's
/// 16-bit count holds, and more than the batching needs to show.
const MAX_FORK: u32 = 1024;

/// One timed run of the loop under `policy`: (loops/s, rmap counter updates per loop,
/// pages reclaimed per loop).
fn pageout_run(
    args: &PageoutArgs,
    file_pages: u64,
    folio_order: Order,
    policy: MmPolicy,
    base_dir: &std::path::Path,
) -> Result<(f64, f64, f64), CliError> {
    let failed = |e: &dyn std::fmt::Display| CliError::failed(format!("pageout: {e}"));
    let pool_bytes = ((u64::from(args.workers) * file_pages * 4096 * 2) as usize).max(64 << 20);
    let pool = PagePool::builder()
        .memory_bytes(pool_bytes)
        .build()
        .map_err(|e| failed(&e))?;
    let backend = match args.io {
        IoMode::File => {
            Backend::Files(MappedMemory::new(pool, base_dir, 1, policy).map_err(|e| failed(&e))?)
        }
        IoMode::None => {
            // SAFETY: the Memory only allocates and frees its own pages through its
            // operations (bookkeeping, no data is moved), and no PageBlock of this pool
            // exists; nothing reaches the allocator through the Memory.
            let memory = Memory::new(unsafe { pool.allocator_source() }, policy, 1);
            Backend::Bare(Box::new(std::sync::Mutex::new(memory)), pool)
        }
    };
    let contents = vec![0x5a; (file_pages * 4096) as usize];
    let mut workers = Vec::new();
    for w in 0..args.workers {
        let start = 0x10_0000 + u64::from(w) * 0x1000;
        let mm = backend
            .map_file(file_pages, folio_order, &contents, start)
            .map_err(|e| failed(&e))?;
        workers.push((mm, start));
    }
    let before = backend.stats();
    let deadline = Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let loops: Result<Vec<u64>, MmError> = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter()
            .map(|&(mm, start)| {
                let backend = &backend;
                scope.spawn(move || -> Result<u64, MmError> {
                    // At least one loop, however late the thread starts: the per-loop
                    // counts are then defined on any machine.
                    let mut loops = 0;
                    loop {
                        for page in 0..file_pages {
                            backend.touch(mm, start + page)?;
                        }
                        let mut children = Vec::with_capacity(args.fork as usize);
                        for _ in 0..args.fork {
                            children.push(backend.fork(mm)?);
                        }
                        for &child in &children {
                            for page in 0..file_pages {
                                backend.touch(child, start + page)?;
                            }
                        }
                        for child in children {
                            backend.exit(child)?;
                        }
                        backend.pageout(mm, start, file_pages)?;
                        loops += 1;
                        if started.elapsed() >= deadline {
                            break;
                        }
                    }
                    Ok(loops)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread"))
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let loops: u64 = loops.map_err(|e| failed(&e))?.iter().sum();
    let after = backend.stats();
    backend.verify().map_err(|e| failed(&e))?;
    let per_loop = |a: u64, b: u64| (a - b) as f64 / loops.max(1) as f64;
    Ok((
        loops as f64 / elapsed,
        per_loop(after.rmap_counter_updates, before.rmap_counter_updates),
        per_loop(after.reclaimed, before.reclaimed),
    ))
}

/// Where the pageout loop runs: mapped memory with real files, or the mapping layer on
/// the same pool without data movement.
enum Backend {
    Files(MappedMemory),
    Bare(Box<std::sync::Mutex<Memory>>, PagePool),
}

impl Backend {
    fn map_file(
        &self,
        pages: u64,
        order: Order,
        contents: &[u8],
        start: u64,
    ) -> Result<mmkit_core::mm::MmId, String> {
        match self {
            Backend::Files(m) => {
                let file = m
                    .create_file(pages, order, contents)
                    .map_err(|e| e.to_string())?;
                let mm = m.create_mm();
                m.mmap_file(mm, start, pages, file, 0)
                    .map_err(|e| e.to_string())?;
                Ok(mm)
            }
            Backend::Bare(m, _) => {
                let mut memory = m.lock().expect("not poisoned");
                let file = memory.create_file(pages, order);
                let mm = memory.create_mm();
                memory
                    .mmap_file(mm, start, pages, file, 0)
                    .map_err(|e| e.to_string())?;
                Ok(mm)
            }
        }
    }

    /// Read-touch one page.
    fn touch(&self, mm: mmkit_core::mm::MmId, vpn: u64) -> Result<(), MmError> {
        match self {
            Backend::Files(m) => m.read(mm, vpn * 4096, &mut [0u8; 1]),
            Backend::Bare(m, pool) => {
                let caller = pool.caller();
                let mut memory = m.lock().expect("not poisoned");
                memory.access(caller, mm, vpn, false, &mut NoIo).map(|_| ())
            }
        }
    }

    fn fork(&self, mm: mmkit_core::mm::MmId) -> Result<mmkit_core::mm::MmId, MmError> {
        match self {
            Backend::Files(m) => m.fork(mm),
            Backend::Bare(m, pool) => {
                let caller = pool.caller();
                m.lock().expect("not poisoned").fork(caller, mm)
            }
        }
    }

    fn exit(&self, mm: mmkit_core::mm::MmId) -> Result<(), MmError> {
        match self {
            Backend::Files(m) => m.exit_mm(mm),
            Backend::Bare(m, pool) => {
                let caller = pool.caller();
                m.lock().expect("not poisoned").exit_mm(caller, mm)
            }
        }
    }

    fn pageout(&self, mm: mmkit_core::mm::MmId, start: u64, pages: u64) -> Result<(), MmError> {
        match self {
            Backend::Files(m) => m.madvise_pageout(mm, start, pages).map(|_| ()),
            Backend::Bare(m, pool) => {
                let caller = pool.caller();
                let mut memory = m.lock().expect("not poisoned");
                memory
                    .madvise_pageout(caller, mm, start, pages, &mut NoIo)
                    .map(|_| ())
            }
        }
    }

    fn stats(&self) -> mmkit_core::mm::MmStats {
        match self {
            Backend::Files(m) => m.stats(),
            Backend::Bare(m, _) => m.lock().expect("not poisoned").stats(),
        }
    }

    fn verify(&self) -> Result<(), String> {
        match self {
            Backend::Files(m) => m.verify(),
            Backend::Bare(m, _) => m.lock().expect("not poisoned").verify(),
        }
    }
}

/// A one-node machine of `pages` pages and `cpus` CPUs for the core-only experiments.
fn machine(pages: u64, cpus: u32, policy: MmPolicy, swap: u64) -> Result<Memory, CliError> {
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: Pfn(0x10_0000),
        spanned: pages,
        present: pages,
        managed: pages,
    };
    let llc = CacheInfo {
        llc_bytes: 32 << 20,
        llc_shared_cpus: cpus,
    };
    let topology = Topology::new(vec![spec], vec![cpus], llc, false)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(1024),
        ..Settings::default()
    };
    let allocator = PageAllocator::new(topology, settings, Policy::V6_7)
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(Memory::new(Arc::new(allocator), policy, swap))
}

#[derive(Serialize)]
struct LruSizeRow {
    cpus: u32,
    policy: &'static str,
    touches_per_second: f64,
    lru_size_reads: u64,
    lru_size_reads_per_touch: f64,
    /// Nanoseconds one `lruvec_lru_size` call takes on this machine, timed afterwards
    /// over every cgroup's lists.
    lru_size_ns_per_call: f64,
    /// Estimated time in `lruvec_lru_size` during the run: calls × ns per call.
    lru_size_seconds: f64,
    reclaimed: u64,
    seconds: f64,
    /// Zombie cgroups when the run started and when it ended.
    zombies: u32,
    zombies_left: usize,
}

fn lru_size(args: &LruSizeArgs) -> Result<(), CliError> {
    if args.memcgs == 0 || args.memcgs > 60_000 || args.pages == 0 || args.touches == 0 {
        return Err(CliError::usage(
            "--memcgs must be 1..=60000, --pages and --touches at least 1",
        ));
    }
    if u64::from(args.memcgs) + u64::from(args.zombies) > 60_000 {
        return Err(CliError::usage(format!(
            "--memcgs {} + --zombies {} cgroups: at most 60000 in all (ids are 16 bits)",
            args.memcgs, args.zombies
        )));
    }
    if args.zombie_pages == 0 || args.zombie_pages > 1 << 20 {
        return Err(CliError::usage(format!(
            "--zombie-pages {}: use 1..=1048576",
            args.zombie_pages
        )));
    }
    if args.cpus.iter().any(|&c| c == 0 || c > 1024) {
        return Err(CliError::usage("every --cpus value must be 1..=1024"));
    }
    check_lru_size_fits(args)?;
    let mut rows = Vec::new();
    for &cpus in &args.cpus {
        for (name, lru_size) in [
            ("zone-sizes", LruSizePolicy::ZoneSizes),
            ("percpu-counters", LruSizePolicy::PercpuCounters),
        ] {
            rows.push(lru_size_run(args, cpus, name, lru_size)?);
        }
    }
    if args.json {
        return print_json(&rows);
    }
    println!(
        "lruvec_lru_size under direct reclaim (Wang 2019): {} cgroups, {} pages each cycling over a memory half their total; {} zombie cgroups, each pinned by {} swapped-out pages",
        args.memcgs, args.pages, args.zombies, args.zombie_pages
    );
    println!("CPUs  policy            touches/s   LRU-size reads/touch   ns/call   LRU-size s / wall s   pages reclaimed   zombies left");
    for row in &rows {
        println!(
            "{:>4}  {:<16} {:>10.0}   {:>20.1}   {:>7.1}   {:>8.3} / {:<8.3}   {:>15}   {:>12}",
            row.cpus,
            row.policy,
            row.touches_per_second,
            row.lru_size_reads_per_touch,
            row.lru_size_ns_per_call,
            row.lru_size_seconds,
            row.seconds,
            row.reclaimed,
            row.zombies_left
        );
    }
    Ok(())
}

/// The most page touches one `lru-size` invocation may make: 2^32, about seven hours at
/// the 180,000 touches a second (each reclaiming) of a release build.
const MAX_LRU_SIZE_TOUCHES: u128 = 1 << 32;

/// Refuse an `lru-size` run whose machine cannot be built or held, or that makes more than
/// [`MAX_LRU_SIZE_TOUCHES`] touches.
///
/// The machine manages half of `memcgs × pages` (at least 1024 pages) from pfn 2^20, so it
/// must end below pfn 2^32 − 1, the mem_map's limit. Per page a process touches, the run
/// keeps about 80 bytes: its pte (8), two swap slots (a byte and a free-list entry each,
/// 18), half a mem_map descriptor (8) and half a resident folio's record (about 46).
fn check_lru_size_fits(args: &LruSizeArgs) -> Result<(), CliError> {
    let culprit = format!(
        "--memcgs {} × --pages {} + --zombies {} × --zombie-pages {}",
        args.memcgs, args.pages, args.zombies, args.zombie_pages
    );
    let pages = u128::from(args.memcgs) * u128::from(args.pages)
        + u128::from(args.zombies) * u128::from(args.zombie_pages);
    if pages / 2 >= u128::from(u32::MAX) - 0x10_0000 {
        return Err(CliError::usage(format!(
            "{culprit} = {pages} pages: the machine of half of them would end beyond pfn \
             2^32 - 1, the mem_map's limit"
        )));
    }
    limits::check_memory(&culprit, pages * 80)?;
    let touches = limits::product(&[
        u128::from(args.memcgs),
        u128::from(args.touches),
        args.cpus.len() as u128 * 2,
    ]);
    if touches > MAX_LRU_SIZE_TOUCHES {
        return Err(CliError::usage(format!(
            "--memcgs {} × --touches {} × {} CPU counts × 2 policies = {touches} page \
             touches: at most {MAX_LRU_SIZE_TOUCHES} (hours of running)",
            args.memcgs,
            args.touches,
            args.cpus.len()
        )));
    }
    Ok(())
}

fn lru_size_run(
    args: &LruSizeArgs,
    cpus: u32,
    name: &'static str,
    lru_size: LruSizePolicy,
) -> Result<LruSizeRow, CliError> {
    let failed = |e: MmError| CliError::failed(format!("lru-size: {e}"));
    let total = u64::from(args.memcgs) * args.pages;
    // Memory for half of what the processes touch: every cycle reclaims.
    let policy = MmPolicy {
        lru_size,
        ..MmPolicy::V6_7
    };
    // The zombies' slots come on top of the live cgroups' swap.
    let zombie_total = u64::from(args.zombies) * args.zombie_pages;
    let mut memory = machine(
        (total / 2).max(1024),
        cpus,
        policy,
        total * 2 + zombie_total,
    )?;
    make_zombies(&mut memory, args.zombies, args.zombie_pages).map_err(failed)?;
    let mut mms = Vec::new();
    for _ in 0..args.memcgs {
        let group = memory.create_memcg(MemcgId::ROOT).map_err(failed)?;
        let mm = memory.create_mm();
        memory.set_mm_memcg(mm, group).map_err(failed)?;
        memory
            .mmap_anon(mm, 0x1000, args.pages, Order::ZERO)
            .map_err(failed)?;
        mms.push(mm);
    }
    let started = Instant::now();
    let mut touches = 0u64;
    for t in 0..args.touches {
        for (i, &mm) in mms.iter().enumerate() {
            let caller = Caller::task(i as u32 % cpus);
            memory
                .access(caller, mm, 0x1000 + t % args.pages, true, &mut NoIo)
                .map_err(failed)?;
            touches += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let stats = memory.stats();
    memory.verify().map_err(CliError::failed)?;
    let zombies_left = memory.memcgs().zombies();
    // Time the sizing itself on the final state: the four evictable lists of every
    // cgroup reclaim visits (zombies included), until enough calls for a stable figure.
    let groups: Vec<MemcgId> = memory.memcgs().subtree(MemcgId::ROOT);
    let lists = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
    ];
    let top = mmkit_core::page_alloc::MAX_NR_ZONES - 1;
    let timed = Instant::now();
    let mut calls = 0u64;
    let mut sink = 0u64;
    while calls < 200_000 {
        for &g in &groups {
            for lru in lists {
                sink = sink.wrapping_add(memory.lruvec_lru_size(g, 0, lru, top));
                calls += 1;
            }
        }
    }
    std::hint::black_box(sink);
    let ns_per_call = timed.elapsed().as_secs_f64() * 1e9 / calls as f64;
    Ok(LruSizeRow {
        cpus,
        policy: name,
        touches_per_second: touches as f64 / seconds,
        lru_size_reads: stats.lru_size_reads,
        lru_size_reads_per_touch: stats.lru_size_reads as f64 / touches as f64,
        lru_size_ns_per_call: ns_per_call,
        lru_size_seconds: stats.lru_size_calls as f64 * ns_per_call / 1e9,
        reclaimed: stats.reclaimed,
        seconds,
        zombies: args.zombies,
        zombies_left,
    })
}

/// `zombies` removed cgroups, each pinned by `pages` swap slots: a process in it
/// touched `pages` anonymous pages, which `MADV_PAGEOUT` sent to swap; the process moved
/// to the root cgroup (cgroup v2 moves no charges) and the cgroup was removed. The
/// processes keep their swap entries to the end.
fn make_zombies(memory: &mut Memory, zombies: u32, pages: u64) -> Result<(), MmError> {
    let caller = Caller::task(0);
    for _ in 0..zombies {
        let group = memory.create_memcg(MemcgId::ROOT)?;
        let mm = memory.create_mm();
        memory.set_mm_memcg(mm, group)?;
        memory.mmap_anon(mm, 0x1000, pages, Order::ZERO)?;
        for v in 0..pages {
            memory.access(caller, mm, 0x1000 + v, true, &mut NoIo)?;
        }
        memory.madvise_pageout(caller, mm, 0x1000, pages, &mut NoIo)?;
        memory.set_mm_memcg(mm, MemcgId::ROOT)?;
        memory.remove_memcg(group)?;
    }
    debug_assert_eq!(memory.memcgs().zombies(), zombies as usize);
    Ok(())
}

#[derive(Serialize)]
struct CongestionRow {
    policy: &'static str,
    throttled_after_kswapd: bool,
    balanced_after_kswapd: bool,
    throttled_after_root_memory_reclaim: bool,
    balanced_after_root_memory_reclaim: bool,
    throttled_after_writeback_and_kswapd: bool,
}

fn congestion(args: &CongestionArgs) -> Result<(), CliError> {
    let mut rows = Vec::new();
    for (name, bits) in [
        ("shared", CongestionBits::Shared),
        ("separate", CongestionBits::Separate),
    ] {
        rows.push(congestion_run(name, bits)?);
    }
    if args.json {
        return print_json(&rows);
    }
    println!("kswapd marks a node congested (dirty file pages under write-back), then root memory.reclaim runs");
    println!(
        "bits       after kswapd          after root memory.reclaim   after write-back + kswapd"
    );
    for row in &rows {
        let state = |throttled: bool, balanced: bool| {
            format!(
                "{}, {}",
                if throttled {
                    "throttled"
                } else {
                    "not throttled"
                },
                if balanced { "balanced" } else { "unbalanced" }
            )
        };
        println!(
            "{:<9}  {:<20}  {:<26}  {}",
            row.policy,
            state(row.throttled_after_kswapd, row.balanced_after_kswapd),
            state(
                row.throttled_after_root_memory_reclaim,
                row.balanced_after_root_memory_reclaim
            ),
            if row.throttled_after_writeback_and_kswapd {
                "throttled"
            } else {
                "not throttled"
            }
        );
    }
    println!("With one shared bit the root memory.reclaim clears kswapd's mark while the node is still unbalanced;");
    println!("with separate bits (Linux ≥ 6.5) direct reclaimers stay throttled until kswapd balances the node.");
    Ok(())
}

fn congestion_run(name: &'static str, bits: CongestionBits) -> Result<CongestionRow, CliError> {
    let failed = |e: MmError| CliError::failed(format!("congestion: {e}"));
    let caller = Caller::task(0);
    let policy = MmPolicy {
        congestion: bits,
        ..MmPolicy::V6_7
    };
    let mut m = machine(4096, 2, policy, 0)?;
    m.set_async_writeback(true);
    let file = m.create_file(8192, Order::ZERO);
    let mm = m.create_mm();
    m.mmap_file(mm, 0x1000, 8192, file, 0).map_err(failed)?;
    let below = |m: &Memory, mark: WatermarkKind| {
        let zone = &m.allocator().zones()[ZoneType::Normal.index()];
        zone.free_pages() < zone.wmark(mark) as i64
    };
    let mut vpn = 0;
    while !below(&m, WatermarkKind::Low) {
        m.access(caller, mm, 0x1000 + vpn, true, &mut NoIo)
            .map_err(failed)?;
        vpn += 1;
    }
    // kswapd's runs queue dirty pages for write-back (the first ones activate what they
    // find referenced), and, woken again while the write-back is in flight, it reruns
    // until it finds only pages it already asked for.
    for _ in 0..MAX_RECLAIM_RETRIES {
        if m.writeback_folios() > 0 {
            break;
        }
        m.kswapd_balance(caller, 0, &mut NoIo).map_err(failed)?;
    }
    m.kswapd(caller, 0, &mut NoIo).map_err(failed)?;
    let throttled_after_kswapd = m.reclaim_throttled(MemcgId::ROOT, 0);
    let balanced_after_kswapd = !below(&m, WatermarkKind::High);
    let _ = m.memory_reclaim(caller, MemcgId::ROOT, 32, &mut NoIo);
    let throttled_after_root_memory_reclaim = m.reclaim_throttled(MemcgId::ROOT, 0);
    let balanced_after_root_memory_reclaim = !below(&m, WatermarkKind::High);
    m.end_all_writeback(caller);
    m.kswapd(caller, 0, &mut NoIo).map_err(failed)?;
    let throttled_after_writeback_and_kswapd = m.reclaim_throttled(MemcgId::ROOT, 0);
    m.verify().map_err(CliError::failed)?;
    Ok(CongestionRow {
        policy: name,
        throttled_after_kswapd,
        balanced_after_kswapd,
        throttled_after_root_memory_reclaim,
        balanced_after_root_memory_reclaim,
        throttled_after_writeback_and_kswapd,
    })
}
