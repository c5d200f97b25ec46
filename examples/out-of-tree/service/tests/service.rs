//! The service as its users run it: every check passes, a damaged canary fails the run,
//! and bad arguments are refused.

use std::process::Command;
use std::process::Output;

fn service(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oot-service"))
        .args(args)
        .output()
        .expect("the service runs")
}

#[test]
fn every_check_passes_on_a_short_run() {
    let run = service(&["--rounds", "500"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("per-CPU counters agree"), "{stdout}");
    assert!(
        stdout.contains("3072 recycled by other threads"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("oot-service: every check passed\n"),
        "{stdout}"
    );
}

#[test]
fn damaged_canary_fails_the_run() {
    let run = service(&["--rounds", "500", "--damage-one-canary"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("oot-service: canary damaged: 1 words"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn bad_arguments_are_refused_with_one_line_and_exit_2() {
    for args in [&["--rounds", "0"][..], &["--rounds"], &["--threads", "8"]] {
        let run = service(args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}
