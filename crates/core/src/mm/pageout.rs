//! Reclaiming folios and `MADV_PAGEOUT`.
//!
//! Linux counterpart (v6.7): `shrink_folio_list`'s unmap-write-free path with
//! `add_to_swap`, `pageout`, `__remove_mapping` (`mm/vmscan.c`), `split_folio`
//! (`mm/huge_memory.c`), and `madvise_cold_or_pageout_pte_range` + `reclaim_pages`
//! (`mm/madvise.c`), with [`crate::policy::PageoutSplit`] choosing between
//! 6.7's "split every large folio" and 6.10's "keep a fully covered folio whole" for
//! PTE-mapped ones. A PMD-mapped THP is kept whole when the range covers its PMD and split
//! otherwise, under both (6.7's PMD path).

use crate::sync::RawMutex;
use alloc::vec::Vec;

use super::folio::Folio;
use super::memory::{FolioInfo, Mapping, Memory, MmError, MmId, PageIo, Vpn};
use super::pte::PteState;
use crate::page::{Order, PageFlags, NO_PFN};
use crate::page_alloc::Caller;
use crate::policy::PageoutSplit;

/// What [`Memory::reclaim_folio`] did with a folio.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReclaimResult {
    /// Unmapped, written if needed, and freed.
    Freed,
    /// Anonymous and no swap slot free: left as it was.
    NoSwap,
    /// Under write-back (queued now or earlier): kept, marked for reclaim.
    Writeback,
}

/// What a `MADV_PAGEOUT` call did.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PageoutOutcome {
    /// Pages reclaimed (written to swap or file, or dropped clean).
    pub reclaimed: u64,
    /// Large folios split.
    pub split: u64,
    /// Folios skipped: mapped by someone else too, or nothing to free (no swap).
    pub skipped: u64,
}

impl<R: RawMutex> Memory<R> {
    /// `split_folio`: make each page of a large folio its own order-0 folio. PMDs that
    /// map it are split into PTEs first; map counts stay; each page gets the references
    /// its PTEs (and the page cache) hold, and an anonymous page that no PTE maps
    /// (copy-on-write moved its mappings to copies) is freed, as `__split_huge_page`
    /// frees it. Refused (`Ok(false)`) if anyone else holds a reference;
    /// [`MmError::NotAFolio`] for a large folio the mapping layer does not hold.
    pub fn split_folio(&mut self, caller: Caller, folio: Folio) -> Result<bool, MmError> {
        if folio.order == Order::ZERO {
            return Ok(true);
        }
        if !self.holds_folio(folio) {
            return Err(MmError::NotAFolio(folio));
        }
        if self.writeback.contains_key(&folio.pfn) {
            // Write-back holds the folio whole (Linux: its reference fails the check).
            return Ok(false);
        }
        let info = self.folios[&folio.pfn];
        // An owned handle: the loop below mutates `self` while it reads the mem_map.
        let allocator = self.allocator.clone();
        let allocator = allocator.page_allocator();
        let mem_map = allocator.find_zone(folio.pfn).expect("in a zone").mem_map();
        let cache_refs = match info.mapping {
            Mapping::File(_) => folio.nr_pages(),
            Mapping::Anon(_) => 0,
        };
        if u64::from(folio.refcount(mem_map)) != folio.mapcount(mem_map) + cache_refs {
            return Ok(false);
        }
        // `unmap_folio` with `TTU_SPLIT_HUGE_PMD`: PMD maps become PTE maps first.
        self.split_folio_pmds(folio);
        let head = folio.head(mem_map);
        let on_lru = head.flags().contains(PageFlags::LRU);
        if on_lru {
            self.lru_del(caller, folio);
        }
        let flags = head.flags() - PageFlags::HEAD;
        let memcg = head.memcg_id();
        let mut unmapped = Vec::new();
        allocator
            .split_page(folio.pfn, folio.order)
            .map_err(MmError::Free)?;
        self.folios.remove(&folio.pfn);
        self.deferred_split.remove(folio.pfn);
        for i in 0..folio.nr_pages() {
            let pfn = folio.pfn.add(i);
            let page = mem_map.page(pfn);
            page.set_next(NO_PFN);
            page.set_prev(NO_PFN);
            page.set_flags(flags);
            page.set_memcg_id(memcg);
            let refs = u64::from(page.mapcount()) + u64::from(cache_refs != 0);
            page.set_refcount(refs as u16);
            let single = Folio {
                pfn,
                order: Order::ZERO,
            };
            self.folios.insert(
                pfn,
                FolioInfo {
                    folio: single,
                    mapping: info.mapping,
                    index: info.index + i,
                },
            );
            if let Mapping::File(file) = info.mapping {
                // The head's entry at `info.index` is replaced by page 0's.
                self.file_mut(file)?.cache.insert(info.index + i, single);
            }
            if on_lru {
                // `lru_add_page_tail`: each page takes the folio's place, in order.
                self.lru_add(caller, single);
            }
            if refs == 0 {
                unmapped.push(single);
            }
        }
        for single in unmapped {
            self.free_folio(caller, single)?;
        }
        self.stats.folio_splits += 1;
        if super::huge_memory::pmd_mappable(folio.order) {
            self.stats.thp_split_page += 1;
        }
        Ok(true)
    }

