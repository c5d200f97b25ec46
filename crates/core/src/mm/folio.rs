//! Folios: a block of 2^order pages used as one unit, with the counts Linux keeps on it.
//!
//! Linux counterpart (v6.7): `struct folio` (`include/linux/mm_types.h`), `folio_ref_*`,
//! `folio_mapcount`, `_nr_pages_mapped` (`mm/internal.h`), `free_tail_page_prepare`.
//!
//! Everything lives in the 16-byte page descriptors of [`crate::page`], as in Linux:
//!
//! | page | word | holds |
//! |---|---|---|
//! | head | `flags` | state Allocated + order, `PG_head` for a large folio, LRU flags, memcg id |
//! | head | `private` | reference count (low half), `_mapcount + 1` of the head page (high half) |
//! | head | `next`/`prev` | LRU links |
//! | every tail | `next` | the head pfn (Linux `compound_head`) |
//! | every tail | `private` high half | that page's `_mapcount + 1` |
//! | page 1 | `private` low half | `_nr_pages_mapped`: pages with at least one PTE map |
//!
//! Not modelled: PMD mappings (`_entire_mapcount` stays −1: we map large folios with PTEs
//! only) and `_pincount`.

use crate::page::{Order, Page, PageFlags, Pfn, NO_PFN};
use crate::page_alloc::MemMap;

/// A folio: its head pfn and order. A value, not a reference: the counts are read from
/// and written to the mem_map of the zone that holds it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct Folio {
    /// First page.
    pub pfn: Pfn,
    /// Size: 2^order pages.
    pub order: Order,
}

/// A 16-bit count would overflow: more mappings or references than the descriptor holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CountOverflow;

impl Folio {
    /// Pages in the folio.
    pub fn nr_pages(&self) -> u64 {
        self.order.pages()
    }

    /// Whether `pfn` is one of the folio's pages.
    pub fn contains(&self, pfn: Pfn) -> bool {
        (self.pfn.0..self.pfn.0 + self.nr_pages()).contains(&pfn.0)
    }

