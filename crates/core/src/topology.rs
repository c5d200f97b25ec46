//! The machine an allocator manages: nodes, their zones as pfn ranges, CPUs, and the
//! last-level cache that the PCP's `FREE_HIGH_BATCH` rule reads.
//!
//! Linux learns this at boot (e820/memblock, `free_area_init`, cacheinfo). Embedders build
//! a [`Topology`] from their own firmware tables in one of three ways:
//!
//! - [`Topology::from_memory_map`]: usable and reserved ranges as e820 or a device tree
//!   gives them, in any order, and a CPU → node table in firmware's numbering. Zones are cut
//!   at the architecture's limits ([`ZoneLimits`]) and each spans, as Linux's
//!   `zone_spanned_pages_in_node` computes it, its part of its node's span; the holes
//!   between usable ranges stay in the span, marked as holes in the mem_map, and
//!   `present = spanned − holes` (`zone_absent_pages_in_node`), `managed = present −
//!   reserved`.
//! - [`Topology::x86_64`]: zone sizes laid at the x86-64 boundaries (DMA below 16 MiB,
//!   DMA32 below 4 GiB) as a PC would, reserved pages first and holes at the end of each.
//! - [`Topology::new`]: explicit zone ranges with the same layout.
//!
//! Either way the result is a list of zones and, for each, the runs of present pages
//! ([`PresentRange`]) the mem_map marks and boot frees.

use alloc::vec::Vec;
use core::fmt;

use crate::page::Pfn;
use crate::page_alloc::{NodeId, ZoneType};

/// One zone: where it lies and how much of it the allocator manages.
///
/// ```
/// use mmkit_core::topology::CacheInfo;
/// use mmkit_core::topology::ZoneSpec;
/// use mmkit_core::{Pfn, Topology, ZoneType};
///
/// // A 64 MiB Normal zone at 4 GiB whose last 1 MiB is a hole and 1 MiB more is reserved.
/// let spec = ZoneSpec {
///     node: 0,
///     zone_type: ZoneType::Normal,
///     start_pfn: Pfn(0x10_0000),
///     spanned: 16_384,
///     present: 16_128,
///     managed: 15_872,
/// };
/// assert_eq!(spec.end_pfn(), Pfn(0x10_4000));
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::new(vec![spec], vec![1], llc, false)?;
/// assert_eq!(topology.zones(), &[spec]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ZoneSpec {
    /// The node the zone belongs to.
    pub node: NodeId,
    /// Its type.
    pub zone_type: ZoneType,
    /// First pfn spanned.
    pub start_pfn: Pfn,
    /// Pfns spanned, holes included (`spanned_pages`).
    pub spanned: u64,
    /// Pages that exist (`present_pages`); the rest of the span is holes. Where they lie is
    /// the topology's [`PresentRange`]s: [`Topology::new`] puts them first in the span,
    /// [`Topology::from_memory_map`] where the memory map says.
    pub present: u64,
    /// Pages given to the buddy allocator (`managed_pages`); the other `present − managed`
    /// present pages stay reserved.
    pub managed: u64,
}

impl ZoneSpec {
    /// One past the last pfn spanned.
    pub fn end_pfn(&self) -> Pfn {
        self.start_pfn.add(self.spanned)
    }
}

/// The last-level cache as cacheinfo reports it for every CPU.
///
/// ```
/// use mmkit_core::CacheInfo;
///
/// // 32 MiB of L3 shared by 16 cores with two SMT threads each.
/// let llc = CacheInfo { llc_bytes: 32 << 20, llc_shared_cpus: 32 };
/// assert_eq!(llc.llc_bytes / u64::from(llc.llc_shared_cpus), 1 << 20);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CacheInfo {
    /// LLC size in bytes.
    pub llc_bytes: u64,
    /// CPUs sharing one LLC (SMT siblings count).
    pub llc_shared_cpus: u32,
}

/// Pfns `start..end`.
///
/// ```
/// use mmkit_core::{Pfn, PfnRange};
///
/// // Usable memory keeps whole pages only; a reservation keeps every page it touches.
/// assert_eq!(PfnRange::within_bytes(0x1800, 0x5800), PfnRange::new(Pfn(2), Pfn(5)));
/// assert_eq!(PfnRange::covering_bytes(0x1800, 0x5800), PfnRange::new(Pfn(1), Pfn(6)));
/// assert_eq!(PfnRange::within_bytes(0x1800, 0x5800).pages(), 3);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PfnRange {
    /// First pfn.
    pub start: Pfn,
    /// One past the last pfn.
    pub end: Pfn,
}

impl PfnRange {
    /// Pfns `start..end`.
    pub const fn new(start: Pfn, end: Pfn) -> PfnRange {
        PfnRange { start, end }
    }

    /// The whole pages inside the bytes `start..end`: `PFN_UP(start)..PFN_DOWN(end)`, as
    /// memblock takes usable memory. A range inside one page is empty.
    pub fn within_bytes(start: u64, end: u64) -> PfnRange {
        let first = start.div_ceil(PAGE_BYTES);
        let last = end / PAGE_BYTES;
        PfnRange::new(Pfn(first), Pfn(last.max(first)))
    }

    /// The pages the bytes `start..end` touch: `PFN_DOWN(start)..PFN_UP(end)`, as
    /// `memblock_reserve` keeps whole pages from the buddy allocator.
    pub fn covering_bytes(start: u64, end: u64) -> PfnRange {
        let first = start / PAGE_BYTES;
        PfnRange::new(Pfn(first), Pfn(end.div_ceil(PAGE_BYTES).max(first)))
    }

    /// Pfns in the range.
    pub fn pages(&self) -> u64 {
        self.end.0.saturating_sub(self.start.0)
    }

    /// Whether it holds no pfn.
    pub fn is_empty(&self) -> bool {
        self.pages() == 0
    }

