//! kbuild: 8 × `make -j28` on 224 CPUs as process churn (`docs/reference/workloads.md` §2.1).
//!
//! Each CPU is a job slot; the slots take processes from one queue (make's job server)
//! of `jobs_per_cpu × CPUs` processes, drawn up front so that every policy runs the same
//! processes, until the queue is empty; the build time is when the last one exits. A process
//! allocates its PGD (order 1 with PTI) and 5–30 page-table pages at start, then faults
//! order-0 anonymous pages in bursts while it computes, freeing a few mid-life (an
//! unmap's pages at random places of its address space); at exit it frees its whole
//! address space in one run with no allocation, then the page tables, then
//! the slabs of its VMAs that emptied (`exit_mmap`: `unmap_vmas`, `free_pgtables`, then
//! `remove_vma` on each), blocks of the order SLUB gives `vm_area_struct` on the
//! machine's CPU count ([`slab_order`]: order 1 from 32 CPUs). Its order-1 PGD stays
//! until the CPU next switches to a process: an exited task's `mm` is held lazily as the
//! CPU's `active_mm` while it idles, and `finish_task_switch` drops it (`__mmdrop →
//! pgd_free`) when the next process runs, so the PGD is that process's first free. A
//! share of frees runs on another CPU of the socket (RCU-freed page tables, migrated
//! tasks). The next process on the slot starts after a short gap and reuses what the
//! last one freed. An exit's and an unmap's order-0 pages are freed as Linux frees them,
//! through `free_unref_page_list`: up to 32 a step, as many as go onto the pageset with
//! no chance of a drain ([`Sim::free_quiet`]); the free that may drain is a step of its
//! own.
//!
//! Kernel blocks of orders 1–3 (slab pages) are rare and freed by RCU callbacks: a block
//! the process lets go of (at a random point of its life, or at its exit) is freed one
//! grace period later on the same CPU, in softirq, between whatever that CPU runs then.
//! Measured on a kernel build (`KbuildParams::kernel_blocks_per_fault`): 82 % of its
//! order-1–3 pageset frees ran in softirq, most of the rest right after their
//! allocation.
//!
//! Two high-order frees in a row on a pageset (patch 1's `free_high` condition) are then
//! mostly an exit's last VMA slabs followed, on a CPU that did nothing between, by the
//! PGD freed when the next process starts (docs/EXPERIMENTS.md, "What puts two
//! high-order frees together").

use std::collections::VecDeque;

use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use serde::Serialize;

use super::slab_order::{min_objects, slab_order};
use crate::engine::{Sim, SimError, Step, Workload};
use crate::prefetch::prefetch;
use crate::rng::{Geometric, Rng};

