//! The percpu oracles of `docs/reference/linux-mm.md` §8 and the behaviours of §4, through the
//! public API: slot numbers, `should_reclaim`, the thresholds of each policy, isolation
//! and partial depopulation on a free, the allocation priority (active slots, then
//! sidelined, then a new chunk), atomic requests, and refused requests and frees that
//! change nothing.
//!
//! The scenario machine has 4 KiB pages and 32 KiB units (8 pages per chunk), so the
//! numbers of §8's `should_reclaim` oracle (a chunk of 8 pages with 2 empty, global 7)
//! can be built with page-sized allocations.

use mmkit_core::percpu::{
    size_to_slot, AllocError, AllocKind, ChunkId, FreeError, MemoryBacking, PercpuAllocator,
    PercpuConfig, PercpuPolicy, PercpuPtr, ReclaimCandidate, SlotLayout,
};

const PAGE: usize = 4096;

fn allocator(policy: PercpuPolicy) -> PercpuAllocator<MemoryBacking> {
    let config = PercpuConfig {
        page_size: PAGE,
        unit_size: 32 << 10,
        nr_units: 2,
        policy,
        first_chunk: None,
    };
    PercpuAllocator::new(config, MemoryBacking::new()).unwrap()
}

fn page(pcpu: &mut PercpuAllocator<MemoryBacking>) -> PercpuPtr {
    let ptr = pcpu.alloc(PAGE, PAGE, AllocKind::Kernel).unwrap();
    pcpu.verify().unwrap();
    ptr
}

fn free(pcpu: &mut PercpuAllocator<MemoryBacking>, ptr: PercpuPtr) {
    pcpu.free(ptr).unwrap();
    pcpu.verify().unwrap();
}

#[test]
fn slots_match_the_oracle() {
    for (sizes, slot) in [
        (1..=15, 1),
        (16..=31, 2),
        (32..=63, 3),
        (64..=64, 4),
        (1024..=1024, 8),
        (4096..=4096, 10),
        (32768..=32768, 13),
    ] {
        for size in sizes {
            assert_eq!(size_to_slot(size), slot, "size {size}");
        }
    }
    let layout = SlotLayout::new(32 << 10);
    assert_eq!(
        (
            layout.sidelined,
            layout.free,
            layout.to_depopulate,
            layout.nr_slots
        ),
        (14, 15, 16, 17)
    );
    // A whole unit is the free slot; a chunk with no free run is slot 0.
    assert_eq!(layout.size_to_slot(32 << 10), 15);
    assert_eq!(layout.chunk_slot(0, 0), 0);
    assert_eq!(layout.chunk_slot(4096, 1024), 10);
}

#[test]
fn should_reclaim_matches_the_oracle() {
    let chunk = ReclaimCandidate {
        nr_pages: 8,
        nr_empty_pop_pages: 2,
        isolated: false,
    };
    let v5_14 = PercpuPolicy::V5_14;
    // 7 > 4 + 2 and 2 ≥ 8 / 4.
    assert!(v5_14.should_reclaim(PAGE, chunk, 7));
    assert!(!v5_14.should_reclaim(PAGE, chunk, 6));
    // An isolated chunk with empty pages goes back to reclaim whatever the global count.
    let isolated = ReclaimCandidate {
        isolated: true,
        ..chunk
    };
    assert!(v5_14.should_reclaim(PAGE, isolated, 0));
    assert!(!PercpuPolicy::V5_13.should_reclaim(PAGE, chunk, 7));
}

#[test]
fn thresholds_per_policy_and_page_size() {
    let marks = |p: PercpuPolicy, page: usize| {
        (
            p.empty_pop_pages_low(page),
            p.empty_pop_pages_high(page),
            p.reclaim_threshold_pages(page),
        )
    };
    assert_eq!(marks(PercpuPolicy::V5_14, 4096), (2, 4, 4));
    assert_eq!(marks(PercpuPolicy::V5_14, 65536), (2, 4, 4));
    assert_eq!(marks(PercpuPolicy::RECLAIM_THRESHOLD, 65536), (2, 4, 4));
    assert_eq!(marks(PercpuPolicy::BYTES_THRESHOLDS, 4096), (2, 4, 4));
    assert_eq!(marks(PercpuPolicy::BYTES_THRESHOLDS, 65536), (1, 2, 2));
    for name in mmkit_core::percpu::PERCPU_PRESETS {
        assert_eq!(PercpuPolicy::preset(name).unwrap().name, name);
    }
    assert!(PercpuPolicy::preset("v5.15").is_none());
}

