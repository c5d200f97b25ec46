//! The batched free against its naive model: the same pages freed one by one.
//!
//! Two allocators, built alike, run the same random operations: allocations of every
//! cheap order in both zones of a small machine (batch 3, so pagesets drain every few
//! frees), single frees, vmstat ticks, local drains, zone flags (`RECLAIM_ACTIVE`,
//! `BELOW_HIGH`) set and cleared by hand, `zone_pcp_disable`, and setting changes
//! (`percpu_pagelist_high_fraction`, which makes `high_min = high_max`;
//! `pcp_batch_scale_max`). A batch of order-0 pages, in random order across both zones,
//! goes to `free_pages_batch` on the first allocator and to `free_pages` page by page on
//! the second. In half the cases the first allocator frees through the exclusive entry
//! points instead (`free_pages_batch_exclusive`, `free_pages_exclusive`), which must leave
//! the same state and refuse alike. After every operation both must hold the same state: every pageset's
//! fields and lists in order, each CPU's vm events, each zone's event counters, flags,
//! free count and buddy lists in order; after each case, every page descriptor.
//!
//! Single-threaded, a batch and its single frees take the pageset locks in different
//! places (a batch relocks every 32 pages) but nothing else can tell: no trylock fails.
//! A batch with one bad pfn must return the error a single free of that pfn returns (or
//! `Duplicate`) with its index, and change nothing. Every preset of the series runs, with
//! `linux-6.18` and Gorman 2017's interrupt bypass (softirq batches go to the zone).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;
use proptest::sample::Index;

use super::{BatchFreeError, Caller, FreeError, Gfp, PageAllocator, ZoneFlags, ZoneType};
use crate::page::{Order, Pfn};
use crate::policy::{Policy, LATER_PRESETS, PRESETS};
use crate::settings::Settings;
use crate::topology::{CacheInfo, Topology, ZoneSize};

const CPUS: u32 = 2;
const ZONES: [ZoneType; 2] = [ZoneType::Dma32, ZoneType::Normal];

/// The policies under test: every preset, then v6.7 with the interrupt bypass.
fn policy(index: usize) -> Policy {
    let names = PRESETS.iter().chain(&LATER_PRESETS);
    match names.clone().nth(index) {
        Some(name) => Policy::preset(name).expect("a listed preset"),
        None => Policy {
            irq_bypass: true,
            ..Policy::V6_7
        },
    }
}

const POLICIES: usize = PRESETS.len() + LATER_PRESETS.len() + 1;

/// DMA32 of 12288 pages and Normal of 16384 on two CPUs: batch 3, `high_min` a few
/// batches, so drains and `free_high` come every few frees.
fn machine(policy: Policy) -> PageAllocator {
    let sizes = [
        ZoneSize::managed(0, ZoneType::Dma32, 12_288),
        ZoneSize::managed(0, ZoneType::Normal, 16_384),
    ];
    let llc = CacheInfo {
        llc_bytes: 32 << 20,
        llc_shared_cpus: 2,
    };
    let topology = Topology::x86_64(&sizes, alloc::vec![CPUS], llc, false).expect("valid");
    let settings = Settings {
        transparent_hugepage: false,
        ..Settings::default()
    };
    PageAllocator::new(topology, settings, policy).expect("valid settings")
}

/// A wrong pfn put in a batch.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// A pfn the batch already holds.
    Duplicate,
    /// An order-0 page freed earlier and not allocated again.
    NotAllocated,
    /// The head of a live block of order above 0.
    HighOrder,
    /// A page inside a live block of order above 0.
    Inside,
    /// A pfn no zone spans.
    Outside,
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        cpu: u32,
        dma32: bool,
        movable: bool,
        order: u8,
    },
    Free(Index),
    Batch {
        cpu: u32,
        softirq: bool,
        picks: Vec<Index>,
        bad: Option<(Index, Bad)>,
    },
    Flag {
        zone: usize,
        below_high: bool,
        set: bool,
    },
    Tick(u32),
    Drain(u32),
    PcpDisableToggle(usize),
    Settings {
        fraction: bool,
        scale_max: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let order = prop_oneof![6 => Just(0u8), 1 => 1u8..=3];
    let bad = prop_oneof![
        Just(Bad::Duplicate),
        Just(Bad::NotAllocated),
        Just(Bad::HighOrder),
        Just(Bad::Inside),
        Just(Bad::Outside),
    ];
    prop_oneof![
        12 => (0..CPUS, any::<bool>(), any::<bool>(), order)
            .prop_map(|(cpu, dma32, movable, order)| Op::Alloc { cpu, dma32, movable, order }),
        2 => any::<Index>().prop_map(Op::Free),
        6 => (
            0..CPUS,
            proptest::bool::weighted(0.2),
            proptest::collection::vec(any::<Index>(), 0..80),
            proptest::option::weighted(0.2, (any::<Index>(), bad)),
        )
            .prop_map(|(cpu, softirq, picks, bad)| Op::Batch { cpu, softirq, picks, bad }),
        1 => (0..ZONES.len(), any::<bool>(), proptest::bool::weighted(0.6))
            .prop_map(|(zone, below_high, set)| Op::Flag { zone, below_high, set }),
        1 => (0..CPUS).prop_map(Op::Tick),
        1 => (0..CPUS).prop_map(Op::Drain),
        1 => (0..ZONES.len()).prop_map(Op::PcpDisableToggle),
        1 => (proptest::bool::weighted(0.3), prop_oneof![Just(5u8), Just(0u8), Just(2u8)])
            .prop_map(|(fraction, scale_max)| Op::Settings { fraction, scale_max }),
    ]
}

