//! mmkit's page_pool-style recycling cache ([`PoolCache`] + [`Recycler`]) as a
//! contestant, `mmkit-cache`: one cache per benchmark thread, over the bulk API.
//!
//! This is not the PCP path: a cache hit never reaches the page allocator, so its figures
//! say what Linux's `page_pool` buys a network driver, not what an order-0
//! `alloc_pages` costs (that is the `mmkit` contestant).
//!
//! The [`Contestant`] trait is `Sync` and allocates through `&self`, but a [`PoolCache`] is
//! one thread's (`&mut self`, no atomics on its fast path). So the adapter holds one cache
//! per benchmark thread in a slot, and a thread may use only the slot it entered with
//! [`Contestant::enter_thread`]: entering claims the slot for the thread with one
//! compare-and-swap, and every `alloc`/`free` checks, with a thread-local read and a
//! plain load, that the calling thread holds the slot it uses. The hot loop takes no
//! lock. A block remembers the slot it came from: freed on that slot's thread it goes
//! back into that cache; freed on another thread (the remote patterns' consumer) it goes
//! into that thread's own [`Recycler`] for the producer's cache, which moves 64 pages at a
//! time into the producer's ring, as a socket reader's frees reach a NIC's page_pool.
//! Each slot holds one recycler per cache (a recycler is a per-thread handle with a
//! buffer), used only by the slot's thread. A thread that entered no slot frees straight
//! to the pool.
//!
//! A [`PoolCache`] borrows its [`PagePool`], so the adapter, [`MmkitCache`], borrows the
//! pool too, and the runner, [`CacheEntry`], which owns the pool, builds a fresh adapter
//! for each pagealloc sample and each threads run. Dropping the adapter returns every
//! cached page to the pool, so the audit after a benchmark sees them all.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use mmkit_runtime::{cpu, PagePool, PoolCache, PoolCacheConfig, PoolError, Recycler};

use crate::contestant::{block_bytes, Block, Contestant};
use crate::pagealloc::{self, CellSample, CellSpec};
use crate::runner::Runner;
use crate::threads::{self, ThreadsConfig, ThreadsOutcome};
use crate::BenchError;

thread_local! {
    /// The slot this thread entered last (`usize::MAX`: none). Its address is the thread's
    /// token: distinct among live threads.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// How `mmkit-cache` is set up, in words.
const DESCRIPTION: &str = "page_pool-style recycling (PoolCache per thread, not the PCP path) over PagePool::alloc_bulk_gfp(GFP_KERNEL|__GFP_MOVABLE), 64 pages per refill; remote frees through a per-thread Recycler, 64 pages per ring element (ring of 1024 pages)";

/// This thread's token and the slot it entered last.
#[inline(always)]
fn current() -> (usize, usize) {
    SLOT.with(|slot| (slot as *const Cell<usize> as usize, slot.get()))
}

/// What one benchmark thread uses alone: its cache, and its recyclers into every cache
/// (`recyclers[i]` gives pages back to slot `i`'s cache; its own is unused).
struct Local<'pool> {
    cache: PoolCache<'pool>,
    recyclers: Box<[Recycler<'pool>]>,
}

/// One benchmark thread's cache and recyclers.
///
/// # Invariants
///
/// `local` is accessed only by the live thread whose token is in `owner`, or through
/// `&mut` to the whole adapter (construction and drop). `owner` changes only from 0 to a
/// token.
#[repr(align(128))]
struct Slot<'pool> {
    owner: AtomicUsize,
    local: UnsafeCell<Local<'pool>>,
}

/// One [`PoolCache`] per benchmark thread over a borrowed pool.
pub struct MmkitCache<'pool> {
    pool: &'pool PagePool,
    /// The arena's first byte: pfn `p` is at `base + p × 4096`.
    base: usize,
    slots: Box<[Slot<'pool>]>,
}

// SAFETY: the only field that is not `Sync` is each slot's `UnsafeCell<Local>`, and by
// the `Slot` invariant one thread at a time touches it (the one that claimed the slot);
// `PoolCache` and `Recycler` are `Send`, so that thread may be another than the one that
// built them.
unsafe impl Sync for MmkitCache<'_> {}

