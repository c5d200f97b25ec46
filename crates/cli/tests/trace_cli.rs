//! `mmkit trace replay`, `mmkit trace high-order` and `mmkit trace blocks` on the committed
//! traces, and bad input exits with status 2.

use crate::common;

use common::{json_of, mmkit, trace_data as data};
use predicates::prelude::*;

#[test]
fn replay_prints_the_table_for_each_policy() {
    mmkit()
        .args(["trace", "replay", &data("compile.mmkit.gz")])
        .assert()
        .success()
        .stdout(predicate::str::contains("kernel (trace)"))
        .stdout(predicate::str::contains("linux-6.18"))
        .stdout(predicate::str::contains("base"));
}

#[test]
fn replay_json_has_one_prediction_per_policy() {
    let json = json_of(mmkit().args([
        "trace",
        "replay",
        &data("compile.mmkit.gz"),
        "--policies",
        "v6.7,linux-6.18",
        "--seed-lists",
        "stale",
        "--json",
    ]));
    let predicted = json["replay"]["predicted"].as_array().unwrap();
    assert_eq!(predicted.len(), 2);
    assert_eq!(json["replay"]["seed"], "stale");
}

#[test]
fn bad_input_exits_2() {
    let dir = std::env::temp_dir().join(format!("mmkit-trace-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.txt");
    std::fs::write(&garbage, "not a trace\n\u{1}\u{2}").unwrap();
    mmkit()
        .args(["trace", "replay", garbage.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no kmem page events"));
    let plain = dir.join("plain.txt");
    std::fs::write(
        &plain,
        "  a-1 [000] ..... 1.0: mm_page_free: page=0 pfn=0x100000 order=0\n",
    )
    .unwrap();
    mmkit()
        .args(["trace", "replay", plain.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--zoneinfo"));
    mmkit()
        .args([
            "trace",
            "replay",
            &data("compile.mmkit.gz"),
            "--policies",
            "v9",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("linux-6.18"));
    mmkit()
        .args(["trace", "replay", "/nonexistent/trace"])
        .assert()
        .code(2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A scratch folder of this test process.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mmkit-trace-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// With a zoneinfo cut in half, most pfns of the committed trace lie outside every zone:
/// an error naming the count and the cause (exit 2), not a table of zeros.
#[test]
fn a_replay_that_would_skip_most_events_is_refused() {
    let dir = scratch("half");
    let zoneinfo = std::fs::read_to_string(data("compile.zoneinfo.txt")).unwrap();
    let lines: Vec<&str> = zoneinfo.lines().collect();
    let half = dir.join("half.zoneinfo.txt");
    std::fs::write(&half, lines[..lines.len() / 2].join("\n") + "\n").unwrap();
    mmkit()
        .args(["trace", "replay", &data("compile.mmkit.gz"), "--zoneinfo"])
        .arg(&half)
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(format!(
            "compile.mmkit.gz with --zoneinfo {}: the replay would skip",
            half.display()
        )))
        .stderr(predicate::str::contains(
            "with a pfn outside every zone of the zoneinfo",
        ))
        .stderr(predicate::str::contains("more than 50 %"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The committed trace cut in half: refused (exit 2) with the reason and the flag that
/// overrides it; with `--allow-truncated` the events before the cut replay.
#[test]
fn a_truncated_trace_is_refused_unless_allowed() {
    let dir = scratch("cut");
    let bytes = std::fs::read(data("compile.mmkit.gz")).unwrap();
    let cut = dir.join("cut.mmkit.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    mmkit()
        .args(["trace", "replay"])
        .arg(&cut)
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("cut.mmkit.gz is truncated"))
        .stderr(predicate::str::contains("--allow-truncated"));
    mmkit()
        .args(["trace", "replay", "--allow-truncated"])
        .arg(&cut)
        .assert()
        .success()
        .stdout(predicate::str::contains("kernel (trace)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn high_order_counts_each_recording_and_the_mean_over_them() {
    let json = json_of(mmkit().args([
        "trace",
        "high-order",
        &data("compile.mmkit.gz"),
        &data("compile.mmkit.gz"),
        "--json",
    ]));
    assert_eq!(json["rows"].as_array().unwrap().len(), 2);
    let faults = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str().unwrap().starts_with("faults"))
        .unwrap();
    assert!(faults["mean"].as_f64().unwrap() > 0.0);
    assert_eq!(faults["sd"].as_f64().unwrap(), 0.0, "the same file twice");
    // Every high-order free has one owner, and every free after another one gap.
    let counts = &json["rows"][0]["counts"];
    let sum = |v: &serde_json::Value| {
        v.as_object()
            .unwrap()
            .values()
            .filter_map(|n| n.as_u64())
            .sum::<u64>()
    };
    let high: u64 = (1..4).map(|o| counts["frees"][o].as_u64().unwrap()).sum();
    assert!(high > 0, "the recording has high-order frees");
    assert_eq!(sum(&counts["owners"]), high);
    let pairs = &counts["pairs"];
    let after = counts["after_high"].as_u64().unwrap();
    let gaps = ["within_1ms", "within_100ms", "later"]
        .map(|k| pairs[k].as_u64().unwrap())
        .iter()
        .sum::<u64>();
    assert_eq!((gaps, sum(&pairs["second"])), (after, after));
    mmkit()
        .args(["trace", "high-order", &data("compile.mmkit.gz")])
        .assert()
        .success()
        .stdout(predicate::str::contains("% in softirq (RCU)"))
        .stdout(predicate::str::contains("% another task's, at a switch"))
        .stdout(predicate::str::contains(
            "after another: % CPU quiet between",
        ))
        .stdout(predicate::str::contains("mean ± sd"));
}

#[test]
fn high_order_without_a_task_leaves_its_events_out() {
    let faults = |extra: &[&str]| {
        let mut args = vec!["trace", "high-order", "--json"];
        args.extend_from_slice(extra);
        let file = data("compile.mmkit.gz");
        args.push(&file);
        let json = json_of(mmkit().args(&args));
        let row = &json["rows"][0];
        (
            row["counts"]["faults"].as_u64().unwrap(),
            row["dropped_events"].as_u64().unwrap(),
        )
    };
    let (all, none) = faults(&[]);
    assert_eq!(none, 0);
    assert_eq!(faults(&["--without-task", "no-such-task"]), (all, 0));
    let (without_cc1, dropped) = faults(&["--without-task", "cc1"]);
    assert!(dropped > 0, "the recording has cc1's events");
    assert!(
        without_cc1 < all,
        "cc1's faults go with it: {without_cc1} of {all}"
    );
}

#[test]
fn high_order_refuses_a_file_without_page_events() {
    let dir = scratch("high-order");
    let garbage = dir.join("garbage.txt");
    std::fs::write(&garbage, "not a trace\n").unwrap();
    mmkit()
        .args(["trace", "high-order", garbage.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no kmem page events"));
    mmkit()
        .args(["trace", "high-order", "/nonexistent/trace"])
        .assert()
        .code(2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The SCTP recordings `StreamParams::netperf` draws its packet buffers from
/// (`crates/trace/workloads/sctp-vm.sh`), with the messages `sctp_stream.py` reported
/// sending in each.
const SCTP: [(&str, u64); 3] = [
    ("sctp-1.mmkit.gz", 7793),
    ("sctp-2.mmkit.gz", 13732),
    ("sctp-3.mmkit.gz", 10293),
];

#[test]
fn blocks_of_the_sctp_recordings_are_the_netperf_models_packets() {
    let files: Vec<String> = SCTP.iter().map(|(f, _)| data(f)).collect();
    let per: Vec<String> = SCTP.iter().map(|(_, n)| n.to_string()).collect();
    let json = json_of(
        mmkit()
            .args(["trace", "blocks", "--json", "--per", &per.join(",")])
            .args(&files),
    );
    let messages = json["pooled_units"].as_f64().unwrap();
    assert_eq!(messages, 31818.0);
    let kernel = &json["pooled"]["kernel"];
    let allocated = |order: usize| kernel[order]["allocated"].as_f64().unwrap();
    // Every message has one order-2 chunk; the order-2 blocks beyond those are packets.
    let measured = [
        (2, (allocated(2) - messages) / messages),
        (3, allocated(3) / messages),
        (4, allocated(4) / messages),
    ];
    let params = mmkit_sim::workload::stream::StreamParams::netperf(1.0);
    assert_eq!(params.chunk_order, Some(2));
    for (order, share) in measured {
        let model = params.message_blocks[0]
            .iter()
            .find(|c| c.0 == order)
            .map_or(0.0, |c| c.1);
        assert!(
            (model - share).abs() < 0.0006,
            "order {order}: the model draws {model} per message, the recordings show {share:.4}"
        );
    }
    // The receiver (CPU 1) frees the packets in its task; the sender its chunks.
    assert!(kernel[3]["other_cpu_task"].as_f64().unwrap() > 0.98 * allocated(3));
    assert!(kernel[2]["same_cpu_task"].as_f64().unwrap() > 0.9 * messages);
}

#[test]
fn blocks_counts_pool_and_refuse_bad_units() {
    let one = data("compile.mmkit.gz");
    let json = json_of(mmkit().args(["trace", "blocks", "--json", &one, &one]));
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let order0 = |v: &serde_json::Value| v["movable"][0]["allocated"].as_u64().unwrap();
    assert!(order0(&rows[0]["fates"]) > 0);
    assert_eq!(order0(&json["pooled"]), 2 * order0(&rows[0]["fates"]));
    mmkit()
        .args(["trace", "blocks", "--per", "10", &one, &one])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("one per recording"));
    mmkit()
        .args(["trace", "blocks", "--per", "0", &one])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at least 1"));
    mmkit()
        .args(["trace", "blocks", "--per", "10", &one])
        .assert()
        .success()
        .stdout(predicate::str::contains("per unit of --per"));
}

/// The committed AF_UNIX recording (`af_unix.py --mib 64`): the writer's order-0
/// UNMOVABLE refills on CPU 0, which a pageset sized near its `count` keeps at one or two
/// batches, with the frees CPU 0 made before each.
#[test]
fn refills_lists_each_cpus_refills_in_order() {
    let file = data("afunix-64mib.mmkit.gz");
    let json = json_of(mmkit().args(["trace", "refills", "--json", &file]));
    let lists = json[0]["lists"].as_array().unwrap();
    let writer = lists
        .iter()
        .find(|l| l["cpu"] == 0 && l["order"] == 0 && l["migratetype"] == 0)
        .expect("CPU 0 refills its order-0 UNMOVABLE list");
    let u64s = |key: &str| -> Vec<u64> {
        let values = writer[key].as_array().unwrap();
        values.iter().map(|v| v.as_u64().unwrap()).collect()
    };
    assert_eq!(u64s("first"), [63, 126, 63, 126, 126, 63, 63, 126]);
    assert_eq!(writer["largest"], 126);
    assert_eq!(writer["mean_blocks"], 94.5);
    assert_eq!(u64s("frees_before"), [6, 0, 0, 0, 1, 0, 21, 0]);
    // The reader's refills are of its own (movable) pages, on CPU 1.
    assert!(lists.iter().any(|l| l["cpu"] == 1 && l["migratetype"] == 1));
    mmkit()
        .args(["trace", "refills", &file])
        .assert()
        .success()
        .stdout(predicate::str::contains("first sizes (frees before)"));
    mmkit()
        .args(["trace", "refills", "/nonexistent/trace"])
        .assert()
        .code(2);
}

/// The committed compile recording: 17 processes lived whole inside it; each program's
/// thirds by life hold all its lives, and its rate is its faults over its life.
#[test]
fn lives_sums_each_programs_whole_lives() {
    let file = data("compile.mmkit.gz");
    let json = json_of(mmkit().args(["trace", "lives", "--json", &file]));
    assert_eq!(json["files"][0][1], 17);
    let programs = json["programs"].as_array().unwrap();
    let lives: u64 = programs
        .iter()
        .map(|p| p["all"]["processes"].as_u64().unwrap())
        .sum();
    assert!(lives <= 17 && programs.len() == 8, "the default top 8");
    for p in programs {
        let all = &p["all"];
        let thirds: u64 = p["by_life"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["processes"].as_u64().unwrap())
            .sum();
        assert_eq!(thirds, all["processes"].as_u64().unwrap(), "{}", p["comm"]);
        let f = |key: &str| all[key].as_f64().unwrap();
        assert!((f("faults_per_ms") - f("mean_faults") / f("mean_life_ms")).abs() < 1e-9);
        assert!((0.0..=1.0).contains(&f("fault_position")));
    }
    assert_eq!(programs[0]["comm"], "cc1", "the most faults");
    assert_eq!(programs[0]["all"]["processes"], 2);
    let top2 = json_of(mmkit().args(["trace", "lives", "--json", "--top", "2", &file]));
    assert_eq!(top2["programs"].as_array().unwrap().len(), 2);
    mmkit()
        .args(["trace", "lives", &file])
        .assert()
        .success()
        .stdout(predicate::str::contains("the kbuild model:"));
    mmkit()
        .args(["trace", "lives", "--top", "0", &file])
        .assert()
        .code(2);
}
