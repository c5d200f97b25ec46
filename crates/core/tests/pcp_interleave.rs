//! A deterministic interleaving of four virtual CPUs on one thread: allocations of every
//! PCP order (0–3 and THP) with assorted GFP flags and contexts, frees from other CPUs,
//! batched frees, bulk allocations, vmstat ticks, local and global drains, setting
//! changes, CPU offline/online, zone flags and `zone_pcp_disable`, for the presets base,
//! patch3, patch7 and v6.7.
//!
//! After every step `PageAllocator::verify` must pass (every page in exactly one place:
//! the buddy lists, one pageset, or allocated) and its census must agree with the test's
//! own model of live allocations. A second run of the same seed must end with identical
//! event counters and pagesets (determinism checked as the simulator checks it).
//!
//! The random source is xorshift64* seeded per run; no dependency.

use std::collections::HashMap;

use mmkit_core::internals;
use mmkit_core::page_alloc::{AllocError, Caller, DrainReason, ZoneFlags, ZoneId};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::{Gfp, Order, PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};

const CPUS: u32 = 4;
const STEPS: usize = 2500;
const ZONE_TYPES: [ZoneType; 2] = [ZoneType::Dma32, ZoneType::Normal];

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// DMA32 of 24576 pages (batch 7) and Normal of 49152 pages (batch 15) on four CPUs, so
/// that the pagesets fill, drain and retune often, the filling phases run the zones low,
/// and a full verify stays cheap.
fn machine(policy: Policy) -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma32, 24_576),
        ZoneSize::managed(0, ZoneType::Normal, 49_152),
    ];
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: CPUS,
    };
    let topology = Topology::x86_64(&sizes, vec![CPUS], llc, false).expect("valid topology");
    PageAllocator::new(topology, settings(0, 4096, 5), policy).expect("valid settings")
}

fn settings(fraction: u32, min_free_kbytes: u64, scale_max: u8) -> Settings {
    Settings {
        min_free_kbytes: MinFreeKbytes::Explicit(min_free_kbytes),
        percpu_pagelist_high_fraction: fraction,
        pcp_batch_scale_max: scale_max,
        ..Settings::default()
    }
}

const GFPS: [Gfp; 7] = [
    Gfp::KERNEL,
    Gfp::KERNEL.union(Gfp::MOVABLE),
    Gfp::KERNEL.union(Gfp::RECLAIMABLE),
    Gfp::KERNEL.union(Gfp::DMA32),
    Gfp::ATOMIC,
    Gfp::NOWAIT,
    Gfp::HIGHUSER_MOVABLE,
];
const ORDERS: [u8; 8] = [0, 0, 0, 0, 1, 2, 3, 9];

/// A live allocation: where it came from, for the census and for choosing a remote CPU.
#[derive(Clone, Copy, Debug)]
struct Block {
    order: Order,
    cpu: u32,
}

/// The test's model of the allocator: live blocks, which CPUs are online, how often each
/// zone is disabled.
struct Model {
    live: HashMap<Pfn, Block>,
    online: [bool; CPUS as usize],
    disabled: [u32; 2],
    /// Allocations refused for lack of memory.
    failures: u64,
}

impl Model {
    fn online_cpus(&self) -> Vec<u32> {
        (0..CPUS).filter(|&cpu| self.online[cpu as usize]).collect()
    }
}

struct Run<'a> {
    allocator: &'a PageAllocator,
    rng: Rng,
    model: Model,
    name: &'static str,
}

