//! One run of one workload under one policy, and the published tables' metrics it yields
//! (`docs/reference/workloads.md` §3.4).

use mmkit_core::page_alloc::DrainReason;
use mmkit_core::policy::DrainMode;
use mmkit_core::{PageAllocator, Policy};
use serde::{Deserialize, Serialize};

use crate::cache::CacheCounts;
use crate::cost::CostModel;
use crate::engine::{
    Series, Sim, SimError, SimOptions, SimStats, Warmup, Workload, ZoneTotals, MAX_CPUS,
    MAX_VIRTUAL_NS, MAX_ZONES,
};
use crate::machine::MachineSpec;
use crate::workload::kbuild::{Kbuild, KbuildParams};
use crate::workload::micro::{Pagealloc, PageallocParams};
use crate::workload::pageout::{DirectReclaimStats, Pageout, PageoutParams};
use crate::workload::stream::{Placement, Stream, StreamParams};
use crate::workload::WorkloadKind;

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSpec {
    /// The workload.
    pub workload: WorkloadKind,
    /// CPUs; `None`: the published machine's.
    pub cpus: Option<u32>,
    /// Seed of every random choice.
    pub seed: u64,
    /// Size of the run: 1 is the default scale, smaller is faster.
    pub scale: f64,
    /// Memory per node in bytes; `None`: the machine's (the published machines' 128 GiB).
    pub node_bytes: Option<u64>,
    /// `CONFIG_PCP_BATCH_SCALE_MAX` and `vm.stat_interval` in ms; `None`: Linux's defaults
    /// (5, 1000 ms).
    pub pcp_knobs: Option<(u8, u32)>,
    /// Walk the allocator and check page conservation every this many steps.
    pub verify_every: Option<u64>,
    /// The cost model: [`CostModel::calibrated()`] unless a sensitivity run changes a parameter.
    pub cost: CostModel,
    /// kbuild's page faults per second of a running process: the committed calibration's
    /// unless `mmkit sim calibrate` is trying another.
    pub kbuild_faults_per_s: f64,
    /// Where lmbench's pairs run: the committed calibration's unless a sensitivity run or
    /// `mmkit sim calibrate` is trying another.
    pub unix_placement: Placement,
    /// kbuild: measure the build's middle only ([`KbuildParams::steady_window`], the
    /// default); `false` measures the whole build.
    pub kbuild_steady_window: bool,
    /// kbuild's processes per CPU instead of the default's ([`KbuildParams::jobs_per_cpu`],
    /// times a scale above 1): a longer or shorter build at the published lifetimes.
    /// Given `params`, theirs count.
    pub kbuild_jobs_per_cpu: Option<u32>,
    /// kbuild: the objects SLUB wants in a slab instead of Linux's default for the CPU
    /// count ([`KbuildParams::slub_min_objects`]), which sets the order of the VMA slabs
    /// an exit frees. Given `params`, theirs count.
    pub kbuild_slub_min_objects: Option<u32>,
    /// The machine to simulate instead of the published run's (e.g. one built from a
    /// zoneinfo snapshot, [`MachineSpec::from_zoneinfo`]); `cpus` and `node_bytes` still
    /// apply to it.
    pub machine: Option<MachineSpec>,
    /// The workload's parameters instead of the published run's at `scale` (e.g. measured
    /// from a trace of this machine); they must be of `workload`'s kind, and
    /// `kbuild_faults_per_s` does not override them.
    pub params: Option<WorkloadParams>,
}

/// A workload's parameters, for a run that does not use the published ones.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum WorkloadParams {
    /// kbuild's.
    Kbuild(KbuildParams),
    /// A stream's (netperf or unix).
    Stream(StreamParams),
    /// pageout's (e.g. its direct-reclaim variant).
    Pageout(PageoutParams),
}

