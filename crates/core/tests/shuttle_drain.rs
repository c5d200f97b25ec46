//! Model checking of the PCP lock protocols with shuttle: the owner's try-lock fallback
//! against a remote drain, `drain_all_pages`' mutex hand-off between a global and a
//! zone-specific request, and a task's calls against its CPU going offline. Shuttle runs
//! each scenario under many schedules (randomised, and PCT for the rare interleavings); in
//! every one, no page may be lost or doubled and the outcomes must be the ones Linux allows.
//!
//! The frees here go through the atomic `free_pages`. `free_pages_exclusive` is not
//! model-checked: it differs only in the claim of the block head, the races that claim
//! decides (two frees, or a free and a split, of one block) are excluded by its contract,
//! and past the claim it runs the same code, taking the same locks in the same order.
//!
//! Run: `cargo test -p mmkit-core --features shuttle --test shuttle_drain` (the target
//! requires the feature, `crates/core/Cargo.toml`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use mmkit_core::page_alloc::{AllocError, Caller, DrainAll, FreeError, Gfp, ZoneId, ZoneType};
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Order, PageAllocator, Policy, Settings, Topology};
use shuttle::thread;

fn machine() -> Arc<PageAllocator> {
    let zones = [ZoneSize::managed(0, ZoneType::Normal, 2048)];
    let llc = CacheInfo {
        llc_bytes: 1 << 20,
        llc_shared_cpus: 2,
    };
    let topology = Topology::x86_64(&zones, vec![2], llc, false).unwrap();
    Arc::new(PageAllocator::new(topology, Settings::default(), Policy::V6_7).unwrap())
}

const NORMAL: ZoneId = ZoneId {
    node: 0,
    zone_type: ZoneType::Normal,
};

/// CPU 0 allocates and frees through its pageset while CPU 1 drains everyone. The owner
/// either wins its try-lock or falls back to the zone; every allocation succeeds, and at
/// the end every page is in exactly one place.
fn owner_against_remote_drain() {
    let allocator = machine();
    // Warm CPU 0's pageset so the drain has something to take.
    let warm: Vec<_> = (0..8)
        .map(|_| {
            allocator
                .alloc_pages(Caller::task(0), Gfp::KERNEL, Order::ZERO)
                .unwrap()
        })
        .collect();
    for pfn in warm {
        allocator
            .free_pages(Caller::task(0), pfn, Order::ZERO)
            .unwrap();
    }
    let owner = {
        let allocator = allocator.clone();
        thread::spawn(move || {
            for _ in 0..3 {
                let pfn = allocator
                    .alloc_pages(Caller::task(0), Gfp::KERNEL, Order::ZERO)
                    .unwrap();
                allocator
                    .free_pages(Caller::task(0), pfn, Order::ZERO)
                    .unwrap();
            }
        })
    };
    let drainer = {
        let allocator = allocator.clone();
        thread::spawn(move || allocator.drain_all_pages(None))
    };
    owner.join().unwrap();
    let drained = drainer.join().unwrap();
    assert!(
        matches!(drained, DrainAll::Done { .. }),
        "nothing else held the drain mutex"
    );
    let census = allocator.verify().unwrap();
    assert_eq!(census.iter().map(|c| c.allocated).sum::<u64>(), 0);
    let zone = allocator.zone(0, ZoneType::Normal).unwrap();
    if zone.events().pcp_lock_contended() > 0 {
        FALLBACKS_SEEN.fetch_add(1, Relaxed);
    }
}

/// Schedules (across all runs) in which the owner's try-lock failed and it used the zone.
static FALLBACKS_SEEN: AtomicU64 = AtomicU64::new(0);

