//! Drains and everything around them, through the public API: local and remote drains,
//! `drain_all_pages` with its mutex rules in the direct and the workqueue mode,
//! `zone_pcp_disable`/`zone_pcp_enable`, CPU hotplug, setting changes, the bulk allocator,
//! the batched free, and Gorman 2017's interrupt bypass.
//!
//! Linux counterpart (v6.7 `mm/page_alloc.c`): `drain_pages_zone`, `drain_local_pages`,
//! `__drain_all_pages`, `zone_pcp_disable`, `page_alloc_cpu_online`/`_dead`,
//! `percpu_pagelist_high_fraction_sysctl_handler`, `min_free_kbytes_sysctl_handler`,
//! `__alloc_pages_bulk`, `free_unref_page_list`; the workqueue drain and the interrupt
//! bypass are the 4.11-era designs of `docs/reference/pcp-series.md` §5.1.
//!
//! Most tests use the 2-CPU machine of `docs/reference/linux-mm.md` §3.1 (DMA 3840, DMA32 772915,
//! Normal 196608 pages, `min_free_kbytes` 67584): Normal batch 63, high_min 4265 / 2 =
//! 2132, high_max 196608 / 8 / 2 = 12288.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use mmkit_core::page_alloc::pcp::PerCpuPages;
use mmkit_core::page_alloc::{
    AllocAttempt, Caller, DrainAll, DrainCaller, DrainReason, WatermarkKind, Zone, ZoneId,
    ZoneLockHold,
};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{
    policy::DrainMode, AllocError, FreeError, Gfp, Order, PageAllocator, Pfn, Policy, Settings,
    SettingsError, Topology, ZoneType,
};

const MOVABLE: Gfp = Gfp::KERNEL.union(Gfp::MOVABLE);
const MOVABLE_DMA32: Gfp = MOVABLE.union(Gfp::DMA32);

const NORMAL: ZoneId = ZoneId {
    node: 0,
    zone_type: ZoneType::Normal,
};
const DMA32: ZoneId = ZoneId {
    node: 0,
    zone_type: ZoneType::Dma32,
};

/// 266240 KiB shared by 2: 33280 pages per CPU, FREE_HIGH_BATCH set.
const SPEC_LLC: CacheInfo = CacheInfo {
    llc_bytes: 266_240 << 10,
    llc_shared_cpus: 2,
};

fn spec_settings() -> Settings {
    Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(67_584),
        ..Settings::default()
    }
}

/// The §3.1 machine with `cpus` CPUs and the LLC `llc`.
fn machine_with(policy: Policy, cpus: u32, llc: CacheInfo) -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma, 3840),
        ZoneSize::managed(0, ZoneType::Dma32, 772_915),
        ZoneSize::managed(0, ZoneType::Normal, 196_608),
    ];
    let topology = Topology::x86_64(&sizes, vec![cpus], llc, false).expect("valid topology");
    PageAllocator::new(topology, spec_settings(), policy).expect("valid settings")
}

fn machine(policy: Policy, cpus: u32) -> PageAllocator {
    machine_with(policy, cpus, SPEC_LLC)
}

fn zone(allocator: &PageAllocator, id: ZoneId) -> &Zone {
    allocator.zone(id.node, id.zone_type).expect("zone exists")
}

fn pageset(allocator: &PageAllocator, id: ZoneId, cpu: u32) -> PerCpuPages {
    zone(allocator, id).pageset(cpu).expect("cpu exists")
}

fn count(allocator: &PageAllocator, id: ZoneId, cpu: u32) -> u64 {
    pageset(allocator, id, cpu).count
}

fn limits(allocator: &PageAllocator, id: ZoneId, cpu: u32) -> (u64, u64, u64) {
    let pcp = pageset(allocator, id, cpu);
    (pcp.batch, pcp.high_min, pcp.high_max)
}

fn explicit_drains(allocator: &PageAllocator, id: ZoneId) -> (u64, u64) {
    let events = zone(allocator, id).events();
    let reason = DrainReason::Explicit as usize;
    (
        events.pcp_drains(DrainReason::ALL[reason]),
        events.pcp_drain_pages(DrainReason::ALL[reason]),
    )
}

fn alloc_many(
    allocator: &PageAllocator,
    caller: Caller,
    gfp: Gfp,
    order: Order,
    n: usize,
) -> Vec<Pfn> {
    (0..n)
        .map(|i| {
            allocator
                .alloc_pages(caller, gfp, order)
                .unwrap_or_else(|e| panic!("allocation {i}: {e:?}"))
        })
        .collect()
}

fn census(allocator: &PageAllocator) -> Vec<mmkit_core::page_alloc::verify::ZoneCensus> {
    allocator.verify().unwrap_or_else(|e| panic!("verify: {e}"))
}

/// Put pages on CPU `cpu`'s pagesets of Normal and DMA32: one order-0 allocation each
/// refills 63 pages and takes one, leaving 62.
fn warm(allocator: &PageAllocator, cpu: u32) -> Vec<Pfn> {
    let mut pages = alloc_many(allocator, Caller::task(cpu), MOVABLE, Order::ZERO, 1);
    pages.extend(alloc_many(
        allocator,
        Caller::task(cpu),
        MOVABLE_DMA32,
        Order::ZERO,
        1,
    ));
    assert_eq!(count(allocator, NORMAL, cpu), 62);
    assert_eq!(count(allocator, DMA32, cpu), 62);
    pages
}

// ---------------------------------------------------------------------------------------
// Local and remote drains
// ---------------------------------------------------------------------------------------

