//! Allocation: the zonelist walk, watermark checks, the PCP and buddy paths, and the
//! reduced slow path.
//!
//! Linux counterpart (v6.7, `mm/page_alloc.c`): `__alloc_pages`, `prepare_alloc_pages`,
//! `alloc_flags_nofragment`, `get_page_from_freelist`, `rmqueue`, `rmqueue_pcplist`,
//! `__rmqueue_pcplist`, `rmqueue_bulk`, `rmqueue_buddy`, `__alloc_pages_slowpath`
//! (reduced: no direct reclaim, compaction or OOM killer yet; it releases the high-atomic
//! reserve and then reports [`AllocError::OutOfMemory`]), `wakeup_kswapd`.
//!
//! In workqueue drain mode (4.11–5.19) the slow path's `drain_all_pages(NULL)` queues
//! work on every CPU with pages and the task sleeps in `flush_work` until each has run
//! it. The core has no threads to sleep on, so
//! [`PageAllocator::alloc_pages_may_wait_report`] returns the queued work
//! ([`AllocAttempt::DrainQueued`]) and the caller resumes the request with
//! [`PageAllocator::alloc_pages_after_drain_report`] once the targets ran it; the
//! plain entry points, whose callers cannot wait, run each target's work at once.
//! [`PageAllocator::alloc_pages_peek_next`] has no counterpart: an allocation that also
//! names the block now at the head of its pageset list, for a caller (the simulator) that
//! prefetches the next block.

use core::sync::atomic::Ordering::Relaxed;

use super::allocator::PageAllocator;
use super::buddy::ZoneLocked;
use super::drain::{DrainAll, DrainCaller, DrainWork};
use super::error::AllocError;
use super::events::{HoldKind, LockEvents};
use super::gfp::{AllocFlags, Gfp, GFP_NOT_FAST};
use super::pcp::{order_to_pindex, pcp_allowed_order, PerCpuPages};
use super::types::{Caller, CpuId, MigrateType, NodeId, ZoneType};
use super::watermark::{self, WatermarkKind, PAGEBLOCK_PAGES};
use super::zone::{Zone, ZoneFlags};
use crate::page::{Order, Page, PageState, Pfn};
use crate::sync::RawMutex;

/// What [`PageAllocator::alloc_pages_may_wait_report`] got: a block, or drain work the
/// request waits for.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a queued drain holds the drain mutex until the allocation is resumed"]
pub enum AllocAttempt {
    /// The block's first pfn, allocated.
    Allocated(Pfn),
    /// Workqueue mode: direct reclaim's `drain_all_pages(NULL)` queued drain work on the
    /// CPUs [`PageAllocator::drain_work_cpus`] names, and the task sleeps until each has
    /// run it (`flush_work`); then [`PageAllocator::alloc_pages_after_drain_report`]
    /// retries. The drain mutex stays held until then.
    DrainQueued(DrainWork),
}

/// A request after `prepare_alloc_pages`.
pub(crate) struct AllocContext<'a> {
    pub(crate) caller: Caller,
    pub(crate) gfp: Gfp,
    pub(crate) order: Order,
    pub(crate) migratetype: MigrateType,
    pub(crate) highest_zoneidx: ZoneType,
    pub(crate) zonelist: &'a [usize],
    pub(crate) preferred: usize,
    /// Who the slow path's `drain_all_pages` runs as: a workqueue worker's returns at once
    /// in workqueue mode (`PF_WQ_WORKER`).
    pub(crate) drain_caller: DrainCaller,
}

impl AllocContext<'_> {
    /// A copy (the context is small and read-only).
    pub(crate) fn clone_shallow(&self) -> Self {
        AllocContext { ..*self }
    }
}

impl<R: RawMutex> PageAllocator<R> {
    /// Allocate a block of 2^`order` pages for `caller`, preferring the caller's node
    /// (`alloc_pages`). The block's first page is marked allocated with a reference
    /// count of 1.
    #[inline(always)]
    pub fn alloc_pages(&self, caller: Caller, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        self.alloc_pages_report(caller, gfp, order, &mut ())
    }

    /// [`PageAllocator::alloc_pages`], telling `events` what the call did: each zone-lock
    /// hold (a refill, a direct buddy allocation, the slow path's drains and high-atomic
    /// moves) and the PCP hit, if the block came off the pageset without one
    /// ([`LockEvents`]).
    #[inline(always)]
    pub fn alloc_pages_report(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        events: &mut impl LockEvents,
    ) -> Result<Pfn, AllocError> {
        let node = self
            .online_cpu_node(caller.cpu)
            .ok_or(AllocError::InvalidCpu(caller.cpu))?;
        self.alloc_pages_online::<false, _>(caller, gfp, order, node, events)
            .map(|(pfn, _)| pfn)
    }

    /// [`PageAllocator::alloc_pages`], and, when the block came off a non-empty list of the
    /// caller's pageset (an order-0 pageset hit in the preferred zone), the block now at
    /// that list's head: the one the caller's next allocation of this order and `gfp`
    /// takes if nothing changes the list first. `None` otherwise (a refill, a fallback, a
    /// higher order).
    ///
    /// A hint for a caller that prefetches (the simulator reads ahead the descriptor and
    /// its own state of the block the CPU's next fault takes); Linux has no such call. The
    /// allocation is exactly [`PageAllocator::alloc_pages`]'s: the head is read under the
    /// same pageset lock hold, after the pop that wrote it, so the hint costs no second
    /// lock (a separate peek's try-lock waited for the allocation's stores to drain).
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn alloc_pages_peek_next(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
    ) -> Result<(Pfn, Option<Pfn>), AllocError> {
        self.alloc_pages_peek_next_report(caller, gfp, order, &mut ())
    }

    /// [`PageAllocator::alloc_pages_peek_next`], telling `events` what the call did, as
    /// [`PageAllocator::alloc_pages_report`] does.
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn alloc_pages_peek_next_report(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        events: &mut impl LockEvents,
    ) -> Result<(Pfn, Option<Pfn>), AllocError> {
        let node = self
            .online_cpu_node(caller.cpu)
            .ok_or(AllocError::InvalidCpu(caller.cpu))?;
        self.alloc_pages_online::<true, _>(caller, gfp, order, node, events)
    }

    /// Allocate for `caller`, preferring `node` (`__alloc_pages` with a preferred nid).
    #[inline(always)]
    pub fn alloc_pages_node(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
    ) -> Result<Pfn, AllocError> {
        self.alloc_pages_node_in(caller, gfp, order, node, &mut ())
    }

