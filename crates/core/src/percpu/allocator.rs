//! The allocator: chunks, slot lists, global counts, `alloc` and `free`.
//!
//! Linux counterpart: `pcpu_alloc`, `free_percpu`, `pcpu_chunk_relocate`,
//! `pcpu_isolate_chunk`, `pcpu_reintegrate_chunk`, `pcpu_update_empty_pages`,
//! `pcpu_chunk_populated`/`_depopulated` in `mm/percpu.c` (v5.14). Linux serialises these
//! with `pcpu_alloc_mutex` and `pcpu_lock`; here they take `&mut self` and the runtime
//! holds one lock around the allocator.
//! Neighbours: [`super::chunk`] does the work inside a chunk, [`super::balance`] the
//! balance work, [`super::backing`] the memory.

use alloc::vec::Vec;
use core::ops::Range;

use super::backing::{ChunkBacking, MemoryBacking};
use super::chunk::Chunk;
use super::policy::ReclaimCandidate;
use super::slots::{SlotLayout, SlotList, PCPU_SLOT_FAIL_THRESHOLD};
use super::{
    AllocError, ChunkId, ConfigError, FirstChunkLayout, FreeError, PercpuConfig, PercpuPtr,
    PCPU_MIN_ALLOC_SIZE, PCPU_MIN_UNIT_SIZE,
};

/// Whether a request may populate pages (and sleep).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocKind {
    /// `GFP_KERNEL`: may create chunks and populate pages.
    Kernel,
    /// `GFP_ATOMIC`/`GFP_NOWAIT`: only already populated space.
    Atomic,
}

/// Event counts since the allocator was built.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PercpuStats {
    /// Successful allocations.
    pub allocs: u64,
    /// Failed allocations (any reason).
    pub alloc_failures: u64,
    /// Successful frees.
    pub frees: u64,
    /// Refused frees.
    pub bad_frees: u64,
    /// Chunks created.
    pub chunks_created: u64,
    /// Chunks destroyed.
    pub chunks_destroyed: u64,
    /// Pages populated (per unit).
    pub pages_populated: u64,
    /// Pages depopulated (per unit).
    pub pages_depopulated: u64,
    /// Times the balance work was scheduled (only counted when not already pending).
    pub balance_scheduled: u64,
    /// Times the balance work ran.
    pub balance_runs: u64,
    /// Chunks isolated for reclaim.
    pub isolations: u64,
}

/// One chunk as the outside sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ChunkInfo {
    /// Its name.
    pub id: ChunkId,
    /// The slot list it is on.
    pub slot: usize,
    /// Pages per unit.
    pub nr_pages: usize,
    /// Populated pages.
    pub nr_populated: usize,
    /// Populated pages with no allocation.
    pub nr_empty_pop_pages: usize,
    /// Free bytes per unit.
    pub free_bytes: usize,
    /// Whether it is isolated for reclaim.
    pub isolated: bool,
    /// The first or the reserved chunk (populated from boot, never freed).
    pub immutable: bool,
    /// Its chunk-wide hints.
    pub chunk_md: super::BlockMd,
}

