//! The first and the reserved chunk (`pcpu_setup_first_chunk`, `pcpu_alloc_first_chunk`):
//! populated from boot and counted in `Percpu:` with the static region, never isolated,
//! depopulated or freed; the reserved chunk serves reserved requests only and stays out of
//! the global count of empty pages; the hidden ends of their maps are never allocations.
//!
//! The layouts are this project's measuring machine's (Linux 6.18, boot line `percpu:
//! Embedded 57 pages/cpu s202520 r0 d30952 u1048576`) and the same static size with v5.14's
//! defaults for a kernel with modules (`PERCPU_MODULE_RESERVE` 8 KiB,
//! `PERCPU_DYNAMIC_RESERVE` 28 KiB).

use mmkit_core::percpu::{
    AllocError, AllocKind, FirstChunkLayout, FreeError, MemoryBacking, PercpuAllocator,
    PercpuConfig, PercpuPtr, PERCPU_DYNAMIC_RESERVE, PERCPU_MODULE_RESERVE,
};

const PAGE: usize = 4096;
/// The static size of the measuring machine's 6.18 kernel image.
const STATIC_6_18: usize = 202_520;

/// The measuring machine: 2 CPUs, 1 MiB units, no modules.
fn linux_6_18() -> PercpuConfig {
    PercpuConfig {
        unit_size: 1 << 20,
        ..PercpuConfig::x86_64(2)
    }
    .with_first_chunk(FirstChunkLayout {
        static_size: STATIC_6_18,
        reserved_size: 0,
        dynamic_size: 30_952,
    })
}

/// v5.14's defaults with modules, on the x86-64 machine of `PercpuConfig::x86_64(4)`.
fn v5_14_with_modules() -> PercpuConfig {
    PercpuConfig::x86_64(4).with_first_chunk(FirstChunkLayout::embedded(
        STATIC_6_18,
        PERCPU_MODULE_RESERVE,
        PERCPU_DYNAMIC_RESERVE,
        PAGE,
    ))
}

fn allocator(config: PercpuConfig) -> PercpuAllocator<MemoryBacking> {
    let pcpu = PercpuAllocator::new(config, MemoryBacking::new()).unwrap();
    pcpu.verify().unwrap();
    pcpu
}

#[test]
fn embedded_layout_is_what_boot_prints() {
    // "s202520 r0 d30952": 28 KiB of dynamic room grown to the end of page 57.
    let layout = FirstChunkLayout::embedded(STATIC_6_18, 0, PERCPU_DYNAMIC_RESERVE, PAGE);
    assert_eq!(linux_6_18().first_chunk, Some(layout));
    assert_eq!(layout.size_sum(), 57 * PAGE);
    // With the module reserve: 202,520 + 8,192 + 28,672 = 239,384 → 59 pages.
    let layout = v5_14_with_modules().first_chunk.unwrap();
    assert_eq!((layout.reserved_size, layout.dynamic_size), (8192, 30_952));
    assert_eq!(layout.size_sum(), 59 * PAGE);
}

#[test]
fn before_counts_the_whole_first_chunk() {
    // PFN_DOWN(size_sum) pages in every unit: 57 × 2 × 4 KiB, 59 × 4 × 4 KiB.
    let pcpu = allocator(linux_6_18());
    assert_eq!(pcpu.nr_populated_pages(), 57);
    assert_eq!(pcpu.meminfo_percpu_kb(), 456);
    assert_eq!(allocator(v5_14_with_modules()).meminfo_percpu_kb(), 944);
    // Without a first chunk nothing is populated (the runtime's user-space pool).
    assert_eq!(allocator(PercpuConfig::x86_64(2)).meminfo_percpu_kb(), 0);
}

#[test]
fn first_and_reserved_chunk_are_mapped_around_their_regions() {
    let pcpu = allocator(v5_14_with_modules());
    let reserved = pcpu.chunk_info(pcpu.reserved_chunk().unwrap()).unwrap();
    let first = pcpu.chunk_info(pcpu.first_chunk().unwrap()).unwrap();
    // The reserved region starts 1,816 bytes into page 49 and ends 1,816 bytes into
    // page 51: three pages, the middle one empty (static data before, dynamic after).
    assert_eq!((reserved.nr_pages, reserved.free_bytes), (3, 8192));
    assert_eq!(reserved.nr_populated, 3);
    assert_eq!(reserved.nr_empty_pop_pages, 1);
    // The dynamic region starts where the reserved one ends and fills page 58.
    assert_eq!((first.nr_pages, first.free_bytes), (8, 30_952));
    assert_eq!(first.nr_empty_pop_pages, 7);
    assert!(reserved.immutable && first.immutable);
    // Only the first chunk's empty pages serve atomic requests.
    assert_eq!(pcpu.nr_empty_pop_pages(), 7);
    assert_eq!(pcpu.chunk_ids().count(), 2);
}

