//! The recorder on the real kernel. Needs root and tracefs: without either the tests print
//! why and pass without recording. The tests take one lock, so two recordings never share
//! tracefs at once.
//!
//! None depends on the machine's speed: every command ends by itself or at a signal the
//! test sends once it sees the command running, and the checks are on what the recording
//! holds and what it left behind, never on when it ended. The time limits below are
//! generous bounds against a hang, and no assertion depends on them, except in
//! `a_time_limit_stops_the_whole_process_group_and_keeps_the_trace`, whose command sleeps
//! a thousand times longer than its limit.

mod common;

use std::path::Path;
use std::sync::mpsc;

use common::{
    assert_group_gone, marker, may_record, out_file, processes_of, recording, shell,
    tracefs_mounted, tracefs_state, wait_until, HANG,
};
use mmkit_trace::parse;
use mmkit_trace::record::{self, RecordError, RecordOptions, TRACEFS};
use rustix::process::{getpid, kill_process, Signal};

#[test]
fn records_a_command_that_ends_by_itself_and_restores_tracefs() {
    let Some(_lock) = may_record() else { return };
    let before = tracefs_state();
    let out = out_file("small.gz");
    // The whole machine's page events are recorded (only our own pid is filtered out).
    // The command ends by itself; whether the limit was reached is not checked.
    let options = recording(&out, shell("ls -R /usr/lib > /dev/null"));
    let summary = record::record(&options).expect("records");
    let trace = parse::load(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    assert!(trace.recording.as_ref().unwrap().complete);
    assert!(!trace.events.is_empty());
    assert_eq!(summary.lines as usize, trace.lines);
    // The CPUs' traces are merged in timestamp order: no line is sorted back in.
    for kind in [
        parse::ProblemKind::OutOfOrderSameCpu,
        parse::ProblemKind::OutOfOrderAcrossCpus,
    ] {
        assert_eq!(trace.problems.counts.get(&kind), None, "{kind:?}");
    }
    let own = std::process::id();
    assert!(
        trace.events.iter().all(|e| e.pid != own),
        "own pid filtered"
    );
    assert_eq!(tracefs_state(), before, "every setting restored");
}

#[test]
fn a_ring_buffer_that_loses_events_is_refused_and_writes_no_file() {
    let Some(_lock) = may_record() else { return };
    let before = tracefs_state();
    // A ring buffer of 8 KiB per CPU holds a few hundred events; two hundred processes
    // started and ended allocate and free far more pages than that (page tables, stacks,
    // copied pages: on the order of a hundred events each), however long they take.
    let out = out_file("dropped.gz");
    let options = RecordOptions {
        buffer_kb: 8,
        ..recording(
            &out,
            shell("i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i + 1)); done"),
        )
    };
    match record::record(&options) {
        Err(RecordError::Dropped(message)) => assert!(message.contains("--buffer-kb")),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!out.exists());
    assert_eq!(
        tracefs_state(),
        before,
        "every setting restored after a refusal"
    );
}

#[test]
fn a_time_limit_stops_the_whole_process_group_and_keeps_the_trace() {
    let Some(_lock) = may_record() else { return };
    let before = tracefs_state();
    // The shell's background child goes too, and the trace is kept. The command sleeps
    // 299 s, a thousand times the limit: only a machine that stalls this test for five
    // minutes could see it end first.
    let out = out_file("stopped.gz");
    let marker = marker("9");
    let options = RecordOptions {
        seconds: Some(0.3),
        ..recording(&out, shell(&format!("{marker} & {marker}; true")))
    };
    let summary = record::record(&options).expect("records");
    assert!(summary.stopped);
    std::fs::remove_file(&out).unwrap();
    assert_group_gone(&marker);
    assert_eq!(
        tracefs_state(),
        before,
        "every setting restored after a stop"
    );
}

/// Whether this process has a handler for `signal` (`SigCgt` of `/proc/self/status`).
fn catches(signal: Signal) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let caught = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .expect("a SigCgt line");
    caught & (1 << (signal.as_raw() - 1)) != 0
}

/// What `timeout -s TERM`, `kill` or a closed terminal sends ends a recording as Ctrl-C
/// does: the command's whole process group stopped, tracefs restored (and unmounted if
/// the recorder mounted it), no file written.
#[test]
fn sigterm_and_sighup_stop_the_command_and_restore_tracefs() {
    let Some(_lock) = may_record() else { return };
    for (signal, name) in [(Signal::TERM, "8"), (Signal::HUP, "7")] {
        let before = tracefs_state();
        let mounted = tracefs_mounted();
        let out = out_file(&format!("signal{name}.gz"));
        let marker = marker(name);
        let options = recording(&out, shell(&format!("{marker} & {marker}; true")));
        let recorder = std::thread::spawn(move || record::record(&options));
        // The command runs once the recorder has set tracefs up and caught the signals;
        // only then may the signal come (a recorder that failed first says why below).
        wait_until("the command never started", || {
            recorder.is_finished() || !processes_of(&marker).is_empty()
        });
        if !recorder.is_finished() {
            if !catches(signal) {
                // Sent anyway, it would kill this process with tracefs still set up: stop
                // the recorder with Ctrl-C's signal instead, then fail.
                kill_process(getpid(), Signal::INT).expect("signal this process");
                let _ = recorder.join();
                panic!("the recorder does not catch {signal:?}");
            }
            kill_process(getpid(), signal).expect("signal this process");
        }
        let result = recorder.join().expect("the recorder thread");
        assert!(
            matches!(result, Err(RecordError::Interrupted)),
            "{signal:?}: {result:?}"
        );
        assert!(!out.exists(), "{signal:?}: no file");
        assert_group_gone(&marker);
        assert_eq!(
            tracefs_state(),
            before,
            "{signal:?}: every setting restored"
        );
        assert_eq!(tracefs_mounted(), mounted, "{signal:?}: mounted as before");
    }
}

