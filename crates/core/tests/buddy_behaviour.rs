//! The buddy allocator's Linux behaviour, one deterministic scenario per rule of `docs/reference/linux-mm.md` §1:
//! merging on free (§1.3), splitting on allocation (§1.4), list head or tail
//! (`buddy_merge_likely`), migratetype fallback and stealing with the watermark boost
//! (§1.4, §1.5), the high-atomic reserve (§1.4), and the watermark checks (§1.6, §1.7).
//!
//! Requests run in softirq context under a policy with `irq_bypass` on, so every block
//! goes straight to and from the buddy lists: the per-CPU pagesets (§2) stay empty and the
//! free lists show exactly what `__free_one_page` and `__rmqueue_smallest` did. Zones are
//! small (one to eight thousand pages) and start on pageblock boundaries unless a test
//! says otherwise.

use mmkit_core::page::PageState;
use mmkit_core::page_alloc::{Caller, WatermarkKind, ZoneFlags, PAGEBLOCK_PAGES};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{
    page_alloc::MigrateType, page_alloc::Zone, topology::ZoneSpec, AllocError, Gfp, Order,
    PageAllocator, Pfn, Policy, Settings, Topology, ZoneType,
};

const LLC: CacheInfo = CacheInfo {
    llc_bytes: 32 << 20,
    llc_shared_cpus: 2,
};

/// Softirq on CPU 0: with `irq_bypass` every request skips the pagesets.
const CALLER: Caller = Caller::softirq(0);

/// Where the single-zone tests put their zone: 64 MiB, aligned for every order.
const START: Pfn = Pfn(0x4000);

fn order(n: u8) -> Order {
    Order::new(n).expect("order ≤ MAX_ORDER")
}

fn buddy_only() -> Policy {
    Policy {
        irq_bypass: true,
        ..Policy::V6_7
    }
}

fn build(topology: Topology, settings: Settings) -> PageAllocator {
    PageAllocator::new(topology, settings, buddy_only()).expect("valid settings")
}

/// One Normal zone of `pages` pages at [`START`].
fn normal_zone(pages: u64, settings: Settings) -> PageAllocator {
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: START,
        spanned: pages,
        present: pages,
        managed: pages,
    };
    build(
        Topology::new(vec![spec], vec![2], LLC, false).expect("valid topology"),
        settings,
    )
}

/// `min_free_kbytes` fixed, THP off: watermarks that do not depend on the khugepaged rule.
fn min_free_kbytes(kbytes: u64) -> Settings {
    Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(kbytes),
        transparent_hugepage: false,
        ..Settings::default()
    }
}

fn normal(allocator: &PageAllocator) -> &Zone {
    allocator
        .zone(0, ZoneType::Normal)
        .expect("node 0 has a Normal zone")
}

fn alloc(allocator: &PageAllocator, gfp: Gfp, o: Order) -> Pfn {
    let pfn = try_alloc(allocator, gfp, o).unwrap_or_else(|e| panic!("order-{o} {gfp:?}: {e}"));
    assert!(pfn.is_aligned(o));
    pfn
}

fn try_alloc(allocator: &PageAllocator, gfp: Gfp, o: Order) -> Result<Pfn, AllocError> {
    allocator.alloc_pages(CALLER, gfp, o)
}

fn free(allocator: &PageAllocator, pfn: Pfn, o: Order) {
    allocator
        .free_pages(CALLER, pfn, o)
        .unwrap_or_else(|e| panic!("free {pfn:?}: {e}"));
    allocator
        .verify()
        .unwrap_or_else(|e| panic!("after freeing {pfn:?}: {e}"));
}

/// The free blocks of `zone` as (offset from the zone start, order) pairs, list order.
fn blocks(zone: &Zone) -> Vec<(u64, u8)> {
    let start = zone.start_pfn().0;
    zone.free_blocks()
        .iter()
        .map(|&(pfn, o, _)| (pfn.0 - start, o.get()))
        .collect()
}

/// The offsets on the order-`o` list of migratetype `mt`, head first.
fn list(zone: &Zone, o: u8, mt: MigrateType) -> Vec<u64> {
    let start = zone.start_pfn().0;
    zone.free_blocks()
        .iter()
        .filter(|&&(_, bo, bmt)| bo.get() == o && bmt == mt)
        .map(|&(pfn, _, _)| pfn.0 - start)
        .collect()
}

fn is_free_block(zone: &Zone, pfn: Pfn, o: Order) -> bool {
    zone.mem_map().page(pfn).state_order() == (PageState::Buddy, o)
}

