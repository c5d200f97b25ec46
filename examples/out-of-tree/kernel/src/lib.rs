//! A kernel's page frame allocator on `mmkit-core`, written from mmkit's documentation
//! alone, as a crate that takes mmkit from crates.io would be.
//!
//! What a kernel does with it, step by step (each step is a function of [`selftest`], run
//! by the host tests in `tests/boot.rs` and by a kernel's own boot code alike):
//!
//! 1. Read firmware's memory map ([`memory_map`]: e820 entries with holes, on two NUMA
//!    nodes whose CPUs firmware numbers alternately) and build a `Topology` from it.
//! 2. Carve the mem_map (16 bytes per page) out of the memory it describes, reserve it,
//!    and build the `PageAllocator` on it ([`boot`]): the heap holds only the small
//!    structures.
//! 3. Allocate and free by order, in bulk, from the DMA zone; take a CPU offline and back;
//!    run out of memory; `verify()` after every step; print `/proc/zoneinfo`.
//! 4. Build page tables with the `x86_64` crate's mapper, whose frames come from mmkit
//!    through the core's `x86_64` feature ([`paging`]).
//!
//! The crate is `no_std` + `alloc` and builds for `x86_64-unknown-none`; `unsafe` is in two
//! places only, each a kernel's own: the mem_map slice made from its physical address
//! ([`boot`]), and the page tables reached through the direct map ([`paging`]).

#![no_std]

extern crate alloc;

pub mod memory_map;
pub mod paging;
pub mod selftest;

use core::fmt;

use mmkit_core::page::Page;
use mmkit_core::page::PAGE_SIZE;
use mmkit_core::page_alloc::NodeId;
use mmkit_core::sync::RawMutex;
use mmkit_core::sync::RawSpinLock;
use mmkit_core::topology::CacheInfo;
use mmkit_core::topology::PfnRange;
use mmkit_core::InitError;
use mmkit_core::PageAllocator;
use mmkit_core::Pfn;
use mmkit_core::Policy;
use mmkit_core::Settings;
use mmkit_core::TopologyError;

use crate::memory_map::Region;
use crate::memory_map::RegionKind;

/// What the boot loader hands the kernel.
#[derive(Clone, Copy, Debug)]
pub struct BootInfo<'a> {
    /// Firmware's memory map, in any order.
    pub memory_map: &'a [Region],
    /// The physical bytes the kernel image (and its initrd) occupy.
    pub kernel_image: (u64, u64),
    /// `cpu_nodes[cpu]`: the node of each CPU, in firmware's numbering.
    pub cpu_nodes: &'a [NodeId],
    /// The last-level cache.
    pub llc: CacheInfo,
}

/// Why the page allocator could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootError {
    /// The memory map or the CPUs describe no machine the core accepts.
    Topology(TopologyError),
    /// Node 0's highest usable range has no `needed` free bytes at its top for the mem_map.
    NoRoomForMemMap {
        /// Bytes the mem_map needs, rounded up to whole pages.
        needed: u64,
    },
    /// The allocator refused to build.
    Init(InitError),
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootError::Topology(error) => write!(f, "memory map: {error}"),
            BootError::NoRoomForMemMap { needed } => {
                write!(
                    f,
                    "no room for the mem_map's {needed} bytes at the top of node 0"
                )
            }
            BootError::Init(error) => write!(f, "page allocator: {error}"),
        }
    }
}

impl From<TopologyError> for BootError {
    fn from(error: TopologyError) -> BootError {
        BootError::Topology(error)
    }
}

impl From<InitError> for BootError {
    fn from(error: InitError) -> BootError {
        BootError::Init(error)
    }
}

/// The kernel's page frame allocator and the direct map through which it reaches a frame's
/// bytes. `R` is the zone and pageset lock (a kernel passes one that disables interrupts;
/// the host tests use the core's spinlock).
pub struct Kernel<R: RawMutex = RawSpinLock> {
    allocator: PageAllocator<R>,
    phys_offset: u64,
    mem_map: PfnRange,
}

