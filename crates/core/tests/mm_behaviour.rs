//! The mapping layer's rules, one scenario each: large folios on faults, the rmap counts,
//! Yin 2023's batched removal, `MADV_PAGEOUT` under 6.7 and 6.10 rules, and bad input
//! refused without change.

use crate::common;

use mmkit_core::mm::NoIo;

use mmkit_core::mm::lru::LruList;
use mmkit_core::mm::memcg::{MemcgHierarchy, MemcgId, MEMCG_CHARGE_BATCH};
use mmkit_core::mm::vmscan::MAX_RECLAIM_RETRIES;
use mmkit_core::mm::{FileId, Folio, Memory, MmError, PteState, ReclaimResult};
use mmkit_core::page_alloc::Caller;
use mmkit_core::policy::{CongestionBits, LruSizePolicy, MmPolicy, PageoutSplit, RmapRemoval};
use mmkit_core::{Order, ZoneType};

const CALLER: Caller = Caller::task(0);

fn memory(zone_pages: u64, policy: MmPolicy, swap_slots: u64) -> Memory {
    memory_cpus(zone_pages, 1, policy, swap_slots)
}

fn order(n: u8) -> Order {
    Order::new(n).unwrap()
}

#[test]
fn anonymous_fault_maps_a_whole_large_folio() {
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    m.mmap_anon(mm, 0x100, 32, order(4)).unwrap();
    let fault = m.access(CALLER, mm, 0x105, true, &mut NoIo).unwrap();
    assert_eq!(fault.folio.order, order(4));
    assert_eq!(fault.pfn, fault.folio.pfn.add(5));
    // All 16 PTEs of the aligned range are mapped by the one fault.
    for i in 0..16 {
        assert_eq!(
            m.mm(mm).unwrap().pte(0x100 + i).pfn(),
            Some(fault.folio.pfn.add(i))
        );
    }
    assert_eq!(m.stats().anon_mapped, 16);
    assert_eq!(m.stats().faults, 1);
    assert!(
        m.access(CALLER, mm, 0x10f, false, &mut NoIo)
            .unwrap()
            .was_present
    );
    m.verify().unwrap();
}

#[test]
fn a_folio_the_mapping_layer_did_not_hand_out_is_refused_without_change() {
    let mut m = memory(4096, MmPolicy::V6_7, 16);
    let mm = m.create_mm();
    m.mmap_anon(mm, 0x100, 32, order(4)).unwrap();
    let folio = m.access(CALLER, mm, 0x105, true, &mut NoIo).unwrap().folio;
    // The same head with a larger order would reach the neighbouring pages' counts; a
    // tail's pfn names no folio at all.
    let wider = Folio {
        order: order(5),
        ..folio
    };
    let tail = Folio {
        pfn: folio.pfn.add(1),
        order: Order::ZERO,
    };
    for forged in [wider, tail] {
        assert_eq!(
            m.reclaim_folio(CALLER, forged, &mut NoIo),
            Err(MmError::NotAFolio(forged))
        );
        assert!(!m.end_writeback(CALLER, forged));
        assert_eq!(m.folio_referenced(forged), 0);
        assert!(m.rmap_walk(forged).is_empty());
    }
    assert_eq!(m.split_folio(CALLER, wider), Err(MmError::NotAFolio(wider)));
    assert_eq!(m.rmap_walk(folio).len(), 16, "the real folio is untouched");
    assert_eq!(m.stats().anon_mapped, 16);
    m.verify().unwrap();
}

#[test]
fn anonymous_fault_falls_back_to_a_page_where_a_folio_does_not_fit() {
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    // 0x104..0x10c: no aligned 16-page range inside.
    m.mmap_anon(mm, 0x104, 8, order(4)).unwrap();
    let fault = m.access(CALLER, mm, 0x106, false, &mut NoIo).unwrap();
    assert_eq!(fault.folio.order, Order::ZERO);
    assert_eq!(m.stats().anon_mapped, 1);
    m.verify().unwrap();
}