impl Run<'_> {
    fn caller(&mut self) -> Caller {
        let cpu = self.rng.pick(&self.model.online_cpus());
        if self.rng.below(8) == 0 {
            Caller::softirq(cpu)
        } else {
            Caller::task(cpu)
        }
    }

    fn record(&mut self, pfn: Pfn, order: Order, cpu: u32, gfp: Gfp) {
        let zone = self
            .allocator
            .find_zone(pfn)
            .expect("an allocated pfn lies in a zone");
        let highest = gfp.zone().expect("valid gfp");
        assert!(
            zone.zone_type() <= highest,
            "{}: {gfp:?} got {}",
            self.name,
            zone.zone_type()
        );
        assert!(pfn.is_aligned(order));
        let old = self.model.live.insert(pfn, Block { order, cpu });
        assert!(old.is_none(), "{}: {pfn:?} handed out twice", self.name);
    }

    /// One allocation; while filling, a quarter of them are THP.
    fn alloc(&mut self, filling: bool) {
        let caller = self.caller();
        let thp = filling && self.rng.below(4) == 0;
        let order = if thp {
            Order::new(9)
        } else {
            Order::new(self.rng.pick(&ORDERS))
        };
        let order = order.expect("valid order");
        let gfp = if order.get() == 9 && self.rng.below(2) == 0 {
            Gfp::TRANSHUGE
        } else {
            self.rng.pick(&GFPS)
        };
        match self.allocator.alloc_pages(caller, gfp, order) {
            Ok(pfn) => self.record(pfn, order, caller.cpu, gfp),
            Err(AllocError::OutOfMemory { .. }) => self.model.failures += 1,
            Err(e) => panic!("{}: {e:?}", self.name),
        }
    }

    fn bulk(&mut self) {
        let caller = self.caller();
        let gfp = self.rng.pick(&GFPS[..4]);
        let n = 2 + self.rng.below(48);
        let pfns: Vec<Pfn> = if self.rng.below(2) == 0 {
            let mut array = vec![None; n];
            let got = self
                .allocator
                .alloc_pages_bulk_array(caller, gfp, None, &mut array)
                .expect("bulk");
            let pfns: Vec<Pfn> = array.into_iter().flatten().collect();
            assert_eq!(got, pfns.len());
            pfns
        } else {
            let mut list = Vec::new();
            let got = self
                .allocator
                .alloc_pages_bulk_list(caller, gfp, None, n, &mut list)
                .expect("bulk");
            assert_eq!(got, list.len());
            list
        };
        assert!(pfns.len() <= n);
        for pfn in pfns {
            self.record(pfn, Order::ZERO, caller.cpu, gfp);
        }
    }

    /// A live block, chosen at random (deterministically: sorted by pfn).
    fn victim(&mut self) -> Option<(Pfn, Block)> {
        if self.model.live.is_empty() {
            return None;
        }
        let mut pfns: Vec<&Pfn> = self.model.live.keys().collect();
        pfns.sort_unstable();
        let pfn = *pfns[self.rng.below(pfns.len())];
        Some((pfn, self.model.live[&pfn]))
    }

    /// Free a block, preferably from a CPU other than the one that allocated it.
    fn free(&mut self) {
        let Some((pfn, block)) = self.victim() else {
            return;
        };
        let online = self.model.online_cpus();
        let others: Vec<u32> = online.iter().copied().filter(|&c| c != block.cpu).collect();
        let cpu = if others.is_empty() {
            online[0]
        } else {
            self.rng.pick(&others)
        };
        let caller = if self.rng.below(8) == 0 {
            Caller::softirq(cpu)
        } else {
            Caller::task(cpu)
        };
        self.allocator
            .free_pages(caller, pfn, block.order)
            .expect("a live block frees");
        self.model.live.remove(&pfn);
    }

    fn free_batch(&mut self) {
        let mut zeros: Vec<Pfn> = self
            .model
            .live
            .iter()
            .filter(|(_, b)| b.order == Order::ZERO)
            .map(|(&p, _)| p)
            .collect();
        zeros.sort_unstable();
        let start = if zeros.is_empty() {
            0
        } else {
            self.rng.below(zeros.len())
        };
        let batch: Vec<Pfn> = zeros
            .into_iter()
            .skip(start)
            .take(1 + self.rng.below(40))
            .collect();
        let caller = self.caller();
        assert_eq!(
            self.allocator.free_pages_batch(caller, &batch),
            Ok(()),
            "{}",
            self.name
        );
        for pfn in batch {
            self.model.live.remove(&pfn);
        }
    }

    fn settings_change(&mut self) {
        let fraction = self.rng.pick(&[0, 0, 8, 16]);
        let min_free_kbytes = self.rng.pick(&[2048, 4096, 8192]);
        let scale_max = self.rng.below(7) as u8;
        let new = settings(fraction, min_free_kbytes, scale_max);
        self.allocator
            .set_settings(new.clone())
            .expect("valid settings");
        assert_eq!(self.allocator.settings(), new);
    }

    fn hotplug(&mut self) {
        let online = self.model.online_cpus();
        let cpu = self.rng.below(CPUS as usize) as u32;
        let expected = if self.model.online[cpu as usize] {
            let ok = self.allocator.cpu_down(cpu);
            assert_eq!(ok, online.len() > 1, "{}: offline cpu {cpu}", self.name);
            ok
        } else {
            assert!(
                self.allocator.cpu_up(cpu),
                "{}: online cpu {cpu}",
                self.name
            );
            true
        };
        if expected {
            self.model.online[cpu as usize] ^= true;
        }
        for cpu in 0..CPUS {
            assert_eq!(
                self.allocator.is_cpu_online(cpu),
                self.model.online[cpu as usize]
            );
        }
    }

    fn zone_flags(&mut self) {
        let zone_type = self.rng.pick(&ZONE_TYPES);
        let zone = self.allocator.zone(0, zone_type).expect("zone");
        let flag = self
            .rng
            .pick(&[ZoneFlags::RECLAIM_ACTIVE, ZoneFlags::BELOW_HIGH]);
        if self.rng.below(2) == 0 {
            internals::set_zone_flag(zone, flag);
        } else {
            internals::clear_zone_flag(zone, flag);
        }
    }

    fn pcp_disable(&mut self) {
        let index = self.rng.below(2);
        let id = ZoneId {
            node: 0,
            zone_type: ZONE_TYPES[index],
        };
        if self.model.disabled[index] > 0 && self.rng.below(3) != 0 {
            assert_eq!(self.allocator.zone_pcp_enable(id), Some(()));
            self.model.disabled[index] -= 1;
        } else if self.model.disabled[index] < 2 {
            assert!(self.allocator.zone_pcp_disable(id).is_some());
            self.model.disabled[index] += 1;
            let zone = self.allocator.zone(0, ZONE_TYPES[index]).expect("zone");
            assert_eq!(
                zone.pcp_pages(),
                0,
                "{}: disable drains every CPU",
                self.name
            );
        }
    }

    /// One random operation. Every other 500 steps is a filling phase that allocates
    /// until the zones run low (allocation failures, BELOW_HIGH); past 99% of memory the
    /// allocations turn into frees. The other phases free more than they allocate.
    fn step(&mut self, step: usize) {
        let live_pages: u64 = self.model.live.values().map(|b| b.order.pages()).sum();
        let full = live_pages > 73_000;
        let filling = (step / 500) % 2 == 1;
        let allocs = if filling { 69 } else { 24 };
        match self.rng.below(100) {
            roll if roll <= allocs && !full => self.alloc(filling),
            0..=56 => self.free(),
            57..=69 if filling => self.free(),
            57..=61 => self.bulk(),
            62..=66 => self.free_batch(),
            67..=78 => {
                let cpu = self.rng.pick(&self.model.online_cpus());
                self.allocator.vmstat_tick(cpu);
            }
            79..=82 => {
                let cpu = self.rng.pick(&self.model.online_cpus());
                let zone = self.rng.pick(&[
                    None,
                    Some(ZoneId {
                        node: 0,
                        zone_type: ZoneType::Normal,
                    }),
                ]);
                self.allocator.drain_local_pages(cpu, zone);
            }
            83..=85 => {
                let zone = self.rng.pick(&[
                    None,
                    Some(ZoneId {
                        node: 0,
                        zone_type: ZoneType::Dma32,
                    }),
                ]);
                let result = self.allocator.drain_all_pages(zone);
                assert!(
                    matches!(result, mmkit_core::page_alloc::DrainAll::Done { .. }),
                    "{}",
                    self.name
                );
            }
            86..=88 => self.settings_change(),
            89..=91 => self.hotplug(),
            92..=95 => self.zone_flags(),
            _ => self.pcp_disable(),
        }
    }

    /// The allocator's census against the model, zone by zone.
    fn check(&self, step: usize) {
        let censuses = self
            .allocator
            .verify()
            .unwrap_or_else(|e| panic!("{} step {step}: verify: {e}", self.name));
        for (zone, census) in self.allocator.zones().iter().zip(&censuses) {
            let live: u64 = self
                .model
                .live
                .iter()
                .filter(|(&pfn, _)| zone.spans(pfn))
                .map(|(_, b)| b.order.pages())
                .sum();
            assert_eq!(
                census.allocated,
                live,
                "{} step {step}: {} allocated",
                self.name,
                zone.zone_type()
            );
            assert_eq!(
                census.pcp,
                zone.pcp_pages(),
                "{} step {step}: {} pcp",
                self.name,
                zone.zone_type()
            );
            assert_eq!(census.free + census.pcp + census.allocated, zone.managed());
            for cpu in (0..CPUS).filter(|&cpu| !self.model.online[cpu as usize]) {
                let pcp = zone.pageset(cpu).expect("cpu");
                assert_eq!(
                    pcp.count, 0,
                    "{} step {step}: offline cpu {cpu} holds pages",
                    self.name
                );
            }
        }
    }
}

