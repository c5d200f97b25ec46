//! Taking chosen blocks out of the buddy allocator, and presetting a pageset: the set-up a
//! trace replay needs to start from a machine in mid-flight.
//!
//! Linux counterpart: `take_page_off_buddy` (`mm/page_alloc.c`, used by memory-failure
//! handling) takes one page out of whatever free block holds it and gives the rest back.
//! [`PageAllocator::take_page_off_buddy`] does the same for a block of any order and
//! hands the block to the caller as an allocation, so that a later
//! [`PageAllocator::free_pages`] of it is an ordinary free. Linux has no counterpart to
//! [`PageAllocator::seed_pageset`]; it stands for "the pageset held `count` pages and its
//! `high` was `high` when the snapshot was taken".
//!
//! These are the trace replayer's and the simulator's set-up, not a kernel's or a
//! service's: crate-private, and outside the crate only through [`crate::internals`]
//! (feature `internals`). Neither function counts `PGALLOC`; both move pages under the zone lock, so the zone's
//! event counters (`alloc_zone_locked`, refills) see them. Callers that measure take
//! counter deltas after set-up.

use super::allocator::PageAllocator;
use super::gfp::AllocFlags;
use super::pcp::{order_to_pindex, pcp_allowed_order};
use super::types::{CpuId, MigrateType, MIGRATE_PCPTYPES};
use super::zone::ZoneId;
use crate::page::{Order, PageState, Pfn};
use crate::sync::RawMutex;

/// Why a block could not be taken off the buddy allocator.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TakeError {
    /// No zone spans the pfn.
    OutsideZones {
        /// The pfn.
        pfn: Pfn,
    },
    /// The pfn is not aligned to the order.
    Misaligned {
        /// The pfn.
        pfn: Pfn,
        /// The order.
        order: Order,
    },
    /// Some page of the block is not free in the buddy allocator (allocated, on a
    /// pageset, reserved or a hole).
    NotFree {
        /// The pfn.
        pfn: Pfn,
    },
}

impl core::fmt::Display for TakeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TakeError::OutsideZones { pfn } => write!(f, "pfn {:#x} is outside every zone", pfn.0),
            TakeError::Misaligned { pfn, order } => {
                write!(
                    f,
                    "pfn {:#x} is not aligned to order {}",
                    pfn.0,
                    order.get()
                )
            }
            TakeError::NotFree { pfn } => {
                write!(f, "pfn {:#x} is not free in the buddy allocator", pfn.0)
            }
        }
    }
}

impl core::error::Error for TakeError {}

impl<R: RawMutex> PageAllocator<R> {
    /// Take exactly the block (`pfn`, `order`) out of the buddy allocator and mark it
    /// allocated (reference count 1), splitting the free block that holds it
    /// (`take_page_off_buddy`). Fails, changing nothing, when the block is not wholly free
    /// in the buddy lists: allocated, cached on a pageset, reserved, or outside every zone.
    pub(crate) fn take_page_off_buddy(&self, pfn: Pfn, order: Order) -> Result<(), TakeError> {
        let zone = self.find_zone(pfn).ok_or(TakeError::OutsideZones { pfn })?;
        if !pfn.is_aligned(order) {
            return Err(TakeError::Misaligned { pfn, order });
        }
        let mut locked = zone.lock();
        locked
            .take_block(pfn, order)
            .ok_or(TakeError::NotFree { pfn })?;
        let page = zone.mem_map.page(pfn);
        page.set_state(PageState::Allocated, order);
        page.init_refcount(1);
        Ok(())
    }

    /// Take the first free block of `order` the buddy lists of zone `id` offer (any
    /// migratetype, as `__rmqueue_smallest` picks it) and mark it allocated. `None` if the
    /// zone has no free block of at least that order.
    pub(crate) fn take_free_block(&self, id: ZoneId, order: Order) -> Option<Pfn> {
        let zone = self.zone(id.node, id.zone_type)?;
        let mut locked = zone.lock();
        let pfn = [
            MigrateType::Movable,
            MigrateType::Unmovable,
            MigrateType::Reclaimable,
        ]
        .into_iter()
        .find_map(|mt| locked.rmqueue_smallest(order, mt))?;
        locked.mod_free_pages(-(order.pages() as i64));
        drop(locked);
        let page = zone.mem_map.page(pfn);
        page.set_state(PageState::Allocated, order);
        page.init_refcount(1);
        Some(pfn)
    }

