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
//! | `allocator` | the machine's zones, zonelists, settings, alloc and free |
//! | `verify` | the walker that checks every page is accounted for |

mod allocator;
mod buddy;
mod error;
mod free_area;
pub mod gfp;
mod mem_map;
pub mod pcp;
pub mod pcp_sizing;
mod types;
pub mod verify;
pub mod watermark;
mod zone;

pub use allocator::{KswapdState, PageAllocator};
pub use buddy::ZoneLocked;
pub use error::{AllocError, FreeError};
pub use gfp::{AllocFlags, Gfp};
pub use mem_map::MemMap;
pub use types::{
    CpuId, MigrateType, NodeId, ZoneType, MAX_NR_ZONES, MIGRATE_PCPTYPES, MIGRATE_TYPES,
};
pub use watermark::{WatermarkKind, ZoneWatermarks, PAGEBLOCK_ORDER, PAGEBLOCK_PAGES};
pub use zone::{Zone, ZoneEvents, ZoneFlags};

pub use crate::page::MAX_ORDER;
