//! `mmkit pcp-script` end to end: the worked examples of docs/PCP-SCRIPT.md run and show
//! the numbers of docs/reference/pcp-series.md §4 (O1, O2, O3, O7); parse errors exit 2 before
//! anything runs; runtime failures are events and the script goes on; --json parses.

use crate::common;

use common::mmkit;
use predicates::prelude::*;
use serde_json::Value;

fn example(name: &str) -> String {
    format!("{}/../../examples/pcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Run a script given on stdin with `args`, expecting success; the steps as JSON.
fn steps_of_stdin(script: &str, args: &[&str]) -> Vec<Value> {
    let output = mmkit()
        .args(["pcp-script", "--json", "-"])
        .args(args)
        .write_stdin(script)
        .output()
        .unwrap();
    steps_of(output)
}

/// Run an example with `args`, expecting success; the steps as JSON.
fn steps_of_example(name: &str, args: &[&str]) -> Vec<Value> {
    let output = mmkit()
        .args(["pcp-script", "--json", &example(name)])
        .args(args)
        .output()
        .unwrap();
    steps_of(output)
}

fn steps_of(output: std::process::Output) -> Vec<Value> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("verify ok"),
        "the summary goes to stderr: {stderr}"
    );
    let json: Value = serde_json::from_slice(&output.stdout).expect("stdout is JSON");
    json.as_array().expect("an array of steps").clone()
}

/// The step whose operation is `op` (the first, or the `nth` from 0).
fn step<'a>(steps: &'a [Value], op: &str, nth: usize) -> &'a Value {
    steps
        .iter()
        .filter(|s| s["op"] == op)
        .nth(nth)
        .unwrap_or_else(|| panic!("no step {op:?} #{nth}"))
}

/// The first zone's event delta `field` (a drain reason under `pcp_drain_pages`, or a
/// plain counter).
fn drained(step: &Value, reason: &str) -> u64 {
    step["zones"][0]["events"]["pcp_drain_pages"][reason]
        .as_u64()
        .unwrap()
}

fn pageset<'a>(step: &'a Value, field: &str) -> &'a Value {
    &step["zones"][0]["pagesets"][0][field]
}

#[test]
fn every_example_runs_under_every_preset() {
    let examples = [
        "process-exit.pcp",
        "order1-stream.pcp",
        "refill-below-high.pcp",
    ];
    for name in examples {
        for policy in [
            "base", "patch1", "patch3", "patch5", "patch7", "patch8", "patch9", "v6.7",
        ] {
            mmkit()
                .args(["pcp-script", &example(name), "--policy", policy])
                .assert()
                .success()
                .stdout(
                    predicate::str::contains("0 failed").and(predicate::str::contains("verify ok")),
                );
        }
    }
}

#[test]
fn process_exit_drains_everything_at_the_order1_free_before_patch1_only() {
    let base = steps_of_example("process-exit.pcp", &["--policy", "base"]);
    let normal = step(&base, "free 1 x pages", 0);
    assert_eq!(drained(normal, "free"), 63, "free #367 drains a batch");
    assert_eq!(pageset(normal, "count"), 304);
    let pgd = step(&base, "free pgd", 0);
    assert_eq!(
        drained(pgd, "free_high"),
        339,
        "base: free_high empties the pageset"
    );
    assert_eq!(pageset(pgd, "count"), 0);

    let patch1 = steps_of_example("process-exit.pcp", &["--policy", "patch1"]);
    let pgd = step(&patch1, "free pgd", 0);
    let events = &pgd["zones"][0]["events"];
    assert!(
        events["pcp_drain_pages"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == 0),
        "patch1 drains nothing at the order-1 free: {events}"
    );
    assert_eq!(pageset(pgd, "count"), 339);
}

