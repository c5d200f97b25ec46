#!/bin/sh
# Record the compile-like workload on a machine with more CPUs than this one: a QEMU guest
# with C virtual CPUs, booted with virtme-ng on a packaged kernel and this machine's root
# file system (read-only 9p, so the guest runs the same mmkit binary and gcc).
#
# Usage: many-cpu-vm.sh KERNEL CPUS LOOPS ROUNDS OUT [MEM]
#   KERNEL  a vmlinuz whose modules are installed under /lib/modules (9p as modules or built in)
#   CPUS    virtual CPUs of the guest
#   LOOPS   parallel copies of `compile.sh ROUNDS` (each a `make -j2`)
#   ROUNDS  clean rebuilds each copy makes
#   OUT     the recording, written by the guest (its folder must exist; the guest writes it)
#   MEM     guest memory, default 8G
#
# Needs: qemu-system-x86, virtme-ng (`pip install virtme-ng`), root. It uses KVM when it
# works and `--disable-kvm` (TCG, software emulation) when asked with KVM=0: on a VM whose
# nested KVM cannot run the guest, TCG is the way, 20-40 times slower, and its timer ticks
# and RCU grace periods come that many times more often per unit of the guest's work.
#
# The guest side (`--guest`) runs `mmkit trace record --command-only` around the loops, with
# 16 MiB of trace buffer per CPU (CPUS x 16 MiB of the guest's memory). WHOLE=1 records
# the whole guest instead (32 MiB a CPU), with what its CPUs free in softirq (RCU callbacks freeing slab
# pages) between the loops' tasks; the guest runs nothing else but its init.
#
# APPEND=OPTIONS adds kernel boot options to the guest's command line, e.g.
# APPEND=slub_min_objects=36 gives SLUB the slab orders of a 224-CPU machine (SLUB sizes
# slabs for at least 4 x (fls(CPUs) + 1) objects, 36 from 128 CPUs on; mm/slub.c,
# `calculate_order`), so that a small guest frees the published machine's high-order
# slab blocks.
#
# TREE=DIR SECS=N records a real kernel build instead of the loops (LOOPS and ROUNDS are
# then unused): `make -j<guest CPUs> mm/ kernel/ fs/ lib/ net/` in DIR, a Linux tree
# configured and prepared on the host (`make defconfig && make prepare`, as
# kernel-build.sh does), shared read-write into the guest, for N seconds of the guest's
# time, the whole guest recorded (BUFFER_KB a CPU, default 131072: the recorder reads the
# buffers only at the end). Under TCG it is slow: 16 virtual CPUs on 2 host cores built
# 20 objects in 1,200 s (2.6 M page events), most of the recording make's walk of the
# directories (docs/EXPERIMENTS.md, "A kernel build in a guest").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)

if [ "${1:-}" = "--guest" ]; then
    loops=$2 rounds=$3 out=$4 scope=$5
    cd "$repo"
    echo "guest: $(nproc) CPUs, Linux $(uname -r), $(grep MemTotal /proc/meminfo | tr -s ' ')"
    echo "guest: boot options $(tr ' ' '\n' < /proc/cmdline | grep -v -e '^virtme' -e '^init=' | tr '\n' ' ')"
    if [ "$scope" = tree ]; then
        tree=$6 secs=$7 buffer=$8
        exec target/release/mmkit trace record --seconds "$secs" --buffer-kb "$buffer" --out "$out" -- \
            make -C "$tree" -j"$(nproc)" mm/ kernel/ fs/ lib/ net/
    fi
    only="--command-only" buffer=16384
    [ "$scope" = whole ] && only="" buffer=32768
    # shellcheck disable=SC2086 # $only is one flag or none
    exec target/release/mmkit trace record $only --buffer-kb $buffer --out "$out" -- \
        sh -c "for i in \$(seq $loops); do sh crates/trace/workloads/compile.sh $rounds & done; wait"
fi

if [ $# -lt 5 ]; then
    sed -n '2,37p' "$0" >&2
    exit 2
fi
kernel=$1 cpus=$2 loops=$3 rounds=$4 out=$5 mem=${6:-8G}
command -v vng >/dev/null || { echo "many-cpu-vm.sh: virtme-ng (vng) is not installed" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "many-cpu-vm.sh: qemu-system-x86 is not installed" >&2; exit 1; }
[ -x "$repo/target/release/mmkit" ] || { echo "many-cpu-vm.sh: build it first: cargo build --release -p mmkit-cli" >&2; exit 1; }
outdir=$(cd "$(dirname "$out")" && pwd)
accel=""
[ "${KVM:-1}" = 0 ] && accel="--disable-kvm"
scope=command
[ "${WHOLE:-0}" = 1 ] && scope=whole
tree=""
if [ -n "${TREE:-}" ]; then
    [ -f "$TREE/Makefile" ] && [ -f "$TREE/.config" ] ||
        { echo "many-cpu-vm.sh: TREE=$TREE is not a configured kernel tree" >&2; exit 1; }
    tree=$(cd "$TREE" && pwd) scope=tree
fi
# The boot options, as one argument (the script's own arguments are read by now).
set --
[ -n "${APPEND:-}" ] && set -- --append "$APPEND"
[ -n "$tree" ] && set -- "$@" --rwdir "$tree"
# shellcheck disable=SC2086 # $accel is one flag or none
vng -r "$kernel" $accel "$@" --force-9p --cpus "$cpus" -m "$mem" --rwdir "$outdir" \
    --exec "sh $here/many-cpu-vm.sh --guest $loops $rounds $outdir/$(basename "$out") $scope $tree ${SECS:-600} ${BUFFER_KB:-131072}"
