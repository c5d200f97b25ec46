//! Free: validation of the caller's block, the per-CPU commit with the drain rules of
//! every patch, the direct buddy path, and the batched free.
//!
//! Linux counterpart (v6.7, `mm/page_alloc.c`): `__free_pages` → `free_unref_page`,
//! `free_unref_page_commit`, `free_pcppages_bulk`, `free_one_page`, `__free_pages_ok`,
//! and `free_unref_page_list`. Linux trusts its callers; we check first, with one
//! compare-and-swap on the block head, so that a bad free changes nothing. Callers that
//! own their blocks exclusively (the runtime's handles and raw frees, the simulator) use
//! the `_exclusive` entry points, whose claim is a load, the same check and a plain
//! store ([`Claim`]): one body, compiled once per kind of claim. The batched
//! free commits each run of pages that cannot reach the drain threshold with only the
//! list push, and does the run's policy and counter updates once
//! ([`PerCpuPages::order0_free_room`], [`PerCpuPages::on_order0_frees`]); the end state
//! is the one single frees leave (`batch_model.rs` checks it).

use core::sync::atomic::Ordering::Relaxed;

use super::allocator::PageAllocator;
use super::buddy::ZoneLocked;
use super::error::{BatchFreeError, FreeError};
use super::events::{HoldKind, LockEvents};
use super::free_area::ListEnd;
use super::list::{HeadRun, PfnList};
use super::mem_map::MemMap;
use super::pcp::{order_to_pindex, pcp_allowed_order, pindex_to_order, PerCpuPages, NR_PCP_LISTS};
use super::types::{Caller, CpuId, MigrateType, ZoneType, MIGRATE_PCPTYPES};
use super::watermark::{self, WatermarkKind, PAGEBLOCK_ORDER};
use super::zone::{DrainReason, PcpLocked, Zone, ZoneFlags};
use crate::page::{Order, Page, PageState, Pfn, NO_PFN};
use crate::policy::PcpPolicy;
use crate::sync::RawMutex;

/// Pages freed under one pageset lock hold in a batched free (`SWAP_CLUSTER_MAX`).
const FREE_BATCH_RELOCK: usize = 32;

/// How a free takes its block from Allocated to Freeing: the one step in which
/// [`PageAllocator::free_pages`] and [`PageAllocator::free_pages_exclusive`] (and their
/// batched forms) differ. The free paths are generic over it, so each entry point
/// compiles to its own copy of the one body.
pub(super) trait Claim {
    /// [`Page::transition`] from Allocated at `order` to Freeing, or what the page holds
    /// instead.
    fn take(page: &Page, order: Order) -> Result<(), (PageState, Order)>;
}

/// Any thread may free any block: the claim is a compare-and-swap, so of two racing
/// frees (or a free and a split) of one block exactly one passes.
pub(super) struct Atomic;

impl Claim for Atomic {
    #[inline(always)]
    fn take(page: &Page, order: Order) -> Result<(), (PageState, Order)> {
        page.transition(PageState::Allocated, order, PageState::Freeing)
    }
}

/// The caller owns the block exclusively, so no other thread frees or splits it at the
/// same time: the claim is a load, the same check and a plain store
/// ([`Page::transition_exclusive`]), without the locked instruction.
#[cfg(any(test, feature = "internals"))]
pub(super) struct Exclusive;

#[cfg(any(test, feature = "internals"))]
impl Claim for Exclusive {
    #[inline(always)]
    fn take(page: &Page, order: Order) -> Result<(), (PageState, Order)> {
        page.transition_exclusive(PageState::Allocated, order, PageState::Freeing)
    }
}

impl<R: RawMutex> PageAllocator<R> {
    /// Free a block allocated with [`PageAllocator::alloc_pages`], from `caller`'s CPU
    /// (`__free_pages`). Cheap orders and THP go to the caller's pageset (the zone if the
    /// pageset is busy); other orders go straight to the zone. A bad free (never
    /// allocated, already free, wrong order, inside another block, outside every zone,
    /// misaligned) is refused with an error and changes nothing, also when another thread
    /// frees the same block at the same time: exactly one of two racing frees passes.
    #[inline(always)]
    pub fn free_pages(&self, caller: Caller, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.free_pages_claimed::<Atomic, _>(caller, pfn, order, &mut ())
    }

    /// [`PageAllocator::free_pages`], telling `events` what the call did: the zone-lock
    /// hold (a drain the free triggered, or the direct buddy free), or the PCP hit if the
    /// block went onto the pageset without one ([`LockEvents`]). A refused free reports
    /// nothing.
    #[inline(always)]
    pub fn free_pages_report(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
        events: &mut impl LockEvents,
    ) -> Result<(), FreeError> {
        self.free_pages_claimed::<Atomic, _>(caller, pfn, order, events)
    }