/// The two allocators and what the test knows about them.
struct Pair {
    batched: PageAllocator,
    /// Whether `batched` frees through the exclusive entry points.
    exclusive: bool,
    single: PageAllocator,
    /// Live blocks, in allocation order.
    live: Vec<(Pfn, Order)>,
    /// Order-0 pages freed, perhaps allocated again since.
    freed: Vec<Pfn>,
    pcp_disabled: [bool; ZONES.len()],
}

impl Pair {
    fn new(policy: Policy, exclusive: bool) -> Pair {
        Pair {
            batched: machine(policy),
            exclusive,
            single: machine(policy),
            live: Vec::new(),
            freed: Vec::new(),
            pcp_disabled: [false; ZONES.len()],
        }
    }

    /// A single free on `batched`, through the entry point under test.
    fn free_batched(&self, caller: Caller, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if self.exclusive {
            self.batched.free_pages_exclusive(caller, pfn, order)
        } else {
            self.batched.free_pages(caller, pfn, order)
        }
    }

    /// The batched free under test.
    fn free_batch(&self, caller: Caller, pfns: &[Pfn]) -> Result<(), BatchFreeError> {
        if self.exclusive {
            self.batched.free_pages_batch_exclusive(caller, pfns)
        } else {
            self.batched.free_pages_batch(caller, pfns)
        }
    }

    fn both(&self, f: impl Fn(&PageAllocator)) {
        f(&self.batched);
        f(&self.single);
    }

    fn zone_id(zone: usize) -> super::ZoneId {
        super::ZoneId {
            node: 0,
            zone_type: ZONES[zone],
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Alloc {
                cpu,
                dma32,
                movable,
                order,
            } => {
                let mut gfp = Gfp::KERNEL;
                if dma32 {
                    gfp |= Gfp::DMA32;
                }
                if movable {
                    gfp |= Gfp::MOVABLE;
                }
                let order = Order::new(order).expect("a cheap order");
                let caller = Caller::task(cpu);
                let got = self.batched.alloc_pages(caller, gfp, order);
                assert_eq!(got, self.single.alloc_pages(caller, gfp, order));
                if let Ok(pfn) = got {
                    self.live.push((pfn, order));
                }
            }
            Op::Free(index) => {
                if self.live.is_empty() {
                    return;
                }
                let (pfn, order) = self.live.remove(index.index(self.live.len()));
                let caller = Caller::task(0);
                self.free_batched(caller, pfn, order).expect("live");
                self.single.free_pages(caller, pfn, order).expect("live");
                if order == Order::ZERO {
                    self.freed.push(pfn);
                }
            }
            Op::Batch {
                cpu,
                softirq,
                ref picks,
                bad,
            } => self.batch(cpu, softirq, picks, bad),
            Op::Flag {
                zone,
                below_high,
                set,
            } => {
                let flag = if below_high {
                    ZoneFlags::BELOW_HIGH
                } else {
                    ZoneFlags::RECLAIM_ACTIVE
                };
                self.both(|a| {
                    let zone = &a.zones()[zone_index(a, zone)];
                    if set {
                        zone.set_flag(flag);
                    } else {
                        zone.clear_flag(flag);
                    }
                });
            }
            Op::Tick(cpu) => self.both(|a| {
                a.vmstat_tick(cpu);
            }),
            Op::Drain(cpu) => self.both(|a| {
                a.drain_local_pages(cpu, None);
            }),
            Op::PcpDisableToggle(zone) => {
                let id = Self::zone_id(zone);
                let disabled = self.pcp_disabled[zone];
                self.both(|a| {
                    if disabled {
                        a.zone_pcp_enable(id).expect("a zone");
                    } else {
                        a.zone_pcp_disable(id).expect("a zone");
                    }
                });
                self.pcp_disabled[zone] = !disabled;
            }
            Op::Settings {
                fraction,
                scale_max,
            } => self.both(|a| {
                let settings = Settings {
                    percpu_pagelist_high_fraction: if fraction { 8 } else { 0 },
                    pcp_batch_scale_max: scale_max,
                    ..a.settings()
                };
                a.set_settings(settings).expect("valid settings");
            }),
        }
    }

