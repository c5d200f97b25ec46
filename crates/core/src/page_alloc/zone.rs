//! A zone: a pfn range of one node with its own free lists, watermarks, statistics and
//! per-CPU pagesets.
//!
//! Linux counterpart: `struct zone` (`include/linux/mmzone.h`). Fields written under the
//! zone lock but read without it (watermarks, `NR_FREE_PAGES`, flags) are relaxed atomics;
//! the free lists themselves live inside the lock ([`Zone::lock`]).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use super::buddy::ZoneLocked;
use super::free_area::{FreeArea, FreeBlockBits, ListEnd};
use super::mem_map::{MemMap, Storage};
use super::pcp::PerCpuPages;
use super::pcp_sizing::PcpLimits;
use super::types::{CpuId, MigrateType, NodeId, ZoneType, MAX_NR_ZONES};
use super::watermark::{WatermarkInput, WatermarkKind, Watermarks};
use crate::page::{Order, Pfn, NR_PAGE_ORDERS};
use crate::sync::{AtomicI64, AtomicU64, CachePadded, Lock, LockGuard, RawMutex, RawSpinLock};
use crate::topology::{PresentRange, ZoneSpec};

bitflags::bitflags! {
    /// Zone flags (`enum zone_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
    pub struct ZoneFlags: u32 {
        /// A fallback boosted the watermarks; kswapd should run (`ZONE_BOOSTED_WATERMARK`).
        const BOOSTED_WATERMARK = 1 << 0;
        /// kswapd is reclaiming for this zone (`ZONE_RECLAIM_ACTIVE`).
        const RECLAIM_ACTIVE = 1 << 1;
        /// Free pages fell below the high watermark (`ZONE_BELOW_HIGH`, v6.7).
        const BELOW_HIGH = 1 << 2;
    }
}

/// Event counters of a zone, in pages unless named `_events`. Linux keeps these per CPU;
/// here they are zone-wide relaxed atomics.
///
/// Outside the core they are read-only: each counter is read through the method of its
/// name, and only the allocator's paths count (the replayer and the simulator compare
/// them with a trace's events, so a counter a caller could bump would be a wrong report).
///
/// ```
/// use mmkit_core::page_alloc::{Caller, DrainReason};
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let pfn = allocator.alloc_pages(Caller::task(0), Gfp::KERNEL, Order::ZERO)?;
///
/// // The first allocation on the CPU found its pageset empty and refilled it.
/// let events = allocator.zone(0, ZoneType::Normal).unwrap().events();
/// assert_eq!(events.pcp_refills(), 1);
/// assert_eq!(events.pcp_drains(DrainReason::Explicit), 0);
/// # allocator.free_pages(Caller::task(0), pfn, Order::ZERO)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A caller cannot count for the allocator:
///
/// ```compile_fail,E0616
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false).unwrap();
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7).unwrap();
/// let events = allocator.zone(0, ZoneType::Normal).unwrap().events();
/// events.pcp_refills.store(0, core::sync::atomic::Ordering::Relaxed); // private field
/// ```
#[derive(Debug, Default)]
pub struct ZoneEvents {
    /// `PGALLOC` of the paths that bypass the pagesets; read the total with
    /// [`Zone::pgalloc`].
    pub(crate) pgalloc: AtomicU64,
    /// `PGFREE` of the paths that bypass the pagesets; read the total with
    /// [`Zone::pgfree`].
    pub(crate) pgfree: AtomicU64,
    /// Pages taken off the buddy lists (Σ 2^order over `mm_page_alloc_zone_locked`): the
    /// `alloc_zone` of Huang 2023's tables.
    pub(crate) alloc_zone_locked: AtomicU64,
    /// Blocks taken off the buddy lists (`mm_page_alloc_zone_locked` events).
    pub(crate) alloc_zone_locked_events: AtomicU64,
    /// Fallbacks to another migratetype (`mm_page_alloc_extfrag` events).
    pub(crate) extfrag_events: AtomicU64,
    /// Watermark boosts applied by fragmenting fallbacks.
    pub(crate) watermark_boosts: AtomicU64,
    /// PCP refills (`rmqueue_bulk` calls).
    pub(crate) pcp_refills: AtomicU64,
    /// Pages moved from the buddy lists to pagesets by refills.
    pub(crate) pcp_refill_pages: AtomicU64,
    /// PCP drains (`free_pcppages_bulk` calls), by reason.
    pub(crate) pcp_drains: [AtomicU64; DrainReason::COUNT],
    /// Pages moved from pagesets to the buddy lists, by reason.
    pub(crate) pcp_drain_pages: [AtomicU64; DrainReason::COUNT],
    /// Pageset try-locks that failed, sending the request to the zone.
    pub(crate) pcp_lock_contended: AtomicU64,
    /// Buddy merge levels done by `__free_one_page`: each one reads (and writes) the
    /// buddy's page descriptor under the zone lock, the cost Aaron Lu (2018) found to
    /// dominate zone-lock hold times. Written only under the zone lock.
    pub(crate) buddy_merges: AtomicU64,
    /// Buddy split levels done by `expand`: each one writes the freed half's page
    /// descriptor and links it on a free list under the zone lock, the counterpart of a
    /// merge on the allocation side. Written only under the zone lock.
    pub(crate) buddy_splits: AtomicU64,
    /// Requests that bypassed the PCP because they came from interrupt context (Gorman 2017
    /// `irq_bypass` policy).
    pub(crate) pcp_irq_bypass: AtomicU64,
}

