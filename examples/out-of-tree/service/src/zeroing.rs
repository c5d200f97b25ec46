//! `__GFP_ZERO` is honoured: pages dirtied and freed come back zero when asked for with
//! it; what cannot honour it (a recycling cache, whose pages come back as they were) is
//! refused, and so is `__GFP_ACCOUNT`, which a pool without memcgs cannot charge.

use std::collections::HashSet;

use mmkit_core::AllocError;
use mmkit_core::Gfp;
use mmkit_core::Order;
use mmkit_runtime::PagePool;
use mmkit_runtime::PoolCache;
use mmkit_runtime::PoolCacheConfig;
use mmkit_runtime::PoolError;

/// Blocks dirtied, then asked for zeroed, per order.
const BLOCKS: usize = 64;

/// The highest order checked.
const ORDER_MAX: u8 = 3;

/// Memory of the quiet pool the check runs on: 16 MiB.
const QUIET_POOL_BYTES: usize = 16 << 20;

/// Dirty [`BLOCKS`] blocks of each order up to [`ORDER_MAX`], free them, and ask for as
/// many with `__GFP_ZERO` and the same flags otherwise (a pageset keeps a list per
/// migratetype): every byte must be zero, and some of the blocks must be dirtied ones
/// (else the check proved nothing). On a pool of its own with one CPU and no background
/// threads, so that no vmstat tick drains the pageset in between. Returns the blocks
/// checked.
pub fn run(pool: &PagePool) -> Result<u64, String> {
    let quiet = PagePool::builder()
        .memory_bytes(QUIET_POOL_BYTES)
        .cpus(1)
        .background(false)
        .build()
        .map_err(|error| format!("page pool: {error}"))?;
    let checked = (0..=ORDER_MAX)
        .map(|order| dirty_then_zeroed(&quiet, order))
        .sum::<Result<u64, String>>()?;
    quiet
        .verify()
        .map_err(|error| format!("page pool verify: {error}"))?;
    let zero_cache = PoolCacheConfig {
        gfp: Gfp::KERNEL | Gfp::ZERO,
        ..PoolCacheConfig::default()
    };
    if PoolCache::new(pool, zero_cache).is_ok() {
        return Err(
            "a PoolCache of __GFP_ZERO pages was accepted, which recycling cannot honour".into(),
        );
    }
    match pool.alloc_gfp(Gfp::KERNEL | Gfp::ACCOUNT, Order::ZERO) {
        Err(PoolError::Alloc(AllocError::InvalidGfp(_))) => {}
        other => return Err(format!("__GFP_ACCOUNT was not refused: {other:?}")),
    }
    Ok(checked)
}

fn dirty_then_zeroed(pool: &PagePool, order: u8) -> Result<u64, String> {
    let order = Order::new(order).ok_or("an order above MAX_ORDER")?;
    let failed = |error: PoolError| format!("allocation of order {}: {error}", order.get());
    let mut dirty = Vec::with_capacity(BLOCKS);
    for _ in 0..BLOCKS {
        let mut block = pool.alloc_gfp(Gfp::KERNEL, order).map_err(failed)?;
        block.fill(0xa5);
        dirty.push(block);
    }
    let dirtied: HashSet<u64> = dirty.iter().map(|block| block.pfn().0).collect();
    drop(dirty);
    let mut clean = Vec::with_capacity(BLOCKS);
    for _ in 0..BLOCKS {
        let block = pool
            .alloc_gfp(Gfp::KERNEL | Gfp::ZERO, order)
            .map_err(failed)?;
        if block.iter().any(|&byte| byte != 0) {
            return Err(format!(
                "a __GFP_ZERO block of order {} at pfn {:#x} is not zero",
                order.get(),
                block.pfn().0
            ));
        }
        clean.push(block);
    }
    if !clean.iter().any(|block| dirtied.contains(&block.pfn().0)) {
        return Err(format!(
            "no dirtied block of order {} came back: the check proved nothing",
            order.get()
        ));
    }
    Ok(BLOCKS as u64)
}
