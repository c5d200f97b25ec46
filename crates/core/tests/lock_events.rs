//! The per-call report of zone-lock work (`LockEvents`, `ZoneLockHold`): what the `_report`
//! entry points tell their sink agrees with everything else the allocator shows.
//!
//! - A proptest runs random sequences of allocations and frees of orders 0..=10 (single,
//!   bulk and batched), vmstat ticks, drains and CPU offlining on three CPUs and two zones,
//!   under the presets `base`, `patch3`, `v6.7` and `linux-6.18`, with and without seed
//!   001's interrupt bypass. After every call, per zone, the records sum to the change of
//!   the zone's counters (`alloc_zone_locked`, `alloc_zone_locked_events`, `pcp_refills`,
//!   `pcp_refill_pages`, `pcp_drains[r]`, `pcp_drain_pages[r]`, `buddy_merges`) and of
//!   `NR_FREE_PAGES`, and per pageset the refilled and drained blocks and the PCP hits
//!   account for the change of its list lengths. A twin allocator driven through the plain
//!   entry points ends in the same state: reporting changes nothing.
//! - Fixed cases pin down what one hold is: a drain of many blocks under one
//!   `free_pcppages_bulk` is one record, as it is one `zone->lock` acquisition in Linux;
//!   Linux 6.18's chunked `drain_pages_zone` is one record per chunk; each kind names its
//!   zone and CPU.
//!
//! Linux counterpart: the `mm_page_alloc_zone_locked` and `mm_page_pcpu_drain` tracepoints
//! (`mm/page_alloc.c`), which a record sums per lock hold.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use mmkit_core::internals;
use mmkit_core::page::{Page, PageState};
use mmkit_core::page_alloc::pcp::NR_PCP_LISTS;
use mmkit_core::page_alloc::Zone;
use mmkit_core::page_alloc::{
    Caller, CpuId, DrainReason, HoldKind, LockEvents, ZoneId, ZoneLockHold,
};
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Gfp, Order, PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};

const CPUS: u32 = 3;

const LLC: CacheInfo = CacheInfo {
    llc_bytes: 8 << 20,
    llc_shared_cpus: 3,
};

/// DMA32 of 4096 pages and Normal of 32768 (4 and 32 `MAX_ORDER` blocks) on three CPUs
/// (Normal batch 7): small enough for a fill to exhaust in one step, so that requests
/// reach the slow path, its drains and the high-atomic reserve.
fn machine(policy: Policy) -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma32, 4096),
        ZoneSize::managed(0, ZoneType::Normal, 32_768),
    ];
    let topology = Topology::x86_64(&sizes, vec![CPUS], LLC, false).expect("valid topology");
    PageAllocator::new(topology, Settings::default(), policy).expect("valid settings")
}

/// A sink that keeps everything: the holds in order, the PCP hits as (zone, CPU,
/// blocks), the descriptors named to read ahead (their addresses) and the buddy-list
/// heads refills left. It takes the read-ahead hints, so every run through it also shows
/// that they change nothing.
#[derive(Default, Debug)]
struct Recorder {
    holds: Vec<ZoneLockHold>,
    hits: Vec<(usize, CpuId, u64)>,
    read_ahead: Vec<*const Page>,
    refill_left: Vec<(usize, Order, Pfn, u64)>,
}

impl LockEvents for Recorder {
    fn hold(&mut self, hold: &ZoneLockHold) {
        self.holds.push(*hold);
    }

    fn pcp_hit(&mut self, zone: usize, cpu: CpuId, blocks: u64) {
        self.hits.push((zone, cpu, blocks));
    }

    const READS_AHEAD: bool = true;

    fn read_ahead(&mut self, page: &Page) {
        self.read_ahead.push(page);
    }

    fn refill_left(&mut self, zone: usize, order: Order, first: Pfn, blocks: u64) {
        self.refill_left.push((zone, order, first, blocks));
    }
}

/// The zone counters the records account for, and `NR_FREE_PAGES`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Counters {
    zone_locked_pages: u64,
    zone_locked_blocks: u64,
    refills: u64,
    refill_pages: u64,
    drains: [u64; DrainReason::COUNT],
    drain_pages: [u64; DrainReason::COUNT],
    merges: u64,
    splits: u64,
    free_pages: i64,
}

impl Counters {
    fn read(zone: &Zone) -> Counters {
        let e = zone.events();
        Counters {
            zone_locked_pages: e.alloc_zone_locked(),
            zone_locked_blocks: e.alloc_zone_locked_events(),
            refills: e.pcp_refills(),
            refill_pages: e.pcp_refill_pages(),
            drains: DrainReason::ALL.map(|reason| e.pcp_drains(reason)),
            drain_pages: DrainReason::ALL.map(|reason| e.pcp_drain_pages(reason)),
            merges: e.buddy_merges(),
            splits: e.buddy_splits(),
            free_pages: zone.free_pages(),
        }
    }

