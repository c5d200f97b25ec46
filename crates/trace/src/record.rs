//! The recorder: trace the five kmem events while a command runs, and write one gzip file
//! with the trace text and the zoneinfo/vmstat snapshots taken before and after.
//!
//! Linux counterpart: the tracefs recipe of `docs/reference/workloads.md` §4.2, as a program. Events go
//! into the in-RAM ring buffers only; tracing stops before the buffers are read and the
//! file is written, and our own pid is filtered out, so the recorder never traces its own
//! writing (the feedback pitfall). A run whose per-CPU `stats` show dropped or overwritten
//! events is refused: no file is written. [`TracefsGuard`] records every tracefs value
//! before changing it and restores them all in `Drop` (also on errors and on Ctrl-C,
//! SIGTERM or SIGHUP, which the recorder catches to stop the command's process group
//! first), clears the ring buffers and unmounts tracefs if it mounted it.
//!
//! The recording ends when the command exits, at `--seconds`, or at a signal, whichever
//! comes first, also during the warm-up: a command that exits before tracing began is an
//! error, not a wait for the rest of the warm-up. A signal while the file is written stops
//! the writing and removes the file. [`record_with_progress`] reports where it is
//! (warm-up, tracing with the events so far, writing) for a progress display.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use flate2::Compression;
use rustix::process::{kill_process_group, Pid, Signal};

use crate::machine::SYSCTL_FILES;
use crate::parse::{CONTAINER_MAGIC, END_MARKER, EVENTS, SECTION_PREFIX};

/// Where tracefs is (or gets) mounted.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Default ring-buffer size per CPU (KiB): 64 MiB holds ≈ 2 M events of ~30 bytes.
pub const DEFAULT_BUFFER_KB: u64 = 65_536;

/// What to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Stop after this long even if the command still runs (its process group is killed).
    pub seconds: Option<f64>,
    /// Let the command run this long before tracing starts (the snapshot "before" is taken
    /// then), so that the trace shows a steady state.
    pub warmup: f64,
    /// The output file.
    pub out: PathBuf,
    /// Ring-buffer size per CPU in KiB.
    pub buffer_kb: u64,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Trace only the command and the processes it forks (tracefs `set_event_pid` with
    /// `options/event-fork`), not the whole machine: on a machine shared with other work,
    /// what the command's own allocations and frees made the pagesets do.
    pub command_only: bool,
}

/// What a recording produced.
#[derive(Clone, Debug)]
pub struct RecordSummary {
    /// Trace lines written.
    pub lines: u64,
    /// Compressed bytes written.
    pub bytes: u64,
    /// Seconds traced.
    pub seconds: f64,
    /// Whether the command was stopped by `--seconds`.
    pub stopped: bool,
}

/// Why a recording failed.
#[derive(Debug)]
pub enum RecordError {
    /// Not root, no tracefs, no command: the user must change something.
    Setup(String),
    /// The ring buffer lost events.
    Dropped(String),
    /// Ctrl-C, SIGTERM or SIGHUP.
    Interrupted,
    /// Reading or writing failed.
    Io(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Setup(m) | RecordError::Dropped(m) | RecordError::Io(m) => f.write_str(m),
            RecordError::Interrupted => {
                f.write_str("interrupted: tracing stopped, settings restored, no file written")
            }
        }
    }
}

impl std::error::Error for RecordError {}

fn io(context: &str) -> impl Fn(std::io::Error) -> RecordError + '_ {
    move |e| RecordError::Io(format!("{context}: {e}"))
}

/// Whether this process runs as root (effective uid 0, from `/proc/self/status`).
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Why tracing cannot be used here, or `None` if it can: root and a kernel with tracefs.
pub fn tracing_unavailable() -> Option<String> {
    if !is_root() {
        return Some("not running as root".to_string());
    }
    let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("tracefs"))
    {
        return Some("the kernel has no tracefs".to_string());
    }
    if !Path::new(TRACEFS).exists() {
        return Some(format!("{TRACEFS} does not exist"));
    }
    tracing_in_use()
}