    /// [`PageAllocator::alloc_pages_node`], telling `events` what the call did.
    #[inline(always)]
    pub(super) fn alloc_pages_node_in<E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
        events: &mut E,
    ) -> Result<Pfn, AllocError> {
        if !self.is_cpu_online(caller.cpu) {
            return Err(AllocError::InvalidCpu(caller.cpu));
        }
        self.alloc_pages_online::<false, _>(caller, gfp, order, node, events)
            .map(|(pfn, _)| pfn)
    }

    /// `__alloc_pages` for a caller whose CPU was found online. Order 0, the pageset fast
    /// path's order and nearly every request, tries the fast path with the order as a
    /// constant; the other orders, and order-0 requests the fast path cannot serve, go to
    /// the out-of-line general path. With the block, if `PEEK`, the pageset list's new head
    /// after a fast-path hit ([`PageAllocator::alloc_pages_peek_next`]); a constant `None`
    /// otherwise, so that `alloc_pages` does not read it.
    #[inline(always)]
    fn alloc_pages_online<const PEEK: bool, E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
        events: &mut E,
    ) -> Result<(Pfn, Option<Pfn>), AllocError> {
        if order == Order::ZERO {
            if let Some(hit) = self.alloc_pcp_fast::<PEEK, E>(caller, gfp, node, events) {
                return Ok(hit);
            }
        }
        self.alloc_pages_general(caller, gfp, order, node, events)
            .map(|pfn| (pfn, None))
    }

    /// Everything but the fast path: `prepare_alloc_pages`, the first zonelist pass, then
    /// the slow path. Out of line, so that a caller inlining `alloc_pages` does not set up
    /// a frame for it on every allocation the fast path serves. The fast path reads its
    /// part of the request's context from a table fixed at boot
    /// ([`Zonelist::pcp_fast`](super::allocator::Zonelist)); this builds the whole context
    /// from the arguments, refusing what that table had no entry for.
    #[inline(never)]
    fn alloc_pages_general<E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
        events: &mut E,
    ) -> Result<Pfn, AllocError> {
        match self.alloc_pages_may_wait_in(caller, DrainCaller::Task, gfp, order, node, events)? {
            AllocAttempt::Allocated(pfn) => Ok(pfn),
            AllocAttempt::DrainQueued(work) => {
                self.run_queued_drain_at_once(&work, events);
                match self.alloc_pages_after_drain_in(caller, gfp, order, node, work, events)? {
                    AllocAttempt::Allocated(pfn) => Ok(pfn),
                    AllocAttempt::DrainQueued(_) => {
                        unreachable!("every target CPU ran its drain work")
                    }
                }
            }
        }
    }

    /// [`PageAllocator::alloc_pages_report`] for a caller that can wait for other CPUs:
    /// in workqueue mode ([`DrainMode::Workqueue`](crate::policy::DrainMode::Workqueue), 4.11–5.19), when the slow path's
    /// `drain_all_pages(NULL)` queued drain work on other CPUs, the call returns
    /// [`AllocAttempt::DrainQueued`] instead of waiting (`flush_work`), which the core,
    /// having no threads, cannot do. The caller lets each CPU of
    /// [`PageAllocator::drain_work_cpus`] run [`PageAllocator::run_drain_work`] (its own
    /// CPU's too: its kworker runs while the task sleeps), then finishes the allocation
    /// with [`PageAllocator::alloc_pages_after_drain_report`]. In direct mode this is
    /// `alloc_pages_report`: the result is always [`AllocAttempt::Allocated`] or an error.
    pub fn alloc_pages_may_wait_report(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        events: &mut impl LockEvents,
    ) -> Result<AllocAttempt, AllocError> {
        self.alloc_pages_may_wait_from_report(caller, DrainCaller::Task, gfp, order, events)
    }

    /// [`PageAllocator::alloc_pages_may_wait_report`] for a task that may be a workqueue
    /// worker (`drain_caller`): in workqueue mode a worker's slow path does not queue drain
    /// work nor wait for it — `drain_all_pages` returns at once ("workqueues cannot
    /// recurse") and the request retries with nothing drained, as Linux's does.
    pub fn alloc_pages_may_wait_from_report(
        &self,
        caller: Caller,
        drain_caller: DrainCaller,
        gfp: Gfp,
        order: Order,
        events: &mut impl LockEvents,
    ) -> Result<AllocAttempt, AllocError> {
        let node = self
            .online_cpu_node(caller.cpu)
            .ok_or(AllocError::InvalidCpu(caller.cpu))?;
        if order == Order::ZERO {
            if let Some((pfn, _)) = self.alloc_pcp_fast::<false, _>(caller, gfp, node, events) {
                return Ok(AllocAttempt::Allocated(pfn));
            }
        }
        self.alloc_pages_may_wait_in(caller, drain_caller, gfp, order, node, events)
    }

    /// The rest of an allocation that [`PageAllocator::alloc_pages_may_wait_report`] left
    /// waiting for `work`: `__alloc_pages_direct_reclaim`'s retry after `drain_all_pages`
    /// returned, then the rest of the slow path. If a CPU of `work` has not run it yet,
    /// nothing is done and `work` comes back as [`AllocAttempt::DrainQueued`]: the task
    /// still sleeps in `flush_work`. Otherwise the drain mutex is released first, as
    /// `__drain_all_pages` does after its last `flush_work`, and `work` is spent.
    pub fn alloc_pages_after_drain_report(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        work: DrainWork,
        events: &mut impl LockEvents,
    ) -> Result<AllocAttempt, AllocError> {
        let node = self
            .online_cpu_node(caller.cpu)
            .ok_or(AllocError::InvalidCpu(caller.cpu))?;
        self.alloc_pages_after_drain_in(caller, gfp, order, node, work, events)
    }

    fn alloc_pages_after_drain_in<E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
        work: DrainWork,
        events: &mut E,
    ) -> Result<AllocAttempt, AllocError> {
        if !self.drain_work_finished(&work) {
            return Ok(AllocAttempt::DrainQueued(work));
        }
        let ac = self.alloc_context(caller, gfp, order, node)?;
        self.slowpath_after_drain(&ac, self.slowpath_flags(&ac), events)
            .map(AllocAttempt::Allocated)
    }

    /// Workqueue mode, for a caller that cannot wait: each target CPU runs its drain work
    /// at once, in CPU order, as if its kworker ran the moment the work was queued.
    fn run_queued_drain_at_once<E: LockEvents>(&self, work: &DrainWork, events: &mut E) {
        for cpu in self.drain_work_cpus(work) {
            self.run_drain_work_report(cpu, events);
        }
    }

    /// `prepare_alloc_pages`, the first zonelist pass, then the slow path, which may
    /// leave the request waiting for queued drain work.
    fn alloc_pages_may_wait_in<E: LockEvents>(
        &self,
        caller: Caller,
        drain_caller: DrainCaller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
        events: &mut E,
    ) -> Result<AllocAttempt, AllocError> {
        gfp.refused()?;
        let ac = AllocContext {
            drain_caller,
            ..self.alloc_context(caller, gfp, order, node)?
        };
        let flags =
            AllocFlags::empty().with_wmark(WatermarkKind::Low) | self.alloc_flags_nofragment(&ac);
        if let Some(pfn) = self.get_page_from_freelist(&ac, flags, events) {
            return Ok(AllocAttempt::Allocated(pfn));
        }
        self.alloc_pages_slowpath(&ac, events)
    }

    /// `prepare_alloc_pages`: refuse an offline CPU, then build the request's context.
    #[inline(always)]
    pub(crate) fn prepare_alloc_pages(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
    ) -> Result<AllocContext<'_>, AllocError> {
        if !self.is_cpu_online(caller.cpu) {
            return Err(AllocError::InvalidCpu(caller.cpu));
        }
        self.alloc_context(caller, gfp, order, node)
    }

    /// The rest of `prepare_alloc_pages`: zonelist, zone and migratetype from the GFP
    /// flags, preferred zone. Reads only what boot fixed.
    #[inline(always)]
    fn alloc_context(
        &self,
        caller: Caller,
        gfp: Gfp,
        order: Order,
        node: NodeId,
    ) -> Result<AllocContext<'_>, AllocError> {
        let zonelist = self
            .zonelists
            .get(node as usize)
            .ok_or(AllocError::InvalidNode(node))?;
        let (highest_zoneidx, mut migratetype) = gfp.zone_and_migratetype()?;
        if !self.group_by_mobility.load(Relaxed) {
            migratetype = MigrateType::Unmovable;
        }
        let preferred =
            if gfp.contains(Gfp::THISNODE) {
                zonelist.zones.iter().copied().find(|&i| {
                    self.zones[i].zone_type <= highest_zoneidx && self.zones[i].node == node
                })
            } else {
                zonelist.first[highest_zoneidx.index()]
            }
            .ok_or(AllocError::NoZone)?;
        Ok(AllocContext {
            caller,
            gfp,
            order,
            migratetype,
            highest_zoneidx,
            zonelist: &zonelist.zones,
            preferred,
            drain_caller: DrainCaller::Task,
        })
    }

    /// The common case of the first `get_page_from_freelist` pass, for order 0: the
    /// preferred zone passes its watermark check and the caller's pageset list has a page.
    /// Everything that pass would decide is decided here before anything changes, so a
    /// request this cannot serve (a zone below its mark, a busy pageset, an empty list, an
    /// interrupt that bypasses the pagesets, flags without a fast-path entry,
    /// `__GFP_THISNODE`, whose preferred zone is searched for, or flags the general path
    /// refuses: [`GFP_NOT_FAST`]) goes to the general path
    /// exactly as if this had not run. What it does on success is what that pass does:
    /// `zone_allows` for the first zone, then `rmqueue` → `rmqueue_pcplist`; it only skips
    /// building the context (the preferred zone, highest zone and migratetype come from
    /// the node's [`PcpFastTarget`](super::allocator::PcpFastTarget) table), the zonelist walk, the allocation-flag
    /// computation (which matters only to a refill or a fallback) and the refill test.
    #[inline(always)]
    ///
    /// Returns the block and, if `PEEK`, the list's new head, read under the lock: the
    /// caller's next hit, for [`PageAllocator::alloc_pages_peek_next`]. A success is a PCP
    /// hit, reported to `events`.
    pub(super) fn alloc_pcp_fast<const PEEK: bool, E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        node: NodeId,
        events: &mut E,
    ) -> Option<(Pfn, Option<Pfn>)> {
        let target = self.zonelists.get(node as usize)?.pcp_fast[gfp.decode_index()]?;
        if gfp.intersects(GFP_NOT_FAST) || (self.policy.irq_bypass && caller.in_interrupt()) {
            return None;
        }
        debug_assert!(self
            .alloc_context(caller, gfp, Order::ZERO, node)
            .is_ok_and(|ac| {
                (ac.preferred, ac.highest_zoneidx, ac.migratetype)
                    == (
                        target.preferred as usize,
                        target.highest_zoneidx,
                        target.migratetype,
                    )
            }));
        let zone = &self.zones[target.preferred as usize];
        // `zone_allows` refuses an unmanaged zone, but zonelists hold managed zones only.
        debug_assert!(zone.is_managed());
        // `zone_allows` with the first pass's flags (no reserve rights): patch 8 checks a
        // zone not flagged BELOW_HIGH against its high mark and flags it if that fails, a
        // side effect left to the general path; otherwise the low mark.
        let zone_flags = zone.flags();
        let kind = if self.policy.pcp.below_high && !zone_flags.contains(ZoneFlags::BELOW_HIGH) {
            WatermarkKind::High
        } else {
            WatermarkKind::Low
        };
        let input = zone.watermark_input(target.highest_zoneidx, &[]);
        if !watermark::order0_above(zone.wmark(kind), AllocFlags::empty(), &input) {
            return None;
        }
        let pindex = order_to_pindex(target.migratetype, Order::ZERO);
        let mut pcp = zone.pcp_trylock(caller.cpu).ok()?;
        // An empty list (a refill) is the general path's: nothing has changed yet. A list
        // known not to be empty needs none of `rmqueue_pcplist_locked`'s refill test.
        let (pfn, page) = pcp.lists[pindex].pop_head(&zone.mem_map)?;
        pcp.on_alloc(&self.policy.pcp);
        pcp_block_allocated(&mut pcp, page, Order::ZERO);
        let next = if PEEK {
            pcp.lists[pindex].first()
        } else {
            None
        };
        pcp.count_alloc(1);
        drop(pcp);
        events.pcp_hit(zone.index, caller.cpu, 1);
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            self.wake_if_boosted(zone);
        }
        Some((pfn, next))
    }

    /// `alloc_flags_nofragment`: a request whose preferred zone is Normal avoids splitting
    /// pageblocks of other types on its first pass, since DMA32 can absorb it (on a
    /// multi-node machine only when this node has a populated DMA32).
    pub(crate) fn alloc_flags_nofragment(&self, ac: &AllocContext<'_>) -> AllocFlags {
        let mut flags = AllocFlags::empty();
        if ac.gfp.contains(Gfp::KSWAPD_RECLAIM) {
            flags |= AllocFlags::KSWAPD;
        }
        let preferred = &self.zones[ac.preferred];
        if preferred.zone_type != ZoneType::Normal {
            return flags;
        }
        if self.topology.nr_nodes() > 1 {
            let dma32 = self.zone(preferred.node, ZoneType::Dma32);
            if !dma32.is_some_and(|z| z.present > 0) {
                return flags;
            }
        }
        flags | AllocFlags::NOFRAGMENT
    }

    pub(crate) fn eligible_zones<'a>(
        &'a self,
        ac: &'a AllocContext<'_>,
    ) -> impl Iterator<Item = (usize, &'a Zone<R>)> + 'a {
        let this_node = self.zones[ac.preferred].node;
        ac.zonelist
            .iter()
            .map(|&i| (i, &self.zones[i]))
            .filter(move |(_, zone)| {
                zone.zone_type <= ac.highest_zoneidx
                    && (!ac.gfp.contains(Gfp::THISNODE) || zone.node == this_node)
            })
    }

    /// `get_page_from_freelist` (v6.7): walk the zonelist; a zone above its high watermark
    /// is used at once, one below it gets `BELOW_HIGH` (which makes the PCP shrink) and is
    /// then checked against the caller's watermark.
    pub(crate) fn get_page_from_freelist<E: LockEvents>(
        &self,
        ac: &AllocContext<'_>,
        flags: AllocFlags,
        events: &mut E,
    ) -> Option<Pfn> {
        let mut flags = flags;
        'retry: loop {
            let no_fallback = flags.contains(AllocFlags::NOFRAGMENT);
            for (index, zone) in self.eligible_zones(ac) {
                if no_fallback
                    && self.topology.nr_nodes() > 1
                    && index != ac.preferred
                    && zone.node != self.zones[ac.preferred].node
                {
                    // Fragmenting the local node beats using a remote one.
                    flags -= AllocFlags::NOFRAGMENT;
                    continue 'retry;
                }
                if !self.zone_allows(zone, ac, flags) {
                    continue;
                }
                if let Some(pfn) = self.rmqueue(zone, ac, flags, events) {
                    if flags.contains(AllocFlags::HIGHATOMIC) {
                        let mut locked = zone.lock();
                        let (blocks, pages) = locked.reserve_highatomic_pageblock(pfn);
                        let kind = HoldKind::HighAtomic;
                        locked.report(events, ac.caller.cpu, kind, blocks, pages, 0);
                    }
                    return Some(pfn);
                }
            }
            if no_fallback {
                flags -= AllocFlags::NOFRAGMENT;
                continue 'retry;
            }
            return None;
        }
    }

    /// The watermark part of `get_page_from_freelist` for one zone.
    fn zone_allows(&self, zone: &Zone<R>, ac: &AllocContext<'_>, flags: AllocFlags) -> bool {
        if !zone.is_managed() {
            return false;
        }
        // Patch 8: a zone above its high watermark is used at once; one below it is
        // flagged so that frees shrink the pagesets.
        if self.policy.pcp.below_high && !zone.flags().contains(ZoneFlags::BELOW_HIGH) {
            if self.zone_watermark_fast(zone, ac, zone.wmark(WatermarkKind::High), flags) {
                return true;
            }
            zone.set_flag(ZoneFlags::BELOW_HIGH);
        }
        let mark = zone.wmark(flags.wmark());
        self.zone_watermark_fast(zone, ac, mark, flags) || flags.contains(AllocFlags::NO_WATERMARKS)
    }

    #[inline(always)]
    pub(crate) fn zone_watermark_fast(
        &self,
        zone: &Zone<R>,
        ac: &AllocContext<'_>,
        mark: u64,
        flags: AllocFlags,
    ) -> bool {
        let summary;
        let blocks: &[(bool, bool)] = if ac.order == Order::ZERO {
            &[]
        } else {
            summary = zone.free_block_summary(ac.order);
            &summary
        };
        let input = zone.watermark_input(ac.highest_zoneidx, blocks);
        watermark::watermark_fast(ac.order, mark, flags, zone.watermarks(), &input)
    }

    /// `rmqueue`: the pageset for orders it caches, else (or when the pageset cannot
    /// serve) the buddy lists; then wake kswapd if a fallback boosted the watermarks.
    fn rmqueue<E: LockEvents>(
        &self,
        zone: &Zone<R>,
        ac: &AllocContext<'_>,
        flags: AllocFlags,
        events: &mut E,
    ) -> Option<Pfn> {
        let bypass = self.policy.irq_bypass && ac.caller.in_interrupt();
        if bypass && pcp_allowed_order(ac.order) {
            zone.events.pcp_irq_bypass.fetch_add(1, Relaxed);
        }
        let pfn = if pcp_allowed_order(ac.order) && !bypass {
            match self.rmqueue_pcplist(zone, ac, flags, events) {
                Some(pfn) => Some(pfn),
                None => self.rmqueue_buddy(zone, ac, flags, events),
            }
        } else {
            self.rmqueue_buddy(zone, ac, flags, events)
        }?;
        if flags.contains(AllocFlags::KSWAPD) {
            self.wake_if_boosted(zone);
        }
        Some(pfn)
    }

    /// The end of `rmqueue`: a fallback that boosted the watermarks wakes kswapd once.
    /// Test before clearing, as Linux does: an atomic read-modify-write on every
    /// allocation would cost more than the rest of the fast path.
    #[inline(always)]
    fn wake_if_boosted(&self, zone: &Zone<R>) {
        if zone.flags().contains(ZoneFlags::BOOSTED_WATERMARK)
            && zone.clear_flag(ZoneFlags::BOOSTED_WATERMARK)
        {
            self.wakeup_kswapd(zone.node, Order::ZERO, zone.zone_type);
        }
    }

    /// `rmqueue_pcplist`: take a block from the caller's pageset, refilling the list from
    /// the zone when it is empty. A pageset that is busy (try-lock failed: a remote drain,
    /// or re-entry from an interrupt) or whose CPU just went offline sends the request to
    /// the zone instead.
    fn rmqueue_pcplist<E: LockEvents>(
        &self,
        zone: &Zone<R>,
        ac: &AllocContext<'_>,
        flags: AllocFlags,
        events: &mut E,
    ) -> Option<Pfn> {
        let cpu = ac.caller.cpu;
        let mut pcp = match zone.pcp_trylock(cpu) {
            Ok(pcp) => pcp,
            Err(refused) => {
                refused.count(zone);
                return None;
            }
        };
        pcp.on_alloc(&self.policy.pcp);
        let (order, mt) = (ac.order, ac.migratetype);
        let pfn = self.rmqueue_pcplist_locked(zone, &mut pcp, order, mt, flags, cpu, events)?;
        pcp.count_alloc(ac.order.pages());
        drop(pcp);
        Some(pfn)
    }

    /// `__rmqueue_pcplist`: the list for (migratetype, order), refilled by
    /// `nr_pcp_alloc` blocks when empty; the head block is taken. `cpu` owns `pcp`; the
    /// refill, or else the PCP hit, is reported to `events`. Shared with the bulk
    /// allocator, which does not touch the free-side detector.
    #[expect(
        clippy::too_many_arguments,
        reason = "Linux's arguments plus the pageset's CPU and the report sink"
    )]
    #[inline(always)]
    pub(crate) fn rmqueue_pcplist_locked<E: LockEvents>(
        &self,
        zone: &Zone<R>,
        pcp: &mut PerCpuPages,
        order: Order,
        mt: MigrateType,
        flags: AllocFlags,
        cpu: CpuId,
        events: &mut E,
    ) -> Option<Pfn> {
        let pindex = order_to_pindex(mt, order);
        let hit = !pcp.lists[pindex].is_empty();
        if !hit {
            let scale_max = self.scale_max.load(Relaxed);
            let blocks = pcp.nr_pcp_alloc(&self.policy.pcp, zone.flags(), order, scale_max);
            // LOCK ORDER: pcp lock → zone lock.
            let mut locked = zone.lock();
            let got = locked.rmqueue_bulk(order, blocks, mt, flags, pcp, pindex);
            if E::READS_AHEAD {
                let list = locked.area().list(order, mt);
                if let Some(first) = list.first() {
                    events.refill_left(zone.index, order, first, list.len());
                }
            }
            let pages = got << order.get();
            locked.report(events, cpu, HoldKind::Refill, got, pages, 0);
        }
        let (pfn, page) = pcp.lists[pindex].pop_head(&zone.mem_map)?;
        pcp_block_allocated(pcp, page, order);
        if hit {
            events.pcp_hit(zone.index, cpu, 1);
        }
        Some(pfn)
    }

    /// `rmqueue_buddy`: take a block under the zone lock, using the high-atomic reserve
    /// first for high-order atomic requests and last for any request that cannot block.
    fn rmqueue_buddy<E: LockEvents>(
        &self,
        zone: &Zone<R>,
        ac: &AllocContext<'_>,
        flags: AllocFlags,
        events: &mut E,
    ) -> Option<Pfn> {
        let order = ac.order;
        let mut locked = zone.lock();
        let mut pfn = None;
        if flags.contains(AllocFlags::HIGHATOMIC) {
            pfn = locked.rmqueue_smallest(order, MigrateType::HighAtomic);
        }
        if pfn.is_none() {
            pfn = locked.rmqueue(order, ac.migratetype, flags);
            if pfn.is_none() && flags.intersects(AllocFlags::OOM | AllocFlags::NON_BLOCK) {
                pfn = locked.rmqueue_smallest(order, MigrateType::HighAtomic);
            }
        }
        let (cpu, kind) = (ac.caller.cpu, HoldKind::BuddyAlloc);
        let Some(pfn) = pfn else {
            locked.report(events, cpu, kind, 0, 0, 0);
            return None;
        };
        let page = zone.mem_map.page(pfn);
        if page.cached_migratetype() != MigrateType::Isolate as u8 {
            locked.mod_free_pages(-(order.pages() as i64));
        }
        page.set_state(PageState::Allocated, order);
        page.init_refcount(1);
        locked.report(events, cpu, kind, 1, order.pages(), 0);
        drop(locked);
        zone.events.pgalloc.fetch_add(order.pages(), Relaxed);
        Some(pfn)
    }

    /// The reduced slow path: wake kswapd, retry at the min watermark with the caller's
    /// reserve rights, then (for callers that may block, in place of direct reclaim) give
    /// back a high-atomic pageblock, drain and retry, and (unless `__GFP_NORETRY`) give
    /// back the rest of the reserve block by block. In workqueue mode the drain may
    /// leave the request waiting ([`AllocAttempt::DrainQueued`]); the caller resumes it
    /// at the retry with [`PageAllocator::alloc_pages_after_drain_report`].
    pub(crate) fn alloc_pages_slowpath<E: LockEvents>(
        &self,
        ac: &AllocContext<'_>,
        events: &mut E,
    ) -> Result<AllocAttempt, AllocError> {
        let flags = AllocFlags::slow_path(ac.gfp, ac.order);
        if flags.contains(AllocFlags::KSWAPD) {
            self.wake_all_kswapds(ac);
        }
        if let Some(pfn) = self.get_page_from_freelist(ac, flags, events) {
            return Ok(AllocAttempt::Allocated(pfn));
        }
        let with_reserve = self.slowpath_flags(ac);
        if !AllocFlags::pfmemalloc(ac.gfp).is_empty() {
            if let Some(pfn) = self.get_page_from_freelist(ac, with_reserve, events) {
                return Ok(AllocAttempt::Allocated(pfn));
            }
        }
        if !ac.gfp.allows_blocking() {
            return Err(AllocError::OutOfMemory { order: ac.order });
        }
        // Where direct reclaim failed, Linux gives back one high-atomic pageblock and
        // drains every pageset, then retries (`__alloc_pages_direct_reclaim`). In
        // workqueue mode the drain is work queued on each CPU with pages, which the task
        // waits for before it retries: the caller's part.
        self.unreserve_highatomic_pageblock(ac, false, events);
        if let DrainAll::Queued(work) =
            self.drain_all_pages_from_report(ac.drain_caller, None, events)
        {
            return Ok(AllocAttempt::DrainQueued(work));
        }
        self.slowpath_after_drain(ac, with_reserve, events)
            .map(AllocAttempt::Allocated)
    }

    /// The slow path's flags from the retry at the min watermark on: the caller's
    /// reserve rights, if it has any (`__gfp_pfmemalloc_flags`), in place of the min mark.
    fn slowpath_flags(&self, ac: &AllocContext<'_>) -> AllocFlags {
        let flags = AllocFlags::slow_path(ac.gfp, ac.order);
        let reserve = AllocFlags::pfmemalloc(ac.gfp);
        if reserve.is_empty() {
            flags
        } else {
            reserve | (flags & AllocFlags::KSWAPD)
        }
    }

    /// The slow path after `drain_all_pages` returned: retry, then (unless
    /// `__GFP_NORETRY`) give back the high-atomic reserve block by block, retrying after
    /// each.
    fn slowpath_after_drain<E: LockEvents>(
        &self,
        ac: &AllocContext<'_>,
        flags: AllocFlags,
        events: &mut E,
    ) -> Result<Pfn, AllocError> {
        if let Some(pfn) = self.get_page_from_freelist(ac, flags, events) {
            return Ok(pfn);
        }
        // `__GFP_NORETRY` gives up here, before `should_reclaim_retry`.
        if ac.gfp.contains(Gfp::NORETRY) {
            return Err(AllocError::OutOfMemory { order: ac.order });
        }
        // Out of retries (`should_reclaim_retry`): the reserve goes, down to the last block.
        while self.unreserve_highatomic_pageblock(ac, true, events) {
            if let Some(pfn) = self.get_page_from_freelist(ac, flags, events) {
                return Ok(pfn);
            }
        }
        Err(AllocError::OutOfMemory { order: ac.order })
    }

    /// Give back one high-atomic pageblock of the first eligible zone that has one to give
    /// (each zone tried under the lock is a zone-lock hold; unforced, only a zone with more
    /// than one pageblock reserved is tried). True if one was given back.
    fn unreserve_highatomic_pageblock<E: LockEvents>(
        &self,
        ac: &AllocContext<'_>,
        force: bool,
        events: &mut E,
    ) -> bool {
        self.eligible_zones(ac).any(|(_, zone)| {
            // Preserve at least one pageblock unless the pressure is high: Linux tests this
            // before it takes the zone lock, so a zone without reserves costs no hold.
            if !force && zone.nr_reserved_highatomic() <= PAGEBLOCK_PAGES {
                return false;
            }
            let mut locked = zone.lock();
            let (blocks, pages) = locked.unreserve_highatomic_pageblock(ac.migratetype, force);
            let kind = HoldKind::HighAtomic;
            locked.report(events, ac.caller.cpu, kind, blocks, pages, 0);
            pages > 0
        })
    }

    fn wake_all_kswapds(&self, ac: &AllocContext<'_>) {
        let mut woken = [false; 64];
        for (_, zone) in self.eligible_zones(ac) {
            let node = zone.node as usize;
            if node < woken.len() && !woken[node] {
                woken[node] = true;
                self.wakeup_kswapd(zone.node, ac.order, ac.highest_zoneidx);
            }
        }
    }

    /// `wakeup_kswapd`: record a wake-up, with its order and highest zone, unless the
    /// node is balanced and no zone is boosted.
    pub(crate) fn wakeup_kswapd(&self, node: NodeId, order: Order, highest_zoneidx: ZoneType) {
        let boosted = self
            .node_zones(node, highest_zoneidx)
            .iter()
            .any(|z| z.watermarks.boost() > 0);
        if self.pgdat_balanced(node, order, highest_zoneidx) && !boosted {
            return;
        }
        self.kswapd[node as usize].request(order, highest_zoneidx);
    }

    fn node_zones(&self, node: NodeId, highest_zoneidx: ZoneType) -> &[Zone<R>] {
        let first = node as usize * self.nr_zone_types;
        let count = (highest_zoneidx.index() + 1).min(self.nr_zone_types);
        &self.zones[first..first + count]
    }

    /// `pgdat_balanced`: some managed zone of `node` up to `highest_zoneidx` is above its
    /// high watermark for `order` (or the node has no managed zone). kswapd stops there.
    pub fn pgdat_balanced(&self, node: NodeId, order: Order, highest_zoneidx: ZoneType) -> bool {
        let zones = self.node_zones(node, highest_zoneidx);
        let mut managed = zones.iter().filter(|z| z.is_managed()).peekable();
        if managed.peek().is_none() {
            return true;
        }
        managed.any(|z| {
            let summary = z.free_block_summary(order);
            let input = z.watermark_input(highest_zoneidx, &summary);
            watermark::watermark_ok(
                order,
                z.wmark(WatermarkKind::High),
                AllocFlags::empty(),
                &input,
            )
        })
    }
}

