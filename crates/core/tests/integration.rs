//! The core's integration tests, one module per subject, in one test binary: each binary
//! of its own would monomorphise and link the core's generic allocator again (22 binaries
//! took 146 s of the test build's CPU on the 2-GHz 2-core VM, 2026-12-06). Run one
//! subject with a filter: `cargo test -p mmkit-core --test integration irq_lock`.
//!
//! Two tests keep binaries of their own: `no_heap` installs a counting global allocator,
//! and `shuttle_drain` needs the `shuttle` feature, under which the core's locks are
//! shuttle's and only run inside its model checker.

mod common;

mod bad_free;
mod buddy_behaviour;
mod buddy_model;
mod fork_model;
mod irq_lock;
mod kswapd;
mod linux_6_18;
mod lock_events;
mod mem_map_storage;
mod memory_map;
mod mm_behaviour;
mod mm_model;
mod pcp_drains;
mod pcp_interleave;
mod pcp_oracles;
mod percpu_first_chunk;
mod percpu_model;
mod percpu_oracles;
mod thp_pmd;
mod threads;
