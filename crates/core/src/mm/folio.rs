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
//! | page 2 | `private` low half | `_entire_mapcount + 1`: PMDs mapping the whole folio (PMD-sized folios only) |
//!
//! Linux keeps `_entire_mapcount` in page 1 beside `_nr_pages_mapped`; page 1's spare half
//! is taken here, so page 2's holds it (a PMD-sized folio has 512 pages). Linux marks a
//! PMD-mapped folio in `_nr_pages_mapped` with the `COMPOUND_MAPPED` bit; here that bit is
//! `_entire_mapcount > 0`, and `_nr_pages_mapped` counts PTE-mapped pages only.
//! `folio_mapcount` is the entire map count plus every page's PTE map count (6.7's
//! `folio_total_mapcount`); a page counts as mapped for `NR_ANON_MAPPED` when a PTE or a
//! PMD maps it.
//!
//! Not modelled: `_pincount`.

use super::huge_memory::{pmd_mappable, HPAGE_PMD_ORDER};
use crate::page::{Order, Page, PageFlags, Pfn, NO_PFN};
use crate::page_alloc::MemMap;

/// The tail page whose spare half-word holds `_entire_mapcount + 1` (see the module
/// documentation: page 1's is `_nr_pages_mapped`).
const ENTIRE_MAPCOUNT_PAGE: u64 = 2;

/// What adding or removing a PMD map changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct PmdRmap {
    /// The entire map count went from 0 to 1 or from 1 to 0 (`NR_ANON_THPS` changes).
    pub(crate) first_or_last: bool,
    /// Pages that became mapped or unmapped: those no PTE maps (`NR_*_MAPPED` changes by
    /// this much).
    pub(crate) pages: u64,
}

/// A folio: its head pfn and order. A value, not a reference: the counts are read from
/// and written to the mem_map of the zone that holds it.
///
/// Outside the core a folio's counts are read-only: references and map counts change
/// only through [`Memory`](super::Memory)'s calls (faults, `munmap`, fork, reclaim),
/// which keep them equal to what the page tables hold, as
/// [`Memory::verify`](super::Memory::verify) checks.
///
/// ```
/// use mmkit_core::mm::{Folio, Memory, NoIo};
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::policy::MmPolicy;
/// use mmkit_core::{Order, PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};
/// use std::sync::Arc;
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let mut memory = Memory::new(Arc::new(allocator), MmPolicy::V6_7, 0);
/// let mm = memory.create_mm();
/// memory.mmap_anon(mm, 0x4000, 16, Order::ZERO)?;
///
/// // A write fault maps one order-0 folio: one reference, one PTE map.
/// let folio = memory.access(Caller::task(0), mm, 0x4000, true, &mut NoIo)?.folio;
/// let mem_map = memory.allocator().find_zone(folio.pfn).unwrap().mem_map();
/// assert_eq!((folio.refcount(mem_map), folio.mapcount(mem_map)), (1, 1));
/// assert_eq!(Folio::of_page(mem_map, folio.pfn), Some(folio));
/// memory.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Taking a reference or a map count the page tables do not hold, which made `verify()`
/// fail ("entire map count 2, 1 PMDs"), does not compile:
///
/// ```compile_fail,E0624
/// # use mmkit_core::mm::Folio;
/// # use mmkit_core::page_alloc::MemMap;
/// fn forge(folio: Folio, mem_map: &MemMap) {
///     folio.ref_sub(mem_map, 1); // private: only the mapping layer's paths drop references
/// }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct Folio {
    /// First page.
    pub pfn: Pfn,
    /// Size: 2^order pages.
    pub order: Order,
}

