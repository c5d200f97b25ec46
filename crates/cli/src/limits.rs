//! Bounds on what a command line may ask for, checked before anything is allocated or run:
//! a count mistyped by a few digits is a usage error that names its flag, not a
//! `capacity overflow` panic, an abort on a 24 TB allocation or a run of days.
//!
//! Counts that size memory are bounded by this machine's memory. Each caller works out the
//! bytes its flags imply (the arithmetic is in a comment there) and [`check_memory`]
//! refuses more than `MemTotal + SwapTotal` of `/proc/meminfo`: the most Linux's default
//! overcommit heuristic (`vm.overcommit_memory` 0, `__vm_enough_memory`) lets one mapping
//! take, so anything larger fails to allocate. Under a lower address-space limit
//! (`ulimit -v`), the limit is the bound.
//!
//! Durations are bounded by [`MAX_RUN_SECONDS`], thread counts by the CPUs that run them
//! ([`check_threads`]).
//!
//! Input files are read whole by [`read_input`], which refuses a device (`/dev/zero` never
//! ends) and a file larger than this machine's RAM before reading it.
//!
//! The bounds are far above any sensible value, so only a mistake meets them.

use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

pub use mmkit_trace::machine::human_bytes;
use mmkit_trace::machine::meminfo_kbytes;

use crate::CliError;

/// The x86-64 user address space (47 bits, 128 TiB): no mapping is larger, whatever the
/// machine. The bound when `/proc/meminfo` cannot be read.
const ADDRESS_SPACE_BYTES: u64 = 1 << 47;

/// The memory this machine can give one process: RAM plus swap, in bytes.
pub fn machine_memory_bytes() -> u64 {
    let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else {
        return ADDRESS_SPACE_BYTES;
    };
    match meminfo_kbytes(&meminfo, "MemTotal:") {
        Some(ram) => {
            (ram + meminfo_kbytes(&meminfo, "SwapTotal:").unwrap_or(0)).saturating_mul(1024)
        }
        None => ADDRESS_SPACE_BYTES,
    }
}

/// This machine's RAM in bytes (`MemTotal`), or the address space's size when
/// `/proc/meminfo` cannot say.
fn machine_ram_bytes() -> u64 {
    mmkit_trace::machine::ram_bytes().unwrap_or(ADDRESS_SPACE_BYTES)
}

/// The bytes of the input file at `path`, read whole: a recording, a script, a snapshot,
/// a JSON file. Refused before anything is read, as an `InvalidInput` error that says
/// why: a character or block device, which is no such file and may never end
/// (`/dev/zero` filled memory until the kernel killed the process), and a file larger
/// than this machine's RAM, which a command that parses it whole could not hold. A pipe
/// (`<(zcat F)`) is read up to the same bound.
pub fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    read_input_within(path, machine_ram_bytes())
}

/// [`read_input`] as UTF-8 text (an `InvalidData` error if it is not).
pub fn read_input_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_input(path)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// [`read_input`] with the bound `limit` in bytes.
fn read_input_within(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileTypeExt;

    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if kind.is_char_device() || kind.is_block_device() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a device, not a file: give the path of a file",
        ));
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "larger than this machine's {} of RAM, so it cannot be read whole",
                human_bytes(u128::from(limit))
            ),
        )
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The product of `factors`, saturating: the bytes a set of counts implies, which may be
/// far beyond `u64` for a mistyped count.
pub fn product(factors: &[u128]) -> u128 {
    factors
        .iter()
        .fold(1, |acc: u128, &f| acc.saturating_mul(f))
}

/// Refuse `bytes` if this machine cannot hold them. `culprit` names the flags and says
/// what the memory is for.
pub fn check_memory(culprit: &str, bytes: u128) -> Result<(), CliError> {
    let (have, limited) = memory_bound();
    if bytes <= u128::from(have) {
        return Ok(());
    }
    let have = human_bytes(u128::from(have));
    let bound = match limited {
        true => format!("the process's address-space limit (`ulimit -v`) is {have}"),
        false => format!("this machine has {have} (RAM and swap)"),
    };
    Err(CliError::usage(format!(
        "{culprit}: that needs {} of memory and {bound}",
        human_bytes(bytes)
    )))
}