// §1.3 Freeing and merging.

#[test]
fn free_merges_with_free_buddy() {
    let allocator = normal_zone(1024, Settings::default());
    let zone = normal(&allocator);
    let p = alloc(&allocator, Gfp::KERNEL, order(0));
    let q = alloc(&allocator, Gfp::KERNEL, order(0));
    assert_eq!((p, q), (START, START.add(1)));
    let merges = || zone.events().buddy_merges();
    let boot_merges = merges();
    // p's buddy q is in use: p stays an order-0 block.
    free(&allocator, p, order(0));
    assert!(is_free_block(zone, p, order(0)));
    assert_eq!(
        merges(),
        boot_merges,
        "no merge level while the buddy is in use"
    );
    // Freeing q merges with p, then with every split-off upper half, back to order 10.
    free(&allocator, q, order(0));
    assert_eq!(blocks(zone), [(0, 10)]);
    assert_eq!(merges() - boot_merges, 10, "one level per order 0 → 10");
    assert_eq!(zone.mem_map().page(q).state(), PageState::Tail);
}

#[test]
fn merging_stops_at_a_buddy_of_a_different_order() {
    let allocator = normal_zone(1024, Settings::default());
    let zone = normal(&allocator);
    let p0 = alloc(&allocator, Gfp::KERNEL, order(0));
    let p1 = alloc(&allocator, Gfp::KERNEL, order(0));
    let p2 = alloc(&allocator, Gfp::KERNEL, order(1));
    assert_eq!((p0, p1, p2), (START, START.add(1), START.add(2)));
    free(&allocator, p0, order(0));
    // p2's order-1 buddy is pfn p0: free, but an order-0 block, so no merge.
    free(&allocator, p2, order(1));
    assert!(is_free_block(zone, p0, order(0)));
    assert!(is_free_block(zone, p2, order(1)));
    let mut free_blocks = blocks(zone);
    free_blocks.sort_unstable();
    let mut expected = vec![(0, 0), (2, 1)];
    expected.extend((2..10).map(|o| (1 << o, o)));
    assert_eq!(free_blocks, expected, "only pfn 1 is in use");
    // Once p1 is back, p0+p1 make the order-1 buddy of p2 and everything merges.
    free(&allocator, p1, order(0));
    assert_eq!(blocks(zone), [(0, 10)]);
}

#[test]
fn merging_stops_at_the_zone_edge() {
    // A zone from pfn START+1 of 1023 pages: the order-0 block at START+1 has no buddy in
    // the zone (START is outside), so nothing ever merges past the boot layout.
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: START.add(1),
        spanned: 1023,
        present: 1023,
        managed: 1023,
    };
    let allocator = build(
        Topology::new(vec![spec], vec![2], LLC, false).unwrap(),
        Settings::default(),
    );
    let zone = normal(&allocator);
    let boot = zone.buddyinfo();
    assert_eq!(
        boot[..10],
        [1; 10],
        "boot frees one block of each order 0..9"
    );
    let held: Vec<_> = (0..64)
        .map(|_| alloc(&allocator, Gfp::KERNEL, order(0)))
        .collect();
    for pfn in held {
        free(&allocator, pfn, order(0));
    }
    assert_eq!(zone.buddyinfo(), boot);
}

// §1.4 Allocation and splitting.

#[test]
fn allocation_splits_the_first_block_and_frees_the_upper_halves() {
    let allocator = normal_zone(1024, Settings::default());
    let zone = normal(&allocator);
    let p = alloc(&allocator, Gfp::KERNEL, order(0));
    assert_eq!(p, START, "the lowest part of the split block is returned");
    let mut expected = [1; 11];
    expected[10] = 0;
    assert_eq!(zone.buddyinfo(), expected);
    let mut halves = blocks(zone);
    halves.sort_unstable();
    assert_eq!(halves, (0..10).map(|o| (1 << o, o)).collect::<Vec<_>>());
}

