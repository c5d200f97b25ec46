//! `mmkit bench`, short: the pagealloc sweep and a threads pattern run and emit JSON with
//! a result for every allocator; a build without the `peers` feature says which peers it
//! lacks and how to build them; the load latency reports each run.

mod common;

use common::{json_of, mmkit};
use predicates::prelude::*;

fn mmkit_json(args: &[&str]) -> serde_json::Value {
    json_of(mmkit().args(args))
}

fn names(report: &serde_json::Value) -> Vec<String> {
    report["allocators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn pagealloc_json_has_every_allocator_at_every_n() {
    let report = mmkit_json(&[
        "bench",
        "pagealloc",
        "--max-n",
        "64",
        "--orders",
        "0",
        "--repeat",
        "1",
        "--json",
    ]);
    assert_eq!(report["benchmark"], "pagealloc");
    let names = names(&report);
    for expected in [
        "mmkit",
        "mmkit-bulk",
        "mmkit-handle",
        "buddy",
        "talc",
        "system",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
    let results = report["results"].as_array().unwrap();
    // N = 1, 2, 4, …, 64: seven cells per allocator.
    assert_eq!(results.len(), 7 * names.len());
    for name in &names {
        let mine: Vec<_> = results
            .iter()
            .filter(|r| r["allocator"] == name.as_str())
            .collect();
        assert_eq!(mine.len(), 7, "{name}");
        for r in mine {
            let total = r["total"]["ns_per_page"].as_f64().unwrap();
            assert!(total > 0.0 && total.is_finite(), "{r}");
        }
    }
    assert!(report["machine"]["tsc"]["hz"].as_f64().unwrap() > 1e8);
    assert_eq!(report["targets"].as_array().unwrap().len(), 3);
}

#[test]
fn threads_remote_json_has_throughput_and_percentiles_per_allocator() {
    let report = mmkit_json(&[
        "bench",
        "threads",
        "--threads",
        "2",
        "--pattern",
        "remote",
        "--seconds",
        "0.05",
        "--only",
        "mmkit,system",
        "--json",
    ]);
    assert_eq!(names(&report), ["mmkit", "system"]);
    for r in report["results"].as_array().unwrap() {
        assert!(r["pages_per_second"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["alloc_ns_p99"].as_f64().unwrap() >= r["alloc_ns_p50"].as_f64().unwrap());
    }
    assert_eq!(report["results"][0]["ratio_to_mmkit"], 1.0);
}

#[test]
fn unknown_allocator_is_a_usage_error() {
    mmkit()
        .args(["bench", "pagealloc", "--only", "tcmalloc"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown allocator"));
}

/// The C/C++ peers come with the cargo feature `peers` only. Without it every run of all
/// allocators names them and the command that builds them, on one line of stderr (stdout
/// stays JSON), and asking for one of them is a usage error; with it they run.
#[test]
fn a_run_names_the_peers_this_build_lacks_and_how_to_build_them() {
    let output = mmkit()
        .args([
            "bench",
            "threads",
            "--threads",
            "2",
            "--seconds",
            "0.01",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let names = names(&report);
    let note = "mmkit bench: not built: mimalloc, jemalloc, snmalloc (C/C++ peers); \
                build them with `cargo build --release -p mmkit-cli --features peers`";
    if cfg!(feature = "peers") {
        assert!(!stderr.contains("not built"), "{stderr}");
        for peer in ["mimalloc", "jemalloc", "snmalloc"] {
            assert!(names.iter().any(|n| n == peer), "{peer} missing: {names:?}");
        }
    } else {
        assert_eq!(
            stderr.lines().filter(|l| l.contains("not built")).count(),
            1,
            "{stderr}"
        );
        assert!(stderr.contains(note), "{stderr}");
        assert_eq!(
            names,
            [
                "mmkit",
                "mmkit-bulk",
                "mmkit-handle",
                "mmkit-cache",
                "buddy",
                "talc",
                "system"
            ]
        );
        mmkit()
            .args(["bench", "pagealloc", "--only", "mmkit,jemalloc"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "jemalloc is not in this build: build mmkit with \
                 `cargo build --release -p mmkit-cli --features peers`",
            ));
    }
}

#[test]
fn latency_json_reports_every_run_and_their_median() {
    let report = mmkit_json(&[
        "bench", "latency", "--mib", "4", "--loads", "20000", "--repeat", "3", "--json",
    ]);
    assert_eq!(report["mib"], 4);
    assert_eq!(report["lines"], (4 << 20) / 64);
    let runs: Vec<f64> = report["runs_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ns| ns.as_f64().unwrap())
        .collect();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|ns| ns.is_finite() && *ns > 0.0));
    assert!(runs.contains(&report["median_ns"].as_f64().unwrap()));
}
