//! The latency of a load that misses the core's caches: one pointer chased through a
//! random cycle over a buffer, each load waiting for the one before it.
//!
//! The simulator's speed is set by such waits more than by anything it computes: a
//! refill's walk down a buddy list and a drain's walk up a pageset list are chains of
//! dependent misses over a working set of some hundreds of MiB (docs/EXPERIMENTS.md,
//! "Speed"). On a shared virtual machine that latency moves from minute to minute with
//! what the other tenants do to the last-level cache and the memory, and the simulator's
//! speed moves with it. `crates/bench/realtime.sh` measures this beside each round of the
//! speed target's run, so that a slow round can be told from a slow build.
//!
//! The buffer's lines form one cycle in a random order (Sattolo's algorithm), so every
//! load goes to a line the hardware prefetchers could not guess, and a run of `loads`
//! loads over a cycle longer than it touches no line twice. The buffer is asked for in
//! huge pages (`MADV_HUGEPAGE`, where Linux grants it), as the simulator's descriptors
//! and stamps are, so that the figure is the caches' and memory's, not the page walks'.

use std::time::Instant;

/// A cache line: the chase's stride, one slot per line.
const LINE: usize = 64;
/// `u64` slots per line.
const SLOTS_PER_LINE: usize = LINE / 8;
/// The huge page the buffer is asked for in (x86-64's and arm64's PMD size).
const HUGE_PAGE: usize = 2 << 20;

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct LatencyConfig {
    /// The buffer's size in bytes: the cycle has one line in every `LINE` bytes.
    pub bytes: usize,
    /// Dependent loads per run.
    pub loads: u64,
    /// Runs; the median is the figure.
    pub repeat: usize,
    /// Seed of the cycle's order.
    pub seed: u64,
}

/// What a measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyResult {
    /// ns per load of each run.
    pub runs_ns: Vec<f64>,
    /// Their median.
    pub median_ns: f64,
    /// Lines in the cycle.
    pub lines: usize,
    /// Bytes of the process's anonymous memory in huge pages after the buffer was
    /// written, from `/proc/self/smaps_rollup` (`None` where it cannot be read): whether
    /// the kernel granted them.
    pub huge_page_bytes: Option<u64>,
}

/// Why the measurement could not run.
#[derive(Debug, PartialEq, Eq)]
pub enum LatencyError {
    /// A buffer of fewer than two lines has no cycle to chase.
    TooSmall(usize),
    /// No load or no run.
    Empty,
}

impl std::fmt::Display for LatencyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LatencyError::TooSmall(bytes) => write!(
                f,
                "a buffer of {bytes} bytes holds fewer than two {LINE}-byte lines: nothing to chase"
            ),
            LatencyError::Empty => write!(
                f,
                "nothing to measure: use 1 or more loads and 1 or more runs"
            ),
        }
    }
}

impl std::error::Error for LatencyError {}

/// The lines `0..lines` in one cycle of random order: `next[i]` is the line after line
/// `i`. Sattolo's algorithm: a Fisher–Yates shuffle whose swap never picks the slot
/// itself, which gives each of the `(lines − 1)!` cyclic orders with equal chance.
pub fn cycle(lines: usize, seed: u64) -> Vec<u32> {
    assert!(
        lines <= u32::MAX as usize,
        "a cycle of at most 2^32 − 1 lines"
    );
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut next: Vec<u32> = (0..lines as u32).collect();
    for i in (1..lines).rev() {
        let j = rng.usize(0..i);
        next.swap(i, j);
    }
    next
}

/// Measure: build the cycle in a buffer of `config.bytes`, chase it once to fault every
/// page in and warm what fits in a cache, then `config.repeat` timed runs of
/// `config.loads` loads each.
pub fn measure(config: &LatencyConfig) -> Result<LatencyResult, LatencyError> {
    let lines = config.bytes / LINE;
    if lines < 2 {
        return Err(LatencyError::TooSmall(config.bytes));
    }
    if config.loads == 0 || config.repeat == 0 {
        return Err(LatencyError::Empty);
    }
    let order = cycle(lines, config.seed);
    let slots = lines * SLOTS_PER_LINE;
    let mut buffer: Vec<u64> = Vec::with_capacity(slots);
    ask_for_huge_pages(buffer.as_ptr() as usize, slots * 8);
    buffer.resize(slots, 0);
    for (line, &next) in order.iter().enumerate() {
        buffer[line * SLOTS_PER_LINE] = next as u64 * SLOTS_PER_LINE as u64;
    }
    drop(order);
    let huge_page_bytes = anon_huge_page_bytes();
    // One pass over the whole cycle: the pages faulted in, the caches as warm as the
    // buffer lets them be.
    std::hint::black_box(chase(&buffer, lines as u64));
    let mut runs_ns = Vec::with_capacity(config.repeat);
    for _ in 0..config.repeat {
        let start = Instant::now();
        std::hint::black_box(chase(&buffer, config.loads));
        runs_ns.push(start.elapsed().as_nanos() as f64 / config.loads as f64);
    }
    let median_ns = crate::stats::median(&mut runs_ns.clone()).expect("at least one run");
    Ok(LatencyResult {
        runs_ns,
        median_ns,
        lines,
        huge_page_bytes,
    })
}

