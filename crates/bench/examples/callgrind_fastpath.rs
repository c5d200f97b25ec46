//! A fixed workload on mmkit's order-0 fast paths, for `valgrind --tool=callgrind`:
//! `crates/bench/callgrind-check.sh` counts the instructions executed inside each of
//! [`alloc_phase`], [`free_phase`], [`bulk_alloc_phase`], [`bulk_free_phase`],
//! [`cache_alloc_phase`] and [`cache_free_phase`] and compares them per page with a
//! committed baseline.
//!
//! The workload: a 64 MiB pool, one CPU, v6.7 policy, no background threads, the thread
//! pinned to CPU 0; a warm-up of [`WARM_UP_ROUNDS`] rounds (outside the four functions,
//! so not counted); then `PAIRS / BATCH` rounds of "allocate [`BATCH`] order-0 pages with
//! `alloc_raw`, free them last-first with `free_raw`"; then as many rounds of "one
//! `alloc_bulk_list` of [`BATCH`] pages, one `free_batch` of them"; then as many rounds of
//! "[`BATCH`] allocations from a `PoolCache` (the `mmkit-cache` contestant, page_pool-style
//! recycling), freed last-first into it". A batch of 32 stays on the pageset (and in the
//! cache's 128-page array), so after the warm-up every request is a pageset hit (a cache
//! hit), save the refills and drains that v6.7's sizing rules schedule the same way in
//! every run.
//!
//! ```sh
//! cargo build --release -p mmkit-bench --no-default-features --example callgrind_fastpath
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*alloc_phase*' \
//!     target/release/examples/callgrind_fastpath 10240
//! ```

use mmkit_bench::contestant::Contestant;
use mmkit_bench::peers::mmkit::{Mmkit, MmkitPage};
use mmkit_bench::peers::mmkit_cache::{CachePage, MmkitCache};
use mmkit_core::Order;

/// Pages per round.
const BATCH: usize = 32;
/// Untimed rounds first.
const WARM_UP_ROUNDS: usize = 64;
/// Alloc+free pairs when no argument is given.
const PAIRS_DEFAULT: usize = 10_240;

#[inline(never)]
fn alloc_phase<'a>(mmkit: &'a Mmkit, blocks: &mut Vec<MmkitPage<'a>>) {
    for _ in 0..BATCH {
        blocks.push(mmkit.alloc(Order::ZERO).expect("a 64 MiB pool has room"));
    }
}

#[inline(never)]
fn free_phase<'a>(mmkit: &'a Mmkit, blocks: &mut Vec<MmkitPage<'a>>) {
    while let Some(block) = blocks.pop() {
        mmkit.free(block);
    }
}

#[inline(never)]
fn bulk_alloc_phase<'a>(mmkit: &'a Mmkit, blocks: &mut Vec<MmkitPage<'a>>) {
    assert_eq!(
        mmkit.alloc_bulk(BATCH, blocks),
        BATCH,
        "a 64 MiB pool has room"
    );
}

#[inline(never)]
fn bulk_free_phase<'a>(mmkit: &'a Mmkit, blocks: &mut Vec<MmkitPage<'a>>) {
    mmkit.free_bulk(blocks);
}

#[inline(never)]
fn cache_alloc_phase<'a>(cache: &'a MmkitCache<'_>, blocks: &mut Vec<CachePage<'a>>) {
    for _ in 0..BATCH {
        blocks.push(cache.alloc(Order::ZERO).expect("a 64 MiB pool has room"));
    }
}

#[inline(never)]
fn cache_free_phase<'a>(cache: &'a MmkitCache<'_>, blocks: &mut Vec<CachePage<'a>>) {
    while let Some(block) = blocks.pop() {
        cache.free(block);
    }
}

fn main() {
    let pairs: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().expect("the argument is a number of pairs"),
        None => PAIRS_DEFAULT,
    };
    assert!(
        pairs % BATCH == 0 || pairs < BATCH,
        "pairs must be a multiple of {BATCH}"
    );
    let mmkit = Mmkit::new(64 << 20, 1).expect("a 64 MiB pool");
    mmkit.enter_thread(0);
    let mut blocks = Vec::with_capacity(BATCH);
    for _ in 0..WARM_UP_ROUNDS {
        for _ in 0..BATCH {
            blocks.push(mmkit.alloc(Order::ZERO).expect("room"));
        }
        while let Some(block) = blocks.pop() {
            mmkit.free(block);
        }
    }
    for _ in 0..pairs / BATCH {
        alloc_phase(&mmkit, &mut blocks);
        free_phase(&mmkit, &mut blocks);
    }
    for _ in 0..pairs / BATCH {
        bulk_alloc_phase(&mmkit, &mut blocks);
        bulk_free_phase(&mmkit, &mut blocks);
    }
    let cache = MmkitCache::new(mmkit.pool(), 1).expect("a cache over the same pool");
    cache.enter_thread(0);
    let mut pages = Vec::with_capacity(BATCH);
    for _ in 0..WARM_UP_ROUNDS {
        cache_alloc_phase_untimed(&cache, &mut pages);
    }
    for _ in 0..pairs / BATCH {
        cache_alloc_phase(&cache, &mut pages);
        cache_free_phase(&cache, &mut pages);
    }
    drop(pages);
    drop(cache);
    mmkit.audit().expect("every page came back");
    let stats = mmkit.pool().stats();
    println!(
        "pairs {pairs} batch {BATCH}: pgalloc {} pgfree {} pcp_refills {} pcp_drains {}",
        stats.pgalloc, stats.pgfree, stats.pcp_refills, stats.pcp_drains
    );
}

/// One warm-up round of the cache phases, outside the counted functions.
fn cache_alloc_phase_untimed<'a>(cache: &'a MmkitCache<'_>, pages: &mut Vec<CachePage<'a>>) {
    for _ in 0..BATCH {
        pages.push(cache.alloc(Order::ZERO).expect("room"));
    }
    while let Some(page) = pages.pop() {
        cache.free(page);
    }
}
