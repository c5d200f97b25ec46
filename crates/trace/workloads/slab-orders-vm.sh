#!/bin/sh
# The slab page order of each SLUB cache on guests with different CPU counts: SLUB sizes a
# cache's slabs for at least 4 x (fls(present CPUs) + 1) objects (`calculate_order` in
# mm/slub.c, up to `slub_max_order`), so on a machine with more CPUs more caches free
# blocks of orders 1-3 when their slabs empty. Boots one QEMU guest per CPU count with
# virtme-ng (as many-cpu-vm.sh does; KVM=0 for TCG) and prints, for every cache whose
# order is not the same on all of them, its object size and its order per CPU count.
#
# Usage: slab-orders-vm.sh KERNEL OUTDIR CPUS...
#   KERNEL  a vmlinuz whose modules are installed under /lib/modules
#   OUTDIR  where each guest's /proc/slabinfo is kept (slabinfo-CPUS.txt)
#   CPUS    the guests' CPU counts, e.g. 2 16 32 64
set -eu
if [ $# -lt 3 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
kernel=$1 out=$2
shift 2
command -v vng >/dev/null || { echo "slab-orders-vm.sh: virtme-ng (vng) is not installed" >&2; exit 1; }
mkdir -p "$out"
accel=""
[ "${KVM:-1}" = 0 ] && accel="--disable-kvm"
booted=""
for cpus in "$@"; do
    # A guest that does not come up is reported and left out of the table.
    # shellcheck disable=SC2086 # $accel is one flag or none
    if vng -r "$kernel" $accel --force-9p --cpus "$cpus" -m 4G --exec "cat /proc/slabinfo" \
        > "$out/slabinfo-$cpus.txt" && [ -s "$out/slabinfo-$cpus.txt" ]; then
        booted="$booted $cpus"
    else
        echo "slab-orders-vm.sh: the $cpus-CPU guest gave no slabinfo (status $?)" >&2
        rm -f "$out/slabinfo-$cpus.txt"
    fi
done
[ -n "$booted" ] || exit 1
# name objsize pagesperslab -> order, one column per CPU count.
awk '
    FNR == 1 { col++; split(FILENAME, p, /slabinfo-|\.txt/); cpus[col] = p[2] }
    /^[a-zA-Z]/ && $1 != "slabinfo" && $1 != "#" && NF > 6 {
        o = 0; for (n = $6; n > 1; n /= 2) o++
        order[$1, col] = o; size[$1] = $4; names[$1] = 1
    }
    END {
        printf "%-28s %7s", "cache", "objsize"
        for (c = 1; c <= col; c++) printf " %6s", cpus[c] " CPUs"
        printf "\n"
        for (n in names) {
            same = 1
            for (c = 2; c <= col; c++) if (order[n, c] != order[n, 1]) same = 0
            if (same) continue
            printf "%-28s %7d", n, size[n]
            for (c = 1; c <= col; c++) printf " %6s", ((n, c) in order) ? order[n, c] : "-"
            printf "\n"
        }
    }' $(for cpus in $booted; do echo "$out/slabinfo-$cpus.txt"; done) | sort -k2 -n
