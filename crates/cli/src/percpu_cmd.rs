//! `mmkit percpu test`: the percpu_test.sh of the partial-depopulation thread (Roman
//! Gushchin's cover letter, `docs/reference/workloads.md` §2.5), on the runtime's percpu pool.
//!
//! Each memory cgroup `mkdir` makes the percpu allocations the `--kernel` makes for it
//! (v5.14's or 6.18's list below, or `--objects FILE`), on an allocator that starts as
//! that kernel does after boot (its first chunk; `--first-chunk` overrides it);
//! `outer` groups each get `inner` children, the
//! children are removed, the balance work runs (the script's `sleep 10`), and the
//! `Percpu:` line of /proc/meminfo is printed before, after creation and after deletion,
//! computed as Linux computes it (`pcpu_nr_populated × pcpu_nr_units` pages), next to the
//! memory the OS reports resident for the chunks (`mincore`) and for the whole process
//! (`/proc/self/statm`). The arena is real memory:
//! 1000 × 50 at the default 4 CPUs peaks around 0.7 GB. `--live` runs the loop on the
//! host kernel instead ([`crate::percpu_live`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use mmkit_core::percpu::{
    AllocKind, ConfigError, FirstChunkLayout, PercpuConfig, PercpuPolicy, PercpuPtr,
    PCPU_MIN_ALLOC_SIZE, PCPU_MIN_UNIT_SIZE, PERCPU_DYNAMIC_RESERVE, PERCPU_MODULE_RESERVE,
    PERCPU_PRESETS,
};
use mmkit_runtime::PercpuPool;
use serde::Serialize;

use crate::size::parse_bytes;
use crate::{limits, percpu_live, CliError};

/// Arguments of `mmkit percpu`.
#[derive(Args, Debug)]
pub struct PercpuArgs {
    #[command(subcommand)]
    command: PercpuCommand,
}

#[derive(Subcommand, Debug)]
enum PercpuCommand {
    /// Gushchin/Zhou 2021's percpu_test.sh: create OUTER memory cgroups with INNER children each,
    /// delete the children, and print /proc/meminfo's `Percpu:` before, after creation and
    /// after deletion, with the resident memory the OS reports for the percpu chunks.
    Test(TestArgs),
}

