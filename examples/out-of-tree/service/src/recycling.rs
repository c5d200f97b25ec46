//! A `PoolCache` owned by one thread (a NIC's RX path) hands pages to two other threads,
//! which check them and give them back through their `Recycler`s (`page_pool_put_page`
//! from another CPU); a quarter the owner frees itself.

use std::sync::mpsc;
use std::thread;

use mmkit_runtime::PageBlock;
use mmkit_runtime::PagePool;
use mmkit_runtime::PoolCache;
use mmkit_runtime::PoolCacheConfig;
use mmkit_runtime::Recycler;

/// Pages the owner allocates.
const PAGES: u64 = 4096;

/// Threads that give pages back.
const RECYCLERS: usize = 2;

/// What went round.
#[derive(Clone, Copy, Debug)]
pub struct Recycled {
    /// Pages the cache handed out.
    pub allocs: u64,
    /// Pages other threads gave back through their recyclers.
    pub recycled: u64,
}

/// Run the owner and its recyclers; then check the cache's counters, and that pages left
/// in its array and ring are handed out again without asking the pool.
pub fn run(pool: &PagePool) -> Result<Recycled, String> {
    let mut cache = PoolCache::new(pool, PoolCacheConfig::default())
        .map_err(|error| format!("PoolCache: {error}"))?;
    let recycled = thread::scope(|scope| -> Result<u64, String> {
        let mut senders = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..RECYCLERS {
            let (sender, receiver) = mpsc::channel::<(PageBlock<'_>, u64)>();
            let recycler = cache.recycler();
            senders.push(sender);
            threads.push(scope.spawn(move || give_back(receiver, recycler)));
        }
        for page in 0..PAGES {
            let mut block = cache
                .alloc()
                .map_err(|error| format!("PoolCache alloc: {error}"))?;
            block.write_canary(page);
            if page % 4 == 3 {
                cache.free(block);
            } else {
                let sender = &senders[page as usize % RECYCLERS];
                sender
                    .send((block, page))
                    .map_err(|_| "a recycler thread is gone")?;
            }
        }
        drop(senders);
        threads
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("a recycler panicked".into()))
            })
            .sum()
    })?;
    let stats = cache.stats();
    if (stats.allocs(), stats.frees(), recycled) != (PAGES, PAGES, PAGES / 4 * 3) {
        return Err(format!(
            "PoolCache counted {} allocations and {} frees, {recycled} recycled, of {PAGES}",
            stats.allocs(),
            stats.frees()
        ));
    }
    reuse_without_the_pool(&mut cache)?;
    Ok(Recycled {
        allocs: PAGES,
        recycled,
    })
}

/// One recycler thread: check each page's canary, give it back; the recycler's buffer goes
/// to the ring when it fills and when the recycler drops.
fn give_back<'pool>(
    receiver: mpsc::Receiver<(PageBlock<'pool>, u64)>,
    mut recycler: Recycler<'pool>,
) -> Result<u64, String> {
    let mut recycled = 0;
    for (block, generation) in receiver {
        let damaged = block.canary_damage(generation);
        if damaged != 0 {
            return Err(format!(
                "canary damaged in a recycled page: {damaged} words"
            ));
        }
        recycler.recycle(block);
        recycled += 1;
    }
    Ok(recycled)
}

/// Every page in the cache's array and ring is handed out again without a block from the
/// pool (the recyclers are done, so the ring's length is exact).
fn reuse_without_the_pool(cache: &mut PoolCache<'_>) -> Result<(), String> {
    let kept = cache.cached() + cache.ring_len();
    let from_pool = cache.stats().blocks_from_pool;
    let mut again = Vec::with_capacity(kept);
    for _ in 0..kept {
        again.push(
            cache
                .alloc()
                .map_err(|error| format!("PoolCache alloc: {error}"))?,
        );
    }
    if kept == 0 || cache.stats().blocks_from_pool != from_pool {
        return Err(format!(
            "{kept} recycled pages were not all reused before asking the pool"
        ));
    }
    for block in again {
        cache.free(block);
    }
    Ok(())
}
