//! Hooks for mmkit's own simulator, trace replayer and runtime. **Not a stable API**:
//! present only with the cargo feature `internals`, which `mmkit-sim`, `mmkit-trace`,
//! `mmkit-runtime` and the CLI enable; names and signatures change whenever those crates
//! need them to, without notice in the version number. A kernel or a service needs none
//! of it.
//!
//! Each hook keeps every invariant [`PageAllocator::verify`] checks when used as its
//! documentation says (they move whole blocks under the zone and pageset locks, as
//! allocation and refill do), but they do what no kernel path does: take a block a
//! caller names out of the buddy lists, preset a pageset from a snapshot, set zone flags
//! that kswapd and the watermark checks own, or report the next block an allocation
//! would take. The exclusive frees ([`free_pages_exclusive`]) are here for another
//! reason: they trust their caller to own the block, which only an owning handle (the
//! runtime's `PageBlock`) or a single-threaded caller (the simulator) can promise. They
//! are here, and not on [`PageAllocator`], so that no safe call sequence through the
//! allocator's documented surface can make `verify()` fail.
//!
//! ```
//! use mmkit_core::internals::{seed_pageset, take_page_off_buddy};
//! use mmkit_core::page_alloc::{Caller, MigrateType, ZoneId};
//! use mmkit_core::topology::{CacheInfo, ZoneSize};
//! use mmkit_core::{Order, PageAllocator, Policy, Settings, Topology, ZoneType};
//!
//! let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
//! let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 2 };
//! let topology = Topology::x86_64(&zones, vec![2], llc, false)?;
//! let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
//! let normal = ZoneId { node: 0, zone_type: ZoneType::Normal };
//!
//! // A replay starts from a snapshot: CPU 1's pageset held 64 movable pages.
//! let placed = seed_pageset(&allocator, 1, normal, (Order::ZERO, MigrateType::Movable), 64, 200);
//! assert_eq!(placed, Some(64));
//! // The recording freed a block the replay must first hold: take exactly it.
//! let pfn = allocator.zone(0, ZoneType::Normal).unwrap().free_blocks()[0].0;
//! take_page_off_buddy(&allocator, pfn, Order::ZERO)?;
//! allocator.free_pages(Caller::task(0), pfn, Order::ZERO)?;
//! allocator.verify()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::page::{Order, Pfn};
use crate::page_alloc::{
    AllocError, BatchFreeError, Caller, CpuId, FreeError, Gfp, LockEvents, MigrateType,
    PageAllocator, Zone, ZoneFlags, ZoneId,
};
use crate::sync::RawMutex;

pub use crate::page_alloc::take::TakeError;

/// Take exactly the block (`pfn`, `order`) out of the buddy allocator and mark it
/// allocated (reference count 1), splitting the free block that holds it (Linux's
/// `take_page_off_buddy`, for a block of any order). Fails, changing nothing, when the
/// block is not wholly free in the buddy lists. A later `free_pages` of it is an ordinary
/// free.
pub fn take_page_off_buddy<R: RawMutex>(
    allocator: &PageAllocator<R>,
    pfn: Pfn,
    order: Order,
) -> Result<(), TakeError> {
    allocator.take_page_off_buddy(pfn, order)
}

/// Take the first free block of `order` the buddy lists of zone `id` offer and mark it
/// allocated; `None` if the zone has none of at least that order.
pub fn take_free_block<R: RawMutex>(
    allocator: &PageAllocator<R>,
    id: ZoneId,
    order: Order,
) -> Option<Pfn> {
    allocator.take_free_block(id, order)
}

/// Preset `cpu`'s pageset of zone `id`: move `blocks` blocks of `order` and type `mt` from
/// the buddy lists onto it and set its `high` (auto-tuning policies only). Returns the
/// pages placed; `None` for an unknown zone or CPU, or an order or type the pagesets do
/// not cache.
pub fn seed_pageset<R: RawMutex>(
    allocator: &PageAllocator<R>,
    cpu: CpuId,
    id: ZoneId,
    (order, mt): (Order, MigrateType),
    blocks: u64,
    high: u64,
) -> Option<u64> {
    allocator.seed_pageset(cpu, id, (order, mt), blocks, high)
}

/// `alloc_pages`, and the block now at the head of the pageset list the allocation came
/// from (what the caller's next allocation of this order and `gfp` takes if nothing
/// changes the list first): the simulator's prefetch hint.
#[inline(always)]
pub fn alloc_pages_peek_next<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    gfp: Gfp,
    order: Order,
) -> Result<(Pfn, Option<Pfn>), AllocError> {
    allocator.alloc_pages_peek_next(caller, gfp, order)
}

/// [`alloc_pages_peek_next`], telling `events` what the call did under the zone lock.
#[inline(always)]
pub fn alloc_pages_peek_next_report<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    gfp: Gfp,
    order: Order,
    events: &mut impl LockEvents,
) -> Result<(Pfn, Option<Pfn>), AllocError> {
    allocator.alloc_pages_peek_next_report(caller, gfp, order, events)
}

