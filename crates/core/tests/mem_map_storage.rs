//! The mem_map in storage the caller gives (`PageAllocator::with_mem_map`), as a kernel
//! carves it from the memory it manages: sized by `Topology::mem_map_bytes`, every
//! descriptor written whatever it held, the same machine as `PageAllocator::new` builds,
//! and storage too small refused with an error before anything is built. Storage promised
//! zero (`PageAllocator::with_zeroed_mem_map`) builds the same machine without being
//! rewritten.

use mmkit_core::page::{Page, PageState, PAGE_SHIFT};
use mmkit_core::page_alloc::{Caller, InitError};
use mmkit_core::topology::PfnRange;
use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, SettingsError, Topology};

use crate::common;

/// Storage left as a previous user of the memory might leave it: every descriptor an
/// allocated block head.
fn dirty() -> Page {
    Page::new(PageState::Allocated)
}

/// The mem_map carved off the top of node 0's last usable range and reserved there, as
/// memblock allocates top-down.
fn carved_machine() -> (Topology, PfnRange) {
    let plain = common::topology(&[]);
    let end = common::USABLE[1].1;
    let bytes = plain.mem_map_bytes().next_multiple_of(1 << PAGE_SHIFT);
    let carved = PfnRange::covering_bytes(end - bytes, end);
    (common::topology(&[carved]), carved)
}

fn zone_states(allocator: &PageAllocator) -> Vec<String> {
    allocator
        .zones()
        .iter()
        .map(|zone| {
            let pages: Vec<_> = zone
                .mem_map()
                .iter()
                .map(|(_, page)| page.state_order())
                .collect();
            format!("{:?} {:?}", zone.free_blocks(), pages)
        })
        .collect()
}

/// `a` hands out what `heap` (the heap-backed allocator of the same machine) does, for a
/// few orders on a few CPUs, and stays consistent.
fn allocates_alike(a: &PageAllocator, heap: &PageAllocator) {
    for cpu in 0..4 {
        let caller = Caller::task(cpu);
        for order in [0, 0, 3, 9] {
            let order = Order::new(order).expect("a valid order");
            assert_eq!(
                a.alloc_pages(caller, Gfp::KERNEL, order),
                heap.alloc_pages(caller, Gfp::KERNEL, order)
            );
        }
    }
    a.verify().expect("consistent");
}

#[test]
fn mem_map_bytes_are_sixteen_per_spanned_page_holes_included() {
    let machine = common::topology(&[]);
    let spanned: u64 = machine.zones().iter().map(|zone| zone.spanned).sum();
    let present: u64 = machine.zones().iter().map(|zone| zone.present).sum();
    assert!(spanned > present, "the 16 MiB hole is spanned");
    assert_eq!(machine.mem_map_pages(), spanned);
    assert_eq!(machine.mem_map_bytes(), 16 * spanned);
}

#[test]
fn caller_storage_builds_the_machine_the_heap_builds() {
    let (machine, carved) = carved_machine();
    let len = machine.mem_map_pages() as usize;
    let storage = common::leaked_mem_map(len, dirty);
    let from_caller =
        PageAllocator::with_mem_map(machine.clone(), Settings::default(), Policy::V6_7, storage)
            .expect("storage of the right size");
    let from_heap =
        PageAllocator::new(machine, Settings::default(), Policy::V6_7).expect("valid settings");
    assert!(from_caller
        .zones()
        .iter()
        .all(|zone| zone.mem_map().in_caller_storage()));
    assert!(!from_heap
        .zones()
        .iter()
        .any(|zone| zone.mem_map().in_caller_storage()));
    from_caller.verify().expect("every descriptor written");
    assert_eq!(zone_states(&from_caller), zone_states(&from_heap));
    // The carved pages are reserved: never handed out.
    let zone = from_caller
        .find_zone(carved.start)
        .expect("node 0 spans it");
    for pfn in carved.start.0..carved.end.0 {
        let page = zone.mem_map().page(mmkit_core::Pfn(pfn));
        assert_eq!(page.state(), PageState::Reserved, "pfn {pfn:#x}");
    }
    // And it allocates as the heap-backed one does.
    allocates_alike(&from_caller, &from_heap);
}

