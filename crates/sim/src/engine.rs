//! The discrete-event engine: virtual CPUs with their own clocks, a FIFO server per zone
//! lock, the vmstat tick, sampling, and the calls a workload makes.
//!
//! The engine drives the real [`PageAllocator`]; it never decides what the allocator does.
//! It charges time for what the allocator reports it did in each call — one
//! [`ZoneLockHold`] per zone-lock hold, through the core's `_report` entry points, as Linux
//! fires a tracepoint at each — with the one cost model (`docs/reference/workloads.md`
//! §3.1–3.2, [`CostModel`]):
//!
//! - a PCP hit costs `alloc_hit_ns` / `free_hit_ns`;
//! - each reported hold (a refill, a drain and its reason, a direct buddy allocation or
//!   free) is one acquisition of its zone's lock, held
//!   `c_lock + blocks · h_page + (merges · L_merge + splits · L_split) · t_xfer` (the
//!   descriptor lines each buddy level touches that another CPU wrote last);
//! - the zone lock is a FIFO server: a request at `t` is granted at
//!   `max(t, free_at) + t_xfer · (1 + lock_lines)` (the lock word and the zone lines that
//!   follow it, if the last holder was another CPU), and the CPU spins from `t` to the
//!   grant when the lock was busy.
//!
//! A request is made at the virtual time it happens: a workload's step does one thing
//! that takes time, the lock is requested at the call's start (the PCP path's own cost
//! comes after), and every request is checked against the other CPUs' pending events
//! ([`SimStats::requests_ahead`] counts one made later than an event of a CPU that could
//! have asked first). A call that takes zone locks one after another (a direct
//! `drain_all_pages` locks every pageset's zone in turn) requests each when its CPU comes
//! first again: the holds that would come after another CPU's event wait in the queue
//! (`Sim::charge_holds`). A vmstat tick, or a step, that finds its CPU busy waits for it.
//!
//! CPUs run in time order: the CPU with the earliest clock runs its next step; it keeps
//! running while its clock stays before every other pending event (a lookahead that
//! changes nothing in the order, only saves queue operations). Ties break by event kind,
//! then CPU number, so a run is a pure function of its inputs.

use mmkit_core::page::Page;
use mmkit_core::page_alloc::pcp::{pcp_allowed_order, PAGE_ALLOC_COSTLY_ORDER};
use mmkit_core::page_alloc::{
    AllocAttempt, Caller, DrainAll, DrainReason, DrainWork, Gfp, HoldKind, LockEvents, Zone,
    ZoneLockHold,
};
use mmkit_core::{Order, PageAllocator, Pfn, Policy};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

use crate::bins::TimeBins;
use crate::cache::CacheModel;
use crate::cost::CostModel;
use crate::huge_pages;
use crate::list_walk::ListWalk;
use crate::machine::MachineSpec;
use crate::mem_map::MappedAllocator;
use crate::prefetch::prefetch;
use crate::queue::{EventQueue, NONE};

/// What a workload's CPU does after a step.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// Run again at the CPU's clock.
    Continue,
    /// Idle until this time (or an earlier [`Sim::wake`]).
    SleepUntil(u64),
    /// Idle until a [`Sim::wake`].
    Wait,
    /// Finished its work (a [`Sim::wake`] can still run it again).
    Done,
}

/// A run that cannot go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// The allocator refused an allocation (the workload held too much memory).
    OutOfMemory {
        /// The CPU.
        cpu: u32,
        /// The order.
        order: u8,
    },
    /// The allocator refused a free: a workload bug.
    BadFree(String),
    /// The allocator's own walker found a broken invariant.
    Verify(String),
    /// The run asks for something the simulator cannot do (too many CPUs, a workload
    /// on too few), in words. Nothing ran.
    Invalid(String),
    /// The allocator's census disagrees with the pages the workload holds.
    Conservation {
        /// Allocated pages in the census.
        census: u64,
        /// Pages the workload holds.
        held: u64,
    },
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::OutOfMemory { cpu, order } => write!(
                f,
                "CPU {cpu}: order-{order} allocation failed: the workload needs more memory"
            ),
            SimError::BadFree(e) => write!(f, "bad free: {e}"),
            SimError::Verify(e) => write!(f, "allocator invariant broken: {e}"),
            SimError::Invalid(why) => f.write_str(why),
            SimError::Conservation { census, held } => write!(
                f,
                "page conservation: the allocator has {census} pages allocated, the workload holds {held}"
            ),
        }
    }
}

impl std::error::Error for SimError {}

/// The most CPUs a machine may have: event keys and cache stamps hold a CPU number in
/// 16 bits, and the cache model's `NEVER` stamp is `0xffff`.
pub const MAX_CPUS: u32 = 0xfffe;

/// A workload: one state machine per virtual CPU.
pub trait Workload {
    /// Schedule the CPUs that start working (with [`Sim::wake`]).
    fn start(&mut self, sim: &mut Sim);
    /// Let `cpu` do one thing at `sim.now(cpu)`.
    fn step(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError>;
    /// Pages the workload holds now (allocated and not yet freed).
    fn held_pages(&self) -> u64;
    /// How far the run is, in `[0, 1]`.
    fn progress(&self, sim: &Sim) -> f64;
    /// A fixed virtual duration, or `None` to run until every CPU is done.
    fn end_ns(&self) -> Option<u64>;
    /// Units of work done so far (messages, processes, loops): what a fixed-work
    /// benchmark's counts are divided by.
    fn work_done(&self) -> u64;
    /// Whether the measurement window may open, besides its time bound
    /// (`SimOptions::measure_from_ns`): a workload that measures a steady state waits
    /// until its start-up is behind it.
    fn window_may_open(&self) -> bool {
        true
    }
    /// Whether the measurement window has closed: a workload whose end is a tail of
    /// fewer busy CPUs closes it when the tail begins. The run goes on to its end.
    fn window_closed(&self) -> bool {
        false
    }
}

/// Totals the engine keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Allocation calls.
    pub alloc_calls: u64,
    /// Free calls.
    pub free_calls: u64,
    /// Pages allocated.
    pub pages_allocated: u64,
    /// Time spent waiting for zone locks.
    pub spin_ns: u64,
    /// Time zone locks were held.
    pub lock_hold_ns: u64,
    /// Zone-lock acquisitions.
    pub lock_acquisitions: u64,
    /// Acquisitions that found the lock held.
    pub lock_contended: u64,
    /// Blocks moved under zone locks.
    pub lock_blocks: u64,
    /// Buddy merge and split levels done under zone locks (each charged its lines'
    /// transfers).
    #[serde(default)]
    pub lock_levels: u64,
    /// Time CPUs spent in PCP drains (`free_pcppages_bulk`): their zone-lock holds and the
    /// spin before them, what a call-graph profile counts as that function's children.
    pub drain_ns: u64,
    /// Time CPUs spent freeing blocks straight to the buddy lists (`__free_pages_ok`:
    /// orders the pagesets do not cache): their zone-lock holds and the spin before them.
    #[serde(default)]
    pub buddy_free_ns: u64,
    /// Work ns CPUs saved by running alone while their hyperthread sibling spun (only
    /// with an SMT yield in the cost model).
    #[serde(default)]
    pub smt_gain_ns: u64,
    /// Time CPUs were busy (allocator, page touching, spinning, workload work): the
    /// unhalted cycles a `cycles` profile samples, the denominator of lock contend%.
    pub busy_ns: u64,
    /// Time CPUs spent in the workload's own work ([`Sim::work`]), part of `busy_ns`.
    pub work_ns: u64,
    /// Zone-lock requests made at a virtual time later than another pending event, which
    /// could have asked first: each is a causality error of a workload or of the engine
    /// (it books the lock ahead of CPUs that are processed later). Must stay 0; the
    /// tests check it for every workload.
    pub requests_ahead: u64,
    /// Steps run.
    pub steps: u64,
    /// vmstat ticks run (each may decay a pageset's `high` and drain it).
    pub vmstat_ticks: u64,
    /// Frees of orders 1–3 to a pageset: the frees the `free_high` rule looks at.
    #[serde(default)]
    pub high_order_frees: u64,
    /// Of those, the ones whose pageset's previous free was of order 1–3 too (an order-0
    /// or THP free in between clears it; allocations do not): the frees on which patch
    /// 1's rule (`PCPF_PREV_FREE_HIGH_ORDER`) may drain, counted whatever the policy, as
    /// `mmkit trace high-order` counts a recording's.
    #[serde(default)]
    pub high_order_after_high: u64,
}

