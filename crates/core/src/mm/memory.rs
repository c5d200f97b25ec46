//! Address spaces over the page allocator: mappings, page tables, faults and unmapping.
//!
//! Linux counterpart (v6.7): `struct mm_struct` and `struct vm_area_struct`
//! (`include/linux/mm_types.h`), `do_anonymous_page` / `do_read_fault` / `do_swap_page`
//! (`mm/memory.c`), `filemap_add_folio` (`mm/filemap.c`), `zap_pte_range`, `anon_vma`
//! and `address_space.i_mmap` (`mm/rmap.c`); fork: `dup_mmap` (`kernel/fork.c`),
//! `anon_vma_fork` (`mm/rmap.c`), `copy_pte_range` (`mm/memory.c`), and the write fault
//! on a shared anonymous page, `do_wp_page` with `wp_can_reuse_anon_folio` and
//! `wp_page_copy`; `zap_pmd_range` and `madvise_dontneed_single_vma`. The PMD level of
//! each (THP faults, `copy_huge_pmd`, `do_huge_pmd_wp_page`, `zap_huge_pmd`, splitting a
//! PMD) is in [`super::huge_memory`].
//!
//! Fork as v6.7 does it for private anonymous mappings: the child's mapping gets an
//! `anon_vma` of its own whose parent is the parent mapping's and whose root is that one's
//! root, and an `anon_vma_chain` to it and to every anon_vma the parent mapping is chained
//! to (so an rmap walk from a folio of any of them finds the child's mapping); every
//! present PTE is copied with one more map count and reference on its page
//! (`page_try_dup_anon_rmap` per PTE, 6.7 does not batch fork) and write-protected in both
//! processes, the child's marked old; swap entries get one more user on their slot. Shared
//! file mappings copy no PTEs (`vma_needs_copy`: the child faults them in). A write to a
//! write-protected page reuses it when the folio's only reference is this PTE's (6.7's
//! rule, large folios included: no swap cache, KSM or pins here), else copies it into a
//! new order-0 folio, maps that and removes the old page's map and reference.
//!
//! Where we differ: `anon_vma_clone` never reuses an existing anon_vma (Linux reuses one
//! with no mappings and at most one child, to keep chains short); no swap cache, so each
//! process that faults a swap entry it shares after fork reads its own copy.
//!
//! [`Memory`] is the whole mapping layer of one machine: every address space, file and
//! anon_vma, the folio side table, swap and the statistics. Its methods take `&mut self`:
//! it is one lock around all of it (Linux uses the mmap lock, page-table locks and the
//! folio lock). The data of pages is not the core's business: a fault that needs data
//! read, and a reclaim that needs data written, call the caller's [`PageIo`].

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::folio::{CountOverflow, Folio};
use super::lru::LruList;
use super::memcg::{MappedStat, MemcgHierarchy, MemcgId, MemcgState, MemcgTree};
use super::pte::{Pte, PteState, SwapEntry};
use super::swap::SwapSpace;
use crate::page::{Order, PageFlags, Pfn};
use crate::page_alloc::{AllocError, Caller, FreeError, Gfp, MemMap, PageAllocator};
use crate::percpu::{AllocKind, MemoryBacking, PercpuAllocator, PercpuConfig};
use crate::policy::{MmPolicy, RmapRemoval};
use crate::sync::{RawMutex, RawSpinLock};

/// An address space (`mm_struct`), by index in [`Memory`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct MmId(pub u32);

/// A file, by index in [`Memory`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct FileId(pub u32);

/// An `anon_vma`, by index in [`Memory`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct AnonVmaId(pub u32);

/// A virtual page number (address >> 12).
pub type Vpn = u64;

/// What a mapping maps.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VmaKind {
    /// Private anonymous memory; faults allocate folios of `folio_order` where they fit
    /// (multi-size THP), else single pages.
    Anon {
        /// The anon_vma its folios point at.
        anon_vma: AnonVmaId,
        /// Order of the folios a fault allocates.
        folio_order: Order,
    },
    /// A shared file mapping from page `pgoff` of `file`.
    File {
        /// The file.
        file: FileId,
        /// The file page at the mapping's first virtual page.
        pgoff: u64,
    },
}

/// A mapping (`vm_area_struct`) and its page-table entries.
#[derive(Clone, Debug)]
pub struct Vma {
    /// First virtual page.
    pub start: Vpn,
    /// What it maps.
    pub kind: VmaKind,
    /// One entry per page of the mapping.
    pub ptes: Vec<Pte>,
    /// PMD entries, by the first virtual page of their aligned 512-page range: each maps
    /// a PMD-sized anonymous folio whole (`pmd_trans_huge`), and the range's PTEs are all
    /// empty while it does. Only private anonymous mappings have them.
    pub pmds: BTreeMap<Vpn, Pte>,
    /// Anonymous mappings: the anon_vmas whose folios this mapping may map, its own
    /// (`vma->anon_vma`) first, then those of the mappings it was forked from
    /// (`vma->anon_vma_chain`). Empty for a file mapping.
    pub anon_vma_chain: Vec<AnonVmaId>,
}

impl Vma {
    /// Pages in the mapping.
    pub fn pages(&self) -> u64 {
        self.ptes.len() as u64
    }

    /// One past the last virtual page.
    pub fn end(&self) -> Vpn {
        self.start + self.pages()
    }

    /// `linear_page_index`: the folio index that `vpn` maps (anonymous: the page number
    /// itself, as Linux's `vm_pgoff = vm_start >> PAGE_SHIFT`).
    pub fn index_of(&self, vpn: Vpn) -> u64 {
        match self.kind {
            VmaKind::Anon { .. } => vpn,
            VmaKind::File { pgoff, .. } => pgoff + (vpn - self.start),
        }
    }

    /// The PMD entry mapping `vpn`'s aligned range, if a PMD maps it
    /// (`pmd_trans_huge(*pmd)`): it names the folio's first page.
    pub fn pmd(&self, vpn: Vpn) -> Option<Pte> {
        self.pmds.get(&super::huge_memory::pmd_base(vpn)).copied()
    }

    /// The virtual page that maps folio index `index` here, if any (`vma_address`).
    pub fn vpn_of(&self, index: u64) -> Option<Vpn> {
        let vpn = match self.kind {
            VmaKind::Anon { .. } => index,
            VmaKind::File { pgoff, .. } => self.start + index.checked_sub(pgoff)?,
        };
        (self.start..self.end()).contains(&vpn).then_some(vpn)
    }
}

/// Per-address-space counters (`mm_struct.rss_stat`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct MmCounters {
    /// `MM_ANONPAGES`.
    pub anon_pages: u64,
    /// `MM_FILEPAGES`.
    pub file_pages: u64,
    /// `MM_SWAPENTS`.
    pub swap_entries: u64,
}

/// An address space.
#[derive(Clone, Debug)]
pub struct Mm {
    /// Mappings by first virtual page.
    pub vmas: BTreeMap<Vpn, Vma>,
    /// Resident and swapped page counts.
    pub counters: MmCounters,
    /// The cgroup its faults charge (the owner task's).
    pub memcg: MemcgId,
}

impl Mm {
    /// The mapping holding `vpn`.
    pub fn find_vma(&self, vpn: Vpn) -> Option<&Vma> {
        let (_, vma) = self.vmas.range(..=vpn).next_back()?;
        (vpn < vma.end()).then_some(vma)
    }

    pub(super) fn find_vma_mut(&mut self, vpn: Vpn) -> Option<&mut Vma> {
        let (_, vma) = self.vmas.range_mut(..=vpn).next_back()?;
        (vpn < vma.end()).then_some(vma)
    }

    /// The page-table entry of `vpn` (none outside every mapping, and none where a PMD
    /// maps the range: see [`Mm::pmd`]).
    pub fn pte(&self, vpn: Vpn) -> Pte {
        self.find_vma(vpn)
            .map_or(Pte::NONE, |vma| vma.ptes[(vpn - vma.start) as usize])
    }

    /// The PMD entry mapping `vpn`'s aligned 2 MiB range, if a PMD maps it.
    pub fn pmd(&self, vpn: Vpn) -> Option<Pte> {
        self.find_vma(vpn).and_then(|vma| vma.pmd(vpn))
    }
}

/// A file: its size, the order of its page-cache folios, its page cache and the mappings
/// of it (`address_space`).
#[derive(Clone, Debug)]
pub struct File {
    /// Size in pages.
    pub pages: u64,
    /// Order of the folios its page cache uses (large folios for the page cache).
    pub folio_order: Order,
    /// Page cache: folio head index → folio.
    pub cache: BTreeMap<u64, Folio>,
    /// `i_mmap`: the mappings of this file.
    pub i_mmap: Vec<(MmId, Vpn)>,
}

