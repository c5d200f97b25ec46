//! The lock facade: every lock in the core comes from here.
//!
//! Linux protects a zone's free lists with `zone->lock` and a per-CPU pageset with
//! `pcp->lock`, both spinlocks. We use `spin`'s spinlock in the same roles. Keeping the
//! type behind this one module means a model checker (loom, shuttle) or a platform's own
//! lock can be swapped in without touching the allocator (crossbeam's facade pattern).

/// A spinlock, the counterpart of Linux's `spinlock_t`.
pub type SpinLock<T> = spin::mutex::SpinMutex<T>;

/// The guard of a [`SpinLock`].
pub type SpinLockGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;
