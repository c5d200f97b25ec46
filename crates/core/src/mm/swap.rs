//! Swap slots: one swap device of a fixed number of page slots.
//!
//! Linux counterpart: `swap_info_struct.swap_map` and `get_swap_pages` / `swap_free`
//! (`mm/swapfile.c`), without clusters or priorities: a free-slot stack, lowest slots first,
//! and a use bit per slot so that a double free is caught; and `swap_cgroup`
//! (`mm/swap_cgroup.c`): the cgroup each slot's page was charged to, which the slot pins
//! (Linux holds a reference on the cgroup's id per recorded entry).

use alloc::vec::Vec;

use super::memcg::MemcgId;
use super::pte::SwapEntry;

/// The swap device's slot map.
#[derive(Clone, Debug)]
pub struct SwapSpace {
    used: Vec<bool>,
    free_slots: Vec<u64>,
    /// Per slot: the cgroup id recorded at swap-out (`swap_cgroup_record`), 0 for none.
    owner: Vec<u16>,
}

impl SwapSpace {
    /// A device of `slots` page slots.
    pub fn new(slots: u64) -> SwapSpace {
        SwapSpace {
            used: alloc::vec![false; slots as usize],
            free_slots: (0..slots).rev().collect(),
            owner: alloc::vec![0; slots as usize],
        }
    }

    /// Slots on the device.
    pub fn slots(&self) -> u64 {
        self.used.len() as u64
    }

    /// Slots in use.
    pub fn used(&self) -> u64 {
        self.slots() - self.free_slots.len() as u64
    }

    /// Whether `entry` holds data.
    pub fn is_used(&self, entry: SwapEntry) -> bool {
        self.used.get(entry.0 as usize).copied().unwrap_or(false)
    }

    /// `nr` free slots, or `None` (and nothing taken) if fewer are free.
    pub fn alloc(&mut self, nr: u64) -> Option<Vec<SwapEntry>> {
        if (self.free_slots.len() as u64) < nr {
            return None;
        }
        let at = self.free_slots.len() - nr as usize;
        let slots: Vec<SwapEntry> = self.free_slots.drain(at..).rev().map(SwapEntry).collect();
        for slot in &slots {
            self.used[slot.0 as usize] = true;
        }
        Some(slots)
    }

    /// Release a slot, returning the cgroup recorded for it. Panics on a slot not in use:
    /// the page tables and the slot map disagree, and continuing would hand one slot to
    /// two pages.
    pub fn free(&mut self, entry: SwapEntry) -> Option<MemcgId> {
        let used = &mut self.used[entry.0 as usize];
        assert!(*used, "swap slot {} freed twice", entry.0);
        *used = false;
        self.free_slots.push(entry.0);
        let owner = core::mem::take(&mut self.owner[entry.0 as usize]);
        (owner != 0).then_some(MemcgId(owner))
    }

    /// Record that the page in `entry` was charged to `memcg` (`swap_cgroup_record`).
    pub fn record_owner(&mut self, entry: SwapEntry, memcg: MemcgId) {
        debug_assert!(self.is_used(entry), "a record for a slot in use");
        self.owner[entry.0 as usize] = memcg.0;
    }

    /// The cgroup recorded for `entry`, if any.
    pub fn owner(&self, entry: SwapEntry) -> Option<MemcgId> {
        let owner = self.owner.get(entry.0 as usize).copied().unwrap_or(0);
        (owner != 0).then_some(MemcgId(owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_handed_out_once() {
        let mut swap = SwapSpace::new(4);
        let a = swap.alloc(3).unwrap();
        assert_eq!(a, [SwapEntry(0), SwapEntry(1), SwapEntry(2)]);
        assert!(swap.alloc(2).is_none(), "only one slot is left");
        assert_eq!(swap.used(), 3);
        swap.free(SwapEntry(1));
        assert!(!swap.is_used(SwapEntry(1)));
        assert_eq!(swap.alloc(2).unwrap().len(), 2);
        assert_eq!(swap.used(), 4);
    }

    #[test]
    #[should_panic(expected = "freed twice")]
    fn double_free_is_caught() {
        let mut swap = SwapSpace::new(2);
        let a = swap.alloc(1).unwrap();
        swap.free(a[0]);
        swap.free(a[0]);
    }
}
