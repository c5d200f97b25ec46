//! PMD mappings of anonymous THPs, one rule each: the fault that maps an order-9 folio with
//! one PMD, fork's `copy_huge_pmd`, `do_huge_pmd_wp_page` (reuse, or split and copy one
//! page), `zap_huge_pmd`, the split of a PMD that `MADV_DONTNEED` covers in part and the
//! deferred split queue after it, the rmap walk's `folio_referenced` and `try_to_unmap`
//! (`TTU_SPLIT_HUGE_PMD`, then per page or Yin 2023's runs), `MADV_PAGEOUT`, and
//! `verify()` failing on an entire map count no PMD accounts for.

use crate::common;

use common::allocator;
use mmkit_core::mm::NoIo;

use mmkit_core::mm::huge_memory::DeferredSplitQueue;
use mmkit_core::mm::memcg::MemcgId;
use mmkit_core::mm::{Folio, Memory, MmError, MmId, PteState, ReclaimResult, Vpn};
use mmkit_core::page_alloc::{Caller, Gfp};
use mmkit_core::policy::{MmPolicy, RmapRemoval};
use mmkit_core::Order;

const CALLER: Caller = Caller::task(0);
/// Two aligned 2 MiB ranges.
const START: Vpn = 0x4000;
const PAGES: u64 = 1024;

fn thp_order() -> Order {
    Order::new(9).unwrap()
}

/// A machine with one process mapping two PMD ranges of order-9 folios.
fn machine(policy: MmPolicy, swap_slots: u64) -> (Memory, MmId) {
    let mut m = Memory::new(allocator(8192), policy, swap_slots);
    let mm = m.create_mm();
    m.mmap_anon(mm, START, PAGES, thp_order()).unwrap();
    (m, mm)
}

fn mem_map(m: &Memory, folio: Folio) -> &mmkit_core::page_alloc::MemMap {
    m.allocator().find_zone(folio.pfn).unwrap().mem_map()
}

fn allocated(m: &Memory) -> u64 {
    m.allocator()
        .verify()
        .unwrap()
        .iter()
        .map(|c| c.allocated)
        .sum()
}

#[test]
fn a_fault_in_an_aligned_range_maps_the_thp_with_one_pmd() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    let fault = m.access(CALLER, mm, START + 5, true, &mut NoIo).unwrap();
    let folio = fault.folio;
    assert_eq!(folio.order, thp_order());
    assert_eq!(fault.pfn, folio.pfn.add(5));
    // One PMD, one reference; before PMD mappings, 512 PTEs held 512.
    assert_eq!(folio.refcount(mem_map(&m, folio)), 1);
    assert_eq!(folio.entire_mapcount(mem_map(&m, folio)), 1);
    assert_eq!(folio.mapcount(mem_map(&m, folio)), 1, "folio_mapcount");
    assert_eq!(folio.nr_pages_mapped(mem_map(&m, folio)), 0, "no PTE maps");
    let space = m.mm(mm).unwrap();
    let pmd = space.pmd(START + 100).expect("a PMD maps the range");
    assert_eq!(pmd.pfn(), Some(folio.pfn));
    assert_eq!(space.pte(START + 100).state(), PteState::None);
    assert_eq!(space.counters.anon_pages, 512);
    let stats = m.stats();
    assert_eq!((stats.anon_mapped, stats.anon_thps), (512, 1));
    m.verify().unwrap();
}