impl<'pool> MmkitCache<'pool> {
    /// One cache per thread, `threads` of them, over `pool`, taking order-0 pages with
    /// `GFP_KERNEL | __GFP_MOVABLE` (the `mmkit` contestant's flags).
    pub fn new(pool: &'pool PagePool, threads: u32) -> Result<MmkitCache<'pool>, PoolError> {
        let config = PoolCacheConfig {
            gfp: Gfp::KERNEL | Gfp::MOVABLE,
            ..PoolCacheConfig::default()
        };
        let caches = (0..threads.max(1))
            .map(|_| PoolCache::new(pool, config))
            .collect::<Result<Vec<_>, PoolError>>()?;
        let recyclers: Vec<Box<[Recycler<'pool>]>> = caches
            .iter()
            .map(|_| caches.iter().map(PoolCache::recycler).collect())
            .collect();
        let slots = caches
            .into_iter()
            .zip(recyclers)
            .map(|(cache, recyclers)| Slot {
                owner: AtomicUsize::new(0),
                local: UnsafeCell::new(Local { cache, recyclers }),
            })
            .collect();
        Ok(MmkitCache {
            pool,
            base: pool.pfn_to_addr(Pfn(0))?,
            slots,
        })
    }

    /// The cache and recyclers of slot `index` if the thread with `token` holds it.
    #[inline(always)]
    #[expect(
        clippy::mut_from_ref,
        reason = "the slot's owner check makes it exclusive"
    )]
    fn owned(&self, index: usize, token: usize) -> Option<&mut Local<'pool>> {
        let slot = self.slots.get(index)?;
        if slot.owner.load(Ordering::Relaxed) != token {
            return None;
        }
        // SAFETY: the live thread with `token` (the caller: tokens come from `current()`)
        // owns the slot, so by the `Slot` invariant no other thread touches its cache and
        // recyclers; the `&mut` lives only for the caller's one alloc or free on this
        // thread.
        Some(unsafe { &mut *slot.local.get() })
    }

    /// Panic unless `page` is a block of this pool.
    fn check_owner(&self, page: &CachePage<'_>) {
        assert_eq!(
            page.addr,
            self.base + page.pfn.0 as usize * PAGE_SIZE,
            "a block of another pool"
        );
    }
}

/// A page from [`MmkitCache`].
///
/// # Invariants
///
/// `addr .. addr + 4096` is the order-0 block `pfn` of the pool the adapter `'a` borrows;
/// a cache handed it out and only this value may touch or free it (it is made only by
/// [`MmkitCache`]'s `alloc`, and is not `Clone`). `slot` is the cache it came from.
pub struct CachePage<'a> {
    pfn: Pfn,
    addr: usize,
    slot: u32,
    adapter: PhantomData<&'a ()>,
}

impl Block for CachePage<'_> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the range is an allocated page inside the live arena
        // (the borrow keeps the pool alive) that only `self` accesses.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, block_bytes(Order::ZERO)) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, block_bytes(Order::ZERO)) }
    }

    fn addr(&self) -> usize {
        self.addr
    }
}

impl<'pool> Contestant for MmkitCache<'pool> {
    type Block<'a>
        = CachePage<'a>
    where
        Self: 'a;

