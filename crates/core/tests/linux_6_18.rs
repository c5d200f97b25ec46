//! The `linux-6.18` preset: v6.7 plus the later changes of `docs/reference/linux-mm.md` §3.3 that
//! alter PCP counts. Oracles from §8 ("Newest-kernel threshold") on the §3.1 machine:
//! DMA 3840, DMA32 772915, Normal 196608 pages, `min_free_kbytes` 67584, 2 CPUs; Normal
//! batch 63, high_min 2132, LLC 266240 KiB shared by 2 (FREE_HIGH_BATCH set).

use mmkit_core::internals;
use mmkit_core::page_alloc::MigrateType;
use mmkit_core::page_alloc::{Caller, DrainReason, Zone};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};

const MOVABLE: Gfp = Gfp::KERNEL.union(Gfp::MOVABLE);

fn spec_machine(policy: Policy) -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma, 3840),
        ZoneSize::managed(0, ZoneType::Dma32, 772_915),
        ZoneSize::managed(0, ZoneType::Normal, 196_608),
    ];
    let llc = CacheInfo {
        llc_bytes: 266_240 << 10,
        llc_shared_cpus: 2,
    };
    let topology = Topology::x86_64(&sizes, vec![2], llc, false).expect("valid topology");
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(67_584),
        ..Settings::default()
    };
    PageAllocator::new(topology, settings, policy).expect("valid settings")
}

fn normal(allocator: &PageAllocator) -> &Zone {
    allocator.zone(0, ZoneType::Normal).expect("Normal exists")
}

/// (free number, pages) of every `free_high` drain while CPU 0 frees `n` order-1 blocks
/// that CPU 1 allocated.
fn order1_free_high_drains(policy: Policy, n: usize) -> Vec<(usize, u64)> {
    let allocator = spec_machine(policy);
    let order = Order::new(1).unwrap();
    let blocks: Vec<_> = (0..n)
        .map(|_| {
            allocator
                .alloc_pages(Caller::task(1), MOVABLE, order)
                .unwrap()
        })
        .collect();
    let events = normal(&allocator).events();
    let reason = DrainReason::FreeHigh as usize;
    let mut drains = Vec::new();
    for (i, pfn) in blocks.into_iter().enumerate() {
        let before = events.pcp_drain_pages(DrainReason::ALL[reason]);
        allocator.free_pages(Caller::task(0), pfn, order).unwrap();
        let pages = events.pcp_drain_pages(DrainReason::ALL[reason]) - before;
        if pages > 0 {
            drains.push((i + 1, pages));
        }
    }
    allocator.verify().unwrap();
    drains
}

/// §8: threshold 63 + 2132 / 2 = 1129. free_count before free k is 2(k − 1) ≥ 1129 first
/// at k = 566, with 1132 pages on the pageset; then FREE_HIGH_BATCH waits for 64 pages:
/// every 32 frees.
#[test]
fn raised_free_high_threshold_first_drains_at_free_566() {
    let drains = order1_free_high_drains(Policy::LINUX_6_18, 700);
    let mut expected = vec![(566, 1132)];
    expected.extend((598..=700).step_by(32).map(|k| (k, 64)));
    assert_eq!(drains, expected);
    // v6.7 drains at free 33 (free_count 64 ≥ 63) on the same stream.
    assert_eq!(order1_free_high_drains(Policy::V6_7, 40)[0], (33, 66));
}

/// `drain_pages_zone` since ≈ 6.9 frees `batch << 5` = 2016 pages per lock hold: 5000
/// pages take 3 drains, where v6.7 takes 1.
#[test]
fn drain_pages_zone_drains_in_chunks_of_2016() {
    for (policy, drains) in [(Policy::LINUX_6_18, 3), (Policy::V6_7, 1)] {
        let allocator = spec_machine(policy);
        let zone = normal(&allocator);
        assert_eq!(
            internals::seed_pageset(
                &allocator,
                0,
                zone.id(),
                (Order::ZERO, MigrateType::Movable),
                5000,
                6000
            ),
            Some(5000)
        );
        let explicit = DrainReason::Explicit as usize;
        let before = zone.events().pcp_drains(DrainReason::ALL[explicit]);
        assert_eq!(allocator.drain_pages_zone(0, zone), 5000);
        assert_eq!(
            zone.events().pcp_drains(DrainReason::ALL[explicit]) - before,
            drains
        );
        assert_eq!(zone.pcp_pages(), 0);
        allocator.verify().unwrap();
    }
}