    /// `after − self`.
    fn delta(&self, after: &Counters) -> Counters {
        Counters {
            zone_locked_pages: after.zone_locked_pages - self.zone_locked_pages,
            zone_locked_blocks: after.zone_locked_blocks - self.zone_locked_blocks,
            refills: after.refills - self.refills,
            refill_pages: after.refill_pages - self.refill_pages,
            drains: std::array::from_fn(|r| after.drains[r] - self.drains[r]),
            drain_pages: std::array::from_fn(|r| after.drain_pages[r] - self.drain_pages[r]),
            merges: after.merges - self.merges,
            splits: after.splits - self.splits,
            free_pages: after.free_pages - self.free_pages,
        }
    }

    /// What `holds` say zone `zone`'s counters moved by.
    fn of_holds(zone: usize, holds: &[ZoneLockHold]) -> Counters {
        let mut c = Counters::default();
        for hold in holds.iter().filter(|h| h.zone == zone) {
            c.merges += hold.merges;
            c.splits += hold.splits;
            match hold.kind {
                HoldKind::Refill | HoldKind::BuddyAlloc => {
                    c.zone_locked_pages += hold.pages;
                    c.zone_locked_blocks += hold.blocks;
                    c.free_pages -= hold.pages as i64;
                    if hold.kind == HoldKind::Refill {
                        c.refills += 1;
                        c.refill_pages += hold.pages;
                    }
                }
                HoldKind::Drain(reason) => {
                    c.drains[reason as usize] += 1;
                    c.drain_pages[reason as usize] += hold.pages;
                    c.free_pages += hold.pages as i64;
                }
                HoldKind::BuddyFree => c.free_pages += hold.pages as i64,
                HoldKind::HighAtomic => {}
            }
        }
        c
    }
}

/// Blocks on each pageset's lists, by zone and CPU.
fn list_blocks(allocator: &PageAllocator) -> Vec<Vec<i64>> {
    allocator
        .zones()
        .iter()
        .map(|zone| {
            (0..zone.nr_pagesets() as u32)
                .map(|cpu| {
                    let pcp = zone.pageset(cpu).expect("a pageset per CPU");
                    (0..NR_PCP_LISTS).map(|p| pcp.list_len(p) as i64).sum()
                })
                .collect()
        })
        .collect()
}

/// The change of each pageset's list lengths that `recorded` accounts for. A refill puts
/// its blocks on the lists and the allocation that asked for it takes one back at once; a
/// drain takes its blocks off, and a free's drain (`Free`, `FreeHigh`) follows that free's
/// block going on; a PCP hit is a block taken off (`alloc`) or put on without a hold.
fn list_change(recorded: &Recorder, alloc: bool, shape: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let mut change: Vec<Vec<i64>> = shape.iter().map(|cpus| vec![0; cpus.len()]).collect();
    for hold in &recorded.holds {
        let slot = &mut change[hold.zone][hold.cpu as usize];
        match hold.kind {
            HoldKind::Refill => *slot += hold.blocks as i64 - i64::from(hold.blocks > 0),
            HoldKind::Drain(reason) => {
                *slot -= hold.blocks as i64;
                if matches!(reason, DrainReason::Free | DrainReason::FreeHigh) {
                    *slot += 1;
                }
            }
            HoldKind::BuddyAlloc | HoldKind::BuddyFree | HoldKind::HighAtomic => {}
        }
    }
    for &(zone, cpu, blocks) in &recorded.hits {
        let blocks = blocks as i64;
        change[zone][cpu as usize] += if alloc { -blocks } else { blocks };
    }
    change
}

