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
# It prints first the machine it runs on (lscpu's CPU model and L3, the kernel). Right
# before each run it measures the machine's load latency (`mmkit bench latency`,
# a pointer chased through a random cycle over 256 MiB, with the first binary that has
# the command), prints it on the run's line, and at the end its median and range and how
# closely the runs' speed follows it (Pearson's r over all runs): what the run waits on
# is such loads, and on a shared VM their latency moves with the other tenants, so a
# slow round can be told from a slow build. LATENCY=0 skips it.
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

# The binary that measures the load latency: the first given that has `bench latency`.
lat_bin=""
if [[ "${LATENCY:-1}" != 0 ]]; then
    for bin in "$@"; do
        if "$bin" bench latency --help > /dev/null 2>&1; then
            lat_bin="$bin"
            break
        fi
    done
    if [[ -z "$lat_bin" ]]; then
        echo "realtime.sh: no binary has 'mmkit bench latency'; the runs go without it" >&2
    fi
fi

# The machine, first: the speed is this machine's (its CPU, its caches, its memory), so a
# figure quoted from here says on what.
# A VM may name its CPU only by brand ("AMD EPYC"), so the family and model go with it.
cpu_field() { lscpu 2> /dev/null | sed -n "s/^$1: *//p" | head -1; }
echo "machine: $(cpu_field 'Model name') (family $(cpu_field 'CPU family'), model" \
    "$(cpu_field 'Model')), $(nproc) CPUs, $(cpu_field 'L3 cache') of L3, kernel $(uname -r)"

for ((round = 1; round <= rounds; round++)); do
    for i in $(seq 1 $#); do
        bin="${!i}"
        lat=""
        if [[ -n "$lat_bin" ]]; then
            lat="$("$lat_bin" bench latency --loads 1000000 --repeat 3 --json |
                sed -n 's/.*"median_ns":\([0-9.]*\).*/\1/p')"
            if [[ -z "$lat" ]]; then
                echo "realtime.sh: cannot read $lat_bin's bench latency" >&2
                exit 1
            fi
            printf '%.1f\n' "$lat" >> "$tmp/lat-$i"
            lat="$(printf '; load latency %.1f ns' "$lat")"
        fi
        if ! "$bin" sim "${run_args[@]}" --json --timing > "$tmp/out-$i.json" 2> "$tmp/err"; then
            cat "$tmp/err" >&2
            exit 1
        fi
        if ! line="$(grep '^speed: ' "$tmp/err")"; then
            echo "realtime.sh: $bin printed no speed line: a build without 'mmkit sim --timing'?" >&2
            exit 1
        fi
        echo "round $round, $bin: ${line#speed: }$lat"
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
    if [[ -n "$lat_bin" ]]; then
        printf '  load latency before its runs, ns: %s\n' "$(summary < "$tmp/lat-$i")"
        paste -d' ' "$tmp/lat-$i" <(cut -d' ' -f1 < "$tmp/x-$i") >> "$tmp/pairs"
    fi
done

# Pearson's r of the runs' load latency and their speed (CPU), all binaries together.
if [[ -n "$lat_bin" && "$(wc -l < "$tmp/pairs")" -ge 3 ]]; then
    awk '{ n++; sx += $1; sy += $2; sxx += $1 * $1; syy += $2 * $2; sxy += $1 * $2 }
        END {
            vx = sxx - sx * sx / n; vy = syy - sy * sy / n
            if (vx > 0 && vy > 0) {
                printf "speed (CPU) against load latency over %d runs: r = %.2f\n", n, (sxy - sx * sy / n) / sqrt(vx * vy)
            }
        }' "$tmp/pairs"
fi
