//! The hand-off of a cache line between two CPUs: what the simulator's cost model calls
//! `handoff_socket_ns`, the time for a lock word (and each zone line that follows the lock)
//! to move from its last holder's cache to the next holder's.
//!
//! Two threads, each pinned to its CPU, take turns writing one word on a cache line of its
//! own: the first writes an odd count and waits to read the next even one, the second
//! answers each odd count with the next even one. Every turn moves the line once, so a
//! round's time over its turns is one hand-off (the write and the spin that sees it are a
//! few ns beside the miss). The same measure as the core-to-core latency tables the model's
//! published value comes from.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

/// One cache line, so that nothing else shares it.
#[repr(align(128))]
struct Line(AtomicU64);

/// The two CPUs and how long to measure.
#[derive(Clone, Copy, Debug)]
pub struct HandoffConfig {
    /// The CPUs the two threads are pinned to.
    pub cpus: (usize, usize),
    /// Hand-offs per run (each thread's turns together).
    pub handoffs: u64,
    /// Runs; the median is the figure.
    pub repeat: usize,
}

/// What a measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct HandoffResult {
    /// ns per hand-off of each run.
    pub runs_ns: Vec<f64>,
    /// Their median.
    pub median_ns: f64,
    /// The hand-offs each run counted (the line's final value): `handoffs`, or the run
    /// went wrong.
    pub handoffs_counted: Vec<u64>,
}

/// Why the measurement could not run.
#[derive(Debug, PartialEq, Eq)]
pub enum HandoffError {
    /// The two CPUs are the same one.
    SameCpu(usize),
    /// A CPU the machine does not have (or the process may not run on).
    CannotPin(usize),
    /// Fewer than 2 hand-offs, or no run.
    Empty,
}

impl std::fmt::Display for HandoffError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoffError::SameCpu(cpu) => {
                write!(f, "both threads on CPU {cpu}: a hand-off needs two CPUs")
            }
            HandoffError::CannotPin(cpu) => {
                write!(
                    f,
                    "cannot pin a thread to CPU {cpu} (not online or not allowed)"
                )
            }
            HandoffError::Empty => write!(
                f,
                "nothing to measure: use 2 or more hand-offs and 1 or more runs"
            ),
        }
    }
}

impl std::error::Error for HandoffError {}

/// Pin the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), HandoffError> {
    let mut set = rustix::thread::CpuSet::new();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(HandoffError::CannotPin(cpu));
    }
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(|_| HandoffError::CannotPin(cpu))
}

/// Pin the calling thread to `cpu` and meet the other thread: whether both are pinned
/// and the run goes ahead, or why this one could not pin itself. A failure is flagged in
/// `failed` before the barrier, so that after it both threads know.
fn start_on(cpu: usize, ready: &Barrier, failed: &AtomicBool) -> Result<bool, HandoffError> {
    let pinned = pin(cpu);
    if pinned.is_err() {
        failed.store(true, Ordering::Release);
    }
    ready.wait();
    pinned?;
    Ok(!failed.load(Ordering::Acquire))
}

/// Measure the hand-off between `config.cpus`: `config.repeat` runs of
/// `config.handoffs` hand-offs each.
pub fn measure(config: &HandoffConfig) -> Result<HandoffResult, HandoffError> {
    let (a, b) = config.cpus;
    if a == b {
        return Err(HandoffError::SameCpu(a));
    }
    if config.handoffs < 2 || config.repeat == 0 {
        return Err(HandoffError::Empty);
    }
    // Rounds of two hand-offs (odd to the second thread, even back).
    let rounds = config.handoffs / 2;
    let mut runs_ns = Vec::with_capacity(config.repeat);
    let mut handoffs_counted = Vec::with_capacity(config.repeat);
    for _ in 0..config.repeat {
        let line = Line(AtomicU64::new(0));
        let ready = Barrier::new(2);
        // Set by a thread that could not pin itself, before the barrier: after it, both
        // know whether to run.
        let failed = AtomicBool::new(false);
        let (elapsed, counted) = std::thread::scope(|scope| {
            let answerer = scope.spawn(|| -> Result<(), HandoffError> {
                if !start_on(b, &ready, &failed)? {
                    return Ok(());
                }
                for round in 0..rounds {
                    let odd = 2 * round + 1;
                    while line.0.load(Ordering::Acquire) != odd {
                        std::hint::spin_loop();
                    }
                    line.0.store(odd + 1, Ordering::Release);
                }
                Ok(())
            });
            // The first thread is spawned too, so that the caller's own affinity is left
            // as it was.
            let pinger = scope.spawn(|| -> Result<(std::time::Duration, u64), HandoffError> {
                if !start_on(a, &ready, &failed)? {
                    return Err(HandoffError::Empty);
                }
                let start = Instant::now();
                for round in 0..rounds {
                    let even = 2 * round;
                    line.0.store(even + 1, Ordering::Release);
                    while line.0.load(Ordering::Acquire) != even + 2 {
                        std::hint::spin_loop();
                    }
                }
                Ok((start.elapsed(), line.0.load(Ordering::Acquire)))
            });
            let pinged = pinger.join().expect("the first thread does not panic");
            let answered = answerer
                .join()
                .expect("the answering thread does not panic");
            // A pinning error is the one to report (the other thread's `Empty` only says
            // it stood down).
            match (pinged, answered) {
                (Ok(run), Ok(())) => Ok(run),
                (Err(e @ HandoffError::CannotPin(_)), _) | (_, Err(e)) => Err(e),
                (Err(e), Ok(())) => Err(e),
            }
        })?;
        runs_ns.push(elapsed.as_nanos() as f64 / (2 * rounds) as f64);
        handoffs_counted.push(counted);
    }
    let mut sorted = runs_ns.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ns = sorted[sorted.len() / 2];
    Ok(HandoffResult {
        runs_ns,
        median_ns,
        handoffs_counted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every turn happens, in order: the line ends at the count of hand-offs. (Times are
    /// not checked: they depend on the machine and its load.)
    #[test]
    fn every_handoff_happens() {
        // Two CPUs this process may run on (a container may allow only some).
        let allowed = rustix::thread::sched_getaffinity(None).expect("the affinity mask");
        let mut cpus = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu));
        let (Some(a), Some(b)) = (cpus.next(), cpus.next()) else {
            return;
        };
        let result = measure(&HandoffConfig {
            cpus: (a, b),
            handoffs: 2_000,
            repeat: 3,
        })
        .expect("two online CPUs");
        assert_eq!(result.handoffs_counted, vec![2_000; 3]);
        assert_eq!(result.runs_ns.len(), 3);
        assert!(result.runs_ns.iter().all(|ns| ns.is_finite() && *ns > 0.0));
        assert!(result.runs_ns.contains(&result.median_ns));
    }

    #[test]
    fn bad_configurations_are_refused() {
        let config = |cpus, handoffs, repeat| HandoffConfig {
            cpus,
            handoffs,
            repeat,
        };
        assert_eq!(
            measure(&config((1, 1), 100, 1)),
            Err(HandoffError::SameCpu(1))
        );
        assert_eq!(measure(&config((0, 1), 1, 1)), Err(HandoffError::Empty));
        assert_eq!(measure(&config((0, 1), 100, 0)), Err(HandoffError::Empty));
        assert_eq!(
            measure(&config((0, 1_000_000), 100, 1)),
            Err(HandoffError::CannotPin(1_000_000))
        );
    }
}
