//! `mmkit percpu test --live`: the percpu_test loop of the partial-depopulation thread on
//! this machine's kernel, to set the model's figures beside the real ones.
//!
//! Under a directory of its own in the memory cgroup hierarchy (cgroup v1's `memory`
//! mount, or a cgroup2 mount whose root hands the memory controller down), it creates
//! `cg_i` and `cg_i_j` (i = 1 … outer, j = 1 … inner) as siblings, moves a short-lived
//! process into each (so every memcg has had a task and charges), removes the `cg_i_j`,
//! waits `--settle-seconds` (the script's `sleep 10`), and reads `Percpu:` from
//! /proc/meminfo before, after the creation, right after and after the wait, and after
//! removing the rest. /proc/cgroups' count of memory cgroups beside each reading shows
//! the removed ones that are still dying (offline memcgs waiting for RCU or for their
//! last charge).
//!
//! Root only: without it the command says it skipped and does nothing. Every cgroup it
//! made is removed when it ends, also on an error and on Ctrl-C, SIGTERM or SIGHUP
//! (caught as `mmkit trace record` catches them, with ctrlc's `termination` feature, so
//! the loops stop at the next cgroup and [`CgroupTree`]'s `Drop` removes what exists). A
//! directory left by a run that was killed (SIGKILL) is removed by the next run.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::CliError;

/// What `--live` takes from the command line.
pub struct LiveArgs {
    pub outer: usize,
    pub inner: usize,
    pub settle_seconds: f64,
    pub json: bool,
}

/// `MEM_CGROUP_ID_MAX`: memcg ids are 16 bits, so no kernel holds more memory cgroups.
const MEM_CGROUP_ID_MAX: u128 = 65_535;

/// The name of our directory under the hierarchy's root: the prefix and our pid.
const DIR_PREFIX: &str = "mmkit-percpu-";

/// Where memory cgroups can be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryHierarchy {
    /// The mount point (the root cgroup).
    pub root: PathBuf,
    /// 1 (the v1 `memory` controller's own hierarchy) or 2.
    pub version: u8,
}

/// The memory cgroup hierarchy from /proc/self/mounts: a v1 `cgroup` mount with the
/// `memory` option, else a `cgroup2` mount whose root lists `memory` in
/// `cgroup.subtree_control` (its children get the controller). `read` reads a file.
pub fn find_memory_hierarchy(
    mounts: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Result<MemoryHierarchy, String> {
    let entries: Vec<(&str, &str, &str)> = mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 4).then(|| (fields[1], fields[2], fields[3]))
        })
        .collect();
    if let Some((root, _, _)) = entries
        .iter()
        .find(|(_, fs, options)| *fs == "cgroup" && options.split(',').any(|o| o == "memory"))
    {
        return Ok(MemoryHierarchy {
            root: PathBuf::from(root),
            version: 1,
        });
    }
    let mut why = "no cgroup v1 memory controller and no cgroup2 mount".to_string();
    for (root, _, _) in entries.iter().filter(|(_, fs, _)| *fs == "cgroup2") {
        let root = PathBuf::from(root);
        let has = |file: &str| {
            read(&root.join(file))
                .is_some_and(|text| text.split_whitespace().any(|c| c == "memory"))
        };
        if has("cgroup.subtree_control") {
            return Ok(MemoryHierarchy { root, version: 2 });
        }
        why = if has("cgroup.controllers") {
            format!(
                "cgroup2 at {} has the memory controller but does not enable it for children \
                 (echo +memory > {}/cgroup.subtree_control)",
                root.display(),
                root.display()
            )
        } else {
            format!(
                "no cgroup v1 memory controller, and cgroup2 at {} has no memory controller",
                root.display()
            )
        };
    }
    Err(why)
}

/// The number of CPUs in a list like `0-3,8,10-11` (/sys/devices/system/cpu/possible).
pub fn count_cpu_list(text: &str) -> Option<usize> {
    let mut count = 0;
    for range in text.trim().split(',').filter(|r| !r.is_empty()) {
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let cpu = range.parse::<usize>().ok()?;
                (cpu, cpu)
            }
        };
        count += last.checked_sub(first)? + 1;
    }
    (count > 0).then_some(count)
}

