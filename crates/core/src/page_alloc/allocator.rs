//! The page allocator of a whole machine: zones of every node, zonelists, settings,
//! policy, online CPUs, and everything recomputed when one of them changes.
//!
//! Linux counterpart (v6.7): `build_zonelists`, `init_per_zone_wmark_min`,
//! `setup_per_zone_wmarks`, `setup_per_zone_lowmem_reserve`,
//! `zone_set_pageset_high_and_batch`, `setup_pcp_cacheinfo`, the sysctl handlers, and the
//! CPU hotplug callbacks (`page_alloc_cpu_online`, `page_alloc_cpu_dead`). The entry
//! points live beside this file: `alloc.rs` (allocation), `free.rs` (free), `bulk.rs`
//! (bulk allocation), `drain.rs` (drains, decay, `zone_pcp_disable`).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use core::sync::atomic::{AtomicU32, AtomicU8};

use super::drain::DrainWorkState;
use super::gfp::{Gfp, GFP_DECODE_COMBINATIONS};
use super::mem_map::Storage;
use super::pcp_sizing::{self, PcpLimits};
use super::types::{CpuId, MigrateType, NodeId, ZoneType, MAX_NR_ZONES, MIGRATE_TYPES};
use super::watermark::{self, WatermarkKind, PAGEBLOCK_PAGES};
use super::zone::{PagesetSlot, Zone};
use crate::page::{Order, Page, Pfn};
use crate::policy::Policy;
use crate::settings::{MinFreeKbytes, Settings, SettingsError};
use crate::sync::{AtomicU64, CachePadded, Lock, RawMutex, RawSpinLock};
use crate::topology::{Topology, ZoneSpec};

/// kswapd wake-ups requested for a node. The core only records them; whoever owns the
/// threads (a kernel's kswapd, the runtime's, a simulator) takes the request and runs
/// [`crate::mm::kswapd::run`] for it. A kernel must: besides balancing the node, the loop
/// drops the watermark boost that migratetype fallbacks raise, which otherwise keeps up to
/// a pageblock or 1.5 times the high watermark, whichever is more, of each zone out of
/// every allocation's reach. A kernel without a page cache passes a shrinker that
/// reclaims nothing
/// (`examples/out-of-tree/kernel/src/selftest.rs`, `kswapd_wakeups`).
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// // Nothing has woken node 0's kswapd yet.
/// let kswapd = allocator.kswapd(0).unwrap();
/// assert_eq!((kswapd.wakeups(), kswapd.pending()), (0, false));
/// assert_eq!(kswapd.take_request(), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KswapdState {
    /// Wake-ups requested.
    wakeups: AtomicU64,
    /// A wake-up is pending.
    pending: AtomicBool,
    /// The highest order asked since kswapd last took its request (`pgdat->kswapd_order`).
    order: AtomicU32,
    /// The highest zone index asked since then, [`MAX_NR_ZONES`] for none
    /// (`pgdat->kswapd_highest_zoneidx`).
    highest_zoneidx: AtomicU32,
}

impl Default for KswapdState {
    fn default() -> Self {
        KswapdState {
            wakeups: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            order: AtomicU32::new(0),
            highest_zoneidx: AtomicU32::new(MAX_NR_ZONES as u32),
        }
    }
}

impl KswapdState {
    /// Wake-ups requested so far (`wakeup_kswapd` calls that reached the node).
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Relaxed)
    }

    /// Whether a wake-up waits for kswapd to take it ([`KswapdState::take_request`]).
    pub fn pending(&self) -> bool {
        self.pending.load(Relaxed)
    }

    /// `wakeup_kswapd`'s part: raise the recorded order and highest zone to the request's
    /// and mark a wake-up pending.
    pub(crate) fn request(&self, order: Order, highest_zoneidx: ZoneType) {
        self.order.fetch_max(u32::from(order.get()), Relaxed);
        let zoneidx = highest_zoneidx.index() as u32;
        let _ = self
            .highest_zoneidx
            .fetch_update(Relaxed, Relaxed, |current| {
                (current == MAX_NR_ZONES as u32 || current < zoneidx).then_some(zoneidx)
            });
        self.wakeups.fetch_add(1, Relaxed);
        self.pending.store(true, Relaxed);
    }

    /// kswapd's read of its wake-up (`kswapd()`: read `kswapd_order` and
    /// `kswapd_highest_zoneidx`, then reset them): the order and highest zone to balance
    /// for, or `None` if no wake-up is pending. A request recorded without a zone asks for
    /// every zone, as kswapd's first run does.
    pub fn take_request(&self) -> Option<(Order, ZoneType)> {
        if !self.pending.swap(false, Relaxed) {
            return None;
        }
        let order = self.order.swap(0, Relaxed);
        let zoneidx = self.highest_zoneidx.swap(MAX_NR_ZONES as u32, Relaxed) as usize;
        let order = Order::new(order as u8).unwrap_or(Order::ZERO);
        let highest = ZoneType::from_index(zoneidx).unwrap_or(ZoneType::Device);
        Some((order, highest))
    }
}

/// A node's zonelist (`pgdat->node_zonelists[ZONELIST_FALLBACK]`).
#[derive(Debug)]
pub(crate) struct Zonelist {
    /// Zone indices in fallback order.
    pub(crate) zones: Vec<usize>,
    /// Per highest zone type: the first entry a request may use (`first_zones_zonelist`),
    /// computed once so the fast path does not search.
    pub(crate) first: [Option<usize>; MAX_NR_ZONES],
    /// Per value of the GFP bits that choose zone and migratetype ([`Gfp::decode_index`]):
    /// what the order-0 fast path needs of `prepare_alloc_pages` from this node, fixed at
    /// boot. `None` where the bits are invalid or no zone serves them: the general path
    /// builds the full context and reports why.
    pub(crate) pcp_fast: [Option<PcpFastTarget>; GFP_DECODE_COMBINATIONS],
}

