//! Set-up the CLI's test files share: the binary, what a successful run printed, the
//! trace crate's recordings, and a scratch folder of input files.
//!
//! Each test binary compiles this module and uses a part of it, so what one binary leaves
//! unused is not dead: `expect` would fail in the binaries that use everything.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the shared set-up"
)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The variables from which `mmkit sim` and `mmkit demo` take a shard when no `--shard`
/// is given: Slurm job arrays' and Kubernetes Indexed Jobs'.
pub const SHARD_ENV: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
    "SLURM_ARRAY_TASK_COUNT",
    "JOB_COMPLETION_INDEX",
    "MMKIT_SHARDS",
];

/// The `mmkit` binary of this build, without the scheduler's shard variables, so that a
/// test run inside a Slurm array or an Indexed Job still runs whole sweeps.
pub fn mmkit() -> Command {
    let mut command = Command::cargo_bin("mmkit").expect("the mmkit binary is built");
    for name in SHARD_ENV {
        command.env_remove(name);
    }
    command
}

/// The `mmkit` binary with `args`, as [`mmkit`] runs it, but in a process whose address
/// space is limited to `limit_kib` KiB (`sh`'s `ulimit -v`, `RLIMIT_AS`): what a host
/// with less memory, or a user's limit, would give it.
pub fn mmkit_under_address_limit(limit_kib: &str, args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg("ulimit -v \"$0\" && exec \"$@\"")
        .arg(limit_kib)
        .arg(env!("CARGO_BIN_EXE_mmkit"))
        .args(args);
    for name in SHARD_ENV {
        command.env_remove(name);
    }
    command.output().expect("sh runs")
}

/// A folder of its own under the temp dir for one test, removed when dropped.
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// An empty folder named after `test` and this process.
    pub fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mmkit-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temp dir is writable");
        Scratch { dir }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `name` in the folder, written with `contents`; its path as a string.
    pub fn file(&self, name: &str, contents: impl AsRef<[u8]>) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).expect("the scratch folder is writable");
        path.display().to_string()
    }

    /// `name` in the folder, not created; its path as a string.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The names in the folder, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .expect("the scratch folder exists")
            .map(|entry| {
                entry
                    .expect("readable")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What `command` printed on stdout; it must succeed (a failure shows its stderr).
pub fn stdout_of(command: &mut Command) -> Vec<u8> {
    let output = command.output().expect("mmkit runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?}: {stderr}");
    output.stdout
}

/// What `command` printed on stdout, as JSON; it must succeed.
pub fn json_of(command: &mut Command) -> serde_json::Value {
    serde_json::from_slice(&stdout_of(command)).expect("stdout is JSON")
}

/// A recording of the trace crate's test data (`crates/trace/tests/data`).
pub fn trace_data(name: &str) -> String {
    format!("{}/../trace/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}
