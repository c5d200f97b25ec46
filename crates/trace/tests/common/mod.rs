//! Set-up the trace crate's recording tests share: the lock that keeps two recordings off
//! tracefs at once, the tracefs settings a recording must leave as it found them, the
//! options of a recording, and the processes a recorded command leaves (or must not).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod tracefs_lock;

use mmkit_trace::parse;
use mmkit_trace::record::{self, RecordOptions, TRACEFS};

/// A bound on waits that end within milliseconds on any machine; reaching it means a hang.
pub const HANG: Duration = Duration::from_secs(600);

/// Held by every test of this process that records.
static TRACEFS_LOCK: Mutex<()> = Mutex::new(());

/// Held while a test records: the lock of this process's threads (`cargo test` runs a
/// binary's tests as threads) and an exclusive `flock` that keeps other processes out
/// (`cargo nextest` runs every test in a process of its own).
pub struct RecordingLock {
    _threads: MutexGuard<'static, ()>,
    _processes: File,
}

/// The lock, or `None` (with the reason printed) where recording is impossible.
pub fn may_record() -> Option<RecordingLock> {
    if let Some(why) = record::tracing_unavailable() {
        println!("skipped: recording needs root and tracefs: {why}");
        return None;
    }
    let threads = TRACEFS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    Some(RecordingLock {
        _threads: threads,
        _processes: tracefs_lock::hold(),
    })
}

/// The tracefs values the recorder changes, read through a mount of our own if needed.
pub fn tracefs_state() -> Vec<(String, String)> {
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
        "options/event-fork".to_string(),
        "set_event_pid".to_string(),
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

/// Whether tracefs is mounted: the recorder unmounts it if it mounted it.
pub fn tracefs_mounted() -> bool {
    Path::new(TRACEFS).join("trace").exists()
}

pub fn out_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mmkit-trace-test-{}-{name}", std::process::id()))
}

/// A command line unique to this test process and `name`, to find its processes by.
pub fn marker(name: &str) -> String {
    format!("sleep 29{name}.{}", std::process::id() % 1000)
}

/// The pids of processes whose command line contains `marker`.
pub fn processes_of(marker: &str) -> String {
    let found = std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&found.stdout).into_owned()
}

/// Wait until `done` holds; a hang (see [`HANG`]) fails the test with `what`.
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < HANG,
            "{what}: still not so after {HANG:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A killed process lingers until the kernel has run its exit; wait for that, then assert
/// that none of the group is left.
pub fn assert_group_gone(marker: &str) {
    wait_until(&format!("processes of {marker:?} still run"), || {
        processes_of(marker).is_empty()
    });
}

/// A recording of `command` into `out` of the whole machine's page events, with no
/// warm-up, a ring of 64 MiB per CPU (the recorder's default: the other test binaries that
/// run beside this one do not overflow it; 4 MiB did, twice) and [`HANG`] as its limit, a
/// guard against a hang whose reaching no test checks unless it says so.
pub fn recording(out: &Path, command: Vec<String>) -> RecordOptions {
    RecordOptions {
        seconds: Some(HANG.as_secs_f64()),
        warmup: 0.0,
        out: out.to_path_buf(),
        buffer_kb: 65536,
        command,
        command_only: false,
    }
}

/// `sh -c script`.
pub fn shell(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}
