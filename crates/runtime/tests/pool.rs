//! The page pool on real memory and real threads.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::wait_until;
use mmkit_core::page_alloc::{DrainReason, Gfp, WatermarkKind, ZoneFlags, ZoneType};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::views::zoneinfo;
use mmkit_core::{Order, Pfn, Settings};
use mmkit_runtime::{cpu, FaultConfig, PageBlock, PagePool, PoolError, Reclaim, ReclaimContext};

/// A 16 MiB pool on `cpus` CPUs without background threads, so that nothing but the test
/// moves pages.
fn quiet_pool(cpus: u32) -> PagePool {
    PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(cpus)
        .background(false)
        .build()
        .unwrap()
}

fn order(n: u8) -> Order {
    Order::new(n).unwrap()
}

#[test]
fn blocks_are_writable_memory_at_stable_addresses() {
    let pool = PagePool::builder()
        .memory_bytes(32 << 20)
        .cpus(2)
        .background(false)
        .build()
        .unwrap();
    let mut a = pool.alloc(order(0)).unwrap();
    let mut b = pool.alloc(order(3)).unwrap();
    assert_eq!((a.len(), b.len()), (4096, 32768));
    a.write_canary(1);
    b.write_canary(2);
    assert_eq!((a.canary_damage(1), b.canary_damage(2)), (0, 0));
    assert_eq!(
        b.addr() % 32768,
        0,
        "an order-3 block is aligned to its size"
    );
    assert_eq!(pool.addr_to_pfn(b.addr()).unwrap(), b.pfn());
    drop((a, b));
    let census = pool.verify().unwrap();
    assert_eq!(census.iter().map(|c| c.allocated).sum::<u64>(), 0);
}

/// A handle is two words (its order rides in the low bits of its address) and gives back
/// exactly what the allocator handed out, at every order: pfn, order, address, length.
#[test]
fn handles_are_two_words_and_report_their_block_at_every_order() {
    assert_eq!(
        std::mem::size_of::<PageBlock<'_>>(),
        2 * std::mem::size_of::<usize>()
    );
    assert_eq!(
        std::mem::size_of::<Option<PageBlock<'_>>>(),
        2 * std::mem::size_of::<usize>()
    );
    let pool = quiet_pool(1);
    for o in 0..=mmkit_core::page::MAX_ORDER {
        let block = pool.alloc(order(o)).unwrap();
        assert_eq!(block.order(), order(o));
        assert_eq!(block.len(), 4096 << o);
        assert_eq!(block.addr() % (4096 << o), 0, "aligned to its size");
        assert_eq!(pool.pfn_to_addr(block.pfn()).unwrap(), block.addr());
        assert_eq!(pool.addr_to_pfn(block.addr()).unwrap(), block.pfn());
        let pfn = block.pfn();
        let raw = block.into_raw();
        assert_eq!(raw, pfn);
        // SAFETY: `into_raw` gave up the handle; the block is freed once, and nothing
        // refers to its memory.
        unsafe { pool.free_raw(raw, order(o)).unwrap() };
    }
    let census = pool.verify().unwrap();
    assert_eq!(census.iter().map(|c| c.allocated).sum::<u64>(), 0);
}

