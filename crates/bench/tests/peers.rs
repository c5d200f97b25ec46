//! Every contestant hands out 4 KiB-aligned blocks of the size asked for, takes them back,
//! and passes its own audit.

use mmkit_bench::contestant::{block_bytes, Block, Contestant, TaggedBlock, Touch};
use mmkit_bench::pagealloc::CellSpec;
use mmkit_bench::peers::buddy::Buddy;
use mmkit_bench::peers::global_alloc::GlobalAllocPeer;
use mmkit_bench::peers::mmkit::{Mmkit, MmkitHandle};
use mmkit_bench::peers::talc::Talc;
use mmkit_bench::peers::{self, BuildParams};
use mmkit_bench::threads::{Pattern, ThreadsConfig};
use mmkit_core::Order;

const ARENA_BYTES: usize = 64 << 20;

/// Allocate 8 blocks of each order, write a pattern over each whole block, check them,
/// check alignment, size and disjointness, and free them.
fn alloc_free_each_order<C: Contestant>(contestant: &C) {
    contestant.enter_thread(0);
    for order in [0u8, 1, 3, 9] {
        let order = Order::new(order).unwrap();
        let mut blocks = Vec::new();
        for i in 0..8u8 {
            let mut block = contestant.alloc(order).expect("room for 8 blocks");
            assert_eq!(block.addr() % 4096, 0, "order {order} misaligned");
            assert_eq!(block.bytes().len(), block_bytes(order));
            assert_eq!(block.bytes().as_ptr() as usize, block.addr());
            block.bytes_mut().fill(i);
            blocks.push(block);
        }
        let mut addrs: Vec<usize> = blocks.iter().map(|b| b.addr()).collect();
        addrs.sort_unstable();
        assert!(addrs.windows(2).all(|w| w[1] - w[0] >= block_bytes(order)));
        for (i, block) in blocks.iter().enumerate() {
            assert!(
                block.bytes().iter().all(|&b| b == i as u8),
                "block {i} was overwritten"
            );
        }
        for block in blocks {
            contestant.free(block);
        }
    }
    let mut bulk = Vec::new();
    assert_eq!(contestant.alloc_bulk(64, &mut bulk), 64);
    assert!(bulk
        .iter()
        .all(|b| b.bytes().len() == 4096 && b.addr() % 4096 == 0));
    contestant.free_bulk(&mut bulk);
    assert!(bulk.is_empty());
    contestant.audit().expect("everything came back");
}

#[test]
fn mmkit_raw_blocks_are_aligned_and_come_back() {
    let mmkit = Mmkit::new(ARENA_BYTES, 1).unwrap();
    alloc_free_each_order(&mmkit);
    let stats = mmkit.pool().stats();
    assert_eq!(stats.pgalloc, stats.pgfree);
}

#[test]
fn mmkit_handles_are_aligned_and_come_back() {
    alloc_free_each_order(&MmkitHandle::new(ARENA_BYTES, 1).unwrap());
}

#[test]
fn buddy_frames_are_aligned_and_come_back() {
    alloc_free_each_order(&Buddy::new(ARENA_BYTES).unwrap());
}

#[test]
fn talc_blocks_are_aligned_and_come_back() {
    alloc_free_each_order(&Talc::new(ARENA_BYTES).unwrap());
}

#[test]
fn system_blocks_are_aligned_and_come_back() {
    alloc_free_each_order(&GlobalAllocPeer::new(std::alloc::System, "system"));
}

#[cfg(feature = "mimalloc")]
#[test]
fn mimalloc_blocks_are_aligned_and_come_back() {
    alloc_free_each_order(&GlobalAllocPeer::new(mimalloc::MiMalloc, "mimalloc"));
}

#[cfg(feature = "jemalloc")]
#[test]
fn jemalloc_blocks_are_aligned_and_come_back() {
    alloc_free_each_order(&GlobalAllocPeer::new(
        tikv_jemallocator::Jemalloc,
        "jemalloc",
    ));
}

#[cfg(feature = "snmalloc")]
#[test]
fn snmalloc_blocks_are_aligned_and_come_back() {
    alloc_free_each_order(&GlobalAllocPeer::new(snmalloc_rs::SnMalloc, "snmalloc"));
}

