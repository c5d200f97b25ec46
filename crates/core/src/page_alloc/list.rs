//! A doubly linked list of blocks threaded through the page descriptors by pfn.
//!
//! Linux counterpart: `struct list_head` as used by `free_area.free_list[]` (through
//! `page->buddy_list`) and `per_cpu_pages.lists[]` (through `page->pcp_list`). A block is
//! on at most one list at a time, so one pair of links in the descriptor serves both.
//! Callers hold the lock that owns the list.
//!
//! The block at a list's head has no back link kept: its `prev` holds whatever it held
//! before it came to the head, and the list's `head` is what says it heads the list.
//! Linux's `list_head` is circular, so its head's `prev` is the list itself and every pop
//! from the head writes the next entry's back link. Here nothing reads a head's `prev`:
//! a walk backwards (a drain, from the tail) stops at the list's length, and `unlink`
//! knows the head by `head`. So a pop from the head, which every allocation from a
//! pageset makes, writes only the popped block's descriptor, not the next block's, a line
//! that may be cold or another CPU's. The order of the blocks is Linux's, link for link
//! but that one. Every block on no list has both links `NO_PFN`, as before.

use super::mem_map::MemMap;
use crate::page::{Page, Pfn, NO_PFN};

/// A list of blocks linked through their first pages' `next`/`prev`. `head` is where
/// Linux's `list_add` puts a block, `tail` where `list_add_tail` does. The head's `prev`
/// is not kept (the module's documentation says why).
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
        let next = page.next();
        let raw = pfn.0 as u32;
        let prev = if self.head == raw {
            self.head = next;
            NO_PFN
        } else {
            let p = page.prev();
            assert_ne!(p, NO_PFN, "{pfn:?} is not on this list");
            pages.page(Pfn(p as u64)).set_next(next);
            p
        };
        match next {
            NO_PFN => self.tail = prev,
            _ if prev == NO_PFN => {}
            n => pages.page(Pfn(n as u64)).set_prev(prev),
        }
        page.set_next(NO_PFN);
        page.set_prev(NO_PFN);
        self.len -= 1;
    }

    /// Take the block at the head off the list (the first `unlink` of a list that is
    /// consumed from its head, as a pageset is by allocation). Only the popped block's
    /// descriptor is written: its successor, the new head, keeps its stale `prev`.
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
        let next = page.next();
        if next == NO_PFN {
            self.tail = NO_PFN;
        }
        self.head = next;
        page.set_next(NO_PFN);
        page.set_prev(NO_PFN);
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
        let prev = if self.head == self.tail {
            self.head = NO_PFN;
            NO_PFN
        } else {
            let p = page.prev();
            pages.page(Pfn(p as u64)).set_next(NO_PFN);
            p
        };
        self.tail = prev;
        page.set_prev(NO_PFN);
        self.len -= 1;
        Some((pfn, page))
    }

    /// Take the first `n` blocks (all, if fewer) off the head, in order, calling `each` on
    /// each one's pfn and descriptor; returns how many were taken. The list and the taken
    /// blocks end as `n` rounds of [`PfnList::pop_head`] leave them (but for the new
    /// head's `prev`, which has no value to keep and which this writes `NO_PFN`), the
    /// list's ends and length written once: per block, only its own links change (a bulk
    /// allocation's run, `__rmqueue_pcplist` in a loop).
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
                // The new head's back link needs no value, but a run writes it, once:
                // without this store the bulk free that follows (`mmkit bench pagealloc
                // --only mmkit-bulk`) took 1.5 ns a page more, 7.8 against 6.3 at N = 32,
                // for a reason not found (the same instructions).
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
        mark(first_page);
        let (mut last, mut last_page) = (first, first_page);
        for _ in 1..n {
            last = last_page.next();
            last_page = mem_map.page(Pfn(last as u64));
            mark(last_page);
        }
        let rest = last_page.next();
        if rest == NO_PFN {
            self.tail = NO_PFN;
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

    use proptest::prelude::*;

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

    /// Every descriptor's links and both lists' ends and lengths; a head's `prev`, which
    /// has no value to keep, shown as 0.
    fn links(mem_map: &MemMap, a: &PfnList, b: &PfnList) -> Vec<(u32, u32)> {
        let mut all: Vec<(u32, u32)> = mem_map.iter().map(|(_, p)| (p.next(), p.prev())).collect();
        for list in [a, b] {
            if list.head != NO_PFN {
                all[list.head as usize].1 = 0;
            }
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

    /// What a sequence of operations does to two lists of 24 blocks, against two
    /// `VecDeque`s: the lists' blocks in order, their lengths, the back link of every
    /// block on a list but its head, and `NO_PFN` links for every block on none.
    #[derive(Clone, Debug)]
    enum Op {
        PushHead(usize, u64),
        PushTail(usize, u64),
        PopHead(usize),
        PopTail(usize),
        Unlink(u64),
        PopHeadRun(usize, u64),
        Splice(usize, u64),
        HeadRun(usize, Vec<u64>),
    }

    fn op() -> impl Strategy<Value = Op> {
        let list = 0..2usize;
        prop_oneof![
            (list.clone(), 0..24u64).prop_map(|(l, p)| Op::PushHead(l, p)),
            (list.clone(), 0..24u64).prop_map(|(l, p)| Op::PushTail(l, p)),
            list.clone().prop_map(Op::PopHead),
            list.clone().prop_map(Op::PopTail),
            (0..24u64).prop_map(Op::Unlink),
            (list.clone(), 0..6u64).prop_map(|(l, n)| Op::PopHeadRun(l, n)),
            (list.clone(), 0..6u64).prop_map(|(l, n)| Op::Splice(l, n)),
            (list, proptest::collection::vec(0..24u64, 1..5)).prop_map(|(l, p)| Op::HeadRun(l, p)),
        ]
    }

    proptest! {
        #[test]
        fn lists_match_a_deque_model(ops in proptest::collection::vec(op(), 0..80)) {
            use alloc::collections::VecDeque;
            let mem_map = crate::page_alloc::mem_map::all_managed(0, 24);
            let mut lists = [PfnList::EMPTY, PfnList::EMPTY];
            let mut model: [VecDeque<u64>; 2] = [VecDeque::new(), VecDeque::new()];
            let on_a_list = |model: &[VecDeque<u64>; 2], pfn: u64| model.iter().any(|m| m.contains(&pfn));
            for op in ops {
                match op {
                    Op::PushHead(l, pfn) if !on_a_list(&model, pfn) => {
                        lists[l].push_head_page(&mem_map, Pfn(pfn), mem_map.page(Pfn(pfn)));
                        model[l].push_front(pfn);
                    }
                    Op::PushTail(l, pfn) if !on_a_list(&model, pfn) => {
                        lists[l].push_tail(&mem_map, Pfn(pfn));
                        model[l].push_back(pfn);
                    }
                    Op::PopHead(l) => {
                        let got = lists[l].pop_head(&mem_map).map(|(pfn, _)| pfn.0);
                        prop_assert_eq!(got, model[l].pop_front());
                    }
                    Op::PopTail(l) => {
                        let got = lists[l].pop_tail(&mem_map).map(|(pfn, _)| pfn.0);
                        prop_assert_eq!(got, model[l].pop_back());
                    }
                    Op::Unlink(pfn) => {
                        if let Some(l) = (0..2).find(|&l| model[l].contains(&pfn)) {
                            lists[l].unlink(&mem_map, Pfn(pfn));
                            model[l].retain(|&p| p != pfn);
                        }
                    }
                    Op::PopHeadRun(l, n) => {
                        let mut got = Vec::new();
                        let taken = lists[l].pop_head_run(&mem_map, n, |pfn, _| got.push(pfn.0));
                        let expected: Vec<u64> = (0..n).map_while(|_| model[l].pop_front()).collect();
                        prop_assert_eq!(taken, expected.len() as u64);
                        prop_assert_eq!(got, expected);
                    }
                    Op::Splice(l, n) => {
                        let [a, b] = &mut lists;
                        let (from, to) = if l == 0 { (a, b) } else { (b, a) };
                        let expected = n.min(model[l].len() as u64);
                        prop_assert_eq!(from.splice_head_to_tail(&mem_map, n, to, |_| {}), expected);
                        for _ in 0..expected {
                            let pfn = model[l].pop_front().expect("the model has as many");
                            model[1 - l].push_back(pfn);
                        }
                    }
                    Op::HeadRun(l, pfns) => {
                        let mut fresh: Vec<u64> = Vec::new();
                        for pfn in pfns {
                            if !on_a_list(&model, pfn) && !fresh.contains(&pfn) {
                                fresh.push(pfn);
                            }
                        }
                        let Some((&first, rest)) = fresh.split_first() else { continue };
                        let mut run = HeadRun::new(Pfn(first), mem_map.page(Pfn(first)));
                        model[l].push_front(first);
                        for &pfn in rest {
                            run.push(Pfn(pfn), mem_map.page(Pfn(pfn)));
                            model[l].push_front(pfn);
                        }
                        prop_assert_eq!(run.finish(&mut lists[l], &mem_map), fresh.len() as u64);
                    }
                    _ => {}
                }
                for l in 0..2 {
                    let listed: Vec<u64> = lists[l].iter(&mem_map).map(|pfn| pfn.0).collect();
                    prop_assert_eq!(&listed, &Vec::from(model[l].clone()));
                    prop_assert_eq!(lists[l].len(), model[l].len() as u64);
                    prop_assert_eq!(lists[l].last().map(|pfn| pfn.0), model[l].back().copied());
                    for pair in listed.windows(2) {
                        prop_assert_eq!(mem_map.page(Pfn(pair[1])).prev(), pair[0] as u32);
                    }
                }
                for pfn in (0..24).filter(|&pfn| !on_a_list(&model, pfn)) {
                    let page = mem_map.page(Pfn(pfn));
                    prop_assert_eq!((page.next(), page.prev()), (NO_PFN, NO_PFN), "pfn {}", pfn);
                }
            }
        }
    }
}
