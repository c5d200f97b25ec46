//! The machine the embedding tests share: a memory map with holes over two nodes, as a
//! kernel's firmware reports one, and mem_map storage outside the allocator's heap.

use mmkit_core::page::Page;
use mmkit_core::page_alloc::NodeId;
use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits};
use mmkit_core::Topology;

/// Usable RAM (first byte, one past the last, node): node 0 has 47 MiB from 1 MiB and
/// 32 MiB from 64 MiB (a 16 MiB hole between them), node 1 has 16 MiB at 4 GiB.
pub const USABLE: [(u64, u64, NodeId); 3] = [
    (0x10_0000, 0x300_0000, 0),
    (0x400_0000, 0x600_0000, 0),
    (0x1_0000_0000, 0x1_0100_0000, 1),
];

/// `cpu_to_node` in firmware's numbering: alternately on each node.
pub const CPU_NODES: [NodeId; 4] = [0, 1, 0, 1];

/// The machine of [`USABLE`] and [`CPU_NODES`], with `reserved` pfn ranges.
pub fn topology(reserved: &[PfnRange]) -> Topology {
    let usable: Vec<MemoryRange> = USABLE
        .iter()
        .map(|&(start, end, node)| MemoryRange::from_bytes(start, end, node))
        .collect();
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 2,
    };
    Topology::from_memory_map(&usable, reserved, ZoneLimits::X86_64, &CPU_NODES, llc)
        .expect("a valid memory map")
}

/// `len` descriptors that live as long as the program, in whatever state `fill` leaves
/// them: what a kernel gets by casting the address of a memory range it carved out.
pub fn leaked_mem_map(len: usize, fill: fn() -> Page) -> &'static mut [Page] {
    Vec::leak((0..len).map(|_| fill()).collect())
}
