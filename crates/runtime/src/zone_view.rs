//! Read-only views of the pool's zones.
//!
//! The pool's memory safety rests on one owner per allocated page (a [`crate::PageBlock`]
//! or the raw caller it was given to). The core's [`Zone`] can change page ownership from
//! safe code (its zone lock, its mem_map's descriptors), and a page freed behind a live
//! block would be handed out again while the block still reaches its memory, so the pool
//! never hands out a `&Zone` or a `&PageAllocator` to safe code. A [`ZoneView`] forwards
//! what statistics, tests and tools read: sizes, watermarks, flags, counters and pageset
//! copies.

use mmkit_core::page::NR_PAGE_ORDERS;
use mmkit_core::page_alloc::pcp::PerCpuPages;
use mmkit_core::page_alloc::Zone;
use mmkit_core::page_alloc::{
    MigrateType, NodeId, WatermarkKind, ZoneEvents, ZoneFlags, ZoneId, ZoneType,
};
use mmkit_core::{Order, Pfn};

/// One zone of a [`crate::PagePool`], read only ([`crate::PagePool::zone`],
/// [`crate::PagePool::zones`]).
#[derive(Clone, Copy)]
pub struct ZoneView<'pool>(&'pool Zone);

impl<'pool> ZoneView<'pool> {
    pub(crate) fn new(zone: &'pool Zone) -> ZoneView<'pool> {
        ZoneView(zone)
    }

    /// The node.
    pub fn node(&self) -> NodeId {
        self.0.node()
    }

    /// The zone's name: node and type.
    pub fn id(&self) -> ZoneId {
        self.0.id()
    }

    /// The zone type.
    pub fn zone_type(&self) -> ZoneType {
        self.0.zone_type()
    }

    /// First pfn spanned.
    pub fn start_pfn(&self) -> Pfn {
        self.0.start_pfn()
    }

    /// Pfns spanned.
    pub fn spanned(&self) -> u64 {
        self.0.spanned()
    }

    /// Pages present.
    pub fn present(&self) -> u64 {
        self.0.present()
    }

    /// Pages managed by the buddy allocator.
    pub fn managed(&self) -> u64 {
        self.0.managed()
    }

    /// `NR_FREE_PAGES`.
    pub fn free_pages(&self) -> i64 {
        self.0.free_pages()
    }

    /// Pages on all of this zone's pagesets.
    pub fn pcp_pages(&self) -> u64 {
        self.0.pcp_pages()
    }

    /// Effective watermark `kind` (stored + boost: `wmark_pages`).
    pub fn wmark(&self, kind: WatermarkKind) -> u64 {
        self.0.wmark(kind)
    }

    /// The zone flags.
    pub fn flags(&self) -> ZoneFlags {
        self.0.flags()
    }

    /// `PGALLOC` of this zone.
    pub fn pgalloc(&self) -> u64 {
        self.0.pgalloc()
    }

    /// `PGFREE` of this zone.
    pub fn pgfree(&self) -> u64 {
        self.0.pgfree()
    }

    /// Event counters.
    pub fn events(&self) -> &'pool ZoneEvents {
        self.0.events()
    }

    /// A copy of `cpu`'s pageset, taken under its lock.
    pub fn pageset(&self, cpu: u32) -> Option<PerCpuPages> {
        self.0.pageset(cpu)
    }

    /// Number of pagesets (one per CPU).
    pub fn nr_pagesets(&self) -> usize {
        self.0.nr_pagesets()
    }

    /// Free blocks per order, as `/proc/buddyinfo` shows them.
    pub fn buddyinfo(&self) -> [u64; NR_PAGE_ORDERS] {
        self.0.buddyinfo()
    }

    /// The free blocks as (pfn, order, migratetype list), in list order.
    pub fn free_blocks(&self) -> Vec<(Pfn, Order, MigrateType)> {
        self.0.free_blocks()
    }
}

impl std::fmt::Debug for ZoneView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneView")
            .field("id", &self.id())
            .field("managed", &self.managed())
            .field("free_pages", &self.free_pages())
            .finish()
    }
}