/// The reverse-map anchor of anonymous folios (`anon_vma`): the mappings they may be in.
#[derive(Clone, Debug)]
pub struct AnonVma {
    /// `anon_vma->root`: the anon_vma at the top of its fork tree (itself for a mapping
    /// that was not forked).
    pub root: AnonVmaId,
    /// `anon_vma->parent`: the anon_vma of the mapping this one's was forked from.
    pub parent: Option<AnonVmaId>,
    /// `anon_vma->rb_root`: one `anon_vma_chain` per mapping whose pages may be folios of
    /// this anon_vma (the mapping it was made for and every mapping forked from those),
    /// with the range of folio indexes it spans, which an rmap walk matches against the
    /// folio's (`anon_vma_interval_tree_foreach`).
    pub chains: Vec<AnonVmaChain>,
}

/// An `anon_vma_chain`: a mapping on an anon_vma's interval tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AnonVmaChain {
    /// The address space.
    pub mm: MmId,
    /// The mapping's first virtual page (its key in the address space).
    pub start: Vpn,
    /// One past its last virtual page (anonymous folio indexes are virtual pages).
    pub end: Vpn,
}

/// What a folio belongs to (`folio->mapping`, `folio->index`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mapping {
    /// Anonymous memory of this anon_vma, at `index` (its virtual page).
    Anon(AnonVmaId),
    /// The page cache of a file.
    File(FileId),
}

/// The side table entry of a mapped folio: what `struct page` holds beyond our 16 bytes
/// (`mapping`, `index`, `swap`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FolioInfo {
    /// The folio.
    pub folio: Folio,
    /// Whom it belongs to.
    pub mapping: Mapping,
    /// Index of its first page in the mapping.
    pub index: u64,
}

/// Machine-wide statistics (`/proc/vmstat` names).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct MmStats {
    /// `nr_anon_pages` (`NR_ANON_MAPPED`): anonymous pages a PTE or a PMD maps.
    pub anon_mapped: u64,
    /// `nr_mapped` (`NR_FILE_MAPPED`): file pages with a PTE map.
    pub file_mapped: u64,
    /// `nr_anon_transparent_hugepages` (`NR_ANON_THPS` in folios, as `/proc/vmstat` and
    /// `/proc/zoneinfo` print it): anonymous THPs that at least one PMD maps.
    pub anon_thps: u64,
    /// `pgfault`.
    pub faults: u64,
    /// `pswpin`: pages read from swap.
    pub swap_in: u64,
    /// `pswpout`: pages written to swap.
    pub swap_out: u64,
    /// Pages read from files by faults.
    pub file_reads: u64,
    /// File pages written back.
    pub file_writes: u64,
    /// Pages reclaimed (`pgsteal`).
    pub reclaimed: u64,
    /// Large folios split (`thp_split_page` and mTHP splits).
    pub folio_splits: u64,
    /// `thp_split_page`: PMD-sized folios split.
    pub thp_split_page: u64,
    /// `thp_deferred_split_page`: PMD-sized anonymous folios put on a deferred split
    /// queue.
    pub thp_deferred_split_page: u64,
    /// `thp_fault_alloc`: faults that allocated a THP to map with a PMD.
    pub thp_fault_alloc: u64,
    /// `thp_fault_fallback`: faults where the THP allocation failed and one page was
    /// mapped instead.
    pub thp_fault_fallback: u64,
    /// `pgreuse`: write faults on a write-protected page that kept the page
    /// (`wp_page_reuse`).
    pub pgreuse: u64,
    /// Write faults that copied a shared anonymous page (`wp_page_copy`; Linux counts
    /// them only in `pgfault`).
    pub wp_copies: u64,
    /// Updates of a statistic or a reference count made by rmap removal: what Yin 2023's
    /// batching saves (per page: map count, statistic, reference; batched: map counts,
    /// then one statistic and one reference update per run).
    pub rmap_counter_updates: u64,
    /// Counters read by `lruvec_lru_size`: what Wang 2019's fix saves (zone sizes: one per
    /// zone; per-CPU counters: one per CPU).
    pub lru_size_reads: u64,
    /// Calls of `lruvec_lru_size`.
    pub lru_size_calls: u64,
}

/// The data side of faults and reclaim: the runtime copies bytes, the simulator and tests
/// record what would be copied.
pub trait PageIo {
    /// Fill the `pages` frames from `pfn` with file `file`'s pages from `index`.
    fn read_file(&mut self, file: FileId, index: u64, pfn: Pfn, pages: u64);
    /// Write the `pages` frames from `pfn` to file `file` at page `index`.
    fn write_file(&mut self, file: FileId, index: u64, pfn: Pfn, pages: u64);
    /// Write the frame `pfn` to swap slot `entry`.
    fn write_swap(&mut self, entry: SwapEntry, pfn: Pfn);
    /// Fill the frame `pfn` from swap slot `entry`.
    fn read_swap(&mut self, entry: SwapEntry, pfn: Pfn);
    /// A newly allocated anonymous page must read as zeros.
    fn zero(&mut self, pfn: Pfn, pages: u64);
    /// Copy frame `from` into frame `to` (`copy_user_highpage`: the new page of a
    /// copy-on-write fault gets the shared page's data).
    fn copy(&mut self, from: Pfn, to: Pfn);
}

/// [`PageIo`] that moves no data: for simulations and tests, where only the page
/// tables, counts and lists matter, not the bytes in the frames.
///
/// ```
/// use mmkit_core::mm::{NoIo, PageIo};
/// use mmkit_core::Pfn;
///
/// let mut io = NoIo;
/// io.zero(Pfn(0), 1); // nothing to write: the frames are not memory here
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NoIo;

impl PageIo for NoIo {
    fn read_file(&mut self, _: FileId, _: u64, _: Pfn, _: u64) {}
    fn write_file(&mut self, _: FileId, _: u64, _: Pfn, _: u64) {}
    fn write_swap(&mut self, _: SwapEntry, _: Pfn) {}
    fn read_swap(&mut self, _: SwapEntry, _: Pfn) {}
    fn zero(&mut self, _: Pfn, _: u64) {}
    fn copy(&mut self, _: Pfn, _: Pfn) {}
}

/// Why a mapping-layer call failed. Nothing changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MmError {
    /// No such address space, file or mapping.
    NoSuchMm(MmId),
    /// No such file.
    NoSuchFile(FileId),
    /// The virtual page is in no mapping (`SIGSEGV`).
    BadAddress(Vpn),
    /// The new mapping overlaps one that exists, or is empty.
    Overlap(Vpn),
    /// The file mapping reaches past the end of the file (`SIGBUS`).
    BeyondFile(u64),
    /// Out of memory, even after reclaim (an error value, never a panic).
    OutOfMemory,
    /// Out of swap slots.
    OutOfSwap,
    /// A 16-bit count in a page descriptor would overflow.
    CountOverflow,
    /// No such (online) cgroup.
    NoSuchMemcg(MemcgId),
    /// Proactive reclaim gave up after repeated rounds without progress (`-EAGAIN`).
    ReclaimStalled,
    /// The cgroup still has children, address spaces or charges (`-EBUSY`).
    Busy(MemcgId),
    /// The allocator refused a free (accounting broken: a bug, reported not hidden).
    Free(FreeError),
    /// No mapped or cached folio starts at this folio's pfn with its order: a folio
    /// value the mapping layer did not hand out, or one it has since freed or split.
    NotAFolio(Folio),
}

impl core::error::Error for MmError {}

impl From<CountOverflow> for MmError {
    fn from(_: CountOverflow) -> MmError {
        MmError::CountOverflow
    }
}

impl From<AllocError> for MmError {
    fn from(_: AllocError) -> MmError {
        MmError::OutOfMemory
    }
}

impl core::fmt::Display for MmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MmError::NoSuchMm(id) => write!(f, "no address space {}", id.0),
            MmError::NoSuchFile(id) => write!(f, "no file {}", id.0),
            MmError::BadAddress(vpn) => write!(f, "virtual page {vpn:#x} is not mapped"),
            MmError::Overlap(vpn) => {
                write!(f, "the mapping at {vpn:#x} is empty or overlaps another")
            }
            MmError::BeyondFile(index) => write!(f, "file page {index} is past the end"),
            MmError::OutOfMemory => f.write_str("out of memory"),
            MmError::OutOfSwap => f.write_str("out of swap space"),
            MmError::CountOverflow => f.write_str("a page's 16-bit count would overflow"),
            MmError::NoSuchMemcg(id) => write!(f, "no cgroup {}", id.0),
            MmError::ReclaimStalled => f.write_str("reclaim made no progress (EAGAIN)"),
            MmError::Busy(id) => write!(f, "cgroup {} is in use (EBUSY)", id.0),
            MmError::Free(e) => write!(f, "the allocator refused a free: {e}"),
            MmError::NotAFolio(folio) => write!(
                f,
                "no mapped or cached order-{} folio starts at pfn {}",
                folio.order, folio.pfn
            ),
        }
    }
}

