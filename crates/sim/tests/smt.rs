//! Hyperthreads (`CostModel::smt_yield`, `mmkit sim --smt-yield`): a CPU whose sibling
//! spins on a zone lock runs its own work as if alone. Off in the committed model.

use mmkit_core::Policy;
use mmkit_sim::{run, CostModel, MachineSpec, RunResult, RunSpec, WorkloadKind};

/// A short kbuild on one socket of the published machine (112 CPUs, siblings 0–56, 1–57,
/// …), its fault rate and zone-lock work raised so that CPUs spend a good part of their
/// time spinning.
fn kbuild(smt_yield: Option<f64>) -> RunSpec {
    let mut spec = RunSpec {
        seed: 5,
        scale: 0.02,
        machine: Some(MachineSpec {
            sockets: 1,
            ..MachineSpec::spr_224()
        }),
        ..RunSpec::new(WorkloadKind::Kbuild)
    };
    spec.cost.smt_yield = smt_yield;
    spec.cost.lock_lines = 8.0;
    spec.kbuild_faults_per_s = 150_000.0;
    // The whole build: the same processes under every setting.
    spec.kbuild_steady_window = false;
    spec
}

fn base(spec: &RunSpec) -> RunResult {
    run(spec, Policy::preset("base").unwrap(), &mut |_| {}).expect("a small kbuild runs")
}

/// The committed model has them, at the middle of Intel's published 15–30 %; a run
/// without them gains nothing.
#[test]
fn the_committed_model_has_hyperthreads_and_a_run_without_gains_nothing() {
    assert_eq!(CostModel::calibrated().smt_yield, Some(1.225));
    let r = base(&kbuild(None));
    assert!(r.stats.spin_ns > 0, "the lock was contended");
    assert_eq!(r.stats.smt_gain_ns, 0);
}

/// What a CPU gains is what its sibling's spin gave it, at `2/Y − 1` per ns, and never
/// more than a lone thread's speed-up of its work, `1 − Y/2` of it; and the build ends
/// sooner than with hyperthreads ignored.
#[test]
fn a_cpu_gains_what_its_siblings_spin_gives_and_no_more() {
    let y = 1.25;
    let off = base(&kbuild(None));
    let on = base(&kbuild(Some(y)));
    let s = &on.stats;
    assert!(s.smt_gain_ns > 0, "siblings spun, so CPUs gained");
    assert!(
        s.smt_gain_ns as f64 <= s.spin_ns as f64 * (2.0 / y - 1.0),
        "gained {} ns from {} ns of spin",
        s.smt_gain_ns,
        s.spin_ns
    );
    assert!(s.smt_gain_ns as f64 <= s.work_ns as f64 * (1.0 - y / 2.0));
    // Work is counted as done (nominal), busy time as spent.
    assert!(s.busy_ns + s.smt_gain_ns >= s.work_ns + s.spin_ns);
    assert_eq!(on.work_done, off.work_done, "the same build");
    assert!(
        on.score < off.score,
        "with siblings running alone while the other spins the build is shorter: {} vs {}",
        on.score,
        off.score
    );
}

#[test]
fn runs_with_hyperthreads_are_deterministic() {
    let spec = kbuild(Some(1.2));
    let (a, b) = (base(&spec), base(&spec));
    assert_eq!(a.stats.smt_gain_ns, b.stats.smt_gain_ns);
    assert_eq!(a.stats.busy_ns, b.stats.busy_ns);
    assert_eq!(a.score, b.score);
}
