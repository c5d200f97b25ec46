//! kswapd's loop (`mm::kswapd`, Linux v6.7 `balance_pgdat`): the watermark boost is paid
//! back without write-back or swap at priorities 12 to 10 and dropped at the end, an
//! unbalanced node restarts without the boost, reclaim without progress goes down to
//! priority 1, and a wake-up reruns the loop until the node is balanced. The mapping
//! layer's kswapd (`Memory::kswapd_balance`) runs the same loop.

use mmkit_core::mm::NoIo;
use std::convert::Infallible;
use std::sync::Arc;

use mmkit_core::mm::kswapd::{self, ScanControl, ShrinkOutcome};
use mmkit_core::mm::vmscan::MAX_RECLAIM_RETRIES;
use mmkit_core::mm::Memory;
use mmkit_core::page_alloc::Zone;
use mmkit_core::page_alloc::{Caller, WatermarkKind, ZoneFlags};
use mmkit_core::policy::MmPolicy;
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};

/// Softirq on CPU 0 under `irq_bypass`: every block goes straight to the buddy lists.
const CALLER: Caller = Caller::softirq(0);

fn order(n: u8) -> Order {
    Order::new(n).expect("order ≤ MAX_ORDER")
}

/// One 4096-page Normal zone (min 256, low 320, high 384) whose free memory is eight
/// order-8 Movable blocks, one in each pageblock, beside eight allocated ones; then an
/// order-0 Unmovable request falls back to one of them and boosts the watermarks by a
/// pageblock (512 pages). The node stays balanced: 2047 free pages, high 384 + 512.
fn boosted() -> PageAllocator {
    let llc = CacheInfo {
        llc_bytes: 32 << 20,
        llc_shared_cpus: 2,
    };
    let topology = Topology::x86_64(
        &[ZoneSize::managed(0, ZoneType::Normal, 4096)],
        vec![2],
        llc,
        false,
    )
    .expect("a topology");
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(1024),
        ..Settings::default()
    };
    let policy = Policy {
        irq_bypass: true,
        ..Policy::V6_7
    };
    let allocator = PageAllocator::new(topology, settings, policy).expect("settings");
    let mut held = Vec::new();
    while let Ok(pfn) = allocator.alloc_pages(CALLER, Gfp::HIGHUSER_MOVABLE, order(8)) {
        held.push(pfn);
    }
    for pfn in held.iter().skip(1).step_by(2) {
        allocator.free_pages(CALLER, *pfn, order(8)).unwrap();
    }
    allocator
        .alloc_pages(CALLER, Gfp::KERNEL, order(0))
        .unwrap();
    let zone = normal(&allocator);
    assert_eq!(zone.watermarks().boost(), 512, "the fallback boosted");
    assert_eq!(zone.watermarks().stored(WatermarkKind::High), 384);
    assert!(allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Normal));
    allocator
}

fn normal(allocator: &PageAllocator) -> &Zone {
    allocator.zone(0, ZoneType::Normal).expect("a Normal zone")
}

/// Allocate movable pages until the node is no longer balanced.
fn unbalance(allocator: &PageAllocator) {
    while allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Normal) {
        allocator
            .alloc_pages(CALLER, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .unwrap();
    }
}

/// A shrinker that frees `per_pass` pages each pass (scanning as many) and records what
/// it was asked.
fn recording(
    asked: &mut Vec<ScanControl>,
    per_pass: u64,
) -> impl FnMut(&ScanControl) -> Result<ShrinkOutcome, Infallible> + '_ {
    move |sc| {
        asked.push(*sc);
        Ok(ShrinkOutcome {
            scanned: per_pass,
            reclaimed: per_pass,
        })
    }
}