/// A global and a zone-specific drain race for the mutex. The global one may be skipped
/// (only if the zone drain held the mutex); the zone one always completes; afterwards the
/// zone's pagesets are empty.
fn global_and_zone_drains_hand_off() {
    let allocator = machine();
    let pfns: Vec<_> = (0..16)
        .map(|i| {
            allocator
                .alloc_pages(Caller::task(i % 2), Gfp::KERNEL, Order::ZERO)
                .unwrap()
        })
        .collect();
    for (i, pfn) in pfns.into_iter().enumerate() {
        allocator
            .free_pages(Caller::task(i as u32 % 2), pfn, Order::ZERO)
            .unwrap();
    }
    let global = {
        let allocator = allocator.clone();
        thread::spawn(move || allocator.drain_all_pages(None))
    };
    let zone = {
        let allocator = allocator.clone();
        thread::spawn(move || allocator.drain_all_pages(Some(NORMAL)))
    };
    let global = global.join().unwrap();
    let zone = zone.join().unwrap();
    assert!(
        matches!(zone, DrainAll::Done { .. }),
        "a zone drain waits for the mutex, never skips"
    );
    assert!(matches!(global, DrainAll::Done { .. } | DrainAll::Skipped));
    assert_eq!(allocator.zone(0, ZoneType::Normal).unwrap().pcp_pages(), 0);
    allocator.verify().unwrap();
    assert!(
        allocator.hold_drain_mutex().is_some(),
        "the mutex was released"
    );
}

/// A task on CPU 1 frees a page and allocates one while another thread takes CPU 1
/// offline. Each call either is refused whole (`InvalidCpu`: it checked after the CPU went
/// down) or completes; one that checked before and reached the pageset after the drain
/// must not leave a page there. At the end CPU 1's pageset is empty and every page is in
/// exactly one place.
fn task_against_cpu_down() {
    let allocator = machine();
    let pfn = allocator
        .alloc_pages(Caller::task(1), Gfp::KERNEL, Order::ZERO)
        .unwrap();
    let task = {
        let allocator = allocator.clone();
        thread::spawn(move || {
            match allocator.free_pages(Caller::task(1), pfn, Order::ZERO) {
                Ok(()) => {}
                Err(FreeError::InvalidCpu(1)) => allocator
                    .free_pages(Caller::task(0), pfn, Order::ZERO)
                    .unwrap(),
                Err(e) => panic!("unexpected {e:?}"),
            }
            match allocator.alloc_pages(Caller::task(1), Gfp::KERNEL, Order::ZERO) {
                Ok(pfn) => allocator
                    .free_pages(Caller::task(0), pfn, Order::ZERO)
                    .unwrap(),
                Err(AllocError::InvalidCpu(1)) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        })
    };
    let hotplug = {
        let allocator = allocator.clone();
        thread::spawn(move || assert!(allocator.cpu_down(1)))
    };
    task.join().unwrap();
    hotplug.join().unwrap();
    let zone = allocator.zone(0, ZoneType::Normal).unwrap();
    assert_eq!(
        zone.pageset(1).unwrap().count,
        0,
        "no page left on the offline CPU"
    );
    let census = allocator.verify().unwrap();
    assert_eq!(census.iter().map(|c| c.allocated).sum::<u64>(), 0);
}

#[test]
fn calls_racing_their_cpu_going_offline_leave_no_page_on_it() {
    shuttle::check_random(task_against_cpu_down, 300);
    shuttle::check_pct(task_against_cpu_down, 300, 3);
}

#[test]
fn owner_try_lock_falls_back_while_a_remote_drain_runs() {
    shuttle::check_random(owner_against_remote_drain, 300);
    shuttle::check_pct(owner_against_remote_drain, 300, 3);
    assert!(
        FALLBACKS_SEEN.load(Relaxed) > 0,
        "some schedule exercised the try-lock fallback"
    );
}

#[test]
fn drain_mutex_hands_off_between_global_and_zone_requests() {
    shuttle::check_random(global_and_zone_drains_hand_off, 300);
    shuttle::check_pct(global_and_zone_drains_hand_off, 300, 3);
}
