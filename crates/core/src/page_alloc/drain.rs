//! Drains, the vmstat tick, `zone_pcp_disable`, and CPU hotplug.
//!
//! Linux counterpart (v6.7, `mm/page_alloc.c`, `mm/vmstat.c`): `drain_pages_zone`,
//! `drain_pages`, `drain_local_pages`, `__drain_all_pages` with `pcpu_drain_mutex`,
//! `decay_pcp_high` and the NUMA `expire` trim of `refresh_cpu_vm_stats`,
//! `zone_pcp_disable`/`zone_pcp_enable`, `page_alloc_cpu_online`/`page_alloc_cpu_dead`.
//!
//! `drain_all_pages` has the two mechanisms of the policy: direct (Linux ≥ 6.0: the caller
//! locks each remote pageset and drains it) and workqueue (4.11 – 5.19, Gorman 2017: work is
//! queued on each CPU with pages, each CPU drains itself when it runs the work, and the
//! caller waits). The core has no threads, so the workqueue wait is split into
//! [`DrainAll::Queued`] and [`PageAllocator::drain_work_finished`]; each target CPU runs
//! [`PageAllocator::run_drain_work`] at its next safe point (the simulator's scheduler,
//! `mmkit pcp-script`'s `run-work` line), or the caller runs every target's work at once
//! (the plain allocation entry points, which the runtime uses). The allocation slow
//! path's drain returns its work the same way
//! ([`AllocAttempt::DrainQueued`](super::AllocAttempt::DrainQueued)).
//!
//! The workqueue mode is Gorman 2017's (4.11): the work function
//! `drain_local_pages_wq` calls `drain_local_pages(NULL)`, so a target CPU drains **every**
//! zone, even when the request named one (the zone only chooses which CPUs get work; a
//! later kernel passed the zone to the work through `struct pcpu_drain`). A caller that
//! is itself a workqueue worker (`PF_WQ_WORKER`) returns at once, draining nothing:
//! "workqueues cannot recurse" (it would wait for workers of its own pool).
//!
//! Nothing here allocates: the allocation slow path drains every CPU when memory runs out,
//! and a kernel's page allocator cannot call its own heap there. The CPUs a drain chose
//! are kept where Linux keeps them, in a mask sized at boot and written only by the
//! holder of the drain mutex (`static cpumask_t cpus_with_pcps` in `__drain_all_pages`);
//! the results say how many, and each drain's [`ZoneLockHold`](super::ZoneLockHold)
//! names its CPU.

use crate::sync::atomic::{AtomicBool, Ordering::Relaxed};
use alloc::vec::Vec;

use super::allocator::PageAllocator;
use super::events::LockEvents;
use super::pcp_sizing::PcpLimits;
use super::types::CpuId;
use super::zone::{DrainReason, Zone, ZoneId};
use crate::policy::DrainMode;
use crate::sync::RawMutex;

/// `pcpu_drain_mutex`, the CPUs the drain holding it chose (`cpus_with_pcps`), and the
/// per-CPU drain work items (`pcpu_drain`): whether each CPU's work is queued. The work
/// drains every zone, so it carries no zone.
#[derive(Debug)]
pub(crate) struct DrainWorkState {
    mutex: AtomicBool,
    /// Per CPU: chosen by the running drain. Written only by the drain mutex's holder, so
    /// a queued drain's CPUs stay readable until [`PageAllocator::drain_work_finished`].
    cpus_with_pcps: Vec<AtomicBool>,
    pending: Vec<AtomicBool>,
}

