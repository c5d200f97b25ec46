//! The simulator's model against the defects issue 19 lists: each test fails on the
//! engine or workload as they were before the fix.

use mmkit_core::Policy;
use mmkit_sim::workload::kbuild::KbuildParams;
use mmkit_sim::{run, table, RunResult, RunSpec, WorkloadKind, WorkloadParams};

fn small(workload: WorkloadKind, cpus: u32, scale: f64) -> RunSpec {
    // kbuild runs on one socket, so its one node holds what two held: 2 GiB.
    let gib = if workload == WorkloadKind::Kbuild {
        2
    } else {
        1
    };
    RunSpec {
        cpus: Some(cpus),
        seed: 3,
        scale,
        node_bytes: Some(gib << 30),
        ..RunSpec::new(workload)
    }
}

fn run_preset(spec: &RunSpec, preset: &str) -> RunResult {
    run(spec, Policy::preset(preset).unwrap(), &mut |_| {})
        .unwrap_or_else(|e| panic!("{} / {preset}: {e}", spec.workload))
}

/// Item 1's check: no zone-lock request of run `what` was booked ahead of another CPU's
/// earlier event.
fn assert_requests_at_their_time(r: &RunResult, what: &str) {
    assert_eq!(
        r.stats.requests_ahead, 0,
        "{what}: zone-lock requests booked ahead of their time"
    );
}

/// Item 1: A zone-lock request is made at the virtual time it happens: no CPU books the lock
/// while another CPU has an earlier pending event (a stream sender used to compute and
/// then allocate in one step, asking for the lock 1.5–6 µs ahead of its time).
#[test]
fn no_zone_lock_request_is_booked_ahead_of_an_earlier_event() {
    for (workload, cpus, scale) in [
        (WorkloadKind::Netperf, 16, 0.02),
        (WorkloadKind::Unix, 16, 0.02),
        (WorkloadKind::Kbuild, 8, 0.02),
        (WorkloadKind::Pageout, 8, 0.2),
    ] {
        for preset in ["base", "patch3", "patch7"] {
            let r = run_preset(&small(workload, cpus, scale), preset);
            assert!(
                r.stats.lock_acquisitions > 0,
                "{workload}/{preset} took the lock"
            );
            assert_requests_at_their_time(&r, &format!("{workload}/{preset}"));
        }
    }
}

/// Item 1, a step due while its CPU is still busy: a vmstat tick's decay (patch 7 on)
/// can drain a pageset past the CPU's next step. That step used to run at its own time
/// with the CPU's clock past it, so its zone-lock requests were booked up to 300 µs
/// ahead of other CPUs' events (35 and 33 in the demo's kbuild patch 7 and 9 runs); it
/// now waits in the queue until the CPU is free, as a late tick does.
#[test]
fn a_step_due_while_its_cpu_drains_at_its_tick_waits_for_the_cpu() {
    // The demo's node size for the CPUs (no memory pressure: no drain of every pageset).
    let spec = RunSpec {
        cpus: Some(16),
        scale: 0.5,
        ..RunSpec::new(WorkloadKind::Kbuild)
    };
    for preset in ["patch7", "patch9"] {
        let r = run_preset(&spec, preset);
        assert!(r.stats.vmstat_ticks > 0 && r.stats.lock_acquisitions > 0);
        assert_requests_at_their_time(&r, &format!("kbuild/{preset}"));
    }
}

/// Item 1 under memory pressure: a call that takes zone locks one after another (the
/// slow path's `drain_all_pages`, which locks every pageset's zone in turn, then its
/// retry's refill) requests each hold when its CPU comes first again. Booked at once,
/// back to back, they used to come ahead of every CPU that had asked in between (9,160
/// of 61,104 acquisitions in this run with patch 7). The walker and the page count are
/// checked as the holds wait.
#[test]
fn a_call_that_drains_every_pageset_requests_each_hold_at_its_time() {
    let spec = RunSpec {
        cpus: Some(64),
        seed: 3,
        scale: 0.3,
        node_bytes: Some(2 << 30),
        verify_every: Some(20_000),
        ..RunSpec::new(WorkloadKind::Kbuild)
    };
    let r = run_preset(&spec, "patch7");
    assert!(
        r.pcp_drains[mmkit_core::page_alloc::DrainReason::Explicit as usize] > 0,
        "the slow path drained every pageset"
    );
    assert_requests_at_their_time(&r, "kbuild/patch7 on 2 GiB");
}