    /// [`PageAllocator::free_pages`] for a caller that owns the block exclusively: the
    /// same checks in the same order, the same errors, the same state and counters
    /// afterwards, without the compare-and-swap on the block head.
    ///
    /// Every bad free made after the block's previous free or split returned (a double
    /// free, a wrong order, a tail page, a foreign or misaligned pfn, an offline CPU) is
    /// still refused and changes nothing. A free that races another free or a
    /// [`PageAllocator::split_page`] of the same block on another thread is not detected:
    /// both may pass and corrupt the free lists (the core has no undefined behaviour, it
    /// owns no memory, but it would hand the pages out twice and its `verify()` fails).
    /// The caller guarantees there is no such race, as every caller of Linux's
    /// `free_pages` does: its checks are not atomic either. Since safe code cannot be
    /// trusted with that promise, this is reached through `internals::free_pages_exclusive`
    /// only (the runtime's owning `PageBlock` and the single-threaded simulator).
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn free_pages_exclusive(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        self.free_pages_claimed::<Exclusive, _>(caller, pfn, order, &mut ())
    }

    /// [`PageAllocator::free_pages_exclusive`], telling `events` what the call did, as
    /// [`PageAllocator::free_pages_report`] does.
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn free_pages_exclusive_report(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
        events: &mut impl LockEvents,
    ) -> Result<(), FreeError> {
        self.free_pages_claimed::<Exclusive, _>(caller, pfn, order, events)
    }

    /// The body of [`PageAllocator::free_pages`], claiming with `C`.
    #[inline(always)]
    fn free_pages_claimed<C: Claim, E: LockEvents>(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
        events: &mut E,
    ) -> Result<(), FreeError> {
        // Nearly every free is of one page: that copy of the path has the order as a
        // constant (alignment, list index, page counts and the high-order rules fold
        // away); the other orders share one out-of-line copy.
        if order == Order::ZERO {
            self.free_pages_of_order::<C, E>(caller, pfn, Order::ZERO, events)
        } else {
            self.free_pages_of_any_order::<C, E>(caller, pfn, order, events)
        }
    }

    /// [`PageAllocator::free_pages`] for orders above 0.
    #[inline(never)]
    fn free_pages_of_any_order<C: Claim, E: LockEvents>(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
        events: &mut E,
    ) -> Result<(), FreeError> {
        self.free_pages_of_order::<C, E>(caller, pfn, order, events)
    }

    /// The free once the order is known: claim, prepare, commit.
    #[inline(always)]
    fn free_pages_of_order<C: Claim, E: LockEvents>(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
        events: &mut E,
    ) -> Result<(), FreeError> {
        let (zone, page) = self.claim_block::<C>(caller, pfn, order)?;
        free_pages_prepare(page);
        self.free_unref_page(caller, zone, pfn, page, order, events);
        Ok(())
    }

    /// Check that `pfn` heads an allocated block of `order` and take it (Allocated →
    /// Freeing) with `C`. With [`Atomic`], exactly one of two racing frees of a block gets
    /// past this. Returns the zone and the head page, so the paths after it do not look
    /// the page up again.
    #[inline(always)]
    pub(super) fn claim_block<C: Claim>(
        &self,
        caller: Caller,
        pfn: Pfn,
        order: Order,
    ) -> Result<(&Zone<R>, &Page), FreeError> {
        if !self.is_cpu_online(caller.cpu) {
            return Err(FreeError::InvalidCpu(caller.cpu));
        }
        self.claim_allocated::<C>(pfn, order)
    }

    /// [`PageAllocator::claim_block`] after the caller's CPU was found online.
    #[inline(always)]
    fn claim_allocated<C: Claim>(
        &self,
        pfn: Pfn,
        order: Order,
    ) -> Result<(&Zone<R>, &Page), FreeError> {
        let zone = self.find_zone(pfn).ok_or(FreeError::OutsideZones { pfn })?;
        claim_in_zone::<C, R>(zone, zone.mem_map.page(pfn), pfn, order)
    }

    /// `free_unref_page` for a claimed block.
    #[inline(always)]
    pub(super) fn free_unref_page<E: LockEvents>(
        &self,
        caller: Caller,
        zone: &Zone<R>,
        pfn: Pfn,
        page: &Page,
        order: Order,
        events: &mut E,
    ) {
        let cpu = caller.cpu;
        let bypass = self.policy.irq_bypass && caller.in_interrupt();
        if !pcp_allowed_order(order) || bypass {
            if bypass && pcp_allowed_order(order) {
                zone.events.pcp_irq_bypass.fetch_add(1, Relaxed);
            }
            return free_pages_ok(zone, pfn, order, cpu, events);
        }
        let mt = zone.mem_map.pageblock_migratetype(pfn);
        let Some(pcp_mt) = pcp_migratetype(mt) else {
            return free_one_page(zone, pfn, order, mt, cpu, events);
        };
        match zone.pcp_trylock(cpu) {
            Ok(mut pcp) => {
                let block = (pfn, page, order);
                self.free_unref_page_commit(zone, &mut pcp, block, mt, pcp_mt, cpu, events)
            }
            Err(refused) => {
                refused.count(zone);
                free_one_page(zone, pfn, order, mt, cpu, events);
            }
        }
    }

