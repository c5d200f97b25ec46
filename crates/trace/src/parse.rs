//! Parse page-allocator traces: the plain tracefs text format (what
//! `cat /sys/kernel/tracing/trace` prints) and the recorder's file (gzip of a small
//! sectioned text container that holds the same text plus the snapshots).
//!
//! Linux counterpart: the `TP_printk` formats of `include/trace/events/kmem.h` (6.18):
//! `mm_page_alloc`, `mm_page_free`, `mm_page_free_batched`, `mm_page_alloc_zone_locked`,
//! `mm_page_pcpu_drain`; the line prefix is `trace_print_context` (comm-pid, `[cpu]`,
//! the irq/preempt flags column, timestamp). Every line that is not one of these five
//! events is a [`Problem`] with its line number: counted, a few kept as samples, and
//! skipped. Nothing here panics on any input (a proptest feeds garbage).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use serde::Serialize;

/// The five kmem events the recorder enables.
pub const EVENTS: [&str; 5] = [
    "mm_page_alloc",
    "mm_page_free",
    "mm_page_free_batched",
    "mm_page_alloc_zone_locked",
    "mm_page_pcpu_drain",
];

/// pfns at or above this are not pages (`mm_page_alloc` of a failed request prints a
/// pointer-derived value); 2^52 pages is 16 EiB.
const PFN_LIMIT: u64 = 1 << 52;

/// CPU numbers at or above this are not CPUs: the `[cpu]` column is `smp_processor_id()`,
/// below `nr_cpu_ids`, and no Linux configuration allows more than 8192 (x86-64's
/// `MAXSMP`). The replay sizes per-CPU tables by the largest CPU a trace names, so a
/// garbled `[4294967295]` would ask for hundreds of GiB (or wrap the count to 0).
pub const CPU_LIMIT: u32 = 8192;

/// The kind of one traced event.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `mm_page_alloc`: a block handed to a caller (`__alloc_pages`).
    Alloc,
    /// `mm_page_free`: a block freed (every free, in `free_pages_prepare`).
    Free,
    /// `mm_page_free_batched`: the same free came through a batch (order 0).
    FreeBatched,
    /// `mm_page_alloc_zone_locked`: a block taken off the buddy lists under the zone lock.
    ZoneLocked,
    /// `mm_page_pcpu_drain`: a block moved from a pageset back to the buddy lists.
    PcpuDrain,
}

impl EventKind {
    fn from_name(name: &str) -> Option<EventKind> {
        Some(match name {
            "mm_page_alloc" => EventKind::Alloc,
            "mm_page_free" => EventKind::Free,
            "mm_page_free_batched" => EventKind::FreeBatched,
            "mm_page_alloc_zone_locked" => EventKind::ZoneLocked,
            "mm_page_pcpu_drain" => EventKind::PcpuDrain,
            _ => return None,
        })
    }
}

/// One traced event.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct Event {
    /// 1-based line number in the trace text.
    pub line: usize,
    /// The CPU the event ran on.
    pub cpu: u32,
    /// Timestamp in nanoseconds (the trace clock's; `mono` when recorded by mmkit).
    pub ts_ns: u64,
    /// The task's pid.
    pub pid: u32,
    /// Which event.
    pub kind: EventKind,
    /// The block's first pfn.
    pub pfn: u64,
    /// The block's order (0 for `mm_page_free_batched`).
    pub order: u8,
    /// Migratetype field (-1 when the event has none).
    pub migratetype: i32,
    /// `percpu_refill` of `mm_page_alloc_zone_locked` (false for the other events).
    pub percpu_refill: bool,
    /// The event ran in softirq context: the flags column's third character is `s` (or
    /// `H`, a hard interrupt inside a softirq). RCU callbacks run there, so a block freed
    /// by `call_rcu` shows it, whichever task the softirq interrupted. False when the line
    /// has no flags column (`options/irq-info` off).
    pub softirq: bool,
    /// `mm_page_alloc`'s `gfp_flags` allow a zone above DMA32: the request has neither
    /// `__GFP_DMA` nor `__GFP_DMA32` (`GFP_DMA`, `GFP_DMA32`). Such a request walks its
    /// zonelist from Normal down, so a block of it in DMA32 says the zones above failed
    /// the walk. False for the other events and when the line has no `gfp_flags`.
    pub gfp_above_dma32: bool,
}

