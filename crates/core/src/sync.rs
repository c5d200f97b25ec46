//! The lock facade: every lock (and every atomic a lock protocol spins on) in the core
//! comes from here.
//!
//! Linux protects a zone's free lists with `zone->lock` and a per-CPU pageset with
//! `pcp->lock`, both spinlocks, and takes them with `spin_lock_irqsave` where an interrupt
//! handler may take them too. The core's locks are [`lock_api::Mutex`]es over a raw lock
//! the embedder chooses: [`PageAllocator`](crate::PageAllocator)'s type parameter `R`
//! is any [`RawMutex`], so a kernel plugs in a lock that saves and disables interrupts
//! (Linux's `spin_lock_irqsave`) or one that only disables preemption, and every zone
//! lock, pageset lock and the settings lock of that allocator is one. The default,
//! [`RawSpinLock`], is `spin`'s spinlock, the lock the core always used; the allocator's
//! code is generic over `R` and compiled once per lock type, so the default costs what
//! the hard-wired spinlock cost (callgrind's counts did not move).
//!
//! Keeping the types behind this one module means a model checker can be swapped in
//! without touching the allocator (crossbeam's facade pattern): with the `shuttle`
//! feature, [`RawSpinLock`] spins on shuttle's atomics and yields to shuttle's scheduler,
//! and the drain mutex's atomic and spin-waits become shuttle's, so its scheduler can
//! explore the interleavings of pageset try-locks and remote drains
//! (`tests/shuttle_drain.rs`). The 64-bit counters come from here too, for targets
//! without 64-bit atomics.

/// The interface of a raw lock (`lock_api`'s): what an embedder implements to choose the
/// core's lock. Its `lock` and `unlock` bracket every critical section of the allocator;
/// an IRQ-saving lock keeps the saved interrupt state in itself between the two, as
/// `spin_lock_irqsave` keeps it in the caller's `flags`.
pub use lock_api::RawMutex;

/// Whether a [`RawMutex`]'s guard may move to another thread ([`RawMutex::GuardMarker`]):
/// `GuardSend` for a plain spinlock, `GuardNoSend` for a lock whose unlock must run on
/// the CPU that locked it (one that restores that CPU's interrupt state).
pub use lock_api::{GuardNoSend, GuardSend};

/// A lock around a `T`, taken through the raw lock `R`.
pub type Lock<R, T> = lock_api::Mutex<R, T>;

/// The guard of a [`Lock`]: the lock is released when it drops.
pub type LockGuard<'a, R, T> = lock_api::MutexGuard<'a, R, T>;

#[cfg(not(feature = "shuttle"))]
mod imp {
    /// The default raw lock: `spin`'s spinlock, the counterpart of Linux's `spinlock_t`
    /// taken without touching interrupts (a user-space process, or a kernel whose
    /// interrupt handlers never allocate).
    pub type RawSpinLock = spin::mutex::SpinMutex<()>;

    /// Atomics used by lock protocols.
    pub(crate) use core::sync::atomic;

    /// Wait a moment in a spin loop.
    pub(crate) fn spin_loop() {
        core::hint::spin_loop();
    }
}

#[cfg(feature = "shuttle")]
mod imp {
    extern crate std;

    use shuttle::sync::atomic::{AtomicBool, Ordering};

    /// A spinlock on shuttle's atomics: every attempt is a shuttle scheduling point, and a
    /// waiter yields to shuttle's scheduler between attempts.
    #[derive(Debug)]
    pub struct RawSpinLock(AtomicBool);

    #[expect(
        unsafe_code,
        reason = "lock_api's RawMutex is an unsafe trait; model checking only"
    )]
    // SAFETY: `try_lock` succeeds only for the caller whose compare-and-swap turned the
    // flag from false to true, and only `unlock` (which the holder alone may call) turns
    // it back, so at most one holder exists at a time; Acquire on taking and Release on
    // giving back order the critical sections.
    unsafe impl lock_api::RawMutex for RawSpinLock {
        const INIT: RawSpinLock = RawSpinLock(AtomicBool::new(false));

        type GuardMarker = lock_api::GuardSend;

        fn lock(&self) {
            while !self.try_lock() {
                spin_loop();
            }
        }

        fn try_lock(&self) -> bool {
            self.0
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        #[expect(
            unsafe_code,
            reason = "lock_api's RawMutex::unlock is an unsafe fn; model checking only"
        )]
        unsafe fn unlock(&self) {
            self.0.store(false, Ordering::Release);
        }
    }

    /// Atomics used by lock protocols.
    pub(crate) use shuttle::sync::atomic;

    /// Wait a moment in a spin loop: let another shuttle thread run.
    pub(crate) fn spin_loop() {
        shuttle::thread::yield_now();
    }
}

pub use imp::*;

/// The 64-bit counters and page counts (event counters, watermarks, `NR_FREE_PAGES`):
/// `portable-atomic`'s. Where the target has 64-bit atomics (x86-64, aarch64, riscv64)
/// they are core's types behind an inlined wrapper, the same instructions; where it has
/// only 32-bit ones (thumbv7em, a Cortex-M4/M7) they fall back to a lock-based
/// implementation, so the core builds there too. Narrower counters would wrap: a zone's
/// `PGALLOC` passes 2^32 pages after 16 TiB of allocations, hours on a busy machine.
pub use portable_atomic::{AtomicI64, AtomicU64};

/// A value alone on its own pair of cache lines. Linux's per-CPU areas keep one CPU's
/// pageset apart from another's by construction; our pagesets sit in one array, where two
/// neighbours sharing a line made every operation of one CPU miss on the other's writes
/// (the `local` thread pattern ran 3–4× slower when the heap placed two pagesets on one
/// line). 128 bytes, not 64: Intel's adjacent-line prefetcher moves lines in pairs.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}