/// `loads` dependent loads along the cycle from slot 0; returns the slot it ends on, so
/// that the loads cannot be left out.
#[inline(never)]
fn chase(buffer: &[u64], loads: u64) -> usize {
    let mut slot = 0usize;
    for _ in 0..loads {
        slot = buffer[slot] as usize;
    }
    slot
}

/// Ask for huge pages under the whole huge pages of `[start, start + len)`, memory that
/// nothing has written yet. A hint: refused (an older kernel, `transparent_hugepage`
/// set to `never`, another system), it changes nothing but the page walks.
#[cfg(target_os = "linux")]
fn ask_for_huge_pages(start: usize, len: usize) {
    let lo = start.next_multiple_of(HUGE_PAGE);
    let hi = (start + len) - (start + len) % HUGE_PAGE;
    if hi <= lo {
        return;
    }
    // SAFETY: `[lo, hi)` lies inside the live allocation `[start, start + len)` (the
    // caller's vector's capacity), and `MADV_HUGEPAGE` changes only which physical pages
    // will back it, never what it holds (madvise(2)). An error leaves the memory as it
    // was; the advice is a hint, so it is ignored.
    let _ = unsafe {
        rustix::mm::madvise(
            lo as *mut core::ffi::c_void,
            hi - lo,
            rustix::mm::Advice::LinuxHugepage,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn ask_for_huge_pages(_start: usize, _len: usize) {}

/// The process's anonymous memory in huge pages (`AnonHugePages` of
/// `/proc/self/smaps_rollup`), in bytes.
fn anon_huge_page_bytes() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = rollup
        .lines()
        .find(|line| line.starts_with("AnonHugePages:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The length of the cycle through line 0.
    fn cycle_length(next: &[u32]) -> usize {
        let mut line = next[0] as usize;
        let mut length = 1;
        while line != 0 {
            line = next[line] as usize;
            length += 1;
            assert!(length <= next.len(), "a cycle that does not come back to 0");
        }
        length
    }

    #[test]
    fn the_cycle_visits_every_line_once() {
        for lines in [2, 3, 4, 5, 64, 1000, 4097] {
            for seed in 0..8 {
                let next = cycle(lines, seed);
                assert_eq!(cycle_length(&next), lines, "{lines} lines, seed {seed}");
                // A permutation: every line is some line's next exactly once.
                let mut seen = vec![false; lines];
                for &n in &next {
                    assert!(!std::mem::replace(&mut seen[n as usize], true));
                }
            }
        }
    }

    #[test]
    fn the_order_is_random_and_the_seed_repeats_it() {
        let a = cycle(4096, 1);
        assert_eq!(a, cycle(4096, 1));
        assert_ne!(a, cycle(4096, 2));
        // Not the identity's neighbour order: few lines are followed by the next one.
        let in_order = (0..4096)
            .filter(|&i| a[i] as usize == (i + 1) % 4096)
            .count();
        assert!(
            in_order < 16,
            "{in_order} lines followed by their neighbour"
        );
    }

    #[test]
    fn a_measurement_chases_the_whole_cycle() {
        let result = measure(&LatencyConfig {
            bytes: 1 << 20,
            loads: 50_000,
            repeat: 3,
            seed: 7,
        })
        .unwrap();
        assert_eq!(result.lines, (1 << 20) / 64);
        assert_eq!(result.runs_ns.len(), 3);
        assert!(result.runs_ns.iter().all(|ns| ns.is_finite() && *ns > 0.0));
        assert!(result.runs_ns.contains(&result.median_ns));
        // The chase ends where walking the cycle by hand does.
        let order = cycle(result.lines, 7);
        let mut slots = vec![0u64; result.lines * SLOTS_PER_LINE];
        for (line, &next) in order.iter().enumerate() {
            slots[line * SLOTS_PER_LINE] = next as u64 * SLOTS_PER_LINE as u64;
        }
        let mut line = 0usize;
        for _ in 0..1000 {
            line = order[line] as usize;
        }
        assert_eq!(chase(&slots, 1000), line * SLOTS_PER_LINE);
    }

    #[test]
    fn what_it_cannot_measure_is_refused() {
        let config = LatencyConfig {
            bytes: 64,
            loads: 1,
            repeat: 1,
            seed: 0,
        };
        assert_eq!(measure(&config), Err(LatencyError::TooSmall(64)));
        let config = LatencyConfig {
            bytes: 4096,
            loads: 0,
            ..config
        };
        assert_eq!(measure(&config), Err(LatencyError::Empty));
        let config = LatencyConfig {
            loads: 1,
            repeat: 0,
            ..config
        };
        assert_eq!(measure(&config), Err(LatencyError::Empty));
    }
}
