//! The page_pool-style cache: a model test, producer/consumer stress tests with canaries
//! (every recycled batch comes back exactly once), the statistics' identities, partial
//! and spilled batches, and the raw API's checks. Sizes are small: the runtime's tests
//! also run under valgrind memcheck.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::sync_channel;

use mmkit_core::{Order, Pfn};
use mmkit_runtime::{
    cpu, PageBlock, PagePool, PoolCache, PoolCacheConfig, PoolError, Recycler, CACHE_REFILL,
    CACHE_SIZE,
};
use proptest::prelude::*;

fn pool(mib: usize, cpus: u32) -> PagePool {
    PagePool::builder()
        .memory_bytes(mib << 20)
        .cpus(cpus)
        .background(false)
        .build()
        .unwrap()
}

fn allocated(pool: &PagePool) -> u64 {
    pool.verify().unwrap().iter().map(|z| z.allocated).sum()
}

fn config(ring_size: usize) -> PoolCacheConfig {
    PoolCacheConfig {
        ring_size,
        ..PoolCacheConfig::default()
    }
}

/// The identities every [`PoolCacheStats`] satisfies for an order-0 cache that only its
/// own pool's blocks of its order were given back to, while it is alive, with `held`
/// blocks handed out and not counted as given back (held by users, dropped to the pool,
/// or in a recycler's buffer).
fn check_identities(cache: &PoolCache<'_>, held: usize) {
    let s = &cache.stats();
    let (cached, ring) = (cache.cached(), cache.ring_len());
    assert_eq!(
        s.allocs() - s.frees(),
        held as u64,
        "outstanding blocks: {s:?}"
    );
    assert_eq!(
        cached as u64,
        s.blocks_from_pool + s.pages_from_ring + s.recycle_cached
            - s.allocs()
            - s.recycle_cache_full,
        "the array: {s:?}"
    );
    assert_eq!(
        ring as u64,
        s.recycle_ring - s.pages_from_ring,
        "the ring: {s:?}"
    );
    assert_eq!(
        cache.ring_batches() as u64,
        s.recycle_ring_batches - s.batches_from_ring,
        "the ring's batches: {s:?}"
    );
    assert!(ring <= cache.ring_batches() * CACHE_REFILL);
    assert_eq!(
        (cached + ring + held) as u64,
        s.blocks_from_pool - s.recycle_released,
        "pages in circulation: {s:?}"
    );
    assert_eq!(s.recycle_ring_full, s.recycle_released, "{s:?}");
}

#[test]
fn stats_add_up() {
    let pool = pool(16, 2);
    // 16 pages: one batch slot.
    let mut cache = PoolCache::new(&pool, config(16)).unwrap();
    let mut held: Vec<PageBlock<'_>> = (0..200).map(|_| cache.alloc().unwrap()).collect();
    let s = cache.stats();
    // 200 pages: four bulk refills of 64 (the last leaves 56 in the array).
    assert_eq!(
        (s.alloc_slow, s.alloc_fast, s.blocks_from_pool),
        (4, 196, 256)
    );
    assert_eq!(s.alloc_empty, 4, "the ring was empty at every refill");
    check_identities(&cache, held.len());

    // 100 owner frees: 72 fill the array to 128; the 73rd moves the 64 oldest to the
    // ring as one batch; all 100 end in the array (128 - 64 + 28 = 92).
    for block in held.drain(..100) {
        cache.free(block);
    }
    let s = cache.stats();
    assert_eq!(
        (s.recycle_cached, s.recycle_cache_full, s.recycle_ring),
        (100, 64, 64)
    );
    assert_eq!((s.recycle_ring_full, s.recycle_released), (0, 0));
    assert_eq!((cache.cached(), cache.ring_batches()), (92, 1));
    check_identities(&cache, held.len());
    assert_eq!(allocated(&pool), (92 + 64 + held.len()) as u64);

    // Empty the array, then the next allocation refills from the ring: the whole batch.
    for _ in 0..92 {
        held.push(cache.alloc().unwrap());
    }
    held.push(cache.alloc().unwrap());
    let s = cache.stats();
    assert_eq!(
        (s.alloc_refill, s.pages_from_ring, s.batches_from_ring),
        (1, 64, 1)
    );
    check_identities(&cache, held.len());

    // Another thread recycles 100: the first 64 fill its buffer and go to the ring as
    // one batch; the last 36 are flushed when the recycler drops, find the one slot
    // taken and go to the pool in one batched free.
    let mut recycler = cache.recycler();
    std::thread::scope(|scope| {
        let blocks: Vec<_> = held.drain(..100).collect();
        let recycler = &mut recycler;
        scope.spawn(move || blocks.into_iter().for_each(|b| recycler.recycle(b)));
    });
    assert_eq!(recycler.buffered(), 36);
    check_identities(&cache, held.len() + 36);
    drop(recycler);
    let s = cache.stats();
    assert_eq!((s.recycle_ring, s.recycle_ring_batches), (128, 2));
    assert_eq!((s.recycle_ring_full, s.recycle_released), (36, 36));
    check_identities(&cache, held.len());
    assert_eq!(
        allocated(&pool),
        (cache.cached() + cache.ring_len() + held.len()) as u64
    );

    drop(held);
    drop(cache);
    assert_eq!(allocated(&pool), 0);
}

