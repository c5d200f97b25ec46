#!/usr/bin/env bash
# Regression guard for mmkit's hot paths, in instructions (valgrind --tool=callgrind),
# against crates/bench/callgrind-baseline.json.
#
# The runtime's order-0 fast paths: the instructions executed inside each of
# alloc_phase, free_phase, bulk_alloc_phase, bulk_free_phase, cache_alloc_phase and
# cache_free_phase of crates/bench/examples/callgrind_fastpath.rs (a fixed workload:
# rounds of 32 order-0 alloc_raw then 32 free_raw, then rounds of one
# alloc_bulk_list(32) and one free_batch, then rounds of 32 allocations from a PoolCache
# freed back into it, on a one-CPU v6.7 pool, after a warm-up), per page.
#
# The simulator's event loop: the instructions executed inside `Sim::run` (the engine,
# the workload's steps and the core's calls they make; the machine's set-up before it is
# not counted) per page event (`run_page_events`), for a short base run of kbuild,
# netperf and unix (`mmkit sim --workload W --policies base --threads 1 --scale S`, the
# `release` build the README's commands use). The speed target is in wall time, which on
# a shared VM drifts by a quarter between hours (docs/EXPERIMENTS.md, "Speed"); these
# counts do not, so they say whether a change made the simulator do less.
#
#   crates/bench/callgrind-check.sh            check; exit 1 if any count got more than
#                                              its tolerance more expensive
#   crates/bench/callgrind-check.sh --update   write this run's counts as the baseline
#
# Instruction counts are exact and repeatable for one binary whatever the machine is
# doing; a different rustc or valgrind changes them (the baseline records both), so after
# a toolchain upgrade, look at the difference and run --update. So does the profile: the
# fast-path example is built with `release-lto` (fat LTO, one codegen unit; Cargo.toml),
# the build the benchmarks are measured with, not with the faster-building `release`.
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
sim_tolerance=$(field sim_tolerance_percent)
if [[ -z "$pairs" || -z "$tolerance" || -z "$sim_tolerance" ]]; then
    echo "callgrind-check: cannot read pairs, tolerance_percent and sim_tolerance_percent from $baseline" >&2
    exit 2
fi

cd "$root"
cargo build --profile release-lto --locked --quiet -p mmkit-bench --no-default-features \
    --example callgrind_fastpath
bin="${CARGO_TARGET_DIR:-$root/target}/release-lto/examples/callgrind_fastpath"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Instructions callgrind counts inside the functions matching `$2` while the command after
# it runs; its stdout is kept in "$tmp/$1.stdout". Exits 2 if the command fails or nothing
# was counted.
instructions() {
    local name=$1 function=$2 total
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$tmp/$name.out" --collect-atstart=no \
        --toggle-collect="$function" "$@" >"$tmp/$name.stdout" 2>"$tmp/$name.stderr" || {
        cat "$tmp/$name.stderr" >&2
        exit 2
    }
    total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$tmp/$name.out")
    if [[ -z "$total" || "$total" == 0 ]]; then
        echo "callgrind-check: no instructions counted in $function ($name)" >&2
        exit 2
    fi
    echo "$total"
}

# Instructions per page inside the function `$1_phase`.
measure() {
    local total
    total=$(instructions "$1" "*::$1_phase" "$bin" "$pairs") || exit 2
    awk -v t="$total" -v p="$pairs" 'BEGIN { printf "%.1f", t / p }'
}

phases="alloc free bulk_alloc bulk_free cache_alloc cache_free"
declare -A count
for phase in $phases; do
    count[$phase]=$(measure "$phase")
done
workload=$(cat "$tmp/alloc.stdout")

# The simulator's runs: workload and --scale. Small, so that the three take about 40 s
# under callgrind on the 2-GHz 2-core VM.
sim_runs="kbuild:0.02 netperf:0.05 unix:0.05"
cargo build --release --locked --quiet -p mmkit-cli
mmkit="${CARGO_TARGET_DIR:-$root/target}/release/mmkit"

# Instructions per page event inside `Sim::run` for workload $1 at scale $2.
measure_sim() {
    local total events
    total=$(instructions "sim-$1" 'mmkit_sim::engine::event_loop::<impl mmkit_sim::engine::Sim>::run' "$mmkit" sim --workload "$1" \
        --policies base --threads 1 --json --scale "$2") || exit 2
    events=$(sed -n 's/^ *"run_page_events": *\([0-9]*\).*/\1/p' "$tmp/sim-$1.stdout" | head -n 1)
    if [[ -z "$events" || "$events" == 0 ]]; then
        echo "callgrind-check: no page events in the $1 run's JSON" >&2
        exit 2
    fi
    awk -v t="$total" -v e="$events" 'BEGIN { printf "%.1f", t / e }'
}

declare -A sim_count
for run in $sim_runs; do
    sim_count[${run%%:*}]=$(measure_sim "${run%%:*}" "${run#*:}")
done

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
  "tolerance_percent": $tolerance,
  "sim_runs": "$sim_runs",
  "sim_counted": "instructions executed inside Sim::run (callgrind --toggle-collect of mmkit_sim::engine::event_loop::<impl mmkit_sim::engine::Sim>::run) of mmkit sim --workload W --policies base --threads 1 --json --scale S (the release build), divided by the run_page_events of its JSON",
$(for run in $sim_runs; do
    echo "  \"sim_${run%%:*}_instructions_per_page_event\": ${sim_count[${run%%:*}]},"
done)
  "sim_tolerance_percent": $sim_tolerance
}
JSON
    echo "callgrind-check: baseline written to $baseline:"
    for phase in $phases; do
        echo "  $phase ${count[$phase]} instructions per page"
    done
    for run in $sim_runs; do
        echo "  sim ${run%%:*} ${sim_count[${run%%:*}]} instructions per page event"
    done
    exit 0
fi

status=0
# Compare `measured` with the baseline's field `$1`, within tolerance `$3` %, and print
# the verdict for `$4` (what was counted) in `$5` (per what).
judge() {
    local field=$1 measured=$2 tolerance=$3 name=$4 unit=$5 expected verdict
    expected=$(field "$field")
    if [[ -z "$expected" ]]; then
        echo "callgrind-check: the baseline has no $field; run --update" >&2
        exit 2
    fi
    verdict=$(awk -v m="$measured" -v b="$expected" -v t="$tolerance" 'BEGIN {
        d = (m - b) / b * 100
        v = (d > t) ? "REGRESSION" : (d < -t) ? "improved (run --update to keep it)" : "ok"
        printf "%+.1f %% %s", d, v }')
    printf 'callgrind-check: %-12s %8s instructions per %s (baseline %s, tolerance %s %%): %s\n' \
        "$name" "$measured" "$unit" "$expected" "$tolerance" "$verdict"
    if [[ "$verdict" == *REGRESSION* ]]; then
        status=1
    fi
}
for phase in $phases; do
    judge "${phase}_instructions_per_page" "${count[$phase]}" "$tolerance" "$phase" page
done
for run in $sim_runs; do
    name=${run%%:*}
    judge "sim_${name}_instructions_per_page_event" "${sim_count[$name]}" "$sim_tolerance" \
        "sim $name" "page event"
done
exit $status
