//! `mmkit sim`: small runs print the table, JSON is identical for the same seed, plots are
//! written, and bad input is refused with a usage error.

use crate::common;

use assert_cmd::Command;
use common::{json_of, mmkit};
use predicates::str::contains;

fn sim(args: &[&str]) -> Command {
    let mut cmd = mmkit();
    cmd.args(["sim", "--cpus", "8", "--scale", "0.005"])
        .args(args);
    cmd
}

/// `mmkit sim` with `args` must exit 2 with an error naming `flag`, printing nothing.
fn refused(args: &[&str], flag: &str) {
    let out = sim(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(flag), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

/// The JSON of the first run of `mmkit sim` with `args`, which must succeed.
fn first_run(args: &[&str]) -> serde_json::Value {
    let out = sim(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["runs"][0].clone()
}

#[test]
fn sim_prints_a_table_relative_to_the_first_policy() {
    sim(&["--workload", "unix", "--policies", "base,patch3"])
        .assert()
        .success()
        .stdout(contains("lock contend%"))
        .stdout(contains("patch3"));
}

#[test]
fn the_breakdown_per_unit_of_work_divides_the_runs_totals() {
    let args = ["--workload", "unix", "--policies", "base,patch3"];
    let text = sim(&args).output().unwrap();
    let json = sim(&[&args[..], &["--json"]].concat()).output().unwrap();
    assert!(text.status.success() && json.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let header = text
        .lines()
        .position(|l| l.starts_with("per message:"))
        .unwrap();
    for (i, line) in text.lines().skip(header + 1).take(2).enumerate() {
        let run = &json["runs"][i];
        let stats = &run["stats"];
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], run["policy"].as_str().unwrap());
        let acq = f(&stats["lock_acquisitions"]);
        assert!(acq > 0.0, "{line}");
        let per_message = acq / f(&run["work_done"]);
        assert_eq!(words[1], format!("{per_message:.3}"), "{line}");
        let levels = f(&stats["lock_levels"]) / acq;
        assert!(levels > 0.0, "drains of order-0..3 blocks merge: {line}");
        assert_eq!(words[3], format!("{levels:.2}"), "{line}");
        let spin = f(&stats["spin_ns"]) / f(&run["work_done"]);
        assert_eq!(words[6], format!("{spin:.0}"), "{line}");
        let machine = &run["machine"];
        let cpus = f(&machine["sockets"]) * f(&machine["cpus_per_socket"]);
        let busy = 100.0 * f(&stats["busy_ns"]) / (cpus * f(&run["measured_ns"]));
        assert!(busy > 0.0 && busy <= 100.0, "{line}");
        assert_eq!(words[9], format!("{busy:.1}"), "{line}");
    }
}

/// CPU busy% of a netperf run, from its breakdown line.
fn netperf_busy(extra: &[&str]) -> f64 {
    let args = ["--workload", "netperf", "--policies", "base"];
    let out = sim(&[&args[..], extra].concat()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text
        .lines()
        .position(|l| l.starts_with("per message:"))
        .unwrap();
    let line = text.lines().nth(header + 1).unwrap();
    line.split_whitespace().last().unwrap().parse().unwrap()
}

#[test]
fn a_window_of_one_message_makes_the_pairs_take_turns_and_idles_the_cpus() {
    let pipelined = netperf_busy(&[]);
    let turns = netperf_busy(&["--window", "1"]);
    // Sixteen messages in flight keep both ends of a pair busy; one makes each end wait
    // for the other's wake-up and work.
    assert!(pipelined > 80.0, "window 16: {pipelined}% busy");
    assert!(
        turns < pipelined - 20.0,
        "window 1: {turns}% vs {pipelined}%"
    );
    // More work on the receiver than the sender can do makes the receiver the pace.
    let slow_receiver = netperf_busy(&["--work-ns", "2000,16000"]);
    assert!(
        slow_receiver < pipelined,
        "{slow_receiver}% vs {pipelined}%"
    );
}

#[test]
fn stream_knobs_refuse_other_workloads_and_impossible_values() {
    for args in [
        &["--workload", "kbuild", "--window", "2"][..],
        &["--workload", "netperf", "--window", "0"],
        &["--workload", "unix", "--work-ns", "1500"],
        &["--workload", "unix", "--work-ns", "1,2,3"],
        &["--workload", "unix", "--work-ns", "1500,2000000000"],
    ] {
        refused(args, "--w");
    }
}

/// `--warmup-ms` sets every row's warm-up, the batched rows' too, and keeps the measured
/// window's length (unix: 500 ms × `--scale`).
#[test]
fn a_warm_up_given_is_every_rows_and_the_window_keeps_its_length() {
    for args in [
        &["--workload", "kbuild", "--warmup-ms", "5"][..],
        &["--workload", "netperf", "--warmup-ms=-1"],
        &["--workload", "unix", "--warmup-ms", "NaN"],
        &["--workload", "unix", "--warmup-ms", "2000000"],
    ] {
        refused(args, "--warmup-ms");
    }
    let out = sim(&[
        "--workload",
        "unix",
        "--policies",
        "base,patch3",
        "--warmup-ms",
        "10",
        "--json",
    ])
    .output()
    .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for run in json["runs"].as_array().unwrap() {
        // 10 ms of warm-up and 0.5 s × 0.005 measured.
        assert_eq!(
            run["wall_ns"].as_u64(),
            Some(12_500_000),
            "{}",
            run["policy"]
        );
    }
}

#[test]
fn a_longer_wake_up_idles_the_cpus_of_pairs_that_take_turns() {
    for args in [
        &["--workload", "kbuild", "--wakeup-us", "5"][..],
        &["--workload", "netperf", "--wakeup-us=-1"],
        &["--workload", "unix", "--wakeup-us", "NaN"],
        &["--workload", "unix", "--wakeup-us", "2000000"],
    ] {
        refused(args, "--wakeup-us");
    }
    // Ends that take turns wait for each other's wake-up: ten times the default wait
    // leaves their CPUs idle longer.
    let turns = netperf_busy(&["--window", "1"]);
    let slow_wake = netperf_busy(&["--window", "1", "--wakeup-us", "50"]);
    assert!(
        slow_wake < turns - 10.0,
        "wake-up 50 µs: {slow_wake}% vs 5 µs: {turns}%"
    );
}

#[test]
fn role_epoch_is_a_streams_and_refuses_impossible_values() {
    for args in [
        &["--workload", "kbuild", "--role-epoch-ms", "100"][..],
        &["--workload", "netperf", "--role-epoch-ms=-5"],
        &["--workload", "netperf", "--role-epoch-ms", "NaN"],
        &["--workload", "netperf", "--role-epoch-ms", "2000000"],
    ] {
        refused(args, "--role-epoch-ms");
    }
    // Roles that swap every 100 µs move the receivers' frees from CPU to CPU, which
    // changes what the pagesets drain; with none (0) the run is another.
    let drains = |ms: &str| {
        let args = [
            "--workload",
            "netperf",
            "--policies",
            "patch7",
            "--json",
            "--role-epoch-ms",
            ms,
        ];
        let run = &first_run(&args);
        (run["pcp_drains"].clone(), run["pcp_refills"].clone())
    };
    assert_ne!(drains("0"), drains("0.1"));
    // lmbench's pairs never swap unless asked: then its writers free too, and their
    // refills change.
    let refills = |extra: &[&str]| {
        let mut args = vec!["--workload", "unix", "--policies", "patch5", "--json"];
        args.extend_from_slice(extra);
        first_run(&args)["pcp_refills"].clone()
    };
    assert_eq!(refills(&[]), refills(&["--role-epoch-ms", "0"]));
    assert_ne!(refills(&[]), refills(&["--role-epoch-ms", "1"]));
}

#[test]
fn llc_share_sets_the_cache_models_reach_and_refuses_impossible_values() {
    for args in [
        &["--workload", "unix", "--llc-share", "0"][..],
        &["--workload", "unix", "--llc-share=-1"],
        &["--workload", "unix", "--llc-share", "NaN"],
        &["--workload", "unix", "--llc-share", "100"],
    ] {
        refused(args, "--llc-share");
    }
    // A larger share keeps pages in reach longer: fewer cold lines per message, once the
    // caches are warm: 15 ms of warm-up, base's at this scale (patch 5 keeps a batch, so
    // its own would be 5 ms, too short for caches that start empty to fill).
    let cold_per_message = |share: &str| {
        let args = [
            "--workload",
            "unix",
            "--policies",
            "patch5",
            "--json",
            "--warmup-ms",
            "15",
            "--llc-share",
            share,
        ];
        let run = &first_run(&args);
        run["cache"]["cold_lines"].as_f64().unwrap() / run["work_done"].as_f64().unwrap()
    };
    let (small, large) = (cold_per_message("0.5"), cold_per_message("16"));
    assert!(
        large < small / 2.0,
        "share 16: {large} cold lines per message, 0.5: {small}"
    );
}

#[test]
fn sim_json_is_deterministic() {
    let run = || {
        sim(&[
            "--workload",
            "netperf",
            "--policies",
            "base,patch9",
            "--json",
            "--seed",
            "3",
        ])
        .output()
        .unwrap()
    };
    let (a, b) = (run(), run());
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let json: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(json["table"][0]["score"], 100.0);
    assert_eq!(json["runs"][1]["policy"], "patch9");
}

#[test]
fn sim_writes_svg_plots() {
    let dir = std::env::temp_dir().join(format!("mmkit-sim-plot-{}", std::process::id()));
    sim(&[
        "--workload",
        "pageout",
        "--policies",
        "base,patch7",
        "--plot",
    ])
    .arg(&dir)
    .assert()
    .success();
    for name in [
        "pageout-pcp-memory.svg",
        "pageout-lock-wait.svg",
        "pageout-high-patch7.svg",
    ] {
        let svg = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(svg.starts_with("<svg"), "{name}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sim_refuses_unknown_workloads_and_presets() {
    sim(&["--workload", "kbuild2"])
        .assert()
        .code(2)
        .stderr(contains("unknown workload"));
    sim(&["--workload", "unix", "--policies", "base,patch10"])
        .assert()
        .code(2)
        .stderr(contains("unknown policy"));
}

#[test]
fn node_gib_sizes_the_machine_and_bad_sizes_are_refused() {
    let out = sim(&[
        "--workload",
        "unix",
        "--policies",
        "base",
        "--node-gib",
        "4",
        "--json",
    ])
    .output()
    .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &json["runs"][0];
    assert_eq!(run["machine"]["node_pages"], 4u64 << 18);
    // The drained pages are reported by reason, beside the drain counts.
    assert_eq!(run["pcp_drain_pages"].as_array().unwrap().len(), 5);
    for bad in ["0", "513"] {
        sim(&["--workload", "unix", "--node-gib", bad])
            .assert()
            .failure()
            .stderr(contains("--node-gib"));
    }
}

/// A machine whose page descriptors or cache stamps this host will not reserve address
/// space for is an error that says what was refused and how much, exit status 1 and
/// nothing on stdout; it used to abort (status 134, "memory allocation of … bytes
/// failed"), as Rust does on a refused heap allocation. Here a 2-TiB machine (8 GiB of
/// descriptors, 4 GiB of stamps) under address-space limits (`ulimit -v`, in KiB) that
/// refuse the one and then the other.
#[test]
fn a_machine_the_host_cannot_reserve_is_an_error_not_an_abort() {
    let run_under = |limit_kib: &str| {
        common::mmkit_under_address_limit(
            limit_kib,
            &[
                "sim",
                "--workload",
                "kbuild",
                "--policies",
                "base",
                "--threads",
                "1",
                "--sockets",
                "4",
                "--node-gib",
                "512",
                "--scale",
                "0.001",
            ],
        )
    };
    for (limit_kib, refused) in [
        ("4000000", "page descriptors need 8.00 GiB"),
        ("10000000", "cache stamps need 4.00 GiB"),
    ] {
        let out = run_under(limit_kib);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "ulimit -v {limit_kib}: {err}");
        assert!(err.starts_with("mmkit: error: "), "{err}");
        assert!(err.contains(refused), "ulimit -v {limit_kib}: {err}");
        assert!(
            err.contains("ulimit -v"),
            "the message names the limit: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn sim_refuses_impossible_machines_and_thread_counts() {
    let refuse = |args: &[&str], message: &str| {
        mmkit()
            .arg("sim")
            .args(args)
            .assert()
            .code(2)
            .stderr(contains(message));
    };
    refuse(
        &["--workload", "unix", "--cpus", "1"],
        "unix needs at least 2 CPUs, not 1",
    );
    refuse(
        &["--workload", "netperf", "--cpus", "1"],
        "netperf needs at least 2 CPUs, not 1",
    );
    refuse(
        &["--workload", "kbuild", "--cpus", "100000"],
        "100000 CPUs are too many to simulate",
    );
    refuse(
        &["--workload", "kbuild", "--cpus", "0"],
        "kbuild needs at least 1 CPU, not 0",
    );
    refuse(
        &[
            "--workload",
            "unix",
            "--cpus",
            "4",
            "--scale",
            "0.005",
            "--threads",
            "0",
        ],
        "--threads must be at least 1",
    );
    refuse(
        &["--workload", "unix", "--scale", "0"],
        "scale 0 is invalid",
    );
}

#[test]
fn pcp_knobs_reach_the_simulated_kernel_and_bad_values_are_refused() {
    let json = json_of(&mut sim(&[
        "--workload",
        "unix",
        "--policies",
        "v6.7",
        "--node-gib",
        "4",
        "--pcp-batch-scale-max",
        "3",
        "--stat-interval",
        "250ms",
        "--json",
    ]));
    let machine = &json["runs"][0]["machine"];
    assert_eq!(machine["pcp_batch_scale_max"], 3);
    assert_eq!(machine["stat_interval_ms"], 250);
    let name = machine["name"].as_str().unwrap();
    assert!(name.ends_with("-S3-stat250ms"), "{name}");
    for (flag, bad) in [
        ("--pcp-batch-scale-max", "7"),
        ("--pcp-batch-scale-max", "-1"),
        ("--stat-interval", "0"),
        ("--stat-interval", "0ms"),
        ("--stat-interval", "soon"),
    ] {
        sim(&["--workload", "unix", flag, bad])
            .assert()
            .code(2)
            .stderr(contains(flag));
    }
}

#[test]
fn sim_runs_the_machine_a_zoneinfo_snapshot_describes() {
    let zoneinfo = format!(
        "{}/tests/data/linux-6.18-2cpu/proc/zoneinfo",
        env!("CARGO_MANIFEST_DIR")
    );
    // The snapshot's 2-CPU VM: Normal 327,680 managed pages, low 6,265, so the pagesets
    // get its batch 63, high_min 3,132 and high_max 20,480.
    mmkit()
        .args(["sim", "--scale", "0.005", "--workload", "unix"])
        .args(["--policies", "linux-6.18", "--zoneinfo", &zoneinfo])
        .assert()
        .success()
        .stdout(contains("(2 CPUs; pageset batch 63, high 3132..20480)"));
    let bad = std::env::temp_dir().join(format!("mmkit-sim-zoneinfo-{}", std::process::id()));
    std::fs::write(&bad, "Node 0, zone      DMA\n        managed  3840\n").unwrap();
    for (file, message) in [
        (bad.display().to_string(), "no populated Normal zone"),
        (
            "/nonexistent/zoneinfo".to_string(),
            "--zoneinfo /nonexistent/zoneinfo",
        ),
    ] {
        mmkit()
            .args(["sim", "--workload", "unix", "--zoneinfo", &file])
            .assert()
            .code(2)
            .stdout("")
            .stderr(contains(message));
    }
    std::fs::remove_file(&bad).unwrap();
}

/// `--warm-pagesets` starts the pagesets from the snapshot (here 3,138 and 9,069 pages
/// on CPUs 0 and 1), which changes what the run counts; without `--zoneinfo` there is no
/// snapshot and the flag is refused.
#[test]
fn warm_pagesets_start_the_run_from_the_snapshot_and_need_a_zoneinfo() {
    let zoneinfo = format!(
        "{}/tests/data/linux-6.18-2cpu/proc/zoneinfo",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = |warm: bool| {
        let mut command = Command::cargo_bin("mmkit").unwrap();
        command
            .args(["sim", "--scale", "0.005", "--workload", "unix", "--json"])
            .args(["--policies", "linux-6.18", "--zoneinfo", &zoneinfo]);
        if warm {
            command.arg("--warm-pagesets");
        }
        let out = command.assert().success().get_output().stdout.clone();
        String::from_utf8(out).unwrap()
    };
    assert_ne!(run(false), run(true));
    Command::cargo_bin("mmkit")
        .unwrap()
        .args(["sim", "--workload", "unix", "--warm-pagesets"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(contains("--zoneinfo"));
}

#[test]
fn placement_moves_the_unix_pairs_and_is_refused_elsewhere() {
    // 64 CPUs, 2 sockets of 32: spread gives each zone 8 of the 16 pairs, one-node all 16
    // to node 0's zone, whose one lock is then more contended.
    let contention = |placement: &str| {
        let json = json_of(
            mmkit()
                .args([
                    "sim",
                    "--workload",
                    "unix",
                    "--cpus",
                    "64",
                    "--scale",
                    "0.02",
                ])
                .args(["--policies", "base", "--json", "--placement", placement])
                // The placement, not the calibration's hand-off cost, is under test: with
                // a hand-off of several lines each, both placements saturate the lock.
                .args(["--lock-lines", "0.3"]),
        );
        json["runs"][0]["lock_contend_pct"].as_f64().unwrap()
    };
    let (spread, one_node) = (contention("spread"), contention("one-node"));
    assert!(
        one_node > 1.5 * spread,
        "spread {spread} %, one-node {one_node} %"
    );
    sim(&["--workload", "netperf", "--placement", "one-node"])
        .assert()
        .code(2)
        .stderr(contains("--placement one-node: only the unix workload"));
    sim(&["--workload", "unix", "--placement", "packed"])
        .assert()
        .code(2)
        .stderr(contains("--placement: unknown placement \"packed\""));
}

/// `--direct-reclaim` runs pageout on a node full of page cache; its faults drain the
/// pagesets through the core, `--drain workqueue` makes the rows say `/wq`, and the
/// variant is refused for any other workload.
#[test]
fn pageout_direct_reclaim_drains_in_the_chosen_mode() {
    for (drain, policy) in [("direct", "v6.7"), ("workqueue", "v6.7/wq")] {
        sim(&[
            "--workload",
            "pageout",
            "--node-gib",
            "1",
            "--policies",
            "v6.7",
            "--direct-reclaim",
            "--drain",
            drain,
        ])
        .assert()
        .success()
        .stdout(contains("direct reclaim:"))
        .stdout(contains(policy));
    }
    sim(&["--workload", "unix", "--direct-reclaim"])
        .assert()
        .code(2)
        .stderr(contains("--direct-reclaim"));
    sim(&["--workload", "pageout", "--drain", "sideways"])
        .assert()
        .code(2)
        .stderr(contains("--drain"));
}

#[test]
fn sockets_simulates_that_many_of_the_published_machines_sockets() {
    let sockets_of = |extra: &[&str]| {
        let args = ["--workload", "kbuild", "--policies", "base", "--json"];
        let out = sim(&[&args[..], extra].concat()).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["runs"][0]["machine"]["sockets"].as_u64().unwrap()
    };
    // kbuild runs on one of the published machine's two sockets unless told otherwise.
    assert_eq!(sockets_of(&[]), 1);
    assert_eq!(sockets_of(&["--sockets", "2"]), 2);
    for bad in ["0", "9"] {
        let out = sim(&["--workload", "kbuild", "--sockets", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--sockets {bad}");
        assert!(String::from_utf8(out.stderr).unwrap().contains("--sockets"));
    }
}

#[test]
fn jobs_per_cpu_sets_the_builds_length_and_refuses_what_it_cannot_be() {
    let processes = |jobs: &str| {
        let args = [
            "--workload",
            "kbuild",
            "--policies",
            "base",
            "--whole-build",
        ];
        let run = first_run(&[&args[..], &["--jobs-per-cpu", jobs, "--json"]].concat());
        run["work_done"].as_u64().unwrap()
    };
    // The whole build counts every process: jobs × the 8 CPUs.
    assert_eq!(processes("1"), 8);
    assert_eq!(processes("3"), 24);
    for bad in ["0", "4801"] {
        refused(
            &["--workload", "kbuild", "--jobs-per-cpu", bad],
            &format!("--jobs-per-cpu {bad}: {bad} processes per CPU: use 1 to 4800"),
        );
    }
    refused(
        &["--workload", "netperf", "--jobs-per-cpu", "2"],
        "--jobs-per-cpu 2: processes per CPU are kbuild's, not netperf's",
    );
}

/// `--timing` adds one speed line per run on standard error, its virtual seconds those of
/// the run's JSON, and changes nothing on standard output: host time is never part of a
/// result.
#[test]
fn timing_prints_each_runs_speed_on_stderr_and_leaves_stdout_as_it_was() {
    let args = ["--workload", "unix", "--policies", "base,patch3", "--json"];
    let plain = sim(&args).output().unwrap();
    let timed = sim(&[&args[..], &["--timing"]].concat()).output().unwrap();
    assert!(plain.status.success() && timed.status.success());
    assert_eq!(
        plain.stdout, timed.stdout,
        "--timing changed the runs' output"
    );
    let json: serde_json::Value = serde_json::from_slice(&timed.stdout).unwrap();
    let stderr = String::from_utf8(timed.stderr).unwrap();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("speed: "))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    for (line, run) in lines.iter().zip(json["runs"].as_array().unwrap()) {
        let virtual_s = run["wall_ns"].as_f64().unwrap() / 1e9;
        let policy = run["policy"].as_str().unwrap();
        assert!(
            line.starts_with(&format!(
                "speed: unix / {policy} on 8 CPUs: {virtual_s:.3} virtual s in "
            )),
            "{line}"
        );
        assert!(
            line.contains("× real time") && line.ends_with("×)"),
            "{line}"
        );
    }
    assert!(
        !String::from_utf8(plain.stderr).unwrap().contains("speed: "),
        "speed lines only with --timing"
    );
}

/// `crates/bench/realtime.sh`, the speed target's command: two binaries alternated (here
/// the same one twice), a speed line a run and a summary a binary that reads them back
/// (a summary of "0 runs" would mean its pattern no longer matches `--timing`'s line);
/// a path that is not an executable is refused before anything runs.
#[test]
fn the_realtime_script_alternates_binaries_and_summarises_their_speed_lines() {
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let script = format!("{root}/crates/bench/realtime.sh");
    let bin = assert_cmd::cargo::cargo_bin("mmkit");
    let bin = bin.to_str().unwrap();
    let out = std::process::Command::new("bash")
        .args([&script, bin, bin])
        .env("ROUNDS", "2")
        .env(
            "ARGS",
            "--workload unix --cpus 8 --scale 0.005 --policies base --threads 1",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rounds = stdout.lines().filter(|l| l.starts_with("round ")).count();
    assert_eq!(rounds, 4, "{stdout}");
    let summaries: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{bin}: ")))
        .collect();
    assert_eq!(summaries.len(), 2, "{stdout}");
    for line in summaries {
        assert!(
            line.contains(": 2 runs; x real time (CPU) median "),
            "{line}"
        );
    }
    let refused = std::process::Command::new("bash")
        .args([&script, "/nonexistent/mmkit"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stdout.is_empty());
}