#[test]
fn threads_allocate_and_free_each_others_blocks_without_damage() {
    let pool = PagePool::builder()
        .memory_bytes(64 << 20)
        .cpus(2)
        .build()
        .unwrap();
    let violations = AtomicU64::new(0);
    let mailbox: Mutex<Vec<(PageBlock<'_>, u64)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (pool, violations, mailbox) = (&pool, &violations, &mailbox);
            s.spawn(move || {
                cpu::pin_thread(Some(t as u32));
                let mut held: Vec<(PageBlock<'_>, u64)> = Vec::new();
                for i in 0..3000u64 {
                    let generation = t << 40 | i;
                    match i % 7 {
                        0..=3 => {
                            if let Ok(mut block) =
                                pool.alloc(order([0, 0, 1, 2, 3][(i % 5) as usize]))
                            {
                                block.write_canary(generation);
                                held.push((block, generation));
                            }
                        }
                        4 => {
                            if let Some(item) = held.pop() {
                                mailbox.lock().unwrap().push(item);
                            }
                        }
                        5 => {
                            let item = mailbox.lock().unwrap().pop();
                            if let Some((block, g)) = item {
                                violations.fetch_add(block.canary_damage(g), Relaxed);
                            }
                        }
                        _ => {
                            if i % 70 == 6 {
                                pool.drain_all(None);
                                let mut settings = pool.settings();
                                settings.percpu_pagelist_high_fraction =
                                    if i % 140 == 6 { 8 } else { 0 };
                                pool.set_settings(settings).unwrap();
                            }
                            if let Some((block, g)) = held.pop() {
                                violations.fetch_add(block.canary_damage(g), Relaxed);
                            }
                        }
                    }
                }
                for (block, g) in held {
                    violations.fetch_add(block.canary_damage(g), Relaxed);
                }
            });
        }
    });
    for (block, g) in mailbox.into_inner().unwrap() {
        violations.fetch_add(block.canary_damage(g), Relaxed);
    }
    assert_eq!(violations.load(Relaxed), 0, "every canary survived");
    let census = pool.verify().unwrap();
    assert_eq!(census.iter().map(|c| c.allocated).sum::<u64>(), 0);
    assert!(pool.stats().pgalloc > 1000);
}

#[test]
fn bad_raw_frees_are_refused_and_change_nothing() {
    let pool = quiet_pool(1);
    let pfn = pool.alloc_raw(Gfp::KERNEL, order(2)).unwrap();
    let addr = pool.pfn_to_addr(pfn).unwrap();
    let before = (pool.stats(), pool.buddyinfo());
    // SAFETY: every call below is refused by the allocator before it frees anything.
    unsafe {
        assert!(
            matches!(pool.free_raw(pfn, order(1)), Err(PoolError::Free(_))),
            "wrong order"
        );
        assert!(
            matches!(
                pool.free_raw(Pfn(pfn.0 + 1), order(0)),
                Err(PoolError::Free(_))
            ),
            "inside the block"
        );
        assert!(matches!(
            pool.free_raw_addr(addr + 8, order(2)),
            Err(PoolError::Misaligned(_))
        ));
        assert!(matches!(
            pool.free_raw_addr(16, order(0)),
            Err(PoolError::OutsideArena(_))
        ));
        assert!(matches!(
            pool.free_raw(Pfn(1 << 30), order(0)),
            Err(PoolError::OutsideArena(_))
        ));
    }
    assert_eq!((pool.stats(), pool.buddyinfo()), before);
    // SAFETY: this thread allocated the block raw and frees it once.
    unsafe { pool.free_raw(pfn, order(2)).unwrap() };
    // SAFETY: refused: the block is already free.
    let again = unsafe { pool.free_raw(pfn, order(2)) };
    assert!(matches!(again, Err(PoolError::Free(_))), "double free");
    pool.verify().unwrap();
}

/// A raw block freed from one CPU and then again from another: the second free is
/// refused and changes nothing. (The raw frees claim without a compare-and-swap, so two
/// frees *racing* each other are excluded by `free_raw`'s contract, not detected; the
/// core's atomic `free_pages` is the one that lets exactly one of two racing frees win:
/// `racing_double_free_lets_exactly_one_caller_win` in crates/core/tests/bad_free.rs.)
#[test]
fn a_double_free_from_another_cpu_is_refused() {
    let pool = quiet_pool(2);
    for _ in 0..300 {
        let pfn = pool.alloc_raw(Gfp::KERNEL, order(0)).unwrap();
        let wins = AtomicU64::new(0);
        for cpu_id in 0..2 {
            // One thread after the other, each pinned to its CPU.
            std::thread::scope(|s| {
                s.spawn(|| {
                    cpu::pin_thread(Some(cpu_id));
                    // SAFETY: allocated raw above and never referenced; the two frees
                    // run one after the other, so the second is refused, not raced.
                    if unsafe { pool.free_raw(pfn, order(0)) }.is_ok() {
                        wins.fetch_add(1, Relaxed);
                    }
                });
            });
        }
        assert_eq!(wins.load(Relaxed), 1);
    }
    pool.verify().unwrap();
}

