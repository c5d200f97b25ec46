//! SVG plots of the pagealloc report: for each order, cost per page against N, one line
//! per allocator, in three panels (alloc, free, alloc+free); both axes logarithmic.
//!
//! plotters' SVG backend writes text as `<text>` elements that the viewer renders with
//! its own fonts, and is built without its `ttf` feature (which needs fontconfig): text
//! sizes for layout are plotters' built-in estimate, so labels may sit a little off.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::pagealloc::{CellResult, Cost, PageallocReport};
use crate::BenchError;

/// Write `pagealloc-order<k>.svg` into `dir` for every order of the report; returns the
/// files written.
pub fn pagealloc(report: &PageallocReport, dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| BenchError::new(format!("cannot create {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for &order in &report.method.config.orders {
        let cells: Vec<&CellResult> = report.results.iter().filter(|r| r.order == order).collect();
        if cells.is_empty() {
            continue;
        }
        let path = dir.join(format!("pagealloc-order{order}.svg"));
        draw_order(report, order, &cells, &path)
            .map_err(|e| BenchError::new(format!("plotting {}: {e}", path.display())))?;
        written.push(path);
    }
    Ok(written)
}

type Panel<'a> = (&'a str, fn(&CellResult) -> &Cost);

/// matplotlib's "tab10" colours, by allocator; mmkit's lines are drawn thicker.
const COLORS: [RGBColor; 10] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

fn style(index: usize, name: &str) -> ShapeStyle {
    let width = if name == "mmkit" { 3 } else { 2 };
    COLORS[index % COLORS.len()].stroke_width(width)
}

/// A number on a log axis: no trailing zeros.
fn axis_label(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn draw_order(
    report: &PageallocReport,
    order: u8,
    cells: &[&CellResult],
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1500, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "pagealloc, order {order}: ns per 4 KiB page against N ({}, median of {} samples, touch {:?})",
        report.machine.cpu_model, report.method.config.repeat, report.method.config.touch
    );
    let root = root.titled(&title, ("sans-serif", 18))?;
    let (charts, legend) = root.split_vertically(510);
    let panels: [Panel<'_>; 3] = [
        ("alloc", |r| &r.alloc),
        ("free", |r| &r.free),
        ("alloc + free", |r| &r.total),
    ];
    // Colours follow the allocator's place in the whole report, so they agree between
    // orders (mmkit-bulk runs at order 0 only).
    let names: Vec<(usize, &str)> = report
        .allocators
        .iter()
        .map(|a| a.name)
        .enumerate()
        .filter(|(_, n)| cells.iter().any(|r| r.allocator == *n))
        .collect();
    let max_n = cells.iter().map(|r| r.n).max().unwrap_or(1) as f64;
    for (area, (label, cost)) in charts.split_evenly((1, 3)).iter().zip(panels) {
        let values = cells
            .iter()
            .map(|r| cost(r).ns_per_page)
            .filter(|v| v.is_finite() && *v > 0.0);
        let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (low, high) = if low <= high {
            (low / 1.5, high * 1.5)
        } else {
            (0.1, 10.0)
        };
        let mut chart = ChartBuilder::on(area)
            .caption(label, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d((0.8..max_n * 1.25).log_scale(), (low..high).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("N (blocks allocated, then freed)")
            .y_desc("ns per page")
            .x_label_formatter(&|x| axis_label(*x))
            .y_label_formatter(&|y| axis_label(*y))
            .draw()?;
        for &(i, name) in &names {
            let line = style(i, name);
            let points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|r| r.allocator == name)
                .map(|r| (r.n as f64, cost(r).ns_per_page))
                .filter(|(_, v)| v.is_finite() && *v > 0.0)
                .collect();
            chart.draw_series(LineSeries::new(points.clone(), line))?;
            chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, line.filled())))?;
        }
    }
    // One legend for the three panels, in a row underneath.
    let slot = 1400 / names.len().max(1) as i32;
    for (place, &(i, name)) in names.iter().enumerate() {
        let x = 50 + place as i32 * slot;
        let line = style(i, name);
        legend.draw(&PathElement::new(vec![(x, 40), (x + 24, 40)], line))?;
        legend.draw(&Text::new(
            name.to_string(),
            (x + 30, 32),
            ("sans-serif", 15),
        ))?;
    }
    root.present()?;
    Ok(())
}