impl RunSpec {
    /// The default-scale run (`--scale 1`) of `workload` with seed 1.
    pub fn new(workload: WorkloadKind) -> RunSpec {
        RunSpec {
            workload,
            cpus: None,
            seed: 1,
            scale: 1.0,
            node_bytes: None,
            pcp_knobs: None,
            verify_every: None,
            cost: CostModel::calibrated(),
            kbuild_faults_per_s: crate::cost::calibrated_fit().kbuild_faults_per_s,
            unix_placement: crate::cost::calibrated_fit().unix_placement,
            kbuild_steady_window: true,
            kbuild_jobs_per_cpu: None,
            kbuild_slub_min_objects: None,
            machine: None,
            params: None,
        }
    }

    /// Why this run cannot be simulated, if it cannot: a CPU count outside what the
    /// workload and the engine can take, caches too large for the cache model's stamps
    /// on that many CPUs, a scale outside (0, 100], or kbuild's processes per CPU given
    /// to another workload or outside 1 to 100 times the default.
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
        let machine = self.machine();
        if machine.sockets as usize > MAX_ZONES {
            return Err(SimError::Invalid(format!(
                "{} nodes are too many to simulate: use at most {MAX_ZONES}",
                machine.sockets
            )));
        }
        machine.try_topology().map_err(SimError::Invalid)?;
        // Ticks are events, whose keys hold MAX_VIRTUAL_NS: half for the interval, half
        // for the run it is scheduled from.
        let tick_ns = u64::from(machine.stat_interval_ms) * 1_000_000;
        if tick_ns >= MAX_VIRTUAL_NS / 2 {
            return Err(SimError::Invalid(format!(
                "a vm.stat_interval of {} ms is too long to simulate: use at most {} s",
                machine.stat_interval_ms,
                (MAX_VIRTUAL_NS / 2 - 1) / 1_000_000_000
            )));
        }
        crate::cache::check_geometry(
            cpus as usize,
            machine.l2_bytes,
            machine.socket_cache_bytes(),
            &self.cost,
        )
        .map_err(SimError::Invalid)?;
        if !(self.scale > 0.0 && self.scale <= 100.0) {
            return Err(SimError::Invalid(format!(
                "scale {} is invalid: use a number in (0, 100]",
                self.scale
            )));
        }
        if let Some(jobs) = self.kbuild_jobs_per_cpu {
            if self.workload != WorkloadKind::Kbuild {
                return Err(SimError::Invalid(format!(
                    "processes per CPU are kbuild's, not {}'s",
                    self.workload
                )));
            }
            // As many as the largest scale gives the default build.
            let most = 100 * KbuildParams::default().jobs_per_cpu;
            if !(1..=most).contains(&jobs) {
                return Err(SimError::Invalid(format!(
                    "{jobs} processes per CPU: use 1 to {most}"
                )));
            }
        }
        if let Some(objects) = self.kbuild_slub_min_objects {
            if self.workload != WorkloadKind::Kbuild {
                return Err(SimError::Invalid(format!(
                    "SLUB's objects per slab are kbuild's, not {}'s",
                    self.workload
                )));
            }
            if !(1..=1024).contains(&objects) {
                return Err(SimError::Invalid(format!(
                    "{objects} objects per slab: use 1 to 1024"
                )));
            }
        }
        let matches = match (&self.params, self.workload) {
            (None, _) => true,
            (Some(WorkloadParams::Kbuild(_)), WorkloadKind::Kbuild) => true,
            (Some(WorkloadParams::Stream(_)), WorkloadKind::Netperf | WorkloadKind::Unix) => true,
            (Some(WorkloadParams::Pageout(_)), WorkloadKind::Pageout) => true,
            (Some(_), _) => false,
        };
        if !matches {
            return Err(SimError::Invalid(format!(
                "the parameters given are not {}'s",
                self.workload
            )));
        }
        self.machine()
            .settings()
            .validate()
            .map_err(|e| SimError::Invalid(e.to_string()))
    }

    /// The machine this run simulates.
    pub fn machine(&self) -> MachineSpec {
        let mut machine = self
            .machine
            .clone()
            .unwrap_or_else(|| self.workload.machine());
        if let Some(cpus) = self.cpus {
            if cpus != machine.nr_cpus() {
                machine = machine.with_cpus(cpus);
            }
        }
        if let Some(bytes) = self.node_bytes {
            machine = machine.with_node_bytes(bytes);
        }
        if let Some((scale_max, stat_interval_ms)) = self.pcp_knobs {
            machine = machine.with_pcp_knobs(scale_max, stat_interval_ms);
        }
        machine
    }
}

