//! A doubly linked list of blocks threaded through the page descriptors by pfn.
//!
//! Linux counterpart: `struct list_head` as used by `free_area.free_list[]` (through
//! `page->buddy_list`) and `per_cpu_pages.lists[]` (through `page->pcp_list`). A block is
//! on at most one list at a time, so one pair of links in the descriptor serves both.
//! Callers hold the lock that owns the list.

use super::mem_map::MemMap;
use crate::page::{Page, Pfn, NO_PFN};

/// A list of blocks linked through their first pages' `next`/`prev`. `head` is where
/// Linux's `list_add` puts a block, `tail` where `list_add_tail` does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PfnList {
    head: u32,
    tail: u32,
    len: u64,
}

impl PfnList {
    pub(crate) const EMPTY: PfnList = PfnList {
        head: NO_PFN,
        tail: NO_PFN,
        len: 0,
    };

    pub(crate) fn first(&self) -> Option<Pfn> {
        (self.head != NO_PFN).then_some(Pfn(self.head as u64))
    }

    /// The block at the tail: the one [`PfnList::pop_tail`] takes next.
    pub(crate) fn last(&self) -> Option<Pfn> {
        (self.tail != NO_PFN).then_some(Pfn(self.tail as u64))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NO_PFN
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Put the block at `pfn`, whose descriptor is `page`, at the head (`list_add`).
    #[inline(always)]
    pub(crate) fn push_head_page(&mut self, mem_map: &MemMap, pfn: Pfn, page: &Page) {
        // One copy of the slice for the whole operation: through `&MemMap` it would be
        // loaded again after every store to a descriptor.
        let pages = mem_map.window();
        debug_assert!(core::ptr::eq(page, pages.page(pfn)));
        let raw = pfn.0 as u32;
        page.set_prev(NO_PFN);
        page.set_next(self.head);
        match self.head {
            NO_PFN => self.tail = raw,
            old => pages.page(Pfn(old as u64)).set_prev(raw),
        }
        self.head = raw;
        self.len += 1;
    }

    pub(crate) fn push_tail(&mut self, mem_map: &MemMap, pfn: Pfn) {
        self.push_tail_page(mem_map, pfn, mem_map.page(pfn));
    }

    /// [`PfnList::push_tail`] for a caller that already holds `pfn`'s descriptor.
    #[inline(always)]
    pub(crate) fn push_tail_page(&mut self, mem_map: &MemMap, pfn: Pfn, page: &Page) {
        // One copy of the slice for the whole operation: through `&MemMap` it would be
        // loaded again after every store to a descriptor.
        let pages = mem_map.window();
        debug_assert!(core::ptr::eq(page, pages.page(pfn)));
        let raw = pfn.0 as u32;
        page.set_next(NO_PFN);
        page.set_prev(self.tail);
        match self.tail {
            NO_PFN => self.head = raw,
            old => pages.page(Pfn(old as u64)).set_next(raw),
        }
        self.tail = raw;
        self.len += 1;
    }

    #[inline(always)]
    pub(crate) fn unlink(&mut self, mem_map: &MemMap, pfn: Pfn) {
        self.unlink_page(mem_map, pfn, mem_map.page(pfn));
    }

    /// [`PfnList::unlink`] for a caller that already holds `pfn`'s descriptor.
    #[inline(always)]
    pub(crate) fn unlink_page(&mut self, mem_map: &MemMap, pfn: Pfn, page: &Page) {
        // One copy of the slice for the whole operation: through `&MemMap` it would be
        // loaded again after every store to a descriptor.
        let pages = mem_map.window();
        debug_assert!(core::ptr::eq(page, pages.page(pfn)));
        let (prev, next) = (page.prev(), page.next());
        match prev {
            NO_PFN => {
                assert_eq!(self.head, pfn.0 as u32, "{pfn:?} is not on this list");
                self.head = next;
            }
            p => pages.page(Pfn(p as u64)).set_next(next),
        }
        match next {
            NO_PFN => self.tail = prev,
            n => pages.page(Pfn(n as u64)).set_prev(prev),
        }
        page.set_next(NO_PFN);
        page.set_prev(NO_PFN);
        self.len -= 1;
    }

    /// Take the block at the head off the list (the first `unlink` of a list that is
    /// consumed from its head, as a pageset is by allocation). The head has no `prev`,
    /// so only its successor's link changes; `unlink` would test for both neighbours.
    #[inline(always)]
    pub(crate) fn pop_head<'m>(&mut self, mem_map: &'m MemMap) -> Option<(Pfn, &'m Page)> {
        // One copy of the slice for the whole operation: through `&MemMap` it would be
        // loaded again after every store to a descriptor.
        let pages = mem_map.window();
        if self.head == NO_PFN {
            return None;
        }
        let pfn = Pfn(self.head as u64);
        let page = pages.page(pfn);
        debug_assert_eq!(page.prev(), NO_PFN, "{pfn:?} heads its list");
        let next = page.next();
        match next {
            NO_PFN => self.tail = NO_PFN,
            n => pages.page(Pfn(n as u64)).set_prev(NO_PFN),
        }
        self.head = next;
        page.set_next(NO_PFN);
        self.len -= 1;
        Some((pfn, page))
    }