/// What a fault did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fault {
    /// The frame now mapped at the virtual page.
    pub pfn: Pfn,
    /// The folio it belongs to.
    pub folio: Folio,
    /// Whether the entry was already present (a minor access, nothing allocated).
    pub was_present: bool,
}

/// Where the mapping layer's page allocator lives: the allocator itself, or a runtime
/// that owns one (a page pool on real memory).
pub trait AllocatorSource<R: RawMutex = RawSpinLock>: Send + Sync {
    /// The allocator.
    fn page_allocator(&self) -> &PageAllocator<R>;
}

impl<R: RawMutex + Send + Sync> AllocatorSource<R> for PageAllocator<R> {
    fn page_allocator(&self) -> &PageAllocator<R> {
        self
    }
}

/// The mapping layer of a machine. See the module documentation.
///
/// ```
/// # use mmkit_core::mm::NoIo;
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::mm::{Memory, PteState};
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::policy::MmPolicy;
/// use mmkit_core::Order;
/// use std::sync::Arc;
///
/// let mut memory = Memory::new(Arc::new(allocator), MmPolicy::V6_7, 0);
/// let mm = memory.create_mm();
/// memory.mmap_anon(mm, 0x4000, 16, Order::ZERO)?; // 16 pages at virtual page 0x4000
/// let fault = memory.access(Caller::task(0), mm, 0x4005, true, &mut NoIo)?;
/// assert_eq!(memory.mm(mm)?.pte(0x4005).pfn(), Some(fault.folio.pfn));
/// memory.munmap(Caller::task(0), mm, 0x4000)?;
/// assert_eq!(memory.stats().anon_mapped, 0);
/// memory.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A caller reclaims through [`Memory::reclaim_folio`], [`Memory::memory_reclaim`] or
/// [`Memory::madvise_pageout`], which take the swap slots and the reference that
/// unmapping needs; unmapping a folio with swap entries of its own choosing does not
/// compile:
///
/// ```compile_fail,E0624
/// # use mmkit_core::mm::{Folio, Memory, SwapEntry};
/// # use mmkit_core::page_alloc::Caller;
/// fn unmap(memory: &mut Memory, folio: Folio) {
///     memory.try_to_unmap(Caller::task(0), folio, Some(&[SwapEntry(7)]));
/// }
/// ```
pub struct Memory<R: RawMutex = RawSpinLock> {
    pub(super) allocator: Arc<dyn AllocatorSource<R>>,
    pub(super) policy: MmPolicy,
    pub(super) mms: Vec<Option<Mm>>,
    pub(super) files: Vec<Option<File>>,
    pub(super) anon_vmas: Vec<AnonVma>,
    /// Mapped or cached folios by head pfn.
    pub(super) folios: BTreeMap<Pfn, FolioInfo>,
    pub(super) swap: SwapSpace,
    pub(super) stats: MmStats,
    /// Anonymous THPs waiting for the shrinker to split them.
    pub(super) deferred_split: super::huge_memory::DeferredSplit,
    pub(super) memcgs: MemcgTree,
    /// Whether file write-back completes later ([`Memory::end_writeback`]) instead of
    /// within the write call.
    pub(super) async_writeback: bool,
    /// Folios under write-back, and whether reclaim wants them (`PG_reclaim`: no bit is
    /// left in the descriptor for it, and few folios are ever under write-back).
    pub(super) writeback: BTreeMap<Pfn, bool>,
    /// The cgroup hierarchy the memory controller is on (`writeback_throttling_sane`).
    pub(super) memcg_hierarchy: MemcgHierarchy,
    /// The percpu allocator the cgroups' per-CPU statistics come from (one unit per CPU).
    pub(super) percpu: PercpuAllocator<MemoryBacking>,
    /// Per node: bit `z` set if its zone of type `z` has managed pages (`managed_zone`),
    /// which `lruvec_lru_size` checks for each zone above the one asked. Fixed at boot:
    /// memory hotplug is not modelled.
    pub(super) managed_zones: Vec<u8>,
}

impl Memory {
    /// A mapping layer over `allocator` with `swap_slots` pages of swap.
    pub fn new(allocator: Arc<dyn AllocatorSource>, policy: MmPolicy, swap_slots: u64) -> Memory {
        Memory::with_lock(allocator, policy, swap_slots)
    }
}

impl<R: RawMutex> Memory<R> {
    /// [`Memory::new`] over an allocator whose zone and pageset locks are the embedder's
    /// `R` (`PageAllocator::with_lock`).
    pub fn with_lock(
        allocator: Arc<dyn AllocatorSource<R>>,
        policy: MmPolicy,
        swap_slots: u64,
    ) -> Memory<R> {
        Memory {
            policy,
            mms: Vec::new(),
            files: Vec::new(),
            anon_vmas: Vec::new(),
            folios: BTreeMap::new(),
            swap: SwapSpace::new(swap_slots),
            stats: MmStats::default(),
            deferred_split: Default::default(),
            async_writeback: false,
            writeback: BTreeMap::new(),
            memcg_hierarchy: MemcgHierarchy::V2,
            managed_zones: managed_zones(allocator.page_allocator()),
            percpu: PercpuAllocator::new(
                PercpuConfig::x86_64(allocator.page_allocator().topology().nr_cpus() as usize),
                MemoryBacking::new(),
            )
            .expect("a valid percpu layout for the machine's CPUs"),
            memcgs: MemcgTree::new(
                allocator_nodes(allocator.page_allocator()),
                allocator.page_allocator().topology().nr_cpus(),
            ),
            allocator,
        }
    }

    /// The page allocator underneath.
    pub fn allocator(&self) -> &PageAllocator<R> {
        self.allocator.page_allocator()
    }

    /// The switches in force.
    pub fn policy(&self) -> MmPolicy {
        self.policy
    }

    /// Change the switches (between experiments).
    pub fn set_policy(&mut self, policy: MmPolicy) {
        self.policy = policy;
    }

    /// Statistics so far.
    pub fn stats(&self) -> MmStats {
        self.stats
    }

    /// Make file write-back asynchronous: a dirty file folio that reclaim writes stays
    /// under write-back until [`Memory::end_writeback`] (the congestion experiments need
    /// write-back in flight). Synchronous by default.
    pub fn set_async_writeback(&mut self, on: bool) {
        self.async_writeback = on;
    }

    /// Mount the memory controller on cgroup v1 or v2 (v2 by default). Under v1, cgroup
    /// reclaim does not mark lruvecs congested (`writeback_throttling_sane` is false).
    pub fn set_memcg_hierarchy(&mut self, hierarchy: MemcgHierarchy) {
        self.memcg_hierarchy = hierarchy;
    }

    /// The cgroup hierarchy the memory controller is on.
    pub fn memcg_hierarchy(&self) -> MemcgHierarchy {
        self.memcg_hierarchy
    }

    /// Folios under write-back.
    pub fn writeback_folios(&self) -> usize {
        self.writeback.len()
    }

    /// The swap device.
    pub fn swap(&self) -> &SwapSpace {
        &self.swap
    }

    /// An empty address space charged to the root cgroup, in the lowest id an exited one
    /// left free (a loop that forks and exits keeps a few ids, as Linux reuses pids).
    pub fn create_mm(&mut self) -> MmId {
        let mm = Mm {
            vmas: BTreeMap::new(),
            counters: MmCounters::default(),
            memcg: MemcgId::ROOT,
        };
        match self.mms.iter().position(Option::is_none) {
            Some(free) => {
                self.mms[free] = Some(mm);
                MmId(free as u32)
            }
            None => {
                self.mms.push(Some(mm));
                MmId(self.mms.len() as u32 - 1)
            }
        }
    }

    /// Move an address space's future charges to `memcg` (cgroup v2 moves no old charges).
    pub fn set_mm_memcg(&mut self, mm: MmId, memcg: MemcgId) -> Result<(), MmError> {
        self.memcgs.get(memcg).ok_or(MmError::NoSuchMemcg(memcg))?;
        self.mm_mut(mm)?.memcg = memcg;
        Ok(())
    }

    /// The cgroup tree.
    pub fn memcgs(&self) -> &MemcgTree {
        &self.memcgs
    }

