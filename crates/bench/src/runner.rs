//! Contestants of different types in one list: [`Runner`] is the object-safe face of a
//! [`Contestant`], and [`Entry`] makes one by running the generic harness code for it.

use mmkit_core::Order;

use crate::contestant::Contestant;
use crate::pagealloc::{self, CellSample, CellSpec};
use crate::threads::{self, ThreadsConfig, ThreadsOutcome};
use crate::BenchError;

/// One allocator in a benchmark, whatever its block type.
pub trait Runner: Sync {
    /// Its name on the command line and in reports (`mmkit`, `talc`, …).
    fn name(&self) -> &'static str;
    /// One line on how it is set up.
    fn describe(&self) -> String;
    /// Whether it can hand out blocks of `order` (the bulk API: order 0 only).
    fn supports(&self, order: Order) -> bool;
    /// Whether it uses its bulk calls (`alloc_bulk`/`free_bulk`).
    fn bulk(&self) -> bool;
    /// mmkit's first pageset's `high_max`: the most pages a round can leave on the
    /// pageset. `None` for other allocators.
    fn pageset_high_max(&self) -> Option<u64> {
        None
    }
    /// One warm-up round and one sample of `spec` (see [`pagealloc::measure_cell`]).
    fn pagealloc_sample(&self, spec: &CellSpec) -> Result<CellSample, BenchError>;
    /// One run of a multi-thread pattern (see [`threads::run_pattern`]).
    fn threads(&self, config: &ThreadsConfig) -> Result<ThreadsOutcome, BenchError>;
    /// After the benchmark: everything came back and the structures are intact.
    fn audit(&self) -> Result<(), String>;
}

/// A named contestant, single or bulk.
pub struct Entry<C> {
    /// The name.
    pub name: &'static str,
    /// The allocator.
    pub contestant: C,
    /// Use `alloc_bulk`/`free_bulk` instead of `alloc`/`free`.
    pub bulk: bool,
    /// See [`Runner::pageset_high_max`].
    pub pageset_high_max: Option<u64>,
}

impl<C: Contestant> Runner for Entry<C> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        self.contestant.describe()
    }

    fn supports(&self, order: Order) -> bool {
        !self.bulk || order == Order::ZERO
    }

    fn bulk(&self) -> bool {
        self.bulk
    }

    fn pageset_high_max(&self) -> Option<u64> {
        self.pageset_high_max
    }

    fn pagealloc_sample(&self, spec: &CellSpec) -> Result<CellSample, BenchError> {
        self.contestant.enter_thread(0);
        pagealloc::measure_cell(&self.contestant, self.bulk, spec).map_err(|e| e.context(self.name))
    }

    fn threads(&self, config: &ThreadsConfig) -> Result<ThreadsOutcome, BenchError> {
        threads::run_pattern(&self.contestant, self.bulk, config).map_err(|e| e.context(self.name))
    }

    fn audit(&self) -> Result<(), String> {
        self.contestant.audit()
    }
}
