//! The lock on this machine's tracefs that every test which records holds, across test
//! processes: `cargo nextest` runs each test in a process of its own, so an in-process
//! mutex alone does not keep two recordings apart. The trace crate's recording tests and
//! the CLI's live check (which includes this file by path) take the same lock file.

use std::fs::File;

/// An exclusive `flock` on the shared lock file, held until the file is dropped.
pub fn hold() -> File {
    let path = std::env::temp_dir().join("mmkit-trace-tests.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("flock {}: {e}", path.display()));
    file
}
