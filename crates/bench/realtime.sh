#!/usr/bin/env bash
# The simulator's speed target, measured: the one-socket kbuild run the demo makes
# (`mmkit sim --workload kbuild --policies base --threads 1`) at least as fast as real
# time on one core. Runs it ROUNDS times with each binary given, alternating the binaries
# round by round (a shared VM's speed drifts by 10-25 % within an hour, so two builds are
# compared only in the same minutes), and prints each run's speed line (`mmkit sim
# --timing`), then each binary's median and range of virtual seconds per second of CPU
# time and of wall time. Checks that every binary gives the same JSON, so that a
# comparison of two builds is one of speed alone.
#
#   crates/bench/realtime.sh [BIN ...]     default: target/release/mmkit
#
# Each binary must have `mmkit sim --timing` (2026-12-07 on); for an older build, time
# `mmkit sim ... --json` with /usr/bin/time and divide its runs' `wall_ns` by that.
#
# ROUNDS (default 3) and ARGS (default "--workload kbuild --policies base --threads 1")
# override the rounds and the run, e.g. ARGS="--workload kbuild --policies base
# --threads 1 --sockets 2" for the whole 224-CPU machine; SAME_JSON=0 compares builds of
# different models (the JSON check skipped: each one's speed is over its own virtual
# seconds). Each kbuild run takes about as long as it simulates (8-9 s at the target).
# docs/EXPERIMENTS.md, "Speed", quotes its figures.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
rounds="${ROUNDS:-3}"
read -r -a run_args <<< "${ARGS:---workload kbuild --policies base --threads 1}"
if [[ $# -eq 0 ]]; then
    set -- "$root/target/release/mmkit"
fi
for bin in "$@"; do
    if [[ ! -x "$bin" ]]; then
        echo "realtime.sh: $bin is not an executable (build it: cargo build --release)" >&2
        exit 2
    fi
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for ((round = 1; round <= rounds; round++)); do
    for i in $(seq 1 $#); do
        bin="${!i}"
        if ! "$bin" sim "${run_args[@]}" --json --timing > "$tmp/out-$i.json" 2> "$tmp/err"; then
            cat "$tmp/err" >&2
            exit 1
        fi
        if ! line="$(grep '^speed: ' "$tmp/err")"; then
            echo "realtime.sh: $bin printed no speed line: a build without 'mmkit sim --timing'?" >&2
            exit 1
        fi
        echo "round $round, $bin: ${line#speed: }"
        echo "$line" >> "$tmp/speed-$i"
        if [[ $i -gt 1 && "${SAME_JSON:-1}" != 0 ]] && ! cmp -s "$tmp/out-1.json" "$tmp/out-$i.json"; then
            echo "realtime.sh: $bin's runs differ from $1's: not the same model (SAME_JSON=0 to compare anyway)" >&2
            exit 1
        fi
    done
done

# Median, least and greatest of the numbers on standard input, one a line.
summary() {
    sort -n | awk '{ v[NR] = $1 }
        END {
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "median %.3f, %.3f-%.3f", m, v[1], v[NR]
        }'
}

echo
for i in $(seq 1 $#); do
    # The speed line ends "... (X× real time), W s of wall time (Y×)".
    sed -n 's/.*(\([0-9.]*\)× real time).*(\([0-9.]*\)×)$/\1 \2/p' "$tmp/speed-$i" > "$tmp/x-$i"
    if [[ ! -s "$tmp/x-$i" ]]; then
        echo "realtime.sh: cannot read the speed lines of ${!i}" >&2
        exit 1
    fi
    printf '%s: %s runs; x real time (CPU) %s; (wall) %s\n' "${!i}" "$(wc -l < "$tmp/x-$i")" \
        "$(cut -d' ' -f1 < "$tmp/x-$i" | summary)" "$(cut -d' ' -f2 < "$tmp/x-$i" | summary)"
done
