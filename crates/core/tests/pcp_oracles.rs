//! The PCP oracles of `docs/reference/linux-mm.md` §8 and `docs/reference/pcp-series.md` §4 (O1–O12), run
//! through the public allocator API for every preset each oracle names.
//!
//! Nothing here calls a sizing rule directly: pages are allocated and freed with
//! `alloc_pages`/`free_pages` from a `Caller::task(cpu)`, time passes with `vmstat_tick`,
//! kswapd and the zone watermark state are stood in for by `internals::set_zone_flag`, and the
//! results are read back from `Zone::pageset(cpu)` and the zone's event counters.
//!
//! A "fresh" pageset is one that only ever saw frees: the pages are allocated on CPU 1 and
//! freed on CPU 0, so CPU 0's pageset starts at count 0 with every factor 0, as the
//! oracles assume. Where an oracle starts from a tuned state (`pcp.high` 2000, count 1000,
//! …) the test reaches that state with allocations, drains and ticks first, and asserts it
//! before running the oracle; the comment on each test shows the arithmetic.
//!
//! Two machines:
//! - §8 (the 2-CPU Linux 6.18 VM, snapshot A): DMA 3840, DMA32 772915, Normal 196608
//!   pages, `min_free_kbytes` 67584, LLC 266240 KiB shared by 2. Normal: batch 63,
//!   high_min 4265 / 2 = 2132, high_max 196608 / 8 / 2 = 12288.
//! - §4 (the oracle machine): one Normal zone of 192000 pages, 12 CPUs,
//!   `min_free_kbytes` 14096. pages_min = 14096 / 4 = 3524; low = 3524 + max(3524 / 4,
//!   192000 · 10 / 10000) = 3524 + 881 = 4405; high_min = 4405 / 12 = 367; high_max =
//!   192000 / 8 / 12 = 2000; batch: 192000 >> 10 = 187, / 4 = 46, rounddown_pow2(69) − 1
//!   = 63.

use mmkit_core::internals;
use mmkit_core::page_alloc::pcp::PerCpuPages;
use mmkit_core::page_alloc::{Caller, DrainReason, WatermarkKind, Zone, ZoneFlags, ZoneId};
use mmkit_core::policy::PRESETS;
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Gfp, Order, PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};

/// Movable order-0 requests from the Normal zone: the oracles' "mt MOVABLE".
const MOVABLE: Gfp = Gfp::KERNEL.union(Gfp::MOVABLE);
/// The same from DMA32.
const MOVABLE_DMA32: Gfp = MOVABLE.union(Gfp::DMA32);

/// §4: 32 MiB shared by 12 CPUs = 2796202 bytes = 682 pages per CPU > 3 · 63: FHB set.
const LLC_FHB_SET: CacheInfo = CacheInfo {
    llc_bytes: 32 << 20,
    llc_shared_cpus: 12,
};
/// §4: 1 MiB shared by 12 CPUs = 87381 bytes = 21 pages per CPU ≤ 189: FHB clear.
const LLC_FHB_CLEAR: CacheInfo = CacheInfo {
    llc_bytes: 1 << 20,
    llc_shared_cpus: 12,
};
/// §3.1: 266240 KiB shared by 2 CPUs = 33280 pages per CPU > 189: FHB set.
const SPEC_LLC: CacheInfo = CacheInfo {
    llc_bytes: 266_240 << 10,
    llc_shared_cpus: 2,
};
/// 1 MiB shared by 2 CPUs = 128 pages per CPU ≤ 189: FHB clear on the §3.1 machine.
const SPEC_LLC_SMALL: CacheInfo = CacheInfo {
    llc_bytes: 1 << 20,
    llc_shared_cpus: 2,
};

fn order(n: u8) -> Order {
    Order::new(n).expect("order ≤ MAX_ORDER")
}

fn preset(name: &str) -> Policy {
    Policy::preset(name).unwrap_or_else(|| panic!("no preset {name}"))
}

/// The §4 oracle machine (see the module comment).
fn oracle_machine(policy: Policy, llc: CacheInfo) -> PageAllocator {
    let sizes = [ZoneSize::managed(0, ZoneType::Normal, 192_000)];
    let topology = Topology::x86_64(&sizes, vec![12], llc, false).expect("valid topology");
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(14_096),
        ..Settings::default()
    };
    PageAllocator::new(topology, settings, policy).expect("valid settings")
}

/// The §3.1 machine with `cpus` CPUs on its node and `percpu_pagelist_high_fraction`.
fn spec_machine(policy: Policy, llc: CacheInfo, cpus: u32, fraction: u32) -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma, 3840),
        ZoneSize::managed(0, ZoneType::Dma32, 772_915),
        ZoneSize::managed(0, ZoneType::Normal, 196_608),
    ];
    let topology = Topology::x86_64(&sizes, vec![cpus], llc, false).expect("valid topology");
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(67_584),
        percpu_pagelist_high_fraction: fraction,
        ..Settings::default()
    };
    PageAllocator::new(topology, settings, policy).expect("valid settings")
}

fn zone(allocator: &PageAllocator, zone_type: ZoneType) -> &Zone {
    allocator.zone(0, zone_type).expect("zone exists")
}

fn normal(allocator: &PageAllocator) -> &Zone {
    zone(allocator, ZoneType::Normal)
}

fn pcp(allocator: &PageAllocator, cpu: u32) -> PerCpuPages {
    normal(allocator).pageset(cpu).expect("cpu exists")
}

fn alloc_many(allocator: &PageAllocator, cpu: u32, gfp: Gfp, order: Order, n: usize) -> Vec<Pfn> {
    (0..n)
        .map(|i| {
            allocator
                .alloc_pages(Caller::task(cpu), gfp, order)
                .unwrap_or_else(|e| panic!("allocation {i} of order {order}: {e:?}"))
        })
        .collect()
}

fn free_all(allocator: &PageAllocator, cpu: u32, pfns: &[Pfn], order: Order) {
    for &pfn in pfns {
        allocator
            .free_pages(Caller::task(cpu), pfn, order)
            .expect("valid free");
    }
}

fn assert_verifies(allocator: &PageAllocator) {
    allocator.verify().unwrap_or_else(|e| panic!("verify: {e}"));
}

/// How a drain was triggered by a free.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// The `high` threshold (the oracles' "N").
    Normal,
    /// `free_high` (the oracles' "H").
    FreeHigh,
}

/// A drain seen right after free number `free` (1-based) of a stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Drain {
    free: usize,
    pages: u64,
    kind: Kind,
    /// `pcp.high` of the freeing CPU after the free.
    high: u64,
}

impl Drain {
    fn key(&self) -> (usize, u64, Kind) {
        (self.free, self.pages, self.kind)
    }
}

fn drain_counters(zone: &Zone) -> [u64; 4] {
    let events = zone.events();
    [
        events.pcp_drains(DrainReason::Free),
        events.pcp_drain_pages(DrainReason::Free),
        events.pcp_drains(DrainReason::FreeHigh),
        events.pcp_drain_pages(DrainReason::FreeHigh),
    ]
}

/// Free `blocks` one by one on `cpu` (Normal zone) and report every drain a free caused.
fn free_stream(allocator: &PageAllocator, cpu: u32, blocks: &[(Pfn, Order)]) -> Vec<Drain> {
    let zone = normal(allocator);
    let mut drains = Vec::new();
    let mut before = drain_counters(zone);
    for (i, &(pfn, order)) in blocks.iter().enumerate() {
        allocator
            .free_pages(Caller::task(cpu), pfn, order)
            .expect("valid free");
        let after = drain_counters(zone);
        let normal_drains = after[0] - before[0];
        let high_drains = after[2] - before[2];
        assert!(
            normal_drains + high_drains <= 1,
            "free #{} drained twice",
            i + 1
        );
        if normal_drains + high_drains == 1 {
            let (pages, kind) = if normal_drains == 1 {
                (after[1] - before[1], Kind::Normal)
            } else {
                (after[3] - before[3], Kind::FreeHigh)
            };
            let high = pcp(allocator, cpu).high;
            drains.push(Drain {
                free: i + 1,
                pages,
                kind,
                high,
            });
        }
        before = after;
    }
    drains
}