/// kbuild's parameters. Defaults are the published run's scale; sources in `docs/reference/workloads.md` §2.1.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KbuildParams {
    /// Processes in the build per CPU (the build's size). A kernel build runs hundreds
    /// per CPU, and the published test repeats it for minutes, so nearly all of what it
    /// measured is the build's middle: every pageset filled long ago, the free memory
    /// fragmented. 48 on one socket (5,376 processes) measures about 3.2 virtual seconds
    /// of the middle ([`KbuildParams::steady_window`]), past the start-up transient,
    /// which lasts about three (docs/EXPERIMENTS.md, "kbuild at the demo's scale is a
    /// transient"). Near the zone lock's saturation one run's contention comes in bursts,
    /// so a run's figure is a draw: over twelve seeds its standard deviation was 2.49
    /// points at 48 per CPU and 1.73 at 96 (6.0 s measured), the 1/√2 of a middle twice
    /// as long (docs/EXPERIMENTS.md, "kbuild's one-run noise"). 96 is what the demo
    /// should build and cannot yet: on a 2-GHz 2-core machine its six kbuild runs alone
    /// take 192 s of CPU, 96 s of the two minutes (docs/EXPERIMENTS.md, "Where it
    /// stands"); `mmkit sim --jobs-per-cpu 96` builds it. 32 measured the transient's
    /// tail, 16 mostly the start-up.
    pub jobs_per_cpu: u32,
    /// Share of processes that are long compiler runs (cc1); the rest are helpers.
    pub cc1_share: f64,
    /// Median lifetime of a helper (gcc driver, as, ld …): 20–60 ms measured, assumption.
    pub helper_median_ms: f64,
    /// Median lifetime of a cc1 on kernel sources: 0.2–2 s, assumption.
    pub cc1_median_ms: f64,
    /// Log-normal shape of lifetimes.
    pub lifetime_sigma: f64,
    /// Page faults per second of a running process (measured: 36k allocs/s per busy CPU).
    pub faults_per_s: f64,
    /// Mean faults per burst (allocations come in bursts, CV 1.4–2.3 per ms).
    pub burst_mean: f64,
    /// Page-table pages at process start (5–30).
    pub page_tables: (u64, u64),
    /// PGD order: 1 with page-table isolation (the published kbuild machine), 0 without.
    pub pgd_order: u8,
    /// Share of a process's pages freed while it runs (5–10 %). They go in bursts
    /// (`munmap`, a large `realloc`, a shrinking heap), not one page at a time between
    /// faults: a free halves the pageset's `alloc_factor` (patch 5), and a burst of
    /// faults with no free between lets it grow.
    pub midlife_free_share: f64,
    /// Mean pages of one mid-life free burst (geometric): a 256 KiB `munmap`.
    pub unmap_mean_pages: f64,
    /// Kernel blocks of orders 1–3 per page fault (slab pages), by order: measured as the
    /// order-1–3 pageset frees of a kernel build, 11 order-1, 8 order-2 and 78 order-3
    /// among 9,802,005 faults (Linux 6.1's defconfig, `make -j2` of mm, kernel, fs, lib
    /// and net for 30 s each on the 2-CPU measuring VM, Linux 6.18, the whole machine
    /// recorded but DAMON's `kdamond`; 82 % in softirq, 16 % freed in the task right
    /// after their allocation): `sh crates/trace/workloads/kernel-build.sh DIR`, which
    /// ends with `mmkit trace high-order --without-task kdamond`. The figure before,
    /// 9 per 1,820,099 faults, was a compile-like build's (`compile.sh`) recorded
    /// command-only, which misses the RCU callbacks that ran while its CPU ran another
    /// task or idled. The build's high-order allocations were as rare (reclaimable slab).
    /// Each block is let go of at a random point of the process's later life (or at its
    /// exit) and freed [`KbuildParams::rcu_grace_ms`] later.
    pub kernel_blocks_per_fault: [f64; 3],
    /// From letting go of a kernel block to its RCU callback freeing it, in ms: one tick of
    /// the measuring VM's `CONFIG_HZ=250`, the shortest a grace period can end (a tick
    /// after every CPU passed a quiescent state). The recordings cannot show the delay
    /// (no RCU tracepoints without `CONFIG_RCU_TRACE`); what they show is that the free
    /// runs in softirq, between the work of whatever task the CPU runs then.
    pub rcu_grace_ms: f64,
    /// Share of frees done on another CPU of the socket (measured 7.1 %).
    pub cross_cpu_free_share: f64,
    /// Shares of processes whose exit frees 1, 2, 3 and 4 emptied VMA slabs after its
    /// page tables (measured where those slabs are of order 1, so that the recording
    /// tells them from the exit's pages; the model frees as many at every CPU count, of
    /// the order the machine gives them). Each process allocates its slabs at its start.
    pub exit_slab_blocks: [f64; 4],
    /// `vm_area_struct`'s slab object size (`/proc/slabinfo`'s `objsize`: 152 bytes in
    /// Debian's 6.1), which with the machine's CPU count gives its slabs' order
    /// ([`slab_order`]).
    pub vma_object_bytes: u32,
    /// The objects SLUB wants in a slab, as Linux's `slub_min_objects=` boot option sets
    /// it; `None`: Linux's default for the machine's CPUs ([`min_objects`]). A guest
    /// booted with `slub_min_objects=36` has the slab orders of the published 224-CPU
    /// machine, and this runs the model as that guest.
    pub slub_min_objects: Option<u32>,
    /// Mean idle gap between processes on a slot (fork/exec, make's scheduling), in µs.
    pub exit_gap_us: f64,
    /// The page faults of each process of a measured build, run in this order (and again
    /// from the first when the build has more processes) instead of drawing log-normal
    /// lifetimes; empty: the model's lifetimes. A process then lives `faults /
    /// faults_per_s` seconds of compute.
    pub measured_faults: Vec<u64>,
    /// The warm-up at the start, in ms, which the results leave out (0: the whole build
    /// is measured, as the published build time is). A build measured per process on a
    /// machine whose pagesets were already warm runs its processes twice and leaves the
    /// first pass out.
    pub warmup_ms: f64,
    /// Measure the build's middle only (the default, as the published test's long run
    /// was nearly all middle): the window opens once half the processes have exited
    /// (the pagesets have filled and the free memory has fragmented) and closes when
    /// the last one starts (the tail of long compilers on a few CPUs begins), and the
    /// build time is the window's pace: its length per process that exited in it, times
    /// the build's processes. `false` measures the whole build, start-up and tail.
    pub steady_window: bool,
}

impl Default for KbuildParams {
    fn default() -> KbuildParams {
        KbuildParams {
            jobs_per_cpu: 48,
            cc1_share: 0.25,
            helper_median_ms: 30.0,
            cc1_median_ms: 300.0,
            lifetime_sigma: 0.7,
            faults_per_s: 36_000.0,
            burst_mean: 8.0,
            page_tables: (5, 30),
            pgd_order: 1,
            midlife_free_share: 0.07,
            unmap_mean_pages: 64.0,
            kernel_blocks_per_fault: [11.0 / 9_802_005.0, 8.0 / 9_802_005.0, 78.0 / 9_802_005.0],
            rcu_grace_ms: 4.0,
            cross_cpu_free_share: 0.07,
            exit_slab_blocks: EXIT_SLAB_BLOCKS,
            vma_object_bytes: 152,
            slub_min_objects: None,
            exit_gap_us: 200.0,
            measured_faults: Vec::new(),
            warmup_ms: 0.0,
            steady_window: true,
        }
    }
}

