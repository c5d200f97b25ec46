//! mmkit-sim: a deterministic discrete-event simulator that runs mmkit's page allocator
//! ([`mmkit_core::PageAllocator`], the same code the runtime uses) on hundreds of virtual
//! CPUs, with the cost model and the workloads of `docs/reference/workloads.md` §2–3, so that the PCP
//! tables of Huang 2023 ("mm: PCP high auto-tuning") can be reproduced on a laptop.
//!
//! | module | holds |
//! |---|---|
//! | [`machine`] | the simulated machine and how its zones get the published pageset limits, or a zoneinfo snapshot's |
//! | [`measured`] | workload parameters measured from a trace of a real machine |
//! | [`cost`] | the cost model's parameters, one struct, with sources |
//! | [`calibrate`] | the fit of the cost model's free parameters against the base rows |
//! | [`cache`] | reuse-distance classification of touched pages (L2 / LLC / memory) |
//! | [`engine`] | virtual CPUs, the zone-lock FIFO servers, vmstat ticks, sampling |
//! | `bins` | time spread over the sample intervals it spans (the lock-wait series) |
//! | `huge_pages` | huge pages under the part of the mem_map a run reaches (a hint) |
//! | `list_walk` | a walk down a buddy list ahead of its next refill (a hint) |
//! | `mem_map` | the page descriptors in a mapping of the simulator's own, on a cache line |
//! | `queue` | the engine's pending events: a winner tree with one leaf per CPU |
//! | `prefetch` | a cache-line prefetch hint (an `unsafe` intrinsic that cannot fault) |
//! | [`workload`] | kbuild, netperf, unix, pagealloc, pageout |
//! | [`mod@run`] | one run → the published metrics; the relative table |
//! | [`plot`] | SVG plots of the series |
//! | [`published`] | the published tables and the tolerance rule of each cell |
//! | [`rng`] | the seeded SplitMix64 streams |
//! | [`speed`] | virtual seconds per host second, measured around a run (never in its result) |
//!
//! Linux has no counterpart: this is the measuring instrument. Nothing here decides what
//! the allocator does; the engine only reads what the allocator did to charge time.
//! Same inputs and seed ⇒ byte-identical results (no hash-map order, no host time: a
//! run's speed is measured around it, by [`speed`]).
//! `unsafe` is denied but for one prefetch intrinsic, one `madvise` for huge pages and
//! the `mmap` that holds the descriptors (with the slice made from it), none of which can
//! change a result, and the core's exclusive free, whose promise (no other thread frees
//! the block) a one-threaded simulator keeps by construction.

#![deny(unsafe_code)]
#![deny(missing_docs)]

mod bins;
pub mod cache;
pub mod calibrate;
pub mod cost;
pub mod engine;
mod huge_pages;
mod list_walk;
pub mod machine;
pub mod measured;
mod mem_map;
pub mod plot;
mod prefetch;
pub mod published;
mod queue;
pub mod rng;
pub mod run;
pub mod speed;
pub mod workload;

pub use cost::CostModel;
pub use engine::{Sim, SimError, Step, Workload};
pub use machine::MachineSpec;
pub use run::{run, table, RunResult, RunSpec, TableRow, WorkloadParams};
pub use workload::WorkloadKind;