impl SimStats {
    /// What happened between `earlier` and `self` (both taken from one run).
    pub fn since(&self, earlier: &SimStats) -> SimStats {
        SimStats {
            alloc_calls: self.alloc_calls - earlier.alloc_calls,
            free_calls: self.free_calls - earlier.free_calls,
            pages_allocated: self.pages_allocated - earlier.pages_allocated,
            spin_ns: self.spin_ns - earlier.spin_ns,
            lock_hold_ns: self.lock_hold_ns - earlier.lock_hold_ns,
            lock_acquisitions: self.lock_acquisitions - earlier.lock_acquisitions,
            lock_contended: self.lock_contended - earlier.lock_contended,
            lock_blocks: self.lock_blocks - earlier.lock_blocks,
            lock_levels: self.lock_levels - earlier.lock_levels,
            drain_ns: self.drain_ns - earlier.drain_ns,
            buddy_free_ns: self.buddy_free_ns - earlier.buddy_free_ns,
            smt_gain_ns: self.smt_gain_ns - earlier.smt_gain_ns,
            busy_ns: self.busy_ns - earlier.busy_ns,
            work_ns: self.work_ns - earlier.work_ns,
            requests_ahead: self.requests_ahead - earlier.requests_ahead,
            steps: self.steps - earlier.steps,
            vmstat_ticks: self.vmstat_ticks - earlier.vmstat_ticks,
            high_order_frees: self.high_order_frees - earlier.high_order_frees,
            high_order_after_high: self.high_order_after_high - earlier.high_order_after_high,
        }
    }
}

/// What the run had done when its measurement window opened: the warm-up's share, which
/// the results leave out.
#[derive(Clone, Debug, Default)]
pub struct Warmup {
    /// When the window opened.
    pub t_ns: u64,
    /// The engine's totals then.
    pub stats: SimStats,
    /// The cache model's counts then.
    pub cache: crate::cache::CacheCounts,
    /// The workload's units of work done then.
    pub work_done: u64,
    /// Per simulated zone: its event counters then, as [`ZoneTotals`].
    pub zones: Vec<ZoneTotals>,
}

/// The zone event counters a run reports, read at one time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneTotals {
    /// Drains by reason.
    pub pcp_drains: [u64; DrainReason::COUNT],
    /// Pages drained by reason.
    pub pcp_drain_pages: [u64; DrainReason::COUNT],
    /// Pages taken off the buddy lists.
    pub alloc_zone: u64,
    /// Pages allocated.
    pub pgalloc: u64,
    /// PCP refills.
    pub pcp_refills: u64,
    /// Pages those refills moved onto pagesets.
    pub pcp_refill_pages: u64,
}

impl ZoneTotals {
    /// `zone`'s counters now.
    pub fn read(zone: &Zone) -> ZoneTotals {
        let e = zone.events();
        ZoneTotals {
            pcp_drains: DrainReason::ALL.map(|reason| e.pcp_drains(reason)),
            pcp_drain_pages: DrainReason::ALL.map(|reason| e.pcp_drain_pages(reason)),
            alloc_zone: e.alloc_zone_locked(),
            pgalloc: zone.pgalloc(),
            pcp_refills: e.pcp_refills(),
            pcp_refill_pages: e.pcp_refill_pages(),
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ZoneTotals) -> ZoneTotals {
        ZoneTotals {
            pcp_drains: core::array::from_fn(|r| self.pcp_drains[r] - earlier.pcp_drains[r]),
            pcp_drain_pages: core::array::from_fn(|r| {
                self.pcp_drain_pages[r] - earlier.pcp_drain_pages[r]
            }),
            alloc_zone: self.alloc_zone - earlier.alloc_zone,
            pgalloc: self.pgalloc - earlier.pgalloc,
            pcp_refills: self.pcp_refills - earlier.pcp_refills,
            pcp_refill_pages: self.pcp_refill_pages - earlier.pcp_refill_pages,
        }
    }
}

/// Samples taken at a fixed virtual interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Sample times.
    pub t_ns: Vec<u64>,
    /// Pages on all pagesets.
    pub pcp_pages: Vec<u64>,
    /// Pages the workload holds (its used memory besides the pagesets).
    pub held_pages: Vec<u64>,
    /// Zone-lock spin before each sample time, cumulative: a wait that spans several
    /// sample intervals counts in each the part that falls in it.
    pub spin_ns: Vec<u64>,
    /// CPUs whose `high` is sampled.
    pub high_cpus: Vec<u32>,
    /// Per sampled CPU: its local pageset's effective `high` at each sample.
    pub high: Vec<Vec<u64>>,
}

/// A virtual CPU's clock and the time of its pending step (`Sim::schedule`), if any: one
/// record, so that the step loop, which reads both after every step and writes both when
/// a CPU starts to run, indexes (and checks the bound) once.
#[derive(Clone, Copy, Default)]
struct CpuClock {
    clock: u64,
    scheduled: Option<u64>,
}

#[derive(Clone, Copy, Default)]
struct ZoneLock {
    free_at: u64,
    last_cpu: Option<u32>,
}

/// The zone-lock holds of one allocator call, as the core reports them
/// ([`LockEvents`]): what the engine charges. Reused from call to call.
#[derive(Default)]
struct CallReport {
    holds: Vec<ZoneLockHold>,
    /// `drain_all_pages` calls since the run began: [drained or queued, skipped].
    drain_alls: [u64; 2],
    /// The walk down the buddy list the last refill took from, a step per call.
    walk: ListWalk,
}

impl LockEvents for CallReport {
    fn hold(&mut self, hold: &ZoneLockHold) {
        self.holds.push(*hold);
    }

    fn drain_all(&mut self, skipped: bool) {
        self.drain_alls[usize::from(skipped)] += 1;
    }

    const READS_AHEAD: bool = true;

    fn read_ahead(&mut self, page: &Page) {
        prefetch(page);
    }

    fn refill_left(&mut self, zone: usize, order: Order, first: Pfn, blocks: u64) {
        self.walk = ListWalk::from(zone, order, first, blocks);
    }
}

/// Most zones with memory a simulated machine has (one per node; the machines have two):
/// the counter snapshots taken around every call live on the stack, in arrays of this
/// size ([`Sim::new`] asserts it).
const MAX_ZONES: usize = 4;

const KIND_TICK: u8 = 0;
const KIND_SAMPLE: u8 = 1;
const KIND_STEP: u8 = 2;

/// Bits of an event key below the time: the kind (2 bits) and the CPU (16 bits).
const KEY_TIME_SHIFT: u32 = 18;

/// An event as one integer whose order is that of `(t, kind, cpu)`: the time in the high
/// 46 bits (2^46 ns ≈ 19.5 hours of virtual time), the kind, then the CPU. One `u64`
/// compare instead of a tuple's three keeps the queue cheap.
fn event_key(t: u64, kind: u8, cpu: u32) -> u64 {
    assert!(
        t < 1 << (64 - KEY_TIME_SHIFT),
        "virtual time {t} ns overflows an event key"
    );
    debug_assert!(kind <= KIND_STEP && cpu < 1 << 16);
    t << KEY_TIME_SHIFT | (kind as u64) << 16 | cpu as u64
}

/// The `(t, kind, cpu)` of an [`event_key`].
fn event_parts(key: u64) -> (u64, u8, u32) {
    (
        key >> KEY_TIME_SHIFT,
        (key >> 16 & 0b11) as u8,
        (key & 0xffff) as u32,
    )
}

/// Options of a run that are not the workload's.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Sample interval for the series.
    pub sample_ns: u64,
    /// Run the allocator's walker and the conservation check every this many steps
    /// (and at the end), or never.
    pub verify_every: Option<u64>,
    /// CPUs whose `high` is sampled.
    pub high_cpus: Vec<u32>,
    /// Open the measurement window at the first sample at or after this time: what
    /// happened before is the warm-up (pagesets filling, `high` finding its level).
    pub measure_from_ns: u64,
}