    /// A new cgroup below `parent`. Its per-CPU statistics (per node: the LRU and
    /// mapped-page counters) are allocated from the percpu allocator, as
    /// `mem_cgroup_alloc` allocates `vmstats_percpu` and each node's
    /// `lruvec_stats_percpu`.
    pub fn create_memcg(&mut self, parent: MemcgId) -> Result<MemcgId, MmError> {
        self.memcgs
            .get(parent)
            .ok_or(MmError::NoSuchMemcg(parent))?;
        let nodes = self.allocator.page_allocator().topology().nr_nodes();
        let size = core::mem::size_of::<[i64; super::lru::NR_LRU_LISTS + 2]>();
        let mut areas = Vec::with_capacity(nodes);
        for _ in 0..nodes {
            match self.percpu.alloc(size, 8, AllocKind::Kernel) {
                Ok(ptr) => areas.push(ptr),
                Err(_) => {
                    for ptr in areas {
                        let _ = self.percpu.free(ptr);
                    }
                    return Err(MmError::OutOfMemory);
                }
            }
        }
        match self.memcgs.create(parent) {
            Some(id) => {
                self.memcgs.group_mut(id).percpu_areas = areas;
                Ok(id)
            }
            None => {
                for ptr in areas {
                    let _ = self.percpu.free(ptr);
                }
                Err(MmError::NoSuchMemcg(parent))
            }
        }
    }

    /// `rmdir` of a cgroup with no online children and no address spaces: it goes
    /// offline (`mem_cgroup_css_offline`: its charge stocks are drained). With nothing
    /// charged it is freed at once: its per-CPU statistics go back to the percpu
    /// allocator, whose balance work may then depopulate chunk pages (Gushchin/Zhou
    /// 2021). With pages still charged it stays, offline, as a zombie: the pages keep
    /// their charge and their place on its LRU lists (Linux does not move them to the
    /// parent), reclaim keeps visiting it, and it is freed when its last page is
    /// uncharged ([`MemcgState`]). Zombie children do not hold a removal up.
    pub fn remove_memcg(&mut self, memcg: MemcgId) -> Result<(), MmError> {
        let group = self.memcgs.get(memcg).ok_or(MmError::NoSuchMemcg(memcg))?;
        let in_use = memcg == MemcgId::ROOT
            || group.children.iter().any(|&c| self.memcgs.get(c).is_some())
            || self.mms.iter().flatten().any(|mm| mm.memcg == memcg);
        if in_use {
            return Err(MmError::Busy(memcg));
        }
        for cpu in 0..self.allocator.page_allocator().topology().nr_cpus() {
            self.memcgs.drain_stock(cpu);
        }
        self.memcgs.group_mut(memcg).state = MemcgState::Offline;
        self.free_empty_offline(memcg);
        Ok(())
    }

    /// Free `memcg` and then each offline ancestor that nothing pins any more (`css_put`
    /// of the last reference → `mem_cgroup_css_free`), nearest first: a cgroup is pinned
    /// by pages charged to it or below it, by swap slots recorded for it, and by
    /// children not yet freed.
    pub(super) fn free_empty_offline(&mut self, memcg: MemcgId) {
        let path: Vec<MemcgId> = self.memcgs.ancestors(memcg).collect();
        let mut freed = false;
        for g in path {
            let group = self.memcgs.group(g);
            let pinned = group.state != MemcgState::Offline
                || group.usage != 0
                || group.swap_records != 0
                || group
                    .children
                    .iter()
                    .any(|&c| self.memcgs.group(c).state != MemcgState::Freed);
            if pinned {
                break;
            }
            debug_assert!(
                group
                    .lruvecs
                    .iter()
                    .all(|v| LruList::ALL.iter().all(|&lru| v.pages(lru) == 0)),
                "an uncharged cgroup has no pages on its LRU lists"
            );
            let areas = core::mem::take(&mut self.memcgs.group_mut(g).percpu_areas);
            for ptr in areas {
                self.percpu
                    .free(ptr)
                    .expect("a cgroup's percpu area is freed once");
            }
            self.memcgs.group_mut(g).state = MemcgState::Freed;
            freed = true;
        }
        // The work item `free_percpu` schedules (`pcpu_balance_workfn`), run now.
        if freed && self.percpu.balance_pending() {
            self.percpu.balance();
        }
    }

    /// Release a swap slot (`swap_free`) and the cgroup reference its record held: a
    /// zombie pinned only by swapped-out pages goes with its last slot.
    pub(super) fn swap_free(&mut self, entry: SwapEntry) {
        if let Some(owner) = self.swap.free(entry) {
            let group = self.memcgs.group_mut(owner);
            group.swap_records -= 1;
            if group.state == MemcgState::Offline {
                self.free_empty_offline(owner);
            }
        }
    }

    /// The percpu allocator the cgroups' statistics come from (`Percpu:` in
    /// `/proc/meminfo` is its `meminfo_percpu_kb`).
    pub fn percpu(&self) -> &PercpuAllocator<MemoryBacking> {
        &self.percpu
    }

    /// The address space `id`.
    pub fn mm(&self, id: MmId) -> Result<&Mm, MmError> {
        self.mms
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(MmError::NoSuchMm(id))
    }

    pub(super) fn mm_mut(&mut self, id: MmId) -> Result<&mut Mm, MmError> {
        self.mms
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(MmError::NoSuchMm(id))
    }

    /// A file of `pages` pages whose page cache uses folios of `folio_order`.
    pub fn create_file(&mut self, pages: u64, folio_order: Order) -> FileId {
        self.files.push(Some(File {
            pages,
            folio_order,
            cache: BTreeMap::new(),
            i_mmap: Vec::new(),
        }));
        FileId(self.files.len() as u32 - 1)
    }

    /// The file `id`.
    pub fn file(&self, id: FileId) -> Result<&File, MmError> {
        self.files
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(MmError::NoSuchFile(id))
    }

    pub(super) fn file_mut(&mut self, id: FileId) -> Result<&mut File, MmError> {
        self.files
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(MmError::NoSuchFile(id))
    }

    /// The side-table entry of a mapped or cached folio.
    pub fn folio_info(&self, head: Pfn) -> Option<&FolioInfo> {
        self.folios.get(&head)
    }

    /// Whether `folio` is a mapped or cached folio as the side table holds it (head and
    /// order): the calls that take a [`Folio`] from their caller check it first, since a
    /// made-up value (a wrong order, a tail's pfn) would move counts of pages it does not
    /// own.
    pub(super) fn holds_folio(&self, folio: Folio) -> bool {
        self.folios
            .get(&folio.pfn)
            .is_some_and(|info| info.folio == folio)
    }

    /// Every mapped or cached folio.
    pub fn folios(&self) -> impl Iterator<Item = &FolioInfo> {
        self.folios.values()
    }

    pub(super) fn mem_map(&self, pfn: Pfn) -> &MemMap {
        self.allocator
            .page_allocator()
            .find_zone(pfn)
            .expect("a folio of the mapping layer lies in a zone")
            .mem_map()
    }

    fn check_range(&self, mm: MmId, start: Vpn, pages: u64) -> Result<(), MmError> {
        let space = self.mm(mm)?;
        let end = start.checked_add(pages).ok_or(MmError::Overlap(start))?;
        if pages == 0 || space.vmas.range(start..end).next().is_some() {
            return Err(MmError::Overlap(start));
        }
        if space.find_vma(start).is_some() {
            return Err(MmError::Overlap(start));
        }
        Ok(())
    }

    /// `mmap(MAP_PRIVATE | MAP_ANONYMOUS)` of `pages` pages at `start`, faulting in folios
    /// of `folio_order` where an aligned folio fits in the mapping.
    pub fn mmap_anon(
        &mut self,
        mm: MmId,
        start: Vpn,
        pages: u64,
        folio_order: Order,
    ) -> Result<(), MmError> {
        self.check_range(mm, start, pages)?;
        let anon_vma = self.anon_vma_alloc(None);
        self.anon_vmas[anon_vma.0 as usize]
            .chains
            .push(AnonVmaChain {
                mm,
                start,
                end: start + pages,
            });
        let vma = Vma {
            start,
            kind: VmaKind::Anon {
                anon_vma,
                folio_order,
            },
            ptes: alloc::vec![Pte::NONE; pages as usize],
            pmds: BTreeMap::new(),
            anon_vma_chain: alloc::vec![anon_vma],
        };
        self.mm_mut(mm)?.vmas.insert(start, vma);
        Ok(())
    }

