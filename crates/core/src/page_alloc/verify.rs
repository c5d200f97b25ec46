//! The zone walker: checks that every page is accounted for exactly once and that the
//! free lists are what their counters say.
//!
//! Linux has no single counterpart; its checks are scattered (`check_new_pages`,
//! `bad_page`, `CONFIG_DEBUG_VM` list checks). talc's heap verifier is the model: run it
//! after every step of a test and any corruption is caught where it happens.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use core::sync::atomic::Ordering::Relaxed;

use super::pcp::{pindex_to_order, PerCpuPages, NR_PCP_LISTS};
use super::types::MigrateType;
use super::watermark::PAGEBLOCK_ORDER;
use super::zone::Zone;
use super::PageAllocator;
use crate::page::{Order, PageState, Pfn, MAX_ORDER, NO_PFN};
use crate::sync::RawMutex;
use crate::topology::PresentRange;

/// Pages of a zone by owner, as the walk found them.
///
/// ```
/// # use mmkit_core::{CacheInfo, PageAllocator, Policy, Settings, Topology, ZoneSize, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::{Caller, Gfp, Order, ZoneCensus};
///
/// let pfn = allocator.alloc_pages(Caller::task(0), Gfp::KERNEL, Order::try_from(2u8)?)?;
/// // One census per zone type of the node; only the Normal zone has pages.
/// let zones: Vec<ZoneCensus> = allocator.verify()?;
/// let census = zones[ZoneType::Normal.index()];
/// assert_eq!(census.allocated, 4);
/// assert_eq!(census.free + census.pcp + census.allocated + census.reserved, 16_384);
/// # allocator.free_pages(Caller::task(0), pfn, Order::try_from(2u8)?)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ZoneCensus {
    /// Pages in free blocks on the buddy lists.
    pub free: u64,
    /// Pages in blocks on per-CPU lists.
    pub pcp: u64,
    /// Pages in allocated blocks.
    pub allocated: u64,
    /// Reserved pages.
    pub reserved: u64,
    /// Holes.
    pub holes: u64,
}

/// What the walker found wrong, in words.
///
/// Safe calls cannot make the walk fail; a failure means a bug in mmkit, and its text
/// names the zone, the pfn and the rule it broke.
///
/// ```
/// # use mmkit_core::{CacheInfo, PageAllocator, Policy, Settings, Topology, ZoneSize, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::VerifyError;
///
/// match allocator.verify() {
///     Ok(zones) => assert_eq!(zones.iter().map(|z| z.allocated).sum::<u64>(), 0),
///     Err(VerifyError(what)) => panic!("the allocator's books are wrong: {what}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VerifyError(pub String);

impl core::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(VerifyError(format!($($arg)*)));
        }
    };
}

/// Lock guards released in the reverse order of taking them (a `Vec` drops its elements
/// first to last), as nested `spin_unlock_irqrestore`s must be: each IRQ-saving lock
/// restores the interrupt state from before it was taken.
struct LastTakenFirstReleased<G>(alloc::vec::Vec<G>);

impl<G> Drop for LastTakenFirstReleased<G> {
    fn drop(&mut self) {
        while self.0.pop().is_some() {}
    }
}

impl<G> core::ops::Deref for LastTakenFirstReleased<G> {
    type Target = [G];

    fn deref(&self) -> &[G] {
        &self.0
    }
}

