//! The zoned buddy allocator: zones, free lists, watermarks, GFP flags, PCP sizing.
//!
//! Neighbours: [`crate::page`] supplies the descriptors the lists thread through;
//! [`crate::topology`] and [`crate::settings`] say what to build; [`crate::views`] prints
//! the result in Linux's formats. Linux counterpart: `mm/page_alloc.c`, `mm/mm_init.c`.
//!
//! | module | holds |
//! |---|---|
//! | `types` | zone types, migratetypes, node and CPU ids |
//! | `mem_map` | a zone's page descriptors and pageblock migratetypes |
//! | `free_area` | the free lists, one per order and migratetype |
//! | `buddy` | split, merge, fallback and steal, high-atomic reserve (zone lock held) |
//! | `zone` | the zone: lock, watermarks, counters, pagesets |
//! | `watermark` | watermark, reserve and `min_free_kbytes` formulas and checks |
//! | `gfp` | GFP flags and alloc flags |
//! | `pcp_sizing` | `batch`, `high_min`, `high_max`, `FREE_HIGH_BATCH`, stat thresholds |
//! | `pcp` | the per-CPU pageset state |
//! | `allocator` | the machine's zones, zonelists, settings, policy, online CPUs |
//! | `alloc` | allocation: zonelist walk, watermarks, PCP and buddy paths, slow path |
//! | `free` | free: validation, PCP commit and drain, buddy path, batched free |
//! | `bulk` | the bulk allocator |
//! | `drain` | drains, the vmstat tick (decay), `zone_pcp_disable`, CPU hotplug |
//! | `take` | taking chosen blocks off the buddy lists, presetting a pageset (trace replay) |
//! | `list` | the pfn-linked list both free lists and PCP lists use |
//! | `events` | the per-call report of zone-lock holds and PCP hits |
//! | `verify` | the walker that checks every page is accounted for |

mod alloc;
mod allocator;
mod buddy;
mod bulk;
mod drain;
mod error;
mod events;
mod free;
mod free_area;
pub mod gfp;
mod list;
mod mem_map;
pub mod pcp;
pub mod pcp_sizing;
#[cfg(any(test, feature = "internals"))]
pub(crate) mod take;
mod types;
pub mod verify;
pub mod watermark;
mod zone;

#[cfg(test)]
mod batch_model;
#[cfg(test)]
mod hotplug_race;

/// The unit tests' small machine: one 256 MiB Normal zone on two CPUs sharing a 32 MiB
/// LLC, v6.7 policy, default settings.
#[cfg(test)]
pub(crate) fn test_allocator() -> PageAllocator {
    use crate::topology::{CacheInfo, Topology, ZoneSize};
    let topology = Topology::x86_64(
        &[ZoneSize::managed(0, ZoneType::Normal, 1 << 16)],
        ::alloc::vec![2],
        CacheInfo {
            llc_bytes: 32 << 20,
            llc_shared_cpus: 2,
        },
        false,
    )
    .unwrap();
    PageAllocator::new(
        topology,
        crate::settings::Settings::default(),
        crate::Policy::V6_7,
    )
    .unwrap()
}

pub use self::alloc::AllocAttempt;
pub use allocator::{InitError, KswapdState, PageAllocator};
pub use drain::{DrainAll, DrainCaller, DrainMutexGuard, DrainWork};
pub use error::{AllocError, BatchFreeError, FreeError};
pub use events::{HoldKind, LockEvents, ZoneLockHold};
pub use gfp::{AllocFlags, Gfp};
pub use mem_map::MemMap;
pub use types::{
    Caller, Context, CpuId, MigrateType, NodeId, ZoneType, MAX_NR_ZONES, MIGRATE_PCPTYPES,
    MIGRATE_TYPES,
};
pub use watermark::{WatermarkKind, ZoneWatermarks, PAGEBLOCK_ORDER, PAGEBLOCK_PAGES};
pub use zone::{DrainReason, Zone, ZoneEvents, ZoneFlags, ZoneId};

pub use crate::page::MAX_ORDER;
