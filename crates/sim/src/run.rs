//! One run of one workload under one policy, and the seed-table metrics it yields
//! (`workloads.md` §3.4).

use std::sync::atomic::Ordering::Relaxed;

use mmkit_core::page_alloc::DrainReason;
use mmkit_core::Policy;
use serde::Serialize;

use crate::cache::CacheCounts;
use crate::cost::CostModel;
use crate::engine::{Series, Sim, SimError, SimOptions, SimStats, MAX_CPUS};
use crate::machine::MachineSpec;
use crate::workload::kbuild::{Kbuild, KbuildParams};
use crate::workload::micro::{Pagealloc, PageallocParams, Pageout, PageoutParams};
use crate::workload::stream::{Stream, StreamParams};
use crate::workload::WorkloadKind;

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSpec {
    /// The workload.
    pub workload: WorkloadKind,
    /// CPUs; `None`: the seed machine's.
    pub cpus: Option<u32>,
    /// Seed of every random choice.
    pub seed: u64,
    /// Size of the run: 1 is the default scale, smaller is faster.
    pub scale: f64,
    /// Memory per node in bytes; `None`: the machine's (the seed's 128 GiB).
    pub node_bytes: Option<u64>,
    /// Walk the allocator and check page conservation every this many steps.
    pub verify_every: Option<u64>,
    /// The cost model: [`CostModel::SERVER`] unless a sensitivity run changes a parameter.
    pub cost: CostModel,
}

impl RunSpec {
    /// The seed-scale run of `workload` with seed 1.
    pub fn new(workload: WorkloadKind) -> RunSpec {
        RunSpec {
            workload,
            cpus: None,
            seed: 1,
            scale: 1.0,
            node_bytes: None,
            verify_every: None,
            cost: CostModel::SERVER,
        }
    }

    /// Why this run cannot be simulated, if it cannot: a CPU count outside what the
    /// workload and the engine can take, or a scale outside (0, 100].
    pub fn validate(&self) -> Result<(), SimError> {
        let cpus = self.machine().nr_cpus();
        let min = self.workload.min_cpus();
        if cpus < min {
            return Err(SimError::Invalid(format!(
                "{} needs at least {min} CPU{}, not {cpus}",
                self.workload,
                if min == 1 { "" } else { "s" }
            )));
        }
        if cpus > MAX_CPUS {
            return Err(SimError::Invalid(format!(
                "{cpus} CPUs are too many to simulate: use at most {MAX_CPUS}"
            )));
        }
        if !(self.scale > 0.0 && self.scale <= 100.0) {
            return Err(SimError::Invalid(format!(
                "scale {} is invalid: use a number in (0, 100]",
                self.scale
            )));
        }
        Ok(())
    }

    /// The machine this run simulates.
    pub fn machine(&self) -> MachineSpec {
        let mut machine = self.workload.machine();
        if let Some(cpus) = self.cpus {
            if cpus != machine.nr_cpus() {
                machine = machine.with_cpus(cpus);
            }
        }
        if let Some(bytes) = self.node_bytes {
            machine = machine.with_node_bytes(bytes);
        }
        machine
    }
}

/// A pageset's limits (CPU 0, its local zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PagesetLimits {
    /// `batch`.
    pub batch: u64,
    /// `high_min` (v6.6's fixed `high`).
    pub high_min: u64,
    /// `high_max`.
    pub high_max: u64,
}

