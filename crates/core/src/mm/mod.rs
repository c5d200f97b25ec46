//! The mapping layer: folios, address spaces, the reverse map, and reclaim of mapped
//! memory.
//!
//! - [`folio`]: a block used as one unit, with its counts in the page descriptors.
//! - [`pte`]: page-table entries and swap entries.
//! - [`memory`]: [`Memory`], address spaces, files, faults, `munmap`, fork and
//!   copy-on-write.
//! - [`rmap`]: the reverse map, `folio_referenced`, `try_to_unmap` (per-page or Yin 2023's
//!   batched rmap removal).
//! - [`pageout`]: reclaiming a folio, `split_folio`, `MADV_PAGEOUT`.
//! - [`huge_memory`]: PMD mappings of anonymous THPs (fault, fork, copy-on-write, zap,
//!   split) and the deferred split queue with its shrinker.
//! - [`swap`]: swap slots.
//! - [`lru`]: LRU lists per memcg and node, linked through the folio heads.
//! - [`memcg`]: the cgroup tree, charges with per-CPU batching, `memory.stat`.
//! - [`vmscan`]: reclaim from the LRU lists: cgroup limits, `memory.reclaim`, direct
//!   reclaim, kswapd, and `lruvec_lru_size` as two policies.
//! - [`kswapd`]: kswapd's balancing loop (`balance_pgdat`), which the mapping layer and
//!   the runtime's kswapd threads both run.
//! - [`verify`]: the walker that checks every count against the page tables.

pub mod folio;
pub mod huge_memory;
pub mod kswapd;
pub mod lru;
pub mod memcg;
pub mod memory;
pub mod pageout;
pub mod pte;
pub mod rmap;
pub mod swap;
pub mod verify;
pub mod vmscan;

pub use folio::Folio;
pub use memory::{
    AllocatorSource, Fault, FileId, Memory, Mm, MmCounters, MmError, MmId, MmStats, NoIo, PageIo,
    Vma, VmaKind, Vpn,
};
pub use pageout::{PageoutOutcome, ReclaimResult};
pub use pte::{Pte, PteState, SwapEntry};