/// A pageset's limits (CPU 0, its local zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagesetLimits {
    /// `batch`.
    pub batch: u64,
    /// `high_min` (v6.6's fixed `high`).
    pub high_min: u64,
    /// `high_max`.
    pub high_max: u64,
}

/// Everything a run measured. It reads back from its JSON unchanged (a sharded sweep
/// carries results between processes that way), so it holds no host time and no value
/// JSON cannot carry (a NaN or an infinity would come back as `null`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Virtual time inside the measurement window (the run less its warm-up), which
    /// every count and rate below covers.
    pub measured_ns: u64,
    /// What the score is (`build time`, `score`, …).
    pub score_name: String,
    /// Whether a higher score is better.
    pub higher_is_better: bool,
    /// The score: build time in ms, messages per second, ns per page, loops per second.
    pub score: f64,
    /// lock contend%: Σ zone-lock spin / Σ busy (unhalted) CPU time, in %. perf's
    /// `cycles` event, which the published figure is a share of, does not count a halted
    /// CPU.
    pub lock_contend_pct: f64,
    /// Σ spin / (CPUs × wall time), in % (diagnostic: the share of the whole machine).
    pub spin_of_wall_pct: f64,
    /// Time in PCP drains (zone-lock hold and spin) / busy time, in %: what a call-graph
    /// `cycles` profile shows as `free_pcppages_bulk`'s children.
    pub drain_pct: f64,
    /// Time freeing blocks straight to the buddy lists (zone-lock hold and spin) / busy
    /// time, in %: what a call-graph profile shows as `__free_pages_ok`'s lock work.
    #[serde(default)]
    pub buddy_free_pct: f64,
    /// PCP drains by the `free_high` rule.
    pub free_high: u64,
    /// Pages taken from the buddy lists (refills + direct buddy allocations).
    pub alloc_zone: u64,
    /// Pages allocated (`pgalloc`).
    pub pgalloc: u64,
    /// PCP refills.
    pub pcp_refills: u64,
    /// Pages those refills moved from the buddy lists onto pagesets.
    pub pcp_refill_pages: u64,
    /// Drains by reason: free, free_high, decay, numa_expire, explicit.
    pub pcp_drains: [u64; DrainReason::COUNT],
    /// Pages those drains gave back to the zones, by the same reasons.
    pub pcp_drain_pages: [u64; DrainReason::COUNT],
    /// Cache miss rate comparable with Huang 2023's, in %.
    pub cache_miss_pct: f64,
    /// Lines touched by class.
    pub cache: CacheCounts,
    /// Most pages on all pagesets at a sample.
    pub pcp_pages_peak: u64,
    /// Mean pages on all pagesets over the samples.
    pub pcp_pages_mean: f64,
    /// Mean used pages (held by the workload + on pagesets) over the samples.
    pub used_pages_mean: f64,
    /// Units of work done: messages received (streams), processes run (kbuild), loops
    /// (pageout), pages (pagealloc).
    pub work_done: u64,
    /// Allocator calls (allocations + frees) inside the measurement window.
    pub page_events: u64,
    /// Allocator calls over the whole run, start-up and tail included: what the
    /// simulator spent its time on, so the figure a speed (page events per second of the
    /// run) divides by. kbuild's window is its middle, about half of its events.
    pub run_page_events: u64,
    /// The engine's totals.
    pub stats: SimStats,
    /// `pagealloc` only: (N, alloc ns/page, free ns/page).
    pub curve: Vec<(u64, f64, f64)>,
    /// Samples over time.
    pub series: Series,
    /// `pageout`'s direct-reclaim variant only: what direct reclaim did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_reclaim: Option<DirectReclaimStats>,
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

