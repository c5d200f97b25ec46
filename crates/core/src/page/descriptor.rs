//! The page descriptor: 16 bytes of metadata per 4 KiB frame.
//!
//! Linux counterpart: `struct page` (64 bytes, `include/linux/mm_types.h`). Linux unions
//! most of its fields by page state; we do the same, harder. Four 32-bit words:
//!
//! | word | bits | holds |
//! |---|---|---|
//! | `flags` | 0..3 | [`PageState`]: which structure owns the page |
//! | | 3..7 | order of the block this page heads |
//! | | 7..16 | [`PageFlags`]: `PG_lru`, `PG_active`, `PG_referenced`, ... |
//! | | 16..32 | memcg id (Linux's `mem_cgroup_id`, 16 bits there too) |
//! | `next`, `prev` | 32 each | list links as pfns: a buddy free list, a PCP list or an LRU list (a page is on at most one); a large folio's tail pages keep the head pfn in `next` |
//! | `private` | 0..16 | free or on a PCP list: the cached migratetype; allocated: the reference count |
//! | | 16..32 | allocated: `_mapcount + 1` (0 = unmapped) |
//!
//! Links are pfns, so a system holds at most 2^32 − 1 frames (16 TiB); [`crate::Topology`]
//! rejects anything larger. They are stored plus one, wrapping, so [`NO_PFN`] (`u32::MAX`)
//! is 0 in memory: with [`PageState::Tail`] = 0, the all-zero descriptor is a managed page
//! owned by nobody, with no links, which is what almost every page is before the buddy
//! set-up frees it. The mem_map is therefore allocated zeroed ([`crate::page_alloc::MemMap`])
//! and the kernel maps its pages only when something touches them. The offset mostly
//! folds into the address arithmetic around a link, where a complement (`!pfn`) cost an
//! instruction per access (`crates/bench/callgrind-check.sh` free phase: 206.9
//! instructions per page, as with plain links, against 210.9 complemented).
//!
//! Each word is a relaxed atomic: the fields are written under different locks (zone
//! lock, pcp lock, lruvec lock) and the locks order the accesses; relaxed loads and
//! stores are plain moves on x86-64.

use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::Order;

/// The "no page" value of a list link.
pub const NO_PFN: u32 = u32::MAX;

const STATE_BITS: u32 = 3;
const STATE_MASK: u32 = (1 << STATE_BITS) - 1;
const ORDER_SHIFT: u32 = STATE_BITS;
const ORDER_MASK: u32 = 0xf << ORDER_SHIFT;
const FLAGS_SHIFT: u32 = 7;
const FLAGS_MASK: u32 = 0x1ff << FLAGS_SHIFT;
const MEMCG_SHIFT: u32 = 16;

// The descriptor budget of the product: 16 bytes per 4 KiB page (Linux: 64).
const _: () = assert!(core::mem::size_of::<Page>() == 16);
// The all-zero descriptor, what a zeroed mem_map holds, is `Page::new(PageState::Tail)`.
const _: () = assert!(PageState::Tail as u32 == 0 && NO_PFN.wrapping_add(1) == 0);
// The order field must hold MAX_ORDER.
const _: () = assert!((super::MAX_ORDER as u32) < (ORDER_MASK >> ORDER_SHIFT) + 1);

/// Which structure owns a page. Only the first page of a block carries a state other than
/// [`PageState::Tail`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum PageState {
    /// Inside a block; the block's first page says what the block is. Also every managed
    /// page before the buddy set-up: 0, so a zeroed descriptor is in this state.
    Tail = 0,
    /// First page of a free block on a buddy free list (Linux `PageBuddy`).
    Buddy = 1,
    /// First page of a free block on a per-CPU pageset list.
    Pcp = 2,
    /// First page of an allocated block.
    Allocated = 3,
    /// Present but never given to the allocator (boot memory, firmware): `present − managed`.
    Reserved = 4,
    /// Spanned by a zone but absent (a hole).
    Hole = 5,
    /// First page of a block between the free call's check and its free list.
    Freeing = 6,
}

impl PageState {
    fn from_bits(bits: u32) -> PageState {
        match bits & STATE_MASK {
            0 => PageState::Tail,
            1 => PageState::Buddy,
            2 => PageState::Pcp,
            3 => PageState::Allocated,
            4 => PageState::Reserved,
            5 => PageState::Hole,
            6 => PageState::Freeing,
            other => panic!("page state {other} is corrupt"),
        }
    }
}

