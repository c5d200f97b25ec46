//! The CLI's tests, one module per command, in one test binary: they run `mmkit` as a
//! user does, and a binary each only linked the same test harness fourteen times and ran
//! them one after another. Run one command's tests with a filter: `cargo test -p mmkit-cli
//! --test integration sim_cli`.
//!
//! `bench_cli` keeps a binary of its own: .ci/run runs it again with the C/C++ peers
//! (feature `peers`).

mod common;
// Serialises the tests that switch the kernel's tracing on, with mmkit-trace's tests.
#[path = "../../trace/tests/common/tracefs_lock.rs"]
mod tracefs_lock;

mod bad_input;
mod calibrate_cli;
mod compare_sim_cli;
mod demo_report;
mod demo_seeds_cli;
mod pcp_script_cli;
mod percpu_cli;
mod reclaim_cli;
mod shard_cli;
mod sim_cli;
mod stress_cli;
mod trace_cli;
mod zoneinfo_cli;
