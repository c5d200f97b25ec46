//! Replay a trace through mmkit-core under several policies and count what each predicts
//! beside what the kernel did.
//!
//! The replay drives the real allocator ([`PageAllocator::alloc_pages_report`],
//! [`PageAllocator::free_pages_report`], [`PageAllocator::vmstat_tick_report`]); it
//! decides nothing itself. The simulated allocator picks its own pfns, so the replay keeps
//! a map from each traced block to the simulated block that stands for it. What it counts
//! is what the core reports each call did under the zone lock (refills, drains by reason,
//! pages taken off the buddy lists: one [`ZoneLockHold`] per lock hold), credited to the
//! CPU that made the call.
//!
//! Set-up, from the zoneinfo snapshot taken before recording:
//! 1. Zones: each zone gets its start pfn and exactly its managed pages
//!    ([`Layout::Compact`]); sysctls from the recording (else inferred from the
//!    watermarks); the LLC from the recording (else 32 MiB shared by all CPUs).
//! 2. Blocks allocated before recording began (a free whose pfn is not live in the trace)
//!    are taken out of the buddy allocator first, at their exact pfn with
//!    [`PageAllocator::take_page_off_buddy`]; where that pfn lies outside the compact
//!    zone or overlaps another such block, a free block of the same order from the same
//!    zone stands in for it ([`PageAllocator::take_free_block`]); both are counted.
//!    Because this happens before step 3, no such block can be on a simulated pageset.
//! 3. Each CPU's pageset gets the snapshot's `count` and `high`. The snapshot does not
//!    say which lists held the pages; [`SeedRule`] chooses (default: from when the trace
//!    shows each list run empty).
//! 4. Ballast: free `MAX_ORDER` blocks are taken until each zone's free pages are within
//!    a block of the snapshot's `pages free`, so watermark-driven rules (`BELOW_HIGH`)
//!    see the same headroom as the kernel did. Only whole `MAX_ORDER` blocks: smaller
//!    ones would shatter the free memory that unmovable requests steal pageblocks from.
//!
//! Events then run in timestamp order on their CPUs; each CPU's vmstat tick (decay) runs
//! every `stat_interval` (1 s) at the phase the trace shows for it, the time of the
//! kernel's first decay drain on that CPU (a kworker's `mm_page_pcpu_drain`), or, where
//! the trace shows none, one `stat_interval` after the first event ([`TickPhase`]). Allocation
//! requests use the traced zone (by pfn) and migratetype; a free whose order differs from
//! its traced allocation, or that falls inside a larger live block (`split_page` users),
//! is counted and skipped.
//!
//! A replay that skips more than half of the trace's events ([`SKIPPED_SHARE_MAX`]) is an
//! error, not a table: events outside the snapshot's zones or on a CPU without a pageset
//! (the snapshot is of another machine, or cut short), plus the worst policy's frees and
//! allocations it could not apply. Its counts would describe some other workload than the
//! one traced. The error names how many were skipped and why.

use std::collections::{BTreeMap, HashMap};

use mmkit_core::internals;
use mmkit_core::page_alloc::MigrateType;
use mmkit_core::page_alloc::{Caller, DrainReason, HoldKind, ZoneId, ZoneLockHold};
use mmkit_core::topology::CacheInfo;
use mmkit_core::views::zoneinfo::{self, ZoneInfo};
use mmkit_core::{Gfp, Order, PageAllocator, Pfn, Policy, Settings, ZoneType};
use serde::Serialize;

use crate::machine::{self, Layout};
use crate::parse::{Event, EventKind, ProblemKind, Problems, Trace};

/// Everything the replay needs besides the events.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The zoneinfo snapshot taken before recording.
    pub zones: Vec<ZoneInfo>,
    /// The sysctls in force.
    pub settings: Settings,
    /// The last-level cache.
    pub llc: CacheInfo,
    /// Where each value came from, for the report.
    pub sources: Vec<String>,
    /// Where each CPU's vmstat tick falls.
    pub tick_phase: TickPhase,
    /// The jiffies grid the recording measured (section `tick-grid`), which places the
    /// vmstat tick of a CPU whose decay drain the trace does not show. `None` (older
    /// recordings, plain traces): one `stat_interval` after the first event.
    pub tick_grid: Option<TickGrid>,
}

/// Where whole seconds of jiffies fall on the trace clock. Linux re-arms each CPU's
/// `vmstat_update` with `round_jiffies_relative(stat_interval)`, which rounds to a whole
/// second of jiffies skewed by 3 jiffies per CPU (`round_jiffies_common`: the CPU's
/// timer fires when `(jiffies + 3 × cpu) % HZ == 0`), so every CPU's tick keeps one
/// phase for the whole boot (later when the CPU was idle or its kworker waits to run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TickGrid {
    /// Where `jiffies % HZ == 0` falls within each second of the trace clock, ns.
    pub second_offset_ns: u64,
    /// One jiffy, ns (`1e9 / HZ`).
    pub jiffy_ns: u64,
}

impl TickGrid {
    /// The grid from the recorder's `tick-grid` section: `now_ns` (CLOCK_MONOTONIC, the
    /// trace's `mono` clock) and `jiffies` read together from `/proc/timer_list`, and `hz`.
    pub fn parse(section: &str) -> Option<TickGrid> {
        let field = |key: &str| {
            section.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .strip_prefix('\t')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        };
        let (now_ns, jiffies, hz) = (field("now_ns")?, field("jiffies")?, field("hz")?);
        if hz == 0 || hz > 10_000 {
            return None;
        }
        let second = 1_000_000_000;
        let jiffy_ns = second / hz;
        let since_whole_second = (jiffies % hz) * jiffy_ns;
        let second_offset_ns = (now_ns % second + second - since_whole_second % second) % second;
        Some(TickGrid {
            second_offset_ns,
            jiffy_ns,
        })
    }

    /// The first time at or after `start` at which `cpu`'s tick falls due.
    fn first_at_or_after(&self, start: u64, cpu: u64) -> u64 {
        let second = 1_000_000_000;
        let skew = (3 * cpu * self.jiffy_ns) % second;
        let offset = (self.second_offset_ns + second - skew) % second;
        let first = start - start % second + offset;
        if first < start {
            first + second
        } else {
            first
        }
    }
}

/// Where the replay puts each CPU's vmstat tick (the decay of `high`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TickPhase {
    /// At the kernel's first decay drain on the CPU, where the trace shows one (a
    /// kworker's `mm_page_pcpu_drain`); else `stat_interval` after the first event.
    #[default]
    Decay,
    /// On every CPU `stat_interval` after the first event (the rule before the phase was
    /// read from the trace; kept to measure what reading it changed).
    FirstEvent,
}

