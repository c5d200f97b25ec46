//! The kernel's boot and self test on the host: the same code a bare-metal build runs,
//! with a buffer for physical memory.

mod common;

use mmkit_core::page_alloc::NodeId;
use mmkit_core::page_alloc::ZoneType;
use mmkit_core::topology::CacheInfo;
use mmkit_core::views::zoneinfo;
use mmkit_core::Order;
use oot_kernel::memory_map::Region;
use oot_kernel::paging;
use oot_kernel::selftest;
use oot_kernel::BootError;
use oot_kernel::BootInfo;
use oot_kernel::Kernel;

fn zone(kernel: &Kernel, node: NodeId, zone_type: ZoneType) -> zoneinfo::ZoneInfo {
    let zones = zoneinfo::collect(kernel.allocator());
    zones
        .into_iter()
        .find(|z| z.node == node && z.zone == zone_type)
        .expect("the zone exists")
}

#[test]
fn memory_map_with_holes_sizes_zones_as_linux_does() {
    let kernel: Kernel = common::boot();
    // DMA: pfns 1..4096; usable 1..0x9f, 0x100..0xe00 and 0xe10..0x1000; the kernel
    // image (0x100..0x300) is present but not managed.
    let dma = zone(&kernel, 0, ZoneType::Dma);
    assert_eq!((dma.start_pfn, dma.spanned), (1, 4095));
    assert_eq!(dma.present, 0x9f - 1 + (0xe00 - 0x100) + (0x1000 - 0xe10));
    assert_eq!(dma.managed, dma.present - 0x200);
    // DMA32 of node 0: 16..32 MiB with the device window at 24 MiB, and the mem_map
    // (16 bytes for each of the 12,287 pages the nodes span: 48 pages) carved off its top.
    let dma32 = zone(&kernel, 0, ZoneType::Dma32);
    assert_eq!(
        (dma32.start_pfn, dma32.spanned, dma32.present),
        (0x1000, 4096, 4096 - 256)
    );
    assert_eq!(kernel.mem_map().pages(), (12_287 * 16_u64).div_ceil(4096));
    assert_eq!(dma32.managed, dma32.present - kernel.mem_map().pages());
    // Node 1: all of 32..48 MiB, in its own DMA32 zone.
    let node1 = zone(&kernel, 1, ZoneType::Dma32);
    assert_eq!(
        (node1.start_pfn, node1.present, node1.managed),
        (0x2000, 4096, 4096)
    );
    kernel
        .allocator()
        .verify()
        .expect("the books are right after boot");
}

#[test]
fn firmware_cpu_numbering_is_kept() {
    let kernel: Kernel = common::boot();
    let topology = kernel.allocator().topology();
    let nodes: Vec<_> = (0..4).map(|cpu| topology.cpu_node(cpu)).collect();
    assert_eq!(nodes, [Some(0), Some(1), Some(0), Some(1)]);
}

#[test]
fn zoneinfo_prints_present_and_managed_of_every_zone() {
    let kernel: Kernel = common::boot();
    let mut text = String::new();
    selftest::zoneinfo(&kernel, &mut text).unwrap();
    assert!(text.starts_with("Node 0, zone      DMA\n"), "{text}");
    assert!(text.contains("        present  3982\n"), "{text}");
    assert!(text.contains("        managed  3470\n"), "{text}");
    assert!(text.contains("Node 1, zone    DMA32\n"), "{text}");
}

#[test]
fn alloc_and_free_of_every_order_keep_the_books() {
    let kernel: Kernel = common::boot();
    selftest::alloc_free_by_order(&kernel).unwrap();
    assert_eq!(selftest::allocated_pages(&kernel).unwrap(), 0);
}

#[test]
fn bulk_allocation_fills_every_slot_and_a_batch_frees_them() {
    let kernel: Kernel = common::boot();
    selftest::bulk(&kernel).unwrap();
    assert_eq!(selftest::allocated_pages(&kernel).unwrap(), 0);
}

#[test]
fn dma_request_is_served_below_16_mib() {
    let kernel: Kernel = common::boot();
    selftest::dma(&kernel).unwrap();
    assert_eq!(selftest::allocated_pages(&kernel).unwrap(), 0);
}

#[test]
fn offline_cpu_is_drained_and_refused_until_it_comes_back() {
    let kernel: Kernel = common::boot();
    selftest::cpu_hotplug(&kernel, 3).unwrap();
    selftest::cpu_hotplug(&kernel, 0).unwrap();
    kernel.allocator().verify().unwrap();
}

