//! Yin Fengwei's MADV_PAGEOUT loop (`docs/reference/workloads.md` §2.6), and the same
//! processes under memory pressure, with direct reclaim.
//!
//! `pageout` runs one process per CPU, each faulting 512 pages at a steady rate and then
//! freeing all of them in one burst, over and over; score = loops per second.
//!
//! With [`PageoutParams::direct_reclaim`] the loop runs on a node full of page cache: each
//! process first reads other files until the allocator refuses a page without reclaim,
//! and at the end of a loop its pages stay cached (no `MADV_PAGEOUT`: a streaming
//! reader). A fault the allocator refuses does what `__alloc_pages_direct_reclaim` does:
//! reclaim a batch of the node's oldest cache pages (`SWAP_CLUSTER_MAX`, freed from the
//! faulting CPU, so onto its pageset), then retry through the core's slow path, which
//! drains every pageset (`drain_all_pages(NULL)`) when the retry fails, because the free
//! pages sit on pagesets while the zone is below its watermark, and retries again; the
//! fault fails after `MAX_RECLAIM_RETRIES` rounds in a row that found nothing to
//! reclaim (`should_reclaim_retry`). The drain is the policy's
//! ([`mmkit_core::policy::DrainMode`]): direct, the faulting CPU locks and empties every
//! pageset that has pages and is charged for it; workqueue, the core returns the queued
//! work ([`AllocAttempt::DrainQueued`]), each target CPU runs it at its next step (a
//! kworker runs once the task it preempts reaches a scheduling point), and the faulting
//! process sleeps until the last has run it, then resumes its allocation in the core.

use std::collections::VecDeque;

use mmkit_core::page_alloc::{AllocAttempt, DrainWork, Gfp};
use mmkit_core::{Order, Pfn};
use serde::{Deserialize, Serialize};

use crate::engine::{Sim, SimError, Step, Workload};
use crate::rng::Rng;

/// `pageout` parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PageoutParams {
    /// Pages per loop (a 2 MiB file mapping).
    pub pages: u64,
    /// Loops per process.
    pub loops: u32,
    /// Mean fault interval while touching the mapping, µs (≈ 10 allocs/ms measured).
    pub fault_interval_us: f64,
    /// Coefficient of variation of the interval (0.2 measured).
    pub fault_cv: f64,
    /// Run on a node full of page cache, with direct reclaim (module documentation);
    /// `None`: the published loop, which never runs short of memory.
    pub direct_reclaim: Option<DirectReclaim>,
}

/// The direct-reclaim variant's parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DirectReclaim {
    /// CPU time reclaim spends per page it frees besides the free itself (taking it off
    /// the LRU, checking its references through the rmap, removing it from the page
    /// cache), ns. An assumption, not a measurement: the drain policies are compared at
    /// the same value.
    pub reclaim_ns_per_page: u64,
}

impl DirectReclaim {
    /// 500 ns per page reclaimed.
    pub const DEFAULT: DirectReclaim = DirectReclaim {
        reclaim_ns_per_page: 500,
    };
}

/// What direct reclaim did in a run of the variant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectReclaimStats {
    /// Faults the allocator refused without reclaim, each entering direct reclaim.
    pub stalls: u64,
    /// Reclaim rounds (a batch reclaimed, then a retry).
    pub rounds: u64,
    /// Cache pages reclaimed.
    pub pages_reclaimed: u64,
    /// `drain_all_pages` calls that drained or queued work.
    pub drains: u64,
    /// `drain_all_pages` calls that found another drain running and returned.
    pub drains_skipped: u64,
    /// Workqueue mode: time faulting processes slept waiting for the drain work, ns.
    pub drain_wait_ns: u64,
    /// Pages in the page cache at the end.
    pub cache_pages: u64,
}

impl PageoutParams {
    /// The published shape; `scale` multiplies the loops.
    pub fn scaled(scale: f64) -> PageoutParams {
        PageoutParams {
            pages: 512,
            loops: ((20.0 * scale).round() as u32).max(1),
            fault_interval_us: 100.0,
            fault_cv: 0.2,
            direct_reclaim: None,
        }
    }
}

/// `SWAP_CLUSTER_MAX`: the pages one reclaim round frees.
const SWAP_CLUSTER_MAX: u64 = 32;
/// `MAX_RECLAIM_RETRIES`: rounds in a row that reclaim nothing before the fault fails.
const MAX_RECLAIM_RETRIES: u32 = 16;

/// The allocation a fault tries first: the process's flags without direct reclaim, so the
/// allocator wakes kswapd and retries at the min watermark but neither reclaims nor
/// drains; the workload then reclaims itself, as `__alloc_pages_direct_reclaim` does.
const GFP_NO_DIRECT_RECLAIM: Gfp = Gfp::HIGHUSER_MOVABLE.difference(Gfp::DIRECT_RECLAIM);

