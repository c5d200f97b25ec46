//! The reverse map: from a folio to the page-table entries that map it, and unmapping
//! through it.
//!
//! Linux counterpart (v6.7, `mm/rmap.c`): `rmap_walk` over `anon_vma` (the mappings
//! chained to the folio's anon_vma whose range holds the folio's index: after fork, the
//! parent's and every child's) or `i_mmap`,
//! `folio_referenced`, `try_to_unmap` / `try_to_unmap_one`, `page_remove_rmap`; and seed
//! 002's `folio_remove_rmap_range` (Yin Fengwei 2023), switched by
//! [`crate::policy::RmapRemoval`]. A PMD that maps a folio whole is visited once: its
//! accessed bit is one reference, and `try_to_unmap` splits it first
//! (`TTU_SPLIT_HUGE_PMD`), so the PTEs it leaves are unmapped, and their rmap removed per
//! page or per run, like any others.

use crate::sync::RawMutex;
use alloc::vec::Vec;

use super::folio::Folio;
use super::memory::{Mapping, Memory, MmId, Vpn};
use super::pte::{Pte, PteState, SwapEntry};
use crate::page::{PageFlags, Pfn};
use crate::page_alloc::Caller;
use crate::policy::RmapRemoval;

/// A run of consecutive pages of one folio whose PTEs were cleared and whose rmap is still
/// to be removed (Yin 2023 defers it to the end of the run).
struct PendingRun {
    first: Pfn,
    nr: u64,
}

impl<R: RawMutex> Memory<R> {
    /// The mappings a folio may be mapped in (`rmap_walk`'s list), with the folio's first
    /// index.
    pub(super) fn rmap_targets(&self, folio: Folio) -> (Vec<(MmId, Vpn)>, u64, bool) {
        let info = self.folios[&folio.pfn];
        match info.mapping {
            Mapping::Anon(id) => {
                // `anon_vma_interval_tree_foreach(avc, &anon_vma->rb_root, first, last)`.
                let (first, end) = (info.index, info.index + folio.nr_pages());
                let chains = self.anon_vmas[id.0 as usize]
                    .chains
                    .iter()
                    .filter(|c| c.start < end && first < c.end)
                    .map(|c| (c.mm, c.start))
                    .collect();
                (chains, info.index, true)
            }
            Mapping::File(id) => (
                self.file(id).expect("a cached folio's file").i_mmap.clone(),
                info.index,
                false,
            ),
        }
    }

    /// For each page of `folio` a PTE maps in a mapping, and for each PMD that maps the
    /// whole folio, the (address space, virtual page, page) triple: what an rmap walk
    /// visits (`page_vma_mapped_walk` stops once at a PMD, with its first page and the
    /// first virtual page of its range).
    /// Empty for a folio the mapping layer does not hold.
    pub fn rmap_walk(&self, folio: Folio) -> Vec<(MmId, Vpn, Pfn)> {
        if !self.holds_folio(folio) {
            return Vec::new();
        }
        let (targets, index, _) = self.rmap_targets(folio);
        let mut found = Vec::new();
        for (mm, start) in targets {
            let vma = &self.mms[mm.0 as usize].as_ref().expect("live mm").vmas[&start];
            if let Some(base) = vma.vpn_of(index) {
                if vma.pmds.get(&base).and_then(|p| p.pfn()) == Some(folio.pfn) {
                    found.push((mm, base, folio.pfn));
                    continue;
                }
            }
            for i in 0..folio.nr_pages() {
                let Some(vpn) = vma.vpn_of(index + i) else {
                    continue;
                };
                let pfn = folio.pfn.add(i);
                if vma.ptes[(vpn - vma.start) as usize].pfn() == Some(pfn) {
                    found.push((mm, vpn, pfn));
                }
            }
        }
        found
    }

    /// `folio_referenced`: clear the accessed bit of every PTE and PMD mapping the folio
    /// and return how many had it set (`folio_referenced_one`: a PMD counts once,
    /// `pmdp_clear_flush_young_notify`).
    /// 0 for a folio the mapping layer does not hold.
    pub fn folio_referenced(&mut self, folio: Folio) -> u64 {
        let mut referenced = 0;
        for (mm, vpn, pfn) in self.rmap_walk(folio) {
            let vma = self.mm_vma_mut(mm, vpn);
            let young = match vma.pmds.get_mut(&vpn) {
                Some(pmd) if pmd.pfn() == Some(pfn) => pmd.test_and_clear_young(),
                _ => vma.ptes[(vpn - vma.start) as usize].test_and_clear_young(),
            };
            referenced += u64::from(young);
        }
        referenced
    }

