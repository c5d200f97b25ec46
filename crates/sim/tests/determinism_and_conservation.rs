//! Every workload at small scale under two presets: the allocator's walker and the page
//! conservation check (census allocated == pages the workload holds) run every 500 steps
//! and at the end, a second run with the same seed gives byte-identical JSON, and the result
//! reads back from that JSON unchanged (what a sharded sweep's merge relies on).

use mmkit_core::Policy;
use mmkit_sim::{run, RunResult, RunSpec, WorkloadKind};

fn small(workload: WorkloadKind) -> RunSpec {
    let (cpus, scale) = match workload {
        WorkloadKind::Kbuild => (6, 0.02),
        WorkloadKind::Netperf => (8, 0.005),
        WorkloadKind::Unix => (8, 0.005),
        WorkloadKind::Pagealloc => (1, 0.01),
        WorkloadKind::Pageout => (4, 0.1),
    };
    RunSpec {
        cpus: Some(cpus),
        seed: 7,
        scale,
        node_bytes: Some(256 << 20),
        verify_every: Some(500),
        ..RunSpec::new(workload)
    }
}

fn check(workload: WorkloadKind) {
    for preset in ["base", "patch9"] {
        let policy = Policy::preset(preset).unwrap();
        let spec = small(workload);
        let first =
            run(&spec, policy, &mut |_| {}).unwrap_or_else(|e| panic!("{workload}/{preset}: {e}"));
        assert!(first.page_events > 0, "{workload}/{preset} did something");
        let second = run(&spec, policy, &mut |_| {}).unwrap();
        let a = serde_json::to_string(&first).unwrap();
        let b = serde_json::to_string(&second).unwrap();
        assert!(a == b, "{workload}/{preset}: same seed, different output");
        let back: RunResult = serde_json::from_str(&a).unwrap();
        assert!(
            back == first,
            "{workload}/{preset}: the JSON does not read back"
        );
        let other = run(&RunSpec { seed: 8, ..spec }, policy, &mut |_| {}).unwrap();
        if workload != WorkloadKind::Pagealloc {
            assert_ne!(
                serde_json::to_string(&other).unwrap(),
                a,
                "{workload}: the seed matters"
            );
        }
    }
}

#[test]
fn kbuild_is_deterministic_and_conserves_pages() {
    check(WorkloadKind::Kbuild);
}

#[test]
fn netperf_is_deterministic_and_conserves_pages() {
    check(WorkloadKind::Netperf);
}

#[test]
fn unix_is_deterministic_and_conserves_pages() {
    check(WorkloadKind::Unix);
}

#[test]
fn pagealloc_is_deterministic_and_conserves_pages() {
    check(WorkloadKind::Pagealloc);
}

#[test]
fn pageout_is_deterministic_and_conserves_pages() {
    check(WorkloadKind::Pageout);
}

#[test]
fn pagealloc_free_cost_jumps_past_high() {
    let spec = RunSpec {
        scale: 0.2,
        verify_every: None,
        ..small(WorkloadKind::Pagealloc)
    };
    let result = run(&spec, Policy::BASE, &mut |_| {}).unwrap();
    let high = result.pageset.high_min;
    let below = result
        .curve
        .iter()
        .find(|c| c.0 < high / 2)
        .expect("a batch below high");
    let above = result
        .curve
        .iter()
        .rev()
        .find(|c| c.0 > 2 * high)
        .expect("a batch above high");
    assert!(
        above.2 > below.2,
        "free cost per page rises past high: {:?}",
        result.curve
    );
}