/// One CPU's `PGALLOC`/`PGFREE` for a zone, as Linux keeps vm events per CPU. Written only
/// by the holder of that CPU's pageset lock, so a relaxed load and store (no locked
/// read-modify-write) is exact; readers sum without locks.
#[derive(Debug, Default)]
pub(crate) struct PcpVmEvents {
    pgalloc: AtomicU64,
    pgfree: AtomicU64,
}

/// One CPU's slot of a zone: its pageset and its vm events for the zone. The pageset-lock
/// holder writes both, so they share the slot: one index finds both, and they share
/// cache lines that no other CPU writes. Kept in a [`CachePadded`] slot, so CPUs do not
/// share a line.
#[derive(Debug)]
pub(crate) struct PagesetSlot<R: RawMutex = RawSpinLock> {
    /// The pageset and its lock (`pcp->lock`).
    pub(crate) pcp: Lock<R, PerCpuPages>,
    /// The CPU's `PGALLOC`/`PGFREE` of the pageset paths.
    pub(crate) vm_events: PcpVmEvents,
}

/// A pageset taken with [`Zone::pcp_trylock`]: the lock guard, and the CPU's vm events,
/// which only the lock's holder may count (so counting needs this token).
pub(crate) struct PcpLocked<'a, R: RawMutex> {
    pcp: LockGuard<'a, R, PerCpuPages>,
    vm_events: &'a PcpVmEvents,
}

impl<R: RawMutex> PcpLocked<'_, R> {
    /// Count `pages` allocated from this pageset (`PGALLOC`).
    #[inline(always)]
    pub(crate) fn count_alloc(&self, pages: u64) {
        let pgalloc = &self.vm_events.pgalloc;
        pgalloc.store(pgalloc.load(Relaxed) + pages, Relaxed);
    }

    /// Count `pages` freed to this pageset (`PGFREE`).
    #[inline(always)]
    pub(crate) fn count_free(&self, pages: u64) {
        let pgfree = &self.vm_events.pgfree;
        pgfree.store(pgfree.load(Relaxed) + pages, Relaxed);
    }
}

impl<R: RawMutex> core::ops::Deref for PcpLocked<'_, R> {
    type Target = PerCpuPages;

    #[inline(always)]
    fn deref(&self) -> &PerCpuPages {
        &self.pcp
    }
}

impl<R: RawMutex> core::ops::DerefMut for PcpLocked<'_, R> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut PerCpuPages {
        &mut self.pcp
    }
}

/// Why pages left a pageset.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DrainReason {
    /// A free pushed `count` to the drain threshold.
    Free = 0,
    /// A free of consecutive cheap high-order blocks (`free_high`).
    FreeHigh = 1,
    /// The vmstat tick trimmed `count` to the decayed `high`.
    Decay = 2,
    /// The vmstat tick trimmed a remote node's pageset (NUMA `expire`).
    NumaExpire = 3,
    /// An explicit drain: local, remote, `drain_all_pages`, CPU offline, `zone_pcp_disable`.
    Explicit = 4,
}