/// Linux's percpu allocator over a [`ChunkBacking`].
///
/// ```
/// use mmkit_core::percpu::{AllocKind, MemoryBacking, PercpuAllocator, PercpuConfig};
/// let mut pcpu = PercpuAllocator::new(PercpuConfig::x86_64(4), MemoryBacking::new())?;
/// let ptr = pcpu.alloc(64, 8, AllocKind::Kernel)?;          // one chunk, one page populated
/// assert_eq!(pcpu.nr_populated_pages(), 1);
/// assert_eq!(pcpu.meminfo_percpu_kb(), 16);                 // 1 page × 4 units × 4 KiB
/// pcpu.free(ptr)?;
/// pcpu.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PercpuAllocator<B: ChunkBacking> {
    pub(crate) config: PercpuConfig,
    pub(crate) layout: SlotLayout,
    pub(crate) chunks: Vec<Option<Chunk>>,
    pub(crate) generations: Vec<u32>,
    pub(crate) unused_indexes: Vec<usize>,
    pub(crate) slots: Vec<SlotList>,
    /// `pcpu_nr_empty_pop_pages`: over chunks that are not isolated.
    pub(crate) nr_empty_pop_pages: isize,
    /// Over isolated chunks (v4 patch 4's `pcpu_nr_isolated_empty_pop_pages`; kept in
    /// every policy, read only by the reclaim-threshold ones).
    pub(crate) nr_isolated_empty_pop_pages: isize,
    /// `pcpu_nr_populated`: populated pages over all chunks (per unit), and the whole first
    /// chunk with its static region from boot.
    pub(crate) nr_populated: usize,
    /// `PFN_DOWN(size_sum)`: the pages of `<static | reserved | dynamic>` counted in
    /// `nr_populated` since boot (0 without a first chunk).
    pub(crate) first_chunk_pages: usize,
    /// `pcpu_first_chunk`: the chunk serving the first chunk's dynamic region.
    pub(crate) first_chunk: Option<usize>,
    /// `pcpu_reserved_chunk`: on no slot list, never in the global empty-page count.
    pub(crate) reserved_chunk: Option<usize>,
    /// `pcpu_atomic_alloc_failed`.
    pub(crate) atomic_alloc_failed: bool,
    pub(crate) balance_pending: bool,
    pub(crate) stats: PercpuStats,
    pub(crate) backing: B,
}

impl PercpuAllocator<MemoryBacking> {
    /// Make the books-only backing fail every later `create_chunk` and `populate` while
    /// `fail` is set, as a kernel's `vmalloc` or page allocation can fail: fault
    /// injection for tests and the simulator.
    ///
    /// The backing itself stays the allocator's (there is no `&mut` to it): a call
    /// around the allocator, such as depopulating a page it counts as populated, would
    /// leave its books and the memory behind them disagreeing.
    ///
    /// A caller cannot reach the backing to change it:
    ///
    /// ```compile_fail,E0599
    /// # use mmkit_core::percpu::{ChunkBacking, MemoryBacking, PercpuAllocator, PercpuConfig};
    /// # let mut pcpu = PercpuAllocator::new(PercpuConfig::x86_64(4), MemoryBacking::new()).unwrap();
    /// # let ptr = pcpu.alloc(64, 8, mmkit_core::percpu::AllocKind::Kernel).unwrap();
    /// pcpu.backing_mut().depopulate(ptr.chunk, 0..1); // no such method
    /// ```
    ///
    /// ```
    /// use mmkit_core::percpu::{AllocError, AllocKind, BackingError, MemoryBacking};
    /// use mmkit_core::percpu::{PercpuAllocator, PercpuConfig};
    ///
    /// let mut pcpu = PercpuAllocator::new(PercpuConfig::x86_64(4), MemoryBacking::new())?;
    /// pcpu.set_backing_fail(true);
    /// let failed = pcpu.alloc(64, 8, AllocKind::Kernel);
    /// assert_eq!(failed, Err(AllocError::Backing(BackingError)));
    /// pcpu.set_backing_fail(false);
    /// let ptr = pcpu.alloc(64, 8, AllocKind::Kernel)?;
    /// pcpu.free(ptr)?;
    /// pcpu.verify()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_backing_fail(&mut self, fail: bool) {
        self.backing.fail = fail;
    }
}

impl<B: ChunkBacking> PercpuAllocator<B> {
    /// An allocator as Linux has it after boot: with the configuration's first chunk (the
    /// reserved chunk, if any, then the first chunk, populated through the backing), or
    /// with no chunks at all. A backing that cannot hold the first chunk is refused
    /// (Linux panics).
    pub fn new(config: PercpuConfig, backing: B) -> Result<PercpuAllocator<B>, ConfigError> {
        config.validate()?;
        let mut allocator = PercpuAllocator::empty(config, backing);
        if let Some(layout) = config.first_chunk {
            allocator.setup_first_chunk(layout)?;
        }
        Ok(allocator)
    }

