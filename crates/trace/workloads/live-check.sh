#!/bin/sh
# The simulator against the kernel at small scale (docs/FIDELITY.md, "Checked against the
# simulator"): record the AF_UNIX stream (af_unix.py --mib MIB) and the compile-like build
# (compile.sh ROUNDS) RUNS times each with `mmkit trace record --command-only`, compare
# each set with `mmkit trace compare-sim`, and delete the recordings.
#
# Usage: live-check.sh [--runs N] [--mib M] [--rounds R] [--quiet-wait SECONDS] [--keep DIR]
#   --runs N        recordings of each workload (default 3)
#   --mib M         MiB the stream moves per recording, 16 M messages (default 1024)
#   --rounds R      builds per compile recording (default 3)
#   --quiet-wait S  before each recording, wait up to S seconds (default 120) for the
#                   machine to allocate under 5,000 pages/s besides us (other work shares
#                   the pagesets; compare-sim's machine% column shows how much did)
#   --keep DIR      keep the recordings in DIR instead of deleting them
# Environment: MMKIT (the mmkit binary; default: mmkit on PATH), PYTHON (default: the
# interpreter python3 resolves to, so that no wrapper script runs inside the recording).
#
# Recording needs root (tracefs). Without root this says so and compares the committed
# stream recording instead (crates/trace/tests/data/afunix-64mib.mmkit.gz), which needs
# no root: compare-sim only reads files.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
runs=3 mib=1024 rounds=3 quiet_wait=120 keep=
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --quiet-wait) quiet_wait=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "live-check.sh: unknown argument $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
done
for n in "$runs" "$mib" "$rounds" "$quiet_wait"; do
    case $n in
    '' | *[!0-9]*) echo "live-check.sh: $n is not a whole number" >&2; exit 2 ;;
    esac
done
if [ "$runs" -lt 1 ] || [ "$mib" -lt 1 ] || [ "$rounds" -lt 1 ]; then
    echo "live-check.sh: --runs, --mib and --rounds must be at least 1" >&2
    exit 2
fi
mmkit=${MMKIT:-mmkit}

if [ "$(id -u)" -ne 0 ]; then
    echo "live-check: skipped the real side: recording needs root and tracefs (uid $(id -u))."
    echo "live-check: the simulated side against the committed recording of af_unix.py --mib 64:"
    exec "$mmkit" trace compare-sim --workload unix --messages 1024 \
        "$here/../tests/data/afunix-64mib.mmkit.gz"
fi

python=${PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    dir=$keep
else
    dir=$(mktemp -d /tmp/mmkit-live-check.XXXXXX)
    trap 'rm -rf "$dir"' EXIT INT TERM
fi

# Pages the whole machine allocates per second, over one second.
alloc_rate() {
    a=$(awk '/^pgalloc_/ { s += $2 } END { printf "%.0f\n", s }' /proc/vmstat)
    sleep 1
    b=$(awk '/^pgalloc_/ { s += $2 } END { printf "%.0f\n", s }' /proc/vmstat)
    echo $((b - a))
}

wait_quiet() {
    waited=0 rate=0
    while [ "$waited" -lt "$quiet_wait" ]; do
        rate=$(alloc_rate)
        if [ "$rate" -lt 5000 ]; then
            return
        fi
        waited=$((waited + 1))
    done
    [ "$quiet_wait" -eq 0 ] && return
    echo "live-check: the machine still allocates $rate pages/s after ${quiet_wait} s; recording anyway" >&2
}

i=1
while [ "$i" -le "$runs" ]; do
    wait_quiet
    "$mmkit" trace record --command-only --out "$dir/unix-$i.mmkit.gz" -- \
        "$python" "$here/af_unix.py" --mib "$mib"
    wait_quiet
    "$mmkit" trace record --command-only --out "$dir/compile-$i.mmkit.gz" -- \
        sh "$here/compile.sh" "$rounds"
    i=$((i + 1))
done
"$mmkit" trace compare-sim --workload unix --messages $((mib * 16)) "$dir"/unix-*.mmkit.gz
echo
"$mmkit" trace compare-sim --workload kbuild "$dir"/compile-*.mmkit.gz
# The kernel's pagesets were warm when each recording began; the same runs with the
# simulated pagesets started from each recording's snapshot (count and high per CPU).
echo
"$mmkit" trace compare-sim --warm-pagesets --workload unix --messages $((mib * 16)) "$dir"/unix-*.mmkit.gz
echo
"$mmkit" trace compare-sim --warm-pagesets --workload kbuild "$dir"/compile-*.mmkit.gz