/// The part of an order-0 request's context (`struct alloc_context`) that the pageset
/// fast path reads, decoded once per node and GFP combination instead of per allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PcpFastTarget {
    /// The preferred zone (`ac->preferred_zoneref`), an index into the zones.
    pub(crate) preferred: u16,
    /// `ac->highest_zoneidx`: which `lowmem_reserve` the watermark check adds.
    pub(crate) highest_zoneidx: ZoneType,
    /// `ac->migratetype`, after `page_group_by_mobility_disabled`.
    pub(crate) migratetype: MigrateType,
}

impl Zonelist {
    /// The zonelist of `zones` (indices in fallback order) with its lookup tables.
    fn new<R: RawMutex>(all: &[Zone<R>], zones: Vec<usize>, group_by_mobility: bool) -> Zonelist {
        let first: [Option<usize>; MAX_NR_ZONES] = core::array::from_fn(|highest| {
            zones
                .iter()
                .copied()
                .find(|&i| all[i].zone_type.index() <= highest)
        });
        let pcp_fast = core::array::from_fn(|bits| {
            let (highest_zoneidx, migratetype) = Gfp::from_bits_retain(bits as u32)
                .zone_and_migratetype()
                .ok()?;
            Some(PcpFastTarget {
                preferred: u16::try_from(first[highest_zoneidx.index()]?)
                    .expect("fewer than 65536 zones"),
                highest_zoneidx,
                migratetype: if group_by_mobility {
                    migratetype
                } else {
                    MigrateType::Unmovable
                },
            })
        });
        Zonelist {
            zones,
            first,
            pcp_fast,
        }
    }
}

/// What the allocation and free paths ask about a CPU, in one entry so one bounds check
/// answers both.
#[derive(Debug)]
struct CpuState {
    /// In `cpu_online_mask`.
    online: AtomicBool,
    /// `cpu_to_node`, a table so the fast path does not search the topology.
    node: NodeId,
}

/// The zones of every node and the allocator's entry points.
///
/// Built from a [`Topology`], [`Settings`] and a [`Policy`]; every call names the CPU it
/// runs on and its context ([`Caller`](super::Caller)), as Linux's `alloc_pages` knows
/// them implicitly. Allocations return pfns; a free gives the pfn and the order back.
///
/// ```
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// // 64 MiB of DMA32 and 64 MiB of Normal memory, two CPUs.
/// let zones = [
///     ZoneSize::managed(0, ZoneType::Dma32, 16_384),
///     ZoneSize::managed(0, ZoneType::Normal, 16_384),
/// ];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 2 };
/// let topology = Topology::x86_64(&zones, vec![2], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
///
/// let cpu1 = Caller::task(1);
/// let order = Order::try_from(3u8)?; // 8 pages
/// let normal = allocator.alloc_pages(cpu1, Gfp::KERNEL, order)?;
/// let dma32 = allocator.alloc_pages(cpu1, Gfp::KERNEL | Gfp::DMA32, order)?;
/// assert_eq!(allocator.find_zone(normal).unwrap().zone_type(), ZoneType::Normal);
/// assert_eq!(allocator.find_zone(dma32).unwrap().zone_type(), ZoneType::Dma32);
///
/// // A wrong free is refused and changes nothing.
/// assert!(allocator.free_pages(cpu1, normal, Order::ZERO).is_err());
/// allocator.free_pages(cpu1, normal, order)?;
/// allocator.free_pages(cpu1, dma32, order)?;
/// allocator.verify()?; // every page accounted for: free, on a pageset or allocated
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// `R` is the raw lock of every zone lock, pageset lock and the settings lock
/// ([`crate::sync`]): `spin`'s spinlock unless the embedder picks another with
/// [`PageAllocator::with_lock`], such as one that saves and disables interrupts.
#[derive(Debug)]
pub struct PageAllocator<R: RawMutex = RawSpinLock> {
    pub(crate) topology: Topology,
    /// Node-major: node n's zone of type t is at `n * nr_zone_types + t`.
    pub(crate) zones: Vec<Zone<R>>,
    pub(crate) nr_zone_types: usize,
    /// Per node: its zonelist and the first entry of it each request may use.
    pub(crate) zonelists: Vec<Zonelist>,
    /// Per CPU: online or not, and its node.
    cpus: Vec<CpuState>,
    /// `!page_group_by_mobility_disabled`, decided at boot; every zone has a copy.
    pub(crate) group_by_mobility: AtomicBool,
    /// Spanning zones sorted by start pfn, for pfn → zone.
    pfn_ranges: Vec<(u64, u64, usize)>,
    /// pfn → zone in one load for most pfns (Linux keeps the zone in `page->flags`).
    section_zones: SectionZones,
    settings: Lock<R, Settings>,
    pub(crate) policy: Policy,
    min_free_kbytes: AtomicU64,
    /// `CONFIG_PCP_BATCH_SCALE_MAX`, copied from the settings for the hot paths.
    pub(crate) scale_max: AtomicU8,
    pub(crate) nr_online: AtomicU32,
    pub(crate) kswapd: Vec<KswapdState>,
    /// `pcpu_drain_mutex` and the queued drain work of the workqueue drain mode.
    pub(crate) drain_work: DrainWorkState,
}

