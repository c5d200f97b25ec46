//! When a recorded workload frees blocks of orders 1–3 to the pagesets, and what each
//! pageset saw just before: the input of the `free_high` rule, which drains a pageset
//! on a high-order free only when the pageset's previous free was high-order too (patch
//! 1's `PCPF_PREV_FREE_HIGH_ORDER`) and frees have been streaming (`free_factor > 0`,
//! later `free_count ≥ batch`, both halved by each allocation from the pageset).
//!
//! For each recording: the high-order frees per process and per fault; the share whose
//! previous free on the same pageset (CPU and zone) was high-order, with and without an
//! allocation from that pageset in between; the runs of consecutive high-order frees;
//! and where in a process's life each one happened: in the exit's burst (after the
//! process's last fault), mid-life, in a task without faults, in a kernel thread, or in
//! softirq (RCU callbacks: deferred slab and task frees, whichever task was interrupted).
//! And whose block each one was (its allocation's task, if the recording holds it, and
//! whether the free was the task's first page event on that CPU after another task's:
//! the last reference to an exited process's `mm`, held lazily by a CPU that ran it and
//! went idle, is dropped when that CPU next switches to a task with an `mm` of its own,
//! in `finish_task_switch`, so its PGD is freed by whichever task comes next), both for
//! every high-order free and for those after another, with how long after the first
//! each came and whether its CPU had any page event between.
//!
//! Meant for `mmkit trace record --command-only` recordings of a build
//! (`crates/trace/workloads/compile.sh`): every task event is then the build's. A
//! system-wide recording also counts the machine's other work; its softirq and
//! kernel-thread frees are what a command-only recording cannot see (tracefs filters by
//! the current task, and a kernel thread is not the command's).
//!
//! Linux counterpart: `mm/page_alloc.c: free_frozen_page_commit` (the `free_high`
//! decision; 6.6's `free_unref_page_commit`) and `pcp_allowed_order` (orders 0–3 and
//! the THP order go to the pagesets; larger orders straight to the buddy lists, where
//! they leave the flag alone).

use std::collections::{BTreeMap, HashMap};

use mmkit_core::views::zoneinfo::ZoneInfo;
use serde::Serialize;

use crate::parse::{EventKind, Trace};

/// `MIGRATE_MOVABLE` in the events' `migratetype` field: an order-0 movable allocation
/// is a fault (`work.rs` counts the same way).
const MIGRATE_MOVABLE: i32 = 1;

/// The THP order (`HPAGE_PMD_ORDER` on x86-64): a pageset order that clears the flag.
const THP_ORDER: u8 = 9;

/// The highest order the `free_high` rule looks at (`PAGE_ALLOC_COSTLY_ORDER`).
const HIGH_ORDER_MAX: u8 = 3;

/// A free this close to the end of its task's frees counts as the end of the exit.
pub const EXIT_TAIL_FREES: u64 = 16;

/// Run lengths counted one by one; longer runs share the last bucket.
pub const RUN_BUCKETS: usize = 8;

/// Where in a process's life a high-order free happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct When {
    /// In softirq (RCU callbacks), whatever task it interrupted.
    pub softirq: u64,
    /// In a kernel thread's task context (kworker, ksoftirqd, rcu, kswapd, swapper).
    pub kernel_thread: u64,
    /// In a task with faults, after its last fault, among its last [`EXIT_TAIL_FREES`]
    /// frees: the end of the exit (page tables, PGD, task and mm structures).
    pub exit_tail: u64,
    /// After its last fault, earlier in the exit's burst.
    pub exit: u64,
    /// Before its last fault.
    pub midlife: u64,
    /// In a task that made no fault in the recording (a shell between commands, make).
    pub no_faults: u64,
}

