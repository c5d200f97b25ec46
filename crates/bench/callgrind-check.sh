#!/usr/bin/env bash
# Regression guard for mmkit's order-0 fast paths. valgrind --tool=callgrind counts the
# instructions executed inside each of alloc_phase, free_phase, bulk_alloc_phase,
# bulk_free_phase, cache_alloc_phase and cache_free_phase of
# crates/bench/examples/callgrind_fastpath.rs (a fixed workload: rounds of 32 order-0
# alloc_raw then 32 free_raw, then rounds of one alloc_bulk_list(32) and one free_batch,
# then rounds of 32 allocations from a PoolCache freed back into it, on a one-CPU v6.7
# pool, after a warm-up) and compares them per page with
# crates/bench/callgrind-baseline.json.
#
#   crates/bench/callgrind-check.sh            check; exit 1 if any phase got more than
#                                              tolerance_percent more expensive
#   crates/bench/callgrind-check.sh --update   write this run's counts as the baseline
#
# Instruction counts are exact and repeatable for one binary whatever the machine is
# doing; a different rustc or valgrind changes them (the baseline records both), so after
# a toolchain upgrade, look at the difference and run --update. So does the profile: the
# example is built with `release-lto` (fat LTO, one codegen unit; Cargo.toml), the build
# the benchmarks are measured with, not with the faster-building `release`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
baseline="$here/callgrind-baseline.json"
update=false
if [[ "${1:-}" == "--update" ]]; then
    update=true
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--update]" >&2
    exit 2
fi

# A number field of the baseline (a flat JSON object, one field per line).
field() {
    sed -n "s/^ *\"$1\": *\([0-9.]*\),\{0,1\} *$/\1/p" "$baseline"
}

pairs=$(field pairs)
tolerance=$(field tolerance_percent)
if [[ -z "$pairs" || -z "$tolerance" ]]; then
    echo "callgrind-check: cannot read pairs and tolerance_percent from $baseline" >&2
    exit 2
fi

cd "$root"
cargo build --profile release-lto --locked --quiet -p mmkit-bench --no-default-features \
    --example callgrind_fastpath
bin="${CARGO_TARGET_DIR:-$root/target}/release-lto/examples/callgrind_fastpath"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Instructions per page inside the function `$1_phase`.
measure() {
    local out="$tmp/$1.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
        --toggle-collect="*::$1_phase" "$bin" "$pairs" >"$tmp/$1.stdout" 2>"$tmp/$1.stderr" || {
        cat "$tmp/$1.stderr" >&2
        exit 2
    }
    local total
    total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out")
    if [[ -z "$total" || "$total" == 0 ]]; then
        echo "callgrind-check: no instructions counted in $1_phase" >&2
        exit 2
    fi
    awk -v t="$total" -v p="$pairs" 'BEGIN { printf "%.1f", t / p }'
}

phases="alloc free bulk_alloc bulk_free cache_alloc cache_free"
declare -A count
for phase in $phases; do
    count[$phase]=$(measure "$phase")
done
workload=$(cat "$tmp/alloc.stdout")

if $update; then
    cat >"$baseline" <<JSON
{
  "workload": "crates/bench/examples/callgrind_fastpath.rs: 64 MiB pool, 1 CPU, v6.7, no background threads; 64 warm-up rounds; then rounds of 32 order-0 alloc_raw and 32 free_raw (last first); then rounds of alloc_bulk_list(32) and free_batch; then rounds of 32 PoolCache allocations freed back into it (last first)",
  "counted": "instructions executed inside each *_phase function (callgrind --toggle-collect), divided by the pages",
  "last_run": "$workload",
  "toolchain": "$(rustc --version), $(valgrind --version)",
  "pairs": $pairs,
  "alloc_instructions_per_page": ${count[alloc]},
  "free_instructions_per_page": ${count[free]},
  "bulk_alloc_instructions_per_page": ${count[bulk_alloc]},
  "bulk_free_instructions_per_page": ${count[bulk_free]},
  "cache_alloc_instructions_per_page": ${count[cache_alloc]},
  "cache_free_instructions_per_page": ${count[cache_free]},
  "tolerance_percent": $tolerance
}
JSON
    echo "callgrind-check: baseline written to $baseline:"
    for phase in $phases; do
        echo "  $phase ${count[$phase]} instructions per page"
    done
    exit 0
fi

status=0
for phase in $phases; do
    measured=${count[$phase]}
    expected=$(field "${phase}_instructions_per_page")
    verdict=$(awk -v m="$measured" -v b="$expected" -v t="$tolerance" 'BEGIN {
        d = (m - b) / b * 100
        v = (d > t) ? "REGRESSION" : (d < -t) ? "improved (run --update to keep it)" : "ok"
        printf "%+.1f %% %s", d, v }')
    if [[ -z "$expected" ]]; then
        echo "callgrind-check: the baseline has no ${phase}_instructions_per_page; run --update" >&2
        exit 2
    fi
    printf 'callgrind-check: %-12s %8s instructions per page (baseline %s, tolerance %s %%): %s\n' \
        "$phase" "$measured" "$expected" "$tolerance" "$verdict"
    if [[ "$verdict" == *REGRESSION* ]]; then
        status=1
    fi
done
exit $status