    /// The pfns both ranges hold (empty, at `self.start`, when none).
    fn intersect(&self, other: &PfnRange) -> PfnRange {
        let start = self.start.max(other.start);
        PfnRange::new(start, self.end.min(other.end).max(start))
    }
}

impl fmt::Display for PfnRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfns {:#x}..{:#x}", self.start.0, self.end.0)
    }
}

/// Usable memory of one node, as one entry of e820 or a device tree's `memory` node gives
/// it (memblock's `memblock.memory`).
///
/// ```
/// use mmkit_core::{MemoryRange, Pfn};
///
/// // e820's first entry on a PC: 0x1000..0x9fc00 usable, on node 0.
/// let low = MemoryRange::from_bytes(0x1000, 0x9_fc00, 0);
/// assert_eq!((low.pfns.start, low.pfns.end, low.node), (Pfn(1), Pfn(0x9f), 0));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MemoryRange {
    /// The pfns.
    pub pfns: PfnRange,
    /// The node they belong to (the SRAT's or device tree's proximity domain).
    pub node: NodeId,
}

impl MemoryRange {
    /// Pfns `start..end` of `node`.
    pub const fn new(start: Pfn, end: Pfn, node: NodeId) -> MemoryRange {
        MemoryRange {
            pfns: PfnRange::new(start, end),
            node,
        }
    }

    /// The whole pages inside the physical bytes `start..end` of `node`
    /// ([`PfnRange::within_bytes`]).
    pub fn from_bytes(start: u64, end: u64, node: NodeId) -> MemoryRange {
        MemoryRange {
            pfns: PfnRange::within_bytes(start, end),
            node,
        }
    }
}

/// Where each zone type ends: the architecture's `max_zone_pfn[]` that Linux passes to
/// `free_area_init`. ZONE_DMA is `0..dma_end`, ZONE_DMA32 `dma_end..dma32_end`, ZONE_NORMAL
/// the rest. An architecture without a zone gives it no pfns (its end equals the previous
/// zone's); ZONE_MOVABLE (`kernelcore=`, `movablecore=`) is not carved out.
///
/// ```
/// use mmkit_core::{CacheInfo, MemoryRange, Topology, ZoneLimits, ZoneType};
///
/// // 64 MiB at 4 GiB on a machine whose devices all reach every address: one Normal zone.
/// let usable = [MemoryRange::from_bytes(4 << 30, (4 << 30) + (64 << 20), 0)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// let machine = Topology::from_memory_map(&usable, &[], ZoneLimits::NORMAL_ONLY, &[0], llc)?;
/// let types: Vec<ZoneType> = machine.zones().iter().map(|z| z.zone_type).collect();
/// assert_eq!(types, [ZoneType::Normal]);
/// # Ok::<(), mmkit_core::TopologyError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ZoneLimits {
    /// One past ZONE_DMA's last pfn.
    pub dma_end: Pfn,
    /// One past ZONE_DMA32's last pfn.
    pub dma32_end: Pfn,
}

impl ZoneLimits {
    /// x86-64: ZONE_DMA below 16 MiB, ZONE_DMA32 below 4 GiB.
    pub const X86_64: ZoneLimits = ZoneLimits {
        dma_end: Pfn(X86_DMA_END),
        dma32_end: Pfn(X86_DMA32_END),
    };

    /// Every page in ZONE_NORMAL: a machine without DMA-limited devices.
    pub const NORMAL_ONLY: ZoneLimits = ZoneLimits {
        dma_end: Pfn(0),
        dma32_end: Pfn(0),
    };

    /// The pfns zone type `zone_type` may hold on any node (`arch_zone_lowest_possible_pfn`
    /// … `arch_zone_highest_possible_pfn`).
    fn range(&self, zone_type: ZoneType) -> PfnRange {
        match zone_type {
            ZoneType::Dma => PfnRange::new(Pfn(0), self.dma_end),
            ZoneType::Dma32 => PfnRange::new(self.dma_end, self.dma32_end),
            ZoneType::Normal => PfnRange::new(self.dma32_end, Pfn(u64::MAX)),
            ZoneType::Movable | ZoneType::Device => PfnRange::new(Pfn(0), Pfn(0)),
        }
    }
}

/// A run of a zone's present pages: managed (boot gives them to the buddy allocator) or
/// reserved (present, never managed: the kernel's image, firmware tables, the mem_map
/// itself). A zone's spanned pfns outside its present ranges are holes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PresentRange {
    /// The pfns.
    pub pfns: PfnRange,
    /// Reserved (`memblock.reserved`) rather than managed.
    pub reserved: bool,
}

/// Which node each CPU belongs to.
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
enum CpuNodes {
    /// CPUs per node, numbered node by node: node 0's first, then node 1's, …
    Grouped(Vec<u32>),
    /// `cpu_to_node` in firmware's numbering: entry `cpu` is that CPU's node.
    Table(Vec<NodeId>),
}

/// A whole machine: zones and where their present pages lie, CPUs and their nodes, and
/// the LLC.
///
/// A kernel builds it from firmware's memory map ([`Topology::from_memory_map`]); a test
/// or a simulation from zone sizes laid out as on a PC ([`Topology::x86_64`]) or from
/// explicit spans ([`Topology::new`]). A topology is checked when it is built: zones in
/// order, inside their architectural limits, CPUs on nodes that exist.
///
/// ```
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Topology, ZoneType};
///
/// // Two nodes of 4 CPUs each; node 0 has DMA32 (1 GiB) and Normal (1 GiB), node 1
/// // Normal (2 GiB).
/// let zones = [
///     ZoneSize::managed(0, ZoneType::Dma32, 1 << 18),
///     ZoneSize::managed(0, ZoneType::Normal, 1 << 18),
///     ZoneSize::managed(1, ZoneType::Normal, 1 << 19),
/// ];
/// let llc = CacheInfo { llc_bytes: 32 << 20, llc_shared_cpus: 4 };
/// let topology = Topology::x86_64(&zones, vec![4, 4], llc, false)?;
/// assert_eq!((topology.nr_nodes(), topology.nr_cpus()), (2, 8));
/// assert_eq!(topology.cpu_node(5), Some(1));
///
/// // Zones out of order are refused.
/// let backwards = [zones[1], zones[0]];
/// assert!(Topology::x86_64(&backwards, vec![4], llc, false).is_err());
/// # Ok::<(), mmkit_core::TopologyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Topology {
    zones: Vec<ZoneSpec>,
    /// Every zone's present ranges, in pfn order: no two overlap, and each lies inside
    /// one zone's span.
    present: Vec<PresentRange>,
    nr_nodes: usize,
    cpus: CpuNodes,
    llc: CacheInfo,
    zone_device: bool,
}

