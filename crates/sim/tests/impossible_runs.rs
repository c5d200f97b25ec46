//! Runs the simulator cannot do are refused with an error before anything runs, and the
//! smallest runs it can do do work (a stream on one CPU used to "run" with no pair and
//! print a table of zeros; 100,000 CPUs used to panic inside the engine).

use mmkit_core::Policy;
use mmkit_sim::engine::MAX_CPUS;
use mmkit_sim::{run, RunSpec, SimError, WorkloadKind};

fn spec(workload: WorkloadKind, cpus: u32, scale: f64) -> RunSpec {
    RunSpec {
        cpus: Some(cpus),
        scale,
        node_bytes: Some(256 << 20),
        ..RunSpec::new(workload)
    }
}

fn refused(spec: &RunSpec) -> String {
    let mut progressed = false;
    match run(spec, Policy::preset("base").unwrap(), &mut |_| {
        progressed = true
    }) {
        Err(SimError::Invalid(why)) => {
            assert!(!progressed, "{why}: refused after it started");
            why
        }
        Err(other) => panic!("{spec:?}: refused for the wrong reason: {other}"),
        Ok(_) => panic!("{spec:?}: ran"),
    }
}

#[test]
fn streams_need_a_pair_of_cpus() {
    for workload in [WorkloadKind::Netperf, WorkloadKind::Unix] {
        let why = refused(&spec(workload, 1, 0.005));
        assert_eq!(why, format!("{workload} needs at least 2 CPUs, not 1"));
        let smallest = run(
            &spec(workload, 2, 0.005),
            Policy::preset("base").unwrap(),
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("{workload} on 2 CPUs: {e}"));
        assert!(
            smallest.page_events > 0,
            "{workload} on 2 CPUs did something"
        );
    }
}

#[test]
fn every_workload_needs_a_cpu() {
    for workload in WorkloadKind::ALL {
        let why = refused(&spec(workload, 0, 0.01));
        assert!(
            why.starts_with(&format!("{workload} needs at least")),
            "{why}"
        );
    }
}

#[test]
fn cpus_beyond_the_engine_are_refused() {
    let why = refused(&spec(WorkloadKind::Kbuild, MAX_CPUS + 1, 0.01));
    assert_eq!(
        why,
        "65535 CPUs are too many to simulate: use at most 65534"
    );
}

/// The cache model keeps a CPU's line counter in the bits of a stamp's word its CPU
/// number does not need, and each counter must hold its L2's lines and a touch more: with
/// the published machine's 2-MiB L2 that is up to 32,767 CPUs.
#[test]
fn cpus_beyond_what_a_cache_stamp_holds_are_refused() {
    let why = refused(&spec(WorkloadKind::Kbuild, 32_768, 0.01));
    assert_eq!(
        why,
        "an L2 of 2097152 bytes on 32768 CPUs does not fit a cache stamp: use fewer CPUs or a \
         smaller L2"
    );
    assert!(spec(WorkloadKind::Kbuild, 32_767, 0.01).validate().is_ok());
}

#[test]
fn scales_outside_the_range_are_refused() {
    for scale in [0.0, -1.0, 100.5, f64::NAN] {
        let why = refused(&spec(WorkloadKind::Pagealloc, 1, scale));
        assert!(why.starts_with("scale "), "{why}");
    }
}

/// SLUB's objects per slab are kbuild's setting, from 1 (Linux's fewest) to 1,024.
#[test]
fn slab_objects_outside_the_range_or_for_a_stream_are_refused() {
    for objects in [0, 1025] {
        let why = refused(&RunSpec {
            kbuild_slub_min_objects: Some(objects),
            ..spec(WorkloadKind::Kbuild, 2, 0.01)
        });
        assert_eq!(why, format!("{objects} objects per slab: use 1 to 1024"));
    }
    let why = refused(&RunSpec {
        kbuild_slub_min_objects: Some(36),
        ..spec(WorkloadKind::Netperf, 2, 0.01)
    });
    assert_eq!(why, "SLUB's objects per slab are kbuild's, not netperf's");
}
