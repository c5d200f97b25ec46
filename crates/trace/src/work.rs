//! What a recorded workload did, counted so that a simulation can run the same work: its
//! processes with their page faults and kernel blocks, the blocks it allocated by order
//! and migratetype, how often a block was freed on another CPU than it was allocated on,
//! and, beside these inputs, the refills and drains the kernel made for it (the numbers a
//! simulation predicts). `mmkit trace compare-sim` divides both by units of work.
//!
//! Meant for a recording of one command (`mmkit trace record --command-only`): every
//! event then belongs to the command's processes. Of a system-wide trace it counts every
//! process of the machine.
//!
//! Linux counterpart: the kmem events (`include/trace/events/kmem.h`); a "fault" here is
//! an order-0 MOVABLE `mm_page_alloc` (anonymous memory and page cache alike: the events
//! do not tell them apart), a "kernel page" an order-0 allocation of another migratetype
//! (page tables, slab).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::parse::{EventKind, Trace};
use crate::replay::{observe, Counts, Machine};

/// `MIGRATE_MOVABLE` in the events' `migratetype` field.
const MIGRATE_MOVABLE: i32 = 1;

/// One process (pid) of the trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProcessCounts {
    /// Its pid.
    pub pid: u32,
    /// The program it ran last (`comm`).
    pub comm: String,
    /// Order-0 MOVABLE allocations.
    pub faults: u64,
    /// Order-0 allocations of other migratetypes.
    pub kernel_pages: u64,
    /// Allocations of orders 1, 2 and 3.
    pub blocks: [u64; 3],
    /// Of its faults' pages, those it freed itself before its last fault: freed while it
    /// ran (`munmap`, a shrinking heap), not at its exit.
    pub midlife_frees: u64,
}

/// The whole trace's work.
#[derive(Clone, Debug, Serialize)]
pub struct Work {
    /// Seconds from the first event to the last.
    pub seconds: f64,
    /// CPUs of the zoneinfo snapshot.
    pub cpus: u32,
    /// The recording's scope (`command …` or `system`); `None` for plain tracefs text or an
    /// older recording, which traced the whole machine.
    pub scope: Option<String>,
    /// The kernel's refills and drains, all CPUs, counted as the replay counts them.
    pub kernel: Counts,
    /// Pages allocated (`mm_page_alloc`, Σ 2^order).
    pub alloc_pages: u64,
    /// Allocations by (order, migratetype).
    pub allocations: BTreeMap<(u8, i32), u64>,
    /// Every pid that has an event, in pid order.
    pub processes: Vec<ProcessCounts>,
    /// Frees of blocks allocated while tracing.
    pub frees_of_traced_blocks: u64,
    /// Of those, frees on another CPU than the allocation.
    pub frees_on_other_cpu: u64,
    /// Pages the whole machine allocated over the recording (Δ Σ `pgalloc_*` of
    /// `/proc/vmstat`), when the recording has both snapshots.
    pub machine_alloc_pages: Option<i64>,
}

impl Work {
    /// Allocations of `order` (any migratetype).
    pub fn blocks_of_order(&self, order: u8) -> u64 {
        self.allocations
            .iter()
            .filter(|((o, _), _)| *o == order)
            .map(|(_, n)| n)
            .sum()
    }

    /// The traced allocations' share of the machine's (`None` without vmstat snapshots):
    /// near 1 when the command had the machine to itself.
    pub fn share_of_machine(&self) -> Option<f64> {
        self.machine_alloc_pages
            .filter(|&pages| pages > 0)
            .map(|pages| self.alloc_pages as f64 / pages as f64)
    }

    /// The processes' mid-life frees ([`ProcessCounts::midlife_frees`]) per fault: the
    /// share of a process's faulted pages it frees while it runs.
    pub fn midlife_free_share(&self) -> f64 {
        let faults: u64 = self.processes.iter().map(|p| p.faults).sum();
        if faults == 0 {
            return 0.0;
        }
        self.processes.iter().map(|p| p.midlife_frees).sum::<u64>() as f64 / faults as f64
    }