/// Why tracefs is busy, or `None`: one of the events we record is already enabled, or an
/// event pid filter is set, so another tracer (another `mmkit trace record`, `perf`,
/// `trace-cmd`) is using the one global tracefs instance. Recording then would change its
/// settings under it, and its restore would undo ours.
pub fn tracing_in_use() -> Option<String> {
    let root = Path::new(TRACEFS);
    if !root.join("trace").exists() {
        return None;
    }
    for event in EVENTS {
        let enable = root.join(format!("events/kmem/{event}/enable"));
        if fs::read_to_string(&enable).is_ok_and(|v| v.trim() == "1") {
            return Some(format!(
                "tracefs is in use by another tracer (events/kmem/{event} is enabled): wait for it to finish"
            ));
        }
    }
    let pids = fs::read_to_string(root.join("set_event_pid")).unwrap_or_default();
    if !pids.trim().is_empty() {
        return Some(format!(
            "tracefs is in use by another tracer (set_event_pid is {}): wait for it to finish",
            pids.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    None
}

/// tracefs, with every value we change remembered and restored on drop.
pub struct TracefsGuard {
    root: PathBuf,
    mounted_by_us: bool,
    saved: Vec<(String, String)>,
}

impl TracefsGuard {
    /// Open tracefs at [`TRACEFS`], mounting it if needed.
    pub fn open() -> Result<TracefsGuard, RecordError> {
        let root = PathBuf::from(TRACEFS);
        let mut mounted_by_us = false;
        if !root.join("trace").exists() {
            let status = Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()
                .map_err(io("mount -t tracefs"))?;
            if !status.success() || !root.join("trace").exists() {
                return Err(RecordError::Setup(format!(
                    "cannot mount tracefs at {TRACEFS}"
                )));
            }
            mounted_by_us = true;
        }
        Ok(TracefsGuard {
            root,
            mounted_by_us,
            saved: Vec::new(),
        })
    }

    /// Read a tracefs file.
    pub fn read(&self, path: &str) -> Result<String, RecordError> {
        fs::read_to_string(self.root.join(path)).map_err(io(path))
    }

    /// Write `value` to `path`, remembering the first value seen there for [`Drop`].
    pub fn set(&mut self, path: &str, value: &str) -> Result<(), RecordError> {
        if !self.saved.iter().any(|(p, _)| p == path) {
            let original = restorable(path, &self.read(path)?);
            self.saved.push((path.to_string(), original));
        }
        fs::write(self.root.join(path), value).map_err(io(path))
    }

    /// Empty every CPU's ring buffer.
    pub fn clear(&self) -> Result<(), RecordError> {
        fs::write(self.root.join("trace"), "").map_err(io("trace"))
    }

    fn path(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }
}

/// The value to write back for what reading `path` showed.
fn restorable(path: &str, shown: &str) -> String {
    let shown = shown.trim();
    if path == "trace_clock" {
        // "[local] global counter …": the selected clock is bracketed.
        return shown
            .split_whitespace()
            .find_map(|c| c.strip_prefix('[').and_then(|c| c.strip_suffix(']')))
            .unwrap_or("local")
            .to_string();
    }
    if path == "buffer_size_kb" {
        // "7 (expanded: 1408)": the buffer was never expanded; 1408 is its working size.
        if let Some(rest) = shown.split("expanded:").nth(1) {
            return rest.trim().trim_end_matches(')').trim().to_string();
        }
    }
    if path.ends_with("/filter") && shown == "none" {
        return "0".to_string();
    }
    shown.to_string()
}

impl Drop for TracefsGuard {
    fn drop(&mut self) {
        // Stop first, so nothing is traced while the rest is restored.
        let _ = fs::write(self.root.join("tracing_on"), "0");
        for (path, value) in self.saved.iter().rev() {
            if let Err(e) = fs::write(self.root.join(path), value) {
                eprintln!("mmkit trace: could not restore {TRACEFS}/{path} to {value:?}: {e}");
            }
        }
        let _ = fs::write(self.root.join("trace"), "");
        if self.mounted_by_us {
            let _ = Command::new("umount").arg(TRACEFS).status();
        }
    }
}

/// Set when SIGINT (Ctrl-C), SIGTERM (`timeout`, `kill`, a service manager) or SIGHUP (a
/// closed terminal or SSH session) arrives: ctrlc's `termination` feature catches all
/// three, so each ends a recording the same way, with the command's process group stopped
/// and tracefs restored. Left to their default action, the last two would kill the
/// recorder with the events enabled, a 64 MiB ring per CPU and the command still running.
fn interrupted() -> &'static AtomicBool {
    static FLAG: OnceLock<&'static AtomicBool> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        // A second recorder in the same process keeps the first handler; that is fine.
        let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
        flag
    })
}