impl KbuildParams {
    /// Scaled: `scale` < 1 shortens the lifetimes (the job count stays, so the window
    /// still opens past the start-up), `scale` > 1 multiplies the job count.
    pub fn scaled(scale: f64) -> KbuildParams {
        let base = KbuildParams::default();
        let life = scale.min(1.0);
        KbuildParams {
            jobs_per_cpu: ((base.jobs_per_cpu as f64 * scale.max(1.0)).round() as u32).max(1),
            helper_median_ms: base.helper_median_ms * life,
            cc1_median_ms: base.cc1_median_ms * life,
            ..base
        }
    }
}

/// [`KbuildParams::exit_slab_blocks`]' default, measured: of the 914 processes of a
/// compile-like build on a 16-CPU guest booted with `slub_min_objects=36` (the published
/// machine's slab orders; Debian 6.1.0-48 under QEMU, the whole guest recorded), 13, 4
/// and 2 freed 1, 2 and 3 blocks not their own at their exit's end, in task context
/// (`WHOLE=1 APPEND=slub_min_objects=36 KVM=0 sh crates/trace/workloads/many-cpu-vm.sh
/// KERNEL 16 8 1 OUT`, then `mmkit trace high-order OUT`, rows "processes freeing 1
/// other block at exit" on; docs/EXPERIMENTS.md, "The published machine's slab orders").
const EXIT_SLAB_BLOCKS: [f64; 4] = [13.0 / 914.0, 4.0 / 914.0, 2.0 / 914.0, 0.0];

#[derive(Clone, Copy, Debug)]
enum Phase {
    Idle(u64),
    Start,
    PageTables(u64),
    Run,
    Exit,
    ExitTables,
    ExitSlabs,
    Finished,
}

struct Slot {
    /// The running process's random stream.
    rng: Rng,
    phase: Phase,
    pages: Vec<Pfn>,
    tables: Vec<Pfn>,
    pgd: Option<Pfn>,
    to_fault: u64,
    burst_left: u64,
    /// Pages left to free in the current mid-life free burst.
    unmap_left: u64,
    /// Kernel blocks of orders 1–3 the process holds, with the fault count left at which
    /// each is let go of.
    kernel: Vec<(Pfn, Order, u64)>,
    remote: Vec<(Pfn, Order)>,
    /// Kernel blocks waiting for their RCU callback on this CPU, with the time it runs;
    /// in that order, since this CPU's clock only moves forward.
    rcu: VecDeque<(u64, Pfn, Order)>,
    /// The last process's PGD, held with its `mm` as this CPU's lazy `active_mm` until
    /// the next process runs here.
    lazy_pgd: Option<Pfn>,
    /// VMA slabs the starting process has yet to allocate.
    slabs_to_alloc: u32,
    /// VMA slabs the process's exit will have emptied, freed after its page tables.
    slabs: Vec<Pfn>,
}

/// The kbuild workload.
pub struct Kbuild {
    params: KbuildParams,
    /// Faults per burst: `params.burst_mean`'s distribution, drawn once per burst.
    burst: Geometric,
    /// Pages per mid-life free burst.
    unmap: Geometric,
    slots: Vec<Slot>,
    /// A fault's draw at or above this picks no kernel block: twice the shares' sum,
    /// which the walk's rounded subtractions cannot reach (infinite if a share is
    /// negative, so every draw walks).
    kernel_draws_below: f64,
    cpus_per_socket: u32,
    /// The order of a VMA slab on this machine.
    vma_slab_order: Order,
    held: u64,
    seed: u64,
    jobs_total: u64,
    jobs_started: u64,
    jobs_done: u64,
}

const ANON: Gfp = Gfp::HIGHUSER_MOVABLE;
const KERNEL: Gfp = Gfp::KERNEL;

impl Kbuild {
    /// When the measurement window opens.
    pub fn warmup_ns(&self) -> u64 {
        (self.params.warmup_ms * 1e6) as u64
    }

    /// From letting go of a kernel block to its free.
    fn rcu_grace_ns(&self) -> u64 {
        (self.params.rcu_grace_ms * 1e6) as u64
    }

    /// Processes that have exited.
    pub fn jobs_done(&self) -> u64 {
        self.jobs_done
    }

    /// Processes in the build.
    pub fn jobs_total(&self) -> u64 {
        self.jobs_total
    }

    /// Whether the build's middle is measured ([`KbuildParams::steady_window`]).
    pub fn steady_window(&self) -> bool {
        self.params.steady_window
    }

