//! Sharded sweeps: `--shard I/N` runs every N-th job of a sweep and writes a shard file;
//! `mmkit sim merge` and `mmkit demo --merge` check that a set of shard files makes one
//! whole sweep and print what the single run prints.
//!
//! A sweep is the list of (RunSpec, Policy) jobs that `mmkit sim` or `mmkit demo` builds
//! (`sim_cmd`, `demo`); job j belongs to shard j mod N. A run is deterministic and its
//! result holds no host time, so it does not depend on which process or machine ran it, and
//! [`RunResult`] reads back from its JSON unchanged: the merge renders, byte for byte, what
//! one process running every job renders. No Linux counterpart; this is the harness.
//!
//! Where the shard comes from, first match wins:
//! - `--shard I/N` (0-based I);
//! - a Slurm job array: I = (`SLURM_ARRAY_TASK_ID` − `SLURM_ARRAY_TASK_MIN`) /
//!   `SLURM_ARRAY_TASK_STEP`, N = `SLURM_ARRAY_TASK_COUNT` (an array need not start at 0);
//! - a Kubernetes Indexed Job: I = `JOB_COMPLETION_INDEX`, N = `--shards N` or
//!   `MMKIT_SHARDS` (Kubernetes does not export the Job's `completions`).
//!
//! With none of these the whole sweep runs in this process, on every core.

use std::path::{Path, PathBuf};

use clap::Args;
use mmkit_core::Policy;
use mmkit_sim::{RunResult, RunSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sim_cmd::{run_all_timed, speed_line};
use crate::CliError;

/// The environment variable that gives a Kubernetes Indexed Job's shard count, which
/// Kubernetes does not export (set it to the Job's `completions`).
pub const SHARDS_ENV: &str = "MMKIT_SHARDS";

/// What a shard file says it is, so that another JSON file is refused by name.
const FORMAT: &str = "mmkit sweep shard 1";

/// The sharding flags `mmkit sim` and `mmkit demo` share.
#[derive(Args, Debug, Clone, Default)]
pub struct ShardArgs {
    /// Run only shard I of N (0-based): the jobs j with j mod N = I, and write a shard
    /// file for the merge. Default: from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or
    /// JOB_COMPLETION_INDEX when set; without any, every job runs here.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// The shard count when the index comes from Kubernetes' JOB_COMPLETION_INDEX (the
    /// Indexed Job's completions); default: the MMKIT_SHARDS environment variable.
    #[arg(long, value_name = "N", conflicts_with = "shard")]
    pub shards: Option<usize>,
    /// Write the shard file here (default: stdout for `mmkit sim`, OUT/shard-I-of-N.json
    /// for `mmkit demo`).
    #[arg(long, value_name = "FILE")]
    pub shard_out: Option<PathBuf>,
}

/// Which command built a sweep: a shard of one is not merged by the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// `mmkit sim`.
    Sim,
    /// `mmkit demo`.
    Demo,
}

impl Sweep {
    fn name(self) -> &'static str {
        match self {
            Sweep::Sim => "sim",
            Sweep::Demo => "demo",
        }
    }
}

/// One shard of a sweep: the jobs j with j mod `count` = `index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// I, 0-based, below `count`.
    pub index: usize,
    /// N, at least 1.
    pub count: usize,
    /// Where I and N came from, for the note on stderr.
    pub origin: String,
}

impl Shard {
    /// Shard `index` of `count`, or why there is no such shard.
    pub fn new(index: usize, count: usize, origin: String) -> Result<Shard, String> {
        if count == 0 {
            return Err("the shard count must be at least 1".into());
        }
        if index >= count {
            return Err(format!(
                "shard {index} of {count} does not exist (indexes run from 0 to {})",
                count - 1
            ));
        }
        Ok(Shard {
            index,
            count,
            origin,
        })
    }

    /// Whether job `job` is this shard's.
    pub fn owns(&self, job: usize) -> bool {
        job % self.count == self.index
    }
}

/// `--shard I/N`.
fn parse_shard(text: &str) -> Result<Shard, String> {
    let numbers = text
        .split_once('/')
        .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
    let Some((index, count)) = numbers else {
        return Err("use I/N with 0 <= I < N, e.g. 0/4".into());
    };
    Shard::new(index, count, "--shard".into())
}

