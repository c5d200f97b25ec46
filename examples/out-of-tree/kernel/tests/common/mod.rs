//! The machine the host tests boot: a PC's e820 map with holes on two NUMA nodes, and a
//! buffer standing in for physical memory.

use std::alloc::Layout;

use mmkit_core::page_alloc::NodeId;
use mmkit_core::sync::RawMutex;
use mmkit_core::topology::CacheInfo;
use oot_kernel::memory_map::Region;
use oot_kernel::memory_map::RegionKind;
use oot_kernel::BootInfo;
use oot_kernel::Kernel;

/// Physical memory the map below describes: 48 MiB.
pub const PHYS_BYTES: u64 = 48 << 20;

/// A PC's memory map, out of order as firmware may give it: node 0 has 32 MiB with the
/// VGA hole, an ACPI table inside DMA and a device window inside DMA32; node 1 the 16 MiB
/// above. Page 0 is firmware's (not usable).
pub const MEMORY_MAP: [Region; 9] = [
    Region::usable(0x0200_0000, 0x0300_0000, 1),
    Region::usable(0x0000_1000, 0x0009_fc00, 0),
    Region::other(0x0009_fc00, 0x000a_0000, RegionKind::Reserved),
    Region::other(0x000f_0000, 0x0010_0000, RegionKind::Reserved),
    Region::usable(0x0010_0000, 0x00e0_0000, 0),
    Region::other(0x00e0_0000, 0x00e1_0000, RegionKind::AcpiReclaimable),
    Region::usable(0x00e1_0000, 0x0180_0000, 0),
    Region::other(0x0180_0000, 0x0190_0000, RegionKind::Reserved),
    Region::usable(0x0190_0000, 0x0200_0000, 0),
];

/// The kernel image: 1 MiB to 3 MiB.
pub const KERNEL_IMAGE: (u64, u64) = (0x0010_0000, 0x0030_0000);

/// Four CPUs, as firmware numbers them: alternately on node 0 and node 1.
pub const CPU_NODES: [NodeId; 4] = [0, 1, 0, 1];

/// What the boot loader hands over.
pub fn boot_info() -> BootInfo<'static> {
    BootInfo {
        memory_map: &MEMORY_MAP,
        kernel_image: KERNEL_IMAGE,
        cpu_nodes: &CPU_NODES,
        llc: CacheInfo {
            llc_bytes: 8 << 20,
            llc_shared_cpus: 2,
        },
    }
}

/// A zeroed buffer of `bytes` standing in for physical memory from address 0, leaked
/// (the mem_map in it lives for good); returns its address, the direct map's offset.
pub fn physical_memory(bytes: u64) -> u64 {
    let layout = Layout::from_size_align(bytes as usize, 2 << 20).expect("a valid layout");
    // SAFETY: the layout has a non-zero size.
    let base = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!base.is_null(), "no memory for the physical memory buffer");
    base as u64
}

/// A kernel booted on [`MEMORY_MAP`] with zone and pageset lock `R`, its physical memory
/// a fresh buffer.
pub fn boot<R: RawMutex>() -> Kernel<R> {
    let phys_offset = physical_memory(PHYS_BYTES);
    // SAFETY: the buffer covers physical addresses 0..48 MiB, every usable range of the
    // map, and only this kernel uses it.
    unsafe { oot_kernel::boot(&boot_info(), phys_offset) }.expect("the machine boots")
}
