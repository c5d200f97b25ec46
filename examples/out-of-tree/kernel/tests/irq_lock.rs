//! The kernel with a zone and pageset lock of its own, standing in for one that saves and
//! disables interrupts: every step runs with it, kswapd included, and every lock taken is
//! released.

mod common;

use std::cell::Cell;

use mmkit_core::sync::GuardSend;
use mmkit_core::sync::RawMutex;
use mmkit_core::sync::RawSpinLock;
use oot_kernel::selftest;
use oot_kernel::Kernel;

thread_local! {
    /// How deep this thread is in "interrupts off" sections, and how many it entered.
    static IRQS_OFF: Cell<(u32, u64)> = const { Cell::new((0, 0)) };
}

/// `spin_lock_irqsave` on the host: the core's spinlock, counting the sections a real
/// kernel would run with interrupts disabled.
struct IrqSaveLock(RawSpinLock);

// SAFETY: every operation is the inner lock's, itself a `RawMutex`; the bookkeeping
// around it is thread-local.
unsafe impl RawMutex for IrqSaveLock {
    const INIT: IrqSaveLock = IrqSaveLock(RawSpinLock::INIT);
    type GuardMarker = GuardSend;

    fn lock(&self) {
        IRQS_OFF.with(|off| off.set((off.get().0 + 1, off.get().1 + 1)));
        RawMutex::lock(&self.0);
    }

    fn try_lock(&self) -> bool {
        let taken = RawMutex::try_lock(&self.0);
        if taken {
            IRQS_OFF.with(|off| off.set((off.get().0 + 1, off.get().1 + 1)));
        }
        taken
    }

    unsafe fn unlock(&self) {
        // SAFETY: our caller holds the lock, so it holds the inner one.
        unsafe { RawMutex::unlock(&self.0) };
        IRQS_OFF.with(|off| off.set((off.get().0 - 1, off.get().1)));
    }
}

#[test]
fn every_step_runs_with_the_kernels_own_lock_and_releases_it() {
    let kernel: Kernel<IrqSaveLock> = common::boot();
    let mut log = String::new();
    selftest::run(&kernel, &mut log).unwrap();
    let (depth, sections) = IRQS_OFF.with(Cell::get);
    assert_eq!(depth, 0, "every lock taken was released");
    assert!(
        sections > 10_000,
        "the zone and pageset locks are ours: {sections} sections"
    );
}
