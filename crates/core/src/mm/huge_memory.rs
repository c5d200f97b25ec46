//! PMD mappings of anonymous THPs, and the deferred split queue: anonymous THPs that lost
//! some of their mappings wait there until a shrinker splits them and frees their
//! unmapped pages.
//!
//! A fault in an aligned 2 MiB range of a private anonymous mapping of order-9 folios maps
//! the folio with one PMD entry ([`crate::mm::Vma::pmds`]): one reference, an entire map
//! count of one, every page counted in `NR_ANON_MAPPED` and the folio in `NR_ANON_THPS`.
//! Linux counterpart (v6.7, `mm/huge_memory.c`): `do_huge_pmd_anonymous_page`,
//! `copy_huge_pmd` (fork: both entries write-protected, one more reference and entire
//! map), `do_huge_pmd_wp_page` (reuse when the PMD holds the only reference, else split
//! the PMD and let the PTE level copy the page written), `zap_huge_pmd`, and
//! `__split_huge_pmd_locked` without freezing (512 PTEs with the PMD's rights and bits,
//! the entire map moved to one PTE map per page, 511 more references), which a range
//! operation on part of a PMD (`MADV_DONTNEED`), `MADV_PAGEOUT` of part of one,
//! `split_folio` and reclaim's `try_to_unmap` (`TTU_SPLIT_HUGE_PMD`) run first. Where we
//! differ: no huge zero page (a read fault allocates the THP), no PMD migration entries
//! (reclaim splits the PMD and swaps the folio whole, one swap entry per PTE, as 6.7 does
//! when it gets a THP swap cluster), no deposited page table (an empty range whose PTEs
//! `MADV_DONTNEED` cleared counts as `pmd_none`, so the next fault there may map a THP
//! where Linux, which keeps the emptied page table, maps one page), and fork refuses to
//! copy a PMD whose later split the 16-bit reference count could not hold (127 sharers
//! of a THP at most, as when PTEs map it).
//!
//! Deferred split, Linux counterpart (v6.7, `mm/huge_memory.c`): `deferred_split_folio`,
//! `deferred_split_count` / `deferred_split_scan` (the `deferred_split_shrinker`, which
//! reclaim runs from `shrink_slab` after each cgroup's lruvec), the per-memcg
//! `memcg->deferred_split_queue` and the per-node `pgdat->deferred_split_queue` used when
//! memcg is off, and the `thp_deferred_split_page` / `thp_split_page` events.
//!
//! 6.7 queues only PMD-sized (order 9) anonymous folios (mTHP's smaller orders were added
//! in 6.8), whenever a PTE unmap leaves one of its pages unmapped, even the last (the
//! folio is then freed and leaves the queue), and when the last PMD unmap leaves some
//! pages mapped by PTEs and others not (`nr < nr_pmdmapped`); not while reclaim unmaps
//! it for swap-out (`folio_test_swapcache`). Every folio of the mapping layer is charged
//! to a cgroup, so the per-memcg queue is the one in use; the per-node queue takes folios
//! without one.
//! Where we differ: `do_shrink_slab`'s deferred work (`nr_deferred`, carried from one call
//! to the next) is not kept; each call scans `2 × (queue >> priority)` folios in batches
//! of 128 as `do_shrink_slab` does without it.

use crate::sync::RawMutex;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use super::folio::Folio;
use super::memcg::MemcgId;
use super::memory::{Fault, Mapping, Memory, MmError, MmId, Vma, VmaKind, Vpn};
use super::pte::{Pte, PteState};
use crate::page::{Order, PageFlags, Pfn};
use crate::page_alloc::{Caller, NodeId};

/// `HPAGE_PMD_ORDER` on x86-64: 2 MiB folios.
pub const HPAGE_PMD_ORDER: u8 = 9;

/// `SHRINK_BATCH`: objects a shrinker scans per call.
const SHRINK_BATCH: u64 = 128;

/// `DEFAULT_SEEKS`: the deferred split shrinker's cost of recreating an object.
const DEFAULT_SEEKS: u64 = 2;

/// Which deferred split queue a folio goes on (`get_deferred_split_queue`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum DeferredSplitQueue {
    /// The folio's cgroup's (`memcg->deferred_split_queue`).
    Memcg(MemcgId),
    /// The node's, for folios charged to no cgroup (`pgdat->deferred_split_queue`).
    Node(NodeId),
}