impl Machine {
    /// The machine of a recording, or of a plain trace with a separate zoneinfo text.
    pub fn from_trace(trace: &Trace, zoneinfo_text: Option<&str>) -> Result<Machine, String> {
        let recording = trace.recording.as_ref();
        let mut sources = Vec::new();
        let text = match (
            zoneinfo_text,
            recording.and_then(|r| r.section("zoneinfo-before")),
        ) {
            (Some(text), _) => {
                sources.push("zoneinfo: --zoneinfo file".to_string());
                text
            }
            (None, Some(text)) => {
                sources.push("zoneinfo: the recording's snapshot before the run".to_string());
                text
            }
            (None, None) => {
                return Err(
                    "no zoneinfo snapshot: a plain tracefs text trace needs --zoneinfo FILE"
                        .to_string(),
                )
            }
        };
        let zones = zoneinfo::parse(text).map_err(|e| format!("zoneinfo: {e}"))?;
        let settings = match recording.and_then(|r| r.section("sysctl")) {
            Some(section) => {
                sources.push("sysctls: the recording".to_string());
                machine::settings(&machine::section_reader(section))?
            }
            None => {
                sources.push(
                    "sysctls: min_free_kbytes inferred from the min watermarks, rest default"
                        .to_string(),
                );
                machine::settings_from_zoneinfo(&zones)
            }
        };
        let nr_cpus = zones.iter().map(|z| z.pagesets.len()).max().unwrap_or(1) as u32;
        let llc = match recording.and_then(|r| r.section("llc")) {
            Some(section) => {
                sources.push("LLC: the recording".to_string());
                let read = machine::section_reader(section);
                CacheInfo {
                    llc_bytes: machine::parse_cache_size(&read("size")?)?,
                    llc_shared_cpus: machine::count_cpu_list(&read("shared_cpu_list")?)?,
                }
            }
            None => {
                sources.push("LLC: assumed 32 MiB shared by all CPUs".to_string());
                CacheInfo {
                    llc_bytes: 32 << 20,
                    llc_shared_cpus: nr_cpus.max(1),
                }
            }
        };
        Ok(Machine {
            zones,
            settings,
            llc,
            sources,
            tick_phase: TickPhase::default(),
            tick_grid: recording
                .and_then(|r| r.section("tick-grid"))
                .and_then(TickGrid::parse),
        })
    }

    fn zone_of(&self, pfn: u64) -> Option<&ZoneInfo> {
        self.zones
            .iter()
            .find(|z| z.spanned > 0 && pfn >= z.start_pfn && pfn - z.start_pfn < z.spanned)
    }

    fn nr_cpus(&self) -> u32 {
        self.zones
            .iter()
            .map(|z| z.pagesets.len())
            .max()
            .unwrap_or(0) as u32
    }
}

/// Refill and drain counts for one CPU (or the total).
#[derive(Clone, Copy, Default, Debug, Serialize, PartialEq, Eq)]
pub struct Counts {
    /// PCP refills: `rmqueue_bulk` calls (observed: bursts of `percpu_refill=1` events).
    pub refill_events: u64,
    /// Pages moved buddy → pageset by refills.
    pub refill_pages: u64,
    /// PCP drains: `free_pcppages_bulk` calls (observed: bursts of drain events).
    pub drain_events: u64,
    /// Pages moved pageset → buddy.
    pub drain_pages: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.refill_events += other.refill_events;
        self.refill_pages += other.refill_pages;
        self.drain_events += other.drain_events;
        self.drain_pages += other.drain_pages;
    }
}

/// The metrics of Huang 2023's tables (the cover letter of "mm: PCP high auto-tuning").
#[derive(Clone, Copy, Default, Debug, Serialize, PartialEq)]
pub struct SeedMetrics {
    /// Pages taken under the zone lock (refills + direct buddy allocations).
    pub alloc_zone_pages: u64,
    /// `alloc_zone_pages` / pages allocated.
    pub alloc_zone_share: f64,
    /// Drains triggered by the `free_high` rule (observed: inferred, see the report).
    pub free_high_drains: u64,
    /// Pages those drains moved.
    pub free_high_drain_pages: u64,
    /// Peak of pages held in all pagesets (observed: `None`, only snapshots exist).
    pub pcp_pages_peak: Option<u64>,
    /// Mean over events of pages held in all pagesets.
    pub pcp_pages_mean: Option<f64>,
}

/// What the kernel did, from the trace.
#[derive(Clone, Debug, Serialize)]
pub struct Observed {
    /// Per CPU.
    pub per_cpu: Vec<Counts>,
    /// All CPUs.
    pub total: Counts,
    /// Huang 2023's metrics (free_high inferred by [`Observed::free_high_rule`]).
    pub seed: SeedMetrics,
    /// The recorded kernel's `free_high` rule, by which the trace's drains are told apart.
    pub free_high_rule: FreeHighRule,
    /// Pages allocated (`mm_page_alloc`, Σ 2^order).
    pub alloc_pages: u64,
    /// Pages freed (`mm_page_free`).
    pub free_pages: u64,
    /// `mm_page_alloc_zone_locked` pages with `percpu_refill=0`.
    pub direct_zone_pages: u64,
    /// Pages on all pagesets in the snapshots before and after.
    pub pcp_pages_before: u64,
    /// See `pcp_pages_before`.
    pub pcp_pages_after: Option<u64>,
    /// Events by kind and order (`kind/order` → count), for the workload description.
    pub events_by_kind_order: BTreeMap<String, u64>,
    /// Blocks of THP order whose migratetype is not MOVABLE (what `NR_PCP_THP = 2` would
    /// treat differently).
    pub thp_non_movable_events: u64,
    /// Trace duration in seconds (first to last event).
    pub seconds: f64,
    /// `/proc/vmstat` deltas over the recording (after − before), when the recording has
    /// both snapshots: `pgalloc_*` summed over zones, `pgfree`. A cross-check of the
    /// traced `alloc_pages`/`free_pages` (the snapshots bracket the warm-up-free run a
    /// little more widely than tracing does).
    pub vmstat_delta: Option<(i64, i64)>,
}

/// How the replay started.
#[derive(Clone, Default, Debug, Serialize)]
pub struct Setup {
    /// Frees of blocks allocated before recording began.
    pub pretrace_blocks: u64,
    /// Of those, taken off the buddy allocator at their exact pfn.
    pub pretrace_exact: u64,
    /// Of those, stood in for by another free block of the same order and zone (pfn
    /// outside the compact zone, or overlapping another pre-trace block).
    pub pretrace_substituted: u64,
    /// Of those, not placeable at all (zone exhausted) and skipped.
    pub pretrace_unplaced: u64,
    /// Pages put on pagesets from the snapshot.
    pub seeded_pcp_pages: u64,
    /// Pages taken as ballast to match the snapshot's free pages.
    pub ballast_pages: u64,
}

/// The largest share of a trace's events a replay may skip (see the module
/// documentation): half. Past it, most of what the kernel did is missing from the replay.
/// The committed traces skip under 1 %; a zoneinfo of another machine skips nearly all.
pub const SKIPPED_SHARE_MAX: f64 = 0.5;

/// Events set aside before any policy runs.
#[derive(Clone, Copy, Default, Debug)]
struct Excluded {
    /// A pfn in no zone of the snapshot.
    outside_zones: u64,
    /// A CPU the snapshot has no pageset for.
    no_pageset: u64,
}

