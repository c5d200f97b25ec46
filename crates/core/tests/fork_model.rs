//! fork, copy-on-write and the deferred split queue against a naive per-PTE model.
//!
//! Up to four processes, each with an anonymous mapping of order-4 folios, one of single
//! pages and one of PMD-sized (order-9) folios, which a fault maps with one PMD, run
//! random sequences of reads and writes, forks, exits, `munmap` + `mmap` again,
//! `MADV_DONTNEED` of part or all of a mapping (a PMD it covers in part is split first),
//! reclaim of single folios (to swap, so swap entries are shared after fork too; a PMD is
//! split first), splits, and rmap walks. The model keeps, per process and virtual page,
//! which page of which folio it maps (and whether fork write-protected it) or which
//! swapped page it holds, per process and aligned range which THP a PMD maps (and whether
//! it is write-protected), and the data each page holds; it predicts every copy-on-write
//! decision (6.7: reuse when this PTE or PMD holds the folio's only reference, else split
//! a PMD and copy the page written into an order-0 page), and from its PTEs and PMDs alone
//! it computes every page's map count, each folio's entire map count, `_nr_pages_mapped`
//! and reference count, `NR_ANON_MAPPED`, `NR_ANON_THPS`, each swap slot's count, the set
//! of folios still allocated, how many mappings an rmap walk must find, and which THPs are
//! on the deferred split queue (6.7: a PTE unmap that leaves a page of one unmapped queues
//! it; the last PMD unmap queues it only if PTEs still map some of its pages; reclaim's
//! unmap does not, a split or free takes it off) with the `thp_deferred_split_page` and
//! `thp_split_page` events; the shrinker's scan splits every queued folio and frees its
//! unmapped pages. After
//! every step the mapping layer must agree, and `Memory::verify()` must pass. Per-page and
//! batched rmap removal (`folio_remove_rmap_ptes` with nr > 1, in zap and
//! `try_to_unmap`, here on folios mapped by several processes) run the same sequences and
//! must agree on everything but the counter updates, which batching must not increase.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use common::{allocator, TokenIo};
use mmkit_core::mm::huge_memory::DeferredSplitQueue;
use mmkit_core::mm::memcg::MemcgId;
use mmkit_core::mm::{Folio, Memory, MmId, PteState, SwapEntry, Vpn};
use mmkit_core::page_alloc::Caller;
use mmkit_core::policy::{MmPolicy, RmapRemoval};
use mmkit_core::{Order, Pfn};
use proptest::prelude::*;

const ZONE_PAGES: u64 = 8192;
const SWAP_SLOTS: u64 = 4096;
const MAX_PROCS: usize = 4;
/// Per process: (start, pages, folio order) of its anonymous mappings.
const MAPS: [(Vpn, u64, u8); 3] = [(0x1000, 64, 4), (0x2000, 16, 0), (0x4000, 1024, 9)];
const CALLER: Caller = Caller::task(1);

#[derive(Clone, Debug)]
enum Op {
    Access {
        proc: usize,
        map: usize,
        page: u64,
        write: bool,
    },
    Fork {
        proc: usize,
    },
    Exit {
        proc: usize,
    },
    Remap {
        proc: usize,
        map: usize,
    },
    Reclaim {
        proc: usize,
        map: usize,
        page: u64,
    },
    Referenced {
        proc: usize,
        map: usize,
        page: u64,
    },
    Split {
        proc: usize,
        map: usize,
        page: u64,
    },
    /// `deferred_split_scan` of the root cgroup's whole queue.
    DeferredSplitScan,
    /// `MADV_DONTNEED` of `pages` pages from page `page` of the mapping (to its end at
    /// most).
    DontNeed {
        proc: usize,
        map: usize,
        page: u64,
        pages: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let target = (0..MAX_PROCS, 0..MAPS.len(), 0..1024u64);
    prop_oneof![
        10 => (target.clone(), any::<bool>())
            .prop_map(|((proc, map, page), write)| Op::Access { proc, map, page, write }),
        2 => (0..MAX_PROCS).prop_map(|proc| Op::Fork { proc }),
        1 => (0..MAX_PROCS).prop_map(|proc| Op::Exit { proc }),
        1 => (0..MAX_PROCS, 0..MAPS.len()).prop_map(|(proc, map)| Op::Remap { proc, map }),
        2 => target.clone().prop_map(|(proc, map, page)| Op::Reclaim { proc, map, page }),
        1 => target.clone().prop_map(|(proc, map, page)| Op::Referenced { proc, map, page }),
        1 => target.prop_map(|(proc, map, page)| Op::Split { proc, map, page }),
        1 => Just(Op::DeferredSplitScan),
        1 => (
            0..MAX_PROCS,
            0..MAPS.len(),
            prop_oneof![0..1024u64, Just(0), Just(512)],
            prop_oneof![1..64u64, Just(512), 1..1024u64],
        )
            .prop_map(|(proc, map, page, pages)| Op::DontNeed { proc, map, page, pages }),
    ]
}

/// Pages a PMD maps.
const PMD_PAGES: u64 = 512;

/// What the model says a process's virtual page holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ModelPte {
    /// Page `page` of model folio `folio`, write-protected by fork or not.
    Mapped { folio: usize, page: u64, wp: bool },
    /// The swap slot that page `page` of (now freed) model folio `folio` went to.
    Swapped { folio: usize, page: u64 },
}

