#!/bin/sh
# Record netperf-like SCTP traffic (sctp_stream.py: one association over loopback, 10 KiB
# messages, sender on CPU 0, receiver on CPU 1) in a QEMU guest whose kernel has SCTP,
# which this machine's kernel does not. The guest is booted with virtme-ng on a packaged
# kernel and this machine's root file system (read-only 9p), as many-cpu-vm.sh does.
#
# Usage: sctp-vm.sh KERNEL SECONDS OUT
#   KERNEL   a vmlinuz whose modules (sctp.ko among them) are under /lib/modules
#   SECONDS  how long the sender sends
#   OUT      the recording, written by the guest (its folder must exist)
# The guest prints "sctp_stream.py: N messages ..."; give the N of each recording to
# `mmkit trace blocks --per N,N,... FILES` for blocks per message.
#
# Needs: qemu-system-x86, virtme-ng (`pip install virtme-ng`), root. KVM=0 runs the guest
# under TCG (software emulation), for a machine whose nested KVM cannot run it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)

if [ "${1:-}" = "--guest" ]; then
    seconds=$2 out=$3
    cd "$repo"
    modprobe sctp
    echo "guest: $(nproc) CPUs, Linux $(uname -r)"
    # The whole guest, not --command-only: the receiver's CPU runs part of the protocol's
    # softirq work in the idle task's context, and its frees fill that CPU's pagesets.
    exec target/release/mmkit trace record --buffer-kb 65536 --out "$out" -- \
        python3 crates/trace/workloads/sctp_stream.py "$seconds"
fi

if [ $# -lt 3 ]; then
    sed -n '2,16p' "$0" >&2
    exit 2
fi
kernel=$1 seconds=$2 out=$3
command -v vng >/dev/null || { echo "sctp-vm.sh: virtme-ng (vng) is not installed" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "sctp-vm.sh: qemu-system-x86 is not installed" >&2; exit 1; }
[ -x "$repo/target/release/mmkit" ] || { echo "sctp-vm.sh: build it first: cargo build --release -p mmkit-cli" >&2; exit 1; }
outdir=$(cd "$(dirname "$out")" && pwd)
accel=""
[ "${KVM:-1}" = 0 ] && accel="--disable-kvm"
# shellcheck disable=SC2086 # $accel is one flag or none
vng -r "$kernel" $accel --force-9p --cpus 2 -m 4G --rwdir "$outdir" \
    --exec "sh $here/sctp-vm.sh --guest $seconds $outdir/$(basename "$out")"
