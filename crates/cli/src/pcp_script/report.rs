//! What `mmkit pcp-script` prints: snapshots of every populated zone before and after a
//! step, the step's report (pagesets and events), the aligned table, and the summary
//! line.
//!
//! Everything here reads the allocator through its public accessors (`Zone::pageset`,
//! `Zone::events`, `Zone::flags`) and the zone-lock holds the core reports for each call
//! (`ZoneLockHold`); nothing decides allocator behaviour. The events are Linux's: the
//! refills, drains and pages taken under the zone lock come from the holds (what
//! `mm_page_alloc_zone_locked` and `mm_page_pcpu_drain` show, summed per hold); `PGALLOC`,
//! `PGFREE`, `mm_page_alloc_extfrag`, watermark boosts, pageset contention and interrupt
//! bypasses are counter changes.

use std::fmt::Write as _;

use mmkit_core::page_alloc::pcp::PcpFlags;
use mmkit_core::page_alloc::{
    Context, CpuId, DrainReason, HoldKind, WatermarkKind, Zone, ZoneFlags, ZoneId, ZoneLockHold,
};
use mmkit_core::{PageAllocator, ZoneType};
use serde::Serialize;

use super::parse::Line;

/// Pages or events by drain reason.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Serialize)]
pub struct ByReason {
    /// A free reached the `high` threshold.
    pub free: u64,
    /// Consecutive cheap high-order frees (`free_high`).
    pub free_high: u64,
    /// The vmstat tick trimmed to the decayed `high`.
    pub decay: u64,
    /// The vmstat tick trimmed a remote node's pageset.
    pub numa_expire: u64,
    /// `drain_*_pages`, CPU offline, `zone_pcp_disable`.
    pub explicit: u64,
}

impl ByReason {
    fn slot(&mut self, reason: DrainReason) -> &mut u64 {
        match reason {
            DrainReason::Free => &mut self.free,
            DrainReason::FreeHigh => &mut self.free_high,
            DrainReason::Decay => &mut self.decay,
            DrainReason::NumaExpire => &mut self.numa_expire,
            DrainReason::Explicit => &mut self.explicit,
        }
    }

    fn get(mut self, reason: DrainReason) -> u64 {
        *self.slot(reason)
    }

    fn since(self, before: ByReason) -> ByReason {
        let mut delta = ByReason::default();
        for reason in DrainReason::ALL {
            *delta.slot(reason) = self.get(reason) - before.get(reason);
        }
        delta
    }

    fn add(&mut self, other: ByReason) {
        for reason in DrainReason::ALL {
            *self.slot(reason) += other.get(reason);
        }
    }
}

/// The name a drain reason has in the table: `drain(free_high)`.
fn reason_name(reason: DrainReason) -> &'static str {
    match reason {
        DrainReason::Free => "free",
        DrainReason::FreeHigh => "free_high",
        DrainReason::Decay => "decay",
        DrainReason::NumaExpire => "numa_expire",
        DrainReason::Explicit => "explicit",
    }
}

/// What a step (or a run) did to a zone. Pages unless named `_events`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Serialize)]
pub struct Events {
    /// `PGALLOC`.
    pub pgalloc: u64,
    /// `PGFREE`.
    pub pgfree: u64,
    /// PCP refills (`rmqueue_bulk` calls).
    pub pcp_refill_events: u64,
    /// Pages moved from the buddy lists to pagesets.
    pub pcp_refill_pages: u64,
    /// PCP drains (`free_pcppages_bulk` calls), by reason.
    pub pcp_drain_events: ByReason,
    /// Pages moved from pagesets to the buddy lists, by reason.
    pub pcp_drain_pages: ByReason,
    /// Pageset try-locks that failed.
    pub pcp_lock_contended_events: u64,
    /// Requests that bypassed the PCP from interrupt context.
    pub pcp_irq_bypass_events: u64,
    /// Pages taken off the buddy lists (Σ 2^order of `mm_page_alloc_zone_locked`).
    pub alloc_zone_locked_pages: u64,
    /// Fallbacks to another migratetype (`mm_page_alloc_extfrag`).
    pub extfrag_events: u64,
    /// Watermark boosts.
    pub watermark_boost_events: u64,
}

