//! kswapd's balancing loop: the one implementation every kswapd runs, whatever it
//! reclaims from.
//!
//! The loop decides how hard to reclaim (priority, whether write-back and swap are
//! allowed, when to stop, what happens to the watermark boost); a *shrinker* does the
//! reclaiming. [`Memory::kswapd_balance`](super::Memory::kswapd_balance) passes the LRU
//! lists of the mapping layer (`shrink_node`), the runtime's kswapd threads pass the pool's
//! reclaim hook. The loop needs only the page allocator, so a kernel without the mapping
//! layer runs it too.
//!
//! Linux counterpart (v6.7, `mm/vmscan.c`): `balance_pgdat` and `kswapd_shrink_node`,
//! and, in [`run`], the part of the `kswapd` thread that reruns `balance_pgdat` until
//! `prepare_kswapd_sleep` lets it sleep. The request it balances for is what
//! `wakeup_kswapd` recorded
//! ([`KswapdState::take_request`](crate::page_alloc::KswapdState::take_request)).
//!
//! - A run first adds up the boost of the eligible zones. While it lasts, reclaim is for
//!   the boost alone: no write-back, no swap, never below priority `DEF_PRIORITY - 2`,
//!   and a pass that frees nothing ends the run. If the node turns out unbalanced, the
//!   boost is ignored and the run restarts at `DEF_PRIORITY`.
//! - Otherwise each pass shrinks the node at the current priority, asking for
//!   `max(high, SWAP_CLUSTER_MAX)` pages per eligible zone; the priority rises (toward 0)
//!   when the pass scanned less than that or freed nothing. The run ends when
//!   [`PageAllocator::pgdat_balanced`] holds for the order and highest zone, or after
//!   priority 1.
//! - `RECLAIM_ACTIVE` is set on the eligible zones for the whole run (the pagesets shrink
//!   meanwhile), and at the end each zone's boost loses what it was at the start.
//!
//! Not modelled: `kswapd_age_node` (the shrinker ages the active lists as it goes),
//! memcg soft-limit reclaim, `buffer_heads_over_limit`, the freezer, waking kcompactd
//! (there is no compaction), and `kswapd_failures` across wake-ups ([`run`] says why).

use crate::page::Order;
use crate::page_alloc::{NodeId, PageAllocator, WatermarkKind, Zone, ZoneFlags, ZoneType};
use crate::sync::RawMutex;

use super::vmscan::{DEF_PRIORITY, MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX};

/// What one shrink of a node is asked to do (the fields of `struct scan_control` kswapd
/// sets).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ScanControl {
    /// The node being balanced.
    pub node: NodeId,
    /// The order kswapd balances for (`sc.order`); drops to 0 once twice the request has
    /// been reclaimed.
    pub order: Order,
    /// The highest zone reclaim serves (`sc.reclaim_idx`).
    pub reclaim_idx: ZoneType,
    /// Scan `size >> priority` of each list (`sc.priority`, 12 down to 1).
    pub priority: u32,
    /// Pages asked of this pass (`sc.nr_to_reclaim`).
    pub nr_to_reclaim: u64,
    /// Dirty pages may be written back (`sc.may_writepage`); false while reclaiming only
    /// for a watermark boost at priorities 12 to 10.
    pub may_writepage: bool,
    /// Anonymous pages may be swapped out (`sc.may_swap`); false while reclaiming only for
    /// a watermark boost.
    pub may_swap: bool,
}

/// What one shrink of a node did.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ShrinkOutcome {
    /// Pages looked at (`sc.nr_scanned`).
    pub scanned: u64,
    /// Pages freed (`sc.nr_reclaimed`).
    pub reclaimed: u64,
}

/// What one kswapd run ([`balance_pgdat`]) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BalanceOutcome {
    /// Shrink passes made.
    pub passes: u32,
    /// Pages scanned, all passes together.
    pub scanned: u64,
    /// Pages freed, all passes together.
    pub reclaimed: u64,
    /// The priority of the last pass ([`DEF_PRIORITY`] if there was none).
    pub priority: u32,
    /// The order kswapd stopped reclaiming at (`balance_pgdat`'s return value).
    pub order: Order,
    /// Watermark boost, in pages, that the eligible zones had when the run started and
    /// lost at its end.
    pub boost_dropped: u64,
    /// Whether the node was balanced for the order when the run ended.
    pub balanced: bool,
}