    fn mm_vma_mut(&mut self, mm: MmId, vpn: Vpn) -> &mut super::memory::Vma {
        let space = self.mms[mm.0 as usize].as_mut().expect("live mm");
        let (_, vma) = space.vmas.range_mut(..=vpn).next_back().expect("mapped");
        vma
    }

    /// `try_to_unmap` with `TTU_SPLIT_HUGE_PMD` (reclaim sets it for a PMD-sized folio):
    /// split every PMD that maps `folio` into PTEs, then clear every PTE that maps it,
    /// moving each PTE's dirty bit to the folio. Anonymous pages get the swap entry
    /// `swap[i]` for page `i`, which gains a user per PTE (`swap_duplicate`); file pages
    /// get an empty entry. The rmap is removed per page or per run of consecutive pages,
    /// as the policy says; the caller must hold its own reference, so the folio is never
    /// freed here. Returns the PTEs cleared. Crate-private: the swap entries and the
    /// reference are reclaim's ([`Memory::reclaim_folio`]), which a caller could not
    /// promise.
    pub(crate) fn try_to_unmap(
        &mut self,
        caller: Caller,
        folio: Folio,
        swap: Option<&[SwapEntry]>,
    ) -> u64 {
        self.split_folio_pmds(folio);
        let (targets, index, anon) = self.rmap_targets(folio);
        // One owned handle per folio (not per page): the loop mutates `self` while it
        // reads the mem_map.
        let allocator = self.allocator.clone();
        let allocator = allocator.page_allocator();
        let mem_map = allocator
            .find_zone(folio.pfn)
            .expect("a folio lies in a zone")
            .mem_map();
        let batched = self.policy.rmap_removal == RmapRemoval::Batched;
        let mut cleared = 0;
        for (mm, start) in targets {
            let mut run: Option<PendingRun> = None;
            for i in 0..folio.nr_pages() {
                let pfn = folio.pfn.add(i);
                let vma = self.mms[mm.0 as usize]
                    .as_mut()
                    .expect("live mm")
                    .vmas
                    .get_mut(&start)
                    .expect("a mapping on the rmap list exists");
                let Some(vpn) = vma.vpn_of(index + i) else {
                    continue;
                };
                let slot = (vpn - vma.start) as usize;
                let PteState::Present {
                    pfn: mapped, dirty, ..
                } = vma.ptes[slot].state()
                else {
                    continue;
                };
                if mapped != pfn {
                    continue;
                }
                vma.ptes[slot] = match (anon, swap) {
                    (true, Some(entries)) => Pte::swap(entries[i as usize]),
                    _ => Pte::NONE,
                };
                if let (true, Some(entries)) = (anon, swap) {
                    self.swap.duplicate(entries[i as usize]);
                }
                if dirty {
                    let head = folio.head(mem_map);
                    head.set_flags(head.flags() | PageFlags::DIRTY);
                }
                cleared += 1;
                let counters = &mut self.mms[mm.0 as usize].as_mut().expect("live").counters;
                if anon {
                    counters.anon_pages -= 1;
                    if swap.is_some() {
                        counters.swap_entries += 1;
                    }
                } else {
                    counters.file_pages -= 1;
                }
                if !batched {
                    // Linux 6.7: page_remove_rmap + folio_put per page.
                    self.remove_rmap(caller, folio, pfn, 1, anon);
                    folio.ref_sub(mem_map, 1);
                    self.count_rmap_updates(folio, 1, 1);
                    continue;
                }
                run = match run {
                    Some(r) if r.first.add(r.nr) == pfn => Some(PendingRun { nr: r.nr + 1, ..r }),
                    Some(r) => {
                        self.flush_run(caller, folio, r, anon);
                        Some(PendingRun { first: pfn, nr: 1 })
                    }
                    None => Some(PendingRun { first: pfn, nr: 1 }),
                };
            }
            if let Some(r) = run {
                self.flush_run(caller, folio, r, anon);
            }
        }
        cleared
    }

    /// Yin 2023's `folio_remove_rmap_range` for a run, then one reference drop for it.
    fn flush_run(&mut self, caller: Caller, folio: Folio, run: PendingRun, anon: bool) {
        self.remove_rmap(caller, folio, run.first, run.nr, anon);
        folio.ref_sub(self.mem_map(folio.pfn), run.nr as u16);
        self.count_rmap_updates(folio, run.nr, 1);
    }

    /// Count the shared-counter updates of removing `pages` maps in `calls` calls: one map
    /// count per page, and per call the folio's mapped-page count (large folios), the
    /// `NR_*_MAPPED` statistic and the reference count.
    pub(super) fn count_rmap_updates(&mut self, folio: Folio, pages: u64, calls: u64) {
        let per_call = if folio.nr_pages() > 1 { 3 } else { 2 };
        self.stats.rmap_counter_updates += pages + calls * per_call;
    }
}