#[test]
fn drain_local_pages_empties_only_the_callers_pagesets() {
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 0);
    warm(&allocator, 1);
    let free_before = zone(&allocator, NORMAL).free_pages();

    assert_eq!(allocator.drain_local_pages(0, Some(NORMAL)), 62);
    assert_eq!(count(&allocator, NORMAL, 0), 0);
    assert_eq!(
        count(&allocator, DMA32, 0),
        62,
        "other zones keep their pages"
    );
    assert_eq!(
        count(&allocator, NORMAL, 1),
        62,
        "other CPUs keep their pages"
    );
    assert_eq!(zone(&allocator, NORMAL).free_pages(), free_before + 62);
    assert_eq!(explicit_drains(&allocator, NORMAL), (1, 62));

    assert_eq!(
        allocator.drain_local_pages(0, None),
        62,
        "all zones: DMA32's 62 are left"
    );
    assert_eq!(count(&allocator, DMA32, 0), 0);
    assert_eq!(count(&allocator, DMA32, 1), 62);
    let pcp_pages: u64 = census(&allocator).iter().map(|c| c.pcp).sum();
    assert_eq!(pcp_pages, 124);
}

#[test]
fn drain_pages_zone_of_an_empty_pageset_does_nothing() {
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 1);
    let normal = zone(&allocator, NORMAL);
    assert_eq!(allocator.drain_pages_zone(0, normal), 0);
    assert_eq!(
        explicit_drains(&allocator, NORMAL),
        (0, 0),
        "no drain event for an empty pageset"
    );
    assert_eq!(
        allocator.drain_pages_zone(1, normal),
        62,
        "a remote CPU's pageset"
    );
    assert_eq!(count(&allocator, NORMAL, 1), 0);
    assert_eq!(allocator.drain_pages_zone(7, normal), 0, "no such CPU");
}

#[test]
fn drains_leave_the_tuned_high_alone() {
    let allocator = machine(Policy::V6_7, 2);
    alloc_many(&allocator, Caller::task(0), MOVABLE, Order::ZERO, 200);
    // Refills 63, 126, 252: high 2132 + 63 + 126 + 252 = 2573.
    let before = pageset(&allocator, NORMAL, 0);
    assert_eq!((before.high, before.alloc_factor), (2573, 3));
    allocator.drain_local_pages(0, None);
    let after = pageset(&allocator, NORMAL, 0);
    assert_eq!((after.count, after.high, after.alloc_factor), (0, 2573, 3));
}

// ---------------------------------------------------------------------------------------
// drain_all_pages, direct mode
// ---------------------------------------------------------------------------------------

#[test]
fn drain_all_pages_drains_every_cpu_with_pages() {
    let allocator = machine(Policy::V6_7, 3);
    warm(&allocator, 0);
    warm(&allocator, 2);
    let mut holds: Vec<ZoneLockHold> = Vec::new();
    let result = allocator.drain_all_pages_report(None, &mut holds);
    assert_eq!(
        result,
        DrainAll::Done {
            cpus: 2,
            pages: 4 * 62
        }
    );
    let mut named: Vec<_> = holds.iter().map(|hold| hold.cpu).collect();
    named.dedup();
    assert_eq!(named, [0, 2], "each drain names the CPU it emptied");
    for cpu in 0..3 {
        assert_eq!(count(&allocator, NORMAL, cpu), 0);
        assert_eq!(count(&allocator, DMA32, cpu), 0);
    }
    assert!(census(&allocator).iter().all(|c| c.pcp == 0));
    assert_eq!(
        allocator.drain_all_pages(None),
        DrainAll::Done { cpus: 0, pages: 0 }
    );
}

#[test]
fn drain_all_pages_of_one_zone_leaves_other_zones() {
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 0);
    warm(&allocator, 1);
    assert_eq!(
        allocator.drain_all_pages(Some(DMA32)),
        DrainAll::Done {
            cpus: 2,
            pages: 124
        }
    );
    assert_eq!(
        (count(&allocator, DMA32, 0), count(&allocator, DMA32, 1)),
        (0, 0)
    );
    assert_eq!(
        (count(&allocator, NORMAL, 0), count(&allocator, NORMAL, 1)),
        (62, 62)
    );
}

#[test]
fn drain_all_pages_global_request_is_skipped_while_a_drain_runs() {
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 0);
    warm(&allocator, 1);
    let guard = allocator.hold_drain_mutex().expect("no drain running");
    assert!(allocator.hold_drain_mutex().is_none(), "the mutex is held");
    assert_eq!(allocator.drain_all_pages(None), DrainAll::Skipped);
    for id in [NORMAL, DMA32] {
        assert_eq!(
            (count(&allocator, id, 0), count(&allocator, id, 1)),
            (62, 62)
        );
        assert_eq!(explicit_drains(&allocator, id), (0, 0));
    }
    drop(guard);
    assert_eq!(
        allocator.drain_all_pages(None),
        DrainAll::Done {
            cpus: 2,
            pages: 248
        }
    );
}

#[test]
fn drain_all_pages_zone_request_waits_for_the_running_drain() {
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 0);
    warm(&allocator, 1);
    let guard = allocator.hold_drain_mutex().expect("no drain running");
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let result = allocator.drain_all_pages(Some(NORMAL));
            finished.store(true, Relaxed);
            result
        });
        std::thread::sleep(Duration::from_millis(150));
        assert!(
            !finished.load(Relaxed),
            "a zone request must wait for the mutex"
        );
        assert_eq!(
            (count(&allocator, NORMAL, 0), count(&allocator, NORMAL, 1)),
            (62, 62)
        );
        drop(guard);
        let result = waiter.join().expect("drain thread");
        assert_eq!(
            result,
            DrainAll::Done {
                cpus: 2,
                pages: 124
            }
        );
    });
    assert_eq!(
        (count(&allocator, NORMAL, 0), count(&allocator, NORMAL, 1)),
        (0, 0)
    );
    assert_eq!(
        (count(&allocator, DMA32, 0), count(&allocator, DMA32, 1)),
        (62, 62)
    );
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "the waiter released the mutex"
    );
}

// ---------------------------------------------------------------------------------------
// drain_all_pages, workqueue mode (Gorman 2017)
// ---------------------------------------------------------------------------------------

fn workqueue() -> Policy {
    Policy {
        drain: DrainMode::Workqueue,
        ..Policy::V6_7
    }
}

