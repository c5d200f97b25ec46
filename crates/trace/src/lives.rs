//! How a recorded build's processes fault over their lives: for each process whose whole
//! life the recording holds, how long it lived, how many pages it faulted, and where in
//! its life the faults came; summed up per program (`comm`) and, within a program, by
//! the length of life.
//!
//! The question it answers is the kbuild model's working set: a simulated process faults
//! at one rate for its whole life, so its footprint grows with its lifetime (`W ≈ r·L`,
//! docs/reference/workloads.md §2.1), and its faults sit on average at the middle of its
//! life. A program whose faults per millisecond fall with its lifetime, or whose faults
//! come early, holds a footprint that stops growing.
//!
//! A life here runs from the process's first kmem event to its last: the first faults of
//! `exec` to the frees of its exit (which run in the exiting task). A process whose first
//! or last event lies within [`EDGE_NS`] of the recording's own first or last event may
//! have been cut by it and is left out. A "fault" is an order-0 MOVABLE `mm_page_alloc`
//! ([`crate::work`]'s).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::parse::{EventKind, Trace};

/// `MIGRATE_MOVABLE` in the events' `migratetype` field.
const MIGRATE_MOVABLE: i32 = 1;

/// A process whose first or last event is this close to the recording's edges may have
/// run before or after it: 100 ms.
pub const EDGE_NS: u64 = 100_000_000;

/// One process's whole life.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Life {
    /// Its pid.
    pub pid: u32,
    /// The program it ran last.
    pub comm: String,
    /// From its first event to its last, in ms.
    pub life_ms: f64,
    /// Its faults.
    pub faults: u64,
    /// Where its faults came, on average, as a share of its life: 0 at its first event,
    /// 1 at its last; 0.5 for faults spread evenly.
    pub fault_position: f64,
}

#[derive(Default)]
struct Span {
    first_ns: u64,
    last_ns: u64,
    faults: u64,
    /// Σ (fault time − the recording's first event), for the mean fault time.
    fault_ns_sum: u128,
}

/// Every process of `trace` whose whole life it holds and that faulted at least once, in
/// pid order.
pub fn measure(trace: &Trace) -> Vec<Life> {
    let (Some(start), Some(end)) = (trace.events.first(), trace.events.last()) else {
        return Vec::new();
    };
    let (start, end) = (start.ts_ns, end.ts_ns);
    let mut spans: BTreeMap<u32, Span> = BTreeMap::new();
    for event in &trace.events {
        let span = spans.entry(event.pid).or_insert_with(|| Span {
            first_ns: event.ts_ns,
            ..Span::default()
        });
        span.last_ns = event.ts_ns;
        let fault = event.kind == EventKind::Alloc
            && event.order == 0
            && event.migratetype == MIGRATE_MOVABLE;
        if fault {
            span.faults += 1;
            span.fault_ns_sum += u128::from(event.ts_ns - start);
        }
    }
    spans
        .into_iter()
        .filter(|(_, s)| {
            s.faults > 0
                && s.last_ns > s.first_ns
                && s.first_ns >= start + EDGE_NS
                && s.last_ns + EDGE_NS <= end
        })
        .map(|(pid, s)| {
            let life_ns = (s.last_ns - s.first_ns) as f64;
            let mean_fault_ns = s.fault_ns_sum as f64 / s.faults as f64;
            Life {
                pid,
                comm: trace.comms.get(&pid).cloned().unwrap_or_default(),
                life_ms: life_ns / 1e6,
                faults: s.faults,
                fault_position: (mean_fault_ns - (s.first_ns - start) as f64) / life_ns,
            }
        })
        .collect()
}

/// A group of lives: how many, how long, how many faults.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Group {
    /// Processes.
    pub processes: u64,
    /// Mean life, in ms.
    pub mean_life_ms: f64,
    /// Mean faults per process.
    pub mean_faults: f64,
    /// Faults per ms of life over the group (Σ faults / Σ life).
    pub faults_per_ms: f64,
    /// Mean [`Life::fault_position`].
    pub fault_position: f64,
}

impl Group {
    fn of(lives: &[&Life]) -> Group {
        let n = lives.len() as f64;
        if lives.is_empty() {
            return Group::default();
        }
        let life: f64 = lives.iter().map(|l| l.life_ms).sum();
        let faults: u64 = lives.iter().map(|l| l.faults).sum();
        Group {
            processes: lives.len() as u64,
            mean_life_ms: life / n,
            mean_faults: faults as f64 / n,
            faults_per_ms: faults as f64 / life,
            fault_position: lives.iter().map(|l| l.fault_position).sum::<f64>() / n,
        }
    }
}

