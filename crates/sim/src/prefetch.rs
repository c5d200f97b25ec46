//! A cache-line prefetch hint: an `unsafe` intrinsic that cannot fault or change a result.
//!
//! [`Sim::prefetch`](crate::engine::Sim::prefetch) reads ahead the page descriptors and
//! cache stamps of blocks that later frees will need. Until session 5 it did so with plain
//! loads, but a load that misses keeps its place at the head of the reorder buffer until
//! its line arrives, so the loop that issued a batch of eight blocks' loads waited for
//! them (≈ 15 % of the 224-CPU kbuild run's time). `prefetcht0` asks for the line and
//! retires at once; the batch's misses still overlap, now with the work after the loop too
//! (`docs/EXPERIMENTS.md`, "Simulator speed", session 5).
//!
//! Linux: `prefetch()` in `include/linux/prefetch.h`, the same hint. Other architectures
//! than x86-64 get no read-ahead (nothing here is needed for a correct run).

/// Ask the processor to bring the cache line holding `value` into its caches. Changes
/// nothing the program can observe.
#[inline(always)]
#[cfg_attr(
    target_arch = "x86_64",
    expect(
        unsafe_code,
        reason = "`_mm_prefetch` is an `unsafe` intrinsic; it is a hint that cannot fault"
    )
)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` reads no memory the program can see, writes none and cannot
    // fault, whatever the address (here that of a live reference). SSE, which provides
    // it, is part of the x86-64 baseline, so the target feature is present on every CPU
    // this runs on.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (value as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