/// The process environment, as [`select`] reads it.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The shard this process runs, if any: `--shard`, else Slurm's or Kubernetes' variables
/// read through `env`; `None` runs the whole sweep.
pub fn select(
    args: &ShardArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Shard>, CliError> {
    let shard = if let Some(shard) = &args.shard {
        Some(shard.clone())
    } else if let Some(id) = env("SLURM_ARRAY_TASK_ID") {
        Some(from_slurm(&id, args.shards, env).map_err(CliError::usage)?)
    } else if let Some(index) = env("JOB_COMPLETION_INDEX") {
        Some(from_indexed_job(&index, args.shards, env).map_err(CliError::usage)?)
    } else if let Some(count) = args.shards {
        return Err(CliError::usage(format!(
            "--shards {count} counts the shards of a Kubernetes Indexed Job, but JOB_COMPLETION_INDEX is not set: give --shard I/N"
        )));
    } else {
        None
    };
    if shard.is_none() {
        if let Some(out) = &args.shard_out {
            return Err(CliError::usage(format!(
                "--shard-out {}: this is not a shard (no --shard I/N, SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)",
                out.display()
            )));
        }
    }
    Ok(shard)
}

/// A non-negative integer from the environment variable `name`.
fn env_number(name: &str, value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{name}={value:?} is not a non-negative integer"))
}

/// The shard of a Slurm job array's task: arrays may start above 0 and step (`--array=1-9:2`).
fn from_slurm(
    id: &str,
    shards: Option<usize>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Shard, String> {
    let id = env_number("SLURM_ARRAY_TASK_ID", id)?;
    let read = |name: &str| env(name).map(|v| env_number(name, &v)).transpose();
    let min = read("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let step = read("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
    let count = read("SLURM_ARRAY_TASK_COUNT")?
        .ok_or("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not: give --shard I/N")?;
    if let Some(n) = shards.filter(|n| *n != count) {
        return Err(format!(
            "--shards {n} disagrees with SLURM_ARRAY_TASK_COUNT={count}"
        ));
    }
    let origin =
        format!("SLURM_ARRAY_TASK_ID={id} of an array from {min} by {step}, {count} tasks");
    let offset = id
        .checked_sub(min)
        .filter(|o| o % step == 0)
        .ok_or_else(|| {
            format!("{origin}: the task is not on the array's steps: give --shard I/N")
        })?;
    Shard::new(offset / step, count, origin.clone()).map_err(|e| {
        format!(
            "{origin}: {e}; a sweep needs a contiguous array such as --array=0-{}",
            count.max(1) - 1
        )
    })
}

/// The shard of a Kubernetes Indexed Job's pod.
fn from_indexed_job(
    index: &str,
    shards: Option<usize>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Shard, String> {
    let index = env_number("JOB_COMPLETION_INDEX", index)?;
    let count = match shards {
        Some(count) => count,
        None => {
            let value = env(SHARDS_ENV).ok_or_else(|| {
                format!("JOB_COMPLETION_INDEX={index} is set but the shard count is not: give --shards N or set {SHARDS_ENV} to the Job's completions")
            })?;
            env_number(SHARDS_ENV, &value)?
        }
    };
    let origin = format!("JOB_COMPLETION_INDEX={index} of {count}");
    Shard::new(index, count, origin.clone()).map_err(|e| format!("{origin}: {e}"))
}

/// A job as a shard file names it.
#[derive(Serialize)]
struct JobOut<'a> {
    spec: &'a RunSpec,
    policy: &'a Policy,
}

/// A job's result as a shard file carries it.
#[derive(Serialize, Deserialize)]
struct Done<R> {
    job: usize,
    result: R,
}

/// The shard's place in its sweep.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct Place {
    index: usize,
    count: usize,
}

/// A shard file: the sweep's identity (the command, mmkit's version, every job in
/// order), the shard's place, and its results with their job indexes.
#[derive(Serialize, Deserialize)]
struct ShardFile<J, R> {
    format: String,
    mmkit: String,
    sweep: String,
    shard: Place,
    jobs: Vec<J>,
    results: Vec<Done<R>>,
}

/// A shard file as the merge reads it: the jobs kept as JSON, only compared.
type ShardIn = ShardFile<Value, RunResult>;

/// Run `shard`'s jobs of `jobs` on `threads` threads and write its shard file to `out`
/// (stdout if `None`); with `timing`, print each run's speed on standard error (`mmkit sim
/// --timing`'s line).
pub fn run_shard(
    sweep: Sweep,
    jobs: &[(RunSpec, Policy)],
    shard: &Shard,
    threads: Option<usize>,
    out: Option<&Path>,
    quiet: bool,
    timing: bool,
) -> Result<(), CliError> {
    if threads == Some(0) {
        return Err(CliError::usage("--threads must be at least 1"));
    }
    let mine: Vec<usize> = (0..jobs.len()).filter(|j| shard.owns(*j)).collect();
    let picked: Vec<(RunSpec, Policy)> = mine.iter().map(|&j| jobs[j].clone()).collect();
    eprintln!(
        "mmkit {}: shard {}/{} ({}): {} of {} runs",
        sweep.name(),
        shard.index,
        shard.count,
        shard.origin,
        picked.len(),
        jobs.len()
    );
    let timed = run_all_timed(&picked, threads, quiet)?;
    if timing {
        for (result, speed) in &timed {
            eprintln!("{}", speed_line(result, speed));
        }
    }
    let results: Vec<RunResult> = timed.into_iter().map(|(result, _)| result).collect();
    let file = ShardFile {
        format: FORMAT.to_owned(),
        mmkit: env!("CARGO_PKG_VERSION").to_owned(),
        sweep: sweep.name().to_owned(),
        shard: Place {
            index: shard.index,
            count: shard.count,
        },
        jobs: jobs
            .iter()
            .map(|(spec, policy)| JobOut { spec, policy })
            .collect(),
        results: mine
            .iter()
            .zip(&results)
            .map(|(&job, result)| Done { job, result })
            .collect(),
    };
    let text = serde_json::to_string(&file).map_err(|e| CliError::failed(e.to_string()))?;
    check_reads_back(&text, &results)?;
    match out {
        Some(path) => std::fs::write(path, text + "\n")
            .map_err(|e| CliError::failed(format!("{}: {e}", path.display()))),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

/// Refuse to write a shard whose results would not read back as they are: the merge
/// would then print something other than the single run.
fn check_reads_back(text: &str, results: &[RunResult]) -> Result<(), CliError> {
    let back: ShardIn = serde_json::from_str(text)
        .map_err(|e| CliError::failed(format!("the shard file does not read back: {e}")))?;
    for (done, result) in back.results.iter().zip(results) {
        if done.result != *result {
            return Err(CliError::failed(format!(
                "job {} ({}/{}): its result does not read back from JSON unchanged (a NaN or an infinity?)",
                done.job, result.workload, result.policy
            )));
        }
    }
    Ok(())
}

/// `workload/policy` of a job as a shard file names it.
fn label(job: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    format!(
        "{}/{}",
        text(&job["spec"]["workload"]),
        text(&job["policy"]["name"])
    )
}

/// Read and check one shard file of a `sweep`.
fn read(sweep: Sweep, path: &Path) -> Result<ShardIn, CliError> {
    let shown = path.display();
    let text = crate::limits::read_input_text(path)
        .map_err(|e| CliError::usage(format!("{shown}: {e}")))?;
    let head: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("{shown}: not an mmkit shard file: {e}")))?;
    if head["format"] != FORMAT {
        return Err(CliError::usage(format!(
            "{shown}: not an mmkit shard file (no \"format\": \"{FORMAT}\"; write one with --shard I/N)"
        )));
    }
    if head["sweep"] != sweep.name() {
        return Err(CliError::usage(format!(
            "{shown}: a shard of `mmkit {}`, not of `mmkit {}`",
            head["sweep"].as_str().unwrap_or("?"),
            sweep.name()
        )));
    }
    let file: ShardIn = serde_json::from_value(head)
        .map_err(|e| CliError::usage(format!("{shown}: a damaged shard file: {e}")))?;
    if file.jobs.is_empty() {
        return Err(CliError::usage(format!("{shown}: the sweep has no jobs")));
    }
    for done in &file.results {
        let Some(job) = file.jobs.get(done.job) else {
            return Err(CliError::usage(format!(
                "{shown}: a result for job {}, but the sweep has {} jobs",
                done.job,
                file.jobs.len()
            )));
        };
        let machine = &done.result.machine;
        if machine.sockets == 0 || machine.cpus_per_socket == 0 {
            return Err(CliError::usage(format!(
                "{shown}: a damaged shard file: job {}'s machine has no CPUs",
                done.job
            )));
        }
        let workload = serde_json::to_value(done.result.workload).unwrap_or_default();
        if job["spec"]["workload"] != workload || job["policy"]["name"] != done.result.policy {
            return Err(CliError::usage(format!(
                "{shown}: job {} is {} but its result is of {}/{}",
                done.job,
                label(job),
                done.result.workload,
                done.result.policy
            )));
        }
    }
    Ok(file)
}

/// The first place where `a` and `b` differ: its path (`spec.seed`) and both values.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<(String, String, String)> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() => x
            .iter()
            .find_map(|(k, v)| first_difference(v, y.get(k)?, &join(k)))
            .or_else(|| {
                x.keys()
                    .find(|k| !y.contains_key(*k))
                    .map(|k| (join(k), x[k].to_string(), "nothing".into()))
            }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &join(&i.to_string()))),
        _ if a == b => None,
        _ => Some((path.to_owned(), a.to_string(), b.to_string())),
    }
}