fn keys(drains: &[Drain]) -> Vec<(usize, u64, Kind)> {
    drains.iter().map(Drain::key).collect()
}

/// A stream of `n` blocks of one order, allocated on CPU 1.
fn blocks_from_cpu1(allocator: &PageAllocator, order: Order, n: usize) -> Vec<(Pfn, Order)> {
    alloc_many(allocator, 1, MOVABLE, order, n)
        .into_iter()
        .map(|pfn| (pfn, order))
        .collect()
}

/// Order-0 allocations on `cpu` until its pageset's `high` reaches `high_max` (from
/// patch 7 every refill grows it). Returns the pages.
fn grow_high_to_max(
    allocator: &PageAllocator,
    zone_type: ZoneType,
    gfp: Gfp,
    cpu: u32,
) -> Vec<Pfn> {
    let zone = zone(allocator, zone_type);
    let mut pages = Vec::new();
    loop {
        pages.push(
            allocator
                .alloc_pages(Caller::task(cpu), gfp, Order::ZERO)
                .expect("allocation"),
        );
        let pcp = zone.pageset(cpu).expect("cpu exists");
        if pcp.high == pcp.high_max {
            return pages;
        }
        assert!(pages.len() < 100_000, "high never reached high_max");
    }
}

/// A refill seen at allocation number `alloc` (1-based).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Refill {
    alloc: usize,
    pages: u64,
    high: u64,
    alloc_factor: u8,
}

/// `n` allocations of `order` on `cpu`, reporting each refill of `zone_type`'s pageset.
fn alloc_stream(
    allocator: &PageAllocator,
    zone_type: ZoneType,
    gfp: Gfp,
    cpu: u32,
    order: Order,
    n: usize,
) -> Vec<Refill> {
    let zone = zone(allocator, zone_type);
    let events = zone.events();
    let mut refills = Vec::new();
    for i in 0..n {
        let (calls, pages) = (events.pcp_refills(), events.pcp_refill_pages());
        allocator
            .alloc_pages(Caller::task(cpu), gfp, order)
            .expect("allocation");
        let calls = events.pcp_refills() - calls;
        assert!(calls <= 1, "allocation #{} refilled twice", i + 1);
        if calls == 1 {
            let pcp = zone.pageset(cpu).expect("cpu exists");
            refills.push(Refill {
                alloc: i + 1,
                pages: events.pcp_refill_pages() - pages,
                high: pcp.high,
                alloc_factor: pcp.alloc_factor,
            });
        }
    }
    refills
}

/// The refill sizes of an order-0 stream whose sizes run through `first` and then stay at
/// `steady`, up to allocation `horizon`: (alloc #, pages).
fn refill_schedule(first: &[u64], steady: u64, horizon: usize) -> Vec<(usize, u64)> {
    let mut schedule = Vec::new();
    let mut alloc = 1;
    let mut sizes = first.iter().copied().chain(std::iter::repeat(steady));
    while alloc <= horizon {
        let size = sizes.next().expect("infinite");
        schedule.push((alloc, size));
        alloc += size as usize;
    }
    schedule
}

fn drains_every(
    first: usize,
    step: usize,
    pages: u64,
    kind: Kind,
    horizon: usize,
) -> Vec<(usize, u64, Kind)> {
    (first..=horizon)
        .step_by(step)
        .map(|free| (free, pages, kind))
        .collect()
}

fn tick_and_read(
    allocator: &PageAllocator,
    zone_type: ZoneType,
    cpu: u32,
) -> (bool, u64, u64, u64) {
    let zone = zone(allocator, zone_type);
    let before = zone.events().pcp_drain_pages(DrainReason::Decay);
    let work = allocator.vmstat_tick(cpu);
    let drained = zone.events().pcp_drain_pages(DrainReason::Decay) - before;
    let pcp = zone.pageset(cpu).expect("cpu exists");
    (work, pcp.high, drained, pcp.count)
}

// ---------------------------------------------------------------------------------------
// The machines themselves.
// ---------------------------------------------------------------------------------------

#[test]
fn oracle_machine_has_batch_63_high_min_367_high_max_2000() {
    for name in PRESETS {
        for (llc, fhb) in [(LLC_FHB_SET, true), (LLC_FHB_CLEAR, false)] {
            let allocator = oracle_machine(preset(name), llc);
            let zone = normal(&allocator);
            assert_eq!(zone.wmark(WatermarkKind::Min), 3524, "{name}");
            assert_eq!(zone.wmark(WatermarkKind::Low), 4405, "{name}");
            assert_eq!(zone.nr_pagesets(), 12);
            for cpu in 0..12 {
                let pcp = pcp(&allocator, cpu);
                assert_eq!(
                    (pcp.batch, pcp.high_min, pcp.high_max),
                    (63, 367, 2000),
                    "{name} cpu {cpu}"
                );
                assert_eq!(pcp.flags.free_high_batch, fhb, "{name} cpu {cpu}");
                // base..patch5 fix high at high_min; from patch 7 it is clamped lazily,
                // so an unused pageset shows 0. Patch 6 is checked on its own below.
                let policy = preset(name).pcp;
                if policy.auto_tune || !policy.high_min_max {
                    let high = if policy.auto_tune { 0 } else { 367 };
                    assert_eq!(pcp.high, high, "{name} cpu {cpu}");
                }
                assert_eq!(
                    (pcp.count, pcp.free_factor, pcp.free_count, pcp.alloc_factor),
                    (0, 0, 0, 0)
                );
            }
        }
    }
}

/// `pcp.high` as shown by a preset without auto-tuning: v6.6 writes high_min into it;
/// from patch 6 nothing writes it and it stays 0 (the rules read high_min).
fn fixed_high(policy: &Policy) -> u64 {
    if policy.pcp.high_min_max {
        0
    } else {
        367
    }
}

/// docs/reference/pcp-series.md §2.6: from patch 6 `pageset_update` writes high_min/high_max and
/// "pcp.high is no longer written by anything. It stays 0" (behaviour ≡ patch 5, since
/// every rule reads high_min). Only `pageset().high` and zoneinfo show it (the doc marks
/// that display [unverified]; it follows from `pageset_update` no longer writing `high`).
#[test]
fn patch6_leaves_pcp_high_unwritten() {
    let allocator = oracle_machine(preset("patch6"), LLC_FHB_SET);
    let spare = alloc_many(&allocator, 1, MOVABLE, Order::ZERO, 400);
    free_all(&allocator, 0, &spare, Order::ZERO);
    let pcp = pcp(&allocator, 0);
    assert_eq!((pcp.high_min, pcp.high_max), (367, 2000));
    assert_eq!(pcp.high, 0);
}