/// Kill the command's process group: TERM, then KILL after a grace period to whatever of
/// the group is left. A group that is already gone is not an error (the command may have
/// exited the moment the time ran out).
fn kill_group(child: &mut Child) {
    // The child leads its own group (`process_group(0)` at spawn), so its pid names it.
    let group = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
    let Some(group) = group else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    let _ = kill_process_group(group, Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The leader may be gone while others of its group live on; `ESRCH` means none is left.
    let _ = kill_process_group(group, Signal::KILL);
    let _ = child.wait();
}

fn snapshot_files(paths: &[&str]) -> String {
    let mut out = String::new();
    for path in paths {
        if let Ok(text) = fs::read_to_string(Path::new("/").join(path)) {
            out.push_str(path);
            out.push('\t');
            out.push_str(text.trim());
            out.push('\n');
        }
    }
    out
}

/// Where whole seconds of jiffies fall on the trace's `mono` clock, for the replay's
/// vmstat tick ([`crate::replay::TickGrid`]): `now at` (CLOCK_MONOTONIC) and `jiffies`
/// from `/proc/timer_list`, which prints them microseconds apart, read twice 200 ms
/// apart to measure `HZ`. Empty when the file cannot be read.
fn tick_grid_section() -> String {
    let sample = || -> Option<(u64, u64)> {
        let text = fs::read_to_string("/proc/timer_list").ok()?;
        let now = text.lines().find_map(|l| {
            l.strip_prefix("now at ")?
                .strip_suffix(" nsecs")?
                .parse()
                .ok()
        })?;
        let jiffies = text
            .lines()
            .find_map(|l| l.strip_prefix("jiffies: ")?.trim().parse().ok())?;
        Some((now, jiffies))
    };
    let Some((now_a, jiffies_a)) = sample() else {
        return String::new();
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let Some((now_b, jiffies_b)) = sample() else {
        return String::new();
    };
    let elapsed_ns = now_b.saturating_sub(now_a).max(1) as f64;
    let measured = (jiffies_b.saturating_sub(jiffies_a)) as f64 * 1e9 / elapsed_ns;
    // CONFIG_HZ is one of these; the nearest absorbs the microseconds between the two
    // fields of one read.
    let hz = [100u64, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| {
            (*a as f64 - measured)
                .abs()
                .total_cmp(&(*b as f64 - measured).abs())
        })
        .expect("a non-empty list");
    format!("now_ns\t{now_b}\njiffies\t{jiffies_b}\nhz\t{hz}\n")
}

fn llc_section() -> String {
    let dir = Path::new("/sys/devices/system/cpu/cpu0/cache");
    let last = (0..16)
        .map(|i| dir.join(format!("index{i}")))
        .take_while(|p| p.exists())
        .last();
    let Some(last) = last else {
        return String::new();
    };
    let field = |name: &str| fs::read_to_string(last.join(name)).unwrap_or_default();
    format!(
        "size\t{}\nshared_cpu_list\t{}\n",
        field("size").trim(),
        field("shared_cpu_list").trim()
    )
}

/// Each CPU's `per_cpu/cpuN/stats`, as a reader of one `key:` of it.
fn cpu_stats(guard: &TracefsGuard) -> Result<Vec<(u32, String)>, RecordError> {
    let mut out = Vec::new();
    for cpu in 0.. {
        let path = format!("per_cpu/cpu{cpu}/stats");
        if !guard.path(&path).exists() {
            break;
        }
        out.push((cpu, guard.read(&path)?));
    }
    Ok(out)
}

/// The number after `key` in a `stats` text, 0 if absent.
fn stat(stats: &str, key: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// Events lost per CPU (`dropped events` + `overrun` of `per_cpu/cpuN/stats`).
fn lost_events(guard: &TracefsGuard) -> Result<Vec<(u32, u64)>, RecordError> {
    Ok(cpu_stats(guard)?
        .into_iter()
        .map(|(cpu, stats)| {
            (
                cpu,
                stat(&stats, "dropped events:") + stat(&stats, "overrun:"),
            )
        })
        .filter(|&(_, n)| n > 0)
        .collect())
}

/// Events in the ring buffers now, all CPUs (`entries` of the stats): progress only, so
/// a tracefs that cannot say counts as none.
fn buffered_events(guard: &TracefsGuard) -> u64 {
    cpu_stats(guard)
        .map(|all| all.iter().map(|(_, s)| stat(s, "entries:")).sum())
        .unwrap_or(0)
}

/// Hand `write` the event lines of `cpus` (each CPU's trace, in its own order) in
/// timestamp order, one CPU's lines in their order, the lower CPU first at equal
/// timestamps; comment lines are left out.
///
/// The kernel's `trace` file does the same merge, but looks at every CPU's buffer for
/// each event it prints: in a 64-CPU guest under emulation it read 499,223 lines in 99 s,
/// where the 64 `per_cpu/cpuN/trace` files gave the same events in 19 s
/// (docs/EXPERIMENTS.md, "The 64-CPU point, tried"). Here each event costs a heap step.
/// The lines' timestamps are µs, so events of one µs on different CPUs come in CPU order,
/// where the kernel orders them by ns; a reader sorts by the printed time either way. A
/// line without a timestamp takes its CPU's last one, so it stays in its CPU's place.
///
/// Each CPU's file is read, and its timestamps parsed, on a thread of its own, which
/// hands the merge [`READ_BATCH`] lines at a time: the kernel formats a CPU's events in
/// the thread that reads them, so the guest's CPUs share that work. With the compression
/// on a thread too ([`write_trace`]), a 64-CPU guest under emulation wrote 415,306 lines
/// in 36 s, where reading and compressing on one thread had taken about three minutes
/// for 424,337 (docs/EXPERIMENTS.md, "The recorder's write-out on threads"); how the
/// 36 s divide between the parts was not measured.
fn merge_by_timestamp<R: BufRead + Send>(
    cpus: Vec<R>,
    write: &mut dyn FnMut(&str) -> Result<(), RecordError>,
) -> Result<(), RecordError> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    std::thread::scope(|scope| {
        let mut feeds: Vec<Feed> = cpus
            .into_iter()
            .map(|reader| {
                let (tx, rx) = mpsc::sync_channel(1);
                scope.spawn(move || read_cpu(reader, tx));
                Feed {
                    batches: rx,
                    batch: Vec::new().into_iter(),
                }
            })
            .collect();
        let mut heap = BinaryHeap::new();
        for (i, feed) in feeds.iter_mut().enumerate() {
            if let Some((ts, line)) = feed.next()? {
                heap.push(Reverse((ts, i, line)));
            }
        }
        while let Some(Reverse((_, i, line))) = heap.pop() {
            write(&line)?;
            if let Some((ts, line)) = feeds[i].next()? {
                heap.push(Reverse((ts, i, line)));
            }
        }
        // Leaving the scope drops the receivers first, so that a reader still sending
        // (after an error here) stops instead of waiting.
        Ok(())
    })
}

/// Lines a CPU's reader hands to the merge at a time ([`merge_by_timestamp`]). A CPU has
/// at most three batches in memory (one being filled, one waiting, one being merged),
/// about 70 KiB each at the recorder's 110 bytes a line: 46 MB for 224 CPUs.
const READ_BATCH: usize = 512;

/// One CPU's lines with their timestamps, as its reader thread hands them over.
type Batch = Result<Vec<(u64, String)>, RecordError>;

/// The merge's end of one CPU's reader.
struct Feed {
    batches: mpsc::Receiver<Batch>,
    batch: std::vec::IntoIter<(u64, String)>,
}

impl Feed {
    /// The CPU's next event line, `None` once its reader has sent all of them.
    fn next(&mut self) -> Result<Option<(u64, String)>, RecordError> {
        loop {
            if let Some(line) = self.batch.next() {
                return Ok(Some(line));
            }
            match self.batches.recv() {
                Ok(batch) => self.batch = batch?.into_iter(),
                Err(mpsc::RecvError) => return Ok(None),
            }
        }
    }
}

/// Read one CPU's trace into batches of event lines with their timestamps (ns), until
/// its end, a read error (sent, then stop) or the merge hanging up.
fn read_cpu<R: BufRead>(reader: R, tx: mpsc::SyncSender<Batch>) {
    let mut last_ts = 0;
    let mut batch = Vec::with_capacity(READ_BATCH);
    for line in reader.lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                let _ = tx.send(Err(io("read a CPU's trace")(e)));
                return;
            }
        };
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let ts = crate::parse::line_timestamp(&line)
            .unwrap_or(last_ts)
            .max(last_ts);
        last_ts = ts;
        batch.push((ts, line));
        if batch.len() == READ_BATCH {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(READ_BATCH));
            if tx.send(Ok(full)).is_err() {
                return;
            }
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(Ok(batch));
    }
}

