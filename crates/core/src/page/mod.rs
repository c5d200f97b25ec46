//! Page frames and their metadata: the mem_map.
//!
//! - [`Pfn`] and [`Order`]: a page frame number and a block size as a power of two, with
//!   the buddy arithmetic Linux does on them (`__find_buddy_pfn`).
//! - [`Page`]: the 16-byte descriptor kept for every 4 KiB frame, Linux's `struct page`
//!   (64 bytes there). The layout and what each bit costs is in `docs/ARCHITECTURE.md`.

mod descriptor;
mod pfn;

pub use descriptor::{Page, PageFlags, PageState, NO_PFN};
pub use pfn::{Order, OrderTooLarge, Pfn, MAX_ORDER, NR_PAGE_ORDERS, PAGE_SHIFT, PAGE_SIZE};
