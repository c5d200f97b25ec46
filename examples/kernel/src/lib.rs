//! What a small x86-64 kernel does with mmkit-core at boot, as one function, [`boot`]:
//! the kernel binary (`main.rs`, built for x86_64-unknown-none) calls it from `_start`,
//! and the host test (`tests/boot.rs`) calls the same code.
//!
//! 1. Zones from firmware's memory map ([`E820`]): usable ranges in firmware's order with
//!    holes between them, two nodes, the first MiB and the kernel image reserved
//!    ([`RESERVED`]), CPUs numbered alternately across the two sockets ([`CPU_NODES`]).
//!    The mem_map (16 bytes per spanned page, `Topology::mem_map_bytes`) is carved off
//!    the top of node 0's highest usable range and reserved there too ([`mem_map_range`]),
//!    as memblock allocates it top-down before any allocator exists.
//! 2. A page allocator with its mem_map in that range
//!    (`PageAllocator::with_lock_and_mem_map`), its zone and pageset locks the kernel's
//!    interrupt-disabling spinlock ([`IrqSpinLock`]), and the small-kernel defaults
//!    (`Settings::default()`: no THP). The heap holds only the small structures: zones,
//!    pagesets, zonelists.
//! 3. Page-table frames through the `x86_64` crate's `FrameAllocator` (4 KiB and 2 MiB)
//!    on every CPU, a buffer by `Layout` through mmkit's own `FrameAllocator`, each frame
//!    checked against the map: never a hole, never reserved.
//! 4. `verify()` with everything allocated, everything freed through
//!    `FrameDeallocator`, `verify()` again: no page left allocated.
//!
//! The frames are never touched (this kernel maps nothing), so the host runs the same
//! path on memory it does not have. Linux counterpart: `e820__memblock_setup`,
//! `free_area_init`, `memblock_free_all`, and `alloc_pages` for page tables.

#![no_std]

extern crate alloc;

mod irq_lock;

pub use irq_lock::IrqSpinLock;

use alloc::vec::Vec;
use core::alloc::Layout;
use core::fmt;

use mmkit_core::frame::FrameAllocator as _;
use mmkit_core::page::{Page, PAGE_SHIFT};
use mmkit_core::page_alloc::verify::VerifyError;
use mmkit_core::page_alloc::{AllocError, Caller, FreeError, Gfp, NodeId, ZoneType};
use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits};
use mmkit_core::{InitError, PageAllocator, Pfn, Policy, Settings, Topology, TopologyError};
use x86_64::structures::paging::{
    FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size2MiB, Size4KiB,
};

/// Usable RAM as (first byte, one past the last byte, node), in the order firmware lists
/// it: node 1's 64 MiB above 4 GiB first, then node 0's 636 KiB below the VGA hole, 47 MiB
/// from 1 MiB and 64 MiB from 64 MiB (a 16 MiB hole between them).
pub const E820: [(u64, u64, NodeId); 4] = [
    (0x1_0000_0000, 0x1_0400_0000, 1),
    (0x1000, 0x9_fc00, 0),
    (0x10_0000, 0x300_0000, 0),
    (0x400_0000, 0x800_0000, 0),
];

/// Present memory the buddy allocator must not hand out: the first MiB (x86 Linux keeps
/// it for firmware and real-mode trampolines) and the kernel image at 16 MiB.
pub const RESERVED: [(u64, u64); 2] = [(0, 0x10_0000), (0x100_0000, 0x120_0000)];

/// `cpu_to_node` as the ACPI tables number the CPUs: alternately on each socket.
pub const CPU_NODES: [NodeId; 4] = [0, 1, 0, 1];

/// The bare-metal kernel's boot heap (`main.rs`'s bump allocator, which never reuses a
/// freed byte): zones, pagesets (a 128-byte slot per CPU in each of 8 zones), zonelists,
/// pageblock migratetypes, the topology built three times, and [`boot`]'s lists of
/// frames. The mem_map (768 KiB for these two nodes) lives in the memory it describes,
/// not here. `tests/heap.rs` counts every byte [`boot`] asks of the heap against it.
pub const BOOT_HEAP_BYTES: usize = 1 << 20;

/// 4 KiB page-table frames each CPU allocates.
const TABLES_PER_CPU: usize = 64;
/// 2 MiB frames each CPU allocates (huge-page mappings).
const HUGE_PER_CPU: usize = 2;