/// What was wrong with one line.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Not a trace line at all (truncated, garbage, wrong prefix).
    Malformed,
    /// A well-formed line of an event other than the five.
    UnknownEvent,
    /// One of the five events with a missing or unparsable field.
    BadField,
    /// `mm_page_alloc` of a failed request (no page).
    FailedAlloc,
    /// A timestamp earlier than the previous line of the same CPU (sorted back in).
    OutOfOrderSameCpu,
    /// A timestamp earlier than the previous line of another CPU (sorted back in; the
    /// tracefs merge normally prevents this).
    OutOfOrderAcrossCpus,
    /// A pfn outside every zone of the snapshot (found by the replay).
    PfnOutsideZones,
    /// The file ends early (gzip stream cut, or no end marker); the line is the last read.
    Truncated,
}

/// One line that was skipped or repaired.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct Problem {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub kind: ProblemKind,
    /// The start of the line.
    pub text: String,
}

/// Problems by kind, with the first few of each kept as samples.
#[derive(Clone, Default, Debug, Serialize)]
pub struct Problems {
    /// How many lines had each problem.
    pub counts: BTreeMap<ProblemKind, u64>,
    /// The first few lines of each kind.
    pub samples: Vec<Problem>,
}

/// Samples kept per problem kind.
const SAMPLES_PER_KIND: u64 = 3;

impl Problems {
    /// Record a problem at `line`.
    pub fn add(&mut self, line: usize, kind: ProblemKind, text: &str) {
        let count = self.counts.entry(kind).or_default();
        *count += 1;
        if *count <= SAMPLES_PER_KIND {
            let text: String = text.chars().take(120).collect();
            self.samples.push(Problem { line, kind, text });
        }
    }

    /// Total problems.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// A recording's snapshots and metadata (absent for a plain tracefs text file).
#[derive(Clone, Default, Debug)]
pub struct Recording {
    /// `key: value` header lines (command, seconds, kernel, buffer size …).
    pub metadata: Vec<(String, String)>,
    /// Sections by name: `zoneinfo-before`, `zoneinfo-after`, `vmstat-before`,
    /// `vmstat-after`, `sysctl`, `llc`.
    pub sections: BTreeMap<String, String>,
    /// Whether the container ended with its end marker (false: truncated file).
    pub complete: bool,
}

impl Recording {
    /// A section's text.
    pub fn section(&self, name: &str) -> Option<&str> {
        self.sections.get(name).map(String::as_str)
    }

    /// A metadata value.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed trace: events in timestamp order, the problems found, and the recording's
/// snapshots when it came from the recorder.
#[derive(Clone, Default, Debug)]
pub struct Trace {
    /// Events sorted by (timestamp, line).
    pub events: Vec<Event>,
    /// Lines skipped or repaired.
    pub problems: Problems,
    /// The recorder's snapshots, if any.
    pub recording: Option<Recording>,
    /// Lines read (trace text only).
    pub lines: usize,
    /// The gzip stream ended early or was corrupt; what came before was kept.
    pub decompress_error: Option<String>,
    /// Each pid's command name (`comm`) in its last event: the program it ran last (a
    /// child shows its parent's name until it calls `exec`).
    pub comms: BTreeMap<u32, String>,
}

impl Trace {
    /// Drop every event of the tasks whose name (their last `comm`) starts with one of
    /// `prefixes`, as if they had not run; returns how many events went. For a
    /// recording's own background: this measuring VM runs DAMON's `kdamond`, which
    /// reclaims large page-cache folios in long runs of high-order frees that a
    /// dedicated machine with memory to spare would not make, and a whole-machine
    /// recording holds them beside the workload's (`mmkit trace high-order
    /// --without-task kdamond`).
    pub fn drop_tasks(&mut self, prefixes: &[String]) -> usize {
        let dropped: std::collections::BTreeSet<u32> = self
            .comms
            .iter()
            .filter(|(_, comm)| prefixes.iter().any(|p| comm.starts_with(p.as_str())))
            .map(|(&pid, _)| pid)
            .collect();
        if dropped.is_empty() {
            return 0;
        }
        let before = self.events.len();
        self.events.retain(|e| !dropped.contains(&e.pid));
        before - self.events.len()
    }

