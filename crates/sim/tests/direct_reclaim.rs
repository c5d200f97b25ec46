//! pageout's direct-reclaim variant: on a node full of page cache, faults reclaim and
//! retry through the core's slow path, which drains the pagesets (`drain_all_pages`), so
//! the drain policy has a cost; the walker and the page conservation check hold throughout, the run is
//! deterministic, and the published loop (no pressure) never drains.

use mmkit_core::page_alloc::DrainReason;
use mmkit_core::policy::DrainMode;
use mmkit_core::Policy;
use mmkit_sim::workload::pageout::{DirectReclaim, PageoutParams};
use mmkit_sim::{run, RunResult, RunSpec, WorkloadKind, WorkloadParams};

fn spec(direct_reclaim: bool) -> RunSpec {
    RunSpec {
        cpus: Some(8),
        seed: 3,
        scale: 0.1,
        node_bytes: Some(64 << 20),
        verify_every: Some(500),
        params: Some(WorkloadParams::Pageout(PageoutParams {
            direct_reclaim: direct_reclaim.then_some(DirectReclaim::DEFAULT),
            ..PageoutParams::scaled(0.1)
        })),
        ..RunSpec::new(WorkloadKind::Pageout)
    }
}

fn run_with(spec: &RunSpec, drain: DrainMode) -> RunResult {
    let policy = Policy {
        drain,
        ..Policy::V6_7
    };
    run(spec, policy, &mut |_| {}).unwrap_or_else(|e| panic!("{drain:?}: {e}"))
}

const EXPLICIT: usize = DrainReason::Explicit as usize;

#[test]
fn direct_reclaim_drains_every_pageset_in_both_drain_modes() {
    for drain in [DrainMode::Direct, DrainMode::Workqueue] {
        let result = run_with(&spec(true), drain);
        let stats = result
            .direct_reclaim
            .expect("the variant reports its reclaim");
        assert!(
            stats.stalls > 0 && stats.pages_reclaimed > 0,
            "{drain:?}: {stats:?}"
        );
        assert!(stats.drains > 0, "{drain:?}: {stats:?}");
        assert!(
            result.pcp_drains[EXPLICIT] > 0,
            "{drain:?}: the core drained"
        );
        assert!(result.pcp_drain_pages[EXPLICIT] > 0, "{drain:?}");
        assert!(result.stats.drain_ns > 0, "{drain:?}: the drains cost time");
        // One allocator call takes zone locks one after the other (the retry after
        // reclaim: its drains, direct of every CPU's pagesets or the work's of every
        // zone, then its refill). Each is requested when the caller comes first again,
        // not at once after the one before, ahead of CPUs that asked earlier.
        assert_eq!(
            result.stats.requests_ahead, 0,
            "{drain:?}: zone-lock requests booked ahead of their time"
        );
        assert_eq!(result.work_done, 8 * 2, "{drain:?}: every loop finished");
        // Only the workqueue mode makes the faulting process wait for other CPUs.
        assert_eq!(
            stats.drain_wait_ns > 0,
            drain == DrainMode::Workqueue,
            "{drain:?}: {stats:?}"
        );
    }
}

#[test]
fn the_drain_policy_changes_the_run() {
    let direct = run_with(&spec(true), DrainMode::Direct);
    let queued = run_with(&spec(true), DrainMode::Workqueue);
    assert_eq!(direct.policy, "v6.7");
    assert_eq!(queued.policy, "v6.7/wq");
    assert_ne!(direct.score, queued.score);
    assert_ne!(direct.stats.drain_ns, queued.stats.drain_ns);
}

#[test]
fn direct_reclaim_runs_are_deterministic() {
    for drain in [DrainMode::Direct, DrainMode::Workqueue] {
        let a = serde_json::to_string(&run_with(&spec(true), drain)).unwrap();
        let b = serde_json::to_string(&run_with(&spec(true), drain)).unwrap();
        assert!(a == b, "{drain:?}: same seed, different output");
        let back: RunResult = serde_json::from_str(&a).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), a, "{drain:?}");
    }
}

#[test]
fn the_published_loop_never_drains_all_pagesets() {
    let result = run_with(&spec(false), DrainMode::Direct);
    assert_eq!(result.direct_reclaim, None);
    assert_eq!(result.pcp_drains[EXPLICIT], 0);
}