/// The most one process here may map, and whether the process's address-space limit
/// (`ulimit -v`, `RLIMIT_AS`) sets it rather than RAM and swap
/// ([`machine_memory_bytes`]): under the limit a larger heap allocation is refused, and a
/// refused one aborts the process, so the limit is a bound as the machine's memory is.
fn memory_bound() -> (u64, bool) {
    let machine = machine_memory_bytes();
    match rustix::process::getrlimit(rustix::process::Resource::As).current {
        Some(limit) if limit < machine => (limit, true),
        _ => (machine, false),
    }
}

/// The longest run a duration flag may ask for: a day. `--seconds 1e300` is a typo (it
/// panicked converting to a `Duration`), and a longer experiment is better split.
pub const MAX_RUN_SECONDS: f64 = 86_400.0;

/// `seconds` as a duration, if it is positive and at most [`MAX_RUN_SECONDS`].
pub fn check_seconds(flag: &str, seconds: f64) -> Result<Duration, CliError> {
    if !(seconds > 0.0 && seconds <= MAX_RUN_SECONDS) {
        let shown = match seconds.abs() < 1e9 {
            true => format!("{seconds}"),
            false => format!("{seconds:e}"),
        };
        return Err(CliError::usage(format!(
            "{flag} {shown} is invalid: use a number of seconds in (0, {MAX_RUN_SECONDS}]"
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Threads per CPU of this machine a run may start.
///
/// The runtime's threads spin on pageset and zone locks as the kernel's CPUs do, and a
/// thread preempted while holding one leaves its waiters spinning out their time slices.
/// Past a few dozen threads per CPU a run stretches far beyond its `--seconds` (on 2 CPUs,
/// asking for 1 s: 64 threads took 1.0 s, 256 took 2.0 s, 1000 took 10 s) and measures
/// the scheduler, not the allocator.
const THREADS_PER_CPU: u64 = 32;

/// Refuse more threads than [`THREADS_PER_CPU`] per CPU this process may run on.
pub fn check_threads(flag: &str, threads: u64) -> Result<(), CliError> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let most = cpus * THREADS_PER_CPU;
    if threads <= most {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "{flag} {threads} is too many for the {cpus} CPUs of this machine: at most {most} \
         ({THREADS_PER_CPU} per CPU; more spin on each other's locks instead of running)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_beyond_the_address_space_is_refused() {
        let message = check_memory("--count 10", 1 << 60).unwrap_err();
        assert!(
            message.message.contains("--count 10: that needs 1.0 EiB"),
            "{message:?}"
        );
        assert!(check_memory("--count 1", 4096).is_ok());
        assert_eq!(product(&[u128::MAX, 2]), u128::MAX);
    }

    #[test]
    fn an_input_is_a_file_read_whole_within_the_bound() {
        let error = read_input(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("a device"), "{error}");

        let path = std::env::temp_dir().join(format!("mmkit-read-input-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_input_within(&path, 10).unwrap(), b"0123456789");
        let error = read_input_within(&path, 9).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("larger than"), "{error}");

        // A file whose size says nothing (procfs gives 0, as a pipe does) is read up to the
        // bound and refused past it.
        let maps = Path::new("/proc/self/maps");
        assert_eq!(std::fs::metadata(maps).unwrap().len(), 0);
        let error = read_input_within(maps, 16).unwrap_err();
        assert!(error.to_string().contains("larger than"), "{error}");
        assert!(!read_input(maps).unwrap().is_empty());
    }

    #[test]
    fn durations_are_positive_and_at_most_a_day() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e300, 86_401.0] {
            assert!(check_seconds("--seconds", bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_seconds("--seconds", 0.5).unwrap(),
            Duration::from_millis(500)
        );
    }
}