/// Whose block a high-order free returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Owners {
    /// The block's allocation is not in the recording: made before it began, or by a
    /// task it leaves out (a kernel thread, the idle task's interrupts).
    pub untraced: u64,
    /// Allocated by the task that frees it (a PGD freed at the task's next `exec`).
    pub own: u64,
    /// Allocated by another task and freed as the freeing task's first page event on
    /// this CPU after another task's: at a context switch, where the last lazy
    /// reference to an exited process's `mm` is dropped.
    pub other_at_switch: u64,
    /// Allocated by another task and freed later in the freeing task's run on the CPU.
    pub other: u64,
}

impl Owners {
    fn count(&mut self, owner: Owner) {
        *match owner {
            Owner::Untraced => &mut self.untraced,
            Owner::Own => &mut self.own,
            Owner::OtherAtSwitch => &mut self.other_at_switch,
            Owner::Other => &mut self.other,
        } += 1;
    }
}

#[derive(Clone, Copy)]
enum Owner {
    Untraced,
    Own,
    OtherAtSwitch,
    Other,
}

/// The high-order frees after another on their pageset: how long after the first, and
/// whose blocks the second returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pairs {
    /// Less than 1 ms after the first.
    pub within_1ms: u64,
    /// 1 ms to 100 ms after.
    pub within_100ms: u64,
    /// 100 ms or more after.
    pub later: u64,
    /// No page event at all on the CPU between the two (no allocation, no free of any
    /// order, in any zone): the CPU ran nothing the recording holds between them, idle
    /// or in tasks it leaves out.
    pub cpu_quiet: u64,
    /// Whose block the second free returned.
    pub second: Owners,
    /// Whose block the first free returned.
    pub first: Owners,
}

/// One recording's high-order frees.
#[derive(Clone, Debug, Serialize)]
pub struct HighOrderFrees {
    /// The recording's scope (`command …` or `system`); `None` for plain text.
    pub scope: Option<String>,
    /// Seconds from the first event to the last.
    pub seconds: f64,
    /// Tasks with at least one fault.
    pub processes: u64,
    /// Order-0 movable allocations.
    pub faults: u64,
    /// Pageset frees (`mm_page_free` of a pageset order) by order 0, 1, 2, 3.
    pub frees: [u64; 4],
    /// Pageset frees of the THP order.
    pub thp_frees: u64,
    /// High-order frees whose pageset's previous free was of order 1–3.
    pub after_high: u64,
    /// … with no allocation from that pageset in between.
    pub after_high_no_alloc: u64,
    /// Runs of consecutive high-order frees on one pageset, by length (1, 2, …,
    /// [`RUN_BUCKETS`] and longer).
    pub runs: [u64; RUN_BUCKETS],
    /// Where each high-order free happened.
    pub when: When,
    /// High-order frees of a block the same task allocated on the same CPU as that CPU's
    /// previous page event (a folio allocated and dropped at once, e.g. a readahead
    /// folio that lost a race to the page cache).
    pub freed_at_once: u64,
    /// High-order frees of blocks allocated in the recording.
    pub of_traced_blocks: u64,
    /// … on another CPU than the allocation.
    pub on_other_cpu: u64,
    /// Whose block each high-order free returned.
    pub owners: Owners,
    /// The frees counted in `after_high`, by gap and owner.
    pub pairs: Pairs,
    /// Processes (tasks with faults) by how many blocks not their own they freed in
    /// task context after their last fault, other than at a switch: 1, 2, 3, 4 or more.
    /// The kernel blocks an exit lets go of (the slabs its VMAs emptied), as a model of
    /// the exit would free them.
    pub exit_blocks: [u64; 4],
}

impl HighOrderFrees {
    /// Frees of orders 1–3.
    pub fn high(&self) -> u64 {
        self.frees[1..].iter().sum()
    }

    /// High-order frees per process (0 without processes).
    pub fn per_process(&self) -> f64 {
        ratio(self.high(), self.processes)
    }

    /// High-order frees per fault.
    pub fn per_fault(&self) -> f64 {
        ratio(self.high(), self.faults)
    }

    /// Runs of consecutive high-order frees.
    pub fn run_count(&self) -> u64 {
        self.runs.iter().sum()
    }