/// Append `line` to `out` without its `page=` field (a hashed pointer that the replay
/// does not use and that does not compress), and a newline.
fn push_compact_line(out: &mut Vec<u8>, line: &str) {
    let mut tokens = line.split(' ').filter(|token| !token.starts_with("page="));
    if let Some(first) = tokens.next() {
        out.extend_from_slice(first.as_bytes());
    }
    for token in tokens {
        out.push(b' ');
        out.extend_from_slice(token.as_bytes());
    }
    out.push(b'\n');
}

/// Where a recording is, for a progress display ([`record_with_progress`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Progress {
    /// The command runs untraced: `elapsed` of `warmup` seconds.
    WarmingUp {
        /// Seconds since the command started.
        elapsed: f64,
        /// The warm-up asked for.
        warmup: f64,
    },
    /// Tracing: `elapsed` seconds of at most `limit`, `events` in the ring buffers.
    Tracing {
        /// Seconds since tracing began.
        elapsed: f64,
        /// `--seconds`, if given.
        limit: Option<f64>,
        /// Events recorded so far, all CPUs.
        events: u64,
    },
    /// Writing the file: `lines` of about `total` trace lines written.
    Writing {
        /// Lines written so far.
        lines: u64,
        /// Events in the ring buffers when tracing stopped.
        total: u64,
    },
}