    /// `free_unref_page_commit`: put the block (`pfn`, its descriptor, its order) on
    /// `cpu`'s pageset, then apply the policy's drain rules: `free_high` for consecutive
    /// cheap high-order frees, else the `high` threshold (auto-tuned from patch 7). A drain
    /// that leaves the zone above its high watermark clears `BELOW_HIGH` (patch 8). The
    /// drain, or else the PCP hit, is reported to `events`.
    #[expect(
        clippy::too_many_arguments,
        reason = "Linux's signature plus the pageset types found before, the CPU and the sink"
    )]
    #[inline(always)]
    fn free_unref_page_commit<E: LockEvents>(
        &self,
        zone: &Zone<R>,
        pcp: &mut PcpLocked<'_, R>,
        (pfn, page, order): (Pfn, &Page, Order),
        mt: MigrateType,
        pcp_mt: MigrateType,
        cpu: CpuId,
        events: &mut E,
    ) {
        let policy = &self.policy.pcp;
        let scale_max = self.scale_max.load(Relaxed);
        pcp.on_free(policy);
        pcp.count_free(order.pages());
        let pindex = order_to_pindex(pcp_mt, order);
        pcp_add_block(zone, pcp, pfn, page, order, mt, pindex);
        pcp.count += order.pages();
        let free_high = pcp.free_high(policy, order, scale_max);
        let high = pcp.nr_pcp_high(policy, zone.flags(), free_high, scale_max);
        if pcp.count < high {
            events.pcp_hit(zone.index, cpu, 1);
            return;
        }
        let pages = pcp.nr_pcp_free(policy, high, free_high, scale_max);
        let reason = if free_high {
            DrainReason::FreeHigh
        } else {
            DrainReason::Free
        };
        // LOCK ORDER: pcp lock → zone lock.
        zone.lock()
            .free_pcppages_bulk(pcp, pages, pindex, reason, cpu, events);
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
    /// `caller`'s pagesets, relocking when the zone changes or every 32 pages. The end
    /// state is the one single frees of the pages in order leave. A page freed twice in
    /// the batch is refused as a duplicate, and, as for [`PageAllocator::free_pages`], so
    /// is a page that another thread frees at the same time.
    pub fn free_pages_batch(&self, caller: Caller, pfns: &[Pfn]) -> Result<(), BatchFreeError> {
        self.free_pages_batch_claimed::<Atomic, _>(caller, pfns, &mut ())
            .map_err(BatchFreeError::from)
    }

    /// [`PageAllocator::free_pages_batch`], telling `events` what the call did: every
    /// zone-lock hold (drains, direct buddy frees) and the PCP hits, the pages that went
    /// onto a pageset without one ([`LockEvents`]). A refused batch reports nothing.
    pub fn free_pages_batch_report(
        &self,
        caller: Caller,
        pfns: &[Pfn],
        events: &mut impl LockEvents,
    ) -> Result<(), BatchFreeError> {
        self.free_pages_batch_claimed::<Atomic, _>(caller, pfns, events)
            .map_err(BatchFreeError::from)
    }

    /// [`PageAllocator::free_pages_batch`] for a caller that owns every page exclusively:
    /// the same checks, the same all-or-nothing refusal with the same index and error
    /// (a duplicate within the batch included), the same state and counters afterwards,
    /// without a compare-and-swap per page. As for
    /// [`PageAllocator::free_pages_exclusive`], a free or split of one of the pages racing
    /// it on another thread is not detected and corrupts the free lists: the caller
    /// guarantees there is none.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn free_pages_batch_exclusive(
        &self,
        caller: Caller,
        pfns: &[Pfn],
    ) -> Result<(), BatchFreeError> {
        self.free_pages_batch_claimed::<Exclusive, _>(caller, pfns, &mut ())
            .map_err(BatchFreeError::from)
    }

    /// [`PageAllocator::free_pages_batch_exclusive`], telling `events` what the call did
    /// ([`PageAllocator::free_pages_batch_report`]).
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn free_pages_batch_exclusive_report(
        &self,
        caller: Caller,
        pfns: &[Pfn],
        events: &mut impl LockEvents,
    ) -> Result<(), BatchFreeError> {
        self.free_pages_batch_claimed::<Exclusive, _>(caller, pfns, events)
            .map_err(BatchFreeError::from)
    }

    /// How many order-0 frees `caller`'s pageset of the zone spanning `pfn` takes, one
    /// after another, with no chance of a drain ([`PerCpuPages::order0_free_room`]), at
    /// most one relock's worth of the batch path (`FREE_BATCH_RELOCK`, Linux's
    /// `SWAP_CLUSTER_MAX`): 0 when the next free may drain, or the pageset is busy or
    /// offline, or no zone spans `pfn`. A batch ([`PageAllocator::free_pages_batch`]) of
    /// that many allocated pages of the zone, in pageblocks the pagesets take, then takes
    /// no zone lock, if nothing else frees to the pageset in between: read under the
    /// pageset's lock, which is dropped before the batch takes it again.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn quiet_order0_frees(&self, caller: Caller, pfn: Pfn) -> usize {
        let Some(zone) = self.find_zone(pfn) else {
            return 0;
        };
        let Ok(pcp) = zone.pcp_trylock(caller.cpu) else {
            return 0;
        };
        let room = pcp.order0_free_room(&self.policy.pcp, zone.flags());
        usize::try_from(room).map_or(FREE_BATCH_RELOCK, |room| room.min(FREE_BATCH_RELOCK))
    }

    /// The body of [`PageAllocator::free_pages_batch`], claiming with `C`.
    #[inline(always)]
    fn free_pages_batch_claimed<C: Claim, E: LockEvents>(
        &self,
        caller: Caller,
        pfns: &[Pfn],
        events: &mut E,
    ) -> Result<(), (usize, FreeError)> {
        self.claim_batch::<C>(caller, pfns)?;
        let cpu = caller.cpu;
        let zone_of = |pfn| self.find_zone(pfn).expect("a claimed page is in a zone");
        if self.policy.irq_bypass && caller.in_interrupt() {
            for &pfn in pfns {
                let zone = zone_of(pfn);
                free_pages_prepare(zone.mem_map.page(pfn));
                // Gorman 2017: each page of an interrupt-context batch goes to
                // `__free_pages_ok`, as a single free from that context does.
                zone.events.pcp_irq_bypass.fetch_add(1, Relaxed);
                free_pages_ok(zone, pfn, Order::ZERO, cpu, events);
            }
            return Ok(());
        }
        let mut held: Option<BatchHold<'_, R>> = None;
        let mut rest = pfns;
        loop {
            if let Some(hold) = held.as_mut() {
                let quiet = self.commit_quiet_run(hold, rest);
                if quiet > 0 {
                    events.pcp_hit(hold.zone.index, cpu, quiet as u64);
                }
                rest = &rest[quiet..];
            }
            let Some((&pfn, after)) = rest.split_first() else {
                break;
            };
            let zone = zone_of(pfn);
            let mt = zone.mem_map.pageblock_migratetype(pfn);
            let page = zone.mem_map.page(pfn);
            let Some(pcp_mt) = pcp_migratetype(mt) else {
                free_pages_prepare(page);
                free_one_page(zone, pfn, Order::ZERO, mt, cpu, events);
                rest = after;
                continue;
            };
            let hold = match held.as_mut() {
                Some(hold) if core::ptr::eq(hold.zone, zone) && hold.pages < FREE_BATCH_RELOCK => {
                    hold
                }
                _ => {
                    if let Some(hold) = held.take() {
                        self.release(hold);
                    }
                    match zone.pcp_trylock(cpu) {
                        // The page is committed by the next pass, quietly if there is room.
                        Ok(pcp) => held = Some(BatchHold::new(&self.policy.pcp, zone, pcp)),
                        Err(refused) => {
                            free_pages_prepare(page);
                            refused.count(zone);
                            free_one_page(zone, pfn, Order::ZERO, mt, cpu, events);
                            rest = after;
                        }
                    }
                    continue;
                }
            };
            // No room: this free may drain. Pay what is owed and take the full commit.
            free_pages_prepare(page);
            self.pay_owed(hold);
            let block = (pfn, page, Order::ZERO);
            self.free_unref_page_commit(zone, &mut hold.pcp, block, mt, pcp_mt, cpu, events);
            hold.room = hold.pcp.order0_free_room(&self.policy.pcp, zone.flags());
            hold.pages += 1;
            rest = after;
        }
        if let Some(hold) = held {
            self.release(hold);
        }
        Ok(())
    }

    /// Commit the pages at the front of `pfns` that go on `hold`'s pageset without a
    /// chance of a drain: in its zone (spanned by it, as in
    /// [`PageAllocator::claim_batch`]), in a pageblock the pagesets take, within its
    /// room and its relock budget. Each only goes on its list; its `PGFREE` and policy
    /// state are owed, paid together by [`PageAllocator::pay_owed`]. Returns how many
    /// pages were committed.
    #[inline(always)]
    fn commit_quiet_run(&self, hold: &mut BatchHold<'_, R>, pfns: &[Pfn]) -> usize {
        let zone = hold.zone;
        let budget = FREE_BATCH_RELOCK - hold.pages;
        let limit = usize::try_from(hold.room).map_or(budget, |room| room.min(budget));
        let pcp: &mut PerCpuPages = &mut hold.pcp;
        // The pageblock of the previous page, its type and its list: one lookup per
        // pageblock, as Linux ≥ 6.10 reads each folio's type once before it locks.
        // `refresh` moves it to `pfn`'s pageblock and returns the list, or `None` for a
        // pageblock the pagesets do not take (isolated): the quiet run stops there.
        let mut block = (u64::MAX, MigrateType::Movable, 0);
        let refresh = |block: &mut (u64, MigrateType, usize), pfn: Pfn| {
            let pageblock = pfn.0 >> PAGEBLOCK_ORDER;
            if pageblock != block.0 {
                let mt = zone.mem_map.pageblock_migratetype(pfn);
                *block = (
                    pageblock,
                    mt,
                    order_to_pindex(pcp_migratetype(mt)?, Order::ZERO),
                );
            }
            Some(block.2)
        };
        let pfns = &pfns[..limit.min(pfns.len())];
        let mem_map = zone.mem_map.window();
        let mut done = 0;
        // One pass per run of pages bound for one list: linked to each other as they come
        // and put on the list when the list changes or the pages end, which leaves the
        // list as pushing each in turn does.
        while let Some(&first) = pfns.get(done) {
            let Some(page) = mem_map.get(first) else {
                break;
            };
            let Some(pindex) = refresh(&mut block, first) else {
                break;
            };
            pcp_prepare_and_mark_page(page, block.1);
            let mut run = HeadRun::new(first, page);
            done += 1;
            let mut stop = false;
            for &pfn in &pfns[done..] {
                let Some(page) = mem_map.get(pfn) else {
                    stop = true;
                    break;
                };
                let Some(list) = refresh(&mut block, pfn) else {
                    stop = true;
                    break;
                };
                if list != pindex {
                    // The next run's first page.
                    break;
                }
                pcp_prepare_and_mark_page(page, block.1);
                run.push(pfn, page);
                done += 1;
            }
            run.finish(&mut pcp.lists[pindex], &zone.mem_map);
            if stop {
                break;
            }
        }
        pcp.count += done as u64;
        hold.room -= done as u64;
        hold.owed += done as u64;
        hold.pages += done;
        done
    }

    /// The claim pass of [`PageAllocator::free_pages_batch`]: every page Allocated →
    /// Freeing, or, at the first refusal, the earlier ones back and the refusal with its
    /// index.
    fn claim_batch<C: Claim>(
        &self,
        caller: Caller,
        pfns: &[Pfn],
    ) -> Result<(), (usize, FreeError)> {
        if pfns.is_empty() {
            return Ok(());
        }
        // Checked once: the CPU going down during the batch is caught by the pageset
        // trylock, as for a single free that loses its CPU after this check.
        if !self.is_cpu_online(caller.cpu) {
            return Err((0, FreeError::InvalidCpu(caller.cpu)));
        }
        // A page's zone is looked up, and the pages after it that the zone spans are
        // claimed in one tight loop that asks only that zone; the first page outside it
        // (zone spans are disjoint, `Topology` refuses overlaps) starts the next round.
        let mut claimed = 0;
        while let Some(&pfn) = pfns.get(claimed) {
            let zone = self.find_zone(pfn).ok_or_else(|| {
                self.refuse_batch(&pfns[..claimed], FreeError::OutsideZones { pfn })
            })?;
            let span = claim_in_span::<C, R>(zone, &pfns[claimed..])
                .map_err(|(index, err)| self.refuse_batch(&pfns[..claimed + index], err))?;
            assert!(span > 0, "{pfn:?} is in the zone find_zone gave");
            claimed += span;
        }
        Ok(())
    }

    /// Refuse a batch whose page after `claimed` failed its claim with `err`: give the
    /// claimed pages back (Freeing → Allocated) and name the refusal with its index. A
    /// page refused as not allocated because the batch claimed it earlier is a
    /// duplicate.
    #[cold]
    #[inline(never)]
    fn refuse_batch(&self, claimed: &[Pfn], err: FreeError) -> (usize, FreeError) {
        for &pfn in claimed {
            let zone = self.find_zone(pfn).expect("a claimed page is in a zone");
            zone.mem_map
                .page(pfn)
                .set_state(PageState::Allocated, Order::ZERO);
        }
        let err = match err {
            FreeError::NotAllocated { pfn } if claimed.contains(&pfn) => {
                FreeError::Duplicate { pfn }
            }
            other => other,
        };
        (claimed.len(), err)
    }

    /// Account the frees a hold owes: `PGFREE` and the policy state of
    /// [`PerCpuPages::on_order0_frees`].
    fn pay_owed(&self, hold: &mut BatchHold<'_, R>) {
        if hold.owed > 0 {
            hold.pcp.count_free(hold.owed);
            let scale_max = self.scale_max.load(Relaxed);
            hold.pcp
                .on_order0_frees(&self.policy.pcp, hold.owed, scale_max);
            hold.owed = 0;
        }
    }

    /// Pay what `hold` owes, then drop its pageset lock (`pcp_spin_unlock`).
    fn release(&self, mut hold: BatchHold<'_, R>) {
        self.pay_owed(&mut hold);
    }
}

