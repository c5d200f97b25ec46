//! SVG plots of a set of runs of one workload: memory held in PCPs, zone-lock wait, and
//! each policy's `pcp->high` for a few CPUs, over virtual time.
//!
//! plotters with its SVG backend only and no font files (the same configuration as
//! `crates/bench`): text is written as SVG `<text>` and the viewer's fonts render it.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::run::RunResult;

type Line = (String, Vec<(f64, f64)>);

/// A plot written: its file and its caption, the title drawn on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    /// The SVG file.
    pub path: PathBuf,
    /// The title drawn at its top, which a report shows as the figure's caption.
    pub caption: String,
}

/// The first point of `lines` with a coordinate that is not a finite number, as an error:
/// plotters' axis arithmetic never ends on an infinite maximum, so such a run (a damaged
/// shard file's machine of no CPUs) is refused before drawing.
fn check_finite(lines: &[Line]) -> Result<(), String> {
    for (name, points) in lines {
        if let Some((x, y)) = points
            .iter()
            .find(|(x, y)| !x.is_finite() || !y.is_finite())
        {
            return Err(format!(
                "{name}: the point ({x}, {y}) is not a finite number; a run with no CPUs or a damaged result?"
            ));
        }
    }
    Ok(())
}

fn draw(path: PathBuf, title: String, y_desc: &str, lines: &[Line]) -> Result<Plot, String> {
    let err = |e: &dyn std::fmt::Debug| format!("{}: {e:?}", path.display());
    check_finite(lines).map_err(|e| format!("{}: {e}", path.display()))?;
    let x_max = lines
        .iter()
        .flat_map(|l| l.1.iter().map(|p| p.0))
        .fold(1e-9, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|l| l.1.iter().map(|p| p.1))
        .fold(1e-9, f64::max)
        * 1.1;
    let root = SVGBackend::new(&path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("virtual time (ms)")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    drop(chart);
    drop(root);
    Ok(Plot {
        path,
        caption: title,
    })
}

/// The CPUs' series with identical ones drawn once: a line drawn over another hides it,
/// so CPUs whose `high` never differed share one line labelled with all of them.
fn same_series<'a>(cpus: &[u32], series: &'a [Vec<u64>]) -> Vec<(String, &'a Vec<u64>)> {
    let mut groups: Vec<(Vec<u32>, &Vec<u64>)> = Vec::new();
    for (&cpu, values) in cpus.iter().zip(series) {
        match groups.iter_mut().find(|(_, v)| *v == values) {
            Some((members, _)) => members.push(cpu),
            None => groups.push((vec![cpu], values)),
        }
    }
    groups
        .into_iter()
        .map(|(members, values)| {
            let label = match members.as_slice() {
                [one] => format!("CPU {one}"),
                many => format!(
                    "CPUs {} (identical)",
                    many.iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            (label, values)
        })
        .collect()
}

fn ms(t_ns: u64) -> f64 {
    t_ns as f64 / 1e6
}

/// The lock-wait plot's points of one run: at the end of each sample interval (ms), the
/// zone-lock spin inside the interval as a share of all CPU time in it (%, idle CPUs
/// included). The engine spreads each wait over the intervals it spans, so no point
/// exceeds 100.
pub fn lock_wait_pct(r: &RunResult) -> Vec<(f64, f64)> {
    let s = &r.series;
    let cpus = r.machine.nr_cpus() as f64;
    s.t_ns
        .windows(2)
        .zip(s.spin_ns.windows(2))
        .map(|(t, spin)| {
            let dt = (t[1] - t[0]).max(1) as f64;
            (ms(t[1]), 100.0 * (spin[1] - spin[0]) as f64 / (cpus * dt))
        })
        .collect()
}

/// Write the plots of `results` (one workload) into `dir` as `<prefix>-*.svg`. Returns the
/// plots written, in the order written.
pub fn write_plots(results: &[RunResult], dir: &Path, prefix: &str) -> Result<Vec<Plot>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    let Some(first) = results.first() else {
        return Ok(files);
    };
    let workload = first.workload;

    let held: Vec<Line> = results
        .iter()
        .map(|r| {
            let s = &r.series;
            let points = s
                .t_ns
                .iter()
                .zip(&s.pcp_pages)
                .map(|(&t, &p)| (ms(t), p as f64 * 4096.0 / (1 << 20) as f64))
                .collect();
            (r.policy.clone(), points)
        })
        .collect();
    files.push(draw(
        dir.join(format!("{prefix}-pcp-memory.svg")),
        format!("{workload}: memory held in PCPs"),
        "MiB",
        &held,
    )?);

    let wait: Vec<Line> = results
        .iter()
        .map(|r| (r.policy.clone(), lock_wait_pct(r)))
        .collect();
    files.push(draw(
        dir.join(format!("{prefix}-lock-wait.svg")),
        format!("{workload}: zone-lock wait (share of all CPU time, idle CPUs included)"),
        "spin, % of all CPU time",
        &wait,
    )?);

    for r in results {
        let s = &r.series;
        let lines: Vec<Line> = same_series(&s.high_cpus, &s.high)
            .into_iter()
            .map(|(label, highs)| {
                let points = s
                    .t_ns
                    .iter()
                    .zip(highs)
                    .map(|(&t, &h)| (ms(t), h as f64))
                    .collect();
                (label, points)
            })
            .collect();
        files.push(draw(
            dir.join(format!("{prefix}-high-{}.svg", r.policy)),
            format!("{workload} / {}: pcp->high (local zone)", r.policy),
            "pages",
            &lines,
        )?);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::{check_finite, draw, same_series};

    #[test]
    fn a_point_that_is_not_finite_is_refused_before_drawing() {
        let line = |y: f64| ("base".to_string(), vec![(0.0, 1.0), (1.0, y)]);
        assert!(check_finite(&[line(2.0)]).is_ok());
        for y in [f64::INFINITY, f64::NAN, f64::NEG_INFINITY] {
            let e = check_finite(&[line(2.0), line(y)]).unwrap_err();
            assert!(
                e.contains("base") && e.contains("not a finite number"),
                "{e}"
            );
        }
        // `draw` refuses it without writing (plotters never returned on an infinite
        // axis); the directory does not exist, so any write would fail differently.
        let path = std::path::PathBuf::from("/nonexistent-mmkit-dir/p.svg");
        let e = draw(path, "t".into(), "y", &[line(f64::INFINITY)]).unwrap_err();
        assert!(e.contains("not a finite number"), "{e}");
    }

    #[test]
    fn identical_series_share_one_labelled_line() {
        let series = vec![
            vec![367, 367],
            vec![367, 367],
            vec![400, 367],
            vec![367, 367],
        ];
        let lines = same_series(&[0, 1, 112, 223], &series);
        let labels: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["CPUs 0, 1, 223 (identical)", "CPU 112"]);
    }
}