/// One zone as `/proc/zoneinfo` would show its sizes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ZoneSizes {
    /// The node.
    pub node: NodeId,
    /// The zone type.
    pub zone_type: ZoneType,
    /// First pfn spanned.
    pub start_pfn: u64,
    /// Pfns spanned, holes included.
    pub spanned: u64,
    /// Pages present.
    pub present: u64,
    /// Pages managed by the buddy allocator.
    pub managed: u64,
}

/// What [`boot`] did.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Report {
    /// Every zone with memory.
    pub zones: Vec<ZoneSizes>,
    /// 4 KiB frames allocated and freed through the `x86_64` crate's traits.
    pub frames_4k: usize,
    /// 2 MiB frames allocated and freed through them.
    pub frames_2m: usize,
    /// Pages allocated when everything was held (checked by `verify()`).
    pub pages_held: u64,
    /// Pages allocated after everything was freed (checked by `verify()`): 0.
    pub pages_left: u64,
}

/// Why [`boot`] stopped.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum BootError {
    /// The memory map does not make a machine.
    Topology(TopologyError),
    /// The settings are invalid, or the mem_map storage too small.
    Init(InitError),
    /// An allocation failed.
    Alloc(AllocError),
    /// The x86_64 adapter had no frame of that size.
    NoFrame {
        /// The frame size asked for.
        bytes: u64,
    },
    /// A frame the allocator returned is a hole or reserved.
    Unusable(Pfn),
    /// A free was refused.
    Free(FreeError),
    /// The allocator's walker found an inconsistency.
    Verify(VerifyError),
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootError::Topology(e) => write!(f, "memory map: {e}"),
            BootError::Init(e) => write!(f, "page allocator: {e}"),
            BootError::Alloc(e) => write!(f, "allocation: {e}"),
            BootError::NoFrame { bytes } => write!(f, "no free frame of {bytes} bytes"),
            BootError::Unusable(pfn) => write!(f, "{pfn:?} is a hole or reserved"),
            BootError::Free(e) => write!(f, "free: {e}"),
            BootError::Verify(e) => write!(f, "verify: {e}"),
        }
    }
}

impl core::error::Error for BootError {}

/// The machine [`E820`], [`RESERVED`] and [`CPU_NODES`] describe, with the mem_map's
/// range ([`mem_map_range`]) reserved.
pub fn topology() -> Result<Topology, TopologyError> {
    let mem_map = mem_map_range()?;
    machine(&[mem_map])
}

/// The machine of the map, with `extra` ranges reserved besides [`RESERVED`].
fn machine(extra: &[PfnRange]) -> Result<Topology, TopologyError> {
    let usable: Vec<MemoryRange> = E820
        .iter()
        .map(|&(start, end, node)| MemoryRange::from_bytes(start, end, node))
        .collect();
    let mut reserved: Vec<PfnRange> = RESERVED
        .iter()
        .map(|&(start, end)| PfnRange::covering_bytes(start, end))
        .collect();
    reserved.extend_from_slice(extra);
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 2,
    };
    Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, &CPU_NODES, llc)
}

/// Where the mem_map lives: `Topology::mem_map_bytes` rounded up to whole pages, off the
/// top of node 0's highest usable range (reserving it spans no new page, so the size does
/// not change once it is reserved).
pub fn mem_map_range() -> Result<PfnRange, TopologyError> {
    let bytes = machine(&[])?
        .mem_map_bytes()
        .next_multiple_of(1 << PAGE_SHIFT);
    let top = E820
        .iter()
        .filter(|&&(_, _, node)| node == 0)
        .map(|&(_, end, _)| end)
        .max()
        .unwrap_or(0);
    Ok(PfnRange::covering_bytes(top - bytes, top))
}

/// Descriptors the mem_map storage given to [`boot`] must hold.
pub fn mem_map_pages() -> Result<usize, TopologyError> {
    Ok(topology()?.mem_map_pages() as usize)
}

/// Whether the map makes every page of the `pages` from `pfn` usable and unreserved
/// (neither in [`RESERVED`] nor the mem_map).
pub fn usable(pfn: Pfn, pages: u64) -> bool {
    mem_map_range().is_ok_and(|mem_map| usable_outside(pfn, pages, mem_map))
}