/// `--warmup 3600 -- true`: the command is gone long before the warm-up ends, so the
/// recorder stops then, with an error that says so, instead of waiting out the hour.
#[test]
fn a_command_that_exits_during_the_warm_up_ends_the_recording_at_once() {
    let Some(_lock) = may_record() else { return };
    let before = tracefs_state();
    let out = out_file("warmup.gz");
    let options = RecordOptions {
        seconds: None,
        warmup: 3600.0,
        ..recording(&out, vec!["true".into()])
    };
    let (tx, rx) = mpsc::channel();
    let recorder = std::thread::spawn(move || {
        let _ = tx.send(record::record(&options));
    });
    let result = match rx.recv_timeout(HANG) {
        Ok(result) => result,
        Err(_) => {
            // Still warming up: stop it as Ctrl-C would, so tracefs is restored, then
            // fail.
            let _ = kill_process(getpid(), Signal::INT);
            let _ = recorder.join();
            panic!("the recorder waited out the warm-up of a command that had exited");
        }
    };
    recorder.join().expect("the recorder thread");
    match result {
        Err(RecordError::Setup(message)) => {
            assert!(message.contains("warm-up"), "{message}");
            assert!(message.contains("--warmup"), "{message}");
        }
        other => panic!("expected an error naming the warm-up, got {other:?}"),
    }
    assert!(!out.exists());
    assert_eq!(tracefs_state(), before, "every setting restored");
}

#[test]
fn command_only_records_the_command_and_its_children_and_no_other_process() {
    let Some(_lock) = may_record() else { return };
    let before = tracefs_state();
    let out = out_file("command-only.gz");
    // Another process tree that allocates and frees pages all the time (hundreds of
    // short processes) while the recording runs: a system-wide trace would hold it.
    let mut noise = std::process::Command::new("sh")
        .args([
            "-c",
            "i=0; while [ $i -lt 100000 ]; do /bin/true; i=$((i + 1)); done",
        ])
        .spawn()
        .expect("sh runs");
    // The shell and three children: four processes.
    let options = RecordOptions {
        command_only: true,
        ..recording(
            &out,
            shell("for i in 1 2 3; do cat /proc/self/status > /dev/null; done"),
        )
    };
    let recorded = record::record(&options);
    let _ = noise.kill();
    let _ = noise.wait();
    recorded.expect("records");
    let trace = parse::load(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    let recording = trace.recording.as_ref().unwrap();
    assert!(recording.meta("scope").unwrap().starts_with("command"));
    let pids: std::collections::BTreeSet<u32> = trace.events.iter().map(|e| e.pid).collect();
    assert!(!pids.is_empty(), "the command's own events are recorded");
    assert!(
        pids.len() <= 4 && !pids.contains(&noise.id()),
        "only the command's four processes: {pids:?}"
    );
    assert_eq!(tracefs_state(), before, "every setting restored");
}

#[test]
fn another_tracers_enabled_event_is_refused_and_nothing_changes() {
    let Some(_lock) = may_record() else { return };
    let mounted = tracefs_mounted();
    if !mounted {
        let status = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status()
            .unwrap();
        assert!(status.success());
    }
    // Stand in for another tracer: one of our events enabled by someone else.
    let enable = Path::new(TRACEFS).join(format!("events/kmem/{}/enable", parse::EVENTS[0]));
    std::fs::write(&enable, "1").unwrap();
    let before = tracefs_state();
    let out = out_file("busy.gz");
    let options = RecordOptions {
        buffer_kb: 1024,
        command_only: true,
        ..recording(&out, vec!["true".into()])
    };
    let refused = record::record(&options);
    let after = tracefs_state();
    std::fs::write(&enable, "0").unwrap();
    if !mounted {
        let _ = std::process::Command::new("umount").arg(TRACEFS).status();
    }
    let message = refused
        .expect_err("another tracer's event is enabled")
        .to_string();
    assert!(message.contains("in use by another tracer"), "{message}");
    assert_eq!(after, before, "nothing changed");
    assert!(!out.exists(), "no file written");
}