/// Every record is well formed: pages cover blocks, an empty hold moved nothing, a buddy
/// hold moved at most one block, a drain moved something, merges come from frees only.
fn check_shapes(recorded: &Recorder, allocator: &PageAllocator) -> Result<(), TestCaseError> {
    for hold in &recorded.holds {
        prop_assert!(hold.zone < allocator.zones().len(), "{hold:?}");
        prop_assert!(hold.cpu < CPUS, "{hold:?}");
        prop_assert!(hold.pages >= hold.blocks, "{hold:?}");
        prop_assert_eq!(hold.blocks == 0, hold.pages == 0, "{:?}", hold);
        match hold.kind {
            HoldKind::BuddyAlloc | HoldKind::BuddyFree => prop_assert!(hold.blocks <= 1),
            HoldKind::Drain(_) => prop_assert!(hold.blocks > 0, "{hold:?}"),
            HoldKind::Refill | HoldKind::HighAtomic => {}
        }
        if !matches!(hold.kind, HoldKind::Drain(_) | HoldKind::BuddyFree) {
            prop_assert_eq!(hold.merges, 0, "{:?}", hold);
        }
    }
    for &(_, _, blocks) in &recorded.hits {
        prop_assert!(blocks > 0);
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        cpu: u32,
        order: u8,
        gfp: usize,
    },
    Free {
        cpu: u32,
        which: usize,
    },
    /// Allocate blocks of one kind until the allocator refuses.
    Fill {
        cpu: u32,
        order: u8,
        gfp: usize,
    },
    /// Free `count` held blocks, one call each.
    FreeMany {
        cpu: u32,
        count: usize,
        which: usize,
    },
    Bulk {
        cpu: u32,
        pages: usize,
        gfp: usize,
    },
    FreeBatch {
        cpu: u32,
        pages: usize,
    },
    /// Free, in one exclusive batch, as many order-0 held pages of one zone (up to
    /// `pages`) as `internals::quiet_order0_frees` says go onto `cpu`'s pageset with no
    /// chance of a drain (the simulator's exit frees), and the same pages one by one on
    /// the plain allocator.
    FreeQuiet {
        cpu: u32,
        pages: usize,
    },
    /// `vmstat_tick` on `cpu`, `times` times.
    Tick {
        cpu: u32,
        times: u32,
    },
    DrainLocal {
        cpu: u32,
    },
    DrainAll,
    Offline {
        cpu: u32,
    },
}

/// The masks the runs draw from: the three mobilities, DMA32, and `GFP_ATOMIC` (whose
/// high-order requests reserve a high-atomic pageblock when they get their block in the
/// slow path) for each zone.
const GFPS: [Gfp; 6] = [
    Gfp::HIGHUSER_MOVABLE,
    Gfp::KERNEL,
    Gfp::KERNEL.union(Gfp::RECLAIMABLE),
    Gfp::KERNEL.union(Gfp::DMA32),
    Gfp::ATOMIC,
    Gfp::ATOMIC.union(Gfp::DMA32),
];

fn order_strategy() -> impl Strategy<Value = u8> {
    prop_oneof![8 => Just(0u8), 4 => 1u8..=3, 2 => 4u8..=8, 1 => 9u8..=10]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let cpu = 0..CPUS;
    prop_oneof![
        12 => (cpu.clone(), order_strategy(), 0..GFPS.len())
            .prop_map(|(cpu, order, gfp)| Op::Alloc { cpu, order, gfp }),
        10 => (cpu.clone(), any::<usize>()).prop_map(|(cpu, which)| Op::Free { cpu, which }),
        1 => (cpu.clone(), 0u8..=4, 0..GFPS.len())
            .prop_map(|(cpu, order, gfp)| Op::Fill { cpu, order, gfp }),
        2 => (cpu.clone(), 1usize..2000, any::<usize>())
            .prop_map(|(cpu, count, which)| Op::FreeMany { cpu, count, which }),
        1 => (cpu.clone(), 2usize..200, 0..GFPS.len())
            .prop_map(|(cpu, pages, gfp)| Op::Bulk { cpu, pages, gfp }),
        1 => (cpu.clone(), 1usize..200).prop_map(|(cpu, pages)| Op::FreeBatch { cpu, pages }),
        2 => (cpu.clone(), 1usize..40).prop_map(|(cpu, pages)| Op::FreeQuiet { cpu, pages }),
        3 => (cpu.clone(), 1u32..8).prop_map(|(cpu, times)| Op::Tick { cpu, times }),
        1 => cpu.clone().prop_map(|cpu| Op::DrainLocal { cpu }),
        1 => Just(Op::DrainAll),
        1 => cpu.prop_map(|cpu| Op::Offline { cpu }),
    ]
}

/// Interrupt context for the bypass runs (two in three calls), task context otherwise.
fn caller(cpu: u32, bypass: bool, step: usize) -> Caller {
    if bypass && step % 3 != 0 {
        Caller::softirq(cpu)
    } else {
        Caller::task(cpu)
    }
}

/// The allocator pair: one driven through the `_report` entry points, one through the
/// plain ones; and the blocks both hold (the same pfns: both make the same decisions).
struct Run {
    reported: PageAllocator,
    plain: PageAllocator,
    held: Vec<(Pfn, Order)>,
}

