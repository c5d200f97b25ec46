//! Simulator speed: page events per second per core, and the wall time of the seed-scale
//! 224-CPU kbuild run. Targets (product.md): ≥ 20 M page events/s/core, kbuild < 30 s.
//!
//! Run: `cargo bench -p mmkit-sim --bench sim_speed` (release profile; single thread).
//! Set `MMKIT_BENCH_POLICIES=base,patch7` to choose the policies (default: base).

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
            let result = run(&spec, policy, &mut |_| {}).expect("the run completes");
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{workload:>8} {name:>7} {:>3} CPUs: {:>10} page events, {:>10.0} virtual ms, {:>6.2} s wall, {:>6.2} M page events/s/core ({} engine steps)",
                result.machine.nr_cpus(),
                result.page_events,
                result.wall_ns as f64 / 1e6,
                secs,
                result.page_events as f64 / secs / 1e6,
                result.stats.steps,
            );
        }
    }
}