    /// Why the file ends early, if it does: its gzip stream is cut or corrupt, or the
    /// recorder's container has no end marker. A replay of what is left sees the end of
    /// the run missing, so `mmkit trace replay` refuses it unless `--allow-truncated`.
    /// Plain tracefs text carries no end marker: it is never known to be cut.
    pub fn truncation(&self) -> Option<String> {
        if let Some(error) = &self.decompress_error {
            return Some(format!(
                "the gzip stream ends early or is corrupt ({error}); {} trace lines before the cut",
                self.lines
            ));
        }
        if self.recording.as_ref().is_some_and(|r| !r.complete) {
            return Some(format!(
                "the recording has no end marker; {} trace lines before the cut",
                self.lines
            ));
        }
        None
    }
}

/// A file that cannot be read as a trace at all.
#[derive(Debug)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// First line of the recorder's container.
pub const CONTAINER_MAGIC: &str = "#mmkit-trace v1";
/// Starts a section line: `@@section NAME`.
pub const SECTION_PREFIX: &str = "@@section ";
/// Last line of a complete container.
pub const END_MARKER: &str = "@@end";

/// Read a trace file's bytes: gzip or not, recorder container or plain tracefs text.
/// Invalid UTF-8 is replaced (and the lines it spoils are reported as malformed). A gzip
/// stream that decompresses to more than this machine's RAM is refused (an error, not
/// an allocation failure): the text is held whole, and a recording ten times smaller
/// than its text can name any size.
pub fn load(bytes: &[u8]) -> Result<Trace, LoadError> {
    load_within(bytes, crate::machine::ram_bytes().unwrap_or(u64::MAX))
}

/// [`load`] with at most `limit` bytes of decompressed text.
fn load_within(bytes: &[u8], limit: u64) -> Result<Trace, LoadError> {
    let mut decompress_error = None;
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        let decoder = flate2::read::MultiGzDecoder::new(bytes);
        let read = decoder.take(limit.saturating_add(1)).read_to_end(&mut out);
        if out.len() as u64 > limit {
            return Err(LoadError(format!(
                "decompresses to more than this machine's {} of RAM",
                crate::machine::human_bytes(u128::from(limit))
            )));
        }
        if let Err(e) = read {
            // A truncated gzip stream still yields what was decoded before the cut.
            if out.is_empty() {
                return Err(LoadError(format!("cannot decompress: {e}")));
            }
            decompress_error = Some(e.to_string());
        }
        String::from_utf8_lossy(&out).into_owned()
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    };
    let mut trace = parse_text(&text);
    trace.decompress_error = decompress_error;
    Ok(trace)
}

/// Parse text: the recorder's container if it starts with [`CONTAINER_MAGIC`], else plain
/// tracefs text.
pub fn parse_text(text: &str) -> Trace {
    if !text.starts_with(CONTAINER_MAGIC) {
        return parse_trace_lines(text.lines().enumerate().map(|(i, l)| (i + 1, l)));
    }
    let mut recording = Recording::default();
    let mut section: Option<String> = None;
    let mut trace_lines: Vec<(usize, &str)> = Vec::new();
    for (index, line) in text.lines().enumerate().skip(1) {
        if line == END_MARKER {
            recording.complete = true;
            break;
        }
        if let Some(name) = line.strip_prefix(SECTION_PREFIX) {
            section = Some(name.trim().to_string());
            continue;
        }
        match section.as_deref() {
            None => {
                if let Some((k, v)) = line.trim_start_matches('#').split_once(':') {
                    recording
                        .metadata
                        .push((k.trim().to_string(), v.trim().to_string()));
                }
            }
            Some("trace") => trace_lines.push((index + 1, line)),
            Some(name) => {
                let body = recording.sections.entry(name.to_string()).or_default();
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    let mut trace = parse_trace_lines(trace_lines.into_iter());
    trace.recording = Some(recording);
    trace
}

fn parse_trace_lines<'a>(lines: impl Iterator<Item = (usize, &'a str)>) -> Trace {
    let mut trace = Trace::default();
    let mut last_ts_cpu: BTreeMap<u32, u64> = BTreeMap::new();
    let mut last_ts = 0u64;
    for (number, line) in lines {
        trace.lines += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_line_with_comm(number, trimmed) {
            Ok((event, comm)) => {
                if trace.comms.get(&event.pid).map(String::as_str) != Some(comm) {
                    trace.comms.insert(event.pid, comm.to_string());
                }
                let previous = last_ts_cpu.entry(event.cpu).or_default();
                if event.ts_ns < *previous {
                    trace
                        .problems
                        .add(number, ProblemKind::OutOfOrderSameCpu, trimmed);
                } else if event.ts_ns < last_ts {
                    trace
                        .problems
                        .add(number, ProblemKind::OutOfOrderAcrossCpus, trimmed);
                }
                *previous = (*previous).max(event.ts_ns);
                last_ts = last_ts.max(event.ts_ns);
                trace.events.push(event);
            }
            Err(kind) => trace.problems.add(number, kind, trimmed),
        }
    }
    // Stable: events with equal timestamps keep their line order.
    trace.events.sort_by_key(|e| (e.ts_ns, e.line));
    trace
}

/// The timestamp of a trace line in ns, whatever its event, or `None` for a line that is
/// not one (a comment, a malformed line).
pub(crate) fn line_timestamp(line: &str) -> Option<u64> {
    let (_, _, _, rest) = split_prefix(line.trim())?;
    let (_, ts_ns, _) = split_timestamp(rest)?;
    Some(ts_ns)
}

/// What follows a line's `comm-pid [cpu]`: whether the flags column says softirq or
/// hardirq, the timestamp in ns, and the tokens after it.
fn split_timestamp(rest: &str) -> Option<(bool, u64, std::str::SplitWhitespace<'_>)> {
    let mut tokens = rest.split_whitespace();
    let mut first = tokens.next()?;
    // The flags column ("....." or "d..1.") is optional (options/irq-info off).
    let mut softirq = false;
    if !first.ends_with(':') {
        softirq = matches!(first.as_bytes().get(2), Some(b's' | b'H'));
        first = tokens.next()?;
    }
    let ts_ns = parse_timestamp(first.strip_suffix(':')?)?;
    Some((softirq, ts_ns, tokens))
}

/// Parse one non-comment line.
pub fn parse_line(number: usize, line: &str) -> Result<Event, ProblemKind> {
    parse_line_with_comm(number, line).map(|(event, _)| event)
}

/// [`parse_line`], with the task's command name.
fn parse_line_with_comm(number: usize, line: &str) -> Result<(Event, &str), ProblemKind> {
    let (comm, pid, cpu, rest) = split_prefix(line).ok_or(ProblemKind::Malformed)?;
    let (softirq, ts_ns, mut tokens) = split_timestamp(rest).ok_or(ProblemKind::Malformed)?;
    let name = tokens
        .next()
        .and_then(|t| t.strip_suffix(':'))
        .ok_or(ProblemKind::Malformed)?;
    let kind = EventKind::from_name(name).ok_or(ProblemKind::UnknownEvent)?;
    let mut pfn = None;
    let mut order = if kind == EventKind::FreeBatched {
        Some(0)
    } else {
        None
    };
    let mut migratetype = -1;
    let mut percpu_refill = None;
    let mut gfp_above_dma32 = false;
    for token in tokens {
        let Some((key, value)) = token.split_once('=') else {
            continue;
        };
        match key {
            "pfn" => pfn = Some(parse_number(value).ok_or(ProblemKind::BadField)?),
            "order" => {
                let value: u64 = parse_number(value).ok_or(ProblemKind::BadField)?;
                order = Some(u8::try_from(value).map_err(|_| ProblemKind::BadField)?);
            }
            "migratetype" => migratetype = value.parse().map_err(|_| ProblemKind::BadField)?,
            "percpu_refill" => percpu_refill = Some(value == "1"),
            "gfp_flags" => gfp_above_dma32 = !value.split('|').any(is_dma_zone_modifier),
            _ => {}
        }
    }
    if cpu >= CPU_LIMIT {
        return Err(ProblemKind::BadField);
    }
    let pfn = pfn.ok_or(ProblemKind::BadField)?;
    let order = order.ok_or(ProblemKind::BadField)?;
    if order > mmkit_core::page::MAX_ORDER {
        return Err(ProblemKind::BadField);
    }
    if pfn >= PFN_LIMIT {
        return Err(if kind == EventKind::Alloc {
            ProblemKind::FailedAlloc
        } else {
            ProblemKind::BadField
        });
    }
    if kind == EventKind::ZoneLocked && percpu_refill.is_none() {
        return Err(ProblemKind::BadField);
    }
    let event = Event {
        line: number,
        cpu,
        ts_ns,
        pid,
        kind,
        pfn,
        order,
        migratetype,
        percpu_refill: percpu_refill.unwrap_or(false),
        softirq,
        gfp_above_dma32: gfp_above_dma32 && kind == EventKind::Alloc,
    };
    Ok((event, comm))
}

/// A `gfp_flags` word that confines a request to DMA or DMA32 (`gfp_zone`): the bare
/// modifiers and the composite names the tracepoint prints for them.
fn is_dma_zone_modifier(word: &str) -> bool {
    matches!(word, "__GFP_DMA" | "__GFP_DMA32" | "GFP_DMA" | "GFP_DMA32")
}

/// Split `comm-pid [cpu] rest`: the comm may hold spaces and dashes, so look for the
/// first ` [digits]` and take the pid after the last dash before it.
fn split_prefix(line: &str) -> Option<(&str, u32, u32, &str)> {
    let mut search = 0;
    while let Some(offset) = line[search..].find(" [") {
        let open = search + offset;
        let after = &line[open + 2..];
        if let Some(close) = after.find(']') {
            let digits = &after[..close];
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                let cpu = digits.parse().ok()?;
                let head = line[..open].trim_end();
                let dash = head.rfind('-')?;
                let pid = head[dash + 1..].parse().ok()?;
                return Some((head[..dash].trim(), pid, cpu, &after[close + 1..]));
            }
        }
        search = open + 2;
    }
    None
}

/// `seconds.fraction` to nanoseconds (up to 9 fraction digits).
fn parse_timestamp(text: &str) -> Option<u64> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    if secs.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let mut nanos: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        nanos *= 10;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// Decimal or `0x` hexadecimal.
fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOC: &str = "            bash-1556    [000] .....  7763.274331: mm_page_alloc: page=00000000628aa8a7 pfn=0x124f90 order=0 migratetype=0 gfp_flags=GFP_KERNEL_ACCOUNT|__GFP_ZERO|__GFP_COMP";

