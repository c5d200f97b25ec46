//! Zones from a firmware memory map (`Topology::from_memory_map`): random usable and
//! reserved range lists, given in random order, are checked against a naive model that
//! classifies every pfn on its own.
//!
//! Linux counterpart: `free_area_init` → `zone_spanned_pages_in_node`,
//! `zone_absent_pages_in_node`, and `memblock_free_all` freeing only what memblock holds
//! and has not reserved. The model is the definition: a zone spans its node's first to
//! last usable pfn cut at the zone limits; a pfn is present when a usable range holds it,
//! managed when no reserved range does; everything else in the span is a hole.

use std::collections::BTreeSet;

use mmkit_core::page_alloc::{Caller, NodeId};
use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits};
use mmkit_core::views::zoneinfo;
use mmkit_core::{
    FreeError, Gfp, Order, PageAllocator, Pfn, Policy, Settings, Topology, TopologyError, ZoneType,
};
use proptest::prelude::*;

const LLC: CacheInfo = CacheInfo {
    llc_bytes: 32 << 20,
    llc_shared_cpus: 2,
};

/// A machine's memory map as the strategy draws it, before shuffling.
#[derive(Clone, Debug)]
struct Map {
    usable: Vec<MemoryRange>,
    reserved: Vec<PfnRange>,
    limits: ZoneLimits,
    cpu_nodes: Vec<NodeId>,
}

/// What the model says of one zone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Expected {
    node: NodeId,
    zone: ZoneType,
    start_pfn: u64,
    spanned: u64,
    present: u64,
    managed: u64,
}

/// Usable ranges laid in address order, each node's ranges together (nodes' spans never
/// interleave), node ids permuted so address order is not id order, gaps of up to two
/// pageblocks between ranges (holes inside a zone and between nodes), then shuffled.
fn maps() -> impl Strategy<Value = Map> {
    let node_ranges = prop::collection::vec((0u64..1100, 1u64..3000), 1..5);
    (
        prop::collection::vec(node_ranges, 1..4),
        0u64..600,
        prop::collection::vec((0u64..30_000, 0u64..700), 0..6),
        (0u64..6000, 0u64..12_000),
        prop::collection::vec(0u16..4, 1..6),
        any::<prop::sample::Index>(),
        any::<u64>(),
    )
        .prop_map(
            |(nodes, base, reserved, (dma, dma32), cpu_nodes, perm, shuffle)| {
                let nr_nodes = nodes.len();
                let order = permutation(nr_nodes, perm.index(factorial(nr_nodes)));
                let mut usable = Vec::new();
                let mut cursor = base;
                for (i, ranges) in nodes.iter().enumerate() {
                    for &(gap, len) in ranges {
                        let start = cursor + gap;
                        usable.push(MemoryRange::new(Pfn(start), Pfn(start + len), order[i]));
                        cursor = start + len;
                    }
                }
                shuffled(&mut usable, shuffle);
                let reserved = reserved
                    .into_iter()
                    .map(|(start, len)| PfnRange::new(Pfn(start), Pfn(start + len)))
                    .collect();
                let limits = ZoneLimits {
                    dma_end: Pfn(dma),
                    dma32_end: Pfn(dma + dma32),
                };
                let cpu_nodes = cpu_nodes.into_iter().map(|n| n % nr_nodes as u16).collect();
                Map {
                    usable,
                    reserved,
                    limits,
                    cpu_nodes,
                }
            },
        )
}

fn factorial(n: usize) -> usize {
    (1..=n).product()
}

/// The `k`-th permutation of `0..n` (as node ids).
fn permutation(n: usize, mut k: usize) -> Vec<NodeId> {
    let mut left: Vec<NodeId> = (0..n as NodeId).collect();
    let mut out = Vec::with_capacity(n);
    for i in (0..n).rev() {
        let f = factorial(i);
        out.push(left.remove(k / f));
        k %= f;
    }
    out
}

fn shuffled<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        items.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

/// The model: every pfn classified on its own.
fn expected(map: &Map) -> (Vec<Expected>, BTreeSet<u64>) {
    let is_usable = |pfn: u64| {
        map.usable
            .iter()
            .any(|r| (r.pfns.start.0..r.pfns.end.0).contains(&pfn))
    };
    let is_reserved = |pfn: u64| {
        map.reserved
            .iter()
            .any(|r| (r.start.0..r.end.0).contains(&pfn))
    };
    let nr_nodes = map
        .usable
        .iter()
        .map(|r| r.node)
        .chain(map.cpu_nodes.iter().copied())
        .max()
        .unwrap() as usize
        + 1;
    let limits = [
        (ZoneType::Dma, 0, map.limits.dma_end.0),
        (
            ZoneType::Dma32,
            map.limits.dma_end.0,
            map.limits.dma32_end.0,
        ),
        (ZoneType::Normal, map.limits.dma32_end.0, u64::MAX),
    ];
    let mut zones = Vec::new();
    let mut managed_pfns = BTreeSet::new();
    for node in 0..nr_nodes as NodeId {
        let ranges = map.usable.iter().filter(|r| r.node == node);
        let Some(node_start) = ranges.clone().map(|r| r.pfns.start.0).min() else {
            continue;
        };
        let node_end = ranges.map(|r| r.pfns.end.0).max().unwrap();
        for (zone, low, high) in limits {
            let start = low.clamp(node_start, node_end);
            let end = high.clamp(node_start, node_end);
            if start == end {
                continue;
            }
            let present: Vec<u64> = (start..end).filter(|&pfn| is_usable(pfn)).collect();
            let managed: Vec<u64> = present
                .iter()
                .copied()
                .filter(|&pfn| !is_reserved(pfn))
                .collect();
            zones.push(Expected {
                node,
                zone,
                start_pfn: start,
                spanned: end - start,
                present: present.len() as u64,
                managed: managed.len() as u64,
            });
            managed_pfns.extend(managed);
        }
    }
    (zones, managed_pfns)
}