#[test]
fn out_of_memory_is_an_error_and_the_memory_comes_back() {
    let kernel: Kernel = common::boot();
    let taken = selftest::out_of_memory(&kernel, Order::ZERO).unwrap();
    let managed: u64 = kernel
        .allocator()
        .zones()
        .iter()
        .map(|zone| zone.managed())
        .sum();
    // Everything but the reserves below the min watermarks, which the fallbacks on the
    // way boost.
    assert!(
        taken > managed * 8 / 10 && taken < managed,
        "{taken} of {managed}"
    );
    // kswapd dropped the boost: the next run takes more.
    assert!(selftest::out_of_memory(&kernel, Order::ZERO).unwrap() >= taken);
    assert!(selftest::out_of_memory(&kernel, Order::MAX).unwrap() > 0);
    assert_eq!(selftest::allocated_pages(&kernel).unwrap(), 0);
}

#[test]
fn x86_64_mapper_takes_its_page_tables_from_mmkit() {
    let kernel: Kernel = common::boot();
    assert_eq!(
        paging::map_unmap(&kernel, 512).unwrap(),
        paging::TABLES_PER_WALK
    );
    assert_eq!(selftest::allocated_pages(&kernel).unwrap(), 0);
}

#[test]
fn self_test_runs_every_step_and_prints_zoneinfo() {
    let kernel: Kernel = common::boot();
    let mut log = String::new();
    selftest::run(&kernel, &mut log).unwrap();
    print!("{log}");
    assert_eq!(
        log.lines()
            .filter(|line| line.contains(" ok; verify: "))
            .count(),
        8,
        "{log}"
    );
    assert!(log.contains("Node 1, zone    DMA32\n"), "{log}");
}

#[test]
fn memory_map_without_room_for_the_mem_map_is_refused() {
    // 64 KiB on node 0 cannot hold the descriptors of the 16 MiB node 1 spans.
    let map = [
        Region::usable(0x10_0000, 0x11_0000, 0),
        Region::usable(0x200_0000, 0x300_0000, 1),
    ];
    let info = BootInfo {
        memory_map: &map,
        kernel_image: (0, 0),
        ..common::boot_info()
    };
    let phys_offset = common::physical_memory(common::PHYS_BYTES);
    // SAFETY: the buffer covers physical 0..48 MiB and only this kernel uses it.
    let refused = unsafe { oot_kernel::boot::<mmkit_core::sync::RawSpinLock>(&info, phys_offset) };
    assert!(
        matches!(refused, Err(BootError::NoRoomForMemMap { .. })),
        "{:?}",
        refused.err()
    );
}

#[test]
fn overlapping_usable_ranges_are_refused() {
    let map = [
        Region::usable(0x10_0000, 0x200_0000, 0),
        Region::usable(0x100_0000, 0x300_0000, 0),
    ];
    let info = BootInfo {
        memory_map: &map,
        cpu_nodes: &[0],
        llc: CacheInfo {
            llc_bytes: 1 << 20,
            llc_shared_cpus: 1,
        },
        ..common::boot_info()
    };
    let phys_offset = common::physical_memory(common::PHYS_BYTES);
    // SAFETY: as above.
    let refused = unsafe { oot_kernel::boot::<mmkit_core::sync::RawSpinLock>(&info, phys_offset) };
    assert!(
        matches!(refused, Err(BootError::Topology(_))),
        "{:?}",
        refused.err()
    );
}

#[test]
fn mem_map_is_not_carved_out_of_the_kernel_image() {
    // The image sits at the top of node 0's only range, where the mem_map would go.
    let map = [Region::usable(0x10_0000, 0x80_0000, 0)];
    let info = BootInfo {
        memory_map: &map,
        kernel_image: (0x70_0000, 0x80_0000),
        cpu_nodes: &[0],
        llc: CacheInfo {
            llc_bytes: 1 << 20,
            llc_shared_cpus: 1,
        },
    };
    let phys_offset = common::physical_memory(common::PHYS_BYTES);
    // SAFETY: the buffer covers physical 0..48 MiB and only this kernel uses it.
    let refused = unsafe { oot_kernel::boot::<mmkit_core::sync::RawSpinLock>(&info, phys_offset) };
    assert!(
        matches!(refused, Err(BootError::NoRoomForMemMap { .. })),
        "{:?}",
        refused.err()
    );
}
