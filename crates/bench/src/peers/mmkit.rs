//! mmkit's runtime page pool as a contestant, through its raw API ([`Mmkit`]: `alloc_raw`
//! and `free_raw`, `alloc_bulk` and `free_batch`) and its owning handles
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

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use mmkit_runtime::{cpu, PageBlock, PagePool, PoolError};

use crate::contestant::{block_bytes, Block, Contestant};

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
}

impl Mmkit {
    /// A pool of `arena_bytes` with `cpus` pagesets.
    pub fn new(arena_bytes: usize, cpus: u32) -> Result<Mmkit, PoolError> {
        let pool = bench_pool(arena_bytes, cpus)?;
        let base = pool.pfn_to_addr(Pfn(0))?;
        Ok(Mmkit {
            pool,
            gfp: Gfp::KERNEL | Gfp::MOVABLE,
            base,
        })
    }

    /// The pool underneath.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    fn page(&self, pfn: Pfn, order: Order) -> MmkitPage<'_> {
        MmkitPage {
            pfn,
            order,
            addr: self.base + pfn.0 as usize * PAGE_SIZE,
            pool: PhantomData,
        }
    }

    /// Panic unless `page` is a block of this pool (two pools never share an address).
    fn check_owner(&self, page: &MmkitPage<'_>) -> Pfn {
        assert_eq!(
            page.addr,
            self.base + page.pfn.0 as usize * PAGE_SIZE,
            "a block of another pool"
        );
        page.pfn
    }
}

/// A block from [`Mmkit`].
///
/// # Invariants
///
/// `addr .. addr + 4096 × 2^order` is the block `pfn` of `order` in the arena of the pool
/// `'a` borrows: `alloc_raw` handed it out and only this value may touch or free it (it
/// is made only by [`Mmkit`]'s `alloc` and `alloc_bulk`, and is not `Clone`).
pub struct MmkitPage<'a> {
    pfn: Pfn,
    order: Order,
    addr: usize,
    pool: PhantomData<&'a Mmkit>,
}

impl Block for MmkitPage<'_> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the range is an allocated block inside the live arena
        // (the borrow of the pool keeps the mapping alive) that only `self` accesses.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, block_bytes(self.order)) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, block_bytes(self.order)) }
    }

    fn addr(&self) -> usize {
        self.addr
    }
}

thread_local! {
    /// The bulk API's array, reused between calls so no heap allocation is timed.
    static SLOTS: RefCell<Vec<Option<Pfn>>> = const { RefCell::new(Vec::new()) };
    /// `free_batch`'s argument, reused likewise.
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
        let pfn = self.check_owner(&page);
        // SAFETY: `page` owns the block (its invariant), it is this pool's (checked), and
        // it is consumed here, so nothing touches the memory afterwards.
        if let Err(e) = unsafe { self.pool.free_raw(pfn, page.order) } {
            panic!("mmkit refused to free a block it handed out: {e}");
        }
    }

    /// `alloc_bulk` (`alloc_pages_bulk_array`), called again while it makes progress.
    fn alloc_bulk<'a>(&'a self, n: usize, out: &mut Vec<MmkitPage<'a>>) -> usize {
        SLOTS.with_borrow_mut(|slots| {
            slots.clear();
            slots.resize(n, None);
            let mut filled = 0;
            while filled < n {
                match self.pool.alloc_bulk(slots) {
                    Ok(now) if now > filled => filled = now,
                    _ => break,
                }
            }
            out.extend(
                slots
                    .iter()
                    .flatten()
                    .map(|&pfn| self.page(pfn, Order::ZERO)),
            );
            filled
        })
    }

    /// `free_batch` (`free_unref_page_list`), last block first as single frees go.
    fn free_bulk<'a>(&'a self, blocks: &mut Vec<MmkitPage<'a>>) {
        PFNS.with_borrow_mut(|pfns| {
            pfns.clear();
            pfns.extend(blocks.drain(..).rev().map(|page| {
                assert_eq!(page.order, Order::ZERO, "the batched free is order-0 only");
                self.check_owner(&page)
            }));
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
            "PagePool::alloc_raw(GFP_KERNEL|__GFP_MOVABLE) + free_raw; bulk: alloc_bulk + free_batch",
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
