//! A page_pool-style recycling cache in front of the [`PagePool`]: one owner thread
//! allocates from a small array without any atomic read-modify-write, and other threads
//! give pages back in batches through a bounded lock-free ring that the owner drains
//! before it goes to the allocator.
//!
//! Linux counterpart: `net/core/page_pool.c`, the allocator of network drivers' receive
//! pages. A [`PoolCache`] is one `struct page_pool` as its NAPI context sees it: the
//! `alloc.cache` array ([`CACHE_SIZE`] = `PP_ALLOC_CACHE_SIZE`, 128 pages), refilled
//! [`CACHE_REFILL`] (`PP_ALLOC_CACHE_REFILL`, 64) pages at a time, first from the
//! `ptr_ring` (`page_pool_refill_alloc_cache`), then from the page allocator's bulk API
//! (`__page_pool_alloc_pages_slow` → `alloc_pages_bulk_array`, here
//! [`PagePool::alloc_bulk_gfp`]). A [`Recycler`] is what `page_pool_put_page` does outside
//! the NAPI context: put the page into the `ptr_ring` (`page_pool_recycle_in_ring`), and
//! when the ring is full, give it back to the allocator (`page_pool_return_page`). The
//! owner's own frees go into the array (`page_pool_recycle_in_cache`).
//!
//! Where we differ:
//! - **The ring carries batches, not pages.** Linux's `ptr_ring` has one entry per page:
//!   `page_pool_put_page_bulk` takes the producer lock once per bulk but stores each
//!   page, and `page_pool_refill_alloc_cache` takes the consumer lock once per refill but
//!   consumes each page. Our ring is crossbeam's `ArrayQueue` (Vyukov's bounded lock-free
//!   queue: one compare-and-swap per push and per pop), so an entry per page would cost
//!   a compare-and-swap per page on each side, a contended cache line that the owner and
//!   the recyclers pass back and forth. Instead a [`Recycler`] is a per-thread handle with
//!   a buffer of up to [`CACHE_REFILL`] pages: it pushes the whole buffer as one ring
//!   element when it fills, on [`Recycler::flush`] and on drop, and the owner's refill
//!   pops one element. Cross-thread give-back costs O(1) atomic operations per batch
//!   (the push, the pop and two relaxed counter updates), not per page. The ring holds
//!   `ring_size.div_ceil(CACHE_REFILL)` batches: `ring_size` pages when they are full.
//!   What Linux gets from a lock held across a loop, we get from a larger element.
//! - The ring is lock-free and multi-producer: any thread may recycle, and recyclers
//!   never wait for each other behind a lock (`ptr_ring` has a spinlock on each side).
//!   We did not write our own ring because a tested crate exists.
//! - When the owner frees into a full array, the [`CACHE_REFILL`] oldest pages of the
//!   array move to the ring as one batch and the freed page goes into the array; Linux
//!   sends the freed page alone to the ring (`page_pool_recycle_in_cache` fails, then
//!   `page_pool_recycle_in_ring`). The hot pages stay with the owner either way.
//! - When the ring is full, a batch goes back to the allocator in one batched free
//!   ([`PagePool::free_batch`], Linux's `free_unref_page_list`) at order 0.
//! - The pool is order-fixed like Linux's (`pool->p.order`): order 0 refills in bulk;
//!   a higher order allocates one block per slow call (`slow_high_order`), as Linux does.
//! - No DMA mapping, no `pp_frag`, no NUMA check of recycled pages, no page refcounts:
//!   a page is owned by exactly one party (the cache, the ring, one recycler's buffer,
//!   or one user).
//! - Pages sitting in the cache, the ring or a recycler's buffer are *allocated* as far
//!   as the core is concerned (the page allocator handed them out), as in Linux;
//!   `PagePool::verify()` counts them as allocated until they reach the pool: a
//!   recycler's buffer when it is flushed after the cache is gone (or the ring is full),
//!   the array and the ring when the cache and its last recycler are gone.
//!
//! Ownership follows the rest of the runtime. The safe API hands out [`PageBlock`]s:
//! [`PoolCache::free`] and [`Recycler::recycle`] consume them, so a page cannot be given
//! back twice; a block that is simply dropped goes to the [`PagePool`] with its normal
//! free. The raw API hands out pfns and its frees are `unsafe` (as
//! [`PagePool::free_raw`]): what it detects and what it does not is on
//! [`PoolCache::free_raw`].

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use mmkit_core::page::PAGE_SIZE;
use mmkit_core::page_alloc::{AllocError, FreeError, Gfp};
use mmkit_core::{Order, Pfn};