/// Links in the mem_map are 32-bit pfns with `u32::MAX` meaning "none".
const PFN_LIMIT: u64 = u32::MAX as u64;
/// Bytes in a page frame.
const PAGE_BYTES: u64 = 4096;
/// x86-64 boundaries: ZONE_DMA ends at 16 MiB, ZONE_DMA32 at 4 GiB.
const X86_DMA_END: u64 = (16 << 20) >> 12;
const X86_DMA32_END: u64 = (4 << 30) >> 12;
/// Nodes start on a memory-section boundary (x86-64 `SECTION_SIZE_BITS` 27: 128 MiB).
const X86_SECTION_PAGES: u64 = (128 << 20) >> 12;
/// `MAX_NUMNODES` of the largest x86-64 configuration: `CONFIG_NODES_SHIFT` is at most 10,
/// so 1 << 10 nodes. Every node has a zonelist naming every node's zones, so the zonelists
/// grow with the square of the nodes; node ids also fit [`NodeId`] with room to spare.
pub const MAX_NUMNODES: usize = 1 << 10;

/// A machine description that cannot be built.
///
/// ```
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Topology, TopologyError, ZoneType};
///
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// assert_eq!(Topology::x86_64(&[], vec![1], llc, false).map(|_| ()), Err(TopologyError::NoZones));
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// assert_eq!(Topology::x86_64(&zones, vec![], llc, false).map(|_| ()), Err(TopologyError::NoCpus));
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum TopologyError {
    /// No zone at all.
    NoZones,
    /// No CPU at all.
    NoCpus,
    /// More nodes than [`MAX_NUMNODES`].
    TooManyNodes(usize),
    /// More CPUs than a CPU number ([`u32`]) can count.
    TooManyCpus,
    /// A zone's node has no entry in the CPUs-per-node list.
    UnknownNode(NodeId),
    /// Zones of a node must be given once each, in zone order.
    ZoneOrder {
        /// The node.
        node: NodeId,
        /// The zone out of order.
        zone: ZoneType,
    },
    /// `managed ≤ present ≤ spanned` does not hold.
    Sizes {
        /// The node.
        node: NodeId,
        /// The zone.
        zone: ZoneType,
    },
    /// Two zones overlap.
    Overlap {
        /// The node of the later zone.
        node: NodeId,
        /// The later zone.
        zone: ZoneType,
    },
    /// A zone ends beyond the pfns the mem_map can link (2^32 − 1).
    TooLarge {
        /// The node.
        node: NodeId,
        /// The zone.
        zone: ZoneType,
    },
    /// A zone does not fit below its x86-64 boundary.
    Boundary {
        /// The node.
        node: NodeId,
        /// The zone.
        zone: ZoneType,
        /// Its last allowed pfn + 1.
        limit: Pfn,
    },
    /// ZONE_DEVICE holds no allocatable memory, and exists only when configured.
    DeviceZone,
    /// `llc_shared_cpus` is 0.
    LlcSharedCpus,
    /// A memory range that ends before it starts.
    ReversedRange(PfnRange),
    /// Two usable memory ranges share pfns.
    RangesOverlap(PfnRange, PfnRange),
    /// Two nodes' memory interleaves: each node's span (its first to its last usable pfn)
    /// must lie outside every other's. Linux allows it; the pfn → zone lookup here does not.
    NodesInterleave(NodeId, NodeId),
    /// ZONE_DMA ends after ZONE_DMA32.
    ZoneLimits(ZoneLimits),
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::NoZones => write!(f, "no zones: give at least one zone"),
            TopologyError::NoCpus => write!(f, "no CPUs: give at least one CPU"),
            TopologyError::TooManyNodes(nodes) => write!(
                f,
                "{nodes} nodes are more than Linux supports (MAX_NUMNODES {MAX_NUMNODES})"
            ),
            TopologyError::TooManyCpus => {
                write!(f, "the CPUs of all nodes add up to more than 2^32 - 1")
            }
            TopologyError::UnknownNode(n) => write!(f, "node {n} has no CPU count"),
            TopologyError::ZoneOrder { node, zone } => write!(
                f,
                "node {node}: zone {zone} repeated or out of order (DMA, DMA32, Normal, Movable)"
            ),
            TopologyError::Sizes { node, zone } => write!(
                f,
                "node {node} zone {zone}: need managed <= present <= spanned"
            ),
            TopologyError::Overlap { node, zone } => {
                write!(f, "node {node} zone {zone} overlaps an earlier zone")
            }
            TopologyError::TooLarge { node, zone } => write!(
                f,
                "node {node} zone {zone} ends beyond pfn 2^32-1 (16 TiB), the mem_map limit"
            ),
            TopologyError::Boundary { node, zone, limit } => write!(
                f,
                "node {node} zone {zone} does not fit below pfn {limit} ({} MiB)",
                limit.0 >> 8
            ),
            TopologyError::DeviceZone => write!(
                f,
                "ZONE_DEVICE holds no allocatable memory and needs zone_device configured"
            ),
            TopologyError::LlcSharedCpus => write!(f, "the LLC must be shared by at least one CPU"),
            TopologyError::ReversedRange(range) => {
                write!(f, "memory range {range} ends before it starts")
            }
            TopologyError::RangesOverlap(first, second) => {
                write!(f, "memory ranges {first} and {second} overlap")
            }
            TopologyError::NodesInterleave(node, other) => write!(
                f,
                "the memory of nodes {node} and {other} interleaves: give each node's ranges \
                 outside the other's span"
            ),
            TopologyError::ZoneLimits(limits) => write!(
                f,
                "ZONE_DMA ends at pfn {:#x}, after ZONE_DMA32's end {:#x}",
                limits.dma_end.0, limits.dma32_end.0
            ),
        }
    }
}

