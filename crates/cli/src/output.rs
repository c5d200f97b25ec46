//! Output: the JSON every `--json` report prints, and output paths, checked before any work: a run that would fail to write its results
//! fails at once, naming the flag and the path, and changes nothing (the checks create
//! no directory and leave no file behind).
//!
//! A directory flag (`--out`, `--plot`, `--dir`) takes an existing directory or a new one
//! whose nearest existing ancestor is a directory; a file flag (`--save-json`) takes a
//! path that is not a directory, in an existing directory. Either must be writable, which
//! only trying says for sure (permissions, read-only mounts, `/proc`): the check creates
//! and removes a probe file.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::CliError;

/// `value` as pretty JSON (what `--json` prints and `--save-json` writes).
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value).map_err(|e| CliError::failed(e.to_string()))
}

/// Print `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    println!("{}", json(value)?);
    Ok(())
}

/// Check that the directory `dir` given to `flag` exists or can be created, and can be
/// written.
pub fn check_dir(flag: &str, dir: &Path) -> Result<(), CliError> {
    let refuse = |why: String| CliError::usage(format!("{flag} {}: {why}", dir.display()));
    if dir.is_dir() {
        return probe(dir).map_err(refuse);
    }
    if dir.exists() {
        return Err(refuse("exists and is not a directory".into()));
    }
    let ancestor = existing_ancestor(dir);
    if !ancestor.is_dir() {
        return Err(refuse(format!("{} is not a directory", ancestor.display())));
    }
    probe(&ancestor).map_err(refuse)
}

/// [`check_dir`] when the flag was given.
pub fn check_optional_dir(flag: &str, dir: Option<&Path>) -> Result<(), CliError> {
    dir.map_or(Ok(()), |dir| check_dir(flag, dir))
}

/// Check that the file `file` given to `flag` can be written: not a directory, in an
/// existing, writable directory.
pub fn check_file(flag: &str, file: &Path) -> Result<(), CliError> {
    let refuse = |why: String| CliError::usage(format!("{flag} {}: {why}", file.display()));
    if file.is_dir() {
        return Err(refuse("is a directory".into()));
    }
    let parent = parent_or_current(file);
    if !parent.is_dir() {
        return Err(refuse(format!(
            "{} is not an existing directory",
            parent.display()
        )));
    }
    match file.exists() {
        // Opening for writing without truncating changes nothing.
        true => std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .map(drop)
            .map_err(|e| refuse(e.to_string())),
        false => probe(&parent).map_err(refuse),
    }
}

/// [`check_file`] when the flag was given.
pub fn check_optional_file(flag: &str, file: Option<&Path>) -> Result<(), CliError> {
    file.map_or(Ok(()), |file| check_file(flag, file))
}

/// The directory `path` is in; `.` for a bare name.
fn parent_or_current(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The nearest ancestor of `path` that exists (`.` for a relative path none of whose
/// ancestors exist).
fn existing_ancestor(path: &Path) -> PathBuf {
    path.ancestors()
        .skip(1)
        .find(|a| !a.as_os_str().is_empty() && a.exists())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Create and remove a file in `dir`: whether this process can write there.
fn probe(dir: &Path) -> Result<(), String> {
    let file = dir.join(format!(".mmkit-write-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    std::fs::remove_file(&file).map_err(|e| format!("{}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mmkit-output-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_file_where_a_directory_goes_is_refused_and_nothing_is_created() {
        let dir = scratch("dir");
        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        let error = check_dir("--out", &file).unwrap_err();
        assert!(error.message.contains("--out"), "{error:?}");
        assert!(error.message.contains("not a directory"), "{error:?}");
        assert!(check_dir("--out", &file.join("below")).is_err());
        let new = dir.join("new/deeper");
        check_dir("--out", &new).unwrap();
        assert!(!dir.join("new").exists(), "the check creates nothing");
        let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(entries.len(), 1, "no probe file is left behind");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_directory_where_a_file_goes_is_refused() {
        let dir = scratch("file");
        let error = check_file("--save-json", &dir).unwrap_err();
        assert!(error.message.contains("is a directory"), "{error:?}");
        assert!(check_file("--save-json", &dir.join("missing/x.json")).is_err());
        check_file("--save-json", &dir.join("x.json")).unwrap();
        assert!(!dir.join("x.json").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
