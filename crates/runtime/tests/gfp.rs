//! GFP flags on real memory: `__GFP_ZERO` blocks come back zeroed however dirty their
//! pages were freed, on every allocation path, and the flags a pool cannot honour are
//! refused before anything changes.

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::page_alloc::AllocError;
use mmkit_core::{Gfp, Order, Pfn};
use mmkit_runtime::{cpu, PageBlock, PagePool, PoolCache, PoolCacheConfig, PoolError};
use proptest::prelude::*;

/// A 16 MiB pool on two CPUs without background threads, so that nothing but the test
/// moves pages.
fn quiet_pool() -> PagePool {
    PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(2)
        .background(false)
        .build()
        .unwrap()
}

/// The words of a raw block the test holds.
fn raw_words(pool: &PagePool, pfn: Pfn, order: Order) -> &[u64] {
    let addr = pool.pfn_to_addr(pfn).unwrap();
    let words = (PAGE_SIZE << order.get()) / 8;
    // SAFETY: the test allocated the block raw and holds it until it frees it, after the
    // last use of this slice; the pool's blocks are page aligned, so aligned for u64.
    unsafe { std::slice::from_raw_parts(addr as *const u64, words) }
}

/// Write the canary of `generation` over a raw block the test holds: each word its
/// address, the generation and its index XORed, as `PageBlock::write_canary` does.
fn write_raw_canary(pool: &PagePool, pfn: Pfn, order: Order, generation: u64) {
    let addr = pool.pfn_to_addr(pfn).unwrap();
    let words = (PAGE_SIZE << order.get()) / 8;
    // SAFETY: as in `raw_words`; no other slice of the block is alive during the write.
    let block = unsafe { std::slice::from_raw_parts_mut(addr as *mut u64, words) };
    for (i, word) in block.iter_mut().enumerate() {
        *word = addr as u64 ^ generation ^ i as u64;
    }
}

/// Words of a raw block that no longer hold the canary of `generation`.
fn raw_canary_damage(pool: &PagePool, pfn: Pfn, order: Order, generation: u64) -> usize {
    let addr = pool.pfn_to_addr(pfn).unwrap() as u64;
    raw_words(pool, pfn, order)
        .iter()
        .enumerate()
        .filter(|&(i, &word)| word != addr ^ generation ^ i as u64)
        .count()
}

/// How a block is taken from the pool, and so how it is given back.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// `alloc_gfp`: a handle, freed when dropped.
    Handle,
    /// `alloc_raw`, freed with `free_raw`.
    Raw,
    /// `alloc_bulk_gfp` of order-0 pages into slots, the first of which may hold a page
    /// the test already has; freed with `free_raw`.
    Bulk(usize),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Allocate on `cpu`, with `__GFP_ZERO` or without, and write a canary over the
    /// block (bulk: order 0 whatever `order` says).
    Alloc {
        order: u8,
        zero: bool,
        via: Via,
        cpu: u32,
    },
    /// Check a held block's canary and free it.
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let via = prop_oneof![
        Just(Via::Handle),
        Just(Via::Raw),
        (1usize..8).prop_map(Via::Bulk)
    ];
    prop_oneof![
        3 => (0u8..=3, any::<bool>(), via, 0u32..2)
            .prop_map(|(order, zero, via, cpu)| Op::Alloc { order, zero, via, cpu }),
        2 => any::<usize>().prop_map(Op::Free),
    ]
}

/// A block the test holds, with the generation of the canary written over it.
enum Held<'a> {
    Handle(PageBlock<'a>, u64),
    Raw(Pfn, Order, u64),
}

/// The test's state: the pool, the blocks held, the last canary generation.
struct Run<'a> {
    pool: &'a PagePool,
    held: Vec<Held<'a>>,
    generation: u64,
}

impl<'a> Run<'a> {
    fn alloc(&mut self, order: Order, zero: bool, via: Via) -> Result<(), TestCaseError> {
        let gfp = if zero {
            Gfp::KERNEL | Gfp::ZERO
        } else {
            Gfp::KERNEL
        };
        let mut fresh = Vec::new();
        match via {
            Via::Handle => {
                let Ok(block) = self.pool.alloc_gfp(gfp, order) else {
                    return Ok(());
                };
                let all_zero = block.iter().all(|&b| b == 0);
                prop_assert!(
                    all_zero || !zero,
                    "__GFP_ZERO block {} is dirty",
                    block.pfn()
                );
                self.generation += 1;
                let mut block = block;
                block.write_canary(self.generation);
                self.held.push(Held::Handle(block, self.generation));
                return Ok(());
            }
            Via::Raw => {
                let Ok(pfn) = self.pool.alloc_raw(gfp, order) else {
                    return Ok(());
                };
                fresh.push((pfn, order));
            }
            Via::Bulk(n) => {
                // A slot already full of a page the test holds: left alone, zero or not.
                let mut slots = vec![None; n];
                slots[0] = self.held.iter().find_map(|held| match *held {
                    Held::Raw(pfn, order, _) if order == Order::ZERO => Some(pfn),
                    _ => None,
                });
                let kept = slots[0];
                let Ok(_) = self.pool.alloc_bulk_gfp(gfp, &mut slots) else {
                    return Ok(());
                };
                prop_assert!(kept.is_none() || slots[0] == kept);
                let skip = usize::from(kept.is_some());
                fresh.extend(
                    slots
                        .into_iter()
                        .skip(skip)
                        .flatten()
                        .map(|p| (p, Order::ZERO)),
                );
            }
        }
        for (pfn, order) in fresh {
            let all_zero = raw_words(self.pool, pfn, order).iter().all(|&w| w == 0);
            prop_assert!(all_zero || !zero, "__GFP_ZERO block {pfn} is dirty");
            self.generation += 1;
            write_raw_canary(self.pool, pfn, order, self.generation);
            self.held.push(Held::Raw(pfn, order, self.generation));
        }
        Ok(())
    }