#[test]
fn fork_write_protects_the_pmd_in_both_and_a_shared_write_splits_it_and_copies_one_page() {
    let (mut m, parent) = machine(MmPolicy::V6_7, 0);
    let folio = m
        .access(CALLER, parent, START, true, &mut NoIo)
        .unwrap()
        .folio;
    let child = m.fork(CALLER, parent).unwrap();
    for mm in [parent, child] {
        assert!(m.mm(mm).unwrap().pmd(START).unwrap().write_protected());
        assert_eq!(m.mm(mm).unwrap().counters.anon_pages, 512);
    }
    assert_eq!(folio.entire_mapcount(mem_map(&m, folio)), 2);
    assert_eq!(folio.refcount(mem_map(&m, folio)), 2);
    m.verify().unwrap();

    // The child's write finds the folio shared: its PMD becomes 512 write-protected PTEs
    // and the page written is copied.
    let copy = m.access(CALLER, child, START + 3, true, &mut NoIo).unwrap();
    assert_eq!(copy.folio.order, Order::ZERO);
    let space = m.mm(child).unwrap();
    assert!(space.pmd(START).is_none());
    assert_eq!(space.pte(START + 3).pfn(), Some(copy.pfn));
    assert!(space.pte(START + 4).write_protected());
    assert_eq!(space.pte(START + 4).pfn(), Some(folio.pfn.add(4)));
    assert_eq!(folio.entire_mapcount(mem_map(&m, folio)), 1, "the parent's");
    assert_eq!(folio.refcount(mem_map(&m, folio)), 1 + 511);
    let stats = m.stats();
    assert_eq!((stats.wp_copies, stats.anon_thps, stats.faults), (1, 1, 2));
    assert!(
        m.deferred_split().is_empty(),
        "the parent's PMD maps every page"
    );
    m.verify().unwrap();
}

#[test]
fn the_last_sharer_reuses_its_pmd() {
    let (mut m, parent) = machine(MmPolicy::V6_7, 0);
    let folio = m
        .access(CALLER, parent, START, true, &mut NoIo)
        .unwrap()
        .folio;
    let child = m.fork(CALLER, parent).unwrap();
    m.exit_mm(CALLER, child).unwrap();
    let fault = m
        .access(CALLER, parent, START + 7, true, &mut NoIo)
        .unwrap();
    assert_eq!(fault.folio, folio);
    let pmd = m.mm(parent).unwrap().pmd(START).unwrap();
    assert!(!pmd.write_protected());
    let stats = m.stats();
    // 6.7 counts no `pgreuse` on the PMD path.
    assert_eq!((stats.wp_copies, stats.pgreuse, stats.anon_thps), (0, 0, 1));
    m.verify().unwrap();
}

#[test]
fn munmap_zaps_a_whole_pmd_and_frees_the_folio_without_queueing_it() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    let before = allocated(&m);
    m.access(CALLER, mm, START, false, &mut NoIo).unwrap();
    m.access(CALLER, mm, START + 512, false, &mut NoIo).unwrap();
    assert_eq!(m.stats().anon_thps, 2);
    m.munmap(CALLER, mm, START).unwrap();
    let stats = m.stats();
    assert_eq!((stats.anon_mapped, stats.anon_thps), (0, 0));
    assert_eq!(
        stats.thp_deferred_split_page, 0,
        "no PTE maps a page: 6.7 queues nothing"
    );
    assert_eq!(allocated(&m), before);
    m.verify().unwrap();
}

#[test]
fn dontneed_of_part_of_a_pmd_splits_it_and_queues_the_folio() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    let folio = m.access(CALLER, mm, START, true, &mut NoIo).unwrap().folio;
    m.madvise_dontneed(CALLER, mm, START, 16).unwrap();
    let space = m.mm(mm).unwrap();
    assert!(space.pmd(START).is_none());
    assert_eq!(space.pte(START + 15).state(), PteState::None);
    assert_eq!(space.pte(START + 16).pfn(), Some(folio.pfn.add(16)));
    assert_eq!(space.counters.anon_pages, 512 - 16);
    let map = mem_map(&m, folio);
    assert_eq!(folio.entire_mapcount(map), 0);
    assert_eq!(folio.nr_pages_mapped(map), 496);
    assert_eq!(folio.refcount(map), 496);
    let stats = m.stats();
    assert_eq!((stats.anon_mapped, stats.anon_thps), (496, 0));
    assert_eq!(stats.thp_deferred_split_page, 1);
    let queue = DeferredSplitQueue::Memcg(MemcgId::ROOT);
    assert_eq!(m.deferred_split().len(queue), 1);
    m.verify().unwrap();

    // The shrinker splits it and frees the 16 pages no PTE maps.
    let before = allocated(&m);
    assert_eq!(m.deferred_split_scan(CALLER, queue, 128).unwrap(), 1);
    assert_eq!(allocated(&m), before - 16);
    m.verify().unwrap();
}

