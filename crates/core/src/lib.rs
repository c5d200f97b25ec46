//! mmkit-core: Linux's physical memory manager as a `no_std` library.
//!
//! ```
//! use mmkit_core::{CacheInfo, Caller, Gfp, Order, PageAllocator, Policy, Settings};
//! use mmkit_core::{Topology, ZoneSize, ZoneType};
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
//! The crate root holds what an embedder needs first, each with an example:
//!
//! - the machine: [`Topology`] from a memory map ([`MemoryRange`], [`PfnRange`],
//!   [`ZoneLimits`]) or from zone sizes ([`ZoneSize`], [`ZoneType`]), and the
//!   last-level cache ([`CacheInfo`]);
//! - the allocator and what a call takes: [`PageAllocator`], [`Caller`], [`Gfp`],
//!   [`Order`], [`Pfn`];
//! - what a call can refuse: [`AllocError`], [`FreeError`], [`BatchFreeError`],
//!   [`InitError`], [`TopologyError`], [`SettingsError`];
//! - the sysctls and the presets: [`Settings`] (`Settings::SMALL_KERNEL`, the default: no
//!   THP; `Settings::DISTRIBUTION_KERNEL`) and [`Policy`] (`Policy::V6_7`, the patch
//!   presets);
//! - the checks and snapshots: [`PageAllocator::verify`] with [`VerifyError`] and one
//!   [`ZoneCensus`] per zone, and [`ZoneInfo`], `/proc/zoneinfo` as data.
//!
//! Everything else lives in the module that names it, with the Linux file it follows:
//!
//! - [`page`]: pfns, orders and the 16-byte page descriptor (`include/linux/mm_types.h`).
//! - [`frame`]: [`frame::FrameAllocator`], the by-order and by-`Layout` interface a kernel
//!   allocates frames through, and adapters to other crates' traits (feature `x86_64`).
//! - [`page_alloc`]: zones, the buddy allocator, GFP and alloc flags, drains, CPU hotplug
//!   (`mm/page_alloc.c`, `mm/mm_init.c`), and the formula modules, pure functions of
//!   their arguments: [`page_alloc::watermark`], [`page_alloc::pcp`] and
//!   [`page_alloc::pcp_sizing`].
//! - [`mm`]: the mapping layer: folios, page tables, rmap, LRU, memcg, swap, reclaim and
//!   kswapd (`mm/memory.c`, `mm/rmap.c`, `mm/vmscan.c`).
//! - [`percpu`]: the percpu allocator: chunks, area map hints, populate/depopulate,
//!   balance work (`mm/percpu.c`, v5.14).
//! - [`policy`]: the presets' parts, one switch per patch ([`policy::PcpPolicy`],
//!   [`policy::MmPolicy`], …).
//! - [`topology`]: the machine description: nodes, zones, CPUs and the last-level cache.
//! - [`settings`]: the sysctls (`vm.min_free_kbytes` and friends) with Linux's validity rules.
//! - [`views`]: Linux's text formats (`/proc/zoneinfo`, `/proc/buddyinfo`,
//!   `/proc/vmstat`) and the same data as plain structs.
//! - `internals` (feature `internals`): the simulator's, replayer's and runtime's hooks;
//!   not a stable API.
//! - [`sync`]: the lock facade: the raw lock an embedder picks for every zone and pageset
//!   lock ([`PageAllocator::with_lock`], e.g. one that disables interrupts), and the
//!   model checker's.
//!
//! The baseline is Linux v6.7; `docs/ARCHITECTURE.md` records where we differ and why.

#![no_std]
// `unsafe` is forbidden, except that the `x86_64` adapter implements that crate's two
// `unsafe` traits (`frame.rs`), the model checker's raw lock implements `lock_api`'s
// (`sync.rs`, feature `shuttle`), and `internals` declares its exclusive frees `unsafe fn`
// (a contract for the caller; the core has no `unsafe` block); with any of these features
// on it is denied everywhere else.
#![cfg_attr(
    not(any(feature = "x86_64", feature = "shuttle", feature = "internals")),
    forbid(unsafe_code)
)]
#![cfg_attr(
    any(feature = "x86_64", feature = "shuttle", feature = "internals"),
    deny(unsafe_code)
)]
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

// The crate root is what an embedder needs first; everything else lives in the module
// that names it (see the map above), and is not re-exported here.

// The machine and its memory map.
pub use page_alloc::ZoneType;
pub use topology::{
    CacheInfo, MemoryRange, PfnRange, Topology, TopologyError, ZoneLimits, ZoneSize,
};
// The allocator and what a call takes.
pub use page::{Order, Pfn};
pub use page_alloc::{Caller, Gfp, PageAllocator};
// What a call can refuse.
pub use page_alloc::{AllocError, BatchFreeError, FreeError, InitError};
// The sysctls and the presets.
pub use policy::Policy;
pub use settings::{Settings, SettingsError};
// `verify()`, zoneinfo and the statistics snapshots.
pub use page_alloc::verify::{VerifyError, ZoneCensus};
pub use views::zoneinfo::ZoneInfo;
