//! The page_pool-style cache: a model test, a producer/consumer stress test with canaries,
//! the statistics' identities, and the raw API's checks. Sizes are small: the runtime's
//! tests also run under valgrind memcheck.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::sync_channel;

use mmkit_core::{Order, Pfn};
use mmkit_runtime::{
    cpu, PageBlock, PagePool, PoolCache, PoolCacheConfig, PoolCacheStats, PoolError, CACHE_REFILL,
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
/// own pool's blocks of its order were given back to, with `held` blocks handed out and
/// not given back (held by users, or dropped to the pool).
fn check_identities(stats: &PoolCacheStats, cached: usize, ring: usize, held: usize) {
    let s = stats;
    assert_eq!(
        s.allocs() - s.frees(),
        held as u64,
        "outstanding blocks: {s:?}"
    );
    assert_eq!(
        cached as u64,
        s.blocks_from_pool + s.pages_from_ring + s.recycle_cached - s.allocs(),
        "the array: {s:?}"
    );
    assert_eq!(
        ring as u64,
        s.recycle_ring - s.pages_from_ring,
        "the ring: {s:?}"
    );
    assert_eq!(
        (cached + ring + held) as u64,
        s.blocks_from_pool - s.recycle_released,
        "pages in circulation: {s:?}"
    );
    assert_eq!(s.recycle_ring_full, s.recycle_released, "{s:?}");
    assert!(s.recycle_cache_full <= s.recycle_ring + s.recycle_ring_full);
}

#[test]
fn stats_add_up() {
    let pool = pool(16, 2);
    let mut cache = PoolCache::new(&pool, config(16)).unwrap();
    let recycler = cache.recycler();
    let mut held: Vec<PageBlock<'_>> = (0..200).map(|_| cache.alloc().unwrap()).collect();
    let s = cache.stats();
    // 200 pages: four bulk refills of 64 (the last leaves 56 in the array).
    assert_eq!(
        (s.alloc_slow, s.alloc_fast, s.blocks_from_pool),
        (4, 196, 256)
    );
    assert_eq!(s.alloc_empty, 4, "the ring was empty at every refill");
    check_identities(&s, cache.cached(), cache.ring_len(), held.len());

    // 100 owner frees: 72 fill the array to 128, 16 fill the ring, 12 go to the pool.
    for block in held.drain(..100) {
        cache.free(block);
    }
    let s = cache.stats();
    assert_eq!(
        (s.recycle_cached, s.recycle_cache_full, s.recycle_ring),
        (72, 28, 16)
    );
    assert_eq!((s.recycle_ring_full, s.recycle_released), (12, 12));
    check_identities(&s, cache.cached(), cache.ring_len(), held.len());
    assert_eq!(allocated(&pool), (CACHE_SIZE + 16 + held.len()) as u64);

    // Empty the array, then the next allocation refills from the ring.
    for _ in 0..CACHE_SIZE {
        held.push(cache.alloc().unwrap());
    }
    held.push(cache.alloc().unwrap());
    let s = cache.stats();
    assert_eq!((s.alloc_refill, s.pages_from_ring), (1, 16));
    check_identities(&s, cache.cached(), cache.ring_len(), held.len());

    // Another thread recycles 40: 16 fit the ring, 24 go to the pool.
    std::thread::scope(|scope| {
        let blocks: Vec<_> = held.drain(..40).collect();
        let recycler = &recycler;
        scope.spawn(move || blocks.into_iter().for_each(|b| recycler.recycle(b)));
    });
    let s = cache.stats();
    assert_eq!((s.recycle_ring, s.recycle_ring_full), (32, 36));
    check_identities(&s, cache.cached(), cache.ring_len(), held.len());

    drop(held);
    drop(cache);
    drop(recycler);
    assert_eq!(allocated(&pool), 0);
}

#[test]
fn dropping_the_cache_before_its_recyclers_leaks_nothing() {
    let pool = pool(16, 1);
    let mut cache = PoolCache::new(&pool, config(8)).unwrap();
    let recycler = cache.recycler();
    let blocks: Vec<_> = (0..20).map(|_| cache.alloc().unwrap()).collect();
    let (early, late) = blocks.split_at(4);
    let (early, late) = (early.to_vec_pfns(), late.to_vec_pfns());
    let mut blocks = blocks;
    for block in blocks.drain(..4) {
        recycler.recycle(block); // into the ring
    }
    assert_eq!((cache.ring_len(), early.len()), (4, 4));
    drop(cache); // the array and the ring go back to the pool
    assert_eq!(allocated(&pool), late.len() as u64);
    for block in blocks {
        recycler.recycle(block); // the owner is gone: straight to the pool
    }
    assert_eq!(allocated(&pool), 0);
    drop(recycler);
    pool.verify().unwrap();
}

trait Pfns {
    fn to_vec_pfns(&self) -> Vec<Pfn>;
}

impl Pfns for [PageBlock<'_>] {
    fn to_vec_pfns(&self) -> Vec<Pfn> {
        self.iter().map(PageBlock::pfn).collect()
    }
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
    let recycler = cache.recycler();
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
            let (recycler, held, damage) = (recycler.clone(), &held, &damage);
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
    check_identities(&s, cache.cached(), cache.ring_len(), 0);
    assert_eq!(s.allocs(), PAGES);
    assert!(s.alloc_refill > 0, "the producer reused recycled pages");
    drop((cache, recycler));
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::Recycle),
        1 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::FreeRaw),
    ]
}

/// The naive model: Linux's algorithm on plain collections. Pages a bulk refill brought
/// in are `None` until they are handed out: the model cannot know which pfns the pool
/// picks, only how many.
#[derive(Default)]
struct Model {
    cache: Vec<Option<Pfn>>,
    ring: VecDeque<Pfn>,
    ring_size: usize,
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
            for _ in 0..CACHE_REFILL {
                match self.ring.pop_front() {
                    Some(pfn) => self.cache.push(Some(pfn)),
                    None => break,
                }
            }
        }
        match self.cache.pop() {
            Some(Some(pfn)) => Expect::Known(pfn),
            Some(None) => Expect::FromPool,
            None => Expect::Refill,
        }
    }

    fn free(&mut self, pfn: Pfn) {
        if self.cache.len() < CACHE_SIZE {
            self.cache.push(Some(pfn));
        } else {
            self.recycle(pfn);
        }
    }

    fn recycle(&mut self, pfn: Pfn) {
        if self.ring.len() < self.ring_size {
            self.ring.push_back(pfn);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn cache_matches_a_naive_model(
        ops in proptest::collection::vec(op(), 1..400),
        ring_size in 1usize..40,
    ) {
        let pool = pool(16, 1);
        let mut cache = PoolCache::new(&pool, config(ring_size)).unwrap();
        let recycler = cache.recycler();
        let mut model = Model { ring_size, ..Model::default() };
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
                        held.iter().all(|b| b.pfn() != block.pfn())
                            && !model.ring.contains(&block.pfn())
                            && !model.cache.contains(&Some(block.pfn())),
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
                _ => {}
            }
            prop_assert_eq!(cache.ring_len(), model.ring.len());
            prop_assert_eq!(cache.cached(), model.cache.len());
            let outstanding = held.len() + dropped;
            check_identities(&cache.stats(), cache.cached(), cache.ring_len(), outstanding);
            prop_assert_eq!(
                allocated(&pool),
                (cache.cached() + cache.ring_len() + held.len()) as u64
            );
        }
        drop(held);
        drop(cache);
        drop(recycler);
        prop_assert_eq!(allocated(&pool), 0);
        pool.verify().unwrap();
    }
}