    /// kbuild on `cpus` CPUs, `cpus_per_socket` to a socket.
    pub fn new(params: KbuildParams, cpus: u32, cpus_per_socket: u32, seed: u64) -> Kbuild {
        let slots = (0..cpus)
            .map(|cpu| Slot {
                rng: Rng::new(seed, 0x6b62_0000 + cpu as u64),
                phase: Phase::Idle(0),
                pages: Vec::new(),
                tables: Vec::new(),
                pgd: None,
                to_fault: 0,
                burst_left: 0,
                unmap_left: 0,
                kernel: Vec::new(),
                remote: Vec::new(),
                rcu: VecDeque::new(),
                lazy_pgd: None,
                slabs_to_alloc: 0,
                slabs: Vec::new(),
            })
            .collect();
        // The one-socket run of a two-socket machine sees its own CPUs only: 32 objects
        // a slab at 112 CPUs for the whole machine's 36, the same order for a VMA.
        let objects = params.slub_min_objects.unwrap_or(min_objects(cpus));
        let vma_slab_order = slab_order(params.vma_object_bytes, objects)
            .and_then(Order::new)
            .expect("a VMA's slab fits a block");
        let kernel_draws_below = kernel_draws_below(&params.kernel_blocks_per_fault);
        Kbuild {
            kernel_draws_below,
            jobs_total: params.jobs_per_cpu as u64 * cpus as u64,
            burst: Geometric::new(params.burst_mean),
            unmap: Geometric::new(params.unmap_mean_pages),
            params,
            slots,
            cpus_per_socket,
            vma_slab_order,
            held: 0,
            seed,
            jobs_started: 0,
            jobs_done: 0,
        }
    }

    /// Allocate and touch a block the process holds from now on. Inlined (always) with
    /// [`Kbuild::run_step`]: left to itself the compiler makes it a call once the step
    /// around it is inlined.
    #[inline(always)]
    fn alloc(&mut self, sim: &mut Sim, cpu: u32, gfp: Gfp, order: Order) -> Result<Pfn, SimError> {
        let pfn = sim.alloc_touch(cpu, gfp, order, 64)?;
        self.held += order.pages();
        Ok(pfn)
    }

    /// Free here, or hand the block to another CPU of the socket. Inlined (always: the
    /// compiler kept it a call) into the steps that free: one call fewer per free.
    #[inline(always)]
    fn free(&mut self, sim: &mut Sim, cpu: u32, pfn: Pfn, order: Order) -> Result<(), SimError> {
        let share = self.params.cross_cpu_free_share;
        let slot = &mut self.slots[cpu as usize];
        if let Some(other) = remote_cpu(&mut slot.rng, share, self.cpus_per_socket, cpu) {
            self.slots[other as usize].remote.push((pfn, order));
            sim.wake(other, sim.now(cpu));
            return Ok(());
        }
        sim.free(cpu, pfn, order)?;
        self.held -= order.pages();
        Ok(())
    }

    /// Free a PGD on `cpu`.
    fn free_pgd(&mut self, sim: &mut Sim, cpu: u32, pgd: Pfn) -> Result<(), SimError> {
        let order = Order::new(self.params.pgd_order).expect("PGD order");
        sim.free(cpu, pgd, order)?;
        self.held -= order.pages();
        Ok(())
    }

    fn start_job(&mut self, cpu: u32) {
        let p = &self.params;
        let slot = &mut self.slots[cpu as usize];
        let job = self.jobs_started;
        slot.rng = Rng::new(self.seed, 0x6b62_1000_0000 + job);
        self.jobs_started += 1;
        slot.to_fault = match p.measured_faults.len() as u64 {
            0 => {
                let median = if slot.rng.chance(p.cc1_share) {
                    p.cc1_median_ms
                } else {
                    p.helper_median_ms
                };
                let life_s = slot.rng.lognormal(median, p.lifetime_sigma) / 1000.0;
                ((life_s * p.faults_per_s).round() as u64).max(1)
            }
            n => p.measured_faults[(job % n) as usize].max(1),
        };
        slot.burst_left = 0;
        slot.unmap_left = 0;
        slot.slabs_to_alloc = exit_slabs(&p.exit_slab_blocks, slot.rng.unit());
        slot.phase = Phase::Start;
    }
}

/// A free's draws from `rng`: the other CPU of `cpu`'s socket that frees the block (a
/// share `share` of frees), or `None` to free it on `cpu`.
#[inline(always)]
fn remote_cpu(rng: &mut Rng, share: f64, per_socket: u32, cpu: u32) -> Option<u32> {
    if per_socket <= 1 || !rng.chance(share) {
        return None;
    }
    let first = cpu / per_socket * per_socket;
    Some(first + (cpu - first + 1 + rng.below(per_socket as u64 - 1) as u32) % per_socket)
}

/// Which of `shares` a draw `x` of the unit interval falls in, each taking its share
/// in turn from 0; `None` past them all.
fn share_of(shares: &[f64], mut x: f64) -> Option<usize> {
    for (i, &share) in shares.iter().enumerate() {
        if x < share {
            return Some(i);
        }
        x -= share;
    }
    None
}

/// How many VMA slabs (1–4) an exit whose draw is `x` empties.
fn exit_slabs(shares: &[f64; 4], x: f64) -> u32 {
    share_of(shares, x).map_or(0, |i| i as u32 + 1)
}

/// The order (1–3) of the kernel block a fault whose draw is `x` allocates, if any.
fn kernel_order(shares: &[f64; 3], x: f64) -> Option<u8> {
    share_of(shares, x).map(|i| i as u8 + 1)
}

/// A bound at or above which no draw gets a kernel block from [`kernel_order`]: twice
/// the shares' sum. The walk's subtractions are rounded, but monotonely, so a draw of
/// at least `2·S` keeps at least `S` above each share it passes. Infinite (every draw
/// walks) if a share is negative.
fn kernel_draws_below(shares: &[f64; 3]) -> f64 {
    if shares.iter().all(|&share| share >= 0.0) {
        2.0 * shares.iter().sum::<f64>()
    } else {
        f64::INFINITY
    }
}