impl Events {
    /// The counters that are not zone-lock work, as they stand: the zone-lock fields are
    /// left 0 ([`Events::of_holds`] fills them for a step).
    fn read(zone: &Zone) -> Events {
        let events = zone.events();
        Events {
            pgalloc: zone.pgalloc(),
            pgfree: zone.pgfree(),
            pcp_lock_contended_events: events.pcp_lock_contended(),
            pcp_irq_bypass_events: events.pcp_irq_bypass(),
            extfrag_events: events.extfrag_events(),
            watermark_boost_events: events.watermark_boosts(),
            ..Events::default()
        }
    }

    /// The zone-lock work of `holds` in the zone at index `zone` of the allocator's
    /// zones: refills, drains by reason, pages taken off the buddy lists.
    pub fn of_holds(zone: usize, holds: &[ZoneLockHold]) -> Events {
        let mut events = Events::default();
        for hold in holds.iter().filter(|hold| hold.zone == zone) {
            match hold.kind {
                HoldKind::Refill => {
                    events.pcp_refill_events += 1;
                    events.pcp_refill_pages += hold.pages;
                    events.alloc_zone_locked_pages += hold.pages;
                }
                HoldKind::BuddyAlloc => events.alloc_zone_locked_pages += hold.pages,
                HoldKind::Drain(reason) => {
                    *events.pcp_drain_events.slot(reason) += 1;
                    *events.pcp_drain_pages.slot(reason) += hold.pages;
                }
                HoldKind::BuddyFree | HoldKind::HighAtomic => {}
            }
        }
        events
    }

    /// The change from `before` to `self` (the counters only grow).
    fn since(&self, before: &Events) -> Events {
        Events {
            pgalloc: self.pgalloc - before.pgalloc,
            pgfree: self.pgfree - before.pgfree,
            pcp_refill_events: self.pcp_refill_events - before.pcp_refill_events,
            pcp_refill_pages: self.pcp_refill_pages - before.pcp_refill_pages,
            pcp_drain_events: self.pcp_drain_events.since(before.pcp_drain_events),
            pcp_drain_pages: self.pcp_drain_pages.since(before.pcp_drain_pages),
            pcp_lock_contended_events: self.pcp_lock_contended_events
                - before.pcp_lock_contended_events,
            pcp_irq_bypass_events: self.pcp_irq_bypass_events - before.pcp_irq_bypass_events,
            alloc_zone_locked_pages: self.alloc_zone_locked_pages - before.alloc_zone_locked_pages,
            extfrag_events: self.extfrag_events - before.extfrag_events,
            watermark_boost_events: self.watermark_boost_events - before.watermark_boost_events,
        }
    }

    fn add(&mut self, other: &Events) {
        self.pgalloc += other.pgalloc;
        self.pgfree += other.pgfree;
        self.pcp_refill_events += other.pcp_refill_events;
        self.pcp_refill_pages += other.pcp_refill_pages;
        self.pcp_drain_events.add(other.pcp_drain_events);
        self.pcp_drain_pages.add(other.pcp_drain_pages);
        self.pcp_lock_contended_events += other.pcp_lock_contended_events;
        self.pcp_irq_bypass_events += other.pcp_irq_bypass_events;
        self.alloc_zone_locked_pages += other.alloc_zone_locked_pages;
        self.extfrag_events += other.extfrag_events;
        self.watermark_boost_events += other.watermark_boost_events;
    }

