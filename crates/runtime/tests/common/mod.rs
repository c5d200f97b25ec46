//! Helpers shared by the runtime's test binaries.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use mmkit_runtime::{cpu, PagePool};

/// Run `work` on a thread pinned to CPU 1 of `pool` while another thread takes CPU 1
/// offline and back until `work` ends (however it ends: a panic fails the test instead of
/// leaving the other thread spinning). Each time CPU 1 is offline, its pagesets must be
/// empty: a call that saw it online before it went down must not have left a page there.
pub fn toggle_cpu1_while(pool: &PagePool, work: impl FnOnce() + Send) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Relaxed);
                }
            }
            let _done = Done(&done);
            cpu::pin_thread(Some(1));
            work();
            cpu::pin_thread(None);
        });
        // The toggler yields after each change so that the worker runs in both states:
        // hotplug takes the write side of a writer-preferring lock, and a toggler that
        // retook it at once could keep a worker on one core, or under valgrind (which
        // runs one thread at a time), from making progress for minutes.
        s.spawn(|| {
            while !done.load(Relaxed) {
                pool.set_cpu_online(1, false);
                let stranded: u64 = pool
                    .zones()
                    .map(|zone| zone.pageset(1).map_or(0, |pcp| pcp.count))
                    .sum();
                assert_eq!(stranded, 0, "pages left on the offline CPU's pagesets");
                std::thread::yield_now();
                pool.set_cpu_online(1, true);
                std::thread::yield_now();
            }
        });
    });
}

/// A bound on waits for a background thread that end within milliseconds on any machine;
/// reaching it means the thread does not do its work. No test asserts on how long a wait
/// took, so a loaded machine only makes them slower.
pub const HANG: Duration = Duration::from_secs(600);

/// Call `step` until `done` holds; a hang (see [`HANG`]) fails the test with `what`.
pub fn wait_until(what: &str, done: impl Fn() -> bool, mut step: impl FnMut()) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "{what} after {HANG:?}");
        step();
    }
}