/// The end of `__rmqueue_pcplist`: the block just taken off a pageset list leaves the
/// pageset's count and becomes an allocated block with one reference.
#[inline(always)]
fn pcp_block_allocated(pcp: &mut PerCpuPages, page: &Page, order: Order) {
    pcp.count -= order.pages();
    block_allocated(page, order);
}

/// A block taken off a pageset list becomes an allocated block with one reference
/// (`prep_new_page`'s `set_page_refcounted`). The pageset's count is the caller's. A
/// free block carries no page flags and no memcg id (`verify` checks it), so its state is
/// one store.
#[inline(always)]
pub(super) fn block_allocated(page: &Page, order: Order) {
    debug_assert_eq!(page.state_order(), (PageState::Pcp, order));
    page.set_state_of_bare(PageState::Allocated, order);
    page.init_refcount(1);
}

impl<R: RawMutex> ZoneLocked<'_, R> {
    /// `rmqueue_bulk`: move up to `blocks` blocks of `order` from the buddy lists to the
    /// tail of pageset list `pindex`, keeping them in the order the buddy hands them out.
    /// Stops early when the zone runs dry. Returns the blocks moved.
    pub(crate) fn rmqueue_bulk(
        &mut self,
        order: Order,
        blocks: u64,
        mt: MigrateType,
        flags: AllocFlags,
        pcp: &mut PerCpuPages,
        pindex: usize,
    ) -> u64 {
        let zone = self.zone();
        let mut got = 0;
        while got < blocks {
            // Each `__rmqueue` would take the requested list's first block while it has
            // one: take that whole run in one splice; then the blocks of the next larger
            // block in the order its splitting hands them out; block by block only when
            // a fallback steals.
            let list = &mut pcp.lists[pindex];
            got += self.rmqueue_head_run(order, mt, blocks - got, list);
            if got == blocks {
                break;
            }
            if let Some(taken) = self.rmqueue_split_run(order, mt, blocks - got, list) {
                got += taken;
                continue;
            }
            let Some(pfn) = self.rmqueue(order, mt, flags) else {
                break;
            };
            let page = zone.mem_map.page(pfn);
            page.set_state(PageState::Pcp, order);
            pcp.lists[pindex].push_tail_page(&zone.mem_map, pfn, page);
            got += 1;
        }
        let pages = got << order.get();
        self.mod_free_pages(-(pages as i64));
        pcp.count += pages;
        pcp.zone_touched = true;
        Self::count_locked(&zone.events.pcp_refills, 1);
        Self::count_locked(&zone.events.pcp_refill_pages, pages);
        got
    }
}