    fn empty(config: PercpuConfig, backing: B) -> PercpuAllocator<B> {
        let layout = SlotLayout::new(config.unit_size);
        PercpuAllocator {
            config,
            layout,
            chunks: Vec::new(),
            generations: Vec::new(),
            unused_indexes: Vec::new(),
            slots: alloc::vec![SlotList::default(); layout.nr_slots],
            nr_empty_pop_pages: 0,
            nr_isolated_empty_pop_pages: 0,
            nr_populated: 0,
            first_chunk_pages: 0,
            first_chunk: None,
            reserved_chunk: None,
            atomic_alloc_failed: false,
            balance_pending: false,
            stats: PercpuStats::default(),
            backing,
        }
    }

    /// `pcpu_setup_first_chunk`: the reserved chunk over the reserved region (if any),
    /// the first chunk over the dynamic region, both fully populated; the first chunk's
    /// empty pages start the global count and it goes on its slot; `pcpu_nr_populated`
    /// counts every page of `<static | reserved | dynamic>`.
    fn setup_first_chunk(&mut self, layout: FirstChunkLayout) -> Result<(), ConfigError> {
        let refused = ConfigError::FirstChunk("first chunk: the backing could not hold it");
        let static_pages = layout.reserved_start() / self.config.page_size;
        self.backing
            .back_static(static_pages)
            .map_err(|_| refused)?;
        if layout.reserved_size > 0 {
            let chunk = Chunk::new_first(
                layout.reserved_start(),
                layout.reserved_size,
                self.config.page_size,
            );
            self.reserved_chunk = Some(self.boot_chunk(chunk).map_err(|_| refused)?);
        }
        let (start, size) = layout.dynamic_region();
        let chunk = Chunk::new_first(start, size, self.config.page_size);
        let index = self.boot_chunk(chunk).map_err(|_| refused)?;
        self.first_chunk = Some(index);
        self.nr_empty_pop_pages = self.chunk(index).nr_empty_pop_pages;
        self.relocate(index, None);
        self.first_chunk_pages = layout.size_sum() / self.config.page_size;
        self.nr_populated = self.first_chunk_pages;
        Ok(())
    }

    /// Give a boot chunk its index and memory (all its pages populated).
    fn boot_chunk(&mut self, chunk: Chunk) -> Result<usize, super::BackingError> {
        let index = self.chunks.len();
        self.chunks.push(None);
        self.generations.push(0);
        let id = self.id_of(index);
        let nr_pages = chunk.nr_pages();
        let backed = self
            .backing
            .create_chunk(id, nr_pages)
            .and_then(|()| self.backing.populate(id, 0..nr_pages));
        if let Err(err) = backed {
            self.chunks.pop();
            self.generations.pop();
            return Err(err);
        }
        self.chunks[index] = Some(chunk);
        self.stats.chunks_created += 1;
        Ok(index)
    }

    /// The configuration.
    pub fn config(&self) -> &PercpuConfig {
        &self.config
    }

    /// The slot numbers.
    pub fn slot_layout(&self) -> SlotLayout {
        self.layout
    }

    /// The backing.
    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// Event counts.
    pub fn stats(&self) -> PercpuStats {
        self.stats
    }

    /// `pcpu_nr_populated`: populated pages over all chunks, per unit.
    pub fn nr_populated_pages(&self) -> usize {
        self.nr_populated
    }

    /// `pcpu_nr_empty_pop_pages`: empty populated pages of chunks that are not isolated.
    pub fn nr_empty_pop_pages(&self) -> usize {
        usize::try_from(self.nr_empty_pop_pages).unwrap_or(0)
    }

    /// Empty populated pages of isolated chunks.
    pub fn nr_isolated_empty_pop_pages(&self) -> usize {
        usize::try_from(self.nr_isolated_empty_pop_pages).unwrap_or(0)
    }