/// Chunk A full of page-sized allocations, chunk B with one live page and `b_empty`
/// empty populated pages. Returns A's id and allocations.
fn two_chunks(
    pcpu: &mut PercpuAllocator<MemoryBacking>,
    b_empty: usize,
) -> (ChunkId, Vec<PercpuPtr>) {
    let a: Vec<_> = (0..8).map(|_| page(pcpu)).collect();
    let a_id = a[0].chunk;
    assert!(a.iter().all(|p| p.chunk == a_id));
    let b: Vec<_> = (0..=b_empty).map(|_| page(pcpu)).collect();
    assert!(b.iter().all(|p| p.chunk != a_id));
    for &ptr in &b[1..] {
        free(pcpu, ptr);
    }
    assert_eq!(pcpu.nr_empty_pop_pages(), b_empty);
    (a_id, a)
}

#[test]
fn free_isolates_a_chunk_when_the_oracle_says_so() {
    // Global 5 + 2 = 7 after the second free: isolate.
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let (a_id, a) = two_chunks(&mut pcpu, 5);
    free(&mut pcpu, a[0]);
    assert!(!pcpu.chunk_info(a_id).unwrap().isolated, "1 < 8 / 4");
    free(&mut pcpu, a[1]);
    let info = pcpu.chunk_info(a_id).unwrap();
    assert!(info.isolated);
    assert_eq!(info.slot, pcpu.slot_layout().to_depopulate);
    assert_eq!(
        pcpu.nr_empty_pop_pages(),
        5,
        "isolation takes A's pages out"
    );
    assert_eq!(pcpu.nr_isolated_empty_pop_pages(), 2);
    assert!(pcpu.balance_pending());

    // The balance work depopulates A's two empty pages and sidelines it.
    let before_kb = pcpu.meminfo_percpu_kb();
    pcpu.balance();
    pcpu.verify().unwrap();
    let info = pcpu.chunk_info(a_id).unwrap();
    assert_eq!((info.nr_populated, info.nr_empty_pop_pages), (6, 0));
    assert_eq!(info.slot, pcpu.slot_layout().sidelined);
    assert_eq!(
        before_kb - pcpu.meminfo_percpu_kb(),
        2 * 2 * 4,
        "2 pages × 2 units × 4 KiB"
    );

    // Global 4 + 2 = 6 instead: no isolation.
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let (a_id, a) = two_chunks(&mut pcpu, 4);
    free(&mut pcpu, a[0]);
    free(&mut pcpu, a[1]);
    assert!(!pcpu.chunk_info(a_id).unwrap().isolated);

    // v5.13 never isolates.
    let mut pcpu = allocator(PercpuPolicy::V5_13);
    let (a_id, a) = two_chunks(&mut pcpu, 5);
    for &ptr in &a[..7] {
        free(&mut pcpu, ptr);
    }
    pcpu.balance();
    pcpu.verify().unwrap();
    let info = pcpu.chunk_info(a_id).unwrap();
    assert!(!info.isolated);
    assert_eq!(
        info.nr_populated, 8,
        "v5.13 keeps the pages of a chunk in use"
    );
}

#[test]
fn sidelined_chunk_serves_before_a_new_chunk_and_rejoins() {
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let (a_id, a) = two_chunks(&mut pcpu, 5);
    free(&mut pcpu, a[0]);
    free(&mut pcpu, a[1]);
    pcpu.balance();
    pcpu.verify().unwrap();
    assert_eq!(
        pcpu.chunk_info(a_id).unwrap().slot,
        pcpu.slot_layout().sidelined
    );
    // B's free pages (five empty and populated, two unpopulated) come first: it is on an
    // active slot.
    for _ in 0..7 {
        assert_ne!(page(&mut pcpu).chunk, a_id);
    }
    // Then the sidelined chunk, before any new chunk; it is active again.
    let chunks = pcpu.stats().chunks_created;
    let ptr = page(&mut pcpu);
    assert_eq!(ptr.chunk, a_id);
    assert_eq!(pcpu.stats().chunks_created, chunks);
    let info = pcpu.chunk_info(a_id).unwrap();
    assert!(!info.isolated);
    assert_ne!(info.slot, pcpu.slot_layout().sidelined);
}

