//! Linux's percpu allocator (`mm/percpu.c`, v5.14 with partial chunk depopulation).
//!
//! A *chunk* is one address range per possible CPU (a *unit* each); an allocation is an
//! offset that is valid in every unit, so `alloc_percpu(T)` hands every CPU its own `T`.
//! The allocation map counts 4-byte bits (`PCPU_MIN_ALLOC_SIZE`) with one block of hints
//! per page; chunks sit on *slots* by the largest free run they hold; pages are
//! *populated* (backed in every unit) on demand and, since v5.14, depopulated again when a
//! chunk holds enough empty ones. `docs/reference/linux-mm.md` §4 is the behaviour; the thread
//! is "percpu: partial chunk depopulation" (Roman Gushchin, Dennis Zhou, April 2021;
//! "Gushchin/Zhou 2021" in `docs/reference/sources.md`).
//!
//! | module | holds | Linux |
//! |---|---|---|
//! | `bitmap` | bitmaps with `find_next_bit` and friends | `lib/find_bit.c` |
//! | `block` | the hint metadata of a block or chunk | `struct pcpu_block_md` |
//! | `chunk` | a chunk's maps and the hint updates | `struct pcpu_chunk`, area functions |
//! | `slots` | slot numbers and the slot lists | `pcpu_chunk_lists`, `pcpu_size_to_slot` |
//! | `allocator` | allocation, free, isolation, global counts | `pcpu_alloc`, `free_percpu` |
//! | `balance` | the balance work | `pcpu_balance_workfn` |
//! | `first_chunk` | the boot layout `<static \| reserved \| dynamic>`, the unit size | `pcpu_setup_first_chunk`, `pcpu_build_alloc_info` |
//! | `backing` | the trait the runtime implements, and a fake | `mm/percpu-vm.c` |
//! | `policy` | v5.13, v5.14 and the thread's variants | (the series) |
//! | `verify` | the walker that checks every bit and hint | `pcpu_check_block_hint` |
//!
//! The first chunk is optional ([`PercpuConfig::first_chunk`]). With it, the allocator
//! starts as Linux does after `pcpu_setup_first_chunk`: the kernel image's static per-CPU
//! data, the reserved chunk (module statics, served only by
//! [`PercpuAllocator::alloc_reserved`]) and the first chunk (the dynamic region) are
//! populated from the start, counted in `Percpu:`, and never depopulated or freed. Without
//! it every chunk is dynamic and memory counts start at zero, which suits the runtime's
//! user-space pool (it has no static per-CPU variables).
//!
//! Where we differ from Linux:
//! - The static region has no chunk and no memory behind it: Linux copies the kernel
//!   image's `.data..percpu` there, we only count its pages in `Percpu:`.
//! - The balance work does not run by itself: [`PercpuAllocator::balance_pending`] says
//!   Linux would have scheduled it, and the caller runs [`PercpuAllocator::balance`].
//! - Requests with alignment 0 are refused (Linux raises them to 4).
//! - No memcg accounting of percpu memory (`pcpu_memcg_pre_alloc_hook`), no chunk types.

mod allocator;
mod backing;
mod balance;
mod bitmap;
mod block;
mod chunk;
mod first_chunk;
mod policy;
mod slots;
mod verify;

pub use allocator::{AllocKind, ChunkInfo, PercpuAllocator, PercpuStats};
pub use backing::{BackingError, ChunkBacking, MemoryBacking};
pub use block::BlockMd;
pub use first_chunk::{
    FirstChunkLayout, PERCPU_DYNAMIC_EARLY_SIZE, PERCPU_DYNAMIC_RESERVE, PERCPU_MODULE_RESERVE,
};
pub use policy::{
    PercpuPolicy, ReclaimCandidate, EMPTY_POP_HIGH_BYTES, EMPTY_POP_LOW_BYTES,
    PCPU_EMPTY_POP_PAGES_HIGH, PCPU_EMPTY_POP_PAGES_LOW, PCPU_EMPTY_POP_RECLAIM_THRESHOLD,
    PERCPU_PRESETS,
};
pub use slots::{size_to_slot, SlotLayout, PCPU_SLOT_BASE_SHIFT, PCPU_SLOT_FAIL_THRESHOLD};
pub use verify::{PercpuCensus, VerifyError};

use core::fmt;

/// Bytes per allocation-map bit (`PCPU_MIN_ALLOC_SIZE`).
pub const PCPU_MIN_ALLOC_SIZE: usize = 4;
/// The largest request and the smallest unit (`PCPU_MIN_UNIT_SIZE`, 32 KiB).
pub const PCPU_MIN_UNIT_SIZE: usize = 32 << 10;

/// A chunk's name: its index and a generation, so a pointer into a destroyed chunk is
/// not taken for one into the chunk that reused the index.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ChunkId {
    /// Index in the allocator's chunk table.
    pub index: u32,
    /// How many chunks had this index before.
    pub generation: u32,
}

/// A percpu allocation: the same offset in every unit of a chunk (Linux's
/// `void __percpu *`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PercpuPtr {
    /// The chunk.
    pub chunk: ChunkId,
    /// Byte offset inside each unit.
    pub offset: usize,
}

