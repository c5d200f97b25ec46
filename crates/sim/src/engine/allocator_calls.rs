//! The allocator calls a workload makes (allocations, frees, a quiet batch of frees,
//! `drain_all_pages`, its workqueue drains) and the vmstat tick: each through the
//! core's `_report` entry point, its zone-lock holds charged as the call reports them,
//! then its PCP path's own cost.

use mmkit_core::page_alloc::pcp::{pcp_allowed_order, PAGE_ALLOC_COSTLY_ORDER};
use mmkit_core::page_alloc::{AllocAttempt, Caller, DrainAll, DrainWork, Gfp};
use mmkit_core::{Order, Pfn};

use super::{Sim, SimError, MAX_ZONES};

impl Sim {
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
    /// [`PageAllocator::alloc_pages_may_wait_report`](mmkit_core::PageAllocator::alloc_pages_may_wait_report). In workqueue mode the result may be
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
    /// [`PageAllocator::alloc_pages_after_drain_report`](mmkit_core::PageAllocator::alloc_pages_after_drain_report) on `cpu`, once it is awake.
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
    pub(super) fn allocated(
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
    pub(super) fn alloc_in(
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
    pub(super) fn quiet_room(&self, cpu: u32, pfn: Pfn) -> Option<(usize, usize)> {
        let slot = self.slot_of(pfn)?;
        let room =
            mmkit_core::internals::quiet_order0_frees(&self.allocator, Caller::task(cpu), pfn);
        Some((slot, room))
    }

    /// Count a free of `order` to `cpu`'s pageset of zone `slot`
    /// ([`SimStats::high_order_after_high`](super::SimStats::high_order_after_high)).
    #[inline(always)]
    pub(super) fn note_pageset_free(&mut self, cpu: u32, slot: usize, order: Order) {
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
    /// the core's [`PageAllocator::drain_all_pages_report`](mmkit_core::PageAllocator::drain_all_pages_report). Every zone-lock hold it
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

    pub(super) fn vmstat_tick(&mut self, cpu: u32) {
        self.stats.vmstat_ticks += 1;
        debug_assert!(self.report.holds.is_empty());
        self.allocator.vmstat_tick_report(cpu, &mut self.report);
        self.charge_report(cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SimOptions;
    use crate::machine::MachineSpec;
    use mmkit_core::Policy;

    /// A base-policy simulator of 2 CPUs, one on each of two nodes of 1 GiB, that
    /// verifies the allocator after every step.
    pub(super) fn two_cpus_verified() -> Sim {
        let machine = MachineSpec::spr_224().with_cpus(2).with_node_bytes(1 << 30);
        let options = SimOptions {
            sample_ns: 1_000_000,
            verify_every: Some(1),
            high_cpus: Vec::new(),
            measure_from_ns: 0,
        };
        Sim::new(&machine, Policy::preset("base").unwrap(), options).unwrap()
    }

    /// [`Sim::free_quiet`] frees a batch no larger than [`Sim::quiet_frees`] allows with
    /// no zone-lock acquisition, to the state and the charges single frees of the same
    /// pages leave; a batch larger than that, or reaching into another zone, is refused
    /// before anything is freed.
    #[test]
    pub(super) fn a_quiet_batch_frees_as_single_frees_do_and_a_larger_one_is_refused() {
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
    pub(super) fn high_order_frees_after_another_are_counted_per_pageset() {
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
}