    /// The `Percpu:` line of `/proc/meminfo`, in kB: `pcpu_nr_pages()` =
    /// populated pages × units, times the page size.
    pub fn meminfo_percpu_kb(&self) -> u64 {
        (self.nr_populated * self.config.nr_units * self.config.page_size / 1024) as u64
    }

    /// Whether Linux would have the balance work scheduled now.
    pub fn balance_pending(&self) -> bool {
        self.balance_pending
    }

    /// `pcpu_first_chunk`: the chunk serving the first chunk's dynamic region.
    pub fn first_chunk(&self) -> Option<ChunkId> {
        self.first_chunk.map(|index| self.id_of(index))
    }

    /// `pcpu_reserved_chunk`: the chunk serving reserved requests, if the layout has one.
    pub fn reserved_chunk(&self) -> Option<ChunkId> {
        self.reserved_chunk.map(|index| self.id_of(index))
    }

    /// The chunks that exist, by index.
    pub fn chunk_ids(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_some())
            .map(|(index, _)| self.id_of(index))
    }

    /// One chunk's state.
    pub fn chunk_info(&self, id: ChunkId) -> Option<ChunkInfo> {
        let index = self.index_of(id)?;
        let chunk = self.chunk(index);
        Some(ChunkInfo {
            id,
            slot: chunk.list_slot,
            nr_pages: chunk.nr_pages(),
            nr_populated: chunk.nr_populated,
            nr_empty_pop_pages: usize::try_from(chunk.nr_empty_pop_pages).unwrap_or(0),
            free_bytes: chunk.free_bytes,
            isolated: chunk.isolated,
            immutable: chunk.immutable,
            chunk_md: chunk.chunk_md,
        })
    }

    /// The live allocations of a chunk as byte ranges of a unit, in order.
    pub fn allocations(&self, id: ChunkId) -> Vec<Range<usize>> {
        let Some(index) = self.index_of(id) else {
            return Vec::new();
        };
        let chunk = self.chunk(index);
        let mut out = Vec::new();
        for run in chunk.alloc_map.set_runs(chunk.served_bits()) {
            let mut start = run.start;
            while start < run.end {
                let end = chunk.bound_map.next_set(start + 1, chunk.nr_bits());
                out.push(start * PCPU_MIN_ALLOC_SIZE..end * PCPU_MIN_ALLOC_SIZE);
                start = end;
            }
        }
        out
    }

    /// Allocate `size` bytes at `align` in every unit (`pcpu_alloc`). Sizes round up to 4
    /// bytes and alignments below 4 become 4. `Kernel` requests may create a chunk and
    /// populate the pages they land on; `Atomic` ones only use populated space.
    pub fn alloc(
        &mut self,
        size: usize,
        align: usize,
        kind: AllocKind,
    ) -> Result<PercpuPtr, AllocError> {
        let result = self.alloc_inner(size, align, kind);
        match result {
            Ok(_) => self.stats.allocs += 1,
            Err(_) => self.stats.alloc_failures += 1,
        }
        result
    }

    /// Allocate from the reserved chunk (`__alloc_reserved_percpu`, what the module
    /// loader uses for a module's static per-CPU variables). The reserved chunk is
    /// populated from boot and never grows: a request it cannot fit fails. Without a
    /// reserved chunk the request is an ordinary one, as in Linux.
    pub fn alloc_reserved(&mut self, size: usize, align: usize) -> Result<PercpuPtr, AllocError> {
        let Some(index) = self.reserved_chunk else {
            return self.alloc(size, align, AllocKind::Kernel);
        };
        let result = self.alloc_reserved_inner(index, size, align);
        match result {
            Ok(_) => self.stats.allocs += 1,
            Err(_) => self.stats.alloc_failures += 1,
        }
        result
    }

    fn alloc_reserved_inner(
        &mut self,
        index: usize,
        size: usize,
        align: usize,
    ) -> Result<PercpuPtr, AllocError> {
        let (_, bits, bit_align) = self.request(size, align)?;
        let start = self
            .chunk(index)
            .find_block_fit(bits, bit_align, false)
            .ok_or(AllocError::NoReservedSpace)?;
        let (bit_off, empty_delta) = self
            .chunk_mut(index)
            .alloc_area(bits, bit_align, start)
            .ok_or(AllocError::NoReservedSpace)?;
        self.update_empty_pages(index, empty_delta);
        debug_assert_eq!(self.chunk(index).nr_populated, self.chunk(index).nr_pages());
        self.check_low();
        Ok(PercpuPtr {
            chunk: self.id_of(index),
            offset: bit_off * PCPU_MIN_ALLOC_SIZE,
        })
    }

    /// Check a request as `pcpu_alloc` does; returns the size rounded up to 4 bytes, its
    /// bits and its alignment in bits.
    fn request(&self, size: usize, align: usize) -> Result<(usize, usize, usize), AllocError> {
        if size == 0 || size > PCPU_MIN_UNIT_SIZE {
            return Err(AllocError::InvalidSize(size));
        }
        if !align.is_power_of_two() || align > self.config.page_size {
            return Err(AllocError::InvalidAlign(align));
        }
        let size = size.next_multiple_of(PCPU_MIN_ALLOC_SIZE);
        let bit_align = align.max(PCPU_MIN_ALLOC_SIZE) / PCPU_MIN_ALLOC_SIZE;
        Ok((size, size / PCPU_MIN_ALLOC_SIZE, bit_align))
    }

    /// Schedule the balance work if atomic requests are short of empty populated pages.
    fn check_low(&mut self) {
        let low = self
            .config
            .policy
            .empty_pop_pages_low(self.config.page_size);
        if self.nr_empty_pop_pages < low as isize {
            self.schedule_balance();
        }
    }

    fn alloc_inner(
        &mut self,
        size: usize,
        align: usize,
        kind: AllocKind,
    ) -> Result<PercpuPtr, AllocError> {
        let (size, bits, bit_align) = self.request(size, align)?;
        let atomic = kind == AllocKind::Atomic;
        // Two rounds at most: a fully free chunk fits every valid request.
        let mut created = false;
        let (index, bit_off) = loop {
            if let Some(found) = self.search(size, bits, bit_align, atomic) {
                break found;
            }
            if atomic {
                self.atomic_alloc_failed = true;
                self.schedule_balance();
                return Err(AllocError::NoPopulatedSpace);
            }
            assert!(
                !created && self.slots[self.layout.free].head.is_none(),
                "percpu: a fully free chunk refused {size} bytes"
            );
            self.create_chunk().map_err(AllocError::Backing)?;
            created = true;
        };
        let offset = bit_off * PCPU_MIN_ALLOC_SIZE;
        if !atomic {
            self.populate_area(index, offset, size, bit_off)?;
        }
        self.check_low();
        Ok(PercpuPtr {
            chunk: self.id_of(index),
            offset,
        })
    }

    /// Walk the slots from the request's size class up to the free slot (so sidelined
    /// chunks come after every active slot, and fully free chunks last; to_depopulate is
    /// never searched) and allocate from the first chunk that fits.
    fn search(
        &mut self,
        size: usize,
        bits: usize,
        bit_align: usize,
        atomic: bool,
    ) -> Option<(usize, usize)> {
        for slot in self.layout.size_to_slot(size)..=self.layout.free {
            let mut cursor = self.slots[slot].head;
            while let Some(index) = cursor {
                cursor = self.chunk(index).list_next;
                let Some(start) = self.chunk(index).find_block_fit(bits, bit_align, atomic) else {
                    if slot < PCPU_SLOT_FAIL_THRESHOLD {
                        self.chunk_move(index, 0, true);
                    }
                    continue;
                };
                let old_slot = self.chunk_slot(index);
                if let Some((bit_off, empty_delta)) =
                    self.chunk_mut(index).alloc_area(bits, bit_align, start)
                {
                    self.update_empty_pages(index, empty_delta);
                    self.relocate(index, Some(old_slot));
                    self.reintegrate(index);
                    return Some((index, bit_off));
                }
            }
        }
        None
    }

    /// Populate the pages under a new non-atomic allocation; on failure free it again.
    fn populate_area(
        &mut self,
        index: usize,
        offset: usize,
        size: usize,
        bit_off: usize,
    ) -> Result<(), AllocError> {
        let page_size = self.config.page_size;
        let pages = offset / page_size..(offset + size).div_ceil(page_size);
        let runs: Vec<_> = self.chunk(index).populated.clear_runs(pages).collect();
        for run in runs {
            if let Err(err) = self.backing.populate(self.id_of(index), run.clone()) {
                let old_slot = self.chunk_slot(index);
                let (_, empty_delta) = self.chunk_mut(index).free_area(bit_off);
                self.update_empty_pages(index, empty_delta);
                self.relocate(index, Some(old_slot));
                return Err(AllocError::Backing(err));
            }
            self.mark_populated(index, run);
        }
        Ok(())
    }

    /// Free an allocation (`free_percpu`), then schedule the balance work if there is more
    /// than one free chunk, or isolate the chunk for reclaim if it qualifies. Returns the
    /// bytes freed per unit. A pointer that is not a live allocation is refused and
    /// nothing changes.
    pub fn free(&mut self, ptr: PercpuPtr) -> Result<usize, FreeError> {
        let result = self.free_inner(ptr);
        match result {
            Ok(_) => self.stats.frees += 1,
            Err(_) => self.stats.bad_frees += 1,
        }
        result
    }

    fn free_inner(&mut self, ptr: PercpuPtr) -> Result<usize, FreeError> {
        let index = self
            .index_of(ptr.chunk)
            .ok_or(FreeError::UnknownChunk(ptr.chunk))?;
        let chunk = self.chunk(index);
        if ptr.offset % PCPU_MIN_ALLOC_SIZE != 0
            || !chunk.is_allocation_start(ptr.offset / PCPU_MIN_ALLOC_SIZE)
        {
            return Err(FreeError::NotAllocated(ptr));
        }
        let old_slot = self.chunk_slot(index);
        let (bits, empty_delta) = self
            .chunk_mut(index)
            .free_area(ptr.offset / PCPU_MIN_ALLOC_SIZE);
        self.update_empty_pages(index, empty_delta);
        self.relocate(index, Some(old_slot));

        // If there is more than one fully free chunk, wake the reaper; an isolated chunk
        // may be being reclaimed, so leave it to reclaim.
        let chunk = self.chunk(index);
        if !chunk.isolated && chunk.free_bytes == self.config.unit_size {
            let mut cursor = self.slots[self.layout.free].head;
            while let Some(other) = cursor {
                if other != index {
                    self.schedule_balance();
                    break;
                }
                cursor = self.chunk(other).list_next;
            }
        } else if self.should_reclaim(index) {
            self.isolate(index);
        }
        Ok(bits * PCPU_MIN_ALLOC_SIZE)
    }

    /// `pcpu_should_reclaim_chunk` for a chunk of ours: never the first or the reserved
    /// chunk.
    fn should_reclaim(&self, index: usize) -> bool {
        let chunk = self.chunk(index);
        if chunk.immutable {
            return false;
        }
        let candidate = ReclaimCandidate {
            nr_pages: chunk.nr_pages(),
            nr_empty_pop_pages: usize::try_from(chunk.nr_empty_pop_pages).unwrap_or(0),
            isolated: chunk.isolated,
        };
        self.config.policy.should_reclaim(
            self.config.page_size,
            candidate,
            self.nr_empty_pop_pages(),
        )
    }

    /// `pcpu_isolate_chunk`: take the chunk off the active slots, its empty pages out of
    /// the global count, and queue it for reclaim. v5.14 queues it on to_depopulate at
    /// once; the reclaim-threshold variants park it on the sidelined slot and move every
    /// sidelined chunk to to_depopulate when enough empty pages wait there or this chunk
    /// is fully free.
    fn isolate(&mut self, index: usize) {
        let reclaim_threshold = self.config.policy.reclaim_threshold;
        let chunk = self.chunk_mut(index);
        if !chunk.isolated {
            chunk.isolated = true;
            let empty = chunk.nr_empty_pop_pages;
            self.nr_empty_pop_pages -= empty;
            self.nr_isolated_empty_pop_pages += empty;
            self.stats.isolations += 1;
            if reclaim_threshold {
                self.chunk_move(index, self.layout.sidelined, true);
            }
        }
        if !reclaim_threshold {
            self.chunk_move(index, self.layout.to_depopulate, true);
            self.schedule_balance();
            return;
        }
        let threshold = self
            .config
            .policy
            .reclaim_threshold_pages(self.config.page_size) as isize;
        if self.chunk(index).free_bytes == self.config.unit_size
            || self.nr_isolated_empty_pop_pages >= threshold
        {
            self.splice_sidelined_to_depopulate();
            self.schedule_balance();
        }
    }

    /// `list_splice_tail_init(sidelined, to_depopulate)`.
    pub(crate) fn splice_sidelined_to_depopulate(&mut self) {
        while let Some(sidelined) = self.slots[self.layout.sidelined].head {
            self.chunk_move(sidelined, self.layout.to_depopulate, false);
        }
    }

    /// `pcpu_reintegrate_chunk`: put an isolated chunk back on its active slot.
    pub(crate) fn reintegrate(&mut self, index: usize) {
        let chunk = self.chunk_mut(index);
        if chunk.isolated {
            chunk.isolated = false;
            let empty = chunk.nr_empty_pop_pages;
            self.nr_empty_pop_pages += empty;
            self.nr_isolated_empty_pop_pages -= empty;
            self.relocate(index, None);
        }
    }

    /// `pcpu_update_empty_pages`: the chunk's count and the global one it belongs to (none
    /// for the reserved chunk: atomic requests cannot use its pages).
    pub(crate) fn update_empty_pages(&mut self, index: usize, delta: isize) {
        let reserved = self.reserved_chunk == Some(index);
        let chunk = self.chunk_mut(index);
        chunk.nr_empty_pop_pages += delta;
        if reserved {
            return;
        }
        if chunk.isolated {
            self.nr_isolated_empty_pop_pages += delta;
        } else {
            self.nr_empty_pop_pages += delta;
        }
    }

    /// `pcpu_chunk_populated`.
    pub(crate) fn mark_populated(&mut self, index: usize, pages: Range<usize>) {
        let n = pages.len();
        let delta = self.chunk_mut(index).mark_populated(pages);
        self.nr_populated += n;
        self.stats.pages_populated += n as u64;
        self.update_empty_pages(index, delta);
    }

    /// Depopulate `pages` through the backing and account for it
    /// (`pcpu_depopulate_chunk` + `pcpu_chunk_depopulated`).
    pub(crate) fn depopulate(&mut self, index: usize, pages: Range<usize>) {
        let n = pages.len();
        self.backing.depopulate(self.id_of(index), pages.clone());
        let delta = self.chunk_mut(index).mark_depopulated(pages);
        self.nr_populated -= n;
        self.stats.pages_depopulated += n as u64;
        self.update_empty_pages(index, delta);
    }

    pub(crate) fn schedule_balance(&mut self) {
        if !self.balance_pending {
            self.balance_pending = true;
            self.stats.balance_scheduled += 1;
        }
    }

    /// Create a chunk and put it at the head of the free slot (`pcpu_create_chunk` +
    /// `pcpu_chunk_relocate(chunk, -1)`).
    pub(crate) fn create_chunk(&mut self) -> Result<usize, super::BackingError> {
        let index = match self.unused_indexes.pop() {
            Some(index) => index,
            None => {
                self.chunks.push(None);
                self.generations.push(0);
                self.chunks.len() - 1
            }
        };
        let id = self.id_of(index);
        if let Err(err) = self.backing.create_chunk(id, self.config.unit_pages()) {
            self.unused_indexes.push(index);
            return Err(err);
        }
        self.chunks[index] = Some(Chunk::new(self.config.unit_pages(), self.config.page_size));
        self.list_add(index, self.layout.free, true);
        self.stats.chunks_created += 1;
        Ok(index)
    }

    /// Destroy a chunk that is off every list and has no populated pages.
    pub(crate) fn destroy_chunk(&mut self, index: usize) {
        debug_assert_eq!(self.chunk(index).nr_populated, 0);
        self.backing.destroy_chunk(self.id_of(index));
        self.chunks[index] = None;
        self.generations[index] = self.generations[index].wrapping_add(1);
        self.unused_indexes.push(index);
        self.stats.chunks_destroyed += 1;
    }

    pub(crate) fn chunk(&self, index: usize) -> &Chunk {
        self.chunks[index].as_ref().expect("a live chunk index")
    }

    pub(crate) fn chunk_mut(&mut self, index: usize) -> &mut Chunk {
        self.chunks[index].as_mut().expect("a live chunk index")
    }

    pub(crate) fn id_of(&self, index: usize) -> ChunkId {
        ChunkId {
            index: index as u32,
            generation: self.generations[index],
        }
    }

    fn index_of(&self, id: ChunkId) -> Option<usize> {
        let index = id.index as usize;
        (self.chunks.get(index)?.is_some() && self.generations[index] == id.generation)
            .then_some(index)
    }

    /// `pcpu_chunk_slot`.
    pub(crate) fn chunk_slot(&self, index: usize) -> usize {
        let chunk = self.chunk(index);
        self.layout
            .chunk_slot(chunk.free_bytes, chunk.chunk_md.contig_hint)
    }

    /// `pcpu_chunk_relocate`: move a chunk whose slot changed from `old_slot` (`None`:
    /// unknown); up a slot goes to the list head, down to the tail. Isolated chunks stay.
    pub(crate) fn relocate(&mut self, index: usize, old_slot: Option<usize>) {
        if self.chunk(index).isolated {
            return;
        }
        let new_slot = self.chunk_slot(index);
        if old_slot != Some(new_slot) {
            let front = match old_slot {
                Some(old) => old < new_slot,
                None => true,
            };
            self.chunk_move(index, new_slot, front);
        }
    }

    /// `list_move` / `list_move_tail` onto a slot list (`__pcpu_chunk_move`: never the
    /// reserved chunk, which is on no list).
    pub(crate) fn chunk_move(&mut self, index: usize, slot: usize, front: bool) {
        if self.reserved_chunk == Some(index) {
            return;
        }
        self.list_del(index);
        self.list_add(index, slot, front);
    }

    pub(crate) fn list_del(&mut self, index: usize) {
        let chunk = self.chunk(index);
        let (slot, prev, next) = (chunk.list_slot, chunk.list_prev, chunk.list_next);
        match prev {
            Some(prev) => self.chunk_mut(prev).list_next = next,
            None => self.slots[slot].head = next,
        }
        match next {
            Some(next) => self.chunk_mut(next).list_prev = prev,
            None => self.slots[slot].tail = prev,
        }
        let chunk = self.chunk_mut(index);
        chunk.list_prev = None;
        chunk.list_next = None;
    }

    fn list_add(&mut self, index: usize, slot: usize, front: bool) {
        let list = self.slots[slot];
        let (prev, next) = if front {
            (None, list.head)
        } else {
            (list.tail, None)
        };
        let chunk = self.chunk_mut(index);
        chunk.list_slot = slot;
        chunk.list_prev = prev;
        chunk.list_next = next;
        match prev {
            Some(prev) => self.chunk_mut(prev).list_next = Some(index),
            None => self.slots[slot].head = Some(index),
        }
        match next {
            Some(next) => self.chunk_mut(next).list_prev = Some(index),
            None => self.slots[slot].tail = Some(index),
        }
    }
}