    /// `mmap(MAP_SHARED)` of `pages` pages of `file` from page `pgoff`, at `start`.
    pub fn mmap_file(
        &mut self,
        mm: MmId,
        start: Vpn,
        pages: u64,
        file: FileId,
        pgoff: u64,
    ) -> Result<(), MmError> {
        self.check_range(mm, start, pages)?;
        let size = self.file(file)?.pages;
        if !pgoff.checked_add(pages).is_some_and(|end| end <= size) {
            return Err(MmError::BeyondFile(pgoff.saturating_add(pages)));
        }
        self.file_mut(file)?.i_mmap.push((mm, start));
        let vma = Vma {
            start,
            kind: VmaKind::File { file, pgoff },
            ptes: alloc::vec![Pte::NONE; pages as usize],
            pmds: BTreeMap::new(),
            anon_vma_chain: Vec::new(),
        };
        self.mm_mut(mm)?.vmas.insert(start, vma);
        Ok(())
    }

    /// An access to `vpn`: a fault if nothing is mapped there (anonymous: allocate and
    /// zero, a PMD-sized folio mapped by a PMD where it fits; file: find or read the
    /// page-cache folio; swap: read the page back) or if a `write` finds the page or its
    /// PMD write-protected by fork (reuse or copy it; a shared PMD is split first), then
    /// the hardware's accessed bit, and the dirty bit on a `write`, on the PTE or PMD.
    pub fn access(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        write: bool,
        io: &mut dyn PageIo,
    ) -> Result<Fault, MmError> {
        let vma = self.mm(mm)?.find_vma(vpn).ok_or(MmError::BadAddress(vpn))?;
        let Some(pmd) = vma.pmd(vpn) else {
            return self.handle_pte_fault(caller, mm, vpn, write, false, io);
        };
        if write && pmd.write_protected() {
            self.stats.faults += 1;
            if !self.do_huge_pmd_wp_page(mm, vpn)? {
                // `VM_FAULT_FALLBACK`: the PMD is split, and the same fault goes on at
                // the PTE level (copy-on-write of one page).
                return self.handle_pte_fault(caller, mm, vpn, write, true, io);
            }
        }
        self.touch_huge_pmd(mm, vpn, write)
    }

    /// The PTE level of [`Memory::access`] (`handle_pte_fault`); `counted`: the fault was
    /// already counted at the PMD level.
    fn handle_pte_fault(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        write: bool,
        counted: bool,
        io: &mut dyn PageIo,
    ) -> Result<Fault, MmError> {
        let vma = self.mm(mm)?.find_vma(vpn).ok_or(MmError::BadAddress(vpn))?;
        let kind = vma.kind;
        let pte = vma.ptes[(vpn - vma.start) as usize];
        let minor =
            matches!(pte.state(), PteState::Present { .. }) && !(write && pte.write_protected());
        if !minor && !counted {
            self.stats.faults += 1;
        }
        let fault = match pte.state() {
            PteState::Present { pfn, .. } if write && pte.write_protected() => {
                match self.do_wp_page(caller, mm, vpn, pfn, io)? {
                    Some(fault) => fault,
                    // Reclaim took the page while the copy was allocated: fault again on
                    // what the entry holds now (Linux's `!pte_same` retry).
                    None => return self.access(caller, mm, vpn, write, io),
                }
            }
            PteState::Present { pfn, .. } => {
                let folio = Folio::of_page(self.mem_map(pfn), pfn)
                    .expect("a present PTE maps an allocated folio");
                Fault {
                    pfn,
                    folio,
                    was_present: true,
                }
            }
            PteState::None => match kind {
                VmaKind::Anon {
                    anon_vma,
                    folio_order,
                } => self.do_anonymous_page(caller, mm, vpn, anon_vma, folio_order, io)?,
                VmaKind::File { file, .. } => self.do_read_fault(caller, mm, vpn, file, io)?,
            },
            PteState::Swap(entry) => self.do_swap_page(caller, mm, vpn, entry, io)?,
        };
        let vma = self.mm_mut(mm)?.find_vma_mut(vpn).expect("checked above");
        match vma.pmds.get_mut(&super::huge_memory::pmd_base(vpn)) {
            // `do_huge_pmd_anonymous_page` mapped the fault with a PMD.
            Some(pmd) => pmd.touch(write),
            None => vma.ptes[(vpn - vma.start) as usize].touch(write),
        }
        Ok(fault)
    }

    /// `do_wp_page` on a private anonymous page that fork write-protected: reuse it if
    /// this PTE holds the folio's only reference (`wp_can_reuse_anon_folio`, whose
    /// `folio_move_anon_rmap` moves the folio to this mapping's own anon_vma), else copy
    /// it into a new order-0 folio (`wp_page_copy`). `None`: direct reclaim for the copy
    /// unmapped the page, and the access must be retried.
    fn do_wp_page(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        pfn: Pfn,
        io: &mut dyn PageIo,
    ) -> Result<Option<Fault>, MmError> {
        let vma = self.mm(mm)?.find_vma(vpn).expect("checked by access");
        let VmaKind::Anon { anon_vma, .. } = vma.kind else {
            unreachable!("only fork write-protects, and only private anonymous entries");
        };
        let memcg = self.mm(mm)?.memcg;
        self.memcgs.group_mut(memcg).events.pgfault += 1;
        let folio = Folio::of_page(self.mem_map(pfn), pfn).expect("a present PTE maps a folio");
        // Every reference here is a PTE's (no swap cache, pins or LRU batches), so a count
        // of one means no other PTE maps any page of the folio: reusing it is safe, and
        // 6.7 reuses even the last mapped page of a large folio.
        if folio.refcount(self.mem_map(pfn)) == 1 {
            let info = self
                .folios
                .get_mut(&folio.pfn)
                .expect("a mapped folio is held");
            info.mapping = Mapping::Anon(anon_vma);
            let vma = self.mm_mut(mm)?.find_vma_mut(vpn).expect("checked");
            vma.ptes[(vpn - vma.start) as usize].mkwrite();
            self.stats.pgreuse += 1;
            return Ok(Some(Fault {
                pfn,
                folio,
                was_present: true,
            }));
        }
        let new = self.alloc_folio(caller, Order::ZERO, 0, memcg, true, io)?;
        let now = self.mm(mm)?.pte(vpn);
        if now.pfn() != Some(pfn) || !now.write_protected() {
            self.free_folio(caller, new)?;
            return Ok(None);
        }
        io.copy(pfn, new.pfn);
        self.folios.insert(
            new.pfn,
            FolioInfo {
                folio: new,
                mapping: Mapping::Anon(anon_vma),
                index: vpn,
            },
        );
        // The new page replaces the old one in the PTE: MM_ANONPAGES is unchanged, so
        // map_pages' increment is undone below.
        self.map_pages(caller, mm, vpn, new, new.pfn, 1, true)?;
        self.lru_add(caller, new);
        self.mm_mut(mm)?.counters.anon_pages -= 1;
        let unmapped = self.remove_rmap(caller, folio, pfn, 1, true);
        self.deferred_split_folio(folio, unmapped);
        self.count_rmap_updates(folio, 1, 1);
        self.folio_put(caller, folio, 1)?;
        self.stats.wp_copies += 1;
        Ok(Some(Fault {
            pfn: new.pfn,
            folio: new,
            was_present: false,
        }))
    }

    /// A new anon_vma below `parent` (its own root if none).
    fn anon_vma_alloc(&mut self, parent: Option<AnonVmaId>) -> AnonVmaId {
        let id = AnonVmaId(self.anon_vmas.len() as u32);
        let root = parent.map_or(id, |p| self.anon_vmas[p.0 as usize].root);
        self.anon_vmas.push(AnonVma {
            root,
            parent,
            chains: Vec::new(),
        });
        id
    }

    /// The anon_vma `id`.
    pub fn anon_vma(&self, id: AnonVmaId) -> Option<&AnonVma> {
        self.anon_vmas.get(id.0 as usize)
    }

    /// `fork`'s `dup_mmap`: a new address space in `parent`'s cgroup with a copy of each
    /// of its mappings (see the module documentation). If a 16-bit count would overflow
    /// the child is torn down again and the error returned; the parent's entries that were
    /// write-protected stay so (their next write reuses the page), as after Linux's failed
    /// fork.
    pub fn fork(&mut self, caller: Caller, parent: MmId) -> Result<MmId, MmError> {
        let memcg = self.mm(parent)?.memcg;
        let starts: Vec<Vpn> = self.mm(parent)?.vmas.keys().copied().collect();
        let child = self.create_mm();
        self.mm_mut(child)?.memcg = memcg;
        for start in starts {
            if let Err(e) = self.dup_vma(parent, child, start) {
                self.exit_mm(caller, child)?;
                return Err(e);
            }
        }
        Ok(child)
    }

