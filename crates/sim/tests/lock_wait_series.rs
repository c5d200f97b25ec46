//! The lock-wait plot's series: spin time is counted in the sample intervals it falls in,
//! so no interval holds more spin than its CPUs had time. Booked at the sample after the
//! request, one long wait put 153 % "of all CPU time" into a 1 ms interval of kbuild at
//! `mmkit demo --scale 0.001`.

use mmkit_core::Policy;
use mmkit_sim::plot::lock_wait_pct;
use mmkit_sim::{run, RunSpec, WorkloadKind};

fn assert_at_most_all_cpu_time(spec: &RunSpec, preset: &str) {
    let r = run(spec, Policy::preset(preset).unwrap(), &mut |_| {})
        .unwrap_or_else(|e| panic!("{} / {preset}: {e}", spec.workload));
    assert!(r.stats.spin_ns > 0, "{} / {preset} spun", spec.workload);
    let points = lock_wait_pct(&r);
    assert!(points.len() >= 2, "{} / {preset}: a series", spec.workload);
    for (t_ms, pct) in points {
        assert!(
            pct <= 100.0 + 1e-9,
            "{} / {preset} at scale {}: {pct:.1} % of all CPU time spun in the interval \
             ending at {t_ms} ms",
            spec.workload,
            spec.scale,
        );
    }
    // The spin is in the series, not lost from it.
    assert!(*r.series.spin_ns.last().unwrap() > 0);
}

#[test]
fn no_lock_wait_interval_exceeds_all_cpu_time_at_any_scale() {
    for (workload, scales) in [
        (WorkloadKind::Kbuild, &[0.001, 0.0017, 0.003][..]),
        (WorkloadKind::Unix, &[0.001, 0.004][..]),
        (WorkloadKind::Netperf, &[0.001][..]),
    ] {
        for &scale in scales {
            for preset in ["base", "patch5"] {
                // The whole run: the series covers it, and a tiny build's middle may
                // not spin at all.
                let spec = RunSpec {
                    scale,
                    kbuild_steady_window: false,
                    ..RunSpec::new(workload)
                };
                assert_at_most_all_cpu_time(&spec, preset);
            }
        }
    }
}
