//! The bulk allocator: many order-0 pages under one pageset lock hold.
//!
//! Linux counterpart: `__alloc_pages_bulk` (v6.7, `mm/page_alloc.c`) with its array and
//! list variants (`alloc_pages_bulk_array`, `alloc_pages_bulk_list`; v6.14 dropped the
//! list variant). The fast path takes pages from the caller's pageset with the same
//! refill rule as single allocations, but never touches the free-side detector
//! (`free_factor`/`free_count`) and counts `PGALLOC` once. Anything unusual falls back to
//! one ordinary allocation, so a call returns at least one page when memory allows.

use alloc::vec::Vec;

use super::alloc::{block_allocated, AllocContext};
use super::allocator::PageAllocator;
use super::error::AllocError;
use super::events::LockEvents;
use super::gfp::{AllocFlags, Gfp, GFP_REFUSED};
use super::pcp::{order_to_pindex, PerCpuPages};
use super::types::{Caller, CpuId, MigrateType, NodeId};
use super::watermark::WatermarkKind;
use super::zone::Zone;
use crate::page::{Order, Pfn};
use crate::sync::RawMutex;

/// Where bulk-allocated pages go.
enum Sink<'a> {
    /// Fill the empty slots of an array.
    Array(&'a mut [Option<Pfn>]),
    /// Append to a list.
    List(&'a mut Vec<Pfn>, usize),
}

impl Sink<'_> {
    /// Pages still wanted.
    fn wanted(&self) -> usize {
        match self {
            Sink::Array(array) => array.iter().filter(|slot| slot.is_none()).count(),
            Sink::List(list, target) => target.saturating_sub(list.len()),
        }
    }

    /// Put the fallback's page in the first empty slot, or at the end of the list.
    fn put(&mut self, pfn: Pfn) {
        match self {
            Sink::Array(array) => {
                let slot = array
                    .iter_mut()
                    .find(|slot| slot.is_none())
                    .expect("a slot is empty");
                *slot = Some(pfn);
            }
            Sink::List(list, _) => list.push(pfn),
        }
    }

    /// The return value once `added` pages went into a sink that wanted `wanted`:
    /// populated slots (array: the slots that were full, plus the added) or pages added
    /// (list).
    fn result(&self, wanted: usize, added: usize) -> usize {
        match self {
            Sink::Array(array) => {
                let populated = array.len() - wanted + added;
                debug_assert_eq!(populated, array.iter().filter(|s| s.is_some()).count());
                populated
            }
            Sink::List(..) => added,
        }
    }
}

impl<R: RawMutex> PageAllocator<R> {
    /// Fill the `None` slots of `array` with order-0 pages (`alloc_pages_bulk_array`).
    /// Returns the number of populated slots, old and new.
    pub fn alloc_pages_bulk_array(
        &self,
        caller: Caller,
        gfp: Gfp,
        node: Option<NodeId>,
        array: &mut [Option<Pfn>],
    ) -> Result<usize, AllocError> {
        self.alloc_pages_bulk(caller, gfp, node, Sink::Array(array), &mut ())
    }

    /// Append up to `nr_pages` order-0 pages to `list` (`alloc_pages_bulk_list`). Returns
    /// the number added. `list` grows first, so no heap allocation happens under the
    /// pageset lock (Linux links the pages through `page->lru` and allocates nothing).
    pub fn alloc_pages_bulk_list(
        &self,
        caller: Caller,
        gfp: Gfp,
        node: Option<NodeId>,
        nr_pages: usize,
        list: &mut Vec<Pfn>,
    ) -> Result<usize, AllocError> {
        self.alloc_pages_bulk_list_report(caller, gfp, node, nr_pages, list, &mut ())
    }

    /// [`PageAllocator::alloc_pages_bulk_list`] of `nr_pages` onto `list`, telling
    /// `events` what the call did: the refills (one zone-lock hold each), the PCP hits
    /// (pages taken off the pageset without one), and what the one-page fallback did
    /// ([`LockEvents`]).
    pub fn alloc_pages_bulk_list_report(
        &self,
        caller: Caller,
        gfp: Gfp,
        node: Option<NodeId>,
        nr_pages: usize,
        list: &mut Vec<Pfn>,
        events: &mut impl LockEvents,
    ) -> Result<usize, AllocError> {
        list.reserve(nr_pages);
        let target = list.len() + nr_pages;
        self.alloc_pages_bulk(caller, gfp, node, Sink::List(list, target), events)
    }