/// A pageset lock held by [`PageAllocator::free_pages_batch`] across a run of pages.
struct BatchHold<'a, R: RawMutex> {
    zone: &'a Zone<R>,
    pcp: PcpLocked<'a, R>,
    /// Pages committed under this hold, for the relock every `FREE_BATCH_RELOCK`.
    pages: usize,
    /// Further frees that cannot reach the drain threshold
    /// ([`PerCpuPages::order0_free_room`]).
    room: u64,
    /// Frees on the lists whose `PGFREE` and policy state are not yet accounted.
    owed: u64,
}

impl<'a, R: RawMutex> BatchHold<'a, R> {
    /// A hold of `zone`'s pageset, just locked.
    fn new(policy: &PcpPolicy, zone: &'a Zone<R>, pcp: PcpLocked<'a, R>) -> BatchHold<'a, R> {
        let room = pcp.order0_free_room(policy, zone.flags());
        BatchHold {
            zone,
            pcp,
            pages: 0,
            room,
            owed: 0,
        }
    }
}

/// The list half of `free_unref_page_commit`: mark the prepared block as on a pageset
/// (`free_pages_prepare` cleared its flags and memcg id) and push it on list `pindex`.
/// The caller counts it.
#[inline(always)]
fn pcp_add_block<R: RawMutex>(
    zone: &Zone<R>,
    pcp: &mut PerCpuPages,
    pfn: Pfn,
    page: &Page,
    order: Order,
    mt: MigrateType,
    pindex: usize,
) {
    pcp_mark_block(page, order, mt);
    pcp.lists[pindex].push_head_page(&zone.mem_map, pfn, page);
}

