//! `mmkit percpu test`: the percpu_test.sh of the partial-depopulation thread (Roman
//! Gushchin's cover letter, `docs/reference/workloads.md` §2.5), on the runtime's percpu pool.
//!
//! Each memory cgroup `mkdir` makes the percpu allocations Linux v5.14 makes for it (the
//! list below, or `--objects FILE`); `outer` groups each get `inner` children, the
//! children are removed, the balance work runs (the script's `sleep 10`), and the
//! `Percpu:` line of /proc/meminfo is printed before, after creation and after deletion,
//! computed as Linux computes it (`pcpu_nr_populated × pcpu_nr_units` pages), next to the
//! memory the OS reports resident for the chunks (`mincore`) and for the whole process
//! (`/proc/self/statm`). The arena is real memory:
//! 1000 × 50 at the default 4 CPUs peaks around 0.7 GB.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use mmkit_core::percpu::{
    AllocKind, ConfigError, PercpuConfig, PercpuPolicy, PercpuPtr, PCPU_MIN_ALLOC_SIZE,
    PCPU_MIN_UNIT_SIZE, PERCPU_PRESETS,
};
use mmkit_runtime::PercpuPool;
use serde::Serialize;

use crate::size::parse_bytes;
use crate::{limits, CliError};

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
    #[arg(long, default_value = "v5.14")]
    policy: String,
    /// Page size: 4k (x86-64) or 64k (POWER9 as in Pratik Sampat's test).
    #[arg(long, default_value = "4k")]
    page_size: String,
    /// Possible CPUs (units per chunk). The default, 4, models Pratik Sampat's Intel KVM
    /// guest (4 CPUs, 4 GB) from the thread; it keeps 1000 × 50 under a gigabyte of real
    /// memory and a few seconds.
    #[arg(long, default_value_t = 4)]
    cpus: usize,
    /// Unit size; default 256k with 4k pages (x86-64 "u262144") and 640k with 64k pages
    /// (10 pages, from memory of ppc64le boot logs).
    #[arg(long)]
    unit_size: Option<String>,
    /// NUMA nodes: one lruvec_stats_percpu per node per cgroup.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// The percpu objects of one cgroup, one per line: `NAME SIZE [ALIGN] [per-node]`
    /// (`#` starts a comment). Default: the v5.14 list in docs/PERCPU.md.
    #[arg(long)]
    objects: Option<PathBuf>,
    /// Print the object list in the `--objects` format and exit.
    #[arg(long)]
    list_objects: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
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
const DEFAULT_OBJECTS: &str = "\
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

/// The objects of `--objects FILE` (errors as `FILE:LINE: message`), or the built-in list.
fn objects(path: Option<&Path>) -> Result<Vec<ObjectSpec>, CliError> {
    let Some(path) = path else {
        return Ok(parse_objects(DEFAULT_OBJECTS).expect("the built-in list parses"));
    };
    let refuse = |what: String| CliError::usage(format!("--objects {}:{what}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| refuse(format!(" {e}")))?;
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

fn config(args: &TestArgs) -> Result<PercpuConfig, CliError> {
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
    let unit_size = match &args.unit_size {
        Some(text) => bytes("--unit-size", text)?,
        None if page_size == 4 << 10 => 256 << 10,
        None => 10 * page_size,
    };
    if args.nodes == 0 || args.nodes > 64 {
        return Err(CliError::usage("--nodes must be 1 to 64"));
    }
    let config = PercpuConfig {
        page_size,
        unit_size,
        nr_units: args.cpus,
        policy,
        first_chunk: None,
    };
    config.validate().map_err(|e| {
        let flag = match e {
            ConfigError::PageSize => "--page-size",
            ConfigError::UnitSize => "--unit-size",
            ConfigError::Units => "--cpus",
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
    if args.list_objects {
        print!("{DEFAULT_OBJECTS}");
        return Ok(());
    }
    let objects = objects(args.objects.as_deref())?;
    if args.outer == 0 {
        return Err(CliError::usage("--outer must be at least 1"));
    }
    let config = config(args)?;
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
        let text =
            serde_json::to_string_pretty(report).map_err(|e| CliError::failed(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    println!(
        "percpu_test: {} outer x {} inner = {} cgroups, {} bytes per CPU each ({} objects), \
         policy {}, {} CPUs, {} KiB pages, {} KiB units",
        report.outer,
        report.inner,
        report.cgroups,
        report.bytes_per_cpu_per_cgroup,
        report.objects.len(),
        report.policy,
        report.cpus,
        report.page_size >> 10,
        report.unit_size >> 10
    );
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
        assert_eq!(parse_objects(DEFAULT_OBJECTS).unwrap().len(), 9);
    }
}