    fn alloc_pages_bulk<E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        node: Option<NodeId>,
        mut sink: Sink<'_>,
        events: &mut E,
    ) -> Result<usize, AllocError> {
        let wanted = sink.wanted();
        if wanted == 0 {
            return Ok(sink.result(0, 0));
        }
        let node = match node {
            Some(node) => node,
            None => self
                .cpu_node(caller.cpu)
                .ok_or(AllocError::InvalidCpu(caller.cpu))?,
        };
        // Memcg accounting, single pages and flags the ordinary path refuses
        // ([`GFP_REFUSED`]) take the ordinary path.
        if !gfp.intersects(Gfp::ACCOUNT.union(GFP_REFUSED)) && wanted > 1 {
            let fast = self.bulk_fast_path(caller, gfp, node, wanted, &mut sink, events)?;
            if let Some(taken) = fast {
                if taken > 0 {
                    return Ok(sink.result(wanted, taken));
                }
            }
        }
        // The fallback: one page through the full allocator; failure is not an error here.
        let added = match self.alloc_pages_node_in(caller, gfp, Order::ZERO, node, events) {
            Ok(pfn) => {
                sink.put(pfn);
                1
            }
            // The caller's CPU went offline after the fast path's check (which left its
            // pageset alone): nothing was taken, so refuse the whole call as every entry
            // point does, rather than report no pages, which reads as out of memory.
            Err(AllocError::InvalidCpu(cpu)) => return Err(AllocError::InvalidCpu(cpu)),
            // Flags no path honours are refused whichever path saw them first.
            Err(refused @ AllocError::InvalidGfp(_)) => return Err(refused),
            // Linux returns what it has (none) when the single allocation fails.
            Err(_) => 0,
        };
        Ok(sink.result(wanted, added))
    }

    /// The pageset fast path. `None` (or `Some(0)`) sends the caller to the fallback.
    fn bulk_fast_path<E: LockEvents>(
        &self,
        caller: Caller,
        gfp: Gfp,
        node: NodeId,
        wanted: usize,
        sink: &mut Sink<'_>,
        events: &mut E,
    ) -> Result<Option<usize>, AllocError> {
        let ac = self.prepare_alloc_pages(caller, gfp, Order::ZERO, node)?;
        let flags = AllocFlags::empty().with_wmark(WatermarkKind::Low);
        let Some(zone) = self.bulk_fast_zone(&ac, wanted, flags) else {
            return Ok(None);
        };
        let mut pcp = match zone.pcp_trylock(caller.cpu) {
            Ok(pcp) => pcp,
            Err(refused) => {
                refused.count(zone);
                return Ok(None);
            }
        };
        let (mt, cpu) = (ac.migratetype, caller.cpu);
        let taken = match sink {
            // One pass over the slots: `wanted` is how many are empty.
            Sink::Array(array) => {
                let mut slots = array.iter_mut().filter(|slot| slot.is_none());
                let put = |pfn| {
                    if let Some(slot) = slots.next() {
                        *slot = Some(pfn);
                    }
                };
                self.rmqueue_pcplist_run(zone, &mut pcp, mt, flags, wanted, put, cpu, events)
            }
            Sink::List(list, _) => {
                let put = |pfn| list.push(pfn);
                self.rmqueue_pcplist_run(zone, &mut pcp, mt, flags, wanted, put, cpu, events)
            }
        };
        pcp.count_alloc(taken as u64);
        drop(pcp);
        Ok(Some(taken))
    }

    /// `wanted` rounds of `__rmqueue_pcplist` for order 0 from `cpu`'s pageset `pcp`,
    /// list `mt`, handing each block to `put`; returns how many blocks it took (fewer only
    /// when a refill finds nothing). What is on the list is taken as one run
    /// ([`PfnList::pop_head_run`]), which writes the list and the pageset's count once and
    /// is reported to `events` as PCP hits; only an empty list goes through
    /// [`PageAllocator::rmqueue_pcplist_locked`] to be refilled, exactly when the page
    /// by page loop would have refilled it.
    ///
    /// [`PfnList::pop_head_run`]: super::list::PfnList::pop_head_run
    #[expect(
        clippy::too_many_arguments,
        reason = "rmqueue_pcplist_locked's arguments plus the count and the destination"
    )]
    #[inline(always)]
    fn rmqueue_pcplist_run<E: LockEvents>(
        &self,
        zone: &Zone<R>,
        pcp: &mut PerCpuPages,
        mt: MigrateType,
        flags: AllocFlags,
        wanted: usize,
        mut put: impl FnMut(Pfn),
        cpu: CpuId,
        events: &mut E,
    ) -> usize {
        let pindex = order_to_pindex(mt, Order::ZERO);
        let mut taken = 0;
        while taken < wanted {
            let run = pcp.lists[pindex].pop_head_run(
                &zone.mem_map,
                (wanted - taken) as u64,
                |pfn, page| {
                    block_allocated(page, Order::ZERO);
                    put(pfn);
                },
            );
            pcp.count -= run;
            taken += run as usize;
            if run > 0 {
                events.pcp_hit(zone.index, cpu, run);
            }
            if taken == wanted {
                break;
            }
            // The list is empty: refill it and take its head.
            let order = Order::ZERO;
            let refilled = self.rmqueue_pcplist_locked(zone, pcp, order, mt, flags, cpu, events);
            let Some(pfn) = refilled else {
                break;
            };
            put(pfn);
            taken += 1;
        }
        taken
    }

    /// The zone the fast path takes from: the first eligible zone with `wanted` pages
    /// above its low watermark. `None` when there is none, or when a zone of another
    /// node comes first.
    fn bulk_fast_zone(
        &self,
        ac: &AllocContext<'_>,
        wanted: usize,
        flags: AllocFlags,
    ) -> Option<&Zone<R>> {
        let preferred = &self.zones[ac.preferred];
        for (index, zone) in self.eligible_zones(ac) {
            if self.topology.nr_nodes() > 1 && index != ac.preferred && zone.node != preferred.node
            {
                return None;
            }
            if !zone.is_managed() {
                continue;
            }
            let mark = zone.wmark(WatermarkKind::Low) + wanted as u64;
            let classzone = AllocContext {
                highest_zoneidx: preferred.zone_type,
                ..ac.clone_shallow()
            };
            if self.zone_watermark_fast(zone, &classzone, mark, flags) {
                return Some(&self.zones[index]);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;
    use crate::page::PageState;
    use crate::page_alloc::pcp::order_to_pindex;
    use crate::page_alloc::test_allocator;
    use crate::page_alloc::types::MigrateType;

    const MOVABLE: Gfp = Gfp::USER.union(Gfp::MOVABLE);

    /// The order-0 MOVABLE pages on CPU 0's Normal pageset, head first: the order the
    /// fast path takes them in.
    fn pageset_pages(allocator: &PageAllocator) -> Vec<Pfn> {
        let zone = allocator
            .zone(0, super::super::ZoneType::Normal)
            .expect("Normal");
        let pcp = zone.pagesets[0].pcp.lock();
        let pindex = order_to_pindex(MigrateType::Movable, Order::ZERO);
        pcp.lists[pindex].iter(&zone.mem_map).collect()
    }

    /// Every descriptor of `zone`: state, order, links and `private`; the `prev` of a
    /// block that heads a list (free, and no block's `next`), which has no value to
    /// keep, shown as 0.
    fn descriptors(zone: &Zone) -> Vec<(Pfn, u32, u32, u32, u16)> {
        let followed: alloc::collections::BTreeSet<u32> =
            zone.mem_map.iter().map(|(_, page)| page.next()).collect();
        zone.mem_map
            .iter()
            .map(|(pfn, page)| {
                let (state, order) = page.state_order();
                let bits = (state as u32) << 8 | u32::from(order.get());
                let free = matches!(state, PageState::Pcp | PageState::Buddy);
                let heads = free && !followed.contains(&(pfn.0 as u32));
                let prev = if heads { 0 } else { page.prev() };
                (pfn, bits, page.next(), prev, page.refcount())
            })
            .collect()
    }

    /// `rmqueue_pcplist_run` of `wanted` blocks takes the blocks, in the order, that
    /// `wanted` rounds of `rmqueue_pcplist_locked` take, and leaves the pageset, the
    /// zone and every descriptor as they do: from an empty pageset, from one with a
    /// few pages, across one refill and across many, under every preset.
    #[test]
    fn a_run_takes_what_page_by_page_rounds_take() {
        use crate::policy::{Policy, LATER_PRESETS, PRESETS};
        let flags = AllocFlags::empty().with_wmark(WatermarkKind::Low);
        for name in PRESETS.iter().chain(&LATER_PRESETS) {
            let policy = Policy::preset(name).expect("a preset");
            for (cached, wanted) in [(0, 1), (0, 40), (5, 3), (5, 6), (5, 300), (60, 61)] {
                let machine = || {
                    let mut allocator = test_allocator();
                    allocator.policy = policy;
                    let caller = Caller::task(0);
                    let pfns: Vec<_> = (0..cached)
                        .map(|_| allocator.alloc_pages(caller, MOVABLE, Order::ZERO))
                        .collect::<Result<_, _>>()
                        .expect("room");
                    allocator
                        .free_pages_batch(caller, &pfns)
                        .expect("allocated above");
                    allocator
                };
                let (run, rounds) = (machine(), machine());
                let taken = |allocator: &PageAllocator, by_run: bool| {
                    let zone = allocator
                        .zone(0, super::super::ZoneType::Normal)
                        .expect("Normal");
                    let mut pcp = zone.pcp_trylock(0).expect("not busy");
                    let mut pfns = Vec::new();
                    let mt = MigrateType::Movable;
                    if by_run {
                        let n = allocator.rmqueue_pcplist_run(
                            zone,
                            &mut pcp,
                            mt,
                            flags,
                            wanted,
                            |pfn| pfns.push(pfn),
                            0,
                            &mut (),
                        );
                        assert_eq!(n, pfns.len());
                    } else {
                        for _ in 0..wanted {
                            let Some(pfn) = allocator.rmqueue_pcplist_locked(
                                zone,
                                &mut pcp,
                                Order::ZERO,
                                mt,
                                flags,
                                0,
                                &mut (),
                            ) else {
                                break;
                            };
                            pfns.push(pfn);
                        }
                    }
                    let pageset = alloc::format!("{:?}", *pcp);
                    drop(pcp);
                    let zone_state = alloc::format!(
                        "{:?} {} {:?}",
                        zone.events(),
                        zone.free_pages(),
                        zone.free_blocks()
                    );
                    (pfns, pageset, zone_state, descriptors(zone))
                };
                let context = alloc::format!("{name}: {cached} cached, {wanted} wanted");
                let (by_run, by_rounds) = (taken(&run, true), taken(&rounds, false));
                assert_eq!(by_run.0.len(), wanted, "{context}");
                assert_eq!(by_run, by_rounds, "{context}");
            }
        }
    }

    /// A test allocator after one order-0 allocation on CPU 0: the block it returned, kept
    /// by the test, and the movable pages the refill left on the pageset, head first.
    fn refilled_with_one_kept() -> (PageAllocator, Pfn, Vec<Pfn>) {
        let allocator = test_allocator();
        let kept = allocator
            .alloc_pages(Caller::task(0), MOVABLE, Order::ZERO)
            .expect("a page, and a refilled pageset");
        let cached = pageset_pages(&allocator);
        (allocator, kept, cached)
    }

    #[test]
    fn bulk_array_fills_empty_slots_in_order_from_the_pageset_head() {
        let (allocator, kept, cached) = refilled_with_one_kept();
        let caller = Caller::task(0);
        assert!(cached.len() >= 4, "the refill left a few pages");
        let mut array = [None, Some(kept), None, None, Some(kept), None];
        assert_eq!(
            allocator.alloc_pages_bulk_array(caller, MOVABLE, None, &mut array),
            Ok(6)
        );
        let expected = [
            Some(cached[0]),
            Some(kept),
            Some(cached[1]),
            Some(cached[2]),
            Some(kept),
            Some(cached[3]),
        ];
        assert_eq!(array, expected);
        assert_eq!(pageset_pages(&allocator), cached[4..]);
    }

    #[test]
    fn bulk_list_appends_in_order_from_the_pageset_head() {
        let (allocator, kept, cached) = refilled_with_one_kept();
        let caller = Caller::task(0);
        let mut list = vec![kept];
        assert_eq!(
            allocator.alloc_pages_bulk_list(caller, MOVABLE, None, 3, &mut list),
            Ok(3)
        );
        assert_eq!(list, [kept, cached[0], cached[1], cached[2]]);
    }
}