#[test]
fn workqueue_drain_waits_for_every_target_cpu() {
    let allocator = machine(workqueue(), 3);
    warm(&allocator, 0);
    warm(&allocator, 1);
    let DrainAll::Queued(work) = allocator.drain_all_pages(None) else {
        panic!("workqueue mode queues work");
    };
    assert_eq!(
        allocator.drain_work_cpus(&work).collect::<Vec<_>>(),
        [0, 1],
        "only CPUs with pages get work"
    );
    assert_eq!(
        count(&allocator, NORMAL, 0),
        62,
        "nothing drains before the work runs"
    );
    assert!(!allocator.drain_work_finished(&work));
    assert_eq!(
        allocator.drain_all_pages(None),
        DrainAll::Skipped,
        "the mutex stays held"
    );

    assert_eq!(allocator.run_drain_work(2), 0, "CPU 2 has no work");
    assert_eq!(allocator.run_drain_work(0), 124);
    assert_eq!(
        (count(&allocator, NORMAL, 0), count(&allocator, DMA32, 0)),
        (0, 0)
    );
    assert_eq!(count(&allocator, NORMAL, 1), 62);
    assert!(
        !allocator.drain_work_finished(&work),
        "CPU 1 has not run its work"
    );
    assert_eq!(allocator.run_drain_work(0), 0, "work runs once");

    assert_eq!(allocator.run_drain_work(1), 124);
    assert!(allocator.drain_work_finished(&work));
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "finished work releases the mutex"
    );
    assert!(census(&allocator).iter().all(|c| c.pcp == 0));
}

#[test]
fn workqueue_drain_of_one_zone_picks_cpus_by_that_zone_and_drains_all_their_zones() {
    // Gorman 2017: the zone decides which CPUs get work (`cpus_with_pcps`), but the work
    // (`drain_local_pages_wq`) calls `drain_local_pages(NULL)`: every zone of the CPU.
    let allocator = machine(workqueue(), 3);
    warm(&allocator, 0);
    warm(&allocator, 1);
    alloc_many(&allocator, Caller::task(2), MOVABLE_DMA32, Order::ZERO, 1);
    assert_eq!(
        (count(&allocator, NORMAL, 2), count(&allocator, DMA32, 2)),
        (0, 62)
    );
    let DrainAll::Queued(work) = allocator.drain_all_pages(Some(NORMAL)) else {
        panic!("workqueue mode queues work");
    };
    assert_eq!(
        allocator.drain_work_cpus(&work).collect::<Vec<_>>(),
        [0, 1],
        "cpu2 has no Normal pages: no work"
    );
    assert!(allocator.drain_work_pending(0) && !allocator.drain_work_pending(2));
    assert_eq!(
        allocator.run_drain_work(0) + allocator.run_drain_work(1),
        4 * 62,
        "Normal and DMA32 of both CPUs"
    );
    assert!(allocator.drain_work_finished(&work));
    for cpu in [0, 1] {
        assert_eq!(
            (
                count(&allocator, NORMAL, cpu),
                count(&allocator, DMA32, cpu)
            ),
            (0, 0)
        );
    }
    assert_eq!(count(&allocator, DMA32, 2), 62);
}

#[test]
fn workqueue_drain_from_a_workqueue_worker_returns_at_once() {
    // Gorman 2017: "Workqueues cannot recurse": a worker would wait for its own pool.
    let allocator = machine(workqueue(), 2);
    warm(&allocator, 0);
    let worker = DrainCaller::WorkqueueWorker;
    assert_eq!(
        allocator.drain_all_pages_from_report(worker, None, &mut ()),
        DrainAll::FromWorker
    );
    assert_eq!(count(&allocator, NORMAL, 0), 62, "nothing drained");
    assert!(!allocator.drain_work_pending(0), "no work queued");
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "the mutex was not taken"
    );
    // A task's request from the same state queues work as usual.
    let task = DrainCaller::Task;
    assert!(matches!(
        allocator.drain_all_pages_from_report(task, None, &mut ()),
        DrainAll::Queued(_)
    ));
}

#[test]
fn direct_drain_from_a_workqueue_worker_drains_as_from_a_task() {
    // Linux ≥ 6.0 drains remote pagesets itself; it has no PF_WQ_WORKER check.
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 1);
    let worker = DrainCaller::WorkqueueWorker;
    assert!(matches!(
        allocator.drain_all_pages_from_report(worker, None, &mut ()),
        DrainAll::Done { pages: 124, .. }
    ));
}

#[test]
fn workqueue_drain_with_nothing_to_drain_is_done_at_once() {
    let allocator = machine(workqueue(), 2);
    assert_eq!(
        allocator.drain_all_pages(None),
        DrainAll::Done { cpus: 0, pages: 0 }
    );
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "the mutex was released"
    );
}

/// A 2-CPU machine with one Normal zone of 4096 pages, every page allocated by CPU 0
/// except `stranded` order-0 pages freed by CPU 1 onto its pageset: the zone's free pages
/// are below the min watermark and the only free pages sit on CPU 1's pageset.
fn stranded_on_cpu1(policy: Policy, stranded: usize) -> (PageAllocator, Vec<Pfn>) {
    let sizes = [ZoneSize::managed(0, ZoneType::Normal, 4096)];
    let topology = Topology::x86_64(&sizes, vec![2], SPEC_LLC, false).expect("valid topology");
    let allocator = PageAllocator::new(topology, Settings::default(), policy).expect("boots");
    let mut held = Vec::new();
    while let Ok(pfn) = allocator.alloc_pages(Caller::task(0), MOVABLE, Order::ZERO) {
        held.push(pfn);
    }
    assert_eq!(
        count(&allocator, NORMAL, 0),
        0,
        "the slow path drained CPU 0"
    );
    for pfn in held.split_off(held.len() - stranded) {
        allocator
            .free_pages(Caller::task(1), pfn, Order::ZERO)
            .expect("a good free");
    }
    assert_eq!(count(&allocator, NORMAL, 1), stranded as u64);
    (allocator, held)
}