#[test]
fn allocation_takes_the_first_block_of_the_smallest_sufficient_order() {
    let allocator = normal_zone(4096, Settings::default());
    let zone = normal(&allocator);
    // Boot freed four order-10 blocks to the list tail in address order.
    assert_eq!(list(zone, 10, MigrateType::Movable), [0, 1024, 2048, 3072]);
    let big = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(10));
    assert_eq!(big, START, "the first block on the list");
    assert_eq!(list(zone, 10, MigrateType::Movable), [1024, 2048, 3072]);
    // An order-3 request splits the next order-10 block: halves of orders 3..9 go free.
    let a = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(3));
    assert_eq!(a, START.add(1024));
    assert_eq!(list(zone, 3, MigrateType::Movable), [1032]);
    // Smaller requests now use the smallest sufficient block instead of a larger one.
    let b = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(5));
    assert_eq!(
        b,
        START.add(1024 + 32),
        "the order-5 half, not a split of order 6..10"
    );
    let c = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(2));
    assert_eq!(c, START.add(1032), "the order-3 half split in two");
    assert_eq!(list(zone, 2, MigrateType::Movable), [1036]);
    assert_eq!(list(zone, 10, MigrateType::Movable), [2048, 3072]);
    for (pfn, o) in [(big, 10), (a, 3), (b, 5), (c, 2)] {
        free(&allocator, pfn, order(o));
    }
    let mut all = blocks(zone);
    all.sort_unstable();
    assert_eq!(all, [(0, 10), (1024, 10), (2048, 10), (3072, 10)]);
}

// §1.3 step 3: head or tail of the list.

/// A 4096-page zone where the first eight pages are allocated one by one, in address
/// order, leaving the upper halves of the first order-10 block free.
fn eight_single_pages() -> (PageAllocator, Vec<Pfn>) {
    let allocator = normal_zone(4096, Settings::default());
    let pages: Vec<_> = (0..8)
        .map(|_| alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(0)))
        .collect();
    assert_eq!(pages, (0..8).map(|i| START.add(i)).collect::<Vec<_>>());
    (allocator, pages)
}

#[test]
fn freed_block_goes_to_the_head_when_no_merge_is_likely() {
    let (allocator, pages) = eight_single_pages();
    let zone = normal(&allocator);
    // Page 0's order-1 partner (pages 2, 3) is allocated: head.
    free(&allocator, pages[0], order(0));
    assert_eq!(list(zone, 0, MigrateType::Movable), [0]);
    // Page 2's next-order buddy is pages 0-1, which is not a free order-1 block: head.
    free(&allocator, pages[2], order(0));
    assert_eq!(list(zone, 0, MigrateType::Movable), [2, 0]);
}

#[test]
fn freed_block_goes_to_the_tail_when_its_next_order_buddy_is_free() {
    let (allocator, pages) = eight_single_pages();
    let zone = normal(&allocator);
    free(&allocator, pages[0], order(0));
    // Pages 6 and 7 merge into a free order-1 block.
    free(&allocator, pages[6], order(0));
    free(&allocator, pages[7], order(0));
    assert!(is_free_block(zone, pages[6], order(1)));
    // Page 4 cannot merge (page 5 is in use), but the order-1 buddy of 4-5 is free: once
    // page 5 comes back, 4-7 merge. So page 4 is queued at the tail, behind page 0.
    free(&allocator, pages[4], order(0));
    assert_eq!(list(zone, 0, MigrateType::Movable), [0, 4]);
    // The rule looks at the merged block: 0-1 merge, and their next-order buddy 4-7 is
    // not a free order-2 block, so 0-1 goes to the head of the order-1 list.
    free(&allocator, pages[1], order(0));
    assert_eq!(list(zone, 1, MigrateType::Movable), [0, 6]);
    assert_eq!(list(zone, 0, MigrateType::Movable), [4]);
}

#[test]
fn no_tail_placement_at_max_order_minus_one() {
    let allocator = normal_zone(4096, Settings::default());
    let zone = normal(&allocator);
    let a = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(9));
    let b = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(9));
    let c = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(10));
    let d = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(10));
    assert_eq!(
        [a, b, c, d],
        [START, START.add(512), START.add(1024), START.add(2048)]
    );
    let e = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(9));
    assert_eq!(e, START.add(3072));
    assert_eq!(list(zone, 9, MigrateType::Movable), [3584]);
    free(&allocator, c, order(10));
    // a's buddy b is in use; the next-order buddy (c, order 10) is free, but at order 9
    // = MAX_ORDER - 1 buddy_merge_likely is false: the head.
    free(&allocator, a, order(9));
    assert_eq!(list(zone, 9, MigrateType::Movable), [0, 3584]);
}

// §1.4 Fallback and stealing, §1.5 boost.