impl DrainReason {
    /// Number of reasons.
    pub const COUNT: usize = 5;
    /// Every reason, in index order.
    pub const ALL: [DrainReason; DrainReason::COUNT] = [
        DrainReason::Free,
        DrainReason::FreeHigh,
        DrainReason::Decay,
        DrainReason::NumaExpire,
        DrainReason::Explicit,
    ];
}

impl ZoneEvents {
    /// Pages taken off the buddy lists (Σ 2^order over `mm_page_alloc_zone_locked`): the
    /// `alloc_zone` of Huang 2023's tables.
    pub fn alloc_zone_locked(&self) -> u64 {
        self.alloc_zone_locked.load(Relaxed)
    }

    /// Blocks taken off the buddy lists (`mm_page_alloc_zone_locked` events).
    pub fn alloc_zone_locked_events(&self) -> u64 {
        self.alloc_zone_locked_events.load(Relaxed)
    }

    /// Fallbacks to another migratetype (`mm_page_alloc_extfrag` events).
    pub fn extfrag_events(&self) -> u64 {
        self.extfrag_events.load(Relaxed)
    }

    /// Watermark boosts applied by fragmenting fallbacks.
    pub fn watermark_boosts(&self) -> u64 {
        self.watermark_boosts.load(Relaxed)
    }

    /// PCP refills (`rmqueue_bulk` calls).
    pub fn pcp_refills(&self) -> u64 {
        self.pcp_refills.load(Relaxed)
    }

    /// Pages moved from the buddy lists to pagesets by refills.
    pub fn pcp_refill_pages(&self) -> u64 {
        self.pcp_refill_pages.load(Relaxed)
    }

    /// PCP drains (`free_pcppages_bulk` calls), by reason.
    pub fn pcp_drains(&self, reason: DrainReason) -> u64 {
        self.pcp_drains[reason as usize].load(Relaxed)
    }

    /// Pages moved from pagesets to the buddy lists, by reason.
    pub fn pcp_drain_pages(&self, reason: DrainReason) -> u64 {
        self.pcp_drain_pages[reason as usize].load(Relaxed)
    }

    /// Pageset try-locks that failed, sending the request to the zone.
    pub fn pcp_lock_contended(&self) -> u64 {
        self.pcp_lock_contended.load(Relaxed)
    }

    /// Buddy merge levels done by `__free_one_page`: each one reads (and writes) the
    /// buddy's page descriptor under the zone lock, the cost Aaron Lu (2018) found to
    /// dominate zone-lock hold times. Written only under the zone lock.
    pub fn buddy_merges(&self) -> u64 {
        self.buddy_merges.load(Relaxed)
    }

    /// Buddy split levels done by `expand`: each one writes the freed half's page
    /// descriptor and links it on a free list under the zone lock, the counterpart of a
    /// merge on the allocation side. Written only under the zone lock.
    pub fn buddy_splits(&self) -> u64 {
        self.buddy_splits.load(Relaxed)
    }

    /// Requests that bypassed the PCP because they came from interrupt context (Gorman 2017
    /// `irq_bypass` policy).
    pub fn pcp_irq_bypass(&self) -> u64 {
        self.pcp_irq_bypass.load(Relaxed)
    }

    /// Drain events of all reasons.
    pub fn pcp_drains_total(&self) -> u64 {
        self.pcp_drains.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Pages drained for all reasons.
    pub fn pcp_drain_pages_total(&self) -> u64 {
        self.pcp_drain_pages.iter().map(|c| c.load(Relaxed)).sum()
    }
}

/// Names a zone: its node and type.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::page_alloc::ZoneId;
///
/// let normal = allocator.zone(0, ZoneType::Normal).unwrap();
/// assert_eq!(normal.id(), ZoneId { node: 0, zone_type: ZoneType::Normal });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ZoneId {
    /// The node.
    pub node: NodeId,
    /// The zone type.
    pub zone_type: ZoneType,
}