impl DrainWorkState {
    pub(crate) fn new(nr_cpus: u32) -> DrainWorkState {
        DrainWorkState {
            mutex: AtomicBool::new(false),
            cpus_with_pcps: (0..nr_cpus).map(|_| AtomicBool::new(false)).collect(),
            pending: (0..nr_cpus).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The CPUs the drain holding the mutex chose, in CPU order.
    fn chosen(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.cpus_with_pcps
            .iter()
            .enumerate()
            .filter(|(_, chosen)| chosen.load(Relaxed))
            .map(|(cpu, _)| cpu as CpuId)
    }

    fn try_lock(&self) -> bool {
        self.mutex
            .compare_exchange(false, true, crate::sync::atomic::Ordering::Acquire, Relaxed)
            .is_ok()
    }

    fn unlock(&self) {
        self.mutex
            .store(false, core::sync::atomic::Ordering::Release);
    }
}

/// What `drain_all_pages` did.
#[derive(Debug, PartialEq, Eq)]
pub enum DrainAll {
    /// Drained `cpus` CPUs' pagesets, returning `pages` to the zones. Which CPUs: the
    /// `_report` entry points name each in its drain's
    /// [`ZoneLockHold`](super::ZoneLockHold).
    Done {
        /// How many CPUs were drained (`cpus_with_pcps`; every online CPU for
        /// `zone_pcp_disable`).
        cpus: u32,
        /// Pages returned.
        pages: u64,
    },
    /// Another drain was running and this was a global request: nothing done (a second
    /// drain gains a direct reclaimer little).
    Skipped,
    /// Workqueue mode: work queued on these CPUs; the drain mutex stays held until
    /// [`PageAllocator::drain_work_finished`] reports them all done.
    Queued(DrainWork),
    /// Workqueue mode, and the caller is a workqueue worker: nothing done, not even the
    /// drain mutex taken (Gorman 2017: "Workqueues cannot recurse").
    FromWorker,
}

/// Who calls `drain_all_pages`: Linux reads it from `current->flags`, the core is told.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum DrainCaller {
    /// A task (direct reclaim, memory hotplug, CMA) or the allocator's own slow path.
    #[default]
    Task,
    /// A workqueue worker (`PF_WQ_WORKER`): a work item that allocates and reclaims.
    WorkqueueWorker,
}

/// Drain work queued by a workqueue-mode `drain_all_pages`: a token for
/// [`PageAllocator::drain_work_cpus`] and [`PageAllocator::drain_work_finished`]. The
/// CPUs are in the allocator (Linux's `cpus_with_pcps`), so queueing allocates nothing.
#[derive(Debug, PartialEq, Eq)]
pub struct DrainWork {
    nr_cpus: u32,
}

impl DrainWork {
    /// How many CPUs must each run their work.
    pub fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }
}

/// A held drain mutex, for tests and simulators that model a drain in progress.
#[derive(Debug)]
pub struct DrainMutexGuard<'a> {
    state: &'a DrainWorkState,
}

impl Drop for DrainMutexGuard<'_> {
    fn drop(&mut self) {
        self.state.unlock();
    }
}

impl<R: RawMutex> PageAllocator<R> {
    /// `drain_pages_zone`: return all of `cpu`'s pages of `zone` to the buddy lists.
    pub fn drain_pages_zone(&self, cpu: CpuId, zone: &Zone<R>) -> u64 {
        self.drain_pages_zone_in(cpu, zone, &mut ())
    }

    /// [`PageAllocator::drain_pages_zone`], reporting each drain to `events`.
    fn drain_pages_zone_in<E: LockEvents>(
        &self,
        cpu: CpuId,
        zone: &Zone<R>,
        events: &mut E,
    ) -> u64 {
        let Some(pageset) = zone.pagesets.get(cpu as usize).map(|slot| &slot.pcp) else {
            return 0;
        };
        if self.policy.pcp.drain_zone_in_chunks {
            return self.drain_pages_zone_in_chunks(pageset, zone, cpu, events);
        }
        let mut pcp = pageset.lock();
        if pcp.count == 0 {
            return 0;
        }
        let count = pcp.count;
        // LOCK ORDER: pcp lock → zone lock. Bound, not the block's value: a tail
        // expression's temporary (the zone lock) would outlive `pcp`, releasing the locks
        // in the order they were taken, which an IRQ-saving lock cannot restore.
        let drained =
            zone.lock()
                .free_pcppages_bulk(&mut pcp, count, 0, DrainReason::Explicit, cpu, events);
        drained
    }

    /// `drain_pages_zone` since ≈ 6.9: at most `batch << S` pages per pageset lock hold,
    /// until the pageset is empty.
    fn drain_pages_zone_in_chunks<E: LockEvents>(
        &self,
        pageset: &crate::sync::Lock<R, super::pcp::PerCpuPages>,
        zone: &Zone<R>,
        cpu: CpuId,
        events: &mut E,
    ) -> u64 {
        let mut drained = 0;
        loop {
            let mut pcp = pageset.lock();
            if pcp.count == 0 {
                return drained;
            }
            let chunk = pcp.count.min(pcp.batch << self.scale_max.load(Relaxed));
            // LOCK ORDER: pcp lock → zone lock.
            drained += zone.lock().free_pcppages_bulk(
                &mut pcp,
                chunk,
                0,
                DrainReason::Explicit,
                cpu,
                events,
            );
        }
    }