#[test]
fn spec_machine_pagesets_match_the_live_vm() {
    let allocator = spec_machine(Policy::V6_7, SPEC_LLC, 2, 0);
    let expected = [
        (ZoneType::Dma, 1, 41, 240, (66, 82, 98)),
        (ZoneType::Dma32, 63, 8385, 48307, (13416, 16770, 20124)),
        (ZoneType::Normal, 63, 2132, 12288, (3412, 4265, 5118)),
    ];
    for (zone_type, batch, high_min, high_max, marks) in expected {
        let zone = zone(&allocator, zone_type);
        let got_marks = (
            zone.wmark(WatermarkKind::Min),
            zone.wmark(WatermarkKind::Low),
            zone.wmark(WatermarkKind::High),
        );
        assert_eq!(got_marks, marks, "{zone_type}");
        for cpu in 0..2 {
            let pcp = zone.pageset(cpu).expect("cpu exists");
            assert_eq!(
                (pcp.batch, pcp.high_min, pcp.high_max),
                (batch, high_min, high_max),
                "{zone_type}"
            );
            assert!(
                pcp.flags.free_high_batch,
                "{zone_type} cpu {cpu}: 33280 pages of LLC each"
            );
        }
    }
    let fraction_8 = spec_machine(Policy::V6_7, SPEC_LLC, 2, 8);
    let limits = pcp(&fraction_8, 0);
    assert_eq!((limits.high_min, limits.high_max), (12288, 12288));
}

// ---------------------------------------------------------------------------------------
// docs/reference/linux-mm.md §8
// ---------------------------------------------------------------------------------------

/// §8 refill sequence: (pages pulled, pcp.high after, alloc_factor) for a fresh pageset
/// with high_min 2132, high_max 12288 under order-0 allocations only.
#[test]
fn spec_refill_sequence_doubles_then_grows_high_to_high_max() {
    for name in ["patch9", "v6.7"] {
        let allocator = spec_machine(preset(name), SPEC_LLC, 2, 0);
        let refills = alloc_stream(
            &allocator,
            ZoneType::Normal,
            MOVABLE,
            0,
            Order::ZERO,
            12_100,
        );
        let got: Vec<(u64, u64, u8)> = refills
            .iter()
            .map(|r| (r.pages, r.high, r.alloc_factor))
            .collect();
        let expected = [
            (63, 2195, 1),
            (126, 2321, 2),
            (252, 2573, 3),
            (504, 3077, 4),
            (1008, 4085, 5),
            (2016, 6101, 5),
            (2016, 8117, 5),
            (2016, 10133, 5),
            (2016, 12149, 5),
            (2016, 12288, 5),
            (2016, 12288, 5),
        ];
        assert_eq!(got, expected, "{name}");
        // Refills happen when the list runs dry: alloc #1, then 63, 126, … later.
        assert_eq!(refills[1].alloc, 64);
        assert_eq!(refills[5].alloc, 1 + 63 + 126 + 252 + 504 + 1008);
        assert_verifies(&allocator);
    }
}

/// §8 decay from 12288 with high_min 2132 and count 0: 14 ticks, 1/8 each.
/// Reaching it: order-0 allocations on CPU 0 grow pcp.high to 12288 (the refill sequence
/// above, at allocation #10018); `drain_local_pages` then empties the pageset without
/// touching `high`.
#[test]
fn spec_decay_walks_high_from_high_max_to_high_min_in_14_ticks() {
    let allocator = spec_machine(Policy::V6_7, SPEC_LLC, 2, 0);
    let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
    allocator.drain_local_pages(0, None);
    let start = pcp(&allocator, 0);
    assert_eq!((start.count, start.high), (0, 12288));
    let expected = [
        10752, 9408, 8232, 7203, 6303, 5516, 4827, 4224, 3696, 3234, 2830, 2477, 2168, 2132,
    ];
    for (tick, &high) in expected.iter().enumerate() {
        let (work, got, drained, _) = tick_and_read(&allocator, ZoneType::Normal, 0);
        assert_eq!((got, drained), (high, 0), "tick {}", tick + 1);
        // The tick reports work while high stays above high_min.
        assert_eq!(work, high > 2132, "tick {}", tick + 1);
    }
    let (work, high, _, _) = tick_and_read(&allocator, ZoneType::Normal, 0);
    assert_eq!((work, high), (false, 2132));
}

/// §8 decay of DMA32 from 48307 with high_min 8385. The doc lists the first eight values
/// and "reaches 8385 after 14 ticks"; the rest follow from high − high/8:
/// 18972 − 2371 = 16601, − 2075 = 14526, − 1815 = 12711, − 1588 = 11123, − 1390 = 9733,
/// − 1216 = 8517, then 8517 − 1064 = 7453 < 8385 → 8385.
#[test]
fn spec_decay_of_dma32_reaches_high_min_after_14_ticks() {
    let allocator = spec_machine(Policy::V6_7, SPEC_LLC, 2, 0);
    let _pages = grow_high_to_max(&allocator, ZoneType::Dma32, MOVABLE_DMA32, 0);
    let dma32 = ZoneId {
        node: 0,
        zone_type: ZoneType::Dma32,
    };
    allocator.drain_local_pages(0, Some(dma32));
    let start = zone(&allocator, ZoneType::Dma32).pageset(0).expect("cpu 0");
    assert_eq!((start.count, start.high, start.high_min), (0, 48307, 8385));
    let expected = [
        42269, 36986, 32363, 28318, 24779, 21682, 18972, 16601, 14526, 12711, 11123, 9733, 8517,
        8385,
    ];
    for (tick, &high) in expected.iter().enumerate() {
        let (_, got, drained, _) = tick_and_read(&allocator, ZoneType::Dma32, 0);
        assert_eq!((got, drained), (high, 0), "tick {}", tick + 1);
    }
}

/// §8: with count 5000 and high 12288 one tick lowers high to 10752 and drains nothing;
/// with count 12000, high = max(12000 − 2016, 10752) = 10752 and 1248 pages go back.
/// Reaching it: grow high to 12288 on CPU 0, drain CPU 0, then free `count` of those pages
/// on CPU 0 (count < 12288, so no free drains and high stays put).
#[test]
fn spec_decay_trims_count_down_to_the_decayed_high() {
    for (count, drained) in [(5000u64, 0u64), (12_000, 1248)] {
        let allocator = spec_machine(Policy::V6_7, SPEC_LLC, 2, 0);
        let mut pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
        let extra = (count as usize).saturating_sub(pages.len());
        pages.extend(alloc_many(&allocator, 0, MOVABLE, Order::ZERO, extra));
        allocator.drain_local_pages(0, None);
        free_all(&allocator, 0, &pages[..count as usize], Order::ZERO);
        let start = pcp(&allocator, 0);
        assert_eq!((start.count, start.high), (count, 12288));
        let (work, high, got, left) = tick_and_read(&allocator, ZoneType::Normal, 0);
        assert!(work);
        assert_eq!(
            (high, got, left),
            (10752, drained, count - drained),
            "count {count}"
        );
        assert_verifies(&allocator);
    }
}

/// Not a listed oracle but §2.7's floor, derived by hand: a tick never lowers high more
/// than batch << S = 2016 below count. It only bites when high / 8 > 2016, so it needs
/// DMA32 (high_max 48307): with count 48000, high → max(48000 − 2016, 48307 − 6038) =
/// 45984 and 2016 pages drain; next tick max(45984 − 2016, 45984 − 5748) = 43968.
#[test]
fn spec_decay_never_lowers_high_more_than_2016_below_count() {
    let allocator = spec_machine(Policy::V6_7, SPEC_LLC, 2, 0);
    let mut pages = grow_high_to_max(&allocator, ZoneType::Dma32, MOVABLE_DMA32, 0);
    let extra = 48_000 - pages.len();
    pages.extend(alloc_many(&allocator, 1, MOVABLE_DMA32, Order::ZERO, extra));
    let dma32 = ZoneId {
        node: 0,
        zone_type: ZoneType::Dma32,
    };
    allocator.drain_local_pages(0, Some(dma32));
    free_all(&allocator, 0, &pages, Order::ZERO);
    let start = zone(&allocator, ZoneType::Dma32).pageset(0).expect("cpu 0");
    assert_eq!((start.count, start.high), (48_000, 48307));
    let first = tick_and_read(&allocator, ZoneType::Dma32, 0);
    assert_eq!(first, (true, 45984, 2016, 45984));
    let second = tick_and_read(&allocator, ZoneType::Dma32, 0);
    assert_eq!(second, (true, 43968, 2016, 43968));
}