/// Arguments of `mmkit percpu test`.
#[derive(Args, Debug)]
struct TestArgs {
    /// Outer cgroups (kept).
    #[arg(long, default_value_t = 1000)]
    outer: usize,
    /// Children per outer cgroup (deleted).
    #[arg(long, default_value_t = 50)]
    inner: usize,
    /// Percpu policy: v5.13, v5.14, reclaim-threshold or bytes-thresholds.
    #[arg(long, default_value = "v5.14", conflicts_with = "live")]
    policy: String,
    /// The kernel whose cgroups and first chunk to model: v5.14 (the thread's x86-64
    /// guest: 4 CPUs, modules) or linux-6.18 (this project's measuring VM: 2 CPUs, no
    /// modules, object sizes read from its BTF). Sets the object list, the first chunk and
    /// the default CPU count.
    #[arg(long, default_value = "v5.14", conflicts_with = "live")]
    kernel: String,
    /// The first chunk as boot prints it (`dmesg | grep 'percpu: Embedded'`):
    /// `s202520,r0,d30952` (static, reserved, dynamic bytes), or `none` to model only
    /// dynamic chunks. Default: the --kernel's.
    #[arg(long, conflicts_with = "live")]
    first_chunk: Option<String>,
    /// Page size: 4k (x86-64) or 64k (POWER9 as in Pratik Sampat's test).
    #[arg(long, default_value = "4k", conflicts_with = "live")]
    page_size: String,
    /// Possible CPUs (units per chunk). Default 4 with --kernel v5.14 (Pratik Sampat's
    /// Intel KVM guest from the thread; 1000 × 50 stays under a gigabyte of real memory)
    /// and 2 with linux-6.18 (the measuring VM).
    #[arg(long, conflicts_with = "live")]
    cpus: Option<usize>,
    /// Unit size. Default with 4k pages: what x86-64 Linux picks for the first chunk and
    /// CPU count (`pcpu_build_alloc_info` with 2 MiB atoms: 1 MiB for 2 CPUs, "u1048576"
    /// on the measuring VM; 512 KiB for 4; 256 KiB from 8); with 64k pages 640k (10 pages,
    /// from memory of ppc64le boot logs).
    #[arg(long, conflicts_with = "live")]
    unit_size: Option<String>,
    /// NUMA nodes: one lruvec_stats_percpu per node per cgroup.
    #[arg(long, default_value_t = 1, conflicts_with = "live")]
    nodes: usize,
    /// The percpu objects of one cgroup, one per line: `NAME SIZE [ALIGN] [per-node]`
    /// (`#` starts a comment). Default: the --kernel's list (docs/PERCPU.md).
    #[arg(long, conflicts_with = "live")]
    objects: Option<PathBuf>,
    /// Print the --kernel's object list in the `--objects` format and exit.
    #[arg(long, conflicts_with = "live")]
    list_objects: bool,
    /// Run the loop on this machine's kernel instead of the model (root): create the
    /// memory cgroups for real, put a process in each briefly, remove them, and read
    /// `Percpu:` from /proc/meminfo. Every cgroup it makes is removed, also on Ctrl-C and
    /// SIGTERM. Without root it says so and does nothing.
    #[arg(long)]
    live: bool,
    /// With --live: seconds to wait after each removal before reading (the script's
    /// `sleep 10`: the RCU-deferred frees and the balance work run meanwhile).
    #[arg(long, default_value_t = 10.0, requires = "live")]
    settle_seconds: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// A kernel whose percpu use the model can replay: its object list, its first chunk and
/// the CPU count of the machine it was measured on.
struct Kernel {
    name: &'static str,
    objects: &'static str,
    /// The first chunk's static and reserved sizes; the dynamic region is
    /// `PERCPU_DYNAMIC_RESERVE` grown to the page end (`pcpu_build_alloc_info`).
    static_size: usize,
    reserved_size: usize,
    cpus: usize,
}

impl Kernel {
    fn first_chunk(&self, page_size: usize) -> FirstChunkLayout {
        FirstChunkLayout::embedded(
            self.static_size,
            self.reserved_size,
            PERCPU_DYNAMIC_RESERVE,
            page_size,
        )
    }
}

/// The static per-CPU data of the measuring VM's 6.18 kernel image (boot line `percpu:
/// Embedded 57 pages/cpu s202520 r0 d30952 u1048576`). The v5.14 preset borrows it: no
/// v5.14 image was measured, and a distribution kernel's static size is of this order.
const STATIC_SIZE_MEASURED: usize = 202_520;

const KERNELS: [Kernel; 2] = [
    Kernel {
        name: "v5.14",
        objects: OBJECTS_V5_14,
        // v5.14 defaults with modules: PERCPU_MODULE_RESERVE, PERCPU_DYNAMIC_RESERVE.
        static_size: STATIC_SIZE_MEASURED,
        reserved_size: PERCPU_MODULE_RESERVE,
        cpus: 4,
    },
    Kernel {
        name: "linux-6.18",
        objects: OBJECTS_LINUX_6_18,
        // Measured: the boot line above (the VM's kernel has no modules: r0, and its
        // d30952 is PERCPU_DYNAMIC_RESERVE grown to the page end).
        static_size: STATIC_SIZE_MEASURED,
        reserved_size: 0,
        cpus: 2,
    },
];

fn kernel(name: &str) -> Result<&'static Kernel, CliError> {
    KERNELS.iter().find(|k| k.name == name).ok_or_else(|| {
        let names: Vec<_> = KERNELS.iter().map(|k| k.name).collect();
        CliError::usage(format!(
            "--kernel: unknown kernel {name:?} (one of {})",
            names.join(", ")
        ))
    })
}

/// One percpu allocation a cgroup `mkdir` makes.
#[derive(Clone, Debug, Serialize)]
struct ObjectSpec {
    name: String,
    size: usize,
    align: usize,
    per_node: bool,
    /// The line of the list that gave it, from 1.
    #[serde(skip)]
    line: usize,
}