/// The machine and policy an allocator models.
///
/// ```
/// use mmkit_core::percpu::PercpuConfig;
///
/// let config = PercpuConfig::x86_64(8); // 8 possible CPUs, 256 KiB units of 4 KiB pages
/// assert_eq!(config.unit_pages(), 64);
/// config.validate()?;
/// let too_small = PercpuConfig { unit_size: 16 << 10, ..config };
/// assert!(too_small.validate().is_err(), "units are at least 32 KiB");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PercpuConfig {
    /// `PAGE_SIZE`: also the block size of the allocation map (a power of two, 4 KiB to
    /// 64 KiB).
    pub page_size: usize,
    /// `pcpu_unit_size`: bytes per unit, a multiple of the page size and at least
    /// [`PCPU_MIN_UNIT_SIZE`].
    pub unit_size: usize,
    /// `pcpu_nr_units`: units per chunk, one per possible CPU.
    pub nr_units: usize,
    /// Reclaim policy.
    pub policy: PercpuPolicy,
    /// The boot-time layout `<static | reserved | dynamic>` of the first chunk, or `None`
    /// for an allocator whose chunks are all dynamic (see the module comment).
    pub first_chunk: Option<FirstChunkLayout>,
}

impl PercpuConfig {
    /// x86-64 as Linux lays it out on a typical distribution kernel: 4 KiB pages, 256 KiB
    /// units (dmesg "percpu: Embedded … u262144"), `nr_units` CPUs, v5.14.
    pub fn x86_64(nr_units: usize) -> PercpuConfig {
        PercpuConfig {
            page_size: 4 << 10,
            unit_size: 256 << 10,
            nr_units,
            policy: PercpuPolicy::V5_14,
            first_chunk: None,
        }
    }

    /// The same machine with a first chunk laid out as `layout`.
    pub fn with_first_chunk(self, layout: FirstChunkLayout) -> PercpuConfig {
        PercpuConfig {
            first_chunk: Some(layout),
            ..self
        }
    }

    /// Pages per unit (`pcpu_unit_pages`).
    pub fn unit_pages(&self) -> usize {
        self.unit_size / self.page_size
    }

    /// Check the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.page_size.is_power_of_two() || !(4 << 10..=64 << 10).contains(&self.page_size) {
            return Err(ConfigError::PageSize);
        }
        if self.unit_size < PCPU_MIN_UNIT_SIZE
            || self.unit_size % self.page_size != 0
            || self.unit_size > 1 << 30
        {
            return Err(ConfigError::UnitSize);
        }
        if self.nr_units == 0 || self.nr_units > 4096 {
            return Err(ConfigError::Units);
        }
        if let Some(layout) = self.first_chunk {
            layout
                .check(self.page_size, self.unit_size)
                .map_err(ConfigError::FirstChunk)?;
        }
        Ok(())
    }
}

/// A [`PercpuConfig`] that Linux could not have.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ConfigError {
    /// The page size is not a power of two from 4 KiB to 64 KiB.
    PageSize,
    /// The unit is smaller than 32 KiB, larger than 1 GiB, or not whole pages.
    UnitSize,
    /// Units must be 1 to 4096.
    Units,
    /// The first chunk's layout is one Linux would refuse at boot; the words say why.
    FirstChunk(&'static str),
}

impl core::error::Error for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::PageSize => "page size must be a power of two from 4 KiB to 64 KiB",
            ConfigError::UnitSize => {
                "unit size must be whole pages, at least 32 KiB (PCPU_MIN_UNIT_SIZE) and at most 1 GiB"
            }
            ConfigError::Units => "units (possible CPUs) must be 1 to 4096",
            ConfigError::FirstChunk(why) => why,
        })
    }
}

/// Why an allocation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// Size 0 or larger than [`PCPU_MIN_UNIT_SIZE`].
    InvalidSize(usize),
    /// Alignment not a power of two, or larger than a page.
    InvalidAlign(usize),
    /// An atomic request found no populated space (`atomic alloc failed, no space left`);
    /// the balance work will populate more.
    NoPopulatedSpace,
    /// A reserved request found no room in the reserved chunk (`alloc from reserved chunk
    /// failed`); the reserved chunk never grows.
    NoReservedSpace,
    /// The backing refused a chunk or pages.
    Backing(BackingError),
}

impl core::error::Error for AllocError {}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::InvalidSize(size) => write!(
                f,
                "percpu size {size} is 0 or over {PCPU_MIN_UNIT_SIZE} bytes (PCPU_MIN_UNIT_SIZE)"
            ),
            AllocError::InvalidAlign(align) => write!(
                f,
                "percpu alignment {align} is not a power of two or is larger than a page"
            ),
            AllocError::NoPopulatedSpace => {
                f.write_str("atomic percpu allocation failed: no populated space left")
            }
            AllocError::NoReservedSpace => {
                f.write_str("reserved percpu allocation failed: the reserved chunk is full")
            }
            AllocError::Backing(err) => write!(f, "{err}"),
        }
    }
}

/// Why a free was refused. A refused free changes nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FreeError {
    /// No such chunk (never existed, or destroyed since).
    UnknownChunk(ChunkId),
    /// The offset is not the start of a live allocation in that chunk (a double free, or
    /// a pointer that never came from `alloc`).
    NotAllocated(PercpuPtr),
}

impl core::error::Error for FreeError {}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::UnknownChunk(id) => write!(f, "free of an unknown percpu chunk {id:?}"),
            FreeError::NotAllocated(ptr) => write!(
                f,
                "free of percpu offset {} in chunk {:?}, which is not an allocation",
                ptr.offset, ptr.chunk
            ),
        }
    }
}