/// [`usable`] with the mem_map's range computed once.
fn usable_outside(pfn: Pfn, pages: u64, mem_map: PfnRange) -> bool {
    let end_pfn = Pfn(pfn.0 + pages);
    let (first, end) = (pfn.0 << PAGE_SHIFT, end_pfn.0 << PAGE_SHIFT);
    let in_ram = E820.iter().any(|&(s, e, _)| s <= first && end <= e);
    let reserved = RESERVED.iter().any(|&(s, e)| first < e && s < end);
    let in_mem_map = mem_map.start < end_pfn && pfn < mem_map.end;
    in_ram && !reserved && !in_mem_map
}

/// Frames of size `S`, through the `x86_64` crate's trait, each checked against the map.
fn take_frames<S: PageSize, F: FrameAllocator<S>>(
    frames: &mut F,
    count: usize,
    held: &mut Vec<PhysFrame<S>>,
    mem_map: PfnRange,
) -> Result<(), BootError> {
    for _ in 0..count {
        let frame = frames
            .allocate_frame()
            .ok_or(BootError::NoFrame { bytes: S::SIZE })?;
        let pfn = Pfn(frame.start_address().as_u64() >> PAGE_SHIFT);
        if !usable_outside(pfn, S::SIZE >> PAGE_SHIFT, mem_map) {
            return Err(BootError::Unusable(pfn));
        }
        held.push(frame);
    }
    Ok(())
}

/// Steps 1 to 4 of the module's list. `mem_map` is the storage at [`mem_map_range`]
/// ([`mem_map_pages`] descriptors): the kernel makes it from that range's address, the
/// host test from memory it leaks.
pub fn boot(mem_map: &'static mut [Page]) -> Result<Report, BootError> {
    let mem_map_pfns = mem_map_range().map_err(BootError::Topology)?;
    let topology = topology().map_err(BootError::Topology)?;
    let allocator = PageAllocator::<IrqSpinLock>::with_lock_and_mem_map(
        topology,
        Settings::default(),
        Policy::V6_7,
        mem_map,
    )
    .map_err(BootError::Init)?;
    let mut tables: Vec<PhysFrame<Size4KiB>> = Vec::new();
    let mut huge: Vec<PhysFrame<Size2MiB>> = Vec::new();
    for cpu in 0..CPU_NODES.len() as u32 {
        let mut frames = allocator.frames(Caller::task(cpu), Gfp::KERNEL);
        take_frames(&mut frames, TABLES_PER_CPU, &mut tables, mem_map_pfns)?;
        take_frames(&mut frames, HUGE_PER_CPU, &mut huge, mem_map_pfns)?;
    }
    // A 16 KiB buffer aligned to 64 KiB through mmkit's own trait: an order-4 block.
    let frames = allocator.frames(Caller::task(0), Gfp::KERNEL);
    let layout = Layout::from_size_align(16 << 10, 64 << 10).expect("a valid layout");
    let buffer = frames.alloc_layout(layout).map_err(BootError::Alloc)?;
    if !usable_outside(buffer, 16, mem_map_pfns) {
        return Err(BootError::Unusable(buffer));
    }
    let pages_held = allocated(&allocator)?;

    frames
        .free_layout(buffer, layout)
        .map_err(BootError::Free)?;
    let mut frames = allocator.frames(Caller::task(0), Gfp::KERNEL);
    for frame in tables.iter() {
        // SAFETY: `frame` came from `allocate_frame` above and nothing maps or uses it.
        unsafe { frames.deallocate_frame(*frame) };
    }
    for frame in huge.iter() {
        // SAFETY: as above.
        unsafe { frames.deallocate_frame(*frame) };
    }
    let pages_left = allocated(&allocator)?;
    let zones = allocator
        .zones()
        .iter()
        .filter(|zone| zone.spanned() > 0)
        .map(|zone| ZoneSizes {
            node: zone.node(),
            zone_type: zone.zone_type(),
            start_pfn: zone.start_pfn().0,
            spanned: zone.spanned(),
            present: zone.present(),
            managed: zone.managed(),
        })
        .collect();
    Ok(Report {
        zones,
        frames_4k: tables.len(),
        frames_2m: huge.len(),
        pages_held,
        pages_left,
    })
}

/// Pages allocated in every zone, as `verify()` counts them after checking every page.
fn allocated(allocator: &PageAllocator<IrqSpinLock>) -> Result<u64, BootError> {
    let census = allocator.verify().map_err(BootError::Verify)?;
    Ok(census.iter().map(|zone| zone.allocated).sum())
}
