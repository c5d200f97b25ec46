//! Simulator speed: page events per second per core, and the wall time of the published-scale
//! 224-CPU kbuild run. Targets (docs/reference/targets.md): ≥ 20 M page events/s/core, kbuild < 30 s.
//!
//! Run: `cargo bench -p mmkit-sim --bench sim_speed` (release profile; single thread).
//! Set `MMKIT_BENCH_POLICIES=base,patch7` to choose the policies (default: base).
//!
//! The headline figure is page events over the whole run's wall time, machine set-up
//! included (the target's measure); the set-up (building the mem_map and pagesets, until
//! the engine's first progress call) and the rate after it are printed beside it, so
//! that where the time goes is visible.

use std::time::Instant;

use mmkit_core::Policy;
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
            let result = run(&spec, policy, &mut |_| {
                built.get_or_insert_with(Instant::now);
            })
            .expect("the run completes");
            let secs = start.elapsed().as_secs_f64();
            let setup = built.map_or(0.0, |b| b.duration_since(start).as_secs_f64());
            println!(
                "{workload:>8} {name:>7} {:>3} CPUs: {:>10} page events, {:>10.0} virtual ms, {:>6.2} s wall, {:>6.2} M page events/s/core ({} engine steps; set-up {:.2} s, {:.2} M page events/s/core after it)",
                result.machine.nr_cpus(),
                result.page_events,
                result.wall_ns as f64 / 1e6,
                secs,
                result.page_events as f64 / secs / 1e6,
                result.stats.steps,
                setup,
                result.page_events as f64 / (secs - setup) / 1e6,
            );
        }
    }
}
