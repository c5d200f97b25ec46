//! Free: validation of the caller's block, the per-CPU commit with the drain rules of
//! every patch, the direct buddy path, and the batched free.
//!
//! Linux counterpart (v6.7, `mm/page_alloc.c`): `__free_pages` → `free_unref_page`,
//! `free_unref_page_commit`, `free_pcppages_bulk`, `free_one_page`, `__free_pages_ok`,
//! and `free_unref_page_list`. Linux trusts its callers; we check first, with one
//! compare-and-swap on the block head, so that a bad free changes nothing.

use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

use super::allocator::PageAllocator;
use super::buddy::ZoneLocked;
use super::error::FreeError;
use super::free_area::ListEnd;
use super::pcp::{order_to_pindex, pcp_allowed_order, pindex_to_order, PerCpuPages, NR_PCP_LISTS};
use super::types::{Caller, MigrateType, ZoneType, MIGRATE_PCPTYPES};
use super::watermark::{self, WatermarkKind};
use super::zone::{DrainReason, PcpLocked, Zone, ZoneFlags};
use crate::page::{Order, Page, PageState, Pfn};

/// Pages freed under one pageset lock hold in a batched free (`SWAP_CLUSTER_MAX`).
const FREE_BATCH_RELOCK: usize = 32;

impl PageAllocator {
    /// Free a block allocated with [`PageAllocator::alloc_pages`], from `caller`'s CPU
    /// (`__free_pages`). Cheap orders and THP go to the caller's pageset (the zone if the
    /// pageset is busy); other orders go straight to the zone. A bad free (never
    /// allocated, already free, wrong order, inside another block, outside every zone,
    /// misaligned) is refused with an error and changes nothing.
    #[inline(always)]
    pub fn free_pages(&self, caller: Caller, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        // Nearly every free is of one page: that copy of the path has the order as a
        // constant (alignment, list index, page counts and the high-order rules fold
        // away); the other orders share one out-of-line copy.
        if order == Order::ZERO {
            self.free_pages_of_order(caller, pfn, Order::ZERO)
        } else {
            self.free_pages_of_any_order(caller, pfn, order)
        }
    }

    /// [`PageAllocator::free_pages`] for orders above 0.
    #[inline(never)]
    fn free_pages_of_any_order(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        self.free_pages_of_order(caller, pfn, order)
    }

    /// The body of [`PageAllocator::free_pages`].
    #[inline(always)]
    fn free_pages_of_order(&self, caller: Caller, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let (zone, page) = self.claim_block(caller, pfn, order)?;
        free_pages_prepare(page);
        self.free_unref_page(caller, zone, pfn, page, order);
        Ok(())
    }

    /// Check that `pfn` heads an allocated block of `order` and take it (Allocated →
    /// Freeing). Exactly one of two racing frees of a block gets past this. Returns the
    /// zone and the head page, so the paths after it do not look the page up again.
    #[inline(always)]
    pub(super) fn claim_block(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
    ) -> Result<(&Zone, &Page), FreeError> {
        if !self.cpu_online(caller.cpu) {
            return Err(FreeError::InvalidCpu(caller.cpu));
        }
        let zone = self.find_zone(pfn).ok_or(FreeError::OutsideZones { pfn })?;
        if !pfn.is_aligned(order) {
            return Err(FreeError::Misaligned { pfn, order });
        }
        let page = zone.mem_map.page(pfn);
        if let Err((state, found)) =
            page.transition(PageState::Allocated, order, PageState::Freeing)
        {
            return Err(diagnose_bad_free(zone, pfn, order, state, found));
        }
        Ok((zone, page))
    }