bitflags::bitflags! {
    /// Linux's page flags that later layers need (`include/linux/page-flags.h`).
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
    pub struct PageFlags: u16 {
        /// On an LRU list (`PG_lru`).
        const LRU = 1 << 0;
        /// On an active LRU list (`PG_active`).
        const ACTIVE = 1 << 1;
        /// Recently referenced (`PG_referenced`).
        const REFERENCED = 1 << 2;
        /// Anonymous or shmem: backed by swap (`PG_swapbacked`).
        const SWAPBACKED = 1 << 3;
        /// Mlocked or otherwise unevictable (`PG_unevictable`).
        const UNEVICTABLE = 1 << 4;
        /// Contents differ from backing store (`PG_dirty`).
        const DIRTY = 1 << 5;
        /// Under writeback (`PG_writeback`).
        const WRITEBACK = 1 << 6;
        /// Locked for I/O or rmap walks (`PG_locked`).
        const LOCKED = 1 << 7;
        /// Head of a large folio (`PG_head`).
        const HEAD = 1 << 8;
    }
}

/// The metadata of one 4 KiB frame. See the module documentation for the layout.
/// `Zeroable` (the derive checks that every field is): an all-zero `Page` is valid, and is
/// `Page::new(PageState::Tail)`, so the mem_map can be allocated zeroed.
///
/// Outside the core a descriptor can be read, never written: every setter is
/// crate-private, so no sequence of safe calls can leave the mem_map in a state
/// `verify()` refuses.
///
/// ```
/// use mmkit_core::page::PageState;
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Order, PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let zone = allocator.zone(0, ZoneType::Normal).unwrap();
/// let (pfn, order, _) = zone.free_blocks()[0];
/// let head = zone.mem_map().page(pfn);
/// assert_eq!((head.state(), head.order()), (PageState::Buddy, order));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Writing one no longer compiles. These two calls once made `verify()` fail with "pfn …
/// belongs to no block":
///
/// ```compile_fail,E0624
/// use mmkit_core::page::PageState;
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Order, PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let zone = allocator.zone(0, ZoneType::Normal).unwrap();
/// let (pfn, order, _) = zone.free_blocks()[0];
/// zone.mem_map().page(pfn).set_state(PageState::Allocated, Order::ZERO);
/// zone.mem_map().page(pfn).set_next(pfn.0 as u32);
/// allocator.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(bytemuck::Zeroable)]
pub struct Page {
    flags: AtomicU32,
    next: AtomicU32,
    prev: AtomicU32,
    private: AtomicU32,
}

impl core::fmt::Debug for Page {
    /// The words as stored, except the links, which are shown as pfns: stored, they are
    /// one more.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Page")
            .field("flags", &self.flags)
            .field("next", &self.next())
            .field("prev", &self.prev())
            .field("private", &self.private)
            .finish()
    }
}

// The one-word accessors are `#[inline]`: the list, buddy and pageset code that uses them
// is generic over the lock type, so it is compiled in the crate that names the lock (the
// simulator, the runtime), and without cross-crate LTO each accessor was a call there:
// 12 calls per page event in the simulator's kbuild (a store and a return each, and the
// caller's registers saved around it).
impl Page {
    /// A descriptor in `state`, heading a block of order 0, with no links.
    pub const fn new(state: PageState) -> Page {
        Page {
            flags: AtomicU32::new(state as u32),
            next: AtomicU32::new(NO_PFN.wrapping_add(1)),
            prev: AtomicU32::new(NO_PFN.wrapping_add(1)),
            private: AtomicU32::new(0),
        }
    }

    /// The all-zero descriptor, `Page::new(PageState::Tail)`: a managed page owned by
    /// nobody. What fills storage for
    /// [`PageAllocator::with_mem_map`](crate::PageAllocator::with_mem_map) before it
    /// writes every descriptor.
    pub const fn zeroed() -> Page {
        Page::new(PageState::Tail)
    }

    /// Whether every word is zero, as [`Page::zeroed`] is.
    pub(crate) fn is_zeroed(&self) -> bool {
        [&self.flags, &self.next, &self.prev, &self.private]
            .iter()
            .all(|word| word.load(Relaxed) == 0)
    }

