//! Four threads allocate and free blocks of mixed orders on one `PagePool`, each block
//! filled with a canary that is checked before the block is freed, and count their calls
//! in per-CPU counters (`PerCpu<AtomicU64>`) whose sums must equal their own counts.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::thread;

use mmkit_core::AllocError;
use mmkit_core::Gfp;
use mmkit_core::Order;
use mmkit_runtime::cpu;
use mmkit_runtime::PageBlock;
use mmkit_runtime::PagePool;
use mmkit_runtime::PerCpu;
use mmkit_runtime::PercpuPool;
use mmkit_runtime::PoolError;

use crate::rng::Rng;
use crate::THREADS;

/// The orders drawn, as a service's mix: mostly single pages, some small multi-page
/// blocks; and every [`HUGE_EVERY`]th allocation a 2 MiB block (order 9).
const ORDERS: [u8; 12] = [0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5];

/// One allocation in this many is of order 9. Its canary is 2 MiB to write and check,
/// which an unoptimised build does at a few hundred MB/s.
const HUGE_EVERY: u64 = 64;

/// Blocks one thread holds at most.
const LIVE_MAX: usize = 64;

/// One allocation in this many asks for `__GFP_ZERO` (and checks it got zeroes).
const ZERO_EVERY: u64 = 8;

/// What the threads did, together.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// Blocks allocated (and freed).
    pub blocks: u64,
    /// Pages in them.
    pub pages: u64,
    /// Blocks asked for with `__GFP_ZERO`, all found zero.
    pub zeroed: u64,
}

/// The per-CPU counters every thread adds to.
struct Counters<'percpu> {
    allocs: PerCpu<'percpu, AtomicU64>,
    frees: PerCpu<'percpu, AtomicU64>,
}

/// Run [`THREADS`] threads of `rounds` operations each, thread `t` pinned to CPU `t` of
/// both pools (`cpu::pin_thread`: its pageset and its per-CPU counters' copy);
/// `damage_one_canary` makes thread 0 write into its first block behind the canary's
/// back. Fails on a damaged canary, a non-zero `__GFP_ZERO` block, a refused call, or
/// counters that do not add up, CPU by CPU and summed.
pub fn run(
    pool: &PagePool,
    percpu: &PercpuPool,
    rounds: u64,
    damage_one_canary: bool,
) -> Result<Totals, String> {
    let counter = || {
        percpu
            .counter()
            .map_err(|error| format!("percpu counter: {error}"))
    };
    let counters = Counters {
        allocs: counter()?,
        frees: counter()?,
    };
    let results: Vec<Result<Totals, String>> = thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let counters = &counters;
                let damage = damage_one_canary && thread == 0;
                scope.spawn(move || worker(pool, counters, thread, rounds, damage))
            })
            .collect();
        threads
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("a worker panicked".into()))
            })
            .collect()
    });
    let mut totals = Totals::default();
    for (thread, result) in results.into_iter().enumerate() {
        let one = result?;
        // Each thread was pinned to its own CPU, so it counted in that CPU's copies only.
        let copies = (
            counters.allocs.per_cpu(thread),
            counters.frees.per_cpu(thread),
        );
        let counted = (
            copies.0.load(Ordering::Relaxed),
            copies.1.load(Ordering::Relaxed),
        );
        if counted != (one.blocks, one.blocks) {
            return Err(format!(
                "CPU {thread}'s counters say {} allocations and {} frees, its thread {} of each",
                counted.0, counted.1, one.blocks
            ));
        }
        totals.blocks += one.blocks;
        totals.pages += one.pages;
        totals.zeroed += one.zeroed;
    }
    let (allocs, frees) = (counters.allocs.sum(), counters.frees.sum());
    if (allocs, frees) != (totals.blocks, totals.blocks) {
        return Err(format!(
            "per-CPU counters say {allocs} allocations and {frees} frees, the threads {} of each",
            totals.blocks
        ));
    }
    Ok(totals)
}

/// One thread: allocate (half the time, while it holds fewer than [`LIVE_MAX`] blocks) or
/// free a random block it holds; at the end free the rest. Served from pageset `thread`.
fn worker(
    pool: &PagePool,
    counters: &Counters<'_>,
    thread: usize,
    rounds: u64,
    damage: bool,
) -> Result<Totals, String> {
    cpu::pin_thread(Some(thread as u32));
    let mut rng = Rng::new(thread as u64 + 1);
    let mut live: Vec<(PageBlock<'_>, u64)> = Vec::with_capacity(LIVE_MAX);
    let mut totals = Totals::default();
    for round in 0..rounds {
        if !live.is_empty() && (live.len() == LIVE_MAX || rng.below(2) == 0) {
            let (block, generation) = live.swap_remove(rng.below(live.len()));
            free_checked(block, generation, counters)?;
            continue;
        }
        let drawn = if round % HUGE_EVERY == HUGE_EVERY - 1 {
            9
        } else {
            ORDERS[rng.below(ORDERS.len())]
        };
        let order = Order::new(drawn).ok_or("an order above MAX_ORDER")?;
        let zero = round % ZERO_EVERY == 0;
        // `PagePool::alloc`'s flags, so that zeroed blocks come off the same lists as the
        // dirty ones.
        let user = Gfp::USER | Gfp::MOVABLE;
        let allocated = if zero {
            pool.alloc_gfp(user | Gfp::ZERO, order)
        } else {
            pool.alloc(order)
        };
        let mut block = match allocated {
            Ok(block) => block,
            Err(PoolError::Alloc(AllocError::OutOfMemory { .. })) => {
                // Memory is short for a moment: give back half of what this thread holds.
                for (block, generation) in live.drain(..live.len() / 2) {
                    free_checked(block, generation, counters)?;
                }
                continue;
            }
            Err(error) => return Err(format!("allocation of order {}: {error}", order.get())),
        };
        if zero {
            if block.iter().any(|&byte| byte != 0) {
                return Err(format!(
                    "a __GFP_ZERO block of order {} is not zero",
                    order.get()
                ));
            }
            totals.zeroed += 1;
        }
        let generation = rng.next_u64();
        block.write_canary(generation);
        if damage && totals.blocks == 0 {
            let middle = block.len() / 2;
            block[middle] ^= 0x40;
        }
        counters.allocs.add(1);
        totals.blocks += 1;
        totals.pages += order.pages();
        live.push((block, generation));
    }
    for (block, generation) in live.drain(..) {
        free_checked(block, generation, counters)?;
    }
    cpu::pin_thread(None);
    Ok(totals)
}

/// Check `block`'s canary, then free it (the handle frees on drop) and count the free.
fn free_checked(
    block: PageBlock<'_>,
    generation: u64,
    counters: &Counters<'_>,
) -> Result<(), String> {
    let damaged = block.canary_damage(generation);
    if damaged != 0 {
        return Err(format!(
            "canary damaged: {damaged} words of the order-{} block at pfn {:#x}",
            block.order().get(),
            block.pfn().0
        ));
    }
    drop(block);
    counters.frees.add(1);
    Ok(())
}