impl<R: RawMutex> Kernel<R> {
    /// The page allocator.
    pub fn allocator(&self) -> &PageAllocator<R> {
        &self.allocator
    }

    /// Where physical address 0 is mapped: the direct map's offset.
    pub fn phys_offset(&self) -> u64 {
        self.phys_offset
    }

    /// The pages the mem_map occupies (reserved in the memory map the allocator was built
    /// from).
    pub fn mem_map(&self) -> PfnRange {
        self.mem_map
    }

    /// The direct-map address of `pfn`'s first byte.
    pub fn page_address(&self, pfn: Pfn) -> u64 {
        self.phys_offset + pfn.phys_addr()
    }
}

/// Build the page allocator over the memory `info` describes, its mem_map carved off the
/// top of node 0's highest usable range, as Linux's `alloc_node_mem_map` takes it from
/// memblock.
///
/// # Safety
///
/// Physical memory is mapped at `phys_offset`: for every usable range of
/// `info.memory_map`, physical address `p` is the writable byte at `phys_offset + p`, and
/// nothing else reads or writes those bytes while the returned kernel, or any frame it
/// hands out, is in use (the mem_map lives there for good).
pub unsafe fn boot<R: RawMutex>(
    info: &BootInfo<'_>,
    phys_offset: u64,
) -> Result<Kernel<R>, BootError> {
    let page_bytes = PAGE_SIZE as u64;
    let image = PfnRange::covering_bytes(info.kernel_image.0, info.kernel_image.1);
    // The mem_map's size is the span's, which reserving part of it does not change.
    let plain = memory_map::topology(info.memory_map, &[image], info.cpu_nodes, info.llc)?;
    let needed = plain.mem_map_bytes().next_multiple_of(page_bytes);
    let top = highest_usable(info.memory_map, 0).ok_or(BootError::NoRoomForMemMap { needed })?;
    let end = top.end / page_bytes * page_bytes;
    let start = end.saturating_sub(needed);
    // The carved range must be free RAM: inside the usable range, clear of the kernel
    // image and of every range firmware keeps.
    let overlaps = |other_start: u64, other_end: u64| other_start < end && start < other_end;
    let image_bytes = (image.start.phys_addr(), image.end.phys_addr());
    let kept =
        |region: &Region| region.kind != RegionKind::Usable && overlaps(region.start, region.end);
    if start < top.start
        || overlaps(image_bytes.0, image_bytes.1)
        || info.memory_map.iter().any(kept)
    {
        return Err(BootError::NoRoomForMemMap { needed });
    }
    let mem_map = PfnRange::covering_bytes(start, end);
    let machine =
        memory_map::topology(info.memory_map, &[image, mem_map], info.cpu_nodes, info.llc)?;
    let len = usize::try_from(machine.mem_map_pages())
        .map_err(|_| BootError::NoRoomForMemMap { needed })?;
    let address = (phys_offset + start) as *mut Page;
    // SAFETY: `start..start + needed` is usable memory (checked above) that the caller
    // mapped writable at `phys_offset` for us alone; `needed` covers `len` descriptors of
    // 16 bytes. All-zero bytes are a valid `Page` (the core's docs: `bytemuck::Zeroable`),
    // the address is page aligned, and the range is reserved in `machine`, so the
    // allocator never hands it out: the slice is never aliased.
    let descriptors: &'static mut [Page] = unsafe {
        core::ptr::write_bytes(address.cast::<u8>(), 0, needed as usize);
        core::slice::from_raw_parts_mut(address, len)
    };
    let allocator = PageAllocator::<R>::with_lock_and_mem_map(
        machine,
        Settings::default(),
        Policy::V6_7,
        descriptors,
    )?;
    Ok(Kernel {
        allocator,
        phys_offset,
        mem_map,
    })
}

/// The usable region of `node` that ends highest.
fn highest_usable(map: &[Region], node: NodeId) -> Option<Region> {
    map.iter()
        .filter(|region| region.kind == RegionKind::Usable && region.node == node)
        .max_by_key(|region| region.end)
        .copied()
}