use crate::{PageBlock, PagePool, PoolError};

/// Pages the owner's array holds (`PP_ALLOC_CACHE_SIZE`).
pub const CACHE_SIZE: usize = 128;

/// Pages one refill moves into the array, from the ring or from the allocator
/// (`PP_ALLOC_CACHE_REFILL`); also the most pages one ring element (a batch) carries.
pub const CACHE_REFILL: usize = 64;

const _: () = assert!(CACHE_REFILL <= CACHE_SIZE, "a refill fits an empty array");
const _: () = assert!(
    CACHE_REFILL > 0,
    "a spill makes room in a full array for the freed page"
);

/// How a [`PoolCache`] is set up (Linux: `struct page_pool_params`).
#[derive(Clone, Copy, Debug)]
pub struct PoolCacheConfig {
    /// The flags of every allocation from the [`PagePool`] (Linux: the `gfp` given to
    /// `page_pool_alloc_pages`). Default `GFP_USER | __GFP_MOVABLE`, what
    /// [`PagePool::alloc_bulk`] uses. `__GFP_ZERO` and `__GFP_ACCOUNT` are refused by
    /// [`PoolCache::new`]: recycled pages are not zeroed, and a pool has no memcgs.
    pub gfp: Gfp,
    /// The order of every block (Linux: `pool->p.order`). Order 0 refills in bulk.
    pub order: Order,
    /// Pages the recycle ring holds when its batches are full (Linux: `pool->p.pool_size`,
    /// usually the NIC's RX ring size): `ring_size.div_ceil(CACHE_REFILL)` batches.
    /// Default 1024 (16 batches).
    pub ring_size: usize,
}

impl Default for PoolCacheConfig {
    fn default() -> PoolCacheConfig {
        PoolCacheConfig {
            gfp: Gfp::USER | Gfp::MOVABLE,
            order: Order::ZERO,
            ring_size: 1024,
        }
    }
}

/// Counters of one cache and its recyclers (Linux: `struct page_pool_stats`, its
/// `alloc_stats` and `recycle_stats`).
///
/// Every allocation is counted once, in `alloc_fast`, `alloc_refill`, `alloc_slow` or
/// `alloc_slow_high_order`. Every page given back is counted once in `recycle_cached`,
/// `recycle_ring` or `recycle_released`, except the pages the owner moved from a full
/// array on to the ring, which are counted again in `recycle_cache_full` too (see
/// [`PoolCacheStats::frees`]). A recycler counts its pages when it flushes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCacheStats {
    /// Allocations served from the array (`fast`).
    pub alloc_fast: u64,
    /// Allocations that refilled the array from the allocator's bulk API (`slow`).
    pub alloc_slow: u64,
    /// Allocations of order > 0 that went to the allocator (`slow_high_order`).
    pub alloc_slow_high_order: u64,
    /// Refills that found the ring empty (`empty`).
    pub alloc_empty: u64,
    /// Allocations served right after refilling the array from the ring (`refill`).
    pub alloc_refill: u64,
    /// Pages moved from the ring into the array (no Linux counter).
    pub pages_from_ring: u64,
    /// Batches popped from the ring (no Linux counter).
    pub batches_from_ring: u64,
    /// Blocks taken from the [`PagePool`] (no Linux counter).
    pub blocks_from_pool: u64,
    /// Frees by the owner that went into the array (`cached`).
    pub recycle_cached: u64,
    /// Pages the owner moved out of a full array on to the ring, [`CACHE_REFILL`] at a
    /// time, to make room for a free (Linux's `cache_full` counts the frees that found
    /// the array full); each is counted again in `recycle_ring` or `recycle_released`.
    pub recycle_cache_full: u64,
    /// Pages pushed into the ring, by the owner or a recycler (`ring`).
    pub recycle_ring: u64,
    /// Batches pushed into the ring (no Linux counter).
    pub recycle_ring_batches: u64,
    /// Pages that found the ring full and went back to the [`PagePool`] (`ring_full`);
    /// each is counted again in `recycle_released`.
    pub recycle_ring_full: u64,
    /// Pages given back to the [`PagePool`] instead of being kept: the ring was full,
    /// the block was of another order, or the owner was gone (`released_refcnt`).
    pub recycle_released: u64,
}