#[test]
fn allocations_fill_the_first_chunk_before_a_new_chunk() {
    let mut pcpu = allocator(linux_6_18());
    let first = pcpu.first_chunk().unwrap();
    let mut in_first = 0;
    loop {
        let ptr = pcpu.alloc(1024, 8, AllocKind::Kernel).unwrap();
        if ptr.chunk != first {
            break;
        }
        in_first += 1;
    }
    // 30,952 bytes serve 30 areas of 1 KiB (the region starts 1,816 bytes into a page,
    // so the first area starts there, 8-byte aligned).
    assert_eq!(in_first, 30);
    // The new chunk's first page is all the growth so far.
    assert_eq!(pcpu.nr_populated_pages(), 57 + 1);
    pcpu.verify().unwrap();
}

#[test]
fn first_chunk_is_never_isolated_or_depopulated() {
    let mut pcpu = allocator(linux_6_18());
    let first = pcpu.first_chunk().unwrap();
    // Fill the first chunk and most of a dynamic chunk, then free everything: the
    // dynamic chunk goes (or keeps at most its pages as the spare free chunk), the first
    // chunk keeps every page whatever the balance work does.
    let areas: Vec<PercpuPtr> = (0..400)
        .map(|_| pcpu.alloc(2048, 8, AllocKind::Kernel).unwrap())
        .collect();
    assert!(areas.iter().any(|a| a.chunk == first));
    for ptr in areas {
        pcpu.free(ptr).unwrap();
        if pcpu.balance_pending() {
            pcpu.balance();
        }
        pcpu.verify().unwrap();
    }
    pcpu.balance();
    let info = pcpu.chunk_info(first).unwrap();
    assert!(!info.isolated);
    assert_eq!(info.nr_populated, info.nr_pages);
    assert_eq!(info.free_bytes, 30_952);
    assert!(pcpu.nr_populated_pages() >= 57);
    assert!(
        pcpu.stats().isolations > 0,
        "the dynamic chunk was reclaimed"
    );
}

#[test]
fn reserved_requests_use_only_the_reserved_chunk() {
    let mut pcpu = allocator(v5_14_with_modules());
    let reserved = pcpu.reserved_chunk().unwrap();
    let empty_before = pcpu.nr_empty_pop_pages();
    // A module's statics: reserved requests until the 8 KiB are gone.
    let mut areas = Vec::new();
    let err = loop {
        match pcpu.alloc_reserved(1000, 8) {
            Ok(ptr) => areas.push(ptr),
            Err(err) => break err,
        }
    };
    assert_eq!(err, AllocError::NoReservedSpace);
    assert_eq!(areas.len(), 8);
    assert!(areas.iter().all(|a| a.chunk == reserved));
    // Its pages were never in the global count, so filling it changes nothing there.
    assert_eq!(pcpu.nr_empty_pop_pages(), empty_before);
    // An ordinary request never lands in the reserved chunk, even with room left there.
    pcpu.free(areas.pop().unwrap()).unwrap();
    for _ in 0..100 {
        assert_ne!(
            pcpu.alloc(64, 8, AllocKind::Kernel).unwrap().chunk,
            reserved
        );
    }
    // Without a reserved chunk a reserved request is an ordinary one.
    let mut pcpu = allocator(linux_6_18());
    let ptr = pcpu.alloc_reserved(64, 8).unwrap();
    assert_eq!(Some(ptr.chunk), pcpu.first_chunk());
    pcpu.verify().unwrap();
}

#[test]
fn hidden_ends_are_not_allocations() {
    let mut pcpu = allocator(v5_14_with_modules());
    for chunk in [pcpu.reserved_chunk().unwrap(), pcpu.first_chunk().unwrap()] {
        assert!(pcpu.allocations(chunk).is_empty());
        let last = pcpu.chunk_info(chunk).unwrap().nr_pages * PAGE - 4;
        for offset in [0, last] {
            let bad = PercpuPtr { chunk, offset };
            let census = pcpu.verify().unwrap();
            assert_eq!(pcpu.free(bad), Err(FreeError::NotAllocated(bad)));
            assert_eq!(pcpu.verify().unwrap(), census);
        }
    }
    assert_eq!(pcpu.verify().unwrap().allocations, 0);
}

#[test]
fn impossible_layouts_are_refused() {
    let config = |static_size, reserved_size, dynamic_size| {
        PercpuConfig {
            unit_size: 64 << 10,
            ..PercpuConfig::x86_64(2)
        }
        .with_first_chunk(FirstChunkLayout {
            static_size,
            reserved_size,
            dynamic_size,
        })
    };
    for (layout, why) in [
        (config(0, 0, 32 << 10), "static size"),
        (config(4096, 2, 28 << 10), "multiple of 4"),
        (config(4096, 0, 16 << 10), "20 KiB"),
        (config(4000, 0, 28 << 10), "page boundary"),
        (config(40 << 10, 0, 28 << 10), "fit in a unit"),
    ] {
        let err = PercpuAllocator::new(layout, MemoryBacking::new()).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    // A backing that cannot hold the first chunk is refused too.
    let mut backing = MemoryBacking::new();
    backing.fail = true;
    assert!(PercpuAllocator::new(linux_6_18(), backing).is_err());
}