/// The machine, its processes by slot, and the model.
struct World {
    memory: Memory,
    io: TokenIo,
    procs: [Option<MmId>; MAX_PROCS],
    /// Model: (process slot, virtual page) → what it holds; absent = nothing.
    ptes: BTreeMap<(usize, Vpn), ModelPte>,
    /// Model: (process slot, first virtual page of an aligned range) → the THP its PMD
    /// maps, and whether fork write-protected the PMD.
    pmds: BTreeMap<(usize, Vpn), (usize, bool)>,
    /// Model: the data token of each (process slot, virtual page); absent = 0.
    tokens: HashMap<(usize, Vpn), u64>,
    /// Model folios: head pfn and order, learned when the kernel allocates them.
    folios: Vec<(Pfn, Order)>,
    /// Model: THPs on the deferred split queue, and the two events.
    queued: BTreeSet<usize>,
    thp_deferred_split_page: u64,
    thp_split_page: u64,
    next_token: u64,
}

fn range(map: usize) -> (Vpn, u64, Order) {
    let (start, pages, order) = MAPS[map];
    (start, pages, Order::new(order).unwrap())
}

impl World {
    fn new(policy: MmPolicy) -> World {
        let mut memory = Memory::new(allocator(ZONE_PAGES), policy, SWAP_SLOTS);
        let mm = memory.create_mm();
        for map in 0..MAPS.len() {
            let (start, pages, order) = range(map);
            memory.mmap_anon(mm, start, pages, order).unwrap();
        }
        World {
            memory,
            io: TokenIo::default(),
            procs: [Some(mm), None, None, None],
            ptes: BTreeMap::new(),
            pmds: BTreeMap::new(),
            tokens: HashMap::new(),
            folios: Vec::new(),
            queued: BTreeSet::new(),
            thp_deferred_split_page: 0,
            thp_split_page: 0,
            next_token: 1,
        }
    }

    /// Model PTEs mapping any page of folio `f`, plus the PMDs mapping it: its
    /// references, and what an rmap walk visits.
    fn maps_of(&self, f: usize) -> usize {
        self.ptes
            .values()
            .filter(|p| matches!(p, ModelPte::Mapped { folio, .. } if *folio == f))
            .count()
            + self.entire_maps(f) as usize
    }

    /// PMDs mapping folio `f` (its entire map count).
    fn entire_maps(&self, f: usize) -> u64 {
        self.pmds.values().filter(|&&(g, _)| g == f).count() as u64
    }

    fn live_folios(&self) -> BTreeSet<usize> {
        self.ptes
            .values()
            .filter_map(|p| match p {
                ModelPte::Mapped { folio, .. } => Some(*folio),
                ModelPte::Swapped { .. } => None,
            })
            .chain(self.pmds.values().map(|&(f, _)| f))
            .collect()
    }

    /// `__split_huge_pmd` in the model: the PMD of `proc` at `base` becomes 512 PTEs with
    /// its write protection.
    fn model_split_pmd(&mut self, proc: usize, base: Vpn) {
        let (folio, wp) = self.pmds.remove(&(proc, base)).expect("a PMD at base");
        for page in 0..PMD_PAGES {
            let pte = ModelPte::Mapped { folio, page, wp };
            self.ptes.insert((proc, base + page), pte);
        }
    }

    /// Split every PMD that maps folio `f`.
    fn model_split_pmds_of(&mut self, f: usize) {
        let keys: Vec<(usize, Vpn)> = self
            .pmds
            .iter()
            .filter(|(_, &(g, _))| g == f)
            .map(|(&k, _)| k)
            .collect();
        for (proc, base) in keys {
            self.model_split_pmd(proc, base);
        }
    }

    /// A folio the kernel just allocated becomes a model folio; it must not be one the
    /// model thinks is still in use.
    fn learn(&mut self, folio: Folio) -> Result<usize, TestCaseError> {
        for f in self.live_folios() {
            prop_assert_ne!(
                self.folios[f].0,
                folio.pfn,
                "a live folio was handed out again"
            );
        }
        self.folios.push((folio.pfn, folio.order));
        Ok(self.folios.len() - 1)
    }

    fn real_folio(&self, pfn: Pfn) -> Folio {
        let zone = self.memory.allocator().find_zone(pfn).unwrap();
        Folio::of_page(zone.mem_map(), pfn).unwrap()
    }

    /// Entire map counts of every folio the model's PMDs map.
    fn pmd_maps(&self) -> HashMap<usize, u64> {
        let mut maps = HashMap::new();
        for &(f, _) in self.pmds.values() {
            *maps.entry(f).or_default() += 1;
        }
        maps
    }