/// Yin 2023: unmapping a fully mapped 16-page folio. Per page: map count, the folio's
/// mapped-page count, the statistic and the reference for each of 16 pages = 64 updates;
/// batched: 16 map counts + 3 once = 19.
#[test]
fn batched_rmap_removal_updates_shared_counters_once_per_run() {
    for (removal, updates) in [(RmapRemoval::PerPage, 64), (RmapRemoval::Batched, 19)] {
        let policy = MmPolicy {
            rmap_removal: removal,
            pageout: PageoutSplit::KeepCovered,
            ..MmPolicy::V6_7
        };
        let mut m = memory(4096, policy, 64);
        let mm = m.create_mm();
        m.mmap_anon(mm, 0x100, 16, order(4)).unwrap();
        let fault = m.access(CALLER, mm, 0x100, true, &mut NoIo).unwrap();
        assert_eq!(
            m.reclaim_folio(CALLER, fault.folio, &mut NoIo).unwrap(),
            ReclaimResult::Freed
        );
        assert_eq!(m.stats().rmap_counter_updates, updates, "{removal:?}");
        assert_eq!(m.stats().anon_mapped, 0);
    }
}

#[test]
fn pageout_splits_large_folios_in_6_7_and_keeps_covered_ones_whole_in_6_10() {
    for (split, splits) in [
        (PageoutSplit::SplitLarge, 1),
        (PageoutSplit::KeepCovered, 0),
    ] {
        let policy = MmPolicy {
            pageout: split,
            ..MmPolicy::V6_7
        };
        let mut m = memory(4096, policy, 64);
        let mm = m.create_mm();
        m.mmap_anon(mm, 0x100, 16, order(4)).unwrap();
        m.access(CALLER, mm, 0x100, true, &mut NoIo).unwrap();
        let outcome = m.madvise_pageout(CALLER, mm, 0x100, 16, &mut NoIo).unwrap();
        assert_eq!(outcome.reclaimed, 16, "{split:?}");
        assert_eq!(outcome.split, splits, "{split:?}");
        assert_eq!(m.stats().swap_out, 16);
        for i in 0..16 {
            assert!(matches!(
                m.mm(mm).unwrap().pte(0x100 + i).state(),
                PteState::Swap(_)
            ));
        }
        m.verify().unwrap();
        // A range that covers half the folio splits it under both policies.
        m.access(CALLER, mm, 0x100, true, &mut NoIo).unwrap(); // swap-in: one page
        assert_eq!(m.stats().swap_in, 1);
        m.verify().unwrap();
    }
}

#[test]
fn pageout_of_part_of_a_folio_splits_it_under_both_policies() {
    for split in [PageoutSplit::SplitLarge, PageoutSplit::KeepCovered] {
        let policy = MmPolicy {
            pageout: split,
            ..MmPolicy::V6_7
        };
        let mut m = memory(4096, policy, 64);
        let mm = m.create_mm();
        m.mmap_anon(mm, 0x100, 16, order(4)).unwrap();
        m.access(CALLER, mm, 0x100, true, &mut NoIo).unwrap();
        let outcome = m.madvise_pageout(CALLER, mm, 0x100, 8, &mut NoIo).unwrap();
        assert_eq!((outcome.reclaimed, outcome.split), (8, 1), "{split:?}");
        assert_eq!(m.stats().anon_mapped, 8);
        m.verify().unwrap();
    }
}

#[test]
fn shared_file_pages_are_not_paged_out() {
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let file = m.create_file(16, order(2));
    let (a, b) = (m.create_mm(), m.create_mm());
    m.mmap_file(a, 0x200, 16, file, 0).unwrap();
    m.mmap_file(b, 0x300, 16, file, 0).unwrap();
    m.access(CALLER, a, 0x200, false, &mut NoIo).unwrap();
    m.access(CALLER, b, 0x300, false, &mut NoIo).unwrap();
    let outcome = m.madvise_pageout(CALLER, a, 0x200, 16, &mut NoIo).unwrap();
    assert_eq!(outcome.reclaimed, 0);
    assert_eq!(outcome.skipped, 1);
    assert_eq!(m.stats().file_mapped, 1);
    m.verify().unwrap();
}