    /// `free_unref_page` for a claimed block.
    #[inline(always)]
    pub(super) fn free_unref_page(
        &self,
        caller: Caller,
        zone: &Zone,
        pfn: Pfn,
        page: &Page,
        order: Order,
    ) {
        let bypass = self.policy.irq_bypass && caller.in_interrupt();
        if !pcp_allowed_order(order) || bypass {
            if bypass && pcp_allowed_order(order) {
                zone.events.pcp_irq_bypass.fetch_add(1, Relaxed);
            }
            return free_pages_ok(zone, pfn, order);
        }
        let mt = zone.mem_map.pageblock_migratetype(pfn);
        let Some(pcp_mt) = pcp_migratetype(mt) else {
            return free_one_page(zone, pfn, order, mt);
        };
        match zone.pcp_trylock(caller.cpu) {
            Ok(mut pcp) => {
                self.free_unref_page_commit(zone, &mut pcp, pfn, page, order, mt, pcp_mt)
            }
            Err(refused) => {
                refused.count(zone);
                free_one_page(zone, pfn, order, mt);
            }
        }
    }

    /// `free_unref_page_commit`: put the block on the pageset, then apply the policy's
    /// drain rules: `free_high` for consecutive cheap high-order frees, else the `high`
    /// threshold (auto-tuned from patch 7). A drain that leaves the zone above its high
    /// watermark clears `BELOW_HIGH` (patch 8).
    #[expect(
        clippy::too_many_arguments,
        reason = "Linux's signature plus the descriptor and the pageset type found before"
    )]
    #[inline(always)]
    fn free_unref_page_commit(
        &self,
        zone: &Zone,
        pcp: &mut PcpLocked<'_>,
        pfn: Pfn,
        page: &Page,
        order: Order,
        mt: MigrateType,
        pcp_mt: MigrateType,
    ) {
        let policy = &self.policy.pcp;
        let scale_max = self.scale_max.load(Relaxed);
        pcp.on_free(policy);
        pcp.count_free(order.pages());
        // `free_pages_prepare` cleared the flags and memcg id before this commit.
        page.set_state_of_bare(PageState::Pcp, order);
        page.set_cached_migratetype(mt as u8);
        let pindex = order_to_pindex(pcp_mt, order);
        pcp.lists[pindex].push_head_page(&zone.mem_map, pfn, page);
        pcp.count += order.pages();
        let free_high = pcp.free_high(policy, order, scale_max);
        let high = pcp.nr_pcp_high(policy, zone.flags(), free_high, scale_max);
        if pcp.count < high {
            return;
        }
        let pages = pcp.nr_pcp_free(policy, high, free_high, scale_max);
        let reason = if free_high {
            DrainReason::FreeHigh
        } else {
            DrainReason::Free
        };
        // LOCK ORDER: pcp lock → zone lock.
        zone.lock().free_pcppages_bulk(pcp, pages, pindex, reason);
        if policy.below_high
            && zone.flags().contains(ZoneFlags::BELOW_HIGH)
            && above_high_watermark(zone)
        {
            zone.clear_flag(ZoneFlags::BELOW_HIGH);
        }
    }

    /// Free many order-0 pages at once (`free_unref_page_list`; Linux ≥ 6.10
    /// `free_unref_folios`). Either every pfn is a valid order-0 allocation and all are
    /// freed, or none is and the first problem is returned with its index. Pages go to
    /// `caller`'s pagesets, relocking when the zone changes or every 32 pages.
    pub fn free_pages_batch(&self, caller: Caller, pfns: &[Pfn]) -> Result<(), (usize, FreeError)> {
        let mut claimed: Vec<&Zone> = Vec::with_capacity(pfns.len());
        for (index, &pfn) in pfns.iter().enumerate() {
            match self.claim_block(caller, pfn, Order::ZERO) {
                Ok((zone, _)) => claimed.push(zone),
                Err(err) => {
                    self.unclaim(&pfns[..index], &claimed);
                    let err = match err {
                        FreeError::NotAllocated { pfn } if pfns[..index].contains(&pfn) => {
                            FreeError::Duplicate { pfn }
                        }
                        other => other,
                    };
                    return Err((index, err));
                }
            }
        }
        let bypass = self.policy.irq_bypass && caller.in_interrupt();
        let mut held: Option<(&Zone, PcpLocked<'_>)> = None;
        let mut batch = 0;
        for (&pfn, &zone) in pfns.iter().zip(&claimed) {
            let page = zone.mem_map.page(pfn);
            free_pages_prepare(page);
            if bypass {
                // Seed 001: each page of an interrupt-context batch goes to
                // `__free_pages_ok`, as a single free from that context does.
                zone.events.pcp_irq_bypass.fetch_add(1, Relaxed);
                free_pages_ok(zone, pfn, Order::ZERO);
                continue;
            }
            let mt = zone.mem_map.pageblock_migratetype(pfn);
            let Some(pcp_mt) = pcp_migratetype(mt) else {
                free_one_page(zone, pfn, Order::ZERO, mt);
                continue;
            };
            let same_zone = held.as_ref().is_some_and(|(z, _)| core::ptr::eq(*z, zone));
            if !same_zone || batch == FREE_BATCH_RELOCK {
                held = None;
                batch = 0;
                match zone.pcp_trylock(caller.cpu) {
                    Ok(pcp) => held = Some((zone, pcp)),
                    Err(refused) => {
                        refused.count(zone);
                        free_one_page(zone, pfn, Order::ZERO, mt);
                        continue;
                    }
                }
            }
            let (_, pcp) = held.as_mut().expect("a pageset lock is held here");
            self.free_unref_page_commit(zone, pcp, pfn, page, Order::ZERO, mt, pcp_mt);
            batch += 1;
        }
        Ok(())
    }

    /// Undo `claim_block` for the first blocks of a refused batch.
    fn unclaim(&self, pfns: &[Pfn], zones: &[&Zone]) {
        for (&pfn, zone) in pfns.iter().zip(zones) {
            zone.mem_map
                .page(pfn)
                .set_state(PageState::Allocated, Order::ZERO);
        }
    }
}

