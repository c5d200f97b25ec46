//! The mapping layer's walker: every count recomputed from the page tables.
//!
//! Checks, for every folio the layer holds: it is an allocated block of its order in the
//! allocator; each page's map count equals the PTEs that map it; `_nr_pages_mapped`
//! equals the pages with a map; each PMD entry is aligned, over empty PTEs, and maps a
//! held anonymous THP whole, whose entire map count equals the PMDs that map it; the
//! reference count equals the PTE and PMD maps plus the page cache's references; the
//! `NR_*_MAPPED` statistics (a PMD maps every page), `NR_ANON_THPS` and every address
//! space's counters equal what the page tables hold; each swap slot's count equals the swap entries naming
//! it; the page cache and the side table agree; an anonymous page is mapped only where its
//! anon_vma's chains reach (so the rmap walk finds every mapping), and each mapping's
//! `anon_vma_chain` and the anon_vmas' chains name each other, in one fork tree; a folio
//! on a deferred split queue is a held, partly unmapped anonymous THP on its cgroup's
//! queue. Then the allocator's own walker.

use crate::sync::RawMutex;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::folio::Folio;
use super::huge_memory::{pmd_base, HPAGE_PMD_NR, HPAGE_PMD_ORDER};
use super::lru::{LruList, NR_LRU_LISTS};
use super::memcg::{MappedStat, MemcgId, MemcgState};
use super::memory::{Mapping, Memory, MmCounters, Vma, VmaKind, Vpn};
use super::pte::{Pte, PteState};
use crate::page::PageFlags;
use crate::page::{PageState, Pfn};
use crate::page_alloc::MAX_NR_ZONES;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(format!($($arg)*));
        }
    };
}