    /// Map counts of every page the model's PTEs map.
    fn page_maps(&self) -> HashMap<(usize, u64), u64> {
        let mut maps = HashMap::new();
        for pte in self.ptes.values() {
            if let ModelPte::Mapped { folio, page, .. } = *pte {
                *maps.entry((folio, page)).or_default() += 1;
            }
        }
        maps
    }

    /// Apply `op` to both, then the deferred split rules: a THP with a page that lost its
    /// last PTE map goes on the queue (not when reclaim unmapped it for swap), a freed one
    /// leaves it.
    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let before = self.page_maps();
        let pmd_before = self.pmd_maps();
        self.apply_op(op)?;
        let after = self.page_maps();
        let pmd_after = self.pmd_maps();
        // Only unmaps queue: not reclaim's (the folio is in the swap cache), and a
        // split moves maps to new folios without unmapping anything.
        let unmaps = !matches!(
            op,
            Op::Reclaim { .. } | Op::Split { .. } | Op::DeferredSplitScan
        );
        if unmaps {
            // A page is mapped while a PTE maps it or a PMD maps its folio.
            let mapped = |maps: &HashMap<(usize, u64), u64>, pmds: &HashMap<usize, u64>, f, i| {
                maps.contains_key(&(f, i)) || pmds.contains_key(&f)
            };
            let thps: BTreeSet<usize> = before
                .keys()
                .map(|&(f, _)| f)
                .chain(pmd_before.keys().copied())
                .filter(|&f| self.folios[f].1.get() >= 9)
                .collect();
            for f in thps {
                let lost = (0..PMD_PAGES).any(|i| {
                    mapped(&before, &pmd_before, f, i) && !mapped(&after, &pmd_after, f, i)
                });
                // The last PMD map's removal queues only a folio PTEs still map in part
                // (6.7: `nr < nr_pmdmapped`); a PTE removal queues whenever a page lost
                // its last map.
                let last_pmd = pmd_before.contains_key(&f) && !pmd_after.contains_key(&f);
                let pte_mapped = (0..PMD_PAGES).any(|i| after.contains_key(&(f, i)));
                if lost && (!last_pmd || pte_mapped) && self.queued.insert(f) {
                    self.thp_deferred_split_page += 1;
                }
            }
        }
        let live = self.live_folios();
        self.queued.retain(|f| live.contains(f));
        Ok(())
    }

    fn apply_op(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Access {
                proc,
                map,
                page,
                write,
            } => self.access(proc, map, page, write),
            Op::Fork { proc } => self.fork(proc),
            Op::Exit { proc } => {
                let live = self.procs.iter().flatten().count();
                let Some(mm) = self.procs[proc] else {
                    return Ok(());
                };
                if live == 1 {
                    return Ok(());
                }
                self.memory.exit_mm(CALLER, mm).unwrap();
                self.procs[proc] = None;
                self.ptes.retain(|&(p, _), _| p != proc);
                self.pmds.retain(|&(p, _), _| p != proc);
                self.tokens.retain(|&(p, _), _| p != proc);
                Ok(())
            }
            Op::Remap { proc, map } => {
                let Some(mm) = self.procs[proc] else {
                    return Ok(());
                };
                let (start, pages, order) = range(map);
                self.memory.munmap(CALLER, mm, start).unwrap();
                self.memory.mmap_anon(mm, start, pages, order).unwrap();
                let vpns = start..start + pages;
                self.ptes
                    .retain(|&(p, v), _| p != proc || !vpns.contains(&v));
                self.pmds
                    .retain(|&(p, v), _| p != proc || !vpns.contains(&v));
                self.tokens
                    .retain(|&(p, v), _| p != proc || !vpns.contains(&v));
                Ok(())
            }
            Op::DontNeed {
                proc,
                map,
                page,
                pages,
            } => self.dontneed(proc, map, page, pages),
            Op::Reclaim { proc, map, page } => self.reclaim(proc, map, page),
            Op::Referenced { proc, map, page } => {
                let Some(ModelPte::Mapped { folio: f, .. }) = self.model_at(proc, map, page) else {
                    return Ok(());
                };
                let folio = self.real_folio(self.folios[f].0);
                let walked = self.memory.rmap_walk(folio).len();
                prop_assert_eq!(walked, self.maps_of(f), "the rmap walk's mappings");
                prop_assert!(self.memory.folio_referenced(folio) as usize <= walked);
                prop_assert_eq!(self.memory.folio_referenced(folio), 0, "bits cleared");
                Ok(())
            }
            Op::Split { proc, map, page } => {
                let Some(ModelPte::Mapped { folio: f, .. }) = self.model_at(proc, map, page) else {
                    return Ok(());
                };
                self.split(f)
            }
            Op::DeferredSplitScan => {
                let queue = DeferredSplitQueue::Memcg(MemcgId::ROOT);
                let split = self
                    .memory
                    .deferred_split_scan(CALLER, queue, u64::MAX)
                    .map_err(|e| TestCaseError::fail(format!("deferred split: {e}")))?;
                prop_assert_eq!(split, self.queued.len() as u64);
                for f in std::mem::take(&mut self.queued) {
                    self.model_split(f);
                }
                Ok(())
            }
        }
    }

    /// What the model says page `page` of mapping `map` of `proc` holds: a PMD-mapped
    /// page reads as the page of the THP it is.
    fn model_at(&self, proc: usize, map: usize, page: u64) -> Option<ModelPte> {
        self.procs[proc]?;
        let (start, pages, _) = range(map);
        let vpn = start + page % pages;
        let base = vpn & !(PMD_PAGES - 1);
        if let Some(&(folio, wp)) = self.pmds.get(&(proc, base)) {
            let page = vpn - base;
            return Some(ModelPte::Mapped { folio, page, wp });
        }
        self.ptes.get(&(proc, vpn)).copied()
    }

    /// `MADV_DONTNEED`: PMDs the range covers go, those it covers in part are split,
    /// then every PTE in the range goes (the data with it).
    fn dontneed(
        &mut self,
        proc: usize,
        map: usize,
        page: u64,
        pages: u64,
    ) -> Result<(), TestCaseError> {
        let Some(mm) = self.procs[proc] else {
            return Ok(());
        };
        let (start, size, _) = range(map);
        let first = start + page % size;
        let end = (first + pages).min(start + size);
        self.memory
            .madvise_dontneed(CALLER, mm, first, end - first)
            .map_err(|e| TestCaseError::fail(format!("dontneed: {e}")))?;
        let bases: Vec<Vpn> = self
            .pmds
            .range((proc, first & !(PMD_PAGES - 1))..(proc, end))
            .map(|(&(_, b), _)| b)
            .collect();
        for base in bases {
            if first <= base && base + PMD_PAGES <= end {
                self.pmds.remove(&(proc, base));
            } else {
                self.model_split_pmd(proc, base);
            }
        }
        for vpn in first..end {
            self.ptes.remove(&(proc, vpn));
            self.tokens.remove(&(proc, vpn));
        }
        Ok(())
    }

    fn access(
        &mut self,
        proc: usize,
        map: usize,
        page: u64,
        write: bool,
    ) -> Result<(), TestCaseError> {
        let Some(mm) = self.procs[proc] else {
            return Ok(());
        };
        let (start, pages, order) = range(map);
        let vpn = start + page % pages;
        let fault = self
            .memory
            .access(CALLER, mm, vpn, write, &mut self.io)
            .map_err(|e| TestCaseError::fail(format!("access: {e}")))?;
        let pmd_base = vpn & !(PMD_PAGES - 1);
        if let Some(&(f, wp)) = self.pmds.get(&(proc, pmd_base)) {
            if write && wp && self.maps_of(f) > 1 {
                // do_huge_pmd_wp_page falls back: split, then copy the page written.
                self.model_split_pmd(proc, pmd_base);
            } else {
                let (pfn, _) = self.folios[f];
                prop_assert_eq!(fault.pfn, pfn.add(vpn - pmd_base), "PMD at {:#x}", vpn);
                if write {
                    self.pmds.insert((proc, pmd_base), (f, false));
                }
                return self.check_data(proc, vpn, fault.pfn, write);
            }
        }
        match self.ptes.get(&(proc, vpn)).copied() {
            None => {
                // do_anonymous_page: a whole aligned folio where it fits and nothing of
                // it is mapped yet, else one page; a PMD-sized one is mapped by a PMD.
                let nr = order.pages();
                let base = vpn & !(nr - 1);
                let fits = (base..base + nr).all(|v| !self.ptes.contains_key(&(proc, v)));
                let (order, base) = if fits {
                    (order, base)
                } else {
                    (Order::ZERO, vpn)
                };
                prop_assert_eq!(fault.folio.order, order, "fault at {:#x}", vpn);
                prop_assert_eq!(fault.pfn, fault.folio.pfn.add(vpn - base));
                let f = self.learn(fault.folio)?;
                if order.pages() == PMD_PAGES {
                    self.pmds.insert((proc, base), (f, false));
                    return self.check_data(proc, vpn, fault.pfn, write);
                }
                for i in 0..order.pages() {
                    let pte = ModelPte::Mapped {
                        folio: f,
                        page: i,
                        wp: false,
                    };
                    self.ptes.insert((proc, base + i), pte);
                }
            }
            Some(ModelPte::Mapped { folio: f, page, wp }) => {
                let (pfn, _) = self.folios[f];
                if write && wp && self.maps_of(f) > 1 {
                    // wp_page_copy: the folio has other references.
                    prop_assert_eq!(fault.folio.order, Order::ZERO, "a copy is one page");
                    let g = self.learn(fault.folio)?;
                    let pte = ModelPte::Mapped {
                        folio: g,
                        page: 0,
                        wp: false,
                    };
                    self.ptes.insert((proc, vpn), pte);
                } else {
                    prop_assert_eq!(fault.pfn, pfn.add(page), "no copy at {:#x}", vpn);
                    if write {
                        let pte = ModelPte::Mapped {
                            folio: f,
                            page,
                            wp: false,
                        };
                        self.ptes.insert((proc, vpn), pte);
                    }
                }
            }
            Some(ModelPte::Swapped { .. }) => {
                prop_assert_eq!(fault.folio.order, Order::ZERO, "6.7 swaps in one page");
                let g = self.learn(fault.folio)?;
                let pte = ModelPte::Mapped {
                    folio: g,
                    page: 0,
                    wp: false,
                };
                self.ptes.insert((proc, vpn), pte);
            }
        }
        self.check_data(proc, vpn, fault.pfn, write)
    }

    /// The page at `pfn` that `proc` reached at `vpn` holds what the model says; a write
    /// stores a new token.
    fn check_data(
        &mut self,
        proc: usize,
        vpn: Vpn,
        pfn: Pfn,
        write: bool,
    ) -> Result<(), TestCaseError> {
        let expected = self.tokens.get(&(proc, vpn)).copied().unwrap_or(0);
        prop_assert_eq!(self.io.frames[&pfn], expected, "data at {:#x}", vpn);
        if write {
            let token = self.next_token;
            self.next_token += 1;
            self.io.frames.insert(pfn, token);
            self.tokens.insert((proc, vpn), token);
        }
        Ok(())
    }

    fn fork(&mut self, proc: usize) -> Result<(), TestCaseError> {
        let Some(parent) = self.procs[proc] else {
            return Ok(());
        };
        let Some(slot) = self.procs.iter().position(Option::is_none) else {
            return Ok(());
        };
        let child = self
            .memory
            .fork(CALLER, parent)
            .map_err(|e| TestCaseError::fail(format!("fork: {e}")))?;
        self.procs[slot] = Some(child);
        let inherited: Vec<(Vpn, ModelPte)> = self
            .ptes
            .range((proc, 0)..(proc + 1, 0))
            .map(|(&(_, v), &p)| (v, p))
            .collect();
        for (vpn, pte) in inherited {
            let pte = match pte {
                ModelPte::Mapped { folio, page, .. } => ModelPte::Mapped {
                    folio,
                    page,
                    wp: true,
                },
                swapped => swapped,
            };
            self.ptes.insert((proc, vpn), pte);
            self.ptes.insert((slot, vpn), pte);
        }
        let huge: Vec<(Vpn, usize)> = self
            .pmds
            .range((proc, 0)..(proc + 1, 0))
            .map(|(&(_, b), &(f, _))| (b, f))
            .collect();
        for (base, f) in huge {
            // copy_huge_pmd: both write-protected.
            self.pmds.insert((proc, base), (f, true));
            self.pmds.insert((slot, base), (f, true));
        }
        let tokens: Vec<(Vpn, u64)> = self
            .tokens
            .iter()
            .filter(|(&(p, _), _)| p == proc)
            .map(|(&(_, v), &t)| (v, t))
            .collect();
        for (vpn, token) in tokens {
            self.tokens.insert((slot, vpn), token);
        }
        Ok(())
    }

    fn reclaim(&mut self, proc: usize, map: usize, page: u64) -> Result<(), TestCaseError> {
        let Some(ModelPte::Mapped { folio: f, .. }) = self.model_at(proc, map, page) else {
            return Ok(());
        };
        let folio = self.real_folio(self.folios[f].0);
        let result = self
            .memory
            .reclaim_folio(CALLER, folio, &mut self.io)
            .map_err(|e| TestCaseError::fail(format!("reclaim: {e}")))?;
        prop_assert_eq!(result, mmkit_core::mm::ReclaimResult::Freed);
        // TTU_SPLIT_HUGE_PMD: PMDs become PTEs, which then become swap entries.
        self.model_split_pmds_of(f);
        for pte in self.ptes.values_mut() {
            if let ModelPte::Mapped { folio, page, .. } = *pte {
                if folio == f {
                    *pte = ModelPte::Swapped { folio, page };
                }
            }
        }
        Ok(())
    }

    fn split(&mut self, f: usize) -> Result<(), TestCaseError> {
        let folio = self.real_folio(self.folios[f].0);
        let split = self
            .memory
            .split_folio(CALLER, folio)
            .map_err(|e| TestCaseError::fail(format!("split: {e}")))?;
        prop_assert!(split, "only PTE maps hold references");
        self.queued.remove(&f);
        self.model_split(f);
        Ok(())
    }

    /// Model folio `f` split: each mapped page a folio of its own, unmapped ones freed.
    fn model_split(&mut self, f: usize) {
        let (pfn, order) = self.folios[f];
        if order == Order::ZERO {
            return;
        }
        if order.get() >= 9 {
            self.thp_split_page += 1;
        }
        self.model_split_pmds_of(f);
        // Each mapped page becomes a folio of its own; unmapped ones are freed.
        let mut pieces: HashMap<u64, usize> = HashMap::new();
        for pte in self.ptes.values_mut() {
            if let ModelPte::Mapped { folio, page, wp } = *pte {
                if folio == f {
                    let next = self.folios.len() + pieces.len();
                    let g = *pieces.entry(page).or_insert(next);
                    *pte = ModelPte::Mapped {
                        folio: g,
                        page: 0,
                        wp,
                    };
                }
            }
        }
        let mut by_id: Vec<(usize, u64)> = pieces.into_iter().map(|(p, g)| (g, p)).collect();
        by_id.sort_unstable();
        for (_, page) in by_id {
            self.folios.push((pfn.add(page), Order::ZERO));
        }
    }

    /// Everything the model predicts, against the mapping layer.
    fn check(&self) -> Result<(), TestCaseError> {
        self.memory.verify().map_err(TestCaseError::fail)?;
        let mut slots: HashMap<(usize, u64), SwapEntry> = HashMap::new();
        let mut slot_users: HashMap<SwapEntry, u64> = HashMap::new();
        let mut page_maps: BTreeMap<(usize, u64), u64> = BTreeMap::new();
        for (proc, mm) in self.procs.iter().enumerate() {
            let Some(mm) = mm else { continue };
            let space = self.memory.mm(*mm).unwrap();
            for map in 0..MAPS.len() {
                let (start, pages, _) = range(map);
                for vpn in start..start + pages {
                    let base = vpn & !(PMD_PAGES - 1);
                    let model_pmd = self.pmds.get(&(proc, base)).copied();
                    match (model_pmd, space.pmd(vpn)) {
                        (None, None) => {}
                        (Some((folio, wp)), Some(pmd)) => {
                            prop_assert_eq!(
                                pmd.pfn(),
                                Some(self.folios[folio].0),
                                "PMD {:#x}",
                                vpn
                            );
                            prop_assert_eq!(pmd.write_protected(), wp, "PMD {} {:#x}", proc, vpn);
                        }
                        (model, real) => {
                            return Err(TestCaseError::fail(format!(
                                "proc {proc} {vpn:#x}: model PMD {model:?}, page table {real:?}"
                            )))
                        }
                    }
                    let pte = space.pte(vpn);
                    match (self.ptes.get(&(proc, vpn)), pte.state()) {
                        (None, PteState::None) => {}
                        (
                            Some(&ModelPte::Mapped { folio, page, wp }),
                            PteState::Present { pfn, .. },
                        ) => {
                            prop_assert_eq!(
                                pfn,
                                self.folios[folio].0.add(page),
                                "{} {:#x}",
                                proc,
                                vpn
                            );
                            prop_assert_eq!(pte.write_protected(), wp, "{} {:#x}", proc, vpn);
                            *page_maps.entry((folio, page)).or_default() += 1;
                        }
                        (Some(&ModelPte::Swapped { folio, page }), PteState::Swap(entry)) => {
                            let known = *slots.entry((folio, page)).or_insert(entry);
                            prop_assert_eq!(known, entry, "one slot per swapped page");
                            *slot_users.entry(entry).or_default() += 1;
                        }
                        (model, real) => {
                            return Err(TestCaseError::fail(format!(
                                "proc {proc} {vpn:#x}: model {model:?}, page table {real:?}"
                            )))
                        }
                    }
                }
            }
        }
        prop_assert_eq!(
            slot_users.len(),
            slots.len(),
            "distinct pages, distinct slots"
        );
        prop_assert_eq!(self.memory.swap().used(), slots.len() as u64);
        for (&entry, &users) in &slot_users {
            prop_assert_eq!(u64::from(self.memory.swap().count(entry)), users);
        }
        let live = self.live_folios();
        let held: BTreeSet<(Pfn, Order)> = self
            .memory
            .folios()
            .map(|i| (i.folio.pfn, i.folio.order))
            .collect();
        let expected: BTreeSet<(Pfn, Order)> = live.iter().map(|&f| self.folios[f]).collect();
        prop_assert_eq!(held, expected, "the folios still allocated");
        let (mut anon_mapped, mut anon_thps) = (0, 0);
        for &f in &live {
            let (pfn, order) = self.folios[f];
            let folio = Folio { pfn, order };
            let mem_map = self.memory.allocator().find_zone(pfn).unwrap().mem_map();
            let entire = self.entire_maps(f);
            let (mut mapped, mut maps) = (0, entire);
            for i in 0..order.pages() {
                let n = page_maps.get(&(f, i)).copied().unwrap_or(0);
                prop_assert_eq!(folio.page_mapcount(mem_map, pfn.add(i)), n + entire);
                mapped += u64::from(n > 0);
                maps += n;
            }
            prop_assert_eq!(folio.entire_mapcount(mem_map), entire, "_entire_mapcount");
            prop_assert_eq!(folio.nr_pages_mapped(mem_map), mapped, "_nr_pages_mapped");
            prop_assert_eq!(u64::from(folio.refcount(mem_map)), maps, "references");
            prop_assert_eq!(folio.mapcount(mem_map), maps, "folio_mapcount");
            if entire > 0 {
                anon_mapped += order.pages();
                anon_thps += 1;
            } else {
                anon_mapped += mapped;
            }
        }
        prop_assert_eq!(
            self.memory.stats().anon_mapped,
            anon_mapped,
            "NR_ANON_MAPPED"
        );
        prop_assert_eq!(self.memory.stats().anon_thps, anon_thps, "NR_ANON_THPS");
        let queued: BTreeSet<Pfn> = self.memory.deferred_split().queued().collect();
        let expected: BTreeSet<Pfn> = self.queued.iter().map(|&f| self.folios[f].0).collect();
        prop_assert_eq!(queued, expected, "the deferred split queue");
        let stats = self.memory.stats();
        prop_assert_eq!(stats.thp_deferred_split_page, self.thp_deferred_split_page);
        prop_assert_eq!(stats.thp_split_page, self.thp_split_page);
        Ok(())
    }

    /// Everything observable but the rmap counter updates.
    fn fingerprint(&self) -> String {
        let mut stats = self.memory.stats();
        stats.rmap_counter_updates = 0;
        let mut ptes = Vec::new();
        for mm in self.procs.iter().flatten() {
            for vma in self.memory.mm(*mm).unwrap().vmas.values() {
                ptes.extend(vma.ptes.iter().map(|p| format!("{p:?}")));
                ptes.extend(vma.pmds.iter().map(|(b, p)| format!("{b:#x}: {p:?}")));
            }
        }
        format!("{stats:?} {ptes:?}")
    }
}