#[test]
fn unmovable_request_claims_every_pageblock_of_a_max_order_block() {
    let allocator = normal_zone(4096, Settings::default());
    let zone = normal(&allocator);
    let mem_map = zone.mem_map();
    assert!(zone.group_by_mobility());
    for i in 0..8 {
        assert_eq!(
            mem_map.pageblock_migratetype(START.add(i * PAGEBLOCK_PAGES)),
            MigrateType::Movable
        );
    }
    let p = alloc(&allocator, Gfp::KERNEL, order(0));
    assert_eq!(p, START);
    // The largest fallback block (order 10) was taken: both of its pageblocks are now
    // Unmovable, the rest stay Movable. A steal of ≥ a pageblock does not boost.
    let types: Vec<_> = (0..8)
        .map(|i| mem_map.pageblock_migratetype(START.add(i * PAGEBLOCK_PAGES)))
        .collect();
    let mut expected = vec![MigrateType::Movable; 8];
    expected[..2].fill(MigrateType::Unmovable);
    assert_eq!(types, expected);
    assert_eq!(zone.events().extfrag_events(), 1);
    assert_eq!(zone.watermarks().boost(), 0);
    assert_eq!(zone.events().watermark_boosts(), 0);
    // The split halves sit on the Unmovable lists; the next request needs no fallback.
    assert_eq!(list(zone, 9, MigrateType::Unmovable), [512]);
    let q = alloc(&allocator, Gfp::KERNEL, order(0));
    assert_eq!(q, START.add(1));
    assert_eq!(zone.events().extfrag_events(), 1);
}

/// A 4096-page zone (min 256, low 320, high 384) whose free memory is eight order-8
/// Movable blocks, one in each pageblock, each beside an allocated order-8 block.
fn order8_checkerboard() -> PageAllocator {
    let allocator = normal_zone(4096, min_free_kbytes(1024));
    let zone = normal(&allocator);
    let marks = zone.watermarks();
    let stored =
        [WatermarkKind::Min, WatermarkKind::Low, WatermarkKind::High].map(|k| marks.stored(k));
    // §1.5: min = (1024 KiB / 4) × 4096 / 4096; dist = max(min / 4, 4096 × 10 / 10000).
    assert_eq!(stored, [256, 320, 384]);
    let mut held = Vec::new();
    while let Ok(pfn) = try_alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(8)) {
        held.push(pfn);
    }
    // The min check: 15 blocks leave 256 pages, and 256 - 255 is not above 256.
    assert_eq!(held.len(), 15);
    for &pfn in held.iter().filter(|p| (p.0 - START.0) % 512 == 256) {
        free(&allocator, pfn, order(8));
    }
    assert_eq!(zone.buddyinfo()[8..], [8, 0, 0]);
    assert_eq!(zone.free_pages(), 2048);
    assert_eq!(zone.events().extfrag_events(), 0);
    allocator
}

#[test]
fn unmovable_fallback_below_pageblock_order_boosts_the_watermark() {
    let allocator = order8_checkerboard();
    let zone = normal(&allocator);
    let high = zone.watermarks().stored(WatermarkKind::High);
    let wakeups = allocator.kswapd(0).unwrap().wakeups();
    let p = alloc(&allocator, Gfp::KERNEL, order(0));
    // The fallback took an order-8 Movable block. Its pageblock has 256 free pages and 256
    // in use that are not movable (no LRU flag): 256 + 256 ≥ 256, so the whole pageblock
    // is claimed for Unmovable.
    let mem_map = zone.mem_map();
    assert_eq!(mem_map.pageblock_migratetype(p), MigrateType::Unmovable);
    let movable = (0..8)
        .filter(|i| {
            mem_map.pageblock_migratetype(START.add(i * PAGEBLOCK_PAGES)) == MigrateType::Movable
        })
        .count();
    assert_eq!(movable, 7);
    assert_eq!(zone.events().extfrag_events(), 1);
    // §1.5: boost = min(0 + 512, max(512, high × 15000 / 10000)).
    let max_boost = (high * 15_000 / 10_000).max(PAGEBLOCK_PAGES);
    assert_eq!(zone.watermarks().boost(), PAGEBLOCK_PAGES.min(max_boost));
    assert_eq!(zone.watermarks().boost(), 512);
    assert_eq!(
        zone.wmark(WatermarkKind::Low),
        320 + 512,
        "the effective marks include the boost"
    );
    assert_eq!(zone.events().watermark_boosts(), 1);
    // GFP_KERNEL may wake kswapd: the boost flag was set and cleared, and kswapd woken.
    assert!(!zone.flags().contains(ZoneFlags::BOOSTED_WATERMARK));
    assert_eq!(allocator.kswapd(0).unwrap().wakeups(), wakeups + 1);

    // A second fragmenting fallback grows the boost up to high × 1.5 = 576.
    let r = alloc(&allocator, Gfp::KERNEL | Gfp::RECLAIMABLE, order(0));
    assert_eq!(mem_map.pageblock_migratetype(r), MigrateType::Reclaimable);
    assert_eq!(zone.events().extfrag_events(), 2);
    assert_eq!(
        zone.watermarks().boost(),
        (2 * PAGEBLOCK_PAGES).min(max_boost)
    );
    assert_eq!(zone.watermarks().boost(), 576);
    // The claimed pageblock now serves Unmovable requests without a fallback.
    let q = alloc(&allocator, Gfp::KERNEL, order(0));
    assert_eq!(
        q.0 >> 9,
        p.0 >> 9,
        "same pageblock as the first Unmovable page"
    );
    assert_eq!(zone.events().extfrag_events(), 2);
    allocator.verify().unwrap();
}