/// Check that `file` (at `path`) is a shard of the same sweep as `first` (at `first_path`).
fn check_same_sweep(
    first: &ShardIn,
    first_path: &Path,
    file: &ShardIn,
    path: &Path,
) -> Result<(), CliError> {
    let other = |why: String| {
        CliError::usage(format!(
            "{} belongs to another sweep than {}: {why}",
            path.display(),
            first_path.display()
        ))
    };
    if file.mmkit != first.mmkit {
        return Err(other(format!(
            "written by mmkit {}, not {}",
            file.mmkit, first.mmkit
        )));
    }
    if file.jobs.len() != first.jobs.len() {
        return Err(other(format!(
            "{} jobs, not {}",
            file.jobs.len(),
            first.jobs.len()
        )));
    }
    for (j, (mine, theirs)) in file.jobs.iter().zip(&first.jobs).enumerate() {
        if let Some((at, here, there)) = first_difference(mine, theirs, "") {
            return Err(other(format!(
                "job {j} ({})'s {at} is {here}, not {there}",
                label(mine)
            )));
        }
    }
    Ok(())
}

/// The results of the sweep whose shard files are `paths`, in job order: refused (exit
/// status 2) unless the files are shards of one `sweep` that hold every job exactly once.
pub fn merge(sweep: Sweep, paths: &[PathBuf]) -> Result<Vec<RunResult>, CliError> {
    let mut first: Option<(ShardIn, &Path)> = None;
    let mut slots: Vec<Option<(RunResult, &Path)>> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for path in paths {
        let mut file = read(sweep, path)?;
        let results = std::mem::take(&mut file.results);
        counts.push(file.shard.count);
        match &first {
            Some((head, head_path)) => check_same_sweep(head, head_path, &file, path)?,
            None => slots.resize_with(file.jobs.len(), || None),
        }
        let jobs = &first.get_or_insert((file, path)).0.jobs;
        for done in results {
            if let Some((_, other)) = &slots[done.job] {
                return Err(CliError::usage(format!(
                    "job {} ({}) is in both {} and {}",
                    done.job,
                    label(&jobs[done.job]),
                    other.display(),
                    path.display()
                )));
            }
            slots[done.job] = Some((done.result, path));
        }
    }
    let Some((head, _)) = first else {
        return Err(CliError::usage("no shard files to merge"));
    };
    let missing: Vec<usize> = (0..slots.len()).filter(|j| slots[*j].is_none()).collect();
    if !missing.is_empty() {
        return Err(CliError::usage(missing_jobs(&missing, &head.jobs, &counts)));
    }
    Ok(slots
        .into_iter()
        .flatten()
        .map(|(result, _)| result)
        .collect())
}

