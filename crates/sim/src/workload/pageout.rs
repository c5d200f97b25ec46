//! Yin Fengwei's MADV_PAGEOUT loop (`docs/reference/workloads.md` §2.6).
//!
//! `pageout` runs one process per CPU, each faulting 512 pages at a steady rate and then
//! freeing all of them in one burst, over and over; score = loops per second.

use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use serde::Serialize;

use crate::engine::{Sim, SimError, Step, Workload};
use crate::rng::Rng;

/// `pageout` parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PageoutParams {
    /// Pages per loop (a 2 MiB file mapping).
    pub pages: u64,
    /// Loops per process.
    pub loops: u32,
    /// Mean fault interval while touching the mapping, µs (≈ 10 allocs/ms measured).
    pub fault_interval_us: f64,
    /// Coefficient of variation of the interval (0.2 measured).
    pub fault_cv: f64,
}

impl PageoutParams {
    /// The published shape; `scale` multiplies the loops.
    pub fn scaled(scale: f64) -> PageoutParams {
        PageoutParams {
            pages: 512,
            loops: ((20.0 * scale).round() as u32).max(1),
            fault_interval_us: 100.0,
            fault_cv: 0.2,
        }
    }
}

struct Process {
    rng: Rng,
    pages: Vec<Pfn>,
    loops_left: u32,
    freeing: bool,
    /// The work before the next fault is done.
    worked: bool,
}

/// The `pageout` workload: one process per CPU.
pub struct Pageout {
    params: PageoutParams,
    procs: Vec<Process>,
    held: u64,
    loops_done: u64,
}

impl Pageout {
    /// One process on each of `cpus` CPUs.
    pub fn new(params: PageoutParams, cpus: u32, seed: u64) -> Pageout {
        Pageout {
            procs: (0..cpus)
                .map(|cpu| Process {
                    rng: Rng::new(seed, 0x706f_0000 + cpu as u64),
                    pages: Vec::new(),
                    loops_left: params.loops,
                    freeing: false,
                    worked: false,
                })
                .collect(),
            params,
            held: 0,
            loops_done: 0,
        }
    }

    /// Loops completed.
    pub fn loops_done(&self) -> u64 {
        self.loops_done
    }
}

impl Workload for Pageout {
    fn start(&mut self, sim: &mut Sim) {
        for cpu in 0..self.procs.len() as u32 {
            sim.wake(cpu, 0);
        }
    }

    fn step(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        let p = &self.params;
        let proc = &mut self.procs[cpu as usize];
        if proc.loops_left == 0 {
            return Ok(Step::Done);
        }
        if proc.freeing {
            match proc.pages.pop() {
                Some(pfn) => {
                    sim.free(cpu, pfn, Order::ZERO)?;
                    self.held -= 1;
                }
                None => {
                    proc.freeing = false;
                    proc.loops_left -= 1;
                    self.loops_done += 1;
                }
            }
            return Ok(Step::Continue);
        }
        if proc.pages.len() as u64 == p.pages {
            proc.freeing = true;
            return Ok(Step::Continue);
        }
        if !proc.worked {
            // The work before a fault is a step of its own, so that the fault's zone-lock
            // request (if any) is made at its own virtual time.
            let gap = p.fault_interval_us * (1.0 + p.fault_cv * proc.rng.normal()).max(0.1);
            sim.work(cpu, (gap * 1000.0) as u64);
            proc.worked = true;
            return Ok(Step::Continue);
        }
        proc.worked = false;
        let pfn = sim.alloc_touch(cpu, Gfp::HIGHUSER_MOVABLE, Order::ZERO, 64)?;
        self.procs[cpu as usize].pages.push(pfn);
        self.held += 1;
        Ok(Step::Continue)
    }

    fn held_pages(&self) -> u64 {
        self.held
    }

    fn progress(&self, _sim: &Sim) -> f64 {
        self.loops_done as f64 / (self.procs.len() as u64 * self.params.loops as u64).max(1) as f64
    }

    fn work_done(&self) -> u64 {
        self.loops_done
    }

    fn end_ns(&self) -> Option<u64> {
        None
    }
}
