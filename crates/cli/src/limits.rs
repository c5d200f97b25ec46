//! Bounds on what a command line may ask for, checked before anything is allocated or run:
//! a count mistyped by a few digits is a usage error that names its flag, not a
//! `capacity overflow` panic, an abort on a 24 TB allocation or a run of days.
//!
//! Counts that size memory are bounded by this machine's memory. Each caller works out the
//! bytes its flags imply (the arithmetic is in a comment there) and [`check_memory`]
//! refuses more than `MemTotal + SwapTotal` of `/proc/meminfo`: the most Linux's default
//! overcommit heuristic (`vm.overcommit_memory` 0, `__vm_enough_memory`) lets one mapping
//! take, so anything larger fails to allocate.
//!
//! The bounds are far above any sensible value, so only a mistake meets them.

use crate::CliError;

/// The x86-64 user address space (47 bits, 128 TiB): no mapping is larger, whatever the
/// machine. The bound when `/proc/meminfo` cannot be read.
const ADDRESS_SPACE_BYTES: u64 = 1 << 47;

/// The memory this machine can give one process: RAM plus swap, in bytes.
pub fn machine_memory_bytes() -> u64 {
    let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else {
        return ADDRESS_SPACE_BYTES;
    };
    let kbytes = |key: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    match kbytes("MemTotal:") {
        Some(ram) => (ram + kbytes("SwapTotal:").unwrap_or(0)).saturating_mul(1024),
        None => ADDRESS_SPACE_BYTES,
    }
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
    let have = machine_memory_bytes();
    if bytes <= u128::from(have) {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "{culprit}: that needs {} of memory and this machine has {} (RAM and swap)",
        human_bytes(bytes),
        human_bytes(u128::from(have))
    )))
}

/// `1.5 GiB`, `24.0 TiB`, `12.0 EiB`.
pub fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 7] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else if value >= 1024.0 {
        format!("{value:.1e} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(24_000_000_000_000), "21.8 TiB");
        assert_eq!(human_bytes(u128::MAX), "3.0e20 EiB");
    }

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
}