impl core::error::Error for TopologyError {}

/// A zone's size as a user states it for [`Topology::x86_64`].
///
/// ```
/// use mmkit_core::{ZoneSize, ZoneType};
///
/// // 1 GiB of DMA32 on node 0, every page present and managed.
/// let dma32 = ZoneSize::managed(0, ZoneType::Dma32, 1 << 18);
/// assert_eq!((dma32.spanned, dma32.present, dma32.managed), (1 << 18, 1 << 18, 1 << 18));
/// // The same zone with 256 reserved pages (the kernel image) and a 1 MiB hole at its end.
/// let booted = ZoneSize { managed: (1 << 18) - 512, present: (1 << 18) - 256, ..dma32 };
/// assert!(booted.managed <= booted.present && booted.present <= booted.spanned);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ZoneSize {
    /// The node.
    pub node: NodeId,
    /// The zone type.
    pub zone_type: ZoneType,
    /// Managed pages.
    pub managed: u64,
    /// Present pages (≥ managed).
    pub present: u64,
    /// Spanned pages (≥ present).
    pub spanned: u64,
}

impl ZoneSize {
    /// A zone whose every spanned page is present and managed.
    pub fn managed(node: NodeId, zone_type: ZoneType, managed: u64) -> ZoneSize {
        ZoneSize {
            node,
            zone_type,
            managed,
            present: managed,
            spanned: managed,
        }
    }
}

impl Topology {
    /// A machine from explicit zone ranges. Zones are listed node by node, each node's in
    /// zone order; in each zone the `present − managed` reserved pages come first, then
    /// the managed pages, then the holes. CPUs are numbered node by node: `node_cpus[n]`
    /// CPUs on node `n` ([`Topology::with_cpu_nodes`] takes firmware's numbering instead).
    pub fn new(
        zones: Vec<ZoneSpec>,
        node_cpus: Vec<u32>,
        llc: CacheInfo,
        zone_device: bool,
    ) -> Result<Topology, TopologyError> {
        let mut topology = Topology {
            zones,
            present: Vec::new(),
            nr_nodes: node_cpus.len(),
            cpus: CpuNodes::Grouped(node_cpus),
            llc,
            zone_device,
        };
        topology.validate()?;
        topology.present = topology
            .zones
            .iter()
            .flat_map(|zone| {
                let reserved_end = zone.start_pfn.add(zone.present - zone.managed);
                [
                    PresentRange {
                        pfns: PfnRange::new(zone.start_pfn, reserved_end),
                        reserved: true,
                    },
                    PresentRange {
                        pfns: PfnRange::new(reserved_end, zone.start_pfn.add(zone.present)),
                        reserved: false,
                    },
                ]
            })
            .filter(|range| !range.pfns.is_empty())
            .collect();
        // Zones are validated apart and in order, so their ranges are too.
        topology
            .present
            .sort_unstable_by_key(|range| range.pfns.start);
        Ok(topology)
    }

    /// A machine from a firmware memory map, as Linux builds its zones from memblock
    /// (`free_area_init`):
    ///
    /// - `usable`: RAM ranges (e820 type 1, device tree `memory` nodes) in any order. Empty
    ///   ranges are dropped; overlapping ones are refused.
    /// - `reserved`: pages that exist but stay out of the buddy allocator (the kernel image,
    ///   the initrd, the mem_map's own storage: `memblock_reserve`). Parts outside usable
    ///   memory are ignored, and reserved ranges may overlap each other.
    /// - `limits`: where the zone types end ([`ZoneLimits::X86_64`]).
    /// - `cpu_nodes`: entry `cpu` is CPU `cpu`'s node, in firmware's order (CPUs of a node
    ///   need not be numbered together).
    ///
    /// Each node spans its first to its last usable pfn, and each zone the part of its
    /// node's span inside its limits (`zone_spanned_pages_in_node`), holes included: the
    /// holes are marked in the mem_map and never handed out, `present` counts the usable
    /// pages of the span and `managed` the present ones not reserved. The nodes are
    /// `0..=` the highest node named by a range or a CPU; a node may have no memory or no
    /// CPU. Nodes whose spans interleave are refused.
    ///
    /// ```
    /// use mmkit_core::page_alloc::ZoneType;
    /// use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, Topology, ZoneLimits};
    ///
    /// // A PC's e820: 636 KiB below the VGA hole, then RAM up to the PCI hole at 3 GiB and
    /// // on above 4 GiB. Firmware keeps page 0; the kernel keeps the first MiB.
    /// let usable = [
    ///     MemoryRange::from_bytes(0x1_0000_0000, 0x2_4000_0000, 0),
    ///     MemoryRange::from_bytes(0x1000, 0x9_fc00, 0),
    ///     MemoryRange::from_bytes(0x10_0000, 0xc000_0000, 0),
    /// ];
    /// let reserved = [PfnRange::covering_bytes(0, 0x10_0000)];
    /// let llc = CacheInfo { llc_bytes: 32 << 20, llc_shared_cpus: 2 };
    /// let machine = Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, &[0, 0], llc)?;
    ///
    /// let dma = machine.zones().iter().find(|z| z.zone_type == ZoneType::Dma).unwrap();
    /// assert_eq!((dma.start_pfn.0, dma.spanned, dma.present, dma.managed), (1, 4095, 3998, 3840));
    /// let dma32 = machine.zones().iter().find(|z| z.zone_type == ZoneType::Dma32).unwrap();
    /// // DMA32 spans up to 4 GiB; the PCI hole is in its span but not present.
    /// assert_eq!((dma32.spanned, dma32.present), (1_044_480, 782_336));
    /// # Ok::<(), mmkit_core::TopologyError>(())
    /// ```
    pub fn from_memory_map(
        usable: &[MemoryRange],
        reserved: &[PfnRange],
        limits: ZoneLimits,
        cpu_nodes: &[NodeId],
        llc: CacheInfo,
    ) -> Result<Topology, TopologyError> {
        if limits.dma_end > limits.dma32_end {
            return Err(TopologyError::ZoneLimits(limits));
        }
        let ranges = memblock_memory(usable)?;
        let reserved = memblock_reserved(reserved)?;
        let nr_nodes = ranges
            .iter()
            .map(|range| range.node)
            .chain(cpu_nodes.iter().copied())
            .max()
            .map_or(0, |node| usize::from(node) + 1);
        if nr_nodes > MAX_NUMNODES {
            return Err(TopologyError::TooManyNodes(nr_nodes));
        }
        let node_spans = node_spans(&ranges, nr_nodes)?;
        let mut zones = Vec::new();
        let mut present = Vec::new();
        for (node, span) in node_spans.iter().enumerate() {
            let node = node as NodeId;
            let Some(span) = span else { continue };
            for zone_type in [ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal] {
                let zone_span = span.intersect(&limits.range(zone_type));
                if zone_span.is_empty() {
                    continue;
                }
                let first = present.len();
                for range in ranges.iter().filter(|range| range.node == node) {
                    let usable = range.pfns.intersect(&zone_span);
                    split_reserved(usable, &reserved, &mut present);
                }
                let runs = &present[first..];
                let present_pages: u64 = runs.iter().map(|run| run.pfns.pages()).sum();
                let reserved_pages: u64 = runs
                    .iter()
                    .filter(|run| run.reserved)
                    .map(|run| run.pfns.pages())
                    .sum();
                zones.push(ZoneSpec {
                    node,
                    zone_type,
                    start_pfn: zone_span.start,
                    spanned: zone_span.pages(),
                    present: present_pages,
                    managed: present_pages - reserved_pages,
                });
            }
        }
        present.sort_unstable_by_key(|range| range.pfns.start);
        let topology = Topology {
            zones,
            present,
            nr_nodes,
            cpus: CpuNodes::Table(cpu_nodes.to_vec()),
            llc,
            zone_device: false,
        };
        topology.validate()?;
        Ok(topology)
    }

