#!/usr/bin/env bash
# Builds, lints and runs the two crates that use mmkit from outside the workspace, as a
# crates.io user's crates would (path dependencies with versions, no `internals`):
# kernel/ (no_std; host tests, then the library for x86_64-unknown-none when that target
# is installed) and service/ (a std binary on mmkit-runtime). Exits non-zero on any failure.
#
# They build into the workspace's target directory (.cargo/config.toml). Each is its own
# package with its own Cargo.lock, which is not committed: the first run seeds it from
# the workspace's, so they build the dependency versions the workspace tested, and cargo
# drops what they do not use.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
# .cargo/config.toml points them at the workspace's target directory.

step() { printf '\n-- %s\n' "$*"; }

for crate in kernel service; do
    [ -f "$crate/Cargo.lock" ] || cp "$root/Cargo.lock" "$crate/Cargo.lock"
    step "$crate: cargo fmt --check, cargo clippy (warnings denied)"
    (cd "$crate" && cargo fmt --check && cargo clippy --all-targets --quiet -- -D warnings)
done

step "kernel: host tests (boot from an e820 map with holes, each step verified)"
(cd kernel && cargo test --quiet)
step "kernel: the self test's log and zoneinfo"
(cd kernel && cargo test --quiet --test boot self_test_runs -- --nocapture)

step "kernel: the library for x86_64-unknown-none"
if ! command -v rustup >/dev/null; then
    echo "SKIPPED x86_64-unknown-none: rustup is not installed, so the target's core library cannot be added"
elif ! rustup target list --installed | grep -qx x86_64-unknown-none; then
    echo "SKIPPED x86_64-unknown-none: the target is not installed ('rustup target add x86_64-unknown-none')"
else
    (cd kernel && cargo build --target x86_64-unknown-none --quiet &&
        cargo clippy --target x86_64-unknown-none --quiet -- -D warnings)
    echo "built and linted"
fi

step "service: tests, then a run (4 threads, canaries, per-CPU counters, PoolCache, __GFP_ZERO)"
(cd service && cargo test --quiet && cargo run --quiet)