#[test]
fn bad_requests_are_refused_without_change() {
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    let file = m.create_file(8, Order::ZERO);
    m.mmap_anon(mm, 0x100, 16, Order::ZERO).unwrap();
    assert_eq!(
        m.mmap_anon(mm, 0x108, 16, Order::ZERO),
        Err(MmError::Overlap(0x108))
    );
    assert_eq!(
        m.mmap_anon(mm, 0xf8, 16, Order::ZERO),
        Err(MmError::Overlap(0xf8))
    );
    assert_eq!(
        m.mmap_anon(mm, 0x400, 0, Order::ZERO),
        Err(MmError::Overlap(0x400))
    );
    assert_eq!(
        m.mmap_file(mm, 0x200, 16, file, 0),
        Err(MmError::BeyondFile(16))
    );
    assert!(matches!(
        m.access(CALLER, mm, 0x99, false, &mut NoIo),
        Err(MmError::BadAddress(0x99))
    ));
    assert!(matches!(
        m.access(CALLER, mmkit_core::mm::MmId(7), 0x100, false, &mut NoIo),
        Err(MmError::NoSuchMm(_))
    ));
    assert_eq!(m.munmap(CALLER, mm, 0x101), Err(MmError::BadAddress(0x101)));
    assert_eq!(m.stats().faults, 0);
    m.verify().unwrap();
}

