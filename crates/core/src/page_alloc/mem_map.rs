//! A zone's slice of the mem_map: one [`Page`] per spanned pfn, and the pageblock
//! migratetypes.
//!
//! Linux counterpart: the `struct page` array (`mem_map`/sparsemem sections) and
//! `pageblock_flags` (`get_pfnblock_migratetype`, `set_pageblock_migratetype`). Each zone
//! owns its own slice, so zones far apart in the physical address space (DMA32 ends at
//! 4 GiB, a second node may start much higher) cost nothing for the gap.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::types::MigrateType;
use super::watermark::PAGEBLOCK_ORDER;
use crate::page::{Page, PageState, Pfn};

/// The pages of one zone and their pageblock migratetypes.
#[derive(Debug)]
pub struct MemMap {
    start_pfn: u64,
    /// `start_pfn >> PAGEBLOCK_ORDER`, kept so a pageblock lookup is one subtraction.
    start_pageblock: u64,
    pages: Box<[Page]>,
    /// One migratetype per pageblock touched by the zone; index
    /// `(pfn >> PAGEBLOCK_ORDER) − (start_pfn >> PAGEBLOCK_ORDER)`.
    pageblocks: Box<[AtomicU8]>,
}

impl MemMap {
    /// `spanned` pages from `start_pfn`: the first `present − managed` reserved, then
    /// `managed` pages owned by nobody yet (the caller frees them into the buddy lists),
    /// then holes. Every pageblock starts MOVABLE, as at boot (`memmap_init_range`).
    pub(crate) fn new(start_pfn: u64, spanned: u64, present: u64, managed: u64) -> MemMap {
        let reserved = present - managed;
        // Three runs rather than a test per page: a simulated machine spans tens of
        // millions of pages, and this loop was a visible part of a run's start-up.
        let mut pages: Vec<Page> = Vec::with_capacity(spanned as usize);
        for (state, end) in [
            (PageState::Reserved, reserved),
            (PageState::Tail, present),
            (PageState::Hole, spanned),
        ] {
            let run = end.saturating_sub(pages.len() as u64) as usize;
            pages.extend(core::iter::repeat_with(|| Page::new(state)).take(run));
        }
        let nr_pageblocks = if spanned == 0 {
            0
        } else {
            ((start_pfn + spanned - 1) >> PAGEBLOCK_ORDER) - (start_pfn >> PAGEBLOCK_ORDER) + 1
        };
        let pageblocks = (0..nr_pageblocks)
            .map(|_| AtomicU8::new(MigrateType::Movable as u8))
            .collect();
        MemMap {
            start_pfn,
            start_pageblock: start_pfn >> PAGEBLOCK_ORDER,
            pages: pages.into_boxed_slice(),
            pageblocks,
        }
    }

    /// Whether `pfn` is in this zone's span.
    pub fn spans(&self, pfn: Pfn) -> bool {
        pfn.0 >= self.start_pfn && pfn.0 - self.start_pfn < self.pages.len() as u64
    }

    /// The descriptor of `pfn`, if the zone spans it.
    #[inline]
    pub fn get(&self, pfn: Pfn) -> Option<&Page> {
        // One unsigned comparison: a pfn below `start_pfn` wraps to an offset far beyond
        // any slice, so `get` refuses it as it refuses one past the end.
        let offset = usize::try_from(pfn.0.wrapping_sub(self.start_pfn)).ok()?;
        self.pages.get(offset)
    }

    /// The descriptor of `pfn`. Panics when the zone does not span it: callers reach here
    /// only with pfns already checked, so anything else is corruption.
    #[inline]
    pub fn page(&self, pfn: Pfn) -> &Page {
        self.get(pfn)
            .unwrap_or_else(|| panic!("{pfn:?} is outside the zone"))
    }

    /// The pfns of the zone with their descriptors, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (Pfn, &Page)> {
        let start = self.start_pfn;
        self.pages
            .iter()
            .enumerate()
            .map(move |(i, page)| (Pfn(start + i as u64), page))
    }

    fn pageblock_index(&self, pfn: Pfn) -> usize {
        ((pfn.0 >> PAGEBLOCK_ORDER) - self.start_pageblock) as usize
    }

    /// The migratetype of the pageblock holding `pfn` (`get_pfnblock_migratetype`).
    pub fn pageblock_migratetype(&self, pfn: Pfn) -> MigrateType {
        let bits = self.pageblocks[self.pageblock_index(pfn)].load(Relaxed);
        MigrateType::from_index(bits as usize).expect("pageblock migratetype is valid")
    }

    /// Retag the pageblock holding `pfn` (`set_pageblock_migratetype`); zone lock held.
    pub(crate) fn set_pageblock_migratetype(&self, pfn: Pfn, mt: MigrateType) {
        self.pageblocks[self.pageblock_index(pfn)].store(mt as u8, Relaxed);
    }
}