#[test]
fn boost_reclaim_neither_writes_nor_swaps_and_stops_lowering_priority_at_10() {
    let allocator = boosted();
    let mut asked = Vec::new();
    let outcome = kswapd::balance_pgdat(
        &allocator,
        0,
        Order::ZERO,
        ZoneType::Normal,
        recording(&mut asked, 100),
    )
    .unwrap();
    // 512 boost pages at 100 a pass: six passes, the priority held at DEF_PRIORITY - 2.
    let priorities: Vec<u32> = asked.iter().map(|sc| sc.priority).collect();
    assert_eq!(priorities, [12, 11, 10, 10, 10, 10]);
    assert!(asked.iter().all(|sc| !sc.may_writepage && !sc.may_swap));
    // kswapd_shrink_node asks for the high watermark (boost included) of the one zone.
    assert!(asked.iter().all(|sc| sc.nr_to_reclaim == 384 + 512));
    assert_eq!(outcome.reclaimed, 600);
    assert_eq!(outcome.boost_dropped, 512);
    assert_eq!(normal(&allocator).watermarks().boost(), 0);
    assert!(!normal(&allocator)
        .flags()
        .contains(ZoneFlags::RECLAIM_ACTIVE));
}

#[test]
fn boost_reclaim_without_progress_ends_the_run_and_still_drops_the_boost() {
    let allocator = boosted();
    let mut asked = Vec::new();
    let outcome = kswapd::balance_pgdat(
        &allocator,
        0,
        Order::ZERO,
        ZoneType::Normal,
        recording(&mut asked, 0),
    )
    .unwrap();
    assert_eq!(asked.len(), 1, "no progress: boost reclaim stops at once");
    assert_eq!(outcome.boost_dropped, 512);
    assert_eq!(normal(&allocator).watermarks().boost(), 0);
}

#[test]
fn an_unbalanced_node_forgets_the_boost_and_reclaims_with_writeback_and_swap() {
    let allocator = boosted();
    unbalance(&allocator);
    let mut asked = Vec::new();
    kswapd::balance_pgdat(
        &allocator,
        0,
        Order::ZERO,
        ZoneType::Normal,
        recording(&mut asked, 0),
    )
    .unwrap();
    // Nothing freed: the priority falls every pass, from 12 to 1, all with write-back
    // and swap allowed.
    let priorities: Vec<u32> = asked.iter().map(|sc| sc.priority).collect();
    assert_eq!(priorities, (1..=12).rev().collect::<Vec<u32>>());
    assert!(asked.iter().all(|sc| sc.may_writepage && sc.may_swap));
    // The boost found at the start is dropped all the same.
    assert_eq!(normal(&allocator).watermarks().boost(), 0);
}

#[test]
fn a_balanced_node_without_boost_is_left_alone() {
    let allocator = boosted();
    kswapd::balance_pgdat(&allocator, 0, Order::ZERO, ZoneType::Normal, |_| {
        Ok::<_, Infallible>(ShrinkOutcome::default())
    })
    .unwrap();
    let mut asked = Vec::new();
    let outcome = kswapd::balance_pgdat(
        &allocator,
        0,
        Order::ZERO,
        ZoneType::Normal,
        recording(&mut asked, 100),
    )
    .unwrap();
    assert!(asked.is_empty());
    assert!(outcome.balanced);
}

#[test]
fn a_wakeup_reruns_the_loop_until_reclaim_fails_sixteen_times() {
    let allocator = boosted();
    // Without the boost first: dropping it would balance the node.
    kswapd::balance_pgdat(&allocator, 0, Order::ZERO, ZoneType::Normal, |_| {
        Ok::<_, Infallible>(ShrinkOutcome::default())
    })
    .unwrap();
    unbalance(&allocator);
    let mut asked = Vec::new();
    let outcome = kswapd::run(
        &allocator,
        0,
        Order::ZERO,
        ZoneType::Normal,
        recording(&mut asked, 0),
    )
    .unwrap();
    assert_eq!(outcome.runs, MAX_RECLAIM_RETRIES);
    assert_eq!(outcome.passes, 12 * MAX_RECLAIM_RETRIES);
    assert!(!outcome.balanced);
}