#[test]
fn the_vmstat_thread_decays_pageset_high() {
    let settings = Settings {
        stat_interval_ms: 5,
        ..Settings::DISTRIBUTION_KERNEL
    };
    let pool = PagePool::builder()
        .memory_bytes(256 << 20)
        .cpus(1)
        .settings(settings)
        .build()
        .unwrap();
    let zone = pool.zone(0, ZoneType::Normal).unwrap();
    let blocks: Vec<_> = (0..4000).map(|_| pool.alloc(order(0)).unwrap()).collect();
    let grown = zone.pageset(0).unwrap().high;
    drop(blocks);
    let high_min = zone.pageset(0).unwrap().high_min;
    assert!(grown > high_min, "allocations grew high above high_min");
    wait_until(
        "pageset high never decayed to high_min",
        || zone.pageset(0).unwrap().high <= high_min,
        || std::thread::sleep(Duration::from_millis(5)),
    );
    let pcp = zone.pageset(0).unwrap();
    assert_eq!(pcp.high, high_min, "decayed to high_min");
    assert!(pcp.count <= pcp.high);
    assert!(zone.events().pcp_drains(DrainReason::Decay) > 0);
}

/// Frees the blocks it holds when kswapd asks, and records what it saw.
struct Cache<'a> {
    blocks: Mutex<Vec<Pfn>>,
    pool: Mutex<Option<&'a PagePool>>,
    saw_reclaim_active: AtomicBool,
    calls: AtomicU64,
}

impl Reclaim for Cache<'static> {
    fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64 {
        self.calls.fetch_add(1, Relaxed);
        let active = cx
            .allocator
            .zones()
            .iter()
            .any(|z| z.flags().contains(ZoneFlags::RECLAIM_ACTIVE));
        self.saw_reclaim_active.fetch_or(active, Relaxed);
        let Some(pool) = *self.pool.lock().unwrap() else {
            return 0;
        };
        let mut blocks = self.blocks.lock().unwrap();
        let take = (cx.scan.nr_to_reclaim as usize).min(blocks.len());
        for pfn in blocks.drain(..take) {
            // SAFETY: the cache allocated these raw and nobody else references them.
            unsafe { pool.free_raw(pfn, Order::ZERO).unwrap() };
        }
        take as u64
    }
}

#[test]
fn kswapd_reclaims_through_the_hook_until_balanced() {
    let cache: &'static Cache<'static> = Box::leak(Box::new(Cache {
        blocks: Mutex::new(Vec::new()),
        pool: Mutex::new(None),
        saw_reclaim_active: AtomicBool::new(false),
        calls: AtomicU64::new(0),
    }));
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(2048),
        ..Settings::DISTRIBUTION_KERNEL
    };
    let pool: &'static PagePool = Box::leak(Box::new(
        PagePool::builder()
            .memory_bytes(32 << 20)
            .cpus(1)
            .settings(settings)
            .reclaim(Arc::new(CacheRef(cache)))
            .build()
            .unwrap(),
    ));
    *cache.pool.lock().unwrap() = Some(pool);
    let zone = pool.zone(0, ZoneType::Normal).unwrap();
    let low = zone.wmark(mmkit_core::page_alloc::WatermarkKind::Low) as i64;
    // Fill the cache until the zone is below its low watermark.
    while zone.free_pages() > low - 10 {
        let pfn = pool.alloc_raw(Gfp::KERNEL, Order::ZERO).unwrap();
        cache.blocks.lock().unwrap().push(pfn);
    }
    let balanced = || {
        pool.allocator()
            .pgdat_balanced(0, Order::ZERO, ZoneType::Movable)
    };
    wait_until("kswapd never balanced the node", balanced, || {
        let _ = pool
            .alloc_raw(Gfp::KERNEL, Order::ZERO)
            .map(|pfn| cache.blocks.lock().unwrap().push(pfn));
        std::thread::sleep(Duration::from_millis(20));
    });
    assert!(pool.stats().kswapd_runs > 0, "kswapd ran");
    assert!(cache.calls.load(Relaxed) > 0, "the hook was called");
    assert!(
        cache.saw_reclaim_active.load(Relaxed),
        "RECLAIM_ACTIVE was set while reclaiming"
    );
    assert!(balanced());
    // RECLAIM_ACTIVE is cleared once kswapd has finished the run that balanced the node.
    wait_until(
        "RECLAIM_ACTIVE still set",
        || !zone.flags().contains(ZoneFlags::RECLAIM_ACTIVE),
        || std::thread::sleep(Duration::from_millis(5)),
    );
}

