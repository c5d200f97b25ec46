//! The kernel's pageset refills as it made them: how many blocks each `rmqueue_bulk`
//! took, by CPU, order and migratetype, in the order they came.
//!
//! A refill shows as a run of `mm_page_alloc_zone_locked` events with `percpu_refill=1`
//! on one CPU, one per block, all under one hold of the zone lock: nothing else runs on
//! that CPU in between (the lock is taken with interrupts off). So a run ends at the
//! CPU's next event of any other kind, or at a refill event of another order or
//! migratetype. The sizes show what `nr_pcp_alloc` asked for: from v6.7 (patch 5 of
//! Huang 2023) an order-0 refill doubles, `batch << alloc_factor`, while its pageset
//! frees nothing (63, 126, 252, … up to `batch << CONFIG_PCP_BATCH_SCALE_MAX` or
//! `high − count − batch`), and any free to the pageset halves it again.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::parse::{EventKind, Trace};

/// Sizes kept in order per list, for printing how they grew.
pub const KEPT_SIZES: usize = 16;

/// The refills of one CPU's list of one order and migratetype.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ListRefills {
    /// Refills counted.
    pub refills: u64,
    /// Blocks they took in all.
    pub blocks: u64,
    /// The largest refill, in blocks.
    pub largest: u64,
    /// The first [`KEPT_SIZES`] refills' sizes, in blocks, in the order they came.
    pub first: Vec<u64>,
    /// Frees of any order on this CPU between each of those refills and this list's
    /// refill before (the first: since the recording began): what halves
    /// `alloc_factor`.
    pub frees_before: Vec<u64>,
}

impl ListRefills {
    /// Mean blocks per refill.
    pub fn mean(&self) -> f64 {
        if self.refills == 0 {
            0.0
        } else {
            self.blocks as f64 / self.refills as f64
        }
    }

    fn push(&mut self, blocks: u64, frees_before: u64) {
        self.refills += 1;
        self.blocks += blocks;
        self.largest = self.largest.max(blocks);
        if self.first.len() < KEPT_SIZES {
            self.first.push(blocks);
            self.frees_before.push(frees_before);
        }
    }
}

/// A list: (CPU, order, migratetype).
pub type ListKey = (u32, u8, i32);

/// The refill in progress on one CPU.
struct Run {
    list: (u8, i32),
    blocks: u64,
}

/// Count `trace`'s refills by list. Frees are counted per CPU from `mm_page_free` (not
/// its batched repeat), so that each refill says how many frees its pageset saw since the
/// list's refill before.
pub fn measure(trace: &Trace) -> BTreeMap<ListKey, ListRefills> {
    let mut out: BTreeMap<ListKey, ListRefills> = BTreeMap::new();
    let mut runs: BTreeMap<u32, Run> = BTreeMap::new();
    // Frees on each CPU since the recording began, and their count at each list's last
    // refill.
    let mut frees: BTreeMap<u32, u64> = BTreeMap::new();
    let mut frees_at_refill: BTreeMap<ListKey, u64> = BTreeMap::new();
    let mut end = |cpu: u32, run: Run, frees: &BTreeMap<u32, u64>| {
        let key = (cpu, run.list.0, run.list.1);
        let now = frees.get(&cpu).copied().unwrap_or(0);
        let before = now - frees_at_refill.insert(key, now).unwrap_or(0);
        out.entry(key).or_default().push(run.blocks, before);
    };
    for e in &trace.events {
        if e.kind == EventKind::ZoneLocked && e.percpu_refill {
            let list = (e.order, e.migratetype);
            match runs.get_mut(&e.cpu) {
                Some(run) if run.list == list => run.blocks += 1,
                _ => {
                    if let Some(run) = runs.insert(e.cpu, Run { list, blocks: 1 }) {
                        end(e.cpu, run, &frees);
                    }
                }
            }
            continue;
        }
        if let Some(run) = runs.remove(&e.cpu) {
            end(e.cpu, run, &frees);
        }
        if e.kind == EventKind::Free {
            *frees.entry(e.cpu).or_default() += 1;
        }
    }
    for (cpu, run) in std::mem::take(&mut runs) {
        end(cpu, run, &frees);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_text;

    /// Two order-0 refills on CPU 0 with an order-3 one between them, which ends the
    /// first run; a free on CPU 0 before the second order-0 refill; CPU 1's events in
    /// between do not end CPU 0's run; the last run ends with the recording.
    #[test]
    fn a_refill_is_a_run_of_one_cpus_refill_events_of_one_list() {
        let text = "\
  w-5 [000] d..3. 1.00: mm_page_alloc_zone_locked: pfn=0x100 order=0 migratetype=0 percpu_refill=1
  r-6 [001] ..... 1.00: mm_page_free: pfn=0x900 order=0
  w-5 [000] d..3. 1.00: mm_page_alloc_zone_locked: pfn=0x101 order=0 migratetype=0 percpu_refill=1
  w-5 [000] d..3. 1.01: mm_page_alloc_zone_locked: pfn=0x200 order=3 migratetype=0 percpu_refill=1
  w-5 [000] ..... 1.02: mm_page_alloc: pfn=0x200 order=3 migratetype=0
  w-5 [000] ..... 1.03: mm_page_free: pfn=0x300 order=1
  w-5 [000] d..3. 1.04: mm_page_alloc_zone_locked: pfn=0x400 order=0 migratetype=0 percpu_refill=0
  w-5 [000] d..3. 1.05: mm_page_alloc_zone_locked: pfn=0x102 order=0 migratetype=0 percpu_refill=1
  w-5 [000] d..3. 1.05: mm_page_alloc_zone_locked: pfn=0x103 order=0 migratetype=0 percpu_refill=1
  w-5 [000] d..3. 1.05: mm_page_alloc_zone_locked: pfn=0x104 order=0 migratetype=0 percpu_refill=1
";
        let refills = measure(&parse_text(text));
        let order0 = &refills[&(0, 0, 0)];
        assert_eq!((order0.refills, order0.blocks, order0.largest), (2, 5, 3));
        assert_eq!(order0.first, vec![2, 3]);
        assert_eq!(order0.frees_before, vec![0, 1]);
        assert!((order0.mean() - 2.5).abs() < 1e-12);
        assert_eq!(refills[&(0, 3, 0)].first, vec![1]);
        assert_eq!(refills[&(0, 3, 0)].frees_before, vec![0]);
        assert_eq!(refills.len(), 2, "CPU 1 refilled nothing");
    }
}