/// Everything a run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// The workload.
    pub workload: WorkloadKind,
    /// The policy preset.
    pub policy: String,
    /// The machine.
    pub machine: MachineSpec,
    /// Its pageset limits.
    pub pageset: PagesetLimits,
    /// The seed.
    pub seed: u64,
    /// The scale.
    pub scale: f64,
    /// Virtual wall time of the run.
    pub wall_ns: u64,
    /// What the score is (`build time`, `score`, …).
    pub score_name: String,
    /// Whether a higher score is better.
    pub higher_is_better: bool,
    /// The score: build time in ms, messages per second, ns per page, loops per second.
    pub score: f64,
    /// Σ zone-lock spin / (CPUs × wall time), in %.
    pub lock_contend_pct: f64,
    /// Σ spin / Σ busy, in % (diagnostic).
    pub spin_of_busy_pct: f64,
    /// PCP drains by the `free_high` rule.
    pub free_high: u64,
    /// Pages taken from the buddy lists (refills + direct buddy allocations).
    pub alloc_zone: u64,
    /// Pages allocated (`pgalloc`).
    pub pgalloc: u64,
    /// PCP refills.
    pub pcp_refills: u64,
    /// Drains by reason: free, free_high, decay, numa_expire, explicit.
    pub pcp_drains: [u64; DrainReason::COUNT],
    /// Pages those drains gave back to the zones, by the same reasons.
    pub pcp_drain_pages: [u64; DrainReason::COUNT],
    /// Seed-comparable cache miss rate, in %.
    pub cache_miss_pct: f64,
    /// Lines touched by class.
    pub cache: CacheCounts,
    /// Most pages on all pagesets at a sample.
    pub pcp_pages_peak: u64,
    /// Mean pages on all pagesets over the samples.
    pub pcp_pages_mean: f64,
    /// Allocator calls (allocations + frees): the page events simulated.
    pub page_events: u64,
    /// The engine's totals.
    pub stats: SimStats,
    /// `pagealloc` only: (N, alloc ns/page, free ns/page).
    pub curve: Vec<(u64, f64, f64)>,
    /// Samples over time.
    pub series: Series,
}

enum Built {
    Kbuild(Kbuild),
    Stream(Stream),
    Pagealloc(Pagealloc),
    Pageout(Pageout),
}

impl Built {
    /// Run the workload on `sim`: a [`Sim::run`] per workload type, each with its own
    /// step inlined into the event loop.
    fn run(&mut self, sim: &mut Sim, progress: &mut dyn FnMut(f64)) -> Result<u64, SimError> {
        match self {
            Built::Kbuild(w) => sim.run(w, progress),
            Built::Stream(w) => sim.run(w, progress),
            Built::Pagealloc(w) => sim.run(w, progress),
            Built::Pageout(w) => sim.run(w, progress),
        }
    }
}