/// A zone. `R` is the raw lock of its zone lock and pagesets' locks (see [`crate::sync`]).
///
/// A user reads a zone (sizes, watermarks, `NR_FREE_PAGES`, its free blocks, a copy of a
/// pageset) and changes it only through [`PageAllocator`](super::PageAllocator)'s calls.
/// The zone lock and the free lists it guards are the core's alone:
///
/// ```
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let zone = allocator.zone(0, ZoneType::Normal).unwrap();
/// assert_eq!(zone.free_pages() as u64, zone.buddyinfo().iter().enumerate().map(|(o, n)| n << o).sum());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// ```compile_fail,E0624
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false).unwrap();
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7).unwrap();
/// let zone = allocator.zone(0, ZoneType::Normal).unwrap();
/// let locked = zone.lock(); // crate-private
/// ```
#[derive(Debug)]
pub struct Zone<R: RawMutex = RawSpinLock> {
    /// This zone's index in the allocator's zones (`PageAllocator::zones`), which names it
    /// in [`ZoneLockHold`](super::ZoneLockHold) records.
    pub(crate) index: usize,
    pub(crate) node: NodeId,
    pub(crate) zone_type: ZoneType,
    pub(crate) start_pfn: Pfn,
    pub(crate) spanned: u64,
    pub(crate) present: u64,
    pub(crate) managed: u64,
    /// Where the present pages lie (reserved or managed); the rest of the span is holes.
    pub(crate) present_ranges: Box<[PresentRange]>,
    pub(crate) mem_map: MemMap,
    /// `zone->lock` and what it protects.
    pub(crate) free_area: Lock<R, FreeArea>,
    /// [`FreeArea::free_block_bits`] as the last holder of the zone lock left the lists,
    /// stored by [`ZoneLocked`] as it releases the lock: the free-area walk of a
    /// higher-order watermark check reads this instead of taking the lock (Linux reads
    /// `free_area` without it there).
    pub(crate) free_block_bits: AtomicU32,
    pub(crate) watermarks: Watermarks,
    pub(crate) lowmem_reserve: [AtomicU64; MAX_NR_ZONES],
    pub(crate) flags: AtomicU32,
    /// `NR_FREE_PAGES`: pages on the buddy lists, isolated pageblocks excepted.
    pub(crate) nr_free_pages: AtomicI64,
    /// Pages in high-atomic pageblocks (`nr_reserved_highatomic`); written under the lock.
    pub(crate) nr_reserved_highatomic: AtomicU64,
    pub(crate) stat_threshold: AtomicU32,
    /// `vm.watermark_boost_factor`, copied here for the fallback path.
    pub(crate) watermark_boost_factor: AtomicU32,
    /// False on tiny systems (`page_group_by_mobility_disabled`).
    pub(crate) group_by_mobility: AtomicBool,
    pub(crate) events: ZoneEvents,
    /// One pageset per CPU (`zone->per_cpu_pageset`), each with the CPU's vm events.
    pub(crate) pagesets: Box<[CachePadded<PagesetSlot<R>>]>,
    /// The limits every pageset gets (`pageset_batch`, `pageset_high_min/max`).
    pub(crate) pcp_limits: Lock<R, PcpLimits>,
    /// Nesting depth of `zone_pcp_disable`.
    pub(crate) pcp_disabled: AtomicU32,
}

/// Why [`Zone::pcp_trylock`] refused a pageset; either way the request goes to the zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PcpRefused {
    /// Locked by someone else (a remote drain, or re-entry): Linux's failed trylock,
    /// counted as `pcp_lock_contended`.
    Busy,
    /// The CPU went offline after the caller checked it.
    Offline,
}

impl PcpRefused {
    /// Count a busy pageset; an offline one is not contention.
    #[inline(always)]
    pub(crate) fn count<R: RawMutex>(self, zone: &Zone<R>) {
        if self == PcpRefused::Busy {
            zone.events.pcp_lock_contended.fetch_add(1, Relaxed);
        }
    }
}

