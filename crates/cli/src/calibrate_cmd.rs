//! `mmkit sim calibrate`: fit the cost model against a declared training set
//! (`mmkit_sim::calibrate`), in one process or in shards.
//!
//! The fit runs stage 1 once per candidate of its discrete choice (where lmbench's pairs
//! run), each independent of the others. `--shard I/N` (or a Slurm array's or a
//! Kubernetes Indexed Job's index, as for `mmkit sim`) fits the candidates c with c mod
//! N = I and writes a *calibration shard file*; `--merge FILE...` checks that the files
//! are shards of one calibration and hold every candidate once, then picks the best and
//! runs stages 2 and 3 and the record runs, writing exactly what the single run writes.

use std::path::{Path, PathBuf};

use clap::Args;
use mmkit_core::Policy;
use mmkit_sim::calibrate::{
    candidates, finish, fit_candidate, Calibration, Candidate, Runner, Targets,
};
use mmkit_sim::cost::Fitted;
use mmkit_sim::workload::stream::Placement;
use mmkit_sim::{RunResult, RunSpec, SimError};
use serde::{Deserialize, Serialize};

use crate::shard::{Shard, ShardArgs};
use crate::sim_cmd::{check_scale, run_all};
use crate::CliError;

/// What a calibration shard file says it is.
const FORMAT: &str = "mmkit calibrate shard 1";

/// Arguments of `mmkit sim calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// The training set: a JSON file of base-row targets
    /// (`crates/sim/calibration-targets.json`).
    #[arg(long, value_name = "FILE")]
    pub targets: PathBuf,
    /// Write the calibration here instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Size of the runs (as `mmkit sim --scale`).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Parallel runs; default: the available cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Fit only some of stage 1's candidates and write a calibration shard file
    /// (`--shard I/N`, or a Slurm array's or a Kubernetes Indexed Job's index).
    #[command(flatten)]
    pub shard: ShardArgs,
    /// Finish a calibration from the shard files of all its candidates instead of fitting.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "shard")]
    pub merge: Vec<PathBuf>,
}

/// Who a calibration is: two shards merge only if these agree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Identity {
    mmkit: String,
    targets: Targets,
    scale: f64,
    seed: u64,
    start: Fitted,
    candidates: Vec<Placement>,
}

/// A calibration shard file.
#[derive(Debug, Serialize, Deserialize)]
struct ShardFile {
    format: String,
    #[serde(flatten)]
    identity: Identity,
    /// This shard's index and the shard count.
    shard: [usize; 2],
    /// The candidates this shard fitted, by index into `identity.candidates`.
    fitted: Vec<(usize, Candidate)>,
}

/// `mmkit sim calibrate`.
pub fn run_calibrate(args: &CalibrateArgs) -> Result<(), CliError> {
    let text = crate::limits::read_input_text(&args.targets)
        .map_err(|e| CliError::usage(format!("{}: {e}", args.targets.display())))?;
    let targets: Targets = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("{}: {e}", args.targets.display())))?;
    targets
        .validate()
        .map_err(|e| CliError::usage(format!("{}: {e}", args.targets.display())))?;
    check_scale(args.scale)?;
    if args.threads == Some(0) {
        return Err(CliError::usage("--threads must be at least 1"));
    }
    let shard = if args.merge.is_empty() {
        crate::shard::select(&args.shard, &crate::shard::process_env)?
    } else {
        None
    };
    match (&shard, &args.shard.shard_out) {
        (Some(_), Some(out)) => crate::output::check_file("--shard-out", out)?,
        _ => crate::output::check_optional_file("--out", args.out.as_deref())?,
    }
    let start = mmkit_sim::cost::calibrated_fit();
    let identity = Identity {
        mmkit: env!("CARGO_PKG_VERSION").to_owned(),
        candidates: candidates(&targets, &start),
        targets,
        scale: args.scale,
        seed: args.seed,
        start,
    };
    let threads = args.threads;
    let mut runner = once_each(|jobs: &[(RunSpec, Policy)]| {
        run_all(jobs, threads, true).map_err(|e| SimError::Invalid(e.message().to_owned()))
    });
    let mut log = |line: &str| eprintln!("calibrate: {line}");
    if let Some(shard) = shard {
        return write_shard(&identity, &shard, args, &mut |c| {
            fit(&identity, c, &mut runner, &mut log)
        });
    }
    let fitted = if args.merge.is_empty() {
        (0..identity.candidates.len())
            .map(|c| fit(&identity, c, &mut runner, &mut log))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        merge(&identity, &args.merge)?
    };
    let mut calibration: Calibration = finish(
        &identity.targets,
        identity.scale,
        identity.seed,
        fitted,
        &mut runner,
        &mut log,
    )
    .map_err(|e| CliError::failed(e.to_string()))?;
    calibration.command = format!(
        "mmkit sim calibrate --targets {} --scale {} --seed {}",
        args.targets.display(),
        args.scale,
        args.seed
    );
    let json = crate::output::json(&calibration)?;
    match &args.out {
        Some(out) => std::fs::write(out, json + "\n")
            .map_err(|e| CliError::failed(format!("{}: {e}", out.display())))?,
        None => println!("{json}"),
    }
    Ok(())
}