    /// The nonzero counters in words: `pgfree 1`, `refill 63p`, `drain(free)×2 189p`.
    pub fn describe(&self) -> Vec<String> {
        let mut items: Vec<String> =
            plain(&[("pgalloc", self.pgalloc), ("pgfree", self.pgfree)]).collect();
        items.extend(paged(
            "refill",
            self.pcp_refill_events,
            self.pcp_refill_pages,
        ));
        for reason in DrainReason::ALL {
            let name = format!("drain({})", reason_name(reason));
            let (events, pages) = (
                self.pcp_drain_events.get(reason),
                self.pcp_drain_pages.get(reason),
            );
            items.extend(paged(&name, events, pages));
        }
        items.extend(plain(&[
            ("contended", self.pcp_lock_contended_events),
            ("irq_bypass", self.pcp_irq_bypass_events),
        ]));
        if self.alloc_zone_locked_pages > 0 {
            items.push(format!("zone_locked {}p", self.alloc_zone_locked_pages));
        }
        items.extend(plain(&[
            ("extfrag", self.extfrag_events),
            ("boost", self.watermark_boost_events),
        ]));
        items
    }
}

/// `name N` for each nonzero count.
fn plain<'a>(counts: &'a [(&'a str, u64)]) -> impl Iterator<Item = String> + 'a {
    counts
        .iter()
        .filter(|(_, value)| *value > 0)
        .map(|(name, value)| format!("{name} {value}"))
}

/// `name Np` for one event, `name×E Np` for several, nothing for none.
fn paged(name: &str, events: u64, pages: u64) -> Option<String> {
    match events {
        0 => None,
        1 => Some(format!("{name} {pages}p")),
        n => Some(format!("{name}×{n} {pages}p")),
    }
}

/// One CPU's pageset of one zone.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct PagesetState {
    /// The CPU.
    pub cpu: CpuId,
    /// Whether the CPU is online.
    pub online: bool,
    /// Pages on the lists.
    pub count: u64,
    /// Drain threshold (0 until first use from patch 7 on).
    pub high: u64,
    /// Refill and drain step.
    pub batch: u64,
    /// Lower bound of `high`.
    pub high_min: u64,
    /// Upper bound of `high`.
    pub high_max: u64,
    /// Refill scale (patch 5).
    pub alloc_factor: u8,
    /// Drain scale (before patch 9).
    pub free_factor: u8,
    /// Pages freed in a row (patch 9).
    pub free_count: u64,
    /// NUMA ticks left before a remote pageset is trimmed.
    pub expire: u8,
    /// `PCPF_*`.
    pub flags: PcpFlags,
}

impl PagesetState {
    /// Equal in everything the table shows (`expire`, a NUMA detail, is left out).
    fn same_shown(&self, other: &PagesetState) -> bool {
        let shown = |p: &PagesetState| PagesetState {
            expire: 0,
            ..p.clone()
        };
        shown(self) == shown(other)
    }

    fn pcp_flags(&self) -> String {
        let names: Vec<&str> = [
            (self.flags.prev_free_high_order, "PREV"),
            (self.flags.free_high_batch, "FHB"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        joined_or_dash(&names)
    }
}

fn joined_or_dash(names: &[&str]) -> String {
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(",")
    }
}

/// Linux's names for zone flags, without `ZONE_`.
fn zone_flag_names(flags: ZoneFlags) -> Vec<&'static str> {
    [
        (ZoneFlags::BOOSTED_WATERMARK, "BOOSTED_WATERMARK"),
        (ZoneFlags::RECLAIM_ACTIVE, "RECLAIM_ACTIVE"),
        (ZoneFlags::BELOW_HIGH, "BELOW_HIGH"),
    ]
    .into_iter()
    .filter_map(|(flag, name)| flags.contains(flag).then_some(name))
    .collect()
}

/// A zone's effective watermarks (`wmark_pages`: stored + boost).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct Watermarks {
    /// `min`.
    pub min: u64,
    /// `low`.
    pub low: u64,
    /// `high`.
    pub high: u64,
}