#[test]
fn dropping_the_cache_before_its_recyclers_leaks_nothing() {
    let pool = pool(16, 1);
    let mut cache = PoolCache::new(&pool, config(8)).unwrap();
    let mut recycler = cache.recycler();
    let mut blocks: Vec<_> = (0..20).map(|_| cache.alloc().unwrap()).collect();
    for block in blocks.drain(..4) {
        recycler.recycle(block); // into the buffer
    }
    recycler.flush(); // into the ring, as one batch
    assert_eq!((cache.ring_len(), cache.ring_batches()), (4, 1));
    drop(cache); // the array and the ring go back to the pool
    assert_eq!(allocated(&pool), blocks.len() as u64);
    let late = blocks.len();
    for block in blocks {
        recycler.recycle(block); // into the buffer: still allocated
    }
    assert_eq!(recycler.buffered(), late);
    assert_eq!(allocated(&pool), late as u64);
    recycler.flush(); // the owner is gone: straight to the pool
    assert_eq!((recycler.buffered(), allocated(&pool)), (0, 0));
    drop(recycler);
    pool.verify().unwrap();
}

#[test]
fn a_recycler_dropped_with_a_partial_buffer_returns_its_pages() {
    let pool = pool(16, 2);
    let mut cache = PoolCache::new(&pool, config(256)).unwrap();
    let blocks: Vec<_> = (0..10).map(|_| cache.alloc().unwrap()).collect();
    let sent: HashSet<Pfn> = blocks.iter().map(PageBlock::pfn).collect();
    let cached = cache.cached();
    std::thread::scope(|s| {
        let mut recycler = cache.recycler();
        s.spawn(move || {
            for block in blocks {
                recycler.recycle(block);
            }
            assert_eq!(recycler.buffered(), 10);
            // Dropped here, with 10 pages in its buffer.
        });
    });
    assert_eq!((cache.ring_len(), cache.ring_batches()), (10, 1));
    assert_eq!(allocated(&pool), (cached + 10) as u64);
    check_identities(&cache, 0);
    // Empty the array; the next refill takes exactly the 10 recycled pages.
    let mut held: Vec<_> = (0..cached).map(|_| cache.alloc().unwrap()).collect();
    let before = cache.stats().blocks_from_pool;
    let refilled: HashSet<Pfn> = (0..10)
        .map(|_| {
            let block = cache.alloc().unwrap();
            let pfn = block.pfn();
            held.push(block);
            pfn
        })
        .collect();
    assert_eq!(refilled, sent);
    assert_eq!(
        cache.stats().blocks_from_pool,
        before,
        "no page from the pool"
    );
    drop(held);
    drop(cache);
    assert_eq!(allocated(&pool), 0);
    pool.verify().unwrap();

    // The same after the cache is gone: the recycler's drop gives the pages to the pool.
    let mut cache = PoolCache::new(&pool, config(256)).unwrap();
    let mut recycler = cache.recycler();
    let blocks: Vec<_> = (0..10).map(|_| cache.alloc().unwrap()).collect();
    drop(cache);
    blocks.into_iter().for_each(|b| recycler.recycle(b));
    assert_eq!(allocated(&pool), 10);
    drop(recycler);
    assert_eq!(allocated(&pool), 0);
    pool.verify().unwrap();
}