impl PoolCacheStats {
    /// Allocations served, by any path.
    pub fn allocs(&self) -> u64 {
        self.alloc_fast + self.alloc_refill + self.alloc_slow + self.alloc_slow_high_order
    }

    /// Blocks given back, by any path (pages still in a recycler's buffer are not yet
    /// counted).
    pub fn frees(&self) -> u64 {
        self.recycle_cached + self.recycle_ring + self.recycle_released - self.recycle_cache_full
    }
}

/// The counters recyclers write: shared, so relaxed atomics, updated once per batch.
/// On cache lines of their own, so that the recyclers' updates do not evict what every
/// party reads (`Shared::pool`, `Shared::order`, `Shared::owner_gone`).
#[derive(Default)]
#[repr(align(128))]
struct RecycleCounters {
    ring: AtomicU64,
    ring_batches: AtomicU64,
    ring_full: AtomicU64,
    released: AtomicU64,
}

/// Up to [`CACHE_REFILL`] blocks that travel through the ring as one element.
///
/// # Invariants
///
/// `len <= CACHE_REFILL`; every pfn of `pfns[..len]` starts an allocated block of the
/// cache's order that this batch owns. The entries past `len` are stale numbers that
/// own nothing.
struct Batch {
    len: usize,
    pfns: [Pfn; CACHE_REFILL],
}

impl Batch {
    const EMPTY: Batch = Batch {
        len: 0,
        pfns: [Pfn(0); CACHE_REFILL],
    };

    /// The owned pfns.
    fn pfns(&self) -> &[Pfn] {
        &self.pfns[..self.len]
    }

    fn is_full(&self) -> bool {
        self.len == CACHE_REFILL
    }

    /// Take ownership of `pfn`. The caller checks there is room.
    #[inline]
    fn push(&mut self, pfn: Pfn) {
        debug_assert!(!self.is_full());
        // `len` in a local: otherwise the compiler reloads it after the store, which it
        // cannot prove misses `len`.
        let len = self.len;
        self.pfns[len] = pfn;
        self.len = len + 1;
    }

    /// A batch owning `pfns` (at most [`CACHE_REFILL`]).
    fn from_slice(pfns: &[Pfn]) -> Batch {
        let mut batch = Batch::EMPTY;
        batch.pfns[..pfns.len()].copy_from_slice(pfns);
        batch.len = pfns.len();
        batch
    }
}

/// Where [`Shared::recycle_batch`] put a batch.
enum Recycled {
    /// Into the ring.
    Ring,
    /// To the pool: the ring was full.
    RingFull,
    /// To the pool: the cache is gone.
    OwnerGone,
}

/// What the raw API checks of a pfn, as far as is cheap: inside the arena and aligned to
/// the cache's order. Each owner and recycler keeps a copy next to its buffer, with the
/// order's mask precomputed, so that the check is one comparison and one mask test
/// (no pointer to chase, no shift).
#[derive(Clone, Copy, Debug)]
struct RawCheck {
    /// Pages in the arena.
    nr_pages: u64,
    /// `order.pages() - 1`: the bits an aligned pfn has clear.
    misaligned_bits: u64,
    order: Order,
}

impl RawCheck {
    fn new(pool: &PagePool, order: Order) -> RawCheck {
        RawCheck {
            nr_pages: (pool.arena().len() / PAGE_SIZE) as u64,
            misaligned_bits: order.pages() - 1,
            order,
        }
    }

    #[inline]
    fn check(&self, pfn: Pfn) -> Result<(), PoolError> {
        if pfn.0 < self.nr_pages && pfn.0 & self.misaligned_bits == 0 {
            return Ok(());
        }
        Err(self.refusal(pfn))
    }

    /// Why `pfn` failed [`RawCheck::check`]: out of line, so the check stays two branches.
    #[cold]
    #[inline(never)]
    fn refusal(&self, pfn: Pfn) -> PoolError {
        if pfn.0 >= self.nr_pages {
            return PoolError::Free(FreeError::OutsideZones { pfn });
        }
        PoolError::Free(FreeError::Misaligned {
            pfn,
            order: self.order,
        })
    }
}

