//! Per-CPU pagesets: each CPU's cache of free pages for each zone, and the sizing rules of
//! every step of the PCP series.
//!
//! Linux counterpart: `struct per_cpu_pages` (`include/linux/mmzone.h`) and, in
//! `mm/page_alloc.c` (v6.6 → v6.7), `nr_pcp_alloc`, `nr_pcp_high`, `nr_pcp_free`, the
//! `free_high` decision of `free_unref_page_commit`, and `decay_pcp_high`. The rules here
//! are pure arithmetic on one pageset, switched by [`PcpPolicy`]; `docs/reference/pcp-series.md` §2
//! gives each step. The paths that move pages (refill, drain) are in `rmqueue.rs` and
//! `free.rs`; they call these rules and nothing else decides sizes.

use super::list::PfnList;
use super::types::MigrateType;
use super::watermark::PAGEBLOCK_ORDER;
use super::zone::ZoneFlags;
use crate::page::Order;
use crate::policy::PcpPolicy;

/// Lists per pageset: one per cheap order (0..=3) and PCP migratetype, plus one shared THP
/// list (`NR_PCP_LISTS` in v6.7).
pub const NR_PCP_LISTS: usize = 3 * 4 + 1;
/// Index of the THP list.
const THP_PINDEX: usize = NR_PCP_LISTS - 1;
/// The highest order with per-migratetype lists (`PAGE_ALLOC_COSTLY_ORDER`).
pub const PAGE_ALLOC_COSTLY_ORDER: u8 = 3;

/// Whether blocks of `order` are cached on pagesets (`pcp_allowed_order`): the cheap orders
/// and the THP order.
pub fn pcp_allowed_order(order: Order) -> bool {
    order.get() <= PAGE_ALLOC_COSTLY_ORDER || order.get() == PAGEBLOCK_ORDER
}

/// The list for (migratetype, order) (`order_to_pindex`). `mt` must be a PCP type.
pub fn order_to_pindex(mt: MigrateType, order: Order) -> usize {
    if order.get() <= PAGE_ALLOC_COSTLY_ORDER {
        3 * order.index() + mt.index()
    } else {
        THP_PINDEX
    }
}

/// The order of the blocks on list `pindex` (`pindex_to_order`).
pub fn pindex_to_order(pindex: usize) -> Order {
    if pindex == THP_PINDEX {
        Order::new(PAGEBLOCK_ORDER).expect("pageblock order ≤ MAX_ORDER")
    } else {
        Order::new((pindex / 3) as u8).expect("pindex < 12 gives order ≤ 3")
    }
}

/// Pageset flags (`PCPF_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PcpFlags {
    /// The previous free was of a cheap high order (`PCPF_PREV_FREE_HIGH_ORDER`).
    pub prev_free_high_order: bool,
    /// Keep a batch on the list when a run of high-order frees drains it
    /// (`PCPF_FREE_HIGH_BATCH`, from the per-CPU data cache slice).
    pub free_high_batch: bool,
}

/// One CPU's pageset for one zone. All fields are guarded by the pageset's lock.
#[derive(Clone, Debug, Default)]
pub struct PerCpuPages {
    /// Pages on all lists.
    pub count: u64,
    /// Current drain threshold. Before patch 6 a fixed copy of `high_min`; patch 6 stops
    /// writing it (0); from patch 7 it is auto-tuned within `[high_min, high_max]` and
    /// clamped lazily on use, so a pageset that was never used shows 0, as on Linux.
    pub high: u64,
    /// Pages moved per refill or drain step.
    pub batch: u64,
    /// Lower bound of `high`.
    pub high_min: u64,
    /// Upper bound of `high`.
    pub high_max: u64,
    /// Flags.
    pub flags: PcpFlags,
    /// Refill scale (patch 5): doubles consecutive order-0 refills, halved by each free.
    pub alloc_factor: u8,
    /// Drain scale before patch 9 (`free_factor`): doubles consecutive drains, halved by
    /// each allocation.
    pub free_factor: u8,
    /// Pages freed in a row (patch 9 `free_count`), halved by each allocation.
    pub free_count: u64,
    /// NUMA: ticks left before a remote node's pageset is trimmed by a batch.
    pub expire: u8,
    /// Touched the zone (refill or drain) since the last vmstat tick; stands in for the
    /// per-CPU stat diffs that re-arm `expire` in Linux.
    pub(crate) zone_touched: bool,
    /// The CPU went offline and `cpu_down` drained this pageset; it takes no pages until
    /// the CPU is back (see [`super::zone::Zone::pcp_trylock`]).
    pub(crate) offline: bool,
    pub(crate) lists: [PfnList; NR_PCP_LISTS],
}