#[test]
fn order1_stream_patch9_detects_the_stream_after_a_batch_of_frees() {
    let patch9 = steps_of_example("order1-stream.pcp", &["--policy", "patch9"]);
    let free33 = step(&patch9, "free 1 x stream", 0);
    assert_eq!(drained(free33, "free_high"), 66);
    let patch3 = steps_of_example("order1-stream.pcp", &["--policy", "patch3"]);
    assert_eq!(drained(step(&patch3, "free 1 x stream", 0), "free_high"), 0);
    let free184 = step(&patch3, "free 1 x stream", 2);
    assert_eq!(
        drained(free184, "free"),
        64,
        "32 order-1 blocks for a batch of 63"
    );
    let free185 = step(&patch3, "free 1 x stream", 3);
    assert_eq!(drained(free185, "free_high"), 306);
    let free217 = step(&patch3, "free 1 x stream", 4);
    assert_eq!(
        drained(free217, "free_high"),
        64,
        "FREE_HIGH_BATCH keeps a batch"
    );
}

#[test]
fn refills_grow_high_from_patch7_and_below_high_stops_it_from_patch8() {
    let highs = |steps: &[Value], ops: [&str; 5]| -> Vec<u64> {
        ops.iter()
            .map(|op| pageset(step(steps, op, 0), "high").as_u64().unwrap())
            .collect()
    };
    let stream = [
        "alloc 1 x 0 as a",
        "alloc 63 x 0 as a",
        "alloc 126 x 0 as a",
        "alloc 252 x 0 as a",
        "alloc 504 x 0 as a",
    ];
    let patch7 = steps_of_example("refill-below-high.pcp", &["--policy", "patch7"]);
    assert_eq!(highs(&patch7, stream), [430, 556, 808, 1312, 2000]);
    let free = step(&patch7, "free 1 x a", 0);
    assert_eq!(drained(free, "free"), 0, "patch7 ignores BELOW_HIGH");
    assert_eq!(free["zones"][0]["flags"][0], "BELOW_HIGH");

    let patch8 = steps_of_example("refill-below-high.pcp", &["--policy", "patch8"]);
    let free = step(&patch8, "free 1 x a", 0);
    assert_eq!(drained(free, "free"), 63);
    assert_eq!(pageset(free, "high"), 1937);
    assert_eq!(
        free["zones"][0]["flags"].as_array().unwrap().len(),
        0,
        "cleared after the drain"
    );
    let cpu1 = [
        "alloc 1 x 0 as b",
        "alloc 63 x 0 as b",
        "alloc 126 x 0 as b",
        "alloc 252 x 0 as b",
    ];
    let refills: Vec<u64> = cpu1
        .iter()
        .map(|op| {
            step(&patch8, op, 0)["zones"][0]["events"]["pcp_refill_pages"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        refills,
        [63, 126, 252, 304],
        "patch 5's refills, high stays 367"
    );
}

#[test]
fn parse_error_exits_2_naming_the_line_and_runs_nothing() {
    mmkit()
        .args(["pcp-script", "-"])
        .write_stdin("alloc 0 as a\n# fine\nalloc 11\nfree b\n")
        .assert()
        .code(2)
        .stdout("")
        .stderr(
            predicate::str::contains("<stdin>:3: order 11 is above MAX_ORDER")
                .and(predicate::str::contains("<stdin>:4: unknown name \"b\"")),
        );
}

#[test]
fn a_cpu_the_machine_lacks_is_a_usage_error() {
    mmkit()
        .args(["pcp-script", "-", "--cpus", "2"])
        .write_stdin("cpu1: alloc 0\ncpu2: alloc 0\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("<stdin>:2: cpu2 does not exist"));
}

#[test]
fn double_free_is_an_event_and_the_script_goes_on() {
    let steps = steps_of_stdin("alloc 0 as a\nfree a\nfree a\nalloc 0 as b\nfree b\n", &[]);
    assert_eq!(steps.len(), 5);
    let error = steps[2]["error"].as_str().expect("the second free fails");
    assert!(error.contains("double free"), "{error}");
    assert_eq!(steps[2]["line"], 3);
    assert_eq!(
        steps[2]["zones"][0]["events"]["pgfree"], 0,
        "a refused free changes nothing"
    );
    assert!(steps[3]["error"].is_null() && steps[4]["error"].is_null());
}

#[test]
fn freeing_a_stale_label_releases_the_block_reallocated_under_another() {
    let steps = steps_of_stdin("alloc 0 as a\nfree a\nalloc 0 as b\nfree a\nfree b\n", &[]);
    assert_eq!(steps[2]["note"], steps[0]["note"], "b got a's page back");
    let note = steps[3]["note"].as_str().unwrap();
    assert!(note.contains("use after free"), "{note}");
    assert!(steps[3]["error"].is_null(), "the allocator cannot tell");
    let error = steps[4]["error"].as_str().unwrap();
    assert!(error.contains("double free"), "{error}");
}

#[test]
fn json_steps_carry_line_cpu_pageset_and_events() {
    let steps = steps_of_stdin("# remote free\ncpu1: alloc 0 as a\ncpu2: free a\n", &[]);
    assert_eq!(steps.len(), 2);
    let alloc = &steps[0];
    assert_eq!(
        (
            alloc["step"].as_u64(),
            alloc["line"].as_u64(),
            alloc["cpu"].as_u64()
        ),
        (Some(1), Some(2), Some(1))
    );
    let zone = &alloc["zones"][0];
    assert_eq!(zone["zone"], "Normal");
    let pcp = &zone["pagesets"][0];
    assert_eq!(
        (
            pcp["cpu"].as_u64(),
            pcp["batch"].as_u64(),
            pcp["high_min"].as_u64(),
            pcp["high_max"].as_u64()
        ),
        (Some(1), Some(63), Some(367), Some(2000))
    );
    assert_eq!(pcp["count"], 62, "refilled 63, took 1");
    assert_eq!(zone["events"]["pcp_refill_pages"], 63);
    let free = &steps[1]["zones"][0];
    assert_eq!(
        free["pagesets"][0]["cpu"], 2,
        "the freeing CPU's pageset takes the page"
    );
    assert_eq!(free["pagesets"][0]["count"], 1);
}

#[test]
fn table_shows_only_nonzero_events_and_a_summary() {
    mmkit()
        .args([
            "pcp-script",
            &example("process-exit.pcp"),
            "--policy",
            "base",
        ])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("drain(free_high) 339p")
                .and(predicate::str::contains("drain(free) 63p"))
                .and(predicate::str::contains("pgalloc 0").not())
                .and(predicate::str::contains("summary: 7 steps, 0 failed")),
        );
}

#[test]
fn all_cpus_shows_every_pageset() {
    let steps = steps_of_stdin("alloc 0\n", &["--all-cpus", "--cpus", "4"]);
    let cpus: Vec<u64> = steps[0]["zones"][0]["pagesets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cpu"].as_u64().unwrap())
        .collect();
    assert_eq!(cpus, [0, 1, 2, 3]);
}

#[test]
fn workqueue_drain_and_irq_bypass_switches_change_the_policy() {
    let script = "cpu1: alloc 10 x 0\ncpu2: alloc 10 x 0\ndrain all\ncpu3 softirq: alloc 0\n";
    let steps = steps_of_stdin(script, &["--drain", "workqueue", "--irq-bypass"]);
    let note = steps[2]["note"].as_str().unwrap();
    assert!(
        note.starts_with("workqueue: cpus 1,2 drained themselves"),
        "{note}"
    );
    assert_eq!(steps[3]["zones"][0]["events"]["pcp_irq_bypass_events"], 1);
    assert_eq!(steps[3]["zones"][0]["events"]["pcp_refill_events"], 0);
}

#[test]
fn failures_of_operations_do_not_stop_the_script() {
    let script = "\
cpu1: offline
cpu1: alloc 0
cpu1: online
pcp-enable Normal
set percpu_pagelist_high_fraction=3
alloc 2 x 10 as big
free-batch big
free big
";
    let steps = steps_of_stdin(script, &["--zone", "Normal=4096", "--cpus", "2"]);
    let errors: Vec<bool> = steps.iter().map(|s| s["error"].is_string()).collect();
    assert_eq!(errors, [false, true, false, true, true, false, true, false]);
    let batch = steps[6]["error"].as_str().unwrap();
    assert!(batch.contains("freed as order 0; nothing freed"), "{batch}");
}

#[test]
fn unknown_policy_is_a_usage_error() {
    mmkit()
        .args(["pcp-script", "-", "--policy", "patch10"])
        .write_stdin("tick\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown policy \"patch10\""));
}

