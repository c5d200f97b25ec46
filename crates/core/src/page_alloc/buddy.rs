//! The buddy allocator proper: splitting, merging, migratetype fallback and stealing, and
//! the high-atomic reserve, all under the zone lock.
//!
//! Linux counterpart (v6.7, `mm/page_alloc.c`): `__free_one_page`, `buddy_merge_likely`,
//! `__rmqueue_smallest`, `expand`, `__rmqueue`, `__rmqueue_fallback`,
//! `find_suitable_fallback`, `can_steal_fallback`, `steal_suitable_fallback`,
//! `move_freepages_block`, `boost_watermark`, `reserve_highatomic_pageblock` and
//! `unreserve_highatomic_pageblock`. CMA, page isolation for offlining and compaction
//! capture are not modelled.

use core::sync::atomic::Ordering::Relaxed;

use super::events::{HoldKind, LockEvents, ZoneLockHold};
use super::free_area::{FreeArea, ListEnd};
use super::gfp::AllocFlags;
use super::list::PfnList;
use super::types::{CpuId, MigrateType};
use super::watermark::{self, PAGEBLOCK_ORDER, PAGEBLOCK_PAGES};
use super::zone::{Zone, ZoneFlags};
use crate::page::{Order, Page, PageFlags, PageState, Pfn, MAX_ORDER};
use crate::sync::{AtomicU64, LockGuard, RawMutex, RawSpinLock};

const PAGEBLOCK: Order = match Order::new(PAGEBLOCK_ORDER) {
    Some(order) => order,
    None => panic!("pageblock order exceeds MAX_ORDER"),
};

/// A zone with its lock held: the calling context of every free-list operation
/// (Linux's "zone->lock held" comments, as a type).
pub(crate) struct ZoneLocked<'a, R: RawMutex = RawSpinLock> {
    zone: &'a Zone<R>,
    area: LockGuard<'a, R, FreeArea>,
    /// Split levels done since the last [`ZoneLocked::report`] of this hold: the report
    /// says them. A plain field of the guard: when no sink reads it, nothing does.
    splits: core::cell::Cell<u64>,
}

/// Publish the free lists' `FreeArea::free_block_bits` for lockless watermark checks as
/// the lock is released (the guard field drops after this runs, so still under the lock).
/// The free area keeps the bits as its lists fill and empty; the store is skipped when
/// they did not change.
impl<R: RawMutex> Drop for ZoneLocked<'_, R> {
    fn drop(&mut self) {
        let bits = self.area.free_block_bits();
        if self.zone.free_block_bits.load(Relaxed) != bits {
            self.zone.free_block_bits.store(bits, Relaxed);
        }
    }
}