/// Refuse a replay that skips more than [`SKIPPED_SHARE_MAX`] of `total` events: the
/// `excluded` ones, plus `under`'s skips (the worst policy's) once the policies ran.
fn check_skipped_share(
    total: usize,
    excluded: Excluded,
    under: Option<&Predicted>,
    machine: &Machine,
) -> Result<(), String> {
    let in_run = under.map_or(0, |p| p.skipped.total());
    let skipped = excluded.outside_zones + excluded.no_pageset + in_run;
    if (skipped as f64) <= SKIPPED_SHARE_MAX * total as f64 {
        return Ok(());
    }
    let zoneinfo = machine
        .sources
        .iter()
        .find_map(|s| s.strip_prefix("zoneinfo: "))
        .unwrap_or("the zoneinfo snapshot");
    let mut why = Vec::new();
    if excluded.outside_zones > 0 {
        why.push(format!(
            "{} with a pfn outside every zone of {zoneinfo}",
            excluded.outside_zones
        ));
    }
    if excluded.no_pageset > 0 {
        why.push(format!(
            "{} on a CPU without a pageset in {zoneinfo}",
            excluded.no_pageset
        ));
    }
    if let Some(p) = under.filter(|_| in_run > 0) {
        why.push(format!(
            "{in_run} that {} could not apply ({})",
            p.policy,
            p.skipped.describe()
        ));
    }
    let hint = if excluded.outside_zones + excluded.no_pageset > in_run {
        ": the zoneinfo does not describe the machine the trace was recorded on"
    } else {
        ""
    };
    Err(format!(
        "the replay would skip {skipped} of {total} events, more than {:.0} %: {}{hint}",
        SKIPPED_SHARE_MAX * 100.0,
        why.join("; ")
    ))
}

/// Events the replay could not apply.
#[derive(Clone, Default, Debug, Serialize)]
pub struct Skipped {
    /// Frees whose order differs from the traced allocation at that pfn.
    pub order_mismatch: u64,
    /// Frees of a pfn inside a larger live block.
    pub inside_live_block: u64,
    /// Frees of a block already freed (a pre-trace block seen twice).
    pub unmatched_free: u64,
    /// Allocations of a pfn that was still live (the earlier block is abandoned).
    pub realloc_live: u64,
    /// Allocations the simulated allocator refused.
    pub alloc_failed: u64,
    /// Frees the simulated allocator refused.
    pub free_failed: u64,
}

impl Skipped {
    /// Events not applied. An allocation of a live pfn is applied (the earlier block is
    /// abandoned), so `realloc_live` does not count.
    pub fn total(&self) -> u64 {
        self.order_mismatch
            + self.inside_live_block
            + self.unmatched_free
            + self.alloc_failed
            + self.free_failed
    }

    /// The non-zero counts, in words.
    fn describe(&self) -> String {
        [
            (
                self.order_mismatch,
                "frees of another order than their allocation",
            ),
            (self.inside_live_block, "frees inside a live block"),
            (self.unmatched_free, "frees of a block already freed"),
            (self.alloc_failed, "allocations refused"),
            (self.free_failed, "frees refused"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// One policy's prediction.
#[derive(Clone, Debug, Serialize)]
pub struct Predicted {
    /// The policy.
    pub policy: String,
    /// Per CPU.
    pub per_cpu: Vec<Counts>,
    /// All CPUs.
    pub total: Counts,
    /// Huang 2023's metrics.
    pub seed: SeedMetrics,
    /// Drains by reason (events, pages), all CPUs.
    pub drains_by_reason: BTreeMap<String, (u64, u64)>,
    /// Set-up numbers.
    pub setup: Setup,
    /// Events skipped.
    pub skipped: Skipped,
    /// vmstat ticks run per CPU.
    pub ticks: u64,
    /// Per zone at the end: (zone, refills, refill pages, free pages, pages on pagesets).
    pub zones_end: Vec<(String, u64, u64, i64, u64)>,
}

/// The whole result.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    /// How the pagesets' starting pages were spread over their lists.
    pub seed: SeedRule,
    /// Where the machine description came from.
    pub sources: Vec<String>,
    /// The trace's own counts.
    pub observed: Observed,
    /// One per policy.
    pub predicted: Vec<Predicted>,
    /// Lines skipped or repaired while parsing and replaying.
    pub problems: Problems,
    /// Events in the trace.
    pub events: usize,
}

/// When the recorded kernel drained a pageset after a free of order 1–3 (`free_high`, in
/// `free_unref_page_commit`): what tells a `free_high` drain in a trace from the drain of a
/// pageset past its `high`. Both rules see a drain that starts right after such a free,
/// with no allocation on that CPU between.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FreeHighRule {
    /// Linux 5.19 to 6.6: every free of order 1–3 while the pageset is freeing heavily
    /// (`free_factor > 0`, which the trace does not show, so the drain that follows is what
    /// counts). A kernel before 5.19 has no `free_high` and is read by this rule too, so a
    /// drain past `high` right after such a free would be counted: an upper bound there.
    AnyHighOrder,
    /// Linux 6.7 on (Huang 2023's patch 1): only a free of order 1–3 that follows another
    /// (`PCPF_PREV_FREE_HIGH_ORDER`), so that a process's exit, whose order-1 PGD follows
    /// its order-0 pages, no longer drains.
    Consecutive,
}

impl FreeHighRule {
    /// The rule of a kernel release as `uname -r` prints it (`6.1.0-57-amd64`,
    /// `6.18.44-fc`); a trace without one (plain tracefs text) is read by 6.7's rule.
    pub fn for_kernel(release: Option<&str>) -> FreeHighRule {
        let version = release.and_then(|r| {
            let mut parts = r.split('.');
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: String = parts
                .next()?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            Some((major, minor.parse::<u32>().ok()?))
        });
        match version {
            Some(v) if v < (6, 7) => FreeHighRule::AnyHighOrder,
            _ => FreeHighRule::Consecutive,
        }
    }

    /// The rule in words, for the replay's report.
    pub fn describe(self) -> &'static str {
        match self {
            FreeHighRule::AnyHighOrder => "5.19-6.6 rule: a drain right after a free of order 1-3",
            FreeHighRule::Consecutive => {
                "6.7 rule: a drain right after two frees of order 1-3 in a row"
            }
        }
    }

    /// High-order frees in a row, with no allocation between, that the rule needs.
    fn frees_needed(self) -> u32 {
        match self {
            FreeHighRule::AnyHighOrder => 1,
            FreeHighRule::Consecutive => 2,
        }
    }
}

/// Count what the trace shows, grouping per-CPU bursts.
pub fn observe(trace: &Trace, machine: &Machine) -> Observed {
    let nr_cpus = machine
        .nr_cpus()
        .max(1 + trace.events.iter().map(|e| e.cpu).max().unwrap_or(0));
    let mut per_cpu = vec![Counts::default(); nr_cpus as usize];
    // Per CPU: the kind of the previous event and the orders of recent frees.
    let mut previous: Vec<Option<EventKind>> = vec![None; nr_cpus as usize];
    let mut high_order_frees: Vec<u32> = vec![0; nr_cpus as usize];
    let mut in_free_high: Vec<bool> = vec![false; nr_cpus as usize];
    let mut seed = SeedMetrics::default();
    let free_high_rule =
        FreeHighRule::for_kernel(trace.recording.as_ref().and_then(|r| r.meta("kernel")));
    let mut observed = Observed {
        per_cpu: Vec::new(),
        total: Counts::default(),
        seed,
        free_high_rule,
        alloc_pages: 0,
        free_pages: 0,
        direct_zone_pages: 0,
        pcp_pages_before: pcp_pages(&machine.zones),
        pcp_pages_after: trace
            .recording
            .as_ref()
            .and_then(|r| r.section("zoneinfo-after"))
            .and_then(|t| zoneinfo::parse(t).ok())
            .map(|z| pcp_pages(&z)),
        events_by_kind_order: BTreeMap::new(),
        thp_non_movable_events: 0,
        vmstat_delta: trace.recording.as_ref().and_then(vmstat_delta),
        seconds: match (trace.events.first(), trace.events.last()) {
            (Some(a), Some(b)) => (b.ts_ns - a.ts_ns) as f64 / 1e9,
            _ => 0.0,
        },
    };
    for event in &trace.events {
        let cpu = event.cpu as usize;
        let pages = 1u64 << event.order;
        let key = format!("{:?}/{}", event.kind, event.order);
        *observed.events_by_kind_order.entry(key).or_default() += 1;
        if event.order == mmkit_core::page_alloc::PAGEBLOCK_ORDER
            && event.migratetype >= 0
            && event.migratetype != 1
        {
            observed.thp_non_movable_events += 1;
        }
        let counts = &mut per_cpu[cpu];
        let continues = previous[cpu] == Some(event.kind);
        match event.kind {
            EventKind::Alloc => {
                observed.alloc_pages += pages;
                high_order_frees[cpu] = 0;
            }
            EventKind::Free => {
                observed.free_pages += pages;
                if (1..=3).contains(&event.order) {
                    high_order_frees[cpu] += 1;
                } else {
                    high_order_frees[cpu] = 0;
                }
            }
            EventKind::FreeBatched => {}
            EventKind::ZoneLocked => {
                seed.alloc_zone_pages += pages;
                if event.percpu_refill {
                    counts.refill_pages += pages;
                    if !continues {
                        counts.refill_events += 1;
                    }
                } else {
                    observed.direct_zone_pages += pages;
                }
            }
            EventKind::PcpuDrain => {
                counts.drain_pages += pages;
                if !continues {
                    counts.drain_events += 1;
                    in_free_high[cpu] = high_order_frees[cpu] >= free_high_rule.frees_needed();
                    if in_free_high[cpu] {
                        seed.free_high_drains += 1;
                    }
                }
                if in_free_high[cpu] {
                    seed.free_high_drain_pages += pages;
                }
            }
        }
        // mm_page_free_batched accompanies mm_page_free; it does not end a burst.
        if event.kind != EventKind::FreeBatched {
            previous[cpu] = Some(event.kind);
        }
    }
    for counts in &per_cpu {
        observed.total.add(counts);
    }
    seed.alloc_zone_share = ratio(seed.alloc_zone_pages, observed.alloc_pages);
    observed.seed = seed;
    observed.per_cpu = per_cpu;
    observed
}

/// (Δ Σ `pgalloc_*`, Δ `pgfree`) between the recording's vmstat snapshots.
fn vmstat_delta(recording: &crate::parse::Recording) -> Option<(i64, i64)> {
    let counters = |text: &str| -> (i64, i64) {
        let mut alloc = 0;
        let mut free = 0;
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            let value: i64 = value.parse().unwrap_or(0);
            if name.starts_with("pgalloc_") {
                alloc += value;
            } else if name == "pgfree" {
                free = value;
            }
        }
        (alloc, free)
    };
    let before = counters(recording.section("vmstat-before")?);
    let after = counters(recording.section("vmstat-after")?);
    Some((after.0 - before.0, after.1 - before.1))
}

