//! mmkit-bench: mmkit's page pool against peer allocators, in one process and one run.
//!
//! Two benchmarks, both behind `mmkit bench`:
//!
//! - [`pagealloc`]: Gorman 2017's page-allocator micro-benchmark. One thread allocates N
//!   blocks of one order, then frees them, N = 1, 2, 4, …; per-page cost of each phase.
//! - [`threads`]: order-0 pages on T threads for a fixed time, freed locally or by another
//!   thread (lmbench AF_UNIX's shape); throughput and latency percentiles.
//!
//! Every allocator is a [`Contestant`](contestant::Contestant): mmkit's runtime pool
//! (raw, bulk and handle APIs) and the peers `buddy_system_allocator`, `talc`, mimalloc,
//! jemalloc, snmalloc and the system allocator ([`peers`]). The harness loops are generic
//! over that trait, so each allocator runs the same code; [`runner::Runner`] puts them in
//! one list. Time is the TSC ([`tsc`]), converted with a rate measured at start-up.
//! Output: tables ([`table`]), JSON (every report is `Serialize`) and SVG plots
//! ([`plot`]).
//!
//! Two measures of the machine sit beside them, for the simulator's cost model and its
//! speed: [`handoff`] (a cache line moving between two CPUs) and [`latency`] (a load that
//! misses the caches, one after another).
//!
//! `unsafe` lives in [`tsc`] (two intrinsics), [`peers`] (the peers' `unsafe` APIs and
//! the slices over blocks) and [`latency`] (one `madvise`); the harness itself is safe
//! code.

#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod contestant;
pub mod handoff;
pub mod latency;
pub mod pagealloc;
pub mod peers;
pub mod plot;
pub mod runner;
pub mod stats;
pub mod table;
pub mod threads;
pub mod tsc;

use serde::Serialize;

/// A benchmark that could not run or found a fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchError(String);

impl BenchError {
    /// An error saying `message`.
    pub fn new(message: impl Into<String>) -> BenchError {
        BenchError(message.into())
    }

    /// The same error, prefixed with where it happened.
    pub fn context(self, what: &str) -> BenchError {
        BenchError(format!("{what}: {}", self.0))
    }
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

/// How far a benchmark has got: `done` of `total` steps; `label` names the next one.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// Steps finished.
    pub done: usize,
    /// Steps in all.
    pub total: usize,
    /// The step starting now.
    pub label: &'a str,
}

/// A target (see `docs/reference/targets.md`) and what this run measured for it.
#[derive(Clone, Debug, Serialize)]
pub struct TargetCheck {
    /// The target, in words.
    pub target: String,
    /// What was measured, in words, with the margin.
    pub measured: String,
    /// Met, missed, or not measured (`None`).
    pub met: Option<bool>,
}

/// The machine a report comes from.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `/proc/cpuinfo`'s model name.
    pub cpu_model: String,
    /// CPUs available to this process.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// The TSC: rate and read cost.
    pub tsc: tsc::TscClock,
    /// mmkit-bench's version.
    pub mmkit_version: &'static str,
}

impl Machine {
    /// Read the machine's facts; `clock` is the calibrated TSC.
    pub fn probe(clock: &tsc::TscClock) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
            tsc: *clock,
            mmkit_version: env!("CARGO_PKG_VERSION"),
        }
    }
}