impl PerCpuPages {
    /// Blocks on list `pindex`.
    pub fn list_len(&self, pindex: usize) -> u64 {
        self.lists[pindex].len()
    }

    /// Set the limits (`pageset_update`). Before patch 7 this also fixes `high`.
    pub(crate) fn update_limits(
        &mut self,
        policy: &PcpPolicy,
        batch: u64,
        high_min: u64,
        high_max: u64,
    ) {
        self.batch = batch;
        self.high_min = high_min;
        self.high_max = high_max;
        // v6.6 writes `pcp->high` here; patch 6 stops writing it (the rules read high_min
        // until patch 7 makes high dynamic), so from patch 6 an unused pageset shows 0.
        if !policy.high_min_max {
            self.high = high_min;
        }
    }

    /// The lazy clamp of patch 7: `high` into `[high_min, high_max]`, by the preset's
    /// kernel's `clamp()`. With `high_min > high_max` that is not a fixed point: a `high`
    /// below `high_max` becomes `high_min`, which the next use clamps to `high_max`.
    fn clamp_high(&mut self, policy: &PcpPolicy) -> u64 {
        self.high = policy.clamp.clamp(self.high, self.high_min, self.high_max);
        self.high
    }

    /// What an allocation attempt does to the free-side state (`rmqueue_pcplist`): halve
    /// the consecutive-free detector.
    pub(crate) fn on_alloc(&mut self, policy: &PcpPolicy) {
        if policy.free_count {
            self.free_count >>= 1;
        } else {
            self.free_factor >>= 1;
        }
    }

    /// How many blocks of `order` a refill pulls from the zone (`nr_pcp_alloc`).
    pub(crate) fn nr_pcp_alloc(
        &mut self,
        policy: &PcpPolicy,
        zone: ZoneFlags,
        order: Order,
        scale_max: u8,
    ) -> u64 {
        let batch = self.batch;
        if !policy.alloc_factor {
            return if batch > 1 {
                (batch >> order.get()).max(2)
            } else {
                batch
            };
        }
        let mut high = if policy.auto_tune {
            self.clamp_high(policy)
        } else {
            self.high_min
        };
        if high < batch {
            return 1;
        }
        let mut blocks = if order == Order::ZERO {
            batch << self.alloc_factor
        } else {
            batch
        };
        let growth_gated = if policy.below_high {
            zone.contains(ZoneFlags::BELOW_HIGH)
        } else {
            zone.contains(ZoneFlags::RECLAIM_ACTIVE)
        };
        if policy.auto_tune && self.high_min != self.high_max && !growth_gated {
            self.high = (high + blocks).min(self.high_max);
            high = self.high;
        }
        if order == Order::ZERO {
            let max_blocks =
                (high as i64 - self.count as i64 - batch as i64).max(batch as i64) as u64;
            if blocks <= max_blocks && self.alloc_factor < scale_max {
                self.alloc_factor += 1;
            }
            blocks = blocks.min(max_blocks);
        }
        if blocks > 1 {
            blocks = (blocks >> order.get()).max(2);
        }
        blocks
    }

    /// The start of `free_unref_page_commit`: a free halves the refill scale (patch 5).
    pub(crate) fn on_free(&mut self, policy: &PcpPolicy) {
        if policy.alloc_factor {
            self.alloc_factor >>= 1;
        }
    }