/// The queues and which queue each queued folio is on (`folio->_deferred_list`).
#[derive(Clone, Debug, Default)]
pub struct DeferredSplit {
    queues: alloc::collections::BTreeMap<DeferredSplitQueue, VecDeque<Pfn>>,
    on: alloc::collections::BTreeMap<Pfn, DeferredSplitQueue>,
}

impl DeferredSplit {
    /// Folios queued, by head pfn, in no particular order.
    pub fn queued(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.on.keys().copied()
    }

    /// `split_queue_len` of `queue`.
    pub fn len(&self, queue: DeferredSplitQueue) -> u64 {
        self.queues.get(&queue).map_or(0, |q| q.len() as u64)
    }

    /// Whether no folio is queued anywhere.
    pub fn is_empty(&self) -> bool {
        self.on.is_empty()
    }

    /// The queue `head` is on, if any.
    pub fn queue_of(&self, head: Pfn) -> Option<DeferredSplitQueue> {
        self.on.get(&head).copied()
    }

    /// Take `head` off its queue (`list_del_init(&folio->_deferred_list)`); whether it
    /// was queued.
    pub(super) fn remove(&mut self, head: Pfn) -> bool {
        let Some(queue) = self.on.remove(&head) else {
            return false;
        };
        let list = self.queues.get_mut(&queue).expect("a queued folio's queue");
        let at = list.iter().position(|&p| p == head).expect("on its queue");
        list.remove(at);
        true
    }
}

impl<R: RawMutex> Memory<R> {
    /// The deferred split queues.
    pub fn deferred_split(&self) -> &DeferredSplit {
        &self.deferred_split
    }

    /// `deferred_split_folio` after a PTE unmap left `unmapped` pages of `folio` with no
    /// map: queue a PMD-sized anonymous folio at the tail of its cgroup's queue, once.
    pub(super) fn deferred_split_folio(&mut self, folio: Folio, unmapped: u64) {
        if unmapped == 0 || folio.order.get() < HPAGE_PMD_ORDER {
            return;
        }
        if self.deferred_split.on.contains_key(&folio.pfn) {
            return;
        }
        let head = folio.head(self.mem_map(folio.pfn));
        debug_assert!(head.flags().contains(PageFlags::SWAPBACKED), "anonymous");
        let queue = match head.memcg_id() {
            0 => DeferredSplitQueue::Node(self.node_of(folio.pfn)),
            id => DeferredSplitQueue::Memcg(MemcgId(id)),
        };
        self.deferred_split.on.insert(folio.pfn, queue);
        self.deferred_split
            .queues
            .entry(queue)
            .or_default()
            .push_back(folio.pfn);
        self.stats.thp_deferred_split_page += 1;
    }

    /// `deferred_split_scan`: take up to `nr_to_scan` folios from the head of `queue` and
    /// split each (`split_folio`, which frees the pages no PTE maps); those that cannot be
    /// split go back to the tail. Returns the folios split.
    pub fn deferred_split_scan(
        &mut self,
        caller: Caller,
        queue: DeferredSplitQueue,
        nr_to_scan: u64,
    ) -> Result<u64, MmError> {
        let mut taken = Vec::new();
        while (taken.len() as u64) < nr_to_scan {
            let Some(list) = self.deferred_split.queues.get_mut(&queue) else {
                break;
            };
            let Some(head) = list.pop_front() else {
                break;
            };
            self.deferred_split.on.remove(&head);
            taken.push(head);
        }
        let mut split = 0;
        for head in taken {
            let folio = self.folios[&head].folio;
            if self.split_folio(caller, folio)? {
                split += 1;
            } else {
                self.deferred_split.on.insert(head, queue);
                self.deferred_split
                    .queues
                    .entry(queue)
                    .or_default()
                    .push_back(head);
            }
        }
        Ok(split)
    }

    /// `shrink_slab` for the one shrinker modelled, after `memcg`'s lruvec on `node` was
    /// shrunk at `priority` (`do_shrink_slab`: `2 × (len >> priority)` folios, in batches
    /// of 128 while a batch or the whole queue is due). Returns the folios split.
    pub(super) fn shrink_deferred_split(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        node: NodeId,
        priority: u32,
    ) -> Result<u64, MmError> {
        let queue = if memcg.0 == 0 {
            DeferredSplitQueue::Node(node)
        } else {
            DeferredSplitQueue::Memcg(memcg)
        };
        let freeable = self.deferred_split.len(queue);
        if freeable == 0 {
            return Ok(0);
        }
        let delta = (freeable >> priority) * 4 / DEFAULT_SEEKS;
        let mut total_scan = delta.min(2 * freeable);
        let mut split = 0;
        while total_scan >= SHRINK_BATCH || total_scan >= freeable {
            let nr_to_scan = SHRINK_BATCH.min(total_scan);
            if nr_to_scan == 0 {
                break;
            }
            split += self.deferred_split_scan(caller, queue, nr_to_scan)?;
            total_scan -= nr_to_scan;
        }
        Ok(split)
    }
}