    /// Who owns this page.
    #[inline]
    pub fn state(&self) -> PageState {
        PageState::from_bits(self.flags.load(Relaxed))
    }

    /// The order of the block this page heads; meaningful for block heads only.
    #[inline]
    pub fn order(&self) -> Order {
        let bits = (self.flags.load(Relaxed) & ORDER_MASK) >> ORDER_SHIFT;
        Order::new(bits as u8).expect("order field holds at most MAX_ORDER")
    }

    /// State and order together, read in one load.
    #[inline]
    pub fn state_order(&self) -> (PageState, Order) {
        let bits = self.flags.load(Relaxed);
        let order = Order::new(((bits & ORDER_MASK) >> ORDER_SHIFT) as u8)
            .expect("order field holds at most MAX_ORDER");
        (PageState::from_bits(bits), order)
    }

    /// Set state and order of a page that carries no page flags and no memcg id (what
    /// `free_pages_prepare` leaves): one store, where [`Page::set_state`] must read the
    /// word to keep them.
    #[inline(always)]
    pub(crate) fn set_state_of_bare(&self, state: PageState, order: Order) {
        debug_assert_eq!(
            self.flags.load(Relaxed) & !(STATE_MASK | ORDER_MASK),
            0,
            "the page has flags or a memcg id"
        );
        self.flags.store(Self::with_state(0, state, order), Relaxed);
    }

    /// Set state and order and clear the page flags and the memcg id, in one store: what
    /// [`Page::clear_flags_and_memcg`] then [`Page::set_state_of_bare`] leave.
    #[inline(always)]
    pub(crate) fn set_state_clearing_flags(&self, state: PageState, order: Order) {
        self.flags.store(Self::with_state(0, state, order), Relaxed);
    }

    /// Clear the page flags and the memcg id together (`free_pages_prepare`), keeping
    /// state and order: one read-modify-write where `set_flags` and `set_memcg_id` take
    /// two.
    #[inline(always)]
    pub(crate) fn clear_flags_and_memcg(&self) {
        let bits = self.flags.load(Relaxed);
        self.flags.store(bits & (STATE_MASK | ORDER_MASK), Relaxed);
    }

    /// Whether the page is in `state` at `order`: [`Page::state_order`] compared without
    /// decoding, for the buddy merge loop, which asks this of one descriptor per level.
    /// A corrupt state (7) is simply not equal here; `state_order` and `verify()` report
    /// it.
    #[inline(always)]
    pub fn has_state_order(&self, state: PageState, order: Order) -> bool {
        let bits = self.flags.load(Relaxed);
        bits & (STATE_MASK | ORDER_MASK) == Self::with_state(0, state, order)
    }

    /// Set state and order, keeping the page flags and memcg id.
    #[inline]
    pub(crate) fn set_state(&self, state: PageState, order: Order) {
        let bits = self.flags.load(Relaxed);
        self.flags
            .store(Self::with_state(bits, state, order), Relaxed);
    }

    /// Move from (`from`, `order`) to `to` atomically; fails, returning what the page holds
    /// instead, when the page is not in `from` at `order`. This is what makes a racing double
    /// free lose cleanly.
    pub(crate) fn transition(
        &self,
        from: PageState,
        order: Order,
        to: PageState,
    ) -> Result<(), (PageState, Order)> {
        let current = self.flags.load(Relaxed);
        let expected = Self::with_state(current, from, order);
        let new = Self::with_state(current, to, order);
        self.flags
            .compare_exchange(expected, new, Relaxed, Relaxed)
            .map(|_| ())
            .map_err(|_| self.state_order())
    }

    /// [`Page::transition`] for a caller that no other thread races on this page: a
    /// relaxed load, the same check and a plain store, without the locked instruction.
    /// Sequentially it succeeds and fails exactly as `transition` does, with the same
    /// result; two racing calls may both succeed.
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn transition_exclusive(
        &self,
        from: PageState,
        order: Order,
        to: PageState,
    ) -> Result<(), (PageState, Order)> {
        let current = self.flags.load(Relaxed);
        if current & (STATE_MASK | ORDER_MASK) != Self::with_state(0, from, order) {
            return Err(self.state_order());
        }
        // The state bits hold `from`: one XOR makes them `to`, keeping everything else.
        self.flags
            .store(current ^ (from as u32 ^ to as u32), Relaxed);
        Ok(())
    }