#[test]
fn workqueue_allocation_waits_for_other_cpus_drain_work_then_succeeds() {
    // `__alloc_pages_direct_reclaim` → `drain_all_pages(NULL)`: 4.11–5.19 queue the work
    // on CPU 1 and sleep in `flush_work`; the retry after it finds CPU 1's pages.
    let (allocator, _held) = stranded_on_cpu1(workqueue(), 20);
    let mut holds: Vec<ZoneLockHold> = Vec::new();
    let attempt = allocator
        .alloc_pages_may_wait_report(Caller::task(0), MOVABLE, Order::ZERO, &mut holds)
        .expect("not refused");
    let AllocAttempt::DrainQueued(work) = attempt else {
        panic!("the request waits for CPU 1's drain work: {attempt:?}");
    };
    assert_eq!(allocator.drain_work_cpus(&work).collect::<Vec<_>>(), [1]);
    assert_eq!(count(&allocator, NORMAL, 1), 20, "nothing drained yet");
    // Not finished: the request keeps waiting and changes nothing.
    let again = allocator
        .alloc_pages_after_drain_report(Caller::task(0), MOVABLE, Order::ZERO, work, &mut holds)
        .expect("not refused");
    let AllocAttempt::DrainQueued(work) = again else {
        panic!("CPU 1 has not run its work: {again:?}");
    };
    assert_eq!(allocator.run_drain_work(1), 20);
    let done = allocator
        .alloc_pages_after_drain_report(Caller::task(0), MOVABLE, Order::ZERO, work, &mut holds)
        .expect("not refused");
    assert!(matches!(done, AllocAttempt::Allocated(_)), "{done:?}");
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "the resumed request released the drain mutex"
    );
    census(&allocator);
}

#[test]
fn workqueue_allocation_that_cannot_wait_runs_the_drain_work_at_once() {
    // Before the workqueue drain was modelled the slow path drained only the caller's
    // own pagesets, and this allocation failed.
    let (allocator, _held) = stranded_on_cpu1(workqueue(), 20);
    let (_, drained_before) = explicit_drains(&allocator, NORMAL);
    let pfn = allocator.alloc_pages(Caller::task(0), MOVABLE, Order::ZERO);
    assert!(pfn.is_ok(), "{pfn:?}");
    assert!(!allocator.drain_work_pending(1), "CPU 1 ran its work");
    assert_eq!(explicit_drains(&allocator, NORMAL).1 - drained_before, 20);
}

#[test]
fn a_workqueue_workers_allocation_neither_queues_drain_work_nor_waits() {
    // A kworker (`PF_WQ_WORKER`) whose allocation reaches direct reclaim's
    // `drain_all_pages(NULL)` returns from it at once in 4.11–5.19 ("workqueues cannot
    // recurse"): the retry finds CPU 1's pages still stranded, and the request fails.
    let (allocator, _held) = stranded_on_cpu1(workqueue(), 20);
    let attempt = allocator.alloc_pages_may_wait_from_report(
        Caller::task(0),
        DrainCaller::WorkqueueWorker,
        MOVABLE,
        Order::ZERO,
        &mut (),
    );
    assert!(
        matches!(attempt, Err(AllocError::OutOfMemory { .. })),
        "{attempt:?}"
    );
    assert!(!allocator.drain_work_pending(1), "no work was queued");
    assert_eq!(count(&allocator, NORMAL, 1), 20, "nothing drained");
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "the mutex was not taken"
    );
    // In direct mode (Linux >= 6.0) there is no such check: a worker drains like a task.
    let (allocator, _held) = stranded_on_cpu1(Policy::V6_7, 20);
    let attempt = allocator.alloc_pages_may_wait_from_report(
        Caller::task(0),
        DrainCaller::WorkqueueWorker,
        MOVABLE,
        Order::ZERO,
        &mut (),
    );
    assert!(
        matches!(attempt, Ok(AllocAttempt::Allocated(_))),
        "{attempt:?}"
    );
}

#[test]
fn direct_allocation_drains_other_cpus_itself_and_never_waits() {
    let (allocator, _held) = stranded_on_cpu1(Policy::V6_7, 20);
    let attempt = allocator
        .alloc_pages_may_wait_report(Caller::task(0), MOVABLE, Order::ZERO, &mut ())
        .expect("not refused");
    assert!(matches!(attempt, AllocAttempt::Allocated(_)), "{attempt:?}");
    assert_eq!(count(&allocator, NORMAL, 1), 0);
}

// ---------------------------------------------------------------------------------------
// zone_pcp_disable / zone_pcp_enable
// ---------------------------------------------------------------------------------------

#[test]
fn zone_pcp_disable_sends_every_free_straight_back() {
    for policy in [Policy::BASE, Policy::V6_7] {
        let allocator = machine(policy, 2);
        warm(&allocator, 0);
        warm(&allocator, 1);
        let spare = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 5);
        assert_eq!(
            allocator.zone_pcp_disable(NORMAL),
            Some(62 + 57),
            "{policy}"
        );
        for cpu in 0..2 {
            assert_eq!(
                limits(&allocator, NORMAL, cpu),
                (1, 0, 0),
                "{policy} cpu {cpu}"
            );
            assert_eq!(count(&allocator, NORMAL, cpu), 0);
            assert_eq!(
                count(&allocator, DMA32, cpu),
                62,
                "{policy}: other zones untouched"
            );
        }
        let normal = zone(&allocator, NORMAL);
        for &pfn in &spare {
            let free = normal.free_pages();
            allocator
                .free_pages(Caller::task(0), pfn, Order::ZERO)
                .expect("valid free");
            assert_eq!(count(&allocator, NORMAL, 0), 0, "{policy}");
            assert_eq!(normal.free_pages(), free + 1, "{policy}");
        }
        // An allocation refills a single page and takes it.
        let refill_pages = normal.events().pcp_refill_pages();
        alloc_many(&allocator, Caller::task(0), MOVABLE, Order::ZERO, 1);
        assert_eq!(normal.events().pcp_refill_pages() - refill_pages, 1);
        assert_eq!(count(&allocator, NORMAL, 0), 0);

        assert_eq!(allocator.zone_pcp_enable(NORMAL), Some(()));
        assert_eq!(limits(&allocator, NORMAL, 0), (63, 2132, 12288), "{policy}");
        if !policy.pcp.auto_tune {
            assert_eq!(pageset(&allocator, NORMAL, 0).high, 2132);
        }
        let pfn = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 1)[0];
        allocator
            .free_pages(Caller::task(0), pfn, Order::ZERO)
            .expect("valid free");
        assert_eq!(
            count(&allocator, NORMAL, 0),
            1,
            "{policy}: frees stay on the pageset again"
        );
        census(&allocator);
    }
}