#[test]
fn a_full_ring_sends_whole_batches_to_the_pool() {
    let pool = pool(16, 1);
    let mut cache = PoolCache::new(&pool, config(CACHE_REFILL)).unwrap();
    let mut recycler = cache.recycler();
    let blocks: Vec<_> = (0..3 * CACHE_REFILL + 5)
        .map(|_| cache.alloc().unwrap())
        .collect();
    let cached = cache.cached();
    for block in blocks {
        recycler.recycle(block);
    }
    // Three full batches: the first takes the one slot, the next two go to the pool; five
    // pages wait in the buffer.
    let s = cache.stats();
    assert_eq!(
        (s.recycle_ring, s.recycle_ring_batches, s.recycle_ring_full),
        (64, 1, 128)
    );
    assert_eq!(recycler.buffered(), 5);
    check_identities(&cache, 5);
    assert_eq!(allocated(&pool), (cached + 64 + 5) as u64);
    drop(recycler);
    assert_eq!(cache.stats().recycle_ring_full, 133);
    check_identities(&cache, 0);
    drop(cache);
    assert_eq!(allocated(&pool), 0);
    pool.verify().unwrap();
}

#[test]
fn recyclers_are_per_thread_handles() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Recycler<'static>>();
    let pool = pool(16, 1);
    let mut cache = PoolCache::new(&pool, config(256)).unwrap();
    let mut recycler = cache.recycler();
    recycler.recycle(cache.alloc().unwrap());
    let clone = recycler.clone();
    assert_eq!(
        (recycler.buffered(), clone.buffered()),
        (1, 0),
        "a clone starts empty"
    );
    drop((recycler, clone, cache));
    assert_eq!(allocated(&pool), 0);
}

#[test]
fn a_high_order_cache_allocates_one_block_per_slow_call() {
    let pool = pool(16, 1);
    let order = Order::new(2).unwrap();
    let mut cache = PoolCache::new(&pool, PoolCacheConfig { order, ..config(4) }).unwrap();
    let a = cache.alloc().unwrap();
    assert_eq!((a.len(), a.pfn().0 % 4), (16384, 0));
    cache.free(a);
    let b = cache.alloc().unwrap();
    let s = cache.stats();
    assert_eq!(
        (s.alloc_slow_high_order, s.alloc_fast, s.blocks_from_pool),
        (1, 1, 1)
    );
    // The block from the pool bypassed the array; the free went into it.
    assert_eq!((s.recycle_cached, cache.cached()), (1, 0));
    cache.free(b);
    let b = cache.alloc().unwrap();
    let s = cache.stats();
    assert_eq!((s.recycle_cached, s.alloc_fast, s.allocs()), (2, 2, 3));
    // An order-0 block of the same pool is not kept: it goes back to the pool.
    cache.free(pool.alloc(Order::ZERO).unwrap());
    assert_eq!(cache.stats().recycle_released, 1);
    drop(b);
    drop(cache);
    assert_eq!(allocated(&pool), 0);
}

#[test]
fn raw_frees_refuse_what_they_can_check() {
    let pool = pool(16, 1);
    let mut cache = PoolCache::new(&pool, config(8)).unwrap();
    let mut recycler = cache.recycler();
    let pfn = cache.alloc_raw().unwrap();
    let outside = Pfn(1 << 40);
    // SAFETY: refused before anything is touched (outside the arena).
    let refused = unsafe { cache.free_raw(outside) };
    assert!(matches!(refused, Err(PoolError::Free(_))));
    // SAFETY: as above.
    let refused = unsafe { recycler.recycle_raw(outside) };
    assert!(matches!(refused, Err(PoolError::Free(_))));
    // SAFETY: allocated above, freed once.
    unsafe { cache.free_raw(pfn).unwrap() };
    if cfg!(debug_assertions) {
        // SAFETY: breaks the contract on purpose; debug builds find the page in the
        // array and refuse without changing anything.
        assert!(unsafe { cache.free_raw(pfn) }.is_err());
    }
    let order2 = PoolCache::new(
        &pool,
        PoolCacheConfig {
            order: Order::new(2).unwrap(),
            ..config(8)
        },
    )
    .unwrap();
    // SAFETY: refused before anything is touched (not aligned to order 2).
    assert!(unsafe { order2.recycler().recycle_raw(Pfn(pfn.0 | 1)) }.is_err());
    drop((cache, recycler, order2));
    assert_eq!(allocated(&pool), 0);
}