/// The retry after a reclaim round: the process's flags, so the core's slow path drains
/// every pageset and retries (`__alloc_pages_direct_reclaim`'s `drain_all_pages`), with
/// `__GFP_NORETRY` so that it returns to the workload's own retry loop
/// (`should_reclaim_retry`, below) instead of giving up the high-atomic reserve.
const GFP_RETRY_AFTER_RECLAIM: Gfp = Gfp::HIGHUSER_MOVABLE.union(Gfp::NORETRY);

/// Where a process of the direct-reclaim variant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading other files until the allocator refuses a page without reclaim.
    Fill,
    /// Faulting the loop's pages.
    Fault,
    /// In direct reclaim for a refused fault: `to_free` pages still to reclaim in this
    /// round, then a retry; `fruitless` rounds in a row found nothing to reclaim
    /// (`no_progress_loops`).
    Reclaim { to_free: u64, fruitless: u32 },
    /// Asleep in the retry's `drain_all_pages` until every CPU given drain work has run it.
    WaitDrain { fruitless: u32 },
}

/// A workqueue-mode drain in progress: who waits for it, since when, and whether every
/// target has run it.
struct PendingDrain {
    requester: u32,
    since_ns: u64,
    work: DrainWork,
    ran: bool,
}

struct Process {
    rng: Rng,
    pages: Vec<Pfn>,
    loops_left: u32,
    freeing: bool,
    /// The work before the next fault is done.
    worked: bool,
    /// The direct-reclaim variant's state.
    phase: Phase,
}

/// The `pageout` workload: one process per CPU.
pub struct Pageout {
    params: PageoutParams,
    procs: Vec<Process>,
    held: u64,
    loops_done: u64,
    /// Direct-reclaim variant: per node, its page cache, oldest first.
    cache: Vec<VecDeque<Pfn>>,
    /// Direct-reclaim variant, workqueue mode: the drain being waited for.
    drain: Option<PendingDrain>,
    reclaim_stats: DirectReclaimStats,
}

impl Pageout {
    /// One process on each of `cpus` CPUs.
    pub fn new(params: PageoutParams, cpus: u32, seed: u64) -> Pageout {
        Pageout {
            procs: (0..cpus)
                .map(|cpu| Process {
                    rng: Rng::new(seed, 0x706f_0000 + cpu as u64),
                    pages: Vec::new(),
                    loops_left: params.loops,
                    freeing: false,
                    worked: false,
                    phase: Phase::Fill,
                })
                .collect(),
            params,
            held: 0,
            loops_done: 0,
            cache: Vec::new(),
            drain: None,
            reclaim_stats: DirectReclaimStats::default(),
        }
    }

    /// Loops completed.
    pub fn loops_done(&self) -> u64 {
        self.loops_done
    }

    /// What direct reclaim did, in the direct-reclaim variant.
    pub fn direct_reclaim_stats(&self) -> Option<DirectReclaimStats> {
        self.params
            .direct_reclaim
            .as_ref()
            .map(|_| DirectReclaimStats {
                cache_pages: self.cache.iter().map(|c| c.len() as u64).sum(),
                ..self.reclaim_stats
            })
    }

    /// One step of the direct-reclaim variant on `cpu`.
    fn step_under_pressure(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        // Workqueue mode: queued drain work runs before the task resumes.
        if sim.allocator().drain_work_pending(cpu) {
            sim.run_drain_work(cpu);
            self.finish_drain(sim, cpu);
            return Ok(Step::Continue);
        }
        let phase = self.procs[cpu as usize].phase;
        match phase {
            Phase::Fill => self.fill(sim, cpu),
            Phase::Fault => self.fault(sim, cpu),
            Phase::Reclaim { to_free, fruitless } => self.reclaim(sim, cpu, to_free, fruitless),
            Phase::WaitDrain { fruitless } => self.resume_after_drain(sim, cpu, fruitless),
        }
    }

    /// Read a page of another file into the page cache, until the allocator refuses.
    fn fill(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        if self.cache.is_empty() {
            self.cache = vec![VecDeque::new(); sim.allocator().topology().nr_nodes()];
        }
        match sim.alloc_touch(cpu, GFP_NO_DIRECT_RECLAIM, Order::ZERO, 64) {
            Ok(pfn) => {
                self.cache_add(sim, pfn);
                self.held += 1;
            }
            Err(SimError::OutOfMemory { .. }) => self.procs[cpu as usize].phase = Phase::Fault,
            Err(e) => return Err(e),
        }
        Ok(Step::Continue)
    }

    fn cache_add(&mut self, sim: &Sim, pfn: Pfn) {
        let node = sim.allocator().find_zone(pfn).map_or(0, |z| z.node()) as usize;
        self.cache[node].push_back(pfn);
    }