/// How often the loops look at the command, the clock and the signal flag.
const POLL: Duration = Duration::from_millis(10);

/// Progress is reported every this many polls (≈ 4 times a second): counting the events
/// reads one stats file per CPU.
const POLLS_PER_REPORT: u32 = 25;

/// Trace lines written between two [`Progress::Writing`] reports.
const LINES_PER_REPORT: u64 = 1 << 16;

/// Record `options.command` (needs root). See the module documentation.
pub fn record(options: &RecordOptions) -> Result<RecordSummary, RecordError> {
    record_with_progress(options, &mut |_| {})
}

/// [`record`], calling `progress` a few times a second with where it is.
pub fn record_with_progress(
    options: &RecordOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<RecordSummary, RecordError> {
    if options.command.is_empty() {
        return Err(RecordError::Setup(
            "no command given: mmkit trace record -- CMD …".into(),
        ));
    }
    if let Some(why) = tracing_unavailable() {
        return Err(RecordError::Setup(format!(
            "cannot trace: {why} (recording needs root and tracefs)"
        )));
    }
    let flag = interrupted();
    flag.store(false, Ordering::SeqCst);
    let mut guard = TracefsGuard::open()?;
    prepare(&mut guard, options.buffer_kb, options.command_only)?;
    let mut command = Command::new(&options.command[0]);
    command.args(&options.command[1..]);
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut before = Snapshot::take();
    if options.warmup <= 0.0 {
        guard.set("tracing_on", "1")?;
    }
    let mut child = command
        .spawn()
        .map_err(|e| RecordError::Setup(format!("cannot run {:?}: {e}", options.command[0])))?;
    if options.warmup > 0.0 {
        warm_up(&mut child, options, flag, progress)?;
        if flag.load(Ordering::SeqCst) {
            kill_group(&mut child);
            return Err(RecordError::Interrupted);
        }
        before = Snapshot::take();
        guard.set("tracing_on", "1")?;
    }
    let started = Instant::now();
    let end = trace_until_end(&mut child, &guard, options.seconds, flag, progress);
    guard.set("tracing_on", "0")?;
    let seconds = started.elapsed().as_secs_f64();
    let stopped = match end {
        End::Exited => false,
        End::TimeLimit => true,
        End::Interrupted => {
            kill_group(&mut child);
            return Err(RecordError::Interrupted);
        }
    };
    // Before the kill: the exit of a stopped command frees memory that was not traced.
    let after = Snapshot::take();
    if stopped {
        kill_group(&mut child);
    }
    let lost = lost_events(&guard)?;
    if !lost.is_empty() {
        let detail: Vec<String> = lost.iter().map(|(c, n)| format!("CPU {c}: {n}")).collect();
        return Err(RecordError::Dropped(format!(
            "the ring buffer lost events ({}); no file written. Record again with a bigger --buffer-kb (now {} KiB per CPU) or a shorter run (--seconds)",
            detail.join(", "),
            options.buffer_kb
        )));
    }
    let total = buffered_events(&guard);
    let result = write_file(&guard, options, (&before, &after), seconds, &mut |lines| {
        progress(Progress::Writing { lines, total })
    });
    if result.is_err() {
        let _ = fs::remove_file(&options.out);
    }
    let (lines, bytes) = result?;
    Ok(RecordSummary {
        lines,
        bytes,
        seconds,
        stopped,
    })
}

/// Tracing off, buffers empty and sized, no overwriting, the `mono` clock, and the five
/// events enabled with our own pid (and thread) filtered out. With `command_only`, events
/// are kept only for this thread and what it forks from now on (`set_event_pid` holds
/// thread ids; `options/event-fork` adds each child):
/// the command spawned next and its descendants, since our own pid is filtered out. The
/// threads this process already runs (the progress display's, the signal handler's) are
/// not forked from now on, so they stay out.
fn prepare(
    guard: &mut TracefsGuard,
    buffer_kb: u64,
    command_only: bool,
) -> Result<(), RecordError> {
    // Before anything is changed: another tracer's settings are not ours to take over.
    if let Some(why) = tracing_in_use() {
        return Err(RecordError::Setup(why));
    }
    guard.set("tracing_on", "0")?;
    guard.clear()?;
    guard.set("buffer_size_kb", &buffer_kb.to_string())?;
    guard.set("options/overwrite", "0")?;
    guard.set("trace_clock", "mono")?;
    // The thread that spawns the command is the one that forks it; in a test harness
    // it is not the main thread, so both ids are filtered out.
    let pid = std::process::id();
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    let own_pid = if tid == pid {
        format!("common_pid != {pid}")
    } else {
        format!("common_pid != {pid} && common_pid != {tid}")
    };
    if command_only {
        guard.set("options/event-fork", "1")?;
        guard.set("set_event_pid", &tid.to_string())?;
    }
    for event in EVENTS {
        guard.set(&format!("events/kmem/{event}/filter"), &own_pid)?;
        guard.set(&format!("events/kmem/{event}/enable"), "1")?;
    }
    Ok(())
}

/// Let the command run untraced for `options.warmup` seconds. A command that exits first
/// leaves nothing to trace: an error (its process group is stopped), not a wait for the
/// rest of the warm-up. A signal ends the warm-up early too (the caller checks the flag).
fn warm_up(
    child: &mut Child,
    options: &RecordOptions,
    flag: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), RecordError> {
    let started = Instant::now();
    let warm = started + Duration::from_secs_f64(options.warmup);
    let mut polls = 0u32;
    while Instant::now() < warm && !flag.load(Ordering::SeqCst) {
        if let Ok(Some(status)) = child.try_wait() {
            kill_group(child);
            return Err(RecordError::Setup(format!(
                "{:?} exited ({status}) after {:.2} s of the {} s warm-up, before tracing began: nothing recorded, no file written (give a shorter --warmup)",
                options.command[0],
                started.elapsed().as_secs_f64(),
                options.warmup
            )));
        }
        if polls % POLLS_PER_REPORT == 0 {
            progress(Progress::WarmingUp {
                elapsed: started.elapsed().as_secs_f64(),
                warmup: options.warmup,
            });
        }
        polls += 1;
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// Why tracing ended.
enum End {
    /// The command exited by itself.
    Exited,
    /// `--seconds` ran out while the command still ran.
    TimeLimit,
    /// Ctrl-C, SIGTERM or SIGHUP.
    Interrupted,
}

/// Wait, tracing, until the command exits, the time limit passes or a signal arrives.
fn trace_until_end(
    child: &mut Child,
    guard: &TracefsGuard,
    limit: Option<f64>,
    flag: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> End {
    let started = Instant::now();
    let deadline = limit.map(|s| started + Duration::from_secs_f64(s));
    let mut polls = 0u32;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return End::Exited;
        }
        if flag.load(Ordering::SeqCst) {
            return End::Interrupted;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return End::TimeLimit;
        }
        if polls % POLLS_PER_REPORT == 0 {
            progress(Progress::Tracing {
                elapsed: started.elapsed().as_secs_f64(),
                limit,
                events: buffered_events(guard),
            });
        }
        polls += 1;
        std::thread::sleep(POLL);
    }
}

/// The machine state around a run.
struct Snapshot {
    zoneinfo: String,
    vmstat: String,
}

impl Snapshot {
    fn take() -> Snapshot {
        Snapshot {
            zoneinfo: fs::read_to_string("/proc/zoneinfo").unwrap_or_default(),
            vmstat: fs::read_to_string("/proc/vmstat").unwrap_or_default(),
        }
    }
}

/// Bytes each CPU's trace is read at a time (as `cat` reads), not `BufReader`'s 8 KiB: a
/// sixteenth of the system calls, each a slow one in a guest under emulation.
const READ_BUFFER: usize = 128 << 10;

/// Bytes of trace text the merge hands the compressor at a time ([`write_trace`]).
const WRITE_CHUNK: usize = 1 << 20;

/// Write the event lines of `cpus` (each CPU's trace) to `out` in timestamp order (a
/// CPU's lines in their order, the lower CPU first at equal timestamps; comment lines left
/// out), without their `page=` field, one line each; `written` hears the line count every
/// 65,536 lines, and a signal stops the writing there.
/// Returns the lines written and `out`.
///
/// `out` (the recorder's gzip encoder) is written on a thread of its own while the merge
/// goes on, so that the compression, the merge and the CPUs' readers run side by side:
/// in a guest under emulation each is slow, and its CPUs are many. Public so that
/// `cargo run --release -p mmkit-trace --example write_out` can time it.
pub fn write_trace<R: BufRead + Send, W: Write + Send>(
    cpus: Vec<R>,
    mut out: W,
    written: &mut dyn FnMut(u64),
) -> Result<(u64, W), RecordError> {
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(2);
        let writer = scope.spawn(move || -> std::io::Result<W> {
            for chunk in rx {
                out.write_all(&chunk)?;
            }
            Ok(out)
        });
        let mut chunk = Vec::with_capacity(WRITE_CHUNK + READ_BUFFER);
        let mut lines = 0;
        let merged = merge_by_timestamp(cpus, &mut |line| {
            push_compact_line(&mut chunk, line);
            lines += 1;
            if chunk.len() >= WRITE_CHUNK {
                let full = std::mem::replace(&mut chunk, Vec::with_capacity(WRITE_CHUNK));
                if tx.send(full).is_err() {
                    // The writer stopped at an error, which its result gives below.
                    return Err(RecordError::Io("write the output file".into()));
                }
            }
            if lines % LINES_PER_REPORT == 0 {
                // A signal now means the user gave up on the file: the caller removes it.
                if interrupted().load(Ordering::SeqCst) {
                    return Err(RecordError::Interrupted);
                }
                written(lines);
            }
            Ok(())
        });
        if merged.is_ok() {
            // The last chunk; a failed send means the writer stopped, as above.
            let _ = tx.send(chunk);
        }
        drop(tx);
        let out = writer
            .join()
            .expect("the trace writer does not panic")
            .map_err(io("write the output file"))?;
        merged?;
        Ok((lines, out))
    })
}