/// The descriptor half of [`pcp_add_block`]: a prepared block of pageblock type `mt`
/// marked as on a pageset.
#[inline(always)]
fn pcp_mark_block(page: &Page, order: Order, mt: MigrateType) {
    page.set_state_of_bare(PageState::Pcp, order);
    page.set_cached_migratetype(mt as u8);
}

/// [`free_pages_prepare`] then [`pcp_mark_block`] of an order-0 page, with one store to
/// its flags word where the two steps take a read-modify-write and a store: the flags
/// and memcg id cleared, state and order set. The batched free's quiet run does both to
/// every page.
#[inline(always)]
fn pcp_prepare_and_mark_page(page: &Page, mt: MigrateType) {
    page.set_state_clearing_flags(PageState::Pcp, Order::ZERO);
    page.set_cached_migratetype(mt as u8);
}

/// The checks of [`PageAllocator::claim_block`] once `pfn`'s zone and descriptor are
/// found.
#[inline(always)]
fn claim_in_zone<'a, C: Claim, R: RawMutex>(
    zone: &'a Zone<R>,
    page: &'a Page,
    pfn: Pfn,
    order: Order,
) -> Result<(&'a Zone<R>, &'a Page), FreeError> {
    if !pfn.is_aligned(order) {
        return Err(FreeError::Misaligned { pfn, order });
    }
    if let Err((state, found)) = C::take(page, order) {
        return Err(diagnose_bad_free(zone, pfn, order, state, found));
    }
    Ok((zone, page))
}