    /// Take the block at the tail off the list (the oldest of a head-pushed list, as a
    /// pageset drain takes them). The mirror of [`PfnList::pop_head`].
    #[inline(always)]
    pub(crate) fn pop_tail<'m>(&mut self, mem_map: &'m MemMap) -> Option<(Pfn, &'m Page)> {
        // One copy of the slice for the whole operation: through `&MemMap` it would be
        // loaded again after every store to a descriptor.
        let pages = mem_map.window();
        if self.tail == NO_PFN {
            return None;
        }
        let pfn = Pfn(self.tail as u64);
        let page = pages.page(pfn);
        debug_assert_eq!(page.next(), NO_PFN, "{pfn:?} ends its list");
        let prev = page.prev();
        match prev {
            NO_PFN => self.head = NO_PFN,
            p => pages.page(Pfn(p as u64)).set_next(NO_PFN),
        }
        self.tail = prev;
        page.set_prev(NO_PFN);
        self.len -= 1;
        Some((pfn, page))
    }

    /// Take the first `n` blocks (all, if fewer) off the head, in order, calling `each` on
    /// each one's pfn and descriptor; returns how many were taken. The list and the taken
    /// blocks end as `n` rounds of [`PfnList::pop_head`] leave them, but the list's ends
    /// and length are written once and the remaining head's `prev` once: per block, only
    /// its own links change (a bulk allocation's run, `__rmqueue_pcplist` in a loop).
    #[inline(always)]
    pub(crate) fn pop_head_run<'m>(
        &mut self,
        mem_map: &'m MemMap,
        n: u64,
        mut each: impl FnMut(Pfn, &'m Page),
    ) -> u64 {
        let n = n.min(self.len);
        let pages = mem_map.window();
        let mut next = self.head;
        for _ in 0..n {
            let pfn = Pfn(next as u64);
            let page = pages.page(pfn);
            next = page.next();
            page.set_next(NO_PFN);
            page.set_prev(NO_PFN);
            each(pfn, page);
        }
        if n > 0 {
            match next {
                NO_PFN => self.tail = NO_PFN,
                rest => mem_map.page(Pfn(rest as u64)).set_prev(NO_PFN),
            }
            self.head = next;
            self.len -= n;
        }
        n
    }

    /// Move the first `n` blocks (all, if fewer) to the tail of `to`, keeping their order,
    /// and call `mark` on each one's descriptor; returns the blocks moved (Linux's
    /// `list_cut_position` + `list_splice_tail`). The lists end exactly as `n` rounds of
    /// [`PfnList::pop_head`] and `push_tail` would leave them, but only the links at the
    /// cut and at the splice are written: the moved blocks keep the links between them.
    #[inline(always)]
    pub(crate) fn splice_head_to_tail(
        &mut self,
        mem_map: &MemMap,
        n: u64,
        to: &mut PfnList,
        mut mark: impl FnMut(&Page),
    ) -> u64 {
        let n = n.min(self.len);
        if n == 0 {
            return 0;
        }
        let first = self.head;
        let first_page = mem_map.page(Pfn(first as u64));
        debug_assert_eq!(first_page.prev(), NO_PFN, "pfn {first:#x} heads its list");
        mark(first_page);
        let (mut last, mut last_page) = (first, first_page);
        for _ in 1..n {
            last = last_page.next();
            last_page = mem_map.page(Pfn(last as u64));
            mark(last_page);
        }
        let rest = last_page.next();
        match rest {
            NO_PFN => self.tail = NO_PFN,
            r => mem_map.page(Pfn(r as u64)).set_prev(NO_PFN),
        }
        self.head = rest;
        self.len -= n;
        last_page.set_next(NO_PFN);
        first_page.set_prev(to.tail);
        match to.tail {
            NO_PFN => to.head = first,
            old => mem_map.page(Pfn(old as u64)).set_next(first),
        }
        to.tail = last;
        to.len += n;
        n
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

/// Blocks pushed one after another at the head of a list, linked to each other as they
/// come and put on the list by [`HeadRun::finish`]: the list then is what
/// [`PfnList::push_head_page`] of each block in turn leaves, but per block only the links
/// between neighbours in the run are written (a batched free's run of pages; Linux ≥ 6.10
/// batches `free_unref_folios` likewise). Until `finish`, the blocks are on no list.
pub(crate) struct HeadRun<'m> {
    /// The block pushed last: the list's head after `finish`.
    top: (Pfn, &'m Page),
    /// The block pushed first: linked to the list's old head by `finish`.
    bottom: (Pfn, &'m Page),
    len: u64,
}

impl<'m> HeadRun<'m> {
    /// A run whose first block is `pfn`.
    #[inline(always)]
    pub(crate) fn new(pfn: Pfn, page: &'m Page) -> HeadRun<'m> {
        HeadRun {
            top: (pfn, page),
            bottom: (pfn, page),
            len: 1,
        }
    }

    /// Push the block at `pfn`, whose descriptor is `page`, on top of the run.
    #[inline(always)]
    pub(crate) fn push(&mut self, pfn: Pfn, page: &'m Page) {
        let (top, top_page) = self.top;
        page.set_next(top.0 as u32);
        top_page.set_prev(pfn.0 as u32);
        self.top = (pfn, page);
        self.len += 1;
    }

    /// Put the run at the head of `list`; returns the blocks it held.
    #[inline(always)]
    pub(crate) fn finish(self, list: &mut PfnList, mem_map: &MemMap) -> u64 {
        let ((top, top_page), (bottom, bottom_page)) = (self.top, self.bottom);
        top_page.set_prev(NO_PFN);
        bottom_page.set_next(list.head);
        match list.head {
            NO_PFN => list.tail = bottom.0 as u32,
            old => mem_map.page(Pfn(old as u64)).set_prev(bottom.0 as u32),
        }
        list.head = top.0 as u32;
        list.len += self.len;
        self.len
    }
}

impl Default for PfnList {
    fn default() -> PfnList {
        PfnList::EMPTY
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::page::PageState;

    /// Two lists over one mem_map: `from` holds pfns 0..`from_len`, `to` the next
    /// `to_len` pfns, both pushed at the tail.
    fn lists(from_len: u64, to_len: u64) -> (MemMap, PfnList, PfnList) {
        let spanned = from_len + to_len;
        let mem_map = crate::page_alloc::mem_map::all_managed(0, spanned);
        let (mut from, mut to) = (PfnList::EMPTY, PfnList::EMPTY);
        for pfn in 0..from_len {
            from.push_tail(&mem_map, Pfn(pfn));
        }
        for pfn in from_len..spanned {
            to.push_tail(&mem_map, Pfn(pfn));
        }
        (mem_map, from, to)
    }

    /// Every descriptor's links and both lists' ends and lengths.
    fn links(mem_map: &MemMap, a: &PfnList, b: &PfnList) -> Vec<(u32, u32)> {
        let mut all: Vec<(u32, u32)> = mem_map.iter().map(|(_, p)| (p.next(), p.prev())).collect();
        for list in [a, b] {
            all.push((list.head, list.tail));
            all.push((list.len as u32, 0));
        }
        all
    }

    /// `pop_head_run` of `n` leaves the lists, every link and the blocks handed out as
    /// `n` rounds of `pop_head` do.
    #[test]
    fn pop_head_run_matches_pop_head() {
        for len in [0, 1, 2, 5] {
            for n in 0..=len + 1 {
                let (mem_map, mut list, other) = lists(len, 2);
                let mut taken = Vec::new();
                let got = list.pop_head_run(&mem_map, n, |pfn, page| {
                    assert!(core::ptr::eq(page, mem_map.page(pfn)));
                    taken.push(pfn);
                });
                let (model_map, mut model, model_other) = lists(len, 2);
                let mut expected = Vec::new();
                for _ in 0..n {
                    let Some((pfn, _)) = model.pop_head(&model_map) else {
                        break;
                    };
                    expected.push(pfn);
                }
                assert_eq!(got, expected.len() as u64, "len {len} n {n}");
                assert_eq!(taken, expected, "len {len} n {n}");
                assert_eq!(
                    links(&mem_map, &list, &other),
                    links(&model_map, &model, &model_other),
                    "len {len} n {n}"
                );
            }
        }
    }

    /// A `HeadRun` of blocks, finished onto a list, leaves the list and every link as
    /// `push_head_page` of each block in turn does, on an empty list and on a full one.
    #[test]
    fn head_run_matches_push_head() {
        for list_len in [0, 1, 3] {
            for run_len in 1..=4 {
                let spanned = list_len + run_len;
                let mem_map = crate::page_alloc::mem_map::all_managed(0, spanned);
                let model_map = crate::page_alloc::mem_map::all_managed(0, spanned);
                let (mut list, mut model) = (PfnList::EMPTY, PfnList::EMPTY);
                for pfn in (0..list_len).map(Pfn) {
                    list.push_tail(&mem_map, pfn);
                    model.push_tail(&model_map, pfn);
                }
                let mut pfns = (list_len..spanned).rev().map(Pfn);
                let first = pfns.next().expect("a run has a block");
                let mut run = HeadRun::new(first, mem_map.page(first));
                model.push_head_page(&model_map, first, model_map.page(first));
                for pfn in pfns {
                    run.push(pfn, mem_map.page(pfn));
                    model.push_head_page(&model_map, pfn, model_map.page(pfn));
                }
                assert_eq!(run.finish(&mut list, &mem_map), run_len);
                let empty = PfnList::EMPTY;
                assert_eq!(
                    links(&mem_map, &list, &empty),
                    links(&model_map, &model, &empty),
                    "list {list_len} run {run_len}"
                );
            }
        }
    }

    #[test]
    fn splice_head_to_tail_matches_pop_head_and_push_tail() {
        for (from_len, to_len) in [(0, 0), (1, 0), (0, 2), (1, 1), (5, 0), (5, 3)] {
            for n in 0..=from_len + 1 {
                let (mem_map, mut from, mut to) = lists(from_len, to_len);
                let mut marked = Vec::new();
                let moved = from.splice_head_to_tail(&mem_map, n, &mut to, |page| {
                    page.set_state(PageState::Pcp, crate::page::Order::ZERO);
                    marked.push(core::ptr::from_ref(page));
                });
                let (model_map, mut model_from, mut model_to) = lists(from_len, to_len);
                let mut expected = Vec::new();
                for _ in 0..n {
                    let Some((pfn, _)) = model_from.pop_head(&model_map) else {
                        break;
                    };
                    model_to.push_tail(&model_map, pfn);
                    expected.push(core::ptr::from_ref(mem_map.page(pfn)));
                }
                assert_eq!(moved, expected.len() as u64, "{from_len}/{to_len} n {n}");
                assert_eq!(marked, expected, "{from_len}/{to_len} n {n}: marked");
                assert_eq!(
                    links(&mem_map, &from, &to),
                    links(&model_map, &model_from, &model_to),
                    "{from_len}/{to_len} n {n}"
                );
                let pcp = mem_map.iter().filter(|(_, p)| p.state() == PageState::Pcp);
                assert_eq!(pcp.count() as u64, moved);
            }
        }
    }
}
