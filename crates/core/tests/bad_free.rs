//! Bad frees: each mistake a caller can make with `PageAllocator::free_pages` is refused
//! with its own `FreeError` and changes nothing. Every sequential test runs against both
//! entry points, `free_pages` and `free_pages_exclusive` (module `atomic` and module
//! `exclusive`): they differ only in how the claim is made, so a sequential bad free must
//! be refused by both with the same error.
//!
//! Linux counterpart: `free_pages_prepare` / `bad_page` catch some of these and taint the
//! kernel; mmkit refuses them instead (a bad call from a user returns an error and
//! changes nothing). "Nothing" is checked literally: every zone's free lists in
//! list order, `NR_FREE_PAGES`, the `PGFREE` and `PGALLOC` counters, the census of the
//! verify walk, every pageset's lists, and the descriptors of the pages the call named.
//! The allocator runs the v6.7 policy, so cheap orders are freed to (and double-freed
//! from) the pagesets and orders above 3 to the buddy lists; both paths are covered.

use std::sync::Barrier;

use mmkit_core::internals;
use mmkit_core::page::PageState;
use mmkit_core::page_alloc::pcp::NR_PCP_LISTS;
use mmkit_core::page_alloc::verify::ZoneCensus;
use mmkit_core::page_alloc::Caller;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{
    page_alloc::MigrateType, topology::ZoneSpec, BatchFreeError, FreeError, Gfp, Order,
    PageAllocator, Pfn, Policy, Settings, Topology, ZoneType,
};

/// Every call comes from a task on CPU 0 unless a test says otherwise.
const CPU0: Caller = Caller::task(0);

const LLC: CacheInfo = CacheInfo {
    llc_bytes: 32 << 20,
    llc_shared_cpus: 2,
};

fn order(n: u8) -> Order {
    Order::new(n).expect("order ≤ MAX_ORDER")
}

/// One Normal zone of `managed` pages at a pageblock-aligned pfn, everything managed.
fn one_zone(managed: u64) -> PageAllocator {
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: Pfn(0x10000),
        spanned: managed,
        present: managed,
        managed,
    };
    let topology = Topology::new(vec![spec], vec![2], LLC, false).expect("valid topology");
    build(topology)
}

fn build(topology: Topology) -> PageAllocator {
    PageAllocator::new(topology, Settings::default(), Policy::V6_7)
        .expect("default settings are valid")
}

fn alloc(allocator: &PageAllocator, gfp: Gfp, o: Order) -> Pfn {
    allocator
        .alloc_pages(CPU0, gfp, o)
        .unwrap_or_else(|e| panic!("order-{o} allocation: {e}"))
}

/// The two single-free entry points.
#[derive(Clone, Copy, Debug)]
enum Entry {
    /// `free_pages`: the claim is a compare-and-swap.
    Atomic,
    /// `free_pages_exclusive`: the claim is a load, a check and a store.
    Exclusive,
}

impl Entry {
    fn free(
        self,
        allocator: &PageAllocator,
        caller: Caller,
        pfn: Pfn,
        o: Order,
    ) -> Result<(), FreeError> {
        match self {
            Entry::Atomic => allocator.free_pages(caller, pfn, o),
            // SAFETY: each test frees from its own thread only, so no free races it.
            Entry::Exclusive => unsafe {
                internals::free_pages_exclusive(allocator, caller, pfn, o)
            },
        }
    }
}

