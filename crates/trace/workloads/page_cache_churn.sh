#!/bin/sh
# Page-cache churn (issue 20, item 11): read a 512 MiB file, then drop the clean page cache
# (`echo 1 > /proc/sys/vm/drop_caches`, root), in a loop, beside a loop that creates and
# deletes 200 small files. The reads refill MOVABLE order-0 lists (readahead folios of
# order 0 and above); drop_caches frees the cache in batches (free_unref_folios).
# Usage: page_cache_churn.sh [--pause S] [DIR]   (runs until killed)
#   --pause S  read the file in 16 MiB pieces with S seconds between them (default 0), so
#              that a short recording of the whole machine stays small
#   DIR        where the 512 MiB file and the small files are made, in DIR/mmkit-page-cache-churn
#              (default /tmp); removed on exit, and reused by the next run when a SIGKILL
#              (`mmkit trace record --seconds` ends the process group) left them behind
set -eu
pause=0
if [ "${1:-}" = --pause ]; then
    pause=$2
    shift 2
fi
base=${1:-/tmp}
dir=$base/mmkit-page-cache-churn
rm -rf "$dir"
mkdir -p "$dir"
small=
cleanup() {
    [ -n "$small" ] && kill "$small" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
dd if=/dev/zero of="$dir/big" bs=1M count=512 status=none
sync
(
    while :; do
        for i in $(seq 1 200); do echo "$i" > "$dir/small.$i"; done
        for i in $(seq 1 200); do rm -f "$dir/small.$i"; done
    done
) &
small=$!
while :; do
    i=0
    while [ "$i" -lt 32 ]; do
        dd if="$dir/big" of=/dev/null bs=1M count=16 skip=$((i * 16)) status=none
        [ "$pause" = 0 ] || sleep "$pause"
        i=$((i + 1))
    done
    echo 1 > /proc/sys/vm/drop_caches
done