/// `run` behind a memo, so that each distinct run is made once per process: a run is
/// deterministic, and the fit asks for the same one again (the final record reruns base
/// runs the stages made). Results come back in the order of the jobs asked for.
fn once_each<'a>(
    mut run: impl FnMut(&[(RunSpec, Policy)]) -> Result<Vec<RunResult>, SimError> + 'a,
) -> impl FnMut(&[(RunSpec, Policy)]) -> Result<Vec<RunResult>, SimError> + 'a {
    let mut done: Vec<(RunSpec, Policy, RunResult)> = Vec::new();
    move |jobs: &[(RunSpec, Policy)]| {
        let ran = |done: &[(RunSpec, Policy, RunResult)], (spec, policy): &(RunSpec, Policy)| {
            done.iter().position(|(s, p, _)| s == spec && p == policy)
        };
        let mut missing: Vec<(RunSpec, Policy)> = Vec::new();
        for job in jobs {
            if ran(&done, job).is_none() && !missing.contains(job) {
                missing.push(job.clone());
            }
        }
        if !missing.is_empty() {
            let results = run(&missing)?;
            done.extend(
                missing
                    .into_iter()
                    .zip(results)
                    .map(|((spec, policy), result)| (spec, policy, result)),
            );
        }
        Ok(jobs
            .iter()
            .map(|job| done[ran(&done, job).expect("every job ran")].2.clone())
            .collect())
    }
}

/// Stage 1 for candidate `c` of `identity`.
fn fit(
    identity: &Identity,
    c: usize,
    runner: &mut Runner<'_>,
    log: &mut dyn FnMut(&str),
) -> Result<Candidate, CliError> {
    fit_candidate(
        &identity.targets,
        identity.scale,
        identity.seed,
        identity.start,
        identity.candidates[c],
        runner,
        log,
    )
    .map_err(|e| CliError::failed(e.to_string()))
}

/// Fit `shard`'s candidates and write their shard file (stdout unless `--shard-out`).
fn write_shard(
    identity: &Identity,
    shard: &Shard,
    args: &CalibrateArgs,
    fit: &mut dyn FnMut(usize) -> Result<Candidate, CliError>,
) -> Result<(), CliError> {
    if let Some(out) = &args.out {
        return Err(CliError::usage(format!(
            "--out {}: a shard writes a shard file (--shard-out); give --out to the --merge",
            out.display()
        )));
    }
    let mine: Vec<usize> = (0..identity.candidates.len())
        .filter(|&c| shard.owns(c))
        .collect();
    eprintln!(
        "mmkit sim calibrate: shard {}/{} ({}): {} of {} candidates",
        shard.index,
        shard.count,
        shard.origin,
        mine.len(),
        identity.candidates.len()
    );
    let fitted = mine
        .into_iter()
        .map(|c| Ok((c, fit(c)?)))
        .collect::<Result<Vec<_>, CliError>>()?;
    let file = ShardFile {
        format: FORMAT.to_owned(),
        identity: identity.clone(),
        shard: [shard.index, shard.count],
        fitted,
    };
    let text = serde_json::to_string(&file).map_err(|e| CliError::failed(e.to_string()))?;
    match &args.shard.shard_out {
        Some(path) => std::fs::write(path, text + "\n")
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display()))),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