/// The `Percpu:` line of /proc/meminfo, kB.
fn percpu_kb() -> Result<u64, CliError> {
    let meminfo = fs::read_to_string("/proc/meminfo")
        .map_err(|e| CliError::failed(format!("/proc/meminfo: {e}")))?;
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("Percpu:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| CliError::failed("/proc/meminfo has no Percpu: line"))
}

/// /proc/cgroups' `num_cgroups` of the memory controller: live and dying memory cgroups.
fn memory_cgroups() -> Option<u64> {
    let text = fs::read_to_string("/proc/cgroups").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.first() == Some(&"memory"))
            .then(|| fields.get(2)?.parse().ok())
            .flatten()
    })
}

/// Set by SIGINT, SIGTERM or SIGHUP once [`install_signal_handler`] ran; the loops stop
/// at the next cgroup and the tree is removed.
fn interrupted() -> &'static AtomicBool {
    static FLAG: AtomicBool = AtomicBool::new(false);
    &FLAG
}

fn install_signal_handler() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // A handler set before (none in this process) keeps working; ours is then moot.
        let _ = ctrlc::set_handler(|| interrupted().store(true, Ordering::SeqCst));
    });
}

fn check_interrupt() -> Result<(), CliError> {
    if interrupted().load(Ordering::SeqCst) {
        return Err(CliError::failed(
            "interrupted: every cgroup this run made was removed",
        ));
    }
    Ok(())
}

/// The cgroups this run made, removed (children first) when dropped.
struct CgroupTree {
    dir: PathBuf,
    /// Made under `dir`, in creation order; removed ones are taken out.
    children: Vec<PathBuf>,
}

impl CgroupTree {
    /// Make our directory under the hierarchy's root; on cgroup2, hand the memory
    /// controller down to its children.
    fn new(hierarchy: &MemoryHierarchy) -> Result<CgroupTree, CliError> {
        let dir = hierarchy
            .root
            .join(format!("{DIR_PREFIX}{}", std::process::id()));
        fs::create_dir(&dir)
            .map_err(|e| CliError::failed(format!("mkdir {}: {e}", dir.display())))?;
        let tree = CgroupTree {
            dir,
            children: Vec::new(),
        };
        if hierarchy.version == 2 {
            let control = tree.dir.join("cgroup.subtree_control");
            fs::write(&control, "+memory")
                .map_err(|e| CliError::failed(format!("{}: {e}", control.display())))?;
        }
        Ok(tree)
    }

    fn mkdir(&mut self, name: &str) -> Result<PathBuf, CliError> {
        let path = self.dir.join(name);
        fs::create_dir(&path)
            .map_err(|e| CliError::failed(format!("mkdir {}: {e}", path.display())))?;
        self.children.push(path.clone());
        Ok(path)
    }

    /// Remove the children for which `which` says so, in reverse creation order; on an
    /// error or a signal the rest stay listed (and `Drop` removes them).
    fn rmdir_where(&mut self, which: impl Fn(&Path) -> bool) -> Result<(), CliError> {
        let mut kept = Vec::with_capacity(self.children.len());
        let mut result = Ok(());
        while let Some(path) = self.children.pop() {
            if result.is_ok() && which(&path) {
                result = check_interrupt().and_then(|()| {
                    rmdir_retrying(&path)
                        .map_err(|e| CliError::failed(format!("rmdir {}: {e}", path.display())))
                });
                if result.is_ok() {
                    continue;
                }
            }
            kept.push(path);
        }
        kept.reverse();
        self.children = kept;
        result
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        let mut left = Vec::new();
        for path in self.children.drain(..).rev().chain([self.dir.clone()]) {
            if let Err(e) = rmdir_retrying(&path) {
                left.push(format!("{} ({e})", path.display()));
            }
        }
        if !left.is_empty() {
            eprintln!(
                "mmkit: warning: could not remove cgroups: {}",
                left.join(", ")
            );
        }
    }
}