/// Why [`PageAllocator::with_mem_map`] built nothing.
///
/// ```
/// use mmkit_core::page::Page;
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{InitError, PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// // Storage for one descriptor too few: refused before anything is built.
/// let short = topology.mem_map_pages() as usize - 1;
/// let mem_map: &'static mut [Page] = Vec::leak((0..short).map(|_| Page::zeroed()).collect());
/// let refused = PageAllocator::with_mem_map(topology, Settings::default(), Policy::V6_7, mem_map);
/// let needed = 16_384;
/// assert_eq!(refused.err(), Some(InitError::MemMapTooSmall { needed, given: needed - 1 }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum InitError {
    /// The settings are invalid.
    Settings(SettingsError),
    /// The mem_map storage holds fewer descriptors than the machine spans pages
    /// ([`Topology::mem_map_pages`]).
    MemMapTooSmall {
        /// Descriptors the topology needs.
        needed: u64,
        /// Descriptors the storage holds.
        given: u64,
    },
}

impl core::fmt::Display for InitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InitError::Settings(e) => write!(f, "{e}"),
            InitError::MemMapTooSmall { needed, given } => write!(
                f,
                "the mem_map storage holds {given} page descriptors; the machine spans \
                 {needed} pages ({} bytes, Topology::mem_map_bytes)",
                needed.saturating_mul(size_of::<Page>() as u64)
            ),
        }
    }
}

impl core::error::Error for InitError {}

impl From<SettingsError> for InitError {
    fn from(e: SettingsError) -> InitError {
        InitError::Settings(e)
    }
}

impl PageAllocator {
    /// Build the zones of `topology`, free their managed memory into the buddy lists, and
    /// compute watermarks, reserves and PCP limits as boot does.
    /// `policy` selects the behaviour of each patch thread (see [`crate::policy`]).
    /// The mem_map comes from the heap, zeroed (see [`MemMap`](super::mem_map::MemMap));
    /// [`PageAllocator::with_mem_map`] takes it from the caller instead. The locks are
    /// `spin`'s spinlocks; [`PageAllocator::with_lock`] takes another lock type.
    pub fn new(
        topology: Topology,
        settings: Settings,
        policy: Policy,
    ) -> Result<PageAllocator, SettingsError> {
        Self::with_lock(topology, settings, policy)
    }

    /// [`PageAllocator::new`] with the mem_map in `mem_map`, storage the caller carved out
    /// of the memory it manages (Linux: `alloc_node_mem_map` from memblock), so the
    /// heap holds only the small structures (zones, pagesets, zonelists, pageblock
    /// migratetypes). `mem_map` needs [`Topology::mem_map_pages`] descriptors
    /// ([`Topology::mem_map_bytes`] bytes); a longer slice's tail stays unused, a shorter
    /// one is refused before anything is built. Its descriptors may hold anything: every
    /// one is written. The pages holding it must be outside the memory the allocator
    /// hands out: a reserved range of the memory map, or memory the map leaves out.
    ///
    /// All-zero bytes are a valid [`Page`] (`bytemuck::Zeroable`), so a kernel zeroes the
    /// range and makes the slice from its address:
    ///
    /// ```
    /// use mmkit_core::page::Page;
    /// use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits};
    /// use mmkit_core::{PageAllocator, Policy, Settings, Topology};
    ///
    /// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
    /// let usable = [MemoryRange::from_bytes(1 << 20, 64 << 20, 0)];
    /// let plain = Topology::from_memory_map(&usable, &[], ZoneLimits::X86_64, &[0], llc)?;
    /// // Carve the mem_map off the top of memory and tell the allocator it is reserved.
    /// let carved = plain.mem_map_bytes().next_multiple_of(4096);
    /// let reserved = [PfnRange::covering_bytes((64 << 20) - carved, 64 << 20)];
    /// let machine = Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, &[0], llc)?;
    /// // A kernel: `slice::from_raw_parts_mut(address as *mut Page, len)` over the zeroed
    /// // range. Here, leaked heap memory stands in for it.
    /// let len = machine.mem_map_pages() as usize;
    /// let mem_map: &'static mut [Page] = Vec::leak((0..len).map(|_| Page::zeroed()).collect());
    /// let allocator = PageAllocator::with_mem_map(machine, Settings::default(), Policy::V6_7, mem_map)?;
    /// allocator.verify()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_mem_map(
        topology: Topology,
        settings: Settings,
        policy: Policy,
        mem_map: &'static mut [Page],
    ) -> Result<PageAllocator, InitError> {
        Self::with_lock_and_mem_map(topology, settings, policy, mem_map)
    }

    /// [`PageAllocator::with_mem_map`] for storage whose every byte is zero: fresh
    /// anonymous memory from the operating system, or a range the caller zeroed. Only
    /// what [`PageAllocator::new`] writes in its own zeroed allocation is written (holes,
    /// reserved runs, the head of each free block), so the storage's pages that the
    /// set-up and a run never reach stay untouched (a simulated node spans hundreds of
    /// MiB of descriptors). It lets the caller choose where the descriptors lie: storage that
    /// starts on a cache line keeps each aligned group of four descriptors (a block and its
    /// buddies up to order 1) in one line, where the heap's large allocations start 16
    /// bytes past a page boundary.
    ///
    /// A written descriptor in the storage breaks the promise: the allocator takes it for
    /// what it says (memory stays safe, every descriptor being valid bits, but the lists
    /// may be wrong); debug builds check each zone's first and last descriptor.
    ///
    /// ```
    /// use mmkit_core::page::Page;
    /// use mmkit_core::topology::{CacheInfo, ZoneSize};
    /// use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
    ///
    /// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
    /// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
    /// let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
    /// let len = topology.mem_map_pages() as usize;
    /// let mem_map: &'static mut [Page] = Vec::leak((0..len).map(|_| Page::zeroed()).collect());
    /// let allocator =
    ///     PageAllocator::with_zeroed_mem_map(topology, Settings::default(), Policy::V6_7, mem_map)?;
    /// allocator.verify()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_zeroed_mem_map(
        topology: Topology,
        settings: Settings,
        policy: Policy,
        mem_map: &'static mut [Page],
    ) -> Result<PageAllocator, InitError> {
        Self::with_storage(topology, settings, policy, mem_map, true)
    }

    /// The memory [`PageAllocator::new`] allocates for `topology`, in bytes (saturating):
    /// every zone's mem_map (16 bytes per spanned page) and pageblock migratetypes (a byte
    /// per pageblock), a cache-line-padded pageset slot per CPU in every zone of every node,
    /// the zones themselves, and each node's zonelist of every node's managed zones. Most of
    /// the mem_map is reserved but never touched (see [`MemMap`](super::mem_map::MemMap)),
    /// so this is the address space the machine takes, an upper bound of what it uses. An
    /// embedder or a command line checks it against the memory it has before building a
    /// machine it cannot hold. The zones and pagesets are counted with the default lock;
    /// another lock type adds its size beyond `spin`'s one byte per lock.
    pub fn boot_bytes(topology: &Topology) -> u64 {
        let mem_map: u64 = topology
            .zones()
            .iter()
            .map(|z| {
                let descriptors = z.spanned.saturating_mul(size_of::<Page>() as u64);
                descriptors.saturating_add(z.spanned / PAGEBLOCK_PAGES + 1)
            })
            .fold(0, u64::saturating_add);
        let nr_nodes = topology.nr_nodes() as u64;
        let nr_zones = nr_nodes.saturating_mul(topology.nr_zone_types() as u64);
        let pageset = size_of::<CachePadded<PagesetSlot>>() as u64;
        let zones = nr_zones.saturating_mul(
            (size_of::<Zone>() as u64)
                .saturating_add(pageset.saturating_mul(u64::from(topology.nr_cpus()))),
        );
        let managed_zones = topology.zones().iter().filter(|z| z.managed > 0).count() as u64;
        let zonelists =
            nr_nodes.saturating_mul(
                (size_of::<Zonelist>() as u64)
                    .saturating_add(managed_zones.saturating_mul(size_of::<usize>() as u64)),
            );
        mem_map.saturating_add(zones).saturating_add(zonelists)
    }
}

