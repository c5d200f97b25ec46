//! `mmkit sim calibrate`: fit the cost model's free parameters against a declared
//! training set — the **base rows** of the published tables (absolute lock contend% and
//! cache miss rate%) and the published profile figures — and nothing else. The patch rows
//! are never a target: they are the held-out test the demo scores.
//!
//! The fit runs in three stages, each on the parameters the targets of that stage depend
//! on most, so that every stage is a small, well-posed problem:
//!
//! 1. `lock_lines` (the zone lines that follow the lock to each new holder: the
//!    zone-lock work per acquisition) against the stream workloads' lock targets:
//!    Gauss–Newton on ln(1 + lines) and the logarithm of every ratio simulated /
//!    published, with a finite-difference derivative and backtracking. The work per block
//!    moved (`hold_per_block_ns`) is published (Huang 2023 timed it) and not fitted.
//!    Once for each placement of lmbench's pairs ([`candidates`]); the best fit is kept;
//! 2. for the kept candidate only, kbuild's fault rate against kbuild's base lock
//!    contend%, the geometric mean over
//!    [`KBUILD_FIT_SEEDS`] seeds (a safeguarded secant on logarithms, `fit_rate`:
//!    contention grows with the rate, steeply and unevenly near the lock's saturation);
//! 3. `background_refs_per_us` against the base miss rates, in closed form from the
//!    last stage-1 runs' line counts (no run).
//!
//! Every run is a base run with a fixed seed (kbuild's, six consecutive ones), so the
//! fit is deterministic: the same targets, scale and seed give the same
//! `calibration.json`.

use mmkit_core::Policy;
use serde::{Deserialize, Serialize};

use crate::cost::{CostModel, Fitted};
use crate::engine::SimError;
use crate::run::{RunResult, RunSpec};
use crate::workload::stream::Placement;
use crate::workload::WorkloadKind;

/// What a target measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// lock contend% (spin over busy time).
    LockContendPct,
    /// cache miss rate%.
    CacheMissPct,
    /// Time in PCP drains (hold and spin) over busy time, % (perf's `free_pcppages_bulk`
    /// with its children).
    DrainPct,
    /// [`Metric::DrainPct`] over [`Metric::LockContendPct`]: the drains' share of cycles
    /// against the spinning, a ratio a profile gives even when it was taken on a run of
    /// another size than the table's (more pairs raise both together).
    DrainOfContention,
}

/// One published figure of a base row that the fit aims at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The workload.
    pub workload: WorkloadKind,
    /// What is measured.
    pub metric: Metric,
    /// The published value.
    pub value: f64,
    /// Where it is published.
    pub source: String,
}

/// The declared training set, as a file holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    /// The policy every target was measured under: only `base` is accepted.
    pub policy: String,
    /// The targets.
    pub targets: Vec<Target>,
}

/// A target with what the fitted model gives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// The target.
    pub target: Target,
    /// The fitted model's value.
    pub simulated: f64,
}

/// What `mmkit sim calibrate` writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The fitted values.
    pub fitted: Fitted,
    /// Every candidate stage 1 tried, with its misfit: the choice of `fitted` made visible.
    #[serde(default)]
    pub tried: Vec<Tried>,
    /// Each target and where the fitted model lands.
    pub fits: Vec<Fit>,
    /// The runs' scale.
    pub scale: f64,
    /// The runs' seed.
    pub seed: u64,
    /// The command that reproduces this file.
    pub command: String,
}

/// One candidate after stage 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Its fitted values (`background_refs_per_us` is still the start's: stage 3 comes
    /// after the choice).
    pub fitted: Fitted,
    /// Stage 1's Σ (ln simulated − ln published)² at the fitted `lock_lines`.
    pub stage1_sse: f64,
    /// Stage 1's last runs, whose line counts stage 3 reads.
    pub stream_runs: Vec<RunResult>,
}