    fn free(&mut self, i: usize) -> Result<(), TestCaseError> {
        if self.held.is_empty() {
            return Ok(());
        }
        match self.held.swap_remove(i % self.held.len()) {
            Held::Handle(block, generation) => {
                prop_assert_eq!(block.canary_damage(generation), 0, "block {}", block.pfn());
            }
            Held::Raw(pfn, order, generation) => {
                let damage = raw_canary_damage(self.pool, pfn, order, generation);
                prop_assert_eq!(damage, 0, "block {}", pfn);
                // SAFETY: allocated raw by this test, freed once; no slice of it is alive.
                unsafe { self.pool.free_raw(pfn, order) }.unwrap();
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Every block allocated with `__GFP_ZERO` (handle, raw or bulk) reads zero in full,
    /// although the pages the pool hands out were written with canaries and freed (the
    /// pagesets give back the most recently freed page first); every block keeps its
    /// canary until it is freed, so the zeroing wrote nothing but the new block.
    #[test]
    fn gfp_zero_blocks_are_zero_after_dirty_frees(ops in proptest::collection::vec(op(), 1..200)) {
        let pool = quiet_pool();
        let mut run = Run { pool: &pool, held: Vec::new(), generation: 0 };
        for op in ops {
            match op {
                Op::Alloc { order, zero, via, cpu } => {
                    cpu::pin_thread(Some(cpu));
                    run.alloc(Order::new(order).unwrap(), zero, via)?;
                }
                Op::Free(i) => run.free(i)?,
            }
        }
        cpu::pin_thread(None);
        while !run.held.is_empty() {
            run.free(0)?;
        }
        let allocated: u64 = pool.verify().unwrap().iter().map(|z| z.allocated).sum();
        prop_assert_eq!(allocated, 0);
    }
}

/// The property above is not vacuous: freed pages do come back dirty without the flag,
/// and with it the same page comes back zeroed.
#[test]
fn the_page_freed_last_comes_back_dirty_without_gfp_zero_and_zeroed_with_it() {
    let pool = quiet_pool();
    cpu::pin_thread(Some(0));
    for gfp in [Gfp::KERNEL, Gfp::KERNEL | Gfp::ZERO] {
        let mut block = pool.alloc_gfp(Gfp::KERNEL, Order::ZERO).unwrap();
        block.fill(0xab);
        let pfn = block.pfn();
        drop(block);
        let again = pool.alloc_gfp(gfp, Order::ZERO).unwrap();
        assert_eq!(
            again.pfn(),
            pfn,
            "the pageset hands back the page freed last"
        );
        let expected = if gfp.contains(Gfp::ZERO) { 0 } else { 0xab };
        assert!(again.iter().all(|&b| b == expected), "{gfp:?}");
    }
    cpu::pin_thread(None);
}

#[test]
fn flags_a_pool_cannot_honour_are_refused_and_change_nothing() {
    let pool = quiet_pool();
    let before = pool.zoneinfo();
    let refused = |e: PoolError| matches!(e, PoolError::Alloc(AllocError::InvalidGfp(_)));
    for gfp in [Gfp::KERNEL_ACCOUNT, Gfp::KERNEL | Gfp::NOFAIL] {
        for order in [Order::ZERO, Order::new(2).unwrap()] {
            assert!(refused(pool.alloc_gfp(gfp, order).unwrap_err()), "{gfp:?}");
            assert!(refused(pool.alloc_raw(gfp, order).unwrap_err()), "{gfp:?}");
        }
        let mut slots = [None; 4];
        assert!(refused(pool.alloc_bulk_gfp(gfp, &mut slots).unwrap_err()));
        assert_eq!(slots, [None; 4]);
    }
    // A pool cache recycles pages without zeroing them, and has no memcgs either.
    for gfp in [Gfp::KERNEL | Gfp::ZERO, Gfp::KERNEL_ACCOUNT] {
        let config = PoolCacheConfig {
            gfp,
            ..PoolCacheConfig::default()
        };
        assert!(PoolCache::new(&pool, config).is_err(), "{gfp:?}");
    }
    assert_eq!(pool.zoneinfo(), before);
    pool.verify().unwrap();
}