/// §8 order-0 free stream (high 2132, no allocations on the freeing CPU): free_count
/// saturates at 63 << 5 = 2016, so the first drain (at #2132) frees 2016, the next comes
/// 2016 frees later, and high stays 2132 (need = 2016 + 63 = 2079 < 2132).
#[test]
fn spec_order0_free_stream_drains_2016_at_2132_and_4148() {
    for name in ["patch9", "v6.7"] {
        let allocator = spec_machine(preset(name), SPEC_LLC, 2, 0);
        let blocks = blocks_from_cpu1(&allocator, Order::ZERO, 6200);
        let drains = free_stream(&allocator, 0, &blocks);
        assert_eq!(
            keys(&drains),
            drains_every(2132, 2016, 2016, Kind::Normal, 6200),
            "{name}"
        );
        assert!(drains.iter().all(|d| d.high == 2132), "{name}: {drains:?}");
        assert_verifies(&allocator);
    }
}

/// §8 order-1 free stream: free_count reaches 64 ≥ 63 before free #33, which empties the
/// pageset (66 pages). Without FREE_HIGH_BATCH every later free drains its own 2 pages;
/// with it, the pageset first collects a batch: 64 pages at #65, #97, #129 …
#[test]
fn spec_order1_free_stream_drains_at_33_then_per_free_batch_rule() {
    for (llc, fhb) in [(SPEC_LLC, true), (SPEC_LLC_SMALL, false)] {
        let allocator = spec_machine(Policy::V6_7, llc, 2, 0);
        assert_eq!(pcp(&allocator, 0).flags.free_high_batch, fhb);
        let blocks = blocks_from_cpu1(&allocator, order(1), 300);
        let drains = free_stream(&allocator, 0, &blocks);
        let mut expected = vec![(33, 66, Kind::FreeHigh)];
        if fhb {
            expected.extend(drains_every(65, 32, 64, Kind::FreeHigh, 300));
        } else {
            expected.extend(drains_every(34, 1, 2, Kind::FreeHigh, 300));
        }
        assert_eq!(keys(&drains), expected, "FREE_HIGH_BATCH {fhb}");
        assert!(drains.iter().all(|d| d.high == 2132));
        assert_verifies(&allocator);
    }
}

/// §8 free_high side effect: pcp.high := max(high − 2016, high_min). From 12288 (grown by
/// allocations, then drained): 10272, 8256, 6240, 4224, 2208, then 2132 at each H.
#[test]
fn spec_free_high_lowers_high_by_2016_down_to_high_min() {
    let allocator = spec_machine(Policy::V6_7, SPEC_LLC, 2, 0);
    let blocks = blocks_from_cpu1(&allocator, order(1), 230);
    let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
    allocator.drain_local_pages(0, None);
    let start = pcp(&allocator, 0);
    assert_eq!((start.count, start.high, start.free_count), (0, 12288, 0));
    let drains = free_stream(&allocator, 0, &blocks);
    let got: Vec<(usize, Kind, u64)> = drains.iter().map(|d| (d.free, d.kind, d.high)).collect();
    let h = Kind::FreeHigh;
    let expected = [
        (33, h, 10272),
        (65, h, 8256),
        (97, h, 6240),
        (129, h, 4224),
        (161, h, 2208),
        (193, h, 2132),
        (225, h, 2132),
    ];
    assert_eq!(got, expected);
}

// ---------------------------------------------------------------------------------------
// docs/reference/pcp-series.md §4, batch 63, high_min 367, high_max 2000
// ---------------------------------------------------------------------------------------

/// O1: 400 order-0 frees, then one order-1 free (FHB set).
#[test]
fn o1_lone_order1_free_after_order0_stream_drains_only_in_base() {
    for name in PRESETS {
        let allocator = oracle_machine(preset(name), LLC_FHB_SET);
        let mut blocks = blocks_from_cpu1(&allocator, Order::ZERO, 400);
        blocks.extend(blocks_from_cpu1(&allocator, order(1), 1));
        let drains = free_stream(&allocator, 0, &blocks);
        let end = pcp(&allocator, 0);
        let n = Kind::Normal;
        match name {
            // The normal drain at #367 frees 63 (ff → 1), leaving 304; #368..400 → 337;
            // the order-1 free sees ff = 1 and empties all 339 pages.
            "base" => {
                assert_eq!(
                    keys(&drains),
                    [(367, 63, n), (401, 339, Kind::FreeHigh)],
                    "{name}"
                );
                assert_eq!(end.count, 0);
            }
            // free_count 367 at #367: drain clamp(367, 63, 304) = 304, high → 367 + 63.
            // The order-1 free finds PREV clear (order-0 frees cleared it): no drain.
            "patch9" | "v6.7" => {
                assert_eq!(keys(&drains), [(367, 304, n)], "{name}");
                assert_eq!(drains[0].high, 430);
                assert_eq!(
                    (end.count, end.free_count, end.high),
                    (98, 402, 430),
                    "{name}"
                );
            }
            // PREV was cleared by the order-0 frees: no free_high, 339 < 367.
            _ => {
                assert_eq!(keys(&drains), [(367, 63, n)], "{name}");
                assert_eq!((end.count, end.free_factor), (339, 1), "{name}");
            }
        }
    }
}

/// O2: a pure order-1 free stream, no allocations, with FHB set and clear.
#[test]
fn o2_order1_free_stream_drains_per_preset_and_batch_flag() {
    const HORIZON: usize = 300;
    let h = Kind::FreeHigh;
    for name in PRESETS {
        let policy = preset(name);
        for (llc, fhb) in [(LLC_FHB_SET, true), (LLC_FHB_CLEAR, false)] {
            let allocator = oracle_machine(policy, llc);
            let blocks = blocks_from_cpu1(&allocator, order(1), HORIZON);
            let drains = free_stream(&allocator, 0, &blocks);
            let expected = if policy.pcp.free_count {
                // free_count 64 ≥ 63 before free #33: 66 pages.
                let mut e = vec![(33, 66, h)];
                if fhb {
                    e.extend(drains_every(65, 32, 64, h, HORIZON));
                } else {
                    e.extend(drains_every(34, 1, 2, h, HORIZON));
                }
                e
            } else {
                // #184: count 368 ≥ 367, 63 requested = 32 order-1 blocks (64 pages),
                // ff → 1; #185: free_high empties the remaining 306.
                let mut e = vec![(184, 64, Kind::Normal), (185, 306, h)];
                if fhb && policy.pcp.free_high_batch {
                    e.extend(drains_every(217, 32, 64, h, HORIZON));
                } else {
                    e.extend(drains_every(186, 1, 2, h, HORIZON));
                }
                e
            };
            assert_eq!(keys(&drains), expected, "{name} FHB {fhb}");
            if policy.pcp.auto_tune {
                // Every H sets pcp.high := max(high − 2016, 367) = 367.
                assert!(drains.iter().all(|d| d.high == 367), "{name}");
            }
        }
    }
}

