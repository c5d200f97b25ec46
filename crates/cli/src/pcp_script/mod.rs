//! `mmkit pcp-script`: run a script of per-CPU page allocator operations and show, after
//! each step, the pageset it affected and the events it caused.
//!
//! This is how a kernel developer asks "what does the PCP do with this sequence under this
//! policy?". The module reads and checks the script ([`parse`]), builds a
//! [`PageAllocator`] for the machine and policy given, calls one `mmkit-core` entry point
//! per operation (`alloc_pages`, `free_pages`, `free_pages_batch`,
//! `alloc_pages_bulk_list`, `vmstat_tick`, `drain_local_pages`, `drain_all_pages`,
//! `run_drain_work`, `cpu_down`, `zone_pcp_disable`, each in its `_report` form, which
//! also says what the call did under the zone lock; `cpu_up`, `zone_pcp_enable`,
//! `set_settings`, `Zone::set_flag`/`clear_flag`) and prints what changed ([`report`]). The
//! only state kept here is which blocks the script holds, under which labels, and which
//! `drain all … later` still waits for queued work. `docs/PCP-SCRIPT.md` describes the
//! format, with worked examples in `examples/pcp/`.
//!
//! Linux has no counterpart: on a kernel one would trace `mm_page_alloc`,
//! `mm_page_pcpu_drain` and `/proc/zoneinfo` around a workload. Here the sequence is exact
//! and repeatable, one operation at a time, so pageset locks never contend.

mod parse;
mod report;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use mmkit_core::page_alloc::MigrateType;
use mmkit_core::page_alloc::{
    AllocAttempt, BatchFreeError, Caller, Context, CpuId, DrainAll, DrainCaller, DrainWork,
    WatermarkKind, ZoneFlags, ZoneId, ZoneLockHold,
};
use mmkit_core::policy::DrainMode;
use mmkit_core::{Gfp, Order, PageAllocator, Pfn, Policy, Settings};

use crate::machine::{policy_preset, DefaultMachine, MachineArgs};
use crate::output::print_json;
use crate::CliError;
use parse::{Line, Op, Repeat, Script, Setting, Target};
use report::{Outcome, Shown, Snapshot, StepReport, Summary};

/// The machine used when no `--zone` is given: batch 63, high_min 367, high_max 2000, the
/// pageset of `docs/reference/pcp-series.md`'s examples. `zone_batchsize`: 192000 >> 10 = 187,
/// / 4 = 46, rounddown_pow_of_two(46 + 23) − 1 = 63. min_free_kbytes 14096 makes the min
/// watermark 14096 / 4 = 3524 pages and the low one 3524 + 3524 / 4 = 4405;
/// high_min = 4405 / 12 CPUs = 367; high_max = 192000 / 8 / 12 = 2000.
const DEFAULT_MACHINE: DefaultMachine = DefaultMachine {
    zone: "Normal=192000",
    cpus: 12,
    min_free_kbytes: 14096,
};

/// How `drain all` reaches other CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DrainArg {
    /// Lock each remote pageset and drain it from the calling CPU (Linux ≥ 6.0).
    Direct,
    /// Queue work on each CPU with pages; each drains all its zones itself (Linux 4.11,
    /// Gorman 2017); `drain all … later` leaves the work for `run-work` lines.
    Workqueue,
}