/// Every counter of every zone, and each pageset's count and high: the run's fingerprint.
fn fingerprint(allocator: &PageAllocator) -> Vec<u64> {
    let mut all = Vec::new();
    for zone in allocator.zones() {
        let e = zone.events();
        all.extend([zone.pgalloc(), zone.pgfree()]);
        all.extend([
            e.alloc_zone_locked(),
            e.alloc_zone_locked_events(),
            e.extfrag_events(),
            e.watermark_boosts(),
            e.pcp_refills(),
            e.pcp_refill_pages(),
            e.pcp_lock_contended(),
            e.pcp_irq_bypass(),
        ]);
        all.extend(DrainReason::ALL.map(|reason| e.pcp_drains(reason)));
        all.extend(DrainReason::ALL.map(|reason| e.pcp_drain_pages(reason)));
        for cpu in 0..CPUS {
            let pcp = zone.pageset(cpu).expect("cpu");
            all.extend([pcp.count, pcp.high, pcp.high_min, pcp.high_max, pcp.batch]);
        }
    }
    all
}

/// Run `STEPS` steps of seed `seed` under `policy`, checking after every step. Returns the
/// fingerprint.
fn run(name: &'static str, policy: Policy, seed: u64) -> Vec<u64> {
    let allocator = machine(policy);
    let mut run = Run {
        allocator: &allocator,
        rng: Rng::new(seed),
        model: Model {
            live: HashMap::new(),
            online: [true; CPUS as usize],
            disabled: [0; 2],
            failures: 0,
        },
        name,
    };
    run.check(0);
    for step in 1..=STEPS {
        run.step(step);
        run.check(step);
    }
    let total = fingerprint(&allocator);
    // The run must have exercised the pagesets: refills, frees, and drains of several kinds.
    let normal = allocator.zone(0, ZoneType::Normal).expect("normal");
    assert!(normal.events().pcp_refills() > 50, "{name}");
    assert!(normal.events().pcp_drains_total() > 50, "{name}");
    assert!(
        run.model.failures > 0,
        "{name}: the filling phases reach allocation failures"
    );
    total
}

const SEED: u64 = 0x5eed_0001_d1ce_cafe;

#[test]
fn interleaved_cpus_keep_every_page_accounted_for_in_base() {
    run("base", Policy::BASE, SEED);
}

#[test]
fn interleaved_cpus_keep_every_page_accounted_for_in_patch3() {
    run(
        "patch3",
        Policy::preset("patch3").expect("preset"),
        SEED ^ 3,
    );
}

#[test]
fn interleaved_cpus_keep_every_page_accounted_for_in_patch7() {
    run(
        "patch7",
        Policy::preset("patch7").expect("preset"),
        SEED ^ 7,
    );
}

#[test]
fn interleaved_cpus_keep_every_page_accounted_for_in_v6_7() {
    run("v6.7", Policy::V6_7, SEED ^ 67);
}

#[test]
fn same_seed_gives_identical_counters() {
    let first = run("v6.7", Policy::V6_7, SEED);
    let second = run("v6.7", Policy::V6_7, SEED);
    assert_eq!(first, second);
    let other = run("v6.7", Policy::V6_7, SEED + 1);
    assert_ne!(first, other, "a different seed takes a different path");
}
