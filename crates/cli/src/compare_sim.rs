//! `mmkit trace compare-sim`: the simulator against the kernel at small scale. Each
//! recording of a workload (`mmkit trace record --command-only`) gives the simulator its
//! machine (the recording's zoneinfo snapshot) and its work (messages and their pace, or
//! processes with their faults and kernel blocks: `mmkit_sim::measured`); the simulator
//! then predicts the PCP refill and drain pages per unit of work, and the table puts them
//! beside the kernel's from the same recording. Several recordings are repeats: the last
//! rows give the mean, the spread and the ratio of the means.
//!
//! What is compared and why (`docs/FIDELITY.md`, "Checked against the simulator"):
//! refill pages are counted in the allocating task's context on both sides. Drain pages
//! are those of frees (`free` and `free_high`): the vmstat tick's decay drains run in a
//! kworker, outside a recording of one command, so the simulator's decay drains are
//! shown apart.
//!
//! The work is in `mmkit-trace` (counting) and `mmkit-sim` (measured parameters, runs);
//! this module joins them and prints.

use std::path::PathBuf;

use clap::Args;
use mmkit_core::page_alloc::DrainReason;
use mmkit_core::Policy;
use mmkit_sim::measured::{MeasuredBuild, MeasuredStream};
use mmkit_sim::{MachineSpec, RunResult, RunSpec, WorkloadKind, WorkloadParams};
use mmkit_trace::replay::Machine;
use mmkit_trace::work::{self, Work};
use serde::Serialize;

use crate::machine::policy_preset;
use crate::CliError;

/// Arguments of `mmkit trace compare-sim`.
#[derive(Args, Debug)]
pub struct CompareSimArgs {
    /// Recordings of one workload, one per repeat (`mmkit trace record --command-only`).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// What the recordings ran: unix (crates/trace/workloads/af_unix.py --mib N),
    /// netperf (crates/trace/workloads/sctp_stream.py, recorded by sctp-vm.sh) or kbuild
    /// (crates/trace/workloads/compile.sh).
    #[arg(long)]
    workload: String,
    /// unix and netperf: the messages each recording sent, one count for all recordings
    /// (af_unix.py --mib N sends 16 N) or one per recording in their order (what
    /// sctp_stream.py printed).
    #[arg(long, value_delimiter = ',', value_name = "N[,N...]")]
    messages: Vec<u64>,
    /// The policy preset the simulator runs.
    #[arg(long, default_value = "linux-6.18")]
    policy: String,
    /// Seed of the simulations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Parallel simulations; default: the available cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Start the simulated pagesets as each recording's zoneinfo snapshot found the
    /// kernel's (each CPU's count and high) instead of empty.
    #[arg(long)]
    warm_pagesets: bool,
}

/// Private L2 per CPU of the simulated machine: a recording does not hold it, and only
/// the cache model reads it, not the counts compared here. The measuring VM's is 2 MiB.
const L2_BYTES: u64 = 2 << 20;

/// Per unit of work, one side.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct PerUnit {
    /// Units of work: messages (unix, netperf) or processes (kbuild).
    units: f64,
    /// Pages allocated per unit.
    alloc_pages: f64,
    /// Refills (`rmqueue_bulk` calls for a pageset) per unit.
    refills: f64,
    /// Pages refills moved onto pagesets, per unit.
    refill_pages: f64,
    /// Pages drains of frees (`free`, `free_high`) moved back, per unit.
    drain_pages: f64,
}

impl PerUnit {
    fn new(units: f64, alloc: u64, refills: u64, refill: u64, drain: u64) -> PerUnit {
        let per = |n: u64| n as f64 / units.max(1.0);
        PerUnit {
            units,
            alloc_pages: per(alloc),
            refills: per(refills),
            refill_pages: per(refill),
            drain_pages: per(drain),
        }
    }
}

/// One recording and its simulation.
#[derive(Clone, Debug, Serialize)]
struct Row {
    file: String,
    /// The recording's scope (`command …`, or `system` when other processes are in it).
    scope: String,
    /// Its allocations' share of the whole machine's over the recording.
    share_of_machine: Option<f64>,
    seconds: f64,
    kernel: PerUnit,
    sim: PerUnit,
    /// The simulator's decay drain pages per unit (the kernel's are not in the recording).
    sim_decay_drain_pages: f64,
    /// The measured inputs, in words.
    inputs: String,
}

/// Mean, sample standard deviation, minimum and maximum.
#[derive(Clone, Copy, Debug, Serialize)]
struct Spread {
    mean: f64,
    sd: f64,
    min: f64,
    max: f64,
}

fn spread(values: &[f64]) -> Spread {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Spread { mean, sd, min, max }
}