/// What a cache and its recyclers share.
///
/// # Invariants
///
/// Every batch in `ring` owns its pfns (see [`Batch`]); no batch in it is empty. The ring
/// owns a batch until it is popped.
struct Shared<'pool> {
    pool: &'pool PagePool,
    order: Order,
    ring: ArrayQueue<Batch>,
    /// Set when the [`PoolCache`] drops: recycled pages then go straight to the pool.
    owner_gone: AtomicBool,
    counters: RecycleCounters,
}

impl Shared<'_> {
    /// Put a non-empty batch into the ring; when the ring is full or the owner is gone,
    /// give it back to the pool. One push whatever the batch's size.
    fn recycle_batch(&self, batch: Batch) -> Recycled {
        debug_assert!(batch.len > 0);
        if self.owner_gone.load(Ordering::Acquire) {
            self.release_all(batch.pfns());
            return Recycled::OwnerGone;
        }
        match self.ring.push(batch) {
            Ok(()) => Recycled::Ring,
            Err(batch) => {
                self.release_all(batch.pfns());
                Recycled::RingFull
            }
        }
    }

    /// [`Shared::recycle_batch`] for a recycler, counted in the shared counters: one or
    /// two relaxed updates per batch.
    fn recycle_batch_counted(&self, batch: Batch) {
        let pages = batch.len as u64;
        if pages == 0 {
            return;
        }
        let c = &self.counters;
        match self.recycle_batch(batch) {
            Recycled::Ring => {
                c.ring.fetch_add(pages, Ordering::Relaxed);
                c.ring_batches.fetch_add(1, Ordering::Relaxed);
            }
            Recycled::RingFull => {
                c.ring_full.fetch_add(pages, Ordering::Relaxed);
                c.released.fetch_add(pages, Ordering::Relaxed);
            }
            Recycled::OwnerGone => {
                c.released.fetch_add(pages, Ordering::Relaxed);
            }
        }
    }

    /// Give owned pages back to the pool: batched at order 0, one by one otherwise, and
    /// one by one again if the batch is refused (it then freed nothing). Each page has
    /// one owner (module documentation), here the releasing thread, so the pool's
    /// exclusive free applies.
    fn release_all(&self, pfns: &[Pfn]) {
        if pfns.is_empty() {
            return;
        }
        if self.order == Order::ZERO && self.pool.free_pfns_batch(pfns).is_ok() {
            return;
        }
        for &pfn in pfns {
            let result = self.pool.free_pfn(pfn, self.order);
            // Only a raw double free (a caller that broke `free_raw`'s contract) gets
            // here; the pool refused and changed nothing.
            debug_assert!(result.is_ok(), "releasing cached page {pfn}: {result:?}");
        }
    }

    /// Empty the ring into the pool.
    fn drain_ring(&self) {
        let mut pfns = Vec::with_capacity(self.ring.len() * CACHE_REFILL);
        while let Some(batch) = self.ring.pop() {
            pfns.extend_from_slice(batch.pfns());
        }
        self.release_all(&pfns);
    }
}

impl Drop for Shared<'_> {
    fn drop(&mut self) {
        // The last of the cache and its recyclers: batches recycled after the cache
        // dropped (racing with its drain) are still here.
        self.drain_ring();
    }
}

/// The counters only the owner writes: plain integers, each updated once per batch
/// except `alloc_fast` (once per page). Frees into the array are not counted one by
/// one: [`PoolCache::stats`] derives them from the array's length (see there).
#[derive(Clone, Copy, Default)]
struct OwnerCounters {
    alloc_fast: u64,
    alloc_slow: u64,
    alloc_slow_high_order: u64,
    alloc_empty: u64,
    alloc_refill: u64,
    pages_from_ring: u64,
    batches_from_ring: u64,
    blocks_from_pool: u64,
    /// Pages that refills moved into the array, from the ring or the pool.
    pages_refilled: u64,
    recycle_cache_full: u64,
    recycle_ring: u64,
    recycle_ring_batches: u64,
    recycle_ring_full: u64,
    recycle_released: u64,
}