#[cfg(test)]
mod tests {
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    use super::*;
    use crate::page_alloc::free_area::ListEnd;
    use crate::page_alloc::pcp::{pindex_to_order, NR_PCP_LISTS};
    use crate::page_alloc::zone::DrainReason;
    use crate::{Policy, Settings};

    const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

    use crate::page_alloc::test_allocator as allocator;

    /// Everything an allocator call could change that a reader can see: every zone's
    /// counters, free pages, buddy lists' sizes and flags, and every pageset whole.
    fn state(a: &PageAllocator) -> String {
        let mut s = String::new();
        for zone in a.zones() {
            s += &format!(
                "{:?} {} {} {} {:?} {:?}\n",
                zone.events(),
                zone.pgalloc(),
                zone.pgfree(),
                zone.free_pages(),
                zone.buddyinfo(),
                zone.flags(),
            );
            for cpu in 0..zone.nr_pagesets() as u32 {
                s += &format!("{:?}\n", zone.pageset(cpu));
            }
        }
        s
    }

    /// The fast path's table holds, for every node and every value of the GFP bits it is
    /// indexed by, what `prepare_alloc_pages` decides: the same preferred zone, highest
    /// zone and migratetype, or no entry where the context is refused. Checked on a
    /// two-node machine with DMA32 and Movable zones (a memoryless Movable zone on node
    /// 1), and on one too small to group pages by mobility.
    #[test]
    fn pcp_fast_table_agrees_with_the_alloc_context() {
        use crate::page_alloc::gfp::GFP_DECODE_COMBINATIONS;
        use crate::topology::{CacheInfo, Topology, ZoneSize};
        let llc = CacheInfo {
            llc_bytes: 8 << 20,
            llc_shared_cpus: 2,
        };
        let numa = [
            ZoneSize::managed(0, ZoneType::Dma32, 1 << 14),
            ZoneSize::managed(0, ZoneType::Normal, 1 << 15),
            ZoneSize::managed(0, ZoneType::Movable, 1 << 13),
            ZoneSize::managed(1, ZoneType::Normal, 1 << 15),
        ];
        let tiny = [ZoneSize::managed(0, ZoneType::Normal, 2048)];
        let machines = [(&numa[..], alloc::vec![2, 2]), (&tiny[..], alloc::vec![1])];
        for (sizes, node_cpus) in machines {
            let topology = Topology::x86_64(sizes, node_cpus, llc, false).expect("a topology");
            let a = PageAllocator::new(topology, Settings::default(), Policy::V6_7)
                .expect("valid settings");
            let grouping = a.group_by_mobility.load(Relaxed);
            assert_eq!(grouping, sizes.len() > 1, "the tiny machine does not group");
            for node in 0..a.topology.nr_nodes() as NodeId {
                for bits in 0..GFP_DECODE_COMBINATIONS {
                    let gfp = Gfp::from_bits_retain(bits as u32) | Gfp::KERNEL;
                    let ac = a.alloc_context(Caller::task(0), gfp, Order::ZERO, node);
                    let expected = ac
                        .ok()
                        .map(|ac| (ac.preferred, ac.highest_zoneidx, ac.migratetype));
                    let target = a.zonelists[node as usize].pcp_fast[gfp.decode_index()];
                    let found =
                        target.map(|t| (t.preferred as usize, t.highest_zoneidx, t.migratetype));
                    assert_eq!(found, expected, "node {node}, gfp {gfp:?}");
                }
            }
        }
    }