/// A metric over the repeats, both sides.
#[derive(Clone, Copy, Debug, Serialize)]
struct Compared {
    kernel: Spread,
    sim: Spread,
    /// Simulated mean ÷ kernel mean.
    ratio: Option<f64>,
}

fn compared(rows: &[Row], metric: impl Fn(&PerUnit) -> f64) -> Compared {
    let kernel = spread(&rows.iter().map(|r| metric(&r.kernel)).collect::<Vec<_>>());
    let sim = spread(&rows.iter().map(|r| metric(&r.sim)).collect::<Vec<_>>());
    Compared {
        kernel,
        sim,
        ratio: (kernel.mean > 0.0).then(|| sim.mean / kernel.mean),
    }
}

#[derive(Serialize)]
struct Report {
    workload: WorkloadKind,
    policy: String,
    unit: &'static str,
    rows: Vec<Row>,
    refill_pages: Compared,
    drain_pages: Compared,
    /// Refills per unit, and their mean size: how the refill pages split into how often
    /// and how large (an order-0 refill grows while its pageset frees nothing,
    /// `alloc_factor`, so the size says how long the CPU allocated without freeing).
    refills: Compared,
    pages_per_refill: Compared,
    refill_pages_per_1000_allocated: Compared,
    drain_pages_per_1000_allocated: Compared,
}

/// A recording, read and measured.
struct Recording {
    file: PathBuf,
    machine: Machine,
    work: Work,
}

fn load(file: &std::path::Path) -> Result<Recording, CliError> {
    let name = file.display();
    let trace = crate::trace_cmd::load_complete(file)?;
    let machine =
        Machine::from_trace(&trace, None).map_err(|e| CliError::usage(format!("{name}: {e}")))?;
    let work = work::measure(&trace, &machine);
    Ok(Recording {
        file: file.to_path_buf(),
        machine,
        work,
    })
}

/// The simulation of `recording`: its machine, its measured work.
fn spec(
    recording: &Recording,
    workload: WorkloadKind,
    messages: u64,
    (seed, warm_pagesets): (u64, bool),
) -> Result<(RunSpec, String), CliError> {
    let name = recording.file.display().to_string();
    let machine = MachineSpec::from_zoneinfo(
        &name,
        &recording.machine.zones,
        recording.machine.llc.llc_bytes,
        L2_BYTES,
    )
    .map_err(|e| CliError::usage(format!("{name}: {e}")))?;
    let machine = if warm_pagesets {
        machine.with_warm_pagesets(&recording.machine.zones)
    } else {
        machine
    };
    let work = &recording.work;
    let (params, inputs) = match workload {
        WorkloadKind::Netperf => {
            let stream = MeasuredStream {
                messages,
                seconds: work.seconds,
            };
            let params = stream.netperf_params();
            let per = |order: u8| {
                work.allocations.get(&(order, 0)).copied().unwrap_or(0) as f64 / messages as f64
            };
            let modelled = |order: u8| {
                params.message_blocks[0]
                    .iter()
                    .filter(|c| c.0 == order)
                    .map(|c| c.1)
                    .sum::<f64>()
            };
            let inputs = format!(
                "{messages} messages in {:.2} s; UNMOVABLE blocks per message of order 2/3/4: {:.3}/{:.3}/{:.3} (sim: the chunk and {:.3}/{:.3}/{:.3})",
                work.seconds,
                per(2),
                per(3),
                per(4),
                modelled(2),
                modelled(3),
                modelled(4)
            );
            (WorkloadParams::Stream(params), inputs)
        }
        WorkloadKind::Unix => {
            let stream = MeasuredStream {
                messages,
                seconds: work.seconds,
            };
            let per = |order: u8| {
                work.allocations.get(&(order, 0)).copied().unwrap_or(0) as f64 / messages as f64
            };
            let inputs = format!(
                "{messages} messages in {:.2} s; UNMOVABLE blocks per message of order 3/2/1/0: {:.3}/{:.3}/{:.3}/{:.3} (sim 1/1/1/1)",
                work.seconds,
                per(3),
                per(2),
                per(1),
                per(0)
            );
            (WorkloadParams::Stream(stream.unix_params()), inputs)
        }
        _ => {
            let build = measured_build(work);
            let cc1 = work.processes.iter().filter(|p| p.comm == "cc1").count();
            let inputs = format!(
                "{} processes ({cc1} cc1) in {:.2} s; faults per process {:.0}, kernel pages per process {:.1}, order-1/2/3 blocks {:?}, cross-CPU frees {:.1} %, mid-life frees {:.2} %",
                build.processes(),
                build.seconds,
                build.faults.iter().sum::<u64>() as f64 / build.processes().max(1) as f64,
                build.kernel_pages_per_process,
                build.blocks,
                100.0 * build.cross_cpu_free_share,
                100.0 * build.midlife_free_share
            );
            (
                WorkloadParams::Kbuild(mmkit_sim::workload::kbuild::KbuildParams::measured(&build)),
                inputs,
            )
        }
    };
    let start: Vec<String> = recording
        .machine
        .zones
        .iter()
        .filter(|z| z.zone == mmkit_core::ZoneType::Normal)
        .flat_map(|z| z.pagesets.iter())
        .map(|p| format!("{}/{}", p.count, p.high))
        .collect();
    let simulated = if warm_pagesets {
        "simulated: started from these, then a warm-up of the same work"
    } else {
        "simulated: empty at boot, then a warm-up of the same work"
    };
    let inputs = format!(
        "{inputs}; kernel's Normal pagesets at the start, count/high by CPU: {} ({simulated})",
        start.join(", ")
    );
    let spec = RunSpec {
        seed,
        machine: Some(machine),
        params: Some(params),
        ..RunSpec::new(workload)
    };
    spec.validate()
        .map_err(|e| CliError::usage(format!("{name}: {e}")))?;
    Ok((spec, inputs))
}

