//! A zone's slice of the mem_map: one [`Page`] per spanned pfn, and the pageblock
//! migratetypes.
//!
//! Linux counterpart: the `struct page` array (`mem_map`/sparsemem sections) and
//! `pageblock_flags` (`get_pfnblock_migratetype`, `set_pageblock_migratetype`). Each zone
//! owns its own slice, so zones far apart in the physical address space (DMA32 ends at
//! 4 GiB, a second node may start much higher) cost nothing for the gap.
//!
//! The descriptors live on the heap ([`PageAllocator::new`]) or in storage the caller
//! carved out of the memory it manages ([`PageAllocator::with_mem_map`]), as Linux's
//! `alloc_node_mem_map` takes the mem_map from memblock before any allocator exists.
//! The pageblock migratetypes (a byte per 2 MiB) stay on the heap either way.
//!
//! [`PageAllocator::new`]: super::PageAllocator::new
//! [`PageAllocator::with_mem_map`]: super::PageAllocator::with_mem_map

use alloc::boxed::Box;
use core::alloc::Layout;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::types::MigrateType;
use super::watermark::PAGEBLOCK_ORDER;
use crate::page::{Page, PageState, Pfn};
use crate::topology::PresentRange;

/// The pages of one zone and their pageblock migratetypes.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::page::PageState;
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::page_alloc::MigrateType;
/// use mmkit_core::{Gfp, Order};
///
/// let pfn = allocator.alloc_pages(Caller::task(0), Gfp::KERNEL, Order::ZERO)?;
/// let mem_map = allocator.find_zone(pfn).unwrap().mem_map();
/// assert!(mem_map.spans(pfn));
/// assert_eq!(mem_map.page(pfn).state(), PageState::Allocated);
/// assert_eq!(mem_map.pageblock_migratetype(pfn), MigrateType::Unmovable);
/// # allocator.free_pages(Caller::task(0), pfn, Order::ZERO)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct MemMap {
    start_pfn: u64,
    /// `start_pfn >> PAGEBLOCK_ORDER`, kept so a pageblock lookup is one subtraction.
    start_pageblock: u64,
    pages: Descriptors,
    /// One migratetype per pageblock touched by the zone; index
    /// `(pfn >> PAGEBLOCK_ORDER) − (start_pfn >> PAGEBLOCK_ORDER)`.
    pageblocks: Box<[AtomicU8]>,
}

/// A zone's share of the descriptor storage a caller gives
/// ([`PageAllocator::with_mem_map`](super::PageAllocator::with_mem_map)).
pub(crate) struct Storage {
    /// Exactly the zone's spanned pages' descriptors.
    pub(crate) pages: &'static mut [Page],
    /// Every byte is zero, the all-zero descriptor being a managed page owned by nobody
    /// ([`PageAllocator::with_zeroed_mem_map`](super::PageAllocator::with_zeroed_mem_map)).
    pub(crate) zeroed: bool,
}