/// `free_pages_prepare`: a free page carries no flags and no memcg.
pub(super) fn free_pages_prepare(page: &Page) {
    page.clear_flags_and_memcg();
}

/// The pageset list type for a block of pageblock type `mt`: the PCP types map to
/// themselves, high-atomic (and CMA) to MOVABLE; isolated blocks bypass the pagesets.
fn pcp_migratetype(mt: MigrateType) -> Option<MigrateType> {
    match mt {
        MigrateType::Isolate => None,
        mt if mt.index() >= MIGRATE_PCPTYPES => Some(MigrateType::Movable),
        mt => Some(mt),
    }
}

/// `__free_pages_ok`: straight to the buddy lists, counted in `PGFREE`.
fn free_pages_ok(zone: &Zone, pfn: Pfn, order: Order) {
    let mut locked = zone.lock();
    let mt = zone.mem_map.pageblock_migratetype(pfn);
    locked.free_one_page(pfn, order, mt, ListEnd::Head);
    drop(locked);
    zone.events.pgfree.fetch_add(order.pages(), Relaxed);
}

/// `free_one_page`: straight to the buddy lists; v6.7 does not count these in `PGFREE`.
fn free_one_page(zone: &Zone, pfn: Pfn, order: Order, mt: MigrateType) {
    zone.lock().free_one_page(pfn, order, mt, ListEnd::Head);
}

/// The check that clears `BELOW_HIGH`: order 0 at the high watermark, classzone Movable,
/// no alloc flags.
fn above_high_watermark(zone: &Zone) -> bool {
    let input = zone.watermark_input(ZoneType::Movable, &[]);
    watermark::watermark_ok(
        Order::ZERO,
        zone.wmark(WatermarkKind::High),
        super::gfp::AllocFlags::empty(),
        &input,
    )
}