/// The build a recording shows: its processes in pid order (the order they started,
/// while pids do not wrap).
fn measured_build(work: &Work) -> MeasuredBuild {
    let processes = work.processes.len().max(1) as f64;
    let mut blocks = [0u64; 3];
    for p in &work.processes {
        for (sum, b) in blocks.iter_mut().zip(p.blocks) {
            *sum += b;
        }
    }
    MeasuredBuild {
        faults: work.processes.iter().map(|p| p.faults).collect(),
        kernel_pages_per_process: work.processes.iter().map(|p| p.kernel_pages).sum::<u64>() as f64
            / processes,
        blocks,
        cross_cpu_free_share: work.cross_cpu_free_share(),
        midlife_free_share: work.midlife_free_share(),
        seconds: work.seconds,
        cpus: work.cpus,
    }
}

fn row(recording: &Recording, result: &RunResult, units: f64, inputs: String) -> Row {
    let work = &recording.work;
    let of_frees = |pages: &[u64; DrainReason::COUNT]| {
        pages[DrainReason::Free as usize] + pages[DrainReason::FreeHigh as usize]
    };
    let sim_units = result.work_done as f64;
    Row {
        file: recording.file.display().to_string(),
        scope: work.scope.clone().unwrap_or_else(|| "system".into()),
        share_of_machine: work.share_of_machine(),
        seconds: work.seconds,
        kernel: PerUnit::new(
            units,
            work.alloc_pages,
            work.kernel.refill_events,
            work.kernel.refill_pages,
            work.kernel.drain_pages,
        ),
        sim: PerUnit::new(
            sim_units,
            result.pgalloc,
            result.pcp_refills,
            result.pcp_refill_pages,
            of_frees(&result.pcp_drain_pages),
        ),
        sim_decay_drain_pages: result.pcp_drain_pages[DrainReason::Decay as usize] as f64
            / sim_units.max(1.0),
        inputs,
    }
}