impl<R: RawMutex> PageAllocator<R> {
    /// [`PageAllocator::new`] with the raw lock `R` for every zone lock, pageset lock and
    /// the settings lock, named by the caller: a kernel passes a lock that saves and
    /// disables interrupts, as Linux takes `zone->lock` with `spin_lock_irqsave`.
    ///
    /// ```
    /// use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
    /// use mmkit_core::page_alloc::Caller;
    /// use mmkit_core::sync::{GuardSend, RawMutex, RawSpinLock};
    /// use mmkit_core::topology::{CacheInfo, ZoneSize};
    /// use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};
    ///
    /// /// The default spinlock, counting acquisitions (a kernel would save and disable
    /// /// interrupts here: `examples/kernel`'s `IrqSpinLock`).
    /// struct Counted(RawSpinLock);
    /// static TAKEN: AtomicU64 = AtomicU64::new(0);
    ///
    /// // SAFETY: every operation is the inner lock's, itself a `RawMutex` (named as one:
    /// // `spin`'s own methods of the same names return guards).
    /// unsafe impl RawMutex for Counted {
    ///     const INIT: Counted = Counted(RawSpinLock::INIT);
    ///     type GuardMarker = GuardSend;
    ///
    ///     fn lock(&self) {
    ///         RawMutex::lock(&self.0);
    ///         TAKEN.fetch_add(1, Relaxed);
    ///     }
    ///
    ///     fn try_lock(&self) -> bool {
    ///         let taken = RawMutex::try_lock(&self.0);
    ///         TAKEN.fetch_add(u64::from(taken), Relaxed);
    ///         taken
    ///     }
    ///
    ///     unsafe fn unlock(&self) {
    ///         // SAFETY: our caller holds the lock, so it holds the inner one.
    ///         unsafe { RawMutex::unlock(&self.0) }
    ///     }
    /// }
    ///
    /// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
    /// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 2 };
    /// let topology = Topology::x86_64(&zones, vec![2], llc, false)?;
    /// let allocator =
    ///     PageAllocator::<Counted>::with_lock(topology, Settings::default(), Policy::V6_7)?;
    /// let booted = TAKEN.load(Relaxed);
    /// let pfn = allocator.alloc_pages(Caller::task(0), Gfp::KERNEL, Order::ZERO)?;
    /// allocator.free_pages(Caller::task(0), pfn, Order::ZERO)?;
    /// assert!(TAKEN.load(Relaxed) > booted); // the pageset lock, at least
    /// allocator.verify()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_lock(
        topology: Topology,
        settings: Settings,
        policy: Policy,
    ) -> Result<PageAllocator<R>, SettingsError> {
        Self::build(topology, settings, policy, None)
    }

    /// [`PageAllocator::with_mem_map`] with the raw lock `R`
    /// ([`PageAllocator::with_lock`]).
    pub fn with_lock_and_mem_map(
        topology: Topology,
        settings: Settings,
        policy: Policy,
        mem_map: &'static mut [Page],
    ) -> Result<PageAllocator<R>, InitError> {
        Self::with_storage(topology, settings, policy, mem_map, false)
    }

    /// [`PageAllocator::with_lock_and_mem_map`], or with the storage known to be zero
    /// ([`PageAllocator::with_zeroed_mem_map`]).
    fn with_storage(
        topology: Topology,
        settings: Settings,
        policy: Policy,
        mem_map: &'static mut [Page],
        zeroed: bool,
    ) -> Result<PageAllocator<R>, InitError> {
        settings.validate()?;
        let needed = topology.mem_map_pages();
        let given = mem_map.len() as u64;
        if given < needed {
            return Err(InitError::MemMapTooSmall { needed, given });
        }
        Ok(Self::build(
            topology,
            settings,
            policy,
            Some((mem_map, zeroed)),
        )?)
    }

    /// [`PageAllocator::new`] and [`PageAllocator::with_mem_map`]: the zones' mem_maps come
    /// from `mem_map` in zone order when it is given (with whether it is known to be
    /// zero), which holds enough.
    fn build(
        topology: Topology,
        settings: Settings,
        policy: Policy,
        mem_map: Option<(&'static mut [Page], bool)>,
    ) -> Result<PageAllocator<R>, SettingsError> {
        let (mut mem_map, zeroed) = match mem_map {
            Some((pages, zeroed)) => (Some(pages), zeroed),
            None => (None, false),
        };
        settings.validate()?;
        let nr_zone_types = topology.nr_zone_types();
        let nr_cpus = topology.nr_cpus();
        let mut zones = Vec::new();
        for node in 0..topology.nr_nodes() as NodeId {
            for zone_type in &ZoneType::ALL[..nr_zone_types] {
                let spec = topology
                    .zones()
                    .iter()
                    .find(|z| z.node == node && z.zone_type == *zone_type)
                    .copied()
                    .unwrap_or(ZoneSpec {
                        node,
                        zone_type: *zone_type,
                        start_pfn: Pfn(0),
                        spanned: 0,
                        present: 0,
                        managed: 0,
                    });
                let present = topology.present_ranges(&spec);
                let storage = mem_map.take().map(|storage| {
                    let (pages, rest) = storage.split_at_mut(spec.spanned as usize);
                    mem_map = Some(rest);
                    Storage { pages, zeroed }
                });
                zones.push(Zone::new(&spec, present, zones.len(), nr_cpus, storage));
            }
        }
        let grouping = page_group_by_mobility(&zones);
        let zonelists = build_zonelists(&zones, nr_zone_types, topology.nr_nodes())
            .into_iter()
            .map(|list| Zonelist::new(&zones, list, grouping))
            .collect();
        let mut pfn_ranges: Vec<_> = zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.spanned > 0)
            .map(|(i, z)| (z.start_pfn.0, z.start_pfn.0 + z.spanned, i))
            .collect();
        pfn_ranges.sort_unstable();
        let section_zones = SectionZones::new(&pfn_ranges);
        let cpus = (0..nr_cpus)
            .map(|cpu| CpuState {
                online: AtomicBool::new(true),
                node: topology
                    .cpu_node(cpu)
                    .expect("CPUs are numbered below nr_cpus"),
            })
            .collect();
        let allocator = PageAllocator {
            kswapd: (0..topology.nr_nodes())
                .map(|_| KswapdState::default())
                .collect(),
            topology,
            zones,
            nr_zone_types,
            zonelists,
            cpus,
            group_by_mobility: AtomicBool::new(true),
            pfn_ranges,
            section_zones,
            scale_max: AtomicU8::new(settings.pcp_batch_scale_max),
            settings: Lock::new(settings),
            policy,
            min_free_kbytes: AtomicU64::new(0),
            nr_online: AtomicU32::new(nr_cpus),
            drain_work: DrainWorkState::new(nr_cpus),
        };
        allocator.check_min_free_kbytes(allocator.settings.lock().min_free_kbytes)?;
        allocator.boot();
        Ok(allocator)
    }

    /// `init_per_zone_wmark_min` and khugepaged's start: choose `min_free_kbytes`, then set
    /// watermarks, reserves, PCP limits, stat thresholds and the `FREE_HIGH_BATCH` flags.
    fn boot(&self) {
        let settings = self.settings.lock().clone();
        let grouping = page_group_by_mobility(&self.zones);
        self.group_by_mobility.store(grouping, Relaxed);
        for zone in &self.zones {
            zone.group_by_mobility.store(grouping, Relaxed);
            zone.watermark_boost_factor
                .store(settings.watermark_boost_factor, Relaxed);
        }
        match settings.min_free_kbytes {
            MinFreeKbytes::Explicit(kbytes) => self.setup_per_zone_wmarks(kbytes, &settings),
            MinFreeKbytes::Default => self.default_min_free_kbytes(&settings),
        }
        self.setup_per_zone_lowmem_reserve(&settings);
        self.refresh_zone_stat_thresholds();
        self.setup_pcp_cacheinfo();
    }

    /// The node of `cpu` (`cpu_to_node`), `None` for a CPU the machine does not have.
    #[inline]
    pub(crate) fn cpu_node(&self, cpu: CpuId) -> Option<NodeId> {
        self.cpus.get(cpu as usize).map(|c| c.node)
    }

    /// The node of `cpu` if it exists and is online: the allocation path's two questions,
    /// answered with one lookup.
    #[inline(always)]
    pub(crate) fn online_cpu_node(&self, cpu: CpuId) -> Option<NodeId> {
        let state = self.cpus.get(cpu as usize)?;
        state.online.load(Relaxed).then_some(state.node)
    }

    /// Whether `cpu` exists and is online.
    pub fn is_cpu_online(&self, cpu: CpuId) -> bool {
        self.cpus
            .get(cpu as usize)
            .is_some_and(|c| c.online.load(Relaxed))
    }

    /// Mark `cpu` online or offline in `cpu_online_mask`. The caller has checked that it
    /// exists.
    pub(crate) fn set_cpu_online_mask(&self, cpu: CpuId, online: bool) {
        self.cpus[cpu as usize].online.store(online, Relaxed);
    }

    /// Online CPUs of `node` (`cpumask_of_node`).
    pub(crate) fn node_online_cpus(&self, node: NodeId) -> u32 {
        // The per-CPU table, not `Topology::cpu_node`: that walks the nodes, and boot asks
        // this for every zone, so a 1024-node machine took minutes.
        self.cpus
            .iter()
            .filter(|c| c.node == node && c.online.load(Relaxed))
            .count() as u32
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn default_min_free_kbytes(&self, settings: &Settings) {
        // At boot the high watermarks are 0, so nr_free_buffer_pages() is Σ managed.
        let kbytes = watermark::default_min_free_kbytes(self.free_buffer_pages() * 4);
        self.setup_per_zone_wmarks(kbytes, settings);
        if settings.transparent_hugepage {
            let nr_zones = self
                .zones
                .iter()
                .filter(|z| z.zone_type <= ZoneType::Normal && z.present > 0)
                .count() as u64;
            let recommended =
                watermark::thp_recommended_min_free_kbytes(nr_zones, self.free_buffer_pages());
            if recommended > kbytes {
                self.setup_per_zone_wmarks(recommended, settings);
            }
        }
    }

    /// `nr_free_buffer_pages`: Σ (managed − high watermark) over zones up to Normal.
    fn free_buffer_pages(&self) -> u64 {
        self.zones
            .iter()
            .filter(|z| z.zone_type <= ZoneType::Normal)
            .map(|z| z.managed.saturating_sub(z.wmark(WatermarkKind::High)))
            .sum()
    }

    /// Σ managed over the lowmem zones: what `min_free_kbytes` is shared over.
    fn lowmem_pages(&self) -> u64 {
        self.zones
            .iter()
            .filter(|z| z.zone_type.is_lowmem())
            .map(|z| z.managed)
            .sum()
    }

    /// Refuse an explicit `min_free_kbytes` above the lowmem zones' managed memory: each
    /// zone's min watermark is its share `pages_min × managed / lowmem_pages`, above its
    /// managed pages exactly when `pages_min` (`min_free_kbytes / 4`) is above
    /// `lowmem_pages`. A machine without lowmem ignores the value.
    fn check_min_free_kbytes(&self, value: MinFreeKbytes) -> Result<(), SettingsError> {
        let lowmem_pages = self.lowmem_pages();
        match value {
            MinFreeKbytes::Explicit(kbytes) if lowmem_pages > 0 && kbytes >> 2 > lowmem_pages => {
                Err(SettingsError::MinFreeKbytesAboveMemory {
                    min_free_kbytes: kbytes,
                    lowmem_kbytes: lowmem_pages * 4,
                })
            }
            _ => Ok(()),
        }
    }

    /// `setup_per_zone_wmarks`: watermarks from `min_free_kbytes`, then the PCP limits that
    /// depend on them (`zone_pcp_update` with `cpu_online` 0).
    fn setup_per_zone_wmarks(&self, min_free_kbytes: u64, settings: &Settings) {
        self.min_free_kbytes.store(min_free_kbytes, Relaxed);
        let lowmem_pages = self.lowmem_pages();
        for zone in &self.zones {
            let marks = watermark::zone_watermarks(
                zone.zone_type,
                zone.managed,
                min_free_kbytes >> 2,
                lowmem_pages,
                settings.watermark_scale_factor as u64,
            );
            // LOCK ORDER: settings → zone lock. Linux writes the watermarks under the zone
            // lock; readers are lockless and may see a mix, as in Linux.
            let _locked = zone.lock();
            zone.watermarks.set(marks);
        }
        self.update_pcp_limits(settings, 0);
    }

    /// `zone_set_pageset_high_and_batch` for every zone. `cpu_online` is 1 while a CPU is
    /// coming online (it is not yet in its node's mask), else 0.
    pub(crate) fn update_pcp_limits(&self, settings: &Settings, cpu_online: u32) {
        let online = self.nr_online.load(Relaxed);
        for zone in &self.zones {
            let limits = pcp_sizing::pcp_limits(
                zone.managed,
                zone.wmark(WatermarkKind::Low),
                settings.percpu_pagelist_high_fraction,
                self.node_online_cpus(zone.node),
                cpu_online,
                online,
            );
            *zone.pcp_limits.lock() = limits;
            // A disabled zone keeps (0, 0, 1) until zone_pcp_enable applies the new limits
            // (Linux holds pcp_batch_high_lock across the disabled period instead).
            if zone.pcp_disabled.load(Relaxed) == 0 {
                self.set_pagesets(zone, limits);
            }
        }
    }

    /// `__zone_set_pageset_high_and_batch`: write the limits into every pageset.
    pub(crate) fn set_pagesets(&self, zone: &Zone<R>, limits: PcpLimits) {
        for pageset in zone.pagesets.iter() {
            // LOCK ORDER: settings → pcp lock (Linux: pcp_batch_high_lock → pcp->lock).
            let mut pcp = pageset.pcp.lock();
            pcp.update_limits(
                &self.policy.pcp,
                limits.batch,
                limits.high_min,
                limits.high_max,
            );
        }
    }

    /// `setup_per_zone_lowmem_reserve`.
    fn setup_per_zone_lowmem_reserve(&self, settings: &Settings) {
        for node_zones in self.zones.chunks(self.nr_zone_types) {
            let managed: Vec<u64> = node_zones.iter().map(|z| z.managed).collect();
            for (i, zone) in node_zones.iter().enumerate() {
                let reserve =
                    watermark::lowmem_reserve(i, &managed, settings.lowmem_reserve_ratio[i]);
                for (slot, value) in zone.lowmem_reserve.iter().zip(reserve) {
                    slot.store(value, Relaxed);
                }
            }
        }
    }

    /// `refresh_zone_stat_thresholds`.
    pub(crate) fn refresh_zone_stat_thresholds(&self) {
        let online = self.nr_online.load(Relaxed);
        for zone in &self.zones {
            let threshold = pcp_sizing::stat_threshold(zone.managed, online);
            zone.stat_threshold.store(threshold, Relaxed);
        }
    }

    /// `setup_pcp_cacheinfo`: set `FREE_HIGH_BATCH` on every pageset whose CPU's share of
    /// the LLC holds more than three batches. The share counts the online CPUs of the CPU's
    /// LLC group (CPUs are grouped `llc_shared_cpus` at a time). Linux runs this on CPU
    /// online and pre-down only, not when `batch` changes; so do we.
    pub(crate) fn setup_pcp_cacheinfo(&self) {
        let llc = self.topology.llc();
        let group = llc.llc_shared_cpus.max(1) as usize;
        // Online CPUs per LLC group, counted once per group: counting a CPU's group for
        // each CPU was quadratic when one LLC spans every CPU (20 s to build a
        // 100,000-CPU pool). Group by group, so nothing is allocated: CPU offline runs this.
        let nr_cpus = self.cpus.len();
        for first in (0..nr_cpus).step_by(group) {
            let members = first..(first + group).min(nr_cpus);
            let sharing = members
                .clone()
                .filter(|&cpu| self.is_cpu_online(cpu as CpuId))
                .count() as u32;
            let slice = pcp_sizing::data_cache_slice(llc.llc_bytes, sharing.max(1));
            for zone in &self.zones {
                for pageset in &zone.pagesets[members.clone()] {
                    let mut pcp = pageset.pcp.lock();
                    pcp.flags.free_high_batch = pcp_sizing::free_high_batch(slice, pcp.batch);
                }
            }
        }
    }

    /// Apply new settings, recomputing what each changed value feeds, as the sysctl
    /// handlers do. Invalid settings are refused and nothing changes.
    pub fn set_settings(&self, new: Settings) -> Result<(), SettingsError> {
        new.validate()?;
        self.check_min_free_kbytes(new.min_free_kbytes)?;
        let mut current = self.settings.lock();
        let old = core::mem::replace(&mut *current, new.clone());
        self.scale_max.store(new.pcp_batch_scale_max, Relaxed);
        for zone in &self.zones {
            zone.watermark_boost_factor
                .store(new.watermark_boost_factor, Relaxed);
        }
        let watermarks_changed = old.min_free_kbytes != new.min_free_kbytes
            || old.watermark_scale_factor != new.watermark_scale_factor
            || old.transparent_hugepage != new.transparent_hugepage;
        if watermarks_changed {
            match new.min_free_kbytes {
                MinFreeKbytes::Explicit(kbytes) => self.setup_per_zone_wmarks(kbytes, &new),
                MinFreeKbytes::Default => self.default_min_free_kbytes(&new),
            }
        } else if old.percpu_pagelist_high_fraction != new.percpu_pagelist_high_fraction {
            self.update_pcp_limits(&new, 0);
        }
        if old.lowmem_reserve_ratio != new.lowmem_reserve_ratio {
            self.setup_per_zone_lowmem_reserve(&new);
        }
        Ok(())
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        self.settings.lock().clone()
    }

    /// The `min_free_kbytes` in force (computed when the settings ask for the default).
    pub fn min_free_kbytes(&self) -> u64 {
        self.min_free_kbytes.load(Relaxed)
    }

    /// The machine.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Every zone, node by node, each node's zone types in order (empty zones included).
    pub fn zones(&self) -> &[Zone<R>] {
        &self.zones
    }

    /// A request's zonelist walk passed over `zone` and was served from a lower zone: what
    /// `get_page_from_freelist` leaves on a zone that failed its high-watermark test. Under
    /// a policy with `BELOW_HIGH` (patch 8 on, so v6.7 and linux-6.18) the zone is flagged,
    /// and every pageset of it shrinks on its next frees (`nr_pcp_high`) until a drain finds
    /// the zone above its high mark again. Other policies leave no mark.
    ///
    /// For a replay of a trace, whose blocks show where the kernel served each request:
    /// the kernel's zone may have failed the test where this allocator's, with another
    /// free-block layout, would pass it (a high-order request in a fragmented zone).
    /// Reached through `internals::zone_passed_over`: it sets a flag the watermark checks
    /// own.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn zone_passed_over(&self, zone: &Zone<R>) {
        if self.policy.pcp.below_high && zone.is_managed() {
            zone.set_flag(super::zone::ZoneFlags::BELOW_HIGH);
        }
    }

    /// The zone of `node` of type `zone_type`.
    pub fn zone(&self, node: NodeId, zone_type: ZoneType) -> Option<&Zone<R>> {
        if zone_type.index() >= self.nr_zone_types {
            return None;
        }
        self.zones
            .get(node as usize * self.nr_zone_types + zone_type.index())
    }

    /// The zone spanning `pfn` (`page_zone`).
    #[inline(always)]
    pub fn find_zone(&self, pfn: Pfn) -> Option<&Zone<R>> {
        match self.section_zones.zone(pfn) {
            Some(zone) => Some(&self.zones[zone]),
            None => self.find_zone_search(pfn),
        }
    }

    /// [`PageAllocator::find_zone`] for a pfn whose section the table does not settle: a
    /// binary search over the zones' spans.
    #[inline(never)]
    fn find_zone_search(&self, pfn: Pfn) -> Option<&Zone<R>> {
        search_zone(&self.pfn_ranges, pfn.0).map(|zone| &self.zones[zone])
    }

    /// kswapd wake-up requests of `node`.
    pub fn kswapd(&self, node: NodeId) -> Option<&KswapdState> {
        self.kswapd.get(node as usize)
    }
}