/// A 16 MiB pool (4096 pages, min 256, high 384) boosted the way
/// `crates/core/tests/kswapd.rs` boosts its zone: eight order-8 Movable blocks free, one
/// per pageblock, then an order-0 Unmovable request that falls back to one of them.
fn boosted_pool(background: bool) -> PagePool {
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(1024),
        ..Settings::default()
    };
    let pool = PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(1)
        .settings(settings)
        .background(background)
        .build()
        .unwrap();
    let mut held = Vec::new();
    while let Ok(pfn) = pool.alloc_raw(Gfp::HIGHUSER_MOVABLE, order(8)) {
        held.push(pfn);
    }
    for &pfn in held.iter().skip(1).step_by(2) {
        // SAFETY: allocated raw above, referenced nowhere else.
        unsafe { pool.free_raw(pfn, order(8)).unwrap() };
    }
    pool.alloc_raw(Gfp::KERNEL, order(0)).unwrap();
    pool
}

fn boost(pool: &PagePool) -> u64 {
    pool.zone(0, ZoneType::Normal).unwrap().watermarks().boost()
}

/// The runtime's kswapd thread runs the core's loop (`mmkit_core::mm::kswapd::run`), so
/// a pool whose kswapd thread handled a wake-up and a pool on which the test ran the core
/// loop itself, with the default hook's work (drain every pageset, free nothing), end in
/// the same state: the boost the fallback added is gone, the watermarks and the free
/// lists are the same.
#[test]
fn kswapd_thread_and_core_loop_leave_a_boosted_pool_in_the_same_state() {
    let threaded = boosted_pool(true);
    let by_hand = boosted_pool(false);
    assert!(boost(&by_hand) > 0, "the fallback boosted the watermarks");
    wait_until(
        "kswapd never dropped the boost",
        || boost(&threaded) == 0,
        || std::thread::sleep(Duration::from_millis(5)),
    );
    // SAFETY: the core's loop frees nothing here; it drains pagesets and changes the
    // boost and zone flags, which no `PageBlock` depends on.
    let source = unsafe { by_hand.allocator_source() };
    let allocator = source.page_allocator();
    let (order, highest_zoneidx) = allocator.kswapd(0).unwrap().take_request().unwrap();
    mmkit_core::mm::kswapd::run(allocator, 0, order, highest_zoneidx, |_| {
        allocator.drain_all_pages(None);
        Ok::<_, std::convert::Infallible>(mmkit_core::mm::kswapd::ShrinkOutcome::default())
    })
    .unwrap();
    assert_eq!(boost(&by_hand), 0);
    let zone = |pool: &PagePool| {
        pool.drain_all(None);
        let zone = pool.zone(0, ZoneType::Normal).unwrap();
        let marks = [WatermarkKind::Min, WatermarkKind::Low, WatermarkKind::High];
        let flags = zone.flags() - ZoneFlags::BELOW_HIGH;
        (
            marks.map(|k| zone.wmark(k)),
            flags,
            zone.free_pages(),
            zone.buddyinfo(),
        )
    };
    assert_eq!(zone(&threaded), zone(&by_hand));
}

struct CacheRef(&'static Cache<'static>);

impl Reclaim for CacheRef {
    fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64 {
        self.0.reclaim(cx)
    }
}