#[test]
fn zone_pcp_disable_nests_and_defers_new_limits_until_enabled() {
    let allocator = machine(Policy::V6_7, 2);
    assert_eq!(allocator.zone_pcp_enable(NORMAL), None, "not disabled");
    assert_eq!(allocator.zone_pcp_disable(NORMAL), Some(0));
    assert_eq!(allocator.zone_pcp_disable(NORMAL), Some(0));
    let settings = Settings {
        percpu_pagelist_high_fraction: 8,
        ..allocator.settings()
    };
    allocator.set_settings(settings).expect("valid settings");
    assert_eq!(
        limits(&allocator, NORMAL, 0),
        (1, 0, 0),
        "disabled pagesets keep (1, 0, 0)"
    );
    assert_eq!(
        limits(&allocator, DMA32, 0),
        (63, 48307, 48307),
        "other zones take the new limits"
    );
    assert_eq!(allocator.zone_pcp_enable(NORMAL), Some(()));
    assert_eq!(
        limits(&allocator, NORMAL, 1),
        (1, 0, 0),
        "still disabled once"
    );
    assert_eq!(allocator.zone_pcp_enable(NORMAL), Some(()));
    assert_eq!(
        limits(&allocator, NORMAL, 1),
        (63, 12288, 12288),
        "196608 / 8 / 2"
    );
    assert_eq!(allocator.zone_pcp_enable(NORMAL), None);
}

// ---------------------------------------------------------------------------------------
// CPU hotplug
// ---------------------------------------------------------------------------------------

#[test]
fn cpu_down_drains_the_cpu_and_splits_limits_over_fewer_cpus() {
    let allocator = machine(Policy::V6_7, 2);
    warm(&allocator, 1);
    let normal_free = zone(&allocator, NORMAL).free_pages();
    assert!(allocator.cpu_down(1));
    assert!(!allocator.is_cpu_online(1));
    assert_eq!(
        (count(&allocator, NORMAL, 1), count(&allocator, DMA32, 1)),
        (0, 0)
    );
    assert_eq!(zone(&allocator, NORMAL).free_pages(), normal_free + 62);
    // One CPU left: Normal low 4265 / 1, 196608 / 8 / 1; DMA32 16770 / 1, 772915 / 8.
    assert_eq!(limits(&allocator, NORMAL, 0), (63, 4265, 24576));
    assert_eq!(limits(&allocator, DMA32, 0), (63, 16770, 96614));

    assert_eq!(
        allocator.alloc_pages(Caller::task(1), MOVABLE, Order::ZERO),
        Err(AllocError::InvalidCpu(1))
    );
    let pfn = alloc_many(&allocator, Caller::task(0), MOVABLE, Order::ZERO, 1)[0];
    assert_eq!(
        allocator.free_pages(Caller::task(1), pfn, Order::ZERO),
        Err(FreeError::InvalidCpu(1))
    );
    allocator
        .free_pages(Caller::task(0), pfn, Order::ZERO)
        .expect("CPU 0 frees it");
    assert!(!allocator.cpu_down(1), "already offline");
    assert!(!allocator.cpu_down(0), "the last online CPU stays");
    assert!(!allocator.vmstat_tick(1), "an offline CPU does not tick");
    census(&allocator);
}

/// `page_alloc_cpu_online` recomputes before the CPU joins its node's mask, with
/// `cpu_online` 1: on a 3-CPU node with CPU 2 coming back, the divisor is 2 + 1 = 3
/// (`docs/reference/linux-mm.md` §8): Normal high_min 4265 / 3 = 1421, high_max 24576 / 3 = 8192.
#[test]
fn cpu_up_splits_limits_over_node_cpus_plus_one() {
    let allocator = machine(Policy::V6_7, 3);
    assert_eq!(limits(&allocator, NORMAL, 0), (63, 1421, 8192));
    assert!(allocator.cpu_down(2));
    assert_eq!(limits(&allocator, NORMAL, 0), (63, 2132, 12288));
    assert!(allocator.cpu_up(2));
    assert!(allocator.is_cpu_online(2));
    for cpu in 0..3 {
        assert_eq!(
            limits(&allocator, NORMAL, cpu),
            (63, 1421, 8192),
            "cpu {cpu}"
        );
    }
    assert!(!allocator.cpu_up(2), "already online");
    assert!(!allocator.cpu_up(3), "no such CPU");
    alloc_many(&allocator, Caller::task(2), MOVABLE, Order::ZERO, 1);
    assert_eq!(count(&allocator, NORMAL, 2), 62, "the CPU is usable again");
}

/// FREE_HIGH_BATCH follows the cache slice on hotplug: 1 MiB shared by 2 online CPUs is
/// 128 pages each (≤ 3 · 63, clear); with one CPU left it is 256 pages (set).
#[test]
fn cpu_hotplug_recomputes_free_high_batch_from_the_cache_slice() {
    let llc = CacheInfo {
        llc_bytes: 1 << 20,
        llc_shared_cpus: 2,
    };
    let allocator = machine_with(Policy::V6_7, 2, llc);
    assert!(!pageset(&allocator, NORMAL, 0).flags.free_high_batch);
    assert!(allocator.cpu_down(1));
    assert!(pageset(&allocator, NORMAL, 0).flags.free_high_batch);
    assert!(allocator.cpu_up(1));
    assert!(!pageset(&allocator, NORMAL, 0).flags.free_high_batch);
    assert!(!pageset(&allocator, NORMAL, 1).flags.free_high_batch);
}

