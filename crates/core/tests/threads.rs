//! The allocator on real threads: concurrent allocation, remote frees (a block allocated
//! on one CPU freed on another), drains of other CPUs' pagesets, ticks and setting
//! changes, then a full `verify()`. Each thread plays one CPU; a block's first page gets a
//! canary (its pfn and a generation) in a side table that is checked at free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;

use mmkit_core::page_alloc::{Caller, Gfp, ZoneType};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Order, PageAllocator, Pfn, Policy, Settings, Topology};

fn machine(policy: Policy) -> PageAllocator {
    let zones = [
        ZoneSize::managed(0, ZoneType::Dma32, 60_000),
        ZoneSize::managed(0, ZoneType::Normal, 40_000),
    ];
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 4,
    };
    let topology = Topology::x86_64(&zones, vec![4], llc, false).unwrap();
    let settings = Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(4096),
        ..Settings::default()
    };
    PageAllocator::new(topology, settings, policy).unwrap()
}

/// xorshift64*: a tiny deterministic generator per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn hammer(policy: Policy) {
    let allocator = Arc::new(machine(policy));
    // Blocks handed between threads: (pfn, order, canary).
    let mailbox: Arc<Mutex<Vec<(Pfn, Order, u64)>>> = Arc::default();
    let canaries: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let threads: Vec<_> = (0..4u32)
        .map(|cpu| {
            let (allocator, mailbox, canaries) =
                (allocator.clone(), mailbox.clone(), canaries.clone());
            thread::spawn(move || {
                let caller = Caller::task(cpu);
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (cpu as u64 + 1));
                let mut held: Vec<(Pfn, Order, u64)> = Vec::new();
                for step in 0..4000u64 {
                    match rng.below(100) {
                        0..=49 => {
                            let order =
                                Order::new([0, 0, 0, 1, 2, 3, 9][rng.below(7) as usize]).unwrap();
                            let gfp =
                                [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::KERNEL | Gfp::DMA32]
                                    [rng.below(3) as usize];
                            if let Ok(pfn) = allocator.alloc_pages(caller, gfp, order) {
                                let canary = (cpu as u64) << 32 | step;
                                let previous = canaries.lock().unwrap().insert(pfn.0, canary);
                                assert_eq!(previous, None, "{pfn:?} handed out twice");
                                held.push((pfn, order, canary));
                            }
                        }
                        50..=79 if !held.is_empty() => {
                            let (pfn, order, canary) =
                                held.swap_remove(rng.below(held.len() as u64) as usize);
                            if rng.below(2) == 0 {
                                mailbox.lock().unwrap().push((pfn, order, canary));
                            } else {
                                assert_eq!(canaries.lock().unwrap().remove(&pfn.0), Some(canary));
                                allocator.free_pages(caller, pfn, order).unwrap();
                            }
                        }
                        80..=89 => {
                            let remote = mailbox.lock().unwrap().pop();
                            if let Some((pfn, order, canary)) = remote {
                                assert_eq!(canaries.lock().unwrap().remove(&pfn.0), Some(canary));
                                allocator.free_pages(caller, pfn, order).unwrap();
                            }
                        }
                        90..=93 => {
                            allocator.drain_all_pages(None);
                        }
                        94..=97 => {
                            allocator.vmstat_tick(cpu);
                        }
                        _ => {
                            let mut settings = allocator.settings();
                            settings.percpu_pagelist_high_fraction =
                                [0, 8, 16][rng.below(3) as usize];
                            allocator.set_settings(settings).unwrap();
                        }
                    }
                }
                held
            })
        })
        .collect();
    let mut leftovers: Vec<(Pfn, Order, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    leftovers.extend(mailbox.lock().unwrap().drain(..));
    allocator.verify().expect("consistent after concurrent use");
    let events = |f: fn(&mmkit_core::page_alloc::ZoneEvents) -> u64| -> u64 {
        allocator.zones().iter().map(|z| f(z.events())).sum()
    };
    assert!(
        allocator.zones().iter().map(|z| z.pgalloc()).sum::<u64>() > 10_000,
        "the threads really allocated"
    );
    assert!(events(|e| e.pcp_refills()) > 0, "pagesets were refilled");
    assert!(
        events(|e| e.pcp_drains_total()) > 0,
        "pagesets were drained"
    );
    let live_pages: u64 = leftovers.iter().map(|(_, o, _)| o.pages()).sum();
    let census_allocated: u64 = allocator
        .verify()
        .unwrap()
        .iter()
        .map(|c| c.allocated)
        .sum();
    assert_eq!(
        census_allocated, live_pages,
        "every live block is accounted for"
    );
    for (pfn, order, canary) in leftovers {
        assert_eq!(canaries.lock().unwrap().remove(&pfn.0), Some(canary));
        allocator.free_pages(Caller::task(0), pfn, order).unwrap();
    }
    for cpu in 0..4 {
        allocator.drain_pages(cpu);
    }
    let census = allocator.verify().unwrap();
    assert!(census.iter().all(|c| c.allocated == 0 && c.pcp == 0));
    let managed: u64 = allocator.zones().iter().map(|z| z.managed()).sum();
    let free: i64 = allocator.zones().iter().map(|z| z.free_pages()).sum();
    assert_eq!(free as u64, managed, "all memory back on the buddy lists");
}

#[test]
fn four_threads_with_remote_frees_and_drains_stay_consistent_v6_7() {
    hammer(Policy::V6_7);
}

#[test]
fn four_threads_with_remote_frees_and_drains_stay_consistent_base() {
    hammer(Policy::BASE);
}