#[test]
fn movable_request_that_cannot_claim_takes_the_smallest_fallback_block() {
    let allocator = normal_zone(4096, min_free_kbytes(128));
    let zone = normal(&allocator);
    // Pageblocks 0 and 1 (one order-10 block) become Unmovable: pageblock 0 is carved into
    // order-3 blocks, pageblock 1 into order-1 blocks.
    let eights: Vec<_> = (0..64)
        .map(|_| alloc(&allocator, Gfp::KERNEL, order(3)))
        .collect();
    let twos: Vec<_> = (0..256)
        .map(|_| alloc(&allocator, Gfp::KERNEL, order(1)))
        .collect();
    assert!(eights.iter().all(|p| p.0 - START.0 < 512));
    assert!(twos.iter().all(|p| (512..1024).contains(&(p.0 - START.0))));
    // Every other block goes back: order-3 and order-1 holes that cannot merge.
    for (i, &p) in eights.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        assert_eq!((p.0 - START.0) % 16, 8, "block {i}");
        free(&allocator, p, order(3));
    }
    for &p in twos.iter().skip(1).step_by(2) {
        free(&allocator, p, order(1));
    }
    // The Movable pageblocks are used up.
    for _ in 0..3 {
        alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(10));
    }
    assert_eq!(zone.buddyinfo(), [0, 128, 0, 32, 0, 0, 0, 0, 0, 0, 0]);
    let extfrag = zone.events().extfrag_events();
    // A Movable order-0 request: the largest fallback is order 3, which a Movable request
    // may not claim (3 < pageblock_order / 2), so it takes the smallest suitable block,
    // an order-1 one, moves only that block, and leaves the pageblock Unmovable.
    let p = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(0));
    assert!(
        (512..1024).contains(&(p.0 - START.0)),
        "from the order-1 pageblock: {p:?}"
    );
    assert_eq!(
        zone.mem_map().pageblock_migratetype(p),
        MigrateType::Unmovable
    );
    assert_eq!(zone.events().extfrag_events(), extfrag + 1);
    assert_eq!(zone.buddyinfo(), [1, 127, 0, 32, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(list(zone, 0, MigrateType::Movable), [p.0 + 1 - START.0]);
    allocator.verify().unwrap();
}

#[test]
fn no_boost_in_a_zone_under_four_pageblocks() {
    // DMA from pfn 1 with 500 pages: its largest blocks are order 7, and 500 < 4 × 512.
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma, 500),
        ZoneSize::managed(0, ZoneType::Dma32, 4096),
    ];
    let topology = Topology::x86_64(&sizes, vec![2], LLC, false).unwrap();
    let allocator = build(topology, Settings::default());
    let dma = allocator.zone(0, ZoneType::Dma).unwrap();
    assert_eq!(dma.start_pfn(), Pfn(1));
    assert_eq!(dma.buddyinfo()[7..], [2, 0, 0, 0]);
    let p = alloc(&allocator, Gfp::KERNEL | Gfp::DMA, order(0));
    assert!(dma.spans(p));
    assert_eq!(dma.events().extfrag_events(), 1);
    assert_eq!(dma.watermarks().boost(), 0);
    assert_eq!(dma.events().watermark_boosts(), 0);
    allocator.verify().unwrap();
}

// §1.4 The high-atomic reserve.