/// A 16-bit count would overflow: more mappings or references than the descriptor holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct CountOverflow;

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
    pub(crate) fn init(&self, mem_map: &MemMap, refs: u16) {
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
    pub(crate) fn clear(&self, mem_map: &MemMap) {
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
    pub(crate) fn ref_add(&self, mem_map: &MemMap, n: u16) -> Result<u16, CountOverflow> {
        self.head(mem_map).ref_add(n).ok_or(CountOverflow)
    }

    /// `folio_ref_sub_return`: drop `n` references; how many are left. Panics if fewer
    /// than `n` are held: the caller's accounting is broken, and going on would free a
    /// folio that is still in use.
    pub(crate) fn ref_sub(&self, mem_map: &MemMap, n: u16) -> u16 {
        self.head(mem_map)
            .ref_sub(n)
            .expect("dropping a folio reference nobody holds")
    }

    /// `page_mapcount`: the PTE maps of the folio's page at `pfn` plus the PMD maps of
    /// the whole folio (6.7 adds `folio_entire_mapcount` for a large folio).
    pub fn page_mapcount(&self, mem_map: &MemMap, pfn: Pfn) -> u64 {
        debug_assert!(self.contains(pfn));
        u64::from(mem_map.page(pfn).mapcount()) + self.entire_mapcount(mem_map)
    }

    /// `folio_entire_mapcount`: PMDs mapping the whole folio (0 unless PMD-sized).
    pub fn entire_mapcount(&self, mem_map: &MemMap) -> u64 {
        if pmd_mappable(self.order) {
            u64::from(
                mem_map
                    .page(self.pfn.add(ENTIRE_MAPCOUNT_PAGE))
                    .tail_counter(),
            )
        } else {
            0
        }
    }

    /// Pages mapped by a PTE or a PMD: every page while a PMD maps the folio, else the
    /// PTE-mapped ones (what `NR_*_MAPPED` counts for the folio).
    pub fn pages_mapped(&self, mem_map: &MemMap) -> u64 {
        if self.entire_mapcount(mem_map) > 0 {
            self.nr_pages()
        } else {
            self.nr_pages_mapped(mem_map)
        }
    }

    /// `folio_add_anon_rmap_pmd` (6.7: `page_add_anon_rmap(.., RMAP_COMPOUND)` and
    /// `folio_add_new_anon_rmap` of a PMD-sized folio): one more PMD maps the whole folio.
    pub(crate) fn add_rmap_pmd(&self, mem_map: &MemMap) -> Result<PmdRmap, CountOverflow> {
        assert!(
            self.order.get() == HPAGE_PMD_ORDER,
            "only a PMD-sized folio has a PMD map"
        );
        let page = mem_map.page(self.pfn.add(ENTIRE_MAPCOUNT_PAGE));
        let count = page.tail_counter().checked_add(1).ok_or(CountOverflow)?;
        page.set_tail_counter(count);
        let first_or_last = count == 1;
        let pages = if first_or_last {
            self.nr_pages() - self.nr_pages_mapped(mem_map)
        } else {
            0
        };
        Ok(PmdRmap {
            first_or_last,
            pages,
        })
    }

    /// `page_remove_rmap(.., compound = true)` (6.8: `folio_remove_rmap_pmd`): one PMD
    /// map less. When it was the last, the pages no PTE maps become unmapped.
    pub(crate) fn remove_rmap_pmd(&self, mem_map: &MemMap) -> PmdRmap {
        let page = mem_map.page(self.pfn.add(ENTIRE_MAPCOUNT_PAGE));
        let count = page
            .tail_counter()
            .checked_sub(1)
            .filter(|_| pmd_mappable(self.order))
            .expect("removing a PMD map the folio does not have");
        page.set_tail_counter(count);
        let first_or_last = count == 0;
        let pages = if first_or_last {
            self.nr_pages() - self.nr_pages_mapped(mem_map)
        } else {
            0
        };
        PmdRmap {
            first_or_last,
            pages,
        }
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

    /// `folio_mapcount`: the PMD maps plus the PTE maps of all pages.
    pub fn mapcount(&self, mem_map: &MemMap) -> u64 {
        self.entire_mapcount(mem_map)
            + (0..self.nr_pages())
                .map(|i| u64::from(mem_map.page(self.pfn.add(i)).mapcount()))
                .sum::<u64>()
    }

    /// `folio_add_rmap_pte` for the page at `pfn`: one more PTE maps it. Returns whether
    /// the page went from unmapped to mapped (the `NR_*_MAPPED` statistic changes): its
    /// first PTE map, and no PMD maps the folio.
    pub(crate) fn add_rmap_pte(&self, mem_map: &MemMap, pfn: Pfn) -> Result<bool, CountOverflow> {
        debug_assert!(self.contains(pfn));
        let count = mem_map.page(pfn).mapcount_inc().ok_or(CountOverflow)?;
        let first = count == 1;
        if first && self.order != Order::ZERO {
            self.set_nr_pages_mapped(mem_map, self.nr_pages_mapped(mem_map) + 1);
        }
        Ok(first && self.entire_mapcount(mem_map) == 0)
    }

    /// Take one PTE map off each of `nr` pages from `pfn` and return how many became
    /// unmapped (lost their last PTE map while no PMD maps the folio), updating
    /// `_nr_pages_mapped` once (the core of both `page_remove_rmap` and
    /// Yin 2023's `folio_remove_rmap_range`; the two differ in how often their callers
    /// update statistics and references).
    pub(crate) fn remove_rmap_ptes(&self, mem_map: &MemMap, pfn: Pfn, nr: u64) -> u64 {
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
        if self.entire_mapcount(mem_map) > 0 {
            // A PMD still maps every page (6.7: `COMPOUND_MAPPED` is set).
            return 0;
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