/// Most pages an exit frees in one call ([`Kbuild::free_exit_pages`]): Linux's
/// `free_unref_page_list` relocks the pageset every `SWAP_CLUSTER_MAX` (32) pages.
const QUIET_BATCH: usize = 32;

/// Blocks of an exit burst whose descriptors are read together ([`Sim::prefetch`]).
const PREFETCH_BATCH: usize = 8;

/// Page numbers to a cache line of a page stack.
const PFNS_PER_LINE: usize = 64 / std::mem::size_of::<Pfn>();

/// Push a fault's page on its process's page stack, and when a line of the stack fills,
/// ask for the one after the next. A push to a line not in cache is a store that waits
/// for its line, and the pageset lock's locked instruction (the next allocation's or
/// free's, of whichever CPU steps next) waits for every store before it: a quarter of
/// `Sim::alloc_touch`'s `perf` samples fell just after that instruction, half as many
/// with the line asked for. The 112 stacks together are far larger than the host's
/// caches, and a stack's lines come eight of its process's faults apart, so each is
/// asked for a line's faults early (docs/EXPERIMENTS.md, "Speed").
#[inline(always)]
fn push_page(pages: &mut Vec<Pfn>, pfn: Pfn) {
    pages.push(pfn);
    if pages.len() % PFNS_PER_LINE == 0 {
        if let Some(ahead) = pages.spare_capacity_mut().get(PFNS_PER_LINE) {
            prefetch(ahead);
        }
    }
}

/// Ask for the stack lines holding `pfns`, which a later call reads (a line of
/// [`PFNS_PER_LINE`] numbers each, and the last number's too, as the slice need not
/// start on a line).
fn prefetch_stack(pfns: &[Pfn]) {
    for pfn in pfns.iter().step_by(PFNS_PER_LINE).chain(pfns.last()) {
        prefetch(pfn);
    }
}

/// An exit burst frees `stack` from the top. Every [`PREFETCH_BATCH`] frees, read the
/// blocks of the batch after the next one: the loads are independent, so their misses are
/// in flight together, and the batch between gives them time to land.
fn prefetch_ahead(sim: &Sim, stack: &[Pfn]) {
    let len = stack.len();
    if len % PREFETCH_BATCH == 0 && len >= PREFETCH_BATCH {
        sim.prefetch(&stack[len.saturating_sub(2 * PREFETCH_BATCH)..len - PREFETCH_BATCH]);
    }
}

impl Kbuild {
    /// An exit's next pages, from the top of the page stack, whose first is `top`: as
    /// many as go onto `cpu`'s pageset with no chance of a drain, in one call
    /// ([`Sim::free_quiet`]: Linux's `free_unref_page_list`, 32 at a time), each drawn as
    /// [`Self::free`] draws it (another CPU's share handed over), or, when the next free
    /// may drain, that one alone.
    fn free_exit_pages(&mut self, sim: &mut Sim, cpu: u32, top: Pfn) -> Result<(), SimError> {
        let (room, span) = sim.quiet_frees(cpu, top);
        if room == 0 {
            let pages = &mut self.slots[cpu as usize].pages;
            pages.pop();
            prefetch_ahead(sim, pages);
            return self.free(sim, cpu, top, Order::ZERO);
        }
        self.free_batch(sim, cpu, room, false, |slot| {
            let &pfn = slot.pages.last()?;
            span.contains(&pfn.0).then(|| {
                slot.pages.pop();
                pfn
            })
        })?;
        // The next two calls' pages: their descriptors and stamps in flight meanwhile, the
        // second call's a whole call early. The next call's were asked for a call ago
        // (not for an exit's first), but asking again paid: asking only for the second
        // call's, and for the first two as the exit began, ran slower (docs/EXPERIMENTS.md,
        // "Speed"). Then the stack lines of the call after those, which the next call's
        // read-ahead reads: lines not read since their faults.
        let pages = &self.slots[cpu as usize].pages;
        let after = pages.len().saturating_sub(2 * QUIET_BATCH);
        sim.prefetch(&pages[after..]);
        prefetch_stack(&pages[after.saturating_sub(QUIET_BATCH)..after]);
        Ok(())
    }