    /// The `free_high` decision for a block of `order` just added (so `count` includes
    /// it), and the `PREV_FREE_HIGH_ORDER` bookkeeping. Then, with patch 9, count the free.
    #[inline(always)]
    pub(crate) fn free_high(&mut self, policy: &PcpPolicy, order: Order, scale_max: u8) -> bool {
        let cheap_high = (1..=PAGE_ALLOC_COSTLY_ORDER).contains(&order.get());
        // Only cheap high orders read it, so an order-0 free does not evaluate it.
        let detected = || {
            if policy.free_count {
                // Linux 6.18 waits for half of `high_min` more consecutive pages.
                let raise = if policy.free_high_needs_high_min {
                    self.high_min / 2
                } else {
                    0
                };
                self.free_count >= self.batch + raise
            } else {
                self.free_factor > 0
            }
        };
        let free_high = if !policy.prev_free_high_order {
            cheap_high && detected()
        } else if cheap_high {
            let keep_batch =
                policy.free_high_batch && self.flags.free_high_batch && self.count < self.batch;
            let free_high = detected() && self.flags.prev_free_high_order && !keep_batch;
            self.flags.prev_free_high_order = true;
            free_high
        } else {
            self.flags.prev_free_high_order = false;
            false
        };
        if policy.free_count && self.free_count < self.batch << scale_max {
            self.free_count += order.pages();
        }
        free_high
    }

    /// The drain threshold after a free (`nr_pcp_high`); with patch 7 it also retunes
    /// `high`. The pageset drains when `count ≥` the result.
    #[inline(always)]
    pub(crate) fn nr_pcp_high(
        &mut self,
        policy: &PcpPolicy,
        zone: ZoneFlags,
        free_high: bool,
        scale_max: u8,
    ) -> u64 {
        let batch = self.batch;
        if !policy.auto_tune {
            let high = self.high_min;
            return match () {
                _ if high == 0 || free_high => 0,
                _ if zone.contains(ZoneFlags::RECLAIM_ACTIVE) => (4 * batch).min(high),
                _ => high,
            };
        }
        let high = self.clamp_high(policy);
        if high == 0 {
            return 0;
        }
        // How far `high` falls under pressure. Only the two pressure branches read it, so
        // it is not computed on the common path (where LLVM hoisted it as a value).
        let shrink = |pcp: &Self| {
            if policy.free_count {
                pcp.free_count.max(batch)
            } else {
                batch << pcp.free_factor
            }
        };
        if free_high {
            self.high = high.saturating_sub(batch << scale_max).max(self.high_min);
            return 0;
        }
        if zone.contains(ZoneFlags::RECLAIM_ACTIVE) {
            self.high = high.saturating_sub(shrink(self)).max(self.high_min);
            return (4 * batch).min(self.high);
        }
        if policy.below_high {
            if self.high_min == self.high_max {
                return high;
            }
            if zone.contains(ZoneFlags::BELOW_HIGH) {
                self.high = high.saturating_sub(shrink(self)).max(self.high_min);
                return self.count.max(self.high_min);
            }
        }
        if self.count >= high && self.high_min != self.high_max {
            let need = if policy.free_count {
                self.free_count + batch
            } else {
                (batch << self.free_factor) + batch
            };
            if self.high < need {
                self.high = policy.clamp.clamp(need, self.high_min, self.high_max);
            }
        }
        high
    }

    /// How many order-0 frees in a row, from now, `free_unref_page_commit` would finish
    /// without a drain and with no state change in `nr_pcp_high` but its lazy clamp of
    /// `high`: the frees that [`PerCpuPages::on_order0_frees`] may account in one step.
    /// An order-0 free never sets `free_high`, so the threshold is `nr_pcp_high`'s
    /// result, which stays put while nothing but `count` moves; the j-th free drains
    /// when `count + j ≥ high`, so `high − count − 1` frees are quiet. Zero under the
    /// pressure rules that retune `high` on every free (`RECLAIM_ACTIVE` from patch 7,
    /// `BELOW_HIGH` from patch 8 with `high_min ≠ high_max`), and from patch 7 while
    /// `high_min > high_max`, where the lazy clamp itself moves `high` from one free to
    /// the next: those take the full commit.
    #[inline(always)]
    pub(crate) fn order0_free_room(&self, policy: &PcpPolicy, zone: ZoneFlags) -> u64 {
        let high = if !policy.auto_tune {
            match self.high_min {
                0 => 0,
                high if zone.contains(ZoneFlags::RECLAIM_ACTIVE) => (4 * self.batch).min(high),
                high => high,
            }
        } else {
            let retunes = zone.contains(ZoneFlags::RECLAIM_ACTIVE)
                || (policy.below_high
                    && self.high_min != self.high_max
                    && zone.contains(ZoneFlags::BELOW_HIGH));
            // With `high_min > high_max` each free's clamp may move `high` again (see
            // `clamp_high`), so no free is quiet.
            if retunes || self.high_min > self.high_max {
                0
            } else {
                policy.clamp.clamp(self.high, self.high_min, self.high_max)
            }
        };
        high.saturating_sub(self.count + 1)
    }