impl Run {
    /// Run `op` on both allocators; returns what the reporting one recorded and whether
    /// the op allocates (its hits are blocks taken off a pageset).
    fn step(&mut self, op: &Op, step: usize, bypass: bool) -> (Recorder, bool) {
        let mut rec = Recorder::default();
        let (a, b) = (&self.reported, &self.plain);
        let alloc = matches!(op, Op::Alloc { .. } | Op::Fill { .. } | Op::Bulk { .. });
        match *op {
            Op::Alloc { cpu, order, gfp } => {
                let (order, gfp) = (Order::new(order).expect("order ≤ 10"), GFPS[gfp]);
                let caller = caller(cpu, bypass, step);
                let got = a.alloc_pages_report(caller, gfp, order, &mut rec);
                assert_eq!(got, b.alloc_pages(caller, gfp, order), "{op:?}");
                if let Ok(pfn) = got {
                    self.held.push((pfn, order));
                }
            }
            Op::Fill { cpu, order, gfp } => {
                let (order, gfp) = (Order::new(order).expect("order ≤ 4"), GFPS[gfp]);
                let caller = caller(cpu, bypass, step);
                loop {
                    let got = a.alloc_pages_report(caller, gfp, order, &mut rec);
                    assert_eq!(got, b.alloc_pages(caller, gfp, order), "{op:?}");
                    let Ok(pfn) = got else { break };
                    self.held.push((pfn, order));
                }
            }
            Op::Free { cpu, which } => self.free(caller(cpu, bypass, step), 1, which, &mut rec),
            Op::FreeMany { cpu, count, which } => {
                self.free(caller(cpu, bypass, step), count, which, &mut rec)
            }
            Op::Bulk { cpu, pages, gfp } => {
                let (caller, gfp) = (Caller::task(cpu), GFPS[gfp]);
                let mut list = Vec::new();
                let got =
                    a.alloc_pages_bulk_list_report(caller, gfp, None, pages, &mut list, &mut rec);
                let mut twin = Vec::new();
                let twin_got = b.alloc_pages_bulk_list(caller, gfp, None, pages, &mut twin);
                assert_eq!((&got, &list), (&twin_got, &twin), "{op:?}");
                self.held
                    .extend(list.into_iter().map(|pfn| (pfn, Order::ZERO)));
            }
            Op::FreeBatch { cpu, pages } => {
                let mut pfns = Vec::new();
                self.held.retain(|&(pfn, order)| {
                    let take = order == Order::ZERO && pfns.len() < pages;
                    if take {
                        pfns.push(pfn);
                    }
                    !take
                });
                let caller = Caller::task(cpu);
                let freed = a.free_pages_batch_report(caller, &pfns, &mut rec);
                assert_eq!(freed, b.free_pages_batch(caller, &pfns), "{op:?}");
            }
            Op::FreeQuiet { cpu, pages } => {
                let caller = Caller::task(cpu);
                let Some(&(first, _)) = self.held.iter().find(|h| h.1 == Order::ZERO) else {
                    return (rec, alloc);
                };
                let zone = a
                    .zones()
                    .iter()
                    .find(|z| z.spans(first))
                    .expect("a held pfn");
                let room = internals::quiet_order0_frees(a, caller, first).min(pages);
                let mut pfns = Vec::new();
                self.held.retain(|&(pfn, order)| {
                    let take = order == Order::ZERO && zone.spans(pfn) && pfns.len() < room;
                    if take {
                        pfns.push(pfn);
                    }
                    !take
                });
                // SAFETY: one thread, and the run holds every page of `pfns`.
                let freed = unsafe {
                    internals::free_pages_batch_exclusive_report(a, caller, &pfns, &mut rec)
                };
                assert_eq!(freed, Ok(()), "{op:?}");
                assert!(
                    rec.holds.is_empty(),
                    "a quiet batch took the zone lock: {rec:?}"
                );
                for &pfn in &pfns {
                    assert_eq!(b.free_pages(caller, pfn, Order::ZERO), Ok(()), "{op:?}");
                }
            }
            Op::Tick { cpu, times } => {
                for _ in 0..times {
                    let busy = a.vmstat_tick_report(cpu, &mut rec);
                    assert_eq!(busy, b.vmstat_tick(cpu), "{op:?}");
                }
            }
            Op::DrainLocal { cpu } => {
                let drained = a.drain_local_pages_report(cpu, None, &mut rec);
                assert_eq!(drained, b.drain_local_pages(cpu, None), "{op:?}");
            }
            Op::DrainAll => {
                let done = a.drain_all_pages_report(None, &mut rec);
                assert_eq!(done, b.drain_all_pages(None), "{op:?}");
            }
            Op::Offline { cpu } => {
                let down = a.cpu_down_report(cpu, &mut rec);
                assert_eq!(down, b.cpu_down(cpu), "{op:?}");
                if down {
                    assert!(a.cpu_up(cpu) && b.cpu_up(cpu));
                }
            }
        }
        (rec, alloc)
    }
}

impl Run {
    /// Free up to `count` held blocks as `caller`, chosen by `which`, on both allocators.
    fn free(&mut self, caller: Caller, count: usize, which: usize, rec: &mut Recorder) {
        for i in 0..count {
            if self.held.is_empty() {
                return;
            }
            let pick = which.wrapping_add(i.wrapping_mul(7919)) % self.held.len();
            let (pfn, order) = self.held.swap_remove(pick);
            let freed = self.reported.free_pages_report(caller, pfn, order, rec);
            assert_eq!(freed, self.plain.free_pages(caller, pfn, order));
        }
    }
}

