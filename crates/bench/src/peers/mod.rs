//! Every allocator the benchmarks run, mmkit's own entries included, and the adapters
//! that make each a [`Contestant`](crate::contestant::Contestant).
//!
//! This is the bench crate's second place with `unsafe` (the first is [`crate::tsc`]):
//! the peers' APIs are `unsafe` (`GlobalAlloc`, talc's `claim`, mmkit's `free_raw`), and a
//! block's bytes are a slice made from a raw pointer. Each adapter module keeps its own
//! `unsafe`, with the invariant of its block type stated on the type.
//!
//! | name | what |
//! |---|---|
//! | `mmkit` | `PagePool::alloc_raw` + `free_raw` (v6.7 policy) |
//! | `mmkit-bulk` | `PagePool::alloc_bulk_list` + `free_batch`, order 0 only |
//! | `mmkit-handle` | `PagePool::alloc_gfp` → `PageBlock`, freed on drop |
//! | `mmkit-cache` | `PoolCache` per thread (page_pool-style recycling over the bulk API, not the PCP path), order 0 only |
//! | `buddy` | `buddy_system_allocator::LockedFrameAllocator` over an arena |
//! | `talc` | `talc::TalcLock` over an arena |
//! | `mimalloc`, `jemalloc`, `snmalloc`, `system` | `GlobalAlloc::alloc(4096 << order, align 4096)` |
//!
//! Every adapter's `alloc` and `free` is `#[inline(always)]`, so that no contestant pays
//! a call the others do not: whether LLVM inlined an adapter into the harness's loop was
//! its own choice, and one that was left a call returned its block through memory (for
//! `mmkit-cache`, a store-forwarding stall per allocation: ≈ 13 ns instead of ≈ 3).
//! What the adapter calls (the allocator itself) is inlined or not as it is built. One
//! exception, against mmkit's own interest only: `mmkit-cache`'s `free` is plain
//! `#[inline]` (see there for the measurement).
//!
//! And two reference rows of `pagealloc` that are not contestants ([`floor`]): `floor:
//! spinlock` and `floor: lifo`, the cost of a bare LIFO of pfns with and without one
//! lock per operation. They count in no target and are not in `threads`.

pub mod buddy;
pub mod floor;
pub mod global_alloc;
pub mod mmkit;
pub mod mmkit_cache;
pub mod talc;

use std::alloc::System;

use crate::runner::{Entry, Runner};
use crate::BenchError;

/// Every contestant's name, in report order. mmkit's entries come first; `mmkit` is the
/// reference the ratios divide by.
pub const NAMES: &[&str] = &[
    "mmkit",
    "mmkit-bulk",
    "mmkit-handle",
    "mmkit-cache",
    "buddy",
    "talc",
    "mimalloc",
    "jemalloc",
    "snmalloc",
    "system",
];

/// The reference for ratios.
pub const REFERENCE: &str = "mmkit";

/// Whether `name` is a reference row (a floor), not an allocator: it counts in no target.
pub fn is_floor(name: &str) -> bool {
    floor::NAMES.contains(&name)
}

/// Names of peers left out of this build (their crate's feature is off).
pub fn not_built() -> Vec<&'static str> {
    let mut out = Vec::new();
    if cfg!(not(feature = "mimalloc")) {
        out.push("mimalloc");
    }
    if cfg!(not(feature = "jemalloc")) {
        out.push("jemalloc");
    }
    if cfg!(not(feature = "snmalloc")) {
        out.push("snmalloc");
    }
    out
}

/// Names this build can run, in report order.
pub fn available() -> Vec<&'static str> {
    let missing = not_built();
    NAMES
        .iter()
        .copied()
        .filter(|n| !missing.contains(n))
        .collect()
}

/// How to build the contestants of one benchmark.
#[derive(Clone, Copy, Debug)]
pub struct BuildParams {
    /// Arena size of mmkit's pools, talc and the frame allocator.
    pub arena_bytes: usize,
    /// mmkit's pagesets: one per benchmark thread.
    pub cpus: u32,
}