/// The zone of each section of 2^`shift` pfns that one zone spans entirely; sections that
/// a zone boundary or a gap cuts, and pfns past the last section, are left to the binary
/// search. Linux finds a page's zone in `page->flags`; our descriptor has no room for it.
#[derive(Debug)]
struct SectionZones {
    shift: u32,
    /// Zone index per section, or [`SectionZones::UNSETTLED`].
    zones: Vec<u16>,
}

impl SectionZones {
    /// The table's size bound: the section grows until the highest pfn fits in this many
    /// sections (4096 × 2 bytes; a 16 TiB machine gets 4 GiB sections).
    const MAX_SECTIONS: u64 = 4096;
    /// Ask the binary search.
    const UNSETTLED: u16 = u16::MAX;

    /// From the spanning zones' `(start, end, zone index)`, sorted by start.
    fn new(ranges: &[(u64, u64, usize)]) -> SectionZones {
        let end_pfn = ranges.iter().map(|&(_, end, _)| end).max().unwrap_or(0);
        // A pageblock at least: zone spans are pageblock-aligned on real machines.
        let mut shift = watermark::PAGEBLOCK_ORDER as u32;
        while end_pfn.div_ceil(1 << shift) > Self::MAX_SECTIONS {
            shift += 1;
        }
        let sections = end_pfn.div_ceil(1 << shift);
        let zones = (0..sections)
            .map(|section| {
                let (first, last) = (section << shift, ((section + 1) << shift) - 1);
                // The search answers every pfn of the section as it answers the first when
                // no span starts or ends inside it.
                let cut = ranges.iter().any(|&(start, end, _)| {
                    (first < start && start <= last) || (first < end && end <= last)
                });
                match search_zone(ranges, first) {
                    Some(zone) if !cut => u16::try_from(zone)
                        .ok()
                        .filter(|&zone| zone != Self::UNSETTLED)
                        .unwrap_or(Self::UNSETTLED),
                    _ => Self::UNSETTLED,
                }
            })
            .collect();
        SectionZones { shift, zones }
    }

