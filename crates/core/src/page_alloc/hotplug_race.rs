//! A task that checked its CPU online, then lost the CPU before it reached the pageset.
//! On Linux the task cannot run on a dead CPU; in a user-space runtime the "CPU" is a
//! pageset index the task picked, and `cpu_down` can drain that pageset between the
//! check and the lock. Each test stops a real path at that point (the check done, the
//! lock not yet taken), takes the CPU offline, and lets the path go on: the page must end
//! in the zone, never on the offline CPU's pageset (where `verify` refuses it).

use core::sync::atomic::Ordering::Relaxed;

use super::alloc::AllocContext;
use super::gfp::{AllocFlags, Gfp};
use super::types::{Caller, ZoneType};
use super::watermark::WatermarkKind;
use super::zone::Zone;
use crate::page::Order;
use crate::policy::Policy;
use crate::settings::Settings;
use crate::topology::{CacheInfo, Topology, ZoneSize};
use crate::PageAllocator;

/// One Normal zone of 1 GiB on two CPUs (pageset batch 63).
fn two_cpus() -> PageAllocator {
    let sizes = [ZoneSize::managed(0, ZoneType::Normal, 262_144)];
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 2,
    };
    let topology = Topology::x86_64(&sizes, alloc::vec![2], llc, false).expect("valid topology");
    let settings = Settings {
        transparent_hugepage: false,
        ..Settings::default()
    };
    PageAllocator::new(topology, settings, Policy::V6_7).expect("valid settings")
}

fn normal(allocator: &PageAllocator) -> &Zone {
    allocator.zone(0, ZoneType::Normal).expect("a Normal zone")
}

fn pcp_count(allocator: &PageAllocator, cpu: u32) -> u64 {
    normal(allocator).pagesets[cpu as usize].pcp.lock().count
}

#[test]
fn a_free_that_loses_its_cpu_goes_to_the_zone() {
    let allocator = two_cpus();
    let caller = Caller::task(1);
    let pfn = allocator
        .alloc_pages(caller, Gfp::KERNEL, Order::ZERO)
        .expect("a free zone");

    // `free_pages` as far as `claim_block`, whose online check passes...
    let (zone, page) = allocator
        .claim_block::<super::free::Atomic>(caller, pfn, Order::ZERO)
        .expect("an allocated block");
    // ... then the CPU goes down, and the free goes on.
    assert!(allocator.cpu_down(1));
    assert_eq!(pcp_count(&allocator, 1), 0, "cpu_down drained CPU 1");
    let free_before = zone.free_pages();
    super::free::free_pages_prepare(page);
    allocator.free_unref_page(caller, zone, pfn, page, Order::ZERO, &mut ());

    assert_eq!(pcp_count(&allocator, 1), 0, "the page went to the zone");
    assert_eq!(zone.free_pages(), free_before + 1);
    assert_eq!(zone.events.pcp_lock_contended.load(Relaxed), 0);
    allocator.verify().expect("every page accounted for");
}

#[test]
fn an_allocation_that_loses_its_cpu_is_served_by_the_zone() {
    let allocator = two_cpus();
    let caller = Caller::task(1);
    // Fill CPU 1's list, so the fast path would find a page there.
    let pfn = allocator
        .alloc_pages(caller, Gfp::KERNEL, Order::ZERO)
        .expect("a free zone");
    allocator
        .free_pages(caller, pfn, Order::ZERO)
        .expect("an allocated block");
    assert!(pcp_count(&allocator, 1) > 0);

    // `alloc_pages` as far as `prepare_alloc_pages`, whose online check passes...
    let ac: AllocContext<'_> = allocator
        .prepare_alloc_pages(caller, Gfp::KERNEL, Order::ZERO, 0)
        .expect("CPU 1 is online");
    // ... then the CPU goes down, and the request goes on.
    assert!(allocator.cpu_down(1));
    assert_eq!(pcp_count(&allocator, 1), 0, "cpu_down drained CPU 1");
    assert_eq!(
        allocator.alloc_pcp_fast::<false, _>(caller, Gfp::KERNEL, 0, &mut ()),
        None,
        "the fast path declines"
    );
    let flags = AllocFlags::empty().with_wmark(WatermarkKind::Low);
    let got = allocator
        .get_page_from_freelist(&ac, flags, &mut ())
        .expect("the zone has pages");

    assert_eq!(
        pcp_count(&allocator, 1),
        0,
        "no refill onto the offline pageset"
    );
    let zone = normal(&allocator);
    assert_eq!(zone.events.pcp_lock_contended.load(Relaxed), 0);
    allocator.verify().expect("every page accounted for");
    allocator
        .free_pages(Caller::task(0), got, Order::ZERO)
        .expect("CPU 0 frees it");
    allocator.verify().expect("every page accounted for");
}

#[test]
fn a_cpu_back_online_uses_its_pageset_again() {
    let allocator = two_cpus();
    assert!(allocator.cpu_down(1));
    assert!(allocator.cpu_up(1));
    let caller = Caller::task(1);
    let pfn = allocator
        .alloc_pages(caller, Gfp::KERNEL, Order::ZERO)
        .expect("a free zone");
    assert!(
        pcp_count(&allocator, 1) > 0,
        "the allocation refilled CPU 1's list"
    );
    allocator
        .free_pages(caller, pfn, Order::ZERO)
        .expect("an allocated block");
    allocator.verify().expect("every page accounted for");
}

/// The bulk allocator's single-page fallback (one slot wanted, `__GFP_ACCOUNT`, or a
/// pageset it could not use) reports a refused CPU as the refusal it is, not as "no
/// pages", which a caller reads as out of memory. Here the CPU is offline from the start;
/// in the race, the fast path's check passed and the fallback's failed.
#[test]
fn a_bulk_allocation_on_an_offline_cpu_is_refused_not_empty() {
    use super::error::AllocError;
    use crate::Pfn;

    let allocator = two_cpus();
    assert!(allocator.cpu_down(1));
    let caller = Caller::task(1);
    for (gfp, slots) in [(Gfp::KERNEL, 1), (Gfp::KERNEL | Gfp::ACCOUNT, 8)] {
        let mut array: alloc::vec::Vec<Option<Pfn>> = alloc::vec![None; slots];
        assert_eq!(
            allocator.alloc_pages_bulk_array(caller, gfp, None, &mut array),
            Err(AllocError::InvalidCpu(1))
        );
        assert!(array.iter().all(Option::is_none), "nothing was taken");
    }
    allocator.verify().expect("every page accounted for");
}
