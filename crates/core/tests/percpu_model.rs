//! The percpu allocator against a naive model: one `Vec<bool>` of 4-byte bits per chunk.
//!
//! proptest drives random allocations (sizes, alignments, atomic, reserved or neither),
//! frees, bad frees (double, misaligned, unknown chunk, into the hidden ends of the first
//! chunk), balance runs and backing failures under every policy, both page sizes, and with
//! or without a first chunk (with or without a reserved chunk). After each step: the allocator's `verify()` walker (every
//! bit, every block and chunk hint, slot membership, empty-page counts per chunk and
//! global, populated bitmap against allocations), the model's bits against the
//! allocator's allocations chunk by chunk, and the fake backing's pages against the
//! allocator's populated counts. A refused free must leave everything as it was.

use std::collections::BTreeMap;

use mmkit_core::percpu::{
    AllocError, AllocKind, ChunkId, FirstChunkLayout, FreeError, MemoryBacking, PercpuAllocator,
    PercpuConfig, PercpuPolicy, PercpuPtr,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: usize,
        align: usize,
        atomic: bool,
    },
    AllocReserved {
        size: usize,
        align: usize,
    },
    Free(usize),
    FreeHidden,
    DoubleFree,
    FreeInside(usize),
    FreeUnknownChunk,
    Balance,
    SetBackingFail(bool),
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        6 => 1usize..=64,
        3 => 65usize..=1200,
        1 => 1201usize..=32768,
    ];
    let align = (0u32..=7).prop_map(|s| 1usize << s);
    prop_oneof![
        10 => (size.clone(), align.clone(), prop::bool::weighted(0.2))
            .prop_map(|(size, align, atomic)| Op::Alloc { size, align, atomic }),
        2 => (size, align).prop_map(|(size, align)| Op::AllocReserved { size, align }),
        1 => Just(Op::FreeHidden),
        7 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::DoubleFree),
        1 => any::<usize>().prop_map(Op::FreeInside),
        1 => Just(Op::FreeUnknownChunk),
        2 => Just(Op::Balance),
        1 => prop::bool::weighted(0.3).prop_map(Op::SetBackingFail),
    ]
}

fn config() -> impl Strategy<Value = PercpuConfig> {
    let policy = prop_oneof![
        Just(PercpuPolicy::V5_13),
        Just(PercpuPolicy::V5_14),
        Just(PercpuPolicy::RECLAIM_THRESHOLD),
        Just(PercpuPolicy::BYTES_THRESHOLDS),
    ];
    let geometry = prop_oneof![
        3 => Just((4usize << 10, 32usize << 10)),
        2 => Just((4 << 10, 64 << 10)),
        1 => Just((4 << 10, 256 << 10)),
        2 => Just((64 << 10, 128 << 10)),
    ];
    // A static size that is not a multiple of 4 exercises the rounding of
    // `pcpu_setup_first_chunk`; a reserved chunk of one page or less, or none.
    let first_chunk = prop_oneof![
        1 => Just(None),
        2 => (1usize..8000, prop_oneof![Just(0usize), Just(2996), Just(4096)])
            .prop_map(Some),
    ];
    (policy, geometry, first_chunk).prop_map(|(policy, (page_size, unit_size), first_chunk)| {
        PercpuConfig {
            page_size,
            unit_size,
            nr_units: 2,
            policy,
            first_chunk: first_chunk.map(|(static_size, reserved_size)| {
                FirstChunkLayout::embedded(static_size, reserved_size, 20 << 10, page_size)
            }),
        }
    })
}

struct Model {
    bits: BTreeMap<ChunkId, Vec<bool>>,
    live: Vec<(PercpuPtr, usize)>,
    freed: Vec<PercpuPtr>,
}

/// Everything a refused free must leave unchanged.
fn snapshot(pcpu: &PercpuAllocator<MemoryBacking>) -> impl PartialEq + std::fmt::Debug {
    let chunks: Vec<_> = pcpu
        .chunk_ids()
        .map(|id| (pcpu.chunk_info(id), pcpu.allocations(id)))
        .collect();
    (
        chunks,
        pcpu.nr_empty_pop_pages(),
        pcpu.nr_populated_pages(),
        pcpu.balance_pending(),
        pcpu.verify().unwrap(),
    )
}