/// One populated zone at one instant.
#[derive(Clone, Debug)]
struct ZoneSnapshot {
    /// The zone's index in the allocator's zones, which names it in [`ZoneLockHold`]s.
    index: usize,
    id: ZoneId,
    pages_free: i64,
    watermarks: Watermarks,
    flags: ZoneFlags,
    events: Events,
    pagesets: Vec<PagesetState>,
}

impl ZoneSnapshot {
    /// Whether anything shown differs from `before`, given what the step did to the zone
    /// (`events`).
    fn changed_since(&self, before: &ZoneSnapshot, events: &Events) -> bool {
        let mut pagesets = self.pagesets.iter().zip(&before.pagesets);
        *events != Events::default()
            || self.flags != before.flags
            || self.pages_free != before.pages_free
            || self.watermarks != before.watermarks
            || pagesets.any(|(a, b)| !a.same_shown(b))
    }
}

/// Every populated zone at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    zones: Vec<ZoneSnapshot>,
}

impl Snapshot {
    /// Read every populated zone: counters, flags, free pages, every CPU's pageset.
    pub fn take(allocator: &PageAllocator) -> Snapshot {
        let zones = allocator
            .zones()
            .iter()
            .enumerate()
            .filter(|(_, zone)| zone.present() > 0)
            .map(|(index, zone)| ZoneSnapshot {
                index,
                id: zone.id(),
                pages_free: zone.free_pages(),
                watermarks: Watermarks {
                    min: zone.wmark(WatermarkKind::Min),
                    low: zone.wmark(WatermarkKind::Low),
                    high: zone.wmark(WatermarkKind::High),
                },
                flags: zone.flags(),
                events: Events::read(zone),
                pagesets: (0..zone.nr_pagesets() as CpuId)
                    .filter_map(|cpu| {
                        let pcp = zone.pageset(cpu)?;
                        Some(PagesetState {
                            cpu,
                            online: allocator.is_cpu_online(cpu),
                            count: pcp.count,
                            high: pcp.high,
                            batch: pcp.batch,
                            high_min: pcp.high_min,
                            high_max: pcp.high_max,
                            alloc_factor: pcp.alloc_factor,
                            free_factor: pcp.free_factor,
                            free_count: pcp.free_count,
                            expire: pcp.expire,
                            flags: pcp.flags,
                        })
                    })
                    .collect(),
            })
            .collect();
        Snapshot { zones }
    }

    /// Events of all zones from `before` to `self`, given the zone-lock `holds` reported
    /// in between.
    pub fn events_since(&self, before: &Snapshot, holds: &[ZoneLockHold]) -> Events {
        let mut total = Events::default();
        for (after, before) in self.zones.iter().zip(&before.zones) {
            total.add(&after.events_since(before, holds));
        }
        total
    }
}

impl ZoneSnapshot {
    /// What happened to this zone from `before` to `self`: the counter changes and the
    /// zone-lock work of `holds`.
    fn events_since(&self, before: &ZoneSnapshot, holds: &[ZoneLockHold]) -> Events {
        let mut events = self.events.since(&before.events);
        events.add(&Events::of_holds(self.index, holds));
        events
    }
}

/// One zone's part of a step.
#[derive(Debug, Serialize)]
pub struct ZoneReport {
    /// The node.
    pub node: u16,
    /// The zone type.
    pub zone: ZoneType,
    /// `NR_FREE_PAGES` after the step.
    pub pages_free: i64,
    /// Watermarks after the step (boost included), as (min, low, high).
    pub watermarks: Watermarks,
    /// Zone flags after the step (`BELOW_HIGH`, `RECLAIM_ACTIVE`, `BOOSTED_WATERMARK`).
    pub flags: Vec<&'static str>,
    /// The step CPU's pageset first, then every other CPU whose pageset changed (every
    /// CPU with `--all-cpus`), after the step.
    pub pagesets: Vec<PagesetState>,
    /// What the step did to the zone.
    pub events: Events,
}