/// Where a zone's descriptors live.
#[derive(Debug)]
enum Descriptors {
    /// A zeroed heap allocation, freed with the zone.
    Heap(Box<[Page]>),
    /// The zone's share of the storage given to
    /// [`PageAllocator::with_mem_map`](super::PageAllocator::with_mem_map).
    Caller(&'static [Page]),
}

impl Descriptors {
    /// The descriptors. Both variants are a pointer and a length at the same place, so
    /// the compiler turns the match into two loads (callgrind's fast-path counts did not
    /// move).
    #[inline(always)]
    fn as_slice(&self) -> &[Page] {
        match self {
            Descriptors::Heap(pages) => pages,
            Descriptors::Caller(pages) => pages,
        }
    }
}

impl MemMap {
    /// `spanned` pages from `start_pfn`: the reserved runs of `present` reserved, its
    /// managed runs owned by nobody yet (the caller frees them into the buddy lists), every
    /// other pfn a hole. `present` is in pfn order and inside the span. Every pageblock
    /// starts MOVABLE, as at boot (`memmap_init_range`).
    ///
    /// The descriptors come from a zeroed allocation and the all-zero descriptor is a
    /// managed page owned by nobody: [`PageState::Tail`], order 0, no links. So only the
    /// reserved and hole runs are written here, and the buddy set-up after this writes
    /// only block heads, one per 4 MiB block: one 4 KiB page of the mem_map in four. A
    /// large zeroed allocation is `calloc` → a fresh `mmap`, whose pages the kernel maps
    /// on first touch. A simulated machine spans tens of millions of pages (a 1 GiB
    /// mem_map for two 128 GiB nodes), most of which a run never touches; writing every
    /// descriptor took ≈0.45 s and 262k page faults of each run's start-up.
    ///
    /// With `storage` (exactly `spanned` descriptors) the descriptors go there instead.
    /// Storage in any state has every descriptor written: memory a kernel carved out holds
    /// whatever was there before. Storage known to be zero ([`Storage::zeroed`]) is
    /// written as the heap allocation is, only where holes and reserved runs are.
    pub(crate) fn new(
        start_pfn: u64,
        spanned: u64,
        present: &[PresentRange],
        storage: Option<Storage>,
    ) -> MemMap {
        let len = spanned as usize;
        let pages = match storage {
            Some(Storage { pages, zeroed }) => {
                assert_eq!(pages.len(), len, "the zone's share of the mem_map storage");
                if zeroed {
                    debug_assert!(
                        [pages.first(), pages.last()]
                            .into_iter()
                            .flatten()
                            .all(Page::is_zeroed),
                        "storage promised zeroed holds a written descriptor"
                    );
                } else {
                    pages.fill_with(|| Page::new(PageState::Tail));
                }
                init_holes_and_reserved(pages, start_pfn, present);
                Descriptors::Caller(pages)
            }
            None => {
                let mut pages = bytemuck::allocation::try_zeroed_slice_box::<Page>(len)
                    .unwrap_or_else(|()| {
                        // Out of memory: abort as `Vec::with_capacity` would, saying how much.
                        let layout =
                            Layout::array::<Page>(len).expect("the mem_map's size fits usize");
                        alloc::alloc::handle_alloc_error(layout)
                    });
                init_holes_and_reserved(&mut pages, start_pfn, present);
                Descriptors::Heap(pages)
            }
        };
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
            pages,
            pageblocks,
        }
    }

    /// Whether `pfn` is in this zone's span.
    pub fn spans(&self, pfn: Pfn) -> bool {
        pfn.0 >= self.start_pfn && pfn.0 - self.start_pfn < self.pages.as_slice().len() as u64
    }

    /// Whether the descriptors are in storage the caller gave
    /// ([`PageAllocator::with_mem_map`](super::PageAllocator::with_mem_map)).
    pub fn in_caller_storage(&self) -> bool {
        matches!(self.pages, Descriptors::Caller(_))
    }

    /// The descriptor of `pfn`, if the zone spans it.
    #[inline(always)]
    pub fn get(&self, pfn: Pfn) -> Option<&Page> {
        self.window().get(pfn)
    }

    /// The descriptors and the first pfn as a value for a loop over many pages to keep in
    /// registers: read through `&MemMap`, they are loaded again after every store to a
    /// descriptor (an atomic, which the compiler cannot prove does not alias them). The
    /// bulk allocation's and the batched free's page loops use it (callgrind, session 8:
    /// bulk alloc 40.2 → 38.5, bulk free 65.7 → 64.7 instructions per page).
    #[inline(always)]
    pub(crate) fn window(&self) -> MemMapWindow<'_> {
        MemMapWindow {
            start_pfn: self.start_pfn,
            pages: self.pages.as_slice(),
        }
    }

    /// The descriptor of `pfn`. Panics when the zone does not span it: callers reach here
    /// only with pfns already checked, so anything else is corruption.
    #[inline(always)]
    pub fn page(&self, pfn: Pfn) -> &Page {
        self.get(pfn)
            .unwrap_or_else(|| panic!("{pfn:?} is outside the zone"))
    }

    /// The pfns of the zone with their descriptors, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (Pfn, &Page)> {
        let start = self.start_pfn;
        self.pages
            .as_slice()
            .iter()
            .enumerate()
            .map(move |(i, page)| (Pfn(start + i as u64), page))
    }

    #[inline]
    fn pageblock_index(&self, pfn: Pfn) -> usize {
        ((pfn.0 >> PAGEBLOCK_ORDER) - self.start_pageblock) as usize
    }

    /// The migratetype of the pageblock holding `pfn` (`get_pfnblock_migratetype`).
    #[inline]
    pub fn pageblock_migratetype(&self, pfn: Pfn) -> MigrateType {
        let bits = self.pageblocks[self.pageblock_index(pfn)].load(Relaxed);
        MigrateType::from_index(bits as usize).expect("pageblock migratetype is valid")
    }

    /// Retag the pageblock holding `pfn` (`set_pageblock_migratetype`); zone lock held.
    pub(crate) fn set_pageblock_migratetype(&self, pfn: Pfn, mt: MigrateType) {
        self.pageblocks[self.pageblock_index(pfn)].store(mt as u8, Relaxed);
    }
}