    /// A mid-life unmap's next pages, drawn at random from the process's page stack: as
    /// many as go onto `cpu`'s pageset with no chance of a drain, at most 32, in one call
    /// ([`Sim::free_quiet`]), each drawn as [`Self::free`] draws it (another CPU's share
    /// handed over); or, when the next free may drain, that one alone. Linux frees an
    /// unmap's pages as it frees an exit's (`zap_pte_range` gathers them,
    /// `tlb_finish_mmu` → `release_pages` → `free_unref_page_list`, 32 to a pageset
    /// lock hold).
    fn free_unmapped_pages(&mut self, sim: &mut Sim, cpu: u32) -> Result<(), SimError> {
        let slot = &mut self.slots[cpu as usize];
        // The page the next draw picks, to ask how many go onto the pageset quietly.
        let first = slot.pages[slot.rng.clone().below(slot.pages.len() as u64) as usize];
        let (room, span) = sim.quiet_frees(cpu, first);
        if room == 0 {
            slot.unmap_left -= 1;
            let index = slot.rng.below(slot.pages.len() as u64) as usize;
            let old = slot.pages.swap_remove(index);
            let freed = self.free(sim, cpu, old, Order::ZERO);
            self.read_ahead_unmap(sim, cpu);
            return freed;
        }
        self.free_batch(sim, cpu, room, true, |slot| {
            if slot.unmap_left == 0 {
                return None;
            }
            let index = slot.rng.below(slot.pages.len() as u64) as usize;
            let pfn = slot.pages[index];
            // Another zone's page (the first draw is in the span) ends the batch: the next
            // step draws again.
            span.contains(&pfn.0).then(|| {
                slot.pages.swap_remove(index);
                slot.unmap_left -= 1;
                pfn
            })
        })?;
        self.read_ahead_unmap_slots(cpu);
        Ok(())
    }

    /// Ask for the stack slots a mid-life unmap's next batch draws its pages from: each
    /// draw reads a slot at a random place of the stack, a line not read since its
    /// fault, and nothing else in the step overlaps those loads. The draws are peeked at
    /// on a copy of the random stream as [`Self::free_batch`] will make them (the index,
    /// then the other-CPU draw), so the run draws exactly as before; a batch that ends
    /// sooner, or a draw that comes first from elsewhere, only wastes hints. (Reading the
    /// slots a batch later, to ask for their pages' descriptors too, gained nothing
    /// more: docs/EXPERIMENTS.md, "Speed".)
    fn read_ahead_unmap_slots(&self, cpu: u32) {
        let slot = &self.slots[cpu as usize];
        let share = self.params.cross_cpu_free_share;
        let mut peek = slot.rng.clone();
        let len = slot.pages.len();
        let draws = slot.unmap_left.min(QUIET_BATCH as u64) as usize;
        for draw in 0..draws.min(len) {
            prefetch(&slot.pages[peek.below((len - draw) as u64) as usize]);
            let _ = remote_cpu(&mut peek, share, self.cpus_per_socket, cpu);
        }
    }

    /// Free the pages `next` takes off `cpu`'s slot, one at a time, in one quiet batch
    /// ([`Sim::free_quiet`]) of at most `room` (and 32) pages freed here: each drawn as
    /// [`Self::free`] draws it, another CPU's share handed over (which takes none of the
    /// room). `next` ends the batch early by returning `None`. With `read_ahead`, the
    /// batch's descriptors and stamps are asked for together before the frees need them
    /// (an unmap's, at random places; an exit's were asked for a call ahead).
    #[inline(always)]
    fn free_batch(
        &mut self,
        sim: &mut Sim,
        cpu: u32,
        room: usize,
        read_ahead: bool,
        mut next: impl FnMut(&mut Slot) -> Option<Pfn>,
    ) -> Result<(), SimError> {
        let share = self.params.cross_cpu_free_share;
        let mut batch = [Pfn(0); QUIET_BATCH];
        let mut local = 0;
        while local < room.min(QUIET_BATCH) {
            let slot = &mut self.slots[cpu as usize];
            let Some(pfn) = next(slot) else {
                break;
            };
            match remote_cpu(&mut slot.rng, share, self.cpus_per_socket, cpu) {
                Some(other) => {
                    self.slots[other as usize].remote.push((pfn, Order::ZERO));
                    sim.wake(other, sim.now(cpu));
                }
                None => {
                    batch[local] = pfn;
                    local += 1;
                }
            }
        }
        if read_ahead {
            sim.prefetch(&batch[..local]);
        }
        sim.free_quiet(cpu, &batch[..local])?;
        self.held -= local as u64;
        Ok(())
    }

    /// A mid-life unmap frees pages at random places of the process's page stack: two
    /// misses a page (its slot in the stack, then its descriptor) that nothing else
    /// overlaps. The burst's next draws can be known now, since the random stream as it
    /// stands after this free is the one the next steps draw from (unless an RCU
    /// callback's free draws first, which only wastes the hint). Peek at them on a copy,
    /// so the run draws exactly as before: ask for the descriptor of the next page, whose
    /// slot the step before asked for, and for the slot of the page after it.
    #[inline(always)]
    fn read_ahead_unmap(&self, sim: &Sim, cpu: u32) {
        let slot = &self.slots[cpu as usize];
        if slot.unmap_left == 0 {
            return;
        }
        let mut peek = slot.rng.clone();
        let len = slot.pages.len();
        let next = peek.below(len as u64) as usize;
        sim.prefetch(std::slice::from_ref(&slot.pages[next]));
        if slot.unmap_left < 2 {
            return;
        }
        // The free's draws for the next page, then the draw of the page after it, an
        // index into the stack once `swap_remove(next)` has moved its last page to `next`.
        let share = self.params.cross_cpu_free_share;
        let _ = remote_cpu(&mut peek, share, self.cpus_per_socket, cpu);
        let after = peek.below(len as u64 - 1) as usize;
        prefetch(&slot.pages[if after == next { len - 1 } else { after }]);
    }
}

