//! A zone's free lists: one doubly linked list per order and migratetype, threaded through
//! the page descriptors by pfn.
//!
//! Linux counterpart: `struct free_area` and `add_to_free_list`, `add_to_free_list_tail`,
//! `move_to_free_list`, `del_page_from_free_list` in `mm/page_alloc.c`. Everything here
//! runs under the zone lock; the [`FreeArea`] lives inside it.

use super::list::PfnList;
use super::mem_map::MemMap;
use super::types::{MigrateType, MIGRATE_PCPTYPES, MIGRATE_TYPES};
use crate::page::{Order, Page, PageState, Pfn, NR_PAGE_ORDERS};

/// All free lists of a zone and the block count per order (`nr_free`).
#[derive(Debug)]
pub(crate) struct FreeArea {
    lists: [[PfnList; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    nr_free: [u64; NR_PAGE_ORDERS],
    /// [`FreeArea::free_block_bits`], kept up to date as lists fill and empty (a list that
    /// changes between empty and not is the only change that moves it), so that
    /// publishing it at each lock release is a compare, not a walk.
    bits: u32,
}

/// The layout of [`FreeArea::free_block_bits`].
pub(crate) struct FreeBlockBits;

impl FreeBlockBits {
    /// The high-atomic bits start here; the PCP-type bits at 0.
    pub(crate) const HIGH_ATOMIC: usize = 16;
}

const _: () = assert!(NR_PAGE_ORDERS <= FreeBlockBits::HIGH_ATOMIC);

/// Where a freed block goes on its list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ListEnd {
    /// Reused first (hot).
    Head,
    /// Reused last: likely to merge soon, or boot memory kept in address order.
    Tail,
}

impl FreeArea {
    pub(crate) const fn new() -> FreeArea {
        FreeArea {
            lists: [[PfnList::EMPTY; MIGRATE_TYPES]; NR_PAGE_ORDERS],
            nr_free: [0; NR_PAGE_ORDERS],
            bits: 0,
        }
    }

    pub(crate) fn list(&self, order: Order, mt: MigrateType) -> &PfnList {
        &self.lists[order.index()][mt.index()]
    }

    /// Blocks of `order` on all lists.
    pub(crate) fn nr_free(&self, order: Order) -> u64 {
        self.nr_free[order.index()]
    }

    /// Which orders have a block on a PCP-type list (bit `o`) and on the high-atomic list
    /// (bit `16 + o`): what `__zone_watermark_ok`'s free-area walk looks at, as the zone
    /// publishes it for checks made without the lock ([`FreeBlockBits`]).
    #[inline(always)]
    pub(crate) fn free_block_bits(&self) -> u32 {
        self.bits
    }

    /// [`FreeArea::free_block_bits`] recomputed from the lists, for the walker.
    pub(crate) fn free_block_bits_walked(&self) -> u32 {
        (0..NR_PAGE_ORDERS).fold(0, |bits, o| bits | self.order_bits(o))
    }

    /// Order `o`'s two bits of [`FreeArea::free_block_bits`], read off its lists.
    #[inline(always)]
    fn order_bits(&self, o: usize) -> u32 {
        let lists = &self.lists[o];
        let pcp_types = lists[..MIGRATE_PCPTYPES]
            .iter()
            .any(|list| !list.is_empty());
        let high_atomic = !lists[MigrateType::HighAtomic.index()].is_empty();
        (pcp_types as u32) << o | (high_atomic as u32) << (FreeBlockBits::HIGH_ATOMIC + o)
    }

    /// Recompute order `o`'s bits after one of its lists filled or emptied.
    #[inline(never)]
    fn refresh_bits(&mut self, o: usize) {
        let mask = 1 << o | 1 << (FreeBlockBits::HIGH_ATOMIC + o);
        self.bits = self.bits & !mask | self.order_bits(o);
    }

    /// Put the block at `pfn` on its list and mark it free (`add_to_free_list[_tail]` with
    /// `set_buddy_order`).
    pub(crate) fn add(
        &mut self,
        mem_map: &MemMap,
        pfn: Pfn,
        order: Order,
        mt: MigrateType,
        end: ListEnd,
    ) {
        self.add_page(mem_map, pfn, mem_map.page(pfn), order, mt, end);
    }