#[test]
fn blocks_of_another_pool_are_dropped_not_cached() {
    let (a, b) = (pool(16, 1), pool(16, 1));
    let mut cache = PoolCache::new(&a, config(8)).unwrap();
    let foreign = b.alloc(Order::ZERO).unwrap();
    cache.free(foreign);
    cache.recycler().recycle(b.alloc(Order::ZERO).unwrap());
    assert_eq!((cache.cached(), cache.ring_len()), (0, 0));
    assert_eq!(allocated(&b), 0);
    drop(cache);
    assert_eq!(allocated(&a), 0);
}

#[test]
fn a_zero_slot_ring_is_refused() {
    let pool = pool(16, 1);
    assert!(matches!(
        PoolCache::new(&pool, config(0)),
        Err(PoolError::Invalid(_))
    ));
}

/// Producers on one thread, consumers on two others recycling through the ring. Each
/// page carries a canary while it is held, and a flag per pfn says who holds it: a page
/// handed out twice, or written after its recycle, shows up.
#[test]
fn producer_and_consumers_never_share_a_page() {
    const PAGES: u64 = 6000;
    let pool = pool(16, 3);
    let nr_pages = 16 << 20 >> 12;
    let held: Vec<AtomicBool> = (0..nr_pages).map(|_| AtomicBool::new(false)).collect();
    let damage = AtomicU64::new(0);
    let mut cache = PoolCache::new(&pool, config(32)).unwrap();
    let recycler = cache.recycler();
    std::thread::scope(|s| {
        let mut senders = Vec::new();
        for consumer in 0..2u32 {
            let (tx, rx) = sync_channel::<(PageBlock<'_>, u64)>(64);
            senders.push(tx);
            let (mut recycler, held, damage) = (recycler.clone(), &held, &damage);
            s.spawn(move || {
                cpu::pin_thread(Some(1 + consumer));
                for (block, generation) in rx {
                    damage.fetch_add(block.canary_damage(generation), Relaxed);
                    let was = held[block.pfn().0 as usize].swap(false, Relaxed);
                    assert!(was, "page {} recycled but not held", block.pfn());
                    recycler.recycle(block);
                }
            });
        }
        cpu::pin_thread(Some(0));
        let mut own = VecDeque::new();
        for generation in 0..PAGES {
            let mut block = cache.alloc().unwrap();
            let was = held[block.pfn().0 as usize].swap(true, Relaxed);
            assert!(!was, "page {} handed out twice", block.pfn());
            block.write_canary(generation);
            // One page in four stays with the producer for a while and is freed by it.
            if generation % 4 == 0 {
                own.push_back((block, generation));
                if own.len() > 40 {
                    let (block, g) = own.pop_front().unwrap();
                    damage.fetch_add(block.canary_damage(g), Relaxed);
                    held[block.pfn().0 as usize].store(false, Relaxed);
                    cache.free(block);
                }
            } else {
                senders[(generation % 2) as usize]
                    .send((block, generation))
                    .unwrap();
            }
        }
        drop(senders);
        for (block, g) in own {
            damage.fetch_add(block.canary_damage(g), Relaxed);
            held[block.pfn().0 as usize].store(false, Relaxed);
            cache.free(block);
        }
    });
    assert_eq!(damage.load(Relaxed), 0, "a canary was damaged");
    let s = cache.stats();
    check_identities(&cache, 0);
    assert_eq!(s.allocs(), PAGES);
    assert!(s.alloc_refill > 0, "the producer reused recycled pages");
    drop((cache, recycler));
    assert_eq!(allocated(&pool), 0);
    pool.verify().unwrap();
}

/// A producer and a consumer on two CPUs: the consumer gives every page back through its
/// own recycler, flushing a partial batch now and then, and the producer reuses them.
/// Each page carries a canary while it is held and a flag per pfn says who holds it, so a
/// batch handed out twice shows up; at the end the array and the ring hold every page
/// the pool still counts as allocated, each exactly once, so a lost batch shows up too.
#[test]
fn recycled_batches_come_back_exactly_once() {
    const PAGES: u64 = 4000;
    let pool = pool(16, 2);
    let nr_pages = 16 << 20 >> 12;
    let held: Vec<AtomicBool> = (0..nr_pages).map(|_| AtomicBool::new(false)).collect();
    let damage = AtomicU64::new(0);
    let mut cache = PoolCache::new(&pool, config(4 * CACHE_REFILL)).unwrap();
    std::thread::scope(|s| {
        let (tx, rx) = sync_channel::<(PageBlock<'_>, u64)>(256);
        let (mut recycler, held, damage) = (cache.recycler(), &held, &damage);
        s.spawn(move || {
            cpu::pin_thread(Some(1));
            for (block, generation) in rx {
                damage.fetch_add(block.canary_damage(generation), Relaxed);
                let was = held[block.pfn().0 as usize].swap(false, Relaxed);
                assert!(was, "page {} recycled but not held", block.pfn());
                recycler.recycle(block);
                if generation % 97 == 0 {
                    recycler.flush(); // a partial batch
                }
            }
        });
        cpu::pin_thread(Some(0));
        for generation in 0..PAGES {
            let mut block = cache.alloc().unwrap();
            let was = held[block.pfn().0 as usize].swap(true, Relaxed);
            assert!(!was, "page {} handed out twice", block.pfn());
            block.write_canary(generation);
            tx.send((block, generation)).unwrap();
        }
    });
    assert_eq!(damage.load(Relaxed), 0, "a canary was damaged");
    let s = cache.stats();
    assert_eq!(s.allocs(), PAGES);
    assert!(s.alloc_refill > 0 && s.recycle_ring_batches > 0, "{s:?}");
    check_identities(&cache, 0);
    let circulating = cache.cached() + cache.ring_len();
    assert_eq!(allocated(&pool), circulating as u64);
    // Take every page of the array and the ring: each once, none from the pool.
    let from_pool = s.blocks_from_pool;
    let mut seen = HashSet::new();
    let blocks: Vec<_> = (0..circulating)
        .map(|_| {
            let block = cache.alloc().unwrap();
            assert!(
                seen.insert(block.pfn()),
                "page {} came back twice",
                block.pfn()
            );
            block
        })
        .collect();
    assert_eq!(cache.stats().blocks_from_pool, from_pool);
    assert_eq!((cache.cached(), cache.ring_batches()), (0, 0));
    drop(blocks);
    drop(cache);
    assert_eq!(allocated(&pool), 0);
    pool.verify().unwrap();
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    Alloc,
    /// Give back the held block at this index (modulo) through the owner.
    Free(usize),
    /// Through a recycler.
    Recycle(usize),
    /// Drop its handle: it goes to the pool.
    Drop(usize),
    /// Through the raw owner free.
    FreeRaw(usize),
    /// Flush the recycler's buffer.
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::Recycle),
        1 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::FreeRaw),
        1 => Just(Op::Flush),
    ]
}