impl<R: RawMutex> Zone<R> {
    /// Walk the whole zone under its lock. Checks: each page lies in exactly one block or is
    /// reserved or a hole, holes and reserved pages exactly where the memory map put them; every block is aligned and inside the zone; the free lists are
    /// well linked, hold only free blocks of their order that cache their list's type, and
    /// match `nr_free`; `NR_FREE_PAGES` equals the free pages outside isolated lists;
    /// free + on PCP lists + allocated = managed; no two free buddies below pageblock
    /// order are left unmerged.
    pub fn verify(&self) -> Result<ZoneCensus, VerifyError> {
        // LOCK ORDER: every pcp lock of the zone, then the zone lock.
        let pagesets = LastTakenFirstReleased(self.pagesets.iter().map(|p| p.pcp.lock()).collect());
        let locked = self.lock();
        let area = locked.area();
        let mem_map = &self.mem_map;
        let name = format!("node {} zone {}", self.node, self.zone_type);

        let mut census = ZoneCensus::default();
        let mut covered_until = self.start_pfn.0;
        // Whether the block covering the pages up to `covered_until` is free: its pages
        // carry no page flags and no memcg id (`free_pages_prepare`), so the allocation
        // paths may set a block's state with one store (`Page::set_state_of_bare`).
        let mut covering_free = false;
        let bare = |page: &crate::page::Page| page.flags().is_empty() && page.memcg_id() == 0;
        let mut layout = PresentLayout::new(&self.present_ranges);
        for (pfn, page) in mem_map.iter() {
            let (state, order) = page.state_order();
            let expected = layout.kind(pfn);
            let as_mapped = match state {
                PageState::Hole => expected == PfnKind::Hole,
                PageState::Reserved => expected == PfnKind::Reserved,
                _ => expected == PfnKind::Managed,
            };
            ensure!(
                as_mapped,
                "{name}: {pfn:?} is {state:?} but the memory map makes it {expected:?}"
            );
            match state {
                PageState::Reserved => census.reserved += 1,
                PageState::Hole => census.holes += 1,
                PageState::Tail => {
                    ensure!(pfn.0 < covered_until, "{name}: {pfn:?} belongs to no block");
                    ensure!(
                        !covering_free || bare(page),
                        "{name}: {pfn:?}, inside a free block, has page flags or a memcg id"
                    );
                    continue;
                }
                PageState::Freeing => {
                    return Err(VerifyError(format!(
                        "{name}: {pfn:?} is mid-free while the zone is quiet"
                    )));
                }
                PageState::Buddy | PageState::Pcp | PageState::Allocated => {
                    ensure!(
                        pfn.is_aligned(order),
                        "{name}: block {pfn:?} of order {order} misaligned"
                    );
                    let end = pfn.0 + order.pages();
                    ensure!(
                        end <= self.start_pfn.0 + self.spanned,
                        "{name}: block {pfn:?} runs past the zone"
                    );
                    let counter = match state {
                        PageState::Buddy => &mut census.free,
                        PageState::Pcp => &mut census.pcp,
                        _ => &mut census.allocated,
                    };
                    *counter += order.pages();
                    ensure!(
                        state == PageState::Allocated || bare(page),
                        "{name}: free block {pfn:?} has page flags or a memcg id"
                    );
                }
            }
            covering_free = matches!(state, PageState::Buddy | PageState::Pcp);
            ensure!(
                pfn.0 >= covered_until,
                "{name}: {pfn:?} heads a block inside another block"
            );
            covered_until = match state {
                PageState::Reserved | PageState::Hole => pfn.0 + 1,
                _ => pfn.0 + order.pages(),
            };
        }
        // The lock's previous holder published the lists as they are now; this walk has
        // changed nothing yet.
        ensure!(
            area.free_block_bits() == area.free_block_bits_walked()
                && self.free_block_bits.load(Relaxed) == area.free_block_bits(),
            "{name}: free-block bits: kept {:#x}, published {:#x}, the lists' {:#x}",
            area.free_block_bits(),
            self.free_block_bits.load(Relaxed),
            area.free_block_bits_walked()
        );
        ensure!(
            census.free + census.pcp + census.allocated == self.managed,
            "{name}: free {} + pcp {} + allocated {} != managed {}",
            census.free,
            census.pcp,
            census.allocated,
            self.managed
        );
        ensure!(
            census.reserved == self.present - self.managed,
            "{name}: reserved pages changed"
        );
        ensure!(
            census.holes == self.spanned - self.present,
            "{name}: {} holes but spanned {} − present {}",
            census.holes,
            self.spanned,
            self.present
        );

        let mut listed = 0;
        let mut free_not_isolated = 0i64;
        for order in Order::all() {
            let mut blocks = 0;
            for mt in MigrateType::ALL {
                let list = area.list(order, mt);
                let mut prev = NO_PFN;
                let mut len = 0;
                for pfn in list.iter(mem_map) {
                    let page = mem_map.page(pfn);
                    // A head's back link is not kept ([`PfnList`]): only the others'.
                    ensure!(
                        prev == NO_PFN || page.prev() == prev,
                        "{name}: broken back link at {pfn:?}"
                    );
                    ensure!(
                        page.state_order() == (PageState::Buddy, order),
                        "{name}: {pfn:?} on the order-{order} {mt} list is not a free order-{order} block"
                    );
                    ensure!(
                        page.cached_migratetype() == mt as u8,
                        "{name}: {pfn:?} caches the wrong migratetype"
                    );
                    ensure!(
                        len < self.managed,
                        "{name}: the order-{order} {mt} list loops"
                    );
                    prev = pfn.0 as u32;
                    len += 1;
                }
                ensure!(
                    len == list.len(),
                    "{name}: order-{order} {mt} list length {} but {len} linked",
                    list.len()
                );
                blocks += len;
                if mt != MigrateType::Isolate {
                    free_not_isolated += (len * order.pages()) as i64;
                }
            }
            ensure!(
                blocks == area.nr_free(order),
                "{name}: nr_free[{order}] {} but {blocks} listed",
                area.nr_free(order)
            );
            listed += blocks * order.pages();
        }
        ensure!(
            listed == census.free,
            "{name}: {listed} pages listed but {} free",
            census.free
        );
        ensure!(
            free_not_isolated == self.free_pages(),
            "{name}: NR_FREE_PAGES {} but {free_not_isolated} free pages listed",
            self.free_pages()
        );
        let mut on_pagesets = 0;
        for (cpu, pcp) in pagesets.iter().enumerate() {
            on_pagesets += verify_pageset(mem_map, pcp, &format!("{name} cpu {cpu}"))?;
            ensure!(
                !pcp.offline || pcp.count == 0,
                "{name}: cpu {cpu} is offline but its pageset holds {} pages",
                pcp.count
            );
        }
        ensure!(
            on_pagesets == census.pcp,
            "{name}: pagesets list {on_pagesets} pages but {} pages are in PCP state",
            census.pcp
        );
        self.verify_merged(&name)?;
        Ok(census)
    }