#[test]
fn longer_storage_is_accepted_and_the_zones_take_its_head_in_order() {
    let machine = common::topology(&[]);
    let len = machine.mem_map_pages() as usize;
    let storage = common::leaked_mem_map(len + 8, dirty);
    // Addresses only, compared, never read through.
    let (head, last) = (storage.as_ptr(), storage.as_ptr().wrapping_add(len - 1));
    let allocator =
        PageAllocator::with_mem_map(machine, Settings::default(), Policy::V6_7, storage)
            .expect("storage large enough");
    allocator.verify().expect("consistent");
    let mut expected = head;
    for zone in allocator.zones().iter().filter(|zone| zone.spanned() > 0) {
        let (_, first) = zone.mem_map().iter().next().expect("spans pages");
        assert!(std::ptr::eq(first, expected), "zones follow each other");
        expected = expected.wrapping_add(zone.spanned() as usize);
    }
    assert!(
        std::ptr::eq(expected.wrapping_sub(1), last),
        "the 8 spare descriptors stay unused"
    );
}

#[test]
fn too_small_storage_is_an_error_not_a_panic() {
    let machine = common::topology(&[]);
    let needed = machine.mem_map_pages();
    let storage = common::leaked_mem_map(needed as usize - 1, Page::zeroed);
    let error = PageAllocator::with_mem_map(machine, Settings::default(), Policy::V6_7, storage)
        .expect_err("one descriptor short");
    assert_eq!(
        error,
        InitError::MemMapTooSmall {
            needed,
            given: needed - 1
        }
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("{} bytes", needed * 16)),
        "{message}"
    );
}

#[test]
fn invalid_settings_are_reported_as_settings() {
    let machine = common::topology(&[]);
    let storage = common::leaked_mem_map(machine.mem_map_pages() as usize, Page::zeroed);
    let settings = Settings {
        watermark_scale_factor: 0,
        ..Settings::default()
    };
    let error = PageAllocator::with_mem_map(machine, settings, Policy::V6_7, storage)
        .expect_err("invalid settings");
    assert_eq!(
        error,
        InitError::Settings(SettingsError::WatermarkScaleFactor(0))
    );
}

#[test]
fn zeroed_storage_builds_the_machine_the_heap_builds() {
    let (machine, _) = carved_machine();
    let len = machine.mem_map_pages() as usize;
    let storage = common::leaked_mem_map(len, Page::zeroed);
    let from_zeroed = PageAllocator::with_zeroed_mem_map(
        machine.clone(),
        Settings::default(),
        Policy::V6_7,
        storage,
    )
    .expect("storage of the right size");
    let from_heap =
        PageAllocator::new(machine, Settings::default(), Policy::V6_7).expect("valid settings");
    assert!(from_zeroed
        .zones()
        .iter()
        .all(|zone| zone.mem_map().in_caller_storage()));
    from_zeroed.verify().expect("consistent");
    assert_eq!(zone_states(&from_zeroed), zone_states(&from_heap));
    allocates_alike(&from_zeroed, &from_heap);
}

/// Zeroed storage is taken at its word: the set-up writes only holes, reserved runs and
/// block heads, so a descriptor written inside a free block stays as it was, and
/// `verify` finds it. Storage in any state has that descriptor overwritten.
#[test]
fn zeroed_storage_is_not_rewritten_and_a_broken_promise_shows_in_verify() {
    let machine = common::topology(&[]);
    let len = machine.mem_map_pages() as usize;
    // Well inside node 0's first max-order block of its last zone: never a block head.
    let last = machine
        .zones()
        .iter()
        .rev()
        .find(|z| z.spanned > 0)
        .expect("a zone");
    let planted = len - last.spanned as usize + 5;
    let make = || {
        let storage = common::leaked_mem_map(len, Page::zeroed);
        storage[planted] = dirty();
        storage
    };
    let promised = PageAllocator::with_zeroed_mem_map(
        machine.clone(),
        Settings::default(),
        Policy::V6_7,
        make(),
    )
    .expect("storage of the right size");
    let pfn = mmkit_core::Pfn(last.start_pfn.0 + 5);
    let zone = promised.find_zone(pfn).expect("the last zone spans it");
    assert_eq!(zone.mem_map().page(pfn).state(), PageState::Allocated);
    assert!(promised.verify().is_err(), "a stray allocated page");
    let written = PageAllocator::with_mem_map(machine, Settings::default(), Policy::V6_7, make())
        .expect("storage of the right size");
    let zone = written.find_zone(pfn).expect("the last zone spans it");
    assert_eq!(zone.mem_map().page(pfn).state(), PageState::Tail);
    written.verify().expect("every descriptor written");
}