/// The naive model: the batched algorithm on plain collections. Pages a bulk refill
/// brought in are `None` until they are handed out: the model cannot know which pfns the
/// pool picks, only how many.
#[derive(Default)]
struct Model {
    cache: Vec<Option<Pfn>>,
    ring: VecDeque<Vec<Option<Pfn>>>,
    ring_batches: usize,
    /// The one recycler's buffer.
    buffer: Vec<Pfn>,
    /// Owner frees, each into the array (`recycle_cached`).
    cached_frees: u64,
    /// Pages the owner moved out of a full array (`recycle_cache_full`).
    spilled: u64,
}

/// What the model says the next allocation returns.
#[derive(Debug, PartialEq)]
enum Expect {
    /// This pfn, from the array or the ring.
    Known(Pfn),
    /// A page of an earlier bulk refill.
    FromPool,
    /// A new bulk refill.
    Refill,
}

impl Model {
    fn alloc(&mut self) -> Expect {
        if self.cache.is_empty() {
            if let Some(batch) = self.ring.pop_front() {
                self.cache.extend(batch);
            }
        }
        match self.cache.pop() {
            Some(Some(pfn)) => Expect::Known(pfn),
            Some(None) => Expect::FromPool,
            None => Expect::Refill,
        }
    }

    fn free(&mut self, pfn: Pfn) {
        if self.cache.len() == CACHE_SIZE {
            let oldest: Vec<_> = self.cache.drain(..CACHE_REFILL).collect();
            self.spilled += oldest.len() as u64;
            self.push_batch(oldest);
        }
        self.cache.push(Some(pfn));
        self.cached_frees += 1;
    }