    /// The same machine with `CONFIG_ZONE_DEVICE` modelled or not: a fifth zone type per
    /// node, always empty (as distribution kernels have it).
    pub fn with_zone_device(mut self, zone_device: bool) -> Topology {
        self.zone_device = zone_device;
        self
    }

    /// The same machine with `node_cpus[n]` CPUs on node `n`, numbered node by node as
    /// [`Topology::new`] numbers them; nodes past the list have none, and a node past the
    /// machine's memory is a node without memory.
    pub fn with_node_cpus(mut self, node_cpus: Vec<u32>) -> Result<Topology, TopologyError> {
        self.nr_nodes = self.nr_nodes.max(node_cpus.len());
        self.cpus = CpuNodes::Grouped(node_cpus);
        self.validate()?;
        Ok(self)
    }

    /// The same machine with CPU `cpu` on node `cpu_nodes[cpu]`: firmware's numbering, in
    /// which a node's CPUs need not be consecutive (a two-socket machine's ACPI tables
    /// often alternate sockets). Every node must exist.
    pub fn with_cpu_nodes(mut self, cpu_nodes: Vec<NodeId>) -> Result<Topology, TopologyError> {
        self.cpus = CpuNodes::Table(cpu_nodes);
        self.validate()?;
        Ok(self)
    }

    /// A PC-like machine: node 0's DMA starts at pfn 1 (pfn 0 is firmware's) and must end
    /// below 16 MiB; DMA32 starts at 16 MiB and must end below 4 GiB; Normal starts at 4 GiB
    /// or after DMA32; Movable follows Normal; each further node starts on the next 128 MiB
    /// section boundary.
    pub fn x86_64(
        sizes: &[ZoneSize],
        node_cpus: Vec<u32>,
        llc: CacheInfo,
        zone_device: bool,
    ) -> Result<Topology, TopologyError> {
        let mut zones = Vec::with_capacity(sizes.len());
        let mut cursor = 1u64;
        let mut node = sizes.first().map(|s| s.node).unwrap_or(0);
        for (i, size) in sizes.iter().enumerate() {
            if let Some(prev) = i.checked_sub(1).map(|p| sizes[p]) {
                let in_order = prev.node < size.node
                    || (prev.node == size.node && prev.zone_type < size.zone_type);
                if !in_order {
                    return Err(TopologyError::ZoneOrder {
                        node: size.node,
                        zone: size.zone_type,
                    });
                }
            }
            if size.node != node {
                node = size.node;
                cursor = cursor.next_multiple_of(X86_SECTION_PAGES);
            }
            let (floor, limit) = match size.zone_type {
                ZoneType::Dma => (1, Some(X86_DMA_END)),
                ZoneType::Dma32 => (X86_DMA_END, Some(X86_DMA32_END)),
                ZoneType::Normal => (X86_DMA32_END, None),
                ZoneType::Movable | ZoneType::Device => (0, None),
            };
            let start = cursor.max(floor);
            let end = start.saturating_add(size.spanned);
            if let Some(limit) = limit {
                if end > limit {
                    return Err(TopologyError::Boundary {
                        node,
                        zone: size.zone_type,
                        limit: Pfn(limit),
                    });
                }
            }
            zones.push(ZoneSpec {
                node,
                zone_type: size.zone_type,
                start_pfn: Pfn(start),
                spanned: size.spanned,
                present: size.present,
                managed: size.managed,
            });
            cursor = end;
        }
        Topology::new(zones, node_cpus, llc, zone_device)
    }

