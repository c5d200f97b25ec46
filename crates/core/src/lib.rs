//! mmkit-core: Linux's physical memory manager as a `no_std` library.
//!
//! ```
//! use mmkit_core::page_alloc::Caller;
//! use mmkit_core::topology::{CacheInfo, ZoneSize};
//! use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};
//!
//! // A 64 MiB machine: one node, one Normal zone, two CPUs sharing an 8 MiB cache.
//! let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
//! let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 2 };
//! let topology = Topology::x86_64(&zones, vec![2], llc, false)?;
//! let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
//!
//! // A task on CPU 0 takes a page for the kernel, through its per-CPU pageset.
//! let cpu0 = Caller::task(0);
//! let pfn = allocator.alloc_pages(cpu0, Gfp::KERNEL, Order::ZERO)?;
//! allocator.free_pages(cpu0, pfn, Order::ZERO)?;
//! allocator.verify()?; // every page accounted for
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every structure and policy of mmkit lives here, and nothing else: the simulator, the
//! trace replayer and the `std` runtime all drive this crate and none of them re-implement
//! allocator behaviour. The crate needs only `alloc` and forbids `unsafe`; pages are linked
//! by pfn, not by pointer, and page metadata fields written under different locks are
//! relaxed atomics (see [`page`]).
//!
//! Map of the crate, with the Linux file each part follows:
//!
//! - [`page`]: pfns, orders and the 16-byte page descriptor (`include/linux/mm_types.h`).
//! - [`frame`]: [`frame::FrameAllocator`], the by-order and by-`Layout` interface a kernel
//!   allocates frames through, and adapters to other crates' traits (feature `x86_64`).
//! - [`page_alloc`]: zones, the buddy allocator, watermarks, GFP and alloc flags, PCP sizing
//!   (`mm/page_alloc.c`, `mm/mm_init.c`).
//! - [`percpu`]: the percpu allocator: chunks, area map hints, populate/depopulate,
//!   balance work (`mm/percpu.c`, v5.14).
//! - [`topology`]: the machine description: nodes, zones, CPUs and the last-level cache.
//! - [`settings`]: the sysctls (`vm.min_free_kbytes` and friends) with Linux's validity rules.
//! - [`views`]: Linux's text formats (`/proc/zoneinfo`) and the same data as plain structs.
//! - `internals` (feature `internals`): the simulator's, replayer's and runtime's hooks;
//!   not a stable API.
//! - [`sync`]: the lock facade: the raw lock an embedder picks for every zone and pageset
//!   lock ([`PageAllocator::with_lock`], e.g. one that disables interrupts), and the
//!   model checker's.
//!
//! The baseline is Linux v6.7; `docs/ARCHITECTURE.md` records where we differ and why.

#![no_std]
// `unsafe` is forbidden, except that the `x86_64` adapter implements that crate's two
// `unsafe` traits (`frame.rs`) and the model checker's raw lock implements `lock_api`'s
// (`sync.rs`, feature `shuttle`); with either feature on it is denied everywhere else.
#![cfg_attr(not(any(feature = "x86_64", feature = "shuttle")), forbid(unsafe_code))]
#![cfg_attr(any(feature = "x86_64", feature = "shuttle"), deny(unsafe_code))]
#![deny(missing_docs)]

extern crate alloc;

pub mod frame;
#[cfg(feature = "internals")]
pub mod internals;
pub mod mm;
pub mod page;
pub mod page_alloc;
pub mod percpu;
pub mod policy;
pub mod settings;
pub mod sync;
pub mod topology;
pub mod views;

pub use frame::{FrameAllocator, Frames};
pub use page::{Order, Pfn};
pub use page_alloc::{
    AllocError, BatchFreeError, FreeError, Gfp, InitError, MigrateType, PageAllocator, Zone,
    ZoneType, MAX_ORDER,
};
pub use percpu::{PercpuAllocator, PercpuPolicy};
pub use policy::{
    ClampRule, CongestionBits, DrainMode, LruSizePolicy, MmPolicy, PageoutSplit, PcpPolicy, Policy,
    RmapRemoval,
};
pub use settings::{Settings, SettingsError};
pub use topology::{Topology, TopologyError, ZoneSpec};