impl Workload for Kbuild {
    fn start(&mut self, sim: &mut Sim) {
        for cpu in 0..self.slots.len() as u32 {
            sim.wake(cpu, 0);
        }
    }

    /// Inlined (always) into the engine's step loop, which is generic over the workload
    /// so that it can be: as a call, its entry and exit (six registers saved and restored)
    /// and its result, a `Result<Step, SimError>` returned through memory, cost ≈ 25
    /// instructions a step.
    #[inline(always)]
    fn step(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        let c = cpu as usize;
        if let Some((pfn, order)) = self.slots[c].remote.pop() {
            sim.free(cpu, pfn, order)?;
            self.held -= order.pages();
            return Ok(Step::Continue);
        }
        let now = sim.now(cpu);
        let finished = matches!(self.slots[c].phase, Phase::Finished);
        // A due RCU callback runs first; after the build, the last ones run at once.
        if let Some(&(due, pfn, order)) = self.slots[c].rcu.front() {
            if due <= now || finished {
                self.slots[c].rcu.pop_front();
                sim.free(cpu, pfn, order)?;
                self.held -= order.pages();
                return Ok(Step::Continue);
            }
        }
        let rcu_due = self.slots[c].rcu.front().map_or(u64::MAX, |r| r.0);
        match self.slots[c].phase {
            Phase::Idle(until) if now < until => return Ok(Step::SleepUntil(until.min(rcu_due))),
            Phase::Idle(_) if self.jobs_started == self.jobs_total => {
                // No process runs here again: the last one's PGD, which Linux frees
                // whenever this CPU next runs one, is freed now so that every page the
                // build took comes back.
                match self.slots[c].lazy_pgd.take() {
                    Some(pgd) => self.free_pgd(sim, cpu, pgd)?,
                    None => self.slots[c].phase = Phase::Finished,
                }
            }
            Phase::Idle(_) => self.start_job(cpu),
            // The switch to the new process drops the last one's `mm`.
            Phase::Start if self.slots[c].lazy_pgd.is_some() => {
                let pgd = self.slots[c].lazy_pgd.take().expect("checked");
                self.free_pgd(sim, cpu, pgd)?;
            }
            Phase::Start if self.slots[c].slabs_to_alloc > 0 => {
                let pfn = self.alloc(sim, cpu, KERNEL, self.vma_slab_order)?;
                let slot = &mut self.slots[c];
                slot.slabs.push(pfn);
                slot.slabs_to_alloc -= 1;
            }
            Phase::Start => {
                let order = Order::new(self.params.pgd_order).expect("PGD order");
                let pgd = self.alloc(sim, cpu, KERNEL, order)?;
                let slot = &mut self.slots[c];
                slot.pgd = Some(pgd);
                let (lo, hi) = self.params.page_tables;
                slot.phase = Phase::PageTables(slot.rng.range(lo, hi));
            }
            Phase::PageTables(0) => self.slots[c].phase = Phase::Run,
            Phase::PageTables(left) => {
                let pfn = self.alloc(sim, cpu, KERNEL, Order::ZERO)?;
                let slot = &mut self.slots[c];
                slot.tables.push(pfn);
                slot.phase = Phase::PageTables(left - 1);
            }
            Phase::Run => self.run_step(sim, cpu)?,
            Phase::Exit if !self.slots[c].kernel.is_empty() => {
                let due = now + self.rcu_grace_ns();
                let slot = &mut self.slots[c];
                slot.rcu.extend(
                    slot.kernel
                        .drain(..)
                        .map(|(pfn, order, _)| (due, pfn, order)),
                );
            }
            Phase::Exit => match self.slots[c].pages.last() {
                Some(&pfn) => self.free_exit_pages(sim, cpu, pfn)?,
                None => self.slots[c].phase = Phase::ExitTables,
            },
            Phase::ExitTables => match self.slots[c].tables.pop() {
                Some(pfn) => {
                    prefetch_ahead(sim, &self.slots[c].tables);
                    self.free(sim, cpu, pfn, Order::ZERO)?
                }
                None => self.slots[c].phase = Phase::ExitSlabs,
            },
            Phase::ExitSlabs => match self.slots[c].slabs.pop() {
                Some(pfn) => {
                    sim.free(cpu, pfn, self.vma_slab_order)?;
                    self.held -= self.vma_slab_order.pages();
                }
                None => {
                    let slot = &mut self.slots[c];
                    slot.lazy_pgd = Some(slot.pgd.take().expect("a running process has a PGD"));
                    self.jobs_done += 1;
                    let gap_ns = (slot.rng.exp(self.params.exit_gap_us) * 1000.0) as u64;
                    slot.phase = Phase::Idle(now + gap_ns);
                }
            },
            Phase::Finished => return Ok(Step::Done),
        }
        Ok(Step::Continue)
    }

    fn held_pages(&self) -> u64 {
        self.held
    }

    fn progress(&self, _sim: &Sim) -> f64 {
        self.jobs_done as f64 / self.jobs_total.max(1) as f64
    }

    fn work_done(&self) -> u64 {
        self.jobs_done
    }

