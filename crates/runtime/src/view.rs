//! Read-only views of the pool's allocator and zones.
//!
//! The pool's memory safety rests on one owner per allocated page (a [`crate::PageBlock`]
//! or the raw caller it was given to). The core's [`PageAllocator`] and [`Zone`] change
//! page ownership from safe code (`free_pages`, `split_page`, `alloc_pages`), and a page
//! freed behind a live block would be handed out again while the block still reaches its
//! memory, so the pool never hands out a `&Zone` or a `&PageAllocator` to safe code. An
//! [`AllocatorView`] ([`crate::PagePool::allocator`]) and its [`ZoneView`]s forward what
//! statistics, tests and tools read: the machine, the settings and policy, sizes,
//! watermarks, flags, counters, pageset copies, `verify()` and zoneinfo. Linux's
//! counterpart is what `/proc/zoneinfo`, `/proc/vmstat` and the `vm.*` sysctls show a
//! process: reads, never a page.

use std::sync::atomic::Ordering::Relaxed;

use mmkit_core::page::NR_PAGE_ORDERS;
use mmkit_core::page_alloc::pcp::PerCpuPages;
use mmkit_core::page_alloc::watermark::Watermarks;
use mmkit_core::page_alloc::{
    CpuId, MigrateType, NodeId, WatermarkKind, Zone, ZoneEvents, ZoneFlags, ZoneId, ZoneType,
};
use mmkit_core::views::zoneinfo;
use mmkit_core::{
    Order, PageAllocator, Pfn, Policy, Settings, Topology, VerifyError, ZoneCensus, ZoneInfo,
};

use crate::pool::Inner;
use crate::PoolStats;

/// The allocator of a [`crate::PagePool`], read only ([`crate::PagePool::allocator`]).
///
/// It offers the core allocator's queries and nothing that allocates, frees, splits or
/// drains, so no safe call through it can take a page from its [`crate::PageBlock`]:
///
/// ```
/// # use mmkit_runtime::PagePool;
/// use mmkit_core::page_alloc::WatermarkKind;
/// use mmkit_core::{Order, ZoneType};
///
/// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
/// let block = pool.alloc(Order::ZERO)?;
/// let allocator = pool.allocator();
/// assert_eq!(allocator.find_zone(block.pfn()).unwrap().zone_type(), ZoneType::Normal);
/// assert!(allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Movable));
/// let normal = allocator.zone(0, ZoneType::Normal).unwrap();
/// assert_eq!(normal.wmark(WatermarkKind::Min), normal.watermarks().get(WatermarkKind::Min));
/// assert_eq!(allocator.verify()?.iter().map(|z| z.allocated).sum::<u64>(), 1);
/// assert_eq!(allocator.stats().pgalloc, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The core's `free_pages` ([`crate::PagePool::allocator`] shows it), `split_page` and
/// `alloc_pages` are not reachable through it; a page taken behind the pool's back would
/// have no [`crate::PageBlock`] to give it back:
///
/// ```compile_fail,E0599
/// # use mmkit_runtime::PagePool;
/// # use mmkit_core::{Gfp, Order};
/// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build().unwrap();
/// pool.allocator().alloc_pages(pool.caller(), Gfp::KERNEL, Order::ZERO).unwrap();
/// ```
#[derive(Clone, Copy)]
pub struct AllocatorView<'pool> {
    inner: &'pool Inner,
}

impl<'pool> AllocatorView<'pool> {
    pub(crate) fn new(inner: &'pool Inner) -> AllocatorView<'pool> {
        AllocatorView { inner }
    }

    fn core(&self) -> &'pool PageAllocator {
        &self.inner.allocator
    }

    /// The machine the pool lays out: nodes, CPUs, zone sizes.
    pub fn topology(&self) -> &'pool Topology {
        self.core().topology()
    }

    /// The allocation policy in force (v6.7 or a patch preset).
    pub fn policy(&self) -> &'pool Policy {
        self.core().policy()
    }

    /// The sysctls in force.
    pub fn settings(&self) -> Settings {
        self.core().settings()
    }

    /// `vm.min_free_kbytes` in force: the explicit value or the one computed at boot.
    pub fn min_free_kbytes(&self) -> u64 {
        self.core().min_free_kbytes()
    }

    /// Whether `cpu` is online.
    pub fn is_cpu_online(&self, cpu: CpuId) -> bool {
        self.core().is_cpu_online(cpu)
    }

    /// The zones in zonelist order.
    pub fn zones(&self) -> impl Iterator<Item = ZoneView<'pool>> + 'pool {
        self.core().zones().iter().map(ZoneView::new)
    }

    /// Zone `zone_type` of `node`.
    pub fn zone(&self, node: NodeId, zone_type: ZoneType) -> Option<ZoneView<'pool>> {
        self.core().zone(node, zone_type).map(ZoneView::new)
    }

    /// The zone that spans `pfn`.
    pub fn find_zone(&self, pfn: Pfn) -> Option<ZoneView<'pool>> {
        self.core().find_zone(pfn).map(ZoneView::new)
    }

    /// `pgdat_balanced`: some managed zone of `node` up to `highest_zoneidx` is above its
    /// high watermark for `order` (or the node has no managed zone). kswapd stops there.
    pub fn pgdat_balanced(&self, node: NodeId, order: Order, highest_zoneidx: ZoneType) -> bool {
        self.core().pgdat_balanced(node, order, highest_zoneidx)
    }

    /// Check every page of every zone; returns each zone's census.
    pub fn verify(&self) -> Result<Vec<ZoneCensus>, VerifyError> {
        self.core().verify()
    }

    /// Counters of the whole pool.
    pub fn stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        for zone in self.core().zones() {
            let e = zone.events();
            stats.pgalloc += zone.pgalloc();
            stats.pgfree += zone.pgfree();
            stats.free_pages += zone.free_pages().max(0) as u64;
            stats.pcp_pages += zone.pcp_pages();
            stats.alloc_zone += e.alloc_zone_locked();
            stats.pcp_refills += e.pcp_refills();
            stats.pcp_drains += e.pcp_drains_total();
            stats.pcp_lock_contended += e.pcp_lock_contended();
        }
        stats.injected_failures = self.inner.fault.injected.load(Relaxed);
        stats.kswapd_wakeups = (0..self.core().topology().nr_nodes() as NodeId)
            .filter_map(|node| self.core().kswapd(node))
            .map(|kswapd| kswapd.wakeups())
            .sum();
        stats.kswapd_runs = self.inner.kswapd_runs.load(Relaxed);
        stats
    }

    /// Every zone as `/proc/zoneinfo` shows it, as data ([`crate::PagePool::zoneinfo`]
    /// renders it as text).
    pub fn zoneinfo(&self) -> Vec<ZoneInfo> {
        zoneinfo::collect(self.core())
    }
}

impl std::fmt::Debug for AllocatorView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocatorView")
            .field("policy", &self.policy().name)
            .field("zones", &self.core().zones().len())
            .finish_non_exhaustive()
    }
}

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

    /// The stored watermarks and the boost, read only.
    pub fn watermarks(&self) -> &'pool Watermarks {
        self.0.watermarks()
    }

    /// `lowmem_reserve[]`: pages this zone keeps back from requests that could have used
    /// a higher zone, one entry per zone type.
    pub fn lowmem_reserve(&self) -> [u64; mmkit_core::page_alloc::MAX_NR_ZONES] {
        self.0.lowmem_reserve()
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