/// Arguments of `mmkit pcp-script`.
#[derive(Args, Debug)]
#[command(after_help = "\
Without --zone the machine is one Normal zone of 192000 pages on 12 CPUs with \
min_free_kbytes 14096: batch 63, high_min 367, high_max 2000 (the pageset of \
docs/reference/pcp-series.md's examples). With --zone, --cpus defaults to 1 and min_free_kbytes to \
Linux's boot formula, as in `mmkit zoneinfo`.

Table columns: af = alloc_factor, ff = free_factor (before patch 9), fc = free_count \
(patch 9); pcpf = pageset flags, PREV = PCPF_PREV_FREE_HIGH_ORDER, FHB = PCPF_FREE_HIGH_BATCH; \
events are what the step did (refills, drains and zone_locked as the core reports its \
zone-lock holds, the rest as counter changes), pages marked p. The script format is in \
docs/PCP-SCRIPT.md.")]
pub struct PcpScriptArgs {
    /// The script file, or - for standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,

    /// The policy preset (base, patch1 … patch9, v6.7).
    #[arg(long, default_value = "v6.7")]
    pub policy: String,

    /// How drain all reaches other CPUs' pagesets.
    #[arg(long, value_enum, default_value_t = DrainArg::Direct)]
    pub drain: DrainArg,

    /// Requests from interrupt context (softirq:, hardirq: lines) bypass the PCP
    /// (Gorman 2017, Linux 4.11-rc1 … rc6).
    #[arg(long)]
    pub irq_bypass: bool,

    /// Show every CPU's pageset after each step, not only the step CPU's and those that
    /// changed.
    #[arg(long)]
    pub all_cpus: bool,

    /// Print a JSON array of step objects instead of the table (the summary goes to stderr).
    #[arg(long)]
    pub json: bool,
}

/// Run `mmkit pcp-script`.
pub fn run(args: &PcpScriptArgs) -> Result<(), CliError> {
    let (source, text) = read_script(&args.file)?;
    let script = parse::parse(&text).map_err(|errors| script_errors(&source, &errors))?;
    if script.lines.is_empty() {
        return Err(CliError::usage(format!(
            "{source}: the script has no operations, only blank lines and comments"
        )));
    }
    let machine = args.machine.or_default_machine(&DEFAULT_MACHINE, 1);
    let mut policy = policy_preset(&args.policy)?;
    policy.irq_bypass = args.irq_bypass;
    policy.drain = match args.drain {
        DrainArg::Direct => DrainMode::Direct,
        DrainArg::Workqueue => DrainMode::Workqueue,
    };
    let allocator = build(&machine, policy)?;
    if !allocator.zones().iter().any(|zone| zone.is_managed()) {
        return Err(CliError::usage(
            "--zone: the machine has no memory: give a zone with managed pages",
        ));
    }
    check_machine(&script, &allocator).map_err(|errors| script_errors(&source, &errors))?;
    check_drain_mode(&script, policy.drain).map_err(|errors| script_errors(&source, &errors))?;
    let header = report::render_header(&allocator);
    let (steps, summary) = execute(&script, &allocator, args.all_cpus);
    if args.json {
        print_json(&steps)?;
        eprintln!("{}", summary.render());
    } else {
        print!("{header}");
        print!("{}", report::render_table(&steps));
        println!("{}", summary.render());
    }
    match summary.verify {
        Ok(()) => Ok(()),
        Err(e) => Err(CliError::failed(format!(
            "the allocator failed verification: {e}"
        ))),
    }
}

/// Every bad line as `FILE:LINE: message`, one per line; exit status 2.
fn script_errors(source: &str, errors: &[parse::ParseError]) -> CliError {
    let lines: Vec<String> = errors
        .iter()
        .map(|e| format!("{source}:{}: {}", e.line, e.message))
        .collect();
    CliError::usage(lines.join("\n"))
}

/// The script's name for messages and its text: UTF-8 with at least one operation.
fn read_script(path: &Path) -> Result<(String, String), CliError> {
    let (source, bytes) = if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| CliError::usage(format!("reading the script from stdin: {e}")))?;
        ("<stdin>".to_owned(), bytes)
    } else {
        let bytes = crate::limits::read_input(path)
            .map_err(|e| CliError::usage(format!("reading {}: {e}", path.display())))?;
        (path.display().to_string(), bytes)
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        CliError::usage(format!("{source}:{line}: not UTF-8 text"))
    })?;
    Ok((source, text))
}

fn build(machine: &MachineArgs, policy: Policy) -> Result<PageAllocator, CliError> {
    machine.allocator(policy)
}

