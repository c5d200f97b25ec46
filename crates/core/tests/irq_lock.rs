//! A whole allocator on an embedder's lock: `PageAllocator<IrqSaveLock>`, where
//! `IrqSaveLock` is a `lock_api::RawMutex` that saves and disables a fake interrupt flag
//! as Linux's `spin_lock_irqsave` does, and counts its acquisitions. Allocation, free,
//! bulk, batched free, drains, the vmstat tick, CPU offline and online and setting changes
//! run through it; after every call each lock taken was released, the flag is back as
//! it was (so locks are released in the reverse order of taking them, as nested
//! `spin_unlock_irqrestore` must be), and the zone-lock work a `LockEvents` sink sees
//! runs with interrupts off.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mmkit_core::page_alloc::{Caller, DrainAll, Gfp, ZoneLockHold, ZoneType};
use mmkit_core::page_alloc::{LockEvents, ZoneId};
use mmkit_core::sync::{GuardNoSend, RawMutex};
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Order, PageAllocator, Pfn, Policy, Settings, Topology};

thread_local! {
    /// This "CPU"'s interrupt flag (each test thread stands for one CPU).
    static IRQS_ENABLED: Cell<bool> = const { Cell::new(true) };
    /// Locks of this thread taken and not yet released.
    static HELD: Cell<u64> = const { Cell::new(0) };
    /// Acquisitions on this thread, ever.
    static ACQUIRED: Cell<u64> = const { Cell::new(0) };
}

/// `local_irq_save`: disable interrupts, returning whether they were enabled.
fn local_irq_save() -> bool {
    IRQS_ENABLED.with(|flag| flag.replace(false))
}

/// `local_irq_restore`.
fn local_irq_restore(enabled: bool) {
    IRQS_ENABLED.with(|flag| flag.set(enabled));
}

fn irqs_enabled() -> bool {
    IRQS_ENABLED.with(Cell::get)
}

fn held() -> u64 {
    HELD.with(Cell::get)
}

fn acquired() -> u64 {
    ACQUIRED.with(Cell::get)
}

/// A spinlock taken with interrupts saved and disabled, released with them restored:
/// `spin_lock_irqsave` / `spin_unlock_irqrestore`, the saved flag kept in the lock (its
/// holder's) instead of the caller's `flags` variable.
struct IrqSaveLock {
    locked: AtomicBool,
    /// The holder's interrupt flag from before it locked.
    saved: AtomicBool,
}

// SAFETY: `try_lock` succeeds only for the caller whose compare-and-swap turned `locked`
// from false to true, and only the holder's `unlock` turns it back, so there is at most
// one holder; Acquire and Release order the critical sections. `saved` is written by the
// holder after it locked and read by it before it unlocks.
unsafe impl RawMutex for IrqSaveLock {
    const INIT: IrqSaveLock = IrqSaveLock {
        locked: AtomicBool::new(false),
        saved: AtomicBool::new(false),
    };

    // The restore must run on the CPU that saved.
    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        while !self.try_lock() {
            std::hint::spin_loop();
        }
    }

    fn try_lock(&self) -> bool {
        let enabled = local_irq_save();
        let taken = self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if !taken {
            local_irq_restore(enabled);
            return false;
        }
        self.saved.store(enabled, Ordering::Relaxed);
        HELD.with(|n| n.set(n.get() + 1));
        ACQUIRED.with(|n| n.set(n.get() + 1));
        true
    }

    unsafe fn unlock(&self) {
        let enabled = self.saved.load(Ordering::Relaxed);
        HELD.with(|n| n.set(n.get() - 1));
        self.locked.store(false, Ordering::Release);
        local_irq_restore(enabled);
    }
}

fn machine(cpus: u32) -> PageAllocator<IrqSaveLock> {
    let zones = [
        ZoneSize::managed(0, ZoneType::Dma32, 4096),
        ZoneSize::managed(0, ZoneType::Normal, 8192),
    ];
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: cpus,
    };
    let topology = Topology::x86_64(&zones, vec![cpus], llc, false).expect("valid topology");
    PageAllocator::<IrqSaveLock>::with_lock(topology, Settings::default(), Policy::V6_7)
        .expect("valid settings")
}

/// Run `call` and check that it took the embedder's lock and left every lock released
/// and interrupts as they were.
fn through_the_lock<T>(what: &str, call: impl FnOnce() -> T) -> T {
    assert!(irqs_enabled() && held() == 0, "{what}: dirty start");
    let before = acquired();
    let result = call();
    assert!(
        acquired() > before,
        "{what} took none of the allocator's locks"
    );
    assert_eq!(held(), 0, "{what} left a lock held");
    assert!(irqs_enabled(), "{what} left interrupts disabled");
    result
}

/// A sink that checks, at every zone-lock hold it is told of, that it runs under the
/// allocator's locks: interrupts off, at least one lock held.
#[derive(Default)]
struct UnderTheLock {
    holds: u64,
}