fn check(pcpu: &PercpuAllocator<MemoryBacking>, model: &mut Model) -> Result<(), TestCaseError> {
    pcpu.verify()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let ids: Vec<_> = pcpu.chunk_ids().collect();
    let mut dynamic_pages = 0;
    model.bits.retain(|id, bits| {
        let alive = ids.contains(id);
        assert!(
            alive || bits.iter().all(|b| !b),
            "chunk {id:?} destroyed with allocations"
        );
        alive
    });
    for id in &ids {
        let info = pcpu.chunk_info(*id).unwrap();
        let nr_bits = info.nr_pages * pcpu.config().page_size / 4;
        let bits = model
            .bits
            .entry(*id)
            .or_insert_with(|| vec![false; nr_bits]);
        let mut actual = vec![false; nr_bits];
        for range in pcpu.allocations(*id) {
            actual[range.start / 4..range.end / 4].fill(true);
        }
        prop_assert_eq!(&actual, bits, "chunk {:?} bits differ from the model", id);
        let backed = pcpu.backing().populated(*id).unwrap();
        prop_assert_eq!(backed.iter().filter(|&&p| p).count(), info.nr_populated);
        if info.immutable {
            prop_assert_eq!(
                info.nr_populated,
                info.nr_pages,
                "the first chunk lost pages"
            );
        } else {
            dynamic_pages += info.nr_populated;
        }
    }
    // `Percpu:` counts the dynamic chunks' pages and the whole first chunk from boot.
    let page_size = pcpu.config().page_size;
    let boot_pages = pcpu
        .config()
        .first_chunk
        .map_or(0, |layout| layout.size_sum() / page_size);
    prop_assert_eq!(dynamic_pages + boot_pages, pcpu.nr_populated_pages());
    Ok(())
}

fn step(
    pcpu: &mut PercpuAllocator<MemoryBacking>,
    model: &mut Model,
    op: Op,
) -> Result<(), TestCaseError> {
    match op {
        Op::Alloc {
            size,
            align,
            atomic,
        } => {
            let kind = if atomic {
                AllocKind::Atomic
            } else {
                AllocKind::Kernel
            };
            match pcpu.alloc(size, align, kind) {
                Ok(ptr) => {
                    prop_assert!(
                        !is_reserved(pcpu, ptr),
                        "an ordinary request in the reserved chunk"
                    );
                    record(pcpu, model, ptr, size, align)?;
                }
                Err(AllocError::NoPopulatedSpace) => prop_assert!(atomic),
                Err(AllocError::Backing(_)) => prop_assert!(pcpu.backing().fail),
                Err(err) => prop_assert!(false, "unexpected {err:?}"),
            }
        }
        Op::AllocReserved { size, align } => {
            let reserved = pcpu
                .config()
                .first_chunk
                .is_some_and(|layout| layout.reserved_size > 0);
            let before = snapshot(pcpu);
            match pcpu.alloc_reserved(size, align) {
                Ok(ptr) => {
                    prop_assert_eq!(is_reserved(pcpu, ptr), reserved);
                    record(pcpu, model, ptr, size, align)?;
                }
                Err(AllocError::NoReservedSpace) => {
                    prop_assert!(reserved);
                    prop_assert_eq!(before, snapshot(pcpu));
                }
                Err(AllocError::Backing(_)) => prop_assert!(!reserved && pcpu.backing().fail),
                Err(err) => prop_assert!(false, "unexpected {err:?}"),
            }
        }
        Op::FreeHidden => {
            // Offset 0 of the first and the reserved chunk lies in the static region (or
            // is the region's first byte); the end is past the region. Neither is ever an
            // allocation.
            for id in pcpu.chunk_ids().collect::<Vec<_>>() {
                let info = pcpu.chunk_info(id).unwrap();
                if !info.immutable {
                    continue;
                }
                let end = info.nr_pages * pcpu.config().page_size - 4;
                for offset in [0, end] {
                    let bad = PercpuPtr { chunk: id, offset };
                    if pcpu.allocations(id).iter().any(|a| a.start == offset) {
                        continue;
                    }
                    let before = snapshot(pcpu);
                    prop_assert_eq!(pcpu.free(bad), Err(FreeError::NotAllocated(bad)));
                    prop_assert_eq!(before, snapshot(pcpu));
                }
            }
        }
        Op::Free(i) if !model.live.is_empty() => {
            let (ptr, bits) = model.live.swap_remove(i % model.live.len());
            prop_assert_eq!(pcpu.free(ptr), Ok(bits * 4));
            model.bits.get_mut(&ptr.chunk).unwrap()[ptr.offset / 4..ptr.offset / 4 + bits]
                .fill(false);
            model.freed.push(ptr);
        }
        Op::DoubleFree => {
            if let Some(&ptr) = model.freed.last() {
                // Unless the same spot was handed out again since.
                if !model.live.iter().any(|(p, _)| *p == ptr) {
                    let before = snapshot(pcpu);
                    prop_assert!(pcpu.free(ptr).is_err());
                    prop_assert_eq!(before, snapshot(pcpu));
                }
            }
        }
        Op::FreeInside(i) if !model.live.is_empty() => {
            let (ptr, bits) = model.live[i % model.live.len()];
            for inside in [ptr.offset + 4 * (bits / 2).max(1), ptr.offset + 2] {
                let bad = PercpuPtr {
                    offset: inside,
                    ..ptr
                };
                if bits > 1 || inside % 4 != 0 {
                    let before = snapshot(pcpu);
                    prop_assert_eq!(pcpu.free(bad), Err(FreeError::NotAllocated(bad)));
                    prop_assert_eq!(before, snapshot(pcpu));
                }
            }
        }
        Op::FreeUnknownChunk => {
            let bad = PercpuPtr {
                chunk: ChunkId {
                    index: 1000,
                    generation: 0,
                },
                offset: 0,
            };
            let before = snapshot(pcpu);
            prop_assert_eq!(pcpu.free(bad), Err(FreeError::UnknownChunk(bad.chunk)));
            prop_assert_eq!(before, snapshot(pcpu));
        }
        Op::Balance => pcpu.balance(),
        Op::SetBackingFail(fail) => pcpu.set_backing_fail(fail),
        Op::Free(_) | Op::FreeInside(_) => {}
    }
    Ok(())
}