/// Build the contestant called `name`.
pub fn build(name: &str, params: &BuildParams) -> Result<Box<dyn Runner>, BenchError> {
    let failed = |e: String| BenchError::new(format!("cannot set up {name}: {e}"));
    if let Some(kind) = floor::FloorKind::from_name(name) {
        return Ok(Box::new(
            floor::Floor::new(kind, params.arena_bytes).map_err(failed)?,
        ));
    }
    let runner: Box<dyn Runner> = match name {
        "mmkit" | "mmkit-bulk" => {
            let contestant = mmkit::Mmkit::new(params.arena_bytes, params.cpus)
                .map_err(|e| failed(e.to_string()))?;
            let high_max = high_max(contestant.pool());
            Box::new(Entry {
                name: if name == "mmkit" {
                    "mmkit"
                } else {
                    "mmkit-bulk"
                },
                contestant,
                bulk: name == "mmkit-bulk",
                pageset_high_max: high_max,
            })
        }
        "mmkit-handle" => {
            let contestant = mmkit::MmkitHandle::new(params.arena_bytes, params.cpus)
                .map_err(|e| failed(e.to_string()))?;
            entry("mmkit-handle", contestant)
        }
        "mmkit-cache" => Box::new(
            mmkit_cache::CacheEntry::new(params.arena_bytes, params.cpus)
                .map_err(|e| failed(e.to_string()))?,
        ),
        "buddy" => entry(
            "buddy",
            buddy::Buddy::new(params.arena_bytes).map_err(failed)?,
        ),
        "talc" => entry("talc", talc::Talc::new(params.arena_bytes).map_err(failed)?),
        "system" => entry(
            "system",
            global_alloc::GlobalAllocPeer::new(System, "system allocator (glibc malloc)"),
        ),
        #[cfg(feature = "mimalloc")]
        "mimalloc" => entry(
            "mimalloc",
            global_alloc::GlobalAllocPeer::new(
                mimalloc::MiMalloc,
                "mimalloc 0.1 (libmimalloc-sys)",
            ),
        ),
        #[cfg(feature = "jemalloc")]
        "jemalloc" => entry(
            "jemalloc",
            global_alloc::GlobalAllocPeer::new(
                tikv_jemallocator::Jemalloc,
                "tikv-jemallocator 0.7 (jemalloc 5.3)",
            ),
        ),
        #[cfg(feature = "snmalloc")]
        "snmalloc" => entry(
            "snmalloc",
            global_alloc::GlobalAllocPeer::new(snmalloc_rs::SnMalloc, "snmalloc-rs 0.3 (build_cc)"),
        ),
        other if not_built().contains(&other) => {
            return Err(BenchError::new(format!(
                "{other} is not in this build (mmkit-bench's feature `peers` is off)"
            )))
        }
        other => {
            return Err(BenchError::new(format!(
                "unknown allocator {other:?}: use {}",
                available().join(", ")
            )))
        }
    };
    Ok(runner)
}

fn entry<C: crate::contestant::Contestant + 'static>(
    name: &'static str,
    contestant: C,
) -> Box<dyn Runner> {
    Box::new(Entry {
        name,
        contestant,
        bulk: false,
        pageset_high_max: None,
    })
}

fn high_max(pool: &mmkit_runtime::PagePool) -> Option<u64> {
    pool.zones()
        .find(|z| z.managed() > 0)?
        .pageset(0)
        .map(|p| p.high_max)
}

/// Parse a comma-separated list of names (`--only`); empty means every available one.
/// Keeps report order.
pub fn select(only: &[String]) -> Result<Vec<&'static str>, BenchError> {
    if only.is_empty() {
        return Ok(available());
    }
    check_names(only, &[])?;
    Ok(chosen(NAMES, only))
}

/// [`select`] for `pagealloc`: the floors ([`floor::NAMES`]) too, after the allocators.
pub fn select_pagealloc(only: &[String]) -> Result<Vec<&'static str>, BenchError> {
    if only.is_empty() {
        let mut names = available();
        names.extend_from_slice(floor::NAMES);
        return Ok(names);
    }
    check_names(only, floor::NAMES)?;
    let mut names = chosen(NAMES, only);
    names.extend(chosen(floor::NAMES, only));
    Ok(names)
}

/// The names of `from` that `only` asks for, in `from`'s order.
fn chosen(from: &[&'static str], only: &[String]) -> Vec<&'static str> {
    from.iter()
        .copied()
        .filter(|n| only.iter().any(|o| o == n))
        .collect()
}

/// Every name of `only` is a contestant this build has, or one of `extra`.
fn check_names(only: &[String], extra: &[&str]) -> Result<(), BenchError> {
    for name in only {
        if !NAMES.contains(&name.as_str()) && !extra.contains(&name.as_str()) {
            let mut known = available();
            known.extend_from_slice(extra);
            return Err(BenchError::new(format!(
                "unknown allocator {name:?}: use {}",
                known.join(", ")
            )));
        }
        if not_built().contains(&name.as_str()) {
            return Err(BenchError::new(format!(
                "{name} is not in this build (mmkit-bench's feature `peers` is off)"
            )));
        }
    }
    Ok(())
}