/// Item 2: lock contend% is spin over busy (unhalted) time, not over CPUs × wall time: with
/// 16 pairs on 64 CPUs, half the machine idles, and the share of busy time is the larger.
#[test]
fn lock_contend_is_a_share_of_busy_time() {
    let r = run_preset(&small(WorkloadKind::Unix, 64, 0.02), "base");
    assert!(r.stats.spin_ns > 0, "the lock was contended");
    let of_busy = 100.0 * r.stats.spin_ns as f64 / r.stats.busy_ns as f64;
    assert!((r.lock_contend_pct - of_busy).abs() < 1e-9);
    assert!(
        r.lock_contend_pct > 1.5 * r.spin_of_wall_pct,
        "{} vs {}",
        r.lock_contend_pct,
        r.spin_of_wall_pct
    );
}

/// Item 3: lmbench does a fixed amount of work: its free_high and alloc_zone compare per
/// message; netperf runs for a fixed time and compares totals.
#[test]
fn fixed_work_benchmarks_compare_counts_per_message() {
    let spec = small(WorkloadKind::Unix, 16, 0.02);
    let runs = [run_preset(&spec, "base"), run_preset(&spec, "patch3")];
    assert_ne!(runs[0].work_done, runs[1].work_done, "the scores differ");
    let rows = table(&runs);
    let per_message = |r: &RunResult| r.alloc_zone as f64 / r.work_done as f64;
    let expected = 100.0 * per_message(&runs[1]) / per_message(&runs[0]);
    assert!((rows[1].alloc_zone - expected).abs() < 1e-9);

    let spec = small(WorkloadKind::Netperf, 16, 0.02);
    let runs = [run_preset(&spec, "base"), run_preset(&spec, "patch3")];
    let rows = table(&runs);
    let expected = 100.0 * runs[1].alloc_zone as f64 / runs[0].alloc_zone as f64;
    assert!((rows[1].alloc_zone - expected).abs() < 1e-9);
}

/// Item 4: kbuild frees in bursts, so patch 5's allocation batch grows between them: patch 5
/// refills fewer times than patch 3 for the same build.
#[test]
fn patch5_grows_kbuilds_refill_batch() {
    // The whole build, so that both policies count the same processes.
    let spec = RunSpec {
        kbuild_steady_window: false,
        ..small(WorkloadKind::Kbuild, 8, 0.05)
    };
    let patch3 = run_preset(&spec, "patch3");
    let patch5 = run_preset(&spec, "patch5");
    assert_eq!(patch3.pgalloc, patch5.pgalloc, "the same build");
    assert!(
        (patch5.pcp_refills as f64) < 0.9 * patch3.pcp_refills as f64,
        "patch3 {} refills, patch5 {}",
        patch3.pcp_refills,
        patch5.pcp_refills
    );
}

/// Item 5: Decay runs in the stream workloads: every CPU's first vmstat tick falls inside the
/// first second (the ticks' phases are spread over one interval), and the measurement
/// window, which opens after the warm-up, holds a tick of every CPU.
#[test]
fn every_cpu_ticks_inside_a_stream_runs_window() {
    let spec = small(WorkloadKind::Netperf, 16, 1.0);
    let r = run_preset(&spec, "patch7");
    assert!(r.measured_ns < r.wall_ns, "a warm-up is left out");
    assert!(
        r.stats.vmstat_ticks >= 16,
        "{} ticks in the window of 16 CPUs",
        r.stats.vmstat_ticks
    );
}

/// Item 6: kbuild frees kernel blocks of orders 1–3 besides the PGD.
#[test]
fn kbuild_frees_high_order_kernel_blocks() {
    // At the measured rate (97 blocks per 9,802,005 faults) a run needs well over 100,000
    // faults to hold a few: scale 1 makes about 1.7 million (17 blocks expected; scale 0.2,
    // about 3).
    let spec = small(WorkloadKind::Kbuild, 8, 1.0);
    let r = run_preset(&spec, "base");
    // Were every allocation but the PGDs (order 1, one per process) of order 0, the pages
    // would be the calls plus one per process.
    assert!(
        r.stats.pages_allocated > r.stats.alloc_calls + r.work_done,
        "{} pages in {} allocations by {} processes",
        r.stats.pages_allocated,
        r.stats.alloc_calls,
        r.work_done
    );
}