fn run(policy: MmPolicy, ops: &[Op]) -> Result<World, TestCaseError> {
    let mut world = World::new(policy);
    for (step, op) in ops.iter().enumerate() {
        world.apply(op)?;
        if let Err(e) = world.check() {
            return Err(TestCaseError::fail(format!("step {step} {op:?}: {e}")));
        }
    }
    Ok(world)
}

const BATCHED: MmPolicy = MmPolicy {
    rmap_removal: RmapRemoval::Batched,
    ..MmPolicy::V6_7
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fork_and_copy_on_write_match_the_per_pte_model(ops in proptest::collection::vec(op(), 1..150)) {
        let per_page = run(MmPolicy::V6_7, &ops)?;
        let batched = run(BATCHED, &ops)?;
        prop_assert_eq!(per_page.fingerprint(), batched.fingerprint());
        prop_assert!(
            batched.memory.stats().rmap_counter_updates
                <= per_page.memory.stats().rmap_counter_updates
        );
    }
}

/// A world of one process with its two mappings, and `written` pages written in the
/// order-4 mapping from its start.
fn one_process(policy: MmPolicy, written: u64) -> World {
    let mut world = World::new(policy);
    for page in 0..written {
        world.access(0, 0, page, true).unwrap();
    }
    world.check().unwrap();
    world
}

