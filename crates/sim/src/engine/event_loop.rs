//! The run: events in time order (each CPU's steps, its vmstat tick, the samples), a
//! CPU running its steps while it comes first, the measurement window, and the
//! allocator's walker between steps when asked for.

use mmkit_core::page::Page;
use mmkit_core::Pfn;

use super::stats::{Warmup, ZoneTotals};
use super::{
    event_key, event_parts, Sim, SimError, Step, Workload, KIND_SAMPLE, KIND_STEP, KIND_TICK,
};
use crate::huge_pages;
use crate::queue::NONE;

impl Sim {
    pub(super) fn sample(&mut self, t: u64, held_pages: u64) {
        self.collapse_reached();
        self.series.held_pages.push(held_pages);
        let zones = self.allocator.zones();
        let pcp: u64 = self
            .zones
            .iter()
            .map(|&(i, _, _)| zones[i].pcp_pages())
            .sum();
        self.series.t_ns.push(t);
        self.series.pcp_pages.push(pcp);
        let policy = *self.allocator.policy();
        for (k, &cpu) in self.series.high_cpus.iter().enumerate() {
            let node_zone = self.zones[self.machine.socket_of(cpu) as usize].0;
            let pcp = zones[node_zone].pageset(cpu).expect("pageset");
            // The core's clamp rule: with high_min > high_max, v6.7's clamp is not Rust's.
            let high = if policy.pcp.auto_tune {
                policy.pcp.clamp.clamp(pcp.high, pcp.high_min, pcp.high_max)
            } else {
                pcp.high_min
            };
            self.series.high[k].push(high);
        }
    }

    /// Ask for huge pages under the descriptors of every page the run has reached since
    /// the last sample (the `huge_pages` module): a hint, which changes no result.
    pub(super) fn collapse_reached(&mut self) {
        for (slot, &(zone, start, end)) in self.zones.iter().enumerate() {
            let reached = (start + self.cache.reach(slot)).min(end);
            let mem_map = self.allocator.zones()[zone].mem_map();
            let (Some(first), Some(last)) = (
                mem_map.get(Pfn(start)),
                mem_map.get(Pfn(reached.saturating_sub(1))),
            ) else {
                continue;
            };
            let lo = core::ptr::from_ref(first) as usize;
            let hi = core::ptr::from_ref(last) as usize + core::mem::size_of::<Page>();
            huge_pages::collapse(lo, hi, &mut self.huge_done[slot]);
        }
    }

    /// Open the measurement window at the first sample at or after `t_ns` instead of
    /// [`SimOptions::measure_from_ns`](super::SimOptions::measure_from_ns). Called before the run.
    pub fn measure_from(&mut self, t_ns: u64) {
        self.options.measure_from_ns = t_ns;
    }

    /// Open the measurement window at `t` if it is due and the workload allows it, and
    /// close it if it is open and the workload has closed it.
    pub(super) fn mark_window<W: Workload + ?Sized>(&mut self, workload: &W, t: u64) {
        if self.warmup.is_none() {
            if t >= self.options.measure_from_ns && workload.window_may_open() {
                self.warmup = Some(self.warmup_state(t, workload.work_done()));
            }
        } else if self.until.is_none() && workload.window_closed() {
            self.until = Some(self.warmup_state(t, workload.work_done()));
        }
    }

    pub(super) fn warmup_state(&self, t_ns: u64, work_done: u64) -> Warmup {
        Warmup {
            t_ns,
            stats: self.stats,
            cache: self.cache.counts,
            work_done,
            zones: self.zone_totals(),
        }
    }

    /// Every simulated zone's event counters now, in slot order.
    pub fn zone_totals(&self) -> Vec<ZoneTotals> {
        (0..self.zones.len())
            .map(|slot| ZoneTotals::read(self.zone(slot)))
            .collect()
    }

    pub(super) fn check<W: Workload + ?Sized>(&self, workload: &W) -> Result<(), SimError> {
        let census = self
            .allocator
            .verify()
            .map_err(|e| SimError::Verify(e.to_string()))?;
        let allocated: u64 = census.iter().map(|c| c.allocated).sum();
        let held = workload.held_pages();
        if allocated != held {
            return Err(SimError::Conservation {
                census: allocated,
                held,
            });
        }
        Ok(())
    }