/// Item 6, where the pairs come from: an exit frees its emptied VMA slabs after its page
/// tables, and its PGD waits for the next process on the CPU (Linux's lazy `mm` drop at
/// the switch), so every slab but an exit's first follows a high-order free, and so does
/// the PGD after them: 4 of each process's 5 high-order frees, with 4 slabs each. With no
/// slabs, every PGD follows a page table or a page. The slabs' order is SLUB's: order 1
/// at 36 objects a slab (the published machine's count), order 0 (not high) at 8 CPUs'
/// default 20.
#[test]
fn an_exits_last_slabs_and_the_next_starts_pgd_are_consecutive_high_order_frees() {
    let run_with = |slabs: [f64; 4], slub_min_objects: Option<u32>| {
        let params = KbuildParams {
            jobs_per_cpu: 3,
            kernel_blocks_per_fault: [0.0; 3],
            cross_cpu_free_share: 0.0,
            exit_slab_blocks: slabs,
            slub_min_objects,
            steady_window: false,
            ..KbuildParams::scaled(0.05)
        };
        let spec = RunSpec {
            params: Some(WorkloadParams::Kbuild(params)),
            kbuild_steady_window: false,
            ..small(WorkloadKind::Kbuild, 2, 1.0)
        };
        let r = run_preset(&spec, "base");
        assert_eq!(r.work_done, 6, "two CPUs, three processes each");
        (r.stats.high_order_frees, r.stats.high_order_after_high)
    };
    assert_eq!(run_with([0.0, 0.0, 0.0, 1.0], Some(36)), (30, 24));
    assert_eq!(run_with([0.0; 4], Some(36)), (6, 0));
    // Order-0 slabs: only the PGDs are high-order, each after a slab.
    assert_eq!(run_with([0.0, 0.0, 0.0, 1.0], None), (6, 0));
}

/// Item 6, measured: kbuild's kernel blocks of orders 1–3 come at the rate `mmkit trace
/// high-order` measured on a kernel build (11 order-1, 8 order-2 and 78 order-3 pageset
/// frees among 9,802,005 faults, `KbuildParams::kernel_blocks_per_fault`): 581 pages
/// beyond one per block per 9,802,005 faults, 5.9 per 100,000. Beyond the PGDs (one
/// extra page each), the blocks add under 10 pages per 100,000 allocated. (At the
/// earliest rate, 630 blocks of orders 1–3 per 274,297 faults, the whole machine's, they
/// added about 670.)
#[test]
fn kbuild_frees_kernel_blocks_at_the_measured_rate() {
    let spec = small(WorkloadKind::Kbuild, 8, 0.2);
    let r = run_preset(&spec, "base");
    let pgd_pages = r.work_done;
    let extra = r.stats.pages_allocated - r.stats.alloc_calls - pgd_pages;
    assert!(
        (extra as f64) < 10e-5 * r.stats.pages_allocated as f64,
        "{extra} pages of kernel blocks beyond one per block among {} allocated",
        r.stats.pages_allocated
    );
}

/// Runs must measure a steady state (item 5's rule, for kbuild): by default the window
/// opens once half the processes have exited and closes when the last one starts, so it
/// leaves out the pagesets' first fill and the tail, and the build time is the middle's
/// pace (the window's length per process that exited in it, times the build's
/// processes); `kbuild_steady_window: false` measures the whole build.
#[test]
fn kbuilds_steady_window_leaves_out_the_start_and_the_tail() {
    let steady = small(WorkloadKind::Kbuild, 8, 1.0);
    assert!(steady.kbuild_steady_window, "the middle is the default");
    let whole = RunSpec {
        kbuild_steady_window: false,
        ..steady.clone()
    };
    let (w, s) = (run_preset(&whole, "base"), run_preset(&steady, "base"));
    let jobs = w.work_done;
    assert_eq!(
        w.measured_ns, w.wall_ns,
        "without it the whole build is measured"
    );
    assert_eq!(
        w.score,
        w.wall_ns as f64 / 1e6,
        "the build time is the last exit"
    );
    assert_eq!(s.wall_ns, w.wall_ns, "the window does not change the run");
    // The page events the run simulated are the same, whichever part is measured: a
    // speed figure divides by the run's, not the window's.
    assert_eq!(s.run_page_events, w.run_page_events);
    assert_eq!(
        w.page_events, w.run_page_events,
        "the whole build is measured"
    );
    assert!(
        s.page_events > 0 && s.page_events < s.run_page_events,
        "{} of {} page events in the window",
        s.page_events,
        s.run_page_events
    );
    assert!(
        s.measured_ns > 0 && s.measured_ns < s.wall_ns / 2,
        "{} of {} ns",
        s.measured_ns,
        s.wall_ns
    );
    // Processes that exited inside the window: at most the half left when it opened,
    // less those still running when the last one started.
    assert!(
        s.work_done > 0 && 2 * s.work_done <= jobs,
        "{} of {jobs}",
        s.work_done
    );
    let pace_ms = s.measured_ns as f64 / s.work_done as f64 * jobs as f64 / 1e6;
    assert!(
        (s.score - pace_ms).abs() < 1e-9 * pace_ms,
        "build time {} ms, the middle's pace {pace_ms} ms",
        s.score
    );
    // The middle runs every slot, the whole build idles through its tail: at the
    // middle's pace the build is shorter than it was.
    assert!(s.score < w.score, "{} ms against {} ms", s.score, w.score);
    // At most the processes that exited inside it, and what the later ones faulted
    // before the window closed.
    assert!(
        s.stats.alloc_calls * 3 < w.stats.alloc_calls * 2,
        "{} of {} allocations in the window",
        s.stats.alloc_calls,
        w.stats.alloc_calls
    );
}

