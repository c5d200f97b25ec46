//! The time-stamp counter: the benchmarks' clock.
//!
//! One of the bench crate's three places with `unsafe` (the others are [`crate::peers`],
//! for the peers' own `unsafe` APIs, and [`crate::latency`]'s `madvise`): `_rdtsc` and `_mm_lfence` are `unsafe` intrinsics.
//! A reading is `lfence; rdtsc; lfence`: the first fence keeps earlier instructions from
//! finishing after the read, the second keeps later ones from starting before it. This is
//! the usual way to bracket a region with `rdtsc` without `rdtscp`'s extra cost (workloads
//! §1c: `rdtsc` ≈ 10 ns, `rdtscp` ≈ 18 ns on the measuring VM).
//!
//! The counter ticks at a constant rate (`constant_tsc`, `nonstop_tsc` on any x86 of the
//! last 15 years) unrelated to the core's current clock, so cycles here are *TSC cycles*;
//! [`TscClock::calibrate`] measures their rate against the monotonic clock to convert
//! them to nanoseconds. Linux's `time_bench` (Jesper Dangaard Brouer's page_bench in Gorman 2017) reports the same unit.

use std::time::{Duration, Instant};

/// Read the time-stamp counter, fenced on both sides.
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: `lfence` and `rdtsc` read no memory and write none; they only order
    // instructions and read a counter. SSE2 (for `lfence`) and the TSC are part of the
    // x86-64 baseline, so the target features are present on every CPU this runs on.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        let tsc = core::arch::x86_64::_rdtsc();
        core::arch::x86_64::_mm_lfence();
        tsc
    }
}

/// The TSC's rate and the cost of reading it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TscClock {
    /// Ticks per second, measured against `Instant`.
    pub hz: f64,
    /// Median ticks between two back-to-back [`now`] calls: what an empty timed region
    /// reads. The harness subtracts it once per timed region.
    pub overhead_cycles: u64,
}

impl TscClock {
    /// Measure the TSC rate over `window` of busy waiting (50 ms gives four significant
    /// digits), and the overhead of a reading. Each end of the window reads both clocks
    /// together (the TSC between two close `Instant`s), so a preemption anywhere (a busy
    /// machine) lengthens the window on both clocks alike instead of skewing the rate.
    pub fn calibrate(window: Duration) -> TscClock {
        let (start, tsc_start) = paired();
        while start.elapsed() < window {
            std::hint::spin_loop();
        }
        let (end, tsc_end) = paired();
        let hz = (tsc_end - tsc_start) as f64 / (end - start).as_secs_f64();
        TscClock {
            hz,
            overhead_cycles: overhead_cycles(),
        }
    }

    /// Nanoseconds in `cycles` TSC cycles.
    pub fn ns(&self, cycles: f64) -> f64 {
        cycles * 1e9 / self.hz
    }

    /// TSC cycles in `seconds`.
    pub fn cycles(&self, seconds: f64) -> u64 {
        (seconds * self.hz) as u64
    }
}

/// An `Instant` and a TSC reading of the same moment: the TSC read between two
/// `Instant`s, the tightest of 16 tries, stamped with their midpoint. A try the scheduler
/// interrupted has a wide bracket and loses to one it did not.
fn paired() -> (Instant, u64) {
    (0..16)
        .map(|_| {
            let before = Instant::now();
            let tsc = now();
            let after = Instant::now();
            (after - before, before + (after - before) / 2, tsc)
        })
        .min_by_key(|&(bracket, _, _)| bracket)
        .map(|(_, at, tsc)| (at, tsc))
        .expect("16 tries")
}

/// Median of 1001 empty regions.
fn overhead_cycles() -> u64 {
    let mut deltas: Vec<u64> = (0..1001)
        .map(|_| {
            let t0 = now();
            let t1 = now();
            t1 - t0
        })
        .collect();
    deltas.sort_unstable();
    deltas[deltas.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_advances_and_calibrates_to_a_plausible_rate() {
        let a = now();
        let b = now();
        assert!(b > a);
        let clock = TscClock::calibrate(Duration::from_millis(20));
        // Any x86-64 of the last 20 years: 0.5 to 6 GHz.
        assert!(clock.hz > 5e8 && clock.hz < 6e9, "{clock:?}");
        assert!(clock.overhead_cycles < 10_000, "{clock:?}");
        assert!((clock.ns(clock.hz) - 1e9).abs() < 1.0);
    }
}