impl<'a, R: RawMutex> ZoneLocked<'a, R> {
    pub(crate) fn new(zone: &'a Zone<R>, area: LockGuard<'a, R, FreeArea>) -> ZoneLocked<'a, R> {
        ZoneLocked {
            zone,
            area,
            splits: core::cell::Cell::new(0),
        }
    }

    /// The zone.
    pub(crate) fn zone(&self) -> &'a Zone<R> {
        self.zone
    }

    /// Change `NR_FREE_PAGES` by `delta`. Every writer holds the zone lock, so this is a
    /// load and a store (`__mod_zone_page_state`), not a locked read-modify-write: on the
    /// refill and drain paths that is one serialising instruction less per block.
    #[inline(always)]
    pub(crate) fn mod_free_pages(&self, delta: i64) {
        let free = &self.zone.nr_free_pages;
        free.store(free.load(Relaxed) + delta, Relaxed);
    }

    /// Add `n` to an event counter only the zone lock's holder writes.
    #[inline(always)]
    pub(crate) fn count_locked(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed) + n, Relaxed);
    }

    pub(crate) fn area(&self) -> &FreeArea {
        &self.area
    }

    /// Report this hold to `events`: `kind` done for `cpu`, moving `blocks` blocks of
    /// `pages` pages in all, with `merges` buddy merge levels and the split levels done
    /// since the last report. Called before the lock is released, where Linux's
    /// tracepoints fire.
    #[inline(always)]
    pub(crate) fn report<E: LockEvents>(
        &self,
        events: &mut E,
        cpu: CpuId,
        kind: HoldKind,
        blocks: u64,
        pages: u64,
        merges: u64,
    ) {
        events.hold(&ZoneLockHold {
            zone: self.zone.index,
            cpu,
            kind,
            blocks,
            pages,
            merges,
            splits: self.splits.replace(0),
        });
    }

    /// Whether `pfn` heads a free block of exactly `order` in this zone (`page_is_buddy`).
    fn is_free_buddy(&self, pfn: Pfn, order: Order) -> bool {
        self.zone
            .mem_map
            .get(pfn)
            .is_some_and(|page| page.has_state_order(PageState::Buddy, order))
    }

    /// Return a block to the free lists, merging it with free buddies as far as it can
    /// (`__free_one_page`). `mt` is the block's pageblock migratetype; the merged block
    /// goes on that type's list. Merging stops at `MAX_ORDER`, at a buddy that is not free
    /// at the same order, and at pageblock order and above between two pageblocks whose
    /// types differ when either is not mergeable (high-atomic, isolated). Returns the
    /// merge levels done.
    pub(crate) fn free_one_page(
        &mut self,
        pfn: Pfn,
        order: Order,
        mt: MigrateType,
        end: ListEnd,
    ) -> u64 {
        if mt != MigrateType::Isolate {
            self.mod_free_pages(order.pages() as i64);
        }
        let merges = self.merge_free_block(pfn, self.zone.mem_map.page(pfn), order, mt, end);
        if merges != 0 {
            Self::count_locked(&self.zone.events.buddy_merges, merges);
        }
        merges
    }

    /// The merging and list insertion of [`ZoneLocked::free_one_page`], for a caller that
    /// holds the block's descriptor and keeps `NR_FREE_PAGES` and the merge count itself
    /// (a pageset drain adds them up once for all its blocks). Returns the merges done.
    #[inline(always)]
    pub(crate) fn merge_free_block(
        &mut self,
        pfn: Pfn,
        page: &Page,
        order: Order,
        mt: MigrateType,
        end: ListEnd,
    ) -> u64 {
        debug_assert!(pfn.is_aligned(order));
        let mem_map = &self.zone.mem_map;
        let (mut head, mut head_page, mut order) = (pfn, page, order);
        let mut merges = 0;
        while order.get() < MAX_ORDER {
            let buddy = head.buddy(order);
            let Some(buddy_page) = mem_map.get(buddy) else {
                break;
            };
            if !buddy_page.has_state_order(PageState::Buddy, order) {
                break;
            }
            if order >= PAGEBLOCK {
                let buddy_mt = mem_map.pageblock_migratetype(buddy);
                if mt != buddy_mt && (!mt.is_mergeable() || !buddy_mt.is_mergeable()) {
                    break;
                }
            }
            self.area.remove_page(mem_map, buddy, buddy_page, order);
            if buddy.0 < head.0 {
                (head, head_page) = (buddy, buddy_page);
            }
            order = order.up().expect("order < MAX_ORDER");
            merges += 1;
        }
        // A block that merged into a lower buddy is a tail page of the merged block now;
        // `add_page` marks whichever pfn heads it.
        if head != pfn {
            page.set_state(PageState::Tail, Order::ZERO);
        }
        let end = match end {
            ListEnd::Tail => ListEnd::Tail,
            ListEnd::Head if self.buddy_merge_likely(head, order) => ListEnd::Tail,
            ListEnd::Head => ListEnd::Head,
        };
        self.area.add_page(mem_map, head, head_page, order, mt, end);
        merges
    }

    /// If the buddy of the next order up is free, this block will probably merge soon once
    /// its own buddy is freed: queue it at the tail so it is not handed out first.
    fn buddy_merge_likely(&self, pfn: Pfn, order: Order) -> bool {
        if order.get() >= MAX_ORDER - 1 {
            return false;
        }
        let up = order.up().expect("order < MAX_ORDER - 1");
        // Linux's `pfn & buddy_pfn`: the block this one and its buddy would merge into.
        let higher = pfn.align_down(up);
        self.is_free_buddy(higher.buddy(up), up)
    }

    /// Take the first block of at least `order` from `mt`'s lists, splitting off the upper
    /// halves (`__rmqueue_smallest` + `expand`). The returned block belongs to nobody: the
    /// caller marks it allocated or puts it on a pageset. `NR_FREE_PAGES` is the caller's.
    pub(crate) fn rmqueue_smallest(&mut self, order: Order, mt: MigrateType) -> Option<Pfn> {
        for current in order.up_to_max() {
            let Some(pfn) = self.area.list(current, mt).first() else {
                continue;
            };
            let page = self.area.remove(&self.zone.mem_map, pfn, current);
            self.expand(pfn, order, current, mt);
            page.set_cached_migratetype(mt as u8);
            let events = &self.zone.events;
            Self::count_locked(&events.alloc_zone_locked, order.pages());
            Self::count_locked(&events.alloc_zone_locked_events, 1);
            return Some(pfn);
        }
        None
    }

    /// Up to `n` blocks from the head of the (`order`, `mt`) list onto the tail of `to`,
    /// marked as pageset blocks: what `n` calls of [`ZoneLocked::rmqueue_smallest`] would
    /// return while that list has blocks, counted the same. Returns the blocks taken.
    /// `NR_FREE_PAGES` is the caller's.
    #[inline(always)]
    pub(crate) fn rmqueue_head_run(
        &mut self,
        order: Order,
        mt: MigrateType,
        n: u64,
        to: &mut PfnList,
    ) -> u64 {
        let taken = self
            .area
            .take_head_run(&self.zone.mem_map, order, mt, n, to, |page| {
                page.set_state(PageState::Pcp, order)
            });
        let events = &self.zone.events;
        Self::count_locked(&events.alloc_zone_locked, taken << order.get());
        Self::count_locked(&events.alloc_zone_locked_events, taken);
        taken
    }

    /// Refill from a larger block while the requested (`order`, `mt`) list is empty: what up
    /// to `n` calls of [`ZoneLocked::rmqueue_smallest`] would hand out, appended to `to`
    /// and marked as pageset blocks, before any fallback. Returns the blocks taken, or
    /// `None` when `mt` has no larger free block.
    ///
    /// The first call splits the smallest larger block B (order `high`) and each later
    /// one takes the lowest free piece of B, splitting it again if it is larger than
    /// `order`: `expand` leaves B's free rest in ascending pieces, one per set bit of the
    /// blocks left, and the requested orders' lists hold nothing else. So the calls hand
    /// out B's blocks in address order, and after `taken` of B's 2^(high − order) blocks
    /// the lists hold one piece per set bit of 2^(high − order) − `taken`, smallest
    /// first, each alone on its list. This builds that end state directly.
    pub(crate) fn rmqueue_split_run(
        &mut self,
        order: Order,
        mt: MigrateType,
        n: u64,
        to: &mut PfnList,
    ) -> Option<u64> {
        debug_assert!(self.area.list(order, mt).is_empty());
        let (pfn, high) = order
            .up_to_max()
            .skip(1)
            .find_map(|o| self.area.list(o, mt).first().map(|pfn| (pfn, o)))?;
        let mem_map = &self.zone.mem_map;
        self.area.remove_page(mem_map, pfn, mem_map.page(pfn), high);
        let blocks = 1 << (high.get() - order.get());
        let taken = n.min(blocks);
        for i in 0..taken {
            let block = pfn.add(i << order.get());
            let page = mem_map.page(block);
            page.set_state(PageState::Pcp, order);
            page.set_cached_migratetype(mt as u8);
            to.push_tail_page(mem_map, block, page);
        }
        let (mut left, mut piece) = (blocks - taken, pfn.add(taken << order.get()));
        while left != 0 {
            let piece_order = Order::new(order.get() + left.trailing_zeros() as u8)
                .expect("a piece of B is smaller than B");
            self.area
                .add(mem_map, piece, piece_order, mt, ListEnd::Head);
            piece = piece.add(piece_order.pages());
            left &= left - 1;
        }
        let events = &self.zone.events;
        // The split levels the `taken` calls of `rmqueue_smallest` would do: the first
        // splits B down (high − order levels); block i ≥ 1 starts a free piece of
        // 2^tz(i) blocks and splits it tz(i) levels; Σ_{i=1}^{k} tz(i) = k − popcount(k).
        let later = taken.saturating_sub(1);
        let splits = (high.get() - order.get()) as u64 + later - later.count_ones() as u64;
        Self::count_locked(&events.buddy_splits, splits);
        self.splits.set(self.splits.get() + splits);
        Self::count_locked(&events.alloc_zone_locked, taken << order.get());
        Self::count_locked(&events.alloc_zone_locked_events, taken);
        Some(taken)
    }

    /// Split a block of order `high` down to `low`, freeing each upper half at the head of
    /// its list (`expand`).
    fn expand(&mut self, pfn: Pfn, low: Order, high: Order, mt: MigrateType) {
        if high > low {
            let levels = (high.get() - low.get()) as u64;
            Self::count_locked(&self.zone.events.buddy_splits, levels);
            self.splits.set(self.splits.get() + levels);
        }
        let mut high = high;
        while high > low {
            high = high.down().expect("high > low ≥ 0");
            let half = pfn.add(high.pages());
            self.area
                .add(&self.zone.mem_map, half, high, mt, ListEnd::Head);
        }
    }

    /// `__rmqueue`: the requested migratetype first, then a fallback steal and a retry.
    /// A refill calls this once per block, and the requested type almost always has one,
    /// so the fallback loop is out of line: inline, its set-up cost ≈ 65 instructions per
    /// refilled page (callgrind, `mmkit sim --workload kbuild`).
    #[inline(always)]
    pub(crate) fn rmqueue(
        &mut self,
        order: Order,
        mt: MigrateType,
        flags: AllocFlags,
    ) -> Option<Pfn> {
        match self.rmqueue_smallest(order, mt) {
            Some(pfn) => Some(pfn),
            None => self.rmqueue_with_fallback(order, mt, flags),
        }
    }

    /// The rest of `__rmqueue` once the requested type's lists are empty: steal from a
    /// fallback type and retry, until a block comes out or no fallback is left.
    #[cold]
    #[inline(never)]
    fn rmqueue_with_fallback(
        &mut self,
        order: Order,
        mt: MigrateType,
        flags: AllocFlags,
    ) -> Option<Pfn> {
        loop {
            if !self.rmqueue_fallback(order, mt, flags) {
                return None;
            }
            if let Some(pfn) = self.rmqueue_smallest(order, mt) {
                return Some(pfn);
            }
        }
    }

    /// `__rmqueue_fallback`: find a block on another migratetype's lists and move it (or
    /// its whole pageblock) to `start_mt`. Searches from the largest order down, so a steal
    /// takes a big block and fragments less; a movable request that could not claim the
    /// block takes the smallest suitable block instead, to keep its footprint in another
    /// type's pageblock small. `ALLOC_NOFRAGMENT` refuses blocks below pageblock order.
    fn rmqueue_fallback(&mut self, order: Order, start_mt: MigrateType, flags: AllocFlags) -> bool {
        let min_order = if order < PAGEBLOCK && flags.contains(AllocFlags::NOFRAGMENT) {
            PAGEBLOCK
        } else {
            order
        };
        let mut found = None;
        for current in min_order.up_to_max().rev() {
            let Some((fallback_mt, can_steal)) = self.find_suitable_fallback(current, start_mt)
            else {
                continue;
            };
            if !can_steal && start_mt == MigrateType::Movable && current > order {
                found = order
                    .up_to_max()
                    .find_map(|o| self.find_suitable_fallback(o, start_mt).map(|f| (o, f)));
            } else {
                found = Some((current, (fallback_mt, can_steal)));
            }
            break;
        }
        let Some((current, (fallback_mt, can_steal))) = found else {
            return false;
        };
        let pfn = self
            .area
            .list(current, fallback_mt)
            .first()
            .expect("list was non-empty");
        self.steal_suitable_fallback(pfn, flags, start_mt, can_steal);
        self.zone.events.extfrag_events.fetch_add(1, Relaxed);
        true
    }

    /// The first fallback type with a free block of `order`, and whether the request may
    /// claim that block's whole pageblock (`find_suitable_fallback`, `can_steal_fallback`).
    fn find_suitable_fallback(&self, order: Order, mt: MigrateType) -> Option<(MigrateType, bool)> {
        if self.area.nr_free(order) == 0 {
            return None;
        }
        let can_steal = order >= PAGEBLOCK
            || order.get() >= PAGEBLOCK_ORDER / 2
            || matches!(mt, MigrateType::Reclaimable | MigrateType::Unmovable)
            || !self.zone.group_by_mobility();
        mt.fallbacks()
            .into_iter()
            .find(|&fallback| !self.area.list(order, fallback).is_empty())
            .map(|fallback| (fallback, can_steal))
    }

    /// `steal_suitable_fallback`: claim the block for `start_mt`, and its pageblock too when
    /// enough of that pageblock is free or of a compatible type.
    fn steal_suitable_fallback(
        &mut self,
        pfn: Pfn,
        flags: AllocFlags,
        start_mt: MigrateType,
        whole_block: bool,
    ) {
        let mem_map = &self.zone.mem_map;
        let order = mem_map.page(pfn).order();
        let old_mt = mem_map.pageblock_migratetype(pfn);
        if old_mt == MigrateType::HighAtomic {
            return self.area.move_to(mem_map, pfn, order, start_mt);
        }
        if order >= PAGEBLOCK {
            self.change_pageblock_range(pfn, order, start_mt);
            return self.area.move_to(mem_map, pfn, order, start_mt);
        }
        if self.boost_watermark() && flags.contains(AllocFlags::KSWAPD) {
            self.zone.set_flag(ZoneFlags::BOOSTED_WATERMARK);
        }
        if !whole_block {
            return self.area.move_to(mem_map, pfn, order, start_mt);
        }
        let Some(scan) = self.move_freepages_block(pfn, start_mt) else {
            return self.area.move_to(mem_map, pfn, order, start_mt);
        };
        let (free, movable) = (scan.free_pages, scan.movable_pages);
        let alike = if start_mt == MigrateType::Movable {
            movable
        } else if old_mt == MigrateType::Movable {
            PAGEBLOCK_PAGES.saturating_sub(free + movable)
        } else {
            0
        };
        if free + alike >= PAGEBLOCK_PAGES / 2 || !self.zone.group_by_mobility() {
            mem_map.set_pageblock_migratetype(pfn, start_mt);
        }
    }

    fn change_pageblock_range(&self, pfn: Pfn, order: Order, mt: MigrateType) {
        let pageblocks = order.pages() / PAGEBLOCK_PAGES;
        for i in 0..pageblocks {
            let block = pfn.add(i * PAGEBLOCK_PAGES);
            self.zone.mem_map.set_pageblock_migratetype(block, mt);
        }
    }

    /// `boost_watermark`: a fragmenting fallback raises the watermarks by a pageblock, up
    /// to `watermark_boost_factor` of the high watermark, so kswapd reclaims and compacts.
    fn boost_watermark(&self) -> bool {
        let marks = &self.zone.watermarks;
        let high = marks.stored(watermark::WatermarkKind::High);
        let factor = self.zone.watermark_boost_factor();
        match watermark::boosted(marks.boost(), high, self.zone.managed, factor) {
            Some(boost) => {
                marks.set_boost(boost);
                self.zone.events.watermark_boosts.fetch_add(1, Relaxed);
                true
            }
            None => false,
        }
    }

    /// Move every free block in `pfn`'s pageblock to `mt`'s lists (`move_freepages_block`).
    /// Returns what moved and the in-use pages that are movable (on an LRU), or `None`
    /// when the pageblock crosses the zone's boundary.
    pub(crate) fn move_freepages_block(
        &mut self,
        pfn: Pfn,
        mt: MigrateType,
    ) -> Option<PageblockMove> {
        let mem_map = &self.zone.mem_map;
        let start = pfn.align_down(PAGEBLOCK);
        let last = start.add(PAGEBLOCK_PAGES - 1);
        // A pageblock that crosses the zone's edge is not moved (Linux ≥ 6.10). v6.7 moves
        // one that starts before the zone from this page on, which leaves the free blocks
        // before the page on their old lists under the new tag; the model test caught
        // that leaving high-atomic blocks behind after the reserve was given back.
        if !mem_map.spans(start) || !mem_map.spans(last) {
            return None;
        }
        let mut scan = PageblockMove::default();
        let mut cursor = start;
        while cursor <= last {
            let page = mem_map.page(cursor);
            match page.state_order() {
                (PageState::Buddy, order) => {
                    self.area.move_to(mem_map, cursor, order, mt);
                    scan.free_blocks += 1;
                    scan.free_pages += order.pages();
                    cursor = cursor.add(order.pages());
                }
                _ => {
                    if page.flags().contains(PageFlags::LRU) {
                        scan.movable_pages += 1;
                    }
                    cursor = cursor.add(1);
                }
            }
        }
        Some(scan)
    }

    /// `reserve_highatomic_pageblock`: after a high-order atomic allocation from `pfn`'s
    /// pageblock, set that pageblock aside for future ones, up to 1 % of the zone plus a
    /// pageblock. Returns the free blocks and pages moved to the high-atomic lists.
    pub(crate) fn reserve_highatomic_pageblock(&mut self, pfn: Pfn) -> (u64, u64) {
        let zone = self.zone;
        let max_managed = zone.managed / 100 + PAGEBLOCK_PAGES;
        if zone.nr_reserved_highatomic() >= max_managed {
            return (0, 0);
        }
        let mt = zone.mem_map.pageblock_migratetype(pfn);
        if !mt.is_mergeable() {
            return (0, 0);
        }
        // A pageblock that crosses the zone's edge cannot have its free pages moved, so it
        // could never be given back (`unreserve_highatomic_pageblock` would drop the count
        // and find nothing to move): do not reserve it, as Linux ≥ 6.10 does not.
        let Some(scan) = self.move_freepages_block(pfn, MigrateType::HighAtomic) else {
            return (0, 0);
        };
        zone.nr_reserved_highatomic
            .fetch_add(PAGEBLOCK_PAGES, Relaxed);
        zone.mem_map
            .set_pageblock_migratetype(pfn, MigrateType::HighAtomic);
        (scan.free_blocks, scan.free_pages)
    }

    /// `unreserve_highatomic_pageblock` for one zone: give one high-atomic pageblock with
    /// free pages back to `mt`. Unless `force`, keep the last reserved pageblock. Returns
    /// the free blocks and pages moved; a pageblock was given back if pages moved.
    pub(crate) fn unreserve_highatomic_pageblock(
        &mut self,
        mt: MigrateType,
        force: bool,
    ) -> (u64, u64) {
        let zone = self.zone;
        if !force && zone.nr_reserved_highatomic() <= PAGEBLOCK_PAGES {
            return (0, 0);
        }
        for order in Order::all() {
            let Some(pfn) = self.area.list(order, MigrateType::HighAtomic).first() else {
                continue;
            };
            if zone.mem_map.pageblock_migratetype(pfn) == MigrateType::HighAtomic {
                let reserved = zone.nr_reserved_highatomic();
                zone.nr_reserved_highatomic
                    .store(reserved - reserved.min(PAGEBLOCK_PAGES), Relaxed);
            }
            zone.mem_map.set_pageblock_migratetype(pfn, mt);
            if let Some(scan) = self.move_freepages_block(pfn, mt) {
                if scan.free_pages > 0 {
                    return (scan.free_blocks, scan.free_pages);
                }
            }
        }
        (0, 0)
    }
}

