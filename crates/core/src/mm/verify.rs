//! The mapping layer's walker: every count recomputed from the page tables.
//!
//! Checks, for every folio the layer holds: it is an allocated block of its order in the
//! allocator; each page's map count equals the PTEs that map it; `_nr_pages_mapped`
//! equals the pages with a map; the reference count equals the PTE maps plus the page
//! cache's references; the `NR_*_MAPPED` statistics and every address space's counters
//! equal what the page tables hold; swap slots in use equal the swap entries; the page
//! cache and the side table agree. Then the allocator's own walker.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;

use super::folio::Folio;
use super::memory::{Mapping, Memory, MmCounters, VmaKind};
use super::pte::PteState;
use crate::page::{PageState, Pfn};

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(format!($($arg)*));
        }
    };
}

impl Memory {
    /// Check every invariant of the module documentation; the first violation found.
    pub fn verify(&self) -> Result<(), String> {
        let mut maps: BTreeMap<Pfn, u64> = BTreeMap::new();
        let mut swap_entries = 0;
        for (id, mm) in self.mms.iter().enumerate() {
            let Some(mm) = mm else { continue };
            let mut counters = MmCounters::default();
            for vma in mm.vmas.values() {
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
                            swap_entries += 1;
                        }
                        PteState::Present { pfn, .. } => {
                            let zone = self.allocator.find_zone(pfn);
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
                                (VmaKind::Anon { anon_vma, .. }, Mapping::Anon(a)) => a == anon_vma,
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
            swap_entries == self.swap.used(),
            "{} swap slots in use, {swap_entries} swap entries",
            self.swap.used()
        );

        let (mut anon_mapped, mut file_mapped) = (0, 0);
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
        self.allocator
            .verify()
            .map(|_| ())
            .map_err(|e| format!("allocator: {e}"))
    }
}