    /// What `pages` order-0 frees within [`PerCpuPages::order0_free_room`] do to the
    /// pageset's policy state, in one step: `on_free` halves `alloc_factor` `pages`
    /// times, `free_high` clears `PREV_FREE_HIGH_ORDER` and adds one to `free_count`
    /// per free up to `batch << S`, and `nr_pcp_high` clamps `high` (the same clamp each
    /// time). `count` and the lists are the caller's.
    pub(crate) fn on_order0_frees(&mut self, policy: &PcpPolicy, pages: u64, scale_max: u8) {
        debug_assert!(pages > 0, "at least one free to account");
        if policy.alloc_factor {
            // A shift by 8 or more empties the u8, as that many halvings do.
            self.alloc_factor = u32::try_from(pages)
                .ok()
                .and_then(|shift| self.alloc_factor.checked_shr(shift))
                .unwrap_or(0);
        }
        if policy.prev_free_high_order {
            self.flags.prev_free_high_order = false;
        }
        let free_count_max = self.batch << scale_max;
        if policy.free_count && self.free_count < free_count_max {
            self.free_count = (self.free_count + pages).min(free_count_max);
        }
        if policy.auto_tune {
            self.clamp_high(policy);
        }
    }

    /// How many pages a drain at threshold `high` frees (`nr_pcp_free`). Before patch 9
    /// this doubles `free_factor` on consecutive drains.
    pub(crate) fn nr_pcp_free(
        &mut self,
        policy: &PcpPolicy,
        high: u64,
        free_high: bool,
        scale_max: u8,
    ) -> u64 {
        let batch = self.batch;
        if free_high {
            return if policy.auto_tune {
                self.count.min(batch << scale_max)
            } else {
                self.count
            };
        }
        if high < batch {
            return 1;
        }
        let (lo, hi) = (batch, high - batch);
        if policy.free_count {
            return policy.clamp.clamp(self.free_count, lo, hi);
        }
        let scaled = batch << self.free_factor;
        let fits = if policy.auto_tune {
            scaled <= hi
        } else {
            scaled < hi
        };
        if fits && (!policy.cap_free_factor || self.free_factor < scale_max) {
            self.free_factor += 1;
        }
        policy.clamp.clamp(scaled, lo, hi)
    }

