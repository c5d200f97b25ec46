//! Sharded sweeps: shards run as separate processes merge into exactly what the single run
//! prints and writes (`mmkit sim`'s table, JSON and plots; `mmkit demo`'s tables, score,
//! JSON and plots), a Slurm array's or an Indexed Job's index picks the same shard as
//! `--shard`, and shard sets that are not one whole sweep are refused, naming the job and
//! the file.

use crate::common;

use std::path::Path;

use common::{mmkit, Scratch};

/// A small sweep: four policies of the unix workload on 8 CPUs.
const SWEEP: [&str; 9] = [
    "sim",
    "--workload",
    "unix",
    "--cpus",
    "8",
    "--scale",
    "0.01",
    "--policies",
    "base,patch1,patch3,patch7",
];

/// The stdout of a successful `mmkit args`.
fn stdout_of(args: &[&str]) -> Vec<u8> {
    common::stdout_of(mmkit().args(args))
}

/// `SWEEP` with `extra` arguments.
fn sweep(extra: &[&str]) -> Vec<String> {
    SWEEP.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// Write shard `index` of `count` of `SWEEP` + `extra` to `name` in `scratch`, each in a
/// process of its own; the path.
fn shard(scratch: &Scratch, index: usize, count: usize, extra: &[&str], name: &str) -> String {
    let path = scratch.path(name);
    let shard = format!("{index}/{count}");
    let mut args = sweep(extra);
    args.extend(["--shard".into(), shard, "--shard-out".into(), path.clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(
        stdout_of(&args).is_empty(),
        "a shard written to a file prints nothing"
    );
    path
}

/// The three shards of `SWEEP` as `s0.json`, `s1.json`, `s2.json`.
fn three_shards(scratch: &Scratch) -> Vec<String> {
    (0..3)
        .map(|i| shard(scratch, i, 3, &[], &format!("s{i}.json")))
        .collect()
}

/// `mmkit args` refused with exit status 2 and one line on stderr that contains every
/// one of `culprits`; nothing on stdout.
fn refused(args: &[&str], culprits: &[&str]) {
    let output = mmkit().args(args).output().expect("mmkit runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    for culprit in culprits {
        assert!(
            stderr.contains(culprit),
            "{args:?}: {stderr} names no {culprit:?}"
        );
    }
    assert!(output.stdout.is_empty(), "{args:?} printed something");
}

/// Every file of `a` has the same bytes in `b`, and `b` has no other file.
fn same_files(a: &Path, b: &Path) {
    let names = |dir: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(a), names(b));
    assert!(!names(a).is_empty(), "{} holds files", a.display());
    for name in names(a) {
        let read = |dir: &Path| std::fs::read(dir.join(&name)).unwrap();
        let (a, b) = (read(a), read(b));
        match name.to_str() {
            Some("report.html") => same_report(&a, &b),
            _ => assert!(a == b, "{name:?} differs"),
        }
    }
}

/// Two demo reports are the same but for the command line that wrote them (a merge's
/// names its shard files), which stands on a line of its own.
fn same_report(a: &[u8], b: &[u8]) {
    let lines = |report: &[u8]| {
        let report = String::from_utf8(report.to_vec()).expect("UTF-8");
        let lines: Vec<String> = report.lines().map(str::to_owned).collect();
        let commands = lines
            .iter()
            .filter(|l| l.contains("id=\"command\""))
            .count();
        assert_eq!(commands, 1, "one command line in the report");
        lines
            .into_iter()
            .filter(|l| !l.contains("id=\"command\""))
            .collect::<Vec<_>>()
    };
    assert!(
        lines(a) == lines(b),
        "report.html differs beyond the command"
    );
}

#[test]
fn three_shards_in_separate_processes_merge_to_the_single_run() {
    let scratch = Scratch::new("shard-merge");
    let single_plots = scratch.path("single-plots");
    let merged_plots = scratch.path("merged-plots");
    let single_args = sweep(&["--json", "--plot", &single_plots]);
    let single_args: Vec<&str> = single_args.iter().map(String::as_str).collect();
    let single = stdout_of(&single_args);
    let files = three_shards(&scratch);
    let merged = stdout_of(&[
        "sim",
        "merge",
        &files[2],
        &files[0],
        &files[1],
        "--json",
        "--plot",
        &merged_plots,
    ]);
    assert!(!single.is_empty());
    assert!(
        merged == single,
        "the merged JSON differs from the single run's"
    );
    same_files(Path::new(&single_plots), Path::new(&merged_plots));
    let table = stdout_of(&SWEEP);
    let merged_table = stdout_of(&["sim", "merge", &files[0], &files[1], &files[2]]);
    assert!(
        merged_table == table,
        "the merged table differs from the single run's"
    );
}

#[test]
fn a_shard_on_stdout_is_the_shard_written_to_a_file() {
    let scratch = Scratch::new("shard-stdout");
    let file = shard(&scratch, 1, 3, &[], "s1.json");
    let args = sweep(&["--shard", "1/3"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(stdout_of(&args) == std::fs::read(file).unwrap());
}

#[test]
fn slurm_and_indexed_job_variables_pick_the_shard_the_flag_picks() {
    let flag = stdout_of(
        &sweep(&["--shard", "1/3"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let from_env = |vars: &[(&str, &str)], extra: &[&str]| {
        let output = mmkit()
            .args(sweep(extra))
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert!(output.status.success(), "{vars:?}: {:?}", output.stderr);
        output.stdout
    };
    let slurm = [
        ("SLURM_ARRAY_TASK_ID", "5"),
        ("SLURM_ARRAY_TASK_MIN", "4"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ];
    assert!(from_env(&slurm, &[]) == flag, "a Slurm array starting at 4");
    let indexed = [("JOB_COMPLETION_INDEX", "1"), ("MMKIT_SHARDS", "3")];
    assert!(from_env(&indexed, &[]) == flag, "MMKIT_SHARDS");
    let index_only = [("JOB_COMPLETION_INDEX", "1")];
    assert!(
        from_env(&index_only, &["--shards", "3"]) == flag,
        "--shards"
    );
    let both = [("JOB_COMPLETION_INDEX", "2"), ("SLURM_ARRAY_TASK_ID", "0")];
    assert!(
        from_env(&both, &["--shard", "1/3"]) == flag,
        "--shard wins over the environment"
    );
}

#[test]
fn a_shard_of_another_sweep_is_refused_naming_the_file_and_the_difference() {
    let scratch = Scratch::new("shard-other");
    let files = three_shards(&scratch);
    let other = shard(&scratch, 1, 3, &["--seed", "2"], "seed2-s1.json");
    refused(
        &["sim", "merge", &files[0], &other, &files[2]],
        &["seed2-s1.json", "another sweep", "spec.seed is 2, not 1"],
    );
    let demo_out = scratch.path("demo");
    let demo_shard = scratch.path("demo-shard.json");
    let args = [
        "demo",
        "--scale",
        "0.001",
        "--out",
        &demo_out,
        "--shard",
        "17/18",
        "--shard-out",
        &demo_shard,
    ];
    stdout_of(&args);
    refused(
        &["sim", "merge", &files[0], &demo_shard],
        &[
            "demo-shard.json",
            "a shard of `mmkit demo`, not of `mmkit sim`",
        ],
    );
    refused(
        &["demo", "--merge", &files[0], "--out", &demo_out],
        &["s0.json", "a shard of `mmkit sim`, not of `mmkit demo`"],
    );
    let not_a_shard = scratch.file(
        "single.json",
        stdout_of(
            &sweep(&["--json"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        ),
    );
    refused(
        &["sim", "merge", &not_a_shard],
        &["single.json", "not an mmkit shard file"],
    );
}

#[test]
fn a_missing_shard_is_refused_naming_the_job_and_the_shard_that_runs_it() {
    let scratch = Scratch::new("shard-missing");
    let files = three_shards(&scratch);
    refused(
        &["sim", "merge", &files[0], &files[2]],
        &["job 1 (unix/patch1, shard 1/3) is in none of the files"],
    );
    refused(
        &["sim", "merge", &files[1]],
        &[
            "3 of 4 jobs are in none of the files",
            "job 0 (unix/base, shard 0/3)",
        ],
    );
}

#[test]
fn a_duplicate_shard_is_refused_naming_the_job_and_both_files() {
    let scratch = Scratch::new("shard-duplicate");
    let files = three_shards(&scratch);
    let copy = scratch.file("copy.json", std::fs::read(&files[1]).unwrap());
    refused(
        &["sim", "merge", &files[0], &files[1], &files[2], &copy],
        &["job 1 (unix/patch1) is in both", "s1.json", "copy.json"],
    );
}

#[test]
fn shards_that_do_not_exist_are_refused_before_any_run() {
    let scratch = Scratch::new("shard-bad");
    let out = scratch.path("never.json");
    for (bad, culprit) in [
        ("3/3", "does not exist"),
        ("0/0", "at least 1"),
        ("1-3", "I/N"),
    ] {
        let args = sweep(&["--shard", bad, "--shard-out", &out]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, &["--shard", culprit]);
    }
    let args = sweep(&[]);
    for (vars, culprit) in [
        (
            &[
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_COUNT", "3"),
            ][..],
            "does not exist",
        ),
        (
            &[("JOB_COMPLETION_INDEX", "1"), ("MMKIT_SHARDS", "0")][..],
            "at least 1",
        ),
        (&[("JOB_COMPLETION_INDEX", "1")][..], "MMKIT_SHARDS"),
    ] {
        let output = mmkit()
            .args(&args)
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{vars:?}: {stderr}");
        assert!(stderr.contains(culprit), "{vars:?}: {stderr}");
        assert!(output.stdout.is_empty());
    }
    assert!(scratch.names().is_empty(), "no shard file was written");
}

#[test]
fn demo_shards_merge_to_the_single_demo() {
    let scratch = Scratch::new("shard-demo");
    let run_in = |dir: &str, args: &[&str]| {
        let dir = scratch.dir().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let output = mmkit().current_dir(&dir).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {stderr}");
        output.stdout
    };
    let demo = ["demo", "--scale", "0.001", "--out", "out", "--json"];
    let single = run_in("single", &demo);
    for i in 0..3 {
        let shard = format!("{i}/3");
        run_in(
            "merged",
            &[
                "demo", "--scale", "0.001", "--out", "shards", "--shard", &shard,
            ],
        );
    }
    let merged = run_in(
        "merged",
        &[
            "demo",
            "--merge",
            "shards/shard-2-of-3.json",
            "shards/shard-0-of-3.json",
            "shards/shard-1-of-3.json",
            "--out",
            "out",
            "--json",
        ],
    );
    assert!(
        merged == single,
        "the merged demo printed\n{}\nthe single one\n{}",
        String::from_utf8_lossy(&merged),
        String::from_utf8_lossy(&single)
    );
    same_files(
        &scratch.dir().join("single/out"),
        &scratch.dir().join("merged/out"),
    );
}

/// A shard run with `--timing` prints each of its runs' speed on standard error (it used
/// to drop the flag), and writes the same shard as without it: host time is never part
/// of a result.
#[test]
fn a_timed_shard_prints_its_runs_speed_and_writes_the_same_shard() {
    let args = sweep(&["--shard", "1/2"]);
    let plain = mmkit().args(&args).output().unwrap();
    let timed = mmkit().args(&args).arg("--timing").output().unwrap();
    assert!(plain.status.success() && timed.status.success());
    assert_eq!(plain.stdout, timed.stdout, "--timing changed the shard");
    let stderr = String::from_utf8(timed.stderr).unwrap();
    let speeds: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("speed: unix / "))
        .collect();
    // Shard 1 of 2 owns the jobs 1 and 3: patch1 and patch7.
    assert_eq!(speeds.len(), 2, "{stderr}");
    assert!(
        speeds[0].starts_with("speed: unix / patch1 on 8 CPUs: "),
        "{stderr}"
    );
    assert!(
        speeds[1].starts_with("speed: unix / patch7 on 8 CPUs: "),
        "{stderr}"
    );
    assert!(
        !String::from_utf8(plain.stderr).unwrap().contains("speed: "),
        "speed lines only with --timing"
    );
}

/// A shard file whose result names a machine of no CPUs is refused: merged, its plots'
/// lock wait divided by 0 CPUs, and plotters never returned on the infinite axis.
#[test]
fn a_result_on_a_machine_of_no_cpus_is_a_damaged_shard() {
    let scratch = Scratch::new("shard-no-cpus");
    let files = three_shards(&scratch);
    for field in ["sockets", "cpus_per_socket"] {
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
        json["results"][0]["result"]["machine"][field] = 0.into();
        let damaged = scratch.file(
            &format!("no-{field}.json"),
            serde_json::to_vec(&json).unwrap(),
        );
        let plots = scratch.path("plots");
        refused(
            &[
                "sim", "merge", &damaged, &files[1], &files[2], "--plot", &plots,
            ],
            &[&format!("no-{field}.json"), "damaged", "no CPUs"],
        );
    }
}