/// One line of the script, run.
#[derive(Debug, Serialize)]
pub struct StepReport {
    /// Step number, from 1.
    pub step: usize,
    /// Line number in the script.
    pub line: usize,
    /// The CPU that ran it.
    pub cpu: CpuId,
    /// The context it ran in.
    pub context: Context,
    /// The operation as written.
    pub op: String,
    /// What the call returned, when the counters do not show it.
    pub note: Option<String>,
    /// Why the operation failed; the script went on.
    pub error: Option<String>,
    /// The zones the step touched; if it touched none, those where the step CPU holds
    /// pages, else the CPU's home zone.
    pub zones: Vec<ZoneReport>,
}

/// How a step went, as the runner saw it.
#[derive(Debug, Default)]
pub struct Outcome {
    /// What the call returned, in words.
    pub note: Option<String>,
    /// The failure, in words.
    pub error: Option<String>,
    /// Zones the operation names or touched, shown even if nothing in them changed.
    pub zones: Vec<ZoneId>,
}

/// What to show of each step.
#[derive(Clone, Copy, Debug)]
pub struct Shown {
    /// Every CPU's pageset, not only the step CPU's and those that changed.
    pub all_cpus: bool,
    /// The zone shown when a step touches none.
    pub home: ZoneId,
}

impl StepReport {
    /// The report of step `step` (`line`), from the snapshots around it and the zone-lock
    /// holds the core reported for its calls.
    pub fn new(
        step: usize,
        line: &Line,
        outcome: Outcome,
        before: &Snapshot,
        after: &Snapshot,
        holds: &[ZoneLockHold],
        shown: Shown,
    ) -> StepReport {
        let pairs = after.zones.iter().zip(&before.zones);
        let mut zones: Vec<ZoneReport> = pairs
            .map(|(a, b)| (a, b, a.events_since(b, holds)))
            .filter(|(a, b, events)| outcome.zones.contains(&a.id) || a.changed_since(b, events))
            .map(|(a, b, events)| zone_report(a, b, events, line.cpu, shown.all_cpus))
            .collect();
        if zones.is_empty() {
            // Nothing changed: show where this CPU holds pages, else its home zone.
            let holds_pages =
                |z: &ZoneSnapshot| z.pagesets.iter().any(|p| p.cpu == line.cpu && p.count > 0);
            let pairs = || after.zones.iter().zip(&before.zones);
            let holding: Vec<_> = pairs().filter(|(a, _)| holds_pages(a)).collect();
            let chosen = if holding.is_empty() {
                pairs().filter(|(a, _)| a.id == shown.home).collect()
            } else {
                holding
            };
            zones.extend(chosen.into_iter().map(|(a, b)| {
                let events = a.events_since(b, holds);
                zone_report(a, b, events, line.cpu, shown.all_cpus)
            }));
        }
        StepReport {
            step,
            line: line.number,
            cpu: line.cpu,
            context: line.context,
            op: line.text.clone(),
            note: outcome.note,
            error: outcome.error,
            zones,
        }
    }
}

fn zone_report(
    after: &ZoneSnapshot,
    before: &ZoneSnapshot,
    events: Events,
    cpu: CpuId,
    all_cpus: bool,
) -> ZoneReport {
    let own = after.pagesets.iter().filter(|p| p.cpu == cpu);
    let others = after
        .pagesets
        .iter()
        .zip(&before.pagesets)
        .filter(|(a, b)| a.cpu != cpu && (all_cpus || !a.same_shown(b)))
        .map(|(a, _)| a);
    ZoneReport {
        node: after.id.node,
        zone: after.id.zone_type,
        pages_free: after.pages_free,
        watermarks: after.watermarks,
        flags: zone_flag_names(after.flags),
        pagesets: own.chain(others).cloned().collect(),
        events,
    }
}

