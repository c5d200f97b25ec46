//! mmkit's runtime page pool as a contestant, through its raw API ([`Mmkit`]: `alloc_raw`
//! and `free_raw`, `alloc_bulk_list` and `free_batch`) and its owning handles
//! ([`MmkitHandle`]: `PageBlock`).
//!
//! The pool is built with the v6.7 policy, no background threads (no vmstat tick decays
//! `high` in the middle of a measurement, and kswapd is never woken on a pool this size)
//! and as many CPUs as the benchmark has threads; each benchmark thread is served from
//! the pageset of its own index (`cpu::pin_thread`), so no `sched_getcpu` runs in the
//! timed loops. Allocations ask for `GFP_KERNEL | __GFP_MOVABLE` (the bulk API fixes its
//! own flags: `GFP_USER | __GFP_MOVABLE`, the same zone and migratetype).

use std::cell::RefCell;
use std::marker::PhantomData;

use mmkit_core::page::{PAGE_SHIFT, PAGE_SIZE};
use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use mmkit_runtime::{cpu, PageBlock, PagePool, PoolError};

use crate::contestant::{Block, Contestant, TaggedBlock};

/// Build a pool of `arena_bytes` with `cpus` pagesets, for benchmarks.
pub(crate) fn bench_pool(arena_bytes: usize, cpus: u32) -> Result<PagePool, PoolError> {
    PagePool::builder()
        .memory_bytes(arena_bytes)
        .cpus(cpus)
        .background(false)
        .build()
}

/// One line on the pool: its size and its first pageset's sizing.
pub(crate) fn describe_pool(pool: &PagePool, what: &str) -> String {
    let Some(zone) = pool.zones().find(|z| z.managed() > 0) else {
        return format!("{what}; no zone has memory");
    };
    let pageset = zone.pageset(0).unwrap_or_default();
    format!(
        "{what}; policy {}, zone {:?} of {} MiB, {} CPUs, pageset batch {} high_min {} high_max {}",
        pool.policy().name,
        zone.zone_type(),
        (zone.managed() * PAGE_SIZE as u64) >> 20,
        pool.topology().nr_cpus(),
        pageset.batch,
        pageset.high_min,
        pageset.high_max,
    )
}

/// Check the pool after a benchmark: everything freed, every structure intact.
pub(crate) fn audit_pool(pool: &PagePool) -> Result<(), String> {
    let census = pool.verify().map_err(|e| e.to_string())?;
    let allocated: u64 = census.iter().map(|c| c.allocated).sum();
    if allocated == 0 {
        Ok(())
    } else {
        Err(format!("{allocated} pages still allocated"))
    }
}

/// The raw API: blocks are pfns, freed with the `unsafe` `free_raw`.
pub struct Mmkit {
    pool: PagePool,
    gfp: Gfp,
    /// The arena's first byte: pfn `p` is at `base + p × 4096`.
    base: usize,
    /// Bytes from `base` that the pool's zones span: every block the pool hands out lies
    /// in `base .. base + span_bytes`, and no other pool's block does.
    span_bytes: usize,
}

impl Mmkit {
    /// A pool of `arena_bytes` with `cpus` pagesets.
    pub fn new(arena_bytes: usize, cpus: u32) -> Result<Mmkit, PoolError> {
        let pool = bench_pool(arena_bytes, cpus)?;
        let base = pool.pfn_to_addr(Pfn(0))?;
        let end_pfn = pool
            .zones()
            .map(|zone| zone.start_pfn().0 + zone.spanned())
            .max()
            .unwrap_or(0);
        // The last spanned page is in the arena (`pfn_to_addr` checks).
        if let Some(last) = end_pfn.checked_sub(1) {
            pool.pfn_to_addr(Pfn(last))?;
        }
        Ok(Mmkit {
            pool,
            gfp: Gfp::KERNEL | Gfp::MOVABLE,
            base,
            span_bytes: end_pfn as usize * PAGE_SIZE,
        })
    }

    /// The pool underneath.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// The handle of the block `pfn` of `order`, just allocated from this pool.
    #[inline(always)]
    fn page(&self, pfn: Pfn, order: Order) -> MmkitPage<'_> {
        MmkitPage {
            block: TaggedBlock::new(self.base + pfn.0 as usize * PAGE_SIZE, order),
            pool: PhantomData,
        }
    }

    /// The offset of `page`'s tagged address from the arena's base; panics unless the
    /// block is this pool's (two pools never share an address: another pool's block
    /// lies outside `base .. base + span_bytes`).
    #[inline(always)]
    fn owned_offset(&self, page: &MmkitPage<'_>) -> usize {
        let offset = page.block.addr().wrapping_sub(self.base);
        assert!(offset < self.span_bytes, "a block of another pool");
        offset
    }

    /// The pfn of `page`, which must be an order-0 block of this pool: its offset from
    /// the base rotated right by the page shift, so the order bits land on top, where
    /// the one comparison with the span refuses a block of another order as it refuses
    /// one of another pool.
    #[inline(always)]
    fn owned_order0_pfn(&self, page: &MmkitPage<'_>) -> Pfn {
        let pfn = page
            .block
            .word()
            .wrapping_sub(self.base)
            .rotate_right(PAGE_SHIFT);
        assert!(
            pfn < self.span_bytes / PAGE_SIZE,
            "a block of another pool, or not of order 0"
        );
        Pfn(pfn as u64)
    }
}