/// `rmdir` a cgroup; a task that has just exited may keep it busy for a moment.
fn rmdir_retrying(path: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(EBUSY) && tries < 200 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `EBUSY` (16 on every Linux architecture).
const EBUSY: i32 = 16;

/// Remove what runs killed by SIGKILL left: our directories whose pid no longer runs.
fn remove_stale(hierarchy: &MemoryHierarchy) {
    let Ok(entries) = fs::read_dir(&hierarchy.root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_err() || Path::new("/proc").join(pid).exists() {
            continue;
        }
        let dir = entry.path();
        let children: Vec<PathBuf> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        let removed =
            children.iter().all(|c| rmdir_retrying(c).is_ok()) && rmdir_retrying(&dir).is_ok();
        if removed {
            eprintln!(
                "mmkit: removed {} and its {} cgroups, left by a run that was killed",
                dir.display(),
                children.len()
            );
        }
    }
}

/// Move a short-lived process into `cgroup`: `cat` waiting on its stdin is moved, then its
/// stdin is closed and it exits there.
fn visit(cgroup: &Path) -> Result<(), CliError> {
    let mut child = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            CliError::failed(format!(
                "cannot start a process to put in the cgroups (cat): {e}"
            ))
        })?;
    let procs = cgroup.join("cgroup.procs");
    let moved = fs::write(&procs, child.id().to_string());
    drop(child.stdin.take());
    let _ = child.wait();
    moved.map_err(|e| CliError::failed(format!("{}: {e}", procs.display())))
}

/// Sleep `seconds`, waking to look at the signal flag.
fn settle(seconds: f64) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    loop {
        check_interrupt()?;
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(100)));
    }
}

/// One reading.
#[derive(Clone, Copy, Debug, Serialize)]
struct LiveReading {
    /// `Percpu:`, kB.
    percpu_kb: u64,
    /// /proc/cgroups' memory `num_cgroups` (live and dying), if readable.
    memory_cgroups: Option<u64>,
    /// Seconds since the run started.
    seconds: f64,
}

#[derive(Serialize)]
struct LiveReport {
    kernel: String,
    hierarchy: PathBuf,
    cgroup_version: u8,
    possible_cpus: Option<usize>,
    outer: usize,
    inner: usize,
    cgroups: usize,
    settle_seconds: f64,
    before: LiveReading,
    after_creation: LiveReading,
    right_after_deletion: LiveReading,
    after_deletion: LiveReading,
    after_removing_all: LiveReading,
    /// (after creation − before) / cgroups, bytes.
    bytes_per_cgroup: f64,
}

/// Run the loop on this machine, or say why it cannot.
pub fn run(args: &LiveArgs) -> Result<(), CliError> {
    if !args.settle_seconds.is_finite() || !(0.0..=3600.0).contains(&args.settle_seconds) {
        return Err(CliError::usage("--settle-seconds must be 0 to 3600"));
    }
    let cgroups = crate::limits::product(&[args.outer as u128, args.inner as u128 + 1]);
    if cgroups > MEM_CGROUP_ID_MAX {
        return Err(CliError::usage(format!(
            "--outer {} × (--inner {} + 1) = {cgroups} memory cgroups: a kernel holds at most \
             {MEM_CGROUP_ID_MAX} (MEM_CGROUP_ID_MAX)",
            args.outer, args.inner
        )));
    }
    if !mmkit_trace::record::is_root() {
        return skip(args.json, "not running as root (it creates memory cgroups)");
    }
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let hierarchy = match find_memory_hierarchy(&mounts, |p| fs::read_to_string(p).ok()) {
        Ok(hierarchy) => hierarchy,
        Err(why) => return skip(args.json, &why),
    };
    install_signal_handler();
    remove_stale(&hierarchy);
    let report = measure(args, &hierarchy, cgroups as usize)?;
    print(&report, args.json)
}

fn skip(json: bool, why: &str) -> Result<(), CliError> {
    if json {
        println!("{}", serde_json::json!({ "skipped": why }));
    } else {
        println!("percpu test --live: skipped: {why}");
    }
    Ok(())
}

