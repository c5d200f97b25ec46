//! The mapping layer against a naive model of what each virtual page holds.
//!
//! Random sequences of accesses (reads and writes of a token), `MADV_PAGEOUT` of ranges,
//! reclaim of single folios, `folio_referenced`, and `munmap` + `mmap` again run over two
//! address spaces, each with an anonymous mapping of large folios, one of single pages,
//! and a shared mapping of one file with large page-cache folios. After every step:
//! `Memory::verify()` (every map count, `_nr_pages_mapped`, reference count, statistic and
//! swap slot recomputed from the page tables, then the allocator's walker), and every
//! access returns the data the model says the page holds, across swap-out and swap-in and
//! file write-back and read. Both rmap-removal policies and both `MADV_PAGEOUT` policies
//! run the same sequences and must agree on everything but the counter updates, which
//! batching must not increase.

use std::collections::HashMap;

use crate::common;
use mmkit_core::mm::memcg::MemcgId;

use common::{allocator, TokenIo};
use mmkit_core::mm::{FileId, Memory, MmError, MmId, PteState, Vpn};
use mmkit_core::page_alloc::Caller;
use mmkit_core::policy::{MmPolicy, PageoutSplit, RmapRemoval};
use mmkit_core::{Order, Pfn};
use proptest::prelude::*;

const ZONE_PAGES: u64 = 8192;
const FILE_PAGES: u64 = 64;
/// Per address space: (start, pages, folio order) of the anonymous mappings.
const ANON: [(Vpn, u64, u8); 2] = [(0x1000, 48, 2), (0x2000, 16, 0)];
const FILE_START: Vpn = 0x3000;

#[derive(Clone, Debug)]
enum Op {
    /// Access page `page` of mapping `map` (0, 1: anonymous; 2: the file) of `mm`.
    Access {
        mm: usize,
        map: usize,
        page: u64,
        write: bool,
    },
    Pageout {
        mm: usize,
        map: usize,
        page: u64,
        pages: u64,
    },
    ReclaimFolioAt {
        mm: usize,
        map: usize,
        page: u64,
    },
    Referenced {
        mm: usize,
        map: usize,
        page: u64,
    },
    Remap {
        mm: usize,
        map: usize,
    },
    /// `memory.reclaim` of `pages` on cgroup `group` (0, 1: the mms' own; 2: their parent).
    MemoryReclaim {
        group: usize,
        pages: u64,
    },
    /// `memory.max` of `group`.
    SetMax {
        group: usize,
        pages: u64,
    },
    /// `memory.high` of `group`.
    SetHigh {
        group: usize,
        pages: u64,
    },
    Kswapd,
    /// Switch asynchronous file write-back on or off.
    AsyncWriteback(bool),
    /// The device finishes every write-back in flight.
    EndWriteback,
}

fn op() -> impl Strategy<Value = Op> {
    let target = (0..2usize, 0..3usize, 0..64u64);
    prop_oneof![
        6 => (target.clone(), any::<bool>()).prop_map(|((mm, map, page), write)| Op::Access { mm, map, page, write }),
        2 => (target.clone(), 1..40u64).prop_map(|((mm, map, page), pages)| Op::Pageout { mm, map, page, pages }),
        1 => target.clone().prop_map(|(mm, map, page)| Op::ReclaimFolioAt { mm, map, page }),
        1 => target.clone().prop_map(|(mm, map, page)| Op::Referenced { mm, map, page }),
        1 => (0..2usize, 0..3usize).prop_map(|(mm, map)| Op::Remap { mm, map }),
        1 => (0..3usize, 1..100u64).prop_map(|(group, pages)| Op::MemoryReclaim { group, pages }),
        1 => (0..3usize, 8..300u64).prop_map(|(group, pages)| Op::SetMax { group, pages }),
        1 => (0..3usize, 8..300u64).prop_map(|(group, pages)| Op::SetHigh { group, pages }),
        1 => Just(Op::Kswapd),
        1 => any::<bool>().prop_map(Op::AsyncWriteback),
        1 => Just(Op::EndWriteback),
    ]
}

/// The machine under test and the model.
struct World {
    memory: Memory,
    io: TokenIo,
    mms: [MmId; 2],
    memcgs: [MemcgId; 3],
    file: FileId,
    /// Model: the token each anonymous page of each mm holds (absent = never written = 0).
    anon: HashMap<(usize, Vpn), u64>,
    /// Model: the token each file page holds.
    file_pages: HashMap<u64, u64>,
    next_token: u64,
}

const CALLER: Caller = Caller::task(1);