    /// The loop of the variant: fault the pages; at the end they stay in the page cache.
    fn fault(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        let p = &self.params;
        let proc = &mut self.procs[cpu as usize];
        if proc.loops_left == 0 {
            return Ok(Step::Done);
        }
        if proc.pages.len() as u64 == p.pages {
            let pages = std::mem::take(&mut proc.pages);
            proc.loops_left -= 1;
            self.loops_done += 1;
            for pfn in pages {
                self.cache_add(sim, pfn);
            }
            return Ok(Step::Continue);
        }
        if !proc.worked {
            let gap = p.fault_interval_us * (1.0 + p.fault_cv * proc.rng.normal()).max(0.1);
            sim.work(cpu, (gap * 1000.0) as u64);
            proc.worked = true;
            return Ok(Step::Continue);
        }
        match sim.alloc_touch(cpu, GFP_NO_DIRECT_RECLAIM, Order::ZERO, 64) {
            Ok(pfn) => self.faulted(cpu, pfn),
            Err(SimError::OutOfMemory { .. }) => {
                self.reclaim_stats.stalls += 1;
                self.reclaim_stats.rounds += 1;
                self.procs[cpu as usize].phase = Phase::Reclaim {
                    to_free: SWAP_CLUSTER_MAX,
                    fruitless: 0,
                };
            }
            Err(e) => return Err(e),
        }
        Ok(Step::Continue)
    }

    fn faulted(&mut self, cpu: u32, pfn: Pfn) {
        let proc = &mut self.procs[cpu as usize];
        proc.pages.push(pfn);
        proc.worked = false;
        proc.phase = Phase::Fault;
        self.held += 1;
    }

    /// Direct reclaim: free the round's pages one per step (each free is a zone-lock
    /// request at its own time), then retry through the core's slow path, which drains
    /// once per round; give up after `MAX_RECLAIM_RETRIES` rounds in a row that found
    /// nothing to reclaim.
    fn reclaim(
        &mut self,
        sim: &mut Sim,
        cpu: u32,
        to_free: u64,
        fruitless: u32,
    ) -> Result<Step, SimError> {
        let node = sim.allocator().topology().cpu_node(cpu).unwrap_or(0) as usize;
        if to_free > 0 {
            let phase = match self.cache[node].pop_front() {
                Some(pfn) => {
                    sim.free(cpu, pfn, Order::ZERO)?;
                    let ns = self
                        .params
                        .direct_reclaim
                        .as_ref()
                        .map_or(0, |d| d.reclaim_ns_per_page);
                    sim.work(cpu, ns);
                    self.held -= 1;
                    self.reclaim_stats.pages_reclaimed += 1;
                    Phase::Reclaim {
                        to_free: to_free - 1,
                        fruitless: 0,
                    }
                }
                // Nothing left on this node to reclaim: retry with what there is.
                None => Phase::Reclaim {
                    to_free: 0,
                    fruitless: fruitless + 1,
                },
            };
            self.procs[cpu as usize].phase = phase;
            return Ok(Step::Continue);
        }
        let calls = sim.drain_all_calls();
        let attempt = sim.alloc_touch_may_wait(cpu, GFP_RETRY_AFTER_RECLAIM, Order::ZERO, 64);
        self.count_drain_alls(sim, calls);
        match attempt {
            Ok(AllocAttempt::Allocated(pfn)) => {
                self.faulted(cpu, pfn);
                Ok(Step::Continue)
            }
            Ok(AllocAttempt::DrainQueued(work)) => {
                Ok(self.wait_for_drain(sim, cpu, work, fruitless))
            }
            Err(SimError::OutOfMemory { .. }) => self.next_round(cpu, fruitless),
            Err(e) => Err(e),
        }
    }

    /// Add the `drain_all_pages` calls made since `before` to the stats.
    fn count_drain_alls(&mut self, sim: &Sim, before: (u64, u64)) {
        let (done, skipped) = sim.drain_all_calls();
        self.reclaim_stats.drains += done - before.0;
        self.reclaim_stats.drains_skipped += skipped - before.1;
    }

    /// The retry failed even after the drain: another round, unless too many in a row
    /// found nothing to reclaim.
    fn next_round(&mut self, cpu: u32, fruitless: u32) -> Result<Step, SimError> {
        if fruitless >= MAX_RECLAIM_RETRIES {
            return Err(SimError::OutOfMemory { cpu, order: 0 });
        }
        self.reclaim_stats.rounds += 1;
        self.procs[cpu as usize].phase = Phase::Reclaim {
            to_free: SWAP_CLUSTER_MAX,
            fruitless,
        };
        Ok(Step::Continue)
    }