impl<R: RawMutex> Zone<R> {
    /// Build the zone of `spec`, whose present pages are `present` (in pfn order, inside
    /// the span), the allocator's zone number `index`, with `nr_cpus` pagesets, and free
    /// its managed pages into the buddy lists in maximal aligned blocks, at the list tails,
    /// as boot does (`memblock_free_all` → `__free_pages_core`, `FPI_TO_TAIL`).
    /// `mem_map` is the zone's share of the caller's mem_map storage (exactly `spanned`
    /// descriptors, and whether they are known to be zero), or `None` for a heap
    /// allocation.
    pub(crate) fn new(
        spec: &ZoneSpec,
        present: &[PresentRange],
        index: usize,
        nr_cpus: u32,
        mem_map: Option<Storage>,
    ) -> Zone<R> {
        let zone = Zone {
            index,
            node: spec.node,
            zone_type: spec.zone_type,
            start_pfn: spec.start_pfn,
            spanned: spec.spanned,
            present: spec.present,
            managed: spec.managed,
            present_ranges: present.into(),
            mem_map: MemMap::new(spec.start_pfn.0, spec.spanned, present, mem_map),
            free_area: Lock::new(FreeArea::new()),
            free_block_bits: AtomicU32::new(0),
            watermarks: Watermarks::default(),
            lowmem_reserve: Default::default(),
            flags: AtomicU32::new(0),
            nr_free_pages: AtomicI64::new(0),
            nr_reserved_highatomic: AtomicU64::new(0),
            stat_threshold: AtomicU32::new(0),
            watermark_boost_factor: AtomicU32::new(0),
            group_by_mobility: AtomicBool::new(true),
            events: ZoneEvents::default(),
            pagesets: (0..nr_cpus)
                .map(|_| {
                    CachePadded(PagesetSlot {
                        pcp: Lock::new(PerCpuPages::default()),
                        vm_events: PcpVmEvents::default(),
                    })
                })
                .collect(),
            pcp_limits: Lock::new(PcpLimits::default()),
            pcp_disabled: AtomicU32::new(0),
        };
        zone.free_boot_memory();
        zone
    }

    fn free_boot_memory(&self) {
        let mut locked = self.lock();
        let managed = self.present_ranges.iter().filter(|run| !run.reserved);
        let blocks = managed.flat_map(|run| aligned_blocks(run.pfns.start.0, run.pfns.end.0));
        for (pfn, order) in blocks {
            let mt = self.mem_map.pageblock_migratetype(pfn);
            // The mem_map is allocated zeroed and mapped by the kernel on first touch; a
            // first touch that reads maps the shared zero page, and the write after it
            // copies (a second fault, and in a multi-threaded process a TLB shootdown to
            // every CPU running it: the demo's two simulation threads spent 27 s in the
            // kernel on that). `free_one_page` reads the head before it writes it, so
            // write it first: storing the unlinked Tail it already holds changes nothing.
            self.mem_map.page(pfn).clear_tail();
            locked.free_one_page(pfn, order, mt, ListEnd::Tail);
        }
    }

