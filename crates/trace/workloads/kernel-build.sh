#!/bin/sh
# A real kernel build's high-order (order 1-3) pageset frees, recorded on this machine:
# the input of kbuild's `kernel_blocks_per_fault` (crates/sim/src/workload/kbuild.rs).
#
# Usage (root): sh crates/trace/workloads/kernel-build.sh OUTDIR [SECONDS]
#
# Extracts Debian's linux-source-6.1 into a temporary directory, configures it with
# `make defconfig`, builds the host tools (`make prepare`, not recorded), then records
# the whole machine for SECONDS (default 30) of `make -j$(nproc) DIR/` for each of mm,
# kernel, fs, lib and net (`mmkit trace record`, 1 GiB ring buffer per CPU: a kernel
# build makes about 110,000 page events a second per CPU), and counts with `mmkit trace
# high-order --without-task kdamond` and `mmkit trace lives` (each process's faults
# over its life, beside the kbuild model's one rate). This VM runs DAMON's kdamond,
# which reclaims large page-cache folios in long runs of high-order frees; a dedicated
# build machine with memory to spare reclaims nothing, so its events are left out.
#
# With COMPARE=1 it then builds the same directories again (their objects deleted first),
# recorded command-only, and compares each recording's pageset refills and drains per
# process with the simulator's kbuild model run on the recording's processes (`mmkit
# trace compare-sim --workload kbuild`, with empty and with warm pagesets;
# docs/FIDELITY.md, "Checked against the simulator"). A stretch cut at SECONDS counts
# the processes then running with the faults they had made.
#
# Installs with apt-get what is missing: linux-source-6.1, flex, bison, libelf-dev, bc.
# Each recording is 25-60 MB; they are deleted after counting unless KEEP=1.
# MMKIT names the binary (default target/release/mmkit). BUFFER_KB sets the ring buffer
# per CPU (default 1048576, 1 GiB): the kernel allocates it on every CPU, so a machine
# of hundreds of CPUs needs less, with SECONDS shortened to match (about 110,000 events
# a second per CPU; `mmkit trace record` says how many it lost). Run so far on 2 CPUs
# and, through many-cpu-vm.sh's guests, up to 32; not yet on a published-class machine.
set -eu

OUT=${1:?usage: kernel-build.sh OUTDIR [SECONDS]}
SECONDS_EACH=${2:-30}
BUFFER_KB=${BUFFER_KB:-1048576}
MMKIT=$(realpath "${MMKIT:-target/release/mmkit}")
[ "$(id -u)" = 0 ] || { echo "kernel-build.sh: needs root (tracefs)" >&2; exit 1; }
[ -x "$MMKIT" ] || { echo "kernel-build.sh: no $MMKIT (cargo build --release)" >&2; exit 1; }

missing=""
[ -f /usr/src/linux-source-6.1.tar.xz ] || missing="$missing linux-source-6.1"
for tool in flex bison bc; do
    command -v $tool > /dev/null || missing="$missing $tool"
done
[ -f /usr/include/libelf.h ] || missing="$missing libelf-dev"
if [ -n "$missing" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y $missing > /dev/null
fi

mkdir -p "$OUT"
OUT=$(realpath "$OUT")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
tar xJf /usr/src/linux-source-6.1.tar.xz -C "$WORK"
cd "$WORK"/linux-source-6.1
make defconfig > /dev/null
make -j"$(nproc)" prepare > /dev/null
# Let the extraction's writeback and page-cache churn settle: right after it, unbound
# kworkers freed thousands of order-3 page-cache folios during the first recording.
sync
sleep 30

for dir in mm kernel fs lib net; do
    "$MMKIT" trace record --seconds "$SECONDS_EACH" --buffer-kb "$BUFFER_KB" \
        --out "$OUT/kernel-build-$dir.mmkit.gz" -- make -j"$(nproc)" "$dir/" > "$OUT/kernel-build-$dir.log" 2>&1 ||
        { tail -3 "$OUT/kernel-build-$dir.log" >&2; exit 1; }
    tail -1 "$OUT/kernel-build-$dir.log"
done

"$MMKIT" trace high-order --without-task kdamond "$OUT"/kernel-build-*.mmkit.gz
"$MMKIT" trace high-order --json --without-task kdamond "$OUT"/kernel-build-*.mmkit.gz > "$OUT/kernel-build.json"
# How the build's processes fault over their lives (the kbuild model's one rate).
"$MMKIT" trace lives "$OUT"/kernel-build-*.mmkit.gz

if [ "${COMPARE:-0}" = 1 ]; then
    for dir in mm kernel fs lib net; do
        find "$dir" -name '*.o' -delete
        "$MMKIT" trace record --command-only --seconds "$SECONDS_EACH" --buffer-kb "$BUFFER_KB" \
            --out "$OUT/kernel-build-cmd-$dir.mmkit.gz" -- make -j"$(nproc)" "$dir/" > "$OUT/kernel-build-cmd-$dir.log" 2>&1 ||
            { tail -3 "$OUT/kernel-build-cmd-$dir.log" >&2; exit 1; }
        tail -1 "$OUT/kernel-build-cmd-$dir.log"
    done
    "$MMKIT" trace compare-sim --workload kbuild "$OUT"/kernel-build-cmd-*.mmkit.gz
    "$MMKIT" trace compare-sim --workload kbuild --warm-pagesets "$OUT"/kernel-build-cmd-*.mmkit.gz
fi
[ "${KEEP:-0}" = 1 ] || rm -f "$OUT"/kernel-build-*.mmkit.gz