    /// No free block below pageblock order has a free buddy of its own order: the merge
    /// rules always merge those. (At pageblock order a pageblock retag can leave two free
    /// buddies apart; see the comment in the loop.)
    fn verify_merged(&self, name: &str) -> Result<(), VerifyError> {
        let mem_map = &self.mem_map;
        for (pfn, page) in mem_map.iter() {
            let (state, order) = page.state_order();
            if state != PageState::Buddy || order.get() == MAX_ORDER {
                continue;
            }
            let buddy = pfn.buddy(order);
            let Some(buddy_page) = mem_map.get(buddy) else {
                continue;
            };
            if buddy_page.state_order() != (PageState::Buddy, order) {
                continue;
            }
            // At pageblock order and above, merging depends on the pageblock types at free
            // time, and a type can change later without a merge: a high-atomic pageblock
            // given back (`unreserve_highatomic_pageblock`) has its free blocks moved to
            // the new type's list by `move_freepages_block`, as in Linux, and a free
            // pageblock-sized buddy beside it stays unmerged until one of them is used.
            // Only below pageblock order does every free pair have to be merged.
            let may_stay_apart = order.get() >= PAGEBLOCK_ORDER;
            ensure!(
                may_stay_apart,
                "{name}: free buddies {pfn:?} and {buddy:?} of order {order} left unmerged"
            );
        }
        Ok(())
    }
}

/// What the memory map made a pfn: a hole, a reserved page or a managed one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PfnKind {
    Hole,
    Reserved,
    Managed,
}

/// A cursor over a zone's present ranges for a walk in pfn order.
struct PresentLayout<'r> {
    ranges: &'r [PresentRange],
}