/// Claim, in `zone`, the order-0 pages at the front of `pfns` that `zone` spans; returns
/// how many, or the first refusal with its index. The loop of
/// [`PageAllocator::claim_batch`]: per page one bounds check, one load, one compare and
/// one store.
#[inline(always)]
fn claim_in_span<C: Claim, R: RawMutex>(
    zone: &Zone<R>,
    pfns: &[Pfn],
) -> Result<usize, (usize, FreeError)> {
    let mem_map = zone.mem_map.window();
    for (index, &pfn) in pfns.iter().enumerate() {
        let Some(page) = mem_map.get(pfn) else {
            return Ok(index);
        };
        claim_in_zone::<C, R>(zone, page, pfn, Order::ZERO).map_err(|err| (index, err))?;
    }
    Ok(pfns.len())
}

/// `free_pages_prepare`: a free page carries no flags and no memcg.
#[inline]
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

/// `__free_pages_ok`: straight to the buddy lists, counted in `PGFREE`; the hold is
/// reported to `events` as `cpu`'s.
fn free_pages_ok<E: LockEvents, R: RawMutex>(
    zone: &Zone<R>,
    pfn: Pfn,
    order: Order,
    cpu: CpuId,
    events: &mut E,
) {
    let mut locked = zone.lock();
    let mt = zone.mem_map.pageblock_migratetype(pfn);
    let merges = locked.free_one_page(pfn, order, mt, ListEnd::Head);
    locked.report(events, cpu, HoldKind::BuddyFree, 1, order.pages(), merges);
    drop(locked);
    zone.events.pgfree.fetch_add(order.pages(), Relaxed);
}

