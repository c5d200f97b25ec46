//! Linux's text views of memory state, and the same data as plain structs.
//!
//! - [`zoneinfo`]: `/proc/zoneinfo` (`mm/vmstat.c: zoneinfo_show_print`).
//! - [`buddyinfo`]: `/proc/buddyinfo` (`mm/vmstat.c: frag_show_print`).
//! - [`vmstat`]: the page-allocator lines of `/proc/vmstat`.

pub mod buddyinfo;
pub mod vmstat;
pub mod zoneinfo;