impl<R: RawMutex> Memory<R> {
    /// Check every invariant of the module documentation; the first violation found.
    pub fn verify(&self) -> Result<(), String> {
        let mut maps: BTreeMap<Pfn, u64> = BTreeMap::new();
        let mut pmd_maps: BTreeMap<Pfn, u64> = BTreeMap::new();
        let mut swap_entries: BTreeMap<u64, u64> = BTreeMap::new();
        for (id, mm) in self.mms.iter().enumerate() {
            let Some(mm) = mm else { continue };
            let mut counters = MmCounters::default();
            for vma in mm.vmas.values() {
                for (&base, &pmd) in &vma.pmds {
                    let head = self.verify_pmd(id, vma, base, pmd)?;
                    *pmd_maps.entry(head).or_default() += 1;
                    counters.anon_pages += HPAGE_PMD_NR;
                }
                let anon = matches!(vma.kind, VmaKind::Anon { .. });
                for (i, pte) in vma.ptes.iter().enumerate() {
                    match pte.state() {
                        PteState::None => {}
                        PteState::Swap(entry) => {
                            ensure!(anon, "mm {id}: a swap entry in a file mapping");
                            ensure!(
                                self.swap.is_used(entry),
                                "mm {id}: swap entry {} is not in use",
                                entry.0
                            );
                            counters.swap_entries += 1;
                            *swap_entries.entry(entry.0).or_default() += 1;
                        }
                        PteState::Present { pfn, .. } => {
                            let zone = self.allocator.page_allocator().find_zone(pfn);
                            ensure!(zone.is_some(), "mm {id}: PTE maps {pfn:?}, in no zone");
                            let mem_map = zone.expect("checked").mem_map();
                            let folio = Folio::of_page(mem_map, pfn);
                            ensure!(folio.is_some(), "mm {id}: PTE maps {pfn:?}, not allocated");
                            let folio = folio.expect("checked");
                            let info = self.folios.get(&folio.pfn);
                            ensure!(
                                info.is_some(),
                                "mm {id}: PTE maps {pfn:?} of a folio the layer does not hold"
                            );
                            let info = info.expect("checked");
                            let vpn = vma.start + i as u64;
                            ensure!(
                                vma.index_of(vpn) == info.index + (pfn.0 - folio.pfn.0),
                                "mm {id}: {vpn:#x} maps {pfn:?} at the wrong index"
                            );
                            let kind_ok = match (vma.kind, info.mapping) {
                                (VmaKind::Anon { .. }, Mapping::Anon(a)) => {
                                    vma.anon_vma_chain.contains(&a)
                                }
                                (VmaKind::File { file, .. }, Mapping::File(f)) => f == file,
                                _ => false,
                            };
                            ensure!(kind_ok, "mm {id}: {vpn:#x} maps a folio of another mapping");
                            *maps.entry(pfn).or_default() += 1;
                            if anon {
                                counters.anon_pages += 1;
                            } else {
                                counters.file_pages += 1;
                            }
                        }
                    }
                }
            }
            ensure!(
                counters == mm.counters,
                "mm {id}: counters {:?}, page tables say {counters:?}",
                mm.counters
            );
        }
        ensure!(
            swap_entries.len() as u64 == self.swap.used(),
            "{} swap slots in use, {} named by swap entries",
            self.swap.used(),
            swap_entries.len()
        );
        for (&slot, &entries) in &swap_entries {
            let count = u64::from(self.swap.count(super::pte::SwapEntry(slot)));
            ensure!(
                count == entries,
                "swap slot {slot}: count {count}, {entries} swap entries"
            );
        }
        self.verify_anon_vmas()?;
        for head in self.deferred_split.queued() {
            let info = self.folios.get(&head);
            ensure!(
                info.is_some(),
                "{head:?} on a deferred split queue but not held"
            );
            let folio = info.expect("checked").folio;
            let mem_map = self.mem_map(head);
            let page = folio.head(mem_map);
            ensure!(
                matches!(info.expect("checked").mapping, Mapping::Anon(_))
                    && super::huge_memory::pmd_mappable(folio.order),
                "{head:?} on a deferred split queue: not an anonymous THP"
            );
            ensure!(
                folio.nr_pages_mapped(mem_map) < folio.nr_pages(),
                "{head:?} on a deferred split queue with every page mapped"
            );
            let queue = match page.memcg_id() {
                0 => super::huge_memory::DeferredSplitQueue::Node(self.node_of(head)),
                id => super::huge_memory::DeferredSplitQueue::Memcg(MemcgId(id)),
            };
            ensure!(
                self.deferred_split.queue_of(head) == Some(queue),
                "{head:?} on {:?}, charged for {queue:?}",
                self.deferred_split.queue_of(head)
            );
        }

        let (mut anon_mapped, mut file_mapped, mut anon_thps) = (0, 0, 0);
        for (&head, info) in &self.folios {
            let folio = info.folio;
            ensure!(
                head == folio.pfn,
                "side table key {head:?} != {:?}",
                folio.pfn
            );
            let mem_map = self.mem_map(head);
            let page = mem_map.page(head);
            ensure!(
                page.state_order() == (PageState::Allocated, folio.order),
                "folio {head:?}: the allocator has it as {:?}",
                page.state_order()
            );
            let mut mapped_pages = 0;
            let mut pte_maps = 0;
            for i in 0..folio.nr_pages() {
                let pfn = head.add(i);
                let expected = maps.get(&pfn).copied().unwrap_or(0);
                let count = u64::from(mem_map.page(pfn).mapcount());
                ensure!(
                    count == expected,
                    "{pfn:?}: map count {count}, {expected} PTEs map it"
                );
                if i > 0 {
                    ensure!(
                        u64::from(mem_map.page(pfn).next()) == head.0,
                        "{pfn:?}: tail does not point at its head {head:?}"
                    );
                }
                mapped_pages += u64::from(expected > 0);
                pte_maps += expected;
            }
            ensure!(
                folio.nr_pages_mapped(mem_map) == mapped_pages,
                "folio {head:?}: nr_pages_mapped {}, {mapped_pages} pages mapped",
                folio.nr_pages_mapped(mem_map)
            );
            let pmds = pmd_maps.get(&head).copied().unwrap_or(0);
            ensure!(
                folio.entire_mapcount(mem_map) == pmds,
                "folio {head:?}: entire map count {}, {pmds} PMDs map it",
                folio.entire_mapcount(mem_map)
            );
            if pmds > 0 {
                // Every page counts as mapped while a PMD maps the folio.
                mapped_pages = folio.nr_pages();
                anon_thps += 1;
            }
            let pte_maps = pte_maps + pmds;
            let cache_refs = match info.mapping {
                Mapping::Anon(_) => {
                    anon_mapped += mapped_pages;
                    0
                }
                Mapping::File(file) => {
                    file_mapped += mapped_pages;
                    let cached = self
                        .file(file)
                        .ok()
                        .and_then(|f| f.cache.get(&info.index).copied());
                    ensure!(
                        cached == Some(folio),
                        "folio {head:?}: not in its file's page cache at {}",
                        info.index
                    );
                    folio.nr_pages()
                }
            };
            ensure!(
                pte_maps > 0 || cache_refs > 0,
                "folio {head:?}: held by the layer but mapped and cached nowhere"
            );
            let refs = u64::from(folio.refcount(mem_map));
            ensure!(
                refs == pte_maps + cache_refs,
                "folio {head:?}: {refs} references, {pte_maps} PTE maps + {cache_refs} cache"
            );
        }
        for (id, file) in self.files.iter().enumerate() {
            let Some(file) = file else { continue };
            for (&index, folio) in &file.cache {
                let info = self.folios.get(&folio.pfn);
                ensure!(
                    info.is_some_and(|i| i.index == index),
                    "file {id}: cached folio at {index} missing from the side table"
                );
            }
        }
        ensure!(
            anon_mapped == self.stats.anon_mapped,
            "nr_anon_pages {} != {anon_mapped} mapped anonymous pages",
            self.stats.anon_mapped
        );
        ensure!(
            file_mapped == self.stats.file_mapped,
            "nr_mapped {} != {file_mapped} mapped file pages",
            self.stats.file_mapped
        );
        ensure!(
            anon_thps == self.stats.anon_thps,
            "nr_anon_transparent_hugepages {} != {anon_thps} PMD-mapped folios",
            self.stats.anon_thps
        );
        for &pfn in self.writeback.keys() {
            let info = self.folios.get(&pfn);
            ensure!(info.is_some(), "{pfn:?} under write-back but not held");
            let flags = self.mem_map(pfn).page(pfn).flags();
            ensure!(
                flags.contains(PageFlags::WRITEBACK),
                "{pfn:?} under write-back without PG_writeback"
            );
        }
        for info in self.folios.values() {
            let flags = info.folio.head(self.mem_map(info.folio.pfn)).flags();
            ensure!(
                !flags.contains(PageFlags::WRITEBACK)
                    || self.writeback.contains_key(&info.folio.pfn),
                "{:?} has PG_writeback but no write-back is in flight",
                info.folio.pfn
            );
        }
        self.verify_lru_and_memcg()?;
        let nodes = self.allocator.page_allocator().topology().nr_nodes();
        let mut swap_records: BTreeMap<u16, u64> = BTreeMap::new();
        for slot in 0..self.swap.slots() {
            if let Some(owner) = self.swap.owner(super::pte::SwapEntry(slot)) {
                ensure!(
                    self.swap.is_used(super::pte::SwapEntry(slot)),
                    "swap slot {slot}: a cgroup record on a free slot"
                );
                *swap_records.entry(owner.0).or_default() += 1;
            }
        }
        for group in self.memcgs.all() {
            let records = swap_records.get(&group.id.0).copied().unwrap_or(0);
            ensure!(
                group.swap_records == records,
                "memcg {}: {} swap records counted, {records} slots recorded",
                group.id.0,
                group.swap_records
            );
            // A zombie keeps its per-CPU statistics until it is freed; an offline cgroup
            // that nothing pins should have been freed.
            let pinned = group.usage > 0
                || group.swap_records > 0
                || group
                    .children
                    .iter()
                    .any(|&c| self.memcgs.state(c) != Some(MemcgState::Freed));
            ensure!(
                group.state != MemcgState::Offline || pinned,
                "memcg {}: offline and pinned by nothing, not freed",
                group.id.0
            );
            ensure!(
                group.state != MemcgState::Freed || !pinned,
                "memcg {}: freed while still pinned",
                group.id.0
            );
            let expected = if group.state == MemcgState::Freed || group.id == MemcgId::ROOT {
                0
            } else {
                nodes
            };
            ensure!(
                group.percpu_areas.len() == expected,
                "memcg {}: {} percpu areas, expected {expected}",
                group.id.0,
                group.percpu_areas.len()
            );
        }
        self.percpu
            .verify()
            .map_err(|e| format!("percpu allocator: {e}"))?;
        self.allocator
            .page_allocator()
            .verify()
            .map(|_| ())
            .map_err(|e| format!("allocator: {e}"))
    }

