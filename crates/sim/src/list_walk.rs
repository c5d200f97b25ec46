//! A walk down a buddy list ahead of its next refill: a hint, like the prefetches.
//!
//! A refill takes its blocks from the head of a buddy list, one `next` link at a time,
//! and each link is in the descriptor of the block before: a chain of dependent loads,
//! most of them cache misses in a long run (the blocks were freed to the list at random
//! places, long before). In the one-socket kbuild run that walk was most of
//! `rmqueue_bulk`'s 14 % of the time (`perf record`, docs/EXPERIMENTS.md, "Speed").
//! Nothing can overlap the loads of one chain, but the simulator does other work between
//! two refills of a list (about 140 allocations and frees in that run), so it can walk
//! the chain itself meanwhile, a link per call: each step reads the descriptor asked for
//! a step before, now in cache, and asks for the next one. The core names where to start
//! ([`LockEvents::refill_left`](mmkit_core::page_alloc::LockEvents::refill_left)): the
//! block a refill left at the head of the list.
//!
//! The list changes under the walk: its head blocks are taken, blocks are merged away or
//! freed in front. A step reads only a block that is still free and of the list's order
//! and stops where one is not; a walk that strays (a block taken and freed again
//! elsewhere between two steps) only asks for lines nobody needs. Nothing the run
//! computes depends on it. Only lists at least a walk long are walked
//! ([`WALK_AHEAD_BLOCKS`]).
//!
//! The same walker, tried on 2026-12-04 before the simulator had huge pages under its
//! descriptors, was within the noise: each step then waited for a page walk as long as
//! the miss it was to hide. Now the one-socket kbuild run takes 2 % less time (ten
//! alternated pairs; docs/EXPERIMENTS.md, "Speed").
//!
//! Linux has no counterpart: its refill walks its lists as they come.

use mmkit_core::page::{PageState, NO_PFN};
use mmkit_core::page_alloc::MemMap;
use mmkit_core::{Order, Pfn};

use crate::prefetch::prefetch;

/// How many blocks a walk reads ahead of where it starts, and how long a list must be
/// to be walked at all: about one refill's worth (a large zone's batch is 63). In the
/// one-socket kbuild run, walks of 32, 64, 128 and 256 blocks ran within 0.3 % of one
/// another (four alternated rounds): deeper walks are rarely finished before the next
/// refill replaces them. One step per call is the pace: two or three steps a call were
/// slower, the second step waiting for the line the first asked for. A shorter list is
/// not walked: the next refill takes it whole and splits a larger block, and its blocks
/// came lately, so they are in cache; in the unix run every walk ended at its list's
/// end, and walking them cost 2 % of the run's time.
pub(crate) const WALK_AHEAD_BLOCKS: u64 = 64;

/// Where a walk is: the zone (its index among the allocator's), the list's order, the
/// block whose descriptor was asked for last, and how many more blocks to ask for.
#[derive(Clone, Copy, Default)]
pub(crate) struct ListWalk {
    pub(crate) zone: usize,
    order: Order,
    cursor: Pfn,
    left: u64,
}

impl ListWalk {
    /// A walk from `first`, the block a refill of zone `zone`'s `order` list left at the
    /// head of the list (whose descriptor the refill has just written, so it is in
    /// cache), `blocks` long; a walk that is done at once if the list is shorter than
    /// [`WALK_AHEAD_BLOCKS`].
    pub(crate) fn from(zone: usize, order: Order, first: Pfn, blocks: u64) -> ListWalk {
        ListWalk {
            zone,
            order,
            cursor: first,
            left: if blocks >= WALK_AHEAD_BLOCKS {
                WALK_AHEAD_BLOCKS
            } else {
                0
            },
        }
    }

    /// Whether the walk has blocks left to ask for.
    #[inline(always)]
    pub(crate) fn is_walking(&self) -> bool {
        self.left != 0
    }