/// The simulator: the allocator, virtual CPUs, zone locks, cache model and statistics.
pub struct Sim {
    allocator: MappedAllocator,
    /// The cost model in force.
    pub cost: CostModel,
    machine: MachineSpec,
    /// Per CPU: its clock and its pending step.
    cpus: Vec<CpuClock>,
    done: Vec<bool>,
    active: u32,
    nr_scheduled: u32,
    /// Pending events as [`event_key`]s: each CPU's step (while `scheduled`) and tick,
    /// and the sample.
    queue: EventQueue,
    /// Allocator zone indices of zones with memory, and their pfn ranges.
    zones: Vec<(usize, u64, u64)>,
    locks: Vec<ZoneLock>,
    /// Allocator zone index → simulated slot.
    slot_of_zone: Vec<usize>,
    /// The current call's zone-lock holds.
    report: CallReport,
    /// The cache model.
    pub cache: CacheModel,
    /// Totals.
    pub stats: SimStats,
    /// Samples.
    pub series: Series,
    /// Zone-lock spin spread over the sample intervals, from which the end of the run
    /// fills [`Series::spin_ns`].
    spin_bins: TimeBins,
    free_high: u64,
    /// Per CPU and zone slot: whether the last free to that pageset was of order 1–3
    /// ([`SimStats::high_order_after_high`]).
    prev_free_high: Vec<[bool; MAX_ZONES]>,
    options: SimOptions,
    tick_ns: u64,
    /// Per CPU: when its next vmstat tick is due. A tick that finds its CPU busy past that
    /// time waits for it (the timer fires, the work runs when the CPU gets to it), but
    /// the next one is due a `tick_ns` after this one, as `round_jiffies` keeps the phase.
    tick_due: Vec<u64>,
    /// A CPU's step is running (zone-lock requests are checked against the queue).
    in_step: bool,
    /// Per CPU: zone-lock holds of its last calls not yet requested, in order. A call
    /// that takes a zone lock more than once (a direct `drain_all_pages` locks every
    /// pageset's zone in turn, then the retry refills) reports all its holds when it
    /// returns; a hold whose request would come after another CPU's pending event waits
    /// here, with every hold after it, until the CPU comes first again
    /// ([`Self::charge_holds`]).
    deferred: Vec<VecDeque<ZoneLockHold>>,
    /// Holds in `deferred`, over every CPU: the step loop's one test.
    nr_deferred: usize,
    /// Per CPU with deferred holds: what its step decided to do next, done once they are
    /// charged.
    after_holds: Vec<Option<Step>>,
    /// The state when the measurement window opened, once it has.
    pub warmup: Option<Warmup>,
    /// The state when the window closed, if the workload closed it before the run's end.
    pub until: Option<Warmup>,
    /// Hyperthreads, when the cost model has an SMT yield ([`CostModel::smt_gain`]).
    smt: Option<Smt>,
    /// Per simulated zone: the end of the descriptor bytes asked to be in huge pages
    /// (the `huge_pages` module).
    huge_done: Vec<usize>,
}

/// The cache model of `machine` under `cost`, with stamps reserved for each simulated
/// zone of `zones` (allocator index, first pfn, end pfn).
fn cache_model(machine: &MachineSpec, zones: &[(usize, u64, u64)], cost: &CostModel) -> CacheModel {
    let cpu_socket = (0..machine.nr_cpus())
        .map(|c| machine.socket_of(c))
        .collect();
    let zone_pages: Vec<u64> = zones.iter().map(|&(_, start, end)| end - start).collect();
    CacheModel::new(
        cpu_socket,
        &zone_pages,
        machine.l2_bytes,
        machine.socket_cache_bytes(),
        cost,
    )
}

/// Hyperthread siblings sharing a core: what a spinning CPU gives its sibling.
struct Smt {
    /// Work ns gained per ns of the sibling's spin, and the most per ns of work.
    gain_per_spin: f64,
    gain_cap: f64,
    /// Per CPU: its sibling.
    sibling: Vec<u32>,
    /// Per CPU: work ns it has gained from its sibling's spin and not yet used. The spin
    /// and the work it speeds up are paired by order, not by time: in the workloads whose
    /// siblings both work (kbuild, netperf) both are busy nearly all the time.
    credit: Vec<f64>,
}

impl Smt {
    /// `cpu` spun `spin` ns: its sibling ran alone meanwhile.
    fn give(&mut self, cpu: u32, spin: u64) {
        let sibling = self.sibling[cpu as usize] as usize;
        self.credit[sibling] += spin as f64 * self.gain_per_spin;
    }

    /// Of `ns` of work `cpu` is about to do, what its credit saves.
    fn take_gain(&mut self, cpu: u32, ns: u64) -> u64 {
        let credit = &mut self.credit[cpu as usize];
        if *credit < 1.0 {
            return 0;
        }
        let gained = credit.min(ns as f64 * self.gain_cap).floor();
        *credit -= gained;
        gained as u64
    }

    /// Siblings on `machine` ([`MachineSpec::sibling_of`]); `None` when a socket's CPUs
    /// do not pair up.
    fn new(machine: &MachineSpec, (gain_per_spin, gain_cap): (f64, f64)) -> Option<Smt> {
        let sibling = (0..machine.nr_cpus())
            .map(|c| machine.sibling_of(c))
            .collect::<Option<Vec<u32>>>()?;
        Some(Smt {
            gain_per_spin,
            gain_cap,
            sibling,
            credit: vec![0.0; machine.nr_cpus() as usize],
        })
    }
}

impl Sim {
    /// A simulator of `machine` with `policy`.
    pub fn new(machine: &MachineSpec, policy: Policy, options: SimOptions) -> Sim {
        let settings = machine.settings();
        let tick_ns = settings.stat_interval_ms as u64 * 1_000_000;
        let allocator = MappedAllocator::new(machine.topology(), settings, policy)
            .expect("machine settings are valid");
        let zones: Vec<(usize, u64, u64)> = allocator
            .zones()
            .iter()
            .enumerate()
            .filter(|(_, z)| z.managed() > 0)
            .map(|(i, z)| (i, z.start_pfn().0, z.start_pfn().0 + z.spanned()))
            .collect();
        assert!(
            zones.len() <= MAX_ZONES,
            "{} zones with memory are too many to simulate",
            zones.len()
        );
        let nr_zones = zones.len();
        // A zone without memory never reports a hold; its entry is never read.
        let mut slot_of_zone = vec![usize::MAX; allocator.zones().len()];
        for (slot, &(zone, _, _)) in zones.iter().enumerate() {
            slot_of_zone[zone] = slot;
        }
        let cost = CostModel::calibrated();
        let smt = cost.smt_gain().and_then(|gain| Smt::new(machine, gain));
        let nr_cpus = machine.nr_cpus();
        assert!(
            nr_cpus <= MAX_CPUS,
            "{nr_cpus} CPUs are too many to simulate"
        );
        let cache = cache_model(machine, &zones, &cost);
        let mut series = Series {
            high_cpus: options.high_cpus.clone(),
            ..Series::default()
        };
        series.high = vec![Vec::new(); options.high_cpus.len()];
        Sim {
            allocator,
            cost,
            machine: machine.clone(),
            cpus: vec![CpuClock::default(); nr_cpus as usize],
            done: vec![true; nr_cpus as usize],
            active: 0,
            nr_scheduled: 0,
            queue: EventQueue::new(nr_cpus as usize),
            locks: vec![ZoneLock::default(); zones.len()],
            slot_of_zone,
            report: CallReport::default(),
            zones,
            cache,
            stats: SimStats::default(),
            series,
            spin_bins: TimeBins::new(options.sample_ns),
            free_high: 0,
            prev_free_high: vec![[false; MAX_ZONES]; nr_cpus as usize],
            options,
            tick_ns,
            tick_due: vec![0; nr_cpus as usize],
            in_step: false,
            deferred: vec![VecDeque::new(); nr_cpus as usize],
            nr_deferred: 0,
            after_holds: vec![None; nr_cpus as usize],
            warmup: None,
            until: None,
            smt,
            huge_done: vec![0; nr_zones],
        }
    }

    /// Replace the cost model (before the run: the cache model's sizes follow it).
    pub fn set_cost(&mut self, cost: CostModel) {
        self.cache = cache_model(&self.machine, &self.zones, &cost);
        self.smt = cost
            .smt_gain()
            .and_then(|gain| Smt::new(&self.machine, gain));
        self.cost = cost;
    }

    /// The allocator.
    pub fn allocator(&self) -> &PageAllocator {
        &self.allocator
    }

    /// The machine.
    pub fn machine(&self) -> &MachineSpec {
        &self.machine
    }

    /// `cpu`'s clock.
    pub fn now(&self, cpu: u32) -> u64 {
        self.cpus[cpu as usize].clock
    }

    /// The latest clock of any CPU.
    pub fn max_clock(&self) -> u64 {
        self.cpus.iter().map(|c| c.clock).max().unwrap_or(0)
    }

    /// Drains triggered by the `free_high` rule so far.
    pub fn free_high_drains(&self) -> u64 {
        self.free_high
    }

    /// Make `cpu` run at `at` (or at its clock, if later), unless it already runs sooner.
    pub fn wake(&mut self, cpu: u32, at: u64) {
        let c = cpu as usize;
        let at = at.max(self.cpus[c].clock);
        if self.done[c] {
            self.done[c] = false;
            self.active += 1;
        }
        // A CPU whose holds wait runs them first (it is scheduled at its clock for them);
        // the wake changes what it does after them.
        if let Some(after) = &mut self.after_holds[c] {
            *after = match *after {
                Step::Continue => Step::Continue,
                Step::SleepUntil(until) => Step::SleepUntil(until.min(at)),
                Step::Wait | Step::Done => Step::SleepUntil(at),
            };
        }
        self.schedule(cpu, at);
    }

    /// `cpu` computes for `ns`: the workload's own work (protocol, copy set-up, user
    /// code), which the cache model's background references are counted against.
    pub fn work(&mut self, cpu: u32, ns: u64) {
        let gained = match &mut self.smt {
            Some(smt) => smt.take_gain(cpu, ns),
            None => 0,
        };
        self.stats.smt_gain_ns += gained;
        self.charge(cpu, ns - gained);
        self.stats.work_ns += ns;
    }