/// A block from [`Mmkit`]: a [`TaggedBlock`], as every contestant's. The pfn is derived
/// from the pool's base when the block is freed, which also checks that the block is the
/// pool's.
///
/// # Invariants
///
/// `block` is a block of its order in the arena of the pool `'a` borrows: the pool handed
/// it out and only this value may touch or free it (it is made only by [`Mmkit`]'s
/// `alloc` and `alloc_bulk`, and is not `Clone`).
pub struct MmkitPage<'a> {
    block: TaggedBlock,
    pool: PhantomData<&'a Mmkit>,
}

impl Block for MmkitPage<'_> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the range is an allocated block inside the live arena
        // (the borrow of the pool keeps the mapping alive) that only `self` accesses.
        unsafe { std::slice::from_raw_parts(self.block.addr() as *const u8, self.block.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.block.addr() as *mut u8, self.block.size()) }
    }

    fn addr(&self) -> usize {
        self.block.addr()
    }
}

thread_local! {
    /// The pfns of a bulk allocation or of a batched free, reused between calls so no
    /// heap allocation is timed.
    static PFNS: RefCell<Vec<Pfn>> = const { RefCell::new(Vec::new()) };
}

impl Contestant for Mmkit {
    type Block<'a> = MmkitPage<'a>;

    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<MmkitPage<'_>> {
        let pfn = self.pool.alloc_raw(self.gfp, order).ok()?;
        Some(self.page(pfn, order))
    }

    #[inline(always)]
    fn free<'a>(&'a self, page: MmkitPage<'a>) {
        let offset = self.owned_offset(&page);
        let pfn = Pfn((offset / PAGE_SIZE) as u64);
        // SAFETY: `page` owns the block (its invariant), it is this pool's (checked), and
        // it is consumed here, so nothing touches the memory afterwards.
        if let Err(e) = unsafe { self.pool.free_raw(pfn, page.block.order()) } {
            panic!("mmkit refused to free a block it handed out: {e}");
        }
    }

    /// `alloc_bulk_list` (`alloc_pages_bulk_list`), called again while it makes progress.
    /// Per page, after the pool's own work: one pfn read back from the list and one
    /// word (`base + pfn × 4096`) appended to `out`, the handle the harness needs to
    /// touch and free the page; the list is this thread's, reused, so nothing is
    /// allocated on the heap.
    fn alloc_bulk<'a>(&'a self, n: usize, out: &mut Vec<MmkitPage<'a>>) -> usize {
        PFNS.with_borrow_mut(|pfns| {
            pfns.clear();
            while pfns.len() < n {
                match self.pool.alloc_bulk_list(n - pfns.len(), pfns) {
                    Ok(added) if added > 0 => {}
                    _ => break,
                }
            }
            out.extend(pfns.iter().map(|&pfn| self.page(pfn, Order::ZERO)));
            pfns.len()
        })
    }

    /// `free_batch` (`free_unref_page_list`), last block first as single frees go. Per
    /// page: the check that the block is this pool's and of order 0
    /// (`Mmkit::owned_order0_pfn`), and its pfn written to the list `free_batch` takes;
    /// the pool then checks every page again as any caller's (double free, foreign pfn,
    /// wrong state).
    fn free_bulk<'a>(&'a self, blocks: &mut Vec<MmkitPage<'a>>) {
        PFNS.with_borrow_mut(|pfns| {
            pfns.clear();
            pfns.extend(
                blocks
                    .drain(..)
                    .rev()
                    .map(|page| self.owned_order0_pfn(&page)),
            );
            // SAFETY: every pfn came from this adapter's own bulk allocation and its page
            // was drained from `blocks` above, so nothing else owns or references it.
            if let Err(e) = unsafe { self.pool.free_batch(pfns) } {
                panic!("mmkit refused a batched free of blocks it handed out: {e}");
            }
        });
    }

    fn enter_thread(&self, thread: u32) {
        cpu::pin_thread(Some(thread));
    }

    fn audit(&self) -> Result<(), String> {
        audit_pool(&self.pool)
    }

    fn describe(&self) -> String {
        describe_pool(
            &self.pool,
            "PagePool::alloc_raw(GFP_KERNEL|__GFP_MOVABLE) + free_raw; bulk: alloc_bulk_list + free_batch",
        )
    }
}

/// The handle API: `PagePool::alloc_gfp` returns a `PageBlock` that frees on drop.
pub struct MmkitHandle {
    pool: PagePool,
    gfp: Gfp,
}

impl MmkitHandle {
    /// A pool of `arena_bytes` with `cpus` pagesets.
    pub fn new(arena_bytes: usize, cpus: u32) -> Result<MmkitHandle, PoolError> {
        Ok(MmkitHandle {
            pool: bench_pool(arena_bytes, cpus)?,
            gfp: Gfp::KERNEL | Gfp::MOVABLE,
        })
    }
}

impl Block for PageBlock<'_> {
    fn bytes(&self) -> &[u8] {
        self
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }

    fn addr(&self) -> usize {
        PageBlock::addr(self)
    }
}

impl Contestant for MmkitHandle {
    type Block<'a> = PageBlock<'a>;

    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<PageBlock<'_>> {
        self.pool.alloc_gfp(self.gfp, order).ok()
    }

    #[inline(always)]
    fn free<'a>(&'a self, block: PageBlock<'a>) {
        drop(block);
    }

    fn enter_thread(&self, thread: u32) {
        cpu::pin_thread(Some(thread));
    }

    fn audit(&self) -> Result<(), String> {
        audit_pool(&self.pool)
    }

    fn describe(&self) -> String {
        describe_pool(
            &self.pool,
            "PagePool::alloc_gfp(GFP_KERNEL|__GFP_MOVABLE) -> PageBlock, freed on drop",
        )
    }
}