#[test]
fn the_guide_shows_what_the_examples_print_today() {
    let guide_path = format!("{}/../../docs/PCP-SCRIPT.md", env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(guide_path).unwrap();
    let runs = [
        ("base", "process-exit.pcp"),
        ("patch1", "process-exit.pcp"),
        ("patch3", "order1-stream.pcp"),
        ("patch9", "order1-stream.pcp"),
        ("patch7", "refill-below-high.pcp"),
        ("patch8", "refill-below-high.pcp"),
    ];
    for (policy, name) in runs {
        let script = std::fs::read_to_string(example(name)).unwrap();
        assert!(
            guide.contains(script.trim_end()),
            "docs/PCP-SCRIPT.md lacks {name} as it is"
        );
        let output = mmkit()
            .args(["pcp-script", "--policy", policy, &example(name)])
            .output()
            .unwrap();
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(
            guide.contains(text.trim_end()),
            "docs/PCP-SCRIPT.md shows another output for `mmkit pcp-script --policy {policy} \
             examples/pcp/{name}`; paste the current one:\n{text}"
        );
    }
}

#[test]
fn ticks_after_the_first_idle_one_change_nothing_so_a_billion_end_as_a_hundred_do() {
    let script = |times: &str| format!("alloc 2000 x 0 as a\nfree a\ntick {times}\n");
    let hundred = steps_of_stdin(&script("100"), &[]);
    let billion = steps_of_stdin(&script("1000000000"), &[]);
    let note = |steps: &[Value]| steps[2]["note"].as_str().unwrap().to_owned();
    assert!(note(&hundred).starts_with("ticks with work: 13 of 100"));
    assert!(note(&billion).starts_with("ticks with work: 13 of 1000000000"));
    assert!(hundred[2]["zones"].is_array());
    assert_eq!(hundred[2]["zones"], billion[2]["zones"]);
}

/// The pageset of `cpu` in a step's first zone.
fn pageset_of(step: &Value, cpu: u64) -> &Value {
    step["zones"][0]["pagesets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["cpu"] == cpu)
        .unwrap_or_else(|| panic!("cpu{cpu}'s pageset is not shown"))
}

#[test]
fn a_free_clamps_high_to_high_min_above_high_max_as_v6_7_does() {
    // The repro: the low watermark over 12 CPUs gives high_min 2604, above
    // high_max 2000. v6.7's clamp(0, 2604, 2000) is 2604 (0 is below hi), not 2000; the
    // next use clamps 2604 to 2000.
    let script = "alloc 1 x 0 as L1\ncpu2: free 1 x L1\ncpu2: alloc 2 x 0\n";
    let args = ["--min-free-kbytes", "100000"];
    for policy in ["patch7", "v6.7", "linux-6.18"] {
        let steps = steps_of_stdin(script, &[&args[..], &["--policy", policy]].concat());
        let cpu2 = pageset_of(&steps[1], 2);
        assert_eq!(
            (&cpu2["high_min"], &cpu2["high_max"]),
            (&2604.into(), &2000.into())
        );
        assert_eq!(cpu2["high"], 2604, "{policy}: the first free's clamp");
        // The second allocation refills: its clamp takes 2604 to 2000, and growth stops
        // at high_max.
        assert_eq!(pageset_of(&steps[2], 2)["high"], 2000, "{policy}");
    }
    // Before patch 7 `high` is fixed at high_min and never clamped.
    let steps = steps_of_stdin(script, &[&args[..], &["--policy", "base"]].concat());
    assert_eq!(pageset_of(&steps[1], 2)["high"], 2604);
}

/// Run a script on stdin with `args`, expecting success; the steps and the summary.
fn steps_and_summary(script: &str, args: &[&str]) -> (Vec<Value>, String) {
    let output = mmkit()
        .args(["pcp-script", "--json", "-"])
        .args(args)
        .write_stdin(script)
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&output.stderr).into_owned();
    (steps_of(output), summary)
}

fn note(step: &Value) -> &str {
    step["note"].as_str().unwrap_or_default()
}

#[test]
fn queued_drain_work_runs_later_and_the_requester_waits_for_the_last_cpu() {
    let script = "\
cpu1: alloc 10 x 0 as a
cpu2: alloc 10 x 0 as b
cpu0: drain all later
cpu3: drain all
cpu3: drain zone Normal
cpu2: offline
cpu2: run-work
cpu1: run-work
cpu1: run-work
";
    let (steps, summary) = steps_and_summary(script, &["--drain", "workqueue"]);
    assert!(
        note(&steps[2]).starts_with("workqueue: work queued on cpus 1,2; cpu0 waits"),
        "{}",
        note(&steps[2])
    );
    assert_eq!(pageset_of(&steps[2], 0)["count"], 0);
    assert_eq!(
        note(&steps[3]),
        "skipped: the drain mutex is held by cpu0's drain all of step 3 (waiting for cpus 1,2)"
    );
    let refused = steps[4]["error"].as_str().unwrap();
    assert!(
        refused.contains("would wait for the drain mutex"),
        "{refused}"
    );
    let offline = steps[5]["error"].as_str().unwrap();
    assert!(offline.contains("cpu2 has drain work queued"), "{offline}");
    assert_eq!(
        note(&steps[6]),
        "ran its drain work: 53p; cpu0's drain all of step 3 still waits for cpus 1"
    );
    assert_eq!(
        note(&steps[7]),
        "ran its drain work: 53p; cpu0's drain all of step 3 returns, having waited steps \
         3–8 for cpu2 at step 7, cpu1 at step 8"
    );
    assert_eq!(note(&steps[8]), "no drain work queued on cpu1");
    assert!(!summary.contains("still waiting"), "{summary}");
}

#[test]
fn drain_work_left_queued_at_the_end_is_named_in_the_summary() {
    let script = "cpu1: alloc 10 x 0\ncpu2: alloc 10 x 0\ndrain all later\ncpu1: run-work\n";
    let (_, summary) = steps_and_summary(script, &["--drain", "workqueue"]);
    assert!(
        summary.contains("still waiting: cpu0's drain all of step 3 (waiting for cpus 2)"),
        "{summary}"
    );
}

#[test]
fn a_workqueue_worker_drain_all_returns_at_once_in_workqueue_mode_only() {
    let script = "cpu1: alloc 10 x 0\ncpu2 worker: drain all\n";
    let steps = steps_of_stdin(script, &["--drain", "workqueue"]);
    assert!(
        note(&steps[1]).contains("PF_WQ_WORKER"),
        "{}",
        note(&steps[1])
    );
    assert_eq!(
        steps[1]["zones"][0]["events"]["pcp_drain_events"]["explicit"],
        0
    );
    let direct = steps_of_stdin(script, &[]);
    assert_eq!(note(&direct[1]), "drained 53p from cpus 1");
}

#[test]
fn later_without_the_workqueue_mode_is_a_usage_error() {
    mmkit()
        .args(["pcp-script", "-"])
        .write_stdin("drain all later\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "<stdin>:1: drain all later: `later` needs --drain workqueue",
        ));
}