// ---------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------

#[test]
fn min_free_kbytes_above_lowmem_is_refused_at_boot_and_by_set_settings() {
    // 3840 + 772,915 + 196,608 managed pages = 3,893,452 KiB of lowmem.
    let lowmem_kbytes = (3840 + 772_915 + 196_608) * 4;
    let above = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(lowmem_kbytes + 4),
        ..spec_settings()
    };
    let impossible = SettingsError::MinFreeKbytesAboveMemory {
        min_free_kbytes: lowmem_kbytes + 4,
        lowmem_kbytes,
    };
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma, 3840),
        ZoneSize::managed(0, ZoneType::Dma32, 772_915),
        ZoneSize::managed(0, ZoneType::Normal, 196_608),
    ];
    let topology = Topology::x86_64(&sizes, vec![2], SPEC_LLC, false).expect("valid topology");
    let refused = PageAllocator::new(topology, above.clone(), Policy::V6_7).unwrap_err();
    assert_eq!(refused, impossible);

    let allocator = machine(Policy::V6_7, 2);
    let min_before = zone(&allocator, NORMAL).wmark(WatermarkKind::Min);
    assert_eq!(allocator.set_settings(above), Err(impossible));
    assert_eq!(
        allocator.settings(),
        spec_settings(),
        "a refused setting changes nothing"
    );
    assert_eq!(
        zone(&allocator, NORMAL).wmark(WatermarkKind::Min),
        min_before
    );
    // Every managed page at the min watermark is the most there is, and possible.
    let all = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(lowmem_kbytes),
        ..spec_settings()
    };
    allocator
        .set_settings(all)
        .expect("at most the lowmem zones' memory");
}

#[test]
fn fraction_8_fixes_high_min_and_high_max_and_0_restores_auto_tuning() {
    let allocator = machine(Policy::V6_7, 2);
    let fraction = |f| Settings {
        percpu_pagelist_high_fraction: f,
        ..spec_settings()
    };
    allocator.set_settings(fraction(8)).expect("valid");
    assert_eq!(limits(&allocator, NORMAL, 0), (63, 12288, 12288));
    assert_eq!(limits(&allocator, DMA32, 1), (63, 48307, 48307));
    // DMA: 3840 / 8 / 2 = 240 ≥ 4 · batch 1.
    assert_eq!(
        limits(
            &allocator,
            ZoneId {
                node: 0,
                zone_type: ZoneType::Dma
            },
            0
        ),
        (1, 240, 240)
    );
    // Auto-tuning is off: refills no longer grow high.
    alloc_many(&allocator, Caller::task(0), MOVABLE, Order::ZERO, 200);
    assert_eq!(pageset(&allocator, NORMAL, 0).high, 12288);

    assert_eq!(
        allocator.set_settings(fraction(5)),
        Err(SettingsError::PercpuPagelistHighFraction(5))
    );
    assert_eq!(
        limits(&allocator, NORMAL, 0),
        (63, 12288, 12288),
        "a refused setting changes nothing"
    );
    assert_eq!(allocator.settings().percpu_pagelist_high_fraction, 8);

    allocator.set_settings(fraction(0)).expect("valid");
    assert_eq!(limits(&allocator, NORMAL, 0), (63, 2132, 12288));
}

/// min_free_kbytes 67584 → 135168: pages_min 33792; Normal tmp = 33792 · 196608 / 973363
/// = 6825, dist = max(6825 / 4, 196) = 1706: low 8531, high 10237; high_min 8531 / 2 = 4265.
#[test]
fn min_free_kbytes_change_recomputes_watermarks_and_limits() {
    let allocator = machine(Policy::V6_7, 2);
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(135_168),
        ..spec_settings()
    };
    allocator.set_settings(settings).expect("valid");
    assert_eq!(allocator.min_free_kbytes(), 135_168);
    let normal = zone(&allocator, NORMAL);
    let marks = (
        normal.wmark(WatermarkKind::Min),
        normal.wmark(WatermarkKind::Low),
        normal.wmark(WatermarkKind::High),
    );
    assert_eq!(marks, (6825, 8531, 10237));
    assert_eq!(limits(&allocator, NORMAL, 0), (63, 4265, 12288));
    // DMA32: tmp 26833, low 26833 + 6708 = 33541, high_min 16770.
    assert_eq!(limits(&allocator, DMA32, 1), (63, 16770, 48307));
}

// ---------------------------------------------------------------------------------------
// The bulk allocator
// ---------------------------------------------------------------------------------------

fn pgalloc(allocator: &PageAllocator) -> u64 {
    zone(allocator, NORMAL).pgalloc()
}

#[test]
fn bulk_array_fills_only_empty_slots_and_returns_populated_slots() {
    let allocator = machine(Policy::V6_7, 2);
    let kept = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 2);
    let mut array: Vec<Option<Pfn>> = vec![None; 10];
    array[2] = Some(kept[0]);
    array[5] = Some(kept[1]);
    let (allocated, counted) = (census(&allocator)[2].allocated, pgalloc(&allocator));
    let populated = allocator
        .alloc_pages_bulk_array(Caller::task(0), MOVABLE, None, &mut array)
        .expect("bulk allocation");
    assert_eq!(populated, 10);
    assert_eq!(
        (array[2], array[5]),
        (Some(kept[0]), Some(kept[1])),
        "filled slots untouched"
    );
    let mut pfns: Vec<Pfn> = array
        .iter()
        .map(|slot| slot.expect("every slot filled"))
        .collect();
    pfns.sort_unstable();
    pfns.dedup();
    assert_eq!(pfns.len(), 10, "distinct pages");
    assert_eq!(census(&allocator)[2].allocated, allocated + 8);
    assert_eq!(
        pgalloc(&allocator) - counted,
        8,
        "PGALLOC counts the pages taken"
    );

    let full = allocator
        .alloc_pages_bulk_array(Caller::task(0), MOVABLE, None, &mut array)
        .expect("bulk allocation");
    assert_eq!(full, 10, "a full array returns at once");
    assert_eq!(census(&allocator)[2].allocated, allocated + 8);
}