    /// Run `workload` to its end. `progress` is called with 0.0 before the workload starts
    /// (the machine is built by then: a benchmark can tell set-up from events), then now
    /// and then with the fraction done. Returns the virtual time the run took.
    ///
    /// Generic over the workload, so that each workload's steps are direct calls the
    /// compiler can inline into the loop that runs them (`&mut dyn Workload` works too).
    pub fn run<W: Workload + ?Sized>(
        &mut self,
        workload: &mut W,
        progress: &mut dyn FnMut(f64),
    ) -> Result<u64, SimError> {
        progress(0.0);
        workload.start(self);
        let end = workload.end_ns();
        // The last sample is at `end`; a wait booked past it is in no sample interval.
        self.spin_bins.set_limit(end.unwrap_or(u64::MAX));
        let nr_cpus = self.machine.nr_cpus();
        for cpu in 0..nr_cpus {
            // Spread evenly over one interval: in a long run each CPU's timer has its own
            // phase, and every CPU ticks once in any interval-long window.
            let skew = cpu as u64 * self.tick_ns / nr_cpus as u64;
            let due = self.tick_ns - skew;
            self.tick_due[cpu as usize] = due;
            self.queue
                .set_tick(cpu as usize, event_key(due, KIND_TICK, cpu));
        }
        self.queue.set_sample(event_key(0, KIND_SAMPLE, 0));
        let mut last_progress = 0;
        let mut now = 0;
        // Read once here, not at the start of every run of a CPU: the end as a bound that
        // every clock of a run without one is below, and the verification interval.
        let end_ns = end.unwrap_or(u64::MAX);
        let verify = self.options.verify_every;
        loop {
            let key = self.queue.first();
            if key == NONE {
                break;
            }
            let (t, kind, cpu) = event_parts(key);
            if end.is_some_and(|e| t >= e) || self.active == 0 {
                break;
            }
            now = t;
            match kind {
                KIND_TICK => {
                    // The measured window is [measure_from, end): a tick due at its first
                    // instant sorts before that instant's sample, so the window opens here.
                    self.mark_window(workload, t);
                    let c = cpu as usize;
                    if self.cpus[c].clock > t {
                        // Busy past the tick: the work runs when the CPU gets to it, not
                        // at a time ahead of the CPUs in between.
                        self.queue
                            .set_tick(c, event_key(self.cpus[c].clock, KIND_TICK, cpu));
                    } else if self.has_deferred(c) {
                        // The CPU is in the middle of a call whose holds wait (its step is
                        // due now, and a tick sorts first): the tick's work comes after
                        // them, a nanosecond on, which its clock will then be past.
                        self.queue.set_tick(c, event_key(t + 1, KIND_TICK, cpu));
                    } else {
                        self.cpus[c].clock = t;
                        self.vmstat_tick(cpu);
                        self.tick_due[c] += self.tick_ns;
                        let next = self.tick_due[c].max(t + 1);
                        self.queue.set_tick(c, event_key(next, KIND_TICK, cpu));
                    }
                }
                KIND_SAMPLE => {
                    self.mark_window(workload, t);
                    self.sample(t, workload.held_pages());
                    self.queue
                        .set_sample(event_key(t + self.options.sample_ns, KIND_SAMPLE, 0));
                }
                _ => self.run_cpu(workload, cpu, t, end_ns, verify)?,
            }
            if self.stats.steps - last_progress >= 1 << 16 {
                last_progress = self.stats.steps;
                progress(workload.progress(self));
            }
            if self.nr_scheduled == 0 {
                break; // every CPU is done or waits for nothing
            }
        }
        let wall = end.unwrap_or_else(|| self.max_clock().max(now));
        self.sample(wall, workload.held_pages());
        // Every wait is known only now: one booked before a sample may run past it. The
        // samples are on bin edges but the last, at `wall`, after which nothing was spun
        // (every CPU's clock is at most `wall`, or the bins stop at `end`).
        self.series.spin_ns = self.spin_bins.cumulative(&self.series.t_ns);
        if self.options.verify_every.is_some() {
            self.check(workload)?;
        }
        progress(1.0);
        Ok(wall)
    }

