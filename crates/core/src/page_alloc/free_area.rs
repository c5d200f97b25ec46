//! A zone's free lists: one doubly linked list per order and migratetype, threaded through
//! the page descriptors by pfn.
//!
//! Linux counterpart: `struct free_area` and `add_to_free_list`, `add_to_free_list_tail`,
//! `move_to_free_list`, `del_page_from_free_list` in `mm/page_alloc.c`. Everything here
//! runs under the zone lock; the [`FreeArea`] lives inside it.

use super::mem_map::MemMap;
use super::types::{MigrateType, MIGRATE_TYPES};
use crate::page::{Order, PageState, Pfn, NO_PFN, NR_PAGE_ORDERS};

/// One free list. `head` is where Linux's `list_add` puts a block, `tail` where
/// `list_add_tail` does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FreeList {
    head: u32,
    tail: u32,
    len: u64,
}

impl FreeList {
    const EMPTY: FreeList = FreeList {
        head: NO_PFN,
        tail: NO_PFN,
        len: 0,
    };

    pub(crate) fn first(&self) -> Option<Pfn> {
        (self.head != NO_PFN).then_some(Pfn(self.head as u64))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NO_PFN
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    fn push_head(&mut self, mem_map: &MemMap, pfn: Pfn) {
        let raw = pfn.0 as u32;
        let page = mem_map.page(pfn);
        page.set_prev(NO_PFN);
        page.set_next(self.head);
        match self.head {
            NO_PFN => self.tail = raw,
            old => mem_map.page(Pfn(old as u64)).set_prev(raw),
        }
        self.head = raw;
        self.len += 1;
    }

    fn push_tail(&mut self, mem_map: &MemMap, pfn: Pfn) {
        let raw = pfn.0 as u32;
        let page = mem_map.page(pfn);
        page.set_next(NO_PFN);
        page.set_prev(self.tail);
        match self.tail {
            NO_PFN => self.head = raw,
            old => mem_map.page(Pfn(old as u64)).set_next(raw),
        }
        self.tail = raw;
        self.len += 1;
    }

    fn unlink(&mut self, mem_map: &MemMap, pfn: Pfn) {
        let page = mem_map.page(pfn);
        let (prev, next) = (page.prev(), page.next());
        match prev {
            NO_PFN => {
                assert_eq!(self.head, pfn.0 as u32, "{pfn:?} is not on this free list");
                self.head = next;
            }
            p => mem_map.page(Pfn(p as u64)).set_next(next),
        }
        match next {
            NO_PFN => self.tail = prev,
            n => mem_map.page(Pfn(n as u64)).set_prev(prev),
        }
        page.set_next(NO_PFN);
        page.set_prev(NO_PFN);
        self.len -= 1;
    }

    /// The pfns on the list from head to tail.
    pub(crate) fn iter<'a>(&self, mem_map: &'a MemMap) -> impl Iterator<Item = Pfn> + 'a {
        let mut cursor = self.head;
        core::iter::from_fn(move || {
            if cursor == NO_PFN {
                return None;
            }
            let pfn = Pfn(cursor as u64);
            cursor = mem_map.page(pfn).next();
            Some(pfn)
        })
    }
}

/// All free lists of a zone and the block count per order (`nr_free`).
#[derive(Debug)]
pub(crate) struct FreeArea {
    lists: [[FreeList; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    nr_free: [u64; NR_PAGE_ORDERS],
}

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
            lists: [[FreeList::EMPTY; MIGRATE_TYPES]; NR_PAGE_ORDERS],
            nr_free: [0; NR_PAGE_ORDERS],
        }
    }

    pub(crate) fn list(&self, order: Order, mt: MigrateType) -> &FreeList {
        &self.lists[order.index()][mt.index()]
    }

    /// Blocks of `order` on all lists.
    pub(crate) fn nr_free(&self, order: Order) -> u64 {
        self.nr_free[order.index()]
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
        let page = mem_map.page(pfn);
        page.set_state(PageState::Buddy, order);
        page.set_cached_migratetype(mt as u8);
        let list = &mut self.lists[order.index()][mt.index()];
        match end {
            ListEnd::Head => list.push_head(mem_map, pfn),
            ListEnd::Tail => list.push_tail(mem_map, pfn),
        }
        self.nr_free[order.index()] += 1;
    }

    /// Take the block at `pfn` off its list and clear its free mark
    /// (`del_page_from_free_list`). It becomes an anonymous run of pages.
    pub(crate) fn remove(&mut self, mem_map: &MemMap, pfn: Pfn, order: Order) {
        let page = mem_map.page(pfn);
        debug_assert_eq!(page.state_order(), (PageState::Buddy, order));
        let mt = self.cached_migratetype(mem_map, pfn);
        self.lists[order.index()][mt.index()].unlink(mem_map, pfn);
        page.set_state(PageState::Tail, Order::ZERO);
        self.nr_free[order.index()] -= 1;
    }

    /// Move a free block to the tail of another migratetype's list (`move_to_free_list`).
    pub(crate) fn move_to(&mut self, mem_map: &MemMap, pfn: Pfn, order: Order, mt: MigrateType) {
        let old = self.cached_migratetype(mem_map, pfn);
        self.lists[order.index()][old.index()].unlink(mem_map, pfn);
        mem_map.page(pfn).set_cached_migratetype(mt as u8);
        self.lists[order.index()][mt.index()].push_tail(mem_map, pfn);
    }

    /// The list a free block is on.
    pub(crate) fn cached_migratetype(&self, mem_map: &MemMap, pfn: Pfn) -> MigrateType {
        MigrateType::from_index(mem_map.page(pfn).cached_migratetype() as usize)
            .expect("a free block caches a valid migratetype")
    }
}