impl LockEvents for UnderTheLock {
    fn hold(&mut self, _: &ZoneLockHold) {
        assert!(
            !irqs_enabled(),
            "zone-lock work ran with interrupts enabled"
        );
        assert!(held() >= 1, "zone-lock work ran without a lock");
        self.holds += 1;
    }
}

#[test]
fn every_allocator_path_takes_the_embedders_lock_and_restores_interrupts() {
    let allocator = machine(2);
    let (cpu0, cpu1) = (Caller::task(0), Caller::task(1));
    let order3 = Order::new(3).expect("order 3 exists");

    let single = through_the_lock("an order-0 allocation", || {
        allocator.alloc_pages(cpu0, Gfp::KERNEL, Order::ZERO)
    })
    .expect("memory");
    let block = through_the_lock("an order-3 allocation", || {
        allocator.alloc_pages(cpu1, Gfp::KERNEL | Gfp::DMA32, order3)
    })
    .expect("memory");
    let mut array = [None; 40];
    let filled = through_the_lock("a bulk allocation", || {
        allocator.alloc_pages_bulk_array(cpu0, Gfp::KERNEL, None, &mut array)
    })
    .expect("memory");
    assert_eq!(filled, array.len());
    let bulk: Vec<Pfn> = array.iter().flatten().copied().collect();

    through_the_lock("an order-0 free", || {
        allocator.free_pages(cpu1, single, Order::ZERO)
    })
    .expect("a good free");
    through_the_lock("an order-3 free", || {
        // SAFETY: this test's one thread is the only one that frees.
        unsafe { mmkit_core::internals::free_pages_exclusive(&allocator, cpu0, block, order3) }
    })
    .expect("a good free");
    through_the_lock("a batched free", || allocator.free_pages_batch(cpu1, &bulk))
        .expect("good frees");

    through_the_lock("a local drain", || allocator.drain_local_pages(0, None));
    let drained = through_the_lock("drain_all_pages", || allocator.drain_all_pages(None));
    assert!(matches!(drained, DrainAll::Done { .. }), "{drained:?}");
    through_the_lock("the vmstat tick", || allocator.vmstat_tick(1));
    through_the_lock("CPU offline", || allocator.cpu_down(1));
    through_the_lock("CPU online", || allocator.cpu_up(1));
    let normal = ZoneId {
        node: 0,
        zone_type: ZoneType::Normal,
    };
    through_the_lock("zone_pcp_disable", || allocator.zone_pcp_disable(normal));
    through_the_lock("zone_pcp_enable", || allocator.zone_pcp_enable(normal));
    let settings = Settings {
        percpu_pagelist_high_fraction: 8,
        ..Settings::default()
    };
    through_the_lock("a settings change", || allocator.set_settings(settings))
        .expect("valid settings");
    through_the_lock("verify", || allocator.verify()).expect("consistent");
}

#[test]
fn the_out_of_memory_path_drains_through_the_embedders_lock() {
    let allocator = machine(2);
    let mut held_pages = Vec::new();
    // Until the slow path's drain of every CPU and its retries fail too.
    loop {
        let cpu = Caller::task(held_pages.len() as u32 % 2);
        let result = through_the_lock("an allocation near out of memory", || {
            allocator.alloc_pages(cpu, Gfp::KERNEL, Order::ZERO)
        });
        match result {
            Ok(pfn) => held_pages.push(pfn),
            Err(_) => break,
        }
    }
    assert!(held_pages.len() > 10_000, "{} pages", held_pages.len());
    through_the_lock("a batched free of everything", || {
        allocator.free_pages_batch(Caller::task(0), &held_pages)
    })
    .expect("good frees");
    allocator.verify().expect("consistent");
}

#[test]
fn zone_lock_work_runs_with_interrupts_disabled() {
    let allocator = machine(2);
    let cpu0 = Caller::task(0);
    let mut sink = UnderTheLock::default();
    let mut pages = Vec::new();
    // Enough order-0 allocations to refill the pageset, order-2 ones that go to the
    // zone, and frees that drain: every kind of hold but the high-atomic one.
    for round in 0..200 {
        let order = if round % 4 == 0 {
            Order::new(2)
        } else {
            Some(Order::ZERO)
        };
        let order = order.expect("orders 0 and 2 exist");
        let pfn = through_the_lock("a reported allocation", || {
            allocator.alloc_pages_report(cpu0, Gfp::KERNEL, order, &mut sink)
        })
        .expect("memory");
        pages.push((pfn, order));
    }
    for (pfn, order) in pages {
        through_the_lock("a reported free", || {
            allocator.free_pages_report(cpu0, pfn, order, &mut sink)
        })
        .expect("a good free");
    }
    through_the_lock("a reported drain", || {
        allocator.drain_all_pages_report(None, &mut sink)
    });
    assert!(sink.holds > 0, "no zone-lock hold was reported");
    allocator.verify().expect("consistent");
}