#[test]
fn reclaim_threshold_waits_for_enough_pages() {
    let mut pcpu = allocator(PercpuPolicy::RECLAIM_THRESHOLD);
    let (a_id, a) = two_chunks(&mut pcpu, 5);
    free(&mut pcpu, a[0]);
    free(&mut pcpu, a[1]);
    let info = pcpu.chunk_info(a_id).unwrap();
    assert!(info.isolated);
    assert_eq!(
        info.slot,
        pcpu.slot_layout().sidelined,
        "parked, not queued"
    );
    pcpu.balance();
    assert_eq!(
        pcpu.chunk_info(a_id).unwrap().nr_populated,
        8,
        "2 < threshold 4"
    );
    free(&mut pcpu, a[2]);
    assert_eq!(
        pcpu.chunk_info(a_id).unwrap().slot,
        pcpu.slot_layout().sidelined
    );
    free(&mut pcpu, a[3]);
    assert_eq!(
        pcpu.chunk_info(a_id).unwrap().slot,
        pcpu.slot_layout().to_depopulate,
        "4 isolated empty pages reach the threshold"
    );
    assert!(pcpu.balance_pending());
    pcpu.balance();
    pcpu.verify().unwrap();
    assert_eq!(pcpu.chunk_info(a_id).unwrap().nr_populated, 4);
}

#[test]
fn reclaim_reintegrates_when_empty_pages_run_low() {
    // Only chunk A has empty pages: isolating it would leave the others below the high
    // mark, so should_reclaim refuses in the first place...
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let (a_id, a) = two_chunks(&mut pcpu, 0);
    for &ptr in &a[..4] {
        free(&mut pcpu, ptr);
    }
    assert!(!pcpu.chunk_info(a_id).unwrap().isolated);
    // ...and the balance work tops the global count up to the high mark.
    pcpu.balance();
    pcpu.verify().unwrap();
    assert!(pcpu.nr_empty_pop_pages() >= 4);

    // A is isolated while B holds 5 empty pages; then B's pages get used, so when the
    // balance work comes the others hold 3 < HIGH: reclaim puts A back untouched.
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let (a_id, a) = two_chunks(&mut pcpu, 5);
    free(&mut pcpu, a[0]);
    free(&mut pcpu, a[1]);
    assert!(pcpu.chunk_info(a_id).unwrap().isolated);
    let b1 = pcpu.alloc(PAGE, PAGE, AllocKind::Atomic).unwrap();
    let b2 = pcpu.alloc(PAGE, PAGE, AllocKind::Atomic).unwrap();
    assert!(
        b1.chunk != a_id && b2.chunk != a_id,
        "isolated chunks are not searched"
    );
    assert_eq!(pcpu.nr_empty_pop_pages(), 3);
    pcpu.balance();
    pcpu.verify().unwrap();
    let info = pcpu.chunk_info(a_id).unwrap();
    assert!(!info.isolated);
    assert_eq!((info.nr_populated, info.nr_empty_pop_pages), (8, 2));
    assert_eq!(pcpu.nr_empty_pop_pages(), 5);
}

#[test]
fn atomic_requests_use_only_populated_pages() {
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    assert_eq!(
        pcpu.alloc(64, 8, AllocKind::Atomic),
        Err(AllocError::NoPopulatedSpace)
    );
    assert!(pcpu.balance_pending());
    pcpu.balance();
    pcpu.verify().unwrap();
    assert_eq!(
        pcpu.nr_empty_pop_pages(),
        4,
        "populated up to the high mark"
    );
    let ptr = pcpu.alloc(64, 8, AllocKind::Atomic).unwrap();
    pcpu.verify().unwrap();
    free(&mut pcpu, ptr);
}

