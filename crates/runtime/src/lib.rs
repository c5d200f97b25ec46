//! mmkit-runtime: Linux's page allocator as a thread-safe page pool on real memory.
//!
//! ```
//! use mmkit_runtime::PagePool;
//! use mmkit_core::Order;
//!
//! let pool = PagePool::builder().memory_bytes(64 << 20).cpus(2).build()?;
//! let mut block = pool.alloc(Order::ZERO)?;   // 4 KiB, freed when `block` drops
//! block[..5].copy_from_slice(b"hello");
//! assert_eq!(&block[..5], b"hello");
//! drop(block);
//! assert_eq!(pool.verify()?.iter().map(|z| z.allocated).sum::<u64>(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A [`PagePool`] reserves one `mmap`ed arena, lays the zones of `mmkit-core` over it, and
//! serves each thread from the per-CPU pageset of the CPU it runs on. Background threads do
//! what Linux's do: the per-CPU vmstat tick (PCP `high` decay) once per `stat_interval`,
//! and a kswapd per node that runs the core's kswapd loop, with a [`Reclaim`] hook as its
//! shrinker, when a zone falls below its low watermark or a watermark is boosted.
//! Allocation policy, sizing, reclaim decisions and statistics are the core's; this crate
//! adds memory, threads and the OS.
//!
//! For the hottest page users there is a [`PoolCache`]: Linux's `page_pool` recycling
//! cache, one owner thread allocating from a small array without atomics and other
//! threads giving pages back, a batch of up to 64 at a time, through a [`Recycler`] and a
//! lock-free ring.
//!
//! The same crate runs Linux's percpu allocator on real memory: [`PercpuPool`] hands out
//! per-CPU areas, and [`PerCpu`] is a typed handle to one, e.g. per-CPU counters
//! (see [`per_cpu`] and `docs/PERCPU.md`). [`MappedMemory`] runs the core's mapping layer
//! (folios, page tables, memcg, reclaim) on the pool with real files and a swap file.
//!
//! `unsafe` lives in five modules only: [`arena`] (the mapping and the block handles
//! into it), [`cpu`] (`sched_getcpu`), [`percpu_area`] (percpu chunk reservations),
//! [`per_cpu`] (the typed per-CPU handle) and [`mapped`] (the frames of mapped memory).
//! The pool cache's raw frees are `unsafe fn`s for their contract (as
//! [`PagePool::free_raw`]) but contain no `unsafe`. So are
//! [`PagePool::allocator_source`] and [`MappedMemory::with_memory`]: the core's API can
//! free a page behind its owner's back, so safe code reads the allocator through an
//! [`AllocatorView`] ([`PagePool::allocator`]) and its [`ZoneView`]s instead.

#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod arena;
mod background;
mod builder;
pub mod cpu;
mod error;
mod fault;
pub mod mapped;
pub mod per_cpu;
pub mod percpu_area;
mod pool;
mod pool_cache;
mod reclaim;
mod view;

pub use arena::PageBlock;
pub use builder::PagePoolBuilder;
pub use error::PoolError;
pub use fault::FaultConfig;
pub use mapped::{MappedError, MappedMemory};
pub use per_cpu::{PerCpu, PercpuError, PercpuPool, Zeroable};
pub use pool::{PagePool, PoolStats};
pub use pool_cache::{
    PoolCache, PoolCacheConfig, PoolCacheStats, Recycler, CACHE_REFILL, CACHE_SIZE,
};
pub use reclaim::{NoReclaim, Reclaim, ReclaimContext};
pub use view::{AllocatorView, ZoneView};
