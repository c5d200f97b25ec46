//! A service on `mmkit-runtime`, written from mmkit's documentation alone, as a crate that
//! takes mmkit from crates.io would be.
//!
//! It runs four parts on one `PagePool`, then checks the books, and exits non-zero on any
//! mismatch:
//!
//! - [`workers`]: four threads allocate and free blocks of mixed orders, each block filled
//!   with a canary that is checked before it is freed; per-CPU counters
//!   (`PerCpu<AtomicU64>`) count the calls, and their sums must equal the threads' own
//!   counts.
//! - [`recycling`]: a `PoolCache` owned by one thread hands pages to two others, which give
//!   them back through their `Recycler`s.
//! - [`zeroing`]: `__GFP_ZERO` blocks are zero although the pages were dirty when freed;
//!   a cache asked for zeroed pages is refused rather than ignored.
//! - At the end, `verify()` of the page pool and of the percpu pool: nothing allocated,
//!   every page accounted for.
//!
//! Usage: `oot-service [--rounds N] [--damage-one-canary]`. `--damage-one-canary` writes
//! into one block behind its canary's back, to show that the check catches it (exit 1).
//! Bad arguments: one line on stderr, exit 2.

mod recycling;
mod rng;
mod workers;
mod zeroing;

use std::process::ExitCode;

use mmkit_runtime::PagePool;
use mmkit_runtime::PercpuPool;

/// Threads that allocate and free at once, and the CPUs of the pools.
const THREADS: usize = 4;

/// Memory of the page pool: 128 MiB.
const POOL_BYTES: usize = 128 << 20;

/// What the command line asks for.
#[derive(Clone, Copy, Debug)]
struct Args {
    /// Operations each worker thread makes.
    rounds: u64,
    /// Damage one canary on purpose.
    damage_one_canary: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        rounds: 4_000,
        damage_one_canary: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                let value = args.next().ok_or("--rounds needs a number")?;
                parsed.rounds = match value.parse() {
                    Ok(rounds) if rounds > 0 => rounds,
                    _ => return Err(format!("--rounds takes a positive number, not {value:?}")),
                };
            }
            "--damage-one-canary" => parsed.damage_one_canary = true,
            other => return Err(format!("unknown argument {other:?} (try --rounds N)")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("oot-service: {message}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => {
            println!("oot-service: every check passed");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("oot-service: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let cpus = THREADS as u32;
    let pool = PagePool::builder()
        .memory_bytes(POOL_BYTES)
        .cpus(cpus)
        .build()
        .map_err(|error| format!("page pool: {error}"))?;
    let percpu = PercpuPool::new(THREADS).map_err(|error| format!("percpu pool: {error}"))?;

    let totals = workers::run(&pool, &percpu, args.rounds, args.damage_one_canary)?;
    println!(
        "workers: {} blocks ({} pages, {} zeroed) allocated and freed by {THREADS} threads, \
         every canary intact; per-CPU counters agree",
        totals.blocks, totals.pages, totals.zeroed
    );
    let recycled = recycling::run(&pool)?;
    println!(
        "PoolCache: {} pages allocated, {} recycled by other threads",
        recycled.allocs, recycled.recycled
    );
    let zeroed = zeroing::run(&pool)?;
    println!("__GFP_ZERO: {zeroed} blocks zero after their pages were dirtied and freed");

    let census = pool
        .verify()
        .map_err(|error| format!("page pool verify: {error}"))?;
    let allocated: u64 = census.iter().map(|zone| zone.allocated).sum();
    if allocated != 0 {
        return Err(format!("{allocated} pages still allocated at the end"));
    }
    percpu
        .verify()
        .map_err(|error| format!("percpu pool verify: {error}"))?;
    println!("verify: every page of the pool free or cached, none allocated");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_args;

    fn parse(args: &[&str]) -> Result<super::Args, String> {
        parse_args(args.iter().map(|arg| arg.to_string()))
    }

    #[test]
    fn rounds_must_be_a_positive_number() {
        assert_eq!(parse(&["--rounds", "5"]).unwrap().rounds, 5);
        assert!(parse(&["--rounds", "0"]).is_err());
        assert!(parse(&["--rounds", "many"]).is_err());
        assert!(parse(&["--rounds"]).is_err());
        assert!(parse(&["--threads", "4"]).is_err());
    }
}