#[test]
fn bulk_list_returns_the_pages_added() {
    let allocator = machine(Policy::V6_7, 2);
    let mut list = alloc_many(&allocator, Caller::task(0), MOVABLE, Order::ZERO, 3);
    let counted = pgalloc(&allocator);
    let added = allocator
        .alloc_pages_bulk_list(Caller::task(0), MOVABLE, None, 5, &mut list)
        .expect("bulk allocation");
    assert_eq!((added, list.len()), (5, 8));
    assert_eq!(pgalloc(&allocator) - counted, 5);
    assert_eq!(
        allocator.alloc_pages_bulk_list(Caller::task(0), MOVABLE, None, 0, &mut list),
        Ok(0)
    );
}

/// The bulk fast path refills with `nr_pcp_alloc` like a single allocation: 200 pages on a
/// fresh pageset take refills of 63, 126 and 252 (high 2132 → 2573), and leave
/// free_count alone.
#[test]
fn bulk_fast_path_refills_by_the_pcp_rule_and_keeps_free_count() {
    let allocator = machine(Policy::V6_7, 2);
    let spare = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 100);
    for &pfn in &spare {
        allocator
            .free_pages(Caller::task(0), pfn, Order::ZERO)
            .expect("valid free");
    }
    allocator.drain_local_pages(0, None);
    let start = pageset(&allocator, NORMAL, 0);
    assert_eq!((start.count, start.free_count, start.high), (0, 100, 2132));
    let refills = zone(&allocator, NORMAL).events().pcp_refills();
    let mut list = Vec::new();
    let added = allocator
        .alloc_pages_bulk_list(Caller::task(0), MOVABLE, None, 200, &mut list)
        .expect("bulk allocation");
    assert_eq!(added, 200);
    assert_eq!(zone(&allocator, NORMAL).events().pcp_refills() - refills, 3);
    let after = pageset(&allocator, NORMAL, 0);
    assert_eq!(
        (after.high, after.alloc_factor, after.count),
        (2573, 3, 441 - 200)
    );
    assert_eq!(
        after.free_count, 100,
        "the bulk path does not touch free_count"
    );
}

/// One page wanted, or `__GFP_ACCOUNT`: the ordinary single-page allocation, which halves
/// free_count (base: free_factor) and returns at most one page.
#[test]
fn bulk_single_page_and_account_requests_take_the_single_page_path() {
    let allocator = machine(Policy::V6_7, 2);
    let held = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 2);
    let spare = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 100);
    for &pfn in &spare {
        allocator
            .free_pages(Caller::task(0), pfn, Order::ZERO)
            .expect("valid free");
    }
    assert_eq!(pageset(&allocator, NORMAL, 0).free_count, 100);
    let counted = pgalloc(&allocator);
    let mut list = Vec::new();
    let account = Gfp::KERNEL_ACCOUNT | Gfp::MOVABLE;
    assert_eq!(
        allocator.alloc_pages_bulk_list(Caller::task(0), account, None, 10, &mut list),
        Ok(1)
    );
    assert_eq!(pageset(&allocator, NORMAL, 0).free_count, 50);
    let mut array = [Some(held[0]), None, Some(held[1])];
    assert_eq!(
        allocator.alloc_pages_bulk_array(Caller::task(0), MOVABLE, None, &mut array),
        Ok(3)
    );
    assert_eq!(pageset(&allocator, NORMAL, 0).free_count, 25);
    assert_eq!(
        allocator.alloc_pages_bulk_list(Caller::task(0), MOVABLE, None, 1, &mut list),
        Ok(1)
    );
    assert_eq!(pageset(&allocator, NORMAL, 0).free_count, 12);
    assert_eq!(pgalloc(&allocator) - counted, 3);
    assert_eq!(list.len(), 2);
}

#[test]
fn bulk_fast_path_keeps_free_factor_in_base() {
    let allocator = machine(Policy::BASE, 2);
    // 2132 frees on CPU 0 drain 63 once (base: high 2132), setting free_factor to 1.
    let spare = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 2132);
    for &pfn in &spare {
        allocator
            .free_pages(Caller::task(0), pfn, Order::ZERO)
            .expect("valid free");
    }
    assert_eq!(pageset(&allocator, NORMAL, 0).free_factor, 1);
    let mut list = Vec::new();
    assert_eq!(
        allocator.alloc_pages_bulk_list(Caller::task(0), MOVABLE, None, 50, &mut list),
        Ok(50)
    );
    assert_eq!(pageset(&allocator, NORMAL, 0).free_factor, 1);
    assert_eq!(
        allocator.alloc_pages_bulk_list(Caller::task(0), MOVABLE, None, 1, &mut list),
        Ok(1)
    );
    assert_eq!(pageset(&allocator, NORMAL, 0).free_factor, 0);
}

// ---------------------------------------------------------------------------------------
// free_pages_batch
// ---------------------------------------------------------------------------------------

#[test]
fn free_pages_batch_puts_every_page_on_the_callers_pageset() {
    let allocator = machine(Policy::V6_7, 2);
    let pages = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 40);
    let pgfree = zone(&allocator, NORMAL).pgfree();
    assert_eq!(allocator.free_pages_batch(Caller::task(0), &pages), Ok(()));
    assert_eq!(count(&allocator, NORMAL, 0), 40);
    assert_eq!(zone(&allocator, NORMAL).pgfree() - pgfree, 40);
    census(&allocator);
}