/// The refusal for jobs no file holds, naming the first few and, when the files agree on
/// N, the shards that run them.
fn missing_jobs(missing: &[usize], jobs: &[Value], counts: &[usize]) -> String {
    let count = counts.first().filter(|n| counts.iter().all(|m| m == *n));
    let named: Vec<String> = missing
        .iter()
        .take(4)
        .map(|&j| match count {
            Some(n) => format!("job {j} ({}, shard {}/{n})", label(&jobs[j]), j % n),
            None => format!("job {j} ({})", label(&jobs[j])),
        })
        .collect();
    if let [one] = named.as_slice() {
        return format!("{one} is in none of the files");
    }
    let more = if missing.len() > named.len() {
        ", …"
    } else {
        ""
    };
    format!(
        "{} of {} jobs are in none of the files: {}{more}",
        missing.len(),
        jobs.len(),
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn place(args: &ShardArgs, pairs: &[(&str, &str)]) -> Result<Option<(usize, usize)>, String> {
        select(args, &env_of(pairs))
            .map(|s| s.map(|s| (s.index, s.count)))
            .map_err(|e| e.message().to_owned())
    }

    #[test]
    fn no_flag_and_no_scheduler_runs_the_whole_sweep() {
        assert_eq!(place(&ShardArgs::default(), &[]), Ok(None));
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        let args = ShardArgs {
            shard: Some(parse_shard("2/5").unwrap()),
            ..ShardArgs::default()
        };
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ];
        assert_eq!(place(&args, &slurm), Ok(Some((2, 5))));
    }

    #[test]
    fn a_slurm_array_starting_above_zero_gives_0_based_shards() {
        let env = [
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_MIN", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(place(&ShardArgs::default(), &env), Ok(Some((2, 4))));
        let stepped = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ];
        assert_eq!(place(&ShardArgs::default(), &stepped), Ok(Some((2, 3))));
    }

    #[test]
    fn a_slurm_array_that_is_not_contiguous_is_refused() {
        let listed = [
            ("SLURM_ARRAY_TASK_ID", "9"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ];
        let error = place(&ShardArgs::default(), &listed).unwrap_err();
        assert!(error.contains("contiguous array"), "{error}");
        let no_count = [("SLURM_ARRAY_TASK_ID", "0")];
        let error = place(&ShardArgs::default(), &no_count).unwrap_err();
        assert!(error.contains("SLURM_ARRAY_TASK_COUNT"), "{error}");
    }

    #[test]
    fn an_indexed_job_takes_its_count_from_the_flag_or_the_variable() {
        let index = [("JOB_COMPLETION_INDEX", "1")];
        let flag = ShardArgs {
            shards: Some(3),
            ..ShardArgs::default()
        };
        assert_eq!(place(&flag, &index), Ok(Some((1, 3))));
        let variable = [("JOB_COMPLETION_INDEX", "1"), (SHARDS_ENV, "2")];
        assert_eq!(place(&ShardArgs::default(), &variable), Ok(Some((1, 2))));
        let error = place(&ShardArgs::default(), &index).unwrap_err();
        assert!(
            error.contains("--shards N") && error.contains(SHARDS_ENV),
            "{error}"
        );
        let beyond = [("JOB_COMPLETION_INDEX", "2"), (SHARDS_ENV, "2")];
        assert!(place(&ShardArgs::default(), &beyond).is_err());
    }

    #[test]
    fn a_count_without_an_index_is_refused() {
        let args = ShardArgs {
            shards: Some(3),
            ..ShardArgs::default()
        };
        let error = place(&args, &[]).unwrap_err();
        assert!(error.contains("JOB_COMPLETION_INDEX"), "{error}");
    }

    #[test]
    fn shard_flags_outside_0_to_n_are_refused() {
        assert!(parse_shard("0/0").unwrap_err().contains("at least 1"));
        assert!(parse_shard("3/3").unwrap_err().contains("does not exist"));
        assert!(parse_shard("1-3").is_err());
        assert!(parse_shard("-1/3").is_err());
        assert_eq!(parse_shard("2/3").map(|s| (s.index, s.count)), Ok((2, 3)));
    }

    #[test]
    fn shards_partition_the_jobs() {
        let shards: Vec<Shard> = (0..3)
            .map(|i| Shard::new(i, 3, String::new()).unwrap())
            .collect();
        for job in 0..10 {
            assert_eq!(shards.iter().filter(|s| s.owns(job)).count(), 1);
        }
    }

    #[test]
    fn the_first_difference_names_its_path() {
        let a: Value =
            serde_json::json!({"spec": {"seed": 1, "cpus": [8]}, "policy": {"name": "base"}});
        let b: Value =
            serde_json::json!({"spec": {"seed": 2, "cpus": [8]}, "policy": {"name": "base"}});
        assert_eq!(
            first_difference(&a, &b, ""),
            Some(("spec.seed".into(), "1".into(), "2".into()))
        );
        assert_eq!(first_difference(&a, &a, ""), None);
    }
}