/// O3: an order-0 allocation stream on an empty pageset, no frees.
#[test]
fn o3_order0_refill_sizes_scale_per_preset() {
    const HORIZON: usize = 6000;
    for name in PRESETS {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let refills = alloc_stream(
            &allocator,
            ZoneType::Normal,
            MOVABLE,
            0,
            Order::ZERO,
            HORIZON,
        );
        let got: Vec<(usize, u64)> = refills.iter().map(|r| (r.alloc, r.pages)).collect();
        let (expected, highs): (_, Vec<u64>) = if policy.pcp.auto_tune {
            // high 367 → 430 → 556 → 808 → 1312 → 2000; then maxn = 2000 − 0 − 63 = 1937.
            (
                refill_schedule(&[63, 126, 252, 504, 1008], 1937, HORIZON),
                vec![430, 556, 808, 1312, 2000],
            )
        } else if policy.pcp.alloc_factor {
            // maxn = 367 − 0 − 63 = 304 caps the doubling at the 4th refill (#442).
            (
                refill_schedule(&[63, 126, 252], 304, HORIZON),
                vec![fixed_high(&policy); 5],
            )
        } else {
            (
                refill_schedule(&[], 63, HORIZON),
                vec![fixed_high(&policy); 5],
            )
        };
        assert_eq!(got, expected, "{name}");
        let got_highs: Vec<u64> = refills.iter().take(5).map(|r| r.high).collect();
        assert_eq!(got_highs, highs, "{name}");
        if policy.pcp.auto_tune {
            assert_eq!(refills[4].alloc_factor, 5, "{name}: af → 5 at #946");
            assert!(refills[5..].iter().all(|r| r.high == 2000));
        }
    }
}

/// O3 with BELOW_HIGH set: patch 8 and 9 never grow high, so the refills are patch 5's
/// 63/126/252/304…; patch 7 gates growth on RECLAIM_ACTIVE only and still grows.
#[test]
fn o3_below_high_stops_refill_growth_from_patch8() {
    const HORIZON: usize = 3000;
    for name in ["patch7", "patch8", "patch9", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        internals::set_zone_flag(normal(&allocator), ZoneFlags::BELOW_HIGH);
        let refills = alloc_stream(
            &allocator,
            ZoneType::Normal,
            MOVABLE,
            0,
            Order::ZERO,
            HORIZON,
        );
        let got: Vec<(usize, u64)> = refills.iter().map(|r| (r.alloc, r.pages)).collect();
        if policy.pcp.below_high {
            assert_eq!(
                got,
                refill_schedule(&[63, 126, 252], 304, HORIZON),
                "{name}"
            );
            assert!(refills.iter().all(|r| r.high == 367), "{name}");
        } else {
            assert_eq!(
                got,
                refill_schedule(&[63, 126, 252, 504, 1008], 1937, HORIZON),
                "{name}"
            );
            assert_eq!(refills[4].high, 2000);
        }
        assert!(
            normal(&allocator).flags().contains(ZoneFlags::BELOW_HIGH),
            "only frees clear it"
        );
    }
}

/// O4: an order-0 free stream with `percpu_pagelist_high_fraction` 8: high = high_min =
/// high_max = 196608 / 8 / 2 = 12288 (the §3.1 machine, batch 63).
#[test]
fn o4_free_stream_with_fraction_8_drains_per_scale_rule() {
    const HORIZON: usize = 40_600;
    let n = Kind::Normal;
    for name in PRESETS {
        let policy = preset(name);
        let allocator = spec_machine(policy, SPEC_LLC, 2, 8);
        let blocks = blocks_from_cpu1(&allocator, Order::ZERO, HORIZON);
        let drains = free_stream(&allocator, 0, &blocks);
        let doubling = [
            (12288, 63, n),
            (12351, 126, n),
            (12477, 252, n),
            (12729, 504, n),
            (13233, 1008, n),
            (14241, 2016, n),
        ];
        let expected = if policy.pcp.free_count {
            // free_count saturated at 2016 long before #12288.
            drains_every(12288, 2016, 2016, n, HORIZON)
        } else if policy.pcp.cap_free_factor {
            let mut e = doubling[..5].to_vec();
            e.extend(drains_every(14241, 2016, 2016, n, HORIZON));
            e
        } else {
            // ff 6, 7, 8, then 63 << 8 = 16128 > 12225: clamp to high − batch.
            let mut e = doubling.to_vec();
            e.extend([(16257, 4032, n), (20289, 8064, n)]);
            e.extend(drains_every(28353, 12225, 12225, n, HORIZON));
            e
        };
        assert_eq!(keys(&drains), expected, "{name}");
        // Frozen at high_min = high_max; patch 6 alone shows the unwritten 0.
        let frozen = if policy.pcp.high_min_max && !policy.pcp.auto_tune {
            0
        } else {
            12288
        };
        assert!(
            drains.iter().all(|d| d.high == frozen),
            "{name}: high is frozen"
        );
        if !policy.pcp.free_count && !policy.pcp.cap_free_factor {
            assert_eq!(pcp(&allocator, 0).free_factor, 8, "{name}");
        }
    }
}

/// O5: an order-0 free stream with auto-tuning on (high_min 367, high_max 2000), no
/// allocations. Before patch 7 high is a fixed 367 (patch 6 ≡ patch 5, and patch 4 ≡
/// patch 3 while high ≤ 2079, so base..patch6 share patch 6's row).
#[test]
fn o5_order0_free_stream_grows_high_from_patch7() {
    const HORIZON: usize = 8000;
    let n = Kind::Normal;
    for name in PRESETS {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let blocks = blocks_from_cpu1(&allocator, Order::ZERO, HORIZON);
        let drains = free_stream(&allocator, 0, &blocks);
        let got: Vec<(usize, u64, u64)> =
            drains.iter().map(|d| (d.free, d.pages, d.high)).collect();
        let (mut expected, tail): (Vec<(usize, u64, u64)>, _) = if policy.pcp.free_count {
            (
                vec![
                    (367, 304, 430),
                    (734, 367, 797),
                    (1468, 734, 1531),
                    (2936, 1468, 2000),
                ],
                (4873, 1937, 1937, 2000),
            )
        } else if policy.pcp.auto_tune {
            (
                vec![
                    (367, 63, 367),
                    (430, 126, 367),
                    (556, 252, 367),
                    (808, 304, 567),
                    (1312, 504, 567),
                    (1816, 504, 1071),
                    (2824, 1008, 1071),
                    (3832, 1008, 2000),
                ],
                (5769, 1937, 1937, 2000),
            )
        } else {
            let fh = fixed_high(&policy);
            (
                vec![(367, 63, fh), (430, 126, fh), (556, 252, fh)],
                (808, 304, 304, fh),
            )
        };
        let (first, step, pages, high) = tail;
        expected.extend(
            (first..=HORIZON)
                .step_by(step)
                .map(|free| (free, pages, high)),
        );
        assert_eq!(got, expected, "{name}");
        assert!(drains.iter().all(|d| d.kind == n));
    }
}

/// O6 "sender became receiver": pcp.high 2000 (raised by earlier allocations), count 0,
/// ff = fc = 0, FHB set, then an order-1 free stream.
#[test]
fn o6_free_count_detects_a_former_allocator_freeing_quickly() {
    const HORIZON: usize = 1100;
    let h = Kind::FreeHigh;
    for name in ["patch7", "patch8", "patch9", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let blocks = blocks_from_cpu1(&allocator, order(1), HORIZON);
        let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
        allocator.drain_local_pages(0, None);
        let start = pcp(&allocator, 0);
        assert_eq!(
            (start.count, start.high, start.free_factor, start.free_count),
            (0, 2000, 0, 0)
        );
        let drains = free_stream(&allocator, 0, &blocks);
        let expected = if policy.pcp.free_count {
            let mut e = vec![(33, 66, h)];
            e.extend(drains_every(65, 32, 64, h, HORIZON));
            e
        } else {
            // #1000: count 2000 ≥ 2000, 63 requested = 32 blocks, ff → 1; #1001: 1938 H.
            let mut e = vec![(1000, 64, Kind::Normal), (1001, 1938, h)];
            e.extend(drains_every(1033, 32, 64, h, HORIZON));
            e
        };
        assert_eq!(keys(&drains), expected, "{name}");
        let first_h = drains
            .iter()
            .find(|d| d.kind == h)
            .expect("a free_high drain");
        assert_eq!(first_h.high, 367, "{name}: 2000 − 2016 → high_min");
    }
}