/// A unix row whose pagesets keep a batch at a `free_high` drain (patch 3 on a machine
/// whose CPUs each have three batches' worth of cache) warms up for
/// `StreamParams::batched_warmup_ms` and measures a window as long as the base row's;
/// with patch 3 but too little cache per CPU (no `PCPF_FREE_HIGH_BATCH`), it warms up as
/// long as base.
#[test]
fn rows_that_keep_a_batch_warm_up_shorter_and_measure_as_long() {
    let spec = small(WorkloadKind::Unix, 16, 0.02);
    let params = mmkit_sim::workload::stream::StreamParams::unix(0.02);
    let ms = |ns: u64| ns as f64 / 1e6;
    let base = run_preset(&spec, "base");
    let patch3 = run_preset(&spec, "patch3");
    assert_eq!(ms(base.wall_ns), params.duration_ms);
    let measured = params.duration_ms - params.warmup_ms;
    assert_eq!(ms(patch3.wall_ns), params.batched_warmup_ms + measured);
    assert!(params.batched_warmup_ms < params.warmup_ms);
    assert_eq!(base.measured_ns, patch3.measured_ns);

    let mut small_cache = spec.clone();
    small_cache.machine = Some(mmkit_sim::MachineSpec {
        llc_bytes: 1 << 20,
        ..WorkloadKind::Unix.machine()
    });
    let unbatched = run_preset(&small_cache, "patch3");
    assert_eq!(ms(unbatched.wall_ns), params.duration_ms);
}

/// "kbuild also reports the memory held in pagesets as % of used memory": each row's
/// `pcp_of_used_pct` is its own run's mean pageset pages over its mean used pages, and
/// patch 7's auto-tuned pagesets hold a larger share than base's fixed ones.
#[test]
fn the_table_gives_the_pagesets_share_of_used_memory() {
    let spec = small(WorkloadKind::Kbuild, 8, 0.05);
    let runs = [run_preset(&spec, "base"), run_preset(&spec, "patch7")];
    let rows = table(&runs);
    for (row, run) in rows.iter().zip(&runs) {
        assert!(run.used_pages_mean > 0.0 && run.pcp_pages_mean > 0.0);
        let share = 100.0 * (run.pcp_pages_mean / run.used_pages_mean);
        assert_eq!(row.pcp_of_used_pct, share, "{}", row.policy);
        assert!(share > 0.0 && share < 100.0, "{}: {share}", row.policy);
    }
    assert!(
        rows[1].pcp_of_used_pct > rows[0].pcp_of_used_pct,
        "patch7 {} against base {}",
        rows[1].pcp_of_used_pct,
        rows[0].pcp_of_used_pct
    );
}

/// A mid-life unmap frees its pages as an exit does, as many a step as go onto the
/// pageset with no chance of a drain, at most 32 (Linux: `zap_pte_range` gathers them
/// for `release_pages` → `free_unref_page_list`): half the faults' pages unmapped in
/// mid-life add few steps, where one page a step added one step per page.
#[test]
fn a_midlife_unmap_frees_its_pages_up_to_32_a_step() {
    let run_with = |share: f64| {
        let params = KbuildParams {
            jobs_per_cpu: 3,
            kernel_blocks_per_fault: [0.0; 3],
            cross_cpu_free_share: 0.0,
            midlife_free_share: share,
            steady_window: false,
            ..KbuildParams::scaled(1.0)
        };
        let spec = RunSpec {
            params: Some(WorkloadParams::Kbuild(params)),
            kbuild_steady_window: false,
            verify_every: Some(1000),
            ..small(WorkloadKind::Kbuild, 2, 1.0)
        };
        let r = run_preset(&spec, "base");
        assert_eq!(r.work_done, 6, "two CPUs, three processes each");
        assert_eq!(r.stats.requests_ahead, 0);
        (r.stats.steps, r.stats.alloc_calls)
    };
    let (steps_without, faults_without) = run_with(0.0);
    let (steps_with, faults_with) = run_with(0.5);
    let unmapped = 0.5 * faults_with as f64;
    assert!(unmapped > 2_000.0, "{faults_with} faults");
    // The unmaps change the random draws, so the faults differ a little; a page a step
    // would add about `unmapped` steps.
    let added =
        steps_with as f64 - steps_without as f64 * faults_with as f64 / faults_without as f64;
    assert!(
        added < unmapped / 8.0,
        "{added:.0} steps added for about {unmapped:.0} pages unmapped in mid-life"
    );
}