/// Everything a reader of the two allocators can compare: counters, free pages, buddy
/// lists and every pageset.
fn state(allocator: &PageAllocator) -> String {
    allocator
        .zones()
        .iter()
        .map(|zone| {
            let pagesets: Vec<_> = (0..CPUS).map(|cpu| zone.pageset(cpu)).collect();
            format!(
                "{:?} {} {:?} {:?}\n",
                zone.events(),
                zone.free_pages(),
                zone.free_blocks(),
                pagesets
            )
        })
        .collect()
}

fn check_run(policy: Policy, bypass: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let policy = Policy {
        irq_bypass: bypass,
        ..policy
    };
    let mut run = Run {
        reported: machine(policy),
        plain: machine(policy),
        held: Vec::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        let zones = run.reported.zones();
        let before: Vec<Counters> = zones.iter().map(Counters::read).collect();
        let lists_before = list_blocks(&run.reported);
        let (recorded, alloc) = run.step(op, step, bypass);
        check_shapes(&recorded, &run.reported)?;
        let zones = run.reported.zones();
        for (index, zone) in zones.iter().enumerate() {
            let moved = before[index].delta(&Counters::read(zone));
            let reported = Counters::of_holds(index, &recorded.holds);
            prop_assert_eq!(
                moved,
                reported,
                "step {} {:?}, zone {}: {:?}",
                step,
                op,
                index,
                recorded
            );
        }
        let lists_after = list_blocks(&run.reported);
        let expected = list_change(&recorded, alloc, &lists_before);
        for (z, cpus) in lists_after.iter().enumerate() {
            for (cpu, &after) in cpus.iter().enumerate() {
                prop_assert_eq!(
                    after - lists_before[z][cpu],
                    expected[z][cpu],
                    "step {} {:?}, zone {} cpu {}: {:?}",
                    step,
                    op,
                    z,
                    cpu,
                    recorded
                );
            }
        }
    }
    prop_assert_eq!(state(&run.reported), state(&run.plain));
    run.reported
        .verify()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

const PRESETS: [&str; 4] = ["base", "patch3", "v6.7", "linux-6.18"];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn records_account_for_every_counter_and_pageset_change(
        preset in 0..PRESETS.len(),
        bypass in prop_oneof![3 => Just(false), 1 => Just(true)],
        ops in prop::collection::vec(op_strategy(), 1..300),
    ) {
        let policy = Policy::preset(PRESETS[preset]).expect("a preset");
        check_run(policy, bypass, &ops)?;
    }
}

/// Every named preset runs at least once whatever the draw: one fixed sequence
/// that refills, drains on free, ticks, drains all, and allocates order 10 until it fails.
#[test]
fn records_account_for_a_fixed_sequence_under_each_preset() {
    let mut ops = Vec::new();
    for i in 0..400u32 {
        ops.push(Op::Alloc {
            cpu: i % CPUS,
            order: [0, 0, 1, 0, 3, 0, 2, 9][i as usize % 8],
            gfp: i as usize % GFPS.len(),
        });
        if i % 3 == 2 {
            ops.push(Op::Free {
                cpu: (i + 1) % CPUS,
                which: (i as usize).wrapping_mul(2_654_435_761),
            });
        }
    }
    ops.extend([
        Op::Tick { cpu: 0, times: 5 },
        Op::DrainAll,
        Op::Offline { cpu: 1 },
    ]);
    ops.extend((0..20).map(|_| Op::Alloc {
        cpu: 2,
        order: 10,
        gfp: 1,
    }));
    for preset in PRESETS {
        for bypass in [false, true] {
            let policy = Policy::preset(preset).expect("a preset");
            if let Err(e) = check_run(policy, bypass, &ops) {
                panic!("{preset}, bypass {bypass}: {e}");
            }
        }
    }
}

const NORMAL: ZoneId = ZoneId {
    node: 0,
    zone_type: ZoneType::Normal,
};

fn normal_index(allocator: &PageAllocator) -> usize {
    let normal = allocator.zone(0, ZoneType::Normal).expect("a Normal zone");
    allocator
        .zones()
        .iter()
        .position(|z| std::ptr::eq(z, normal))
        .expect("the zone is one of the allocator's")
}

/// One Normal zone of 196608 pages (768 MiB) on three CPUs: batch 63, pagesets large
/// enough for the drains below to move many blocks.
fn large_machine(policy: Policy) -> PageAllocator {
    let sizes = [ZoneSize::managed(0, ZoneType::Normal, 196_608)];
    let topology = Topology::x86_64(&sizes, vec![CPUS], LLC, false).expect("valid topology");
    PageAllocator::new(topology, Settings::default(), policy).expect("valid settings")
}