    /// Share of frees of traced blocks made on another CPU.
    pub fn cross_cpu_free_share(&self) -> f64 {
        if self.frees_of_traced_blocks == 0 {
            return 0.0;
        }
        self.frees_on_other_cpu as f64 / self.frees_of_traced_blocks as f64
    }
}

/// Count `trace`'s work; `machine` is its snapshot (for the CPUs and the refill and drain
/// counting of [`observe`]).
pub fn measure(trace: &Trace, machine: &Machine) -> Work {
    let observed = observe(trace, machine);
    let mut allocations: BTreeMap<(u8, i32), u64> = BTreeMap::new();
    let mut processes: BTreeMap<u32, ProcessCounts> = BTreeMap::new();
    // Live blocks allocated while tracing: pfn → CPU of the allocation, and the pid whose
    // fault it was (a fault's page only).
    let mut live: HashMap<u64, (u32, Option<u32>)> = HashMap::new();
    // Per pid: its own faults' pages it has freed so far. At each fault its mid-life
    // frees become that count, so after the last event they are those before its last
    // fault.
    let mut own_frees: HashMap<u32, u64> = HashMap::new();
    let mut frees_of_traced_blocks = 0;
    let mut frees_on_other_cpu = 0;
    for event in &trace.events {
        match event.kind {
            EventKind::Alloc => {
                *allocations
                    .entry((event.order, event.migratetype))
                    .or_default() += 1;
                let fault = event.order == 0 && event.migratetype == MIGRATE_MOVABLE;
                live.insert(event.pfn, (event.cpu, fault.then_some(event.pid)));
                let process = processes.entry(event.pid).or_default();
                match event.order {
                    0 if fault => {
                        process.faults += 1;
                        process.midlife_frees = own_frees.get(&event.pid).copied().unwrap_or(0);
                    }
                    0 => process.kernel_pages += 1,
                    1..=3 => process.blocks[event.order as usize - 1] += 1,
                    _ => {}
                }
            }
            EventKind::Free => {
                processes.entry(event.pid).or_default();
                if let Some((cpu, faulted_by)) = live.remove(&event.pfn) {
                    frees_of_traced_blocks += 1;
                    frees_on_other_cpu += u64::from(cpu != event.cpu);
                    if faulted_by == Some(event.pid) {
                        *own_frees.entry(event.pid).or_default() += 1;
                    }
                }
            }
            _ => {
                processes.entry(event.pid).or_default();
            }
        }
    }
    let processes = processes
        .into_iter()
        .map(|(pid, counts)| ProcessCounts {
            pid,
            comm: trace.comms.get(&pid).cloned().unwrap_or_default(),
            ..counts
        })
        .collect();
    Work {
        seconds: observed.seconds,
        cpus: observed.per_cpu.len() as u32,
        scope: trace
            .recording
            .as_ref()
            .and_then(|r| r.meta("scope"))
            .map(str::to_owned),
        kernel: observed.total,
        alloc_pages: observed.alloc_pages,
        allocations,
        processes,
        frees_of_traced_blocks,
        frees_on_other_cpu,
        machine_alloc_pages: observed.vmstat_delta.map(|(alloc, _)| alloc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_text;

    const ZONEINFO: &str = "Node 0, zone   Normal\n  pages free 1000\n        min 10\n        low 20\n        high 30\n        spanned 4096\n        present 4096\n        managed 4096\n  start_pfn: 4096\n  pagesets\n    cpu: 0\n              count: 0\n              high: 100\n              batch: 10\n    cpu: 1\n              count: 0\n              high: 100\n              batch: 10\n";

    /// A process's mid-life frees are the pages of its own faults it freed before its
    /// last fault: not those freed after it (its exit), nor its pages another process
    /// freed, nor its kernel pages.
    #[test]
    fn a_mid_life_free_is_of_a_processs_own_fault_before_its_last() {
        let text = "\
  cc1-7 [000] ..... 1.0: mm_page_alloc: pfn=0x2000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
  cc1-7 [000] ..... 1.1: mm_page_alloc: pfn=0x2001 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
  cc1-7 [000] ..... 1.15: mm_page_alloc: pfn=0x2100 order=0 migratetype=0 gfp_flags=GFP_KERNEL
  cc1-7 [000] ..... 1.2: mm_page_free: pfn=0x2000 order=0
  cc1-7 [000] ..... 1.21: mm_page_free: pfn=0x2100 order=0
  as-8 [001] ..... 1.22: mm_page_free: pfn=0x2001 order=0
  cc1-7 [000] ..... 1.3: mm_page_alloc: pfn=0x2002 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
  cc1-7 [000] ..... 1.4: mm_page_alloc: pfn=0x2003 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
  cc1-7 [000] ..... 1.5: mm_page_free_batched: pfn=0x2002
  cc1-7 [000] ..... 1.5: mm_page_free: pfn=0x2002 order=0
  cc1-7 [000] ..... 1.5: mm_page_free_batched: pfn=0x2003
  cc1-7 [000] ..... 1.5: mm_page_free: pfn=0x2003 order=0
  as-8 [001] ..... 1.6: mm_page_alloc: pfn=0x3000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
";
        let trace = parse_text(text);
        let machine = Machine::from_trace(&trace, Some(ZONEINFO)).unwrap();
        let work = measure(&trace, &machine);
        let cc1 = &work.processes[0];
        assert_eq!((cc1.pid, cc1.faults, cc1.midlife_frees), (7, 4, 1));
        let as_ = &work.processes[1];
        assert_eq!((as_.pid, as_.faults, as_.midlife_frees), (8, 1, 0));
        assert!((work.midlife_free_share() - 1.0 / 5.0).abs() < 1e-12);
        // Every free is an `mm_page_free` (a batched one has its `mm_page_free_batched`
        // too): five frees of blocks allocated while tracing.
        assert_eq!(work.frees_of_traced_blocks, 5);
    }

    #[test]
    fn counts_processes_orders_and_frees_on_another_cpu() {
        let text = "\
  cc1-7 [000] ..... 1.0: mm_page_alloc_zone_locked: pfn=0x1000 order=0 migratetype=1 percpu_refill=1
  cc1-7 [000] ..... 1.0: mm_page_alloc_zone_locked: pfn=0x1001 order=0 migratetype=1 percpu_refill=1
  cc1-7 [000] ..... 1.1: mm_page_alloc: pfn=0x1000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
  cc1-7 [000] ..... 1.2: mm_page_alloc: pfn=0x1002 order=0 migratetype=0 gfp_flags=GFP_KERNEL
  cc1-7 [000] ..... 1.3: mm_page_alloc: pfn=0x1008 order=3 migratetype=0 gfp_flags=GFP_KERNEL
  as-8 [001] ..... 1.4: mm_page_alloc: pfn=0x1010 order=2 migratetype=0 gfp_flags=GFP_KERNEL
  cc1-7 [001] ..... 1.5: mm_page_free: pfn=0x1000 order=0
  cc1-7 [000] ..... 1.6: mm_page_free: pfn=0x1008 order=3
  as-8 [001] ..... 1.7: mm_page_free: pfn=0x1100 order=0
  as-8 [001] ..... 1.8: mm_page_pcpu_drain: pfn=0x1100 order=0 migratetype=1
";
        let trace = parse_text(text);
        let machine = Machine::from_trace(&trace, Some(ZONEINFO)).unwrap();
        let work = measure(&trace, &machine);
        assert_eq!(work.cpus, 2);
        assert_eq!(work.processes.len(), 2);
        let cc1 = &work.processes[0];
        assert_eq!((cc1.pid, cc1.comm.as_str()), (7, "cc1"));
        assert_eq!(
            (cc1.faults, cc1.kernel_pages, cc1.blocks),
            (1, 1, [0, 0, 1])
        );
        assert_eq!(work.processes[1].blocks, [0, 1, 0]);
        assert_eq!(work.alloc_pages, 1 + 1 + 8 + 4);
        assert_eq!(work.blocks_of_order(0), 2);
        assert_eq!(work.allocations[&(3, 0)], 1);
        // The free of 0x1100 was of a block from before tracing: not counted.
        assert_eq!(
            (work.frees_of_traced_blocks, work.frees_on_other_cpu),
            (2, 1)
        );
        assert_eq!((work.kernel.refill_pages, work.kernel.drain_pages), (2, 1));
        assert_eq!(work.share_of_machine(), None, "plain text has no vmstat");
    }
}
