//! The harness does the work it says: every block allocated is freed, the numbers are
//! finite and positive, and the report has a line per allocator and cell.

use mmkit_bench::contestant::{Contestant, Touch};
use mmkit_bench::pagealloc::{self, CellSpec, PageallocConfig};
use mmkit_bench::peers::mmkit::Mmkit;
use mmkit_bench::peers::mmkit_cache::MmkitCache;
use mmkit_bench::peers::{self, BuildParams};
use mmkit_bench::threads::{self, Pattern, ThreadsConfig};
use mmkit_bench::tsc::TscClock;
use mmkit_core::Order;

fn clock() -> TscClock {
    TscClock::calibrate(std::time::Duration::from_millis(10))
}

#[test]
fn a_sample_allocates_and_frees_n_blocks_per_round_plus_the_warm_up() {
    let mmkit = Mmkit::new(64 << 20, 1).unwrap();
    let spec = CellSpec {
        order: Order::ZERO,
        n: 64,
        rounds: 10,
        touch: Touch::Page,
        overhead_cycles: clock().overhead_cycles,
    };
    for bulk in [false, true] {
        let before = mmkit.pool().stats();
        let sample = pagealloc::measure_cell(&mmkit, bulk, &spec).unwrap();
        let after = mmkit.pool().stats();
        assert_eq!(sample.blocks, 640);
        assert_eq!(after.pgalloc - before.pgalloc, 11 * 64, "bulk {bulk}");
        assert_eq!(after.pgfree - before.pgfree, 11 * 64, "bulk {bulk}");
        assert!(sample.alloc_cycles > 0 && sample.free_cycles > 0);
    }
    mmkit.audit().unwrap();
}

#[test]
fn running_out_of_memory_is_an_error_and_leaks_nothing() {
    let mmkit = Mmkit::new(64 << 20, 1).unwrap();
    let spec = CellSpec {
        order: Order::new(9).unwrap(),
        n: 64, // 128 MiB from a 64 MiB pool
        rounds: 1,
        touch: Touch::Block,
        overhead_cycles: 0,
    };
    let err = pagealloc::measure_cell(&mmkit, false, &spec).unwrap_err();
    assert!(err.to_string().contains("out of memory"), "{err}");
    mmkit.audit().unwrap();
}

#[test]
fn the_report_has_a_sane_result_per_allocator_and_cell() {
    let config = PageallocConfig {
        orders: vec![0, 2],
        max_n: 8,
        repeat: 2,
        touch: Touch::Page,
        sample_pages: 256,
    };
    let params = BuildParams {
        arena_bytes: config.arena_bytes(),
        cpus: 1,
    };
    let names = peers::available();
    let runners: Vec<_> = names
        .iter()
        .map(|n| peers::build(n, &params).unwrap())
        .collect();
    let mut steps = 0;
    let report = pagealloc::run(&config, &runners, &clock(), &mut |_| steps += 1).unwrap();
    // mmkit-bulk and mmkit-cache run at order 0 only: 4 cells (N = 1, 2, 4, 8) per order.
    assert_eq!(steps, 2 * (4 * names.len() + 4 * (names.len() - 2)));
    assert_eq!(
        report.results.len(),
        4 * names.len() + 4 * (names.len() - 2)
    );
    for r in &report.results {
        assert_eq!(r.samples, 2);
        for cost in [r.alloc, r.free, r.total] {
            assert!(
                cost.ns_per_page.is_finite() && cost.ns_per_page >= 0.0,
                "{r:?}"
            );
            assert!(cost.ns_per_page_min <= cost.ns_per_page, "{r:?}");
        }
        assert!(r.total.ns_per_page > 0.0, "{r:?}");
        let ratio = r.ratio_to_mmkit.expect("mmkit ran in every cell");
        assert!(ratio > 0.0 && ratio.is_finite());
        if r.order == 2 {
            let block_ns = r.total.ns_per_block;
            assert!((block_ns / 4.0 - r.total.ns_per_page).abs() < 1e-6 * block_ns);
        }
    }
    assert_eq!(report.targets.len(), 3);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["benchmark"], "pagealloc");
}