/// Whether a folio of `order` is PMD-sized (`folio_test_pmd_mappable`).
pub fn pmd_mappable(order: Order) -> bool {
    order.get() >= HPAGE_PMD_ORDER
}

/// `HPAGE_PMD_NR`: pages a PMD maps.
pub const HPAGE_PMD_NR: u64 = 1 << HPAGE_PMD_ORDER;

/// The first virtual page of the aligned 2 MiB range holding `vpn` (`addr & HPAGE_PMD_MASK`).
pub fn pmd_base(vpn: Vpn) -> Vpn {
    vpn & !(HPAGE_PMD_NR - 1)
}

impl<R: RawMutex> Memory<R> {
    /// The PMD half of `do_huge_pmd_anonymous_page` (`folio_add_new_anon_rmap` of a
    /// PMD-sized folio, `map_anon_folio_pmd`): one PMD at `base` maps the new `folio`
    /// whole, with one reference; every page counts as mapped, and the folio as an
    /// anonymous THP.
    pub(super) fn map_huge_pmd(
        &mut self,
        caller: Caller,
        mm: MmId,
        base: Vpn,
        folio: Folio,
    ) -> Result<(), MmError> {
        debug_assert_eq!(base, pmd_base(base));
        let mem_map = self.mem_map(folio.pfn);
        folio.ref_add(mem_map, 1)?;
        let added = folio.add_rmap_pmd(mem_map)?;
        debug_assert!(added.first_or_last && added.pages == HPAGE_PMD_NR);
        self.mod_mapped_state(caller, folio, true, added.pages as i64);
        self.mod_anon_thps(folio, 1);
        let space = self.mm_mut(mm)?;
        space.counters.anon_pages += HPAGE_PMD_NR;
        let vma = space.find_vma_mut(base).expect("checked by the fault");
        debug_assert!(
            vma.ptes[(base - vma.start) as usize..][..HPAGE_PMD_NR as usize]
                .iter()
                .all(|&p| p == Pte::NONE)
        );
        vma.pmds.insert(base, Pte::present(folio.pfn, false, false));
        Ok(())
    }

    /// An access through a PMD that needs no copy: the accessed bit, and the dirty bit on
    /// a write (`huge_pmd_set_accessed`, or what the MMU sets itself).
    pub(super) fn touch_huge_pmd(
        &mut self,
        mm: MmId,
        vpn: Vpn,
        write: bool,
    ) -> Result<Fault, MmError> {
        let vma = self
            .mm_mut(mm)?
            .find_vma_mut(vpn)
            .expect("checked by access");
        let pmd = vma.pmds.get_mut(&pmd_base(vpn)).expect("a PMD maps vpn");
        pmd.touch(write);
        let head = pmd.pfn().expect("a PMD entry is present");
        let folio = Folio::of_page(self.mem_map(head), head).expect("a PMD maps a folio");
        Ok(Fault {
            pfn: head.add(vpn - pmd_base(vpn)),
            folio,
            was_present: true,
        })
    }

