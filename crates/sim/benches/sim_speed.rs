//! Simulator speed against real time: how many virtual seconds each run simulates per
//! second, for the published-scale runs (kbuild on one socket of the 224-CPU machine, as
//! the demo runs it; netperf and unix on 128 CPUs). Target (docs/reference/targets.md):
//! the 224-CPU kbuild at least as fast as real time on one core, i.e. virtual seconds ≥
//! seconds.
//!
//! Run: `cargo bench -p mmkit-sim --bench sim_speed` (the `bench` profile: fat LTO, one
//! codegen unit; single thread).
//! Set `MMKIT_BENCH_POLICIES=base,patch7` to choose the policies (default: base).
//!
//! Each line gives the virtual time, then the run's own CPU time and wall time, machine
//! set-up included, with virtual seconds per CPU second (`× real time`, the figure that
//! holds on a machine shared with other jobs) and per wall second: `mmkit_sim::speed`'s
//! `RunSpeed`, as `mmkit sim --timing` prints it. The CPU time is the thread's, from
//! Linux's `/proc/thread-self/schedstat` (wall time where that is missing).
//! Page events per second (over the whole run: `RunResult::run_page_events`, not the
//! measured window's `page_events`) and the set-up's share follow, so that where the time
//! goes is visible.

use std::time::Instant;

use mmkit_core::Policy;
use mmkit_sim::speed::RunSpeed;
use mmkit_sim::{run, RunSpec, WorkloadKind};

fn main() {
    let policies = std::env::var("MMKIT_BENCH_POLICIES").unwrap_or_else(|_| "base".into());
    for workload in [
        WorkloadKind::Kbuild,
        WorkloadKind::Netperf,
        WorkloadKind::Unix,
    ] {
        for name in policies.split(',') {
            let policy = Policy::preset(name).expect("a preset name");
            let spec = RunSpec::new(workload);
            let start = Instant::now();
            // The first progress call comes once the machine (mem_map, pagesets) is built.
            let mut built = None;
            let (result, speed) = RunSpeed::measure(
                || {
                    run(&spec, policy, &mut |_| {
                        built.get_or_insert_with(Instant::now);
                    })
                    .expect("the run completes")
                },
                |result| Some(result.wall_ns),
            );
            let speed = speed.expect("a completed run is timed");
            let setup = built.map_or(0.0, |b| b.duration_since(start).as_secs_f64());
            let cpu_secs = speed.cpu_secs.unwrap_or(speed.wall_secs);
            println!(
                "{workload:>8} {name:>7} {:>3} CPUs: {speed}; {:>10} page events, {:>5.2} M/s of CPU ({} engine steps in the measured window; set-up {setup:.2} s wall)",
                result.machine.nr_cpus(),
                result.run_page_events,
                result.run_page_events as f64 / cpu_secs / 1e6,
                result.stats.steps,
            );
        }
    }
}