    /// Run `cpu`'s step due at `t`, and the steps after it while they come first
    /// ([`Self::run_steps`]); `end_ns` and `verify` are the run's end (or `u64::MAX`) and
    /// [`SimOptions::verify_every`](super::SimOptions::verify_every).
    pub(super) fn run_cpu<W: Workload + ?Sized>(
        &mut self,
        workload: &mut W,
        cpu: u32,
        t: u64,
        end_ns: u64,
        verify: Option<u64>,
    ) -> Result<(), SimError> {
        let c = cpu as usize;
        debug_assert_eq!(
            self.cpus[c].scheduled,
            Some(t),
            "the queue holds the current step"
        );
        let busy_until = self.cpus[c].clock;
        if busy_until > t {
            // Busy past the step: its vmstat tick's work (a decay drain, patch 7 on) or a
            // wake-up's time fell inside the CPU's last work. The step runs when the CPU
            // gets to it, after the other CPUs' events before then, as a late tick does;
            // run now, its zone-lock requests would be booked ahead of theirs.
            self.cpus[c].scheduled = Some(busy_until);
            self.queue
                .set_step(c, event_key(busy_until, KIND_STEP, cpu));
            return Ok(());
        }
        self.cpus[c].scheduled = None;
        self.cpus[c].clock = t;
        self.nr_scheduled -= 1;
        self.queue.run(c);
        self.in_step = true;
        if self.has_deferred(c) {
            self.run_deferred(cpu, end_ns);
            self.in_step = false;
            return Ok(());
        }
        let result = self.run_steps(workload, cpu, end_ns, verify);
        self.in_step = false;
        result
    }

    /// `cpu`'s deferred holds, each requested while the CPU comes first; once they are
    /// all charged, what its step decided. A CPU that goes on takes its next step as a
    /// queued one, at its clock (so that [`Self::run_steps`], the hot loop, has one
    /// caller and stays inlined into it).
    #[cold]
    #[inline(never)]
    pub(super) fn run_deferred(&mut self, cpu: u32, end_ns: u64) {
        let c = cpu as usize;
        while let Some(hold) = self.deferred[c].pop_front() {
            self.nr_deferred -= 1;
            self.charge_hold(cpu, hold);
            if !self.deferred[c].is_empty() && self.comes_after_others(cpu) {
                let clock = self.cpus[c].clock;
                self.schedule(cpu, clock);
                return;
            }
        }
        let step = match self.after_holds[c]
            .take()
            .expect("a CPU with deferred holds keeps its step's decision")
        {
            Step::Continue => Step::SleepUntil(self.cpus[c].clock),
            step => step,
        };
        let goes_on = self.finish_step(cpu, step, end_ns);
        debug_assert!(!goes_on, "a queued step, not a step run now");
    }

    /// The steps of one run of `cpu` (see [`Self::run_cpu`]).
    #[inline]
    pub(super) fn run_steps<W: Workload + ?Sized>(
        &mut self,
        workload: &mut W,
        cpu: u32,
        end_ns: u64,
        verify: Option<u64>,
    ) -> Result<(), SimError> {
        let c = cpu as usize;
        loop {
            self.stats.steps += 1;
            let step = workload.step(self, cpu)?;
            if verify.is_some_and(|every| self.stats.steps % every == 0) {
                self.check(workload)?;
            }
            if self.has_deferred(c) {
                // Holds wait: the CPU runs them when it comes first, then does what the
                // step decided.
                self.after_holds[c] = Some(step);
                let clock = self.cpus[c].clock;
                self.schedule(cpu, clock);
                return Ok(());
            }
            if !self.finish_step(cpu, step, end_ns) {
                return Ok(());
            }
        }
    }

    /// Do what `cpu`'s step decided. Returns whether the CPU runs its next step now (it
    /// goes on and still comes first); otherwise its next step, if any, is in the queue.
    #[inline(always)]
    pub(super) fn finish_step(&mut self, cpu: u32, step: Step, end_ns: u64) -> bool {
        let c = cpu as usize;
        let clock = self.cpus[c].clock;
        match step {
            Step::Continue => {
                if self.cpus[c].scheduled.is_none() && clock < end_ns {
                    if self.queue.runs_first(c, event_key(clock, KIND_STEP, cpu)) {
                        return true;
                    }
                    // The queue holds the step at `clock` now: nothing more to do (the
                    // test below would read back the `Some` just written).
                    self.cpus[c].scheduled = Some(clock);
                    self.nr_scheduled += 1;
                    return false;
                } else {
                    self.schedule(cpu, clock);
                }
            }
            Step::SleepUntil(at) => self.schedule(cpu, at.max(clock)),
            Step::Wait => {}
            Step::Done => {
                if self.cpus[c].scheduled.is_none() && !self.done[c] {
                    self.done[c] = true;
                    self.active -= 1;
                }
            }
        }
        if self.cpus[c].scheduled.is_none() {
            self.queue.set_step(c, NONE);
        }
        false
    }

    pub(super) fn schedule(&mut self, cpu: u32, at: u64) {
        let c = cpu as usize;
        if self.cpus[c].scheduled.is_none() {
            self.nr_scheduled += 1;
        }
        if self.cpus[c].scheduled.map_or(true, |s| at < s) {
            self.cpus[c].scheduled = Some(at);
            self.queue.set_step(c, event_key(at, KIND_STEP, cpu));
        }
    }
}