/// `balance_pgdat`: one kswapd run for `node`, for a request of `order` up to
/// `highest_zoneidx`, reclaiming through `shrink` (one call per pass, as
/// `kswapd_shrink_node` calls `shrink_node`). The module documentation has the rules.
/// A shrinker error ends the run: `RECLAIM_ACTIVE` is cleared, the boost is kept.
///
/// ```
/// use mmkit_core::mm::kswapd::{balance_pgdat, ShrinkOutcome};
/// use mmkit_core::page_alloc::ZoneType;
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Order, PageAllocator, Policy, Settings, Topology};
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 4096)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// // Nothing is allocated: the node is balanced, there is no boost, no pass is made.
/// let outcome = balance_pgdat(&allocator, 0, Order::ZERO, ZoneType::Normal, |_| {
///     Ok::<_, core::convert::Infallible>(ShrinkOutcome::default())
/// })?;
/// assert_eq!(outcome.passes, 0);
/// assert!(outcome.balanced);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn balance_pgdat<R: RawMutex, E>(
    allocator: &PageAllocator<R>,
    node: NodeId,
    order: Order,
    highest_zoneidx: ZoneType,
    mut shrink: impl FnMut(&ScanControl) -> Result<ShrinkOutcome, E>,
) -> Result<BalanceOutcome, E> {
    let eligible = || eligible_zones(allocator, node, highest_zoneidx);
    // The boost is left in place while kswapd works, so that allocations near the
    // watermark keep stalling or reclaiming until it is done.
    let mut zone_boosts = [0u64; crate::page_alloc::MAX_NR_ZONES];
    for zone in eligible() {
        zone_boosts[zone.zone_type().index()] = zone.watermarks().boost();
    }
    let boosted: u64 = zone_boosts.iter().sum();
    for zone in eligible() {
        zone.set_flag(ZoneFlags::RECLAIM_ACTIVE);
    }
    let mut run = Run {
        sc: ScanControl {
            node,
            order,
            reclaim_idx: highest_zoneidx,
            priority: DEF_PRIORITY,
            nr_to_reclaim: 0,
            may_writepage: true,
            may_swap: true,
        },
        nr_boost_reclaim: boosted,
        outcome: BalanceOutcome {
            passes: 0,
            scanned: 0,
            reclaimed: 0,
            priority: DEF_PRIORITY,
            order,
            boost_dropped: 0,
            balanced: false,
        },
    };
    let result = run.passes(allocator, highest_zoneidx, &mut shrink);
    for zone in eligible() {
        zone.clear_flag(ZoneFlags::RECLAIM_ACTIVE);
    }
    result?;
    if boosted > 0 {
        for zone in eligible() {
            zone.reduce_watermark_boost(zone_boosts[zone.zone_type().index()]);
        }
    }
    let mut outcome = run.outcome;
    outcome.order = run.sc.order;
    outcome.boost_dropped = boosted;
    outcome.balanced = allocator.pgdat_balanced(node, run.sc.order, highest_zoneidx);
    Ok(outcome)
}

/// What one wake-up of kswapd ([`run`]) did: its [`balance_pgdat`] runs together.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct KswapdOutcome {
    /// `balance_pgdat` runs.
    pub runs: u32,
    /// Shrink passes, all runs together.
    pub passes: u32,
    /// Pages scanned, all runs together.
    pub scanned: u64,
    /// Pages freed, all runs together.
    pub reclaimed: u64,
    /// Watermark boost dropped, in pages.
    pub boost_dropped: u64,
    /// Whether the node was balanced when kswapd went back to sleep (false: it gave up
    /// after [`MAX_RECLAIM_RETRIES`] runs in a row that freed nothing).
    pub balanced: bool,
}

/// What the kswapd thread does for one wake-up (`kswapd()` around `balance_pgdat`, and
/// `prepare_kswapd_sleep`): run [`balance_pgdat`] until the node is balanced for the order
/// the last run stopped at, or [`MAX_RECLAIM_RETRIES`] runs in a row freed nothing
/// (`kswapd_failures`). Linux keeps that count across wake-ups and stops waking a
/// kswapd that reached it until some reclaim succeeds; here it counts within one
/// wake-up, so a reclaim hook that frees nothing for a while does not disable kswapd.
pub fn run<R: RawMutex, E>(
    allocator: &PageAllocator<R>,
    node: NodeId,
    order: Order,
    highest_zoneidx: ZoneType,
    mut shrink: impl FnMut(&ScanControl) -> Result<ShrinkOutcome, E>,
) -> Result<KswapdOutcome, E> {
    let mut total = KswapdOutcome::default();
    let mut order = order;
    let mut failures = 0;
    loop {
        let one = balance_pgdat(allocator, node, order, highest_zoneidx, &mut shrink)?;
        total.runs += 1;
        total.passes += one.passes;
        total.scanned += one.scanned;
        total.reclaimed += one.reclaimed;
        total.boost_dropped += one.boost_dropped;
        total.balanced = one.balanced;
        order = one.order;
        failures = if one.reclaimed == 0 { failures + 1 } else { 0 };
        if one.balanced || failures >= MAX_RECLAIM_RETRIES {
            return Ok(total);
        }
    }
}