/// One thread's page cache over a [`PagePool`] (Linux: a `struct page_pool` used from its
/// NAPI context). `Send` but not `Sync`: one thread at a time owns it, and its fast paths
/// are a plain array pop and push.
///
/// ```
/// use mmkit_runtime::{PagePool, PoolCache, PoolCacheConfig};
///
/// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
/// let mut cache = PoolCache::new(&pool, PoolCacheConfig::default())?;
/// let mut recycler = cache.recycler();
/// let mut page = cache.alloc()?;                 // refills 64 pages in one bulk call
/// page[0] = 1;
/// std::thread::scope(|s| {
///     s.spawn(move || {
///         recycler.recycle(page);                // another thread gives it back,
///     });                                        // flushed to the ring when dropped
/// });
/// let again = cache.alloc()?;                    // from the array: no atomics
/// cache.free(again);
/// assert_eq!(cache.stats().alloc_slow, 1);
/// drop(cache);                                   // every page back to the pool
/// assert_eq!(pool.verify()?.iter().map(|z| z.allocated).sum::<u64>(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Invariants
///
/// `len <= CACHE_SIZE`; every pfn in `array[..len]` starts an allocated block of
/// `order` of `pool` that nobody else owns (the entries past `len` are stale numbers
/// that own nothing); `slots` is all `None` between calls; `pool` and `order` are
/// `shared`'s, and `raw_check` was made from them.
pub struct PoolCache<'pool> {
    /// The array's pages are `array[..len]`, the most recently freed (the hottest) last.
    /// Inline rather than a `Vec`: no pointer to load, no capacity to check.
    len: usize,
    array: [Pfn; CACHE_SIZE],
    raw_check: RawCheck,
    pool: &'pool PagePool,
    order: Order,
    gfp: Gfp,
    counters: OwnerCounters,
    shared: Arc<Shared<'pool>>,
    slots: Vec<Option<Pfn>>,
    not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for PoolCache<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolCache")
            .field("order", &self.order)
            .field("cached", &self.len)
            .field("ring_batches", &self.shared.ring.len())
            .finish_non_exhaustive()
    }
}

impl<'pool> PoolCache<'pool> {
    /// A cache over `pool`, empty until the first allocation (Linux: `page_pool_create`).
    pub fn new(pool: &'pool PagePool, config: PoolCacheConfig) -> Result<Self, PoolError> {
        if config.ring_size == 0 {
            return Err(PoolError::Invalid(
                "a pool cache needs a ring of at least one slot".into(),
            ));
        }
        // Recycled pages come back as their last owner left them, as in Linux's
        // page_pool: zeroing each on the way out would tax the fast path of every cache.
        if config.gfp.contains(Gfp::ZERO) {
            return Err(PoolError::Invalid(
                "a pool cache recycles pages without zeroing them: __GFP_ZERO is not \
                 allowed; allocate zeroed pages from the PagePool"
                    .into(),
            ));
        }
        crate::pool::refuse_account(config.gfp)?;
        Ok(PoolCache {
            len: 0,
            array: [Pfn(0); CACHE_SIZE],
            raw_check: RawCheck::new(pool, config.order),
            pool,
            order: config.order,
            gfp: config.gfp,
            counters: OwnerCounters::default(),
            shared: Arc::new(Shared {
                pool,
                order: config.order,
                ring: ArrayQueue::new(config.ring_size.div_ceil(CACHE_REFILL)),
                owner_gone: AtomicBool::new(false),
                counters: RecycleCounters::default(),
            }),
            slots: vec![None; CACHE_REFILL],
            not_sync: PhantomData,
        })
    }