#[test]
fn threads_share_an_allocator_on_the_embedders_lock() {
    let allocator = Arc::new(machine(4));
    let threads: Vec<_> = (0..4)
        .map(|cpu| {
            let allocator = Arc::clone(&allocator);
            std::thread::spawn(move || {
                let caller = Caller::task(cpu);
                for round in 0..500u32 {
                    let order = Order::new((round % 3) as u8).expect("small orders exist");
                    let pfn = allocator
                        .alloc_pages(caller, Gfp::KERNEL, order)
                        .expect("memory");
                    allocator
                        .free_pages(caller, pfn, order)
                        .expect("a good free");
                }
                if cpu == 0 {
                    allocator.drain_all_pages(None);
                }
                assert_eq!(held(), 0, "CPU {cpu} left a lock held");
                assert!(irqs_enabled(), "CPU {cpu} left interrupts disabled");
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no thread panicked");
    }
    allocator.verify().expect("consistent");
}

#[test]
fn kswapd_reclaims_through_the_embedders_lock() {
    use mmkit_core::mm::kswapd::{self, ShrinkOutcome};

    let allocator = machine(2);
    let cpu0 = Caller::task(0);
    let mut held_pages = Vec::new();
    // Allocate until the Normal zone's free pages fall below its high watermark, so
    // that the node is not balanced and kswapd must reclaim.
    while allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Normal) {
        let pfn = allocator
            .alloc_pages(cpu0, Gfp::KERNEL, Order::ZERO)
            .expect("memory above the high watermark");
        held_pages.push(pfn);
    }
    // The shrinker "reclaims" by freeing what the test holds, a cluster at a time, through
    // the allocator and so through the embedder's lock.
    let outcome = through_the_lock("a kswapd run", || {
        kswapd::run(&allocator, 0, Order::ZERO, ZoneType::Normal, |sc| {
            let n = (sc.nr_to_reclaim as usize).min(held_pages.len());
            let freed: Vec<Pfn> = held_pages.drain(..n).collect();
            allocator.free_pages_batch(cpu0, &freed)?;
            allocator.drain_local_pages(0, None);
            Ok::<_, mmkit_core::page_alloc::BatchFreeError>(ShrinkOutcome {
                scanned: n as u64,
                reclaimed: n as u64,
            })
        })
    })
    .expect("good frees");
    assert!(outcome.balanced, "{outcome:?}");
    assert!(outcome.reclaimed > 0, "{outcome:?}");
    assert!(allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Normal));
    allocator.verify().expect("consistent");
}

#[test]
fn the_mapping_layer_faults_reclaims_and_unmaps_through_the_embedders_lock() {
    use mmkit_core::mm::memcg::MemcgId;
    use mmkit_core::mm::{Memory, NoIo};
    use mmkit_core::page_alloc::WatermarkKind;
    use mmkit_core::policy::MmPolicy;

    let zones = [ZoneSize::managed(0, ZoneType::Normal, 4096)];
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 1,
    };
    let topology = Topology::x86_64(&zones, vec![1], llc, false).expect("valid topology");
    let allocator = Arc::new(
        PageAllocator::<IrqSaveLock>::with_lock(topology, Settings::default(), Policy::V6_7)
            .expect("valid settings"),
    );
    let mut memory = Memory::with_lock(allocator.clone(), MmPolicy::V6_7, 4096);
    let cpu0 = Caller::task(0);
    let mm = memory.create_mm();
    memory
        .mmap_anon(mm, 0x4000, 4096, Order::ZERO)
        .expect("a free range");
    let zone = || &allocator.zones()[ZoneType::Normal.index()];
    // Fault until the zone falls below its low watermark, so that kswapd has work.
    let mut vpn = 0x4000;
    while zone().free_pages() >= zone().wmark(WatermarkKind::Low) as i64 {
        through_the_lock("an anonymous fault", || {
            memory.access(cpu0, mm, vpn, true, &mut NoIo)
        })
        .expect("memory for the fault");
        vpn += 1;
    }
    let kswapd = through_the_lock("kswapd on the mapping layer", || {
        memory.kswapd(cpu0, 0, &mut NoIo)
    })
    .expect("kswapd");
    assert!(kswapd.reclaimed > 0, "{kswapd:?}");
    assert!(zone().free_pages() >= zone().wmark(WatermarkKind::High) as i64);
    let reclaimed = through_the_lock("cgroup reclaim", || {
        memory.memory_reclaim(cpu0, MemcgId::ROOT, 64, &mut NoIo)
    })
    .expect("reclaim");
    assert!(reclaimed.reclaimed >= 64, "{reclaimed:?}");
    through_the_lock("munmap", || memory.munmap(cpu0, mm, 0x4000)).expect("mapped");
    assert_eq!(memory.stats().anon_mapped, 0);
    memory.verify().expect("consistent mapping layer");
    allocator.verify().expect("consistent allocator");
}
