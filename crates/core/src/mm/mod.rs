//! The mapping layer: folios, address spaces, the reverse map, and reclaim of mapped
//! memory.
//!
//! - [`folio`]: a block used as one unit, with its counts in the page descriptors.
//! - [`pte`]: page-table entries and swap entries.
//! - [`memory`]: [`Memory`], address spaces, files, faults and `munmap`.
//! - [`rmap`]: the reverse map, `folio_referenced`, `try_to_unmap` (per-page or seed 002's
//!   batched rmap removal).
//! - [`pageout`]: reclaiming a folio, `split_folio`, `MADV_PAGEOUT`.
//! - [`swap`]: swap slots.
//! - [`verify`]: the walker that checks every count against the page tables.
//!
//! LRU lists, memcg charging and kswapd/direct reclaim build on this (issue 9, in
//! progress); see `docs/ARCHITECTURE.md`.

pub mod folio;
pub mod memory;
pub mod pageout;
pub mod pte;
pub mod rmap;
pub mod swap;
pub mod verify;

pub use folio::Folio;
pub use memory::{
    Fault, FileId, Memory, Mm, MmCounters, MmError, MmId, MmStats, PageIo, Vma, VmaKind, Vpn,
};
pub use pageout::PageoutOutcome;
pub use pte::{Pte, PteState, SwapEntry};
