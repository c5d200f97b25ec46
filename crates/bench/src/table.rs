//! The reports as terminal tables.

use std::fmt::Write;

use crate::pagealloc::{CellResult, Cost, PageallocReport};
use crate::threads::ThreadsReport;
use crate::TargetCheck;

/// Right-aligned columns (the first left-aligned), two spaces apart.
fn render_rows(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c == 0 {
                let _ = write!(line, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(line, "  {cell:>w$}", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A cost with three significant digits, at most one decimal.
fn number(value: f64) -> String {
    if !value.is_finite() {
        "-".into()
    } else if value < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

fn ratio(value: Option<f64>) -> String {
    match value {
        Some(r) if r.is_finite() && r < 10.0 => format!("{r:.2}×"),
        Some(r) if r.is_finite() => format!("{r:.0}×"),
        _ => "-".into(),
    }
}

fn targets(out: &mut String, checks: &[TargetCheck]) {
    out.push_str("\ntargets (the earlier absolute ones; docs/reference/targets.md states the current, relative ones):\n");
    for check in checks {
        let mark = match check.met {
            Some(true) => "MET   ",
            Some(false) => "MISSED",
            None => "n/a   ",
        };
        let _ = writeln!(
            out,
            "  {mark} {}\n         {}",
            check.target, check.measured
        );
    }
}

/// The pagealloc report: per order, total cost per page with each allocator's ratio to
/// mmkit, then alloc/free split. `cycles` shows TSC cycles instead of nanoseconds.
pub fn pagealloc(report: &PageallocReport, cycles: bool) -> String {
    let unit = if cycles { "TSC cycles" } else { "ns" };
    let value = |c: &Cost| {
        if cycles {
            c.cycles_per_page
        } else {
            c.ns_per_page
        }
    };
    let m = &report.machine;
    let mut out = format!(
        "pagealloc: {}, {} CPUs, TSC {:.3} GHz (read cost {} cycles, subtracted); touch {:?}; median of {} samples of ≥ {} pages; arena {} MiB\n",
        m.cpu_model,
        m.cpus,
        m.tsc.hz / 1e9,
        m.tsc.overhead_cycles,
        report.method.config.touch,
        report.method.config.repeat,
        report.method.config.sample_pages,
        report.method.arena_bytes >> 20
    );
    for a in &report.allocators {
        let _ = writeln!(out, "  {:<15} {}", a.name, a.setup);
    }
    let names: Vec<&str> = report.allocators.iter().map(|a| a.name).collect();
    for &order in &report.method.config.orders {
        let cells: Vec<&CellResult> = report.results.iter().filter(|r| r.order == order).collect();
        if cells.is_empty() {
            continue;
        }
        let mut ns: Vec<usize> = cells.iter().map(|r| r.n).collect();
        ns.dedup();
        let present: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| cells.iter().any(|r| r.allocator == *n))
            .collect();
        let find = |n: usize, name: &str| cells.iter().find(|r| r.n == n && r.allocator == name);
        let header: Vec<String> = std::iter::once("N".to_owned())
            .chain(present.iter().map(|s| s.to_string()))
            .collect();
        let _ = writeln!(
            out,
            "\norder {order}: alloc+free, {unit} per page (×: its time ÷ mmkit's)"
        );
        let mut rows = vec![header.clone()];
        for &n in &ns {
            let mut row = vec![n.to_string()];
            for name in &present {
                row.push(match find(n, name) {
                    Some(r) if *name == "mmkit" => number(value(&r.total)),
                    Some(r) => format!("{} ({})", number(value(&r.total)), ratio(r.ratio_to_mmkit)),
                    None => "-".into(),
                });
            }
            rows.push(row);
        }
        out.push_str(&render_rows(&rows));
        let _ = writeln!(out, "order {order}: alloc / free, {unit} per page");
        let mut rows = vec![header];
        for &n in &ns {
            let mut row = vec![n.to_string()];
            for name in &present {
                row.push(match find(n, name) {
                    Some(r) => format!("{} / {}", number(value(&r.alloc)), number(value(&r.free))),
                    None => "-".into(),
                });
            }
            rows.push(row);
        }
        out.push_str(&render_rows(&rows));
    }
    targets(&mut out, &report.targets);
    out
}

/// The threads report: one row per allocator.
pub fn threads(report: &ThreadsReport) -> String {
    let c = &report.config;
    let m = &report.machine;
    let mut out = format!(
        "threads: pattern {}, {} threads ({} working), {} s per allocator, batch {}, one op in {} timed; {}, TSC {:.3} GHz\n",
        c.pattern.name(),
        c.threads,
        report.threads_used,
        c.seconds,
        c.batch,
        c.sample_every,
        m.cpu_model,
        m.tsc.hz / 1e9
    );
    for a in &report.allocators {
        let _ = writeln!(out, "  {:<13} {}", a.name, a.setup);
    }
    out.push('\n');
    let mut rows = vec![[
        "allocator",
        "M pages/s",
        "×",
        "op",
        "alloc p50 ns",
        "alloc p99 ns",
        "free p50 ns",
        "free p99 ns",
    ]
    .map(String::from)
    .to_vec()];
    let opt = |v: Option<f64>| v.map(number).unwrap_or_else(|| "-".into());
    for r in &report.results {
        rows.push(vec![
            r.allocator.to_owned(),
            format!("{:.2}", r.pages_per_second / 1e6),
            ratio(r.ratio_to_mmkit),
            r.op.clone(),
            opt(r.alloc_ns_p50),
            opt(r.alloc_ns_p99),
            opt(r.free_ns_p50),
            opt(r.free_ns_p99),
        ]);
    }
    out.push_str(&render_rows(&rows));
    out.push_str("×: mmkit's throughput ÷ this allocator's (> 1: mmkit is faster)\n");
    targets(&mut out, &report.targets);
    out
}