#[test]
fn dontneed_of_a_whole_pmd_range_zaps_it_and_keeps_the_mapping() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    m.access(CALLER, mm, START + 600, true, &mut NoIo).unwrap();
    m.madvise_dontneed(CALLER, mm, START + 512, 512).unwrap();
    assert_eq!(m.stats().anon_thps, 0);
    assert_eq!(m.stats().thp_deferred_split_page, 0);
    // The range faults again, zero-filled, with a new PMD.
    m.access(CALLER, mm, START + 600, false, &mut NoIo).unwrap();
    assert!(m.mm(mm).unwrap().pmd(START + 600).is_some());
    m.verify().unwrap();
}

#[test]
fn dontneed_outside_one_mapping_is_refused_and_changes_nothing() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    m.access(CALLER, mm, START, true, &mut NoIo).unwrap();
    assert_eq!(
        m.madvise_dontneed(CALLER, mm, START + 1000, 100),
        Err(MmError::BadAddress(START + PAGES))
    );
    assert_eq!(
        m.madvise_dontneed(CALLER, mm, START - 1, 2),
        Err(MmError::BadAddress(START - 1))
    );
    assert!(m.mm(mm).unwrap().pmd(START).is_some());
    assert_eq!(m.stats().anon_mapped, 512);
    m.verify().unwrap();
}

#[test]
fn the_last_pmd_unmap_queues_a_folio_ptes_still_map_in_part() {
    // The child splits its PMD and drops 16 pages; the parent's PMD still maps every
    // page, so nothing is queued until the parent exits (6.7: `nr < nr_pmdmapped`).
    let (mut m, parent) = machine(MmPolicy::V6_7, 0);
    m.access(CALLER, parent, START, true, &mut NoIo).unwrap();
    let child = m.fork(CALLER, parent).unwrap();
    m.madvise_dontneed(CALLER, child, START, 16).unwrap();
    assert!(m.deferred_split().is_empty());
    assert_eq!(m.stats().anon_mapped, 512);
    m.verify().unwrap();
    m.exit_mm(CALLER, parent).unwrap();
    let stats = m.stats();
    assert_eq!((stats.anon_mapped, stats.anon_thps), (496, 0));
    assert_eq!(stats.thp_deferred_split_page, 1);
    m.verify().unwrap();
}

#[test]
fn folio_referenced_counts_a_young_pmd_once() {
    let (mut m, parent) = machine(MmPolicy::V6_7, 0);
    let folio = m
        .access(CALLER, parent, START, false, &mut NoIo)
        .unwrap()
        .folio;
    let _child = m.fork(CALLER, parent).unwrap();
    // The rmap walk visits each PMD once; the child's entry is old.
    assert_eq!(m.rmap_walk(folio).len(), 2);
    assert_eq!(m.folio_referenced(folio), 1);
    assert_eq!(m.folio_referenced(folio), 0, "the accessed bit is cleared");
}

#[test]
fn reclaim_splits_the_pmd_then_unmaps_every_page_per_page_or_per_run() {
    let mut updates = Vec::new();
    for policy in [
        MmPolicy::V6_7,
        MmPolicy {
            rmap_removal: RmapRemoval::Batched,
            ..MmPolicy::V6_7
        },
    ] {
        let (mut m, mm) = machine(policy, 1024);
        let folio = m.access(CALLER, mm, START, true, &mut NoIo).unwrap().folio;
        let before = m.stats().rmap_counter_updates;
        assert_eq!(
            m.reclaim_folio(CALLER, folio, &mut NoIo).unwrap(),
            ReclaimResult::Freed
        );
        let space = m.mm(mm).unwrap();
        assert!(space.pmd(START).is_none());
        assert!(matches!(space.pte(START + 9).state(), PteState::Swap(_)));
        assert_eq!(space.counters.swap_entries, 512);
        let stats = m.stats();
        assert_eq!(
            (stats.anon_mapped, stats.anon_thps, stats.swap_out),
            (0, 0, 512)
        );
        assert_eq!(
            stats.thp_deferred_split_page, 0,
            "reclaim's unmap never queues"
        );
        m.verify().unwrap();
        updates.push(stats.rmap_counter_updates - before);
    }
    // Per page: map count, `_nr_pages_mapped`, NR_ANON_MAPPED and reference for each of
    // the 512 PTEs the split left; batched: 512 map counts and one of each of the others.
    assert_eq!(updates, [512 * 4, 512 + 3]);
}