    /// Change the order of a block in `state` from `from` to `to` atomically; fails,
    /// returning what the page holds instead, when it is not in `state` at `from`.
    pub(crate) fn transition_order(
        &self,
        state: PageState,
        from: Order,
        to: Order,
    ) -> Result<(), (PageState, Order)> {
        let current = self.flags.load(Relaxed);
        let expected = Self::with_state(current, state, from);
        let new = Self::with_state(current, state, to);
        self.flags
            .compare_exchange(expected, new, Relaxed, Relaxed)
            .map(|_| ())
            .map_err(|_| self.state_order())
    }

    #[inline]
    fn with_state(bits: u32, state: PageState, order: Order) -> u32 {
        (bits & !(STATE_MASK | ORDER_MASK)) | state as u32 | ((order.get() as u32) << ORDER_SHIFT)
    }

    /// The page flags.
    #[inline]
    pub fn flags(&self) -> PageFlags {
        PageFlags::from_bits_truncate(
            ((self.flags.load(Relaxed) & FLAGS_MASK) >> FLAGS_SHIFT) as u16,
        )
    }

    /// Replace the page flags.
    pub(crate) fn set_flags(&self, flags: PageFlags) {
        let bits = self.flags.load(Relaxed);
        let new = (bits & !FLAGS_MASK) | ((flags.bits() as u32) << FLAGS_SHIFT);
        self.flags.store(new, Relaxed);
    }

    /// The memcg id charged for this page (0 = none).
    #[inline]
    pub fn memcg_id(&self) -> u16 {
        (self.flags.load(Relaxed) >> MEMCG_SHIFT) as u16
    }

    /// Charge the page to memcg `id`.
    pub(crate) fn set_memcg_id(&self, id: u16) {
        let bits = self.flags.load(Relaxed);
        let new = (bits & !(0xffff << MEMCG_SHIFT)) | ((id as u32) << MEMCG_SHIFT);
        self.flags.store(new, Relaxed);
    }

    /// The next page on this page's list, as a pfn ([`NO_PFN`] at the end).
    #[inline]
    pub fn next(&self) -> u32 {
        self.next.load(Relaxed).wrapping_sub(1)
    }

    /// The previous page on this page's list, as a pfn ([`NO_PFN`] at the start).
    #[inline]
    pub fn prev(&self) -> u32 {
        self.prev.load(Relaxed).wrapping_sub(1)
    }

    /// Set the forward link.
    #[inline]
    pub(crate) fn set_next(&self, pfn: u32) {
        self.next.store(pfn.wrapping_add(1), Relaxed)
    }

    /// Set the backward link.
    #[inline]
    pub(crate) fn set_prev(&self, pfn: u32) {
        self.prev.store(pfn.wrapping_add(1), Relaxed)
    }

    /// The migratetype cached when the block went on a free or PCP list (Linux keeps it in
    /// `page->index`: `set_pcppage_migratetype`).
    #[inline]
    pub fn cached_migratetype(&self) -> u8 {
        self.private.load(Relaxed) as u8
    }

    /// Cache the migratetype of a free block.
    #[inline]
    pub(crate) fn set_cached_migratetype(&self, migratetype: u8) {
        self.private.store(migratetype as u32, Relaxed)
    }

    /// Reference count of an allocated block head.
    #[inline]
    pub fn refcount(&self) -> u16 {
        self.private.load(Relaxed) as u16
    }

    /// Set the reference count; clears the map count (Linux `set_page_refcounted` on a
    /// freshly allocated page, whose `_mapcount` is −1).
    #[inline]
    pub(crate) fn init_refcount(&self, count: u16) {
        self.private.store(count as u32, Relaxed)
    }

    /// Number of page-table entries mapping this page (Linux `page_mapcount`).
    pub fn mapcount(&self) -> u16 {
        (self.private.load(Relaxed) >> 16) as u16
    }

    /// Set the reference count of a block head, keeping its map count (after a split,
    /// each new head gets the references its mappings hold).
    pub(crate) fn set_refcount(&self, count: u16) {
        let bits = self.private.load(Relaxed);
        self.private
            .store((bits & 0xffff_0000) | count as u32, Relaxed)
    }