impl<'r> PresentLayout<'r> {
    fn new(ranges: &'r [PresentRange]) -> PresentLayout<'r> {
        PresentLayout { ranges }
    }

    /// The kind of `pfn`; calls come in increasing pfn order.
    fn kind(&mut self, pfn: Pfn) -> PfnKind {
        while let Some((first, rest)) = self.ranges.split_first() {
            if pfn < first.pfns.end {
                if pfn < first.pfns.start {
                    return PfnKind::Hole;
                }
                return if first.reserved {
                    PfnKind::Reserved
                } else {
                    PfnKind::Managed
                };
            }
            self.ranges = rest;
        }
        PfnKind::Hole
    }
}

/// One pageset: lists well linked, each block in PCP state at the list's order, caching
/// the list's migratetype (or a non-PCP type on the MOVABLE list), and `count` equal to the
/// pages listed. Returns the pages listed.
fn verify_pageset(
    mem_map: &super::MemMap,
    pcp: &PerCpuPages,
    name: &str,
) -> Result<u64, VerifyError> {
    let mut pages = 0;
    for pindex in 0..NR_PCP_LISTS {
        let list = &pcp.lists[pindex];
        let order = pindex_to_order(pindex);
        let list_mt = if pindex < NR_PCP_LISTS - 1 {
            Some(pindex % 3)
        } else {
            None
        };
        let mut prev = NO_PFN;
        let mut len = 0;
        for pfn in list.iter(mem_map) {
            let page = mem_map.page(pfn);
            // A head's back link is not kept ([`PfnList`]): only the others'.
            ensure!(
                prev == NO_PFN || page.prev() == prev,
                "{name}: broken back link at {pfn:?} on list {pindex}"
            );
            ensure!(
                page.state_order() == (PageState::Pcp, order),
                "{name}: {pfn:?} on list {pindex} is not a PCP block of order {order}"
            );
            let cached = page.cached_migratetype() as usize;
            let fits = match list_mt {
                None => cached < MigrateType::Isolate as usize,
                Some(mt) if mt == MigrateType::Movable as usize => {
                    cached == mt || cached == MigrateType::HighAtomic as usize
                }
                Some(mt) => cached == mt,
            };
            ensure!(
                fits,
                "{name}: {pfn:?} caches migratetype {cached} on list {pindex}"
            );
            ensure!(len <= list.len(), "{name}: list {pindex} loops");
            prev = pfn.0 as u32;
            len += 1;
        }
        ensure!(
            len == list.len(),
            "{name}: list {pindex} length {} but {len} linked",
            list.len()
        );
        pages += len * order.pages();
    }
    ensure!(
        pages == pcp.count,
        "{name}: count {} but {pages} pages listed",
        pcp.count
    );
    Ok(pages)
}

impl<R: RawMutex> PageAllocator<R> {
    /// [`Zone::verify`] on every zone; returns the census of each.
    pub fn verify(&self) -> Result<alloc::vec::Vec<ZoneCensus>, VerifyError> {
        let mut all = vec![];
        for zone in self.zones() {
            all.push(zone.verify()?);
        }
        Ok(all)
    }
}

/// The pfns of a zone with their owner state, for tests that compare layouts.
pub fn block_heads<R: RawMutex>(
    zone: &Zone<R>,
) -> impl Iterator<Item = (Pfn, PageState, Order)> + '_ {
    zone.mem_map()
        .iter()
        .map(|(pfn, page)| (pfn, page.state(), page.order()))
        .filter(|(_, state, _)| {
            !matches!(
                state,
                PageState::Tail | PageState::Reserved | PageState::Hole
            )
        })
}

impl core::error::Error for VerifyError {}

#[cfg(test)]
mod tests {
    use crate::page::{Order, PageFlags};
    use crate::page_alloc::{test_allocator, Caller, Gfp, ZoneType};

    /// A free block whose head or tail carries page flags or a memcg id fails `verify`:
    /// the allocation paths set a free block's state with one store, which would drop
    /// them.
    #[test]
    fn verify_refuses_free_pages_with_flags_or_a_memcg_id() {
        let allocator = test_allocator();
        allocator.verify().expect("a fresh allocator is sound");
        let zone = allocator.zone(0, ZoneType::Normal).expect("Normal");
        let caller = Caller::task(0);
        // A page on the pageset (freed back), and a tail of a free buddy block.
        let pfn = allocator
            .alloc_pages(caller, Gfp::KERNEL, Order::ZERO)
            .expect("room");
        allocator
            .free_pages(caller, pfn, Order::ZERO)
            .expect("allocated above");
        let (buddy, _, _) = zone
            .free_blocks()
            .into_iter()
            .find(|&(_, order, _)| order > Order::ZERO)
            .expect("a free block of order above 0");
        let tail = zone.mem_map().page(buddy.add(1));
        for page in [zone.mem_map().page(pfn), tail] {
            page.set_flags(PageFlags::DIRTY);
            assert!(allocator.verify().is_err(), "flags on a free page");
            page.set_flags(PageFlags::empty());
            page.set_memcg_id(3);
            assert!(allocator.verify().is_err(), "a memcg id on a free page");
            page.set_memcg_id(0);
            allocator.verify().expect("bare again");
        }
    }
}