#[test]
fn a_wakeup_ends_when_reclaim_balances_the_node() {
    let allocator = boosted();
    unbalance(&allocator);
    // A shrinker that really frees: it gives back pages the test allocated.
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(
            allocator
                .alloc_pages(CALLER, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
                .unwrap(),
        );
    }
    let outcome = kswapd::run(&allocator, 0, Order::ZERO, ZoneType::Normal, |_| {
        let freed = held.len().min(8) as u64;
        for pfn in held.drain(..freed as usize) {
            allocator.free_pages(CALLER, pfn, Order::ZERO).unwrap();
        }
        Ok::<_, Infallible>(ShrinkOutcome {
            scanned: freed,
            reclaimed: freed,
        })
    })
    .unwrap();
    assert!(outcome.balanced);
    assert!(allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Normal));
    allocator.verify().unwrap();
}

#[test]
fn an_allocation_records_its_order_and_zone_for_kswapd() {
    let allocator = boosted();
    let state = allocator.kswapd(0).unwrap();
    // The order-8 movable requests that failed at the end of the fill woke kswapd, and
    // the later order-0 Normal wake-up of the boosting fallback did not lower the request.
    assert_eq!(state.take_request(), Some((order(8), ZoneType::Movable)));
    assert_eq!(state.take_request(), None, "taken once");
    assert!(state.wakeups() > 0);
}

/// The mapping layer's kswapd used to balance without ever dropping the boost (only the
/// runtime's copy of the loop did): a fragmenting fallback then kept every watermark
/// 512 pages higher for good.
#[test]
fn mapping_layer_kswapd_drops_the_watermark_boost() {
    let allocator = Arc::new(boosted());
    let mut m = Memory::new(allocator.clone(), MmPolicy::V6_7, 0);
    m.kswapd_balance(Caller::task(0), 0, &mut NoIo).unwrap();
    assert_eq!(normal(&allocator).watermarks().boost(), 0);
    assert_eq!(
        normal(&allocator).wmark(WatermarkKind::High),
        384,
        "the effective high watermark is the stored one again"
    );
}

/// kswapd of the mapping layer checks its node at the highest zone index there is
/// (`ZONE_DEVICE`, as `kswapd_highest_zoneidx` starts). A node that is not balanced for a
/// Normal request is not balanced at any index above Normal either: DMA32 keeps Normal's
/// pages in reserve (`lowmem_reserve`) at every index above Normal, also those of zone
/// types the machine does not have. (With a zero reserve at `ZONE_DEVICE`, DMA32 above its
/// bare high watermark balanced the node and kswapd reclaimed nothing.)
#[test]
fn kswapd_checks_the_node_with_dma32_keeping_normals_reserve_at_every_index_above() {
    let zones = [
        ZoneSize::managed(0, ZoneType::Dma32, 4096),
        ZoneSize::managed(0, ZoneType::Normal, 8192),
    ];
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 2,
    };
    let topology = Topology::x86_64(&zones, vec![2], llc, false).expect("valid topology");
    let allocator = Arc::new(
        PageAllocator::new(topology, Settings::default(), Policy::V6_7).expect("valid settings"),
    );
    let dma32 = &allocator.zones()[ZoneType::Dma32.index()];
    let reserve = dma32.lowmem_reserve();
    assert!(reserve[ZoneType::Normal.index()] > 0, "{reserve:?}");
    for above in [ZoneType::Movable, ZoneType::Device] {
        assert_eq!(
            reserve[above.index()],
            reserve[ZoneType::Normal.index()],
            "{reserve:?}"
        );
    }
    let mut memory = Memory::new(allocator.clone(), MmPolicy::V6_7, 16_384);
    let mm = memory.create_mm();
    memory
        .mmap_anon(mm, 0x4000, 16_384, Order::ZERO)
        .expect("a free range");
    let mut vpn = 0x4000;
    while allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Normal) {
        memory
            .access(CALLER, mm, vpn, true, &mut NoIo)
            .expect("memory for the fault");
        vpn += 1;
    }
    assert!(!allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Device));
    let outcome = memory.kswapd(CALLER, 0, &mut NoIo).expect("kswapd");
    assert!(outcome.reclaimed > 0, "{outcome:?}");
    assert!(allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Device));
    memory.verify().expect("consistent");
}