/// What [`Calibration::tried`] keeps of a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tried {
    /// Where lmbench's pairs ran.
    pub unix_placement: Placement,
    /// The `lock_lines` stage 1 fitted for it.
    pub lock_lines: f64,
    /// The fault rate stage 2 fitted, for the candidate stage 1 chose (stage 2 runs for
    /// that one only); `None` for the others.
    #[serde(default)]
    pub kbuild_faults_per_s: Option<f64>,
    /// Stage 1's misfit.
    pub stage1_sse: f64,
}

/// Runs a batch of (spec, policy) and returns results in order: the CLI runs them on
/// its threads (or shards), a test runs them one by one.
pub type Runner<'a> = dyn FnMut(&[(RunSpec, Policy)]) -> Result<Vec<RunResult>, SimError> + 'a;

/// The values a target may take: every metric is a percentage or a ratio of two, which a
/// run measures to a millionth at best, and none reaches a million.
const TARGET_RANGE: std::ops::RangeInclusive<f64> = 1e-6..=1e6;

impl Targets {
    /// Refuse a training set that names a patch row or a metric a workload does not have.
    pub fn validate(&self) -> Result<(), String> {
        if self.policy != "base" {
            return Err(format!(
                "targets are for policy {:?}: only base rows may be fitted, the patch rows are the held-out test",
                self.policy
            ));
        }
        if self.targets.is_empty() {
            return Err("no targets".into());
        }
        for t in &self.targets {
            if !matches!(
                t.workload,
                WorkloadKind::Kbuild | WorkloadKind::Netperf | WorkloadKind::Unix
            ) {
                return Err(format!("{} has no published base row", t.workload));
            }
            // A fit minimises Σ ln²(simulated / target): a target no run could measure
            // (a percentage below a millionth, or a denormal) makes the sum infinite.
            if !TARGET_RANGE.contains(&t.value) {
                return Err(format!(
                    "target {} {:?} of {} is outside {}..={}: no run measures such a figure",
                    t.workload,
                    t.metric,
                    t.value,
                    TARGET_RANGE.start(),
                    TARGET_RANGE.end()
                ));
            }
        }
        Ok(())
    }

    fn of(&self, workload: WorkloadKind, metric: Metric) -> Vec<&Target> {
        self.targets
            .iter()
            .filter(|t| t.workload == workload && t.metric == metric)
            .collect()
    }
}

/// The value of `metric` in `result`.
pub fn metric_of(result: &RunResult, metric: Metric, cost: &CostModel) -> f64 {
    match metric {
        Metric::LockContendPct => result.lock_contend_pct,
        Metric::DrainPct => result.drain_pct,
        Metric::DrainOfContention => result.drain_pct / result.lock_contend_pct.max(1e-9),
        Metric::CacheMissPct => result.cache.miss_rate_pct(cost, result.stats.work_ns),
    }
}

/// The base run of `workload` at `fit`. The placement is lmbench's alone: the other
/// workloads' specs leave it at the default, so that they are the same run under every
/// candidate (and the runner's memo knows it).
fn base_spec(workload: WorkloadKind, scale: f64, seed: u64, fit: &Fitted) -> RunSpec {
    RunSpec {
        seed,
        scale,
        cost: CostModel::with_fit(fit),
        kbuild_faults_per_s: fit.kbuild_faults_per_s,
        unix_placement: match workload {
            WorkloadKind::Unix => fit.unix_placement,
            _ => Placement::default(),
        },
        ..RunSpec::new(workload)
    }
}

/// Seeds stage 2 averages kbuild's contention over: `seed` and the next ones. Six: one
/// run of the build's middle varies with the seed by a standard deviation of 2.6 points
/// at 15 % (seeds 1–6 at 78,706 faults per second), and the three seeds fitted until
/// 2026-12-03 sat 1.2 points under the six's mean (docs/EXPERIMENTS.md, "One socket of
/// the kbuild machine").
pub const KBUILD_FIT_SEEDS: u64 = 6;

