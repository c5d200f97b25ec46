//! The lock facade: every lock (and every atomic a lock protocol spins on) in the core
//! comes from here.
//!
//! Linux protects a zone's free lists with `zone->lock` and a per-CPU pageset with
//! `pcp->lock`, both spinlocks. We use `spin`'s spinlock in the same roles. Keeping the
//! types behind this one module means a model checker can be swapped in without touching
//! the allocator (crossbeam's facade pattern): with the `shuttle` feature, locks, the
//! drain mutex's atomic and spin-waits become shuttle's, so its scheduler can explore
//! the interleavings of pageset try-locks and remote drains (`tests/shuttle_drain.rs`).
//! The 64-bit counters come from here too, for targets without 64-bit atomics.

#[cfg(not(feature = "shuttle"))]
mod imp {
    /// A spinlock, the counterpart of Linux's `spinlock_t`.
    pub type SpinLock<T> = spin::mutex::SpinMutex<T>;

    /// The guard of a [`SpinLock`].
    pub type SpinLockGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

    /// Atomics used by lock protocols.
    pub use core::sync::atomic;

    /// Wait a moment in a spin loop.
    pub fn spin_loop() {
        core::hint::spin_loop();
    }
}

#[cfg(feature = "shuttle")]
mod imp {
    extern crate std;

    /// A lock whose every acquisition is a shuttle scheduling point.
    pub struct SpinLock<T>(shuttle::sync::Mutex<T>);

    /// The guard of a [`SpinLock`].
    pub type SpinLockGuard<'a, T> = shuttle::sync::MutexGuard<'a, T>;

    /// Atomics used by lock protocols.
    pub use shuttle::sync::atomic;

    impl<T> SpinLock<T> {
        /// A new unlocked lock.
        pub fn new(value: T) -> SpinLock<T> {
            SpinLock(shuttle::sync::Mutex::new(value))
        }

        /// Lock, waiting as long as it takes.
        pub fn lock(&self) -> SpinLockGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }

        /// Lock if free.
        pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    impl<T: core::fmt::Debug> core::fmt::Debug for SpinLock<T> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("SpinLock")
        }
    }

    /// Wait a moment in a spin loop: let another shuttle thread run.
    pub fn spin_loop() {
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
