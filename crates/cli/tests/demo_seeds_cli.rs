//! `mmkit demo --seeds`: each seed's count is the one `mmkit demo --seed S` prints, and
//! every cell lands in exactly one of the summary's groups.

use crate::common;

use common::{mmkit, Scratch};

/// The `N` of a line "... N of 66 cells within tolerance ..." or "  seed S: N (H)".
fn count_after(line: &str, prefix: &str) -> usize {
    line.trim_start()
        .strip_prefix(prefix)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in `{line}`"))
}

fn stdout(args: &[&str], dir: &std::path::Path) -> String {
    let output = mmkit().args(args).current_dir(dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?}: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn a_seeds_summary_counts_what_each_seeds_demo_counts() {
    let scratch = Scratch::new("demo-seeds");
    let scale = "0.002";
    // Run where the default --out would be made: --seeds makes nothing.
    let summary = stdout(&["demo", "--seeds", "2,5", "--scale", scale], scratch.dir());
    assert!(
        scratch.names().is_empty(),
        "--seeds writes nothing: {:?}",
        scratch.names()
    );
    for seed in ["2", "5"] {
        let single = stdout(
            &[
                "demo",
                "--seed",
                seed,
                "--scale",
                scale,
                "--out",
                &scratch.path(seed),
            ],
            scratch.dir(),
        );
        let score = single
            .lines()
            .find(|l| l.contains("cells within tolerance ("))
            .expect("the demo's score line");
        let prefix = format!("seed {seed:>3}:");
        let line = summary
            .lines()
            .find(|l| l.trim_start().starts_with(&prefix))
            .expect("the summary's line for this seed");
        assert_eq!(
            count_after(line, &prefix),
            count_after(score, ""),
            "seed {seed}: {line} against {score}"
        );
    }
    let groups = summary
        .lines()
        .find(|l| l.starts_with("in at every seed:"))
        .expect("the groups' line");
    let numbers: Vec<usize> = groups
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 3, "{groups}");
    assert_eq!(numbers.iter().sum::<usize>(), 66, "{groups}");
}

#[test]
fn bad_seeds_are_refused_before_anything_runs() {
    for (args, reason) in [
        (vec!["demo", "--seeds", "3-1"], "empty"),
        (vec!["demo", "--seeds", "1,1"], "twice"),
        (vec!["demo", "--seeds", "1-2", "--seed", "3"], "--seed"),
        (vec!["demo", "--seeds", "1-2", "--json"], "--json"),
        (vec!["demo", "--seeds", "1-2", "--out", "x"], "--out"),
    ] {
        let output = mmkit().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} ran");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed before refusing");
    }
}