    /// A handle one other thread gives pages back through, with an empty buffer.
    pub fn recycler(&self) -> Recycler<'pool> {
        Recycler {
            shared: Arc::clone(&self.shared),
            raw_check: self.raw_check,
            buffer: Batch::EMPTY,
        }
    }

    /// The order of every block.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Pages in the array now.
    pub fn cached(&self) -> usize {
        self.len
    }

    /// The owned pfns of the array.
    fn cached_pfns(&self) -> &[Pfn] {
        &self.array[..self.len]
    }

    /// Pages in the ring now, from the counters: exact when no recycler is flushing, a
    /// moment's estimate while one is.
    pub fn ring_len(&self) -> usize {
        let s = self.stats();
        s.recycle_ring.saturating_sub(s.pages_from_ring) as usize
    }

    /// Batches in the ring now.
    pub fn ring_batches(&self) -> usize {
        self.shared.ring.len()
    }

    /// A block as a handle that frees itself to the [`PagePool`] when dropped; give it
    /// back with [`PoolCache::free`] or [`Recycler::recycle`] to keep it in circulation.
    pub fn alloc(&mut self) -> Result<PageBlock<'pool>, PoolError> {
        let pfn = self.alloc_raw()?;
        Ok(PageBlock::new(self.pool, pfn, self.order))
    }

    /// Give a block back on the owner's thread: into the array (moving a batch of the
    /// oldest pages on to the ring, or to the pool, when the array is full). A block of
    /// another pool or order is simply dropped (its own pool frees it).
    pub fn free(&mut self, block: PageBlock<'pool>) {
        if !std::ptr::eq(block.pool(), self.pool) {
            drop(block);
            return;
        }
        if block.order() != self.order {
            self.counters.recycle_released += 1;
            drop(block);
            return;
        }
        let pfn = block.into_raw();
        self.put(pfn);
    }

    /// A block for a caller that frees it with [`PoolCache::free_raw`] or
    /// [`Recycler::recycle_raw`] (or the pool's `free_raw`); its memory is at
    /// [`PagePool::pfn_to_addr`].
    #[inline]
    pub fn alloc_raw(&mut self) -> Result<Pfn, PoolError> {
        // An empty array makes `len - 1` wrap to `usize::MAX`, which `get` refuses: one
        // comparison is both the emptiness test and the bounds check.
        match self.array.get(self.len.wrapping_sub(1)) {
            Some(&pfn) => {
                self.len -= 1;
                self.counters.alloc_fast += 1;
                Ok(pfn)
            }
            None => self.alloc_slow(),
        }
    }

    /// The array is empty: refill it with one batch from the ring, else from the pool.
    #[cold]
    #[inline(never)]
    fn alloc_slow(&mut self) -> Result<Pfn, PoolError> {
        debug_assert_eq!(self.len, 0);
        if let Some(batch) = self.shared.ring.pop() {
            self.array[..batch.len].copy_from_slice(batch.pfns());
            self.len = batch.len;
            self.counters.pages_from_ring += batch.len as u64;
            self.counters.pages_refilled += batch.len as u64;
            self.counters.batches_from_ring += 1;
        }
        if let Some(pfn) = self.pop() {
            self.counters.alloc_refill += 1;
            return Ok(pfn);
        }
        self.counters.alloc_empty += 1;
        if self.order != Order::ZERO {
            let pfn = self.pool.alloc_raw(self.gfp, self.order)?;
            self.counters.blocks_from_pool += 1;
            self.counters.alloc_slow_high_order += 1;
            return Ok(pfn);
        }
        let filled = self.pool.alloc_bulk_gfp(self.gfp, &mut self.slots)?;
        for pfn in self.slots.iter_mut().filter_map(Option::take) {
            self.array[self.len] = pfn;
            self.len += 1;
        }
        self.counters.blocks_from_pool += filled as u64;
        self.counters.pages_refilled += self.len as u64;
        match self.pop() {
            Some(pfn) => {
                self.counters.alloc_slow += 1;
                Ok(pfn)
            }
            None => Err(PoolError::Alloc(AllocError::OutOfMemory {
                order: self.order,
            })),
        }
    }

    /// Take the hottest page of the array, uncounted (the slow path counts).
    fn pop(&mut self) -> Option<Pfn> {
        self.len = self.len.checked_sub(1)?;
        Some(self.array[self.len])
    }

    /// Give back a raw block on the owner's thread (Linux: `page_pool_put_page` with
    /// `allow_direct`): into the array, as [`PoolCache::free`].
    ///
    /// Detected, refused with an error and changing nothing: a pfn outside the arena, or
    /// not aligned to the cache's order; in builds with debug assertions, a pfn already in
    /// the array (a scan of up to 128 entries). Detected when the page reaches the pool
    /// (the pool refuses and the page is skipped; builds with debug assertions panic): a
    /// block that is not allocated or of another order. Not detected in release builds: a
    /// page freed twice while both copies sit in the array, the ring or a recycler's
    /// buffer; it would then be handed out twice. Nor are two copies that reach the pool
    /// at the same time from two threads: the pool frees with the core's exclusive free.
    ///
    /// # Safety
    ///
    /// The caller owns the block: it is a block of this cache's order that this pool
    /// allocated (from this cache, another cache over the pool, or the pool's raw API),
    /// it has not been freed since, no other thread frees it at the same time, no
    /// [`PageBlock`] owns it, and no reference into its memory is used after this call.
    #[inline]
    pub unsafe fn free_raw(&mut self, pfn: Pfn) -> Result<(), PoolError> {
        self.raw_check.check(pfn)?;
        if cfg!(debug_assertions) && self.cached_pfns().contains(&pfn) {
            return Err(PoolError::Free(FreeError::NotAllocated { pfn }));
        }
        self.put(pfn);
        Ok(())
    }

    /// Keep an owned page in the array, spilling first if it is full.
    #[inline]
    fn put(&mut self, pfn: Pfn) {
        // A full array has no slot at `len`: one comparison is both the fullness test
        // and the bounds check.
        match self.array.get_mut(self.len) {
            Some(slot) => {
                *slot = pfn;
                self.len += 1;
            }
            None => self.spill_and_put(pfn),
        }
    }

    /// The array is full: move its [`CACHE_REFILL`] oldest pages to the ring as one
    /// batch (or to the pool when the ring is full), then keep `pfn`.
    #[cold]
    #[inline(never)]
    fn spill_and_put(&mut self, pfn: Pfn) {
        debug_assert_eq!(self.len, CACHE_SIZE);
        let batch = Batch::from_slice(&self.array[..CACHE_REFILL]);
        self.array.copy_within(CACHE_REFILL.., 0);
        self.len = CACHE_SIZE - CACHE_REFILL;
        let pages = batch.len as u64;
        let c = &mut self.counters;
        c.recycle_cache_full += pages;
        match self.shared.recycle_batch(batch) {
            Recycled::Ring => {
                c.recycle_ring += pages;
                c.recycle_ring_batches += 1;
            }
            Recycled::RingFull | Recycled::OwnerGone => {
                c.recycle_ring_full += pages;
                c.recycle_released += pages;
            }
        }
        self.put(pfn);
    }

    /// The counters of this cache and its recyclers (pages in a recycler's buffer are
    /// counted when it flushes).
    pub fn stats(&self) -> PoolCacheStats {
        let c = &self.counters;
        let shared = &self.shared.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        // Every page in the array came in by a refill or an owner's free, and left by a
        // pop (an allocation other than `alloc_slow_high_order`, which bypasses the
        // array) or a spill, or is still there: refilled + cached = popped + spilled +
        // len. So the frees need no counter of their own on the fast path.
        let popped = c.alloc_fast + c.alloc_refill + c.alloc_slow;
        let recycle_cached = self.len as u64 + popped + c.recycle_cache_full - c.pages_refilled;
        PoolCacheStats {
            alloc_fast: c.alloc_fast,
            alloc_slow: c.alloc_slow,
            alloc_slow_high_order: c.alloc_slow_high_order,
            alloc_empty: c.alloc_empty,
            alloc_refill: c.alloc_refill,
            pages_from_ring: c.pages_from_ring,
            batches_from_ring: c.batches_from_ring,
            blocks_from_pool: c.blocks_from_pool,
            recycle_cached,
            recycle_cache_full: c.recycle_cache_full,
            recycle_ring: c.recycle_ring + load(&shared.ring),
            recycle_ring_batches: c.recycle_ring_batches + load(&shared.ring_batches),
            recycle_ring_full: c.recycle_ring_full + load(&shared.ring_full),
            recycle_released: c.recycle_released + load(&shared.released),
        }
    }
}