    /// The head's descriptor.
    pub fn head<'m>(&self, mem_map: &'m MemMap) -> &'m Page {
        mem_map.page(self.pfn)
    }

    /// Make a freshly allocated block a folio: `PG_head` on a large one, every tail
    /// pointing at the head, no page mapped, `refs` references.
    pub fn init(&self, mem_map: &MemMap, refs: u16) {
        let head = self.head(mem_map);
        head.init_refcount(refs);
        let mut flags = head.flags();
        flags.set(PageFlags::HEAD, self.order != Order::ZERO);
        head.set_flags(flags);
        for i in 1..self.nr_pages() {
            let tail = mem_map.page(self.pfn.add(i));
            tail.clear_tail();
            tail.set_next(self.pfn.0 as u32);
        }
    }

    /// Undo [`Folio::init`] before the block goes back to the allocator.
    pub fn clear(&self, mem_map: &MemMap) {
        let head = self.head(mem_map);
        let mut flags = head.flags();
        flags.remove(PageFlags::HEAD);
        head.set_flags(flags);
        for i in 1..self.nr_pages() {
            mem_map.page(self.pfn.add(i)).clear_tail();
        }
    }

    /// `folio_ref_count`.
    pub fn refcount(&self, mem_map: &MemMap) -> u16 {
        self.head(mem_map).refcount()
    }

    /// `folio_ref_add`.
    pub fn ref_add(&self, mem_map: &MemMap, n: u16) -> Result<u16, CountOverflow> {
        self.head(mem_map).ref_add(n).ok_or(CountOverflow)
    }

    /// `folio_ref_sub_return`: drop `n` references; how many are left. Panics if fewer
    /// than `n` are held: the caller's accounting is broken, and going on would free a
    /// folio that is still in use.
    pub fn ref_sub(&self, mem_map: &MemMap, n: u16) -> u16 {
        self.head(mem_map)
            .ref_sub(n)
            .expect("dropping a folio reference nobody holds")
    }

    /// `_mapcount + 1` of the folio's page at `pfn`.
    pub fn page_mapcount(&self, mem_map: &MemMap, pfn: Pfn) -> u16 {
        debug_assert!(self.contains(pfn));
        mem_map.page(pfn).mapcount()
    }

    /// `_nr_pages_mapped`: pages with at least one PTE map (for order 0: the page's own
    /// state).
    pub fn nr_pages_mapped(&self, mem_map: &MemMap) -> u64 {
        if self.order == Order::ZERO {
            u64::from(self.head(mem_map).mapcount() > 0)
        } else {
            u64::from(mem_map.page(self.pfn.add(1)).tail_counter())
        }
    }

    fn set_nr_pages_mapped(&self, mem_map: &MemMap, value: u64) {
        if self.order != Order::ZERO {
            let value = u16::try_from(value).expect("at most 2^MAX_ORDER pages");
            mem_map.page(self.pfn.add(1)).set_tail_counter(value);
        }
    }

    /// `folio_mapcount`: PTE maps of all pages.
    pub fn mapcount(&self, mem_map: &MemMap) -> u64 {
        (0..self.nr_pages())
            .map(|i| u64::from(mem_map.page(self.pfn.add(i)).mapcount()))
            .sum()
    }

    /// `folio_add_rmap_pte` for the page at `pfn`: one more PTE maps it. Returns whether
    /// the page went from unmapped to mapped (the `NR_*_MAPPED` statistic changes).
    pub fn add_rmap_pte(&self, mem_map: &MemMap, pfn: Pfn) -> Result<bool, CountOverflow> {
        debug_assert!(self.contains(pfn));
        let count = mem_map.page(pfn).mapcount_inc().ok_or(CountOverflow)?;
        let first = count == 1;
        if first && self.order != Order::ZERO {
            self.set_nr_pages_mapped(mem_map, self.nr_pages_mapped(mem_map) + 1);
        }
        Ok(first)
    }

    /// Take one PTE map off each of `nr` pages from `pfn` and return how many became
    /// unmapped, updating `_nr_pages_mapped` once (the core of both `page_remove_rmap` and
    /// Yin 2023's `folio_remove_rmap_range`; the two differ in how often their callers
    /// update statistics and references).
    pub fn remove_rmap_ptes(&self, mem_map: &MemMap, pfn: Pfn, nr: u64) -> u64 {
        debug_assert!(self.contains(pfn) && self.contains(pfn.add(nr - 1)));
        let mut unmapped = 0;
        for i in 0..nr {
            let count = mem_map
                .page(pfn.add(i))
                .mapcount_dec()
                .expect("removing a PTE map the page does not have");
            unmapped += u64::from(count == 0);
        }
        if unmapped != 0 && self.order != Order::ZERO {
            self.set_nr_pages_mapped(mem_map, self.nr_pages_mapped(mem_map) - unmapped);
        }
        unmapped
    }

    /// The folio a page belongs to, as the mem_map says: the page itself if it heads an
    /// allocated block, else the head its `next` link names (Linux `page_folio`).
    pub fn of_page(mem_map: &MemMap, pfn: Pfn) -> Option<Folio> {
        let page = mem_map.get(pfn)?;
        match page.state() {
            crate::page::PageState::Allocated => Some(Folio {
                pfn,
                order: page.order(),
            }),
            crate::page::PageState::Tail if page.next() != NO_PFN => {
                let head = Pfn(u64::from(page.next()));
                let head_page = mem_map.get(head)?;
                let folio = Folio {
                    pfn: head,
                    order: head_page.order(),
                };
                (head_page.state() == crate::page::PageState::Allocated && folio.contains(pfn))
                    .then_some(folio)
            }
            _ => None,
        }
    }
}