    /// A PMD entry of mapping `vma` of address space `id` at `base`: aligned, inside the
    /// mapping, over empty PTEs, in a private anonymous mapping, mapping the first page
    /// of a PMD-sized anonymous folio the layer holds, at the folio's index, of an
    /// anon_vma the mapping is chained to. Returns the folio's first page.
    fn verify_pmd(&self, id: usize, vma: &Vma, base: Vpn, pmd: Pte) -> Result<Pfn, String> {
        ensure!(
            base == pmd_base(base) && base >= vma.start && base + HPAGE_PMD_NR <= vma.end(),
            "mm {id}: PMD at {base:#x} is not an aligned range of its mapping"
        );
        let VmaKind::Anon { .. } = vma.kind else {
            return Err(format!("mm {id}: PMD at {base:#x} in a file mapping"));
        };
        let first = (base - vma.start) as usize;
        ensure!(
            vma.ptes[first..first + HPAGE_PMD_NR as usize]
                .iter()
                .all(|&p| p == Pte::NONE),
            "mm {id}: PMD at {base:#x} over PTEs that are set"
        );
        let PteState::Present { pfn: head, .. } = pmd.state() else {
            return Err(format!("mm {id}: PMD at {base:#x} is not present"));
        };
        let info = self.folios.get(&head);
        ensure!(
            info.is_some_and(|i| i.folio.order.get() == HPAGE_PMD_ORDER),
            "mm {id}: PMD at {base:#x} maps {head:?}, not the head of a THP the layer holds"
        );
        let info = info.expect("checked");
        ensure!(
            info.index == vma.index_of(base),
            "mm {id}: PMD at {base:#x} maps a folio of index {:#x}",
            info.index
        );
        ensure!(
            matches!(info.mapping, Mapping::Anon(a) if vma.anon_vma_chain.contains(&a)),
            "mm {id}: PMD at {base:#x} maps a folio of another mapping"
        );
        Ok(head)
    }