    /// The index of the zone spanning `pfn`, if its section settles it.
    #[inline(always)]
    fn zone(&self, pfn: Pfn) -> Option<usize> {
        let section = usize::try_from(pfn.0 >> self.shift).ok()?;
        match self.zones.get(section) {
            Some(&zone) if zone != Self::UNSETTLED => Some(zone as usize),
            _ => None,
        }
    }
}

/// The zone of `pfn` by binary search over the spanning zones' `(start, end, zone index)`,
/// sorted by start: the last span starting at or below `pfn`, if it reaches `pfn`.
fn search_zone(ranges: &[(u64, u64, usize)], pfn: u64) -> Option<usize> {
    let i = ranges.partition_point(|&(start, _, _)| start <= pfn);
    let &(_, end, zone) = ranges.get(i.checked_sub(1)?)?;
    (pfn < end).then_some(zone)
}

/// `!page_group_by_mobility_disabled` (`build_all_zonelists`): false under one pageblock
/// per migratetype.
fn page_group_by_mobility<R: RawMutex>(zones: &[Zone<R>]) -> bool {
    let total: u64 = zones
        .iter()
        .filter(|z| z.zone_type <= ZoneType::Movable)
        .map(|z| z.managed)
        .sum();
    total >= PAGEBLOCK_PAGES * MIGRATE_TYPES as u64
}