/// Reach O7's starting state: pcp.high 2000, count 1000 order-0 pages, ff = fc = 0.
/// Allocations grow high to 2000 (alloc #946); a local drain empties the pageset; 1010
/// frees bring count to 1010 (< 2000: no drain, high unchanged); 10 allocations from the
/// list halve fc 1010 → 505 → … → 0 and bring count to 1000 without a refill.
fn o7_start(policy: Policy) -> (PageAllocator, Vec<Pfn>) {
    let allocator = oracle_machine(policy, LLC_FHB_SET);
    let spare = alloc_many(&allocator, 1, MOVABLE, Order::ZERO, 1100);
    let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
    allocator.drain_local_pages(0, None);
    free_all(&allocator, 0, &spare[..1010], Order::ZERO);
    let refills = normal(&allocator).events().pcp_refills();
    let _back = alloc_many(&allocator, 0, MOVABLE, Order::ZERO, 10);
    assert_eq!(
        normal(&allocator).events().pcp_refills(),
        refills,
        "served from the list"
    );
    let start = pcp(&allocator, 0);
    assert_eq!(
        (start.count, start.high, start.free_factor, start.free_count),
        (1000, 2000, 0, 0)
    );
    (allocator, spare[1010..].to_vec())
}

/// O7: one order-0 free with BELOW_HIGH set.
#[test]
fn o7_below_high_shrinks_high_and_drains_from_patch8() {
    for name in ["patch7", "patch8", "patch9", "v6.7"] {
        let policy = preset(name);
        let (allocator, spare) = o7_start(policy);
        let zone = normal(&allocator);
        internals::set_zone_flag(zone, ZoneFlags::BELOW_HIGH);
        let drains = free_stream(&allocator, 0, &[(spare[0], Order::ZERO)]);
        let end = pcp(&allocator, 0);
        if policy.pcp.below_high {
            // high → 2000 − max(63 << 0 | fc 1, 63) = 1937; threshold max(1001, 367).
            assert_eq!(keys(&drains), [(1, 63, Kind::Normal)], "{name}");
            assert_eq!((end.high, end.count), (1937, 938), "{name}");
            // 192000 − a few thousand pages is far above the high watermark (5286).
            assert!(
                !zone.flags().contains(ZoneFlags::BELOW_HIGH),
                "{name}: cleared after the drain"
            );
        } else {
            assert!(drains.is_empty(), "{name}");
            assert_eq!((end.high, end.count), (2000, 1001), "{name}");
            assert!(zone.flags().contains(ZoneFlags::BELOW_HIGH));
        }
        if name == "patch8" {
            assert_eq!(end.free_factor, 1);
        }
    }
}

/// O7, second part: a refill with BELOW_HIGH set and pcp.high 1000. Reaching exactly 1000
/// through the API: grow to 2000 by allocations, drain (count 0), two ticks (2000 → 1750
/// → 1532), one order-1 refill (+63 → 1595), drain, four ticks (1396, 1222, 1070, 937), one
/// more order-1 refill (+63 → 1000), drain. Three order-0 frees then halve alloc_factor
/// 5 → 2 → 1 → 0 and three allocations take those pages back (count 0, list empty).
#[test]
fn o7_refill_with_below_high_keeps_high_from_patch8() {
    for name in ["patch7", "patch8", "patch9", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let spare = alloc_many(&allocator, 1, MOVABLE, Order::ZERO, 3);
        let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
        allocator.drain_local_pages(0, None);
        let mut highs = Vec::new();
        for step in [
            "tick", "tick", "refill", "tick", "tick", "tick", "tick", "refill",
        ] {
            if step == "tick" {
                allocator.vmstat_tick(0);
            } else {
                alloc_many(&allocator, 0, MOVABLE, order(1), 1);
                allocator.drain_local_pages(0, None);
            }
            highs.push(pcp(&allocator, 0).high);
        }
        assert_eq!(
            highs,
            [1750, 1532, 1595, 1396, 1222, 1070, 937, 1000],
            "{name}"
        );
        free_all(&allocator, 0, &spare, Order::ZERO);
        alloc_many(&allocator, 0, MOVABLE, Order::ZERO, 3);
        let start = pcp(&allocator, 0);
        assert_eq!(
            (start.high, start.count, start.alloc_factor),
            (1000, 0, 0),
            "{name}"
        );

        internals::set_zone_flag(normal(&allocator), ZoneFlags::BELOW_HIGH);
        let refills = alloc_stream(&allocator, ZoneType::Normal, MOVABLE, 0, Order::ZERO, 1);
        let expected_high = if policy.pcp.below_high { 1000 } else { 1063 };
        assert_eq!(refills.len(), 1);
        assert_eq!(
            (refills[0].pages, refills[0].high),
            (63, expected_high),
            "{name}"
        );
    }
}

/// Reach O8's starting state: count 300 order-0 pages, ff = fc = 0, high 2000 from patch 7
/// (grown by allocations, as in O7), 367 before. 309 frees, then 9 allocations halve
/// fc 309 → 154 → 77 → 38 → 19 → 9 → 4 → 2 → 1 → 0.
fn o8_start(policy: Policy) -> (PageAllocator, Vec<Pfn>) {
    let allocator = oracle_machine(policy, LLC_FHB_SET);
    let spare = alloc_many(&allocator, 1, MOVABLE, Order::ZERO, 312);
    if policy.pcp.auto_tune {
        let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
        allocator.drain_local_pages(0, None);
    }
    free_all(&allocator, 0, &spare[..309], Order::ZERO);
    alloc_many(&allocator, 0, MOVABLE, Order::ZERO, 9);
    let start = pcp(&allocator, 0);
    let high = if policy.pcp.auto_tune {
        2000
    } else {
        fixed_high(&policy)
    };
    assert_eq!(
        (start.count, start.high, start.free_factor, start.free_count),
        (300, high, 0, 0)
    );
    (allocator, spare[309..].to_vec())
}

/// O8: RECLAIM_ACTIVE with count 300, three order-0 frees.
#[test]
fn o8_reclaim_active_lowers_threshold_and_shrinks_high() {
    for name in PRESETS {
        let policy = preset(name);
        let (allocator, spare) = o8_start(policy);
        internals::set_zone_flag(normal(&allocator), ZoneFlags::RECLAIM_ACTIVE);
        let mut highs = Vec::new();
        let mut counts = Vec::new();
        let mut all = Vec::new();
        for (i, &pfn) in spare.iter().enumerate() {
            let drains = free_stream(&allocator, 0, &[(pfn, Order::ZERO)]);
            all.extend(drains.iter().map(|d| (i + 1, d.pages, d.kind)));
            let state = pcp(&allocator, 0);
            highs.push(state.high);
            counts.push(state.count);
        }
        // Threshold min(4 · 63, high) = 252: the first free (301) drains 63, ff → 1.
        assert_eq!(all, [(1, 63, Kind::Normal)], "{name}");
        assert_eq!(counts, [238, 239, 240], "{name}");
        let expected: [u64; 3] = if policy.pcp.free_count {
            [1937, 1874, 1811]
        } else if policy.pcp.auto_tune {
            [1937, 1811, 1685]
        } else {
            [fixed_high(&policy); 3]
        };
        assert_eq!(highs, expected, "{name}");
    }
}