/// An 8192-page zone with min 2048, low 2560 and high 3072, filled with movable pages down
/// to the min watermark so that every GFP_ATOMIC request takes the slow path.
fn atomic_pressure() -> PageAllocator {
    let allocator = normal_zone(8192, min_free_kbytes(8192));
    let zone = normal(&allocator);
    let marks = zone.watermarks();
    assert_eq!(
        [WatermarkKind::Min, WatermarkKind::Low, WatermarkKind::High].map(|k| marks.stored(k)),
        [2048, 2560, 3072]
    );
    for o in [9, 0] {
        while try_alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(o)).is_ok() {}
    }
    assert_eq!(zone.free_pages(), 2048);
    allocator
}

#[test]
fn high_order_atomic_allocation_reserves_its_pageblock_up_to_one_percent() {
    let allocator = atomic_pressure();
    let zone = normal(&allocator);
    // An order-0 atomic request does not reserve (ALLOC_HIGHATOMIC is for order > 0).
    alloc(&allocator, Gfp::ATOMIC, order(0));
    assert_eq!(zone.nr_reserved_highatomic(), 0);
    // The first high-order atomic request reserves its pageblock.
    let first = alloc(&allocator, Gfp::ATOMIC, order(1));
    assert_eq!(zone.nr_reserved_highatomic(), PAGEBLOCK_PAGES);
    assert_eq!(
        zone.mem_map().pageblock_migratetype(first),
        MigrateType::HighAtomic
    );
    // Later ones use the reserve first, then reserve more pageblocks while the total is
    // under managed / 100 + 512 = 593 pages: 0 → 512 → 1024, then no more.
    let cap = zone.managed() / 100 + PAGEBLOCK_PAGES;
    let mut history = vec![0, PAGEBLOCK_PAGES];
    while let Ok(pfn) = try_alloc(&allocator, Gfp::ATOMIC, order(1)) {
        let reserved = zone.nr_reserved_highatomic();
        if reserved != *history.last().unwrap() {
            assert_eq!(
                zone.mem_map().pageblock_migratetype(pfn),
                MigrateType::HighAtomic
            );
            history.push(reserved);
        }
    }
    assert_eq!(history, [0, 512, 1024]);
    assert!(1024 - PAGEBLOCK_PAGES < cap && cap <= 1024);
    let highatomic = (0..16)
        .filter(|i| {
            zone.mem_map()
                .pageblock_migratetype(START.add(i * PAGEBLOCK_PAGES))
                == MigrateType::HighAtomic
        })
        .count() as u64;
    assert_eq!(highatomic * PAGEBLOCK_PAGES, zone.nr_reserved_highatomic());
    // GFP_ATOMIC stops at its reduced min: 2048 - 1024 = 1024, - 256 = 768 (order 1: one
    // page of the free count is unusable).
    assert!(zone.free_pages() - 1 <= 768, "free {}", zone.free_pages());
    allocator.verify().unwrap();
}

#[test]
fn failed_blocking_allocation_gives_back_the_reserve_without_merging() {
    // 1024 pages, min 820, low 1025, high 1230: a fresh zone is already below low.
    let allocator = normal_zone(1024, min_free_kbytes(3280));
    let zone = normal(&allocator);
    let marks = zone.watermarks();
    assert_eq!(
        [WatermarkKind::Min, WatermarkKind::Low, WatermarkKind::High].map(|k| marks.stored(k)),
        [820, 1025, 1230]
    );
    let p = alloc(&allocator, Gfp::ATOMIC, order(1));
    assert_eq!(p, START);
    assert_eq!(zone.nr_reserved_highatomic(), PAGEBLOCK_PAGES);
    assert_eq!(
        zone.mem_map().pageblock_migratetype(START),
        MigrateType::HighAtomic
    );
    // Freed, the block merges up to its whole pageblock, but not across into the
    // Unmovable pageblock beside it: a high-atomic pageblock does not merge at order 9.
    free(&allocator, p, order(1));
    assert_eq!(blocks(zone), [(512, 9), (0, 9)]);
    assert_eq!(list(zone, 9, MigrateType::HighAtomic), [0]);
    // GFP_KERNEL order 10 fails; on the way the slow path gives the reserve back.
    assert_eq!(
        try_alloc(&allocator, Gfp::KERNEL, order(10)),
        Err(AllocError::OutOfMemory { order: order(10) })
    );
    assert_eq!(zone.nr_reserved_highatomic(), 0);
    assert_eq!(
        zone.mem_map().pageblock_migratetype(START),
        MigrateType::Unmovable
    );
    // Linux moves the free blocks to the new type's list without merging them
    // (`move_freepages`), so two free order-9 buddies of one type stay apart.
    let mut all = blocks(zone);
    all.sort_unstable();
    assert_eq!(all, [(0, 9), (512, 9)]);
    assert_eq!(list(zone, 9, MigrateType::Unmovable).len(), 2);
    allocator.verify().unwrap();
}

