//! What a run counts: the engine's totals, the zones' event counters read at one time,
//! the state when the measurement window opened, and the series sampled at a fixed
//! virtual interval.

use mmkit_core::page_alloc::{DrainReason, Zone};
use serde::{Deserialize, Serialize};

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
    /// Time CPUs spent in the workload's own work ([`Sim::work`](super::Sim::work)), part of `busy_ns`.
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
