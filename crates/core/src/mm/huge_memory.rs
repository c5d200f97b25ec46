//! The deferred split queue: anonymous THPs that lost some of their mappings wait here
//! until a shrinker splits them and frees their unmapped pages.
//!
//! Linux counterpart (v6.7, `mm/huge_memory.c`): `deferred_split_folio`,
//! `deferred_split_count` / `deferred_split_scan` (the `deferred_split_shrinker`, which
//! reclaim runs from `shrink_slab` after each cgroup's lruvec), the per-memcg
//! `memcg->deferred_split_queue` and the per-node `pgdat->deferred_split_queue` used when
//! memcg is off, and the `thp_deferred_split_page` / `thp_split_page` events.
//!
//! 6.7 queues only PMD-sized (order 9) anonymous folios (mTHP's smaller orders were added
//! in 6.8), whenever a PTE unmap leaves one of its pages unmapped, even the last (the
//! folio is then freed and leaves the queue); not while reclaim unmaps it for swap-out
//! (`folio_test_swapcache`). Every folio of the mapping layer is charged to a cgroup, so
//! the per-memcg queue is the one in use; the per-node queue takes folios without one.
//! Where we differ: `do_shrink_slab`'s deferred work (`nr_deferred`, carried from one call
//! to the next) is not kept; each call scans `2 × (queue >> priority)` folios in batches
//! of 128 as `do_shrink_slab` does without it.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::folio::Folio;
use super::memcg::MemcgId;
use super::memory::{Memory, MmError};
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

impl Memory {
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