fn pcp_pages(zones: &[ZoneInfo]) -> u64 {
    zones
        .iter()
        .flat_map(|z| z.pagesets.iter())
        .map(|p| p.count)
        .sum()
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// One pre-trace block: the free that revealed it.
#[derive(Clone, Copy, Debug)]
struct PretraceBlock {
    pfn: u64,
    order: u8,
    zone: ZoneId,
}

/// What a free does in the liveness walk both passes share.
enum FreeFate {
    /// The free matches a live traced allocation.
    Live,
    /// The block was allocated before recording.
    Pretrace,
    /// Order differs from the live allocation at this pfn.
    OrderMismatch,
    /// Inside a larger live block.
    InsideLive,
}

/// Blocks allocated in the trace and not yet freed: pfn → order.
#[derive(Default)]
struct Liveness {
    live: BTreeMap<u64, u8>,
}

impl Liveness {
    fn alloc(&mut self, pfn: u64, order: u8) -> bool {
        self.live.insert(pfn, order).is_some()
    }

    fn free(&mut self, pfn: u64, order: u8) -> FreeFate {
        if let Some(&live_order) = self.live.get(&pfn) {
            if live_order == order {
                self.live.remove(&pfn);
                return FreeFate::Live;
            }
            return FreeFate::OrderMismatch;
        }
        if let Some((&head, &o)) = self.live.range(..pfn).next_back() {
            if pfn < head + (1u64 << o) {
                return FreeFate::InsideLive;
            }
        }
        FreeFate::Pretrace
    }
}

/// Run the replay under each policy.
pub fn replay(
    trace: &Trace,
    machine: &Machine,
    policies: &[Policy],
    seed: SeedRule,
) -> Result<Replay, String> {
    let mut problems = trace.problems.clone();
    if let Some(error) = &trace.decompress_error {
        problems.add(trace.lines, ProblemKind::Truncated, error);
    }
    if trace.recording.as_ref().is_some_and(|r| !r.complete) {
        problems.add(
            trace.lines,
            ProblemKind::Truncated,
            "the recording has no end marker",
        );
    }
    let mut events: Vec<&Event> = Vec::with_capacity(trace.events.len());
    let mut excluded = Excluded::default();
    for event in &trace.events {
        if machine.zone_of(event.pfn).is_none() {
            excluded.outside_zones += 1;
            problems.add(
                event.line,
                ProblemKind::PfnOutsideZones,
                &format!("pfn {:#x}", event.pfn),
            );
        } else if event.cpu >= machine.nr_cpus() {
            excluded.no_pageset += 1;
            problems.add(
                event.line,
                ProblemKind::BadField,
                &format!("cpu {} has no pageset", event.cpu),
            );
        } else {
            events.push(event);
        }
    }
    // Before the policies run: a snapshot of another machine is refused at once.
    check_skipped_share(trace.events.len(), excluded, None, machine)?;
    let pretrace = find_pretrace_blocks(&events, machine);
    let mix = seed_mix(&events, machine);
    let observed = observe(trace, machine);
    let (first_ticks, tick_sources) = first_ticks(trace, &events, machine);
    let predicted = policies
        .iter()
        .map(|policy| {
            let setup = (&mix, seed);
            run_policy(*policy, &events, &pretrace, setup, machine, &first_ticks)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let worst = predicted.iter().max_by_key(|p| p.skipped.total());
    check_skipped_share(trace.events.len(), excluded, worst, machine)?;
    let mut sources = machine.sources.clone();
    sources.extend(tick_sources);
    Ok(Replay {
        seed,
        sources,
        observed,
        predicted,
        problems,
        events: trace.events.len(),
    })
}

/// When each CPU's first vmstat tick runs in the replay, and where that came from.
///
/// Linux's per-CPU `vmstat_update` runs every `stat_interval` at a phase of its own
/// (`round_jiffies_relative`: whole seconds of jiffies, skewed by CPU), in a kworker on
/// that CPU. A tick that decays `high` below `count` drains, and the trace shows that drain
/// in the kworker's context: its time is the CPU's phase. For a CPU with such a drain the
/// replay ticks at that time and every `stat_interval` before and after it; for a CPU
/// without one, on the jiffies grid the recorder measured ([`TickGrid`]), which is when
/// the timer fires (the kworker runs a few ms later on a loaded machine); without a grid
/// the phase is unknown and assumed: `stat_interval` after the first event.
fn first_ticks(
    trace: &Trace,
    events: &[&Event],
    machine: &Machine,
) -> (Vec<TickPlan>, Vec<String>) {
    let interval_ns = u64::from(machine.settings.stat_interval_ms) * 1_000_000;
    let start = events.first().map_or(0, |e| e.ts_ns);
    let by_trace = machine.tick_phase == TickPhase::Decay;
    let mut decay: Vec<Option<u64>> = vec![None; machine.nr_cpus() as usize];
    for event in events.iter().filter(|e| e.kind == EventKind::PcpuDrain) {
        let kworker = trace
            .comms
            .get(&event.pid)
            .is_some_and(|comm| comm.starts_with("kworker/"));
        let slot = &mut decay[event.cpu as usize];
        if kworker && slot.is_none() && by_trace {
            *slot = Some(event.ts_ns);
        }
    }
    let grid = machine.tick_grid.filter(|_| by_trace);
    let mut sources = Vec::new();
    let plans = decay
        .iter()
        .enumerate()
        .map(|(cpu, seen)| {
            let on_grid = grid.map(|g| g.first_at_or_after(start, cpu as u64));
            let plan = TickPlan::new(start, interval_ns, on_grid, *seen);
            sources.push(match (seen, on_grid) {
                (Some(ts), _) => format!(
                    "vmstat tick, cpu {cpu}: at the kernel's first decay drain (a kworker's, \
                     {:.3} s into the trace){}, every {} ms",
                    (ts - start) as f64 / 1e9,
                    if on_grid.is_some() {
                        ", before it on the recorded jiffies grid"
                    } else {
                        ""
                    },
                    machine.settings.stat_interval_ms
                ),
                (None, Some(first)) => format!(
                    "vmstat tick, cpu {cpu}: on the recorded jiffies grid, {:.3} s past each \
                     second of the trace clock",
                    (first % 1_000_000_000) as f64 / 1e9
                ),
                (None, None) => format!(
                    "vmstat tick, cpu {cpu}: phase unknown, {} ms after the first event",
                    machine.settings.stat_interval_ms
                ),
            });
            plan
        })
        .collect();
    (plans, sources)
}

/// One CPU's vmstat ticks in the replay: `next`, then every `stat_interval`; with an
/// `anchor` (the kernel's first decay drain, seen after `next`), the tick due within half
/// an interval of it runs at the anchor instead: the timer fires on the jiffies grid, but
/// its kworker ran when the trace shows, which on a loaded machine is tens of ms later.
#[derive(Clone, Copy, Debug)]
struct TickPlan {
    next: u64,
    anchor: Option<u64>,
}

impl TickPlan {
    fn new(start: u64, interval_ns: u64, on_grid: Option<u64>, decay: Option<u64>) -> TickPlan {
        match (decay, on_grid) {
            // Ticks before the decay drain are on the grid; the drain's own tick is the
            // drain.
            (Some(drain), Some(grid)) if grid + interval_ns / 2 <= drain => TickPlan {
                next: grid,
                anchor: Some(drain),
            },
            (Some(drain), Some(_)) => TickPlan {
                next: drain,
                anchor: None,
            },
            // No grid: the ticks before the drain at whole intervals before it.
            (Some(drain), None) => TickPlan {
                next: drain - (drain - start) / interval_ns * interval_ns,
                anchor: None,
            },
            (None, Some(grid)) => TickPlan {
                next: grid,
                anchor: None,
            },
            (None, None) => TickPlan {
                next: start + interval_ns,
                anchor: None,
            },
        }
    }

    /// The tick at `next` ran: the one after it.
    fn advance(&mut self, interval_ns: u64) {
        self.next += interval_ns;
        if let Some(anchor) = self.anchor {
            if self.next + interval_ns / 2 > anchor {
                self.next = anchor;
                self.anchor = None;
            }
        }
    }
}

/// A request that could have used a zone above DMA32 (no DMA zone modifier in its
/// `gfp_flags`) but whose block the trace shows in `traced` went down its zonelist past
/// every populated zone above: the kernel found them below their high watermark (or, on
/// the first pass, without a block of the type short of fragmenting one). The replay
/// cannot get there by itself: its zones hold the same number of free pages in another
/// layout, so a high-order request that failed for want of a large enough free block in
/// the kernel's Normal zone finds one in the replay's. What the walk leaves behind is the
/// core's rule ([`internals::zone_passed_over`]: `BELOW_HIGH`, which shrinks the
/// pagesets on their next frees).
fn pass_over_zones_above(allocator: &PageAllocator, traced: &ZoneInfo) {
    for zone in allocator.zones() {
        if zone.node() == traced.node && zone.zone_type() > traced.zone && zone.managed() > 0 {
            internals::zone_passed_over(allocator, zone);
        }
    }
}

fn zone_id(zone: &ZoneInfo) -> ZoneId {
    ZoneId {
        node: zone.node,
        zone_type: zone.zone,
    }
}

fn find_pretrace_blocks(events: &[&Event], machine: &Machine) -> Vec<PretraceBlock> {
    let mut liveness = Liveness::default();
    let mut blocks = Vec::new();
    for event in events {
        match event.kind {
            EventKind::Alloc => {
                liveness.alloc(event.pfn, event.order);
            }
            EventKind::Free => {
                if let FreeFate::Pretrace = liveness.free(event.pfn, event.order) {
                    let zone = machine.zone_of(event.pfn).expect("filtered to zones");
                    blocks.push(PretraceBlock {
                        pfn: event.pfn,
                        order: event.order,
                        zone: zone_id(zone),
                    });
                }
            }
            _ => {}
        }
    }
    blocks
}

/// The lists a pageset's starting pages are spread over: orders 0–3 and the THP order.
const SEED_ORDERS: [u8; 5] = [0, 1, 2, 3, mmkit_core::page_alloc::PAGEBLOCK_ORDER];

/// How a pageset's starting `count` pages are spread over its lists (the snapshot gives
/// only the total).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedRule {
    /// In proportion to the pages this CPU freed of each order in the trace, each order
    /// split by migratetype as the trace's allocations of that order were (the default:
    /// a steady state refills the lists the way the CPU frees; the default until the
    /// compile traces showed it wrong, docs/FIDELITY.md).
    Frees,
    /// In proportion to the (order, migratetype) of the pages the kernel drained from
    /// this CPU's pageset during the trace.
    Drains,
    /// All on the MOVABLE order-0 list.
    Movable0,
    /// Spread evenly over the lists of orders 0–3 this CPU neither allocated from nor
    /// freed that order to in the trace: the pages are left-overs of earlier work that
    /// only drains will touch.
    Stale,
    /// From the trace's own list balance. Linux refills a pageset list only when it is
    /// empty (`__rmqueue_pcplist` calls `rmqueue_bulk` on `list_empty`), so at a traced
    /// refill the blocks that list started with equal the blocks taken from it before
    /// (allocations of that order and migratetype on this CPU, drains of that list) minus
    /// the blocks put on it (refills, and frees, listed by the migratetype of the block's
    /// traced allocation, MOVABLE when it was allocated before recording). Each order
    /// 0–3 list starts with the largest such deficit over the trace: exact for a list
    /// the kernel refilled, the least that keeps it from running empty earlier than the
    /// kernel's did otherwise. The rest of `count` goes evenly to the order 0–3 lists
    /// this CPU never allocates from in the trace (none: MOVABLE order 0); the decay
    /// and free drains of the compile traces show such lists holding most of the pages
    /// (docs/FIDELITY.md, "Causes"). The default.
    #[default]
    Empties,
}

/// What the trace says about the make-up of each pageset, per (zone index, CPU): pages
/// freed by list order, pages drained by (order, migratetype), pages allocated by (order,
/// migratetype); and per (zone index, order) pages allocated by migratetype on any CPU.
#[derive(Default)]
struct SeedMix {
    freed: HashMap<(usize, u32), [u64; SEED_ORDERS.len()]>,
    drained: HashMap<(usize, u32), [[u64; 3]; SEED_ORDERS.len()]>,
    allocated_cpu: HashMap<(usize, u32), [[u64; 3]; SEED_ORDERS.len()]>,
    allocated: HashMap<(usize, usize), [u64; 3]>,
    /// Per (zone index, CPU): the largest deficit (blocks taken − blocks put) of each
    /// order 0–3 list over the trace ([`SeedRule::Empties`]).
    deficit: HashMap<(usize, u32), [[u64; 3]; 4]>,
}

fn mt_index(migratetype: i32) -> usize {
    match migratetype {
        0 => 0,
        2 => 2,
        _ => 1,
    }
}

fn seed_mix(events: &[&Event], machine: &Machine) -> SeedMix {
    let mut mix = SeedMix::default();
    list_deficits(events, machine, &mut mix);
    for event in events {
        let Some(slot) = SEED_ORDERS.iter().position(|&o| o == event.order) else {
            continue;
        };
        let Some(zone) = machine.zones.iter().position(|z| {
            z.spanned > 0 && event.pfn >= z.start_pfn && event.pfn - z.start_pfn < z.spanned
        }) else {
            continue;
        };
        let pages = 1u64 << event.order;
        let key = (zone, event.cpu);
        let mt = mt_index(event.migratetype);
        match event.kind {
            EventKind::Free => mix.freed.entry(key).or_default()[slot] += pages,
            EventKind::PcpuDrain => mix.drained.entry(key).or_default()[slot][mt] += pages,
            EventKind::Alloc => {
                mix.allocated.entry((zone, slot)).or_default()[mt] += pages;
                mix.allocated_cpu.entry(key).or_default()[slot][mt] += pages;
            }
            _ => {}
        }
    }
    mix
}

/// [`SeedRule::Empties`]: walk the trace keeping, per (zone, CPU, order ≤ 3,
/// migratetype) list, blocks taken minus blocks put, and record its maximum.
fn list_deficits(events: &[&Event], machine: &Machine, mix: &mut SeedMix) {
    let mut running: HashMap<(usize, u32, usize, usize), i64> = HashMap::new();
    let mut allocated_mt: HashMap<u64, usize> = HashMap::new();
    for event in events {
        if event.order > 3 {
            continue;
        }
        let Some(zone) = machine.zones.iter().position(|z| {
            z.spanned > 0 && event.pfn >= z.start_pfn && event.pfn - z.start_pfn < z.spanned
        }) else {
            continue;
        };
        let (mt, step) = match event.kind {
            EventKind::Alloc => {
                let mt = mt_index(event.migratetype);
                allocated_mt.insert(event.pfn, mt);
                (mt, 1)
            }
            EventKind::Free => (allocated_mt.get(&event.pfn).copied().unwrap_or(1), -1),
            EventKind::ZoneLocked if event.percpu_refill => (mt_index(event.migratetype), -1),
            EventKind::PcpuDrain => (mt_index(event.migratetype), 1),
            _ => continue,
        };
        let key = (zone, event.cpu, event.order as usize, mt);
        let value = running.entry(key).or_default();
        *value += step;
        let max = &mut mix.deficit.entry((zone, event.cpu)).or_default()[key.2][mt];
        *max = (*max).max(u64::try_from(*value).unwrap_or(0));
    }
}

/// [`SeedRule::Empties`]: the deficits (in blocks) first, then the rest of `count`
/// evenly over the order 0–3 lists this CPU never allocates from.
fn empties_plan(mix: &SeedMix, key: (usize, u32), count: u64) -> Vec<((Order, MigrateType), u64)> {
    let mut plan = Vec::new();
    let mut placed = 0u64;
    let deficit = mix.deficit.get(&key).copied().unwrap_or_default();
    for (order, by_mt) in deficit.iter().enumerate() {
        let order = Order::new(order as u8).expect("valid order");
        for (mt, &blocks) in by_mt.iter().enumerate() {
            let blocks = blocks.min((count - placed) >> order.get());
            if blocks > 0 {
                let mt = MigrateType::from_index(mt).expect("PCP type");
                plan.push(((order, mt), blocks));
                placed += blocks << order.get();
            }
        }
    }
    let allocated = mix.allocated_cpu.get(&key).copied().unwrap_or_default();
    let idle: Vec<(usize, usize)> = (0..4)
        .flat_map(|slot| (0..3).map(move |mt| (slot, mt)))
        .filter(|&(slot, mt)| allocated[slot][mt] == 0)
        .collect();
    let rest = count - placed;
    if !idle.is_empty() {
        let share = rest / idle.len() as u64;
        for &(slot, mt) in &idle {
            let order = Order::new(SEED_ORDERS[slot]).expect("valid order");
            let blocks = share >> order.get();
            if blocks > 0 {
                let mt = MigrateType::from_index(mt).expect("PCP type");
                plan.push(((order, mt), blocks));
                placed += blocks << order.get();
            }
        }
    }
    if count > placed {
        // Rounding leaves < 8 pages per list: onto an idle order-0 list, so that no list
        // the deficits bound gets more than they say.
        let mt = idle
            .iter()
            .find(|&&(slot, _)| slot == 0)
            .map_or(MigrateType::Movable, |&(_, mt)| {
                MigrateType::from_index(mt).expect("PCP type")
            });
        plan.push(((Order::ZERO, mt), count - placed));
    }
    plan
}

/// Weights per (order slot, migratetype) for `rule`, or `None` to put everything on
/// MOVABLE order 0.
fn seed_weights(mix: &SeedMix, rule: SeedRule, key: (usize, u32)) -> Option<[[u64; 3]; 5]> {
    let mut weights = [[0u64; 3]; SEED_ORDERS.len()];
    match rule {
        SeedRule::Movable0 | SeedRule::Empties => return None,
        SeedRule::Drains => weights = *mix.drained.get(&key)?,
        SeedRule::Frees => {
            let freed = mix.freed.get(&key)?;
            for (slot, &pages) in freed.iter().enumerate() {
                let by_mt = mix
                    .allocated
                    .get(&(key.0, slot))
                    .copied()
                    .unwrap_or([0, 1, 0]);
                let mt_total: u64 = by_mt.iter().sum::<u64>().max(1);
                for mt in 0..3 {
                    // Scaled by 2^20 so that small shares survive the integer division.
                    weights[slot][mt] = ((pages as u128 * by_mt[mt] as u128) << 20)
                        .checked_div(mt_total as u128)
                        .unwrap_or(0) as u64;
                }
            }
        }
        SeedRule::Stale => {
            let freed = mix.freed.get(&key).copied().unwrap_or_default();
            let allocated = mix.allocated_cpu.get(&key).copied().unwrap_or_default();
            for slot in 0..4 {
                for mt in 0..3 {
                    let untouched = freed[slot] == 0 && allocated[slot][mt] == 0;
                    weights[slot][mt] = u64::from(untouched);
                }
            }
        }
    }
    (weights.iter().flatten().sum::<u64>() > 0).then_some(weights)
}

/// How a pageset's `count` pages are laid out at the start under `rule`; what rounding
/// leaves goes to MOVABLE order 0, as does everything when the rule has no data.
fn seed_plan(
    mix: &SeedMix,
    rule: SeedRule,
    zone: usize,
    cpu: u32,
    count: u64,
) -> Vec<((Order, MigrateType), u64)> {
    if rule == SeedRule::Empties {
        return empties_plan(mix, (zone, cpu), count);
    }
    let mut plan = Vec::new();
    let mut placed = 0;
    if let Some(weights) = seed_weights(mix, rule, (zone, cpu)) {
        let total: u128 = weights.iter().flatten().map(|&w| w as u128).sum();
        for (slot, by_mt) in weights.iter().enumerate() {
            let order = Order::new(SEED_ORDERS[slot]).expect("valid order");
            for (mt_index, &weight) in by_mt.iter().enumerate() {
                let pages = (count as u128 * weight as u128 / total) as u64;
                let blocks = pages >> order.get();
                if blocks > 0 {
                    let mt = MigrateType::from_index(mt_index).expect("PCP type");
                    plan.push(((order, mt), blocks));
                    placed += blocks << order.get();
                }
            }
        }
    }
    if count > placed {
        plan.push(((Order::ZERO, MigrateType::Movable), count - placed));
    }
    plan
}

/// The request that reproduces a traced allocation: its zone and migratetype.
fn gfp_for(zone: ZoneType, migratetype: i32) -> Gfp {
    let zone_bits = match zone {
        ZoneType::Dma => Gfp::DMA,
        ZoneType::Dma32 => Gfp::DMA32,
        _ => Gfp::empty(),
    };
    let mobility = match migratetype {
        0 => Gfp::empty(),
        2 => Gfp::RECLAIMABLE,
        _ => Gfp::MOVABLE,
    };
    Gfp::KERNEL | zone_bits | mobility
}

/// What the replayed calls did, credited to the CPU that made each call.
struct Ledger {
    per_cpu: Vec<Counts>,
    by_reason: [(u64, u64); DrainReason::COUNT],
    /// Pages taken off the buddy lists (`mm_page_alloc_zone_locked`): refills and direct
    /// buddy allocations.
    zone_locked_pages: u64,
}

impl Ledger {
    /// Credit the zone-lock holds of one call to `cpu`, the CPU that made it (a remote
    /// drain's hold names the drained CPU; the kernel's trace shows it on the drainer).
    fn credit(&mut self, cpu: u32, holds: &[ZoneLockHold]) {
        let counts = &mut self.per_cpu[cpu as usize];
        for hold in holds {
            match hold.kind {
                HoldKind::Refill => {
                    counts.refill_events += 1;
                    counts.refill_pages += hold.pages;
                    self.zone_locked_pages += hold.pages;
                }
                HoldKind::BuddyAlloc => self.zone_locked_pages += hold.pages,
                HoldKind::Drain(reason) => {
                    counts.drain_events += 1;
                    counts.drain_pages += hold.pages;
                    self.by_reason[reason as usize].0 += 1;
                    self.by_reason[reason as usize].1 += hold.pages;
                }
                HoldKind::BuddyFree | HoldKind::HighAtomic => {}
            }
        }
    }
}

fn build(policy: Policy, machine: &Machine) -> Result<PageAllocator, String> {
    let topology = machine::topology(&machine.zones, machine.llc, Layout::Compact)?;
    PageAllocator::new(topology, machine.settings.clone(), policy).map_err(|e| e.to_string())
}

/// Steps 2–4 of the set-up (module documentation).
fn set_up(
    allocator: &PageAllocator,
    pretrace: &[PretraceBlock],
    (mix, rule): (&SeedMix, SeedRule),
    machine: &Machine,
) -> (Setup, HashMap<u64, Vec<(Pfn, Order)>>) {
    let mut setup = Setup {
        pretrace_blocks: pretrace.len() as u64,
        ..Setup::default()
    };
    let mut placed: HashMap<u64, Vec<(Pfn, Order)>> = HashMap::new();
    let mut later = Vec::new();
    for block in pretrace {
        let order = Order::new(block.order).expect("parser bounds orders");
        let exact = allocator
            .find_zone(Pfn(block.pfn))
            .is_some_and(|z| z.id() == block.zone)
            && internals::take_page_off_buddy(allocator, Pfn(block.pfn), order).is_ok();
        if exact {
            setup.pretrace_exact += 1;
            placed
                .entry(block.pfn)
                .or_default()
                .push((Pfn(block.pfn), order));
        } else {
            later.push(*block);
        }
    }
    for block in later {
        let order = Order::new(block.order).expect("parser bounds orders");
        match internals::take_free_block(allocator, block.zone, order) {
            Some(pfn) => {
                setup.pretrace_substituted += 1;
                placed.entry(block.pfn).or_default().push((pfn, order));
            }
            None => setup.pretrace_unplaced += 1,
        }
    }
    for (z, info) in machine.zones.iter().enumerate() {
        for pageset in &info.pagesets {
            let plan = seed_plan(mix, rule, z, pageset.cpu, pageset.count);
            for ((order, mt), blocks) in plan {
                setup.seeded_pcp_pages += internals::seed_pageset(
                    allocator,
                    pageset.cpu,
                    zone_id(info),
                    (order, mt),
                    blocks,
                    pageset.high,
                )
                .unwrap_or(0);
            }
            // `high` even for an empty pageset.
            internals::seed_pageset(
                allocator,
                pageset.cpu,
                zone_id(info),
                (Order::ZERO, MigrateType::Movable),
                0,
                pageset.high,
            );
        }
    }
    for info in machine.zones.iter().filter(|z| z.managed > 0) {
        let Some(zone) = allocator.zone(info.node, info.zone) else {
            continue;
        };
        // Whole MAX_ORDER blocks only: taking smaller ones would break up the large free
        // blocks that unmovable requests steal whole pageblocks from (ALLOC_NOFRAGMENT).
        let order = Order::new(mmkit_core::page::MAX_ORDER).expect("MAX_ORDER is an order");
        while zone.free_pages() - info.pages_free >= order.pages() as i64 {
            if internals::take_free_block(allocator, zone.id(), order).is_none() {
                break;
            }
            setup.ballast_pages += order.pages();
        }
    }
    // Blocks seen twice at one pfn are freed in trace order.
    for list in placed.values_mut() {
        list.reverse();
    }
    (setup, placed)
}

fn run_policy(
    policy: Policy,
    events: &[&Event],
    pretrace: &[PretraceBlock],
    (mix, rule): (&SeedMix, SeedRule),
    machine: &Machine,
    first_ticks: &[TickPlan],
) -> Result<Predicted, String> {
    let allocator = build(policy, machine)?;
    let (setup, mut pretrace_blocks) = set_up(&allocator, pretrace, (mix, rule), machine);
    let nr_cpus = machine.nr_cpus();
    let mut ledger = Ledger {
        per_cpu: vec![Counts::default(); nr_cpus as usize],
        by_reason: [(0, 0); DrainReason::COUNT],
        zone_locked_pages: 0,
    };
    let mut skipped = Skipped::default();
    let mut liveness = Liveness::default();
    let mut sim_blocks: HashMap<u64, Pfn> = HashMap::new();
    let interval_ns = u64::from(machine.settings.stat_interval_ms) * 1_000_000;
    // Each CPU's next vmstat tick; the ticks run in time order, then CPU order.
    let mut plans = first_ticks.to_vec();
    let mut ticks_per_cpu = vec![0u64; plans.len()];
    let (mut pcp_peak, mut pcp_sum, mut samples) = (0u64, 0f64, 0u64);
    let mut alloc_pages = 0u64;
    // The current call's zone-lock holds, reused from call to call.
    let mut holds: Vec<ZoneLockHold> = Vec::new();
    for event in events {
        while let Some((cpu, _)) = plans
            .iter()
            .map(|plan| plan.next)
            .enumerate()
            .filter(|&(_, t)| t <= event.ts_ns)
            .min_by_key(|&(cpu, t)| (t, cpu))
        {
            let cpu = cpu as u32;
            allocator.vmstat_tick_report(cpu, &mut holds);
            ledger.credit(cpu, &holds);
            holds.clear();
            ticks_per_cpu[cpu as usize] += 1;
            plans[cpu as usize].advance(interval_ns);
        }
        let caller = Caller::task(event.cpu);
        let order = Order::new(event.order).expect("parser bounds orders");
        match event.kind {
            EventKind::Alloc => {
                let traced = machine.zone_of(event.pfn).expect("filtered to zones");
                let zone = traced.zone;
                if event.gfp_above_dma32 {
                    pass_over_zones_above(&allocator, traced);
                }
                let gfp = gfp_for(zone, event.migratetype);
                match allocator.alloc_pages_report(caller, gfp, order, &mut holds) {
                    Ok(pfn) => {
                        alloc_pages += order.pages();
                        if liveness.alloc(event.pfn, event.order) {
                            skipped.realloc_live += 1;
                        }
                        sim_blocks.insert(event.pfn, pfn);
                    }
                    Err(_) => skipped.alloc_failed += 1,
                }
            }
            EventKind::Free => {
                let sim = match liveness.free(event.pfn, event.order) {
                    FreeFate::Live => sim_blocks.remove(&event.pfn),
                    FreeFate::Pretrace => {
                        let pfn = pretrace_blocks
                            .get_mut(&event.pfn)
                            .and_then(|list| list.pop())
                            .map(|(pfn, _)| pfn);
                        if pfn.is_none() {
                            skipped.unmatched_free += 1;
                        }
                        pfn
                    }
                    FreeFate::OrderMismatch => {
                        skipped.order_mismatch += 1;
                        None
                    }
                    FreeFate::InsideLive => {
                        skipped.inside_live_block += 1;
                        None
                    }
                };
                if let Some(pfn) = sim {
                    if allocator
                        .free_pages_report(caller, pfn, order, &mut holds)
                        .is_err()
                    {
                        skipped.free_failed += 1;
                    }
                }
            }
            _ => continue,
        }
        ledger.credit(event.cpu, &holds);
        holds.clear();
        let held: u64 = allocator.zones().iter().map(|z| z.pcp_pages()).sum();
        pcp_peak = pcp_peak.max(held);
        pcp_sum += held as f64;
        samples += 1;
    }
    let mut total = Counts::default();
    for counts in &ledger.per_cpu {
        total.add(counts);
    }
    let free_high = ledger.by_reason[DrainReason::FreeHigh as usize];
    let seed = SeedMetrics {
        alloc_zone_pages: ledger.zone_locked_pages,
        alloc_zone_share: ratio(ledger.zone_locked_pages, alloc_pages),
        free_high_drains: free_high.0,
        free_high_drain_pages: free_high.1,
        pcp_pages_peak: Some(pcp_peak),
        pcp_pages_mean: Some(if samples == 0 {
            0.0
        } else {
            pcp_sum / samples as f64
        }),
    };
    let drains_by_reason = DrainReason::ALL
        .iter()
        .map(|&r| {
            (
                format!("{r:?}").to_lowercase(),
                ledger.by_reason[r as usize],
            )
        })
        .collect();
    let zones_end = allocator
        .zones()
        .iter()
        .filter(|z| z.managed() > 0)
        .map(|z| {
            let e = z.events();
            (
                format!("{:?}", z.zone_type()),
                e.pcp_refills(),
                e.pcp_refill_pages(),
                z.free_pages(),
                z.pcp_pages(),
            )
        })
        .collect();
    Ok(Predicted {
        zones_end,
        policy: policy.name.to_string(),
        per_cpu: ledger.per_cpu,
        total,
        seed,
        drains_by_reason,
        setup,
        skipped,
        ticks: ticks_per_cpu.iter().copied().max().unwrap_or(0),
    })
}