    /// `cpu` is busy for `ns` in the allocator or touching pages.
    #[inline]
    fn charge(&mut self, cpu: u32, ns: u64) {
        self.cpus[cpu as usize].clock += ns;
        self.stats.busy_ns += ns;
    }

    fn zone_slot(&self, pfn: Pfn) -> usize {
        self.slot_of(pfn).expect("pfn inside a simulated zone")
    }

    /// `cpu` touches `lines` of the 64 lines of each page of the block at `pfn` (writing
    /// it after allocation). Charges the cache model's time.
    pub fn touch(&mut self, cpu: u32, pfn: Pfn, order: Order, lines: u32) {
        let slot = self.zone_slot(pfn);
        self.touch_in(cpu, slot, pfn, order, lines);
    }

    /// `cpu` reads `lines` of each page of the block at `pfn`, which a CPU of its socket
    /// wrote moments before (copying a message out): [`crate::cache::CacheModel::read`].
    /// Charges the cache model's time.
    pub fn read(&mut self, cpu: u32, pfn: Pfn, order: Order, lines: u32) {
        let slot = self.zone_slot(pfn);
        let offset = pfn.0 - self.zones[slot].1;
        let ns = self
            .cache
            .read(cpu, slot, offset, order.pages(), lines, &self.cost);
        self.charge(cpu, ns);
    }

    /// [`Self::touch`] of a block in zone `slot`, found already. Inlined (always: left to
    /// itself the compiler kept it a call, whose register saves cost ≈ 15 instructions per
    /// allocation): it follows nearly every allocation.
    #[inline(always)]
    fn touch_in(&mut self, cpu: u32, slot: usize, pfn: Pfn, order: Order, lines: u32) {
        let ns = self.touch_ns(cpu, slot, pfn, order, lines);
        self.charge(cpu, ns);
    }

    /// [`Self::touch_in`] without the charge: the time it takes, for a caller that
    /// charges it with another cost.
    #[inline(always)]
    fn touch_ns(&mut self, cpu: u32, slot: usize, pfn: Pfn, order: Order, lines: u32) -> u64 {
        let offset = pfn.0 - self.zones[slot].1;
        self.cache
            .touch(cpu, slot, offset, order.pages(), lines, &self.cost)
    }

    /// Prefetch the page descriptors and the cache stamps of the blocks at `pfns`, which
    /// later [`Self::free`]s will need, so that their cache misses (a descriptor is cold
    /// when its block was allocated long ago) overlap with each other and with the work
    /// before those frees. Changes nothing in the run.
    ///
    /// The loop is kept short (no call, no panic path per block). Prefetch hints, not
    /// loads: a load that misses would hold up the loop until its line arrived (the
    /// crate's `prefetch` module).
    ///
    /// The blocks of one call are nearly always in one zone (a process's pages come from
    /// its node): the first block's zone is found once and, if every block is in it, its
    /// descriptors and stamps are read in two loops with nothing to look up per block
    /// (callgrind: 289 → 254 instructions for a call of 8 blocks); otherwise each block's
    /// zone is searched for.
    pub fn prefetch(&self, pfns: &[Pfn]) {
        let Some(slot) = pfns.first().and_then(|&first| self.slot_of(first)) else {
            return self.prefetch_each(pfns);
        };
        let (zone, start, end) = self.zones[slot];
        if !pfns.iter().all(|pfn| (start..end).contains(&pfn.0)) {
            return self.prefetch_each(pfns);
        }
        let mem_map = self.allocator.zones()[zone].mem_map();
        for &pfn in pfns {
            if let Some(page) = mem_map.get(pfn) {
                prefetch(page);
            }
        }
        self.cache
            .prefetch_all(slot, pfns.iter().map(|pfn| pfn.0 - start));
    }

    /// [`Self::prefetch`] of blocks in more than one zone: each block's zone searched for.
    #[cold]
    fn prefetch_each(&self, pfns: &[Pfn]) {
        for &pfn in pfns {
            if let Some(slot) = self.slot_of(pfn) {
                self.prefetch_in(slot, pfn);
            }
        }
    }

    /// The simulated zone that spans `pfn`, if any.
    fn slot_of(&self, pfn: Pfn) -> Option<usize> {
        self.zones
            .iter()
            .position(|&(_, start, end)| (start..end).contains(&pfn.0))
    }

    /// [`Self::prefetch`] of one block whose zone is (probably) `slot`: a pfn outside the
    /// zone is skipped (both reads are checked), so a wrong guess costs only the hint.
    #[inline]
    fn prefetch_in(&self, slot: usize, pfn: Pfn) {
        let (zone, start, _) = self.zones[slot];
        if let Some(page) = self.allocator.zones()[zone].mem_map().get(pfn) {
            prefetch(page);
        }
        self.cache.prefetch(slot, pfn.0.wrapping_sub(start));
    }

    /// A step of the walk down the buddy list the last refill took from, if it is not
    /// done: taken after every allocation and free ([`crate::list_walk`]).
    #[inline(always)]
    fn walk_ahead(&mut self) {
        let walk = &mut self.report.walk;
        if walk.is_walking() {
            walk.step(self.allocator.zones()[walk.zone].mem_map());
        }
    }

    /// Take zone `slot`'s lock for `hold_ns` on `cpu` at its clock, moving `blocks`
    /// blocks; returns the time spun waiting for it. Inlined (always) into its one hot
    /// caller, [`Self::charge_holds`]: as a call it cost ≈ 1.5 % of the stream runs'
    /// instructions.
    #[inline(always)]
    fn acquire(&mut self, slot: usize, cpu: u32, hold_ns: u64, blocks: u64) -> u64 {
        let t = self.cpus[cpu as usize].clock;
        self.check_request(cpu, t);
        let lock = &mut self.locks[slot];
        let contended = t < lock.free_at;
        let handoff = match lock.last_cpu {
            Some(last) if last != cpu => self.cost.handoff_ns(
                if self.machine.socket_of(last) == self.machine.socket_of(cpu) {
                    self.cost.handoff_socket_ns
                } else {
                    self.cost.handoff_cross_socket_ns
                },
            ),
            _ => 0,
        };
        let grant = t.max(lock.free_at) + handoff;
        lock.free_at = grant + hold_ns;
        lock.last_cpu = Some(cpu);
        // An uncontended hand-off is a cache miss on the lock word, not slow-path spinning.
        if contended {
            self.stats.spin_ns += grant - t;
            self.spin_bins.add(t, grant);
            self.stats.lock_contended += 1;
            if let Some(smt) = &mut self.smt {
                smt.give(cpu, grant - t);
            }
        }
        self.stats.lock_acquisitions += 1;
        self.stats.lock_hold_ns += hold_ns;
        self.stats.lock_blocks += blocks;
        let end = grant + hold_ns;
        self.stats.busy_ns += end - t;
        self.cpus[cpu as usize].clock = end;
        if contended {
            grant - t
        } else {
            0
        }
    }

    /// Count a zone-lock request at `t` that comes after another pending event: the CPU
    /// that owns that event could have asked first, and the FIFO server would have served
    /// it first. Only a running CPU's steps are checked (a tick runs at the CPU's own
    /// time, see [`Self::run`]).
    #[inline]
    fn check_request(&mut self, cpu: u32, t: u64) {
        if !self.in_step {
            return;
        }
        let (others_t, _, _) = event_parts(self.queue.others_first(cpu as usize));
        if t > others_t {
            self.stats.requests_ahead += 1;
        }
    }

    /// The simulated zone in `slot`.
    fn zone(&self, slot: usize) -> &Zone {
        &self.allocator.zones()[self.zones[slot].0]
    }

    /// Charge the zone-lock holds the last call reported, in the order it made them, to
    /// `cpu`: each one acquisition of the zone's lock, held for
    /// `c_lock + blocks · h_page + (merges · L_merge + splits · L_split) · t_xfer`.
    ///
    /// Inlined: nearly every call is a pageset hit that reported no hold, and that test
    /// is all it costs then; the charging is out of line.
    #[inline(always)]
    fn charge_report(&mut self, cpu: u32) {
        if !self.report.holds.is_empty() {
            self.charge_holds(cpu);
        }
    }

    /// [`Self::charge_report`] of a call that reported holds. In a step, a hold whose
    /// request would come after another CPU's pending event (the call's earlier holds
    /// took the CPU past it) is not requested now: it and every hold after it wait in
    /// [`Self::deferred`] until the CPU comes first again, so that each request is made
    /// at its time and the lock serves the CPUs that asked earlier first. The
    /// allocator's state changed with the call; what waits is only the time the holds
    /// take, and so the order in which the lock serves them.
    #[inline(never)]
    fn charge_holds(&mut self, cpu: u32) {
        let c = cpu as usize;
        for i in 0..self.report.holds.len() {
            if self.in_step && (self.has_deferred(c) || self.comes_after_others(cpu)) {
                let rest = &self.report.holds[i..];
                self.nr_deferred += rest.len();
                self.deferred[c].extend(rest.iter().copied());
                break;
            }
            let hold = self.report.holds[i];
            self.charge_hold(cpu, hold);
        }
        self.report.holds.clear();
    }