#[test]
fn out_of_memory_is_an_error_and_leaves_everything_consistent() {
    // 512 pages, minus what the watermarks keep back.
    let mut m = memory(512, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    m.mmap_anon(mm, 0x1000, 1024, Order::ZERO).unwrap();
    let mut mapped = 0;
    let error = loop {
        match m.access(CALLER, mm, 0x1000 + mapped, true, &mut NoIo) {
            Ok(_) => mapped += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(error, MmError::OutOfMemory);
    assert!(mapped > 256, "most of the zone was usable: {mapped}");
    assert_eq!(m.stats().anon_mapped, mapped);
    m.verify().unwrap();
    // Out of swap, reclaim keeps the pages rather than losing them.
    let outcome = m
        .madvise_pageout(CALLER, mm, 0x1000, mapped, &mut NoIo)
        .unwrap();
    assert_eq!(outcome.reclaimed, 0);
    assert_eq!(m.stats().anon_mapped, mapped);
    m.munmap(CALLER, mm, 0x1000).unwrap();
    m.verify().unwrap();
}

fn memory_cpus(zone_pages: u64, cpus: u32, policy: MmPolicy, swap_slots: u64) -> Memory {
    Memory::new(common::allocator_cpus(zone_pages, cpus), policy, swap_slots)
}

#[test]
fn charges_are_batched_per_cpu() {
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    let group = m.create_memcg(MemcgId::ROOT).unwrap();
    m.set_mm_memcg(mm, group).unwrap();
    m.mmap_anon(mm, 0x100, 8, Order::ZERO).unwrap();
    m.access(CALLER, mm, 0x100, true, &mut NoIo).unwrap();
    // One page charged, a batch of 64 taken from the counter, 63 left in CPU 0's stock.
    assert_eq!(m.memcgs().get(group).unwrap().usage, MEMCG_CHARGE_BATCH);
    assert_eq!(m.memcgs().stock_pages(group), MEMCG_CHARGE_BATCH - 1);
    assert_eq!(m.memcgs().get(group).unwrap().anon, 1);
    m.verify().unwrap();
}

#[test]
fn a_cgroup_over_its_limit_reclaims_its_own_pages_only() {
    let mut m = memory(8192, MmPolicy::V6_7, 4096);
    let (a, b) = (m.create_mm(), m.create_mm());
    let (ga, gb) = (
        m.create_memcg(MemcgId::ROOT).unwrap(),
        m.create_memcg(MemcgId::ROOT).unwrap(),
    );
    m.set_mm_memcg(a, ga).unwrap();
    m.set_mm_memcg(b, gb).unwrap();
    m.mmap_anon(b, 0x100, 512, Order::ZERO).unwrap();
    for v in 0..512 {
        m.access(CALLER, b, 0x100 + v, true, &mut NoIo).unwrap();
    }
    let b_before = m.mm(b).unwrap().counters;
    m.set_memory_max(CALLER, ga, 256, &mut NoIo).unwrap();
    m.mmap_anon(a, 0x1000, 1024, Order::ZERO).unwrap();
    for v in 0..1024 {
        m.access(CALLER, a, 0x1000 + v, true, &mut NoIo).unwrap();
        assert!(m.memcgs().get(ga).unwrap().usage <= 256);
    }
    assert!(m.memcgs().get(ga).unwrap().events.pgsteal >= 1024 - 256);
    assert_eq!(m.memcgs().get(gb).unwrap().events.pgsteal, 0);
    assert_eq!(m.mm(b).unwrap().counters, b_before, "B lost nothing");
    assert!(m.mm(a).unwrap().counters.swap_entries >= 1024 - 256);
    m.verify().unwrap();
}

#[test]
fn exceeding_memory_max_with_nothing_reclaimable_is_out_of_memory() {
    // No swap: anonymous pages cannot be reclaimed.
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    let group = m.create_memcg(MemcgId::ROOT).unwrap();
    m.set_mm_memcg(mm, group).unwrap();
    m.set_memory_max(CALLER, group, 100, &mut NoIo).unwrap();
    m.mmap_anon(mm, 0x100, 200, Order::ZERO).unwrap();
    let mut mapped = 0;
    let error = loop {
        match m.access(CALLER, mm, 0x100 + mapped, true, &mut NoIo) {
            Ok(_) => mapped += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(error, MmError::OutOfMemory);
    assert_eq!(mapped, 100);
    assert_eq!(m.memcgs().get(group).unwrap().events.oom, 1);
    m.verify().unwrap();
    // The system stays usable: freeing makes room again.
    m.munmap(CALLER, mm, 0x100).unwrap();
    m.mmap_anon(mm, 0x100, 10, Order::ZERO).unwrap();
    m.access(CALLER, mm, 0x100, true, &mut NoIo).unwrap();
    m.verify().unwrap();
}

/// Wang 2019: both ways of sizing an LRU list give the same pages; the per-CPU one reads
/// a counter per CPU, the zone one a counter per zone type, whatever the CPU count.
#[test]
fn lru_size_policies_agree_and_differ_in_cost() {
    for cpus in [2, 64] {
        let mut reads = Vec::new();
        for lru_size in [LruSizePolicy::ZoneSizes, LruSizePolicy::PercpuCounters] {
            let policy = MmPolicy {
                lru_size,
                ..MmPolicy::V6_7
            };
            let mut m = memory_cpus(4096, cpus, policy, 0);
            let mm = m.create_mm();
            m.mmap_anon(mm, 0x100, 40, Order::ZERO).unwrap();
            for v in 0..40 {
                let caller = Caller::task(v as u32 % cpus);
                m.access(caller, mm, 0x100 + v, true, &mut NoIo).unwrap();
            }
            let before = m.stats().lru_size_reads;
            let normal = ZoneType::Normal.index();
            let size = m.lruvec_lru_size(MemcgId::ROOT, 0, LruList::InactiveAnon, normal);
            assert_eq!(size, 40, "{lru_size:?}");
            reads.push(m.stats().lru_size_reads - before);
        }
        // Wang 2019's fix sums all five zones' counters; the machine has no managed zone
        // above Normal, so neither policy subtracts one.
        assert_eq!(reads[0], mmkit_core::page_alloc::MAX_NR_ZONES as u64);
        assert_eq!(reads[1], u64::from(cpus));
    }
}

#[test]
fn memory_stat_uses_linux_names_and_bytes() {
    let mut m = memory(4096, MmPolicy::V6_7, 0);
    let mm = m.create_mm();
    m.mmap_anon(mm, 0x100, 3, Order::ZERO).unwrap();
    for v in 0..3 {
        m.access(CALLER, mm, 0x100 + v, true, &mut NoIo).unwrap();
    }
    let stat = m.memcgs().memory_stat(MemcgId::ROOT).unwrap();
    assert!(
        stat.starts_with(
            "anon 12288\nfile 0\nfile_mapped 0\nanon_thp 0\ninactive_anon 12288\nactive_anon 0\n"
        ),
        "{stat}"
    );
    assert!(stat.contains("pgfault 3\n"), "{stat}");
}

#[test]
fn kswapd_balances_a_node_below_its_low_watermark() {
    let mut m = memory(2048, MmPolicy::V6_7, 4096);
    let mm = m.create_mm();
    m.mmap_anon(mm, 0x1000, 4096, Order::ZERO).unwrap();
    let zone_index = ZoneType::Normal.index();
    let mut v = 0;
    loop {
        let zone = &m.allocator().zones()[zone_index];
        if zone.free_pages() < zone.wmark(mmkit_core::page_alloc::WatermarkKind::Low) as i64 {
            break;
        }
        m.access(CALLER, mm, 0x1000 + v, true, &mut NoIo).unwrap();
        v += 1;
    }
    // One wake-up: balance_pgdat runs until the node is balanced (the first run mostly
    // activates the pages it finds referenced).
    let outcome = m.kswapd(CALLER, 0, &mut NoIo).unwrap();
    assert!(outcome.reclaimed > 0);
    let zone = &m.allocator().zones()[zone_index];
    assert!(zone.free_pages() >= zone.wmark(mmkit_core::page_alloc::WatermarkKind::High) as i64);
    assert!(!zone
        .flags()
        .contains(mmkit_core::page_alloc::ZoneFlags::RECLAIM_ACTIVE));
    m.verify().unwrap();
}

/// `docs/reference/linux-mm.md` §5.4: kswapd finds only dirty file pages already under write-back for reclaim
/// and marks the node congested; then a root `memory.reclaim` runs. With one shared bit
/// (before 6.5) it clears kswapd's mark, so direct reclaimers stop being throttled while
/// the node is still unbalanced; with separate bits the node stays marked.
#[test]
fn root_memory_reclaim_unthrottles_the_node_only_with_a_shared_bit() {
    for (bits, throttled_after) in [
        (CongestionBits::Shared, false),
        (CongestionBits::Separate, true),
    ] {
        let policy = MmPolicy {
            congestion: bits,
            ..MmPolicy::V6_7
        };
        let mut m = memory(2048, policy, 0);
        m.set_async_writeback(true);
        let file = m.create_file(4096, Order::ZERO);
        let mm = m.create_mm();
        m.mmap_file(mm, 0x1000, 4096, file, 0).unwrap();
        // Dirty file pages until the zone is below its low watermark.
        let zone_index = ZoneType::Normal.index();
        let mut v = 0;
        loop {
            let zone = &m.allocator().zones()[zone_index];
            if zone.free_pages() < zone.wmark(mmkit_core::page_alloc::WatermarkKind::Low) as i64 {
                break;
            }
            m.access(CALLER, mm, 0x1000 + v, true, &mut NoIo).unwrap();
            v += 1;
        }
        // kswapd's first runs activate the pages they find referenced, then one queues
        // dirty pages for write-back; woken again while the write-back is in flight,
        // kswapd reruns until it finds only pages it already asked for.
        for _ in 0..MAX_RECLAIM_RETRIES {
            if m.writeback_folios() > 0 {
                break;
            }
            m.kswapd_balance(CALLER, 0, &mut NoIo).unwrap();
        }
        assert!(m.writeback_folios() > 0, "write-back is in flight");
        assert!(!m.reclaim_throttled(MemcgId::ROOT, 0));
        m.kswapd(CALLER, 0, &mut NoIo).unwrap();
        assert!(
            m.reclaim_throttled(MemcgId::ROOT, 0),
            "{bits:?}: kswapd marked the node"
        );
        let zone = &m.allocator().zones()[zone_index];
        assert!(
            zone.free_pages() < zone.wmark(mmkit_core::page_alloc::WatermarkKind::High) as i64,
            "the node is not balanced"
        );
        let _ = m.memory_reclaim(CALLER, MemcgId::ROOT, 32, &mut NoIo);
        assert_eq!(
            m.reclaim_throttled(MemcgId::ROOT, 0),
            throttled_after,
            "{bits:?} after root memory.reclaim: {:?}",
            m.lruvec_flags(MemcgId::ROOT, 0)
        );
        // Once write-back ends, kswapd balances the node and clears every bit.
        m.end_all_writeback(CALLER);
        m.kswapd(CALLER, 0, &mut NoIo).unwrap();
        assert!(!m.reclaim_throttled(MemcgId::ROOT, 0));
        m.verify().unwrap();
    }
}

/// Dirty file pages of `mm`'s mapping at 0x1000 (4096 pages of a file) under
/// asynchronous write-back, touched until the zone is below its low watermark.
fn dirty_file_pages_below_low(m: &mut Memory) -> mmkit_core::mm::MmId {
    m.set_async_writeback(true);
    let file = m.create_file(4096, Order::ZERO);
    let mm = m.create_mm();
    m.mmap_file(mm, 0x1000, 4096, file, 0).unwrap();
    let zone_index = ZoneType::Normal.index();
    let mut v = 0;
    loop {
        let zone = &m.allocator().zones()[zone_index];
        if zone.free_pages() < zone.wmark(mmkit_core::page_alloc::WatermarkKind::Low) as i64 {
            return mm;
        }
        m.access(CALLER, mm, 0x1000 + v, true, &mut NoIo).unwrap();
        v += 1;
    }
}

/// Linux ≤ 6.4 sets the one congestion bit only for kswapd and for cgroup reclaim with
/// sane write-back throttling: global direct reclaim that finds nothing but pages already
/// queued for reclaim marks nothing, with one bit as with two.
#[test]
fn global_direct_reclaim_never_marks_the_node_congested() {
    for bits in [CongestionBits::Shared, CongestionBits::Separate] {
        let policy = MmPolicy {
            congestion: bits,
            ..MmPolicy::V6_7
        };
        let mut m = memory(2048, policy, 0);
        let mm = dirty_file_pages_below_low(&mut m);
        // Fault until the allocator fails: every fault after that reclaims directly,
        // writes the dirty pages back, then finds only pages it already queued.
        let mut v = 0;
        let error = loop {
            match m.access(CALLER, mm, 0x1000 + v, true, &mut NoIo) {
                Ok(_) => v += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(error, MmError::OutOfMemory, "{bits:?}");
        assert!(m.writeback_folios() > 0, "write-back is in flight");
        assert_eq!(
            m.lruvec_flags(MemcgId::ROOT, 0),
            Some(mmkit_core::mm::lru::LruvecFlags::empty()),
            "{bits:?}: direct reclaim marked the node"
        );
        assert!(!m.reclaim_throttled(MemcgId::ROOT, 0));
        // kswapd, finding the same pages, does mark it.
        m.kswapd_balance(CALLER, 0, &mut NoIo).unwrap();
        assert!(m.reclaim_throttled(MemcgId::ROOT, 0), "{bits:?}");
        m.verify().unwrap();
    }
}

/// `writeback_throttling_sane` is false for cgroup reclaim on cgroup v1: its second round,
/// which finds only the pages its first round queued for write-back, throttles on v2 and
/// does not on v1 (nothing was marked), under either bit layout.
#[test]
fn cgroup_v1_reclaim_does_not_mark_its_cgroup_congested() {
    for bits in [CongestionBits::Shared, CongestionBits::Separate] {
        for (hierarchy, throttled) in [(MemcgHierarchy::V2, true), (MemcgHierarchy::V1, false)] {
            let policy = MmPolicy {
                congestion: bits,
                ..MmPolicy::V6_7
            };
            let mut m = memory(4096, policy, 0);
            m.set_memcg_hierarchy(hierarchy);
            m.set_async_writeback(true);
            let group = m.create_memcg(MemcgId::ROOT).unwrap();
            let file = m.create_file(256, Order::ZERO);
            let mm = m.create_mm();
            m.set_mm_memcg(mm, group).unwrap();
            m.mmap_file(mm, 0x1000, 256, file, 0).unwrap();
            for v in 0..256 {
                m.access(CALLER, mm, 0x1000 + v, true, &mut NoIo).unwrap();
            }
            let mut rounds = Vec::new();
            for _ in 0..4 {
                rounds.push(
                    m.try_to_free_mem_cgroup_pages(CALLER, group, 256, &mut NoIo)
                        .unwrap(),
                );
            }
            let congested: u64 = rounds.iter().map(|r| r.congested).sum();
            assert!(congested > 0, "{bits:?} {hierarchy:?}: {rounds:?}");
            let throttles: u64 = rounds.iter().map(|r| r.throttled).sum();
            assert_eq!(
                throttles > 0,
                throttled,
                "{bits:?} {hierarchy:?}: {rounds:?}"
            );
            m.verify().unwrap();
        }
    }
}

/// Issue 9 with Gushchin/Zhou 2021: cgroups take their per-CPU statistics from the percpu
/// allocator, and removing them gives chunk pages back (v5.14 partial depopulation).
#[test]
fn cgroup_statistics_come_from_the_percpu_allocator() {
    let mut m = memory_cpus(4096, 8, MmPolicy::V6_7, 0);
    let before = m.percpu().meminfo_percpu_kb();
    let parent = m.create_memcg(MemcgId::ROOT).unwrap();
    // Enough cgroups to fill several chunks: Linux never depopulates the first chunk.
    let groups: Vec<_> = (0..12000)
        .map(|_| m.create_memcg(parent).unwrap())
        .collect();
    let created = m.percpu().meminfo_percpu_kb();
    assert!(created > before, "{before} kB → {created} kB");
    // A cgroup in use cannot go.
    let mm = m.create_mm();
    m.set_mm_memcg(mm, groups[0]).unwrap();
    assert_eq!(m.remove_memcg(groups[0]), Err(MmError::Busy(groups[0])));
    assert_eq!(m.remove_memcg(parent), Err(MmError::Busy(parent)));
    m.set_mm_memcg(mm, MemcgId::ROOT).unwrap();
    for &g in &groups {
        m.remove_memcg(g).unwrap();
    }
    assert_eq!(
        m.remove_memcg(groups[0]),
        Err(MmError::NoSuchMemcg(groups[0]))
    );
    let removed = m.percpu().meminfo_percpu_kb();
    assert!(
        removed < created,
        "{created} kB → {removed} kB after removal"
    );
    m.verify().unwrap();
}

/// A cgroup whose process read `pages` pages of `file` (from `index`) and left: the page
/// cache stays charged to it. The process's address space goes back to the root.
fn cgroup_with_page_cache(
    m: &mut Memory,
    parent: MemcgId,
    file: FileId,
    index: u64,
    pages: u64,
) -> MemcgId {
    let group = m.create_memcg(parent).unwrap();
    let mm = m.create_mm();
    m.set_mm_memcg(mm, group).unwrap();
    m.mmap_file(mm, 0x1000, pages, file, index).unwrap();
    for v in 0..pages {
        m.access(CALLER, mm, 0x1000 + v, false, &mut NoIo).unwrap();
    }
    m.munmap(CALLER, mm, 0x1000).unwrap();
    m.set_mm_memcg(mm, MemcgId::ROOT).unwrap();
    group
}

/// Removing a cgroup that still has pages charged leaves a zombie: offline (no new
/// tasks or charges), its pages charged and on its LRU, its per-CPU statistics
/// allocated, and visited by reclaim, which frees it with its last page.
#[test]
fn a_removed_cgroup_with_charged_pages_stays_a_zombie_until_its_last_page_goes() {
    use mmkit_core::mm::memcg::MemcgState;
    let mut m = memory_cpus(4096, 4, MmPolicy::V6_7, 0);
    let file = m.create_file(64, Order::ZERO);
    let group = cgroup_with_page_cache(&mut m, MemcgId::ROOT, file, 0, 16);
    let percpu_kb = m.percpu().meminfo_percpu_kb();
    assert_eq!(m.remove_memcg(group), Ok(()));
    assert_eq!(m.memcgs().state(group), Some(MemcgState::Offline));
    assert_eq!(m.memcgs().zombies(), 1);
    assert!(m.memcgs().get(group).is_none(), "offline: not usable");
    let mm = m.create_mm();
    assert_eq!(m.set_mm_memcg(mm, group), Err(MmError::NoSuchMemcg(group)));
    assert_eq!(m.remove_memcg(group), Err(MmError::NoSuchMemcg(group)));
    let zombie = m.memcgs().all().find(|g| g.id == group).unwrap();
    assert_eq!((zombie.file, zombie.usage), (16, 16));
    assert_eq!(zombie.lruvecs[0].pages(LruList::InactiveFile), 16);
    assert_eq!(m.percpu().meminfo_percpu_kb(), percpu_kb, "statistics kept");
    m.verify().unwrap();
    // Reclaim from the root visits the zombie and takes its page cache; with its last
    // page the zombie is freed, and so are its per-CPU statistics.
    let outcome = m
        .memory_reclaim(CALLER, MemcgId::ROOT, 16, &mut NoIo)
        .unwrap();
    assert!(outcome.reclaimed >= 16, "{outcome:?}");
    assert_eq!(m.memcgs().state(group), Some(MemcgState::Freed));
    assert_eq!(m.memcgs().zombies(), 0);
    let zombie = m.memcgs().all().find(|g| g.id == group).unwrap();
    assert!(zombie.percpu_areas.is_empty());
    m.verify().unwrap();
    // A freed cgroup is not visited: a root reclaim pass sizes only the root's lists.
    let calls = m.stats().lru_size_calls;
    m.try_to_free_mem_cgroup_pages(CALLER, MemcgId::ROOT, 1, &mut NoIo)
        .unwrap();
    let per_pass = m.stats().lru_size_calls - calls;
    let lists_per_priority = 4;
    assert!(
        per_pass <= lists_per_priority * 13,
        "{per_pass} lruvec_lru_size calls: the freed cgroup was visited"
    );
}

/// Zombie children do not hold their parent's removal up, and a zombie parent stays as
/// long as a zombie child holds pages (its usage counts theirs).
#[test]
fn a_zombie_parent_is_freed_with_its_last_zombie_childs_last_page() {
    use mmkit_core::mm::memcg::MemcgState;
    let mut m = memory_cpus(4096, 2, MmPolicy::V6_7, 0);
    let file = m.create_file(64, Order::ZERO);
    let parent = m.create_memcg(MemcgId::ROOT).unwrap();
    let child = cgroup_with_page_cache(&mut m, parent, file, 0, 8);
    assert_eq!(m.remove_memcg(parent), Err(MmError::Busy(parent)));
    m.remove_memcg(child).unwrap();
    m.remove_memcg(parent).unwrap();
    assert_eq!(m.memcgs().state(parent), Some(MemcgState::Offline));
    assert_eq!(m.memcgs().state(child), Some(MemcgState::Offline));
    assert_eq!(m.memcgs().zombies(), 2);
    m.verify().unwrap();
    m.memory_reclaim(CALLER, MemcgId::ROOT, 8, &mut NoIo)
        .unwrap();
    assert_eq!(m.memcgs().state(child), Some(MemcgState::Freed));
    assert_eq!(m.memcgs().state(parent), Some(MemcgState::Freed));
    m.verify().unwrap();
}

/// Swapped-out pages pin their cgroup (`swap_cgroup` records hold a reference on its id):
/// a cgroup removed after its process's pages went to swap is a zombie with empty LRU
/// lists, which reclaim still visits, until the process frees the slots.
#[test]
fn swap_records_keep_a_zombie_until_the_slots_are_freed() {
    use mmkit_core::mm::memcg::MemcgState;
    let mut m = memory_cpus(4096, 2, MmPolicy::V6_7, 256);
    let group = m.create_memcg(MemcgId::ROOT).unwrap();
    let mm = m.create_mm();
    m.set_mm_memcg(mm, group).unwrap();
    m.mmap_anon(mm, 0x1000, 8, Order::ZERO).unwrap();
    for v in 0..8 {
        m.access(CALLER, mm, 0x1000 + v, true, &mut NoIo).unwrap();
    }
    m.madvise_pageout(CALLER, mm, 0x1000, 8, &mut NoIo).unwrap();
    m.set_mm_memcg(mm, MemcgId::ROOT).unwrap();
    m.remove_memcg(group).unwrap();
    let zombie = m.memcgs().all().find(|g| g.id == group).unwrap();
    assert_eq!((zombie.anon, zombie.swap_records), (0, 8));
    assert_eq!(m.memcgs().state(group), Some(MemcgState::Offline));
    m.verify().unwrap();
    // Reclaim sizes the zombie's (empty) lists at every priority.
    let calls = m.stats().lru_size_calls;
    m.try_to_free_mem_cgroup_pages(CALLER, MemcgId::ROOT, 1, &mut NoIo)
        .unwrap();
    assert_eq!(
        m.stats().lru_size_calls - calls,
        2 * 4 * 13,
        "root and zombie"
    );
    // The process swaps one page back in: the page is charged to the root, and the
    // zombie loses one record.
    m.access(CALLER, mm, 0x1000, false, &mut NoIo).unwrap();
    let zombie = m.memcgs().all().find(|g| g.id == group).unwrap();
    assert_eq!(zombie.swap_records, 7);
    m.verify().unwrap();
    // Its exit frees the other slots, and the zombie with them.
    m.munmap(CALLER, mm, 0x1000).unwrap();
    assert_eq!(m.memcgs().state(group), Some(MemcgState::Freed));
    m.verify().unwrap();
}