    /// A batch of distinct live order-0 pages, with perhaps one bad pfn among them.
    fn batch(&mut self, cpu: u32, softirq: bool, picks: &[Index], bad: Option<(Index, Bad)>) {
        let order0: Vec<usize> = (0..self.live.len())
            .filter(|&i| self.live[i].1 == Order::ZERO)
            .collect();
        let mut chosen: Vec<usize> = Vec::new();
        if !order0.is_empty() {
            for pick in picks {
                let i = order0[pick.index(order0.len())];
                if !chosen.contains(&i) {
                    chosen.push(i);
                }
            }
        }
        let mut pfns: Vec<Pfn> = chosen.iter().map(|&i| self.live[i].0).collect();
        let caller = if softirq {
            Caller::softirq(cpu)
        } else {
            Caller::task(cpu)
        };
        if let Some((at, bad)) = bad.and_then(|(at, kind)| self.bad_pfn(&pfns, at, kind)) {
            let expected = match bad.1 {
                Bad::Duplicate => FreeError::Duplicate { pfn: bad.0 },
                _ => self
                    .single
                    .free_pages(caller, bad.0, Order::ZERO)
                    .expect_err("a bad pfn"),
            };
            pfns.insert(at, bad.0);
            let got = self.free_batch(caller, &pfns);
            assert_eq!(got, Err((at, expected).into()), "batch {pfns:?}");
            return;
        }
        assert_eq!(self.free_batch(caller, &pfns), Ok(()));
        for &pfn in &pfns {
            self.single
                .free_pages(caller, pfn, Order::ZERO)
                .expect("a live page");
        }
        chosen.sort_unstable();
        for &i in chosen.iter().rev() {
            self.live.remove(i);
        }
        self.freed.extend(pfns);
    }

    /// Where to put a bad pfn of `kind` in `pfns`, and which, if the state offers one.
    fn bad_pfn(&self, pfns: &[Pfn], at: Index, kind: Bad) -> Option<(usize, (Pfn, Bad))> {
        let at = at.index(pfns.len() + 1);
        let high_order = || self.live.iter().find(|&&(_, order)| order > Order::ZERO);
        let pfn = match kind {
            Bad::Duplicate => *pfns.get(at.checked_sub(1)?)?,
            Bad::NotAllocated => *self
                .freed
                .iter()
                .rev()
                .find(|&&pfn| !self.live.iter().any(|&(live, _)| live == pfn))?,
            Bad::HighOrder => high_order()?.0,
            Bad::Inside => high_order()?.0.add(1),
            Bad::Outside => Pfn(1 << 30),
        };
        Some((at, (pfn, kind)))
    }

    /// Both allocators hold the same state, bar the page descriptors.
    fn assert_same(&self, after: &str) {
        let (a, b) = (&self.batched, &self.single);
        for (za, zb) in a.zones().iter().zip(b.zones()) {
            let zone = za.id();
            assert_eq!(za.flags(), zb.flags(), "{after}: {zone:?} flags");
            assert_eq!(
                za.nr_free_pages.load(Relaxed),
                zb.nr_free_pages.load(Relaxed),
                "{after}: {zone:?} NR_FREE_PAGES"
            );
            assert_eq!(
                format!("{:?}", za.events),
                format!("{:?}", zb.events),
                "{after}: {zone:?} events"
            );
            assert_eq!(
                za.free_blocks(),
                zb.free_blocks(),
                "{after}: {zone:?} buddy lists"
            );
            for cpu in 0..za.pagesets.len() {
                let (sa, sb) = (&za.pagesets[cpu], &zb.pagesets[cpu]);
                assert_eq!(
                    pageset(za, cpu),
                    pageset(zb, cpu),
                    "{after}: {zone:?} CPU {cpu} pageset"
                );
                assert_eq!(
                    format!("{:?}", sa.vm_events),
                    format!("{:?}", sb.vm_events),
                    "{after}: {zone:?} CPU {cpu} vm events"
                );
            }
        }
    }

    /// Every page descriptor is the same in both.
    fn assert_same_pages(&self) {
        for (za, zb) in self.batched.zones().iter().zip(self.single.zones()) {
            for ((pfn, pa), (_, pb)) in za.mem_map.iter().zip(zb.mem_map.iter()) {
                assert!(
                    format!("{pa:?}") == format!("{pb:?}"),
                    "{pfn:?}: {pa:?} ≠ {pb:?}"
                );
            }
        }
    }
}

fn zone_index(allocator: &PageAllocator, zone: usize) -> usize {
    allocator
        .zones()
        .iter()
        .position(|z| z.zone_type == ZONES[zone])
        .expect("the machine has the zone")
}

/// A pageset's fields and its lists, head to tail.
fn pageset(zone: &super::Zone, cpu: usize) -> (String, Vec<Vec<Pfn>>) {
    let pcp = zone.pagesets[cpu].pcp.lock();
    let lists = pcp
        .lists
        .iter()
        .map(|list| list.iter(&zone.mem_map).collect())
        .collect();
    (format!("{:?}", *pcp), lists)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn batched_free_leaves_what_single_frees_leave(
        policy_index in 0..POLICIES,
        exclusive in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut pair = Pair::new(policy(policy_index), exclusive);
        for (step, op) in ops.iter().enumerate() {
            pair.apply(op);
            pair.assert_same(&format!("step {step} {op:?}"));
        }
        pair.assert_same_pages();
        pair.batched.verify().expect("the batched allocator verifies");
    }
}