#[test]
fn a_write_after_fork_copies_and_the_last_sharer_reuses() {
    let mut world = one_process(MmPolicy::V6_7, 0);
    world.access(0, 1, 3, true).unwrap();
    world.fork(0).unwrap();
    world.check().unwrap();
    world.access(1, 1, 3, true).unwrap();
    world.check().unwrap();
    assert_eq!(world.memory.stats().wp_copies, 1, "the child copied");
    world.access(0, 1, 3, true).unwrap();
    world.check().unwrap();
    assert_eq!(
        world.memory.stats().pgreuse,
        1,
        "the parent's page is its own again"
    );
    let parent = world
        .memory
        .mm(world.procs[0].unwrap())
        .unwrap()
        .pte(0x2003);
    let child = world
        .memory
        .mm(world.procs[1].unwrap())
        .unwrap()
        .pte(0x2003);
    assert_ne!(parent.pfn(), child.pfn());
}

#[test]
fn a_large_folio_shared_by_fork_is_copied_until_only_its_last_page_is_left_to_reuse() {
    // 6.7's wp_can_reuse_anon_folio asks for the folio's only reference, large folios
    // included: after the child exits, the parent's 16 PTEs hold 16 references, so its
    // writes copy page by page until the last page, which then reuses the folio.
    let mut world = one_process(MmPolicy::V6_7, 1);
    world.fork(0).unwrap();
    world.apply(&Op::Exit { proc: 1 }).unwrap();
    for page in 0..16 {
        world.access(0, 0, page, true).unwrap();
        world.check().unwrap();
    }
    let stats = world.memory.stats();
    assert_eq!((stats.wp_copies, stats.pgreuse), (15, 1));
    let folio = world.real_folio(world.folios[0].0);
    let mem_map = world
        .memory
        .allocator()
        .find_zone(folio.pfn)
        .unwrap()
        .mem_map();
    assert_eq!(folio.order, Order::new(4).unwrap());
    assert_eq!(
        folio.nr_pages_mapped(mem_map),
        1,
        "only the reused page is mapped"
    );
}