    /// `__GFP_NOFAIL` and bits mmkit does not define are refused on every path (the
    /// order-0 fast path, the general path, both bulk flavours with one page wanted and
    /// with many) before anything changes.
    #[test]
    fn flags_no_allocation_honours_are_refused_and_change_nothing() {
        let a = allocator();
        // A warm pageset: without the refusal, the fast path would serve these flags.
        let warm = a
            .alloc_pages(Caller::task(0), MOVABLE, Order::ZERO)
            .unwrap();
        a.free_pages(Caller::task(0), warm, Order::ZERO).unwrap();
        let before = state(&a);
        let undefined = Gfp::from_bits_retain(0x200);
        for gfp in [
            MOVABLE | Gfp::NOFAIL,
            MOVABLE | undefined,
            Gfp::KERNEL | Gfp::NOFAIL,
        ] {
            for order in [Order::ZERO, Order::new(3).unwrap()] {
                let got = a.alloc_pages(Caller::task(0), gfp, order);
                assert!(
                    matches!(got, Err(AllocError::InvalidGfp(_))),
                    "{gfp:?} order {order}: {got:?}"
                );
            }
            for wanted in [1, 8] {
                let mut slots = alloc::vec![None; wanted];
                let got = a.alloc_pages_bulk_array(Caller::task(0), gfp, None, &mut slots);
                assert!(
                    matches!(got, Err(AllocError::InvalidGfp(_))),
                    "{gfp:?} × {wanted}: {got:?}"
                );
                assert!(slots.iter().all(Option::is_none));
                let mut list = Vec::new();
                let got = a.alloc_pages_bulk_list(Caller::task(0), gfp, None, wanted, &mut list);
                assert!(
                    matches!(got, Err(AllocError::InvalidGfp(_))),
                    "{gfp:?} × {wanted}: {got:?}"
                );
                assert!(list.is_empty());
            }
        }
        assert_eq!(state(&a), before);
        a.verify().unwrap();
    }