/// `free_one_page`: straight to the buddy lists; v6.7 does not count these in `PGFREE`.
/// The hold is reported to `events` as `cpu`'s.
fn free_one_page<E: LockEvents, R: RawMutex>(
    zone: &Zone<R>,
    pfn: Pfn,
    order: Order,
    mt: MigrateType,
    cpu: CpuId,
    events: &mut E,
) {
    let mut locked = zone.lock();
    let merges = locked.free_one_page(pfn, order, mt, ListEnd::Head);
    locked.report(events, cpu, HoldKind::BuddyFree, 1, order.pages(), merges);
}

/// The check that clears `BELOW_HIGH`: order 0 at the high watermark, classzone Movable,
/// no alloc flags.
fn above_high_watermark<R: RawMutex>(zone: &Zone<R>) -> bool {
    let input = zone.watermark_input(ZoneType::Movable, &[]);
    watermark::watermark_ok(
        Order::ZERO,
        zone.wmark(WatermarkKind::High),
        super::gfp::AllocFlags::empty(),
        &input,
    )
}

impl<R: RawMutex> ZoneLocked<'_, R> {
    /// `free_pcppages_bulk`: return up to `pages` pages from `cpu`'s pageset to the buddy
    /// lists, visiting the lists round-robin from `start` and taking the oldest (tail)
    /// blocks of each until it is empty or enough pages went back. A high-order block can
    /// overshoot the request. Returns the pages freed; the drain is reported to `events`
    /// (nothing is, if the pageset had nothing to give).
    pub(crate) fn free_pcppages_bulk<E: LockEvents>(
        &mut self,
        pcp: &mut PerCpuPages,
        pages: u64,
        start: usize,
        reason: DrainReason,
        cpu: CpuId,
        events: &mut E,
    ) -> u64 {
        let zone = self.zone();
        let mut left = pages.min(pcp.count) as i64;
        if left <= 0 {
            return 0;
        }
        let mut pindex = (start + NR_PCP_LISTS - 1) % NR_PCP_LISTS;
        // `NR_FREE_PAGES` and the merge count are added once for the whole drain: the zone
        // lock is held throughout, so they end as the per-block updates would leave them.
        let (mut freed, mut free_pages, mut merges, mut drained) = (0, 0, 0, 0);
        while left > 0 {
            loop {
                pindex = (pindex + 1) % NR_PCP_LISTS;
                if !pcp.lists[pindex].is_empty() {
                    break;
                }
            }
            let order = pindex_to_order(pindex);
            // Blocks until `left` is reached (the last one may overshoot) or the list is
            // empty; the page counts follow from the blocks taken.
            let wanted = (left as u64).div_ceil(order.pages());
            let (mut blocks, mut isolated) = (0, 0);
            let mut ahead =
                BuddyReadAhead::start(&pcp.lists[pindex], &zone.mem_map, order, wanted, events);
            while blocks < wanted {
                let Some((pfn, page)) = pcp.lists[pindex].pop_tail(&zone.mem_map) else {
                    break;
                };
                ahead.step(&zone.mem_map, events);
                let mt = MigrateType::from_index(page.cached_migratetype() as usize)
                    .expect("a PCP page caches a valid migratetype");
                isolated += u64::from(mt == MigrateType::Isolate);
                merges += self.merge_free_block(pfn, page, order, mt, ListEnd::Head);
                blocks += 1;
            }
            let pages = blocks << order.get();
            pcp.count -= pages;
            free_pages += (blocks - isolated) << order.get();
            freed += pages;
            drained += blocks;
            left -= pages as i64;
        }
        self.mod_free_pages(free_pages as i64);
        if merges != 0 {
            Self::count_locked(&zone.events.buddy_merges, merges);
        }
        pcp.zone_touched = true;
        Self::count_locked(&zone.events.pcp_drains[reason as usize], 1);
        Self::count_locked(&zone.events.pcp_drain_pages[reason as usize], freed);
        let kind = HoldKind::Drain(reason);
        self.report(events, cpu, kind, drained, freed, merges);
        freed
    }
}

