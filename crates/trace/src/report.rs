//! The replay's report: a plain-text table (kernel row, then one row per policy with the
//! relative error of each count) and the same data as JSON.

use std::fmt::Write;

use serde::Serialize;

use crate::replay::{Counts, Replay};

/// Relative error `(predicted − observed) / observed`; `None` when nothing was observed.
pub fn relative_error(predicted: u64, observed: u64) -> Option<f64> {
    (observed > 0).then(|| (predicted as f64 - observed as f64) / observed as f64)
}

/// Relative errors of the four counts.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Errors {
    /// Refill events.
    pub refill_events: Option<f64>,
    /// Refill pages.
    pub refill_pages: Option<f64>,
    /// Drain events.
    pub drain_events: Option<f64>,
    /// Drain pages.
    pub drain_pages: Option<f64>,
}

/// Errors of `predicted` against `observed`.
pub fn errors(predicted: &Counts, observed: &Counts) -> Errors {
    Errors {
        refill_events: relative_error(predicted.refill_events, observed.refill_events),
        refill_pages: relative_error(predicted.refill_pages, observed.refill_pages),
        drain_events: relative_error(predicted.drain_events, observed.drain_events),
        drain_pages: relative_error(predicted.drain_pages, observed.drain_pages),
    }
}

#[derive(Serialize)]
struct Json<'a> {
    replay: &'a Replay,
    errors_total: Vec<(&'a str, Errors)>,
}

/// The report as JSON.
pub fn json(replay: &Replay) -> String {
    let errors_total = replay
        .predicted
        .iter()
        .map(|p| (p.policy.as_str(), errors(&p.total, &replay.observed.total)))
        .collect();
    serde_json::to_string_pretty(&Json {
        replay,
        errors_total,
    })
    .expect("the report serializes")
}

fn percent(error: Option<f64>) -> String {
    match error {
        Some(e) => format!("{:+.1}%", e * 100.0),
        None => "n/a".to_string(),
    }
}

fn row(out: &mut String, label: &str, c: &Counts, observed: Option<&Counts>) {
    let _ = write!(
        out,
        "{label:<20} {:>10} {:>12} {:>10} {:>12}",
        c.refill_events, c.refill_pages, c.drain_events, c.drain_pages
    );
    if let Some(o) = observed {
        let e = errors(c, o);
        let _ = write!(
            out,
            "   {:>8} {:>8} {:>8} {:>8}",
            percent(e.refill_events),
            percent(e.refill_pages),
            percent(e.drain_events),
            percent(e.drain_pages)
        );
    }
    out.push('\n');
}

/// The report as a table.
pub fn table(replay: &Replay) -> String {
    let mut out = String::new();
    let o = &replay.observed;
    let _ = writeln!(
        out,
        "trace: {} events over {:.2} s; {} pages allocated, {} freed; {} pages taken directly from buddy (percpu_refill=0)",
        replay.events, o.seconds, o.alloc_pages, o.free_pages, o.direct_zone_pages
    );
    if let Some((alloc, free)) = o.vmstat_delta {
        let _ = writeln!(
            out,
            "  /proc/vmstat over the recording: pgalloc +{alloc}, pgfree +{free} (traced: {} allocated, {} freed)",
            o.alloc_pages, o.free_pages
        );
    }
    let _ = writeln!(out, "  pageset lists seeded by rule {:?}", replay.seed);
    for source in &replay.sources {
        let _ = writeln!(out, "  {source}");
    }
    let header = format!(
        "{:<20} {:>10} {:>12} {:>10} {:>12}   {:>8} {:>8} {:>8} {:>8}\n",
        "",
        "refills",
        "refill pg",
        "drains",
        "drain pg",
        "err ref",
        "err rpg",
        "err drn",
        "err dpg"
    );
    let nr_cpus = o.per_cpu.len();
    for cpu in 0..=nr_cpus {
        let (title, observed) = if cpu == nr_cpus {
            ("all CPUs".to_string(), &o.total)
        } else {
            (format!("CPU {cpu}"), &o.per_cpu[cpu])
        };
        let _ = writeln!(out, "\n{title}");
        out.push_str(&header);
        row(&mut out, "kernel (trace)", observed, None);
        for p in &replay.predicted {
            let none = Counts::default();
            let counts = if cpu == nr_cpus {
                &p.total
            } else {
                p.per_cpu.get(cpu).unwrap_or(&none)
            };
            row(&mut out, &p.policy, counts, Some(observed));
        }
    }
    let _ = writeln!(
        out,
        "\nHuang 2023 metrics    alloc_zone  share    free_high (pages)        PCP pages peak / mean"
    );
    let _ = writeln!(
        out,
        "{:<20} {:>10} {:>6.2}% {:>8} ({:>8})   snapshots: {} before, {} after (kernel; free_high inferred, {})",
        "kernel (trace)",
        o.seed.alloc_zone_pages,
        o.seed.alloc_zone_share * 100.0,
        o.seed.free_high_drains,
        o.seed.free_high_drain_pages,
        o.pcp_pages_before,
        o.pcp_pages_after.map_or("?".to_string(), |p| p.to_string()),
        o.free_high_rule.describe()
    );
    for p in &replay.predicted {
        let _ = writeln!(
            out,
            "{:<20} {:>10} {:>6.2}% {:>8} ({:>8})   {} / {:.0}",
            p.policy,
            p.seed.alloc_zone_pages,
            p.seed.alloc_zone_share * 100.0,
            p.seed.free_high_drains,
            p.seed.free_high_drain_pages,
            p.seed.pcp_pages_peak.unwrap_or(0),
            p.seed.pcp_pages_mean.unwrap_or(0.0)
        );
    }
    if let Some(p) = replay.predicted.first() {
        let s = &p.setup;
        let _ = writeln!(
            out,
            "\nset-up: {} blocks allocated before recording ({} taken at their pfn, {} stood in for, {} not placed); {} pages seeded on pagesets; {} pages of ballast",
            s.pretrace_blocks, s.pretrace_exact, s.pretrace_substituted, s.pretrace_unplaced, s.seeded_pcp_pages, s.ballast_pages
        );
        let k = &p.skipped;
        let _ = writeln!(
            out,
            "skipped frees: {} order mismatch, {} inside a live block, {} unmatched; {} allocations of a live pfn; {} allocation / {} free failures; {} vmstat ticks",
            k.order_mismatch, k.inside_live_block, k.unmatched_free, k.realloc_live, k.alloc_failed, k.free_failed, p.ticks
        );
    }
    if replay.problems.total() > 0 {
        let _ = writeln!(out, "\nlines skipped or repaired:");
        for (kind, count) in &replay.problems.counts {
            let _ = writeln!(out, "  {kind:?}: {count}");
        }
        for sample in &replay.problems.samples {
            let _ = writeln!(
                out,
                "  line {}: {:?}: {}",
                sample.line, sample.kind, sample.text
            );
        }
    }
    out
}
