//! Firmware's memory map, e820 style, and the topology mmkit-core builds from it.
//!
//! Linux counterpart: `arch/x86/kernel/e820.c` hands the usable ranges to memblock
//! (`e820__memblock_setup`) and keeps the others out; `free_area_init` then sizes the zones
//! from memblock. Here the usable ranges become [`MemoryRange`]s and every other range a
//! reserved [`PfnRange`], and [`Topology::from_memory_map`] does the sizing.

use alloc::vec::Vec;

use mmkit_core::page_alloc::NodeId;
use mmkit_core::topology::CacheInfo;
use mmkit_core::topology::MemoryRange;
use mmkit_core::topology::PfnRange;
use mmkit_core::topology::ZoneLimits;
use mmkit_core::Topology;
use mmkit_core::TopologyError;

/// What firmware says a physical range holds (the e820 types a kernel meets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// RAM the kernel may use (e820 type 1).
    Usable,
    /// Firmware's own (type 2): the BIOS, the EBDA, memory-mapped devices.
    Reserved,
    /// ACPI tables, usable once parsed (type 3); kept here, as a kernel does until then.
    AcpiReclaimable,
    /// ACPI non-volatile storage (type 4).
    AcpiNvs,
    /// Bad memory (type 5).
    Unusable,
}

/// One entry of the memory map: physical bytes `start..end` of NUMA node `node` (from the
/// SRAT; 0 on a machine without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// What the range holds.
    pub kind: RegionKind,
    /// The node the range belongs to.
    pub node: NodeId,
}

impl Region {
    /// Usable RAM `start..end` of `node`.
    pub const fn usable(start: u64, end: u64, node: NodeId) -> Region {
        Region {
            start,
            end,
            kind: RegionKind::Usable,
            node,
        }
    }

    /// A range of `kind` that is not usable RAM.
    pub const fn other(start: u64, end: u64, kind: RegionKind) -> Region {
        Region {
            start,
            end,
            kind,
            node: 0,
        }
    }
}

/// The usable ranges of `map`, as the core takes them: whole pages inside each range.
pub fn usable_ranges(map: &[Region]) -> Vec<MemoryRange> {
    map.iter()
        .filter(|region| region.kind == RegionKind::Usable)
        .map(|region| MemoryRange::from_bytes(region.start, region.end, region.node))
        .collect()
}

/// The pages `map` keeps from the allocator: every page a non-usable range touches
/// (`memblock_reserve` keeps whole pages), then `extra` (the kernel image, the mem_map).
pub fn reserved_ranges(map: &[Region], extra: &[PfnRange]) -> Vec<PfnRange> {
    map.iter()
        .filter(|region| region.kind != RegionKind::Usable)
        .map(|region| PfnRange::covering_bytes(region.start, region.end))
        .chain(extra.iter().copied())
        .collect()
}

/// The machine of `map` on x86-64 (DMA below 16 MiB, DMA32 below 4 GiB), with
/// `cpu_nodes[cpu]` the node of each CPU in firmware's numbering, and `extra` pages
/// reserved besides the map's own.
pub fn topology(
    map: &[Region],
    extra: &[PfnRange],
    cpu_nodes: &[NodeId],
    llc: CacheInfo,
) -> Result<Topology, TopologyError> {
    let usable = usable_ranges(map);
    let reserved = reserved_ranges(map, extra);
    Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, cpu_nodes, llc)
}