/// kbuild's base lock contend% at `fit` with [`KBUILD_FIT_SEEDS`] seeds from `seed`: each
/// seed's, and their geometric mean, which stage 2 fits. The build's middle runs near
/// the zone lock's saturation, where one seed's contention is not the model's: at
/// 73,909 faults per second seeds 1, 2 and 3 gave 14.16, 11.15 and 10.67 %, at 76,000
/// 17.97, 12.38 and 16.63 %.
pub fn kbuild_contention(
    scale: f64,
    seed: u64,
    fit: &Fitted,
    runner: &mut Runner<'_>,
) -> Result<(Vec<f64>, f64), SimError> {
    let jobs: Vec<_> = (seed..seed + KBUILD_FIT_SEEDS)
        .map(|s| (base_spec(WorkloadKind::Kbuild, scale, s, fit), Policy::BASE))
        .collect();
    let values: Vec<f64> = runner(&jobs)?
        .iter()
        .map(|r| r.lock_contend_pct.max(1e-6))
        .collect();
    let mean = (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp();
    Ok((values, mean))
}

/// Σ over `targets` of (ln simulated − ln published)², and the residual vector.
fn residuals(targets: &[&Target], results: &[RunResult], cost: &CostModel) -> Vec<f64> {
    targets
        .iter()
        .map(|t| {
            let r = results
                .iter()
                .find(|r| r.workload == t.workload)
                .expect("a run of every target's workload");
            (metric_of(r, t.metric, cost).max(1e-6) / t.value).ln()
        })
        .collect()
}

/// The discrete choices stage 1 tries: where lmbench's pairs run, when a target
/// depends on it; else only `start`'s.
pub fn candidates(targets: &Targets, start: &Fitted) -> Vec<Placement> {
    let unix_lock = targets
        .targets
        .iter()
        .any(|t| t.workload == WorkloadKind::Unix && t.metric != Metric::CacheMissPct);
    if unix_lock {
        Placement::ALL.to_vec()
    } else {
        vec![start.unix_placement]
    }
}

/// Stage 1 with lmbench's pairs placed at `placement`: the candidate's fitted
/// values, its stage-1 misfit and the stream runs stage 3 reads. Candidates are
/// independent of each other, so `mmkit sim calibrate --shard I/N` fits them on
/// different machines and [`finish`] picks one.
pub fn fit_candidate(
    targets: &Targets,
    scale: f64,
    seed: u64,
    start: Fitted,
    placement: Placement,
    runner: &mut Runner<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Candidate, SimError> {
    targets.validate().map_err(SimError::Invalid)?;
    let mut fit = Fitted {
        unix_placement: placement,
        ..start
    };
    let mut stage1_sse = 0.0;
    // Stage 1: the zone lock's work, on the stream workloads.
    let stream_targets: Vec<&Target> = targets
        .targets
        .iter()
        .filter(|t| t.workload != WorkloadKind::Kbuild && t.metric != Metric::CacheMissPct)
        .collect();
    let streams: Vec<WorkloadKind> = {
        let mut w: Vec<_> = stream_targets.iter().map(|t| t.workload).collect();
        w.sort();
        w.dedup();
        w
    };
    let mut last_stream_runs = Vec::new();
    if !stream_targets.is_empty() {
        let eval = |fit: &Fitted, runner: &mut Runner<'_>| -> Result<Vec<RunResult>, SimError> {
            let jobs: Vec<(RunSpec, Policy)> = streams
                .iter()
                .map(|&w| (base_spec(w, scale, seed, fit), Policy::BASE))
                .collect();
            runner(&jobs)
        };
        // x = ln(1 + lock_lines): a line count of 0 is the boundary.
        let mut x = (fit.lock_lines + 1.0).ln();
        let set = |fit: &mut Fitted, x: f64| fit.lock_lines = (x.exp() - 1.0).max(0.0);
        let sse_at = |x: f64,
                      runner: &mut Runner<'_>|
         -> Result<(f64, Vec<f64>, Vec<RunResult>), SimError> {
            let mut f = fit;
            set(&mut f, x);
            let runs = eval(&f, runner)?;
            let r = residuals(&stream_targets, &runs, &CostModel::with_fit(&f));
            Ok((r.iter().map(|r| r * r).sum(), r, runs))
        };
        let (mut sse, mut r0, mut runs) = sse_at(x, runner)?;
        for iteration in 0..6 {
            log(&format!(
                "stage 1, {placement}, iteration {iteration}: lock_lines {:.3}: Σ ln² {:.4}",
                (x.exp() - 1.0).max(0.0),
                sse
            ));
            // Gauss–Newton in one dimension, with a finite-difference derivative.
            let h = 0.1;
            let (_, rh, _) = sse_at(x + h, runner)?;
            let slope: Vec<f64> = rh.iter().zip(&r0).map(|(a, b)| (a - b) / h).collect();
            let jj: f64 = slope.iter().map(|d| d * d).sum();
            if jj < 1e-12 {
                break;
            }
            let step =
                (slope.iter().zip(&r0).map(|(d, r)| d * r).sum::<f64>() / jj).clamp(-1.0, 1.0);
            // Backtracking: halve the step until the fit improves (at most three times).
            let mut accepted = false;
            let mut scale_step = 1.0;
            for _ in 0..4 {
                let trial = (x - scale_step * step).max(0.0);
                let (st, rt, runs_t) = sse_at(trial, runner)?;
                if st < sse {
                    (x, sse, r0, runs) = (trial, st, rt, runs_t);
                    accepted = true;
                    break;
                }
                scale_step /= 2.0;
            }
            if !accepted || step.abs() * scale_step < 0.01 {
                break;
            }
        }
        set(&mut fit, x);
        stage1_sse = sse;
        last_stream_runs = runs;
    }

    Ok(Candidate {
        fitted: fit,
        stage1_sse,
        stream_runs: last_stream_runs,
    })
}

/// Stage 2: kbuild's fault rate on kbuild's base lock contend%, for the candidate stage 1
/// chose (no stage-1 target is kbuild's, so the other candidates' rates would change
/// nothing but their record). Sets `fit.kbuild_faults_per_s` and returns kbuild's
/// contention there, or `None` without a kbuild target.
fn fit_kbuild_rate(
    targets: &Targets,
    scale: f64,
    seed: u64,
    fit: &mut Fitted,
    runner: &mut Runner<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Option<f64>, SimError> {
    let placement = fit.unix_placement;
    let mut kbuild_value = None;
    if let Some(target) = targets
        .of(WorkloadKind::Kbuild, Metric::LockContendPct)
        .first()
    {
        let mut evaluate = |rate: f64, iteration: usize| -> Result<f64, SimError> {
            let mut trial = *fit;
            trial.kbuild_faults_per_s = rate.exp();
            let (values, value) = kbuild_contention(scale, seed, &trial, runner)?;
            let each: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
            log(&format!(
                "stage 2, {placement}, iteration {iteration}: kbuild faults/s {:.0}: lock contend% {value:.2} (seeds: {}; target {})",
                trial.kbuild_faults_per_s,
                each.join(" / "),
                target.value
            ));
            Ok((value / target.value).ln())
        };
        let (rate, error) = fit_rate(fit.kbuild_faults_per_s.ln(), &mut evaluate)?;
        fit.kbuild_faults_per_s = rate.exp();
        kbuild_value = Some(target.value * error.exp());
    }

    Ok(kbuild_value)
}

/// Stage 2's search: the log fault rate at which `error` (ln simulated / published
/// contention, which grows with the rate) is within 0.02 of 0, from `start`, in at most
/// [`STAGE2_RUNS`] tries; the best rate it tried if none is. Returns the rate and its
/// error. Near the lock's saturation the contention climbs steeply and not smoothly (at
/// the demo's scale 71,236 and 72,913 faults per second gave 12.53 and 12.52 %, 125,476
/// gave 55.6 %), so a plain secant overshoots and can stall; this one keeps the last
/// rates on either side of the target and takes the secant step only well inside them,
/// else halves them (Dekker's safeguard). Until both sides are known it steps as if
/// contention ∝ rate², by at most 1 in ln rate.
fn fit_rate(
    start: f64,
    error: &mut dyn FnMut(f64, usize) -> Result<f64, SimError>,
) -> Result<(f64, f64), SimError> {
    let mut best = (start, error(start, 0)?);
    // The last (log rate, error) run on each side of the target.
    let mut below: Option<(f64, f64)> = None;
    let mut above: Option<(f64, f64)> = None;
    let mut last = best;
    for iteration in 1..STAGE2_RUNS {
        let (rate, e) = last;
        if e.abs() < 0.02 {
            break;
        }
        if e < 0.0 {
            below = Some((rate, e));
        } else {
            above = Some((rate, e));
        }
        let next = match (below, above) {
            // Both sides known: the secant between them, or their midpoint.
            (Some((lo, elo)), Some((hi, ehi))) => {
                let secant = lo - elo * (hi - lo) / (ehi - elo);
                // A step into the outer tenth of the bracket is a sign of curvature:
                // halve instead.
                let inner = lo + 0.1 * (hi - lo)..=hi - 0.1 * (hi - lo);
                if inner.contains(&secant) {
                    secant
                } else {
                    0.5 * (lo + hi)
                }
            }
            // One side only: step out, assuming contention ∝ rate², by at most 1.
            _ => rate - (e / 2.0).clamp(-1.0, 1.0),
        };
        last = (next, error(next, iteration)?);
        if last.1.abs() < best.1.abs() {
            best = last;
        }
    }
    Ok(best)
}

/// The most fault rates stage 2 tries (each one [`KBUILD_FIT_SEEDS`] runs).
pub const STAGE2_RUNS: usize = 8;

/// Fit the model against `targets` with runs at `scale` and `seed`; `runner` runs each
/// batch; `log` hears about each stage. The same as [`fit_candidate`] for each of
/// [`candidates`], then [`finish`].
pub fn calibrate(
    targets: &Targets,
    scale: f64,
    seed: u64,
    start: Fitted,
    runner: &mut Runner<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Calibration, SimError> {
    let fitted = candidates(targets, &start)
        .into_iter()
        .map(|p| fit_candidate(targets, scale, seed, start, p, runner, log))
        .collect::<Result<Vec<_>, _>>()?;
    finish(targets, scale, seed, fitted, runner, log)
}

/// Pick the candidate whose stage 1 fits best (the first on a tie), then stage 3 and the
/// record of where the fitted model lands on every target.
pub fn finish(
    targets: &Targets,
    scale: f64,
    seed: u64,
    candidates: Vec<Candidate>,
    runner: &mut Runner<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Calibration, SimError> {
    targets.validate().map_err(SimError::Invalid)?;
    let best_index = candidates
        .iter()
        .enumerate()
        .reduce(|a, b| {
            if b.1.stage1_sse < a.1.stage1_sse {
                b
            } else {
                a
            }
        })
        .map(|(i, _)| i)
        .ok_or_else(|| SimError::Invalid("no candidate to pick from".into()))?;
    let mut tried: Vec<Tried> = candidates
        .iter()
        .map(|c| Tried {
            unix_placement: c.fitted.unix_placement,
            lock_lines: c.fitted.lock_lines,
            kbuild_faults_per_s: None,
            stage1_sse: c.stage1_sse,
        })
        .collect();
    let best = candidates
        .into_iter()
        .nth(best_index)
        .expect("the index of a candidate");
    log(&format!(
        "stage 1: {} fits best (Σ ln² {:.4})",
        best.fitted.unix_placement, best.stage1_sse
    ));
    let mut fit = best.fitted;
    let mut last_stream_runs = best.stream_runs;
    let kbuild_value = fit_kbuild_rate(targets, scale, seed, &mut fit, runner, log)?;
    if kbuild_value.is_some() {
        tried[best_index].kbuild_faults_per_s = Some(fit.kbuild_faults_per_s);
    }

    // Stage 3: background references, in closed form from the stream runs' line counts:
    // the value that makes the geometric mean of simulated / published miss rates 1.
    let miss_targets: Vec<&Target> = targets
        .targets
        .iter()
        .filter(|t| t.metric == Metric::CacheMissPct)
        .collect();
    if !miss_targets.is_empty() {
        let mut missing: Vec<WorkloadKind> = miss_targets
            .iter()
            .map(|t| t.workload)
            .filter(|w| {
                !last_stream_runs
                    .iter()
                    .any(|r: &RunResult| r.workload == *w)
            })
            .collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            let jobs: Vec<_> = missing
                .iter()
                .map(|&w| (base_spec(w, scale, seed, &fit), Policy::BASE))
                .collect();
            last_stream_runs.extend(runner(&jobs)?);
        }
        let sse = |b: f64| {
            let mut f = fit;
            f.background_refs_per_us = b;
            let cost = CostModel::with_fit(&f);
            residuals(&miss_targets, &last_stream_runs, &cost)
                .iter()
                .map(|r| r * r)
                .sum::<f64>()
        };
        // Golden-section search on ln(b) over [1, 1e6] references per µs.
        let (mut lo, mut hi) = (0.0f64, 1e6f64.ln());
        let phi = (5f64.sqrt() - 1.0) / 2.0;
        for _ in 0..80 {
            let a = hi - phi * (hi - lo);
            let b = lo + phi * (hi - lo);
            if sse(a.exp()) < sse(b.exp()) {
                hi = b;
            } else {
                lo = a;
            }
        }
        fit.background_refs_per_us = ((lo + hi) / 2.0).exp();
        log(&format!(
            "stage 3: background_refs_per_us {:.1}",
            fit.background_refs_per_us
        ));
    }

    // The fitted model on every target's workload, for the record; kbuild's contention is
    // stage 2's, when it ran.
    let known = |t: &Target| {
        (t.workload, t.metric) == (WorkloadKind::Kbuild, Metric::LockContendPct)
            && kbuild_value.is_some()
    };
    let mut workloads: Vec<WorkloadKind> = targets
        .targets
        .iter()
        .filter(|t| !known(t))
        .map(|t| t.workload)
        .collect();
    workloads.sort();
    workloads.dedup();
    let jobs: Vec<_> = workloads
        .iter()
        .map(|&w| (base_spec(w, scale, seed, &fit), Policy::BASE))
        .collect();
    let runs = runner(&jobs)?;
    let cost = CostModel::with_fit(&fit);
    let mut fits = Vec::new();
    for t in &targets.targets {
        let simulated = if let (true, Some(value)) = (known(t), kbuild_value) {
            value
        } else if (t.workload, t.metric) == (WorkloadKind::Kbuild, Metric::LockContendPct) {
            kbuild_contention(scale, seed, &fit, runner)?.1
        } else {
            metric_of(
                runs.iter()
                    .find(|r| r.workload == t.workload)
                    .expect("a run of every workload"),
                t.metric,
                &cost,
            )
        };
        fits.push(Fit {
            target: t.clone(),
            simulated,
        });
    }
    Ok(Calibration {
        fitted: fit,
        tried,
        fits,
        scale,
        seed,
        command: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stage 2's search on a contention curve like the demo kbuild's: flat, then a
    /// steep knee (ln contention rising 5 per unit of ln rate), with a plateau where two
    /// nearby rates give the same value. It lands within 0.02 of the target in its run
    /// budget, where the plain secant (slope 2, then the last two points) overshot to
    /// 55 % and ended on a rate it never ran.
    #[test]
    fn stage_2_finds_a_steep_knee_in_its_run_budget() {
        // ln(contention / 14): 0 at ln rate 11.2 (73,000 faults per second).
        let curve = |x: f64| {
            let knee = 5.0 * (x - 11.2);
            // A plateau just under the target, as the seeded runs show.
            if (11.17..11.20).contains(&x) {
                -0.11
            } else {
                knee.max(-3.0)
            }
        };
        let mut runs = Vec::new();
        let mut error = |x: f64, iteration: usize| -> Result<f64, SimError> {
            runs.push((iteration, x));
            Ok(curve(x))
        };
        let (rate, e) = fit_rate(54_090f64.ln(), &mut error).unwrap();
        assert_eq!(e, curve(rate), "the error of the rate returned");
        assert!(runs.len() <= STAGE2_RUNS, "{runs:?}");
        assert!(
            curve(rate).abs() < 0.02,
            "ended at {} ({runs:?})",
            rate.exp()
        );
        assert!(
            runs.iter().any(|&(_, x)| x == rate),
            "the rate returned was run"
        );
    }

    /// Started at the answer (a rerun of the committed calibration), it runs once and
    /// keeps it: the fixed point CI checks.
    #[test]
    fn stage_2_keeps_a_rate_that_already_fits() {
        let mut runs = 0;
        let mut error = |x: f64, _: usize| -> Result<f64, SimError> {
            runs += 1;
            Ok(0.01 + 3.0 * (x - 11.2))
        };
        assert_eq!(fit_rate(11.2, &mut error).unwrap().0, 11.2);
        assert_eq!(runs, 1);
    }

    /// A curve it cannot meet in its budget: it returns the best rate it ran, never a
    /// proposal it did not.
    #[test]
    fn stage_2_returns_the_best_rate_it_ran() {
        let mut ran = Vec::new();
        let mut error = |x: f64, _: usize| -> Result<f64, SimError> {
            ran.push(x);
            // Jumps over the target: never within 0.02.
            Ok(if x < 11.2 { -0.5 } else { 0.4 })
        };
        let rate = fit_rate(10.0, &mut error).unwrap().0;
        assert!(ran.contains(&rate));
        assert!(rate >= 11.2, "the side 0.4 away, not 0.5: {}", rate.exp());
        assert_eq!(ran.len(), STAGE2_RUNS);
    }

    fn targets(policy: &str) -> Targets {
        Targets {
            policy: policy.into(),
            targets: vec![Target {
                workload: WorkloadKind::Unix,
                metric: Metric::LockContendPct,
                value: 10.0,
                source: "test".into(),
            }],
        }
    }

    #[test]
    fn a_target_no_run_could_measure_is_refused() {
        for value in [0.0, -1.0, 5e-324, 1e-7, 2e6, f64::NAN, f64::INFINITY] {
            let mut file = targets("base");
            file.targets[0].value = value;
            let err = file.validate().unwrap_err();
            assert!(err.contains("no run measures"), "{value}: {err}");
        }
        let mut file = targets("base");
        file.targets[0].value = 1e-6;
        assert!(file.validate().is_ok());
    }

    #[test]
    fn a_patch_row_is_never_a_target() {
        let err = targets("patch3").validate().unwrap_err();
        assert!(err.contains("held-out"), "{err}");
        assert!(targets("base").validate().is_ok());
    }

    #[test]
    fn the_committed_targets_are_base_rows() {
        let file: Targets =
            serde_json::from_str(include_str!("../calibration-targets.json")).unwrap();
        file.validate().unwrap();
    }

    /// The committed model reproduces its whole training set, not only the three base
    /// contention cells the demo marks: every fit within 30 % of its target (for lock
    /// contend%, the demo's tolerance: 30 % or 0.5 of a percentage point). A model change
    /// whose refit misses a target, as the cache model's base miss rates did before the
    /// cores' L2s were counted (lmbench 1.29 % against 0.2), fails here and must say why.
    #[test]
    fn the_committed_model_fits_every_training_target() {
        let committed: Calibration = serde_json::from_str(crate::cost::CALIBRATION_JSON).unwrap();
        let targets: Targets =
            serde_json::from_str(include_str!("../calibration-targets.json")).unwrap();
        assert_eq!(committed.fits.len(), targets.targets.len());
        for fit in &committed.fits {
            let (value, simulated) = (fit.target.value, fit.simulated);
            let off = (simulated - value).abs();
            let absolute = if fit.target.metric == Metric::LockContendPct {
                0.5
            } else {
                0.0
            };
            assert!(
                off <= 0.3 * value || off <= absolute,
                "{:?} {:?}: the model gives {simulated}, the target is {value}",
                fit.target.workload,
                fit.target.metric
            );
        }
    }
}