#[test]
fn pcp_batch_scale_max_caps_the_refill_scale_and_stat_interval_paces_timed_ticks() {
    // Patch 5: each refill doubles batch << alloc_factor while alloc_factor < S.
    let script = "alloc 64 x 0\nalloc 126 x 0\nalloc 2000 x 0 as a\nfree a\ntick 1s\n";
    let refills = |args: &[&str]| {
        let steps = steps_of_stdin(script, args);
        let refill = |i: usize| steps[i]["zones"][0]["events"]["pcp_refill_pages"].clone();
        (refill(0), refill(1), note(&steps[4]).to_owned())
    };
    let (first, second, ticks) = refills(&[]);
    assert_eq!(
        (first, second),
        (189.into(), 252.into()),
        "63 + 126, then 252"
    );
    assert_eq!(
        ticks, "work done",
        "one tick in a second at the default 1 s"
    );
    let (first, second, ticks) =
        refills(&["--pcp-batch-scale-max", "0", "--stat-interval", "250ms"]);
    assert_eq!(
        (first, second),
        (126.into(), 126.into()),
        "S 0: every refill is one batch"
    );
    assert_eq!(ticks, "ticks with work: 4 of 4");
}

/// Memory runs out on cpu0 while 40 free pages sit on cpu1's pageset; then cpu0
/// allocates one page in the workqueue drain mode, `alloc_line` being that line.
fn stranded_script(alloc_line: &str) -> String {
    format!(
        "alloc 181 x 10 as big\nalloc 4000 x 0 as fill\ncpu1: free 40 x fill\n{alloc_line}\n\
         cpu2: drain all\ncpu1: run-work\n"
    )
}