impl Drop for PoolCache<'_> {
    fn drop(&mut self) {
        // Linux: page_pool_destroy → page_pool_empty_alloc_cache_once, page_pool_empty_ring.
        self.shared.owner_gone.store(true, Ordering::Release);
        self.shared.release_all(self.cached_pfns());
        self.len = 0;
        self.shared.drain_ring();
    }
}

/// How one other thread gives a [`PoolCache`]'s pages back (Linux: `page_pool_put_page`
/// outside the NAPI context, into the `ptr_ring`).
///
/// A recycler keeps up to [`CACHE_REFILL`] pages in a buffer of its own and moves them
/// into the ring as one batch when the buffer fills, on [`Recycler::flush`] and when it
/// drops: one ring push per batch. When the ring is full, or the cache is gone, the
/// batch goes back to the [`PagePool`] in one batched free. The last of the cache and
/// its recyclers to drop returns whatever is left in the ring.
///
/// It is a per-thread handle: giving back takes `&mut self`, so one thread at a time
/// uses it. It is `Send` (a thread may take it along) and `Sync` (a shared reference
/// only reads its order and buffer length). Each thread that gives pages back takes its
/// own: [`Clone`] makes another handle to the same cache with an *empty* buffer (the
/// pages in a buffer have one owner, the recycler that holds them).
///
/// Pages in a buffer are allocated as far as the pool is concerned, and not yet counted
/// in [`PoolCache::stats`]; a thread that goes idle for a while should flush.
pub struct Recycler<'pool> {
    shared: Arc<Shared<'pool>>,
    raw_check: RawCheck,
    buffer: Batch,
}