/// Whether every pageset of `allocator` keeps a batch at a `free_high` drain: `policy`
/// has patch 3 and every CPU's share of its last-level cache is large enough
/// (`PCPF_FREE_HIGH_BATCH`). Such a stream row warms up for
/// [`StreamParams::batched_warmup_ms`].
fn keeps_batch_at_free_high(allocator: &PageAllocator, policy: Policy) -> bool {
    policy.pcp.free_high_batch
        && allocator
            .zones()
            .iter()
            .filter(|zone| zone.managed() > 0)
            .all(|zone| {
                (0..zone.nr_pagesets() as u32).all(|cpu| {
                    zone.pageset(cpu)
                        .is_some_and(|pcp| pcp.flags.free_high_batch)
                })
            })
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
    // The window opens once the workload (built below, for this allocator) says when.
    let options = SimOptions {
        sample_ns: 1_000_000,
        verify_every: spec.verify_every,
        high_cpus: high_cpus(&machine),
        measure_from_ns: 0,
    };
    let mut sim = Sim::with_cost(&machine, policy, spec.cost, options)?;
    let batched = keeps_batch_at_free_high(sim.allocator(), policy);
    let stream = |published: StreamParams| {
        let params = match &spec.params {
            Some(WorkloadParams::Stream(params)) => params.clone(),
            _ => published,
        };
        if batched {
            params.batched()
        } else {
            params
        }
    };
    let mut built = match spec.workload {
        WorkloadKind::Kbuild => Built::Kbuild(Kbuild::new(
            match &spec.params {
                Some(WorkloadParams::Kbuild(params)) => params.clone(),
                _ => {
                    let scaled = KbuildParams::scaled(scale);
                    KbuildParams {
                        faults_per_s: spec.kbuild_faults_per_s,
                        steady_window: spec.kbuild_steady_window,
                        jobs_per_cpu: spec.kbuild_jobs_per_cpu.unwrap_or(scaled.jobs_per_cpu),
                        slub_min_objects: spec.kbuild_slub_min_objects,
                        ..scaled
                    }
                }
            },
            cpus,
            machine.cpus_per_socket,
            spec.seed,
        )),
        WorkloadKind::Netperf => Built::Stream(Stream::new(
            stream(StreamParams::netperf(scale)),
            &machine,
            spec.seed,
        )),
        WorkloadKind::Unix => Built::Stream(Stream::new(
            stream(StreamParams {
                placement: spec.unix_placement,
                ..StreamParams::unix(scale)
            }),
            &machine,
            spec.seed,
        )),
        WorkloadKind::Pagealloc => Built::Pagealloc(Pagealloc::new(PageallocParams::scaled(scale))),
        WorkloadKind::Pageout => Built::Pageout(Pageout::new(
            match &spec.params {
                Some(WorkloadParams::Pageout(params)) => params.clone(),
                _ => PageoutParams::scaled(scale),
            },
            cpus,
            spec.seed,
        )),
    };
    sim.measure_from(match &built {
        Built::Stream(s) => s.warmup_ns(),
        Built::Kbuild(k) => k.warmup_ns(),
        _ => 0,
    });
    machine.warm_pagesets(sim.allocator());
    let wall_ns = built.run(&mut sim, progress)?;
    let work_done = match &built {
        Built::Kbuild(k) => k.jobs_done(),
        Built::Stream(s) => s.received(),
        Built::Pagealloc(p) => p.work_done(),
        Built::Pageout(p) => p.loops_done(),
    };
    let warmup = sim.warmup.clone().unwrap_or_default();
    // A window the workload closed before the run's end ends there; else at the end.
    let (until_ns, until_work) = sim
        .until
        .as_ref()
        .map_or((wall_ns, work_done), |u| (u.t_ns, u.work_done));
    let window = Window {
        wall_ns,
        measured_ns: until_ns - warmup.t_ns,
        work_done: until_work - warmup.work_done,
    };
    let window_s = window.measured_ns as f64 / 1e9;
    let score = match &built {
        // The middle's pace over the whole build: what a build that is all middle takes.
        Built::Kbuild(k) if k.steady_window() && window.work_done > 0 => {
            window.measured_ns as f64 / window.work_done as f64 * k.jobs_total() as f64 / 1e6
        }
        Built::Kbuild(_) => wall_ns as f64 / 1e6,
        Built::Stream(_) => window.work_done as f64 / window_s,
        Built::Pagealloc(p) => {
            let curve = p.curve();
            curve.iter().map(|c| c.1 + c.2).sum::<f64>() / curve.len().max(1) as f64
        }
        Built::Pageout(_) => window.work_done as f64 / window_s,
    };
    let curve = match &built {
        Built::Pagealloc(p) => p.curve(),
        _ => Vec::new(),
    };
    let mut result = result(spec, policy, &machine, &sim, &warmup, &window, score, curve);
    if let Built::Pageout(p) = &built {
        result.direct_reclaim = p.direct_reclaim_stats();
    }
    Ok(result)
}