/// What Linux v5.14 allocates from the percpu allocator when a cgroup with the memory
/// controller is created, in allocation order (x86-64, distribution config; sizes from
/// the v5.14 structs, counts of stat items from memory: see docs/PERCPU.md).
const OBJECTS_V5_14: &str = "\
# name                      size align   (Linux source)
cgroup_self_refcnt          8    8       # kernel/cgroup/cgroup.c cgroup_create: percpu_ref_init(&cgrp->self.refcnt)
cgroup_rstat_cpu            64   8       # kernel/cgroup/rstat.c cgroup_rstat_init: alloc_percpu(struct cgroup_rstat_cpu)
psi_group_cpu               128  64      # kernel/sched/psi.c psi_cgroup_alloc: alloc_percpu(struct psi_group_cpu), cacheline aligned
cgroup_bpf_refcnt           8    8       # kernel/bpf/cgroup.c cgroup_bpf_inherit: percpu_ref_init(&cgrp->bpf.refcnt)
memcg_vmstats_percpu        2232 8       # mm/memcontrol.c mem_cgroup_alloc: state/state_prev[43], events/events_prev[95], nr_page_events, targets[2]
lruvec_stats_percpu         640  8 per-node  # mm/memcontrol.c alloc_mem_cgroup_per_node_info: state/state_prev[40]
wb_completions              4    4       # mm/page-writeback.c wb_domain_init: fprop_global_init -> percpu_counter_init (s32)
memory_css_refcnt           8    8       # kernel/cgroup/cgroup.c css_create: percpu_ref_init(&css->refcnt)
objcg_refcnt                8    8       # mm/memcontrol.c memcg_online_kmem: obj_cgroup_alloc -> percpu_ref_init
";

/// What Linux 6.18 allocates from the percpu allocator for `mkdir` in a cgroup v1 memory
/// hierarchy, in allocation order, on the measuring VM (x86-64, 1 node, CONFIG_PSI,
/// CONFIG_MEMCG_V1, CONFIG_CGROUP_WRITEBACK). Sizes: the struct sizes of that kernel's
/// own BTF (/sys/kernel/btf/vmlinux); calls: 6.18's cgroup_create, css_create and
/// mem_cgroup_alloc. On cgroup v2 `memcg1_events_percpu` is not allocated and
/// `cgroup_bpf_inherit` adds an 8-byte percpu_ref.
const OBJECTS_LINUX_6_18: &str = "\
# name                      size align   (Linux 6.18 source; size from the VM's BTF)
cgroup_self_refcnt          8    8       # kernel/cgroup/cgroup.c cgroup_create: percpu_ref_init(&cgrp->self.refcnt)
cgroup_rstat_base_cpu       128  8       # kernel/cgroup/rstat.c cgroup_rstat_base_init: alloc_percpu(struct cgroup_rstat_base_cpu), 4 x cgroup_base_stat
cgroup_self_rstat_cpu       32   8       # kernel/cgroup/rstat.c css_rstat_init(&cgrp->self): alloc_percpu(struct css_rstat_cpu)
psi_group_cpu               128  64      # kernel/sched/psi.c psi_cgroup_alloc: alloc_percpu(struct psi_group_cpu), cacheline aligned
memcg_vmstats_percpu        1216 64      # mm/memcontrol.c mem_cgroup_alloc: state/state_prev[40], events/events_prev[31], 3 words; cacheline aligned
memcg1_events_percpu        24   8       # mm/memcontrol-v1.c memcg1_alloc_events: nr_page_events, targets[2]
lruvec_stats_percpu         528  8 per-node  # mm/memcontrol.c alloc_mem_cgroup_per_node_info: state/state_prev[33]
wb_completions              4    4       # mm/page-writeback.c wb_domain_init: fprop_global_init -> percpu_counter_init (s32)
memory_css_refcnt           8    8       # kernel/cgroup/cgroup.c css_create: percpu_ref_init(&css->refcnt)
memory_css_rstat_cpu        32   8       # kernel/cgroup/cgroup.c css_create: css_rstat_init(css), memory has css_rstat_flush
objcg_refcnt                8    8       # mm/memcontrol.c memcg_online_kmem: obj_cgroup_alloc -> percpu_ref_init
";