    /// One step in `mem_map`, the zone's: read the cursor's `next` link and ask for that
    /// block's descriptor. Stops at the list's end and at a block no longer on it.
    #[inline(always)]
    pub(crate) fn step(&mut self, mem_map: &MemMap) {
        let next = match mem_map.get(self.cursor) {
            Some(page) if page.has_state_order(PageState::Buddy, self.order) => page.next(),
            _ => NO_PFN,
        };
        if next == NO_PFN {
            self.left = 0;
            return;
        }
        self.cursor = Pfn(u64::from(next));
        self.left -= 1;
        if let Some(page) = mem_map.get(self.cursor) {
            prefetch(page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit_core::page_alloc::{Caller, Gfp};
    use mmkit_core::topology::{CacheInfo, ZoneSize};
    use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};

    /// The walk visits the list's blocks in list order and stops at a block that left
    /// the list. cpu0 allocates 64 pages and frees every other one through its pageset,
    /// drained: the order-0 buddy list holds those 32 (whose buddies are allocated, so
    /// none merges).
    #[test]
    fn a_walk_follows_the_list_and_stops_where_it_breaks() {
        let sizes = [ZoneSize::managed(0, ZoneType::Normal, 1 << 16)];
        let llc = CacheInfo {
            llc_bytes: 8 << 20,
            llc_shared_cpus: 2,
        };
        let topology = Topology::x86_64(&sizes, vec![2], llc, false).expect("a topology");
        let allocator =
            PageAllocator::new(topology, Settings::default(), Policy::V6_7).expect("settings");
        let movable = Gfp::HIGHUSER_MOVABLE;
        let pages: Vec<Pfn> = (0..64)
            .map(|_| allocator.alloc_pages(Caller::task(0), movable, Order::ZERO))
            .collect::<Result<_, _>>()
            .expect("free memory");
        allocator.drain_local_pages(0, None);
        for pfn in pages.iter().filter(|pfn| pfn.0 % 2 == 0) {
            allocator
                .free_pages(Caller::task(0), *pfn, Order::ZERO)
                .expect("an allocated page");
        }
        allocator.drain_local_pages(0, None);
        let normal = allocator.zone(0, ZoneType::Normal).expect("a Normal zone");
        let zone = allocator
            .zones()
            .iter()
            .position(|z| std::ptr::eq(z, normal))
            .expect("one of the allocator's zones");
        let mem_map = normal.mem_map();
        let on_list: Vec<Pfn> = {
            // A list's head is the free block no other block's `next` names (its own
            // `prev` is not kept, so it does not say).
            let named: std::collections::HashSet<u32> =
                mem_map.iter().map(|(_, page)| page.next()).collect();
            let first = mem_map
                .iter()
                .find(|(pfn, page)| {
                    page.has_state_order(PageState::Buddy, Order::ZERO)
                        && !named.contains(&(pfn.0 as u32))
                })
                .map(|(pfn, _)| pfn)
                .expect("a list head");
            std::iter::successors(Some(first), |pfn| {
                let next = mem_map.page(*pfn).next();
                (next != NO_PFN).then_some(Pfn(u64::from(next)))
            })
            .collect()
        };
        assert!(on_list.len() >= 32, "{} blocks on the list", on_list.len());
        let short = ListWalk::from(zone, Order::ZERO, on_list[0], WALK_AHEAD_BLOCKS - 1);
        assert!(
            !short.is_walking(),
            "a list shorter than a walk is not walked"
        );
        let mut walk = ListWalk::from(zone, Order::ZERO, on_list[0], WALK_AHEAD_BLOCKS);
        let mut visited = vec![walk.cursor];
        for _ in 0..10 {
            walk.step(mem_map);
            visited.push(walk.cursor);
        }
        assert_eq!(visited, on_list[..11]);
        assert_eq!(walk.left, WALK_AHEAD_BLOCKS - 10);
        // The cursor's block taken off the list (allocated by a refill): the walk stops.
        let mut broken = ListWalk::from(zone, Order::ZERO, on_list[0], WALK_AHEAD_BLOCKS);
        let taken = allocator
            .alloc_pages(Caller::task(1), movable, Order::ZERO)
            .expect("free memory");
        assert_eq!(
            taken, on_list[0],
            "cpu1's refill takes the list's head first"
        );
        broken.step(mem_map);
        assert!(!broken.is_walking());
        assert_eq!(broken.cursor, on_list[0]);
    }
}