fn is_reserved(pcpu: &PercpuAllocator<MemoryBacking>, ptr: PercpuPtr) -> bool {
    pcpu.reserved_chunk() == Some(ptr.chunk)
}

/// Record a new allocation in the model: aligned, and on bits that were free.
fn record(
    pcpu: &PercpuAllocator<MemoryBacking>,
    model: &mut Model,
    ptr: PercpuPtr,
    size: usize,
    align: usize,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(ptr.offset % align.max(4), 0, "misaligned");
    let bits = size.div_ceil(4);
    let info = pcpu.chunk_info(ptr.chunk).unwrap();
    let nr_bits = info.nr_pages * pcpu.config().page_size / 4;
    let map = model
        .bits
        .entry(ptr.chunk)
        .or_insert_with(|| vec![false; nr_bits]);
    let area = &mut map[ptr.offset / 4..ptr.offset / 4 + bits];
    prop_assert!(area.iter().all(|b| !b), "allocation overlaps a live one");
    area.fill(true);
    model.live.push((ptr, bits));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn percpu_matches_a_bitmap_model(
        config in config(),
        auto_balance in any::<bool>(),
        ops in prop::collection::vec(op(), 1..250),
    ) {
        let mut pcpu = PercpuAllocator::new(config, MemoryBacking::new()).unwrap();
        let mut model = Model { bits: BTreeMap::new(), live: Vec::new(), freed: Vec::new() };
        for op in ops {
            step(&mut pcpu, &mut model, op)?;
            if auto_balance && pcpu.balance_pending() {
                pcpu.balance();
            }
            check(&pcpu, &mut model)?;
        }
        // Free everything: with partial depopulation the balance work gives back all but
        // the spare free chunk's pages; in every policy at most one chunk stays.
        pcpu.set_backing_fail(false);
        for (ptr, bits) in std::mem::take(&mut model.live) {
            prop_assert_eq!(pcpu.free(ptr), Ok(bits * 4));
            model.bits.get_mut(&ptr.chunk).unwrap()[ptr.offset / 4..ptr.offset / 4 + bits].fill(false);
            pcpu.balance();
            check(&pcpu, &mut model)?;
        }
        pcpu.balance();
        check(&pcpu, &mut model)?;
        let dynamic = pcpu.chunk_ids().filter(|&id| !pcpu.chunk_info(id).unwrap().immutable).count();
        prop_assert!(dynamic <= 2, "{} dynamic chunks left", dynamic);
        prop_assert_eq!(pcpu.verify().unwrap().allocations, 0);
    }
}

/// A deterministic random walk per policy that is big enough to reach every path the
/// property test may miss: isolation, reclaim, sidelined chunks, the threshold splice,
/// chunk destruction. Checks `verify()` after every step and that the paths ran.
#[test]
fn random_walks_reach_reclaim_under_every_policy() {
    for policy in [
        PercpuPolicy::V5_13,
        PercpuPolicy::V5_14,
        PercpuPolicy::RECLAIM_THRESHOLD,
        PercpuPolicy::BYTES_THRESHOLDS,
    ] {
        let config = PercpuConfig {
            page_size: 4096,
            unit_size: 32 << 10,
            nr_units: 2,
            policy,
            first_chunk: None,
        };
        let mut pcpu = PercpuAllocator::new(config, MemoryBacking::new()).unwrap();
        let mut live = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for step in 0..4000 {
            // Grow for a while, then shrink, in waves.
            let growing = (step / 500) % 2 == 0;
            if live.is_empty() || random(100) < if growing { 70 } else { 25 } {
                let size = [8, 64, 640, 2232, 4096][random(5) as usize];
                live.push(pcpu.alloc(size, 8, AllocKind::Kernel).unwrap());
            } else {
                let ptr = live.swap_remove(random(live.len() as u64) as usize);
                pcpu.free(ptr).unwrap();
            }
            if pcpu.balance_pending() {
                pcpu.balance();
            }
            pcpu.verify()
                .unwrap_or_else(|e| panic!("{policy} step {step}: {e}"));
        }
        let stats = pcpu.stats();
        assert!(stats.chunks_destroyed > 0, "{policy}: {stats:?}");
        if policy.partial_depopulation {
            assert!(
                stats.isolations > 0 && stats.pages_depopulated > 0,
                "{policy}: {stats:?}"
            );
        } else {
            assert_eq!(stats.isolations, 0, "{policy}");
        }
    }
}