/// What [`ZoneLocked::move_freepages_block`] found in a pageblock.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct PageblockMove {
    /// Free blocks moved to the new migratetype's lists.
    pub(crate) free_blocks: u64,
    /// Pages in those blocks.
    pub(crate) free_pages: u64,
    /// In-use pages on an LRU (movable).
    pub(crate) movable_pages: u64,
}

impl<R: RawMutex> ZoneLocked<'_, R> {
    /// Take exactly the block (`pfn`, `order`) off the free lists, splitting the free block
    /// that holds it and returning the other parts to their lists (Linux's
    /// `take_page_off_buddy` with `break_down_buddy_pages`, for any order). Returns the
    /// block's migratetype list, or `None` (and changes nothing) if no free block covers it.
    /// `NR_FREE_PAGES` is updated; the caller decides what the block becomes.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn take_block(&mut self, pfn: Pfn, order: Order) -> Option<MigrateType> {
        let (mut head, mut high) = order.up_to_max().find_map(|o| {
            let head = pfn.align_down(o);
            self.is_free_buddy(head, o).then_some((head, o))
        })?;
        let mt = self.area.cached_migratetype(&self.zone.mem_map, head);
        self.area.remove(&self.zone.mem_map, head, high);
        while high > order {
            high = high.down().expect("high > order ≥ 0");
            let upper = head.add(high.pages());
            let (keep, spare) = if pfn.0 >= upper.0 {
                (upper, head)
            } else {
                (head, upper)
            };
            self.area
                .add(&self.zone.mem_map, spare, high, mt, ListEnd::Head);
            head = keep;
        }
        debug_assert_eq!(head, pfn);
        self.mod_free_pages(-(order.pages() as i64));
        Some(mt)
    }
}
