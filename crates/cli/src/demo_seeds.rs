//! `mmkit demo --seeds LIST`: the demo's 18 runs at each of several random seeds, and which
//! of the 66 scored cells are within tolerance at every seed, at none, or only at some.
//!
//! One run of a workload is one draw of its random choices (which process faults when,
//! which pair swaps roles), and a cell near its tolerance's edge is in at one seed and
//! out at another: kbuild's base contention varies by about 2.5 points at 15 % from seed to
//! seed (`docs/EXPERIMENTS.md`, "kbuild's one-run noise"). A single demo cannot show that;
//! this summary does, with each cell's value at every seed beside the published one.

use std::fmt::Write;

use mmkit_sim::published::{Cell, Column};

use crate::demo::{self, DemoArgs};
use crate::sim_cmd::run_all_timed;
use crate::CliError;

/// Most seeds one summary runs: each is 18 runs (about a minute on 2 cores at scale 1).
pub const MAX_SEEDS: usize = 100;

/// Parse `--seeds`: `A-B` (every seed from A to B) or `A,B,C`, each a `u64`; at least one
/// and at most [`MAX_SEEDS`] seeds, none twice.
pub fn parse_seeds(text: &str) -> Result<Vec<u64>, String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{s}` is not a seed (a whole number ≥ 0)"))
    };
    let seeds: Vec<u64> = match text.split_once('-') {
        Some((first, last)) => {
            let (first, last) = (number(first)?, number(last)?);
            if first > last {
                return Err(format!("{first}-{last} is empty: the first seed is larger"));
            }
            if last - first >= MAX_SEEDS as u64 {
                return Err(format!("{text} is more than {MAX_SEEDS} seeds"));
            }
            (first..=last).collect()
        }
        None => text.split(',').map(number).collect::<Result<_, _>>()?,
    };
    if seeds.len() > MAX_SEEDS {
        return Err(format!("{text} is more than {MAX_SEEDS} seeds"));
    }
    for (i, seed) in seeds.iter().enumerate() {
        if seeds[..i].contains(seed) {
            return Err(format!("seed {seed} is given twice"));
        }
    }
    Ok(seeds)
}

/// The name of a scored column as the demo's tables head it.
fn column_name(cell: &Cell) -> &'static str {
    match cell.column {
        Column::Score if cell.workload == mmkit_sim::WorkloadKind::Kbuild => "build time",
        Column::Score => "score",
        Column::LockContend => "lock contend%",
        Column::FreeHigh => "free_high",
        Column::AllocZone => "alloc_zone",
        Column::CacheDirection => "cache miss% change",
    }
}

/// The summary of `cells`, one list of 66 scored cells per seed of `seeds`, in the same
/// order (the demo's scoring order).
pub fn render_summary(seeds: &[u64], cells: &[Vec<Cell>]) -> String {
    let mut out = String::new();
    let total = cells.first().map_or(0, Vec::len);
    let counts: Vec<usize> = cells
        .iter()
        .map(|c| c.iter().filter(|c| c.within).count())
        .collect();
    let _ = writeln!(
        out,
        "cells within tolerance, by seed (of {total}; held-out patch-row cells in brackets):"
    );
    for (seed, cells) in seeds.iter().zip(cells) {
        let within = cells.iter().filter(|c| c.within).count();
        let held = cells.iter().filter(|c| c.within && !c.trained).count();
        let _ = writeln!(out, "  seed {seed:>3}: {within:>2} ({held})");
    }
    let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
    let _ = writeln!(
        out,
        "  mean {mean:.1}, least {}, most {}",
        counts.iter().min().unwrap_or(&0),
        counts.iter().max().unwrap_or(&0)
    );
    let in_at = |i: usize| cells.iter().filter(|c| c[i].within).count();
    let always = (0..total).filter(|&i| in_at(i) == seeds.len()).count();
    let never: Vec<usize> = (0..total).filter(|&i| in_at(i) == 0).collect();
    let some: Vec<usize> = (0..total)
        .filter(|&i| (1..seeds.len()).contains(&in_at(i)))
        .collect();
    let _ = writeln!(
        out,
        "\nin at every seed: {always} cells; in at some seeds only: {}; out at every seed: {}",
        some.len(),
        never.len()
    );
    let header = seeds
        .iter()
        .map(|s| format!("{:>8}", format!("seed {s}")))
        .collect::<String>();
    for (title, list) in [
        ("in at some seeds only", &some),
        ("out at every seed", &never),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n{title} (✓ within tolerance, t: a training cell):\n{:<8} {:<8} {:<20}{header} published",
            "workload", "policy", "column"
        );
        for &i in list {
            let first = &cells[0][i];
            let trained = if first.trained { " (t)" } else { "" };
            let _ = write!(
                out,
                "{:<8} {:<8} {:<20}",
                first.workload.name(),
                first.policy,
                format!("{}{trained}", column_name(first))
            );
            for seed_cells in cells {
                let c = &seed_cells[i];
                let mark = if c.within { '✓' } else { ' ' };
                let _ = write!(out, "{:>7.2}{mark}", c.simulated);
            }
            let _ = writeln!(out, " {:>9.2}", first.published);
        }
    }
    out
}

/// `mmkit demo --seeds LIST`: every seed's runs, then the summary (nothing is written to
/// `--out`: the tables and plots of one seed are `mmkit demo --seed S`'s). `run_demo`
/// has checked `--scale` and `--threads`.
pub fn run(args: &DemoArgs, seeds: &[u64]) -> Result<(), CliError> {
    let per_seed = demo::jobs(seeds[0], args.scale).len();
    let jobs: Vec<_> = seeds
        .iter()
        .flat_map(|&seed| demo::jobs(seed, args.scale))
        .collect();
    println!(
        "mmkit demo: the PCP experiments of Huang 2023 at {} seeds ({} runs; scale {})",
        seeds.len(),
        jobs.len(),
        args.scale
    );
    println!("{}\n", demo::TOLERANCES);
    let timed = run_all_timed(&jobs, args.threads, false)?;
    if args.timing {
        demo::print_speeds(&timed);
    }
    let results: Vec<_> = timed.into_iter().map(|(result, _)| result).collect();
    let cells = results
        .chunks(per_seed)
        .map(demo::scored_cells)
        .collect::<Result<Vec<_>, _>>()?;
    print!("{}", render_summary(seeds, &cells));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_a_range_or_a_list() {
        assert_eq!(parse_seeds("1-5"), Ok(vec![1, 2, 3, 4, 5]));
        assert_eq!(parse_seeds("7"), Ok(vec![7]));
        assert_eq!(parse_seeds("3,1,20"), Ok(vec![3, 1, 20]));
        assert_eq!(parse_seeds("0-0"), Ok(vec![0]));
    }

    #[test]
    fn bad_seeds_are_refused_with_the_reason() {
        for (text, reason) in [
            ("5-1", "empty"),
            ("1,2,1", "twice"),
            ("1-1000", "more than 100"),
            ("x", "not a seed"),
            ("1,-2", "not a seed"),
            ("", "not a seed"),
            ("1,,2", "not a seed"),
        ] {
            let err = parse_seeds(text).expect_err(text);
            assert!(err.contains(reason), "{text}: {err}");
        }
        let many: Vec<String> = (0..=MAX_SEEDS).map(|s| s.to_string()).collect();
        assert!(parse_seeds(&many.join(","))
            .unwrap_err()
            .contains("more than"));
    }

    fn cell(policy: &'static str, simulated: f64, within: bool) -> Cell {
        Cell {
            workload: mmkit_sim::WorkloadKind::Netperf,
            policy,
            column: Column::Score,
            simulated,
            published: 106.4,
            within,
            trained: false,
        }
    }

    #[test]
    fn the_summary_sorts_cells_by_the_seeds_they_are_in_at() {
        let cells = vec![
            vec![
                cell("base", 100.0, true),
                cell("patch3", 99.6, false),
                cell("patch5", 105.0, true),
            ],
            vec![
                cell("base", 100.0, true),
                cell("patch3", 99.7, false),
                cell("patch5", 103.0, false),
            ],
        ];
        let text = render_summary(&[1, 4], &cells);
        assert!(text.contains("seed   1:  2 (2)"), "{text}");
        assert!(text.contains("seed   4:  1 (1)"), "{text}");
        assert!(text.contains("mean 1.5, least 1, most 2"), "{text}");
        assert!(
            text.contains(
                "in at every seed: 1 cells; in at some seeds only: 1; out at every seed: 1"
            ),
            "{text}"
        );
        let some = text
            .split("in at some seeds only (")
            .nth(1)
            .expect("a list of some");
        let (some, never) = some
            .split_once("out at every seed (")
            .expect("a list of never");
        assert!(
            some.contains("patch5") && !some.contains("patch3"),
            "{text}"
        );
        assert!(
            never.contains("patch3") && !never.contains("patch5"),
            "{text}"
        );
        assert!(some.contains(" 105.00✓ 103.00 "), "{text}");
    }
}
