//! mmkit-trace: record the Linux page allocator's kmem events with tracefs, parse them,
//! and replay them through mmkit-core's policies to compare predicted PCP refills and
//! drains with the kernel's own.
//!
//! | module | holds |
//! |---|---|
//! | [`parse`] | the tracefs text format and the recorder's file |
//! | [`record`] | the recorder: a tracefs guard that restores every setting it changes |
//! | [`replay`] | the replay driver over [`mmkit_core::PageAllocator`] |
//! | [`report`] | the predicted-vs-observed table and JSON |
//! | [`machine`] | this machine's zones, sysctls and LLC from `/proc` and `/sys` |
//! | [`work`] | a recorded workload's processes, blocks and refills, for a simulation of it |
//! | [`high_order`] | when a recorded workload frees blocks of orders 1–3, and what each pageset freed before |
//! | [`blocks`] | a recorded workload's blocks by order, and on which CPU and in which context each was freed |
//! | [`refills`] | the kernel's pageset refills as it made them: blocks per refill by CPU, order and migratetype |
//!
//! Linux counterpart: `include/trace/events/kmem.h` (the events), `kernel/trace/`
//! (tracefs). `docs/FIDELITY.md` reports how well the replay predicts real traces.

#![deny(missing_docs)]

pub mod blocks;
pub mod high_order;
pub mod lives;
pub mod machine;
pub mod parse;
pub mod record;
pub mod refills;
pub mod replay;
pub mod report;
pub mod work;
