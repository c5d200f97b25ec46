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
//!
//! Here: the [`Sim`] and what a workload sees of it. Its parts:
//!
//! - `allocator_calls`: the allocator calls a workload makes, and the vmstat tick;
//! - `zone_lock`: the zone locks as FIFO servers, and the charging of each call's holds;
//! - `touch`: pages in the cache model, and the hints that ask for lines ahead;
//! - `event_loop`: the run, the samples and the measurement window;
//! - `smt`: what a spinning hyperthread gives its sibling;
//! - `stats`: the totals, counters and series a run reports.

mod allocator_calls;
mod event_loop;
mod smt;
mod stats;
mod touch;
mod zone_lock;

use mmkit_core::page_alloc::{Zone, ZoneLockHold};
use mmkit_core::{PageAllocator, Pfn, Policy};
use std::collections::VecDeque;

pub use stats::{Series, SimStats, Warmup, ZoneTotals};

use crate::bins::TimeBins;
use crate::cache::CacheModel;
use crate::cost::CostModel;
use crate::machine::MachineSpec;
use crate::mem_map::MappedAllocator;
use crate::queue::EventQueue;
use smt::Smt;
use touch::cache_model;
use zone_lock::{CallReport, ZoneLock};

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
    /// This host would not give the simulator the memory that the simulated machine's
    /// `what` need (`bytes` of address space, reserved up front and touched only where a
    /// run reaches): the host's memory or the process's address-space limit (`ulimit
    /// -v`) is too small for the machine. Nothing ran.
    HostMemory {
        /// The structures, in words ("page descriptors", "cache stamps").
        what: &'static str,
        /// The bytes asked for.
        bytes: u64,
    },
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
            SimError::HostMemory { what, bytes } => write!(
                f,
                "the simulated machine's {what} need {:.2} GiB of address space, which this \
                 host refused (its memory, or the process's limit, `ulimit -v`): simulate \
                 a smaller machine (fewer --sockets, a smaller --node-gib)",
                *bytes as f64 / (1u64 << 30) as f64
            ),
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

/// A virtual CPU's clock and the time of its pending step (`Sim::schedule`), if any: one
/// record, so that the step loop, which reads both after every step and writes both when
/// a CPU starts to run, indexes (and checks the bound) once.
#[derive(Clone, Copy, Default)]
struct CpuClock {
    clock: u64,
    scheduled: Option<u64>,
}

/// Most zones with memory a simulated machine has (one per node; the machines have two):
/// the counter snapshots taken around every call live on the stack, in arrays of this
/// size ([`Sim::new`] asserts it, `RunSpec::validate` refuses more nodes).
pub const MAX_ZONES: usize = 4;

const KIND_TICK: u8 = 0;
const KIND_SAMPLE: u8 = 1;
const KIND_STEP: u8 = 2;

/// Bits of an event key below the time: the kind (2 bits) and the CPU (16 bits).
const KEY_TIME_SHIFT: u32 = 18;

/// The virtual time an event key holds: 2^46 ns, about 19.5 hours (`event_key`
/// asserts it). `RunSpec::validate` keeps `vm.stat_interval` to half of it, so that a
/// tick scheduled from late in a run still fits.
pub const MAX_VIRTUAL_NS: u64 = 1 << (64 - KEY_TIME_SHIFT);

/// An event as one integer whose order is that of `(t, kind, cpu)`: the time in the high
/// 46 bits (2^46 ns ≈ 19.5 hours of virtual time), the kind, then the CPU. One `u64`
/// compare instead of a tuple's three keeps the queue cheap.
fn event_key(t: u64, kind: u8, cpu: u32) -> u64 {
    assert!(
        t < MAX_VIRTUAL_NS,
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

impl Sim {
    /// A simulator of `machine` with `policy`, under the calibrated cost model
    /// ([`CostModel::calibrated`]). [`SimError::HostMemory`] if this host refuses the
    /// address space the machine's descriptors and cache stamps are reserved in (16 and
    /// 8 bytes a simulated page, touched only where the run reaches).
    pub fn new(
        machine: &MachineSpec,
        policy: Policy,
        options: SimOptions,
    ) -> Result<Sim, SimError> {
        Sim::with_cost(machine, policy, CostModel::calibrated(), options)
    }

    /// [`Sim::new`] under `cost`.
    pub fn with_cost(
        machine: &MachineSpec,
        policy: Policy,
        cost: CostModel,
        options: SimOptions,
    ) -> Result<Sim, SimError> {
        let settings = machine.settings();
        let tick_ns = settings.stat_interval_ms as u64 * 1_000_000;
        let allocator = MappedAllocator::new(machine.topology(), settings, policy)?;
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
        let smt = cost.smt_gain().and_then(|gain| Smt::new(machine, gain));
        let nr_cpus = machine.nr_cpus();
        assert!(
            nr_cpus <= MAX_CPUS,
            "{nr_cpus} CPUs are too many to simulate"
        );
        let cache = cache_model(machine, &zones, &cost)?;
        let mut series = Series {
            high_cpus: options.high_cpus.clone(),
            ..Series::default()
        };
        series.high = vec![Vec::new(); options.high_cpus.len()];
        Ok(Sim {
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
        })
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

    /// The simulated zone that spans `pfn`, if any.
    fn slot_of(&self, pfn: Pfn) -> Option<usize> {
        self.zones
            .iter()
            .position(|&(_, start, end)| (start..end).contains(&pfn.0))
    }

    /// The simulated zone in `slot`.
    fn zone(&self, slot: usize) -> &Zone {
        &self.allocator.zones()[self.zones[slot].0]
    }
}