    /// High-order frees in runs of two or more.
    pub fn in_runs_of_two_or_more(&self) -> u64 {
        self.high() - self.runs[0]
    }
}

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// Whether `comm` (with `pid`) is a kernel thread: the idle task or a name the kernel
/// gives its threads.
fn kernel_thread(pid: u32, comm: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "swapper",
        "kworker/",
        "ksoftirqd/",
        "rcu",
        "migration/",
        "kswapd",
        "kcompactd",
        "khugepaged",
        "kdamond",
        "cpuhp/",
    ];
    pid == 0 || PREFIXES.iter().any(|p| comm.starts_with(p))
}

/// What one pageset (CPU, zone) saw last.
#[derive(Clone, Copy, Default)]
struct Pageset {
    /// The last pageset free was of order 1–3 (the kernel's flag).
    prev_high: bool,
    /// An allocation from this pageset since its last free.
    alloc_since_free: bool,
    /// Length of the current run of high-order frees.
    run: u64,
    /// The last high-order free's time, whose block it was, and its CPU's page-event
    /// count then.
    prev_high_ns: u64,
    prev_owner: Option<Owner>,
    prev_cpu_events: u64,
}

/// Count `trace`'s high-order frees; `zones` (the recording's snapshot) split each CPU's
/// frees by zone, as the kernel's pagesets are; with none, by CPU only.
pub fn measure(trace: &Trace, zones: &[ZoneInfo]) -> HighOrderFrees {
    let zone_of = |pfn: u64| {
        zones
            .iter()
            .position(|z| pfn >= z.start_pfn && pfn < z.start_pfn + z.spanned)
            .unwrap_or(usize::MAX)
    };
    let comm = |pid: u32| trace.comms.get(&pid).map_or("", String::as_str);
    // Each task's last fault and its frees in task context, for the exit's position.
    let mut last_fault: HashMap<u32, u64> = HashMap::new();
    let mut task_frees: HashMap<u32, u64> = HashMap::new();
    let mut faults = 0;
    for e in &trace.events {
        match e.kind {
            EventKind::Alloc if e.order == 0 && e.migratetype == MIGRATE_MOVABLE => {
                faults += 1;
                last_fault.insert(e.pid, e.ts_ns);
            }
            EventKind::Free if !e.softirq => *task_frees.entry(e.pid).or_default() += 1,
            _ => {}
        }
    }
    let mut out = HighOrderFrees {
        scope: trace
            .recording
            .as_ref()
            .and_then(|r| r.meta("scope"))
            .map(str::to_owned),
        seconds: match (trace.events.first(), trace.events.last()) {
            (Some(a), Some(b)) => (b.ts_ns - a.ts_ns) as f64 / 1e9,
            _ => 0.0,
        },
        processes: last_fault.len() as u64,
        faults,
        frees: [0; 4],
        thp_frees: 0,
        after_high: 0,
        after_high_no_alloc: 0,
        runs: [0; RUN_BUCKETS],
        when: When::default(),
        freed_at_once: 0,
        of_traced_blocks: 0,
        on_other_cpu: 0,
        owners: Owners::default(),
        pairs: Pairs::default(),
        exit_blocks: [0; 4],
    };
    let mut pagesets: BTreeMap<(u32, usize), Pageset> = BTreeMap::new();
    // Live blocks allocated in the recording: pfn → CPU and task of the allocation.
    let mut live: HashMap<u64, (u32, u32)> = HashMap::new();
    // Each CPU's last allocation or free: (kind, pfn, pid).
    let mut last_on_cpu: HashMap<u32, (EventKind, u64, u32)> = HashMap::new();
    // Each CPU's allocations and frees so far.
    let mut cpu_events: HashMap<u32, u64> = HashMap::new();
    // Per task: blocks not its own freed after its last fault, not at a switch.
    let mut exit_blocks: HashMap<u32, u64> = HashMap::new();
    let mut frees_seen: HashMap<u32, u64> = HashMap::new();
    for e in &trace.events {
        // The task-context frees this task has left after this one.
        let mut frees_left = 0;
        if e.kind == EventKind::Free && !e.softirq {
            let seen = frees_seen.entry(e.pid).or_default();
            *seen += 1;
            frees_left = task_frees.get(&e.pid).copied().unwrap_or(0) - *seen;
        }
        let pageset = pagesets.entry((e.cpu, zone_of(e.pfn))).or_default();
        match e.kind {
            EventKind::Alloc => {
                if e.order <= HIGH_ORDER_MAX || e.order == THP_ORDER {
                    pageset.alloc_since_free = true;
                }
                live.insert(e.pfn, (e.cpu, e.pid));
            }
            EventKind::Free if e.order == 0 || e.order == THP_ORDER => {
                out.frees[0] += u64::from(e.order == 0);
                out.thp_frees += u64::from(e.order == THP_ORDER);
                end_run(pageset, &mut out.runs);
                pageset.prev_high = false;
                pageset.alloc_since_free = false;
                live.remove(&e.pfn);
            }
            EventKind::Free if e.order <= HIGH_ORDER_MAX => {
                out.frees[e.order as usize] += 1;
                let last = last_on_cpu.get(&e.cpu);
                if last == Some(&(EventKind::Alloc, e.pfn, e.pid)) {
                    out.freed_at_once += 1;
                }
                let allocation = live.remove(&e.pfn);
                if let Some((cpu, _)) = allocation {
                    out.of_traced_blocks += 1;
                    out.on_other_cpu += u64::from(cpu != e.cpu);
                }
                // No earlier event on the CPU, or another task's: the task has just been
                // switched in, as far as the recording tells.
                let at_switch = last.map_or(true, |&(_, _, pid)| pid != e.pid);
                let owner = match allocation {
                    None => Owner::Untraced,
                    Some((_, pid)) if pid == e.pid => Owner::Own,
                    Some(_) if at_switch => Owner::OtherAtSwitch,
                    Some(_) => Owner::Other,
                };
                out.owners.count(owner);
                let after_last_fault = last_fault.get(&e.pid).is_some_and(|&t| e.ts_ns >= t);
                if after_last_fault
                    && !e.softirq
                    && !at_switch
                    && matches!(owner, Owner::Untraced | Owner::Other)
                {
                    *exit_blocks.entry(e.pid).or_default() += 1;
                }
                let events = cpu_events.get(&e.cpu).copied().unwrap_or(0);
                if pageset.prev_high {
                    out.after_high += 1;
                    out.after_high_no_alloc += u64::from(!pageset.alloc_since_free);
                    let pairs = &mut out.pairs;
                    *match e.ts_ns.saturating_sub(pageset.prev_high_ns) {
                        gap if gap < 1_000_000 => &mut pairs.within_1ms,
                        gap if gap < 100_000_000 => &mut pairs.within_100ms,
                        _ => &mut pairs.later,
                    } += 1;
                    pairs.cpu_quiet += u64::from(events == pageset.prev_cpu_events);
                    pairs.second.count(owner);
                    if let Some(first) = pageset.prev_owner {
                        pairs.first.count(first);
                    }
                }
                pageset.prev_high = true;
                pageset.alloc_since_free = false;
                pageset.run += 1;
                pageset.prev_high_ns = e.ts_ns;
                pageset.prev_owner = Some(owner);
                // This free's own count: the CPU is quiet until the next event.
                pageset.prev_cpu_events = events + 1;
                let task = Task {
                    kernel_thread: kernel_thread(e.pid, comm(e.pid)),
                    last_fault_ns: last_fault.get(&e.pid).copied(),
                    frees_left,
                };
                *out.when.bucket(e.softirq, e.ts_ns, task) += 1;
            }
            // Larger orders go straight to the buddy lists, past the pagesets.
            EventKind::Free => {
                live.remove(&e.pfn);
            }
            EventKind::FreeBatched | EventKind::ZoneLocked | EventKind::PcpuDrain => {}
        }
        if matches!(e.kind, EventKind::Alloc | EventKind::Free) {
            last_on_cpu.insert(e.cpu, (e.kind, e.pfn, e.pid));
            *cpu_events.entry(e.cpu).or_default() += 1;
        }
    }
    for pageset in pagesets.values_mut() {
        end_run(pageset, &mut out.runs);
    }
    for &n in exit_blocks.values() {
        out.exit_blocks[(n as usize).min(4) - 1] += 1;
    }
    out
}