fn map_range(map: usize) -> (Vpn, u64) {
    match map {
        0 | 1 => (ANON[map].0, ANON[map].1),
        _ => (FILE_START, FILE_PAGES),
    }
}

impl World {
    fn new(policy: MmPolicy) -> World {
        let mut memory = Memory::new(allocator(ZONE_PAGES), policy, 512);
        let file = memory.create_file(FILE_PAGES, Order::new(3).unwrap());
        let mms = [memory.create_mm(), memory.create_mm()];
        let parent = memory.create_memcg(MemcgId::ROOT).unwrap();
        let memcgs = [
            memory.create_memcg(parent).unwrap(),
            memory.create_memcg(parent).unwrap(),
            parent,
        ];
        for i in 0..2 {
            memory.set_mm_memcg(mms[i], memcgs[i]).unwrap();
        }
        let mut world = World {
            memory,
            io: TokenIo::default(),
            mms,
            memcgs,
            file,
            anon: HashMap::new(),
            file_pages: HashMap::new(),
            next_token: 1,
        };
        for mm in 0..2 {
            for map in 0..3 {
                world.map(mm, map);
            }
        }
        world
    }

    fn map(&mut self, mm: usize, map: usize) {
        let id = self.mms[mm];
        match map {
            0 | 1 => {
                let (start, pages, order) = ANON[map];
                self.memory
                    .mmap_anon(id, start, pages, Order::new(order).unwrap())
                    .expect("free range");
            }
            _ => self
                .memory
                .mmap_file(id, FILE_START, FILE_PAGES, self.file, 0)
                .expect("free range"),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Access {
                mm,
                map,
                page,
                write,
            } => {
                let (start, pages) = map_range(map);
                let vpn = start + page % pages;
                let fault = match self
                    .memory
                    .access(CALLER, self.mms[mm], vpn, write, &mut self.io)
                {
                    Ok(fault) => fault,
                    // A limit or the zone is exhausted and nothing could be reclaimed:
                    // an error, and the page keeps what it held.
                    Err(MmError::OutOfMemory) => return Ok(()),
                    Err(e) => return Err(TestCaseError::fail(format!("access: {e}"))),
                };
                let expected = if map == 2 {
                    self.file_pages.get(&(page % pages)).copied().unwrap_or(0)
                } else {
                    self.anon.get(&(mm, vpn)).copied().unwrap_or(0)
                };
                prop_assert_eq!(
                    self.io.frames[&fault.pfn],
                    expected,
                    "data of mm {} vpn {:#x}",
                    mm,
                    vpn
                );
                if write {
                    let token = self.next_token;
                    self.next_token += 1;
                    self.io.frames.insert(fault.pfn, token);
                    if map == 2 {
                        self.file_pages.insert(page % pages, token);
                    } else {
                        self.anon.insert((mm, vpn), token);
                    }
                }
            }
            Op::Pageout {
                mm,
                map,
                page,
                pages,
            } => {
                let (start, size) = map_range(map);
                self.memory
                    .madvise_pageout(
                        CALLER,
                        self.mms[mm],
                        start + page % size,
                        pages,
                        &mut self.io,
                    )
                    .map_err(|e| TestCaseError::fail(format!("pageout: {e}")))?;
            }
            Op::ReclaimFolioAt { mm, map, page } => {
                let (start, size) = map_range(map);
                let pte = self
                    .memory
                    .mm(self.mms[mm])
                    .unwrap()
                    .pte(start + page % size);
                if let PteState::Present { pfn, .. } = pte.state() {
                    let folio = self.folio_of(pfn);
                    self.memory
                        .reclaim_folio(CALLER, folio, &mut self.io)
                        .map_err(|e| TestCaseError::fail(format!("reclaim: {e}")))?;
                }
            }
            Op::Referenced { mm, map, page } => {
                let (start, size) = map_range(map);
                let pte = self
                    .memory
                    .mm(self.mms[mm])
                    .unwrap()
                    .pte(start + page % size);
                if let PteState::Present { pfn, .. } = pte.state() {
                    let folio = self.folio_of(pfn);
                    let mapped = self.memory.rmap_walk(folio).len() as u64;
                    prop_assert!(self.memory.folio_referenced(folio) <= mapped);
                    prop_assert_eq!(self.memory.folio_referenced(folio), 0, "bits cleared");
                }
            }
            Op::MemoryReclaim { group, pages } => {
                match self
                    .memory
                    .memory_reclaim(CALLER, self.memcgs[group], pages, &mut self.io)
                {
                    Ok(_) | Err(MmError::ReclaimStalled) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("memory.reclaim: {e}"))),
                }
            }
            Op::SetMax { group, pages } => {
                match self
                    .memory
                    .set_memory_max(CALLER, self.memcgs[group], pages, &mut self.io)
                {
                    Ok(()) => {
                        let usage = self.memory.memcgs().get(self.memcgs[group]).unwrap().usage;
                        prop_assert!(usage <= pages, "usage {} over the new max {}", usage, pages);
                    }
                    Err(MmError::OutOfMemory) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("memory.max: {e}"))),
                }
            }
            Op::SetHigh { group, pages } => {
                self.memory
                    .set_memory_high(self.memcgs[group], pages)
                    .unwrap();
            }
            Op::AsyncWriteback(on) => self.memory.set_async_writeback(on),
            Op::EndWriteback => {
                self.memory.end_all_writeback(CALLER);
            }
            Op::Kswapd => {
                self.memory
                    .kswapd_balance(CALLER, 0, &mut self.io)
                    .map_err(|e| TestCaseError::fail(format!("kswapd: {e}")))?;
            }
            Op::Remap { mm, map } => {
                let (start, _) = map_range(map);
                self.memory
                    .munmap(CALLER, self.mms[mm], start)
                    .map_err(|e| TestCaseError::fail(format!("munmap: {e}")))?;
                if map < 2 {
                    let range = start..start + ANON[map].1;
                    self.anon
                        .retain(|&(m, v), _| m != mm || !range.contains(&v));
                }
                self.map(mm, map);
            }
        }
        Ok(())
    }

    fn folio_of(&self, pfn: Pfn) -> mmkit_core::mm::Folio {
        let zone = self.memory.allocator().find_zone(pfn).unwrap();
        mmkit_core::mm::Folio::of_page(zone.mem_map(), pfn).unwrap()
    }

    /// Everything observable but the rmap counter updates.
    fn fingerprint(&self) -> String {
        let mut stats = self.memory.stats();
        stats.rmap_counter_updates = 0;
        let mut ptes = Vec::new();
        for &id in &self.mms {
            for vma in self.memory.mm(id).unwrap().vmas.values() {
                ptes.extend(vma.ptes.iter().map(|p| format!("{p:?}")));
            }
        }
        format!("{stats:?} {ptes:?}")
    }
}