    fn recycle(&mut self, pfn: Pfn) {
        self.buffer.push(pfn);
        if self.buffer.len() == CACHE_REFILL {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.buffer.is_empty() {
            let batch = self.buffer.drain(..).map(Some).collect();
            self.push_batch(batch);
        }
    }

    /// Into the ring, or (dropped here) to the pool when it is full.
    fn push_batch(&mut self, batch: Vec<Option<Pfn>>) {
        if self.ring.len() < self.ring_batches {
            self.ring.push_back(batch);
        }
    }

    fn ring_pages(&self) -> usize {
        self.ring.iter().map(Vec::len).sum()
    }

    fn holds(&self, pfn: Pfn) -> bool {
        self.cache.contains(&Some(pfn))
            || self.ring.iter().any(|b| b.contains(&Some(pfn)))
            || self.buffer.contains(&pfn)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn cache_matches_a_naive_model(
        ops in proptest::collection::vec(op(), 1..400),
        ring_size in 1usize..200,
    ) {
        let pool = pool(16, 1);
        let mut cache = PoolCache::new(&pool, config(ring_size)).unwrap();
        let mut recycler = cache.recycler();
        let ring_batches = ring_size.div_ceil(CACHE_REFILL);
        let mut model = Model { ring_batches, ..Model::default() };
        let mut held: Vec<PageBlock<'_>> = Vec::new();
        let mut dropped = 0;
        for op in ops {
            match op {
                Op::Alloc => {
                    let expected = model.alloc();
                    let before = cache.stats().blocks_from_pool;
                    let block = cache.alloc().unwrap();
                    let refilled = cache.stats().blocks_from_pool - before;
                    match expected {
                        Expect::Known(pfn) => prop_assert_eq!(block.pfn(), pfn),
                        Expect::FromPool => prop_assert_eq!(refilled, 0),
                        Expect::Refill => {
                            prop_assert_eq!(refilled, CACHE_REFILL as u64);
                            model.cache.resize(CACHE_REFILL - 1, None);
                        }
                    }
                    prop_assert!(
                        held.iter().all(|b| b.pfn() != block.pfn()) && !model.holds(block.pfn()),
                        "page {} handed out twice", block.pfn()
                    );
                    held.push(block);
                }
                Op::Free(i) | Op::Recycle(i) | Op::Drop(i) | Op::FreeRaw(i) if !held.is_empty() => {
                    let block = held.swap_remove(i % held.len());
                    let pfn = block.pfn();
                    match op {
                        Op::Free(_) => {
                            model.free(pfn);
                            cache.free(block);
                        }
                        Op::FreeRaw(_) => {
                            model.free(pfn);
                            let raw = block.into_raw();
                            // SAFETY: `into_raw` gave up the handle; the block is freed once.
                            unsafe { cache.free_raw(raw) }.unwrap();
                        }
                        Op::Recycle(_) => {
                            model.recycle(pfn);
                            recycler.recycle(block);
                        }
                        _ => {
                            dropped += 1;
                            drop(block);
                        }
                    }
                }
                Op::Flush => {
                    model.flush();
                    recycler.flush();
                }
                _ => {}
            }
            prop_assert_eq!(cache.ring_batches(), model.ring.len());
            prop_assert_eq!(cache.ring_len(), model.ring_pages());
            prop_assert_eq!(cache.cached(), model.cache.len());
            prop_assert_eq!(recycler.buffered(), model.buffer.len());
            // Counted independently of the array's length, which the cache derives
            // `recycle_cached` from.
            let s = cache.stats();
            prop_assert_eq!(s.recycle_cached, model.cached_frees);
            prop_assert_eq!(s.recycle_cache_full, model.spilled);
            let buffered = recycler.buffered();
            check_identities(&cache, held.len() + dropped + buffered);
            prop_assert_eq!(
                allocated(&pool),
                (cache.cached() + cache.ring_len() + held.len() + buffered) as u64
            );
        }
        drop(held);
        drop(cache);
        drop(recycler);
        prop_assert_eq!(allocated(&pool), 0);
        pool.verify().unwrap();
    }
}