    fn end_ns(&self) -> Option<u64> {
        None
    }

    fn window_may_open(&self) -> bool {
        !self.params.steady_window || 2 * self.jobs_done >= self.jobs_total
    }

    fn window_closed(&self) -> bool {
        self.params.steady_window && self.jobs_started == self.jobs_total
    }
}

impl Kbuild {
    /// A running process's compute phase, before its next burst of faults (or its exit,
    /// once it has faulted all it will). Out of line (never inlined): it runs once a
    /// burst, and inlined into the engine's step loop its floating-point constants were
    /// kept in registers across the loop, reloaded after every call the step makes
    /// (callgrind at `--scale 0.1`: 0.3 % fewer instructions out of line, about two a
    /// step).
    #[inline(never)]
    fn start_burst(&mut self, sim: &mut Sim, cpu: u32) {
        let p = &self.params;
        let slot = &mut self.slots[cpu as usize];
        if slot.to_fault == 0 {
            slot.phase = Phase::Exit;
            return;
        }
        let burst = slot.rng.sample_geometric(&self.burst).min(slot.to_fault);
        let compute_ns = slot.rng.exp(burst as f64 / p.faults_per_s * 1e9) as u64;
        slot.burst_left = burst;
        // A free burst after this compute phase, as often as keeps the mid-life share:
        // `share` pages freed per fault, `unmap_mean_pages` per burst.
        let unmap_chance = p.midlife_free_share * burst as f64 / p.unmap_mean_pages;
        if slot.pages.len() > 1 && slot.rng.chance(unmap_chance.min(1.0)) {
            let pages = slot.rng.sample_geometric(&self.unmap);
            slot.unmap_left = pages.min(slot.pages.len() as u64 - 1);
        }
        sim.work(cpu, compute_ns);
    }

    /// One step of a running process: a fault, a free of its burst, or its compute.
    /// Inlined (always) into [`Kbuild::step`], as [`Kbuild::alloc`] is into this.
    #[inline(always)]
    fn run_step(&mut self, sim: &mut Sim, cpu: u32) -> Result<(), SimError> {
        let c = cpu as usize;
        let p = &self.params;
        let slot = &mut self.slots[c];
        // A kernel block let go of at this point of the process's life waits for its
        // RCU callback.
        if let Some(i) = slot.kernel.iter().position(|k| k.2 >= slot.to_fault) {
            let (pfn, order, _) = slot.kernel.swap_remove(i);
            let due = sim.now(cpu) + (p.rcu_grace_ms * 1e6) as u64;
            slot.rcu.push_back((due, pfn, order));
            return Ok(());
        }
        if slot.unmap_left > 0 {
            return self.free_unmapped_pages(sim, cpu);
        }
        if slot.burst_left == 0 {
            self.start_burst(sim, cpu);
            return Ok(());
        }
        slot.burst_left -= 1;
        slot.to_fault -= 1;
        let x = slot.rng.unit();
        // Nearly every draw is past every share: one comparison says so (see
        // `kernel_draws_below`); the walk decides the others, as it always did.
        let kernel_order = if x < self.kernel_draws_below {
            kernel_order(&p.kernel_blocks_per_fault, x)
        } else {
            None
        };
        if let Some(order) = kernel_order {
            let order = Order::new(order).expect("orders 1-3");
            let free_at = slot.rng.below(slot.to_fault + 1);
            let pfn = self.alloc(sim, cpu, KERNEL, order)?;
            self.slots[c].kernel.push((pfn, order, free_at));
            return Ok(());
        }
        let pfn = self.alloc(sim, cpu, ANON, Order::ZERO)?;
        push_page(&mut self.slots[c].pages, pfn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-comparison skip never skips a draw the walk would give a block: across
    /// shares of every scale (the published ones, tiny, zero, large) and draws at,
    /// just above and far above the bound.
    #[test]
    fn no_draw_at_or_above_the_bound_gets_a_kernel_block() {
        let mut rng = Rng::new(11, 0);
        let published = KbuildParams::default().kernel_blocks_per_fault;
        let mut cases = vec![published, [0.0; 3], [1e-300, 0.0, 5e-324], [0.2, 0.3, 0.1]];
        for _ in 0..2_000 {
            let scale = 10f64.powi(-(rng.below(300) as i32));
            cases.push([rng.unit() * scale, rng.unit() * scale, rng.unit() * scale]);
        }
        for shares in cases {
            let bound = kernel_draws_below(&shares);
            let mut draws = vec![bound, bound.next_up(), bound * 1.5, 1.0 - f64::EPSILON];
            draws.extend((0..50).map(|_| bound + rng.unit() * (1.0 - bound).max(0.0)));
            for x in draws.into_iter().filter(|&x| x >= bound && x < 1.0) {
                assert_eq!(kernel_order(&shares, x), None, "{shares:?} {x}");
            }
            // Below the bound the walk still decides, and takes each order's share.
            if shares[0] > 0.0 {
                assert_eq!(kernel_order(&shares, shares[0] * 0.5), Some(1));
            }
        }
        assert_eq!(kernel_draws_below(&[0.1, -0.01, 0.1]), f64::INFINITY);
    }
}