    fn validate(&self) -> Result<(), TopologyError> {
        if self.zones.is_empty() {
            return Err(TopologyError::NoZones);
        }
        if self.nr_nodes > MAX_NUMNODES {
            return Err(TopologyError::TooManyNodes(self.nr_nodes));
        }
        let nr_cpus = match &self.cpus {
            CpuNodes::Grouped(counts) => counts
                .iter()
                .try_fold(0u32, |sum, &cpus| sum.checked_add(cpus))
                .ok_or(TopologyError::TooManyCpus)?,
            CpuNodes::Table(nodes) => {
                if let Some(&node) = nodes.iter().find(|&&n| usize::from(n) >= self.nr_nodes) {
                    return Err(TopologyError::UnknownNode(node));
                }
                u32::try_from(nodes.len()).map_err(|_| TopologyError::TooManyCpus)?
            }
        };
        if nr_cpus == 0 {
            return Err(TopologyError::NoCpus);
        }
        if self.llc.llc_shared_cpus == 0 {
            return Err(TopologyError::LlcSharedCpus);
        }
        let mut previous: Option<&ZoneSpec> = None;
        for zone in &self.zones {
            validate_zone(zone, self.nr_nodes, self.zone_device)?;
            if let Some(prev) = previous {
                let in_order = prev.node < zone.node
                    || (prev.node == zone.node && prev.zone_type < zone.zone_type);
                if !in_order {
                    return Err(TopologyError::ZoneOrder {
                        node: zone.node,
                        zone: zone.zone_type,
                    });
                }
            }
            previous = Some(zone);
        }
        // Spans may lie in any address order across nodes (node 1's memory below node
        // 0's), but must not overlap: pfn → zone is one answer.
        let mut spans: Vec<&ZoneSpec> = self.zones.iter().filter(|z| z.spanned > 0).collect();
        spans.sort_unstable_by_key(|z| z.start_pfn);
        if let Some(pair) = spans.windows(2).find(|w| w[1].start_pfn < w[0].end_pfn()) {
            let later = if self.zone_index(pair[0]) > self.zone_index(pair[1]) {
                pair[0]
            } else {
                pair[1]
            };
            return Err(TopologyError::Overlap {
                node: later.node,
                zone: later.zone_type,
            });
        }
        Ok(())
    }

    /// Where `zone` is in the zone list.
    fn zone_index(&self, zone: &ZoneSpec) -> usize {
        self.zones
            .iter()
            .position(|z| core::ptr::eq(z, zone))
            .unwrap_or(usize::MAX)
    }

    /// The zones, node by node, in zone order (only those given).
    pub fn zones(&self) -> &[ZoneSpec] {
        &self.zones
    }

    /// Page descriptors the machine's mem_map holds: one per spanned page of every zone,
    /// holes included (Linux's `struct page` array covers holes too). The length of the
    /// slice [`PageAllocator::with_mem_map`](crate::PageAllocator::with_mem_map) needs.
    pub fn mem_map_pages(&self) -> u64 {
        self.zones
            .iter()
            .map(|zone| zone.spanned)
            .fold(0, u64::saturating_add)
    }

    /// Bytes of the mem_map (16 per spanned page, [`Topology::mem_map_pages`] of them),
    /// saturating: what a kernel reserves out of the memory it manages before building the
    /// allocator, as Linux's `alloc_node_mem_map` takes it from memblock.
    ///
    /// ```
    /// use mmkit_core::topology::{CacheInfo, MemoryRange, ZoneLimits};
    /// use mmkit_core::Topology;
    ///
    /// // 128 MiB from 1 MiB, split into DMA and DMA32 at 16 MiB: a descriptor per page.
    /// let usable = [MemoryRange::from_bytes(1 << 20, 129 << 20, 0)];
    /// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
    /// let machine = Topology::from_memory_map(&usable, &[], ZoneLimits::X86_64, &[0], llc)?;
    /// assert_eq!(machine.mem_map_pages(), (128 << 20) / 4096);
    /// assert_eq!(machine.mem_map_bytes(), machine.mem_map_pages() * 16);
    /// # Ok::<(), mmkit_core::TopologyError>(())
    /// ```
    pub fn mem_map_bytes(&self) -> u64 {
        self.mem_map_pages()
            .saturating_mul(size_of::<crate::page::Page>() as u64)
    }

    /// The present ranges of `zone` (one of [`Topology::zones`], or any zone spanning
    /// nothing), in pfn order. The pfns of its span outside them are holes.
    pub fn present_ranges(&self, zone: &ZoneSpec) -> &[PresentRange] {
        let span = PfnRange::new(zone.start_pfn, zone.end_pfn());
        let first = self.present.partition_point(|r| r.pfns.end <= span.start);
        let len = self.present[first..].partition_point(|r| r.pfns.start < span.end);
        &self.present[first..first + len]
    }

    /// Number of nodes.
    pub fn nr_nodes(&self) -> usize {
        self.nr_nodes
    }

    /// CPUs on `node`.
    pub fn node_cpus(&self, node: NodeId) -> u32 {
        match &self.cpus {
            CpuNodes::Grouped(counts) => counts.get(node as usize).copied().unwrap_or(0),
            CpuNodes::Table(nodes) => nodes.iter().filter(|&&n| n == node).count() as u32,
        }
    }

    /// All CPUs.
    pub fn nr_cpus(&self) -> u32 {
        match &self.cpus {
            CpuNodes::Grouped(counts) => counts.iter().sum(),
            CpuNodes::Table(nodes) => nodes.len() as u32,
        }
    }

    /// The node of `cpu` (`cpu_to_node`), `None` for a CPU the machine does not have.
    pub fn cpu_node(&self, cpu: u32) -> Option<NodeId> {
        match &self.cpus {
            CpuNodes::Grouped(counts) => {
                let mut first = 0;
                for (node, &count) in counts.iter().enumerate() {
                    if cpu < first + count {
                        return Some(node as NodeId);
                    }
                    first += count;
                }
                None
            }
            CpuNodes::Table(nodes) => nodes.get(cpu as usize).copied(),
        }
    }

