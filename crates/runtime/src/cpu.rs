//! Which CPU the calling thread runs on.
//!
//! One of the two modules of mmkit with `unsafe` (the other is [`crate::arena`]), for one
//! FFI call. We read the CPU with `sched_getcpu`, which glibc ≥ 2.35 answers from the
//! thread's registered rseq area (`rseq->cpu_id`) without a system call; reading that area
//! ourselves would save a function call but tie us to glibc's private `__rseq_offset`
//! layout. `docs/ARCHITECTURE.md` and the runtime benchmark record the measured cost.
//!
//! A thread may migrate between reading its CPU and taking that CPU's pageset lock. That
//! is safe: the core takes the pageset's lock (try-lock), so the worst case is serving
//! the request from the pageset of the CPU the thread just left, as Linux would if it
//! did not pin the task.

use std::cell::Cell;

thread_local! {
    /// A CPU chosen for this thread with [`pin_thread`], overriding `sched_getcpu`.
    static PINNED: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The CPU the calling thread runs on now (or the one it was pinned to).
pub fn current_cpu() -> u32 {
    if let Some(cpu) = PINNED.with(Cell::get) {
        return cpu;
    }
    sched_getcpu()
}

/// `sched_getcpu(3)`; 0 if the kernel cannot say.
pub fn sched_getcpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(0)
}

/// Serve this thread's requests from `cpu`'s pagesets (`None`: follow the real CPU).
/// Useful when a pool has more virtual CPUs than the machine, or to model a placement.
pub fn pin_thread(cpu: Option<u32>) {
    PINNED.with(|p| p.set(cpu));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_cpu_is_an_online_cpu() {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as u32;
        assert!(sched_getcpu() < cpus.max(1024));
    }

    #[test]
    fn pinning_overrides_and_releases() {
        pin_thread(Some(7));
        assert_eq!(current_cpu(), 7);
        pin_thread(None);
        assert_eq!(current_cpu(), sched_getcpu());
    }
}