    /// `do_huge_pmd_wp_page`: a write to a PMD that fork write-protected. Reuse the folio
    /// when this PMD holds its only reference (`page_move_anon_rmap` to this mapping's
    /// anon_vma; 6.7 counts no `pgreuse` here); else split the PMD and return `false`:
    /// the fault falls back to the PTE level, which copies the one page written
    /// (`VM_FAULT_FALLBACK`).
    pub(super) fn do_huge_pmd_wp_page(&mut self, mm: MmId, vpn: Vpn) -> Result<bool, MmError> {
        let vma = self.mm(mm)?.find_vma(vpn).expect("checked by access");
        let VmaKind::Anon { anon_vma, .. } = vma.kind else {
            unreachable!("only private anonymous mappings have PMDs");
        };
        let key = vma.start;
        let head = vma.pmd(vpn).and_then(Pte::pfn).expect("a PMD maps vpn");
        let folio = Folio::of_page(self.mem_map(head), head).expect("a PMD maps a folio");
        if folio.refcount(self.mem_map(head)) == 1 {
            let memcg = self.mm(mm)?.memcg;
            self.memcgs.group_mut(memcg).events.pgfault += 1;
            let info = self.folios.get_mut(&head).expect("a mapped folio is held");
            info.mapping = Mapping::Anon(anon_vma);
            let vma = self.mm_mut(mm)?.find_vma_mut(vpn).expect("checked");
            vma.pmds
                .get_mut(&pmd_base(vpn))
                .expect("a PMD maps vpn")
                .mkwrite();
            return Ok(true);
        }
        self.with_vma(mm, key, |this, vma| {
            this.split_huge_pmd(vma, pmd_base(vpn));
            Ok(())
        })?;
        Ok(false)
    }

    /// `__split_huge_pmd_locked` without freezing: the PMD at `base` of `vma` becomes 512
    /// PTEs with its rights (write-protected or not), accessed and dirty bits; each page
    /// gains a PTE map and the folio 511 references (one per PTE, where the PMD held
    /// one), then the PMD map goes. No page becomes mapped or unmapped, so
    /// `NR_ANON_MAPPED` stays; `NR_ANON_THPS` drops if it was the last PMD.
    pub(super) fn split_huge_pmd(&mut self, vma: &mut Vma, base: Vpn) {
        let pmd = vma.pmds[&base];
        let PteState::Present {
            pfn: head,
            accessed,
            dirty,
        } = pmd.state()
        else {
            unreachable!("a PMD entry is present");
        };
        let mem_map = self.mem_map(head);
        let folio = Folio::of_page(mem_map, head).expect("a PMD maps a folio");
        // Fork keeps room for every PMD map's split (`copy_huge_pmds`), and every page's
        // PTE map count is below the folio's references, so neither count overflows.
        folio
            .ref_add(mem_map, (HPAGE_PMD_NR - 1) as u16)
            .expect("fork keeps room for the split of every PMD map");
        vma.pmds.remove(&base);
        if dirty {
            let page = folio.head(mem_map);
            page.set_flags(page.flags() | PageFlags::DIRTY);
        }
        let first = (base - vma.start) as usize;
        for i in 0..HPAGE_PMD_NR {
            let mut pte = Pte::present(head.add(i), accessed, dirty);
            if pmd.write_protected() {
                pte.wrprotect();
            }
            vma.ptes[first + i as usize] = pte;
            let newly = folio
                .add_rmap_pte(mem_map, head.add(i))
                .expect("a map count fits where the references did");
            debug_assert!(!newly, "the PMD still maps every page");
        }
        let removed = folio.remove_rmap_pmd(mem_map);
        debug_assert_eq!(removed.pages, 0, "every page is PTE-mapped now");
        if removed.first_or_last {
            self.mod_anon_thps(folio, -1);
        }
    }

    /// `zap_huge_pmd`: the PMD at `base` of `vma` (`mm`'s) goes whole: one PMD map and one
    /// reference less, `MM_ANONPAGES` down by 512. When it was the last PMD map, the pages
    /// no PTE maps become unmapped, and if some pages are still PTE-mapped the folio is
    /// queued for a deferred split (6.7's `nr < nr_pmdmapped`).
    pub(super) fn zap_huge_pmd(
        &mut self,
        caller: Caller,
        mm: MmId,
        vma: &mut Vma,
        base: Vpn,
    ) -> Result<(), MmError> {
        let pmd = vma.pmds.remove(&base).expect("a PMD at base");
        let PteState::Present {
            pfn: head, dirty, ..
        } = pmd.state()
        else {
            unreachable!("a PMD entry is present");
        };
        let folio = Folio::of_page(self.mem_map(head), head).expect("a PMD maps a folio");
        if dirty {
            let page = folio.head(self.mem_map(head));
            page.set_flags(page.flags() | PageFlags::DIRTY);
        }
        self.mm_mut(mm)?.counters.anon_pages -= HPAGE_PMD_NR;
        self.remove_rmap_pmd(caller, folio);
        self.count_rmap_updates(folio, 1, 1);
        self.folio_put(caller, folio, 1)
    }