/// Every candidate of `identity`, from shard files that must all be of this calibration
/// and hold each candidate exactly once.
fn merge(identity: &Identity, paths: &[PathBuf]) -> Result<Vec<Candidate>, CliError> {
    let mut slots: Vec<Option<(Candidate, &Path)>> = vec![None; identity.candidates.len()];
    for path in paths {
        let text = crate::limits::read_input_text(path)
            .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
        let file: ShardFile = serde_json::from_str(&text).map_err(|e| {
            CliError::usage(format!(
                "{}: not a calibration shard file ({e})",
                path.display()
            ))
        })?;
        if file.format != FORMAT {
            return Err(CliError::usage(format!(
                "{}: not a calibration shard file (format {:?})",
                path.display(),
                file.format
            )));
        }
        if let Some(field) = differs(identity, &file.identity) {
            return Err(CliError::usage(format!(
                "{}: a shard of another calibration: its {field} differs from this command's",
                path.display()
            )));
        }
        for (c, candidate) in file.fitted {
            let slot = slots
                .get_mut(c)
                .ok_or_else(|| CliError::usage(format!("{}: no candidate {c}", path.display())))?;
            if let Some((_, other)) = slot {
                return Err(CliError::usage(format!(
                    "{}: candidate {c} ({}) is also in {}",
                    path.display(),
                    identity.candidates[c],
                    other.display()
                )));
            }
            *slot = Some((candidate, path));
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(c, slot)| {
            slot.map(|(candidate, _)| candidate).ok_or_else(|| {
                CliError::usage(format!(
                    "no shard file holds candidate {c} ({}): run --shard {c}/{} too",
                    identity.candidates[c],
                    identity.candidates.len()
                ))
            })
        })
        .collect()
}

/// The first field in which `theirs` is not `ours`.
fn differs(ours: &Identity, theirs: &Identity) -> Option<&'static str> {
    [
        ("mmkit version", ours.mmkit != theirs.mmkit),
        ("training set (--targets)", ours.targets != theirs.targets),
        ("--scale", ours.scale != theirs.scale),
        ("--seed", ours.seed != theirs.seed),
        ("starting calibration", ours.start != theirs.start),
        ("candidate list", ours.candidates != theirs.candidates),
    ]
    .into_iter()
    .find(|(_, d)| *d)
    .map(|(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit_sim::WorkloadKind;

    /// A run asked for again comes from the memo, in the order asked for; a new one runs.
    #[test]
    fn each_distinct_run_is_made_once() {
        let tiny = |seed| RunSpec {
            cpus: Some(2),
            seed,
            scale: 0.001,
            ..RunSpec::new(WorkloadKind::Unix)
        };
        let mut made: Vec<u64> = Vec::new();
        let mut runner = once_each(|jobs: &[(RunSpec, Policy)]| {
            made.extend(jobs.iter().map(|(spec, _)| spec.seed));
            Ok(jobs
                .iter()
                .map(|(spec, policy)| mmkit_sim::run(spec, *policy, &mut |_| {}).unwrap())
                .collect())
        });
        let (a, b) = ((tiny(1), Policy::BASE), (tiny(2), Policy::BASE));
        let first = runner(&[a.clone(), a.clone()]).unwrap();
        let second = runner(&[b.clone(), a.clone()]).unwrap();
        drop(runner);
        assert_eq!(made, [1, 2], "seed 1 once, then seed 2 only");
        assert_eq!(first[0], first[1]);
        assert_eq!(second[1], first[0]);
        assert_eq!((second[0].seed, second[1].seed), (2, 1));
    }
}