    /// Take the zone lock. Crate-private: the free lists are the core's alone, so no
    /// caller outside it can unlink a block `verify()` would then miss.
    pub(crate) fn lock(&self) -> ZoneLocked<'_, R> {
        ZoneLocked::new(self, self.free_area.lock())
    }

    /// The node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The zone's name: node and type.
    pub fn id(&self) -> ZoneId {
        ZoneId {
            node: self.node,
            zone_type: self.zone_type,
        }
    }

    /// `pcp_spin_trylock` on `cpu`'s pageset, refusing one whose CPU is offline as well as
    /// a busy one. On Linux nothing runs on a dead CPU; here a task that saw its CPU
    /// online can reach the pageset after `cpu_down` drained it, and what it left there
    /// would sit on an offline CPU, out of every allocator's reach, until the CPU came
    /// back. `cpu_down` sets the flag under this lock before it drains, so a task that
    /// takes the lock later sees it; one that took it earlier is drained.
    #[inline(always)]
    pub(crate) fn pcp_trylock(&self, cpu: CpuId) -> Result<PcpLocked<'_, R>, PcpRefused> {
        let slot = &self.pagesets[cpu as usize];
        let pcp = slot.pcp.try_lock().ok_or(PcpRefused::Busy)?;
        if pcp.offline {
            return Err(PcpRefused::Offline);
        }
        Ok(PcpLocked {
            pcp,
            vm_events: &slot.vm_events,
        })
    }

    /// Pages on all of this zone's pagesets (each read under its lock).
    pub fn pcp_pages(&self) -> u64 {
        self.pagesets.iter().map(|p| p.pcp.lock().count).sum()
    }

    /// The zone type.
    pub fn zone_type(&self) -> ZoneType {
        self.zone_type
    }

    /// First pfn spanned.
    pub fn start_pfn(&self) -> Pfn {
        self.start_pfn
    }

    /// Pfns spanned.
    pub fn spanned(&self) -> u64 {
        self.spanned
    }

    /// Pages present.
    pub fn present(&self) -> u64 {
        self.present
    }

    /// Pages managed by the buddy allocator.
    pub fn managed(&self) -> u64 {
        self.managed
    }

    /// Whether the zone has pages to allocate (`managed_zone`).
    pub fn is_managed(&self) -> bool {
        self.managed > 0
    }

    /// Whether the zone spans `pfn`.
    pub fn spans(&self, pfn: Pfn) -> bool {
        self.mem_map.spans(pfn)
    }

    /// The zone's mem_map.
    pub fn mem_map(&self) -> &MemMap {
        &self.mem_map
    }

    /// `NR_FREE_PAGES`.
    pub fn free_pages(&self) -> i64 {
        self.nr_free_pages.load(Relaxed)
    }

    /// Effective watermark `kind` (stored + boost: `wmark_pages`).
    pub fn wmark(&self, kind: WatermarkKind) -> u64 {
        self.watermarks.get(kind)
    }

    /// The watermarks.
    pub fn watermarks(&self) -> &Watermarks {
        &self.watermarks
    }

    /// `lowmem_reserve[]`: pages this zone keeps back from requests that could have used a
    /// higher zone, by that request's highest zone.
    pub fn lowmem_reserve(&self) -> [u64; MAX_NR_ZONES] {
        core::array::from_fn(|i| self.lowmem_reserve[i].load(Relaxed))
    }

    /// Pages in high-atomic pageblocks.
    pub fn nr_reserved_highatomic(&self) -> u64 {
        self.nr_reserved_highatomic.load(Relaxed)
    }

    /// The zone flags.
    pub fn flags(&self) -> ZoneFlags {
        ZoneFlags::from_bits_truncate(self.flags.load(Relaxed))
    }

    /// Set `flag`; true if it was clear (`test_and_set_bit`).
    pub(crate) fn set_flag(&self, flag: ZoneFlags) -> bool {
        self.flags.fetch_or(flag.bits(), Relaxed) & flag.bits() == 0
    }

    /// Clear `flag`; true if it was set.
    pub(crate) fn clear_flag(&self, flag: ZoneFlags) -> bool {
        self.flags.fetch_and(!flag.bits(), Relaxed) & flag.bits() != 0
    }

    /// The vmstat threshold of this zone's per-CPU counters.
    pub fn stat_threshold(&self) -> u32 {
        self.stat_threshold.load(Relaxed)
    }

    /// Take `pages` off the watermark boost (never below zero), as kswapd does at the end
    /// of a run with the boost it found when it started: a boost a fallback added while it
    /// ran stays for the next run. Under the zone lock, where fallbacks raise it.
    pub(crate) fn reduce_watermark_boost(&self, pages: u64) {
        let _locked = self.lock();
        let boost = self.watermarks.boost();
        self.watermarks.set_boost(boost - boost.min(pages));
    }

    /// `vm.watermark_boost_factor` as this zone applies it.
    pub fn watermark_boost_factor(&self) -> u64 {
        self.watermark_boost_factor.load(Relaxed) as u64
    }

    /// Whether pages are grouped by mobility (false on systems under five pageblocks).
    pub fn group_by_mobility(&self) -> bool {
        self.group_by_mobility.load(Relaxed)
    }

    /// `PGALLOC`: pages allocated from this zone, through its pagesets or its buddy lists
    /// (`pgalloc_<zone>` in `/proc/vmstat`).
    pub fn pgalloc(&self) -> u64 {
        let per_cpu: u64 = self
            .pagesets
            .iter()
            .map(|p| p.vm_events.pgalloc.load(Relaxed))
            .sum();
        self.events.pgalloc.load(Relaxed) + per_cpu
    }

    /// `PGFREE`: pages freed to this zone through the counted paths (the pageset commit and
    /// the direct buddy free; v6.7's try-lock fallback is not counted).
    pub fn pgfree(&self) -> u64 {
        let per_cpu: u64 = self
            .pagesets
            .iter()
            .map(|p| p.vm_events.pgfree.load(Relaxed))
            .sum();
        self.events.pgfree.load(Relaxed) + per_cpu
    }

    /// Event counters.
    pub fn events(&self) -> &ZoneEvents {
        &self.events
    }

    /// A copy of `cpu`'s pageset, taken under its lock.
    pub fn pageset(&self, cpu: u32) -> Option<PerCpuPages> {
        self.pagesets
            .get(cpu as usize)
            .map(|p| p.pcp.lock().clone())
    }

    /// Number of pagesets (one per CPU).
    pub fn nr_pagesets(&self) -> usize {
        self.pagesets.len()
    }

    /// Free blocks per order (`nr_free`), as `/proc/buddyinfo` shows them.
    pub fn buddyinfo(&self) -> [u64; NR_PAGE_ORDERS] {
        let area = self.free_area.lock();
        core::array::from_fn(|o| area.nr_free(Order::new(o as u8).expect("o ≤ MAX_ORDER")))
    }

    /// The free blocks, as (pfn, order, migratetype list) triples in list order, order by
    /// order: what a test compares before and after.
    pub fn free_blocks(&self) -> Vec<(Pfn, Order, MigrateType)> {
        let area = self.free_area.lock();
        let mut blocks = Vec::new();
        for order in Order::all() {
            for mt in MigrateType::ALL {
                let list = area.list(order, mt);
                blocks.extend(list.iter(&self.mem_map).map(|pfn| (pfn, order, mt)));
            }
        }
        blocks
    }

    /// The watermark-check view of the zone for a request whose highest zone is
    /// `highest_zoneidx`. `free_blocks` is filled by the caller when the order needs it.
    pub(crate) fn watermark_input<'a>(
        &self,
        highest_zoneidx: ZoneType,
        free_blocks: &'a [(bool, bool)],
    ) -> WatermarkInput<'a> {
        WatermarkInput {
            free_pages: self.free_pages(),
            reserved_highatomic: self.nr_reserved_highatomic(),
            lowmem_reserve: self.lowmem_reserve[highest_zoneidx.index()].load(Relaxed),
            free_blocks,
        }
    }

    /// Per order from `from` up: whether a block sits on a PCP-type list, and on the
    /// high-atomic list (`__zone_watermark_ok`'s free-area walk). The walk stops at the
    /// first order with a block on a PCP-type list, as Linux's returns there: a watermark
    /// check reading the orders in turn has its answer at that entry, so the entries past
    /// it, and those below `from`, are left `(false, false)` unread.
    ///
    /// Read without the zone lock, as Linux reads `free_area` here: from the bits the last
    /// lock holder published (`free_block_bits`). A check racing a holder sees the lists as
    /// the previous holder left them, as Linux's lockless walk may; a check that does not
    /// race one (every check in the simulator) sees what a locked walk would. It used to
    /// take the lock: a locked instruction, and a wait behind refills and drains, on every
    /// allocation above order 0.
    pub(crate) fn free_block_summary(&self, from: Order) -> [(bool, bool); NR_PAGE_ORDERS] {
        let bits = self.free_block_bits.load(Relaxed);
        let mut summary = [(false, false); NR_PAGE_ORDERS];
        for (o, entry) in summary.iter_mut().enumerate().skip(from.index()) {
            let pcp_types = bits >> o & 1 != 0;
            *entry = (pcp_types, bits >> (FreeBlockBits::HIGH_ATOMIC + o) & 1 != 0);
            if pcp_types {
                break;
            }
        }
        summary
    }
}