/// Mark the holes and reserved runs of `pages`, the descriptors of the pfns from
/// `start_pfn`, whose every descriptor is the all-zero one (a managed page owned by
/// nobody). `present` is in pfn order and inside the span.
fn init_holes_and_reserved(pages: &mut [Page], start_pfn: u64, present: &[PresentRange]) {
    let index = |pfn: Pfn| (pfn.0 - start_pfn) as usize;
    let mut hole_start = 0;
    for run in present {
        debug_assert!(
            run.pfns.start.0 >= start_pfn && run.pfns.end.0 <= start_pfn + pages.len() as u64
        );
        let (first, end) = (index(run.pfns.start), index(run.pfns.end));
        pages[hole_start..first].fill_with(|| Page::new(PageState::Hole));
        if run.reserved {
            pages[first..end].fill_with(|| Page::new(PageState::Reserved));
        }
        hole_start = end;
    }
    pages[hole_start..].fill_with(|| Page::new(PageState::Hole));
}

/// A mem_map whose `spanned` pages from `start_pfn` are all managed (unit tests).
#[cfg(test)]
pub(crate) fn all_managed(start_pfn: u64, spanned: u64) -> MemMap {
    let pfns = crate::topology::PfnRange::new(Pfn(start_pfn), Pfn(start_pfn + spanned));
    MemMap::new(
        start_pfn,
        spanned,
        &[PresentRange {
            pfns,
            reserved: false,
        }],
        None,
    )
}

/// A copy of a [`MemMap`]'s first pfn and descriptor slice ([`MemMap::window`]).
#[derive(Clone, Copy)]
pub(crate) struct MemMapWindow<'m> {
    start_pfn: u64,
    pages: &'m [Page],
}

impl<'m> MemMapWindow<'m> {
    /// The descriptor of `pfn`, if the zone spans it ([`MemMap::get`]).
    #[inline(always)]
    pub(crate) fn get(self, pfn: Pfn) -> Option<&'m Page> {
        // One unsigned comparison: a pfn below `start_pfn` wraps to an offset far beyond
        // any slice, so `get` refuses it as it refuses one past the end.
        let offset = usize::try_from(pfn.0.wrapping_sub(self.start_pfn)).ok()?;
        self.pages.get(offset)
    }

    /// The descriptor of `pfn`; panics when the zone does not span it ([`MemMap::page`]).
    #[inline(always)]
    pub(crate) fn page(self, pfn: Pfn) -> &'m Page {
        self.get(pfn)
            .unwrap_or_else(|| panic!("{pfn:?} is outside the zone"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{Order, NO_PFN};
    use crate::topology::PfnRange;
    use alloc::vec::Vec;

    #[test]
    fn a_fresh_mem_map_holds_reserved_then_unlinked_tails_then_holes() {
        let (start, reserved, managed, holes) = (1000, 3, 2048, 5);
        let mem_map = MemMap::new(
            start,
            reserved + managed + holes,
            &[
                PresentRange {
                    pfns: PfnRange::new(Pfn(start), Pfn(start + reserved)),
                    reserved: true,
                },
                PresentRange {
                    pfns: PfnRange::new(Pfn(start + reserved), Pfn(start + reserved + managed)),
                    reserved: false,
                },
            ],
            None,
        );
        let mut states = Vec::new();
        for (pfn, page) in mem_map.iter() {
            let (state, order) = page.state_order();
            assert_eq!(order, Order::ZERO, "{pfn:?}");
            assert_eq!(
                (page.next(), page.prev(), page.refcount()),
                (NO_PFN, NO_PFN, 0)
            );
            if states.last().map(|&(s, _)| s) != Some(state) {
                states.push((state, 0));
            }
            states.last_mut().expect("pushed").1 += 1;
        }
        assert_eq!(
            states,
            [
                (PageState::Reserved, reserved),
                (PageState::Tail, managed),
                (PageState::Hole, holes)
            ]
        );
        assert_eq!(mem_map.iter().next().map(|(pfn, _)| pfn), Some(Pfn(start)));
        assert_eq!(
            mem_map.pageblock_migratetype(Pfn(start)),
            MigrateType::Movable
        );
    }
}