/// O9: decay of an idle CPU from count 2000, pcp.high 2000 (patch 7 on). count 2000 is not
/// reachable by frees alone (the free that makes count = high drains), so: grow high to
/// 2000, drain, free 1940 order-0 pages (count 1940), then one order-1 allocation refills
/// 31 blocks and takes one: 1940 + 62 − 2 = 2000, high stays at high_max. Decay drains
/// from list 0 round-robin, so it takes order-0 pages only (1633 of 1940).
#[test]
fn o9_decay_trims_an_idle_pageset_to_high_min() {
    for name in ["patch7", "patch8", "patch9", "v6.7"] {
        let allocator = oracle_machine(preset(name), LLC_FHB_SET);
        let spare = alloc_many(&allocator, 1, MOVABLE, Order::ZERO, 1940);
        let _pages = grow_high_to_max(&allocator, ZoneType::Normal, MOVABLE, 0);
        allocator.drain_local_pages(0, None);
        free_all(&allocator, 0, &spare, Order::ZERO);
        alloc_many(&allocator, 0, MOVABLE, order(1), 1);
        let start = pcp(&allocator, 0);
        assert_eq!((start.count, start.high), (2000, 2000), "{name}");
        let expected = [
            (1750, 250),
            (1532, 218),
            (1341, 191),
            (1174, 167),
            (1028, 146),
            (900, 128),
            (788, 112),
            (690, 98),
            (604, 86),
            (529, 75),
            (463, 66),
            (406, 57),
            (367, 39),
        ];
        for (tick, &(high, drained)) in expected.iter().enumerate() {
            let (work, got_high, got_drained, count) =
                tick_and_read(&allocator, ZoneType::Normal, 0);
            assert!(work, "{name} tick {}", tick + 1);
            assert_eq!(
                (got_high, got_drained, count),
                (high, drained, high),
                "{name} tick {}",
                tick + 1
            );
        }
        let (work, high, drained, _) = tick_and_read(&allocator, ZoneType::Normal, 0);
        assert_eq!(
            (work, high, drained),
            (false, 367, 0),
            "{name}: the tick stops reporting work"
        );
        assert_verifies(&allocator);
    }
}

/// O9 before patch 7: no decay. Whatever the pageset holds stays until a drain.
#[test]
fn o9_no_decay_before_patch7() {
    for name in ["base", "patch1", "patch3", "patch5", "patch6"] {
        let policy = preset(name);
        let fh = fixed_high(&policy);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let spare = alloc_many(&allocator, 1, MOVABLE, Order::ZERO, 300);
        free_all(&allocator, 0, &spare, Order::ZERO);
        alloc_many(&allocator, 0, MOVABLE, order(1), 1);
        let start = pcp(&allocator, 0);
        assert_eq!((start.count, start.high), (360, fh));
        for tick in 0..20 {
            let (work, high, drained, count) = tick_and_read(&allocator, ZoneType::Normal, 0);
            assert_eq!(
                (work, high, drained, count),
                (false, fh, 0, 360),
                "{name} tick {tick}"
            );
        }
    }
}

/// O10 (a): alternating order-1 and order-0 frees (FHB set), 400 frees.
#[test]
fn o10_alternating_orders_defeat_free_high_from_patch1() {
    const HORIZON: usize = 400;
    let (n, h) = (Kind::Normal, Kind::FreeHigh);
    for name in PRESETS {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let ones = blocks_from_cpu1(&allocator, order(1), HORIZON / 2);
        let zeros = blocks_from_cpu1(&allocator, Order::ZERO, HORIZON / 2);
        let blocks: Vec<_> = ones
            .iter()
            .zip(&zeros)
            .flat_map(|(a, b)| [*a, *b])
            .collect();
        let drains = free_stream(&allocator, 0, &blocks);
        if name == "base" {
            // #245 (order 1): count 368, 63 requested = 32 blocks; #247: ff > 0, all 307.
            // Then every order-1 free empties the pageset: 1 order-0 page + its 2 pages.
            let mut e = vec![(245, 64, n), (247, 307, h)];
            e.extend(drains_every(249, 2, 3, h, HORIZON));
            assert_eq!(keys(&drains), e, "{name}");
        } else if policy.pcp.free_count {
            // free_count 123 · 2 + 122 = 368 at #245: clamp(368, 63, 304), high → 431.
            assert_eq!(keys(&drains), [(245, 304, n)], "{name}");
            assert_eq!(drains[0].high, 431);
        } else {
            assert_eq!(
                keys(&drains),
                [(245, 64, n), (287, 126, n), (371, 252, n)],
                "{name}"
            );
        }
    }
}

/// O10 (b): order-1 frees with one order-0 allocation after every 16. Patch 9 never fires
/// free_high: free_count cycles 31 after each allocation, 63 after the 16th free (the
/// highest value tested, before the 16th free, is 61). base/patch3/patch7 fire right after
/// each normal drain, until the next allocation halves free_factor to 0.
#[test]
fn o10_periodic_allocation_keeps_free_count_below_batch() {
    const CYCLES: usize = 100;
    for name in ["base", "patch3", "patch7", "patch9", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let blocks = blocks_from_cpu1(&allocator, order(1), 16 * CYCLES);
        let zone = normal(&allocator);
        let mut free_high_drains = 0;
        let mut normal_drains = 0;
        for (cycle, chunk) in blocks.chunks(16).enumerate() {
            let drains = free_stream(&allocator, 0, chunk);
            let after_frees = pcp(&allocator, 0);
            alloc_many(&allocator, 0, MOVABLE, Order::ZERO, 1);
            let after_alloc = pcp(&allocator, 0);
            // In each run of 16 frees: a free_high drain only after a normal drain, and a
            // normal drain before the 16th free is followed at once by a free_high drain.
            let normal_at = drains
                .iter()
                .find(|d| d.kind == Kind::Normal)
                .map(|d| d.free);
            for d in drains.iter().filter(|d| d.kind == Kind::FreeHigh) {
                assert!(
                    normal_at.is_some_and(|k| k < d.free),
                    "{name} cycle {cycle}: {drains:?}"
                );
            }
            if let Some(k) = normal_at.filter(|&k| k < 16 && !policy.pcp.free_count) {
                assert!(
                    drains
                        .iter()
                        .any(|d| d.free == k + 1 && d.kind == Kind::FreeHigh),
                    "{name} cycle {cycle}: {drains:?}"
                );
            }
            free_high_drains += drains.iter().filter(|d| d.kind == Kind::FreeHigh).count();
            normal_drains += drains.iter().filter(|d| d.kind == Kind::Normal).count();
            if policy.pcp.free_count && cycle >= 5 {
                assert_eq!(
                    (after_frees.free_count, after_alloc.free_count),
                    (63, 31),
                    "{name} cycle {cycle}"
                );
            }
            if !policy.pcp.free_count {
                assert_eq!(after_alloc.free_factor, 0, "{name} cycle {cycle}");
            }
        }
        let counted = zone.events().pcp_drains(DrainReason::FreeHigh);
        assert_eq!(counted, free_high_drains as u64);
        if policy.pcp.free_count {
            assert_eq!(free_high_drains, 0, "{name}");
        } else {
            assert!(
                normal_drains > 0 && free_high_drains > 0,
                "{name}: {normal_drains} {free_high_drains}"
            );
        }
    }
}