    /// `drain_pages`: every zone of `cpu`.
    pub fn drain_pages(&self, cpu: CpuId) -> u64 {
        self.drain_pages_in(cpu, &mut ())
    }

    /// [`PageAllocator::drain_pages`], reporting each drain to `events`.
    fn drain_pages_in<E: LockEvents>(&self, cpu: CpuId, events: &mut E) -> u64 {
        self.zones
            .iter()
            .map(|zone| self.drain_pages_zone_in(cpu, zone, events))
            .sum()
    }

    /// `drain_local_pages`: the caller's own pagesets, of one zone or all.
    pub fn drain_local_pages(&self, cpu: CpuId, zone: Option<ZoneId>) -> u64 {
        self.drain_local_pages_report(cpu, zone, &mut ())
    }

    /// [`PageAllocator::drain_local_pages`], telling `events` of each drain (one zone-lock
    /// hold each).
    pub fn drain_local_pages_report(
        &self,
        cpu: CpuId,
        zone: Option<ZoneId>,
        events: &mut impl LockEvents,
    ) -> u64 {
        match zone.and_then(|id| self.zone(id.node, id.zone_type)) {
            Some(zone) => self.drain_pages_zone_in(cpu, zone, events),
            None => self.drain_pages_in(cpu, events),
        }
    }

    /// `drain_all_pages`: empty every CPU's pagesets (of one zone, or all). Only one drain
    /// runs at a time: a global request finding one running returns
    /// [`DrainAll::Skipped`]; a zone request (memory offline, contiguous allocation needs
    /// it finished) waits for it.
    pub fn drain_all_pages(&self, zone: Option<ZoneId>) -> DrainAll {
        self.drain_all(zone, false, &mut ())
    }

    /// [`PageAllocator::drain_all_pages_report`] called by `caller`: in workqueue mode a
    /// workqueue worker gets [`DrainAll::FromWorker`] and nothing is drained; in direct
    /// mode (Linux ≥ 6.0 has no such check) a worker drains like a task.
    pub fn drain_all_pages_from_report(
        &self,
        caller: DrainCaller,
        zone: Option<ZoneId>,
        events: &mut impl LockEvents,
    ) -> DrainAll {
        if caller == DrainCaller::WorkqueueWorker && self.policy.drain == DrainMode::Workqueue {
            return DrainAll::FromWorker;
        }
        self.drain_all(zone, false, events)
    }

    /// [`PageAllocator::drain_all_pages`], telling `events` of each drain, each naming the
    /// CPU whose pageset it emptied. In workqueue mode the drains happen in
    /// [`PageAllocator::run_drain_work_report`].
    pub fn drain_all_pages_report(
        &self,
        zone: Option<ZoneId>,
        events: &mut impl LockEvents,
    ) -> DrainAll {
        self.drain_all(zone, false, events)
    }

    fn drain_all<E: LockEvents>(
        &self,
        zone: Option<ZoneId>,
        force_all_cpus: bool,
        events: &mut E,
    ) -> DrainAll {
        let state = &self.drain_work;
        if !state.try_lock() {
            if zone.is_none() {
                events.drain_all(true);
                return DrainAll::Skipped;
            }
            while !state.try_lock() {
                crate::sync::spin_loop();
            }
        }
        events.drain_all(false);
        let zones: &[Zone<R>] = match zone.and_then(|id| self.zone(id.node, id.zone_type)) {
            Some(zone) => core::slice::from_ref(zone),
            None => &self.zones,
        };
        // Racy scan, as in Linux: a CPU whose pagesets fill after the check is skipped.
        let mut nr_cpus = 0;
        for (cpu, chosen) in state.cpus_with_pcps.iter().enumerate() {
            let with_pcps = self.is_cpu_online(cpu as CpuId)
                && (force_all_cpus || zones.iter().any(|z| z.pagesets[cpu].pcp.lock().count > 0));
            chosen.store(with_pcps, Relaxed);
            nr_cpus += u32::from(with_pcps);
        }
        if self.policy.drain == DrainMode::Workqueue && !force_all_cpus {
            // The zone chose the CPUs; their work drains every zone (`drain_local_pages_wq`).
            for cpu in state.chosen() {
                state.pending[cpu as usize].store(true, Relaxed);
            }
            if nr_cpus == 0 {
                state.unlock();
                return DrainAll::Done { cpus: 0, pages: 0 };
            }
            return DrainAll::Queued(DrainWork { nr_cpus });
        }
        let pages = state
            .chosen()
            .map(|cpu| {
                zones
                    .iter()
                    .map(|z| self.drain_pages_zone_in(cpu, z, events))
                    .sum::<u64>()
            })
            .sum();
        state.unlock();
        DrainAll::Done {
            cpus: nr_cpus,
            pages,
        }
    }