fn measure(
    args: &LiveArgs,
    hierarchy: &MemoryHierarchy,
    cgroups: usize,
) -> Result<LiveReport, CliError> {
    let start = Instant::now();
    let read = || -> Result<LiveReading, CliError> {
        Ok(LiveReading {
            percpu_kb: percpu_kb()?,
            memory_cgroups: memory_cgroups(),
            seconds: start.elapsed().as_secs_f64(),
        })
    };
    let before = read()?;
    let mut tree = CgroupTree::new(hierarchy)?;
    for i in 1..=args.outer {
        for name in std::iter::once(format!("cg_{i}"))
            .chain((1..=args.inner).map(|j| format!("cg_{i}_{j}")))
        {
            check_interrupt()?;
            let path = tree.mkdir(&name)?;
            visit(&path)?;
        }
    }
    let after_creation = read()?;
    let is_inner = |path: &Path| {
        path.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.matches('_').count() == 2)
    };
    tree.rmdir_where(is_inner)?;
    let right_after_deletion = read()?;
    settle(args.settle_seconds)?;
    let after_deletion = read()?;
    tree.rmdir_where(|_| true)?;
    drop(tree);
    settle(args.settle_seconds)?;
    let after_removing_all = read()?;
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let possible_cpus = fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|text| count_cpu_list(&text));
    Ok(LiveReport {
        kernel,
        hierarchy: hierarchy.root.clone(),
        cgroup_version: hierarchy.version,
        possible_cpus,
        outer: args.outer,
        inner: args.inner,
        cgroups,
        settle_seconds: args.settle_seconds,
        bytes_per_cgroup: (after_creation.percpu_kb as f64 - before.percpu_kb as f64) * 1024.0
            / cgroups as f64,
        before,
        after_creation,
        right_after_deletion,
        after_deletion,
        after_removing_all,
    })
}

fn print(report: &LiveReport, json: bool) -> Result<(), CliError> {
    if json {
        return crate::output::print_json(report);
    }
    println!(
        "percpu_test --live: {} outer x {} inner = {} memory cgroups, a process in each, under {} \
         (cgroup v{}); Linux {}, {} possible CPUs",
        report.outer,
        report.inner,
        report.cgroups,
        report.hierarchy.display(),
        report.cgroup_version,
        report.kernel,
        report
            .possible_cpus
            .map_or("?".to_string(), |n| n.to_string())
    );
    let settle = report.settle_seconds;
    for (label, reading) in [
        ("before".to_string(), report.before),
        ("after creation".to_string(), report.after_creation),
        (
            "right after deleting inner".to_string(),
            report.right_after_deletion,
        ),
        (
            format!("after deleting inner + {settle} s"),
            report.after_deletion,
        ),
        (
            format!("after removing all + {settle} s"),
            report.after_removing_all,
        ),
    ] {
        println!(
            "Percpu:     {:>10} kB   memory cgroups {:>7}   ({label}, {:.1} s)",
            reading.percpu_kb,
            reading
                .memory_cgroups
                .map_or("?".to_string(), |n| n.to_string()),
            reading.seconds
        );
    }
    let cpus = report.possible_cpus.unwrap_or(1) as f64;
    println!(
        "created: {:.0} bytes of Percpu: per cgroup ({:.0} per CPU); the model of this kernel: \
         mmkit percpu test --kernel linux-6.18 --outer {} --inner {}",
        report.bytes_per_cgroup,
        report.bytes_per_cgroup / cpus,
        report.outer,
        report.inner
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTS: &str = "\
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
";

    #[test]
    fn the_v1_memory_controller_is_preferred() {
        let found = find_memory_hierarchy(V1_MOUNTS, |_| None).unwrap();
        assert_eq!(found.root, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(found.version, 1);
    }

    #[test]
    fn cgroup2_must_hand_memory_down() {
        let mounts = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        let with = |controllers: &'static str, subtree: &'static str| {
            move |path: &Path| {
                Some(
                    if path.ends_with("cgroup.controllers") {
                        controllers
                    } else {
                        subtree
                    }
                    .to_string(),
                )
            }
        };
        let found =
            find_memory_hierarchy(mounts, with("cpu io memory pids", "cpu memory")).unwrap();
        assert_eq!(
            (found.root.as_path(), found.version),
            (Path::new("/sys/fs/cgroup"), 2)
        );
        let err = find_memory_hierarchy(mounts, with("cpu io memory", "cpu")).unwrap_err();
        assert!(err.contains("does not enable it for children"), "{err}");
        let err = find_memory_hierarchy(mounts, with("cpu io", "")).unwrap_err();
        assert!(err.contains("has no memory controller"), "{err}");
        let err = find_memory_hierarchy("proc /proc proc rw 0 0\n", |_| None).unwrap_err();
        assert!(err.contains("no cgroup2 mount"), "{err}");
    }

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list(""), None);
    }
}