    /// Reclaim one folio as `shrink_folio_list` does once it decided to: anonymous folios
    /// get swap slots, are unmapped and written out; file folios are unmapped, written back
    /// if dirty and dropped from the page cache. With asynchronous write-back
    /// ([`Memory::set_async_writeback`]) a dirty file folio is only queued for write-back
    /// and marked for reclaim (`PG_reclaim`); it is freed by a later pass once
    /// [`Memory::end_writeback`] ran. [`MmError::NotAFolio`] for a folio the mapping
    /// layer does not hold.
    pub fn reclaim_folio(
        &mut self,
        caller: Caller,
        folio: Folio,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimResult, MmError> {
        if !self.holds_folio(folio) {
            return Err(MmError::NotAFolio(folio));
        }
        let info = self.folios[&folio.pfn];
        if let Some(reclaim) = self.writeback.get_mut(&folio.pfn) {
            *reclaim = true;
            return Ok(ReclaimResult::Writeback);
        }
        let mem_map = self.mem_map(folio.pfn);
        // The reclaimer's own reference (isolation takes one).
        folio.ref_add(mem_map, 1)?;
        let memcg = super::memcg::MemcgId(folio.head(mem_map).memcg_id());
        match info.mapping {
            Mapping::Anon(_) => {
                let Some(entries) = self.swap.alloc(folio.nr_pages()) else {
                    self.folio_put(caller, folio, 1)?;
                    return Ok(ReclaimResult::NoSwap);
                };
                // `mem_cgroup_swapout`: the slots keep the folio's cgroup, and pin it.
                if memcg.0 != 0 {
                    for &entry in &entries {
                        self.swap.record_owner(entry, memcg);
                    }
                    self.memcgs.group_mut(memcg).swap_records += entries.len() as u64;
                }
                self.try_to_unmap(caller, folio, Some(&entries));
                for (i, &entry) in entries.iter().enumerate() {
                    io.write_swap(entry, folio.pfn.add(i as u64));
                }
                self.stats.swap_out += folio.nr_pages();
                // The folio leaves the swap cache (`__remove_mapping`): each slot keeps
                // one user per swap PTE, and the slots of pages no PTE mapped (a large
                // folio partly unmapped by copy-on-write) are free again.
                for &entry in &entries {
                    self.swap_free(entry);
                }
            }
            Mapping::File(file) => {
                self.try_to_unmap(caller, folio, None);
                let allocator = &self.allocator;
                let allocator = allocator.page_allocator();
                let head = folio.head(allocator.find_zone(folio.pfn).expect("zone").mem_map());
                if head.flags().contains(PageFlags::DIRTY) {
                    io.write_file(file, info.index, folio.pfn, folio.nr_pages());
                    self.stats.file_writes += folio.nr_pages();
                    head.set_flags(head.flags() - PageFlags::DIRTY);
                    if self.async_writeback {
                        head.set_flags(head.flags() | PageFlags::WRITEBACK);
                        self.writeback.insert(folio.pfn, true);
                        self.folio_put(caller, folio, 1)?;
                        return Ok(ReclaimResult::Writeback);
                    }
                }
                self.file_mut(file)?.cache.remove(&info.index);
                // The page cache's references.
                folio.ref_sub(self.mem_map(folio.pfn), folio.nr_pages() as u16);
            }
        }
        let mem_map = self.mem_map(folio.pfn);
        debug_assert_eq!(folio.mapcount(mem_map), 0, "unmapped from every PTE");
        debug_assert_eq!(folio.refcount(mem_map), 1, "only the reclaimer's reference");
        self.stats.reclaimed += folio.nr_pages();
        self.folio_put(caller, folio, 1)?;
        Ok(ReclaimResult::Freed)
    }

    /// Write-back of `folio` finished (`folio_end_writeback`): `PG_writeback` clears, and a
    /// folio reclaim wanted moves to the tail of its inactive list so the next pass frees
    /// it (`folio_rotate_reclaimable`). Returns whether it was under write-back (false
    /// for a folio the mapping layer does not hold).
    pub fn end_writeback(&mut self, caller: Caller, folio: Folio) -> bool {
        if !self.holds_folio(folio) {
            return false;
        }
        let Some(reclaim) = self.writeback.remove(&folio.pfn) else {
            return false;
        };
        let head = folio.head(self.mem_map(folio.pfn));
        head.set_flags(head.flags() - PageFlags::WRITEBACK);
        if reclaim && head.flags().contains(PageFlags::LRU) {
            self.lru_del(caller, folio);
            self.lru_add_tail(caller, folio);
        }
        true
    }

    /// Finish every write-back in flight (the device caught up).
    pub fn end_all_writeback(&mut self, caller: Caller) -> u64 {
        let folios: Vec<Folio> = self
            .writeback
            .keys()
            .map(|pfn| self.folios[pfn].folio)
            .collect();
        for &folio in &folios {
            self.end_writeback(caller, folio);
        }
        folios.len() as u64
    }

    /// `MADV_PAGEOUT` on `pages` pages from `start` of `mm`: collect the folios mapped
    /// there that only this mapping maps, split large ones as the policy says, and
    /// reclaim them.
    pub fn madvise_pageout(
        &mut self,
        caller: Caller,
        mm: MmId,
        start: Vpn,
        pages: u64,
        io: &mut dyn PageIo,
    ) -> Result<PageoutOutcome, MmError> {
        let mut outcome = PageoutOutcome::default();
        let mut victims: Vec<Folio> = Vec::new();
        let mut vpn = start;
        let end = start.saturating_add(pages);
        while vpn < end {
            let Some(vma) = self.mm(mm)?.find_vma(vpn) else {
                vpn += 1;
                continue;
            };
            if let Some(pmd) = vma.pmd(vpn) {
                vpn = self.pageout_huge_pmd(caller, pmd, vpn, end, &mut victims, &mut outcome)?;
                continue;
            }
            let PteState::Present { pfn, .. } = vma.ptes[(vpn - vma.start) as usize].state() else {
                vpn += 1;
                continue;
            };
            let mem_map = self.mem_map(pfn);
            let folio = Folio::of_page(mem_map, pfn).expect("a present PTE maps a folio");
            if victims.last() == Some(&folio) {
                vpn += 1;
                continue;
            }
            // `folio_estimated_sharers`: the map count of the folio's first page.
            if folio.page_mapcount(mem_map, folio.pfn) > 1 || folio.page_mapcount(mem_map, pfn) > 1
            {
                outcome.skipped += 1;
                vpn += 1;
                continue;
            }
            if folio.order != Order::ZERO {
                let keep = self.policy.pageout == PageoutSplit::KeepCovered
                    && self.covers_folio(mm, vpn, end, folio);
                if !keep {
                    if !self.split_folio(caller, folio)? {
                        outcome.skipped += 1;
                        vpn += 1;
                        continue;
                    }
                    outcome.split += 1;
                    // Rescan this page: it is an order-0 folio now.
                    continue;
                }
                victims.push(folio);
                vpn += folio.nr_pages() - (pfn.0 - folio.pfn.0);
                continue;
            }
            victims.push(folio);
            vpn += 1;
        }
        for folio in victims {
            match self.reclaim_folio(caller, folio, io)? {
                ReclaimResult::Freed => outcome.reclaimed += folio.nr_pages(),
                ReclaimResult::NoSwap | ReclaimResult::Writeback => outcome.skipped += 1,
            }
        }
        Ok(outcome)
    }

    /// `madvise_cold_or_pageout_pte_range` at a PMD mapping `vpn` (up to `end`): skip a
    /// folio that looks shared (`folio_estimated_sharers`); collect it whole if the range
    /// covers the PMD, else split it (PMD and folio) so that the PTE walk goes on over the
    /// range. Returns where the walk goes on.
    fn pageout_huge_pmd(
        &mut self,
        caller: Caller,
        pmd: super::pte::Pte,
        vpn: Vpn,
        end: Vpn,
        victims: &mut Vec<Folio>,
        outcome: &mut PageoutOutcome,
    ) -> Result<Vpn, MmError> {
        use super::huge_memory::{pmd_base, HPAGE_PMD_NR};
        let (base, head) = (pmd_base(vpn), pmd.pfn().expect("a PMD entry is present"));
        let next = (base + HPAGE_PMD_NR).min(end);
        let mem_map = self.mem_map(head);
        let folio = Folio::of_page(mem_map, head).expect("a PMD maps a folio");
        if folio.page_mapcount(mem_map, head) > 1 {
            outcome.skipped += 1;
            return Ok(next);
        }
        if next - vpn == HPAGE_PMD_NR {
            victims.push(folio);
            return Ok(next);
        }
        if !self.split_folio(caller, folio)? {
            outcome.skipped += 1;
            return Ok(next);
        }
        outcome.split += 1;
        // Rescan from `vpn`: PTEs map single pages there now.
        Ok(vpn)
    }

    /// Whether the PTEs from `vpn` (up to `end`) map all of `folio`, its pages in order,
    /// starting at its first page (6.10's `folio_pte_batch` covering the folio).
    fn covers_folio(&self, mm: MmId, vpn: Vpn, end: Vpn, folio: Folio) -> bool {
        let Ok(space) = self.mm(mm) else {
            return false;
        };
        (0..folio.nr_pages()).all(|i| {
            let v = vpn + i;
            v < end && space.pte(v).pfn() == Some(folio.pfn.add(i))
        })
    }

    /// Drop a file's page cache and forget the file (`truncate_inode_pages` on the last
    /// close of an unlinked file). Refused while any mapping of it exists.
    pub fn delete_file(
        &mut self,
        caller: Caller,
        file: super::memory::FileId,
    ) -> Result<(), MmError> {
        let f = self.file(file)?;
        if !f.i_mmap.is_empty() {
            return Err(MmError::Overlap(f.i_mmap[0].1));
        }
        let cached: Vec<Folio> = f.cache.values().copied().collect();
        for folio in cached {
            // The device finishes what is in flight before the inode goes.
            self.end_writeback(caller, folio);
            self.folios.remove(&folio.pfn);
            self.folio_put(caller, folio, folio.nr_pages())?;
        }
        self.files[file.0 as usize] = None;
        Ok(())
    }
}