    // Inlined into the harness's loop, as the adapters of mmkit and of the malloc family
    // and the floors are: called, this returned its 32-byte `Option<CachePage>` through
    // memory, written in 8-byte stores that the loop read back with 16-byte loads (a
    // store-forwarding stall per allocation; the alloc phase took ~13 ns per page at
    // N = 8..64 instead of ~3). The work is the same: the call was the only difference.
    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<CachePage<'_>> {
        assert_eq!(order, Order::ZERO, "mmkit-cache is an order-0 cache");
        let (token, index) = current();
        let local = self
            .owned(index, token)
            .expect("a thread allocates from mmkit-cache only after enter_thread");
        let pfn = local.cache.alloc_raw().ok()?;
        Some(CachePage {
            pfn,
            addr: self.base + pfn.0 as usize * PAGE_SIZE,
            slot: index as u32,
            adapter: PhantomData,
        })
    }

    // Not forced inline, unlike every other adapter method: forced into the threads
    // harness's consumer loop it cut `remote` from 26–27 to 20–22 M pages/s (A/B of two
    // builds that differ in this attribute alone; a code-layout effect we did not pin
    // down), while the pagealloc free phase moves by at most 0.5 ns either way. Left to
    // LLVM, the only entry that may pay a call here is mmkit's own.
    #[inline]
    fn free<'a>(&'a self, page: CachePage<'a>) {
        self.check_owner(&page);
        let (token, index) = current();
        let from = page.slot as usize;
        let result = match self.owned(index, token) {
            // SAFETY: `page` owns the block (its invariant), it is this pool's (checked),
            // of order 0 like every cache here, and it is consumed, so nothing touches the
            // memory afterwards.
            Some(local) if from == index => unsafe { local.cache.free_raw(page.pfn) },
            // SAFETY: as above; `recyclers[from]` gives back to the cache that handed the
            // page out.
            Some(local) => unsafe { local.recyclers[from].recycle_raw(page.pfn) },
            // SAFETY: as above; an order-0 block of this pool, freed once.
            None => unsafe { self.pool.free_raw(page.pfn, Order::ZERO) },
        };
        if let Err(e) = result {
            panic!("mmkit-cache refused a page it handed out: {e}");
        }
    }

    fn enter_thread(&self, thread: u32) {
        cpu::pin_thread(Some(thread));
        let (token, _) = current();
        let slot = &self.slots[thread as usize % self.slots.len()];
        let claimed = slot
            .owner
            .compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed);
        assert!(
            claimed.is_ok() || claimed == Err(token),
            "two threads entered mmkit-cache slot {thread}"
        );
        SLOT.with(|s| s.set(thread as usize % self.slots.len()));
    }

    fn audit(&self) -> Result<(), String> {
        // The caches hold pages until the adapter drops; the runner audits the pool then.
        self.pool.verify().map(drop).map_err(|e| e.to_string())
    }

    fn describe(&self) -> String {
        super::mmkit::describe_pool(self.pool, DESCRIPTION)
    }
}

/// The `mmkit-cache` runner: owns the pool, builds an [`MmkitCache`] per sample or run.
pub struct CacheEntry {
    pool: PagePool,
}

impl CacheEntry {
    /// A pool of `arena_bytes` with `cpus` pagesets, like the `mmkit` contestant's.
    pub fn new(arena_bytes: usize, cpus: u32) -> Result<CacheEntry, PoolError> {
        Ok(CacheEntry {
            pool: super::mmkit::bench_pool(arena_bytes, cpus)?,
        })
    }
}

impl Runner for CacheEntry {
    fn name(&self) -> &'static str {
        "mmkit-cache"
    }

    fn describe(&self) -> String {
        super::mmkit::describe_pool(&self.pool, DESCRIPTION)
    }

    fn supports(&self, order: Order) -> bool {
        order == Order::ZERO
    }

    fn bulk(&self) -> bool {
        false
    }

    fn pagealloc_sample(&self, spec: &CellSpec) -> Result<CellSample, BenchError> {
        let adapter = MmkitCache::new(&self.pool, 1)
            .map_err(|e| BenchError::new(format!("mmkit-cache: {e}")))?;
        adapter.enter_thread(0);
        pagealloc::measure_cell(&adapter, false, spec).map_err(|e| e.context("mmkit-cache"))
    }

    fn threads(&self, config: &ThreadsConfig) -> Result<ThreadsOutcome, BenchError> {
        let adapter = MmkitCache::new(&self.pool, config.threads)
            .map_err(|e| BenchError::new(format!("mmkit-cache: {e}")))?;
        threads::run_pattern(&adapter, false, config).map_err(|e| e.context("mmkit-cache"))
    }

    fn audit(&self) -> Result<(), String> {
        super::mmkit::audit_pool(&self.pool)
    }
}