/// `build_zonelists`: for each node, its own zones from the highest type down, then each
/// other node's in turn (nearest first; with no distance table, by id after this node).
fn build_zonelists<R: RawMutex>(
    zones: &[Zone<R>],
    nr_zone_types: usize,
    nr_nodes: usize,
) -> Vec<Vec<usize>> {
    (0..nr_nodes)
        .map(|node| {
            (0..nr_nodes)
                .map(|k| (node + k) % nr_nodes)
                .flat_map(|n| (0..nr_zone_types).rev().map(move |t| n * nr_zone_types + t))
                .filter(|&i| zones[i].is_managed())
                .collect()
        })
        .collect()
}

// The allocator is shared by every CPU: it must be usable from several threads at once.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<PageAllocator>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_bytes_count_the_mem_map_and_a_pageset_per_cpu_in_every_zone() {
        use crate::topology::{CacheInfo, ZoneSize};
        let topology = |pages, cpus| {
            let normal = ZoneSize::managed(0, ZoneType::Normal, pages);
            let llc = CacheInfo {
                llc_bytes: 32 << 20,
                llc_shared_cpus: 1,
            };
            Topology::x86_64(&[normal], alloc::vec![cpus], llc, false).expect("valid")
        };
        let base = PageAllocator::boot_bytes(&topology(1024, 1));
        // 1024 more descriptors of 16 bytes, and 2048 / 512 + 1 − (1024 / 512 + 1) = 2
        // more pageblocks.
        let pages = PageAllocator::boot_bytes(&topology(2048, 1));
        assert_eq!(pages - base, 1024 * 16 + 2);
        // One more CPU: a padded pageset slot in each of the four zone types.
        let cpus = PageAllocator::boot_bytes(&topology(1024, 2));
        let slot = size_of::<CachePadded<PagesetSlot>>() as u64;
        assert_eq!(cpus - base, 4 * slot);
        let huge = PageAllocator::boot_bytes(&topology(1024, u32::MAX));
        assert!(huge > 4 * slot * u64::from(u32::MAX));
    }

    /// The section table settles a pfn only with the binary search's answer: spans that
    /// start and end inside sections, a gap, overlapping spans and pfns past the end.
    #[test]
    fn section_table_agrees_with_the_search() {
        let layouts: [&[(u64, u64, usize)]; 3] = [
            &[(0, 4096, 0), (4096, 16384, 1)],
            &[(1, 700, 0), (700, 1500, 1), (2048, 5000, 3)],
            &[(0, 3000, 0), (1024, 2048, 2), (2500, 9000, 1)],
        ];
        for ranges in layouts {
            let table = SectionZones::new(ranges);
            let mut settled = 0;
            for pfn in 0..12_000 {
                let answer = search_zone(ranges, pfn);
                if let Some(zone) = table.zone(Pfn(pfn)) {
                    assert_eq!(Some(zone), answer, "{ranges:?} pfn {pfn}");
                    settled += 1;
                }
            }
            assert!(settled > 0, "{ranges:?}: the table settles some sections");
        }
    }
}