    /// The last-level cache.
    pub fn llc(&self) -> CacheInfo {
        self.llc
    }

    /// Whether `CONFIG_ZONE_DEVICE` is modelled (a fifth, empty zone type per node).
    pub fn zone_device(&self) -> bool {
        self.zone_device
    }

    /// Number of zone types per node: 4, or 5 with ZONE_DEVICE.
    pub fn nr_zone_types(&self) -> usize {
        if self.zone_device {
            5
        } else {
            4
        }
    }
}

/// One zone's own rules: a known node, ZONE_DEVICE only where configured and empty,
/// `managed ≤ present ≤ spanned`, and an end the mem_map's links can name.
fn validate_zone(zone: &ZoneSpec, nr_nodes: usize, zone_device: bool) -> Result<(), TopologyError> {
    let (node, zone_type) = (zone.node, zone.zone_type);
    if node as usize >= nr_nodes {
        return Err(TopologyError::UnknownNode(node));
    }
    if zone_type == ZoneType::Device && (!zone_device || zone.spanned != 0) {
        return Err(TopologyError::DeviceZone);
    }
    if zone.managed > zone.present || zone.present > zone.spanned {
        return Err(TopologyError::Sizes {
            node,
            zone: zone_type,
        });
    }
    let end = zone.start_pfn.0.checked_add(zone.spanned);
    if end.map_or(true, |end| end >= PFN_LIMIT) {
        return Err(TopologyError::TooLarge {
            node,
            zone: zone_type,
        });
    }
    Ok(())
}

/// `memblock.memory` from firmware's usable ranges: reversed ones refused, empty ones
/// dropped, the rest sorted by pfn with overlaps refused and touching ranges of one node
/// joined (`memblock_add` merges neighbours of the same node).
fn memblock_memory(usable: &[MemoryRange]) -> Result<Vec<MemoryRange>, TopologyError> {
    if let Some(range) = usable.iter().find(|r| r.pfns.start > r.pfns.end) {
        return Err(TopologyError::ReversedRange(range.pfns));
    }
    let mut ranges: Vec<MemoryRange> = usable
        .iter()
        .filter(|r| !r.pfns.is_empty())
        .copied()
        .collect();
    ranges.sort_unstable_by_key(|r| r.pfns.start);
    let mut joined: Vec<MemoryRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match joined.last_mut() {
            Some(last) if range.pfns.start < last.pfns.end => {
                return Err(TopologyError::RangesOverlap(last.pfns, range.pfns));
            }
            Some(last) if range.pfns.start == last.pfns.end && range.node == last.node => {
                last.pfns.end = range.pfns.end;
            }
            _ => joined.push(range),
        }
    }
    Ok(joined)
}

/// `memblock.reserved`: the union of the reserved ranges, sorted and joined.
fn memblock_reserved(reserved: &[PfnRange]) -> Result<Vec<PfnRange>, TopologyError> {
    if let Some(range) = reserved.iter().find(|r| r.start > r.end) {
        return Err(TopologyError::ReversedRange(*range));
    }
    let mut ranges: Vec<PfnRange> = reserved.iter().filter(|r| !r.is_empty()).copied().collect();
    ranges.sort_unstable_by_key(|r| r.start);
    let mut joined: Vec<PfnRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match joined.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => joined.push(range),
        }
    }
    Ok(joined)
}

/// Each node's span, first to last usable pfn (`get_pfn_range_for_nid`); `None` for a
/// node without memory. Refuses nodes whose spans overlap.
fn node_spans(
    ranges: &[MemoryRange],
    nr_nodes: usize,
) -> Result<Vec<Option<PfnRange>>, TopologyError> {
    let mut spans: Vec<Option<PfnRange>> = alloc::vec![None; nr_nodes];
    for range in ranges {
        let span = &mut spans[usize::from(range.node)];
        *span = Some(match *span {
            None => range.pfns,
            Some(s) => PfnRange::new(s.start.min(range.pfns.start), s.end.max(range.pfns.end)),
        });
    }
    let mut by_start: Vec<(PfnRange, NodeId)> = spans
        .iter()
        .enumerate()
        .filter_map(|(node, span)| span.map(|s| (s, node as NodeId)))
        .collect();
    by_start.sort_unstable_by_key(|(span, _)| span.start);
    if let Some(pair) = by_start.windows(2).find(|w| w[1].0.start < w[0].0.end) {
        let (first, second) = (pair[0].1.min(pair[1].1), pair[0].1.max(pair[1].1));
        return Err(TopologyError::NodesInterleave(first, second));
    }
    Ok(spans)
}

/// Append `usable`'s present runs to `out`: the parts inside a reserved range as
/// reserved, the rest as managed, in pfn order. `reserved` is sorted and joined.
fn split_reserved(usable: PfnRange, reserved: &[PfnRange], out: &mut Vec<PresentRange>) {
    let mut cursor = usable.start;
    let first = reserved.partition_point(|r| r.end <= usable.start);
    for held in reserved[first..]
        .iter()
        .take_while(|r| r.start < usable.end)
    {
        let held = held.intersect(&usable);
        push_run(out, PfnRange::new(cursor, held.start), false);
        push_run(out, held, true);
        cursor = held.end;
    }
    push_run(out, PfnRange::new(cursor, usable.end), false);
}

