//! After construction the allocator never calls the heap: not to allocate or free pages
//! (one at a time, any order, in bulk, batched), not on the out-of-memory path (which
//! gives back the high-atomic reserve and drains every CPU), not to drain (every mode),
//! run the vmstat tick, disable a zone's pagesets or take a CPU offline and back. A
//! kernel's page allocator cannot call its own heap on those paths.
//!
//! The test binary's global allocator counts what the armed thread asks of it; the
//! switch is a thread-local, so the test harness's own threads do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use mmkit_core::page::Page;
use mmkit_core::page_alloc::{
    AllocAttempt, Caller, DrainAll, DrainReason, HoldKind, LockEvents, ZoneId, ZoneLockHold,
};
use mmkit_core::{
    policy::DrainMode, AllocError, Gfp, Order, PageAllocator, Pfn, Policy, Settings, ZoneType,
};

mod common;

/// Heap calls (allocations, reallocations, frees) made by an armed thread, and the size
/// of the last one.
static HEAP_CALLS: AtomicUsize = AtomicUsize::new(0);
static LAST_BYTES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's heap calls count. `const`-initialised: no destructor to
    /// register, so reading it never allocates.
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

/// The system allocator, counting the armed thread's calls.
struct Counting;

fn note(bytes: usize) {
    if ARMED.with(Cell::get) {
        HEAP_CALLS.fetch_add(1, Relaxed);
        LAST_BYTES.store(bytes, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are this allocator's; counting touches only atomics and a
// thread-local without a destructor, and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded unchanged: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded unchanged: `ptr` came from this allocator, which is `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(layout.size());
        // SAFETY: as in `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Run `f` with this thread's heap calls counted; panics naming `what` if there were any.
fn without_heap<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let before = HEAP_CALLS.load(Relaxed);
    ARMED.with(|armed| armed.set(true));
    let result = f();
    ARMED.with(|armed| armed.set(false));
    let calls = HEAP_CALLS.load(Relaxed) - before;
    assert_eq!(
        calls,
        0,
        "{what}: {calls} heap calls, the last of {} bytes",
        LAST_BYTES.load(Relaxed)
    );
    result
}

/// A sink that counts drains of other CPUs' pagesets, without a heap.
#[derive(Default)]
struct Drains {
    explicit: u64,
}

impl LockEvents for Drains {
    fn hold(&mut self, hold: &ZoneLockHold) {
        if hold.kind == HoldKind::Drain(DrainReason::Explicit) {
            self.explicit += 1;
        }
    }
}

const NORMAL_1: ZoneId = ZoneId {
    node: 1,
    zone_type: ZoneType::Normal,
};

/// Every page the machine can give to `caller`, one at a time, into `held` (whose
/// capacity is reserved already), and the out-of-memory error that ends it.
fn exhaust(allocator: &PageAllocator, caller: Caller, held: &mut Vec<Pfn>) -> AllocError {
    loop {
        match allocator.alloc_pages(caller, Gfp::KERNEL, Order::ZERO) {
            Ok(pfn) => held.push(pfn),
            Err(error) => return error,
        }
    }
}

fn allocator(drain: DrainMode) -> PageAllocator {
    let topology = common::topology(&[]);
    let mem_map = common::leaked_mem_map(topology.mem_map_pages() as usize, Page::zeroed);
    let policy = Policy {
        drain,
        ..Policy::V6_7
    };
    PageAllocator::with_mem_map(topology, Settings::default(), policy, mem_map).expect("boots")
}

#[test]
fn allocation_free_drain_and_hotplug_paths_never_call_the_heap() {
    let allocator = allocator(DrainMode::Direct);
    let (cpu0, cpu1) = (Caller::task(0), Caller::task(1));
    let managed: u64 = allocator.zones().iter().map(|z| z.managed()).sum();
    let mut held: Vec<Pfn> = Vec::with_capacity(managed as usize);
    let mut bulk: Vec<Pfn> = Vec::with_capacity(64);

    without_heap("alloc and free by order", || {
        for order in 0..=10 {
            let order = Order::new(order).expect("a valid order");
            for caller in [cpu0, cpu1] {
                let pfn = allocator
                    .alloc_pages(caller, Gfp::KERNEL, order)
                    .expect("memory");
                allocator
                    .free_pages(caller, pfn, order)
                    .expect("a good free");
            }
        }
        let pfn = allocator
            .alloc_pages(cpu0, Gfp::KERNEL | Gfp::DMA, Order::ZERO)
            .expect("DMA memory");
        // SAFETY: this test's one thread is the only one that frees.
        unsafe { mmkit_core::internals::free_pages_exclusive(&allocator, cpu1, pfn, Order::ZERO) }
            .expect("a good free");
    });
    without_heap("bulk allocation and batched free", || {
        let mut array = [None; 48];
        let populated = allocator
            .alloc_pages_bulk_array(cpu0, Gfp::KERNEL, None, &mut array)
            .expect("memory");
        assert_eq!(populated, array.len());
        let pfns = array.map(|slot| slot.expect("populated"));
        allocator.free_pages_batch(cpu1, &pfns).expect("good frees");
        allocator
            .alloc_pages_bulk_list(cpu1, Gfp::KERNEL, Some(1), 64, &mut bulk)
            .expect("memory");
        allocator.free_pages_batch(cpu0, &bulk).expect("good frees");
        bulk.clear();
    });
    // cpu1's pagesets hold pages now: the out-of-memory path must drain them to succeed.
    let error = without_heap("the out-of-memory path", || {
        let mut drains = Drains::default();
        let mut ran_dry = false;
        let error = loop {
            match allocator.alloc_pages_report(cpu0, Gfp::KERNEL, Order::ZERO, &mut drains) {
                Ok(pfn) => held.push(pfn),
                Err(error) => break error,
            }
            ran_dry |= drains.explicit > 0;
        };
        assert!(ran_dry, "an allocation drained cpu1's pagesets to succeed");
        // With the reserves: an order-3 request and an atomic one may still succeed.
        let order_3 = Order::new(3).expect("order 3");
        if let Ok(pfn) = allocator.alloc_pages(cpu0, Gfp::KERNEL, order_3) {
            allocator
                .free_pages(cpu0, pfn, order_3)
                .expect("a good free");
        }
        if let Ok(pfn) = allocator.alloc_pages(cpu0, Gfp::ATOMIC, Order::ZERO) {
            held.push(pfn);
        }
        for &pfn in held.iter() {
            allocator
                .free_pages(cpu1, pfn, Order::ZERO)
                .expect("a good free");
        }
        error
    });
    assert!(matches!(error, AllocError::OutOfMemory { .. }), "{error:?}");
    held.clear();
    without_heap("drains, the vmstat tick and zone_pcp_disable", || {
        let drained = allocator.drain_all_pages(None);
        assert!(
            matches!(drained, DrainAll::Done { cpus: 1.., .. }),
            "{drained:?}"
        );
        allocator.drain_all_pages(Some(NORMAL_1));
        allocator.drain_pages(0);
        allocator.drain_local_pages(1, None);
        for cpu in 0..4 {
            allocator.vmstat_tick(cpu);
        }
        allocator
            .zone_pcp_disable(NORMAL_1)
            .expect("the zone exists");
        allocator.zone_pcp_enable(NORMAL_1).expect("disabled once");
    });
    without_heap("CPU offline and online", || {
        let pfn = allocator
            .alloc_pages(Caller::task(3), Gfp::KERNEL, Order::ZERO)
            .expect("memory");
        allocator
            .free_pages(Caller::task(3), pfn, Order::ZERO)
            .expect("a good free");
        assert!(allocator.cpu_down(3));
        assert!(allocator.cpu_up(3));
    });
    // The walker may allocate: it runs after the checks.
    allocator.verify().expect("consistent");
    let census: u64 = allocator
        .verify()
        .expect("consistent")
        .iter()
        .map(|z| z.allocated)
        .sum();
    assert_eq!(census, 0, "every page given back");
}

#[test]
fn workqueue_drains_never_call_the_heap() {
    let allocator = allocator(DrainMode::Workqueue);
    let managed: u64 = allocator.zones().iter().map(|z| z.managed()).sum();
    let mut held: Vec<Pfn> = Vec::with_capacity(managed as usize);
    for cpu in 0..4 {
        let caller = Caller::task(cpu);
        let pfn = allocator
            .alloc_pages(caller, Gfp::KERNEL, Order::ZERO)
            .expect("memory");
        allocator
            .free_pages(caller, pfn, Order::ZERO)
            .expect("a good free");
    }
    without_heap("a queued drain, run by each CPU", || {
        let DrainAll::Queued(work) = allocator.drain_all_pages(None) else {
            panic!("workqueue mode queues work on CPUs with pages");
        };
        assert_eq!(work.nr_cpus(), 4);
        for cpu in allocator.drain_work_cpus(&work) {
            assert!(allocator.run_drain_work(cpu) > 0);
        }
        assert!(allocator.drain_work_finished(&work));
    });
    without_heap(
        "the out-of-memory path (each CPU runs its queued drain work)",
        || {
            let error = exhaust(&allocator, Caller::task(2), &mut held);
            assert!(matches!(error, AllocError::OutOfMemory { .. }));
        },
    );
    // Pages freed on CPU 1 stay on its pageset while the zone is below its watermark.
    for pfn in held.split_off(held.len() - 32) {
        allocator
            .free_pages(Caller::task(1), pfn, Order::ZERO)
            .expect("a good free");
    }
    without_heap("an allocation that waits for queued drain work", || {
        let (caller, gfp) = (Caller::task(2), Gfp::KERNEL);
        let attempt = allocator.alloc_pages_may_wait_report(caller, gfp, Order::ZERO, &mut ());
        let Ok(AllocAttempt::DrainQueued(work)) = attempt else {
            panic!("CPU 1's page waits for its drain work: {attempt:?}");
        };
        assert!(allocator.run_drain_work(1) > 0);
        let done =
            allocator.alloc_pages_after_drain_report(caller, gfp, Order::ZERO, work, &mut ());
        let Ok(AllocAttempt::Allocated(pfn)) = done else {
            panic!("the retry finds the drained page: {done:?}");
        };
        held.push(pfn);
    });
    assert!(!held.is_empty());
}