#[test]
fn unmapping_a_large_folio_mapped_by_three_processes_updates_counters_once_per_run() {
    let mut updates = Vec::new();
    for policy in [MmPolicy::V6_7, BATCHED] {
        let mut world = one_process(policy, 1);
        world.fork(0).unwrap();
        world.fork(0).unwrap();
        let before = world.memory.stats();
        world.reclaim(0, 0, 0).unwrap();
        world.check().unwrap();
        let after = world.memory.stats();
        assert_eq!(before.anon_mapped - after.anon_mapped, 16);
        updates.push(after.rmap_counter_updates - before.rmap_counter_updates);
    }
    // Per page: a map count, `_nr_pages_mapped`, NR_ANON_MAPPED and a reference for each
    // of 3 × 16 PTEs; batched: the 16 map counts and one update of each of the three
    // others per process.
    assert_eq!(updates, [3 * 16 * 4, 3 * (16 + 3)]);
}

#[test]
fn a_folio_faulted_in_the_child_is_walked_only_in_the_child_and_its_children() {
    let mut world = one_process(MmPolicy::V6_7, 0);
    world.fork(0).unwrap();
    world.access(1, 1, 5, false).unwrap();
    world.fork(1).unwrap();
    world.check().unwrap();
    let Some(ModelPte::Mapped { folio: f, .. }) = world.model_at(1, 1, 5) else {
        panic!("the child mapped the page");
    };
    let folio = world.real_folio(world.folios[f].0);
    let walked: Vec<MmId> = world.memory.rmap_walk(folio).iter().map(|w| w.0).collect();
    assert_eq!(walked, [world.procs[1].unwrap(), world.procs[2].unwrap()]);
}