    /// Each anonymous mapping's `anon_vma_chain` starts with its own anon_vma, whose
    /// parent's mapping it was forked from, all in one fork tree; an anon_vma's chains
    /// name exactly the live mappings whose `anon_vma_chain` holds it, with their ranges.
    fn verify_anon_vmas(&self) -> Result<(), String> {
        let mut expected: BTreeMap<u32, Vec<(u32, u64, u64)>> = BTreeMap::new();
        for (id, mm) in self.mms.iter().enumerate() {
            let Some(mm) = mm else { continue };
            for vma in mm.vmas.values() {
                let VmaKind::Anon { anon_vma, .. } = vma.kind else {
                    ensure!(
                        vma.anon_vma_chain.is_empty(),
                        "mm {id}: a file mapping with anon_vmas"
                    );
                    continue;
                };
                ensure!(
                    vma.anon_vma_chain.first() == Some(&anon_vma),
                    "mm {id}: mapping {:#x} does not chain its own anon_vma first",
                    vma.start
                );
                let own = &self.anon_vmas[anon_vma.0 as usize];
                ensure!(
                    vma.anon_vma_chain.get(1) == own.parent.as_ref(),
                    "mm {id}: mapping {:#x}: its anon_vma's parent is not the next in its chain",
                    vma.start
                );
                for a in &vma.anon_vma_chain {
                    ensure!(
                        self.anon_vmas[a.0 as usize].root == own.root,
                        "mm {id}: mapping {:#x} chains anon_vma {} of another fork tree",
                        vma.start,
                        a.0
                    );
                    expected
                        .entry(a.0)
                        .or_default()
                        .push((id as u32, vma.start, vma.end()));
                }
            }
        }
        for (id, anon_vma) in self.anon_vmas.iter().enumerate() {
            let mut chains: Vec<(u32, u64, u64)> = anon_vma
                .chains
                .iter()
                .map(|c| (c.mm.0, c.start, c.end))
                .collect();
            chains.sort_unstable();
            let mut want = expected.remove(&(id as u32)).unwrap_or_default();
            want.sort_unstable();
            ensure!(
                chains == want,
                "anon_vma {id}: chains {chains:?}, mappings chained to it {want:?}"
            );
        }
        Ok(())
    }

