//! Tells the CLI which git commit it is built from, for `mmkit demo`'s report.html, as the
//! environment variable `MMKIT_GIT_COMMIT` at compile time.
//!
//! Only when the workspace is itself the top of a git checkout: a tarball, a copy vendored
//! inside another repository, or a machine without git builds the same and the report gives
//! the version alone. Nothing here can fail the build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The trimmed output of `git ARGS` run in the crate's folder, if git ran and succeeded.
fn git(manifest_dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(manifest_dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned())
}

/// Ask cargo to run this script again when `path` changes. A path that does not exist
/// would make cargo run it on every build, so only existing ones are named.
fn rerun_if_changed(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Some(manifest_dir) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return;
    };
    // crates/cli → the workspace root.
    let Ok(workspace) = manifest_dir.join("../..").canonicalize() else {
        return;
    };
    let Some(top) = git(&manifest_dir, &["rev-parse", "--show-toplevel"]) else {
        return;
    };
    if Path::new(&top).canonicalize().ok() != Some(workspace) {
        return;
    }
    let Some(commit) = git(&manifest_dir, &["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    // HEAD moves when a branch is checked out (HEAD changes) or committed to (the branch's
    // ref changes: its loose file, or, for a packed ref, the folder its first loose file
    // will appear in; not the folder always, or every other branch's commit reruns this).
    let git_path = |name: &str| {
        git(&manifest_dir, &["rev-parse", "--git-path", name]).map(|p| manifest_dir.join(p))
    };
    for name in ["HEAD", "packed-refs"] {
        if let Some(path) = git_path(name) {
            rerun_if_changed(&path);
        }
    }
    if let Some(branch) = git(&manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git_path(&branch) {
            match path.parent() {
                Some(folder) if !path.exists() => rerun_if_changed(folder),
                _ => rerun_if_changed(&path),
            }
        }
    }
    println!("cargo:rustc-env=MMKIT_GIT_COMMIT={commit}");
}