    #[test]
    fn a_gzip_stream_larger_than_the_bound_is_refused_not_read_whole() {
        use std::io::Write;
        let text = format!("{}\n", ALLOC.trim()).repeat(2_000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        assert!(gz.len() * 50 < text.len(), "the text compresses well");
        let whole = load_within(&gz, text.len() as u64).unwrap();
        assert_eq!(whole.events.len(), 2_000);
        let bound = text.len() as u64 - 1;
        let error = load_within(&gz, bound).unwrap_err();
        let expected = format!(
            "more than this machine's {}",
            crate::machine::human_bytes(bound.into())
        );
        assert!(expected.ends_with("KiB"), "{expected}");
        assert!(error.0.contains(&expected), "{error}");
    }

    #[test]
    fn parses_an_alloc_line() {
        let event = parse_line(7, ALLOC.trim()).unwrap();
        assert_eq!(
            event,
            Event {
                line: 7,
                cpu: 0,
                ts_ns: 7_763_274_331_000,
                pid: 1556,
                kind: EventKind::Alloc,
                pfn: 0x124f90,
                order: 0,
                migratetype: 0,
                percpu_refill: false,
                softirq: false,
                gfp_above_dma32: true,
            }
        );
    }

    /// A request without a DMA zone modifier may be served from any zone; one with it, or a
    /// line without `gfp_flags`, tells nothing about the zones above.
    #[test]
    fn gfp_flags_tell_whether_a_request_could_use_zones_above_dma32() {
        let event = |gfp: &str| {
            let line = format!(
                "  rustc-9 [000] ..... 1.0: mm_page_alloc: pfn=0x70e00 order=9 migratetype=1{gfp}"
            );
            parse_line(1, &line).unwrap()
        };
        assert!(event(" gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_WRITE|__GFP_COMP").gfp_above_dma32);
        assert!(!event(" gfp_flags=GFP_DMA32|__GFP_ZERO").gfp_above_dma32);
        assert!(!event(" gfp_flags=GFP_KERNEL|__GFP_DMA").gfp_above_dma32);
        assert!(!event("").gfp_above_dma32);
    }

    #[test]
    fn parses_comms_with_spaces_and_dashes_and_no_flags_column() {
        let line = "kworker/u4:1-ev ents-77 [001] 12.5: mm_page_alloc_zone_locked: page=x pfn=0x10 order=3 migratetype=1 percpu_refill=1";
        let (event, comm) = parse_line_with_comm(1, line).unwrap();
        assert_eq!((event.pid, event.cpu, event.order), (77, 1, 3));
        assert_eq!(comm, "kworker/u4:1-ev ents");
        assert!(event.percpu_refill);
        assert_eq!(event.ts_ns, 12_500_000_000);
        assert!(!event.softirq, "no flags column, no context");
    }

    #[test]
    fn the_flags_column_tells_a_softirq_free_from_a_task_free() {
        let event = |flags: &str| {
            let line = format!(
                "ksoftirqd/1-22 [001] {flags} 15033.360164: mm_page_free: pfn=0x18a038 order=3"
            );
            parse_line(1, &line).unwrap()
        };
        assert!(event("..s..").softirq);
        assert!(event("d.H1.").softirq, "a hard interrupt inside a softirq");
        assert!(!event(".....").softirq);
        assert!(
            !event("d.h1.").softirq,
            "a hard interrupt alone is not a softirq"
        );
    }

    #[test]
    fn each_pid_keeps_the_name_it_had_last() {
        let text = "  make-9 [000] ..... 1.0: mm_page_alloc: pfn=0x1 order=0 migratetype=1\n  cc1-9 [001] ..... 1.1: mm_page_free: pfn=0x1 order=0\n  make-8 [000] ..... 1.2: mm_page_free: pfn=0x2 order=0\n";
        let trace = parse_text(text);
        assert_eq!(trace.comms.get(&9).map(String::as_str), Some("cc1"));
        assert_eq!(trace.comms.get(&8).map(String::as_str), Some("make"));
        assert_eq!(trace.comms.len(), 2);
    }

    #[test]
    fn dropping_a_task_removes_its_events_and_only_its() {
        let text = "  kdamond.0-81 [000] ..... 1.0: mm_page_free: pfn=0x10 order=2\n  cc1-9 [000] ..... 1.1: mm_page_free: pfn=0x1 order=0\n  kdamond.0-81 [001] ..... 1.2: mm_page_free: pfn=0x14 order=2\n  kdamond-like-7 [001] ..... 1.3: mm_page_free: pfn=0x2 order=0\n";
        let mut trace = parse_text(text);
        assert_eq!(trace.drop_tasks(&["nothing".to_string()]), 0);
        assert_eq!(trace.events.len(), 4);
        assert_eq!(trace.drop_tasks(&["kdamond.".to_string()]), 2);
        let pids: Vec<u32> = trace.events.iter().map(|e| e.pid).collect();
        assert_eq!(pids, [9, 7], "cc1's and the other task's stay, in order");
        assert_eq!(trace.drop_tasks(&["kdamond".to_string()]), 1);
        assert_eq!(trace.events.len(), 1);
    }

    #[test]
    fn problems_are_named_and_counted() {
        let text = format!(
            "# tracer: nop\n{ALLOC}\n  bash-1 [000] ..... 1.0: sched_switch: a=b\n  bash-1 [000] ..... 0.5: mm_page_free: pfn=0x1 order=0\ngarbage\n  bash-1 [001] ..... 1.000001: mm_page_free: pfn=zz order=0\n  bash-1 [000] ..... 7763.3: mm_page_alloc: pfn=0xffffffffffffffff order=0 migratetype=0\n  bash-1 [000] ..... 7763.4: mm_page_free: pf"
        );
        let trace = parse_text(&text);
        let count = |k| trace.problems.counts.get(&k).copied().unwrap_or(0);
        assert_eq!(count(ProblemKind::UnknownEvent), 1);
        assert_eq!(count(ProblemKind::Malformed), 1);
        assert_eq!(count(ProblemKind::BadField), 2);
        assert_eq!(count(ProblemKind::FailedAlloc), 1);
        assert_eq!(count(ProblemKind::OutOfOrderSameCpu), 1);
        assert_eq!(trace.events.len(), 2);
        assert!(trace.events[0].ts_ns < trace.events[1].ts_ns, "sorted");
        assert_eq!(trace.problems.samples[0].line, 3);
    }

    #[test]
    fn reads_the_container_and_notices_truncation() {
        let text = format!(
            "{CONTAINER_MAGIC}\n# command: make\n{SECTION_PREFIX}zoneinfo-before\nNode 0, zone DMA\n{SECTION_PREFIX}trace\n{ALLOC}\n{END_MARKER}\n"
        );
        let trace = parse_text(&text);
        let recording = trace.recording.unwrap();
        assert!(recording.complete);
        assert_eq!(recording.meta("command"), Some("make"));
        assert_eq!(
            recording.section("zoneinfo-before"),
            Some("Node 0, zone DMA\n")
        );
        assert_eq!(trace.events.len(), 1);
        assert_eq!(trace.events[0].line, 6);
        let cut = parse_text(&text[..text.len() - 7]);
        assert!(!cut.recording.unwrap().complete);
    }
}