/// Right-aligned columns (numbers) and left-aligned ones (words).
const COLUMNS: [(&str, bool); 17] = [
    ("step", true),
    ("line", true),
    ("cpu", true),
    ("op", false),
    ("zone", false),
    ("pages_free", true),
    ("zone_flags", false),
    ("count", true),
    ("high", true),
    ("batch", true),
    ("high_min", true),
    ("high_max", true),
    ("af", true),
    ("ff", true),
    ("fc", true),
    ("pcpf", false),
    ("events", false),
];

/// The steps as an aligned table, one row per shown pageset.
pub fn render_table(steps: &[StepReport]) -> String {
    let mut rows: Vec<[String; 17]> = vec![COLUMNS.map(|(name, _)| name.to_owned())];
    for step in steps {
        for (z, zone) in step.zones.iter().enumerate() {
            for (p, pcp) in zone.pagesets.iter().enumerate() {
                rows.push(row(step, z, zone, p, pcp));
            }
        }
    }
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            let (right, last) = (COLUMNS[c].1, c + 1 == COLUMNS.len());
            if c > 0 {
                line.push(' ');
            }
            match (right, last) {
                (true, _) => write!(line, "{}{cell}", " ".repeat(pad)),
                (false, true) => write!(line, "{cell}"),
                (false, false) => write!(line, "{cell}{}", " ".repeat(pad)),
            }
            .expect("writing to a String cannot fail");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One table row: pageset `p` of zone `z` of `step`. The step columns fill the first row
/// of the step only, the zone columns the first row of each zone.
fn row(
    step: &StepReport,
    z: usize,
    zone: &ZoneReport,
    p: usize,
    pcp: &PagesetState,
) -> [String; 17] {
    let first_of_step = z == 0 && p == 0;
    let step_cell = |text: String| if first_of_step { text } else { String::new() };
    let zone_cell = |text: String| if p == 0 { text } else { String::new() };
    let cpu = match (pcp.online, pcp.cpu == step.cpu, step.context) {
        (false, _, _) => format!("{} off", pcp.cpu),
        (true, true, Context::SoftIrq) if first_of_step => format!("{} softirq", pcp.cpu),
        (true, true, Context::HardIrq) if first_of_step => format!("{} hardirq", pcp.cpu),
        _ => pcp.cpu.to_string(),
    };
    let zone_name = match zone.node {
        0 => zone.zone.name().to_owned(),
        node => format!("{node}:{}", zone.zone.name()),
    };
    let mut events = Vec::new();
    if first_of_step {
        events.extend(step.note.clone());
    }
    if p == 0 {
        events.extend(zone.events.describe());
    }
    if first_of_step {
        events.extend(step.error.as_ref().map(|e| format!("error: {e}")));
    }
    [
        step_cell(step.step.to_string()),
        step_cell(step.line.to_string()),
        cpu,
        step_cell(step.op.clone()),
        zone_cell(zone_name),
        zone_cell(zone.pages_free.to_string()),
        zone_cell(joined_or_dash(&zone.flags)),
        pcp.count.to_string(),
        pcp.high.to_string(),
        pcp.batch.to_string(),
        pcp.high_min.to_string(),
        pcp.high_max.to_string(),
        pcp.alloc_factor.to_string(),
        pcp.free_factor.to_string(),
        pcp.free_count.to_string(),
        pcp.pcp_flags(),
        events.join(", "),
    ]
}

/// The lines above the table: policy, CPUs and each populated zone's limits.
pub fn render_header(allocator: &PageAllocator) -> String {
    let policy = allocator.policy();
    let topology = allocator.topology();
    let mut out = format!(
        "# policy {}{}{}; {} CPUs on {} node(s); min_free_kbytes {}\n",
        policy.name,
        match policy.drain {
            mmkit_core::policy::DrainMode::Direct => "",
            mmkit_core::policy::DrainMode::Workqueue => ", drain workqueue",
        },
        if policy.irq_bypass {
            ", irq bypass"
        } else {
            ""
        },
        topology.nr_cpus(),
        topology.nr_nodes(),
        allocator.min_free_kbytes(),
    );
    for zone in allocator.zones().iter().filter(|z| z.present() > 0) {
        let pcp = zone.pageset(0).unwrap_or_default();
        writeln!(
            out,
            "# node {} {}: managed {}, watermarks min {} low {} high {}; pagesets batch {} high_min {} high_max {}{}",
            zone.node(),
            zone.zone_type(),
            zone.managed(),
            zone.wmark(WatermarkKind::Min),
            zone.wmark(WatermarkKind::Low),
            zone.wmark(WatermarkKind::High),
            pcp.batch,
            pcp.high_min,
            pcp.high_max,
            if pcp.flags.free_high_batch { ", FREE_HIGH_BATCH" } else { "" },
        )
        .expect("writing to a String cannot fail");
    }
    out
}

/// Totals of a run, for the summary line.
#[derive(Debug)]
pub struct Summary {
    /// Steps run.
    pub steps: usize,
    /// Steps whose operation failed.
    pub failed: usize,
    /// What the whole run did.
    pub events: Events,
    /// Blocks the script still holds, and their pages.
    pub held: (usize, u64),
    /// A `drain all … later` still waiting for queued work at the end, described.
    pub waiting: Option<String>,
    /// The walker's verdict on the allocator's structures at the end.
    pub verify: Result<(), String>,
}

impl Summary {
    /// `summary: 12 steps, 1 failed; pgalloc 400, ...; held 0 blocks (0 pages); verify ok`.
    pub fn render(&self) -> String {
        let events = self.events.describe();
        let waiting = match &self.waiting {
            Some(waiting) => format!("; still waiting: {waiting}"),
            None => String::new(),
        };
        format!(
            "summary: {} steps, {} failed; {}; held {} blocks ({} pages){waiting}; verify {}",
            self.steps,
            self.failed,
            if events.is_empty() {
                "no events".to_owned()
            } else {
                events.join(", ")
            },
            self.held.0,
            self.held.1,
            match &self.verify {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("FAILED: {e}"),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_describe_only_nonzero_counters() {
        let mut events = Events {
            pgfree: 1,
            pcp_refill_events: 1,
            pcp_refill_pages: 63,
            ..Events::default()
        };
        events.pcp_drain_events.free = 2;
        events.pcp_drain_pages.free = 189;
        events.pcp_drain_events.free_high = 1;
        events.pcp_drain_pages.free_high = 339;
        assert_eq!(
            events.describe(),
            [
                "pgfree 1",
                "refill 63p",
                "drain(free)×2 189p",
                "drain(free_high) 339p"
            ]
        );
        assert!(Events::default().describe().is_empty());
    }

    #[test]
    fn table_columns_line_up() {
        let pcp = PagesetState {
            cpu: 0,
            online: true,
            count: 1234,
            high: 367,
            batch: 63,
            high_min: 367,
            high_max: 2000,
            alloc_factor: 0,
            free_factor: 1,
            free_count: 0,
            expire: 0,
            flags: PcpFlags::default(),
        };
        let step = StepReport {
            step: 1,
            line: 3,
            cpu: 0,
            context: Context::Task,
            op: "free a".into(),
            note: None,
            error: Some("bad".into()),
            zones: vec![ZoneReport {
                node: 0,
                zone: ZoneType::Normal,
                pages_free: 5,
                watermarks: Watermarks {
                    min: 1,
                    low: 2,
                    high: 3,
                },
                flags: vec![],
                pagesets: vec![pcp],
                events: Events::default(),
            }],
        };
        let table = render_table(&[step]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        let header_count_end = lines[0].find("count").unwrap() + "count".len();
        assert_eq!(&lines[1][header_count_end - 4..header_count_end], "1234");
        assert!(lines[1].ends_with("error: bad"));
    }
}
