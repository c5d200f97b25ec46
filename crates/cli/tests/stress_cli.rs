//! `mmkit stress`, short: every pattern runs on real threads with canaries and ends with
//! every page accounted for. (The acceptance run is `--seconds 60 --pattern mixed`.)

use crate::common;

use common::{json_of, mmkit};
use predicates::prelude::*;

fn stress(pattern: &str) -> serde_json::Value {
    json_of(mmkit().args([
        "stress",
        "--threads",
        "2",
        "--seconds",
        "1",
        "--memory",
        "64M",
        "--json",
        "--pattern",
        pattern,
    ]))
}

#[test]
fn every_pattern_runs_without_violations_and_accounts_for_every_page() {
    for pattern in ["random", "producer-consumer", "bulk", "mixed"] {
        let report = stress(pattern);
        assert_eq!(report["violations"], 0, "{pattern}");
        assert_eq!(report["accounting"], "ok", "{pattern}");
        assert!(
            report["operations"].as_u64().unwrap() > 1000,
            "{pattern} did real work"
        );
        assert_eq!(
            report["allocations"], report["frees"],
            "{pattern}: every block freed"
        );
    }
}

#[test]
fn impossible_stress_settings_are_refused() {
    mmkit()
        .args(["stress", "--threads", "0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at least one thread"));
    mmkit()
        .args(["stress", "--policy", "patch99", "--seconds", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("patch99"));
}