/// Check the script against the machine: CPUs exist, named zones exist and have memory,
/// and no line asks for more pages than the machine manages (such a line could only fail,
/// after allocating every page one call at a time, and `bulk` would size its list for it).
fn check_machine(script: &Script, allocator: &PageAllocator) -> Result<(), Vec<parse::ParseError>> {
    let errors: Vec<parse::ParseError> = script
        .lines
        .iter()
        .filter_map(|line| {
            Some(parse::ParseError {
                line: line.number,
                message: line_problem(line, allocator)?,
            })
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// What keeps `line` from running on this machine, if anything.
fn line_problem(line: &Line, allocator: &PageAllocator) -> Option<String> {
    let nr_cpus = allocator.topology().nr_cpus();
    if line.cpu >= nr_cpus {
        return Some(format!(
            "cpu{} does not exist: the machine has cpu0 … cpu{}",
            line.cpu,
            nr_cpus - 1
        ));
    }
    let managed: u64 = allocator.zones().iter().map(|z| z.managed()).sum();
    let pages = match line.op {
        Op::Alloc { count, order, .. } => count.saturating_mul(order.pages()),
        Op::Bulk { count, .. } => count as u64,
        _ => 0,
    };
    if pages > managed {
        return Some(format!(
            "{} asks for {pages} pages but the machine manages {managed}",
            line.text
        ));
    }
    let zone_ok = |id: &ZoneId| {
        allocator
            .zone(id.node, id.zone_type)
            .is_some_and(|zone| zone.present() > 0)
    };
    let zone = named_zone(&line.op).filter(|id| !zone_ok(id))?;
    Some(format!(
        "the machine has no populated zone {}:{}",
        zone.node, zone.zone_type
    ))
}

/// `drain … later` and `alloc … later` leave work queued, which only the workqueue mode
/// has.
fn check_drain_mode(script: &Script, mode: DrainMode) -> Result<(), Vec<parse::ParseError>> {
    let errors: Vec<parse::ParseError> = script
        .lines
        .iter()
        .filter(|line| {
            matches!(
                line.op,
                Op::DrainAll { later: true, .. } | Op::Alloc { later: true, .. }
            )
        })
        .filter(|_| mode != DrainMode::Workqueue)
        .map(|line| parse::ParseError {
            line: line.number,
            message: format!(
                "{}: `later` needs --drain workqueue (a direct drain queues no work)",
                line.text
            ),
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The zone an operation names, if any.
fn named_zone(op: &Op) -> Option<ZoneId> {
    match op {
        Op::DrainLocal(zone) | Op::DrainAll { zone, .. } => *zone,
        Op::PcpDisable(zone) | Op::PcpEnable(zone) | Op::Flag { zone, .. } => Some(*zone),
        _ => None,
    }
}

/// Run every line, snapshotting the zones around each and keeping the zone-lock holds
/// the core reports; then verify the allocator.
fn execute(
    script: &Script,
    allocator: &PageAllocator,
    all_cpus: bool,
) -> (Vec<StepReport>, Summary) {
    let mut runner = Runner::new(allocator);
    let start = Snapshot::take(allocator);
    let mut before = start.clone();
    let mut steps = Vec::with_capacity(script.lines.len());
    // Every hold of the run; each step's are the ones it added.
    let mut holds: Vec<ZoneLockHold> = Vec::new();
    for (index, line) in script.lines.iter().enumerate() {
        let first = holds.len();
        runner.step = index + 1;
        let outcome = runner.run(line, &mut holds);
        let after = Snapshot::take(allocator);
        let shown = Shown {
            all_cpus,
            home: home_zone(allocator, line.cpu),
        };
        let step_holds = &holds[first..];
        let report = StepReport::new(index + 1, line, outcome, &before, &after, step_holds, shown);
        steps.push(report);
        before = after;
    }
    let verify = verify(allocator, runner.held_pages());
    let summary = Summary {
        steps: steps.len(),
        failed: steps.iter().filter(|s| s.error.is_some()).count(),
        events: before.events_since(&start, &holds),
        held: (runner.held().count(), runner.held_pages()),
        waiting: runner.in_flight.as_ref().map(InFlight::describe),
        verify,
    };
    (steps, summary)
}

/// The zone an order-0 `GFP_KERNEL` request from `cpu` tries first: the highest zone of
/// its node that has memory. `run` refuses machines without memory.
fn home_zone(allocator: &PageAllocator, cpu: u32) -> ZoneId {
    let node = allocator.topology().cpu_node(cpu).unwrap_or(0);
    let zones = allocator
        .zones()
        .iter()
        .filter(|z| z.node() == node && z.is_managed());
    zones
        .last()
        .or_else(|| allocator.zones().iter().find(|z| z.is_managed()))
        .map(|z| z.id())
        .expect("run checked that some zone has memory")
}

/// Walk every zone, and check that the pages the allocator counts as allocated are the
/// pages the script holds (the script is the allocator's only user).
fn verify(allocator: &PageAllocator, held_pages: u64) -> Result<(), String> {
    let census = allocator.verify().map_err(|e| e.to_string())?;
    let allocated: u64 = census.iter().map(|c| c.allocated).sum();
    if allocated != held_pages {
        return Err(format!(
            "{allocated} pages are allocated but the script holds {held_pages}"
        ));
    }
    Ok(())
}

/// A block the script allocated.
#[derive(Debug)]
struct Block {
    pfn: Pfn,
    order: Order,
    /// Not freed by the script yet (a refused free leaves it held).
    held: bool,
}

/// The script's side of the allocator: the blocks it allocated and their labels.
struct Runner<'a> {
    allocator: &'a PageAllocator,
    blocks: Vec<Block>,
    /// Label → indices into `blocks`, in allocation order.
    names: HashMap<String, Vec<usize>>,
    /// The step being run, from 1.
    step: usize,
    /// A `drain all … later` whose work has not run on every target CPU yet.
    in_flight: Option<InFlight>,
}

/// A workqueue-mode `drain_all_pages` that queued work and waits for it: it holds the
/// drain mutex until every target CPU has run its work (`flush_work` on each).
struct InFlight {
    /// The step that asked, and the CPU its task runs on.
    step: usize,
    cpu: CpuId,
    /// The queued work, and its target CPUs as it was queued.
    work: DrainWork,
    cpus: Vec<CpuId>,
    /// Each target CPU that ran its work so far, with the step that ran it.
    ran: Vec<(CpuId, usize)>,
    /// An `alloc … later` line whose slow path queued the work: it retries when the last
    /// target has run it, and goes on with the rest of its blocks.
    alloc: Option<WaitingAlloc>,
}

/// The rest of an `alloc` line.
#[derive(Clone)]
struct AllocRequest {
    caller: Caller,
    gfp: Gfp,
    order: Order,
    /// Blocks the line asks for in all.
    count: u64,
    name: Option<String>,
    later: bool,
    /// The task is a workqueue worker (`worker:`): in workqueue mode its slow path's
    /// drain returns at once and queues nothing.
    worker: bool,
}

/// An allocation asleep in `flush_work`: which of its line's blocks, and the ones before.
struct WaitingAlloc {
    request: AllocRequest,
    /// Blocks of the line allocated before it.
    done: u64,
}

impl InFlight {
    /// The CPUs still to run their work.
    fn waiting_for(&self) -> Vec<CpuId> {
        let ran = |cpu: &CpuId| self.ran.iter().any(|(done, _)| done == cpu);
        self.cpus.iter().copied().filter(|c| !ran(c)).collect()
    }

    /// `cpu0's drain all of step 3`, or `cpu0's allocation of step 3`.
    fn requester(&self) -> String {
        let what = match self.alloc {
            Some(_) => "allocation",
            None => "drain all",
        };
        format!("cpu{}'s {what} of step {}", self.cpu, self.step)
    }

    /// `cpu0's drain all of step 3 (waiting for cpus 1,2)`.
    fn describe(&self) -> String {
        format!(
            "{} (waiting for cpus {})",
            self.requester(),
            cpu_list(&self.waiting_for())
        )
    }
}

impl<'a> Runner<'a> {
    fn new(allocator: &'a PageAllocator) -> Runner<'a> {
        Runner {
            allocator,
            blocks: Vec::new(),
            names: HashMap::new(),
            step: 0,
            in_flight: None,
        }
    }

    fn held(&self) -> impl Iterator<Item = &Block> {
        self.blocks.iter().filter(|b| b.held)
    }

    fn held_pages(&self) -> u64 {
        self.held().map(|b| b.order.pages()).sum()
    }

    /// Run one line, adding the zone-lock holds of its calls to `holds`. A failure of the
    /// operation is part of the outcome, not an error.
    fn run(&mut self, line: &Line, holds: &mut Vec<ZoneLockHold>) -> Outcome {
        let caller = Caller {
            cpu: line.cpu,
            context: line.context,
        };
        let allocator = self.allocator;
        match &line.op {
            Op::Alloc {
                count,
                order,
                migratetype,
                name,
                later,
            } => {
                let request = AllocRequest {
                    caller,
                    gfp: gfp_for(*migratetype, caller.context),
                    order: *order,
                    count: *count,
                    name: name.clone(),
                    later: *later,
                    worker: line.worker,
                };
                self.alloc(request, 0, Vec::new(), holds)
            }
            Op::Bulk {
                count,
                migratetype,
                name,
            } => self.bulk(caller, (*count, *migratetype), name.as_deref(), holds),
            Op::Free(target) => self.free(caller, target, holds),
            Op::FreeBatch(target) => self.free_batch(caller, target, holds),
            Op::Tick(repeat) => tick("ticks", self.ticks(*repeat), || {
                allocator.vmstat_tick_report(line.cpu, holds)
            }),
            Op::TickAll(repeat) => tick("rounds", self.ticks(*repeat), || {
                let cpus = 0..allocator.topology().nr_cpus();
                cpus.filter(|&cpu| allocator.vmstat_tick_report(cpu, holds))
                    .count()
                    > 0
            }),
            Op::DrainLocal(zone) => Outcome {
                note: Some(format!(
                    "drained {}p",
                    allocator.drain_local_pages_report(line.cpu, *zone, holds)
                )),
                ..Outcome::default()
            },
            Op::DrainAll { zone, later } => self.drain_all(line, *zone, *later, holds),
            Op::RunWork => self.run_work(line.cpu, holds),
            Op::Offline => self.offline(line.cpu, holds),
            Op::Online => hotplug(allocator.cpu_up(line.cpu), "already online"),
            Op::PcpDisable(zone) => match self.waits_for_drain_mutex("zone_pcp_disable") {
                Some(refused) => refused,
                None => pcp_disable(allocator, *zone, holds),
            },
            Op::PcpEnable(zone) => pcp_enable(allocator, *zone),
            Op::Set(setting) => set(allocator, *setting),
            Op::Flag { zone, changes } => flag(allocator, *zone, changes),
        }
    }

    /// The ticks a `tick` line runs: a count, or one per whole `vm.stat_interval` of a
    /// time.
    fn ticks(&self, repeat: Repeat) -> u64 {
        match repeat {
            Repeat::Times(times) => times,
            Repeat::For { ms } => ms / u64::from(self.allocator.settings().stat_interval_ms),
        }
    }

    /// A refusal if the operation would wait for the drain mutex that a `drain all … later`
    /// holds: the script runs one line at a time, so that wait would never end.
    fn waits_for_drain_mutex(&self, what: &str) -> Option<Outcome> {
        let waiting = self.in_flight.as_ref()?;
        Some(Outcome {
            error: Some(format!(
                "refused: {what} would wait for the drain mutex, held by {}; run that work \
                 first (cpuN: run-work)",
                waiting.describe()
            )),
            ..Outcome::default()
        })
    }

    /// `drain_all_pages` from `line`'s CPU (as a workqueue worker with `worker:`). In
    /// workqueue mode the queued work runs at once, in CPU order, unless `later` leaves it
    /// for `run-work` lines.
    fn drain_all(
        &mut self,
        line: &Line,
        zone: Option<ZoneId>,
        later: bool,
        holds: &mut Vec<ZoneLockHold>,
    ) -> Outcome {
        let zones: Vec<ZoneId> = zone.into_iter().collect();
        // A request for one zone waits for a running drain (`mutex_lock`).
        if zone.is_some() {
            if let Some(refused) = self.waits_for_drain_mutex("a drain of one zone") {
                return Outcome { zones, ..refused };
            }
        }
        let allocator = self.allocator;
        let caller = match line.worker {
            true => DrainCaller::WorkqueueWorker,
            false => DrainCaller::Task,
        };
        let first_hold = holds.len();
        let note = match allocator.drain_all_pages_from_report(caller, zone, holds) {
            DrainAll::Done { pages, .. } => {
                // Each drain's hold names the CPU whose pageset it emptied.
                let mut cpus: Vec<CpuId> = holds[first_hold..].iter().map(|h| h.cpu).collect();
                cpus.dedup();
                format!("drained {pages}p from cpus {}", cpu_list(&cpus))
            }
            DrainAll::Skipped => match &self.in_flight {
                Some(waiting) => {
                    format!("skipped: the drain mutex is held by {}", waiting.describe())
                }
                None => "skipped: another drain is running".to_owned(),
            },
            DrainAll::FromWorker => "returned at once: a workqueue worker does not wait for \
                                     workqueue work (PF_WQ_WORKER); nothing drained"
                .to_owned(),
            DrainAll::Queued(work) if later => {
                let cpus: Vec<CpuId> = allocator.drain_work_cpus(&work).collect();
                let note = format!(
                    "workqueue: work queued on cpus {}; cpu{} waits until each has run it",
                    cpu_list(&cpus),
                    line.cpu
                );
                self.in_flight = Some(InFlight {
                    step: self.step,
                    cpu: line.cpu,
                    work,
                    cpus,
                    ran: Vec::new(),
                    alloc: None,
                });
                note
            }
            DrainAll::Queued(work) => run_queued_work_now(allocator, &work, holds),
        };
        Outcome {
            note: Some(note),
            zones,
            ..Outcome::default()
        }
    }

    /// `cpu`'s workqueue worker runs its queued drain work; the requester's wait ends
    /// when it was the last.
    fn run_work(&mut self, cpu: CpuId, holds: &mut Vec<ZoneLockHold>) -> Outcome {
        let allocator = self.allocator;
        if !allocator.drain_work_pending(cpu) {
            return Outcome {
                note: Some(format!("no drain work queued on cpu{cpu}")),
                ..Outcome::default()
            };
        }
        let pages = allocator.run_drain_work_report(cpu, holds);
        let mut note = format!("ran its drain work: {pages}p");
        let Some(waiting) = &mut self.in_flight else {
            return Outcome {
                note: Some(note),
                ..Outcome::default()
            };
        };
        waiting.ran.push((cpu, self.step));
        let left = waiting.waiting_for();
        if !left.is_empty() {
            note.push_str(&format!(
                "; {} still waits for cpus {}",
                waiting.requester(),
                cpu_list(&left)
            ));
            return Outcome {
                note: Some(note),
                ..Outcome::default()
            };
        }
        let waiting = self.in_flight.take().expect("checked");
        let ran: Vec<String> = waiting
            .ran
            .iter()
            .map(|(cpu, step)| format!("cpu{cpu} at step {step}"))
            .collect();
        note.push_str(&format!(
            "; {} returns, having waited steps {}–{} for {}",
            waiting.requester(),
            waiting.step,
            self.step,
            ran.join(", ")
        ));
        let Some(alloc) = waiting.alloc else {
            let finished = allocator.drain_work_finished(&waiting.work);
            debug_assert!(finished, "every target ran its work");
            return Outcome {
                note: Some(note),
                ..Outcome::default()
            };
        };
        // The sleeping allocation retries (`__alloc_pages_direct_reclaim` after
        // `drain_all_pages`), then allocates the rest of its line.
        let WaitingAlloc { request, done } = alloc;
        let resumed = allocator.alloc_pages_after_drain_report(
            request.caller,
            request.gfp,
            request.order,
            waiting.work,
            holds,
        );
        let mut outcome = self.alloc_resumed(request, done, resumed, holds);
        outcome.note = Some(match outcome.note.take() {
            Some(more) => format!("{note}; its retry: {more}"),
            None => note,
        });
        outcome
    }

    /// `cpu_down`, unless the CPU still has queued drain work: the script would lose
    /// it (Linux's workqueue hands a dying CPU's work to an unbound worker, which mmkit
    /// does not model).
    fn offline(&mut self, cpu: CpuId, holds: &mut Vec<ZoneLockHold>) -> Outcome {
        if self.allocator.drain_work_pending(cpu) {
            let waiting = self
                .in_flight
                .as_ref()
                .map_or_else(String::new, |w| format!(" from {}", w.describe()));
            return Outcome {
                error: Some(format!(
                    "refused: cpu{cpu} has drain work queued{waiting}; run it first \
                     (cpu{cpu}: run-work)"
                )),
                ..Outcome::default()
            };
        }
        hotplug(
            self.allocator.cpu_down_report(cpu, holds),
            "not online, or the last online CPU",
        )
    }

    fn remember(&mut self, name: Option<&str>, pfn: Pfn, order: Order) {
        let index = self.blocks.len();
        self.blocks.push(Block {
            pfn,
            order,
            held: true,
        });
        if let Some(name) = name {
            let group = self.names.entry(name.to_owned()).or_default();
            // A label whose blocks were all freed starts a new group.
            if group.iter().all(|&i| !self.blocks[i].held) {
                group.clear();
            }
            group.push(index);
        }
    }

    /// The blocks of an `alloc` line from the `done`-th on (`pfns`: those allocated by
    /// this step so far). In workqueue mode an allocation whose slow path queued drain
    /// work runs it at once on each target CPU and retries, or, with `later`, sleeps
    /// until `run-work` lines have run it.
    fn alloc(
        &mut self,
        request: AllocRequest,
        done: u64,
        mut pfns: Vec<Pfn>,
        holds: &mut Vec<ZoneLockHold>,
    ) -> Outcome {
        let allocator = self.allocator;
        let (caller, gfp, order) = (request.caller, request.gfp, request.order);
        let mut at_once = DrainsAtOnce::default();
        for n in done..request.count {
            let drain_caller = match request.worker {
                true => DrainCaller::WorkqueueWorker,
                false => DrainCaller::Task,
            };
            let mut attempt =
                allocator.alloc_pages_may_wait_from_report(caller, drain_caller, gfp, order, holds);
            if let Ok(AllocAttempt::DrainQueued(work)) = attempt {
                let cpus: Vec<CpuId> = allocator.drain_work_cpus(&work).collect();
                if request.later {
                    let note = format!(
                        "{}the slow path's drain queued work on cpus {}; cpu{} sleeps until \
                         each has run it",
                        block_of(n, request.count),
                        cpu_list(&cpus),
                        caller.cpu
                    );
                    self.in_flight = Some(InFlight {
                        step: self.step,
                        cpu: caller.cpu,
                        work,
                        cpus,
                        ran: Vec::new(),
                        alloc: Some(WaitingAlloc {
                            request: request.clone(),
                            done: n,
                        }),
                    });
                    return Outcome {
                        note: join_notes(at_once.describe(), Some(note)),
                        zones: self.zones_of(&pfns),
                        ..Outcome::default()
                    };
                }
                for &cpu in &cpus {
                    at_once.pages += allocator.run_drain_work_report(cpu, holds);
                }
                at_once.add(&cpus);
                attempt = allocator.alloc_pages_after_drain_report(caller, gfp, order, work, holds);
            }
            match attempt {
                Ok(AllocAttempt::Allocated(pfn)) => {
                    self.remember(request.name.as_deref(), pfn, order);
                    pfns.push(pfn);
                }
                Ok(AllocAttempt::DrainQueued(_)) => unreachable!("every target ran its work"),
                Err(e) => {
                    let error = match request.count {
                        1 => e.to_string(),
                        count => format!("allocation {} of {count}: {e}; {n} allocated", n + 1),
                    };
                    return Outcome {
                        note: at_once.describe(),
                        error: Some(error),
                        zones: self.zones_of(&pfns),
                    };
                }
            }
        }
        let pfn = (request.count == 1 && done == 0).then(|| format!("pfn {}", pfns[0]));
        Outcome {
            note: join_notes(at_once.describe(), pfn),
            zones: self.zones_of(&pfns),
            ..Outcome::default()
        }
    }

    /// An `alloc … later` line's allocation after its drain work ran: the retry's result,
    /// then the rest of the line's blocks.
    fn alloc_resumed(
        &mut self,
        request: AllocRequest,
        done: u64,
        resumed: Result<AllocAttempt, mmkit_core::AllocError>,
        holds: &mut Vec<ZoneLockHold>,
    ) -> Outcome {
        match resumed {
            Ok(AllocAttempt::Allocated(pfn)) => {
                self.remember(request.name.as_deref(), pfn, request.order);
                let first = format!("pfn {pfn}");
                let mut rest = self.alloc(request, done + 1, vec![pfn], holds);
                rest.note = Some(match rest.note.take() {
                    Some(more) => format!("{first}; {more}"),
                    None => first,
                });
                rest
            }
            Ok(AllocAttempt::DrainQueued(_)) => unreachable!("every target ran its work"),
            Err(e) => Outcome {
                error: Some(format!(
                    "{}{e}; {done} allocated",
                    block_of(done, request.count)
                )),
                ..Outcome::default()
            },
        }
    }

    /// One bulk allocation of `count` order-0 pages of `mt`, labelled `name`.
    fn bulk(
        &mut self,
        caller: Caller,
        (count, mt): (usize, MigrateType),
        name: Option<&str>,
        holds: &mut Vec<ZoneLockHold>,
    ) -> Outcome {
        let gfp = gfp_for(mt, caller.context);
        let mut list = Vec::with_capacity(count);
        match self
            .allocator
            .alloc_pages_bulk_list_report(caller, gfp, None, count, &mut list, holds)
        {
            Ok(got) => {
                for &pfn in &list {
                    self.remember(name, pfn, Order::ZERO);
                }
                Outcome {
                    note: Some(format!("got {got} of {count}")),
                    error: (got == 0).then(|| "no page allocated".to_owned()),
                    zones: self.zones_of(&list),
                }
            }
            Err(e) => Outcome {
                error: Some(e.to_string()),
                ..Outcome::default()
            },
        }
    }

    /// The blocks a free names, in allocation order.
    fn select(&self, target: &Target) -> Vec<usize> {
        match target {
            Target::All => (0..self.blocks.len())
                .filter(|&i| self.blocks[i].held)
                .collect(),
            Target::Last { count, name } => {
                let candidates: Vec<usize> = match name {
                    Some(name) => self.names.get(name).cloned().unwrap_or_default(),
                    None => (0..self.blocks.len()).collect(),
                };
                let held: Vec<usize> = candidates
                    .into_iter()
                    .filter(|&i| self.blocks[i].held)
                    .collect();
                held[held.len().saturating_sub(*count)..].to_vec()
            }
            Target::Names(names) => names
                .iter()
                .flat_map(|name| {
                    let group = self.names.get(name).map(Vec::as_slice).unwrap_or_default();
                    // Held blocks if any; else the whole group again: a double free.
                    let held: Vec<usize> = group
                        .iter()
                        .copied()
                        .filter(|&i| self.blocks[i].held)
                        .collect();
                    if held.is_empty() {
                        group.to_vec()
                    } else {
                        held
                    }
                })
                .collect(),
        }
    }

    fn free(&mut self, caller: Caller, target: &Target, holds: &mut Vec<ZoneLockHold>) -> Outcome {
        let chosen = self.select(target);
        let mut failures = Vec::new();
        let mut stale = 0;
        for &i in &chosen {
            let Block { pfn, order, .. } = self.blocks[i];
            match self.allocator.free_pages_report(caller, pfn, order, holds) {
                Ok(()) => stale += usize::from(self.mark_freed(i)),
                Err(e) => failures.push(e.to_string()),
            }
        }
        let pfns: Vec<Pfn> = chosen.iter().map(|&i| self.blocks[i].pfn).collect();
        Outcome {
            note: free_note(chosen.len(), failures.len(), stale),
            error: failures.first().map(|first| match failures.len() {
                1 => first.clone(),
                n => format!("{first} (and {} more refused frees)", n - 1),
            }),
            zones: self.zones_of(&pfns),
        }
    }

    fn free_batch(
        &mut self,
        caller: Caller,
        target: &Target,
        holds: &mut Vec<ZoneLockHold>,
    ) -> Outcome {
        let chosen = self.select(target);
        let pfns: Vec<Pfn> = chosen.iter().map(|&i| self.blocks[i].pfn).collect();
        let zones = self.zones_of(&pfns);
        match self.allocator.free_pages_batch_report(caller, &pfns, holds) {
            Ok(()) => {
                let stale = chosen.iter().filter(|&&i| self.mark_freed(i)).count();
                Outcome {
                    note: free_note(chosen.len(), 0, stale),
                    zones,
                    ..Outcome::default()
                }
            }
            Err(BatchFreeError { index, error: e }) => Outcome {
                error: Some(format!(
                    "block {} of {}: {e}; nothing freed",
                    index + 1,
                    pfns.len()
                )),
                zones,
                ..Outcome::default()
            },
        }
    }

    /// Block `index` was freed. If the script had freed it already, the allocator gave
    /// its pages out again and this free released another label's block, as a
    /// use-after-free would in the kernel: that block is no longer held either. Returns
    /// whether that happened.
    fn mark_freed(&mut self, index: usize) -> bool {
        if std::mem::replace(&mut self.blocks[index].held, false) {
            return false;
        }
        let pfn = self.blocks[index].pfn;
        match self.blocks.iter_mut().find(|b| b.held && b.pfn == pfn) {
            Some(holder) => {
                holder.held = false;
                true
            }
            None => false,
        }
    }

    /// The zones holding `pfns`, each once.
    fn zones_of(&self, pfns: &[Pfn]) -> Vec<ZoneId> {
        let mut zones: Vec<ZoneId> = Vec::new();
        for &pfn in pfns {
            if let Some(id) = self.allocator.find_zone(pfn).map(|z| z.id()) {
                if !zones.contains(&id) {
                    zones.push(id);
                }
            }
        }
        zones
    }
}

/// The GFP flags of a request for `mt`: `GFP_KERNEL` in task context, `GFP_ATOMIC` in
/// interrupt context; movable adds `__GFP_HIGHMEM | __GFP_MOVABLE` (as
/// `GFP_HIGHUSER_MOVABLE` does), reclaimable adds `__GFP_RECLAIMABLE`.
fn gfp_for(mt: MigrateType, context: Context) -> Gfp {
    let base = match context {
        Context::Task => Gfp::KERNEL,
        Context::SoftIrq | Context::HardIrq => Gfp::ATOMIC,
    };
    match mt {
        MigrateType::Movable if context == Context::Task => Gfp::HIGHUSER_MOVABLE,
        MigrateType::Movable => base | Gfp::HIGHMEM | Gfp::MOVABLE,
        MigrateType::Reclaimable => base | Gfp::RECLAIMABLE,
        _ => base,
    }
}

/// `freed 400 blocks`, `freed 3 of 5 blocks`, and a warning for stale labels.
fn free_note(chosen: usize, refused: usize, stale: usize) -> Option<String> {
    let freed = match (chosen, refused) {
        (0, _) => Some("nothing to free".to_owned()),
        (1, 0) => None,
        (n, 0) => Some(format!("freed {n} blocks")),
        (n, r) if r < n => Some(format!("freed {} of {n} blocks", n - r)),
        _ => None,
    };
    let warning = (stale > 0).then(|| {
        format!(
            "use after free: {stale} block(s) freed again after reallocation under another label"
        )
    });
    let parts: Vec<String> = freed.into_iter().chain(warning).collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Run `once` `times` times; note how many runs reported work (Linux re-arms the vmstat
/// work while they do).
fn tick(what: &str, times: u64, mut once: impl FnMut() -> bool) -> Outcome {
    // A tick that finds no work changes no pageset (its decay and expiry have run their
    // course, and nothing else runs between the ticks of one line), so every later tick
    // finds none either; Linux stops re-arming the work there. Stopping at the first idle
    // tick counts the same and makes `tick 1000000000` as quick as the ticks that work.
    let busy = (0..times).take_while(|_| once()).count();
    Outcome {
        note: Some(match times {
            0 => "no tick: the time is shorter than vm.stat_interval".to_owned(),
            1 if busy == 1 => "work done".to_owned(),
            1 => "idle".to_owned(),
            n => format!("{what} with work: {busy} of {n}"),
        }),
        ..Outcome::default()
    }
}

/// The drain work an `alloc` line's slow paths queued and ran at once (no `later`).
#[derive(Default)]
struct DrainsAtOnce {
    /// Slow paths that queued work.
    times: u64,
    /// Every CPU that ran some of it, in CPU order.
    cpus: Vec<CpuId>,
    /// Pages the work drained.
    pages: u64,
}

impl DrainsAtOnce {
    fn add(&mut self, cpus: &[CpuId]) {
        self.times += 1;
        self.cpus.extend_from_slice(cpus);
        self.cpus.sort_unstable();
        self.cpus.dedup();
    }

    /// `the slow path's drain: cpus 1,2 drained themselves, 40p`, with how many times
    /// when more than once.
    fn describe(&self) -> Option<String> {
        let times = match self.times {
            0 => return None,
            1 => String::new(),
            n => format!(" ({n} times)"),
        };
        Some(format!(
            "the slow path's drain{times}: cpus {} drained themselves, {}p",
            cpu_list(&self.cpus),
            self.pages
        ))
    }
}

fn join_notes(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

/// `allocation 2 of 5: ` for a line of several blocks, nothing for one.
fn block_of(n: u64, count: u64) -> String {
    match count {
        1 => String::new(),
        _ => format!("allocation {} of {count}: ", n + 1),
    }
}

/// Workqueue mode without `later`: each target CPU runs its queued work at once, in CPU
/// order, and the requester's wait ends with the last.
fn run_queued_work_now(
    allocator: &PageAllocator,
    work: &DrainWork,
    holds: &mut Vec<ZoneLockHold>,
) -> String {
    let cpus: Vec<CpuId> = allocator.drain_work_cpus(work).collect();
    let pages: u64 = cpus
        .iter()
        .map(|&cpu| allocator.run_drain_work_report(cpu, holds))
        .sum();
    let finished = allocator.drain_work_finished(work);
    debug_assert!(finished, "every queued CPU ran its work");
    format!(
        "workqueue: cpus {} drained themselves, {pages}p",
        cpu_list(&cpus)
    )
}

fn cpu_list(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<String> = cpus.iter().map(u32::to_string).collect();
    names.join(",")
}

fn hotplug(done: bool, why_not: &str) -> Outcome {
    Outcome {
        error: (!done).then(|| format!("refused: the CPU is {why_not}")),
        ..Outcome::default()
    }
}

fn pcp_disable(allocator: &PageAllocator, zone: ZoneId, holds: &mut Vec<ZoneLockHold>) -> Outcome {
    let pages = allocator.zone_pcp_disable_report(zone, holds).unwrap_or(0);
    Outcome {
        note: Some(format!("drained {pages}p")),
        zones: vec![zone],
        ..Outcome::default()
    }
}

fn pcp_enable(allocator: &PageAllocator, zone: ZoneId) -> Outcome {
    Outcome {
        error: allocator
            .zone_pcp_enable(zone)
            .is_none()
            .then(|| format!("zone {} is not pcp-disabled", zone.zone_type)),
        zones: vec![zone],
        ..Outcome::default()
    }
}

fn set(allocator: &PageAllocator, setting: Setting) -> Outcome {
    let settings = match setting {
        Setting::MinFreeKbytes(value) => Settings {
            min_free_kbytes: value,
            ..allocator.settings()
        },
        Setting::WatermarkScaleFactor(value) => Settings {
            watermark_scale_factor: value,
            ..allocator.settings()
        },
        Setting::WatermarkBoostFactor(value) => Settings {
            watermark_boost_factor: value,
            ..allocator.settings()
        },
        Setting::PercpuPagelistHighFraction(value) => Settings {
            percpu_pagelist_high_fraction: value,
            ..allocator.settings()
        },
    };
    match allocator.set_settings(settings) {
        Ok(()) => Outcome {
            note: Some(watermarks_note(allocator)),
            ..Outcome::default()
        },
        Err(e) => Outcome {
            error: Some(format!("refused: {e}")),
            ..Outcome::default()
        },
    }
}

/// `min_free_kbytes 14096; Normal min 3524 low 4405 high 5286`: what a sysctl write
/// recomputed.
fn watermarks_note(allocator: &PageAllocator) -> String {
    let mut note = format!("min_free_kbytes {}", allocator.min_free_kbytes());
    for zone in allocator.zones().iter().filter(|z| z.is_managed()) {
        note.push_str(&format!(
            "; {} min {} low {} high {}",
            zone.zone_type(),
            zone.wmark(WatermarkKind::Min),
            zone.wmark(WatermarkKind::Low),
            zone.wmark(WatermarkKind::High)
        ));
    }
    note
}

fn flag(allocator: &PageAllocator, zone: ZoneId, changes: &[(ZoneFlags, bool)]) -> Outcome {
    let target = allocator
        .zone(zone.node, zone.zone_type)
        .expect("zones were checked before the run");
    for &(flag, on) in changes {
        // The script stands in for kswapd and the watermark checks, which own the flags.
        if on {
            mmkit_core::internals::set_zone_flag(target, flag);
        } else {
            mmkit_core::internals::clear_zone_flag(target, flag);
        }
    }
    Outcome {
        zones: vec![zone],
        ..Outcome::default()
    }
}