impl Clone for Recycler<'_> {
    fn clone(&self) -> Self {
        Recycler {
            shared: Arc::clone(&self.shared),
            raw_check: self.raw_check,
            buffer: Batch::EMPTY,
        }
    }
}

impl std::fmt::Debug for Recycler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recycler")
            .field("order", &self.shared.order)
            .field("buffered", &self.buffer.len)
            .field("ring_batches", &self.shared.ring.len())
            .finish_non_exhaustive()
    }
}

impl<'pool> Recycler<'pool> {
    /// Give a block back from this recycler's thread: into the buffer, which goes on to
    /// the ring when full. A block of another pool or order is simply dropped (its own
    /// pool frees it).
    pub fn recycle(&mut self, block: PageBlock<'pool>) {
        let shared = &*self.shared;
        if !std::ptr::eq(block.pool(), shared.pool) {
            drop(block);
            return;
        }
        if block.order() != shared.order {
            shared.counters.released.fetch_add(1, Ordering::Relaxed);
            drop(block);
            return;
        }
        let pfn = block.into_raw();
        self.put(pfn);
    }

    /// Give a raw block back from this recycler's thread: into the buffer, which goes on
    /// to the ring when full.
    ///
    /// Detected, refused with an error and changing nothing: a pfn outside the arena or
    /// not aligned to the order. Detected only when the page reaches the pool (ring full
    /// or cache gone; the pool refuses and the page is skipped, builds with debug
    /// assertions panic): a block that is not allocated or of another order. Not
    /// detected: a page recycled twice while a copy sits in a buffer, the ring or the
    /// cache.
    ///
    /// # Safety
    ///
    /// As for [`PoolCache::free_raw`]: the caller owns the block, of this cache's order
    /// and pool, and does not use its memory afterwards.
    #[inline]
    pub unsafe fn recycle_raw(&mut self, pfn: Pfn) -> Result<(), PoolError> {
        self.raw_check.check(pfn)?;
        self.put(pfn);
        Ok(())
    }

    /// Keep an owned page in the buffer; flush when it is full.
    #[inline]
    fn put(&mut self, pfn: Pfn) {
        self.buffer.push(pfn);
        if self.buffer.is_full() {
            self.flush_full();
        }
    }

    /// [`Recycler::flush`] of a full buffer, once per [`CACHE_REFILL`] pages: out of
    /// line, so that the per-page path that inlines into callers stays a store and a
    /// comparison, without the batch's 520-byte move.
    #[cold]
    #[inline(never)]
    fn flush_full(&mut self) {
        self.flush();
    }

    /// Move the buffered pages into the ring as one batch (to the pool when the ring is
    /// full or the cache is gone). Nothing happens when the buffer is empty.
    pub fn flush(&mut self) {
        if self.buffer.len == 0 {
            return;
        }
        let batch = std::mem::replace(&mut self.buffer, Batch::EMPTY);
        self.shared.recycle_batch_counted(batch);
    }

    /// Pages in this recycler's buffer now.
    pub fn buffered(&self) -> usize {
        self.buffer.len
    }

    /// The order of the blocks this recycler takes.
    pub fn order(&self) -> Order {
        self.shared.order
    }
}

impl Drop for Recycler<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}