/// The run's time and work, whole and inside the measurement window.
struct Window {
    wall_ns: u64,
    measured_ns: u64,
    work_done: u64,
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site, each argument a different part of the run"
)]
fn result(
    spec: &RunSpec,
    policy: Policy,
    machine: &MachineSpec,
    sim: &Sim,
    warmup: &Warmup,
    window: &Window,
    score: f64,
    curve: Vec<(u64, f64, f64)>,
) -> RunResult {
    let zones: Vec<_> = sim
        .allocator()
        .zones()
        .iter()
        .filter(|z| z.managed() > 0)
        .collect();
    let end = sim
        .until
        .as_ref()
        .map_or_else(|| sim.zone_totals(), |u| u.zones.clone());
    let totals: Vec<ZoneTotals> = end
        .iter()
        .enumerate()
        .map(|(i, t)| warmup.zones.get(i).map_or(*t, |w| t.since(w)))
        .collect();
    let sum = |f: &dyn Fn(&ZoneTotals) -> u64| totals.iter().map(f).sum::<u64>();
    let pcp_drains = core::array::from_fn(|r| sum(&|t| t.pcp_drains[r]));
    let pcp_drain_pages = core::array::from_fn(|r| sum(&|t| t.pcp_drain_pages[r]));
    let pageset = zones[0].pageset(0).expect("CPU 0 has a pageset");
    let (stats, cache, until_ns) = match &sim.until {
        Some(u) => (u.stats, u.cache, u.t_ns),
        None => (sim.stats, sim.cache.counts, u64::MAX),
    };
    let stats = stats.since(&warmup.stats);
    let cache = cache.since(&warmup.cache);
    let series = sim.series.clone();
    let in_window = |t: u64| t >= warmup.t_ns && t < until_ns;
    let measured: Vec<u64> = series
        .t_ns
        .iter()
        .zip(&series.pcp_pages)
        .filter(|(t, _)| in_window(**t))
        .map(|(_, p)| *p)
        .collect();
    let samples = measured.len().max(1) as f64;
    let used: u64 = series
        .t_ns
        .iter()
        .zip(series.pcp_pages.iter().zip(&series.held_pages))
        .filter(|(t, _)| in_window(**t))
        .map(|(_, (pcp, held))| pcp + held)
        .sum();
    let (score_name, higher_is_better) = spec.workload.score_name();
    RunResult {
        workload: spec.workload,
        // The drain mode is a switch of its own: a run in workqueue mode says so.
        policy: match policy.drain {
            DrainMode::Direct => policy.name.to_owned(),
            DrainMode::Workqueue => format!("{}/wq", policy.name),
        },
        machine: machine.clone(),
        pageset: PagesetLimits {
            batch: pageset.batch,
            high_min: pageset.high_min,
            high_max: pageset.high_max,
        },
        seed: spec.seed,
        scale: spec.scale,
        wall_ns: window.wall_ns,
        measured_ns: window.measured_ns,
        score_name: score_name.to_owned(),
        higher_is_better,
        score,
        lock_contend_pct: 100.0 * stats.spin_ns as f64 / stats.busy_ns.max(1) as f64,
        spin_of_wall_pct: 100.0 * stats.spin_ns as f64
            / (machine.nr_cpus() as f64 * window.measured_ns.max(1) as f64),
        drain_pct: 100.0 * stats.drain_ns as f64 / stats.busy_ns.max(1) as f64,
        buddy_free_pct: 100.0 * stats.buddy_free_ns as f64 / stats.busy_ns.max(1) as f64,
        free_high: pcp_drains[DrainReason::FreeHigh as usize],
        alloc_zone: sum(&|t| t.alloc_zone),
        pgalloc: sum(&|t| t.pgalloc),
        pcp_refills: sum(&|t| t.pcp_refills),
        pcp_refill_pages: sum(&|t| t.pcp_refill_pages),
        pcp_drains,
        pcp_drain_pages,
        cache_miss_pct: cache.miss_rate_pct(&sim.cost, stats.work_ns),
        cache,
        pcp_pages_peak: measured.iter().copied().max().unwrap_or(0),
        pcp_pages_mean: measured.iter().sum::<u64>() as f64 / samples,
        used_pages_mean: used as f64 / samples,
        work_done: window.work_done,
        page_events: stats.alloc_calls + stats.free_calls,
        run_page_events: sim.stats.alloc_calls + sim.stats.free_calls,
        stats,
        curve,
        series,
        direct_reclaim: None,
    }
}