    /// One vmstat tick (`decay_pcp_high`, patch 7): lower `high` by at most an eighth,
    /// never more than `batch << S` below `count`, never under `high_min`. Returns whether
    /// `high` is still above `high_min`, and how many pages to drain to get `count` down to
    /// `high`.
    pub(crate) fn decay(&mut self, scale_max: u8) -> (bool, u64) {
        let mut todo = false;
        if self.high > self.high_min {
            let floor = self.count.saturating_sub(self.batch << scale_max);
            self.high = floor.max(self.high - self.high / 8).max(self.high_min);
            todo = self.high > self.high_min;
        }
        (todo, self.count.saturating_sub(self.high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, LATER_PRESETS, PRESETS};
    use alloc::format;
    use proptest::prelude::*;

    proptest! {
        /// `order0_free_room` frees accounted at once by `on_order0_frees` leave the
        /// pageset as `free_unref_page_commit`'s rules applied free by free, none of which
        /// reaches its drain threshold.
        #[test]
        fn order0_frees_in_one_step_equal_free_by_free(
            preset in 0..PRESETS.len() + LATER_PRESETS.len(),
            (count, high, high_min, high_max) in (0u64..300, 0u64..300, 0u64..200, 0u64..400),
            (batch, scale_max) in (1u64..64, 0u8..=6),
            (alloc_factor, free_factor, free_count) in (0u8..8, 0u8..7, 0u64..3000),
            (prev_free_high_order, free_high_batch) in (any::<bool>(), any::<bool>()),
            (reclaim_active, below_high) in (any::<bool>(), any::<bool>()),
            frees in 1u64..80,
        ) {
            let name = PRESETS.iter().chain(&LATER_PRESETS).nth(preset).expect("a preset");
            let policy = Policy::preset(name).expect("a preset").pcp;
            let mut zone = ZoneFlags::empty();
            zone.set(ZoneFlags::RECLAIM_ACTIVE, reclaim_active);
            zone.set(ZoneFlags::BELOW_HIGH, below_high);
            let mut pcp = PerCpuPages {
                count,
                high,
                batch,
                high_min,
                high_max,
                flags: PcpFlags { prev_free_high_order, free_high_batch },
                alloc_factor,
                free_factor,
                free_count,
                ..PerCpuPages::default()
            };
            let pages = frees.min(pcp.order0_free_room(&policy, zone));
            if pages == 0 {
                return Ok(());
            }
            let mut free_by_free = pcp.clone();
            for _ in 0..pages {
                free_by_free.on_free(&policy);
                free_by_free.count += 1;
                let free_high = free_by_free.free_high(&policy, Order::ZERO, scale_max);
                let threshold = free_by_free.nr_pcp_high(&policy, zone, free_high, scale_max);
                prop_assert!(free_by_free.count < threshold, "a free within the room drains");
            }
            pcp.on_order0_frees(&policy, pages, scale_max);
            pcp.count += pages;
            prop_assert_eq!(format!("{pcp:?}"), format!("{free_by_free:?}"));
        }
    }

    /// `mmkit pcp-script --min-free-kbytes 100000` on the default machine: the low
    /// watermark (31250) over 12 CPUs gives `high_min` 2604, above `high_max` 2000.
    fn pageset_with_high_min_above_high_max(count: u64) -> PerCpuPages {
        PerCpuPages {
            count,
            batch: 63,
            high_min: 2604,
            high_max: 2000,
            ..PerCpuPages::default()
        }
    }

    #[test]
    fn lazy_clamp_gives_high_min_then_high_max_when_high_min_exceeds_high_max() {
        let policy = Policy::V6_7.pcp;
        let mut pcp = pageset_with_high_min_above_high_max(1);
        // v6.7: `clamp(0, 2604, 2000)` is 2604 (0 is below hi), not 2000.
        let threshold = pcp.nr_pcp_high(&policy, ZoneFlags::empty(), false, 5);
        assert_eq!((threshold, pcp.high), (2604, 2604));
        // The next use clamps 2604, which is at or above hi: 2000.
        let threshold = pcp.nr_pcp_high(&policy, ZoneFlags::empty(), false, 5);
        assert_eq!((threshold, pcp.high), (2000, 2000));
        assert_eq!(
            pcp.order0_free_room(&policy, ZoneFlags::empty()),
            0,
            "no free is quiet while the clamp moves high"
        );
    }

    #[test]
    fn drain_size_clamp_gives_batch_when_high_minus_batch_is_below_batch() {
        // nr_pcp_free's clamp(free_count, batch, high − batch) with high 100 < 2 × 63:
        // free_count 10 is below hi 37, so v6.7 frees lo = 63, not 37.
        let policy = Policy::V6_7.pcp;
        let mut pcp = PerCpuPages {
            count: 100,
            batch: 63,
            free_count: 10,
            ..PerCpuPages::default()
        };
        assert_eq!(pcp.nr_pcp_free(&policy, 100, false, 5), 63);
        pcp.free_count = 40;
        assert_eq!(pcp.nr_pcp_free(&policy, 100, false, 5), 37);
    }

    #[test]
    fn pindex_maps_orders_and_types() {
        let o = |n| Order::new(n).unwrap();
        assert_eq!(order_to_pindex(MigrateType::Unmovable, o(0)), 0);
        assert_eq!(order_to_pindex(MigrateType::Reclaimable, o(3)), 11);
        assert_eq!(order_to_pindex(MigrateType::Movable, o(9)), 12);
        for pindex in 0..NR_PCP_LISTS {
            let order = pindex_to_order(pindex);
            assert!(pcp_allowed_order(order));
            let mt = MigrateType::from_index(pindex % 3).unwrap();
            assert_eq!(order_to_pindex(mt, order), pindex);
        }
        assert!(!pcp_allowed_order(o(4)));
        assert!(!pcp_allowed_order(o(10)));
    }
}
