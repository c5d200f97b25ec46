//! The kernel's lock for the page allocator: a spinlock taken with interrupts saved and
//! disabled, released with them restored (Linux's `spin_lock_irqsave` and
//! `spin_unlock_irqrestore`, which `mm/page_alloc.c` takes `zone->lock` with). An
//! interrupt handler that allocates on a CPU whose task holds a zone lock would spin on
//! it forever; with interrupts off while it is held, the handler cannot run there.
//! mmkit-core takes any `lock_api::RawMutex` ([`mmkit_core::sync`]), so this is the whole
//! of the kernel's side.
//!
//! The saved interrupt state lives in the lock, where Linux keeps it in the caller's
//! `flags`: only the holder writes it (after it locked) and reads it (before it unlocks).
//! Nested locks (pageset lock, then zone lock) therefore restore correctly only if they
//! are released last-taken-first, which the core does (`crates/core/tests/irq_lock.rs`
//! checks it on every path).

use core::sync::atomic::{AtomicBool, Ordering};

use mmkit_core::sync::{GuardNoSend, RawMutex};

/// A spinlock that disables interrupts while it is held.
#[derive(Debug)]
pub struct IrqSpinLock {
    locked: AtomicBool,
    /// Whether the holder's CPU had interrupts enabled before it locked.
    saved: AtomicBool,
}

// SAFETY: `try_lock` succeeds only for the caller whose compare-and-swap turned `locked`
// from false to true, and only `unlock`, which lock_api calls for the holder alone, turns
// it back: one holder at a time. Acquire on taking and Release on giving back order the
// critical sections. The guard is not `Send` (`GuardNoSend`): the restore must run on the
// CPU whose interrupts the lock disabled.
unsafe impl RawMutex for IrqSpinLock {
    const INIT: IrqSpinLock = IrqSpinLock {
        locked: AtomicBool::new(false),
        saved: AtomicBool::new(false),
    };

    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        while !self.try_lock() {
            core::hint::spin_loop();
        }
    }

    fn try_lock(&self) -> bool {
        let enabled = interrupts::save_and_disable();
        let taken = self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if taken {
            self.saved.store(enabled, Ordering::Relaxed);
        } else {
            interrupts::restore(enabled);
        }
        taken
    }

    unsafe fn unlock(&self) {
        let enabled = self.saved.load(Ordering::Relaxed);
        self.locked.store(false, Ordering::Release);
        interrupts::restore(enabled);
    }
}

/// The CPU's interrupt flag (`local_irq_save` / `local_irq_restore`).
#[cfg(target_os = "none")]
mod interrupts {
    use x86_64::instructions::interrupts;

    /// Disable interrupts; whether they were enabled.
    pub fn save_and_disable() -> bool {
        let enabled = interrupts::are_enabled();
        interrupts::disable();
        enabled
    }

    /// Enable interrupts again if they were enabled.
    pub fn restore(enabled: bool) {
        if enabled {
            interrupts::enable();
        }
    }
}

/// A user-space process may not touch the interrupt flag (`cli` faults outside ring 0):
/// the host build runs the same lock with interrupts it does not have.
#[cfg(not(target_os = "none"))]
mod interrupts {
    /// Nothing to disable; report them disabled, so nothing is ever re-enabled.
    pub fn save_and_disable() -> bool {
        false
    }

    /// Nothing to restore.
    pub fn restore(_enabled: bool) {}
}