    /// Copy the mapping at `start` of `parent` into `child`: `anon_vma_fork` and
    /// `copy_page_range`.
    fn dup_vma(&mut self, parent: MmId, child: MmId, start: Vpn) -> Result<(), MmError> {
        let vma = &self.mm(parent)?.vmas[&start];
        let (kind, end, pages) = (vma.kind, vma.end(), vma.pages());
        let VmaKind::Anon { anon_vma, .. } = kind else {
            let VmaKind::File { file, .. } = kind else {
                unreachable!()
            };
            self.file_mut(file)?.i_mmap.push((child, start));
            self.mm_mut(child)?.vmas.insert(
                start,
                Vma {
                    start,
                    kind,
                    ptes: alloc::vec![Pte::NONE; pages as usize],
                    pmds: BTreeMap::new(),
                    anon_vma_chain: Vec::new(),
                },
            );
            return Ok(());
        };
        let own = self.anon_vma_alloc(Some(anon_vma));
        let mut anon_vma_chain = alloc::vec![own];
        anon_vma_chain.extend_from_slice(&self.mm(parent)?.vmas[&start].anon_vma_chain);
        for &a in &anon_vma_chain {
            self.anon_vmas[a.0 as usize].chains.push(AnonVmaChain {
                mm: child,
                start,
                end,
            });
        }
        let kind = match kind {
            VmaKind::Anon { folio_order, .. } => VmaKind::Anon {
                anon_vma: own,
                folio_order,
            },
            file => file,
        };
        let mut parent_ptes = core::mem::take(
            &mut self
                .mm_mut(parent)?
                .vmas
                .get_mut(&start)
                .expect("listed")
                .ptes,
        );
        let mut parent_pmds = core::mem::take(
            &mut self
                .mm_mut(parent)?
                .vmas
                .get_mut(&start)
                .expect("listed")
                .pmds,
        );
        let mut child_ptes = alloc::vec![Pte::NONE; pages as usize];
        let mut child_pmds = BTreeMap::new();
        let (huge, mut failed) = self.copy_huge_pmds(&mut parent_pmds, &mut child_pmds);
        let (mut present, mut swapped) = (huge, 0);
        if failed.is_none() {
            (present, swapped, failed) = self.copy_ptes(&mut parent_ptes, &mut child_ptes);
            present += huge;
        }
        let vma = self.mm_mut(parent)?.vmas.get_mut(&start).expect("listed");
        vma.ptes = parent_ptes;
        vma.pmds = parent_pmds;
        let space = self.mm_mut(child)?;
        space.vmas.insert(
            start,
            Vma {
                start,
                kind,
                ptes: child_ptes,
                pmds: child_pmds,
                anon_vma_chain,
            },
        );
        space.counters.anon_pages += present;
        space.counters.swap_entries += swapped;
        failed.map_or(Ok(()), Err)
    }

    /// `copy_pte_range` of a private anonymous mapping: each present entry gives its page
    /// one more reference and map count and is write-protected in both (the child's old),
    /// each swap entry gives its slot one more user. Returns the present and swap entries
    /// copied, and the error if it stopped at a count that would overflow (the entries
    /// copied so far are in `child`).
    fn copy_ptes(&mut self, parent: &mut [Pte], child: &mut [Pte]) -> (u64, u64, Option<MmError>) {
        let (mut present, mut swapped) = (0, 0);
        for (from, to) in parent.iter_mut().zip(child.iter_mut()) {
            match from.state() {
                PteState::None => continue,
                PteState::Swap(entry) => {
                    self.swap.duplicate(entry);
                    swapped += 1;
                }
                PteState::Present { pfn, .. } => {
                    let mem_map = self.mem_map(pfn);
                    let folio = Folio::of_page(mem_map, pfn).expect("a present PTE maps a folio");
                    if let Err(e) = folio.ref_add(mem_map, 1) {
                        return (present, swapped, Some(e.into()));
                    }
                    match folio.add_rmap_pte(mem_map, pfn) {
                        Ok(first) => debug_assert!(!first, "the parent maps the page"),
                        Err(e) => {
                            folio.ref_sub(mem_map, 1);
                            return (present, swapped, Some(e.into()));
                        }
                    }
                    from.wrprotect();
                    present += 1;
                }
            }
            *to = match from.state() {
                PteState::Present { .. } => from.mkold(),
                _ => *from,
            };
        }
        (present, swapped, None)
    }

    /// The process exits: every mapping is unmapped (`exit_mmap`) and the address space
    /// goes.
    pub fn exit_mm(&mut self, caller: Caller, mm: MmId) -> Result<(), MmError> {
        let starts: Vec<Vpn> = self.mm(mm)?.vmas.keys().copied().collect();
        for start in starts {
            self.munmap(caller, mm, start)?;
        }
        self.mms[mm.0 as usize] = None;
        Ok(())
    }

    /// Allocate a folio of `order` for user data with `refs` references and charge it
    /// to `memcg`: direct reclaim and retries for single pages when the allocator is out
    /// of memory (a large folio fails at once, and the caller falls back to one page);
    /// the folio is freed again if the charge fails.
    fn alloc_folio(
        &mut self,
        caller: Caller,
        order: Order,
        refs: u16,
        memcg: MemcgId,
        anon: bool,
        io: &mut dyn PageIo,
    ) -> Result<Folio, MmError> {
        let node = self
            .allocator
            .page_allocator()
            .topology()
            .cpu_node(caller.cpu)
            .ok_or(MmError::OutOfMemory)?;
        let mut retries = super::vmscan::MAX_RECLAIM_RETRIES;
        let pfn = loop {
            match self
                .allocator
                .page_allocator()
                .alloc_pages(caller, Gfp::HIGHUSER_MOVABLE, order)
            {
                Ok(pfn) => break pfn,
                Err(_) if order != Order::ZERO || retries == 0 => return Err(MmError::OutOfMemory),
                Err(_) => {
                    retries -= 1;
                    self.direct_reclaim(caller, node, io)?;
                }
            }
        };
        let folio = Folio { pfn, order };
        folio.init(self.mem_map(pfn), refs);
        if let Err(e) = self.try_charge(caller, memcg, folio.nr_pages(), io) {
            folio.clear(self.mem_map(pfn));
            self.allocator
                .page_allocator()
                .free_pages(caller, pfn, order)
                .map_err(MmError::Free)?;
            return Err(e);
        }
        let head = folio.head(self.mem_map(pfn));
        head.set_memcg_id(memcg.0);
        let mut flags = head.flags();
        flags.set(PageFlags::SWAPBACKED, anon);
        head.set_flags(flags);
        let group = self.memcgs.group_mut(memcg);
        if anon {
            group.anon += folio.nr_pages();
        } else {
            group.file += folio.nr_pages();
        }
        Ok(folio)
    }

    /// A large folio if one can be had, else one page.
    #[expect(clippy::too_many_arguments, reason = "alloc_folio's plus the fallback")]
    fn alloc_folio_or_page(
        &mut self,
        caller: Caller,
        order: Order,
        refs: u16,
        refs_page: u16,
        memcg: MemcgId,
        anon: bool,
        io: &mut dyn PageIo,
    ) -> Result<Folio, MmError> {
        if order != Order::ZERO {
            if let Ok(folio) = self.alloc_folio(caller, order, refs, memcg, anon, io) {
                return Ok(folio);
            }
        }
        self.alloc_folio(caller, Order::ZERO, refs_page, memcg, anon, io)
    }

