//! The recorder on the real kernel. Needs root and tracefs: without either the tests print
//! why and pass without recording. One test function, so two recordings never share
//! tracefs at once.

use std::path::{Path, PathBuf};

use mmkit_trace::parse;
use mmkit_trace::record::{self, RecordError, RecordOptions, TRACEFS};

/// The tracefs values the recorder changes, read through a mount of our own if needed.
fn tracefs_state() -> Vec<(String, String)> {
    let mounted = Path::new(TRACEFS).join("trace").exists();
    if !mounted {
        let _ = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status();
    }
    let mut files = vec![
        "tracing_on".to_string(),
        "buffer_size_kb".to_string(),
        "trace_clock".to_string(),
        "options/overwrite".to_string(),
    ];
    for event in parse::EVENTS {
        files.push(format!("events/kmem/{event}/enable"));
        files.push(format!("events/kmem/{event}/filter"));
    }
    let state = files
        .into_iter()
        .map(|f| {
            let value = std::fs::read_to_string(Path::new(TRACEFS).join(&f)).unwrap_or_default();
            (f, value)
        })
        .collect();
    if !mounted {
        let _ = std::process::Command::new("umount").arg(TRACEFS).status();
    }
    state
}

fn out_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mmkit-trace-test-{}-{name}", std::process::id()))
}

#[test]
fn records_restores_tracefs_and_refuses_dropped_events() {
    if let Some(why) = record::tracing_unavailable() {
        println!("skipped: recording needs root and tracefs: {why}");
        return;
    }
    let before = tracefs_state();
    let out = out_file("small.gz");
    // The whole machine's page events are recorded (only our own pid is filtered out),
    // and the other test binaries run beside this one: a ring of 64 MiB per CPU, the
    // recorder's default, so their events do not overflow it (4 MiB did, twice, while
    // two test suites ran at once).
    let options = RecordOptions {
        seconds: Some(5.0),
        warmup: 0.0,
        out: out.clone(),
        buffer_kb: 65536,
        command: vec![
            "sh".into(),
            "-c".into(),
            "ls -R /usr/lib > /dev/null".into(),
        ],
    };
    let summary = record::record(&options).expect("records");
    assert!(!summary.stopped);
    let trace = parse::load(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    assert!(trace.recording.as_ref().unwrap().complete);
    assert!(!trace.events.is_empty());
    let own = std::process::id();
    assert!(
        trace.events.iter().all(|e| e.pid != own),
        "own pid filtered"
    );
    assert_eq!(tracefs_state(), before, "every setting restored");

    // A ring buffer of 8 KiB per CPU (a few hundred events) cannot hold a directory walk
    // repeated for half a second: refused, no file.
    let out = out_file("dropped.gz");
    let options = RecordOptions {
        seconds: Some(0.5),
        warmup: 0.0,
        out: out.clone(),
        buffer_kb: 8,
        command: vec![
            "sh".into(),
            "-c".into(),
            "while true; do ls -R /usr/lib > /dev/null; done".into(),
        ],
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

    // Stopped at the time limit: the whole process group goes, the shell's background
    // child too, and the trace is kept.
    let out = out_file("stopped.gz");
    let marker = format!("sleep 299.{}", std::process::id() % 1000);
    let options = RecordOptions {
        seconds: Some(0.3),
        warmup: 0.0,
        out: out.clone(),
        buffer_kb: 65536,
        command: vec![
            "sh".into(),
            "-c".into(),
            format!("{marker} & {marker}; true"),
        ],
    };
    let summary = record::record(&options).expect("records");
    assert!(summary.stopped);
    std::fs::remove_file(&out).unwrap();
    let left = std::process::Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .expect("pgrep runs");
    assert!(
        left.stdout.is_empty(),
        "processes of the group outlived the recording: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    assert_eq!(
        tracefs_state(),
        before,
        "every setting restored after a stop"
    );
}