    #[test]
    fn alloc_pages_peek_next_names_the_block_the_next_allocation_takes() {
        let a = allocator();
        let peek = |cpu, gfp| a.alloc_pages_peek_next(Caller::task(cpu), gfp, Order::ZERO);
        // An empty pageset: the allocation refills it, off the fast path, so no hint.
        let (first, hint) = peek(0, MOVABLE).unwrap();
        assert_eq!(hint, None);
        let (mut previous, mut hint) = peek(0, MOVABLE).unwrap();
        assert!(hint.is_some(), "the refill left more than two blocks");
        for _ in 0..8 {
            let (pfn, next) = peek(0, MOVABLE).unwrap();
            assert_eq!(
                Some(pfn),
                hint,
                "the hint named the block this allocation took"
            );
            assert_ne!(pfn, previous);
            previous = pfn;
            hint = next;
        }
        // A free puts its block at the head, in front of the hint.
        a.free_pages(Caller::task(0), first, Order::ZERO).unwrap();
        assert_eq!(peek(0, MOVABLE).unwrap(), (first, hint));
        // Another CPU's pageset and another migratetype's list are their own.
        assert_eq!(peek(1, MOVABLE).unwrap().1, None);
        assert_eq!(peek(0, Gfp::KERNEL).unwrap().1, None);
        // Orders above 0 take the general path.
        let (_, hint) = a
            .alloc_pages_peek_next(Caller::task(0), MOVABLE, Order::new(1).unwrap())
            .unwrap();
        assert_eq!(hint, None);
    }