/// [`large_machine`] with `pages` order-0 movable pages refilled onto cpu1's pageset of
/// Normal.
fn pageset_holding(policy: Policy, pages: u64) -> PageAllocator {
    let allocator = large_machine(policy);
    let list = (Order::ZERO, mmkit_core::page_alloc::MigrateType::Movable);
    let placed = internals::seed_pageset(&allocator, 1, NORMAL, list, pages, pages + 1);
    assert_eq!(placed, Some(pages));
    allocator
}

/// Linux takes `zone->lock` once in `free_pcppages_bulk` and emits one
/// `mm_page_pcpu_drain` per block under it; the report is that one hold, with every
/// block, page and merge of it.
#[test]
fn a_drain_of_many_blocks_under_one_free_pcppages_bulk_is_one_record() {
    let allocator = pageset_holding(Policy::V6_7, 300);
    let zone = normal_index(&allocator);
    let before = Counters::read(&allocator.zones()[zone]);
    let mut recorded = Recorder::default();
    let drained = allocator.drain_local_pages_report(1, Some(NORMAL), &mut recorded);
    assert_eq!(drained, 300);
    let [hold] = recorded.holds[..] else {
        panic!("one hold, got {:?}", recorded.holds);
    };
    assert_eq!(
        (hold.zone, hold.cpu, hold.kind, hold.blocks, hold.pages),
        (zone, 1, HoldKind::Drain(DrainReason::Explicit), 300, 300)
    );
    let moved = before.delta(&Counters::read(&allocator.zones()[zone]));
    assert_eq!(moved.drains[DrainReason::Explicit as usize], 1);
    assert_eq!(moved.merges, hold.merges);
    assert!(hold.merges > 0, "300 neighbouring pages merge back");
}

/// A drain names, for a sink that reads ahead, the buddy of every block it takes, once
/// each: the descriptors its merges read first. cpu0 allocates 600 order-0 pages and
/// gives its pageset back; cpu1 frees the even-numbered ones; cpu1's pageset then holds
/// the only pages in state `Pcp`, none of them another's buddy, and the hints of its
/// drain are exactly their buddies, `pfn ^ 1`, each still allocated.
#[test]
fn a_drain_names_each_drained_blocks_buddy_to_read_ahead() {
    let allocator = large_machine(Policy::V6_7);
    let pages: Vec<Pfn> = (0..600)
        .map(|_| allocator.alloc_pages(Caller::task(0), Gfp::HIGHUSER_MOVABLE, Order::ZERO))
        .collect::<Result<_, _>>()
        .expect("free memory");
    allocator.drain_local_pages(0, None);
    for &pfn in pages.iter().filter(|pfn| pfn.0 % 2 == 0) {
        allocator
            .free_pages(Caller::task(1), pfn, Order::ZERO)
            .expect("an allocated page");
    }
    let zone = &allocator.zones()[normal_index(&allocator)];
    let mem_map = zone.mem_map();
    let on_pageset: Vec<Pfn> = mem_map
        .iter()
        .filter(|(_, page)| page.state() == PageState::Pcp)
        .map(|(pfn, _)| pfn)
        .collect();
    assert!(
        on_pageset.len() > 100,
        "{} pages on cpu1's pageset",
        on_pageset.len()
    );
    let buddies: Vec<&Page> = on_pageset
        .iter()
        .map(|&pfn| mem_map.page(Pfn(pfn.0 ^ 1)))
        .collect();
    assert!(buddies
        .iter()
        .all(|page| page.state() == PageState::Allocated));
    let mut expected: Vec<*const Page> = buddies.iter().map(|&page| page as *const Page).collect();
    let mut recorded = Recorder::default();
    let drained = allocator.drain_local_pages_report(1, Some(NORMAL), &mut recorded);
    assert_eq!(drained, on_pageset.len() as u64);
    let mut named = recorded.read_ahead.clone();
    named.sort();
    expected.sort();
    assert_eq!(named, expected);
    allocator.verify().expect("a consistent allocator");
}

/// A refill names, for a sink that reads ahead, the block its buddy list's next refill
/// takes first. cpu0's first allocation refills its pageset by splitting a `MAX_ORDER`
/// block, which leaves one order-0 piece on the buddy list: the hint names it, cpu0's
/// next allocation (a PCP hit) names nothing, and cpu1's refill, with no free in
/// between, takes the named block first: it is cpu1's allocation.
#[test]
fn a_refill_names_the_block_the_next_refill_takes_first() {
    let allocator = large_machine(Policy::V6_7);
    let zone = normal_index(&allocator);
    let movable = Gfp::HIGHUSER_MOVABLE;
    let mut recorded = Recorder::default();
    allocator
        .alloc_pages_report(Caller::task(0), movable, Order::ZERO, &mut recorded)
        .expect("free memory");
    let [(at, order, first, blocks)] = recorded.refill_left[..] else {
        panic!("one hint, got {:?}", recorded.refill_left);
    };
    assert_eq!(
        (at, order, blocks),
        (zone, Order::ZERO, 1),
        "one piece of the split"
    );
    let mem_map = allocator.zones()[zone].mem_map();
    assert!(mem_map
        .page(first)
        .has_state_order(PageState::Buddy, Order::ZERO));
    let mut hit = Recorder::default();
    allocator
        .alloc_pages_report(Caller::task(0), movable, Order::ZERO, &mut hit)
        .expect("free memory");
    assert_eq!((hit.hits.len(), hit.refill_left.len()), (1, 0), "{hit:?}");
    let next = allocator
        .alloc_pages(Caller::task(1), movable, Order::ZERO)
        .expect("free memory");
    assert_eq!(next, first, "cpu1's refill starts at the named block");
    allocator.verify().expect("a consistent allocator");
}