#[test]
fn allocation_failure_drains_other_cpus_pagesets_first() {
    let pool = PagePool::builder()
        .memory_bytes(8 << 20)
        .cpus(2)
        .background(false)
        .build()
        .unwrap();
    let zone = pool.zone(0, ZoneType::Normal).unwrap();
    // CPU 1 caches free pages on its pageset.
    cpu::pin_thread(Some(1));
    let blocks: Vec<_> = (0..200).map(|_| pool.alloc(order(0)).unwrap()).collect();
    drop(blocks);
    assert!(zone.pageset(1).unwrap().count > 0);
    // CPU 0 takes everything it can: its last allocations need CPU 1's cached pages.
    cpu::pin_thread(Some(0));
    let mut held = Vec::new();
    while let Ok(pfn) = pool.alloc_raw(Gfp::KERNEL, order(0)) {
        held.push(pfn);
    }
    cpu::pin_thread(None);
    assert_eq!(
        zone.pageset(1).unwrap().count,
        0,
        "CPU 1's pageset was drained before OOM"
    );
    assert!(zone.events().pcp_drains(DrainReason::Explicit) > 0);
    // SAFETY: CPU 0 allocated these raw pages above and frees each once.
    unsafe { pool.free_batch(&held).unwrap() };
    pool.verify().unwrap();
}