fn push_run(out: &mut Vec<PresentRange>, pfns: PfnRange, reserved: bool) {
    if !pfns.is_empty() {
        out.push(PresentRange { pfns, reserved });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLC: CacheInfo = CacheInfo {
        llc_bytes: 32 << 20,
        llc_shared_cpus: 2,
    };

    #[test]
    fn x86_layout_puts_zones_at_pc_boundaries() {
        let sizes = [
            ZoneSize::managed(0, ZoneType::Dma, 3840),
            ZoneSize::managed(0, ZoneType::Dma32, 772_915),
            ZoneSize::managed(0, ZoneType::Normal, 196_608),
        ];
        let t = Topology::x86_64(&sizes, alloc::vec![2], LLC, false).unwrap();
        let starts: Vec<u64> = t.zones().iter().map(|z| z.start_pfn.0).collect();
        assert_eq!(starts, [1, 4096, 1_048_576]);
    }

    #[test]
    fn more_nodes_than_max_numnodes_or_cpus_than_u32_are_rejected() {
        let zone = ZoneSize::managed(0, ZoneType::Normal, 1024);
        let nodes = alloc::vec![1; MAX_NUMNODES + 1];
        let err = Topology::x86_64(&[zone], nodes, LLC, false).unwrap_err();
        assert_eq!(err, TopologyError::TooManyNodes(MAX_NUMNODES + 1));
        let cpus = alloc::vec![u32::MAX, 1];
        let err = Topology::x86_64(&[zone], cpus, LLC, false).unwrap_err();
        assert_eq!(err, TopologyError::TooManyCpus);
    }

    #[test]
    fn dma_larger_than_16_mib_is_rejected() {
        let sizes = [ZoneSize::managed(0, ZoneType::Dma, 4096)];
        let err = Topology::x86_64(&sizes, alloc::vec![1], LLC, false).unwrap_err();
        assert!(matches!(err, TopologyError::Boundary { .. }));
    }

    #[test]
    fn zones_out_of_order_are_rejected() {
        let sizes = [
            ZoneSize::managed(0, ZoneType::Normal, 1024),
            ZoneSize::managed(0, ZoneType::Dma32, 1024),
        ];
        let err = Topology::x86_64(&sizes, alloc::vec![1], LLC, false).unwrap_err();
        assert_eq!(
            err,
            TopologyError::ZoneOrder {
                node: 0,
                zone: ZoneType::Dma32
            }
        );
    }

    #[test]
    fn managed_above_present_is_rejected() {
        let size = ZoneSize {
            managed: 10,
            present: 5,
            ..ZoneSize::managed(0, ZoneType::Normal, 10)
        };
        let err = Topology::x86_64(&[size], alloc::vec![1], LLC, false).unwrap_err();
        assert!(matches!(err, TopologyError::Sizes { .. }));
    }

    #[test]
    fn second_node_starts_on_a_section_boundary() {
        let sizes = [
            ZoneSize::managed(0, ZoneType::Normal, 1000),
            ZoneSize::managed(1, ZoneType::Normal, 1000),
        ];
        let t = Topology::x86_64(&sizes, alloc::vec![1, 1], LLC, false).unwrap();
        assert_eq!(t.zones()[1].start_pfn.0 % X86_SECTION_PAGES, 0);
        assert_eq!(t.cpu_node(1), Some(1));
        assert_eq!(t.cpu_node(2), None);
    }

    fn normal(node: NodeId, start: u64, pages: u64) -> ZoneSpec {
        ZoneSpec {
            node,
            zone_type: ZoneType::Normal,
            start_pfn: Pfn(start),
            spanned: pages,
            present: pages,
            managed: pages,
        }
    }

    #[test]
    fn zones_may_lie_in_any_address_order_across_nodes_but_not_overlap() {
        let high_node_0 = [normal(0, 0x20000, 1024), normal(1, 0x10000, 1024)];
        let t = Topology::new(high_node_0.to_vec(), alloc::vec![1, 1], LLC, false).unwrap();
        let starts: Vec<_> = t.present.iter().map(|r| r.pfns.start.0).collect();
        assert_eq!(starts, [0x10000, 0x20000]);
        let overlapping = [normal(0, 0x20000, 1024), normal(1, 0x20100, 1024)];
        let err = Topology::new(overlapping.to_vec(), alloc::vec![1, 1], LLC, false);
        assert_eq!(
            err,
            Err(TopologyError::Overlap {
                node: 1,
                zone: ZoneType::Normal
            })
        );
    }

    #[test]
    fn a_cpu_table_naming_an_unknown_node_is_refused() {
        let t = Topology::new(alloc::vec![normal(0, 0, 1024)], alloc::vec![2], LLC, false);
        let err = t.unwrap().with_cpu_nodes(alloc::vec![0, 1]).unwrap_err();
        assert_eq!(err, TopologyError::UnknownNode(1));
    }

    #[test]
    fn reserved_pages_come_first_in_a_zone_given_by_counts() {
        let zone = ZoneSpec {
            managed: 1000,
            present: 1010,
            ..normal(0, 0x1000, 1024)
        };
        let t = Topology::new(alloc::vec![zone], alloc::vec![1], LLC, false).unwrap();
        let runs: Vec<_> = t
            .present_ranges(&zone)
            .iter()
            .map(|r| (r.pfns.start.0, r.pfns.end.0, r.reserved))
            .collect();
        assert_eq!(runs, [(0x1000, 0x100a, true), (0x100a, 0x13f2, false)]);
    }

    #[test]
    fn byte_ranges_round_inward_for_memory_and_outward_for_reservations() {
        let usable = PfnRange::within_bytes(0x1800, 0x4800);
        assert_eq!((usable.start, usable.end), (Pfn(2), Pfn(4)));
        let reserved = PfnRange::covering_bytes(0x1800, 0x4800);
        assert_eq!((reserved.start, reserved.end), (Pfn(1), Pfn(5)));
        assert!(PfnRange::within_bytes(0x1100, 0x1200).is_empty());
    }

    #[test]
    fn no_zones_and_no_cpus_are_errors() {
        assert_eq!(
            Topology::x86_64(&[], alloc::vec![1], LLC, false),
            Err(TopologyError::NoZones)
        );
        let sizes = [ZoneSize::managed(0, ZoneType::Normal, 1000)];
        assert_eq!(
            Topology::x86_64(&sizes, alloc::vec![0], LLC, false),
            Err(TopologyError::NoCpus)
        );
    }
}