    /// Preset `cpu`'s pageset of zone `id`: move `blocks` blocks of `order` from the buddy
    /// lists onto its list for (`mt`, `order`) (a refill without the sizing rule) and set
    /// its `high` (kept only by policies that auto-tune it; the others recompute it from
    /// `high_min`). Returns the pages placed, fewer if the zone runs short; `None` for an
    /// unknown zone or CPU, an order the pagesets do not cache, or a migratetype without a
    /// pageset list.
    pub(crate) fn seed_pageset(
        &self,
        cpu: CpuId,
        id: ZoneId,
        (order, mt): (Order, MigrateType),
        blocks: u64,
        high: u64,
    ) -> Option<u64> {
        if !pcp_allowed_order(order) || mt.index() >= MIGRATE_PCPTYPES {
            return None;
        }
        let zone = self.zone(id.node, id.zone_type)?;
        let mut pcp = zone.pagesets.get(cpu as usize)?.pcp.lock();
        let pindex = order_to_pindex(mt, order);
        let placed = if blocks > 0 {
            // LOCK ORDER: pcp lock → zone lock.
            let got =
                zone.lock()
                    .rmqueue_bulk(order, blocks, mt, AllocFlags::empty(), &mut pcp, pindex);
            got << order.get()
        } else {
            0
        };
        if self.policy.pcp.auto_tune {
            pcp.high = high;
        }
        Some(placed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::{Caller, ZoneType};

    use crate::page_alloc::test_allocator as allocator;

    fn normal(a: &PageAllocator) -> &crate::page_alloc::Zone {
        a.zone(0, ZoneType::Normal).unwrap()
    }

    #[test]
    fn take_page_off_buddy_takes_exactly_that_block_and_free_gives_it_back() {
        let a = allocator();
        let zone = normal(&a);
        let before = zone.free_pages();
        let pfn = zone.start_pfn().add(4096 + 12);
        let order = Order::new(2).unwrap();
        a.take_page_off_buddy(pfn, order).unwrap();
        assert_eq!(zone.free_pages(), before - 4);
        assert_eq!(
            zone.mem_map.page(pfn).state_order(),
            (PageState::Allocated, order)
        );
        assert_eq!(
            a.take_page_off_buddy(pfn, Order::ZERO),
            Err(TakeError::NotFree { pfn })
        );
        a.free_pages(Caller::task(0), pfn, order).unwrap();
        a.drain_pages(0);
        assert_eq!(zone.free_pages(), before);
        a.verify().unwrap();
    }

    #[test]
    fn take_page_off_buddy_refuses_bad_blocks_and_changes_nothing() {
        let a = allocator();
        let zone = normal(&a);
        let before = zone.free_pages();
        let start = zone.start_pfn();
        let two = Order::new(1).unwrap();
        assert_eq!(
            a.take_page_off_buddy(start.add(1), two),
            Err(TakeError::Misaligned {
                pfn: start.add(1),
                order: two
            })
        );
        assert_eq!(
            a.take_page_off_buddy(Pfn(1), Order::ZERO),
            Err(TakeError::OutsideZones { pfn: Pfn(1) })
        );
        let allocated = a
            .alloc_pages(Caller::task(1), crate::Gfp::KERNEL, Order::ZERO)
            .unwrap();
        assert_eq!(
            a.take_page_off_buddy(allocated, Order::ZERO),
            Err(TakeError::NotFree { pfn: allocated })
        );
        // The allocation refilled CPU 1's pageset; those pages are not in the buddy lists.
        let cached = a.zone(0, ZoneType::Normal).unwrap().pcp_pages();
        assert_eq!(zone.free_pages(), before - cached as i64 - 1);
        a.verify().unwrap();
    }

    #[test]
    fn take_free_block_and_seed_pageset_move_pages_out_of_the_buddy_lists() {
        let a = allocator();
        let zone = normal(&a);
        let before = zone.free_pages();
        let order = Order::new(10).unwrap();
        let pfn = a.take_free_block(zone.id(), order).unwrap();
        assert!(pfn.is_aligned(order));
        let movable0 = (Order::ZERO, MigrateType::Movable);
        let unmovable3 = (Order::new(3).unwrap(), MigrateType::Unmovable);
        assert_eq!(a.seed_pageset(1, zone.id(), movable0, 100, 500), Some(100));
        assert_eq!(a.seed_pageset(1, zone.id(), unmovable3, 2, 500), Some(16));
        assert_eq!(zone.pcp_pages(), 116);
        assert_eq!(zone.free_pages(), before - 1024 - 116);
        let pcp = zone.pageset(1).unwrap();
        assert_eq!((pcp.high, pcp.list_len(9)), (500, 2));
        assert_eq!(a.seed_pageset(9, zone.id(), movable0, 1, 1), None);
        let order4 = (Order::new(4).unwrap(), MigrateType::Movable);
        assert_eq!(a.seed_pageset(1, zone.id(), order4, 1, 1), None);
        a.verify().unwrap();
    }
}