/// The object list: every line checked as the allocator would check the request, so a
/// list that parses allocates. Errors are `LINE: message`.
fn parse_objects(text: &str) -> Result<Vec<ObjectSpec>, String> {
    let mut objects = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let bad = |what: String| format!("{number}: {what}");
        let (name, size) = match fields[..] {
            [name, size, ..] => (name, size),
            _ => return Err(bad("expected NAME SIZE [ALIGN] [per-node]".into())),
        };
        let size = parse_bytes(size).map_err(bad)?;
        if size == 0 || size > PCPU_MIN_UNIT_SIZE as u64 {
            return Err(bad(format!(
                "size {size} is 0 or over {PCPU_MIN_UNIT_SIZE} bytes, the largest percpu \
                 allocation (PCPU_MIN_UNIT_SIZE)"
            )));
        }
        let mut align = 8;
        let mut per_node = false;
        for field in &fields[2..] {
            if *field == "per-node" {
                per_node = true;
            } else {
                align = field
                    .parse()
                    .ok()
                    .filter(|a: &usize| a.is_power_of_two())
                    .ok_or_else(|| {
                        bad(format!(
                            "{field:?} is neither an alignment (a power of two) nor per-node"
                        ))
                    })?;
            }
        }
        objects.push(ObjectSpec {
            name: name.to_string(),
            size: size as usize,
            align,
            per_node,
            line: number,
        });
    }
    if objects.is_empty() {
        return Err("the object list is empty".to_string());
    }
    Ok(objects)
}

