//! LRU lists: per memcg and node, linked through the folio heads' descriptors.
//!
//! Linux counterpart (v6.7): `enum lru_list`, `struct lruvec`, `lruvec_add_folio`,
//! `lruvec_del_folio`, `update_lru_size` with `mem_cgroup_per_node.lru_zone_size`
//! (`include/linux/mm_inline.h`, `include/linux/memcontrol.h`), `docs/reference/linux-mm.md` §5.1.
//!
//! A folio on an LRU list has `PG_lru`; its head's `next`/`prev` are the list links (pfns,
//! like the free lists), so the lists cost no memory beyond the descriptors. The links can
//! cross zones of the node, so each step resolves the pfn's zone.

use crate::page::{PageFlags, Pfn, NO_PFN};
use crate::page_alloc::{PageAllocator, ZoneType, MAX_NR_ZONES};
use crate::sync::RawMutex;

use super::folio::Folio;

/// The LRU lists (`enum lru_list`): active = inactive + 1, file = anon + 2.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum LruList {
    /// `LRU_INACTIVE_ANON`.
    InactiveAnon = 0,
    /// `LRU_ACTIVE_ANON`.
    ActiveAnon = 1,
    /// `LRU_INACTIVE_FILE`.
    InactiveFile = 2,
    /// `LRU_ACTIVE_FILE`.
    ActiveFile = 3,
    /// `LRU_UNEVICTABLE`.
    Unevictable = 4,
}

/// Number of LRU lists (`NR_LRU_LISTS`).
pub const NR_LRU_LISTS: usize = 5;

impl LruList {
    /// Every list, in Linux's order.
    pub const ALL: [LruList; NR_LRU_LISTS] = [
        LruList::InactiveAnon,
        LruList::ActiveAnon,
        LruList::InactiveFile,
        LruList::ActiveFile,
        LruList::Unevictable,
    ];

    /// The list a folio with these flags belongs on (`folio_lru_list`).
    pub fn of_flags(flags: PageFlags) -> LruList {
        if flags.contains(PageFlags::UNEVICTABLE) {
            return LruList::Unevictable;
        }
        let file = !flags.contains(PageFlags::SWAPBACKED);
        let active = flags.contains(PageFlags::ACTIVE);
        match (file, active) {
            (false, false) => LruList::InactiveAnon,
            (false, true) => LruList::ActiveAnon,
            (true, false) => LruList::InactiveFile,
            (true, true) => LruList::ActiveFile,
        }
    }

    /// Whether this list holds file pages.
    pub fn is_file(self) -> bool {
        matches!(self, LruList::InactiveFile | LruList::ActiveFile)
    }

    /// Whether this is an active list.
    pub fn is_active(self) -> bool {
        matches!(self, LruList::ActiveAnon | LruList::ActiveFile)
    }

    /// The name `memory.stat` uses.
    pub fn stat_name(self) -> &'static str {
        match self {
            LruList::InactiveAnon => "inactive_anon",
            LruList::ActiveAnon => "active_anon",
            LruList::InactiveFile => "inactive_file",
            LruList::ActiveFile => "active_file",
            LruList::Unevictable => "unevictable",
        }
    }
}

/// One list: head (most recent) and tail (oldest) pfns, folios and pages on it.
#[derive(Clone, Copy, Debug)]
pub struct LruListHead {
    head: u32,
    tail: u32,
    /// Folios on the list.
    pub folios: u64,
    /// Pages on the list.
    pub pages: u64,
}

impl Default for LruListHead {
    fn default() -> LruListHead {
        LruListHead {
            head: NO_PFN,
            tail: NO_PFN,
            folios: 0,
            pages: 0,
        }
    }
}

bitflags::bitflags! {
    /// `lruvec.flags` (`docs/reference/linux-mm.md` §5.4).
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
    pub struct LruvecFlags: u8 {
        /// Before Linux 6.5: one bit set by both kswapd and cgroup reclaim (`LRUVEC_CONGESTED`).
        const CONGESTED = 1 << 0;
        /// Linux ≥ 6.5: set by cgroup reclaim, incl. root `memory.reclaim` (`LRUVEC_CGROUP_CONGESTED`).
        const CGROUP_CONGESTED = 1 << 1;
        /// Linux ≥ 6.5: set by kswapd (`LRUVEC_NODE_CONGESTED`).
        const NODE_CONGESTED = 1 << 2;
    }
}

/// The LRU lists of one memcg on one node, with their per-zone sizes.
///
/// The lists thread through the page descriptors, so only the mapping layer adds and
/// removes folios; a caller reads a cgroup's lists
/// ([`MemCgroup::lruvecs`](super::memcg::MemCgroup::lruvecs)). A caller's own `Lruvec`
/// cannot link the allocator's pages:
///
/// ```compile_fail,E0624
/// # use mmkit_core::mm::lru::Lruvec;
/// # use mmkit_core::mm::Folio;
/// # use mmkit_core::PageAllocator;
/// fn relink(allocator: &PageAllocator, folio: Folio) {
///     Lruvec::default().add(allocator, folio); // private: would take the folio off its list
/// }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Lruvec {
    /// The lists.
    pub lists: [LruListHead; NR_LRU_LISTS],
    /// `lru_zone_size[zone][lru]` in pages, updated with every add and removal.
    pub lru_zone_size: [[u64; NR_LRU_LISTS]; MAX_NR_ZONES],
    /// Congestion flags.
    pub flags: LruvecFlags,
}