fn build(map: &Map) -> Result<Topology, TopologyError> {
    Topology::from_memory_map(&map.usable, &map.reserved, map.limits, &map.cpu_nodes, LLC)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Spanned, present and managed are the model's, in the topology and in zoneinfo;
    /// `verify()` accounts for every page; allocating until every zone refuses returns
    /// only managed pfns, each once; a free of a hole or a reserved page is refused.
    #[test]
    fn zones_from_a_memory_map_match_a_per_pfn_model(map in maps()) {
        let (zones, managed_pfns) = expected(&map);
        let topology = build(&map).expect("a valid memory map");
        let built: Vec<Expected> = topology
            .zones()
            .iter()
            .map(|z| Expected {
                node: z.node,
                zone: z.zone_type,
                start_pfn: z.start_pfn.0,
                spanned: z.spanned,
                present: z.present,
                managed: z.managed,
            })
            .collect();
        prop_assert_eq!(&built, &zones);

        let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)
            .expect("default settings");
        let census = allocator.verify().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let info = zoneinfo::collect(&allocator);
        for zone in &zones {
            let shown = info
                .iter()
                .find(|z| z.node == zone.node && z.zone == zone.zone)
                .expect("every zone is in zoneinfo");
            prop_assert_eq!(
                (shown.spanned, shown.present, shown.managed, shown.start_pfn),
                (zone.spanned, zone.present, zone.managed, zone.start_pfn)
            );
        }
        let holes: u64 = census.iter().map(|c| c.holes).sum();
        let spanned: u64 = zones.iter().map(|z| z.spanned).sum();
        let present: u64 = zones.iter().map(|z| z.present).sum();
        prop_assert_eq!(holes, spanned - present);

        // Every CPU allocates in turn, orders 0 to 3 then 10, until no zone will.
        let mut handed_out = BTreeSet::new();
        let mut blocks = Vec::new();
        let nr_cpus = map.cpu_nodes.len() as u32;
        'orders: for order in [0u8, 1, 2, 3, 10] {
            let order = Order::new(order).unwrap();
            for round in 0u32.. {
                let caller = Caller::task(round % nr_cpus);
                let Ok(pfn) = allocator.alloc_pages(caller, Gfp::KERNEL | Gfp::HIGH, order) else {
                    continue 'orders;
                };
                for page in pfn.0..pfn.0 + order.pages() {
                    prop_assert!(managed_pfns.contains(&page), "pfn {page:#x} is not managed");
                    prop_assert!(handed_out.insert(page), "pfn {page:#x} handed out twice");
                }
                blocks.push((caller, pfn, order));
            }
        }
        allocator.verify().map_err(|e| TestCaseError::fail(e.to_string()))?;

        for zone in allocator.zones().iter().filter(|z| z.spanned() > 0) {
            let first = zone.start_pfn().0;
            let end = first + zone.spanned();
            let unmanaged = (first..end).find(|pfn| !managed_pfns.contains(pfn));
            if let Some(pfn) = unmanaged {
                let refused = allocator.free_pages(Caller::task(0), Pfn(pfn), Order::ZERO);
                prop_assert_eq!(refused, Err(FreeError::Reserved { pfn: Pfn(pfn) }));
            }
        }
        for (caller, pfn, order) in blocks {
            allocator.free_pages(caller, pfn, order).expect("a block it allocated");
        }
        let census = allocator.verify().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let allocated: u64 = census.iter().map(|c| c.allocated).sum();
        prop_assert_eq!(allocated, 0);
    }
}