/// O11: FREE_HIGH_BATCH needs (slice >> 12) > 3 · 63 = 189 pages, i.e. a slice of at least
/// 190 · 4096 = 778240 bytes per CPU.
#[test]
fn o11_free_high_batch_follows_the_cache_slice() {
    let machine = |llc_bytes: u64, shared: u32, cpus: u32| {
        let sizes = [ZoneSize::managed(0, ZoneType::Normal, 192_000)];
        let llc = CacheInfo {
            llc_bytes,
            llc_shared_cpus: shared,
        };
        let topology = Topology::x86_64(&sizes, vec![cpus], llc, false).expect("valid topology");
        PageAllocator::new(topology, Settings::default(), preset("patch3")).expect("valid settings")
    };
    let cases = [
        // 32 MiB / 16 = 2 MiB = 512 pages.
        (32 << 20, 16, 16, true),
        // 12 MiB / 64 = 192 KiB = 48 pages.
        (12 << 20, 64, 64, false),
        // 266240 KiB / 2 = 33280 pages.
        (266_240 << 10, 2, 2, true),
        (778_240, 1, 1, true),
        (778_239, 1, 1, false),
    ];
    for (llc_bytes, shared, cpus, fhb) in cases {
        let allocator = machine(llc_bytes, shared, cpus);
        for cpu in 0..cpus {
            assert_eq!(pcp(&allocator, cpu).batch, 63);
            assert_eq!(
                pcp(&allocator, cpu).flags.free_high_batch,
                fhb,
                "{llc_bytes} / {shared}, cpu {cpu}"
            );
        }
    }
}

/// O12: refill per order on an empty pageset: order 1/2/3/THP pull 31/15/7/2 blocks; from
/// patch 7 each refill also raises high by the unscaled batch: 367 + 4 · 63 = 619.
#[test]
fn o12_high_order_refills_pull_fixed_block_counts() {
    for name in PRESETS {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let mut got = Vec::new();
        for (o, gfp) in [
            (1, MOVABLE),
            (2, MOVABLE),
            (3, MOVABLE),
            (9, Gfp::TRANSHUGE),
        ] {
            let refills = alloc_stream(&allocator, ZoneType::Normal, gfp, 0, order(o), 1);
            assert_eq!(refills.len(), 1, "{name} order {o}");
            got.push((refills[0].pages >> o, refills[0].high));
        }
        let highs: [u64; 4] = if policy.pcp.auto_tune {
            [430, 493, 556, 619]
        } else {
            [fixed_high(&policy); 4]
        };
        let expected: Vec<(u64, u64)> = [31, 15, 7, 2].into_iter().zip(highs).collect();
        assert_eq!(got, expected, "{name}");
        assert_verifies(&allocator);
    }
}

/// §2.7/§2.8 (rule table "pcp.high grows on refill"): patch 7 stops growth while
/// RECLAIM_ACTIVE is set; from patch 8 only BELOW_HIGH stops it. With RECLAIM_ACTIVE set,
/// patch 7 refills like patch 5 (63, 126, 252, 304 …) and high stays 367.
#[test]
fn reclaim_active_stops_refill_growth_only_in_patch7() {
    const HORIZON: usize = 3000;
    for name in ["patch7", "patch8", "patch9", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        internals::set_zone_flag(normal(&allocator), ZoneFlags::RECLAIM_ACTIVE);
        let refills = alloc_stream(
            &allocator,
            ZoneType::Normal,
            MOVABLE,
            0,
            Order::ZERO,
            HORIZON,
        );
        let got: Vec<(usize, u64)> = refills.iter().map(|r| (r.alloc, r.pages)).collect();
        if policy.pcp.below_high {
            let expected = refill_schedule(&[63, 126, 252, 504, 1008], 1937, HORIZON);
            assert_eq!(got, expected, "{name}");
        } else {
            assert_eq!(
                got,
                refill_schedule(&[63, 126, 252], 304, HORIZON),
                "{name}"
            );
            assert!(refills.iter().all(|r| r.high == 367), "{name}");
        }
    }
}

/// §2.8 on the pageset fast path: an order-0 allocation served from a list that still has
/// pages must flag the zone BELOW_HIGH when it finds free ≤ high, exactly as one that
/// refills does. Order-4 blocks (never cached on pagesets) bring the zone just below its
/// high watermark; the flag their checks may have set is cleared, as a drain that found
/// the zone above high would have, so only the next allocation can set it.
#[test]
fn below_high_is_set_by_an_allocation_from_a_full_list() {
    for name in ["patch7", "patch8", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let zone = normal(&allocator);
        let high_wmark = zone.wmark(WatermarkKind::High) as i64;
        allocator
            .alloc_pages(Caller::task(0), MOVABLE, Order::ZERO)
            .expect("a fresh zone has room");
        let order4 = Order::new(4).unwrap();
        while zone.free_pages() > high_wmark {
            allocator
                .alloc_pages(Caller::task(1), MOVABLE, order4)
                .expect("above the min watermark");
        }
        let free = zone.free_pages();
        assert!(free > high_wmark - 16 && free > zone.wmark(WatermarkKind::Low) as i64);
        internals::clear_zone_flag(zone, ZoneFlags::BELOW_HIGH);
        allocator
            .alloc_pages(Caller::task(0), MOVABLE, Order::ZERO)
            .expect("CPU 0's list has pages");
        assert_eq!(zone.free_pages(), free, "{name}: served from the pageset");
        assert_eq!(
            zone.flags().contains(ZoneFlags::BELOW_HIGH),
            policy.pcp.below_high,
            "{name}"
        );
    }
}

/// §1.7/§2.8: from patch 8 an allocation that finds the zone at or below its high
/// watermark (4405 + 881 = 5286) sets BELOW_HIGH; only a free that drains, leaving the zone
/// above the high watermark, clears it. Patch 7 never sets it.
#[test]
fn below_high_is_set_by_allocation_and_cleared_by_a_draining_free() {
    for name in ["patch7", "patch8", "v6.7"] {
        let policy = preset(name);
        let allocator = oracle_machine(policy, LLC_FHB_SET);
        let zone = normal(&allocator);
        let high_wmark = zone.wmark(WatermarkKind::High);
        assert_eq!(high_wmark, 5286);
        // Allocate until the flag appears, or (patch 7) until free pages are well below
        // the high watermark (a refill can take up to 1937 pages at once).
        let mut pages = Vec::new();
        while !zone.flags().contains(ZoneFlags::BELOW_HIGH) && zone.free_pages() > 4000 {
            let pfn = allocator.alloc_pages(Caller::task(0), MOVABLE, Order::ZERO);
            pages.push(pfn.expect("above the min watermark"));
        }
        if zone.flags().contains(ZoneFlags::BELOW_HIGH) {
            // The allocation that set it saw free ≤ high before taking its page.
            assert!(zone.free_pages() <= high_wmark as i64, "{name}");
        }
        let set = zone.flags().contains(ZoneFlags::BELOW_HIGH);
        assert_eq!(set, policy.pcp.below_high, "{name}");
        if !set {
            continue;
        }
        let mut cleared_at = None;
        for (i, &pfn) in pages.iter().enumerate() {
            let drains = zone.events().pcp_drains_total();
            allocator
                .free_pages(Caller::task(1), pfn, Order::ZERO)
                .expect("valid free");
            if !zone.flags().contains(ZoneFlags::BELOW_HIGH) {
                assert!(
                    zone.events().pcp_drains_total() > drains,
                    "{name}: cleared without a drain"
                );
                assert!(zone.free_pages() > high_wmark as i64, "{name}");
                cleared_at = Some(i);
                break;
            }
        }
        assert!(cleared_at.is_some(), "{name}: never cleared");
    }
}