    /// One hold: an acquisition of its zone's lock at `cpu`'s clock, held
    /// `c_lock + blocks · h_page + (merges · L_merge + splits · L_split) · t_xfer`.
    #[inline(always)]
    fn charge_hold(&mut self, cpu: u32, hold: ZoneLockHold) {
        let slot = self.slot_of_zone[hold.zone];
        let levels = hold.merges + hold.splits;
        self.stats.lock_levels += levels;
        let ns = self.cost.hold_ns(hold.blocks, hold.merges, hold.splits);
        let spin = self.acquire(slot, cpu, ns, hold.blocks);
        match hold.kind {
            HoldKind::Drain(reason) => {
                self.stats.drain_ns += ns + spin;
                if reason == DrainReason::FreeHigh {
                    self.free_high += 1;
                }
            }
            HoldKind::BuddyFree => self.stats.buddy_free_ns += ns + spin,
            _ => {}
        }
    }

    /// Whether CPU `c` has holds waiting ([`Self::charge_holds`]): the total's test first,
    /// which is all it costs in a run that defers none.
    #[inline(always)]
    fn has_deferred(&self, c: usize) -> bool {
        self.nr_deferred != 0 && !self.deferred[c].is_empty()
    }

    /// Whether the running `cpu`'s clock is past another CPU's pending event: a request
    /// made now would be booked ahead of it.
    #[inline(always)]
    fn comes_after_others(&mut self, cpu: u32) -> bool {
        let (others_t, _, _) = event_parts(self.queue.others_first(cpu as usize));
        self.cpus[cpu as usize].clock > others_t
    }

    /// Allocate a block of `order` on `cpu` (`Caller::task(cpu)`), charging its cost.
    pub fn alloc(&mut self, cpu: u32, gfp: Gfp, order: Order) -> Result<Pfn, SimError> {
        let (pfn, _, hit_ns) = self.alloc_in(cpu, gfp, order)?;
        self.charge(cpu, hit_ns);
        Ok(pfn)
    }

    /// [`Self::alloc`], then [`Self::touch`] `lines` of each page of the block (the writes
    /// that follow an allocation): one call and one zone lookup instead of two each, as
    /// nearly every allocation a workload makes is followed by its touch.
    pub fn alloc_touch(
        &mut self,
        cpu: u32,
        gfp: Gfp,
        order: Order,
        lines: u32,
    ) -> Result<Pfn, SimError> {
        let (pfn, slot, hit_ns) = self.alloc_in(cpu, gfp, order)?;
        // The PCP path's cost and the touch's in one charge (one update of the clock and
        // the busy time instead of two): nothing reads either between them.
        let touch_ns = self.touch_ns(cpu, slot, pfn, order, lines);
        self.charge(cpu, hit_ns + touch_ns);
        Ok(pfn)
    }

    /// [`Self::alloc_touch`] for a task that may sleep for the slow path's drain:
    /// [`PageAllocator::alloc_pages_may_wait_report`]. In workqueue mode the result may be
    /// [`AllocAttempt::DrainQueued`]: the workload lets each target CPU run
    /// [`Self::run_drain_work`], puts the task to sleep, and resumes it with
    /// [`Self::alloc_touch_after_drain`]. Every hold up to the drain is charged to `cpu`.
    pub fn alloc_touch_may_wait(
        &mut self,
        cpu: u32,
        gfp: Gfp,
        order: Order,
        lines: u32,
    ) -> Result<AllocAttempt, SimError> {
        debug_assert!(self.report.holds.is_empty());
        let result = self.allocator.alloc_pages_may_wait_report(
            Caller::task(cpu),
            gfp,
            order,
            &mut self.report,
        );
        self.charge_report(cpu);
        self.allocated(cpu, order, lines, result)
    }

    /// The rest of an allocation [`Self::alloc_touch_may_wait`] left waiting for `work`:
    /// [`PageAllocator::alloc_pages_after_drain_report`] on `cpu`, once it is awake.
    pub fn alloc_touch_after_drain(
        &mut self,
        cpu: u32,
        gfp: Gfp,
        order: Order,
        lines: u32,
        work: DrainWork,
    ) -> Result<AllocAttempt, SimError> {
        debug_assert!(self.report.holds.is_empty());
        let result = self.allocator.alloc_pages_after_drain_report(
            Caller::task(cpu),
            gfp,
            order,
            work,
            &mut self.report,
        );
        self.charge_report(cpu);
        self.allocated(cpu, order, lines, result)
    }

    /// The bookkeeping of [`Self::alloc_in`] and the touch, for an allocation that may
    /// have waited.
    fn allocated(
        &mut self,
        cpu: u32,
        order: Order,
        lines: u32,
        result: Result<AllocAttempt, mmkit_core::AllocError>,
    ) -> Result<AllocAttempt, SimError> {
        let pfn = match result {
            Ok(AllocAttempt::Allocated(pfn)) => pfn,
            Ok(queued) => return Ok(queued),
            Err(_) => {
                return Err(SimError::OutOfMemory {
                    cpu,
                    order: order.get(),
                })
            }
        };
        let slot = self.zone_slot(pfn);
        self.stats.alloc_calls += 1;
        self.stats.pages_allocated += order.pages();
        if pcp_allowed_order(order) {
            self.charge(cpu, self.cost.alloc_hit_ns);
        }
        self.touch_in(cpu, slot, pfn, order, lines);
        Ok(AllocAttempt::Allocated(pfn))
    }

    /// `drain_all_pages` calls so far, the allocator's slow paths' among them:
    /// (drained or queued work, found another drain running and returned).
    pub fn drain_all_calls(&self) -> (u64, u64) {
        (self.report.drain_alls[0], self.report.drain_alls[1])
    }

    /// [`Self::alloc`] but for the PCP path's own cost, which it returns for the caller
    /// to charge (after the zone-lock holds, which it charges), with the block's zone
    /// slot. Inlined (always, as [`Self::touch_in`]) into [`Self::alloc_touch`], which
    /// nearly every allocation takes.
    #[inline(always)]
    fn alloc_in(
        &mut self,
        cpu: u32,
        gfp: Gfp,
        order: Order,
    ) -> Result<(Pfn, usize, u64), SimError> {
        debug_assert!(self.report.holds.is_empty());
        let result = mmkit_core::internals::alloc_pages_peek_next_report(
            &self.allocator,
            Caller::task(cpu),
            gfp,
            order,
            &mut self.report,
        );
        // The zone lock is requested at the call's time, then the PCP path's own cost.
        self.charge_report(cpu);
        let Ok((pfn, next)) = result else {
            return Err(SimError::OutOfMemory {
                cpu,
                order: order.get(),
            });
        };
        let slot = self.zone_slot(pfn);
        // The block this CPU's next allocation of the kind takes: its stamp is needed
        // then, and its descriptor, whose `next` link that pop reads. It is on the
        // pageset list the block came from, so in the block's zone. (The block after it
        // is not asked for: a pop from the head writes only the popped block's
        // descriptor, `PfnList` keeping no back link at a list's head.)
        if let Some(next) = next {
            self.prefetch_in(slot, next);
        }
        self.walk_ahead();
        self.stats.alloc_calls += 1;
        self.stats.pages_allocated += order.pages();
        let hit_ns = if pcp_allowed_order(order) {
            self.cost.alloc_hit_ns
        } else {
            0
        };
        Ok((pfn, slot, hit_ns))
    }