/// The state of one [`balance_pgdat`] run.
struct Run {
    sc: ScanControl,
    /// Boost pages still to reclaim; 0 once the run reclaims for the watermarks.
    nr_boost_reclaim: u64,
    outcome: BalanceOutcome,
}

impl Run {
    /// The priority loop of `balance_pgdat`, from `restart:` to `out:`.
    fn passes<R: RawMutex, E>(
        &mut self,
        allocator: &PageAllocator<R>,
        highest_zoneidx: ZoneType,
        shrink: &mut impl FnMut(&ScanControl) -> Result<ShrinkOutcome, E>,
    ) -> Result<(), E> {
        self.sc.priority = DEF_PRIORITY;
        loop {
            let balanced = allocator.pgdat_balanced(self.sc.node, self.sc.order, highest_zoneidx);
            if !balanced && self.nr_boost_reclaim > 0 {
                // The node needs real reclaim: forget the boost and start again.
                self.nr_boost_reclaim = 0;
                self.sc.priority = DEF_PRIORITY;
                continue;
            }
            if balanced && self.nr_boost_reclaim == 0 {
                return Ok(());
            }
            let boosting = self.nr_boost_reclaim > 0;
            // Reclaim for a boost relieves fragmentation pressure; it does not write
            // or swap, and it stays at the gentle priorities (12 to 10).
            let mut raise_priority = !(boosting && self.sc.priority == DEF_PRIORITY - 2);
            self.sc.may_swap = !boosting;
            self.sc.may_writepage = !boosting || self.sc.priority < DEF_PRIORITY - 2;
            let pass = self.kswapd_shrink_node(allocator, shrink)?;
            if pass.scanned >= self.sc.nr_to_reclaim {
                // Enough was scanned to meet the high watermark at full efficiency.
                raise_priority = false;
            }
            self.nr_boost_reclaim -= self.nr_boost_reclaim.min(pass.reclaimed);
            if self.nr_boost_reclaim > 0 && pass.reclaimed == 0 {
                // Boost reclaim cannot write or swap: without progress it would spin.
                return Ok(());
            }
            if raise_priority || pass.reclaimed == 0 {
                self.sc.priority -= 1;
            }
            if self.sc.priority < 1 {
                return Ok(());
            }
        }
    }

    /// `kswapd_shrink_node`: ask for `max(high, SWAP_CLUSTER_MAX)` pages per eligible
    /// zone, shrink once, and balance for order 0 from now on once twice the request
    /// (`compact_gap`) has been reclaimed.
    fn kswapd_shrink_node<R: RawMutex, E>(
        &mut self,
        allocator: &PageAllocator<R>,
        shrink: &mut impl FnMut(&ScanControl) -> Result<ShrinkOutcome, E>,
    ) -> Result<ShrinkOutcome, E> {
        self.sc.nr_to_reclaim = eligible_zones(allocator, self.sc.node, self.sc.reclaim_idx)
            .map(|zone| zone.wmark(WatermarkKind::High).max(SWAP_CLUSTER_MAX))
            .sum();
        let pass = shrink(&self.sc)?;
        let outcome = &mut self.outcome;
        outcome.passes += 1;
        outcome.priority = self.sc.priority;
        outcome.scanned += pass.scanned;
        outcome.reclaimed += pass.reclaimed;
        let compact_gap = 2 * self.sc.order.pages();
        if self.sc.order > Order::ZERO && outcome.reclaimed >= compact_gap {
            self.sc.order = Order::ZERO;
        }
        Ok(pass)
    }
}

/// The managed zones of `node` up to `highest_zoneidx`.
fn eligible_zones<R: RawMutex>(
    allocator: &PageAllocator<R>,
    node: NodeId,
    highest_zoneidx: ZoneType,
) -> impl Iterator<Item = &Zone<R>> {
    allocator
        .zones()
        .iter()
        .filter(move |z| z.node() == node && z.zone_type() <= highest_zoneidx && z.is_managed())
}
