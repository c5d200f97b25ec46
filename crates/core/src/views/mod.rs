//! Linux's text views of memory state, and the same data as plain structs.
//!
//! - [`zoneinfo`]: `/proc/zoneinfo` (`mm/vmstat.c: zoneinfo_show_print`).
//! - [`buddyinfo`]: `/proc/buddyinfo` (`mm/vmstat.c: frag_show_print`).

pub mod buddyinfo;
pub mod zoneinfo;