    /// Add `n` references; `None` (and no change) if the 16-bit count would overflow.
    pub(crate) fn ref_add(&self, n: u16) -> Option<u16> {
        self.private
            .fetch_update(Relaxed, Relaxed, |bits| {
                let count = (bits as u16).checked_add(n)?;
                Some((bits & 0xffff_0000) | count as u32)
            })
            .ok()
            .map(|old| old as u16 + n)
    }

    /// Drop `n` references and return how many are left; `None` (and no change) if fewer
    /// than `n` are held.
    pub(crate) fn ref_sub(&self, n: u16) -> Option<u16> {
        self.private
            .fetch_update(Relaxed, Relaxed, |bits| {
                let count = (bits as u16).checked_sub(n)?;
                Some((bits & 0xffff_0000) | count as u32)
            })
            .ok()
            .map(|old| old as u16 - n)
    }

    /// One more page-table entry maps this page; returns the new map count, or `None`
    /// (and no change) at the 16-bit limit. Mappings of different address spaces can race,
    /// so this is a read-modify-write (Linux `atomic_inc_and_test(&page->_mapcount)`).
    pub(crate) fn mapcount_inc(&self) -> Option<u16> {
        self.private
            .fetch_update(Relaxed, Relaxed, |bits| {
                let count = ((bits >> 16) as u16).checked_add(1)?;
                Some((bits & 0xffff) | (count as u32) << 16)
            })
            .ok()
            .map(|old| (old >> 16) as u16 + 1)
    }

    /// One page-table entry less maps this page; returns the new map count, or `None`
    /// (and no change) if the page was not mapped.
    pub(crate) fn mapcount_dec(&self) -> Option<u16> {
        self.private
            .fetch_update(Relaxed, Relaxed, |bits| {
                let count = ((bits >> 16) as u16).checked_sub(1)?;
                Some((bits & 0xffff) | (count as u32) << 16)
            })
            .ok()
            .map(|old| (old >> 16) as u16 - 1)
    }

    /// The low half of `private` on a tail page, which holds no reference count: a large
    /// folio keeps `_nr_pages_mapped` there on its second page.
    pub fn tail_counter(&self) -> u16 {
        self.private.load(Relaxed) as u16
    }

    /// Set the low half of `private` on a tail page (see [`Page::tail_counter`]).
    pub(crate) fn set_tail_counter(&self, value: u16) {
        let bits = self.private.load(Relaxed);
        self.private
            .store((bits & 0xffff_0000) | value as u32, Relaxed)
    }