/// Each named test (a `fn(Entry)` below) as a test of each entry point.
macro_rules! for_both_entry_points {
    ($($test:ident),* $(,)?) => {
        mod atomic {
            $(#[test] fn $test() { super::$test(super::Entry::Atomic) })*
        }
        mod exclusive {
            $(#[test] fn $test() { super::$test(super::Entry::Exclusive) })*
        }
    };
}

for_both_entry_points!(
    free_of_a_never_allocated_page_is_not_allocated,
    double_free_is_not_allocated,
    free_with_the_wrong_order_is_refused,
    free_inside_an_allocated_block_is_not_block_start,
    free_outside_every_zone_is_refused,
    free_of_a_misaligned_pfn_is_refused,
    free_of_a_reserved_page_is_refused,
    free_of_a_hole_is_refused_as_reserved,
    free_from_an_unknown_cpu_is_refused,
);

fn free(entry: Entry, allocator: &PageAllocator, pfn: Pfn, o: Order) {
    entry
        .free(allocator, CPU0, pfn, o)
        .unwrap_or_else(|e| panic!("{entry:?} free of {pfn:?} order {o}: {e}"));
}

/// A PC: DMA from pfn 1 (unaligned), DMA32 from 16 MiB, Normal from 4 GiB.
fn x86_64() -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma, 3000),
        ZoneSize::managed(0, ZoneType::Dma32, 4096),
        ZoneSize::managed(0, ZoneType::Normal, 4096),
    ];
    let topology = Topology::x86_64(&sizes, vec![2], LLC, false).expect("valid topology");
    build(topology)
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct ZoneSnapshot {
    free_blocks: Vec<(Pfn, Order, MigrateType)>,
    free_pages: i64,
    pgfree: u64,
    pgalloc: u64,
    census: ZoneCensus,
    /// Per CPU: pages on the pageset and blocks on each of its lists.
    pagesets: Vec<(u64, Vec<u64>)>,
}

/// A page descriptor as a test compares it: state, order, and the private word (cached
/// migratetype or reference count).
type PageWord = (PageState, Order, u16);

/// Everything a refused free must leave alone.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Snapshot {
    zones: Vec<ZoneSnapshot>,
    /// State, order and the private word of each named page (`None`: in no zone).
    pages: Vec<(Pfn, Option<PageWord>)>,
}

impl Snapshot {
    fn take(allocator: &PageAllocator, pfns: &[Pfn]) -> Snapshot {
        let censuses = allocator.verify().unwrap_or_else(|e| panic!("verify: {e}"));
        let zones = allocator
            .zones()
            .iter()
            .zip(censuses)
            .map(|(zone, census)| ZoneSnapshot {
                free_blocks: zone.free_blocks(),
                free_pages: zone.free_pages(),
                pgfree: zone.pgfree(),
                pgalloc: zone.pgalloc(),
                census,
                pagesets: (0..zone.nr_pagesets() as u32)
                    .map(|cpu| {
                        let pcp = zone.pageset(cpu).expect("cpu < nr_pagesets");
                        (
                            pcp.count,
                            (0..NR_PCP_LISTS).map(|i| pcp.list_len(i)).collect(),
                        )
                    })
                    .collect(),
            })
            .collect();
        let pages = pfns
            .iter()
            .map(|&pfn| {
                let page = allocator.find_zone(pfn).and_then(|z| z.mem_map().get(pfn));
                let state = page.map(|p| {
                    let (state, order) = p.state_order();
                    (state, order, p.refcount())
                });
                (pfn, state)
            })
            .collect();
        Snapshot { zones, pages }
    }
}

/// Free (`pfn`, `order`) through `entry`, expect `expected`, and check that nothing
/// changed. `involved` are further pages whose descriptors must stay as they were.
fn assert_refused(
    entry: Entry,
    allocator: &PageAllocator,
    pfn: Pfn,
    order: Order,
    expected: FreeError,
    involved: &[Pfn],
) {
    let mut pfns = vec![pfn];
    pfns.extend_from_slice(involved);
    let before = Snapshot::take(allocator, &pfns);
    assert_eq!(
        entry.free(allocator, CPU0, pfn, order),
        Err(expected),
        "{entry:?} free of {pfn:?} order {order}"
    );
    let after = Snapshot::take(allocator, &pfns);
    assert_eq!(
        before, after,
        "a refused {entry:?} free of {pfn:?} order {order} changed the allocator"
    );
}

fn free_of_a_never_allocated_page_is_not_allocated(entry: Entry) {
    let allocator = one_zone(4096);
    let zone = allocator.zone(0, ZoneType::Normal).unwrap();
    let start = zone.start_pfn();
    // The head of a free order-10 block, with its own order and with order 0; an aligned
    // tail page inside it; an odd tail page.
    assert!(zone
        .free_blocks()
        .iter()
        .any(|&(p, o, _)| p == start && o == Order::MAX));
    let cases = [
        (start, Order::MAX),
        (start, order(0)),
        (start.add(8), order(3)),
        (start.add(5), order(0)),
    ];
    for (pfn, o) in cases {
        assert_refused(
            entry,
            &allocator,
            pfn,
            o,
            FreeError::NotAllocated { pfn },
            &[start],
        );
    }
}