#[test]
fn fault_injection_fails_the_chosen_fraction() {
    let fault = FaultConfig {
        probability: 0.5,
        ..FaultConfig::default()
    };
    let pool = PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(1)
        .background(false)
        .fault_injection(fault)
        .build()
        .unwrap();
    let mut held = Vec::new();
    let mut injected = 0;
    for _ in 0..2000 {
        match pool.alloc(order(0)) {
            Ok(block) => held.push(block),
            Err(PoolError::Injected) => injected += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert!(
        (700..1300).contains(&injected),
        "about half failed: {injected}"
    );
    assert_eq!(pool.stats().injected_failures, injected);
    drop(held);
    pool.set_fault_injection(FaultConfig {
        probability: 1.0,
        times: 3,
        ..FaultConfig::default()
    });
    let failures = (0..10).filter(|_| pool.alloc(order(0)).is_err()).count();
    assert_eq!(failures, 3, "times limits the failures");
    pool.verify().unwrap();
}

#[test]
fn views_print_linux_formats() {
    let pool = quiet_pool(2);
    let _block = pool.alloc(order(0)).unwrap();
    let zones = zoneinfo::parse(&pool.zoneinfo()).unwrap();
    let normal = zones.iter().find(|z| z.zone == ZoneType::Normal).unwrap();
    assert_eq!(normal.managed, 4096);
    assert_eq!(normal.pagesets.len(), 2);
    assert!(pool.vmstat().contains("pgalloc_normal 1\n"));
    assert!(pool.buddyinfo().starts_with("Node 0, zone   Normal"));
}

#[test]
fn impossible_pools_are_refused() {
    assert!(
        PagePool::builder().memory_bytes(1 << 20).build().is_err(),
        "under 4 MiB"
    );
    assert!(PagePool::builder().cpus(0).build().is_err());
    assert!(PagePool::builder().nodes(2).cpus(1).build().is_err());
    let settings = Settings {
        percpu_pagelist_high_fraction: 3,
        ..Settings::DISTRIBUTION_KERNEL
    };
    assert!(matches!(
        PagePool::builder().settings(settings).build(),
        Err(PoolError::Settings(_))
    ));
}

/// A thread running "on" CPU 1 keeps allocating and dropping handles while another thread
/// takes CPU 1 offline and back: the runtime's hotplug does not stop the first thread, so
/// its CPU can go offline between choosing it and the core's check. Each call must land
/// on an online CPU instead of failing (an allocation error, or a panic in a handle's drop
/// as before the fix), and every page must be accounted for afterwards.
#[test]
fn calls_survive_their_cpu_going_offline_under_them() {
    let pool = quiet_pool(2);
    common::toggle_cpu1_while(&pool, || {
        for i in 0..4_000u64 {
            let mut block = pool
                .alloc(order((i % 2) as u8))
                .expect("memory is plentiful");
            block[0] = i as u8;
            if i % 64 == 0 {
                let pages = pool.alloc_bulk_blocks(8).expect("memory is plentiful");
                pool.free_blocks(pages);
            }
        }
    });
    pool.verify().expect("every page accounted for");
}

/// A thread whose CPU is offline from the start: each raw call reaches the core with that
/// CPU, is refused before anything changes, and is served by the online CPU `caller()`
/// picks, so the offline CPU's pageset stays empty and the counters see one call each.
#[test]
fn raw_calls_from_an_offline_cpu_are_served_by_an_online_one() {
    let pool = quiet_pool(2);
    let zone = pool.zone(0, ZoneType::Normal).unwrap();
    assert!(pool.set_cpu_online(1, false));
    cpu::pin_thread(Some(1));
    let pfns: Vec<Pfn> = (0..64)
        .map(|_| {
            pool.alloc_raw(Gfp::KERNEL, order(0))
                .expect("memory is plentiful")
        })
        .collect();
    for &pfn in &pfns {
        // SAFETY: allocated raw above, freed once, never referenced.
        unsafe { pool.free_raw(pfn, order(0)) }.expect("an allocated page");
    }
    cpu::pin_thread(None);
    assert_eq!(
        zone.pageset(1).unwrap().count,
        0,
        "the offline CPU took no pages"
    );
    assert!(zone.pageset(0).unwrap().count > 0, "CPU 0 served the calls");
    let stats = pool.stats();
    assert_eq!((stats.pgalloc, stats.pgfree), (64, 64));
    pool.verify().expect("every page accounted for");
}

/// `alloc_bulk_list` appends, after what the list holds, the pages `alloc_bulk` puts in
/// an empty array of the same length, in the same order, and leaves the same counters;
/// `free_batch` takes them back.
#[test]
fn bulk_list_appends_what_the_bulk_array_fills() {
    let (by_array, by_list) = (quiet_pool(1), quiet_pool(1));
    cpu::pin_thread(Some(0));
    for n in [1, 7, 64, 300] {
        let mut slots = vec![None; n];
        assert_eq!(by_array.alloc_bulk(&mut slots).unwrap(), n);
        let expected: Vec<Pfn> = slots.iter().flatten().copied().collect();
        let mut list = vec![Pfn(u64::MAX)];
        assert_eq!(by_list.alloc_bulk_list(n, &mut list).unwrap(), n);
        assert_eq!(list[0], Pfn(u64::MAX), "what the list held stays");
        assert_eq!(list[1..], expected[..], "{n} pages");
        let (a, l) = (by_array.stats(), by_list.stats());
        assert_eq!((a.pgalloc, a.pcp_refills), (l.pgalloc, l.pcp_refills));
        // SAFETY: allocated raw above, freed once, never referenced.
        unsafe {
            by_array.free_batch(&expected).unwrap();
            by_list.free_batch(&list[1..]).unwrap();
        }
    }
    cpu::pin_thread(None);
    by_array.verify().expect("every page accounted for");
    by_list.verify().expect("every page accounted for");
}

/// A bulk list allocation from a thread whose CPU is offline is served by an online CPU,
/// as every raw call is.
#[test]
fn bulk_list_from_an_offline_cpu_is_served_by_an_online_one() {
    let pool = quiet_pool(2);
    let zone = pool.zone(0, ZoneType::Normal).unwrap();
    assert!(pool.set_cpu_online(1, false));
    cpu::pin_thread(Some(1));
    let mut pfns = Vec::new();
    assert_eq!(pool.alloc_bulk_list(16, &mut pfns).unwrap(), 16);
    cpu::pin_thread(None);
    assert_eq!(
        zone.pageset(1).unwrap().count,
        0,
        "the offline CPU took no pages"
    );
    // SAFETY: allocated raw above, freed once, never referenced.
    unsafe { pool.free_batch(&pfns) }.expect("allocated pages");
    pool.verify().expect("every page accounted for");
}