    #[test]
    fn alloc_pages_peek_next_allocates_as_alloc_pages_does() {
        let plain = allocator();
        let peeking = allocator();
        let mut held = Vec::new();
        // Allocations and frees on two CPUs, of orders 0 to 3, with refills and drains.
        for i in 0u64..3000 {
            let cpu = (i % 7 == 0) as u32;
            let order = Order::new([0, 0, 0, 1, 0, 2, 0, 3][(i % 8) as usize]).unwrap();
            if i % 5 < 3 || held.is_empty() {
                let got = plain.alloc_pages(Caller::task(cpu), MOVABLE, order);
                let peeked = peeking.alloc_pages_peek_next(Caller::task(cpu), MOVABLE, order);
                assert_eq!(got, peeked.map(|(pfn, _)| pfn));
                held.push((got.unwrap(), order));
            } else {
                let (pfn, order) = held.swap_remove((i as usize * 31) % held.len());
                plain.free_pages(Caller::task(cpu), pfn, order).unwrap();
                peeking.free_pages(Caller::task(cpu), pfn, order).unwrap();
            }
        }
        assert_eq!(state(&plain), state(&peeking));
    }

    /// Every descriptor, list, count and event of `a`'s only zone.
    fn zone_snapshot(a: &PageAllocator) -> String {
        let zone = zone(a);
        let mut s = format!(
            "{:?} {} {:?}\n",
            zone.events(),
            zone.free_pages(),
            zone.buddyinfo()
        );
        for (pfn, page) in zone.mem_map.iter() {
            let (state, order) = page.state_order();
            let links = (page.next(), page.prev(), page.cached_migratetype());
            s += &format!("{pfn:?} {state:?} {order} {links:?}\n");
        }
        let locked = zone.lock();
        for order in Order::all() {
            for mt in MigrateType::ALL {
                let list = locked.area().list(order, mt);
                s += &format!(
                    "{order} {mt:?} {:?}\n",
                    list.iter(&zone.mem_map).collect::<Vec<_>>()
                );
            }
        }
        s
    }

    fn zone(a: &PageAllocator) -> &Zone {
        a.zone(0, ZoneType::Normal).unwrap()
    }