/// Linux 6.18's `drain_pages_zone` drains `batch << CONFIG_PCP_BATCH_SCALE_MAX` pages per
/// lock hold: one record per chunk, together the whole pageset.
#[test]
fn a_chunked_drain_is_one_record_per_chunk() {
    let pages = 5000;
    let allocator = pageset_holding(Policy::LINUX_6_18, pages);
    let batch = allocator
        .zone(0, ZoneType::Normal)
        .unwrap()
        .pageset(1)
        .unwrap()
        .batch;
    let chunk = batch << allocator.settings().pcp_batch_scale_max;
    assert!(chunk < pages / 2, "batch {batch}: at least two full chunks");
    let mut recorded = Recorder::default();
    assert_eq!(
        allocator.drain_local_pages_report(1, Some(NORMAL), &mut recorded),
        pages
    );
    let blocks: Vec<u64> = recorded.holds.iter().map(|h| h.blocks).collect();
    let mut expected = vec![chunk; (pages / chunk) as usize];
    if pages % chunk != 0 {
        expected.push(pages % chunk);
    }
    assert_eq!(blocks, expected);
}

/// A free that pushes the pageset to `high` drains `nr_pcp_free` pages in one hold, named
/// for the freeing CPU and the reason; the frees before it are PCP hits.
#[test]
fn a_free_that_reaches_high_reports_its_drain_and_the_others_are_hits() {
    let allocator = large_machine(Policy::BASE);
    let caller = Caller::task(0);
    let mut pfns = Vec::new();
    allocator
        .alloc_pages_bulk_list(caller, Gfp::HIGHUSER_MOVABLE, None, 4000, &mut pfns)
        .expect("room");
    let zone = normal_index(&allocator);
    let high = allocator.zones()[zone].pageset(2).unwrap().high;
    let mut recorded = Recorder::default();
    for (i, &pfn) in pfns.iter().enumerate() {
        allocator
            .free_pages_report(Caller::task(2), pfn, Order::ZERO, &mut recorded)
            .unwrap();
        if !recorded.holds.is_empty() {
            assert_eq!(i as u64 + 1, high, "the free that reached high drained");
            break;
        }
    }
    let [hold] = recorded.holds[..] else {
        panic!("one drain, got {:?}", recorded.holds);
    };
    assert_eq!(
        (hold.zone, hold.cpu, hold.kind),
        (zone, 2, HoldKind::Drain(DrainReason::Free))
    );
    assert!(hold.blocks > 1 && hold.pages == hold.blocks);
    let hits: u64 = recorded.hits.iter().map(|&(_, _, n)| n).sum();
    assert_eq!(hits, high - 1, "every earlier free was a hit");
    assert!(recorded
        .hits
        .iter()
        .all(|&(z, cpu, n)| (z, cpu, n) == (zone, 2, 1)));
}

/// What each path reports: a refill then hits for order 0, a direct buddy allocation and
/// free (with its merges) for an order the pagesets do not cache, the high-atomic reserve
/// taken by an atomic high-order request.
#[test]
fn each_path_reports_its_kind_of_hold() {
    let allocator = large_machine(Policy::V6_7);
    let zone = normal_index(&allocator);
    let mut rec = Recorder::default();
    let caller = Caller::task(1);

    let first = allocator
        .alloc_pages_report(caller, Gfp::HIGHUSER_MOVABLE, Order::ZERO, &mut rec)
        .unwrap();
    let [refill] = rec.holds[..] else {
        panic!("one refill, got {:?}", rec.holds);
    };
    assert_eq!(
        (refill.zone, refill.cpu, refill.kind),
        (zone, 1, HoldKind::Refill)
    );
    assert!(refill.blocks > 1 && rec.hits.is_empty());

    let mut rec = Recorder::default();
    allocator
        .alloc_pages_report(caller, Gfp::HIGHUSER_MOVABLE, Order::ZERO, &mut rec)
        .unwrap();
    assert!(rec.holds.is_empty());
    assert_eq!(rec.hits, [(zone, 1, 1)]);

    let mut rec = Recorder::default();
    let order = Order::new(10).unwrap();
    let big = allocator
        .alloc_pages_report(caller, Gfp::KERNEL, order, &mut rec)
        .unwrap();
    assert_eq!(
        rec.holds,
        [ZoneLockHold {
            zone,
            cpu: 1,
            kind: HoldKind::BuddyAlloc,
            blocks: 1,
            pages: 1024,
            merges: 0,
            splits: 0
        }]
    );
    let mut rec = Recorder::default();
    allocator
        .free_pages_report(Caller::task(2), big, order, &mut rec)
        .unwrap();
    let [free] = rec.holds[..] else {
        panic!("one free, got {:?}", rec.holds);
    };
    assert_eq!(
        (
            free.zone,
            free.cpu,
            free.kind,
            free.blocks,
            free.pages,
            free.merges
        ),
        (zone, 2, HoldKind::BuddyFree, 1, 1024, 0),
        "an order-10 block has no buddy to merge with"
    );

    allocator
        .free_pages(caller, first, Order::ZERO)
        .expect("allocated above");
}