/// e820 as this VM's firmware gives it (`/proc/iomem`'s System RAM), the first MiB
/// reserved as x86 Linux reserves it: DMA, DMA32 and Normal as its `/proc/zoneinfo`
/// shows them (spanned 4095 / 1,044,480 / 5,505,024; present 3998 / 782,336 / 5,505,024;
/// DMA managed 3840).
#[test]
fn a_pc_memory_map_gives_linux_spans_and_present_pages() {
    let usable = [
        MemoryRange::from_bytes(0x1_0000_0000, 0x6_4000_0000, 0),
        MemoryRange::from_bytes(0x1000, 0x9_fc00, 0),
        MemoryRange::from_bytes(0x10_0000, 0xc000_0000, 0),
    ];
    let reserved = [PfnRange::covering_bytes(0, 0x10_0000)];
    let topology =
        Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, &[0, 0], LLC).unwrap();
    let sizes: Vec<_> = topology
        .zones()
        .iter()
        .map(|z| (z.zone_type, z.start_pfn.0, z.spanned, z.present, z.managed))
        .collect();
    assert_eq!(
        sizes,
        [
            (ZoneType::Dma, 1, 4095, 3998, 3840),
            (ZoneType::Dma32, 4096, 1_044_480, 782_336, 782_336),
            (ZoneType::Normal, 1 << 20, 5_505_024, 5_505_024, 5_505_024),
        ]
    );
}

#[test]
fn overlapping_usable_ranges_are_refused() {
    let usable = [
        MemoryRange::new(Pfn(4096), Pfn(8192), 0),
        MemoryRange::new(Pfn(0), Pfn(5000), 0),
    ];
    let err = Topology::from_memory_map(&usable, &[], ZoneLimits::X86_64, &[0], LLC).unwrap_err();
    assert_eq!(
        err,
        TopologyError::RangesOverlap(
            PfnRange::new(Pfn(0), Pfn(5000)),
            PfnRange::new(Pfn(4096), Pfn(8192))
        )
    );
    assert!(err.to_string().contains("overlap"), "{err}");
}

#[test]
fn a_reversed_range_is_refused_and_an_empty_one_dropped() {
    let reversed = [MemoryRange::new(Pfn(10), Pfn(5), 0)];
    let err = Topology::from_memory_map(&reversed, &[], ZoneLimits::X86_64, &[0], LLC);
    assert!(matches!(err, Err(TopologyError::ReversedRange(_))));
    let empty_and_real = [
        MemoryRange::from_bytes(0x1100, 0x1200, 0),
        MemoryRange::new(Pfn(4096), Pfn(8192), 0),
    ];
    let topology =
        Topology::from_memory_map(&empty_and_real, &[], ZoneLimits::X86_64, &[0], LLC).unwrap();
    assert_eq!(topology.zones().len(), 1);
    assert_eq!(topology.zones()[0].start_pfn, Pfn(4096));
}

#[test]
fn nodes_whose_memory_interleaves_are_refused() {
    let usable = [
        MemoryRange::new(Pfn(0x10000), Pfn(0x20000), 0),
        MemoryRange::new(Pfn(0x20000), Pfn(0x30000), 1),
        MemoryRange::new(Pfn(0x30000), Pfn(0x40000), 0),
    ];
    let err = Topology::from_memory_map(&usable, &[], ZoneLimits::X86_64, &[0, 1], LLC);
    assert_eq!(err, Err(TopologyError::NodesInterleave(0, 1)));
}

/// Firmware numbers CPUs alternately across two sockets: each CPU still allocates from
/// its own node first, and the node whose memory lies lower need not be node 0.
#[test]
fn interleaved_cpu_ids_allocate_from_their_own_node() {
    let usable = [
        MemoryRange::new(Pfn(0x20_0000), Pfn(0x20_8000), 0),
        MemoryRange::new(Pfn(0x10_0000), Pfn(0x10_8000), 1),
    ];
    let cpu_nodes = [0, 1, 0, 1];
    let topology =
        Topology::from_memory_map(&usable, &[], ZoneLimits::X86_64, &cpu_nodes, LLC).unwrap();
    assert_eq!(topology.node_cpus(0), 2);
    assert_eq!(topology.cpu_node(3), Some(1));
    let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7).unwrap();
    for cpu in 0..4u32 {
        let pfn = allocator
            .alloc_pages(Caller::task(cpu), Gfp::KERNEL, Order::ZERO)
            .unwrap();
        let zone = allocator.find_zone(pfn).unwrap();
        assert_eq!(zone.node(), cpu_nodes[cpu as usize], "cpu {cpu}");
    }
    allocator.verify().unwrap();
}

#[test]
fn a_cpu_table_naming_a_node_without_memory_is_accepted() {
    let usable = [MemoryRange::new(Pfn(0x10_0000), Pfn(0x10_8000), 0)];
    let topology =
        Topology::from_memory_map(&usable, &[], ZoneLimits::NORMAL_ONLY, &[1, 0], LLC).unwrap();
    assert_eq!(topology.nr_nodes(), 2);
    let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7).unwrap();
    let pfn = allocator
        .alloc_pages(Caller::task(0), Gfp::KERNEL, Order::ZERO)
        .expect("a memoryless node's CPU falls back to node 0");
    assert_eq!(allocator.find_zone(pfn).unwrap().node(), 0);
    allocator.verify().unwrap();
}