#[test]
fn pageout_keeps_a_covered_pmd_whole_and_splits_one_covered_in_part() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 1024);
    m.access(CALLER, mm, START, true, &mut NoIo).unwrap();
    m.access(CALLER, mm, START + 512, true, &mut NoIo).unwrap();
    let whole = m
        .madvise_pageout(CALLER, mm, START, 512, &mut NoIo)
        .unwrap();
    assert_eq!((whole.reclaimed, whole.split), (512, 0));
    let part = m
        .madvise_pageout(CALLER, mm, START + 522, 10, &mut NoIo)
        .unwrap();
    assert_eq!((part.reclaimed, part.split), (10, 1));
    assert!(m.mm(mm).unwrap().pmd(START + 512).is_none());
    assert_eq!(m.stats().anon_thps, 0);
    m.verify().unwrap();
}

#[test]
fn a_folio_larger_than_a_pmd_is_mapped_by_ptes() {
    // Only PMD-sized folios get a PMD: an order-10 folio spans two PMD ranges.
    let mut m = Memory::new(allocator(8192), MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    m.mmap_anon(mm, START, PAGES, Order::new(10).unwrap())
        .unwrap();
    let fault = m.access(CALLER, mm, START + 700, false, &mut NoIo).unwrap();
    assert_eq!(fault.folio.order, Order::new(10).unwrap());
    let space = m.mm(mm).unwrap();
    assert!(space.pmd(START).is_none());
    assert_eq!(space.pte(START + 700).pfn(), Some(fault.pfn));
    assert_eq!(m.stats().anon_thps, 0);
    m.verify().unwrap();
}

#[test]
fn memory_stat_counts_the_pmd_mapped_thps_of_the_cgroup() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    let group = m.create_memcg(MemcgId::ROOT).unwrap();
    m.set_mm_memcg(mm, group).unwrap();
    m.access(CALLER, mm, START, false, &mut NoIo).unwrap();
    let stat = m.memcgs().memory_stat(group).unwrap();
    assert!(stat.contains("anon_thp 2097152\n"), "{stat}");
    // A split PMD leaves the THP PTE-mapped: no longer counted.
    m.madvise_dontneed(CALLER, mm, START, 1).unwrap();
    let stat = m.memcgs().memory_stat(MemcgId::ROOT).unwrap();
    assert!(stat.contains("anon_thp 0\n"), "{stat}");
    m.verify().unwrap();
}

#[test]
fn a_thp_fault_that_gets_no_thp_falls_back_to_one_page() {
    let (mut m, mm) = machine(MmPolicy::V6_7, 0);
    m.access(CALLER, mm, START, false, &mut NoIo).unwrap();
    // Take every block of order 9 or more the allocator has left.
    let mut held = Vec::new();
    while let Ok(pfn) = m
        .allocator()
        .alloc_pages(CALLER, Gfp::HIGHUSER_MOVABLE, thp_order())
    {
        held.push(pfn);
    }
    let fault = m.access(CALLER, mm, START + 512, false, &mut NoIo).unwrap();
    assert_eq!(fault.folio.order, Order::ZERO);
    assert!(m.mm(mm).unwrap().pmd(START + 512).is_none());
    let stats = m.stats();
    assert_eq!((stats.thp_fault_alloc, stats.thp_fault_fallback), (1, 1));
    assert_eq!(stats.anon_thps, 1);
    m.verify().unwrap();
    for pfn in held {
        m.allocator().free_pages(CALLER, pfn, thp_order()).unwrap();
    }
}