#[test]
fn n_values_stop_at_max_n_and_at_512_mib_per_round() {
    let config = PageallocConfig {
        max_n: 16384,
        ..PageallocConfig::default()
    };
    assert_eq!(config.n_values(Order::ZERO).len(), 15);
    assert_eq!(config.n_values(Order::new(9).unwrap()).last(), Some(&256));
    assert_eq!(config.rounds(Order::ZERO, 1), 65536);
    assert_eq!(config.rounds(Order::new(3).unwrap(), 16384), 1);
}

#[test]
fn remote_pattern_frees_every_page_it_allocates() {
    let mmkit = Mmkit::new(64 << 20, 2).unwrap();
    for pattern in [Pattern::Local, Pattern::Remote, Pattern::BulkRemote] {
        let config = ThreadsConfig {
            threads: 2,
            pattern,
            seconds: 0.05,
            batch: 16,
            sample_every: 4,
            touch: Touch::Page,
            overhead_cycles: 0,
        };
        let before = mmkit.pool().stats();
        let outcome = threads::run_pattern(&mmkit, false, &config).unwrap();
        let after = mmkit.pool().stats();
        assert!(outcome.pages > 0, "{pattern:?}");
        assert_eq!(after.pgalloc - before.pgalloc, outcome.pages, "{pattern:?}");
        assert_eq!(after.pgfree - before.pgfree, outcome.pages, "{pattern:?}");
        assert!(!outcome.alloc_cycles.is_empty() && !outcome.free_cycles.is_empty());
        mmkit.audit().unwrap();
    }
}

#[test]
fn mmkit_cache_recycles_across_threads_and_returns_every_page() {
    let entry = peers::build(
        "mmkit-cache",
        &BuildParams {
            arena_bytes: 64 << 20,
            cpus: 2,
        },
    )
    .unwrap();
    assert!(!entry.supports(Order::new(1).unwrap()));
    for pattern in [Pattern::Local, Pattern::Remote, Pattern::BulkRemote] {
        let config = ThreadsConfig {
            threads: 2,
            pattern,
            seconds: 0.05,
            batch: 16,
            sample_every: 4,
            touch: Touch::Page,
            overhead_cycles: 0,
        };
        let outcome = entry.threads(&config).unwrap();
        assert!(outcome.pages > 0, "{pattern:?}");
        entry.audit().unwrap();
    }
    let spec = CellSpec {
        order: Order::ZERO,
        n: 200,
        rounds: 3,
        touch: Touch::Page,
        overhead_cycles: 0,
    };
    let sample = entry.pagealloc_sample(&spec).unwrap();
    assert_eq!(sample.blocks, 600);
    entry.audit().unwrap();
}

#[test]
fn mmkit_cache_refuses_a_thread_that_did_not_enter() {
    let pool = mmkit_runtime::PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(2)
        .background(false)
        .build()
        .unwrap();
    let adapter = MmkitCache::new(&pool, 2).unwrap();
    adapter.enter_thread(0);
    let page = adapter.alloc(Order::ZERO).unwrap();
    std::thread::scope(|s| {
        let adapter = &adapter;
        let stolen = s
            .spawn(move || {
                // Entered nothing: allocating panics; freeing goes straight to the pool.
                adapter.free(page);
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    adapter.alloc(Order::ZERO).map(|p| adapter.free(p))
                }))
                .is_err()
            })
            .join()
            .unwrap();
        assert!(stolen, "a thread that did not enter must not allocate");
    });
    drop(adapter);
    assert_eq!(
        pool.verify()
            .unwrap()
            .iter()
            .map(|z| z.allocated)
            .sum::<u64>(),
        0
    );
}