#[test]
fn noretry_fails_without_giving_back_the_last_reserved_pageblock() {
    // The zone of the test above: a fresh zone below low, one high-atomic pageblock.
    let allocator = normal_zone(1024, min_free_kbytes(3280));
    let zone = normal(&allocator);
    let p = alloc(&allocator, Gfp::ATOMIC, order(1));
    free(&allocator, p, order(1));
    assert_eq!(zone.nr_reserved_highatomic(), PAGEBLOCK_PAGES);
    // The first retry gives back a reserved pageblock only if it is not the last;
    // `__GFP_NORETRY` stops there, where the retry loop would give the last one back.
    let noretry = Gfp::KERNEL | Gfp::NORETRY;
    assert_eq!(
        try_alloc(&allocator, noretry, order(10)),
        Err(AllocError::OutOfMemory { order: order(10) })
    );
    assert_eq!(zone.nr_reserved_highatomic(), PAGEBLOCK_PAGES);
    assert_eq!(
        try_alloc(&allocator, Gfp::KERNEL, order(10)),
        Err(AllocError::OutOfMemory { order: order(10) })
    );
    assert_eq!(zone.nr_reserved_highatomic(), 0);
    allocator.verify().unwrap();
}

#[test]
fn reserve_in_a_pageblock_crossing_the_zone_start_does_not_fail_later_allocations() {
    // 1021 pages from START + 3: pageblock 0 starts before the zone. min 420, low 525.
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: START.add(3),
        spanned: 1021,
        present: 1021,
        managed: 1021,
    };
    let allocator = build(
        Topology::new(vec![spec], vec![2], LLC, false).unwrap(),
        min_free_kbytes(1680),
    );
    let zone = normal(&allocator);
    assert_eq!(zone.watermarks().stored(WatermarkKind::Min), 420);
    assert_eq!(zone.watermarks().stored(WatermarkKind::Low), 525);
    // Pageblock 1 goes to a kernel user; free pages drop to 509, below low.
    assert_eq!(alloc(&allocator, Gfp::KERNEL, order(9)), START.add(512));
    // A high-order atomic request must now take the slow path, from pageblock 0.
    let atomic = alloc(&allocator, Gfp::ATOMIC, order(1));
    assert!(atomic < START.add(512));
    free(&allocator, atomic, order(1));
    // 509 free pages > min 420. Whether or not pageblock 0 was reserved for high-atomic
    // use, a kernel allocation must succeed: Linux v6.7 gives the reserve back and
    // retries (its move_freepages_block moves the free pages from the block onward).
    let p = alloc(&allocator, Gfp::KERNEL, order(0));
    assert!(zone.spans(p));
    assert_eq!(zone.nr_reserved_highatomic(), 0);
    allocator.verify().unwrap();
}

// §1.6 and §1.7 Watermarks.

#[test]
fn kernel_allocations_stop_at_the_min_watermark_and_atomic_ones_go_deeper() {
    let allocator = normal_zone(4096, min_free_kbytes(1024));
    let zone = normal(&allocator);
    let drain = |gfp: Gfp| {
        let mut count = 0;
        loop {
            match try_alloc(&allocator, gfp, order(0)) {
                Ok(_) => count += 1,
                Err(e) => {
                    assert_eq!(e, AllocError::OutOfMemory { order: order(0) });
                    return count;
                }
            }
        }
    };
    // min 256: a request without reserve rights succeeds while free > 256 (strict).
    assert!(drain(Gfp::KERNEL) > 0);
    assert_eq!(
        zone.watermarks().boost(),
        0,
        "steals of whole pageblocks do not boost"
    );
    assert_eq!(zone.free_pages(), 256);
    // GFP_NOWAIT cannot block but has no __GFP_HIGH: ALLOC_NON_BLOCK alone lowers no
    // watermark (it only stops the high-atomic reserve counting as unusable).
    assert_eq!(drain(Gfp::NOWAIT), 0);
    // __GFP_HIGH: min - min / 2 = 128.
    assert_eq!(drain(Gfp::KERNEL | Gfp::HIGH), 128);
    assert_eq!(zone.free_pages(), 128);
    // GFP_ATOMIC (__GFP_HIGH and non-blocking): 128 - 128 / 4 = 96.
    assert_eq!(drain(Gfp::ATOMIC), 32);
    assert_eq!(zone.free_pages(), 96);
    allocator.verify().unwrap();
}