fn run(policy: MmPolicy, ops: &[Op]) -> Result<World, TestCaseError> {
    let mut world = World::new(policy);
    for (step, op) in ops.iter().enumerate() {
        world.apply(op)?;
        if let Err(e) = world.memory.verify() {
            return Err(TestCaseError::fail(format!("step {step} {op:?}: {e}")));
        }
    }
    if std::env::var_os("MM_MODEL_STATS").is_some() {
        eprintln!("{:?}", world.memory.stats());
    }
    Ok(world)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn mapping_layer_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        let per_page = run(MmPolicy::V6_7, &ops)?;
        let batched = run(MmPolicy { rmap_removal: RmapRemoval::Batched, ..MmPolicy::V6_7 }, &ops)?;
        prop_assert_eq!(per_page.fingerprint(), batched.fingerprint());
        prop_assert!(
            batched.memory.stats().rmap_counter_updates
                <= per_page.memory.stats().rmap_counter_updates
        );
        run(MmPolicy { pageout: PageoutSplit::KeepCovered, ..MmPolicy::V6_7 }, &ops)?;
    }
}

#[test]
fn everything_unmapped_and_deleted_returns_every_page() {
    let mut world = World::new(MmPolicy::V6_7);
    for mm in 0..2 {
        for map in 0..3 {
            let (_, pages) = map_range(map);
            for page in 0..pages {
                world
                    .apply(&Op::Access {
                        mm,
                        map,
                        page,
                        write: page % 3 == 0,
                    })
                    .unwrap();
            }
        }
    }
    world.memory.verify().unwrap();
    for mm in 0..2 {
        for map in 0..3 {
            let (start, _) = map_range(map);
            world.memory.munmap(CALLER, world.mms[mm], start).unwrap();
        }
    }
    world.memory.delete_file(CALLER, world.file).unwrap();
    world.memory.verify().unwrap();
    assert_eq!(world.memory.folios().count(), 0);
    for group in world.memcgs {
        let usage = world.memory.memcgs().get(group).unwrap().usage;
        assert!(usage <= 64 * 2, "only charge stocks are left: {usage}");
    }
    let census = world.memory.allocator().verify().unwrap();
    assert_eq!(census.iter().map(|c| c.allocated).sum::<u64>(), 0);
    assert_eq!(world.memory.stats().anon_mapped, 0);
    assert_eq!(world.memory.stats().file_mapped, 0);
}
