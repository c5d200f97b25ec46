//! `mmkit percpu test` at a tenth of the published scale (100 outer cgroups): without partial
//! depopulation (v5.13) deleting the children gives nothing back; with v5.14 the `Percpu:`
//! figure and the resident memory the OS reports fall together, and keeping 1 group in
//! 11 (× 10 children) pins more of the memory than keeping 1 in 51 (× 50), as Dennis Zhou
//! explains in the thread.

use assert_cmd::Command;
use serde_json::Value;

fn percpu_test(args: &[&str]) -> Value {
    let output = Command::cargo_bin("mmkit")
        .unwrap()
        .args(["percpu", "test", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn kb(report: &Value, reading: &str, meter: &str) -> f64 {
    report[reading][meter].as_f64().unwrap()
}

/// After-deletion over after-creation, for `Percpu:` and for the resident memory.
fn ratios(report: &Value) -> (f64, f64) {
    (
        kb(report, "after_deletion", "percpu_kb") / kb(report, "after_creation", "percpu_kb"),
        kb(report, "after_deletion", "rss_kb") / kb(report, "after_creation", "rss_kb"),
    )
}

#[test]
fn v5_13_gives_nothing_back_until_chunks_are_free() {
    for page_size in ["4k", "64k"] {
        let report = percpu_test(&[
            "--outer",
            "100",
            "--inner",
            "50",
            "--policy",
            "v5.13",
            "--page-size",
            page_size,
        ]);
        assert_eq!(
            kb(&report, "after_deletion", "percpu_kb"),
            kb(&report, "after_creation", "percpu_kb"),
            "{page_size}"
        );
        let (_, rss) = ratios(&report);
        assert!(rss > 0.95, "{page_size}: resident fell to {rss:.2}");
    }
}

#[test]
fn v5_14_depopulates_and_the_os_sees_it() {
    let report = percpu_test(&["--outer", "100", "--inner", "50", "--policy", "v5.14"]);
    assert_eq!(report["cgroups"], 5100);
    assert!(kb(&report, "after_creation", "percpu_kb") > 50_000.0);
    let (percpu_50, rss_50) = ratios(&report);
    assert!(percpu_50 < 0.2, "Percpu kept {percpu_50:.2}");
    assert!(rss_50 < 0.2, "resident kept {rss_50:.2}");
    // The OS agrees with the model within a few pages per chunk.
    let rss = kb(&report, "after_deletion", "rss_kb");
    let percpu = kb(&report, "after_deletion", "percpu_kb");
    assert!(
        (rss - percpu).abs() <= percpu * 0.05,
        "resident {rss} vs Percpu {percpu}"
    );

    // 1 in 11 kept pins more than 1 in 51.
    let report = percpu_test(&["--outer", "100", "--inner", "10", "--policy", "v5.14"]);
    let (percpu_10, rss_10) = ratios(&report);
    assert!(
        percpu_10 > 2.0 * percpu_50,
        "{percpu_10:.2} vs {percpu_50:.2}"
    );
    assert!(rss_10 > 2.0 * rss_50, "{rss_10:.2} vs {rss_50:.2}");
    assert!(percpu_10 < 0.9, "still some gain: {percpu_10:.2}");
}

#[test]
fn sixty_four_k_pages_keep_more_pinned() {
    let report_4k = percpu_test(&["--outer", "100", "--inner", "50"]);
    let report_64k = percpu_test(&["--outer", "100", "--inner", "50", "--page-size", "64k"]);
    let (percpu_4k, _) = ratios(&report_4k);
    let (percpu_64k, rss_64k) = ratios(&report_64k);
    assert!(
        percpu_64k > 2.0 * percpu_4k,
        "{percpu_64k:.2} vs {percpu_4k:.2}"
    );
    assert!(percpu_64k < 0.8 && rss_64k < 0.8);
}

#[test]
fn bad_input_is_a_usage_error() {
    for args in [
        &["--inner", "1", "--policy", "v6.0"][..],
        &["--inner", "1", "--page-size", "8k"],
        &["--inner", "1", "--cpus", "0"],
        &["--outer", "0"],
        &["--inner", "1", "--objects", "/nonexistent/objects"],
    ] {
        let output = Command::cargo_bin("mmkit")
            .unwrap()
            .args(["percpu", "test"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("mmkit: error:"), "{args:?}: {stderr}");
    }
}
