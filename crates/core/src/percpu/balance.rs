//! The balance work: free surplus chunks, depopulate isolated chunks' empty pages, and
//! keep a few empty pages populated for atomic requests.
//!
//! Linux counterpart: `pcpu_balance_workfn`, `pcpu_balance_free`,
//! `pcpu_reclaim_populated`, `pcpu_balance_populated` in `mm/percpu.c` (v5.14). Linux runs
//! this from a work item; here the caller runs [`PercpuAllocator::balance`] when
//! [`PercpuAllocator::balance_pending`] says it was scheduled (or whenever it likes).

use alloc::vec::Vec;

use super::backing::ChunkBacking;
use super::PercpuAllocator;

/// Retries of `pcpu_balance_populated` after creating a chunk. Linux has no bound; each
/// retry populates pages of the new chunk, so a handful always suffices, and a bound keeps
/// a failing backing from looping.
const POPULATE_RETRIES_MAX: usize = 16;

impl<B: ChunkBacking> PercpuAllocator<B> {
    /// Run the balance work once. v5.14 order: free surplus free chunks, reclaim the
    /// to_depopulate chunks, populate ahead of atomic demand, free chunks left with no
    /// populated pages. v5.13: the first and third steps only.
    pub fn balance(&mut self) {
        self.balance_pending = false;
        self.stats.balance_runs += 1;
        self.balance_free(false);
        if self.config.policy.partial_depopulation {
            self.reclaim_populated();
        }
        self.balance_populated();
        if self.config.policy.partial_depopulation {
            self.balance_free(true);
        }
    }

    /// `pcpu_balance_free`: keep the first chunk of the free slot; depopulate and destroy
    /// every other (with `empty_only`, only those that have no populated pages).
    fn balance_free(&mut self, empty_only: bool) {
        let mut to_free = Vec::new();
        let first = self.slots[self.layout.free].head;
        let mut cursor = first.and_then(|index| self.chunk(index).list_next);
        while let Some(index) = cursor {
            let chunk = self.chunk(index);
            cursor = chunk.list_next;
            if !empty_only || chunk.nr_empty_pop_pages == 0 {
                to_free.push(index);
            }
        }
        for index in to_free {
            self.list_del(index);
            let runs: Vec<_> = {
                let chunk = self.chunk(index);
                chunk.populated.set_runs(0..chunk.nr_pages()).collect()
            };
            for run in runs {
                self.depopulate(index, run);
            }
            self.destroy_chunk(index);
        }
    }

    /// `pcpu_reclaim_populated`: for each chunk on to_depopulate, depopulate its runs of
    /// empty populated pages from the last page down, so populated pages stay near the
    /// start. Stop early and reintegrate the chunk if the other chunks fall below the high
    /// mark of empty pages (atomic requests need them). Fully free chunks go back to the
    /// free slot, the rest to sidelined. (v4 patch 4 reclaims from a private copy of the
    /// to_depopulate list; nothing joins the list while this runs here, so walking the
    /// list itself is the same.)
    fn reclaim_populated(&mut self) {
        let high = self
            .config
            .policy
            .empty_pop_pages_high(self.config.page_size) as isize;
        while let Some(index) = self.slots[self.layout.to_depopulate].head {
            let mut reintegrate = false;
            let mut end: Option<usize> = None;
            let mut i = self.chunk(index).nr_pages() as isize - 1;
            while i >= 0 {
                if self.chunk(index).nr_empty_pop_pages == 0 {
                    break;
                }
                if self.nr_empty_pop_pages < high {
                    reintegrate = true;
                    break;
                }
                let page = i as usize;
                let chunk = self.chunk(index);
                if chunk.page_is_empty(page) && chunk.populated.test(page) {
                    end.get_or_insert(page);
                    if i > 0 {
                        i -= 1;
                        continue;
                    }
                    // Page 0 extends the run; fall through to depopulate it too.
                    i -= 1;
                }
                if let Some(last) = end.take() {
                    self.depopulate(index, (i + 1) as usize..last + 1);
                }
                i -= 1;
            }
            if reintegrate || self.chunk(index).free_bytes == self.config.unit_size {
                self.reintegrate(index);
            } else {
                self.chunk_move(index, self.layout.sidelined, false);
            }
        }
        // v4 patch 4: if enough empty pages still wait on sidelined chunks, queue them and
        // run again.
        let threshold = self
            .config
            .policy
            .reclaim_threshold_pages(self.config.page_size);
        if self.config.policy.reclaim_threshold
            && self.nr_isolated_empty_pop_pages >= threshold as isize
        {
            self.splice_sidelined_to_depopulate();
            self.schedule_balance();
        }
    }

    /// `pcpu_balance_populated`: populate up to the high mark of empty pages (all of it
    /// after an atomic failure), filling the most packed chunks first (slots from one page
    /// up), and create a chunk when none has unpopulated pages.
    fn balance_populated(&mut self) {
        let high = self
            .config
            .policy
            .empty_pop_pages_high(self.config.page_size);
        for _ in 0..POPULATE_RETRIES_MAX {
            let mut nr_to_pop = if self.atomic_alloc_failed {
                self.atomic_alloc_failed = false;
                high
            } else {
                (high as isize - self.nr_empty_pop_pages).clamp(0, high as isize) as usize
            };
            let first_slot = self.layout.size_to_slot(self.config.page_size);
            for slot in first_slot..=self.layout.free {
                if nr_to_pop == 0 {
                    break;
                }
                let mut cursor = self.slots[slot].head;
                let mut target = None;
                while let Some(index) = cursor {
                    let chunk = self.chunk(index);
                    if chunk.nr_populated < chunk.nr_pages() {
                        target = Some(index);
                        break;
                    }
                    cursor = chunk.list_next;
                }
                let Some(index) = target else { continue };
                let runs: Vec<_> = {
                    let chunk = self.chunk(index);
                    chunk.populated.clear_runs(0..chunk.nr_pages()).collect()
                };
                for run in runs {
                    let nr = run.len().min(nr_to_pop);
                    let pages = run.start..run.start + nr;
                    match self.backing.populate(self.id_of(index), pages.clone()) {
                        Ok(()) => {
                            nr_to_pop -= nr;
                            self.mark_populated(index, pages);
                        }
                        Err(_) => nr_to_pop = 0,
                    }
                    if nr_to_pop == 0 {
                        break;
                    }
                }
            }
            // Ran out of chunks to populate: create one and retry.
            if nr_to_pop == 0 || self.create_chunk().is_err() {
                return;
            }
        }
    }
}