    /// The retry's `drain_all_pages(NULL)` queued work (workqueue mode): wake each target,
    /// run this CPU's own work (its kworker runs while the task sleeps in `flush_work`),
    /// and sleep until the last target has run it.
    fn wait_for_drain(&mut self, sim: &mut Sim, cpu: u32, work: DrainWork, fruitless: u32) -> Step {
        let now = sim.now(cpu);
        let targets: Vec<u32> = sim.allocator().drain_work_cpus(&work).collect();
        for target in targets {
            if target != cpu {
                sim.wake(target, now);
            }
        }
        self.drain = Some(PendingDrain {
            requester: cpu,
            since_ns: now,
            work,
            ran: false,
        });
        self.procs[cpu as usize].phase = Phase::WaitDrain { fruitless };
        if sim.allocator().drain_work_pending(cpu) {
            sim.run_drain_work(cpu);
        }
        if self.finish_drain(sim, cpu) {
            return Step::Continue;
        }
        Step::Wait
    }

    /// After `cpu` ran drain work: if every target has, wake the process that waits for
    /// it. Returns whether the drain work is all done.
    fn finish_drain(&mut self, sim: &mut Sim, cpu: u32) -> bool {
        let Some(drain) = &mut self.drain else {
            return false;
        };
        let allocator = sim.allocator();
        if allocator
            .drain_work_cpus(&drain.work)
            .any(|c| allocator.drain_work_pending(c))
        {
            return false;
        }
        drain.ran = true;
        if drain.requester != cpu {
            let now = sim.now(cpu);
            sim.wake(drain.requester, now);
        }
        true
    }

    /// Awake in `WaitDrain`: once every target ran its work, the core retries the
    /// allocation and releases the drain mutex (`__drain_all_pages` after its last
    /// `flush_work`); a wake-up before that sleeps again.
    fn resume_after_drain(
        &mut self,
        sim: &mut Sim,
        cpu: u32,
        fruitless: u32,
    ) -> Result<Step, SimError> {
        let ready = self
            .drain
            .as_ref()
            .is_some_and(|d| d.requester == cpu && d.ran);
        if !ready {
            return Ok(Step::Wait);
        }
        let drain = self.drain.take().expect("checked");
        self.reclaim_stats.drain_wait_ns += sim.now(cpu).saturating_sub(drain.since_ns);
        let attempt =
            sim.alloc_touch_after_drain(cpu, GFP_RETRY_AFTER_RECLAIM, Order::ZERO, 64, drain.work);
        match attempt {
            Ok(AllocAttempt::Allocated(pfn)) => {
                self.faulted(cpu, pfn);
                Ok(Step::Continue)
            }
            Ok(AllocAttempt::DrainQueued(_)) => unreachable!("every target ran its work"),
            Err(SimError::OutOfMemory { .. }) => self.next_round(cpu, fruitless),
            Err(e) => Err(e),
        }
    }
}

impl Workload for Pageout {
    fn start(&mut self, sim: &mut Sim) {
        for cpu in 0..self.procs.len() as u32 {
            sim.wake(cpu, 0);
        }
    }

    fn step(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        if self.params.direct_reclaim.is_some() {
            return self.step_under_pressure(sim, cpu);
        }
        let p = &self.params;
        let proc = &mut self.procs[cpu as usize];
        if proc.loops_left == 0 {
            return Ok(Step::Done);
        }
        if proc.freeing {
            match proc.pages.pop() {
                Some(pfn) => {
                    sim.free(cpu, pfn, Order::ZERO)?;
                    self.held -= 1;
                }
                None => {
                    proc.freeing = false;
                    proc.loops_left -= 1;
                    self.loops_done += 1;
                }
            }
            return Ok(Step::Continue);
        }
        if proc.pages.len() as u64 == p.pages {
            proc.freeing = true;
            return Ok(Step::Continue);
        }
        if !proc.worked {
            // The work before a fault is a step of its own, so that the fault's zone-lock
            // request (if any) is made at its own virtual time.
            let gap = p.fault_interval_us * (1.0 + p.fault_cv * proc.rng.normal()).max(0.1);
            sim.work(cpu, (gap * 1000.0) as u64);
            proc.worked = true;
            return Ok(Step::Continue);
        }
        proc.worked = false;
        let pfn = sim.alloc_touch(cpu, Gfp::HIGHUSER_MOVABLE, Order::ZERO, 64)?;
        self.procs[cpu as usize].pages.push(pfn);
        self.held += 1;
        Ok(Step::Continue)
    }

    fn held_pages(&self) -> u64 {
        self.held
    }

    fn progress(&self, _sim: &Sim) -> f64 {
        self.loops_done as f64 / (self.procs.len() as u64 * self.params.loops as u64).max(1) as f64
    }

    fn work_done(&self) -> u64 {
        self.loops_done
    }

    fn end_ns(&self) -> Option<u64> {
        None
    }
}