/// Sampled CPUs for the `high` series: the first CPU of each socket and of a pair, and
/// the last CPU.
fn high_cpus(machine: &MachineSpec) -> Vec<u32> {
    let n = machine.nr_cpus();
    let mut cpus: Vec<u32> = vec![0, 1.min(n - 1), n / 2, n - 1];
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// Run `spec` under `policy`. `progress` gets the fraction done now and then.
pub fn run(
    spec: &RunSpec,
    policy: Policy,
    progress: &mut dyn FnMut(f64),
) -> Result<RunResult, SimError> {
    spec.validate()?;
    let machine = spec.machine();
    let cpus = machine.nr_cpus();
    let scale = spec.scale;
    let mut built = match spec.workload {
        WorkloadKind::Kbuild => Built::Kbuild(Kbuild::new(
            KbuildParams::scaled(scale),
            cpus,
            machine.cpus_per_socket,
            spec.seed,
        )),
        WorkloadKind::Netperf => {
            Built::Stream(Stream::new(StreamParams::netperf(scale), cpus, spec.seed))
        }
        WorkloadKind::Unix => {
            Built::Stream(Stream::new(StreamParams::unix(scale), cpus, spec.seed))
        }
        WorkloadKind::Pagealloc => Built::Pagealloc(Pagealloc::new(PageallocParams::scaled(scale))),
        WorkloadKind::Pageout => {
            Built::Pageout(Pageout::new(PageoutParams::scaled(scale), cpus, spec.seed))
        }
    };
    let options = SimOptions {
        sample_ns: 1_000_000,
        verify_every: spec.verify_every,
        high_cpus: high_cpus(&machine),
    };
    let mut sim = Sim::new(&machine, policy, options);
    sim.set_cost(spec.cost);
    let wall_ns = built.run(&mut sim, progress)?;
    let wall_s = wall_ns as f64 / 1e9;
    let score = match &built {
        Built::Kbuild(_) => wall_ns as f64 / 1e6,
        Built::Stream(s) => s.received() as f64 / wall_s,
        Built::Pagealloc(p) => {
            let curve = p.curve();
            curve.iter().map(|c| c.1 + c.2).sum::<f64>() / curve.len().max(1) as f64
        }
        Built::Pageout(p) => p.loops_done() as f64 / wall_s,
    };
    let curve = match &built {
        Built::Pagealloc(p) => p.curve(),
        _ => Vec::new(),
    };
    Ok(result(spec, policy, &machine, &sim, wall_ns, score, curve))
}

fn result(
    spec: &RunSpec,
    policy: Policy,
    machine: &MachineSpec,
    sim: &Sim,
    wall_ns: u64,
    score: f64,
    curve: Vec<(u64, f64, f64)>,
) -> RunResult {
    let zones: Vec<_> = sim
        .allocator()
        .zones()
        .iter()
        .filter(|z| z.managed() > 0)
        .collect();
    let sum = |f: &dyn Fn(&mmkit_core::Zone) -> u64| zones.iter().map(|z| f(z)).sum::<u64>();
    let pcp_drains = core::array::from_fn(|r| sum(&|z| z.events().pcp_drains[r].load(Relaxed)));
    let pcp_drain_pages =
        core::array::from_fn(|r| sum(&|z| z.events().pcp_drain_pages[r].load(Relaxed)));
    let pageset = zones[0].pageset(0).expect("CPU 0 has a pageset");
    let stats = sim.stats;
    let series = sim.series.clone();
    let samples = series.pcp_pages.len().max(1) as f64;
    let (score_name, higher_is_better) = spec.workload.score_name();
    RunResult {
        workload: spec.workload,
        policy: policy.name.to_owned(),
        machine: machine.clone(),
        pageset: PagesetLimits {
            batch: pageset.batch,
            high_min: pageset.high_min,
            high_max: pageset.high_max,
        },
        seed: spec.seed,
        scale: spec.scale,
        wall_ns,
        score_name: score_name.to_owned(),
        higher_is_better,
        score,
        lock_contend_pct: 100.0 * stats.spin_ns as f64
            / (machine.nr_cpus() as f64 * wall_ns.max(1) as f64),
        spin_of_busy_pct: 100.0 * stats.spin_ns as f64 / stats.busy_ns.max(1) as f64,
        free_high: pcp_drains[DrainReason::FreeHigh as usize],
        alloc_zone: sum(&|z| z.events().alloc_zone_locked.load(Relaxed)),
        pgalloc: sum(&|z| z.pgalloc()),
        pcp_refills: sum(&|z| z.events().pcp_refills.load(Relaxed)),
        pcp_drains,
        pcp_drain_pages,
        cache_miss_pct: sim.cache.miss_rate_pct(&sim.cost),
        cache: sim.cache.counts,
        pcp_pages_peak: series.pcp_pages.iter().copied().max().unwrap_or(0),
        pcp_pages_mean: series.pcp_pages.iter().sum::<u64>() as f64 / samples,
        page_events: stats.alloc_calls + stats.free_calls,
        stats,
        curve,
        series,
    }
}

/// One row of a seed-style table: relative values against the first policy (= 100)
/// except lock contend% and cache miss rate%, which are absolute.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableRow {
    /// The policy.
    pub policy: String,
    /// Score or build time relative to the first policy.
    pub score: f64,
    /// Lock contend%.
    pub lock_contend_pct: f64,
    /// free_high relative to the first policy.
    pub free_high: f64,
    /// alloc_zone relative to the first policy.
    pub alloc_zone: f64,
    /// Cache miss rate%.
    pub cache_miss_pct: f64,
    /// Mean pages held in PCPs relative to the first policy.
    pub pcp_pages_mean: f64,
    /// Peak pages held in PCPs relative to the first policy.
    pub pcp_pages_peak: f64,
}

/// The seed-style table of `results` (one workload, several policies).
pub fn table(results: &[RunResult]) -> Vec<TableRow> {
    let Some(first) = results.first() else {
        return Vec::new();
    };
    let rel = |v: f64, base: f64| if base == 0.0 { 0.0 } else { 100.0 * v / base };
    results
        .iter()
        .map(|r| TableRow {
            policy: r.policy.clone(),
            score: rel(r.score, first.score),
            lock_contend_pct: r.lock_contend_pct,
            free_high: rel(r.free_high as f64, first.free_high as f64),
            alloc_zone: rel(r.alloc_zone as f64, first.alloc_zone as f64),
            cache_miss_pct: r.cache_miss_pct,
            pcp_pages_mean: rel(r.pcp_pages_mean, first.pcp_pages_mean),
            pcp_pages_peak: rel(r.pcp_pages_peak as f64, first.pcp_pages_peak as f64),
        })
        .collect()
}