    /// `rmqueue_bulk` as Linux writes it, one `__rmqueue` per block: the model.
    fn rmqueue_bulk_per_block(
        locked: &mut ZoneLocked<'_>,
        order: Order,
        blocks: u64,
        mt: MigrateType,
        pcp: &mut PerCpuPages,
        pindex: usize,
    ) -> u64 {
        let mem_map = &locked.zone().mem_map;
        let mut got = 0;
        while got < blocks {
            let Some(pfn) = locked.rmqueue(order, mt, AllocFlags::empty()) else {
                break;
            };
            mem_map.page(pfn).set_state(PageState::Pcp, order);
            pcp.lists[pindex].push_tail_page(mem_map, pfn, mem_map.page(pfn));
            got += 1;
        }
        let pages = got << order.get();
        locked.mod_free_pages(-(pages as i64));
        pcp.count += pages;
        pcp.zone_touched = true;
        let events = &locked.zone().events;
        <ZoneLocked>::count_locked(&events.pcp_refills, 1);
        <ZoneLocked>::count_locked(&events.pcp_refill_pages, pages);
        got
    }

    /// A deterministic stream of numbers below the argument (xorshift64).
    fn numbers() -> impl FnMut(u64) -> u64 {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        }
    }

    /// Two allocators fragmented alike: blocks of random orders taken at random places
    /// and half of them given back, so every order has partly merged free blocks.
    fn fragmented_pair(random: &mut impl FnMut(u64) -> u64) -> (PageAllocator, PageAllocator) {
        let (a, model) = (allocator(), allocator());
        let start = zone(&a).start_pfn().0;
        let mut taken = Vec::new();
        for _ in 0..600 {
            let order = Order::new(random(5) as u8).unwrap();
            let pfn = Pfn(start + random(1 << 16)).align_down(order);
            if zone(&a).lock().take_block(pfn, order).is_some() {
                assert!(zone(&model).lock().take_block(pfn, order).is_some());
                for a in [&a, &model] {
                    zone(a)
                        .mem_map
                        .page(pfn)
                        .set_state(PageState::Allocated, order);
                }
                taken.push((pfn, order));
            }
        }
        for &(pfn, order) in taken.iter().step_by(2) {
            for a in [&a, &model] {
                zone(a)
                    .lock()
                    .free_one_page(pfn, order, MigrateType::Movable, ListEnd::Head);
            }
        }
        (a, model)
    }

    /// A pageset order and migratetype for a refill, mostly order-0 movable.
    fn refill_list(random: &mut impl FnMut(u64) -> u64) -> (Order, MigrateType) {
        let orders = [0, 0, 0, 1, 2, 3, 9];
        let types = [
            MigrateType::Movable,
            MigrateType::Movable,
            MigrateType::Unmovable,
        ];
        let order = Order::new(orders[random(orders.len() as u64) as usize]).unwrap();
        (order, types[random(types.len() as u64) as usize])
    }

    #[test]
    fn rmqueue_bulk_leaves_what_one_rmqueue_per_block_leaves() {
        let mut random = numbers();
        let (a, model) = fragmented_pair(&mut random);
        for round in 0..120 {
            let (order, mt) = refill_list(&mut random);
            let blocks = 1 + random(200);
            let pindex = order_to_pindex(mt, order);
            let mut got = [0; 2];
            for (i, a) in [&a, &model].into_iter().enumerate() {
                let zone = zone(a);
                let mut pcp = zone.pcp_trylock(0).ok().unwrap();
                let mut locked = zone.lock();
                got[i] = if i == 0 {
                    locked.rmqueue_bulk(order, blocks, mt, AllocFlags::empty(), &mut pcp, pindex)
                } else {
                    rmqueue_bulk_per_block(&mut locked, order, blocks, mt, &mut pcp, pindex)
                };
            }
            assert_eq!(
                got[0], got[1],
                "round {round}: {blocks} × order {order} {mt:?}"
            );
            assert_eq!(zone_snapshot(&a), zone_snapshot(&model), "round {round}");
            assert_eq!(state(&a), state(&model), "round {round}");
            a.verify().unwrap();
        }
    }

    /// `free_pcppages_bulk` with one `free_one_page` per block, each updating
    /// `NR_FREE_PAGES` and the merge count: the model.
    fn free_pcppages_bulk_per_block(
        locked: &mut ZoneLocked<'_>,
        pcp: &mut PerCpuPages,
        pages: u64,
        start: usize,
    ) -> u64 {
        let mem_map = &locked.zone().mem_map;
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
            while let Some((pfn, page)) = pcp.lists[pindex].pop_tail(mem_map) {
                pcp.count -= order.pages();
                let mt = MigrateType::from_index(page.cached_migratetype() as usize).unwrap();
                locked.free_one_page(pfn, order, mt, ListEnd::Head);
                freed += order.pages();
                left -= order.pages() as i64;
                if left <= 0 {
                    break;
                }
            }
        }
        pcp.zone_touched = true;
        let events = &locked.zone().events;
        <ZoneLocked>::count_locked(&events.pcp_drains[DrainReason::Free as usize], 1);
        <ZoneLocked>::count_locked(&events.pcp_drain_pages[DrainReason::Free as usize], freed);
        freed
    }

    #[test]
    fn free_pcppages_bulk_leaves_what_one_free_one_page_per_block_leaves() {
        let mut random = numbers();
        let (a, model) = fragmented_pair(&mut random);
        for round in 0..120 {
            // Refills (exact by the test above) fill the pagesets with blocks of several
            // orders and types; every third round drains some of them.
            let (order, mt) = refill_list(&mut random);
            let blocks = 1 + random(100);
            let pindex = order_to_pindex(mt, order);
            for a in [&a, &model] {
                let zone = zone(a);
                let mut pcp = zone.pcp_trylock(0).ok().unwrap();
                let flags = AllocFlags::empty();
                zone.lock()
                    .rmqueue_bulk(order, blocks, mt, flags, &mut pcp, pindex);
            }
            if round % 3 != 2 {
                continue;
            }
            let (pages, start) = (1 + random(400), random(NR_PCP_LISTS as u64) as usize);
            let mut freed = [0; 2];
            for (i, a) in [&a, &model].into_iter().enumerate() {
                let zone = zone(a);
                let mut pcp = zone.pcp_trylock(0).ok().unwrap();
                let mut locked = zone.lock();
                freed[i] = if i == 0 {
                    locked.free_pcppages_bulk(&mut pcp, pages, start, DrainReason::Free, 0, &mut ())
                } else {
                    free_pcppages_bulk_per_block(&mut locked, &mut pcp, pages, start)
                };
            }
            assert_eq!(
                freed[0], freed[1],
                "round {round}: {pages} pages from {start}"
            );
            assert_eq!(zone_snapshot(&a), zone_snapshot(&model), "round {round}");
            assert_eq!(state(&a), state(&model), "round {round}");
            a.verify().unwrap();
        }
    }
}