    /// Every folio is on the LRU list its flags name, of the cgroup it is charged to, on
    /// its node; list sizes, per-zone sizes and per-CPU counters equal the lists; each
    /// cgroup's usage equals the pages charged to its subtree plus their charge stocks.
    fn verify_lru_and_memcg(&self) -> Result<(), String> {
        let allocator = self.allocator.page_allocator();
        let mut listed = 0;
        let mut charged: BTreeMap<u16, (u64, u64)> = BTreeMap::new();
        for group in self.memcgs.all() {
            for (node, lruvec) in group.lruvecs.iter().enumerate() {
                let mut zone_size = [[0u64; NR_LRU_LISTS]; MAX_NR_ZONES];
                for lru in LruList::ALL {
                    let (mut folios, mut pages) = (0, 0);
                    for pfn in lruvec.iter(allocator, lru) {
                        let info = self.folios.get(&pfn);
                        ensure!(
                            info.is_some(),
                            "memcg {}: {pfn:?} on an LRU, unknown",
                            group.id.0
                        );
                        let folio = info.expect("checked").folio;
                        let head = folio.head(self.mem_map(pfn));
                        ensure!(
                            head.flags().contains(PageFlags::LRU)
                                && LruList::of_flags(head.flags()) == lru,
                            "{pfn:?} on {lru:?} with flags {:?}",
                            head.flags()
                        );
                        ensure!(
                            head.memcg_id() == group.id.0,
                            "{pfn:?} on memcg {}'s LRU, charged to {}",
                            group.id.0,
                            head.memcg_id()
                        );
                        ensure!(
                            self.node_of(pfn) as usize == node,
                            "{pfn:?} on node {node}'s LRU"
                        );
                        let zone = allocator.find_zone(pfn).expect("zone").zone_type();
                        zone_size[zone.index()][lru as usize] += folio.nr_pages();
                        folios += 1;
                        pages += folio.nr_pages();
                    }
                    let list = lruvec.lists[lru as usize];
                    ensure!(
                        (list.folios, list.pages) == (folios, pages),
                        "memcg {} node {node} {lru:?}: size {} folios {} pages, list {folios}/{pages}",
                        group.id.0,
                        list.folios,
                        list.pages
                    );
                    let percpu: i64 = group.lru_percpu[node].iter().map(|c| c[lru as usize]).sum();
                    ensure!(
                        percpu == pages as i64,
                        "memcg {} node {node} {lru:?}: per-CPU counters {percpu}, list {pages}",
                        group.id.0
                    );
                    listed += folios;
                }
                ensure!(
                    zone_size == lruvec.lru_zone_size,
                    "memcg {} node {node}: lru_zone_size disagrees with the lists",
                    group.id.0
                );
            }
        }
        ensure!(
            listed == self.folios.len() as u64,
            "{listed} folios on LRU lists, {} held",
            self.folios.len()
        );
        let mut mapped: BTreeMap<u16, [i64; 2]> = BTreeMap::new();
        let mut anon_thp: BTreeMap<u16, u64> = BTreeMap::new();
        for info in self.folios.values() {
            let head = info.folio.head(self.mem_map(info.folio.pfn));
            let mem_map = self.mem_map(info.folio.pfn);
            if info.folio.entire_mapcount(mem_map) > 0 {
                *anon_thp.entry(head.memcg_id()).or_default() += info.folio.nr_pages();
            }
            let item = if head.flags().contains(PageFlags::SWAPBACKED) {
                MappedStat::Anon
            } else {
                MappedStat::File
            };
            mapped.entry(head.memcg_id()).or_default()[item as usize] +=
                info.folio.pages_mapped(mem_map) as i64;
            let entry = charged.entry(head.memcg_id()).or_default();
            if head.flags().contains(PageFlags::SWAPBACKED) {
                entry.0 += info.folio.nr_pages();
            } else {
                entry.1 += info.folio.nr_pages();
            }
        }
        for group in self.memcgs.all() {
            let (anon, file) = charged.get(&group.id.0).copied().unwrap_or_default();
            ensure!(
                (group.anon, group.file) == (anon, file),
                "memcg {}: anon {} file {}, folios charged {anon}/{file}",
                group.id.0,
                group.anon,
                group.file
            );
            let thp = anon_thp.get(&group.id.0).copied().unwrap_or(0);
            ensure!(
                group.anon_thp == thp,
                "memcg {}: anon_thp {} pages, PMD-mapped THPs charged here {thp}",
                group.id.0,
                group.anon_thp
            );
            let expected = mapped.get(&group.id.0).copied().unwrap_or_default();
            for item in [MappedStat::Anon, MappedStat::File] {
                let counted = self.memcgs.mapped(group.id, item);
                ensure!(
                    counted == expected[item as usize],
                    "memcg {}: per-CPU {item:?} mapped {counted}, folios say {}",
                    group.id.0,
                    expected[item as usize]
                );
            }
            let subtree = self.memcgs.subtree(group.id);
            let pages: u64 = subtree
                .iter()
                .map(|g| {
                    let (a, f) = charged.get(&g.0).copied().unwrap_or_default();
                    a + f + self.memcgs.stock_pages(*g)
                })
                .sum();
            ensure!(
                group.usage == pages,
                "memcg {}: usage {} != {pages} pages charged below it (incl. stocks)",
                group.id.0,
                group.usage
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use alloc::sync::Arc;

    use super::*;
    use crate::mm::NoIo;
    use crate::page::Order;
    use crate::page_alloc::{Caller, ZoneType};
    use crate::topology::{CacheInfo, Topology, ZoneSize};
    use crate::{policy::MmPolicy, PageAllocator, Policy, Settings};

    /// A PMD map count no PMD accounts for is caught. Only the core can forge one since
    /// the folio's count setters became crate-private, so the check is tested here.
    #[test]
    fn verify_fails_on_an_entire_map_count_no_pmd_accounts_for() {
        let zones = [ZoneSize::managed(0, ZoneType::Normal, 8192)];
        let llc = CacheInfo {
            llc_bytes: 8 << 20,
            llc_shared_cpus: 2,
        };
        let topology = Topology::x86_64(&zones, alloc::vec![2], llc, false).expect("a topology");
        let allocator =
            PageAllocator::new(topology, Settings::default(), Policy::V6_7).expect("settings");
        let mut m = Memory::new(Arc::new(allocator), MmPolicy::V6_7, 0);
        let mm = m.create_mm();
        let start = 0x4000;
        m.mmap_anon(mm, start, 1024, Order::new(9).expect("order 9"))
            .expect("mmap");
        let folio = m
            .access(Caller::task(0), mm, start, false, &mut NoIo)
            .expect("fault")
            .folio;
        let map = m.allocator().find_zone(folio.pfn).expect("zone").mem_map();
        folio.ref_add(map, 1).expect("no overflow");
        folio.add_rmap_pmd(map).expect("no overflow");
        let err = m.verify().unwrap_err();
        assert!(err.contains("entire map count 2, 1 PMDs"), "{err}");
    }
}