/// `mmkit trace compare-sim`.
pub fn run(args: &CompareSimArgs) -> Result<(), CliError> {
    let workload = crate::sim_cmd::workload(&args.workload)?;
    if !matches!(
        workload,
        WorkloadKind::Unix | WorkloadKind::Netperf | WorkloadKind::Kbuild
    ) {
        return Err(CliError::usage(format!(
            "--workload {workload}: compare-sim knows unix, netperf and kbuild"
        )));
    }
    let streams = matches!(workload, WorkloadKind::Unix | WorkloadKind::Netperf);
    if streams && args.messages.is_empty() {
        return Err(CliError::usage(format!(
            "--workload {workload} needs --messages N (af_unix.py --mib M sends 16 M; sctp_stream.py prints its count)"
        )));
    }
    if !streams && !args.messages.is_empty() {
        return Err(CliError::usage(
            "--messages is for the stream workloads; kbuild counts processes in the trace",
        ));
    }
    if args.messages.contains(&0) {
        return Err(CliError::usage("--messages must be at least 1"));
    }
    if args.messages.len() > 1 && args.messages.len() != args.files.len() {
        return Err(CliError::usage(format!(
            "--messages gives {} counts for {} recordings: give one for all, or one per recording",
            args.messages.len(),
            args.files.len()
        )));
    }
    let messages_of = |i: usize| match args.messages.as_slice() {
        [] => 0,
        [one] => *one,
        each => each[i],
    };
    let policy: Policy = policy_preset(&args.policy)?;
    let recordings: Vec<Recording> = args
        .files
        .iter()
        .map(|f| load(f))
        .collect::<Result<_, _>>()?;
    let mut jobs = Vec::new();
    let mut inputs = Vec::new();
    for (i, recording) in recordings.iter().enumerate() {
        let (spec, words) = spec(
            recording,
            workload,
            messages_of(i),
            (args.seed, args.warm_pagesets),
        )?;
        jobs.push((spec, policy));
        inputs.push(words);
    }
    let results = crate::sim_cmd::run_all(&jobs, args.threads, true)?;
    let rows: Vec<Row> = recordings
        .iter()
        .zip(&results)
        .zip(inputs)
        .enumerate()
        .map(|(i, ((recording, result), words))| {
            let units = match streams {
                true => messages_of(i) as f64,
                false => recording.work.processes.len() as f64,
            };
            row(recording, result, units, words)
        })
        .collect();
    let per_kpage = |metric: fn(&PerUnit) -> f64| {
        move |p: &PerUnit| 1000.0 * metric(p) / p.alloc_pages.max(f64::MIN_POSITIVE)
    };
    let report = Report {
        workload,
        policy: policy.name.to_owned(),
        unit: if streams { "message" } else { "process" },
        refill_pages: compared(&rows, |p| p.refill_pages),
        drain_pages: compared(&rows, |p| p.drain_pages),
        refills: compared(&rows, |p| p.refills),
        pages_per_refill: compared(&rows, |p| p.refill_pages / p.refills.max(f64::MIN_POSITIVE)),
        refill_pages_per_1000_allocated: compared(&rows, per_kpage(|p| p.refill_pages)),
        drain_pages_per_1000_allocated: compared(&rows, per_kpage(|p| p.drain_pages)),
        rows,
    };
    if args.json {
        return crate::output::print_json(&report);
    }
    print!("{}", render(&report));
    Ok(())
}

fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let unit = report.unit;
    let _ = writeln!(
        out,
        "{} under {}: {} recording{}, kernel (the recording) against the simulator (its machine and measured work), per {unit}",
        report.workload,
        report.policy,
        report.rows.len(),
        if report.rows.len() == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "{:<4} {:>9} {:>9} {:>17} {:>21} {:>21} {:>10}",
        "run",
        if unit == "process" {
            "processes"
        } else {
            "messages"
        },
        "machine%",
        "alloc pages k|s",
        "refill pages k|s",
        "drain pages k|s",
        "sim decay"
    );
    for (i, r) in report.rows.iter().enumerate() {
        let share = r
            .share_of_machine
            .map_or("-".to_string(), |s| format!("{:.0}", 100.0 * s));
        let pair = |k: f64, s: f64| format!("{k:.2} | {s:.2}");
        let _ = writeln!(
            out,
            "{:<4} {:>9.0} {:>9} {:>17} {:>21} {:>21} {:>10.2}",
            i + 1,
            r.kernel.units,
            share,
            pair(r.kernel.alloc_pages, r.sim.alloc_pages),
            pair(r.kernel.refill_pages, r.sim.refill_pages),
            pair(r.kernel.drain_pages, r.sim.drain_pages),
            r.sim_decay_drain_pages
        );
    }
    for (i, r) in report.rows.iter().enumerate() {
        let _ = writeln!(out, "  {}: {} ({}); {}", i + 1, r.file, r.scope, r.inputs);
    }
    let _ = writeln!(
        out,
        "{:<34} {:>24} {:>24} {:>8}",
        "", "kernel mean ± sd (min–max)", "simulated mean ± sd", "ratio"
    );
    for (name, c) in [
        (format!("refill pages per {unit}"), &report.refill_pages),
        (format!("drain pages per {unit}"), &report.drain_pages),
        (format!("refills per {unit}"), &report.refills),
        ("pages per refill".to_string(), &report.pages_per_refill),
        (
            "refill pages per 1000 allocated".to_string(),
            &report.refill_pages_per_1000_allocated,
        ),
        (
            "drain pages per 1000 allocated".to_string(),
            &report.drain_pages_per_1000_allocated,
        ),
    ] {
        let k = c.kernel;
        let _ = writeln!(
            out,
            "{name:<34} {:>24} {:>24} {:>8}",
            format!("{:.2} ± {:.2} ({:.2}–{:.2})", k.mean, k.sd, k.min, k.max),
            format!("{:.2} ± {:.2}", c.sim.mean, c.sim.sd),
            c.ratio.map_or("-".to_string(), |r| format!("{r:.3}"))
        );
    }
    out
}