fn double_free_is_not_allocated(entry: Entry) {
    let allocator = one_zone(4096);
    // Order 4 bypasses the pagesets. Freed while its buddy is in use, a block stays a free
    // order-4 head.
    let low = alloc(&allocator, Gfp::KERNEL, order(4));
    let high = alloc(&allocator, Gfp::KERNEL, order(4));
    assert_eq!(
        high,
        low.buddy(order(4)),
        "the second order-4 block is the first one's buddy"
    );
    free(entry, &allocator, high, order(4));
    let zone = allocator.find_zone(high).unwrap();
    assert_eq!(
        zone.mem_map().page(high).state_order(),
        (PageState::Buddy, order(4))
    );
    assert_refused(
        entry,
        &allocator,
        high,
        order(4),
        FreeError::NotAllocated { pfn: high },
        &[low],
    );

    // Once its buddy is freed too they merge: the upper block's head becomes a tail page
    // of the merged block, and the lower one heads it with a larger order.
    free(entry, &allocator, low, order(4));
    assert_eq!(zone.mem_map().page(high).state(), PageState::Tail);
    assert_eq!(
        zone.mem_map().page(low).state_order(),
        (PageState::Buddy, Order::MAX)
    );
    assert_refused(
        entry,
        &allocator,
        high,
        order(4),
        FreeError::NotAllocated { pfn: high },
        &[low],
    );
    assert_refused(
        entry,
        &allocator,
        low,
        order(4),
        FreeError::NotAllocated { pfn: low },
        &[high],
    );

    // A cheap order: the first free puts the block on CPU 0's pageset.
    let cached = alloc(&allocator, Gfp::KERNEL, order(2));
    free(entry, &allocator, cached, order(2));
    assert_eq!(
        zone.mem_map().page(cached).state_order(),
        (PageState::Pcp, order(2))
    );
    assert_refused(
        entry,
        &allocator,
        cached,
        order(2),
        FreeError::NotAllocated { pfn: cached },
        &[],
    );
}

fn free_with_the_wrong_order_is_refused(entry: Entry) {
    let allocator = one_zone(4096);
    let blocks: Vec<Pfn> = (0..8)
        .map(|_| alloc(&allocator, Gfp::KERNEL, order(2)))
        .collect();
    // An order-2 block aligned for order 3, and one that is not.
    let a = *blocks
        .iter()
        .find(|p| p.is_aligned(order(3)))
        .expect("some block is 8-aligned");
    let b = *blocks
        .iter()
        .find(|p| !p.is_aligned(order(3)))
        .expect("some block is not");
    let involved = [a, b];
    // Smaller order, aligned: the head says order 2.
    let expected = FreeError::WrongOrder {
        pfn: a,
        allocated: order(2),
        given: order(1),
    };
    assert_refused(entry, &allocator, a, order(1), expected, &involved);
    let expected = FreeError::WrongOrder {
        pfn: a,
        allocated: order(2),
        given: order(0),
    };
    assert_refused(entry, &allocator, a, order(0), expected, &involved);
    // Larger order, aligned.
    let expected = FreeError::WrongOrder {
        pfn: a,
        allocated: order(2),
        given: order(3),
    };
    assert_refused(entry, &allocator, a, order(3), expected, &involved);
    // Larger order, not aligned to it: alignment is checked before the page is read.
    let expected = FreeError::Misaligned {
        pfn: b,
        order: order(3),
    };
    assert_refused(entry, &allocator, b, order(3), expected, &involved);
    // Every block is still freeable with the right order.
    for pfn in blocks {
        free(entry, &allocator, pfn, order(2));
    }
    allocator.verify().unwrap();
}

fn free_inside_an_allocated_block_is_not_block_start(entry: Entry) {
    let allocator = one_zone(4096);
    for o in [order(3), order(5)] {
        let p = alloc(&allocator, Gfp::KERNEL, o);
        let expected = FreeError::NotBlockStart {
            pfn: p.add(2),
            block: p,
        };
        assert_refused(entry, &allocator, p.add(2), order(1), expected, &[p]);
        let last = p.add(o.pages() - 1);
        let expected = FreeError::NotBlockStart {
            pfn: last,
            block: p,
        };
        assert_refused(entry, &allocator, last, order(0), expected, &[p]);
        free(entry, &allocator, p, o);
    }
}

