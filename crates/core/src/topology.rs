//! The machine an allocator manages: nodes, their zones as pfn ranges, CPUs, and the
//! last-level cache that the PCP's `FREE_HIGH_BATCH` rule reads.
//!
//! Linux learns this at boot (e820/memblock, `free_area_init`, cacheinfo). Embedders build
//! a [`Topology`] from their own firmware tables; [`Topology::x86_64`] lays zones at the
//! x86-64 boundaries (DMA below 16 MiB, DMA32 below 4 GiB) as a PC would.

use alloc::vec::Vec;
use core::fmt;

use crate::page::Pfn;
use crate::page_alloc::{NodeId, ZoneType};

/// One zone: where it lies and how much of it the allocator manages.
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
    /// Pages that exist (`present_pages`); the rest of the span is holes. Present pages come
    /// first in the span.
    pub present: u64,
    /// Pages given to the buddy allocator (`managed_pages`); the first `present − managed`
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
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CacheInfo {
    /// LLC size in bytes.
    pub llc_bytes: u64,
    /// CPUs sharing one LLC (SMT siblings count).
    pub llc_shared_cpus: u32,
}

/// A whole machine: zones, CPUs per node and the LLC.
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Topology {
    zones: Vec<ZoneSpec>,
    node_cpus: Vec<u32>,
    llc: CacheInfo,
    zone_device: bool,
}

/// Links in the mem_map are 32-bit pfns with `u32::MAX` meaning "none".
const PFN_LIMIT: u64 = u32::MAX as u64;
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
        }
    }
}

impl core::error::Error for TopologyError {}

/// A zone's size as a user states it for [`Topology::x86_64`].
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
    /// zone order.
    pub fn new(
        zones: Vec<ZoneSpec>,
        node_cpus: Vec<u32>,
        llc: CacheInfo,
        zone_device: bool,
    ) -> Result<Topology, TopologyError> {
        let topology = Topology {
            zones,
            node_cpus,
            llc,
            zone_device,
        };
        topology.validate()?;
        Ok(topology)
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
        if self.node_cpus.len() > MAX_NUMNODES {
            return Err(TopologyError::TooManyNodes(self.node_cpus.len()));
        }
        let nr_cpus = self
            .node_cpus
            .iter()
            .try_fold(0u32, |sum, &cpus| sum.checked_add(cpus))
            .ok_or(TopologyError::TooManyCpus)?;
        if nr_cpus == 0 {
            return Err(TopologyError::NoCpus);
        }
        if self.llc.llc_shared_cpus == 0 {
            return Err(TopologyError::LlcSharedCpus);
        }
        let mut previous: Option<&ZoneSpec> = None;
        for zone in &self.zones {
            let (node, zone_type) = (zone.node, zone.zone_type);
            if node as usize >= self.node_cpus.len() {
                return Err(TopologyError::UnknownNode(node));
            }
            if zone_type == ZoneType::Device && (!self.zone_device || zone.spanned != 0) {
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
            if let Some(prev) = previous {
                let in_order =
                    prev.node < node || (prev.node == node && prev.zone_type < zone_type);
                if !in_order {
                    return Err(TopologyError::ZoneOrder {
                        node,
                        zone: zone_type,
                    });
                }
                if zone.spanned > 0 && prev.spanned > 0 && zone.start_pfn < prev.end_pfn() {
                    return Err(TopologyError::Overlap {
                        node,
                        zone: zone_type,
                    });
                }
            }
            if zone.spanned > 0 || previous.is_none() {
                previous = Some(zone);
            }
        }
        Ok(())
    }

    /// The zones, node by node, in zone order (only those given).
    pub fn zones(&self) -> &[ZoneSpec] {
        &self.zones
    }

    /// Number of nodes.
    pub fn nr_nodes(&self) -> usize {
        self.node_cpus.len()
    }

    /// CPUs on `node`.
    pub fn node_cpus(&self, node: NodeId) -> u32 {
        self.node_cpus.get(node as usize).copied().unwrap_or(0)
    }

    /// All CPUs.
    pub fn nr_cpus(&self) -> u32 {
        self.node_cpus.iter().sum()
    }

    /// The node of `cpu` (CPUs are numbered node by node).
    pub fn cpu_node(&self, cpu: u32) -> Option<NodeId> {
        let mut first = 0;
        for (node, &count) in self.node_cpus.iter().enumerate() {
            if cpu < first + count {
                return Some(node as NodeId);
            }
            first += count;
        }
        None
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