/// Write the container: header, snapshots, the trace and the end marker. `written` hears
/// the line count every [`LINES_PER_REPORT`] lines; a signal stops the writing there.
fn write_file(
    guard: &TracefsGuard,
    options: &RecordOptions,
    (before, after): (&Snapshot, &Snapshot),
    seconds: f64,
    written: &mut dyn FnMut(u64),
) -> Result<(u64, u64), RecordError> {
    let file = File::create(&options.out).map_err(io("create the output file"))?;
    // The default level, not the best: on a 2-MB recording (18 MB of text) the best took
    // 0.93–0.96 s and the default 0.64–0.66 s for a file 0.3 % larger (`cargo run --release
    // -p mmkit-trace --example gzip_levels -- crates/trace/tests/data/afunix.mmkit.gz`,
    // 2026-12-06): the write-out is what a many-CPU guest under emulation waits for.
    let mut gz = GzEncoder::new(BufWriter::new(file), Compression::default());
    let w = io("write the output file");
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut header = format!("{CONTAINER_MAGIC}\n");
    header += &format!("# command: {}\n", options.command.join(" "));
    header += &format!("# seconds: {seconds:.3}\n");
    header += &format!("# warmup: {:.3}\n", options.warmup);
    header += &format!("# kernel: {}\n", kernel.trim());
    header += &format!("# buffer_kb: {}\n", options.buffer_kb);
    header += "# clock: mono\n# events: ";
    header += &EVENTS.join(" ");
    header += "\n# note: the page= field is dropped from each line\n";
    let scope = if options.command_only {
        "command (the command and the processes it forked: set_event_pid, event-fork)"
    } else {
        "system"
    };
    header += &format!("# scope: {scope}\n");
    for (name, text) in [
        ("zoneinfo-before", before.zoneinfo.as_str()),
        ("zoneinfo-after", after.zoneinfo.as_str()),
        ("vmstat-before", before.vmstat.as_str()),
        ("vmstat-after", after.vmstat.as_str()),
        ("sysctl", &snapshot_files(&SYSCTL_FILES)),
        ("llc", &llc_section()),
        ("tick-grid", &tick_grid_section()),
    ] {
        header += &format!("{SECTION_PREFIX}{name}\n{}", text);
        if !text.ends_with('\n') {
            header.push('\n');
        }
    }
    header += &format!("{SECTION_PREFIX}trace\n");
    gz.write_all(header.as_bytes()).map_err(&w)?;
    let mut cpus = Vec::new();
    for cpu in 0..cpu_stats(guard)?.len() {
        let file = File::open(guard.path(&format!("per_cpu/cpu{cpu}/trace")))
            .map_err(io("open a CPU's trace"))?;
        cpus.push(BufReader::with_capacity(READ_BUFFER, file));
    }
    let (lines, mut gz) = write_trace(cpus, gz, written)?;
    gz.write_all(format!("{END_MARKER}\n").as_bytes())
        .map_err(&w)?;
    let mut file = gz.finish().map_err(&w)?;
    file.flush().map_err(&w)?;
    let bytes = fs::metadata(&options.out).map_err(&w)?.len();
    Ok((lines, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restorable_values_undo_what_tracefs_shows() {
        assert_eq!(restorable("trace_clock", "[local] global mono\n"), "local");
        assert_eq!(restorable("buffer_size_kb", "7 (expanded: 1408)\n"), "1408");
        assert_eq!(restorable("buffer_size_kb", "65536\n"), "65536");
        assert_eq!(restorable("events/kmem/mm_page_free/filter", "none\n"), "0");
        assert_eq!(restorable("tracing_on", "1\n"), "1");
    }

    /// The per-CPU traces come out in timestamp order, each CPU's lines in its own order,
    /// the lower CPU first at one µs, comments left out, and a line without a timestamp
    /// right after its CPU's line before it.
    #[test]
    fn per_cpu_traces_merge_in_timestamp_order() {
        let cpu = |n: u32, times: &[&str]| -> String {
            let mut text = format!("# tracer: nop\n#\n# entries-in-buffer/entries-written: {n}\n");
            for t in times {
                if t.is_empty() {
                    text += "garbage without a time\n";
                } else {
                    text += &format!("  sh-1 [{n:03}] ..... {t}: mm_page_free: pfn=0x1 order=0\n");
                }
            }
            text
        };
        let texts = [
            cpu(0, &["1.000002", "1.000005", "", "2.000000"]),
            cpu(1, &["1.000001", "1.000002", "1.000009"]),
            cpu(2, &[]),
            cpu(3, &["0.999999"]),
        ];
        let mut out = Vec::new();
        merge_by_timestamp(texts.iter().map(|t| t.as_bytes()).collect(), &mut |line| {
            out.push(if line.contains('[') {
                let cpu = &line[line.find('[').unwrap() + 1..line.find(']').unwrap()];
                let ts = line.split_whitespace().nth(3).unwrap();
                format!("{cpu} {ts}")
            } else {
                line.to_string()
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(
            out,
            [
                "003 0.999999:",
                "001 1.000001:",
                "000 1.000002:",
                "001 1.000002:",
                "000 1.000005:",
                "garbage without a time",
                "001 1.000009:",
                "000 2.000000:",
            ]
        );
    }

    /// The write-out gives the merged lines without `page=`, and a writer that fails
    /// mid-way ends it with the writer's error, the CPUs' readers stopped (no hang).
    #[test]
    fn the_trace_is_written_merged_and_a_failing_writer_stops_it() {
        let texts = [
            "  sh-1 [000] ..... 1.000002: mm_page_free: page=00ab pfn=0x1 order=0\n",
            "# a comment\n  sh-2 [001] ..... 1.000001: mm_page_alloc: page=00cd pfn=0x2 order=0\n",
        ];
        let readers = texts.iter().map(|t| t.as_bytes()).collect();
        let (lines, out) = write_trace(readers, Vec::new(), &mut |_| {}).unwrap();
        assert_eq!(lines, 2);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  sh-2 [001] ..... 1.000001: mm_page_alloc: pfn=0x2 order=0\n  \
             sh-1 [000] ..... 1.000002: mm_page_free: pfn=0x1 order=0\n"
        );

        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("no space left"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        // Enough for several chunks, so that the merge is still sending when the writer
        // has stopped.
        let big: Vec<String> = (0..4)
            .map(|cpu| {
                (0..20_000)
                    .map(|i| format!("  sh-1 [{cpu:03}] ..... 1.{i:06}: mm_page_free: pfn=0x{i:x} order=0 {:>40}\n", ""))
                    .collect()
            })
            .collect();
        let readers = big.iter().map(|t| t.as_bytes()).collect();
        match write_trace(readers, Full, &mut |_| {}) {
            Err(RecordError::Io(m)) => assert!(m.contains("no space left"), "{m}"),
            other => panic!("expected the writer's error, got {:?}", other.map(|r| r.0)),
        }
    }

    #[test]
    fn compact_lines_drop_the_page_pointer() {
        let line = "  bash-1 [000] ..... 1.5: mm_page_free: page=0000000012 pfn=0x10 order=0";
        let mut out = b"before\n".to_vec();
        push_compact_line(&mut out, line);
        push_compact_line(&mut out, "");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "before\n  bash-1 [000] ..... 1.5: mm_page_free: pfn=0x10 order=0\n\n"
        );
    }
}