fn free_outside_every_zone_is_refused(entry: Entry) {
    let allocator = x86_64();
    let dma = allocator.zone(0, ZoneType::Dma).unwrap();
    let dma32 = allocator.zone(0, ZoneType::Dma32).unwrap();
    let normal = allocator.zone(0, ZoneType::Normal).unwrap();
    assert_eq!(dma.start_pfn(), Pfn(1));
    let dma_end = dma.start_pfn().add(dma.spanned());
    assert!(dma_end < dma32.start_pfn(), "a gap between DMA and DMA32");
    let normal_end = normal.start_pfn().add(normal.spanned());
    let outside = [
        Pfn(0),
        dma_end,
        Pfn((dma_end.0 + dma32.start_pfn().0) / 2),
        dma32.start_pfn().add(dma32.spanned()),
        normal_end,
        normal_end.add(100),
    ];
    for pfn in outside {
        assert!(allocator.find_zone(pfn).is_none());
        assert_refused(
            entry,
            &allocator,
            pfn,
            order(0),
            FreeError::OutsideZones { pfn },
            &[],
        );
    }
    // The zone check comes first: a misaligned pfn outside the zones is still outside.
    let pfn = dma_end.add(1);
    assert_refused(
        entry,
        &allocator,
        pfn,
        order(1),
        FreeError::OutsideZones { pfn },
        &[],
    );
}

fn free_of_a_misaligned_pfn_is_refused(entry: Entry) {
    let allocator = one_zone(4096);
    let p = alloc(&allocator, Gfp::KERNEL, order(1));
    let pfn = p.add(1);
    assert_refused(
        entry,
        &allocator,
        pfn,
        order(1),
        FreeError::Misaligned {
            pfn,
            order: order(1),
        },
        &[p],
    );
    free(entry, &allocator, p, order(1));
}

fn free_of_a_reserved_page_is_refused(entry: Entry) {
    // 100 reserved pages, then 3996 managed, then 96 holes.
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: Pfn(0x10000),
        spanned: 4192,
        present: 4096,
        managed: 3996,
    };
    let topology = Topology::new(vec![spec], vec![2], LLC, false).unwrap();
    let allocator = build(topology);
    let start = spec.start_pfn;
    for pfn in [start, start.add(1), start.add(64), start.add(99)] {
        let zone = allocator.find_zone(pfn).unwrap();
        assert_eq!(zone.mem_map().page(pfn).state(), PageState::Reserved);
        assert_refused(
            entry,
            &allocator,
            pfn,
            order(0),
            FreeError::Reserved { pfn },
            &[],
        );
    }
    // An aligned higher-order free of a reserved head is refused the same way.
    let pfn = start.add(64);
    assert_refused(
        entry,
        &allocator,
        pfn,
        order(5),
        FreeError::Reserved { pfn },
        &[],
    );
    // The first managed page is a free page, not a reserved one.
    let pfn = start.add(100);
    assert_refused(
        entry,
        &allocator,
        pfn,
        order(0),
        FreeError::NotAllocated { pfn },
        &[],
    );
}

fn free_of_a_hole_is_refused_as_reserved(entry: Entry) {
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: Pfn(0x10000),
        spanned: 4192,
        present: 4096,
        managed: 4096,
    };
    let topology = Topology::new(vec![spec], vec![2], LLC, false).unwrap();
    let allocator = build(topology);
    for pfn in [spec.start_pfn.add(4096), spec.start_pfn.add(4191)] {
        let zone = allocator
            .find_zone(pfn)
            .expect("a hole is spanned by its zone");
        assert_eq!(zone.mem_map().page(pfn).state(), PageState::Hole);
        assert_refused(
            entry,
            &allocator,
            pfn,
            order(0),
            FreeError::Reserved { pfn },
            &[],
        );
    }
}