/// How many blocks ahead of the one it merges a drain asks for buddies' descriptors.
/// Eight misses in flight at once is about what a core's line fill buffers allow.
const READ_AHEAD_BLOCKS: u64 = 8;

/// A drain's walk ahead of its pops, for a [`LockEvents`] sink that
/// [reads ahead](LockEvents::read_ahead): each block's buddy descriptor, which
/// `merge_free_block` reads first and which is often cold, is named
/// [`READ_AHEAD_BLOCKS`] blocks before the block is merged. (For order 0 the buddy
/// shares the block's own cache line, four descriptors to a line, so the hint also brings
/// in what the pop will read.) The walk goes from the tail through `prev` links, which
/// the pops do not change, for no more blocks than the list holds (the head's `prev` is
/// stale: `PfnList`); its loads still come one after another, but ahead of the
/// merges, whose work overlaps them. A sink that does not read ahead gets no walk at
/// all.
struct BuddyReadAhead {
    next: Option<Pfn>,
    left: u64,
    order: Order,
}

impl BuddyReadAhead {
    /// Look ahead at up to `wanted` blocks of `list`, from its tail, and name the first
    /// [`READ_AHEAD_BLOCKS`] buddies.
    #[inline(always)]
    fn start<E: LockEvents>(
        list: &PfnList,
        mem_map: &MemMap,
        order: Order,
        wanted: u64,
        events: &mut E,
    ) -> BuddyReadAhead {
        let mut ahead = BuddyReadAhead {
            next: list.last(),
            left: if E::READS_AHEAD {
                wanted.min(list.len())
            } else {
                0
            },
            order,
        };
        for _ in 0..READ_AHEAD_BLOCKS {
            ahead.step(mem_map, events);
        }
        ahead
    }

    /// Name the next block's buddy, if the walk has one left.
    #[inline(always)]
    fn step<E: LockEvents>(&mut self, mem_map: &MemMap, events: &mut E) {
        if !E::READS_AHEAD || self.left == 0 {
            return;
        }
        let Some(pfn) = self.next else {
            return;
        };
        self.left -= 1;
        let prev = mem_map.page(pfn).prev();
        self.next = (prev != NO_PFN).then_some(Pfn(prev as u64));
        if let Some(buddy) = mem_map.get(pfn.buddy(self.order)) {
            events.read_ahead(buddy);
        }
    }
}

/// Name the mistake of a refused free, looking at the block that holds `pfn`.
fn diagnose_bad_free<R: RawMutex>(
    zone: &Zone<R>,
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

impl<R: RawMutex> PageAllocator<R> {
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

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    /// Names the descriptors a read-ahead asks for.
    #[derive(Default)]
    struct Named(Vec<*const Page>);

    impl LockEvents for Named {
        const READS_AHEAD: bool = true;

        fn read_ahead(&mut self, page: &Page) {
            self.0.push(page);
        }
    }

    /// A drain's read-ahead asked for more blocks than its list holds (a drain that goes
    /// on to the next list) names the buddies of the list's blocks and nothing more, even
    /// when the head's `prev` is stale (a pop from the head does not clear its successor's):
    /// the walk stops at the list's length, not at a `NO_PFN` back link.
    #[test]
    fn a_read_ahead_stops_at_the_head_whatever_its_back_link() {
        let mem_map = crate::page_alloc::mem_map::all_managed(0, 32);
        let mut list = PfnList::EMPTY;
        for pfn in (0..32).step_by(2).map(Pfn) {
            list.push_tail(&mem_map, pfn);
        }
        // The head, pfn 0, goes: pfn 2 heads the list with its back link still 0.
        assert_eq!(list.pop_head(&mem_map).map(|(pfn, _)| pfn), Some(Pfn(0)));
        assert_eq!(mem_map.page(Pfn(2)).prev(), 0);
        let mut named = Named::default();
        let wanted = list.len() + 5;
        let mut ahead = BuddyReadAhead::start(&list, &mem_map, Order::ZERO, wanted, &mut named);
        for _ in 0..wanted {
            ahead.step(&mem_map, &mut named);
        }
        // From the tail, pfn 30, to the head, pfn 2: buddies 31, 29, …, 3.
        let expected: Vec<*const Page> = (1..16u64)
            .rev()
            .map(|i| core::ptr::from_ref(mem_map.page(Pfn((2 * i) ^ 1))))
            .collect();
        assert_eq!(named.0, expected);
    }
}