#[test]
fn a_workqueue_allocation_gets_the_pages_other_cpus_drain_for_it() {
    // Before the slow path queued drain work it drained only the caller's pagesets, and
    // this allocation failed with 40 pages free on cpu1.
    let steps = steps_of_stdin(&stranded_script("alloc 0 as w"), &["--drain", "workqueue"]);
    assert_eq!(steps[3]["error"], Value::Null, "{}", steps[3]);
    let got = note(&steps[3]);
    assert!(
        got.starts_with("the slow path's drain: cpus 1 drained themselves, 40p; pfn "),
        "{got}"
    );
}

#[test]
fn a_workqueue_workers_allocation_does_not_wait_for_drain_work() {
    // A kworker's slow path returns from `drain_all_pages` at once in 4.11–5.19
    // ("workqueues cannot recurse"), so its retry fails with cpu1's 40 pages still there.
    let steps = steps_of_stdin(
        &stranded_script("worker: alloc 0 as w"),
        &["--drain", "workqueue", "--all-cpus"],
    );
    assert_ne!(steps[3]["error"], Value::Null, "{}", steps[3]);
    assert_eq!(pageset_of(&steps[3], 1)["count"], 40, "nothing drained");
    assert!(!note(&steps[3]).contains("queued work"), "{}", steps[3]);
    // A task on the same line gets the pages (the test above).
}

#[test]
fn a_workqueue_allocation_with_later_sleeps_until_the_drain_work_ran_then_retries() {
    let script = stranded_script("alloc 0 as w later");
    let args = ["--drain", "workqueue", "--all-cpus"];
    let (steps, summary) = steps_and_summary(&script, &args);
    assert_eq!(
        note(&steps[3]),
        "the slow path's drain queued work on cpus 1; cpu0 sleeps until each has run it"
    );
    assert_eq!(pageset_of(&steps[3], 1)["count"], 40, "nothing drained yet");
    assert_eq!(
        note(&steps[4]),
        "skipped: the drain mutex is held by cpu0's allocation of step 4 (waiting for cpus 1)"
    );
    let resumed = note(&steps[5]);
    assert!(
        resumed.starts_with(
            "ran its drain work: 40p; cpu0's allocation of step 4 returns, having waited \
             steps 4–6 for cpu1 at step 6; its retry: pfn "
        ),
        "{resumed}"
    );
    assert_eq!(steps[5]["error"], Value::Null);
    assert_eq!(pageset_of(&steps[5], 1)["count"], 0, "cpu1 drained itself");
    assert!(!summary.contains("still waiting"), "{summary}");
    assert!(summary.contains("verify ok"), "{summary}");
}