    /// Clear `private` and the links: what a tail page of a freed folio must look like
    /// (Linux `free_tail_page_prepare`).
    pub(crate) fn clear_tail(&self) {
        self.private.store(0, Relaxed);
        self.set_next(NO_PFN);
        self.set_prev(NO_PFN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zeroed_page_is_an_unlinked_tail() {
        let page: Page = bytemuck::Zeroable::zeroed();
        assert_eq!(page.state_order(), (PageState::Tail, Order::ZERO));
        assert_eq!((page.next(), page.prev()), (NO_PFN, NO_PFN));
        assert_eq!(
            (page.flags(), page.memcg_id(), page.refcount()),
            (PageFlags::empty(), 0, 0)
        );
        page.set_next(7);
        page.set_prev(0);
        assert_eq!((page.next(), page.prev()), (7, 0));
        page.clear_tail();
        assert_eq!((page.next(), page.prev()), (NO_PFN, NO_PFN));
    }

    #[test]
    fn fields_do_not_overlap() {
        let page = Page::new(PageState::Reserved);
        page.set_memcg_id(0xbeef);
        page.set_flags(PageFlags::LRU | PageFlags::HEAD);
        page.set_state(PageState::Allocated, Order::new(9).unwrap());
        assert_eq!(page.state(), PageState::Allocated);
        assert_eq!(page.order(), Order::new(9).unwrap());
        assert_eq!(page.memcg_id(), 0xbeef);
        assert_eq!(page.flags(), PageFlags::LRU | PageFlags::HEAD);
        page.set_flags(PageFlags::empty());
        assert_eq!(page.memcg_id(), 0xbeef);
        assert_eq!(page.order(), Order::new(9).unwrap());
    }

    #[test]
    fn clearing_flags_and_memcg_keeps_state_and_order() {
        let page = Page::new(PageState::Tail);
        let o3 = Order::new(3).unwrap();
        page.set_state(PageState::Freeing, o3);
        page.set_memcg_id(0xbeef);
        page.set_flags(PageFlags::all());
        page.clear_flags_and_memcg();
        assert_eq!(page.state_order(), (PageState::Freeing, o3));
        assert_eq!((page.flags(), page.memcg_id()), (PageFlags::empty(), 0));
        page.set_state_of_bare(PageState::Pcp, o3);
        assert_eq!(page.state_order(), (PageState::Pcp, o3));
        assert_eq!((page.flags(), page.memcg_id()), (PageFlags::empty(), 0));
    }

    #[test]
    fn setting_state_clearing_flags_leaves_what_clearing_then_setting_leaves() {
        let (one_store, two_steps) = (Page::new(PageState::Tail), Page::new(PageState::Tail));
        for page in [&one_store, &two_steps] {
            page.set_state(PageState::Freeing, Order::ZERO);
            page.set_memcg_id(0xbeef);
            page.set_flags(PageFlags::all());
        }
        one_store.set_state_clearing_flags(PageState::Pcp, Order::ZERO);
        two_steps.clear_flags_and_memcg();
        two_steps.set_state_of_bare(PageState::Pcp, Order::ZERO);
        assert_eq!(one_store.flags.load(Relaxed), two_steps.flags.load(Relaxed));
        assert_eq!(one_store.state_order(), (PageState::Pcp, Order::ZERO));
        assert_eq!(
            (one_store.flags(), one_store.memcg_id()),
            (PageFlags::empty(), 0)
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "the page has flags or a memcg id")]
    fn set_state_of_bare_refuses_a_page_with_flags() {
        let page = Page::new(PageState::Tail);
        page.set_flags(PageFlags::DIRTY);
        page.set_state_of_bare(PageState::Pcp, Order::ZERO);
    }

    /// Every valid state.
    const STATES: [PageState; 7] = [
        PageState::Tail,
        PageState::Buddy,
        PageState::Pcp,
        PageState::Allocated,
        PageState::Reserved,
        PageState::Hole,
        PageState::Freeing,
    ];

    #[test]
    fn has_state_order_agrees_with_state_order() {
        let page = Page::new(PageState::Tail);
        page.set_memcg_id(0xffff);
        page.set_flags(PageFlags::all());
        for state in STATES {
            for order in Order::all() {
                page.set_state(state, order);
                for asked in STATES {
                    for asked_order in Order::all() {
                        assert_eq!(
                            page.has_state_order(asked, asked_order),
                            page.state_order() == (asked, asked_order),
                            "{state:?}/{order} asked {asked:?}/{asked_order}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn transition_fails_from_the_wrong_state() {
        let page = Page::new(PageState::Tail);
        let o1 = Order::new(1).unwrap();
        page.set_state(PageState::Allocated, o1);
        assert_eq!(
            page.transition(PageState::Allocated, Order::ZERO, PageState::Freeing),
            Err((PageState::Allocated, o1))
        );
        assert!(page
            .transition(PageState::Allocated, o1, PageState::Freeing)
            .is_ok());
        assert_eq!(
            page.transition(PageState::Allocated, o1, PageState::Freeing),
            Err((PageState::Freeing, o1))
        );
    }

    #[test]
    fn transition_exclusive_agrees_with_transition() {
        let o2 = Order::new(2).unwrap();
        for state in STATES {
            for order in Order::all() {
                for asked in [Order::ZERO, o2] {
                    let (atomic, exclusive) = (Page::new(state), Page::new(state));
                    for page in [&atomic, &exclusive] {
                        page.set_state(state, order);
                        page.set_flags(PageFlags::DIRTY | PageFlags::LRU);
                        page.set_memcg_id(7);
                    }
                    assert_eq!(
                        exclusive.transition_exclusive(
                            PageState::Allocated,
                            asked,
                            PageState::Freeing
                        ),
                        atomic.transition(PageState::Allocated, asked, PageState::Freeing),
                        "{state:?}/{order} asked {asked}"
                    );
                    assert_eq!(exclusive.flags.load(Relaxed), atomic.flags.load(Relaxed));
                }
            }
        }
    }
}