/// The task a free ran in, as far as the recording tells.
#[derive(Clone, Copy)]
struct Task {
    kernel_thread: bool,
    /// Its last fault in the recording.
    last_fault_ns: Option<u64>,
    /// Its task-context frees after this one.
    frees_left: u64,
}

impl When {
    fn bucket(&mut self, softirq: bool, ts_ns: u64, task: Task) -> &mut u64 {
        match task.last_fault_ns {
            _ if softirq => &mut self.softirq,
            _ if task.kernel_thread => &mut self.kernel_thread,
            None => &mut self.no_faults,
            Some(t) if ts_ns < t => &mut self.midlife,
            Some(_) if task.frees_left < EXIT_TAIL_FREES => &mut self.exit_tail,
            Some(_) => &mut self.exit,
        }
    }
}

fn end_run(pageset: &mut Pageset, runs: &mut [u64; RUN_BUCKETS]) {
    if pageset.run > 0 {
        runs[(pageset.run as usize).min(RUN_BUCKETS) - 1] += 1;
        pageset.run = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_text;

    #[test]
    fn counts_consecutive_high_order_frees_per_pageset_and_where_each_happened() {
        // cc1-7 faults on CPU 0 and exits: an order-0 free, then two order-2 frees with
        // an allocation between them, then an order-1 free right after it. An order-3 free
        // on CPU 1 (its own run), and an RCU free in softirq on CPU 0 after the exit.
        let text = "\
  cc1-7 [000] ..... 1.0: mm_page_alloc: pfn=0x1000 order=0 migratetype=1
  cc1-7 [000] ..... 1.1: mm_page_alloc: pfn=0x2000 order=2 migratetype=0
  cc1-7 [000] ..... 1.2: mm_page_free: pfn=0x1000 order=0
  cc1-7 [000] ..... 1.3: mm_page_free: pfn=0x2000 order=2
  cc1-7 [000] ..... 1.4: mm_page_alloc: pfn=0x3000 order=0 migratetype=0
  cc1-7 [000] ..... 1.5: mm_page_free: pfn=0x2004 order=2
  cc1-7 [000] ..... 1.6: mm_page_free: pfn=0x2008 order=1
  make-5 [001] ..... 1.7: mm_page_alloc: pfn=0x4000 order=3 migratetype=1
  make-5 [001] ..... 1.8: mm_page_free: pfn=0x4000 order=3
  sh-9 [000] ..s.. 1.9: mm_page_free: pfn=0x5000 order=3
";
        let counts = measure(&parse_text(text), &[]);
        assert_eq!((counts.processes, counts.faults), (1, 1));
        assert_eq!(counts.frees, [1, 1, 2, 2]);
        assert_eq!(counts.high(), 5);
        // 0x2004 followed 0x2000 (an allocation between), 0x2008 followed 0x2004 (none),
        // and the softirq free followed 0x2008 on CPU 0.
        assert_eq!((counts.after_high, counts.after_high_no_alloc), (3, 2));
        // CPU 0: one run of four; CPU 1: one run of one.
        assert_eq!(counts.runs[..4], [1, 0, 0, 1]);
        assert_eq!(counts.in_runs_of_two_or_more(), 4);
        assert_eq!(
            counts.when,
            When {
                softirq: 1,
                exit_tail: 3,
                no_faults: 1,
                ..When::default()
            }
        );
        // make-5 freed the block it had just allocated.
        assert_eq!(counts.freed_at_once, 1);
        assert_eq!((counts.of_traced_blocks, counts.on_other_cpu), (2, 0));
        // 0x2000 and 0x4000 were freed by the tasks that allocated them; the rest were
        // never allocated in the recording.
        assert_eq!(
            counts.owners,
            Owners {
                own: 2,
                untraced: 3,
                ..Owners::default()
            }
        );
        assert_eq!(
            counts.pairs.first.own + counts.pairs.first.untraced,
            counts.after_high
        );
        // cc1-7 freed two blocks it never allocated after its last fault.
        assert_eq!(counts.exit_blocks, [0, 1, 0, 0]);
    }

    #[test]
    fn whose_block_each_high_order_free_returned_and_the_gap_before_it() {
        // cc1-7 allocates a PGD on CPU 2 and a kernel block on CPU 1, then exits on CPU
        // 0: an order-0 free, then an order-1 block the recording never saw allocated.
        // CPU 0 is quiet for half a second; as-8 comes and its first event is the free
        // of cc1-7's PGD (the lazy reference dropped at the switch); it then allocates
        // and frees a block of its own, and frees cc1-7's kernel block.
        let text = "\
  cc1-7 [002] ..... 1.000000: mm_page_alloc: pfn=0x2000 order=1 migratetype=0
  cc1-7 [001] ..... 1.500000: mm_page_alloc: pfn=0x6000 order=2 migratetype=0
  cc1-7 [000] ..... 2.000000: mm_page_alloc: pfn=0x1000 order=0 migratetype=1
  cc1-7 [000] ..... 2.000100: mm_page_free: pfn=0x1000 order=0
  cc1-7 [000] ..... 2.000200: mm_page_free: pfn=0x3000 order=1
  as-8 [000] ..... 2.500000: mm_page_free: pfn=0x2000 order=1
  as-8 [000] ..... 2.500500: mm_page_alloc: pfn=0x4000 order=1 migratetype=0
  as-8 [000] ..... 2.502000: mm_page_free: pfn=0x4000 order=1
  as-8 [000] ..... 2.502500: mm_page_free: pfn=0x6000 order=2
";
        let counts = measure(&parse_text(text), &[]);
        let one_each = Owners {
            untraced: 1,
            own: 1,
            other_at_switch: 1,
            other: 1,
        };
        assert_eq!(counts.owners, one_each);
        assert_eq!(counts.after_high, 3);
        assert_eq!(
            counts.pairs,
            Pairs {
                // 0.4998 s after the exit's block, 1.5 ms and 0.5 ms after the one before.
                later: 1,
                within_100ms: 1,
                within_1ms: 1,
                // The PGD's free and the kernel block's followed the free before with no
                // event between; as-8's own block had its allocation between.
                cpu_quiet: 2,
                second: Owners {
                    untraced: 0,
                    ..one_each
                },
                first: Owners {
                    other: 0,
                    ..one_each
                },
            }
        );
        assert_eq!((counts.of_traced_blocks, counts.on_other_cpu), (3, 2));
        assert_eq!(counts.freed_at_once, 1);
        // cc1-7's exit freed one block not its own; as-8, which freed cc1-7's PGD and
        // kernel block, made no fault.
        assert_eq!(counts.exit_blocks, [1, 0, 0, 0]);
    }

    #[test]
    fn a_free_before_the_last_fault_is_mid_life_and_order_zero_ends_a_run() {
        let text = "\
  cc1-7 [000] ..... 1.0: mm_page_free: pfn=0x2000 order=1
  cc1-7 [000] ..... 1.1: mm_page_alloc: pfn=0x1000 order=0 migratetype=1
  kworker/0:1-3 [000] ..... 1.2: mm_page_free: pfn=0x2002 order=1
  cc1-7 [000] ..... 1.3: mm_page_free: pfn=0x1000 order=0
  cc1-7 [000] ..... 1.4: mm_page_free: pfn=0x2004 order=1
";
        let counts = measure(&parse_text(text), &[]);
        assert_eq!(counts.when.midlife, 1);
        assert_eq!(counts.when.kernel_thread, 1);
        assert_eq!(counts.when.exit_tail, 1);
        assert_eq!(counts.runs[..2], [1, 1]);
        assert_eq!(counts.after_high, 1);
    }
}