    /// `NR_ANON_THPS` of the machine and of the folio's cgroup, by `delta` folios.
    fn mod_anon_thps(&mut self, folio: Folio, delta: i64) {
        self.stats.anon_thps = self
            .stats
            .anon_thps
            .checked_add_signed(delta)
            .expect("PMD-mapped THPs go negative");
        let memcg = MemcgId(folio.head(self.mem_map(folio.pfn)).memcg_id());
        if memcg.0 != 0 {
            let group = self.memcgs.group_mut(memcg);
            group.anon_thp = group
                .anon_thp
                .checked_add_signed(delta * HPAGE_PMD_NR as i64)
                .expect("a cgroup's PMD-mapped THP pages go negative");
        }
    }

    /// `page_remove_rmap(.., compound = true)` with its statistics: `NR_ANON_THPS` and
    /// `NR_ANON_MAPPED` when the last PMD map goes, and the deferred split queue when that
    /// leaves the folio partly mapped.
    pub(super) fn remove_rmap_pmd(&mut self, caller: Caller, folio: Folio) {
        let removed = folio.remove_rmap_pmd(self.mem_map(folio.pfn));
        if !removed.first_or_last {
            return;
        }
        self.mod_anon_thps(folio, -1);
        if removed.pages != 0 {
            self.mod_mapped_state(caller, folio, true, -(removed.pages as i64));
        }
        if removed.pages < folio.nr_pages() {
            self.deferred_split_folio(folio, removed.pages);
        }
    }

    /// `copy_huge_pmd` for every PMD of a private anonymous mapping: one more reference
    /// and PMD map per folio (`page_try_dup_anon_rmap(.., compound = true)`), both entries
    /// write-protected, the child's old. Returns the pages the child maps, and the error
    /// if it stopped at a count that would overflow (the PMDs copied so far are in
    /// `child`).
    pub(super) fn copy_huge_pmds(
        &mut self,
        parent: &mut BTreeMap<Vpn, Pte>,
        child: &mut BTreeMap<Vpn, Pte>,
    ) -> (u64, Option<MmError>) {
        let mut pages = 0;
        for (&base, pmd) in parent.iter_mut() {
            let head = pmd.pfn().expect("a PMD entry is present");
            let mem_map = self.mem_map(head);
            let folio = Folio::of_page(mem_map, head).expect("a PMD maps a folio");
            // Every PMD must stay splittable: a split adds 511 references, which the
            // 16-bit count must hold for every PMD map at once (127 sharers of a THP
            // at most, as when PTEs map it).
            let refs = u64::from(folio.refcount(mem_map));
            let entire = folio.entire_mapcount(mem_map);
            if refs + 1 + (HPAGE_PMD_NR - 1) * (entire + 1) > u64::from(u16::MAX) {
                return (pages, Some(MmError::CountOverflow));
            }
            if let Err(e) = folio.ref_add(mem_map, 1) {
                return (pages, Some(e.into()));
            }
            match folio.add_rmap_pmd(mem_map) {
                Ok(added) => debug_assert!(!added.first_or_last, "the parent maps it"),
                Err(e) => {
                    folio.ref_sub(mem_map, 1);
                    return (pages, Some(e.into()));
                }
            }
            pmd.wrprotect();
            child.insert(base, pmd.mkold());
            pages += HPAGE_PMD_NR;
        }
        (pages, None)
    }

    /// `unmap_folio`'s `TTU_SPLIT_HUGE_PMD` (and `split_huge_pmd_address` in
    /// `try_to_unmap_one`): split every PMD that maps `folio`, in every mapping the rmap
    /// walk finds.
    pub(super) fn split_folio_pmds(&mut self, folio: Folio) {
        if folio.entire_mapcount(self.mem_map(folio.pfn)) == 0 {
            return;
        }
        let (targets, index, _) = self.rmap_targets(folio);
        for (mm, key) in targets {
            let space = self.mms[mm.0 as usize].as_mut().expect("live mm");
            let vma = space
                .vmas
                .get_mut(&key)
                .expect("a mapping on the rmap list");
            let Some(base) = vma.vpn_of(index) else {
                continue;
            };
            if vma.pmds.get(&base).and_then(|p| p.pfn()) == Some(folio.pfn) {
                let mut vma = space.vmas.remove(&key).expect("found above");
                self.split_huge_pmd(&mut vma, base);
                let space = self.mms[mm.0 as usize].as_mut().expect("live mm");
                space.vmas.insert(key, vma);
            }
        }
        debug_assert_eq!(folio.entire_mapcount(self.mem_map(folio.pfn)), 0);
    }
}