#[test]
fn impossible_requests_are_refused_and_change_nothing() {
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let kept = page(&mut pcpu);
    let census = pcpu.verify().unwrap();
    let stats_allocs = pcpu.stats().allocs;
    for (size, align, err) in [
        (0, 8, AllocError::InvalidSize(0)),
        (32769, 8, AllocError::InvalidSize(32769)),
        (64, 3, AllocError::InvalidAlign(3)),
        (64, 0, AllocError::InvalidAlign(0)),
        (64, 8192, AllocError::InvalidAlign(8192)),
    ] {
        assert_eq!(pcpu.alloc(size, align, AllocKind::Kernel), Err(err));
        assert_eq!(pcpu.verify().unwrap(), census);
    }
    assert_eq!(pcpu.stats().allocs, stats_allocs);
    // The limits themselves are fine.
    let big = pcpu.alloc(32768, 4096, AllocKind::Kernel).unwrap();
    let small = pcpu.alloc(1, 1, AllocKind::Kernel).unwrap();
    free(&mut pcpu, big);
    free(&mut pcpu, small);
    free(&mut pcpu, kept);
}

#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let a = pcpu.alloc(64, 8, AllocKind::Kernel).unwrap();
    let b = pcpu.alloc(64, 8, AllocKind::Kernel).unwrap();
    free(&mut pcpu, a);
    let census = pcpu.verify().unwrap();
    let allocations = pcpu.allocations(b.chunk);
    let bad = [
        (a, FreeError::NotAllocated(a)),
        (
            PercpuPtr {
                offset: b.offset + 4,
                ..b
            },
            FreeError::NotAllocated(PercpuPtr {
                offset: b.offset + 4,
                ..b
            }),
        ),
        (
            PercpuPtr {
                offset: b.offset + 1,
                ..b
            },
            FreeError::NotAllocated(PercpuPtr {
                offset: b.offset + 1,
                ..b
            }),
        ),
        (
            PercpuPtr {
                offset: 1 << 30,
                ..b
            },
            FreeError::NotAllocated(PercpuPtr {
                offset: 1 << 30,
                ..b
            }),
        ),
    ];
    for (ptr, err) in bad {
        assert_eq!(pcpu.free(ptr), Err(err));
        assert_eq!(pcpu.verify().unwrap(), census);
        assert_eq!(pcpu.allocations(b.chunk), allocations);
    }
    let foreign = ChunkId {
        index: 7,
        generation: 0,
    };
    let ptr = PercpuPtr {
        chunk: foreign,
        offset: 0,
    };
    assert_eq!(pcpu.free(ptr), Err(FreeError::UnknownChunk(foreign)));
    assert_eq!(pcpu.stats().bad_frees, 5);
    free(&mut pcpu, b);
}

#[test]
fn a_destroyed_chunk_refuses_stale_pointers() {
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    // Two chunks; free everything; the balance work keeps one free chunk.
    let first: Vec<_> = (0..8).map(|_| page(&mut pcpu)).collect();
    let second = page(&mut pcpu);
    assert_ne!(second.chunk, first[0].chunk);
    for ptr in first {
        free(&mut pcpu, ptr);
    }
    free(&mut pcpu, second);
    pcpu.balance();
    pcpu.verify().unwrap();
    assert_eq!(pcpu.chunk_ids().count(), 1);
    assert_eq!(pcpu.stats().chunks_destroyed, 1);
    // Whichever chunk went, a pointer into it is refused, even once its index is reused.
    let gone = [second.chunk]
        .into_iter()
        .chain(std::iter::once(ChunkId {
            index: 0,
            generation: 0,
        }))
        .find(|id| pcpu.chunk_info(*id).is_none())
        .unwrap();
    let _more: Vec<_> = (0..9).map(|_| page(&mut pcpu)).collect();
    let stale = PercpuPtr {
        chunk: gone,
        offset: 0,
    };
    assert_eq!(pcpu.free(stale), Err(FreeError::UnknownChunk(gone)));
    pcpu.verify().unwrap();
}

#[test]
fn populate_failure_fails_the_request_cleanly() {
    let mut pcpu = allocator(PercpuPolicy::V5_14);
    let kept = page(&mut pcpu);
    pcpu.set_backing_fail(true);
    // The chunk has unpopulated pages: a page-sized request needs one.
    assert!(matches!(
        pcpu.alloc(PAGE, PAGE, AllocKind::Kernel),
        Err(AllocError::Backing(_))
    ));
    let census = pcpu.verify().unwrap();
    assert_eq!(census.allocations, 1);
    pcpu.set_backing_fail(false);
    free(&mut pcpu, kept);
}