#[test]
fn a_swap_slot_shared_by_fork_is_freed_by_its_last_user() {
    let mut world = one_process(MmPolicy::V6_7, 0);
    world.access(0, 1, 0, true).unwrap();
    world.reclaim(0, 1, 0).unwrap();
    world.fork(0).unwrap();
    world.check().unwrap();
    assert_eq!(world.memory.swap().used(), 1);
    world.access(0, 1, 0, false).unwrap();
    world.check().unwrap();
    assert_eq!(
        world.memory.swap().used(),
        1,
        "the child still holds the slot"
    );
    world.apply(&Op::Exit { proc: 1 }).unwrap();
    world.check().unwrap();
    assert_eq!(world.memory.swap().used(), 0);
}

#[test]
fn reclaim_runs_the_deferred_split_shrinker_which_frees_the_unmapped_pages() {
    // No swap: reclaim finds nothing to free on the LRU lists and goes down to priority
    // 0, where a queue of one folio is due (`2 × (1 >> priority)` ≥ 1).
    let mut memory = Memory::new(allocator(ZONE_PAGES), MmPolicy::V6_7, 0);
    let mut io = TokenIo::default();
    let parent = memory.create_mm();
    let (start, pages, order) = range(2);
    memory.mmap_anon(parent, start, pages, order).unwrap();
    let thp = memory
        .access(CALLER, parent, start, false, &mut io)
        .unwrap()
        .folio;
    assert_eq!(thp.order, order);
    let child = memory.fork(CALLER, parent).unwrap();
    for vpn in start..start + 8 {
        memory.access(CALLER, child, vpn, true, &mut io).unwrap();
    }
    assert!(
        memory.deferred_split().is_empty(),
        "the parent maps every page"
    );
    memory.exit_mm(CALLER, parent).unwrap();
    let queue = DeferredSplitQueue::Memcg(MemcgId::ROOT);
    assert_eq!(
        memory.deferred_split().len(queue),
        1,
        "8 pages lost their last map"
    );
    assert_eq!(memory.stats().thp_deferred_split_page, 1);
    let allocated = |m: &Memory| -> u64 {
        m.allocator()
            .verify()
            .unwrap()
            .iter()
            .map(|c| c.allocated)
            .sum()
    };
    let allocated_before = allocated(&memory);
    let _ = memory.memory_reclaim(CALLER, MemcgId::ROOT, 64, &mut io);
    memory.verify().unwrap();
    assert!(memory.deferred_split().is_empty());
    assert_eq!(memory.stats().thp_split_page, 1);
    // The child copied pages 0–7 and maps the rest: those are single pages now, and
    // pages 0–7, which no PTE mapped after the parent exited, are free.
    assert_eq!(
        memory.folio_info(thp.pfn.add(8)).unwrap().folio.order,
        Order::ZERO
    );
    assert!(
        memory.folio_info(thp.pfn).is_none(),
        "an unmapped page was freed"
    );
    assert_eq!(allocated(&memory), allocated_before - 8);
}
