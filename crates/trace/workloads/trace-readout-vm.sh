#!/bin/sh
# Where a many-CPU machine's trace write-out goes, in a QEMU guest (TCG) of C virtual
# CPUs booted with virtme-ng on a packaged kernel and this machine's root (read-only 9p),
# as many-cpu-vm.sh boots it. A short load: C shells each starting 40 processes.
#
# Usage: trace-readout-vm.sh KERNEL CPUS OUTDIR parts|record
#   parts   trace the load with tracefs directly, then time reading the kernel's merged
#           `trace` file, reading the per-CPU `per_cpu/cpuN/trace` files, and gzip -9/-6/-1
#           of the text (written to the guest's tmpfs)
#   record  time `mmkit trace record` of the same load (needs target/release/mmkit)
# The guest writes OUTDIR/readout.log (and, for record, OUTDIR/readout.gz); OUTDIR must
# exist. Needs: qemu-system-x86, virtme-ng (`pip install virtme-ng`), root.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
load='for c in $(seq '"${CPUS:-64}"'); do sh -c "for i in \$(seq 40); do /bin/true; done" & done; wait'

if [ "${1:-}" = "--guest" ]; then
    mode=$2 out=$3
    exec > "$out/readout.log" 2>&1
    echo "guest: $(nproc) CPUs, Linux $(uname -r)"
    if [ "$mode" = record ]; then
        cd "$repo"
        s=$(date +%s) rc=0
        target/release/mmkit trace record --buffer-kb 4096 --out "$out/readout.gz" -- sh -c "$load" || rc=$?
        # The recorder's own line gives the seconds traced; the rest is set-up and writing.
        echo "record: rc=$rc, $(( $(date +%s) - s )) s in all"
        exit 0
    fi
    T=/sys/kernel/tracing
    mountpoint -q $T || mount -t tracefs nodev $T
    echo 0 > $T/tracing_on
    echo > $T/trace
    echo 4096 > $T/buffer_size_kb
    echo mono > $T/trace_clock
    for e in mm_page_alloc mm_page_free mm_page_free_batched mm_page_alloc_zone_locked mm_page_pcpu_drain; do
        echo 1 > $T/events/kmem/$e/enable
    done
    echo 1 > $T/tracing_on
    sh -c "$load"
    echo 0 > $T/tracing_on
    s=$(date +%s); n=$(cat $T/trace | wc -l); e=$(date +%s)
    echo "merged trace: $n lines in $((e - s)) s"
    s=$(date +%s); n=$(for c in $T/per_cpu/cpu*; do cat "$c/trace"; done | wc -l); e=$(date +%s)
    echo "per-CPU traces: $n lines in $((e - s)) s"
    cat $T/trace > /tmp/readout.txt
    echo "text: $(wc -c < /tmp/readout.txt) bytes"
    for level in 9 6 1; do
        s=$(date +%s); n=$(gzip -$level -c /tmp/readout.txt | wc -c); e=$(date +%s)
        echo "gzip -$level: $n bytes in $((e - s)) s"
    done
    exit 0
fi

if [ $# -lt 4 ]; then
    sed -n '2,14p' "$0" >&2
    exit 2
fi
kernel=$1 cpus=$2 outdir=$(cd "$3" && pwd) mode=$4
case $mode in parts|record) ;; *) echo "trace-readout-vm.sh: parts or record, not $mode" >&2; exit 2 ;; esac
command -v vng >/dev/null || { echo "trace-readout-vm.sh: virtme-ng (vng) is not installed" >&2; exit 1; }
vng -r "$kernel" --disable-kvm --force-9p --cpus "$cpus" -m 8G --rwdir "$outdir" \
    --exec "CPUS=$cpus sh $here/trace-readout-vm.sh --guest $mode $outdir"