#[test]
#[should_panic(expected = "another")]
fn a_block_of_another_pool_is_refused() {
    let a = Mmkit::new(ARENA_BYTES, 1).unwrap();
    let b = Mmkit::new(ARENA_BYTES, 1).unwrap();
    let block = a.alloc(Order::ZERO).unwrap();
    b.free(block);
}

#[test]
#[should_panic(expected = "another")]
fn a_bulk_free_with_a_block_of_another_pool_is_refused() {
    let a = Mmkit::new(ARENA_BYTES, 1).unwrap();
    let b = Mmkit::new(ARENA_BYTES, 1).unwrap();
    let mut blocks = Vec::new();
    assert_eq!(b.alloc_bulk(4, &mut blocks), 4);
    blocks.push(a.alloc(Order::ZERO).unwrap());
    b.free_bulk(&mut blocks);
}

#[test]
#[should_panic(expected = "another frame allocator")]
fn a_block_of_another_buddy_is_refused() {
    let (a, b) = (
        Buddy::new(ARENA_BYTES).unwrap(),
        Buddy::new(ARENA_BYTES).unwrap(),
    );
    let block = a.alloc(Order::ZERO).unwrap();
    b.free(block);
}

#[test]
#[should_panic(expected = "another talc")]
fn a_block_of_another_talc_is_refused() {
    let (a, b) = (
        Talc::new(ARENA_BYTES).unwrap(),
        Talc::new(ARENA_BYTES).unwrap(),
    );
    let block = a.alloc(Order::new(3).unwrap()).unwrap();
    b.free(block);
}

#[test]
fn a_tagged_block_keeps_address_and_order_in_one_word() {
    for order in [0u8, 1, 9, 10] {
        let order = Order::new(order).unwrap();
        let block = TaggedBlock::new(0x7f12_3456_7000, order);
        assert_eq!((block.addr(), block.order()), (0x7f12_3456_7000, order));
        assert_eq!(block.size(), block_bytes(order));
        assert_eq!(block.word(), 0x7f12_3456_7000 | order.get() as usize);
    }
    assert_eq!(std::mem::size_of::<TaggedBlock>(), 8);
}

#[test]
fn every_available_name_builds_and_unknown_names_are_refused() {
    let params = BuildParams {
        arena_bytes: ARENA_BYTES,
        cpus: 1,
    };
    for name in peers::available() {
        let runner = peers::build(name, &params).unwrap();
        assert_eq!(runner.name(), name);
        assert!(!runner.describe().is_empty());
    }
    assert!(peers::build("tcmalloc", &params).is_err());
    assert!(peers::select(&["nope".to_owned()]).is_err());
    assert_eq!(
        peers::select(&["talc".to_owned(), "mmkit".to_owned()]).unwrap(),
        vec!["mmkit", "talc"]
    );
}

#[test]
fn the_floors_run_pagealloc_only_and_count_in_no_target() {
    let params = BuildParams {
        arena_bytes: ARENA_BYTES,
        cpus: 1,
    };
    for &name in peers::floor::NAMES {
        let floor = peers::build(name, &params).unwrap();
        assert_eq!(floor.name(), name);
        assert!(peers::is_floor(name));
        assert!(floor.supports(Order::ZERO) && !floor.supports(Order::new(1).unwrap()));
        let spec = CellSpec {
            order: Order::ZERO,
            n: 200,
            rounds: 3,
            touch: Touch::Page,
            overhead_cycles: 0,
        };
        assert_eq!(floor.pagealloc_sample(&spec).unwrap().blocks, 600);
        floor.audit().expect("every page back on the stack");
        let threads = ThreadsConfig {
            threads: 2,
            pattern: Pattern::Remote,
            seconds: 0.01,
            batch: 16,
            sample_every: 4,
            touch: Touch::Page,
            overhead_cycles: 0,
        };
        assert!(floor.threads(&threads).is_err());
    }
    assert!(!peers::is_floor("mmkit"));
    let pagealloc = peers::select_pagealloc(&[]).unwrap();
    assert!(peers::floor::NAMES.iter().all(|f| pagealloc.contains(f)));
    assert_eq!(
        peers::select_pagealloc(&["floor: lifo".to_owned(), "mmkit".to_owned()]).unwrap(),
        vec!["mmkit", "floor: lifo"]
    );
    assert!(peers::select(&["floor: lifo".to_owned()]).is_err());
    assert!(!peers::select(&[])
        .unwrap()
        .iter()
        .any(|n| peers::is_floor(n)));
}
