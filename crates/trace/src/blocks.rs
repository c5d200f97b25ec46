//! Where a recorded workload's blocks go: for each order, the blocks its tasks allocated
//! and where each was freed — on the CPU that allocated it or on another, in a task's
//! context or in softirq — or that it still held when the recording ended.
//!
//! This is what a stream workload's model needs from the kernel: which blocks a message
//! takes, and which end frees them. A network stack's buffers say it plainly: netperf's
//! SCTP chunk buffers are freed by the sender once the peer acknowledges them, its packet
//! buffers by the receiver after the copy, and an acknowledgement processed in the
//! receiver's softirq frees the sender's chunks on the receiver's CPU.

use std::collections::HashMap;

use serde::Serialize;

use crate::parse::{EventKind, Trace};

/// Orders counted, 0 to `MAX_ORDER` (10).
pub const ORDERS: usize = 11;

/// `MIGRATE_MOVABLE` in `mm_page_alloc`'s `migratetype` field: user pages (anonymous and
/// page cache). Every other migratetype is the kernel's own memory.
const MIGRATE_MOVABLE: i32 = 1;

/// What became of the blocks of one order and kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Fates {
    /// Blocks allocated (`mm_page_alloc`) while the recording ran.
    pub allocated: u64,
    /// Freed on the allocating CPU, in a task's context.
    pub same_cpu_task: u64,
    /// Freed on the allocating CPU, in softirq (an RCU callback, a network receive).
    pub same_cpu_softirq: u64,
    /// Freed on another CPU, in a task's context.
    pub other_cpu_task: u64,
    /// Freed on another CPU, in softirq.
    pub other_cpu_softirq: u64,
}

impl Fates {
    /// Blocks still held when the recording ended.
    pub fn not_freed(&self) -> u64 {
        self.allocated
            - self.same_cpu_task
            - self.same_cpu_softirq
            - self.other_cpu_task
            - self.other_cpu_softirq
    }

    fn add(&mut self, other: &Fates) {
        self.allocated += other.allocated;
        self.same_cpu_task += other.same_cpu_task;
        self.same_cpu_softirq += other.same_cpu_softirq;
        self.other_cpu_task += other.other_cpu_task;
        self.other_cpu_softirq += other.other_cpu_softirq;
    }
}

/// One recording's blocks, by order: the kernel's own (`kernel`) and user pages
/// (`movable`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BlockFates {
    /// Non-movable blocks (slab, network buffers, page tables), by order.
    pub kernel: [Fates; ORDERS],
    /// Movable blocks (anonymous and page-cache pages), by order.
    pub movable: [Fates; ORDERS],
}

impl BlockFates {
    /// Add another recording's counts to these.
    pub fn add(&mut self, other: &BlockFates) {
        for (mine, theirs) in self.kernel.iter_mut().zip(&other.kernel) {
            mine.add(theirs);
        }
        for (mine, theirs) in self.movable.iter_mut().zip(&other.movable) {
            mine.add(theirs);
        }
    }
}

/// Count what became of the blocks `trace` shows allocated. A free of a block allocated
/// before the recording began is not counted (its CPU is unknown); `mm_page_free_batched`
/// repeats an `mm_page_free` and is skipped.
pub fn measure(trace: &Trace) -> BlockFates {
    let mut out = BlockFates::default();
    // Each live block's first pfn: its allocating CPU, order and kind.
    let mut live: HashMap<u64, (u32, u8, bool)> = HashMap::new();
    for e in &trace.events {
        match e.kind {
            EventKind::Alloc => {
                let order = e.order as usize;
                if order >= ORDERS {
                    continue;
                }
                let movable = e.migratetype == MIGRATE_MOVABLE;
                let table = if movable {
                    &mut out.movable
                } else {
                    &mut out.kernel
                };
                table[order].allocated += 1;
                live.insert(e.pfn, (e.cpu, e.order, movable));
            }
            EventKind::Free => {
                let Some((cpu, order, movable)) = live.remove(&e.pfn) else {
                    continue;
                };
                let table = if movable {
                    &mut out.movable
                } else {
                    &mut out.kernel
                };
                let fates = &mut table[order as usize];
                match (cpu == e.cpu, e.softirq) {
                    (true, false) => fates.same_cpu_task += 1,
                    (true, true) => fates.same_cpu_softirq += 1,
                    (false, false) => fates.other_cpu_task += 1,
                    (false, true) => fates.other_cpu_softirq += 1,
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_text;

    #[test]
    fn counts_each_block_by_where_it_was_freed() {
        // A sender on CPU 0 allocates two order-2 chunks and an order-3 packet; it frees
        // one chunk itself, the receiver's softirq frees the other on CPU 1, and the
        // receiver frees the packet on CPU 1 in its task. An order-4 packet is still held
        // at the end; a free of a block allocated before the recording is not counted,
        // and neither is the batched repeat of a free.
        let text = "\
  python3-5 [000] ..... 1.0: mm_page_alloc: pfn=0x1000 order=2 migratetype=0
  python3-5 [000] ..... 1.1: mm_page_alloc: pfn=0x1004 order=2 migratetype=0
  python3-5 [000] ..... 1.2: mm_page_alloc: pfn=0x2000 order=3 migratetype=0
  python3-5 [000] ..... 1.3: mm_page_alloc: pfn=0x3000 order=4 migratetype=0
  python3-5 [000] ..... 1.4: mm_page_alloc: pfn=0x4000 order=0 migratetype=1
  python3-5 [000] ..... 1.5: mm_page_free: pfn=0x1000 order=2
  python3-6 [001] ..s.. 1.6: mm_page_free: pfn=0x1004 order=2
  python3-6 [001] ..... 1.7: mm_page_free: pfn=0x2000 order=3
  python3-6 [001] ..... 1.8: mm_page_free: pfn=0x9000 order=0
  python3-5 [000] ..... 1.9: mm_page_free_batched: pfn=0x4000
  python3-5 [000] ..... 2.0: mm_page_free: pfn=0x4000 order=0
";
        let fates = measure(&parse_text(text));
        assert_eq!(
            fates.kernel[2],
            Fates {
                allocated: 2,
                same_cpu_task: 1,
                other_cpu_softirq: 1,
                ..Fates::default()
            }
        );
        assert_eq!(
            fates.kernel[3],
            Fates {
                allocated: 1,
                other_cpu_task: 1,
                ..Fates::default()
            }
        );
        assert_eq!(
            (fates.kernel[4].allocated, fates.kernel[4].not_freed()),
            (1, 1)
        );
        assert_eq!(
            fates.movable[0],
            Fates {
                allocated: 1,
                same_cpu_task: 1,
                ..Fates::default()
            }
        );
        assert_eq!(fates.kernel[0], Fates::default());

        let mut pooled = fates.clone();
        pooled.add(&fates);
        assert_eq!(pooled.kernel[2].allocated, 4);
        assert_eq!(pooled.kernel[4].not_freed(), 2);
    }
}