/// One program's lives: all of them, and in thirds by length of life (shortest first).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Program {
    /// The program (`comm`).
    pub comm: String,
    /// All its lives.
    pub all: Group,
    /// Its lives in thirds by length, shortest first (the first third takes the
    /// remainder's extra processes last: sizes ⌈n/3⌉, ⌈(n−1)/3⌉, ⌊n/3⌋).
    pub by_life: [Group; 3],
}

/// `lives` by program, the programs with the most faults first.
pub fn by_program(lives: &[Life]) -> Vec<Program> {
    let mut programs: BTreeMap<&str, Vec<&Life>> = BTreeMap::new();
    for life in lives {
        programs.entry(life.comm.as_str()).or_default().push(life);
    }
    let mut out: Vec<Program> = programs
        .into_iter()
        .map(|(comm, mut lives)| {
            lives.sort_by(|a, b| a.life_ms.total_cmp(&b.life_ms));
            let n = lives.len();
            let cut = [0, n.div_ceil(3), n - n / 3, n];
            Program {
                comm: comm.to_owned(),
                all: Group::of(&lives),
                by_life: [0, 1, 2].map(|i| Group::of(&lives[cut[i]..cut[i + 1]])),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        let faults = |p: &Program| p.all.mean_faults * p.all.processes as f64;
        faults(b).total_cmp(&faults(a)).then(a.comm.cmp(&b.comm))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_text;

    fn fault(comm: &str, pid: u32, s: f64, pfn: u64) -> String {
        format!("  {comm}-{pid} [000] ..... {s:.6}: mm_page_alloc: pfn={pfn:#x} order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE\n")
    }

    fn free(comm: &str, pid: u32, s: f64, pfn: u64) -> String {
        format!("  {comm}-{pid} [000] ..... {s:.6}: mm_page_free: pfn={pfn:#x} order=0\n")
    }

    /// A recording from 1.0 s to 3.0 s: `make` spans it (cut at both ends), cc1 7 faults
    /// three times early in a 1-s life, cc1 8 twice evenly in a 0.2-s life, as 9 lives
    /// 0.1 s and faults once, and kworker 10 never faults.
    fn trace() -> Trace {
        let mut text = String::new();
        text += &fault("make", 5, 1.0, 0x10);
        text += &fault("cc1", 7, 1.2, 0x100);
        text += &fault("cc1", 7, 1.3, 0x101);
        text += &fault("cc1", 7, 1.4, 0x102);
        text += &fault("cc1", 8, 1.5, 0x200);
        text += &fault("as", 9, 1.6, 0x300);
        text += &free("as", 9, 1.7, 0x300);
        text += &fault("cc1", 8, 1.7, 0x201);
        text += &free("kworker/0:1", 10, 1.8, 0x500);
        text += &free("kworker/0:1", 10, 1.9, 0x501);
        text += &free("cc1", 7, 2.2, 0x100);
        text += &free("make", 5, 3.0, 0x10);
        parse_text(&text)
    }

    #[test]
    fn a_life_runs_from_first_to_last_event_and_places_its_faults() {
        let lives = measure(&trace());
        let pids: Vec<u32> = lives.iter().map(|l| l.pid).collect();
        assert_eq!(
            pids,
            [7, 8, 9],
            "make is cut by the edges, kworker never faults"
        );
        let cc1 = &lives[0];
        assert!((cc1.life_ms - 1000.0).abs() < 1e-6);
        assert_eq!(cc1.faults, 3);
        // Faults at 0, 0.1 and 0.2 s of a 1-s life.
        assert!((cc1.fault_position - 0.1).abs() < 1e-9);
        assert!((lives[1].fault_position - 0.5).abs() < 1e-9);
        assert!((lives[2].fault_position - 0.0).abs() < 1e-9);
    }

    #[test]
    fn programs_sum_their_lives_and_split_them_by_length() {
        let programs = by_program(&measure(&trace()));
        let names: Vec<&str> = programs.iter().map(|p| p.comm.as_str()).collect();
        assert_eq!(names, ["cc1", "as"], "most faults first");
        let cc1 = &programs[0];
        assert_eq!(cc1.all.processes, 2);
        assert!((cc1.all.faults_per_ms - 5.0 / 1200.0).abs() < 1e-12);
        assert!((cc1.all.fault_position - 0.3).abs() < 1e-9);
        // Two lives in thirds: the short one, the long one, none.
        let sizes = cc1.by_life.clone().map(|g| g.processes);
        assert_eq!(sizes, [1, 1, 0]);
        assert!((cc1.by_life[0].mean_life_ms - 200.0).abs() < 1e-6);
        assert!((cc1.by_life[1].faults_per_ms - 3.0 / 1000.0).abs() < 1e-12);
    }

    #[test]
    fn an_empty_trace_has_no_lives() {
        assert!(measure(&parse_text("")).is_empty());
        assert!(by_program(&[]).is_empty());
    }
}