/// The maximal aligned blocks covering `[start, end)`, in address order
/// (`__free_pages_memory`).
pub(crate) fn aligned_blocks(start: u64, end: u64) -> impl Iterator<Item = (Pfn, Order)> {
    let mut pfn = start;
    core::iter::from_fn(move || {
        if pfn >= end {
            return None;
        }
        let align = if pfn == 0 { 63 } else { pfn.trailing_zeros() };
        let mut order = align.min(crate::page::MAX_ORDER as u32);
        while pfn + (1 << order) > end {
            order -= 1;
        }
        let block = (
            Pfn(pfn),
            Order::new(order as u8).expect("order ≤ MAX_ORDER"),
        );
        pfn += 1 << order;
        Some(block)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Normal zone of pfns 0..3000, all managed, one pageset, as boot leaves it: free
    /// blocks of orders 10, 10, 9, 8, 7, 5, 4 and 3.
    fn boot_zone_of_3000_pages() -> Zone {
        let spec = ZoneSpec {
            node: 0,
            zone_type: ZoneType::Normal,
            start_pfn: Pfn(0),
            spanned: 3000,
            present: 3000,
            managed: 3000,
        };
        let present = PresentRange {
            pfns: crate::topology::PfnRange::new(Pfn(0), Pfn(3000)),
            reserved: false,
        };
        Zone::new(&spec, &[present], 0, 1, None)
    }

    /// The watermark walk's answer from every order, read off a summary that stops early,
    /// equals the answer read off the free lists themselves. Boot frees pfns 0..3000 as
    /// blocks of orders 10, 10, 9, 8, 7, 5, 4 and 3 (the test below), so orders 0–2 and
    /// 6 have none.
    #[test]
    fn free_block_summary_stops_at_the_first_order_with_a_block() {
        let zone = boot_zone_of_3000_pages();
        let has_block = |o: usize| [3, 4, 5, 7, 8, 9, 10].contains(&o);
        for from in 0..NR_PAGE_ORDERS {
            let order = Order::new(from as u8).expect("a valid order");
            let summary = zone.free_block_summary(order);
            let first = (from..NR_PAGE_ORDERS).find(|&o| has_block(o));
            for (o, &(pcp_types, highatomic)) in summary.iter().enumerate() {
                let read = o >= from && first.is_none_or(|f| o <= f);
                let expected = read && has_block(o);
                assert_eq!(pcp_types, expected, "from {from}, order {o}");
                assert!(!highatomic, "no high-atomic blocks at boot");
            }
            let answer = summary[from..].iter().any(|&(pcp_types, _)| pcp_types);
            assert_eq!(answer, first.is_some(), "from {from}");
        }
    }

    /// The summary, read without the lock, follows every change made under it: taking
    /// blocks off the lists, reserving a high-atomic pageblock, freeing them back. The
    /// expected answer is read off the lists themselves ([`Zone::free_blocks`]).
    #[test]
    fn free_block_summary_follows_the_lists_across_lock_holds() {
        let zone = boot_zone_of_3000_pages();
        let check = |step: &str| {
            let blocks = zone.free_blocks();
            let summary = zone.free_block_summary(Order::ZERO);
            let mut stopped = false;
            for (o, &entry) in summary.iter().enumerate() {
                let on = |high_atomic: bool| {
                    blocks.iter().any(|&(_, order, mt)| {
                        order.index() == o && (mt == MigrateType::HighAtomic) == high_atomic
                    })
                };
                let expected = if stopped {
                    (false, false)
                } else {
                    (on(false), on(true))
                };
                assert_eq!(entry, expected, "{step}: order {o}");
                stopped |= expected.0;
            }
        };
        check("boot");
        // Boot's order-3 block is 2992..3000 and its order-4 block 2976..2992.
        let small = zone.lock().take_block(Pfn(2992), Order::new(3).unwrap());
        assert!(small.is_some());
        check("order 3 taken");
        let medium = zone.lock().take_block(Pfn(2976), Order::new(4).unwrap());
        assert!(medium.is_some());
        check("order 4 taken");
        // The pageblock of the order-9 block at 2048 becomes high-atomic.
        zone.lock().reserve_highatomic_pageblock(Pfn(2048));
        assert!(
            zone.free_blocks()
                .iter()
                .any(|&(_, _, mt)| mt == MigrateType::HighAtomic),
            "the reserve took the pageblock"
        );
        check("pageblock reserved");
        let mut locked = zone.lock();
        locked.free_one_page(
            Pfn(2992),
            Order::new(3).unwrap(),
            MigrateType::Movable,
            ListEnd::Head,
        );
        drop(locked);
        check("order 3 freed");
    }

    #[test]
    fn aligned_blocks_cover_the_range_greedily() {
        let blocks: Vec<_> = aligned_blocks(1, 20).map(|(p, o)| (p.0, o.get())).collect();
        assert_eq!(blocks, [(1, 0), (2, 1), (4, 2), (8, 3), (16, 2)]);
        let big: Vec<_> = aligned_blocks(0, 3000)
            .map(|(p, o)| (p.0, o.get()))
            .collect();
        assert_eq!(
            big,
            [
                (0, 10),
                (1024, 10),
                (2048, 9),
                (2560, 8),
                (2816, 7),
                (2944, 5),
                (2976, 4),
                (2992, 3)
            ]
        );
    }
}