impl ZoneLocked<'_> {
    /// `free_pcppages_bulk`: return up to `pages` pages from a pageset to the buddy lists,
    /// visiting the lists round-robin from `start` and taking the oldest (tail) blocks of
    /// each until it is empty or enough pages went back. A high-order block can overshoot
    /// the request. Returns the pages freed.
    pub(crate) fn free_pcppages_bulk(
        &mut self,
        pcp: &mut PerCpuPages,
        pages: u64,
        start: usize,
        reason: DrainReason,
    ) -> u64 {
        let zone = self.zone();
        let mut left = pages.min(pcp.count) as i64;
        if left <= 0 {
            return 0;
        }
        let mut pindex = (start + NR_PCP_LISTS - 1) % NR_PCP_LISTS;
        let mut freed = 0;
        while left > 0 {
            loop {
                pindex = (pindex + 1) % NR_PCP_LISTS;
                if !pcp.lists[pindex].is_empty() {
                    break;
                }
            }
            let order = pindex_to_order(pindex);
            while let Some((pfn, page)) = pcp.lists[pindex].pop_tail(&zone.mem_map) {
                pcp.count -= order.pages();
                let mt = MigrateType::from_index(page.cached_migratetype() as usize)
                    .expect("a PCP page caches a valid migratetype");
                self.free_one_page(pfn, order, mt, ListEnd::Head);
                freed += order.pages();
                left -= order.pages() as i64;
                if left <= 0 {
                    break;
                }
            }
        }
        pcp.zone_touched = true;
        Self::count_locked(&zone.events.pcp_drains[reason as usize], 1);
        Self::count_locked(&zone.events.pcp_drain_pages[reason as usize], freed);
        freed
    }
}

/// Name the mistake of a refused free, looking at the block that holds `pfn`.
fn diagnose_bad_free(
    zone: &Zone,
    pfn: Pfn,
    order: Order,
    state: PageState,
    found: Order,
) -> FreeError {
    match state {
        PageState::Allocated => FreeError::WrongOrder {
            pfn,
            allocated: found,
            given: order,
        },
        PageState::Buddy | PageState::Pcp | PageState::Freeing => FreeError::NotAllocated { pfn },
        PageState::Reserved | PageState::Hole => FreeError::Reserved { pfn },
        PageState::Tail => {
            // The zone lock keeps free blocks from merging or splitting under the walk.
            let _locked = zone.lock();
            let covering = Order::all().skip(1).find_map(|o| {
                let head = pfn.align_down(o);
                let (state, order) = zone.mem_map.get(head)?.state_order();
                (state != PageState::Tail && order >= o).then_some((head, state))
            });
            match covering {
                Some((block, PageState::Allocated)) => FreeError::NotBlockStart { pfn, block },
                _ => FreeError::NotAllocated { pfn },
            }
        }
    }
}

impl PageAllocator {
    /// `split_page`: turn the allocated block of `order` at `pfn` into 2^order allocated
    /// order-0 blocks, each freed on its own from now on. Page flags, memcg ids and map
    /// counts stay; each new head's reference count is left for the caller to set (the
    /// folio layer gives each page the references its mappings hold). A block that is not
    /// an allocated block of exactly `order` is refused unchanged, with the error a free
    /// of it would give.
    pub fn split_page(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let zone = self.find_zone(pfn).ok_or(FreeError::OutsideZones { pfn })?;
        if !pfn.is_aligned(order) {
            return Err(FreeError::Misaligned { pfn, order });
        }
        let head = zone.mem_map.page(pfn);
        // Allocated/order → Allocated/0 in one step, so a racing free or split of the same
        // block sees either the whole block or the split, never half of each.
        let split = head.transition_order(PageState::Allocated, order, Order::ZERO);
        if let Err((state, found)) = split {
            return Err(diagnose_bad_free(zone, pfn, order, state, found));
        }
        for tail in 1..order.pages() {
            zone.mem_map
                .page(pfn.add(tail))
                .set_state(PageState::Allocated, Order::ZERO);
        }
        Ok(())
    }
}