#[test]
fn free_pages_batch_with_a_bad_pfn_frees_nothing() {
    let allocator = machine(Policy::V6_7, 2);
    let pages = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 4);
    let pair = alloc_many(
        &allocator,
        Caller::task(1),
        MOVABLE,
        Order::new(1).expect("order 1"),
        1,
    )[0];
    let before = census(&allocator);
    let pgfree = zone(&allocator, NORMAL).pgfree();

    // A page freed to CPU 1's pageset is no longer allocated.
    let cached = pages[3];
    allocator
        .free_pages(Caller::task(1), cached, Order::ZERO)
        .expect("valid free");
    let after_one_free = census(&allocator);
    let bad = [pages[0], pages[1], cached, pages[2]];
    assert_eq!(
        allocator.free_pages_batch(Caller::task(0), &bad),
        Err((2, FreeError::NotAllocated { pfn: cached }).into())
    );
    let wrong_order = [pages[0], pair];
    assert!(matches!(
        allocator.free_pages_batch(Caller::task(0), &wrong_order),
        Err(mmkit_core::BatchFreeError {
            index: 1,
            error: FreeError::WrongOrder { .. }
        })
    ));
    let duplicate = [pages[0], pages[1], pages[0]];
    assert_eq!(
        allocator.free_pages_batch(Caller::task(0), &duplicate),
        Err((2, FreeError::Duplicate { pfn: pages[0] }).into())
    );
    assert_eq!(
        census(&allocator),
        after_one_free,
        "refused batches change nothing"
    );
    assert_eq!(count(&allocator, NORMAL, 0), 0);
    assert_eq!(zone(&allocator, NORMAL).pgfree() - pgfree, 1);
    // Every page of the refused batches is still allocated and frees normally.
    assert_eq!(
        allocator.free_pages_batch(Caller::task(0), &pages[..3]),
        Ok(())
    );
    allocator
        .free_pages(Caller::task(0), pair, Order::new(1).expect("order 1"))
        .expect("valid");
    assert_eq!(census(&allocator)[2].allocated, before[2].allocated - 4 - 2);
}

// ---------------------------------------------------------------------------------------
// Gorman 2017: interrupt-context requests bypass the PCP
// ---------------------------------------------------------------------------------------

fn irq_bypass() -> Policy {
    Policy {
        irq_bypass: true,
        ..Policy::V6_7
    }
}

#[test]
fn irq_bypass_sends_softirq_requests_to_the_zone() {
    let allocator = machine(irq_bypass(), 2);
    let normal = zone(&allocator, NORMAL);
    let events = normal.events();
    let pages = alloc_many(&allocator, Caller::softirq(0), MOVABLE, Order::ZERO, 5);
    assert_eq!(events.pcp_irq_bypass(), 5);
    assert_eq!(
        (events.pcp_refills(), count(&allocator, NORMAL, 0)),
        (0, 0),
        "no refill"
    );
    assert_eq!(normal.pgalloc(), 5);
    // A cheap high order bypasses too; order 4 never uses the PCP and is not counted.
    let order2 = alloc_many(
        &allocator,
        Caller::softirq(0),
        MOVABLE,
        Order::new(2).expect("2"),
        1,
    );
    let order4 = alloc_many(
        &allocator,
        Caller::softirq(0),
        MOVABLE,
        Order::new(4).expect("4"),
        1,
    );
    assert_eq!(events.pcp_irq_bypass(), 6);

    let free = normal.free_pages();
    for &pfn in &pages {
        allocator
            .free_pages(Caller::softirq(0), pfn, Order::ZERO)
            .expect("valid free");
    }
    assert_eq!(count(&allocator, NORMAL, 0), 0);
    assert_eq!(normal.free_pages(), free + 5);
    assert_eq!(events.pcp_irq_bypass(), 11);
    assert_eq!(normal.pgfree(), 5, "__free_pages_ok counts PGFREE");
    allocator
        .free_pages(Caller::softirq(0), order2[0], Order::new(2).expect("2"))
        .expect("valid");
    allocator
        .free_pages(Caller::softirq(0), order4[0], Order::new(4).expect("4"))
        .expect("valid");
    assert_eq!(events.pcp_irq_bypass(), 12);

    // Task context on the same machine still uses the pageset.
    alloc_many(&allocator, Caller::task(0), MOVABLE, Order::ZERO, 1);
    assert_eq!(count(&allocator, NORMAL, 0), 62);
    assert_eq!(events.pcp_irq_bypass(), 12);
    census(&allocator);
}

#[test]
fn irq_bypass_batched_free_from_softirq_goes_to_the_zone() {
    let allocator = machine(irq_bypass(), 2);
    let events = zone(&allocator, NORMAL).events();
    let pages = alloc_many(&allocator, Caller::task(1), MOVABLE, Order::ZERO, 10);
    let (bypass, pgfree) = (events.pcp_irq_bypass(), zone(&allocator, NORMAL).pgfree());
    assert_eq!(
        allocator.free_pages_batch(Caller::softirq(0), &pages),
        Ok(())
    );
    assert_eq!(count(&allocator, NORMAL, 0), 0);
    assert_eq!(events.pcp_irq_bypass() - bypass, 10);
    assert_eq!(
        zone(&allocator, NORMAL).pgfree() - pgfree,
        10,
        "each page freed as by __free_pages_ok"
    );
    census(&allocator);
}

#[test]
fn without_irq_bypass_softirq_requests_use_the_pageset() {
    let allocator = machine(Policy::V6_7, 2);
    let events = zone(&allocator, NORMAL).events();
    let pages = alloc_many(&allocator, Caller::softirq(0), MOVABLE, Order::ZERO, 5);
    assert_eq!(count(&allocator, NORMAL, 0), 58);
    assert_eq!(events.pcp_refills(), 1);
    for &pfn in &pages {
        allocator
            .free_pages(Caller::softirq(0), pfn, Order::ZERO)
            .expect("valid free");
    }
    assert_eq!(count(&allocator, NORMAL, 0), 63);
    assert_eq!(allocator.free_pages_batch(Caller::softirq(1), &[]), Ok(()));
    assert_eq!(events.pcp_irq_bypass(), 0);
}