/// One row of a table like Huang 2023's: relative values against the first policy (= 100)
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
    /// Mean used memory (pages the workload holds + pages on pagesets) over the
    /// measurement, in % above the first policy's: the published "+18.4 % used memory".
    pub used_memory_mean_pct: f64,
    /// Mean pages on pagesets as % of the mean used memory over the measurement
    /// (absolute, this run's own): how much of what a policy adds is pageset memory.
    pub pcp_of_used_pct: f64,
}

/// The table of `results`, as Huang 2023 gives it, (one workload, several policies).
pub fn table(results: &[RunResult]) -> Vec<TableRow> {
    let Some(first) = results.first() else {
        return Vec::new();
    };
    // `v / base` first: the base row's own ratio is then exactly 1, and its value 100
    // (100 · v / v can round to 100.00000000000001).
    let rel = |v: f64, base: f64| if base == 0.0 { 0.0 } else { 100.0 * (v / base) };
    // A fixed-work benchmark (lmbench moves a fixed amount of data) counts events per
    // unit of work; a fixed-time one (netperf, 300 s) counts totals.
    let per = |r: &RunResult| {
        if r.workload.fixed_work() {
            r.work_done.max(1) as f64
        } else {
            1.0
        }
    };
    results
        .iter()
        .map(|r| TableRow {
            policy: r.policy.clone(),
            score: rel(r.score, first.score),
            lock_contend_pct: r.lock_contend_pct,
            free_high: rel(
                r.free_high as f64 / per(r),
                first.free_high as f64 / per(first),
            ),
            alloc_zone: rel(
                r.alloc_zone as f64 / per(r),
                first.alloc_zone as f64 / per(first),
            ),
            cache_miss_pct: r.cache_miss_pct,
            pcp_pages_mean: rel(r.pcp_pages_mean, first.pcp_pages_mean),
            pcp_pages_peak: rel(r.pcp_pages_peak as f64, first.pcp_pages_peak as f64),
            used_memory_mean_pct: rel(r.used_pages_mean, first.used_pages_mean) - 100.0,
            pcp_of_used_pct: rel(r.pcp_pages_mean, r.used_pages_mean),
        })
        .collect()
}
