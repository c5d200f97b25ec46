//! `mmkit reclaim`: each experiment runs at small scale and shows its effect; bad input
//! is refused with a usage error.

use crate::common;

use assert_cmd::Command;
use common::mmkit;
use predicates::str::contains;
use serde_json::Value;

fn reclaim(args: &[&str]) -> Command {
    let mut cmd = mmkit();
    cmd.arg("reclaim").args(args);
    cmd
}

fn json(args: &[&str]) -> Value {
    let out = reclaim(args).arg("--json").assert().success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

#[test]
fn congestion_shows_the_shared_bit_unthrottling_an_unbalanced_node() {
    let rows = json(&["congestion"]);
    let row = |policy: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["policy"] == policy)
            .unwrap()
            .clone()
    };
    for policy in ["shared", "separate"] {
        let r = row(policy);
        assert_eq!(r["throttled_after_kswapd"], true, "{policy}");
        assert_eq!(r["balanced_after_root_memory_reclaim"], false, "{policy}");
        assert_eq!(r["throttled_after_writeback_and_kswapd"], false, "{policy}");
    }
    assert_eq!(row("shared")["throttled_after_root_memory_reclaim"], false);
    assert_eq!(row("separate")["throttled_after_root_memory_reclaim"], true);
}

#[test]
fn lru_size_reads_grow_with_cpus_only_for_per_cpu_counters() {
    let rows = json(&[
        "lru-size",
        "--memcgs",
        "40",
        "--pages",
        "64",
        "--touches",
        "128",
        "--cpus",
        "4,64",
    ]);
    let reads = |cpus: u64, policy: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["cpus"] == cpus && r["policy"] == policy)
            .unwrap()["lru_size_reads_per_touch"]
            .as_f64()
            .unwrap()
    };
    assert!(reads(4, "zone-sizes") > 0.0, "reclaim ran");
    assert_eq!(reads(4, "zone-sizes"), reads(64, "zone-sizes"));
    assert!(reads(64, "percpu-counters") > 8.0 * reads(4, "percpu-counters"));
}

/// Zombie cgroups (removed, pinned by their swapped-out pages) stay for the whole run,
/// and reclaim sizes their lists on every pass: more counter reads per touch, and with
/// per-CPU counters a read per CPU for each of them.
#[test]
fn lru_size_with_zombies_reads_their_lists_too() {
    let run = |zombies: &str| {
        json(&[
            "lru-size",
            "--memcgs",
            "40",
            "--pages",
            "64",
            "--touches",
            "64",
            "--cpus",
            "64",
            "--zombies",
            zombies,
        ])
    };
    let reads = |rows: &Value, policy: &str| {
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["policy"] == policy)
            .unwrap()
            .clone();
        (row["lru_size_reads_per_touch"].as_f64().unwrap(), row)
    };
    let (without, _) = reads(&run("0"), "zone-sizes");
    let with = run("200");
    let (zone, row) = reads(&with, "zone-sizes");
    assert_eq!(row["zombies"], 200);
    assert_eq!(
        row["zombies_left"], 200,
        "the zombies stay for the whole run"
    );
    assert!(
        zone > 2.0 * without,
        "{zone} reads per touch with zombies, {without} without"
    );
    let (percpu, _) = reads(&with, "percpu-counters");
    assert!(
        percpu > 8.0 * zone,
        "{percpu} per-CPU reads per touch, {zone} zone reads"
    );
}

#[test]
fn pageout_counts_fewer_rmap_updates_when_batched() {
    let rows = json(&[
        "pageout",
        "--workers",
        "1",
        "--seconds",
        "0.05",
        "--repeat",
        "1",
        "--file-kib",
        "256",
    ]);
    let updates = |i: usize| rows[i]["rmap_counter_updates_per_loop"].as_f64().unwrap();
    assert_eq!(rows[0]["policy"], "per-page");
    assert_eq!(rows[1]["policy"], "batched");
    // 64 pages in 4 folios of 16: per page 4 updates; batched 64 + 3 per folio.
    assert_eq!(updates(0), 256.0);
    assert_eq!(updates(1), 64.0 + 4.0 * 3.0);
    assert_eq!(rows[0]["pages_reclaimed_per_loop"], 64.0);
}

#[test]
fn pageout_with_forked_children_batches_the_removal_on_shared_folios() {
    let rows = json(&[
        "pageout",
        "--workers",
        "1",
        "--seconds",
        "0.05",
        "--repeat",
        "1",
        "--file-kib",
        "256",
        "--io",
        "none",
        "--fork",
        "2",
    ]);
    let updates = |i: usize| rows[i]["rmap_counter_updates_per_loop"].as_f64().unwrap();
    // Each child maps the 64 pages (4 folios of 16) that the parent maps too and exits:
    // per page 4 updates, batched 64 + 3 per folio; then the parent's pageout as without
    // --fork.
    assert_eq!(updates(0), 3.0 * 256.0);
    assert_eq!(updates(1), 3.0 * (64.0 + 4.0 * 3.0));
    assert_eq!(rows[0]["pages_reclaimed_per_loop"], 64.0);
}

#[test]
fn bad_input_is_a_usage_error() {
    reclaim(&["pageout", "--workers", "0"])
        .assert()
        .code(2)
        .stderr(contains("--workers"));
    reclaim(&["pageout", "--file-kib", "6"])
        .assert()
        .code(2)
        .stderr(contains("--file-kib"));
    reclaim(&["pageout", "--fork", "1025"])
        .assert()
        .code(2)
        .stderr(contains("--fork"));
    reclaim(&["lru-size", "--cpus", "0"])
        .assert()
        .code(2)
        .stderr(contains("--cpus"));
}