    /// Free the block at `pfn` on `cpu`, charging its cost. The simulator runs on one
    /// thread and the workload model owns the blocks it frees, so no free races another:
    /// the core's exclusive free, which refuses every sequential bad free as
    /// `free_pages` does.
    #[expect(
        unsafe_code,
        reason = "the exclusive free's promise, kept by one thread"
    )]
    pub fn free(&mut self, cpu: u32, pfn: Pfn, order: Order) -> Result<(), SimError> {
        let slot = self.zone_slot(pfn);
        debug_assert!(self.report.holds.is_empty());
        // SAFETY: the simulator owns its allocator and calls it from this one thread,
        // so no other free or split of the block runs meanwhile.
        let result = unsafe {
            mmkit_core::internals::free_pages_exclusive_report(
                &self.allocator,
                Caller::task(cpu),
                pfn,
                order,
                &mut self.report,
            )
        };
        // A drain's (or a buddy free's) zone-lock request is made at the call's time,
        // then the PCP path's own cost.
        self.charge_report(cpu);
        result.map_err(|e| SimError::BadFree(e.to_string()))?;
        self.walk_ahead();
        self.stats.free_calls += 1;
        let offset = pfn.0 - self.zones[slot].1;
        self.cache.stamp(cpu, slot, offset, order.pages());
        if pcp_allowed_order(order) {
            self.charge(cpu, self.cost.free_hit_ns);
            self.note_pageset_free(cpu, slot, order);
        }
        Ok(())
    }

    /// Free the order-0 pages of `batch` (blocks the workload allocated), in this order,
    /// onto `cpu`'s pageset in one call, none of whose frees can drain it: at most as
    /// many as [`Self::quiet_frees`] of its first page allows, all in that page's zone
    /// (refused otherwise, before anything is freed). Linux frees an exit's pages so,
    /// through `free_unref_page_list`, which drops the pageset lock and takes it again
    /// every 32 pages (`SWAP_CLUSTER_MAX`); a free that may drain is left to
    /// [`Self::free`], in a step of its own, so that the drain's zone-lock request is
    /// made at its own time. Each page is charged and counted as [`Self::free`] charges
    /// it.
    #[expect(
        unsafe_code,
        reason = "the exclusive free's promise, kept by one thread"
    )]
    pub fn free_quiet(&mut self, cpu: u32, batch: &[Pfn]) -> Result<(), SimError> {
        let Some(&first) = batch.first() else {
            return Ok(());
        };
        let caller = Caller::task(cpu);
        let Some((slot, room)) = self.quiet_room(cpu, first) else {
            return Err(SimError::BadFree(format!(
                "{first:?} is in no simulated zone"
            )));
        };
        let (_, start, end) = self.zones[slot];
        let span = start..end;
        if batch.len() > room || !batch.iter().all(|pfn| span.contains(&pfn.0)) {
            return Err(SimError::BadFree(format!(
                "{} pages of a quiet batch on CPU {cpu}, where {room} of zone pfns {span:?} \
                 go onto its pageset without a drain",
                batch.len()
            )));
        }
        debug_assert!(self.report.holds.is_empty());
        // SAFETY: as in `free`: one thread, and the workload owns these pages.
        let result = unsafe {
            mmkit_core::internals::free_pages_batch_exclusive_report(
                &self.allocator,
                caller,
                batch,
                &mut self.report,
            )
        };
        // None but a page of an isolated pageblock (freed to the buddy) takes the zone
        // lock here: charged at the call's time, as a single free's.
        self.charge_report(cpu);
        result.map_err(|e| SimError::BadFree(e.to_string()))?;
        self.walk_ahead();
        self.stats.free_calls += batch.len() as u64;
        self.cache
            .stamp_pages(cpu, slot, batch.iter().map(|pfn| pfn.0 - start));
        self.note_pageset_free(cpu, slot, Order::ZERO);
        self.charge(cpu, self.cost.free_hit_ns * batch.len() as u64);
        Ok(())
    }

    /// How many order-0 pages `cpu` may free in one [`Self::free_quiet`] that begins with
    /// `pfn` (0 when this free may drain its pageset, at most 32), and the pfns of the
    /// zone they must all be in.
    pub fn quiet_frees(&self, cpu: u32, pfn: Pfn) -> (usize, std::ops::Range<u64>) {
        match self.quiet_room(cpu, pfn) {
            Some((slot, room)) => (room, self.zones[slot].1..self.zones[slot].2),
            None => (0, 0..0),
        }
    }

    /// The simulated zone spanning `pfn` and [`Self::quiet_frees`]' count, if a zone
    /// spans it.
    fn quiet_room(&self, cpu: u32, pfn: Pfn) -> Option<(usize, usize)> {
        let slot = self.slot_of(pfn)?;
        let room =
            mmkit_core::internals::quiet_order0_frees(&self.allocator, Caller::task(cpu), pfn);
        Some((slot, room))
    }

    /// Count a free of `order` to `cpu`'s pageset of zone `slot`
    /// ([`SimStats::high_order_after_high`]).
    #[inline(always)]
    fn note_pageset_free(&mut self, cpu: u32, slot: usize, order: Order) {
        let high = (1..=PAGE_ALLOC_COSTLY_ORDER).contains(&order.get());
        // `slot < MAX_ZONES` (`Sim::new` asserts it): the mask only spares a bounds check.
        let prev = &mut self.prev_free_high[cpu as usize][slot % MAX_ZONES];
        if high {
            self.stats.high_order_frees += 1;
            self.stats.high_order_after_high += u64::from(*prev);
        }
        *prev = high;
    }

    /// `drain_all_pages(NULL)` called on `cpu` (direct reclaim that could not allocate):
    /// the core's [`PageAllocator::drain_all_pages_report`]. Every zone-lock hold it
    /// reports, another CPU's pageset's too, is charged to `cpu`, whose task takes those
    /// locks. In workqueue mode nothing is drained here: each CPU of the
    /// [`DrainAll::Queued`] work runs it with [`Self::run_drain_work`].
    pub fn drain_all_pages(&mut self, cpu: u32) -> DrainAll {
        debug_assert!(self.report.holds.is_empty());
        let result = self
            .allocator
            .drain_all_pages_report(None, &mut self.report);
        self.charge_report(cpu);
        result
    }

    /// Workqueue mode: `cpu` runs the drain work queued on it, emptying its own
    /// pagesets, charged to it. Returns the pages drained.
    pub fn run_drain_work(&mut self, cpu: u32) -> u64 {
        debug_assert!(self.report.holds.is_empty());
        let pages = self.allocator.run_drain_work_report(cpu, &mut self.report);
        self.charge_report(cpu);
        pages
    }

    fn vmstat_tick(&mut self, cpu: u32) {
        self.stats.vmstat_ticks += 1;
        debug_assert!(self.report.holds.is_empty());
        self.allocator.vmstat_tick_report(cpu, &mut self.report);
        self.charge_report(cpu);
    }

    fn sample(&mut self, t: u64, held_pages: u64) {
        self.collapse_reached();
        self.series.held_pages.push(held_pages);
        let zones = self.allocator.zones();
        let pcp: u64 = self
            .zones
            .iter()
            .map(|&(i, _, _)| zones[i].pcp_pages())
            .sum();
        self.series.t_ns.push(t);
        self.series.pcp_pages.push(pcp);
        let policy = *self.allocator.policy();
        for (k, &cpu) in self.series.high_cpus.iter().enumerate() {
            let node_zone = self.zones[self.machine.socket_of(cpu) as usize].0;
            let pcp = zones[node_zone].pageset(cpu).expect("pageset");
            // The core's clamp rule: with high_min > high_max, v6.7's clamp is not Rust's.
            let high = if policy.pcp.auto_tune {
                policy.pcp.clamp.clamp(pcp.high, pcp.high_min, pcp.high_max)
            } else {
                pcp.high_min
            };
            self.series.high[k].push(high);
        }
    }

    /// Ask for huge pages under the descriptors of every page the run has reached since
    /// the last sample (the `huge_pages` module): a hint, which changes no result.
    fn collapse_reached(&mut self) {
        for (slot, &(zone, start, end)) in self.zones.iter().enumerate() {
            let reached = (start + self.cache.reach(slot)).min(end);
            let mem_map = self.allocator.zones()[zone].mem_map();
            let (Some(first), Some(last)) = (
                mem_map.get(Pfn(start)),
                mem_map.get(Pfn(reached.saturating_sub(1))),
            ) else {
                continue;
            };
            let lo = core::ptr::from_ref(first) as usize;
            let hi = core::ptr::from_ref(last) as usize + core::mem::size_of::<Page>();
            huge_pages::collapse(lo, hi, &mut self.huge_done[slot]);
        }
    }

    /// Open the measurement window at the first sample at or after `t_ns` instead of
    /// [`SimOptions::measure_from_ns`]. Called before the run.
    pub fn measure_from(&mut self, t_ns: u64) {
        self.options.measure_from_ns = t_ns;
    }

    /// Open the measurement window at `t` if it is due and the workload allows it, and
    /// close it if it is open and the workload has closed it.
    fn mark_window<W: Workload + ?Sized>(&mut self, workload: &W, t: u64) {
        if self.warmup.is_none() {
            if t >= self.options.measure_from_ns && workload.window_may_open() {
                self.warmup = Some(self.warmup_state(t, workload.work_done()));
            }
        } else if self.until.is_none() && workload.window_closed() {
            self.until = Some(self.warmup_state(t, workload.work_done()));
        }
    }

    fn warmup_state(&self, t_ns: u64, work_done: u64) -> Warmup {
        Warmup {
            t_ns,
            stats: self.stats,
            cache: self.cache.counts,
            work_done,
            zones: self.zone_totals(),
        }
    }

    /// Every simulated zone's event counters now, in slot order.
    pub fn zone_totals(&self) -> Vec<ZoneTotals> {
        (0..self.zones.len())
            .map(|slot| ZoneTotals::read(self.zone(slot)))
            .collect()
    }

    fn check<W: Workload + ?Sized>(&self, workload: &W) -> Result<(), SimError> {
        let census = self
            .allocator
            .verify()
            .map_err(|e| SimError::Verify(e.to_string()))?;
        let allocated: u64 = census.iter().map(|c| c.allocated).sum();
        let held = workload.held_pages();
        if allocated != held {
            return Err(SimError::Conservation {
                census: allocated,
                held,
            });
        }
        Ok(())
    }

    /// Run `workload` to its end. `progress` is called with 0.0 before the workload starts
    /// (the machine is built by then: a benchmark can tell set-up from events), then now
    /// and then with the fraction done. Returns the virtual time the run took.
    ///
    /// Generic over the workload, so that each workload's steps are direct calls the
    /// compiler can inline into the loop that runs them (`&mut dyn Workload` works too).
    pub fn run<W: Workload + ?Sized>(
        &mut self,
        workload: &mut W,
        progress: &mut dyn FnMut(f64),
    ) -> Result<u64, SimError> {
        progress(0.0);
        workload.start(self);
        let end = workload.end_ns();
        // The last sample is at `end`; a wait booked past it is in no sample interval.
        self.spin_bins.set_limit(end.unwrap_or(u64::MAX));
        let nr_cpus = self.machine.nr_cpus();
        for cpu in 0..nr_cpus {
            // Spread evenly over one interval: in a long run each CPU's timer has its own
            // phase, and every CPU ticks once in any interval-long window.
            let skew = cpu as u64 * self.tick_ns / nr_cpus as u64;
            let due = self.tick_ns - skew;
            self.tick_due[cpu as usize] = due;
            self.queue
                .set_tick(cpu as usize, event_key(due, KIND_TICK, cpu));
        }
        self.queue.set_sample(event_key(0, KIND_SAMPLE, 0));
        let mut last_progress = 0;
        let mut now = 0;
        // Read once here, not at the start of every run of a CPU: the end as a bound that
        // every clock of a run without one is below, and the verification interval.
        let end_ns = end.unwrap_or(u64::MAX);
        let verify = self.options.verify_every;
        loop {
            let key = self.queue.first();
            if key == NONE {
                break;
            }
            let (t, kind, cpu) = event_parts(key);
            if end.is_some_and(|e| t >= e) || self.active == 0 {
                break;
            }
            now = t;
            match kind {
                KIND_TICK => {
                    // The measured window is [measure_from, end): a tick due at its first
                    // instant sorts before that instant's sample, so the window opens here.
                    self.mark_window(workload, t);
                    let c = cpu as usize;
                    if self.cpus[c].clock > t {
                        // Busy past the tick: the work runs when the CPU gets to it, not
                        // at a time ahead of the CPUs in between.
                        self.queue
                            .set_tick(c, event_key(self.cpus[c].clock, KIND_TICK, cpu));
                    } else if self.has_deferred(c) {
                        // The CPU is in the middle of a call whose holds wait (its step is
                        // due now, and a tick sorts first): the tick's work comes after
                        // them, a nanosecond on, which its clock will then be past.
                        self.queue.set_tick(c, event_key(t + 1, KIND_TICK, cpu));
                    } else {
                        self.cpus[c].clock = t;
                        self.vmstat_tick(cpu);
                        self.tick_due[c] += self.tick_ns;
                        let next = self.tick_due[c].max(t + 1);
                        self.queue.set_tick(c, event_key(next, KIND_TICK, cpu));
                    }
                }
                KIND_SAMPLE => {
                    self.mark_window(workload, t);
                    self.sample(t, workload.held_pages());
                    self.queue
                        .set_sample(event_key(t + self.options.sample_ns, KIND_SAMPLE, 0));
                }
                _ => self.run_cpu(workload, cpu, t, end_ns, verify)?,
            }
            if self.stats.steps - last_progress >= 1 << 16 {
                last_progress = self.stats.steps;
                progress(workload.progress(self));
            }
            if self.nr_scheduled == 0 {
                break; // every CPU is done or waits for nothing
            }
        }
        let wall = end.unwrap_or_else(|| self.max_clock().max(now));
        self.sample(wall, workload.held_pages());
        // Every wait is known only now: one booked before a sample may run past it. The
        // samples are on bin edges but the last, at `wall`, after which nothing was spun
        // (every CPU's clock is at most `wall`, or the bins stop at `end`).
        self.series.spin_ns = self.spin_bins.cumulative(&self.series.t_ns);
        if self.options.verify_every.is_some() {
            self.check(workload)?;
        }
        progress(1.0);
        Ok(wall)
    }

    /// Run `cpu`'s step due at `t`, and the steps after it while they come first
    /// ([`Self::run_steps`]); `end_ns` and `verify` are the run's end (or `u64::MAX`) and
    /// [`SimOptions::verify_every`].
    fn run_cpu<W: Workload + ?Sized>(
        &mut self,
        workload: &mut W,
        cpu: u32,
        t: u64,
        end_ns: u64,
        verify: Option<u64>,
    ) -> Result<(), SimError> {
        let c = cpu as usize;
        debug_assert_eq!(
            self.cpus[c].scheduled,
            Some(t),
            "the queue holds the current step"
        );
        let busy_until = self.cpus[c].clock;
        if busy_until > t {
            // Busy past the step: its vmstat tick's work (a decay drain, patch 7 on) or a
            // wake-up's time fell inside the CPU's last work. The step runs when the CPU
            // gets to it, after the other CPUs' events before then, as a late tick does;
            // run now, its zone-lock requests would be booked ahead of theirs.
            self.cpus[c].scheduled = Some(busy_until);
            self.queue
                .set_step(c, event_key(busy_until, KIND_STEP, cpu));
            return Ok(());
        }
        self.cpus[c].scheduled = None;
        self.cpus[c].clock = t;
        self.nr_scheduled -= 1;
        self.queue.run(c);
        self.in_step = true;
        if self.has_deferred(c) {
            self.run_deferred(cpu, end_ns);
            self.in_step = false;
            return Ok(());
        }
        let result = self.run_steps(workload, cpu, end_ns, verify);
        self.in_step = false;
        result
    }

    /// `cpu`'s deferred holds, each requested while the CPU comes first; once they are
    /// all charged, what its step decided. A CPU that goes on takes its next step as a
    /// queued one, at its clock (so that [`Self::run_steps`], the hot loop, has one
    /// caller and stays inlined into it).
    #[cold]
    #[inline(never)]
    fn run_deferred(&mut self, cpu: u32, end_ns: u64) {
        let c = cpu as usize;
        while let Some(hold) = self.deferred[c].pop_front() {
            self.nr_deferred -= 1;
            self.charge_hold(cpu, hold);
            if !self.deferred[c].is_empty() && self.comes_after_others(cpu) {
                let clock = self.cpus[c].clock;
                self.schedule(cpu, clock);
                return;
            }
        }
        let step = match self.after_holds[c]
            .take()
            .expect("a CPU with deferred holds keeps its step's decision")
        {
            Step::Continue => Step::SleepUntil(self.cpus[c].clock),
            step => step,
        };
        let goes_on = self.finish_step(cpu, step, end_ns);
        debug_assert!(!goes_on, "a queued step, not a step run now");
    }

    /// The steps of one run of `cpu` (see [`Self::run_cpu`]).
    #[inline]
    fn run_steps<W: Workload + ?Sized>(
        &mut self,
        workload: &mut W,
        cpu: u32,
        end_ns: u64,
        verify: Option<u64>,
    ) -> Result<(), SimError> {
        let c = cpu as usize;
        loop {
            self.stats.steps += 1;
            let step = workload.step(self, cpu)?;
            if verify.is_some_and(|every| self.stats.steps % every == 0) {
                self.check(workload)?;
            }
            if self.has_deferred(c) {
                // Holds wait: the CPU runs them when it comes first, then does what the
                // step decided.
                self.after_holds[c] = Some(step);
                let clock = self.cpus[c].clock;
                self.schedule(cpu, clock);
                return Ok(());
            }
            if !self.finish_step(cpu, step, end_ns) {
                return Ok(());
            }
        }
    }

    /// Do what `cpu`'s step decided. Returns whether the CPU runs its next step now (it
    /// goes on and still comes first); otherwise its next step, if any, is in the queue.
    #[inline(always)]
    fn finish_step(&mut self, cpu: u32, step: Step, end_ns: u64) -> bool {
        let c = cpu as usize;
        let clock = self.cpus[c].clock;
        match step {
            Step::Continue => {
                if self.cpus[c].scheduled.is_none() && clock < end_ns {
                    if self.queue.runs_first(c, event_key(clock, KIND_STEP, cpu)) {
                        return true;
                    }
                    // The queue holds the step at `clock` now: nothing more to do (the
                    // test below would read back the `Some` just written).
                    self.cpus[c].scheduled = Some(clock);
                    self.nr_scheduled += 1;
                    return false;
                } else {
                    self.schedule(cpu, clock);
                }
            }
            Step::SleepUntil(at) => self.schedule(cpu, at.max(clock)),
            Step::Wait => {}
            Step::Done => {
                if self.cpus[c].scheduled.is_none() && !self.done[c] {
                    self.done[c] = true;
                    self.active -= 1;
                }
            }
        }
        if self.cpus[c].scheduled.is_none() {
            self.queue.set_step(c, NONE);
        }
        false
    }

    fn schedule(&mut self, cpu: u32, at: u64) {
        let c = cpu as usize;
        if self.cpus[c].scheduled.is_none() {
            self.nr_scheduled += 1;
        }
        if self.cpus[c].scheduled.map_or(true, |s| at < s) {
            self.cpus[c].scheduled = Some(at);
            self.queue.set_step(c, event_key(at, KIND_STEP, cpu));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_are_a_half_socket_apart_within_a_socket() {
        let machine = MachineSpec::spr_224();
        let smt = Smt::new(&machine, (0.6, 0.375)).expect("112 CPUs a socket pair up");
        assert_eq!(smt.sibling[0], 56);
        assert_eq!(smt.sibling[56], 0);
        assert_eq!(smt.sibling[111], 55);
        assert_eq!(smt.sibling[112], 168);
        assert_eq!(smt.sibling[223], 167);
        for (cpu, &sibling) in smt.sibling.iter().enumerate() {
            assert_ne!(cpu as u32, sibling);
            assert_eq!(smt.sibling[sibling as usize], cpu as u32);
            assert_eq!(machine.socket_of(cpu as u32), machine.socket_of(sibling));
        }
        let single = MachineSpec {
            threads_per_core: 1,
            ..machine.clone()
        };
        assert!(Smt::new(&single, (0.6, 0.375)).is_none());
        let odd = MachineSpec {
            cpus_per_socket: 3,
            ..machine
        };
        assert!(Smt::new(&odd, (0.6, 0.375)).is_none());
    }

    /// The model's hyperthreads are in force from `Sim::new`, not only after `set_cost`,
    /// and follow the cost model there.
    #[test]
    fn a_new_simulator_has_the_models_hyperthreads() {
        let machine = MachineSpec::spr_224().with_cpus(8).with_node_bytes(1 << 30);
        let options = SimOptions {
            sample_ns: 1_000_000,
            verify_every: None,
            high_cpus: Vec::new(),
            measure_from_ns: 0,
        };
        let mut sim = Sim::new(&machine, Policy::preset("base").unwrap(), options);
        assert!(sim.cost.smt_yield.is_some());
        assert_eq!(sim.smt.as_ref().map(|smt| smt.sibling[1]), Some(3));
        sim.set_cost(CostModel {
            smt_yield: None,
            ..CostModel::calibrated()
        });
        assert!(sim.smt.is_none());
    }

    /// A base-policy simulator of 2 CPUs, one on each of two nodes of 1 GiB, that
    /// verifies the allocator after every step.
    fn two_cpus_verified() -> Sim {
        let machine = MachineSpec::spr_224().with_cpus(2).with_node_bytes(1 << 30);
        let options = SimOptions {
            sample_ns: 1_000_000,
            verify_every: Some(1),
            high_cpus: Vec::new(),
            measure_from_ns: 0,
        };
        Sim::new(&machine, Policy::preset("base").unwrap(), options)
    }

    /// [`Sim::free_quiet`] frees a batch no larger than [`Sim::quiet_frees`] allows with
    /// no zone-lock acquisition, to the state and the charges single frees of the same
    /// pages leave; a batch larger than that, or reaching into another zone, is refused
    /// before anything is freed.
    #[test]
    fn a_quiet_batch_frees_as_single_frees_do_and_a_larger_one_is_refused() {
        let mut batched = two_cpus_verified();
        let mut single = two_cpus_verified();
        let gfp = Gfp::HIGHUSER_MOVABLE;
        let mut pages = Vec::new();
        for _ in 0..20_000 {
            let pfn = batched.alloc(0, gfp, Order::ZERO).unwrap();
            assert_eq!(single.alloc(0, gfp, Order::ZERO), Ok(pfn));
            pages.push(pfn);
        }
        let (mut batches, mut drains) = (0, 0);
        while let Some(&first) = pages.last() {
            let (room, span) = batched.quiet_frees(0, first);
            assert_eq!((room, span.clone()), single.quiet_frees(0, first));
            if room == 0 {
                pages.pop();
                batched.free(0, first, Order::ZERO).unwrap();
                single.free(0, first, Order::ZERO).unwrap();
                drains += 1;
                continue;
            }
            let batch: Vec<Pfn> = pages.iter().rev().take(room).copied().collect();
            if batch.len() == room && pages.len() > room {
                // One page more than the room: refused, and nothing changes.
                let over: Vec<Pfn> = pages.iter().rev().take(room + 1).copied().collect();
                let before = (batched.zone_totals(), batched.stats.free_calls);
                assert!(matches!(
                    batched.free_quiet(0, &over),
                    Err(SimError::BadFree(_))
                ));
                assert_eq!((batched.zone_totals(), batched.stats.free_calls), before);
                batched.allocator().verify().unwrap();
            }
            if batches == 0 {
                // A page of another zone (CPU 1's node's) in the batch: refused, and
                // nothing changes.
                let other = batched.alloc(1, gfp, Order::ZERO).unwrap();
                assert!(!span.contains(&other.0), "CPU 1's node is outside {span:?}");
                let mixed = [batch[0], other];
                let before = (batched.zone_totals(), batched.stats.free_calls);
                assert!(matches!(
                    batched.free_quiet(0, &mixed),
                    Err(SimError::BadFree(_))
                ));
                assert_eq!((batched.zone_totals(), batched.stats.free_calls), before);
                batched.free(1, other, Order::ZERO).unwrap();
                let twin = single.alloc(1, gfp, Order::ZERO).unwrap();
                assert_eq!(twin, other);
                single.free(1, twin, Order::ZERO).unwrap();
            }
            let acquisitions = batched.stats.lock_acquisitions;
            batched.free_quiet(0, &batch).unwrap();
            assert_eq!(
                batched.stats.lock_acquisitions, acquisitions,
                "no zone lock"
            );
            for &pfn in &batch {
                single.free(0, pfn, Order::ZERO).unwrap();
            }
            pages.truncate(pages.len() - batch.len());
            batches += 1;
        }
        assert!(
            batches > 10 && drains > 4,
            "{batches} batches, {drains} drains"
        );
        assert_eq!(batched.zone_totals(), single.zone_totals());
        assert_eq!(
            batched.now(0),
            single.now(0),
            "each page charged as a single free"
        );
        assert_eq!(batched.stats.free_calls, single.stats.free_calls);
        let pageset = |sim: &Sim| {
            let zone = sim
                .allocator()
                .zone(0, mmkit_core::ZoneType::Normal)
                .unwrap();
            let p = zone.pageset(0).unwrap();
            (
                p.count,
                p.high,
                p.alloc_factor,
                p.free_factor,
                p.free_count,
                p.flags,
            )
        };
        assert_eq!(pageset(&batched), pageset(&single));
        batched.allocator().verify().unwrap();
    }

    /// A free of order 1–3 counts as after another when its pageset's previous free was
    /// of order 1–3: an order-0 or THP free in between clears that, a free past the
    /// pagesets (order 4) does not, and each CPU's pageset keeps its own.
    #[test]
    fn high_order_frees_after_another_are_counted_per_pageset() {
        let mut sim = two_cpus_verified();
        // (CPU, order) of each free, and whether it counts as after another.
        let frees = [
            (0, 1, false),
            (0, 2, true),
            (0, 0, false),
            (0, 3, false),
            (1, 1, false),
            (0, 3, true),
            (0, 4, false),
            (0, 1, true),
            (0, 9, false),
            (0, 2, false),
            (1, 3, true),
        ];
        let gfp = Gfp::HIGHUSER_MOVABLE;
        let blocks: Vec<Pfn> = frees
            .iter()
            .map(|&(cpu, order, _)| sim.alloc(cpu, gfp, Order::new(order).unwrap()).unwrap())
            .collect();
        let (mut high, mut after) = (0, 0);
        for (&(cpu, order, counts), &pfn) in frees.iter().zip(&blocks) {
            sim.free(cpu, pfn, Order::new(order).unwrap()).unwrap();
            high += u64::from((1..=3).contains(&order));
            after += u64::from(counts);
            assert_eq!(
                (sim.stats.high_order_frees, sim.stats.high_order_after_high),
                (high, after),
                "after freeing order {order} on CPU {cpu}"
            );
        }
        assert_eq!((high, after), (8, 4));
    }

    #[test]
    fn a_cpu_uses_its_credit_up_to_a_lone_threads_speed_up() {
        let machine = MachineSpec::spr_224();
        let mut smt = Smt::new(&machine, (0.6, 0.375)).unwrap();
        smt.give(0, 1000);
        assert_eq!(smt.credit[56], 600.0);
        assert_eq!(smt.take_gain(0, 1000), 0, "the credit is the sibling's");
        assert_eq!(smt.take_gain(56, 800), 300, "at most 0.375 of the work");
        assert_eq!(smt.take_gain(56, 10_000), 300, "what is left");
        assert_eq!(smt.take_gain(56, 10_000), 0);
    }
}