fn page<R: RawMutex>(allocator: &PageAllocator<R>, pfn: u32) -> &crate::page::Page {
    let pfn = Pfn(u64::from(pfn));
    allocator
        .find_zone(pfn)
        .expect("an LRU folio lies in a zone")
        .mem_map()
        .page(pfn)
}

fn zone_of<R: RawMutex>(allocator: &PageAllocator<R>, pfn: Pfn) -> ZoneType {
    allocator.find_zone(pfn).expect("in a zone").zone_type()
}

impl Lruvec {
    /// `lruvec_add_folio`: at the head of its list (the most recent end), `PG_lru` set.
    pub(crate) fn add<R: RawMutex>(&mut self, allocator: &PageAllocator<R>, folio: Folio) {
        self.insert(allocator, folio, false);
    }

    /// `lruvec_add_folio_tail`: at the tail of its list, where reclaim looks first.
    pub(crate) fn add_tail<R: RawMutex>(&mut self, allocator: &PageAllocator<R>, folio: Folio) {
        self.insert(allocator, folio, true);
    }

    fn insert<R: RawMutex>(&mut self, allocator: &PageAllocator<R>, folio: Folio, at_tail: bool) {
        let head_page = page(allocator, folio.pfn.0 as u32);
        let flags = head_page.flags();
        debug_assert!(!flags.contains(PageFlags::LRU), "folio already on an LRU");
        let lru = LruList::of_flags(flags);
        let list = &mut self.lists[lru as usize];
        let pfn = folio.pfn.0 as u32;
        if at_tail {
            head_page.set_next(NO_PFN);
            head_page.set_prev(list.tail);
            if list.tail == NO_PFN {
                list.head = pfn;
            } else {
                page(allocator, list.tail).set_next(pfn);
            }
            list.tail = pfn;
        } else {
            head_page.set_prev(NO_PFN);
            head_page.set_next(list.head);
            if list.head == NO_PFN {
                list.tail = pfn;
            } else {
                page(allocator, list.head).set_prev(pfn);
            }
            list.head = pfn;
        }
        list.folios += 1;
        list.pages += folio.nr_pages();
        head_page.set_flags(flags | PageFlags::LRU);
        self.lru_zone_size[zone_of(allocator, folio.pfn).index()][lru as usize] += folio.nr_pages();
    }

    /// `lruvec_del_folio`: off its list, `PG_lru` cleared. Returns the list it was on.
    pub(crate) fn del<R: RawMutex>(
        &mut self,
        allocator: &PageAllocator<R>,
        folio: Folio,
    ) -> LruList {
        let head_page = page(allocator, folio.pfn.0 as u32);
        let flags = head_page.flags();
        debug_assert!(flags.contains(PageFlags::LRU), "folio not on an LRU");
        let lru = LruList::of_flags(flags);
        let list = &mut self.lists[lru as usize];
        let (next, prev) = (head_page.next(), head_page.prev());
        if prev == NO_PFN {
            list.head = next;
        } else {
            page(allocator, prev).set_next(next);
        }
        if next == NO_PFN {
            list.tail = prev;
        } else {
            page(allocator, next).set_prev(prev);
        }
        head_page.set_next(NO_PFN);
        head_page.set_prev(NO_PFN);
        list.folios -= 1;
        list.pages -= folio.nr_pages();
        head_page.set_flags(flags - PageFlags::LRU);
        self.lru_zone_size[zone_of(allocator, folio.pfn).index()][lru as usize] -= folio.nr_pages();
        lru
    }

    /// The oldest folio of `lru`.
    pub fn tail(&self, lru: LruList) -> Option<Pfn> {
        let tail = self.lists[lru as usize].tail;
        (tail != NO_PFN).then_some(Pfn(u64::from(tail)))
    }

    /// The folios of `lru`, most recent first.
    pub fn iter<'a, R: RawMutex>(
        &'a self,
        allocator: &'a PageAllocator<R>,
        lru: LruList,
    ) -> impl Iterator<Item = Pfn> + 'a {
        let mut at = self.lists[lru as usize].head;
        core::iter::from_fn(move || {
            if at == NO_PFN {
                return None;
            }
            let pfn = at;
            at = page(allocator, at).next();
            Some(Pfn(u64::from(pfn)))
        })
    }

    /// Pages on `lru` (all zones).
    pub fn pages(&self, lru: LruList) -> u64 {
        self.lists[lru as usize].pages
    }
}
