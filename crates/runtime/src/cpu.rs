//! Which CPU the calling thread runs on.
//!
//! One of the modules of mmkit with `unsafe` (see the crate's front page for the others).
//! On x86-64 with glibc we read the CPU straight from the thread's rseq area
//! (`struct rseq.cpu_id`, which the kernel keeps current and glibc ≥ 2.35 registers and
//! publishes through `__rseq_offset`), and fall back to `sched_getcpu(3)` where rseq is
//! not registered. Measured on this project's 2-CPU VM (`cargo run --release -p
//! mmkit-runtime --example cpu_identity`): rseq read 0.34 ns, `sched_getcpu` 3.66 ns
//! (glibc reads the same field, behind a call), the `getcpu` system call 108.6 ns. An
//! order-0 alloc+free pair looks the CPU up twice against a 10 ns budget, so the direct
//! read pays for itself.
//!
//! Everywhere else (aarch64, musl, which defines neither `__rseq_offset` nor
//! `__rseq_size`) the CPU comes from `sched_getcpu` alone: the direct read needs the
//! thread pointer (`fs:0` is x86-64's) and glibc's two symbols, and a build that names
//! them does not link against musl. Linux's own `raw_smp_processor_id` is per-architecture
//! for the same reason.
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
///
/// ```
/// let cpu = mmkit_runtime::cpu::current_cpu();
/// assert!(cpu < 4096);
/// ```
pub fn current_cpu() -> u32 {
    if let Some(cpu) = PINNED.with(Cell::get) {
        return cpu;
    }
    rseq_cpu().unwrap_or_else(sched_getcpu)
}

/// `sched_getcpu(3)`; 0 if the kernel cannot say.
pub fn sched_getcpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(0)
}

/// The `getcpu` system call itself, for comparison (what `sched_getcpu` costs without
/// rseq or a vDSO).
pub fn getcpu_syscall() -> u32 {
    let mut cpu: libc::c_uint = 0;
    // SAFETY: getcpu writes one unsigned int through the first pointer; the other two may
    // be null.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            std::ptr::null_mut::<libc::c_uint>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if rc == 0 {
        cpu
    } else {
        0
    }
}

/// The CPU from the thread's rseq area (`struct rseq.cpu_id`), as registered by glibc
/// ≥ 2.35; `None` if rseq is not registered. This is what `sched_getcpu` reads too, minus
/// the function call; [`sched_getcpu`] stays the default because it also works where rseq
/// is unavailable (`examples/cpu_identity.rs` measures both). Always `None` off x86-64
/// glibc (the module's documentation says why).
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
pub fn rseq_cpu() -> Option<u32> {
    extern "C" {
        /// Offset of the rseq area from the thread pointer (glibc ≥ 2.35, `<sys/rseq.h>`).
        static __rseq_offset: isize;
        /// Size of the registered rseq area; 0 when rseq is not registered.
        static __rseq_size: u32;
    }
    // SAFETY: glibc defines both symbols as read-only after startup.
    let (offset, size) = unsafe { (__rseq_offset, __rseq_size) };
    if size == 0 {
        return None;
    }
    let thread_pointer: usize;
    // SAFETY: on x86-64 Linux, %fs:0 holds the thread control block's pointer to itself;
    // reading it has no side effects.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) thread_pointer, options(nostack, readonly, preserves_flags))
    };
    let cpu_id = (thread_pointer as isize + offset) as *const u32;
    // SAFETY: glibc registered `struct rseq` at thread pointer + __rseq_offset for this
    // thread (size > 0), and `cpu_id` is its second u32; the kernel updates it, so read it
    // volatile.
    let cpu = unsafe { cpu_id.add(1).read_volatile() };
    // The kernel writes a negative value (RSEQ_CPU_ID_UNINITIALIZED) before registration.
    i32::try_from(cpu).ok().map(|c| c as u32)
}

/// The CPU from the thread's rseq area: always `None` here, where the direct read is not
/// built (it needs x86-64 and glibc; the module's documentation says why), so
/// [`current_cpu`] asks [`sched_getcpu`].
#[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
#[inline]
pub fn rseq_cpu() -> Option<u32> {
    None
}

/// Serve this thread's requests from `cpu`'s pagesets, and its per-CPU data
/// ([`crate::PerCpu::this_cpu`], a counter's `add`) from `cpu`'s copy (`None`: follow the
/// real CPU): [`current_cpu`] answers `cpu`. Useful when a pool has more virtual CPUs than
/// the machine, or to model a placement.
///
/// ```
/// # use mmkit_runtime::{cpu, PagePool, PercpuPool};
/// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(8).build()?;
/// let percpu = PercpuPool::new(8)?;
/// let hits = percpu.counter()?;
/// cpu::pin_thread(Some(5));
/// assert_eq!(pool.caller().cpu, 5);
/// hits.add(1);
/// assert_eq!(hits.per_cpu(5).load(std::sync::atomic::Ordering::Relaxed), 1);
/// cpu::pin_thread(None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    fn rseq_agrees_with_sched_getcpu() {
        if let Some(cpu) = rseq_cpu() {
            // The thread may migrate between the two reads; retry a few times.
            let agree = (0..100).any(|_| rseq_cpu() == Some(sched_getcpu()));
            assert!(
                agree,
                "rseq says {cpu}, sched_getcpu says {}",
                sched_getcpu()
            );
        }
    }

    #[test]
    fn pinning_overrides_and_releases() {
        pin_thread(Some(7));
        assert_eq!(current_cpu(), 7);
        pin_thread(None);
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as u32;
        assert!(current_cpu() < cpus.max(1024));
    }
}