/// An atomic high-order request that gets its block only in the slow path (below the low
/// watermark) reserves the block's pageblock for high-atomic use: a hold of its own after
/// the one that took the block.
#[test]
fn an_atomic_high_order_allocation_in_the_slow_path_reports_the_reserve() {
    let allocator = machine(Policy::V6_7);
    let caller = Caller::task(0);
    // Fill with order-1 blocks until the first pass fails for everyone.
    while allocator
        .alloc_pages(caller, Gfp::KERNEL, Order::new(1).unwrap())
        .is_ok()
    {}
    let mut rec = Recorder::default();
    allocator
        .alloc_pages_report(caller, Gfp::ATOMIC, Order::new(2).unwrap(), &mut rec)
        .expect("the atomic reserve rights find a block");
    let kinds: Vec<HoldKind> = rec.holds.iter().map(|h| h.kind).collect();
    assert_eq!(kinds.last(), Some(&HoldKind::HighAtomic), "{:?}", rec.holds);
}

/// A request that fails in the slow path gives back high-atomic reserves only where a
/// zone holds more than one pageblock of them, and checks that before it takes the zone
/// lock (`unreserve_highatomic_pageblock`'s "preserve at least one pageblock" test); only
/// the forced pass at the end of the retries locks every eligible zone, once.
#[test]
fn a_failing_request_locks_a_zone_for_its_reserve_only_in_the_forced_pass() {
    let allocator = machine(Policy::V6_7);
    let caller = Caller::task(0);
    while allocator
        .alloc_pages(caller, Gfp::KERNEL, Order::new(1).unwrap())
        .is_ok()
    {}
    let mut rec = Recorder::default();
    allocator
        .alloc_pages_report(caller, Gfp::KERNEL, Order::new(1).unwrap(), &mut rec)
        .expect_err("nothing of order 1 is left");
    let zones: Vec<usize> = rec
        .holds
        .iter()
        .filter(|h| h.kind == HoldKind::HighAtomic)
        .map(|h| h.zone)
        .collect();
    assert!(
        !zones.is_empty(),
        "the forced pass locks each zone: {:?}",
        rec.holds
    );
    let mut distinct = zones.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(zones.len(), distinct.len(), "{:?}", rec.holds);
}

/// The vmstat tick's decay (patch 7 on) trims a pageset above its decayed `high` in one
/// hold per tick, named for the ticking CPU, with reason `Decay`.
#[test]
fn each_decay_trim_of_the_vmstat_tick_is_one_record() {
    let allocator = large_machine(Policy::V6_7);
    let zone = normal_index(&allocator);
    let list = (Order::ZERO, mmkit_core::page_alloc::MigrateType::Movable);
    assert_eq!(
        internals::seed_pageset(&allocator, 1, NORMAL, list, 8000, 8000),
        Some(8000)
    );
    let lists = |a: &PageAllocator| list_blocks(a)[zone][1];
    for tick in 0..4 {
        let (before, counters) = (lists(&allocator), Counters::read(&allocator.zones()[zone]));
        let mut recorded = Recorder::default();
        allocator.vmstat_tick_report(1, &mut recorded);
        let [hold] = recorded.holds[..] else {
            panic!("tick {tick}: one decay drain, got {:?}", recorded.holds);
        };
        assert_eq!(
            (hold.zone, hold.cpu, hold.kind),
            (zone, 1, HoldKind::Drain(DrainReason::Decay))
        );
        assert_eq!(
            before - lists(&allocator),
            hold.blocks as i64,
            "tick {tick}"
        );
        let moved = counters.delta(&Counters::read(&allocator.zones()[zone]));
        assert_eq!(
            moved,
            Counters::of_holds(zone, &recorded.holds),
            "tick {tick}"
        );
    }
}