    /// Map `nr` pages of `folio` from `first` at `vpn..`: PTEs, map counts, statistics,
    /// one reference per PTE.
    #[expect(
        clippy::too_many_arguments,
        reason = "Linux's set_pte_range plus the CPU"
    )]
    fn map_pages(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        folio: Folio,
        first: Pfn,
        nr: u64,
        anon: bool,
    ) -> Result<(), MmError> {
        let mem_map = self.mem_map(folio.pfn);
        let mut newly = 0;
        for i in 0..nr {
            newly += u64::from(folio.add_rmap_pte(mem_map, first.add(i))?);
        }
        folio.ref_add(mem_map, nr as u16)?;
        if newly != 0 {
            self.mod_mapped_state(caller, folio, anon, newly as i64);
        }
        let space = self.mm_mut(mm)?;
        if anon {
            space.counters.anon_pages += nr;
        } else {
            space.counters.file_pages += nr;
        }
        let vma = space
            .find_vma_mut(vpn)
            .expect("mapping checked by the caller");
        for i in 0..nr {
            vma.ptes[(vpn + i - vma.start) as usize] = Pte::present(first.add(i), false, false);
        }
        Ok(())
    }

    fn do_anonymous_page(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        anon_vma: AnonVmaId,
        folio_order: Order,
        io: &mut dyn PageIo,
    ) -> Result<Fault, MmError> {
        // A large folio only where the aligned range lies inside the mapping and maps
        // nothing yet (`alloc_anon_folio`'s suitable orders); else one page. A PMD-sized
        // order is `do_huge_pmd_anonymous_page`'s, which needs the PMD empty: here, no PTE
        // of the range set (Linux keeps a page table that `MADV_DONTNEED` emptied until
        // `munmap`, so its next fault there maps one page).
        let vma = self.mm(mm)?.find_vma(vpn).expect("checked by access");
        let nr = folio_order.pages();
        let base = vpn & !(nr - 1);
        let fits = base >= vma.start
            && base + nr <= vma.end()
            && (base..base + nr).all(|v| vma.ptes[(v - vma.start) as usize] == Pte::NONE);
        let (order, base) = if fits {
            (folio_order, base)
        } else {
            (Order::ZERO, vpn)
        };
        let memcg = self.mm(mm)?.memcg;
        let folio = self.alloc_folio_or_page(caller, order, 0, 0, memcg, true, io)?;
        if order.get() == super::huge_memory::HPAGE_PMD_ORDER {
            if folio.order == order {
                self.stats.thp_fault_alloc += 1;
            } else {
                self.stats.thp_fault_fallback += 1;
            }
        }
        let base = if folio.order == order { base } else { vpn };
        io.zero(folio.pfn, folio.nr_pages());
        self.folios.insert(
            folio.pfn,
            FolioInfo {
                folio,
                mapping: Mapping::Anon(anon_vma),
                index: base,
            },
        );
        self.memcgs.group_mut(memcg).events.pgfault += 1;
        if folio.order.get() == super::huge_memory::HPAGE_PMD_ORDER {
            // `do_huge_pmd_anonymous_page`: one PMD maps the whole folio (a larger folio
            // spans several PMD ranges and is mapped by PTEs).
            self.map_huge_pmd(caller, mm, base, folio)?;
        } else {
            self.map_pages(caller, mm, base, folio, folio.pfn, folio.nr_pages(), true)?;
        }
        self.lru_add(caller, folio);
        Ok(Fault {
            pfn: folio.pfn.add(vpn - base),
            folio,
            was_present: false,
        })
    }

    fn do_read_fault(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        file: FileId,
        io: &mut dyn PageIo,
    ) -> Result<Fault, MmError> {
        let index = self
            .mm(mm)?
            .find_vma(vpn)
            .expect("checked by access")
            .index_of(vpn);
        let folio = match self.find_cached(file, index)? {
            Some(folio) => folio,
            None => {
                let memcg = self.mm(mm)?.memcg;
                self.memcgs.group_mut(memcg).events.pgfault += 1;
                self.read_into_cache(caller, memcg, file, index, io)?
            }
        };
        let head_index = self.folios[&folio.pfn].index;
        let pfn = folio.pfn.add(index - head_index);
        // No fault-around: one PTE per fault.
        self.map_pages(caller, mm, vpn, folio, pfn, 1, false)?;
        Ok(Fault {
            pfn,
            folio,
            was_present: false,
        })
    }

    /// The page-cache folio holding `index` of `file`.
    pub fn find_cached(&self, file: FileId, index: u64) -> Result<Option<Folio>, MmError> {
        let f = self.file(file)?;
        Ok(f.cache
            .range(..=index)
            .next_back()
            .filter(|(head, folio)| index < *head + folio.nr_pages())
            .map(|(_, folio)| *folio))
    }

    /// Allocate a page-cache folio for `index` (aligned to the file's folio order, or one
    /// page where a large folio would run past the end or no large block is free), read
    /// it, and add it to the cache holding one reference per page (`filemap_add_folio`).
    fn read_into_cache(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        file: FileId,
        index: u64,
        io: &mut dyn PageIo,
    ) -> Result<Folio, MmError> {
        let f = self.file(file)?;
        if index >= f.pages {
            return Err(MmError::BeyondFile(index));
        }
        let nr = f.folio_order.pages();
        let base = index & !(nr - 1);
        let fits = base + nr <= f.pages
            && f.cache.range(base..base + nr).next().is_none()
            && f.cache
                .range(..base)
                .next_back()
                .map_or(true, |(h, folio)| h + folio.nr_pages() <= base);
        let order = if fits { f.folio_order } else { Order::ZERO };
        let refs = order.pages() as u16;
        let folio = self.alloc_folio_or_page(caller, order, refs, 1, memcg, false, io)?;
        let base = if folio.order == Order::ZERO {
            index
        } else {
            base
        };
        io.read_file(file, base, folio.pfn, folio.nr_pages());
        self.stats.file_reads += folio.nr_pages();
        self.file_mut(file)?.cache.insert(base, folio);
        self.folios.insert(
            folio.pfn,
            FolioInfo {
                folio,
                mapping: Mapping::File(file),
                index: base,
            },
        );
        self.lru_add(caller, folio);
        Ok(folio)
    }

    fn do_swap_page(
        &mut self,
        caller: Caller,
        mm: MmId,
        vpn: Vpn,
        entry: SwapEntry,
        io: &mut dyn PageIo,
    ) -> Result<Fault, MmError> {
        let VmaKind::Anon { anon_vma, .. } = self.mm(mm)?.find_vma(vpn).expect("checked").kind
        else {
            unreachable!("only anonymous mappings hold swap entries");
        };
        // Linux 6.7 swaps in single pages.
        let memcg = self.mm(mm)?.memcg;
        let folio = self.alloc_folio(caller, Order::ZERO, 0, memcg, true, io)?;
        self.memcgs.group_mut(memcg).events.pgfault += 1;
        io.read_swap(entry, folio.pfn);
        self.stats.swap_in += 1;
        self.swap_free(entry);
        self.folios.insert(
            folio.pfn,
            FolioInfo {
                folio,
                mapping: Mapping::Anon(anon_vma),
                index: vpn,
            },
        );
        let head = self.mem_map(folio.pfn).page(folio.pfn);
        // Read back from swap and freed from it: dirty with respect to any backing.
        head.set_flags(head.flags() | PageFlags::DIRTY);
        self.mm_mut(mm)?.counters.swap_entries -= 1;
        self.map_pages(caller, mm, vpn, folio, folio.pfn, 1, true)?;
        self.lru_add(caller, folio);
        Ok(Fault {
            pfn: folio.pfn,
            folio,
            was_present: false,
        })
    }

    /// `munmap` of the whole mapping at `start`: every PMD and PTE is zapped (map counts,
    /// statistics and references dropped, folios freed when unreferenced, swap slots
    /// released) and the mapping unlinked from its file's `i_mmap` or from every anon_vma
    /// it is chained to (`unlink_anon_vmas`). The rmap is removed per page (6.7's
    /// `zap_pte_range`) or, under [`RmapRemoval::Batched`], once per run of consecutive
    /// pages of one folio (`zap_present_ptes` with `folio_remove_rmap_ptes`, 6.9); a PMD
    /// is one removal (`zap_huge_pmd`).
    pub fn munmap(&mut self, caller: Caller, mm: MmId, start: Vpn) -> Result<(), MmError> {
        let mut vma = self
            .mm_mut(mm)?
            .vmas
            .remove(&start)
            .ok_or(MmError::BadAddress(start))?;
        let end = vma.end();
        self.zap_range(caller, mm, &mut vma, start, end)?;
        match vma.kind {
            VmaKind::Anon { .. } => {
                for a in &vma.anon_vma_chain {
                    self.anon_vmas[a.0 as usize]
                        .chains
                        .retain(|c| (c.mm, c.start) != (mm, start));
                }
            }
            VmaKind::File { file, .. } => {
                self.file_mut(file)?.i_mmap.retain(|&v| v != (mm, start));
            }
        }
        Ok(())
    }

    /// `madvise(MADV_DONTNEED)` of `pages` pages from `start`, which one mapping must
    /// hold: zap them and keep the mapping (`zap_page_range_single`). A PMD the range
    /// covers only in part is split first (`__split_huge_pmd`), and zapping part of its
    /// folio then queues it for a deferred split. Nothing changes on an error.
    pub fn madvise_dontneed(
        &mut self,
        caller: Caller,
        mm: MmId,
        start: Vpn,
        pages: u64,
    ) -> Result<(), MmError> {
        let vma = self
            .mm(mm)?
            .find_vma(start)
            .ok_or(MmError::BadAddress(start))?;
        let end = start.checked_add(pages).ok_or(MmError::BadAddress(start))?;
        if end > vma.end() {
            return Err(MmError::BadAddress(vma.end()));
        }
        if pages == 0 {
            return Ok(());
        }
        let key = vma.start;
        self.with_vma(mm, key, |this, vma| {
            this.zap_range(caller, mm, vma, start, end)
        })
    }

    /// Run `f` on the mapping at `key` of `mm`, taken out of the address space meanwhile
    /// so that `f` may change both it and the rest of the layer.
    pub(super) fn with_vma<T>(
        &mut self,
        mm: MmId,
        key: Vpn,
        f: impl FnOnce(&mut Memory<R>, &mut Vma) -> Result<T, MmError>,
    ) -> Result<T, MmError> {
        let mut vma = self
            .mm_mut(mm)?
            .vmas
            .remove(&key)
            .ok_or(MmError::BadAddress(key))?;
        let result = f(self, &mut vma);
        self.mm_mut(mm)?.vmas.insert(key, vma);
        result
    }

    /// `unmap_page_range` of `start..end` of `vma` (`mm`'s): PMDs the range covers are
    /// zapped whole, those it covers in part are split (`zap_pmd_range`), then the PTEs.
    fn zap_range(
        &mut self,
        caller: Caller,
        mm: MmId,
        vma: &mut Vma,
        start: Vpn,
        end: Vpn,
    ) -> Result<(), MmError> {
        use super::huge_memory::{pmd_base, HPAGE_PMD_NR};
        let bases: Vec<Vpn> = vma
            .pmds
            .range(pmd_base(start)..end)
            .map(|(&b, _)| b)
            .collect();
        for base in bases {
            if start <= base && base + HPAGE_PMD_NR <= end {
                self.zap_huge_pmd(caller, mm, vma, base)?;
            } else {
                self.split_huge_pmd(vma, base);
            }
        }
        let anon = matches!(vma.kind, VmaKind::Anon { .. });
        let batched = self.policy.rmap_removal == RmapRemoval::Batched;
        let mut run: Option<(Folio, Pfn, u64)> = None;
        let slots = (start - vma.start) as usize..(end - vma.start) as usize;
        for slot in slots {
            let pte = core::mem::replace(&mut vma.ptes[slot], Pte::NONE);
            match pte.state() {
                PteState::None => {}
                PteState::Swap(entry) => {
                    self.swap_free(entry);
                    self.mm_mut(mm)?.counters.swap_entries -= 1;
                }
                PteState::Present { pfn, dirty, .. } => {
                    let folio = Folio::of_page(self.mem_map(pfn), pfn)
                        .expect("a present PTE maps an allocated folio");
                    if dirty {
                        let head = folio.head(self.mem_map(pfn));
                        head.set_flags(head.flags() | PageFlags::DIRTY);
                    }
                    let counters = &mut self.mm_mut(mm)?.counters;
                    if anon {
                        counters.anon_pages -= 1;
                    } else {
                        counters.file_pages -= 1;
                    }
                    run = match run {
                        Some((f, first, nr)) if batched && f == folio && first.add(nr) == pfn => {
                            Some((f, first, nr + 1))
                        }
                        Some((f, first, nr)) => {
                            self.zap_run(caller, f, first, nr, anon)?;
                            Some((folio, pfn, 1))
                        }
                        None => Some((folio, pfn, 1)),
                    };
                }
            }
        }
        if let Some((folio, first, nr)) = run {
            self.zap_run(caller, folio, first, nr, anon)?;
        }
        Ok(())
    }

    /// The rmap and reference half of zapping `nr` PTEs that mapped consecutive pages of
    /// `folio` from `first`.
    fn zap_run(
        &mut self,
        caller: Caller,
        folio: Folio,
        first: Pfn,
        nr: u64,
        anon: bool,
    ) -> Result<(), MmError> {
        let unmapped = self.remove_rmap(caller, folio, first, nr, anon);
        if anon {
            self.deferred_split_folio(folio, unmapped);
        }
        self.count_rmap_updates(folio, nr, 1);
        self.folio_put(caller, folio, nr)
    }

    /// Remove `nr` PTE maps from `folio`'s pages from `first` and update the mapped
    /// statistic: the rmap half of unmapping, shared by zap and `try_to_unmap`. Returns
    /// how many pages no PTE maps any more.
    pub(super) fn remove_rmap(
        &mut self,
        caller: Caller,
        folio: Folio,
        first: Pfn,
        nr: u64,
        anon: bool,
    ) -> u64 {
        let unmapped = folio.remove_rmap_ptes(self.mem_map(folio.pfn), first, nr);
        if unmapped != 0 {
            self.mod_mapped_state(caller, folio, anon, -(unmapped as i64));
        }
        unmapped
    }

    /// `__lruvec_stat_mod_folio(folio, NR_ANON_MAPPED or NR_FILE_MAPPED, delta)`: the
    /// folio's cgroup's per-CPU counter and the node's per-CPU counter for this CPU, and
    /// the machine-wide total. This is the per-page cost Yin 2023's batching removes
    /// (`__mod_lruvec_page_state` was 9.8 % of cycles in its profile).
    pub(super) fn mod_mapped_state(
        &mut self,
        caller: Caller,
        folio: Folio,
        anon: bool,
        delta: i64,
    ) {
        let allocator = &self.allocator;
        let allocator = allocator.page_allocator();
        let zone = allocator.find_zone(folio.pfn).expect("in a zone");
        let memcg = MemcgId(folio.head(zone.mem_map()).memcg_id());
        let item = if anon {
            MappedStat::Anon
        } else {
            MappedStat::File
        };
        self.memcgs
            .mod_mapped(memcg, zone.node() as usize, caller.cpu, item, delta);
        let total = if anon {
            &mut self.stats.anon_mapped
        } else {
            &mut self.stats.file_mapped
        };
        *total = total
            .checked_add_signed(delta)
            .expect("mapped pages go negative");
    }

    /// Drop `refs` references; free the folio when none are left (`folio_put_refs`).
    pub(super) fn folio_put(
        &mut self,
        caller: Caller,
        folio: Folio,
        refs: u64,
    ) -> Result<(), MmError> {
        let left = folio.ref_sub(self.mem_map(folio.pfn), refs as u16);
        if left == 0 {
            self.free_folio(caller, folio)?;
        }
        Ok(())
    }

    /// Give an unreferenced folio back to the allocator.
    pub(super) fn free_folio(&mut self, caller: Caller, folio: Folio) -> Result<(), MmError> {
        self.folios.remove(&folio.pfn);
        // `folio_undo_large_rmappable`: off the deferred split queue.
        self.deferred_split.remove(folio.pfn);
        let head = folio.head(self.mem_map(folio.pfn));
        if head.flags().contains(PageFlags::LRU) {
            self.lru_del(caller, folio);
        }
        let allocator = &self.allocator;
        let allocator = allocator.page_allocator();
        let head = folio.head(allocator.find_zone(folio.pfn).expect("zone").mem_map());
        let memcg = MemcgId(head.memcg_id());
        if memcg.0 != 0 {
            self.memcgs.counter_uncharge(memcg, folio.nr_pages());
            let group = self.memcgs.group_mut(memcg);
            if head.flags().contains(PageFlags::SWAPBACKED) {
                group.anon -= folio.nr_pages();
            } else {
                group.file -= folio.nr_pages();
            }
            head.set_memcg_id(0);
        }
        folio.clear(self.mem_map(folio.pfn));
        self.allocator
            .page_allocator()
            .free_pages(caller, folio.pfn, folio.order)
            .map_err(MmError::Free)?;
        if memcg.0 != 0 && self.memcgs.group(memcg).state == MemcgState::Offline {
            // A zombie's last page: the cgroup (and any zombie ancestor it kept) goes.
            self.free_empty_offline(memcg);
        }
        Ok(())
    }
}

// `Memory::managed_zones` keeps a bit per zone type in a byte.
const _: () = assert!(crate::page_alloc::MAX_NR_ZONES <= u8::BITS as usize);

/// Per node, a bit per zone type with managed pages.
fn managed_zones<R: RawMutex>(allocator: &PageAllocator<R>) -> Vec<u8> {
    let mut managed = alloc::vec![0u8; allocator.topology().nr_nodes()];
    for zone in allocator.zones().iter().filter(|z| z.is_managed()) {
        managed[zone.node() as usize] |= 1 << zone.zone_type().index();
    }
    managed
}

fn allocator_nodes<R: RawMutex>(allocator: &PageAllocator<R>) -> usize {
    allocator.topology().nr_nodes()
}