/// The objects of `--objects FILE` (errors as `FILE:LINE: message`), or the kernel's list.
fn objects(path: Option<&Path>, kernel: &Kernel) -> Result<Vec<ObjectSpec>, CliError> {
    let Some(path) = path else {
        return Ok(parse_objects(kernel.objects).expect("the built-in lists parse"));
    };
    let refuse = |what: String| CliError::usage(format!("--objects {}:{what}", path.display()));
    let bytes = crate::limits::read_input(path).map_err(|e| refuse(format!(" {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        refuse(format!("{line}: not UTF-8 text"))
    })?;
    parse_objects(&text).map_err(|e| match e.split_once(": ") {
        Some((line, _)) if line.parse::<usize>().is_ok() => refuse(e),
        _ => refuse(format!(" {e}")),
    })
}

/// Refuse a run whose cgroups this machine cannot hold. Each cgroup keeps its objects on
/// every CPU (sizes rounded up to `PCPU_MIN_ALLOC_SIZE`, per-node ones once per node)
/// and the test keeps a `PercpuPtr` for each; there are `outer × (inner + 1)` cgroups:
/// 1000 × 51 × (≈3.1 KB × 4 CPUs + 10 × 24 bytes) ≈ 0.65 GB for the default run.
fn check_cgroups_fit(
    args: &TestArgs,
    objects: &[ObjectSpec],
    config: &PercpuConfig,
) -> Result<(), CliError> {
    let copies = |o: &ObjectSpec| if o.per_node { args.nodes as u128 } else { 1 };
    let per_cpu: u128 = objects
        .iter()
        .map(|o| o.size.next_multiple_of(PCPU_MIN_ALLOC_SIZE) as u128 * copies(o))
        .sum();
    let pointers: u128 = objects.iter().map(copies).sum::<u128>() * size_of::<PercpuPtr>() as u128;
    let cgroups = limits::product(&[args.outer as u128, args.inner as u128 + 1]);
    let per_cgroup = per_cpu * config.nr_units as u128 + pointers;
    limits::check_memory(
        &format!(
            "--outer {} × (--inner {} + 1) = {cgroups} cgroups of {per_cgroup} bytes",
            args.outer, args.inner
        ),
        limits::product(&[cgroups, per_cgroup]),
    )
}

/// The first chunk's regions, bytes per unit.
#[derive(Clone, Copy, Debug, Serialize)]
struct FirstChunkReport {
    static_size: usize,
    reserved_size: usize,
    dynamic_size: usize,
}

/// One reading of the meters.
#[derive(Clone, Copy, Debug, Serialize)]
struct Reading {
    /// `Percpu:` of /proc/meminfo, kB.
    percpu_kb: u64,
    /// Resident memory of the percpu chunks as the OS reports it (mincore), kB.
    rss_kb: u64,
    /// Resident memory of the whole process (/proc/self/statm), kB; 0 if unreadable.
    process_rss_kb: u64,
    chunks: usize,
    populated_pages: usize,
    empty_pop_pages: usize,
    seconds: f64,
}

#[derive(Serialize)]
struct Report {
    outer: usize,
    inner: usize,
    cgroups: usize,
    kernel: &'static str,
    first_chunk: Option<FirstChunkReport>,
    policy: &'static str,
    cpus: usize,
    nodes: usize,
    page_size: usize,
    unit_size: usize,
    bytes_per_cpu_per_cgroup: usize,
    objects: Vec<ObjectSpec>,
    before: Reading,
    after_creation: Reading,
    after_deletion: Reading,
    after_removing_all: Reading,
    balance_runs: u64,
    chunks_created: u64,
    chunks_destroyed: u64,
    protect_failures: u64,
}

/// Run `mmkit percpu`.
pub fn run(args: &PercpuArgs) -> Result<(), CliError> {
    match &args.command {
        PercpuCommand::Test(args) => run_test(args),
    }
}

/// `--first-chunk`: `none`, or static, reserved and dynamic bytes as boot prints them
/// (`s202520,r0,d30952`; commas or spaces between, any order).
fn parse_first_chunk(text: &str) -> Result<Option<FirstChunkLayout>, String> {
    if text == "none" {
        return Ok(None);
    }
    let mut sizes: [Option<usize>; 3] = [None; 3];
    for field in text.split([',', ' ']).filter(|f| !f.is_empty()) {
        let (slot, number) = match field.split_at_checked(1) {
            Some(("s", n)) => (0, n),
            Some(("r", n)) => (1, n),
            Some(("d", n)) => (2, n),
            _ => return Err(format!("{field:?} is not sBYTES, rBYTES or dBYTES")),
        };
        let bytes = parse_bytes(number)
            .ok()
            .and_then(|b| usize::try_from(b).ok())
            .filter(|&b| b <= 1 << 30)
            .ok_or_else(|| format!("{field:?}: {number:?} is not a size up to 1 GiB"))?;
        if sizes[slot].replace(bytes).is_some() {
            return Err(format!("{field:?} given twice"));
        }
    }
    match sizes {
        [Some(static_size), Some(reserved_size), Some(dynamic_size)] => {
            Ok(Some(FirstChunkLayout {
                static_size,
                reserved_size,
                dynamic_size,
            }))
        }
        _ => Err("expected none or sSTATIC,rRESERVED,dDYNAMIC (e.g. s202520,r0,d30952)".into()),
    }
}

/// x86-64's `pcpu_embed_first_chunk` atom: a PMD, 2 MiB.
const X86_64_ATOM_SIZE: usize = 2 << 20;

fn config(args: &TestArgs, kernel: &Kernel) -> Result<PercpuConfig, CliError> {
    let policy = PercpuPolicy::preset(&args.policy).ok_or_else(|| {
        CliError::usage(format!(
            "--policy: unknown percpu policy {:?} (one of {})",
            args.policy,
            PERCPU_PRESETS.join(", ")
        ))
    })?;
    let bytes = |flag: &str, text: &str| {
        parse_bytes(text)
            .ok()
            .and_then(|bytes| usize::try_from(bytes).ok())
            .ok_or_else(|| CliError::usage(format!("{flag} {text:?} is not a size")))
    };
    let page_size = bytes("--page-size", &args.page_size)?;
    if page_size != 4 << 10 && page_size != 64 << 10 {
        return Err(CliError::usage("--page-size must be 4k or 64k"));
    }
    let first_chunk = match &args.first_chunk {
        Some(text) => parse_first_chunk(text)
            .map_err(|e| CliError::usage(format!("--first-chunk {text:?}: {e}")))?,
        None => Some(kernel.first_chunk(page_size)),
    };
    let cpus = args.cpus.unwrap_or(kernel.cpus);
    let unit_size = match &args.unit_size {
        Some(text) => bytes("--unit-size", text)?,
        None if page_size == 4 << 10 => first_chunk
            .unwrap_or(kernel.first_chunk(page_size))
            .embedded_unit_size(cpus.clamp(1, 4096), X86_64_ATOM_SIZE, page_size),
        None => 10 * page_size,
    };
    if args.nodes == 0 || args.nodes > 64 {
        return Err(CliError::usage("--nodes must be 1 to 64"));
    }
    let config = PercpuConfig {
        page_size,
        unit_size,
        nr_units: cpus,
        policy,
        first_chunk,
    };
    config.validate().map_err(|e| {
        let flag = match e {
            ConfigError::PageSize => "--page-size",
            ConfigError::UnitSize => "--unit-size",
            ConfigError::Units => "--cpus",
            ConfigError::FirstChunk(_) => "--first-chunk",
        };
        CliError::usage(format!("{flag}: {e}"))
    })?;
    Ok(config)
}

fn read(pool: &PercpuPool, start: Instant) -> Reading {
    let (populated_pages, empty_pop_pages) = pool.populated_pages();
    let stats = pool.stats();
    Reading {
        percpu_kb: pool.meminfo_percpu_kb(),
        rss_kb: pool.resident_bytes() / 1024,
        process_rss_kb: process_rss_kb(),
        chunks: (stats.chunks_created - stats.chunks_destroyed) as usize,
        populated_pages,
        empty_pop_pages,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// The process's resident set from /proc/self/statm (second field, in pages).
fn process_rss_kb() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    pages * mmkit_runtime::arena::page_size() as u64 / 1024
}

/// `mkdir`: every object of the list (per-node ones once per node).
fn create_group(
    pool: &PercpuPool,
    objects: &[ObjectSpec],
    nodes: usize,
) -> Result<Vec<PercpuPtr>, CliError> {
    let mut group = Vec::new();
    for object in objects {
        for _ in 0..if object.per_node { nodes } else { 1 } {
            let ptr = pool
                .alloc_raw(object.size, object.align, AllocKind::Kernel)
                .map_err(|e| CliError::failed(format!("{}: {e}", object.name)))?;
            group.push(ptr);
        }
    }
    Ok(group)
}

/// `rmdir`: free the group's objects.
fn remove_group(pool: &PercpuPool, group: Vec<PercpuPtr>) -> Result<(), CliError> {
    for ptr in group {
        // SAFETY: the test never dereferences its areas; each is freed once.
        unsafe { pool.free_raw(ptr) }.map_err(|e| CliError::failed(e.to_string()))?;
    }
    Ok(())
}

fn run_test(args: &TestArgs) -> Result<(), CliError> {
    if args.live {
        if args.outer == 0 {
            return Err(CliError::usage("--outer must be at least 1"));
        }
        return percpu_live::run(&percpu_live::LiveArgs {
            outer: args.outer,
            inner: args.inner,
            settle_seconds: args.settle_seconds,
            json: args.json,
        });
    }
    let kernel = kernel(&args.kernel)?;
    if args.list_objects {
        print!("{}", kernel.objects);
        return Ok(());
    }
    let objects = objects(args.objects.as_deref(), kernel)?;
    if args.outer == 0 {
        return Err(CliError::usage("--outer must be at least 1"));
    }
    let config = config(args, kernel)?;
    if let Some(object) = objects.iter().find(|o| o.align > config.page_size) {
        let source = args
            .objects
            .as_deref()
            .unwrap_or(Path::new("<built-in list>"));
        return Err(CliError::usage(format!(
            "--objects {}:{}: alignment {} is larger than a page ({} bytes)",
            source.display(),
            object.line,
            object.align,
            config.page_size
        )));
    }
    check_cgroups_fit(args, &objects, &config)?;
    let pool = PercpuPool::with_config(config).map_err(|e| CliError::usage(e.to_string()))?;
    let start = Instant::now();

    let before = read(&pool, start);
    let mut outers = Vec::with_capacity(args.outer);
    let mut inners = Vec::with_capacity(args.outer * args.inner);
    for _ in 0..args.outer {
        outers.push(create_group(&pool, &objects, args.nodes)?);
        for _ in 0..args.inner {
            inners.push(create_group(&pool, &objects, args.nodes)?);
        }
    }
    let after_creation = read(&pool, start);
    for group in inners {
        remove_group(&pool, group)?;
    }
    // The script sleeps 10 s: long enough for the balance work to have run.
    pool.balance();
    let after_deletion = read(&pool, start);
    pool.verify()
        .map_err(|e| CliError::failed(format!("percpu verify: {e}")))?;
    for group in outers {
        remove_group(&pool, group)?;
    }
    pool.balance();
    let after_removing_all = read(&pool, start);

    let stats = pool.stats();
    let report = Report {
        outer: args.outer,
        inner: args.inner,
        cgroups: args.outer * (args.inner + 1),
        kernel: kernel.name,
        first_chunk: config.first_chunk.map(|l| FirstChunkReport {
            static_size: l.static_size,
            reserved_size: l.reserved_size,
            dynamic_size: l.dynamic_size,
        }),
        policy: config.policy.name,
        cpus: config.nr_units,
        nodes: args.nodes,
        page_size: config.page_size,
        unit_size: config.unit_size,
        bytes_per_cpu_per_cgroup: objects
            .iter()
            .map(|o| o.size * if o.per_node { args.nodes } else { 1 })
            .sum(),
        objects,
        before,
        after_creation,
        after_deletion,
        after_removing_all,
        balance_runs: stats.balance_runs,
        chunks_created: stats.chunks_created,
        chunks_destroyed: stats.chunks_destroyed,
        protect_failures: pool.protect_failures(),
    };
    print_report(&report, args.json)
}

fn print_report(report: &Report, json: bool) -> Result<(), CliError> {
    if json {
        return crate::output::print_json(report);
    }
    println!(
        "percpu_test: {} outer x {} inner = {} cgroups, {} bytes per CPU each ({} objects of {}), \
         policy {}, {} CPUs, {} KiB pages, {} KiB units",
        report.outer,
        report.inner,
        report.cgroups,
        report.bytes_per_cpu_per_cgroup,
        report.objects.len(),
        report.kernel,
        report.policy,
        report.cpus,
        report.page_size >> 10,
        report.unit_size >> 10
    );
    match report.first_chunk {
        Some(l) => println!(
            "first chunk: s{} r{} d{} (static, reserved, dynamic bytes per unit), populated from boot",
            l.static_size, l.reserved_size, l.dynamic_size
        ),
        None => println!("first chunk: none (every chunk dynamic)"),
    }
    for (label, reading) in [
        ("before", report.before),
        ("after creation", report.after_creation),
        ("after deleting inner + balance", report.after_deletion),
        ("after removing all", report.after_removing_all),
    ] {
        println!(
            "Percpu:     {:>10} kB   resident {:>10} kB   process {:>10} kB   chunks {:>5}   \
             ({label}, {:.1} s)",
            reading.percpu_kb,
            reading.rss_kb,
            reading.process_rss_kb,
            reading.chunks,
            reading.seconds
        );
    }
    println!(
        "balance work runs: {}, chunks created: {}, destroyed: {}",
        report.balance_runs, report.chunks_created, report.chunks_destroyed
    );
    if report.protect_failures > 0 {
        println!(
            "note: {} depopulated ranges stayed read/write (vm.max_map_count reached); \
             their memory was still returned",
            report.protect_failures
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_lines_parse() {
        let objects = parse_objects("a 8\nb 640 8 per-node # comment\n\n# only\nc 2k 64").unwrap();
        assert_eq!(objects.len(), 3);
        assert_eq!((objects[1].size, objects[1].per_node), (640, true));
        assert_eq!((objects[2].size, objects[2].align), (2048, 64));
        assert!(parse_objects("a").is_err());
        assert!(parse_objects("# nothing").is_err());
        assert_eq!(
            parse_objects("a 8\nb 0")
                .unwrap_err()
                .split_once(':')
                .unwrap()
                .0,
            "2"
        );
        assert!(parse_objects("a 40k")
            .unwrap_err()
            .starts_with("1: size 40960"));
        assert!(parse_objects("a 8 3")
            .unwrap_err()
            .contains("\"3\" is neither"));
        assert_eq!(parse_objects(OBJECTS_V5_14).unwrap().len(), 9);
        assert_eq!(parse_objects(OBJECTS_LINUX_6_18).unwrap().len(), 11);
    }
}
