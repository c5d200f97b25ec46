//! `mmkit sim calibrate` in shards: each shard fits its candidates of stage 1's discrete
//! choice in a process of its own, and the merge writes byte for byte what the single run
//! writes; shard sets that are not one whole calibration are refused, naming the file or
//! the missing candidate.

use crate::common;

use common::{mmkit, Scratch};

/// A small training set: the stream workloads' base lock figures and lmbench's miss rate
/// (stage 3), no kbuild (stage 2 would make the test slow).
const TARGETS: &str = r#"{
  "policy": "base",
  "targets": [
    { "workload": "netperf", "metric": "lock_contend_pct", "value": 2.1, "source": "test" },
    { "workload": "unix", "metric": "lock_contend_pct", "value": 51.4, "source": "test" },
    { "workload": "unix", "metric": "cache_miss_pct", "value": 0.2, "source": "test" }
  ]
}"#;

/// `mmkit sim calibrate --targets T --scale 0.01` + `extra`: exit status and stderr.
fn calibrate(targets: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["sim", "calibrate", "--targets", targets, "--scale", "0.01"];
    args.extend(extra);
    let output = mmkit().args(&args).output().expect("mmkit runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn shards_merge_into_the_single_calibration_and_partial_sets_are_refused() {
    let scratch = Scratch::new("calibrate_shards");
    let targets = scratch.file("targets.json", TARGETS);
    let single = scratch.path("single.json");
    let (code, stderr) = calibrate(&targets, &["--out", &single]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("spread") && stderr.contains("one-node"),
        "{stderr}"
    );

    let shards: Vec<String> = (0..2)
        .map(|i| {
            let path = scratch.path(&format!("s{i}.json"));
            let shard = format!("{i}/2");
            let (code, stderr) = calibrate(&targets, &["--shard", &shard, "--shard-out", &path]);
            assert_eq!(code, 0, "{stderr}");
            path
        })
        .collect();
    let merged = scratch.path("merged.json");
    let (code, stderr) = calibrate(
        &targets,
        &["--merge", &shards[0], &shards[1], "--out", &merged],
    );
    assert_eq!(code, 0, "{stderr}");
    let single_text = std::fs::read_to_string(&single).unwrap();
    assert_eq!(single_text, std::fs::read_to_string(&merged).unwrap());

    // The record names both candidates, and the fitted placement is the better one.
    let calibration: serde_json::Value = serde_json::from_str(&single_text).unwrap();
    let tried = calibration["tried"].as_array().unwrap();
    assert_eq!(tried.len(), 2, "{single_text}");
    let best = tried
        .iter()
        .min_by(|a, b| {
            let sse = |v: &serde_json::Value| v["stage1_sse"].as_f64().unwrap();
            sse(a).total_cmp(&sse(b))
        })
        .unwrap();
    assert_eq!(
        best["unix_placement"],
        calibration["fitted"]["unix_placement"]
    );

    // One shard alone: the missing candidate and the command that fits it are named.
    let (code, stderr) = calibrate(
        &targets,
        &["--merge", &shards[0], "--out", &scratch.path("x.json")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("candidate 1 (one-node)") && stderr.contains("--shard 1/2"),
        "{stderr}"
    );
    assert!(
        !scratch.dir().join("x.json").exists(),
        "a refused merge writes nothing"
    );

    // The same shard twice.
    let (code, stderr) = calibrate(&targets, &["--merge", &shards[0], &shards[0]]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("also in"), "{stderr}");

    // A shard of another calibration: the differing field is named.
    let (code, stderr) = calibrate(
        &targets,
        &["--merge", &shards[0], &shards[1], "--seed", "2"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("s0.json") && stderr.contains("--seed"),
        "{stderr}"
    );

    // Only what the successful commands wrote is there.
    let mut names = scratch.names();
    names.sort();
    assert_eq!(
        names,
        [
            "merged.json",
            "s0.json",
            "s1.json",
            "single.json",
            "targets.json"
        ]
    );

    // Not a shard file at all.
    let (code, stderr) = calibrate(&targets, &["--merge", &targets]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a calibration shard file"), "{stderr}");
}
