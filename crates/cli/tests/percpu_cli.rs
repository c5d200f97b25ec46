//! `mmkit percpu test` at a tenth of the published scale (100 outer cgroups): without partial
//! depopulation (v5.13) deleting the children gives nothing back; with v5.14 the `Percpu:`
//! figure and the resident memory the OS reports fall together, and keeping 1 group in
//! 11 (× 10 children) pins more of the memory than keeping 1 in 51 (× 50), as Dennis Zhou
//! explains in the thread. The first chunk is there before any cgroup; the linux-6.18
//! model against what the measuring VM showed; and `--live` on this machine's kernel
//! (root: it measures and removes every cgroup it made, also when it is stopped by a
//! signal; otherwise it says it skipped).

use crate::common;

use common::{json_of, mmkit};
use serde_json::Value;

use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

fn percpu_test(args: &[&str]) -> Value {
    json_of(mmkit().args(["percpu", "test", "--json"]).args(args))
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
        let output = mmkit()
            .args(["percpu", "test"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("mmkit: error:"), "{args:?}: {stderr}");
    }
}

#[test]
fn before_counts_the_first_chunk() {
    // PFN_DOWN(size_sum) pages in every unit: v5.14 with modules, 59 pages × 4 CPUs;
    // the measuring VM's 6.18, 57 pages × 2 CPUs; no first chunk, nothing.
    for (args, before_kb) in [
        (&["--kernel", "v5.14"][..], 944.0),
        (&["--kernel", "linux-6.18"], 456.0),
        (&["--first-chunk", "none"], 0.0),
    ] {
        let report = percpu_test(&[&["--outer", "1", "--inner", "0"][..], args].concat());
        assert_eq!(kb(&report, "before", "percpu_kb"), before_kb, "{args:?}");
        // Nothing gives the first chunk back, not even removing every cgroup.
        assert!(kb(&report, "after_removing_all", "percpu_kb") >= before_kb);
    }
    // The layout and the unit as Linux picks them: "u1048576" for 2 CPUs.
    let report = percpu_test(&["--outer", "1", "--inner", "0", "--kernel", "linux-6.18"]);
    assert_eq!(report["unit_size"], 1 << 20);
    assert_eq!(report["first_chunk"]["static_size"], 202_520);
    assert_eq!(report["first_chunk"]["dynamic_size"], 30_952);
}

/// Bytes of `Percpu:` per memory cgroup on the measuring VM (Linux 6.18, 2 CPUs, cgroup
/// v1), once the populated space left from boot is used up: batches of 5,000 and 10,000
/// `mkdir`s each grew it by 4,231 bytes per cgroup (docs/PERCPU.md).
const MEASURED_BYTES_PER_CGROUP: f64 = 4231.0;

#[test]
fn linux_6_18_objects_are_within_ten_percent_of_the_measured_cgroup() {
    let report = percpu_test(&["--kernel", "linux-6.18", "--outer", "2000", "--inner", "0"]);
    let listed = report["bytes_per_cpu_per_cgroup"].as_f64().unwrap() * 2.0;
    let grown = (kb(&report, "after_creation", "percpu_kb") - kb(&report, "before", "percpu_kb"))
        * 1024.0
        / 2000.0;
    for (what, bytes) in [("the object list", listed), ("the model's growth", grown)] {
        let off = bytes / MEASURED_BYTES_PER_CGROUP - 1.0;
        assert!(
            off.abs() < 0.10,
            "{what}: {bytes:.0} bytes per cgroup, {:+.1} %",
            off * 100.0
        );
    }
}

#[test]
fn linux_6_18_model_lands_where_the_measuring_vm_did() {
    // docs/reference/workloads.md §2.5: 1000 × 50 on the 6.18 VM grew Percpu: to
    // 211,416 kB and kept 16,632 kB (7.9 %) 10 s after removing the children.
    let report = percpu_test(&["--kernel", "linux-6.18", "--outer", "1000", "--inner", "50"]);
    let created = kb(&report, "after_creation", "percpu_kb");
    assert!((created / 211_416.0 - 1.0).abs() < 0.02, "{created} kB");
    let kept = kb(&report, "after_deletion", "percpu_kb") / created;
    assert!((0.05..0.10).contains(&kept), "kept {:.1} %", kept * 100.0);
}

/// The memory hierarchy of this machine, as `--live` finds it (v1's memory mount or a
/// cgroup2 mount), and whether we are root: `None` if `--live` cannot run here.
fn live_hierarchy() -> Option<PathBuf> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0");
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let found = mounts.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory"))
            .then(|| PathBuf::from(f[1]))
    });
    if !root || found.is_none() {
        eprintln!("skipped: --live needs root and a cgroup v1 memory hierarchy here");
    }
    found.filter(|_| root)
}

#[test]
fn live_skips_without_root() {
    // As root, drop to nobody to see the refusal (setpriv is util-linux's).
    let mut command = if live_hierarchy().is_some() {
        let mut command = Process::new("setpriv");
        command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        command.arg(assert_cmd::cargo::cargo_bin("mmkit"));
        command
    } else {
        Process::new(assert_cmd::cargo::cargo_bin("mmkit"))
    };
    let Ok(output) = command
        .args(["percpu", "test", "--live", "--outer", "2", "--inner", "1"])
        .output()
    else {
        eprintln!("skipped: setpriv is not installed");
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.starts_with("percpu test --live: skipped: not running as root"),
        "{stdout}"
    );
}

#[test]
fn live_measures_this_kernel_and_removes_every_cgroup() {
    let Some(hierarchy) = live_hierarchy() else {
        return;
    };
    let child = Process::new(assert_cmd::cargo::cargo_bin("mmkit"))
        .args(["percpu", "test", "--live", "--json"])
        .args(["--outer", "5", "--inner", "2", "--settle-seconds", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ours = hierarchy.join(format!("mmkit-percpu-{}", child.id()));
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["cgroups"], 15);
    assert_eq!(report["cgroup_version"], 1);
    for reading in [
        "before",
        "after_creation",
        "after_deletion",
        "after_removing_all",
    ] {
        assert!(kb(&report, reading, "percpu_kb") > 0.0, "{reading}");
    }
    // Our 15 cgroups and our directory were there (others may come and go meanwhile).
    let count = |reading: &str| report[reading]["memory_cgroups"].as_f64().unwrap();
    assert!(
        count("after_creation") >= count("before") + 16.0 - 5.0,
        "{report}"
    );
    assert!(!ours.exists(), "{} is left", ours.display());
}

#[test]
fn live_removes_its_cgroups_when_stopped_by_a_signal() {
    let Some(hierarchy) = live_hierarchy() else {
        return;
    };
    for signal in ["TERM", "INT"] {
        // Far more cgroups than it will make before the signal arrives.
        let mut child = Process::new(assert_cmd::cargo::cargo_bin("mmkit"))
            .args([
                "percpu", "test", "--live", "--outer", "30000", "--inner", "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ours = hierarchy.join(format!("mmkit-percpu-{}", child.id()));
        // Wait until it has made a few (it has 30,000 to make, so no clock is needed).
        while std::fs::read_dir(&ours)
            .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
            .unwrap_or(0)
            < 3
        {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("SIG{signal}: it ended ({status}) before making 3 cgroups");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let pid = child.id().to_string();
        assert!(Process::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap()
            .success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "SIG{signal}: {stderr}");
        assert!(
            stderr.contains("interrupted: every cgroup this run made was removed"),
            "{stderr}"
        );
        assert!(!ours.exists(), "SIG{signal}: {} is left", ours.display());
    }
}