fn free_from_an_unknown_cpu_is_refused(entry: Entry) {
    let allocator = one_zone(4096);
    let p = alloc(&allocator, Gfp::KERNEL, order(0));
    let before = Snapshot::take(&allocator, &[p]);
    assert_eq!(
        entry.free(&allocator, Caller::task(2), p, order(0)),
        Err(FreeError::InvalidCpu(2))
    );
    assert_eq!(before, Snapshot::take(&allocator, &[p]));
    free(entry, &allocator, p, order(0));
}

/// The atomic entry point only: `free_pages_exclusive` is for callers that exclude such
/// races, and does not detect them.
#[test]
fn racing_double_free_lets_exactly_one_caller_win() {
    let allocator = one_zone(2048);
    let barrier = Barrier::new(2);
    for round in 0..1000u32 {
        // Cheap orders race onto two CPUs' pagesets, order 4 onto the buddy lists.
        let o = order([0, 1, 3, 4][round as usize % 4]);
        let pfn = alloc(&allocator, Gfp::KERNEL, o);
        let results: Vec<_> = std::thread::scope(|scope| {
            let free_on = |cpu| {
                let barrier = &barrier;
                let allocator = &allocator;
                move || {
                    barrier.wait();
                    allocator.free_pages(Caller::task(cpu), pfn, o)
                }
            };
            let first = scope.spawn(free_on(0));
            let second = scope.spawn(free_on(1));
            [first.join().unwrap(), second.join().unwrap()]
        })
        .into();
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        let loss = results.iter().find(|r| r.is_err()).unwrap();
        assert_eq!(*loss, Err(FreeError::NotAllocated { pfn }), "round {round}");
        let census = allocator
            .verify()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(
            census.iter().all(|c| c.allocated == 0),
            "round {round}: {census:?}"
        );
    }
    let zone = allocator.zone(0, ZoneType::Normal).unwrap();
    assert_eq!(zone.free_pages() as u64 + zone.pcp_pages(), 2048);
}

/// The case `free_pages_exclusive` exists for: its owner frees a block twice, one free
/// after the other. Refused with the error `free_pages` gives, changing nothing, from the
/// pagesets (orders 0 to 3) and from the buddy lists (order 4).
#[test]
fn exclusive_double_free_is_refused_as_the_atomic_one_is() {
    let allocator = one_zone(4096);
    for o in [order(0), order(1), order(3), order(4)] {
        let pfn = alloc(&allocator, Gfp::KERNEL, o);
        free(Entry::Exclusive, &allocator, pfn, o);
        let atomic = allocator.free_pages(CPU0, pfn, o);
        assert_eq!(atomic, Err(FreeError::NotAllocated { pfn }), "order {o}");
        assert_refused(
            Entry::Exclusive,
            &allocator,
            pfn,
            o,
            atomic.unwrap_err(),
            &[],
        );
    }
}

/// The batched form: a batch holding a page freed before is refused whole, with the index
/// and error `free_pages_batch` gives, and changes nothing.
#[test]
fn exclusive_batch_with_a_freed_page_is_refused_as_the_atomic_one_is() {
    let allocator = one_zone(4096);
    let pfns: Vec<Pfn> = (0..4)
        .map(|_| alloc(&allocator, Gfp::KERNEL, order(0)))
        .collect();
    let exclusive = |pfns: &[Pfn]| {
        // SAFETY: this test's one thread is the only one that frees.
        unsafe { internals::free_pages_batch_exclusive(&allocator, CPU0, pfns) }
    };
    assert_eq!(exclusive(&pfns[2..]), Ok(()));
    let before = Snapshot::take(&allocator, &pfns);
    let atomic = allocator.free_pages_batch(CPU0, &pfns);
    let refused = BatchFreeError {
        index: 2,
        error: FreeError::NotAllocated { pfn: pfns[2] },
    };
    assert_eq!(atomic, Err(refused));
    assert_eq!(
        refused.to_string(),
        format!(
            "page 2 of the batch: pfn {} is free: double free, or never allocated; nothing freed",
            pfns[2]
        )
    );
    // An error a caller can box and chain.
    let _: &dyn std::error::Error = &refused;
    assert_eq!(exclusive(&pfns), atomic);
    assert_eq!(before, Snapshot::take(&allocator, &pfns));
    assert_eq!(exclusive(&pfns[..2]), Ok(()));
    allocator.verify().expect("every page accounted for");
}
