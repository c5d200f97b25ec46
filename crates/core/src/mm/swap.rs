//! Swap slots: one swap device of a fixed number of page slots.
//!
//! Linux counterpart: `swap_info_struct.swap_map` and `get_swap_pages` / `swap_duplicate` /
//! `swap_free` (`mm/swapfile.c`), without clusters or priorities: a free-slot stack, lowest
//! slots first, and a count per slot (`swap_map`: one per swap PTE, one for the swap cache
//! while reclaim writes the folio), so that a slot shared after fork is freed by its last
//! user and a double free is caught; and `swap_cgroup`
//! (`mm/swap_cgroup.c`): the cgroup each slot's page was charged to, which the slot pins
//! (Linux holds a reference on the cgroup's id per recorded entry).

use alloc::vec::Vec;

use super::memcg::MemcgId;
use super::pte::SwapEntry;

/// The swap device's slot map.
#[derive(Clone, Debug)]
pub struct SwapSpace {
    /// Per slot: its users (`swap_map` without `SWAP_HAS_CACHE`'s bit: the cache's hold is
    /// one more user); 0 is free.
    count: Vec<u16>,
    free_slots: Vec<u64>,
    /// Per slot: the cgroup id recorded at swap-out (`swap_cgroup_record`), 0 for none.
    owner: Vec<u16>,
}

impl SwapSpace {
    /// A device of `slots` page slots.
    pub fn new(slots: u64) -> SwapSpace {
        SwapSpace {
            count: alloc::vec![0; slots as usize],
            free_slots: (0..slots).rev().collect(),
            owner: alloc::vec![0; slots as usize],
        }
    }

    /// Slots on the device.
    pub fn slots(&self) -> u64 {
        self.count.len() as u64
    }

    /// Slots in use.
    pub fn used(&self) -> u64 {
        self.slots() - self.free_slots.len() as u64
    }

    /// Whether `entry` holds data.
    pub fn is_used(&self, entry: SwapEntry) -> bool {
        self.count(entry) > 0
    }

    /// Users of `entry`: swap PTEs, plus the swap cache's while reclaim holds it.
    pub fn count(&self, entry: SwapEntry) -> u16 {
        self.count.get(entry.0 as usize).copied().unwrap_or(0)
    }

    /// `nr` free slots, each with one user (the swap cache's hold, `add_to_swap`), or
    /// `None` (and nothing taken) if fewer are free.
    pub fn alloc(&mut self, nr: u64) -> Option<Vec<SwapEntry>> {
        if (self.free_slots.len() as u64) < nr {
            return None;
        }
        let at = self.free_slots.len() - nr as usize;
        let slots: Vec<SwapEntry> = self.free_slots.drain(at..).rev().map(SwapEntry).collect();
        for slot in &slots {
            self.count[slot.0 as usize] = 1;
        }
        Some(slots)
    }

    /// One more user of a slot in use (`swap_duplicate`: a swap PTE copied by fork, or
    /// written by `try_to_unmap`). Panics on a free slot, or when the 16-bit count would
    /// overflow (Linux continues the count in `swap_map` continuation pages; more than
    /// 65535 sharers of one page is beyond what this model holds).
    pub fn duplicate(&mut self, entry: SwapEntry) {
        let count = &mut self.count[entry.0 as usize];
        assert!(*count > 0, "swap slot {} duplicated while free", entry.0);
        *count = count.checked_add(1).expect("swap slot count overflows");
    }

    /// Drop one user of a slot (`swap_free`); the last one releases it, returning the
    /// cgroup recorded for it. Panics on a slot not in use: the page tables and the slot
    /// map disagree, and continuing would hand one slot to two pages.
    pub fn free(&mut self, entry: SwapEntry) -> Option<MemcgId> {
        let count = &mut self.count[entry.0 as usize];
        assert!(*count > 0, "swap slot {} freed twice", entry.0);
        *count -= 1;
        if *count > 0 {
            return None;
        }
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
    fn a_duplicated_slot_is_released_by_its_last_user() {
        let mut swap = SwapSpace::new(2);
        let a = swap.alloc(1).unwrap()[0];
        swap.record_owner(a, MemcgId(3));
        swap.duplicate(a);
        assert_eq!(swap.count(a), 2);
        assert_eq!(swap.free(a), None, "one user is left");
        assert!(swap.is_used(a));
        assert_eq!(swap.free(a), Some(MemcgId(3)));
        assert_eq!(swap.used(), 0);
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