/// `free_pages` for a caller that owns the block exclusively: the same checks, errors and
/// results, with the double-free claim a load, a check and a store instead of a
/// compare-and-swap. A free racing another free or `split_page` of the same block on
/// another thread is not detected and corrupts the free lists (`verify()` fails), so
/// the caller must own the block by construction: the runtime's `PageBlock` (not
/// `Clone`, freed once on drop) and the single-threaded simulator do. Not on
/// [`PageAllocator`]: safe code there cannot be trusted with that promise.
///
/// # Safety
///
/// No other thread frees, batch-frees or splits the block (`pfn`, `order`) while this
/// call runs. The free lists stay consistent for any sequence of calls on one thread (a
/// second free is refused as `free_pages` refuses it); only a race corrupts them, and a
/// runtime on real memory would then hand one page out twice. `unsafe` because a crate
/// that depends on mmkit-runtime sees this module too (cargo unifies the feature).
#[inline(always)]
#[expect(
    unsafe_code,
    reason = "a caller's promise, not an unsafe operation: see # Safety"
)]
pub unsafe fn free_pages_exclusive<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    pfn: Pfn,
    order: Order,
) -> Result<(), FreeError> {
    allocator.free_pages_exclusive(caller, pfn, order)
}

/// [`free_pages_exclusive`], telling `events` what the call did under the zone lock.
///
/// # Safety
///
/// As [`free_pages_exclusive`]: no other thread frees or splits the block meanwhile.
#[inline(always)]
#[expect(
    unsafe_code,
    reason = "a caller's promise, not an unsafe operation: see # Safety"
)]
pub unsafe fn free_pages_exclusive_report<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    pfn: Pfn,
    order: Order,
    events: &mut impl LockEvents,
) -> Result<(), FreeError> {
    allocator.free_pages_exclusive_report(caller, pfn, order, events)
}

/// `free_pages_batch` with [`free_pages_exclusive`]'s claim: the same all-or-nothing
/// refusal, and the same promise that no other thread frees or splits these pages.
///
/// # Safety
///
/// As [`free_pages_exclusive`], for every page of `pfns`.
#[expect(
    unsafe_code,
    reason = "a caller's promise, not an unsafe operation: see # Safety"
)]
pub unsafe fn free_pages_batch_exclusive<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    pfns: &[Pfn],
) -> Result<(), BatchFreeError> {
    allocator.free_pages_batch_exclusive(caller, pfns)
}

/// [`free_pages_batch_exclusive`], telling `events` what the call did under the zone
/// lock ([`PageAllocator::free_pages_batch_report`]).
///
/// # Safety
///
/// As [`free_pages_exclusive`], for every page of `pfns`.
#[expect(
    unsafe_code,
    reason = "a caller's promise, not an unsafe operation: see # Safety"
)]
pub unsafe fn free_pages_batch_exclusive_report<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    pfns: &[Pfn],
    events: &mut impl LockEvents,
) -> Result<(), BatchFreeError> {
    allocator.free_pages_batch_exclusive_report(caller, pfns, events)
}

/// How many order-0 pages `caller` can free to its pageset of the zone spanning `pfn`
/// before one of the frees could drain it, at most 32 (the batch free's relock, Linux's
/// `SWAP_CLUSTER_MAX`); 0 when the next free may drain. A batch free of that many
/// allocated pages of the zone then takes no zone lock, when nothing else frees to that
/// pageset meanwhile (a single-threaded caller): the simulator frees an exit's pages so,
/// one relock's worth at a time, as Linux's `free_unref_page_list` does.
pub fn quiet_order0_frees<R: RawMutex>(
    allocator: &PageAllocator<R>,
    caller: Caller,
    pfn: Pfn,
) -> usize {
    allocator.quiet_order0_frees(caller, pfn)
}

/// Set a zone flag kswapd or the watermark checks own (`BELOW_HIGH`, `RECLAIM_ACTIVE`,
/// `BOOSTED_WATERMARK`), for a test or replay that stands in for them; true if it was
/// clear.
pub fn set_zone_flag<R: RawMutex>(zone: &Zone<R>, flag: ZoneFlags) -> bool {
    zone.set_flag(flag)
}

/// A request's zonelist walk passed over `zone` and was served from a lower zone, as a
/// trace shows the kernel did: under a policy with `BELOW_HIGH` the zone is flagged, as
/// `get_page_from_freelist` leaves a zone that failed its high-watermark test (the
/// replayer's stand-in for a test this allocator's free-block layout might pass).
pub fn zone_passed_over<R: RawMutex>(allocator: &PageAllocator<R>, zone: &Zone<R>) {
    allocator.zone_passed_over(zone);
}

/// Clear a zone flag; true if it was set.
pub fn clear_zone_flag<R: RawMutex>(zone: &Zone<R>, flag: ZoneFlags) -> bool {
    zone.clear_flag(flag)
}