    /// Workqueue mode: `cpu` runs its queued drain work, if any, draining its own
    /// pagesets of every zone (`drain_local_pages_wq` → `drain_local_pages(NULL)`).
    /// Returns the pages drained.
    pub fn run_drain_work(&self, cpu: CpuId) -> u64 {
        self.run_drain_work_report(cpu, &mut ())
    }

    /// [`PageAllocator::run_drain_work`], telling `events` of each drain.
    pub fn run_drain_work_report(&self, cpu: CpuId, events: &mut impl LockEvents) -> u64 {
        match self.drain_work.pending.get(cpu as usize) {
            Some(slot) if slot.load(Relaxed) => {
                let pages = self.drain_pages_in(cpu, events);
                slot.store(false, Relaxed);
                pages
            }
            _ => 0,
        }
    }

    /// Workqueue mode: whether `cpu` has drain work queued that it has not run yet.
    pub fn drain_work_pending(&self, cpu: CpuId) -> bool {
        self.drain_work
            .pending
            .get(cpu as usize)
            .is_some_and(|slot| slot.load(Relaxed))
    }

    /// Workqueue mode: the CPUs that must each run `work`, in CPU order. Read while
    /// `work` is unfinished: once [`PageAllocator::drain_work_finished`] says it is done,
    /// the next drain may choose other CPUs.
    pub fn drain_work_cpus(&self, work: &DrainWork) -> impl Iterator<Item = CpuId> + '_ {
        debug_assert_eq!(self.drain_work.chosen().count(), work.nr_cpus as usize);
        self.drain_work.chosen()
    }

    /// Workqueue mode: whether every CPU of `work` ran its drain (`flush_work` on each).
    /// Once true the drain mutex is released and `work` is spent.
    pub fn drain_work_finished(&self, work: &DrainWork) -> bool {
        let state = &self.drain_work;
        debug_assert_eq!(state.chosen().count(), work.nr_cpus as usize);
        let done = state
            .chosen()
            .all(|cpu| !state.pending[cpu as usize].load(Relaxed));
        if done {
            state.unlock();
        }
        done
    }

    /// Take the drain mutex as a running drain would, for tests and simulators.
    /// `None` if a drain is running.
    pub fn hold_drain_mutex(&self) -> Option<DrainMutexGuard<'_>> {
        // `then`, not `then_some`: a guard built eagerly on failure would unlock the
        // running drain's mutex when dropped.
        self.drain_work.try_lock().then(|| DrainMutexGuard {
            state: &self.drain_work,
        })
    }

    /// The per-CPU vmstat tick (`refresh_cpu_vm_stats` with pagesets), run on `cpu` every
    /// `stat_interval`: decay each pageset's `high` (patch 7 on) and trim it, and trim
    /// pagesets of remote nodes a batch at a time once their `expire` runs out. Returns
    /// whether anything changed (Linux re-arms the tick while it does).
    pub fn vmstat_tick(&self, cpu: CpuId) -> bool {
        self.vmstat_tick_report(cpu, &mut ())
    }

    /// [`PageAllocator::vmstat_tick`], telling `events` of each drain (decay and NUMA
    /// expiry, one zone-lock hold each).
    pub fn vmstat_tick_report(&self, cpu: CpuId, events: &mut impl LockEvents) -> bool {
        if !self.is_cpu_online(cpu) {
            return false;
        }
        let scale_max = self.scale_max.load(Relaxed);
        let local_node = self.topology.cpu_node(cpu);
        let mut changes = false;
        for zone in self.zones.iter().filter(|z| z.present > 0) {
            let mut pcp = zone.pagesets[cpu as usize].pcp.lock();
            if core::mem::take(&mut pcp.zone_touched) {
                pcp.expire = 3;
            }
            if self.policy.pcp.auto_tune {
                let (todo, to_drain) = pcp.decay(scale_max);
                changes |= todo;
                if to_drain > 0 {
                    // LOCK ORDER: pcp lock → zone lock.
                    let reason = DrainReason::Decay;
                    zone.lock()
                        .free_pcppages_bulk(&mut pcp, to_drain, 0, reason, cpu, events);
                    changes = true;
                }
            }
            if pcp.expire == 0 || pcp.count == 0 {
                continue;
            }
            if Some(zone.node) == local_node {
                pcp.expire = 0;
                continue;
            }
            pcp.expire -= 1;
            changes = true;
            if pcp.expire == 0 {
                let batch = pcp.batch.min(pcp.count);
                let reason = DrainReason::NumaExpire;
                zone.lock()
                    .free_pcppages_bulk(&mut pcp, batch, 0, reason, cpu, events);
            }
        }
        changes
    }

    /// `zone_pcp_disable`: set every pageset of the zone to (high 0, batch 1), so each free
    /// goes back to the zone, and drain all CPUs. Nests; undo with
    /// [`PageAllocator::zone_pcp_enable`].
    pub fn zone_pcp_disable(&self, id: ZoneId) -> Option<u64> {
        self.zone_pcp_disable_report(id, &mut ())
    }

    /// [`PageAllocator::zone_pcp_disable`], telling `events` of each drain.
    pub fn zone_pcp_disable_report(&self, id: ZoneId, events: &mut impl LockEvents) -> Option<u64> {
        let zone = self.zone(id.node, id.zone_type)?;
        zone.pcp_disabled.fetch_add(1, Relaxed);
        self.set_pagesets(
            zone,
            PcpLimits {
                batch: 1,
                high_min: 0,
                high_max: 0,
            },
        );
        Some(match self.drain_all(Some(id), true, events) {
            DrainAll::Done { pages, .. } => pages,
            DrainAll::Skipped | DrainAll::Queued(_) | DrainAll::FromWorker => 0,
        })
    }

    /// `zone_pcp_enable`: restore the zone's pageset limits.
    pub fn zone_pcp_enable(&self, id: ZoneId) -> Option<()> {
        let zone = self.zone(id.node, id.zone_type)?;
        let depth = zone.pcp_disabled.load(Relaxed);
        if depth == 0 {
            return None;
        }
        if zone.pcp_disabled.fetch_sub(1, Relaxed) == 1 {
            let limits = *zone.pcp_limits.lock();
            self.set_pagesets(zone, limits);
        }
        Some(())
    }

    /// `page_alloc_cpu_dead`: drain the CPU's pagesets, mark it offline, recompute every
    /// zone's limits, stat thresholds and the cache slices. False if it was not online or
    /// is the last online CPU.
    pub fn cpu_down(&self, cpu: CpuId) -> bool {
        self.cpu_down_report(cpu, &mut ())
    }

    /// [`PageAllocator::cpu_down`], telling `events` of each drain of the CPU's
    /// pagesets.
    pub fn cpu_down_report(&self, cpu: CpuId, events: &mut impl LockEvents) -> bool {
        if !self.is_cpu_online(cpu) || self.nr_online.load(Relaxed) == 1 {
            return false;
        }
        self.set_cpu_online_mask(cpu, false);
        self.nr_online.fetch_sub(1, Relaxed);
        // Close the pagesets before draining them: a task that checked the CPU online
        // before the store above may still be on its way to one (`Zone::pcp_trylock`).
        for zone in self.zones.iter() {
            zone.pagesets[cpu as usize].pcp.lock().offline = true;
        }
        self.drain_pages_in(cpu, events);
        self.setup_pcp_cacheinfo();
        self.update_pcp_limits(&self.settings(), 0);
        self.refresh_zone_stat_thresholds();
        true
    }

    /// `page_alloc_cpu_online`: recompute limits counting the new CPU (not yet in its
    /// node's mask, hence `cpu_online` 1), then mark it online and recompute the cache
    /// slices. False if it does not exist or is already online.
    pub fn cpu_up(&self, cpu: CpuId) -> bool {
        if cpu >= self.topology.nr_cpus() || self.is_cpu_online(cpu) {
            return false;
        }
        self.update_pcp_limits(&self.settings(), 1);
        for zone in self.zones.iter() {
            zone.pagesets[cpu as usize].pcp.lock().offline = false;
        }
        self.set_cpu_online_mask(cpu, true);
        self.nr_online.fetch_add(1, Relaxed);
        self.setup_pcp_cacheinfo();
        self.refresh_zone_stat_thresholds();
        true
    }
}