#[test]
fn high_order_watermark_counts_only_usable_pages() {
    let allocator = normal_zone(4096, min_free_kbytes(1024));
    let zone = normal(&allocator);
    // Order 3: free - 7 must stay above min 256, so allocation stops with free ≤ 263.
    while try_alloc(&allocator, Gfp::KERNEL, order(3)).is_ok() {}
    let free = zone.free_pages();
    assert!(free - 7 <= 256 && free + 8 - 7 > 256, "free {free}");
}

#[test]
fn below_high_is_set_when_an_allocation_finds_free_pages_at_high() {
    let allocator = normal_zone(4096, min_free_kbytes(1024));
    let zone = normal(&allocator);
    let high = zone.wmark(WatermarkKind::High) as i64;
    assert_eq!(high, 384);
    while zone.free_pages() > high {
        assert!(
            !zone.flags().contains(ZoneFlags::BELOW_HIGH),
            "free {}",
            zone.free_pages()
        );
        alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(0));
    }
    // free == high: the flag is only set by the next allocation's high check.
    assert_eq!(zone.free_pages(), high);
    assert!(!zone.flags().contains(ZoneFlags::BELOW_HIGH));
    alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(0));
    assert!(zone.flags().contains(ZoneFlags::BELOW_HIGH));
    // The buddy free path does not clear it (only a PCP drain does, §2.5).
    let p = alloc(&allocator, Gfp::HIGHUSER_MOVABLE, order(4));
    free(&allocator, p, order(4));
    assert!(zone.flags().contains(ZoneFlags::BELOW_HIGH));
}

#[test]
fn lowmem_reserve_keeps_dma32_pages_from_normal_requests() {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma32, 4096),
        ZoneSize::managed(0, ZoneType::Normal, 2048),
    ];
    let topology = Topology::x86_64(&sizes, vec![2], LLC, false).unwrap();
    let allocator = build(topology, min_free_kbytes(1024));
    let dma32 = allocator.zone(0, ZoneType::Dma32).unwrap();
    let normal = allocator.zone(0, ZoneType::Normal).unwrap();
    // §1.5: lowmem_reserve[DMA32][Normal] = managed(Normal) / 256.
    let reserve = dma32.lowmem_reserve()[ZoneType::Normal.index()];
    assert_eq!(reserve, 2048 / 256);
    assert_eq!(dma32.lowmem_reserve()[ZoneType::Dma32.index()], 0);
    let min_dma32 = dma32.watermarks().stored(WatermarkKind::Min) as i64;
    let min_normal = normal.watermarks().stored(WatermarkKind::Min) as i64;
    // Shares of pages_min = 256: 256 × 4096 / 6144 and 256 × 2048 / 6144.
    assert_eq!((min_dma32, min_normal), (170, 85));
    while try_alloc(&allocator, Gfp::KERNEL, order(0)).is_ok() {}
    assert_eq!(normal.free_pages(), min_normal);
    assert_eq!(dma32.free_pages(), min_dma32 + reserve as i64);
    // A request limited to DMA32 has no higher zone to protect it from.
    while try_alloc(&allocator, Gfp::KERNEL | Gfp::DMA32, order(0)).is_ok() {}
    assert_eq!(dma32.free_pages(), min_dma32);
    allocator.verify().unwrap();
}

#[test]
fn split_page_makes_each_page_its_own_block_and_refuses_a_wrong_order() {
    let allocator = normal_zone(1024, Settings::default());
    let zone = normal(&allocator);
    let p = alloc(&allocator, Gfp::KERNEL, order(2));
    assert!(matches!(
        allocator.split_page(p, order(1)),
        Err(mmkit_core::FreeError::WrongOrder { .. })
    ));
    assert!(matches!(
        allocator.split_page(p.add(1), Order::ZERO),
        Err(mmkit_core::FreeError::NotBlockStart { .. })
    ));
    assert_eq!(
        zone.mem_map().page(p).state_order(),
        (PageState::Allocated, order(2))
    );
    allocator.split_page(p, order(2)).unwrap();
    for i in 0..4 {
        assert_eq!(
            zone.mem_map().page(p.add(i)).state_order(),
            (PageState::Allocated, Order::ZERO)
        );
    }
    allocator.verify().unwrap();
    // Freed one by one, in any order, they merge back.
    for i in [2, 0, 3, 1] {
        free(&allocator, p.add(i), Order::ZERO);
    }
    assert_eq!(blocks(zone), [(0, 10)]);
}
