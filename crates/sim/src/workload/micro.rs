//! Gorman 2017's single-CPU `pagealloc` benchmark (`docs/reference/workloads.md` §2.7).
//!
//! `pagealloc` allocates N order-0 pages and frees them, for N = 1, 2, 4 … `max_batch`,
//! and reports the simulated cost per page: the jump where N exceeds `pcp->high` (frees
//! drain under the zone lock) is Gorman 2017's observation.

use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use serde::Serialize;

use crate::engine::{Sim, SimError, Step, Workload};

/// `pagealloc` parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PageallocParams {
    /// Largest batch N (a power of two; mmtests goes to 16384).
    pub max_batch: u64,
    /// Pages allocated per batch size (repetitions = this / N, at least 1).
    pub pages_per_size: u64,
}

impl PageallocParams {
    /// Gorman 2017's sizes; `scale` multiplies the repetitions.
    pub fn scaled(scale: f64) -> PageallocParams {
        PageallocParams {
            max_batch: if scale < 0.1 { 1024 } else { 16384 },
            pages_per_size: ((1 << 16) as f64 * scale).max(1.0) as u64,
        }
    }
}

/// The `pagealloc` workload (CPU 0 only).
pub struct Pagealloc {
    params: PageallocParams,
    batch: u64,
    reps_left: u64,
    held: Vec<Pfn>,
    freeing: bool,
    phase_start: u64,
    /// Per batch size: (N, alloc ns per page, free ns per page), summed then averaged.
    sums: Vec<(u64, u64, u64, u64)>,
}

impl Pagealloc {
    /// A run with `params`.
    pub fn new(params: PageallocParams) -> Pagealloc {
        let reps = params.pages_per_size.max(1);
        Pagealloc {
            params,
            batch: 1,
            reps_left: reps,
            held: Vec::new(),
            freeing: false,
            phase_start: 0,
            sums: vec![(1, 0, 0, 0)],
        }
    }

    /// Per batch size N: (N, alloc ns/page, free ns/page).
    pub fn curve(&self) -> Vec<(u64, f64, f64)> {
        self.sums
            .iter()
            .filter(|s| s.3 > 0)
            .map(|&(n, a, f, pages)| (n, a as f64 / pages as f64, f as f64 / pages as f64))
            .collect()
    }
}

impl Workload for Pagealloc {
    fn start(&mut self, sim: &mut Sim) {
        sim.wake(0, 0);
    }

    fn step(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        let now = sim.now(cpu);
        if !self.freeing {
            if self.held.len() as u64 == self.batch {
                let entry = self.sums.last_mut().expect("a size is running");
                entry.1 += now - self.phase_start;
                self.phase_start = now;
                self.freeing = true;
                return Ok(Step::Continue);
            }
            let pfn = sim.alloc(cpu, Gfp::KERNEL, Order::ZERO)?;
            self.held.push(pfn);
            return Ok(Step::Continue);
        }
        if let Some(pfn) = self.held.pop() {
            sim.free(cpu, pfn, Order::ZERO)?;
            return Ok(Step::Continue);
        }
        let entry = self.sums.last_mut().expect("a size is running");
        entry.2 += now - self.phase_start;
        entry.3 += self.batch;
        self.phase_start = now;
        self.freeing = false;
        self.reps_left -= 1;
        if self.reps_left == 0 {
            if self.batch == self.params.max_batch {
                return Ok(Step::Done);
            }
            self.batch *= 2;
            self.reps_left = (self.params.pages_per_size / self.batch).max(1);
            self.sums.push((self.batch, 0, 0, 0));
        }
        Ok(Step::Continue)
    }

    fn held_pages(&self) -> u64 {
        self.held.len() as u64
    }

    fn progress(&self, _sim: &Sim) -> f64 {
        (self.batch as f64).log2() / (self.params.max_batch as f64).log2().max(1.0)
    }

    fn work_done(&self) -> u64 {
        self.sums.iter().map(|s| s.3).sum()
    }

    fn end_ns(&self) -> Option<u64> {
        None
    }
}