    /// [`FreeArea::add`] for a caller that already holds `pfn`'s descriptor (the merge
    /// loop of `__free_one_page`, which read it to find the block).
    #[inline(always)]
    pub(crate) fn add_page(
        &mut self,
        mem_map: &MemMap,
        pfn: Pfn,
        page: &Page,
        order: Order,
        mt: MigrateType,
        end: ListEnd,
    ) {
        page.set_state(PageState::Buddy, order);
        page.set_cached_migratetype(mt as u8);
        let list = &mut self.lists[order.index()][mt.index()];
        let was_empty = list.is_empty();
        match end {
            ListEnd::Head => list.push_head_page(mem_map, pfn, page),
            ListEnd::Tail => list.push_tail_page(mem_map, pfn, page),
        }
        self.nr_free[order.index()] += 1;
        if was_empty {
            self.refresh_bits(order.index());
        }
    }

    /// Take the block at `pfn` off its list and clear its free mark
    /// (`del_page_from_free_list`). It becomes an anonymous run of pages. Returns its
    /// first page's descriptor, for a caller that marks it next.
    pub(crate) fn remove<'m>(&mut self, mem_map: &'m MemMap, pfn: Pfn, order: Order) -> &'m Page {
        let page = mem_map.page(pfn);
        self.remove_page(mem_map, pfn, page, order);
        page
    }

    /// [`FreeArea::remove`] for a caller that already holds `pfn`'s descriptor (the merge
    /// loop, which read the buddy's state through it).
    #[inline(always)]
    pub(crate) fn remove_page(&mut self, mem_map: &MemMap, pfn: Pfn, page: &Page, order: Order) {
        debug_assert!(core::ptr::eq(page, mem_map.page(pfn)));
        debug_assert_eq!(page.state_order(), (PageState::Buddy, order));
        let mt = MigrateType::from_index(page.cached_migratetype() as usize)
            .expect("a free block caches a valid migratetype");
        let list = &mut self.lists[order.index()][mt.index()];
        list.unlink_page(mem_map, pfn, page);
        let emptied = list.is_empty();
        page.set_state(PageState::Tail, Order::ZERO);
        self.nr_free[order.index()] -= 1;
        if emptied {
            self.refresh_bits(order.index());
        }
    }

    /// Take up to `n` blocks from the head of the (`order`, `mt`) list, in list order, to
    /// the tail of `to`, marking each with `mark`; returns the blocks taken. The same
    /// blocks, in the same order, as `n` rounds of [`FreeArea::remove`] on the list's
    /// first block, for a refill that takes them all (`rmqueue_bulk` while
    /// `__rmqueue_smallest` finds the requested order's list non-empty). The blocks keep
    /// their cached migratetype: `mt`, as for every block on `mt`'s lists.
    #[inline(always)]
    pub(crate) fn take_head_run(
        &mut self,
        mem_map: &MemMap,
        order: Order,
        mt: MigrateType,
        n: u64,
        to: &mut PfnList,
        mark: impl FnMut(&Page),
    ) -> u64 {
        let list = &mut self.lists[order.index()][mt.index()];
        let taken = list.splice_head_to_tail(mem_map, n, to, mark);
        if list.is_empty() {
            self.refresh_bits(order.index());
        }
        self.nr_free[order.index()] -= taken;
        taken
    }

    /// Move a free block to the tail of another migratetype's list (`move_to_free_list`).
    pub(crate) fn move_to(&mut self, mem_map: &MemMap, pfn: Pfn, order: Order, mt: MigrateType) {
        let old = self.cached_migratetype(mem_map, pfn);
        self.lists[order.index()][old.index()].unlink(mem_map, pfn);
        mem_map.page(pfn).set_cached_migratetype(mt as u8);
        self.lists[order.index()][mt.index()].push_tail(mem_map, pfn);
        self.refresh_bits(order.index());
    }

    /// The list a free block is on.
    pub(crate) fn cached_migratetype(&self, mem_map: &MemMap, pfn: Pfn) -> MigrateType {
        MigrateType::from_index(mem_map.page(pfn).cached_migratetype() as usize)
            .expect("a free block caches a valid migratetype")
    }
}
