#!/usr/bin/env python3
"""Anonymous-memory churn: map, touch and unmap 96 MiB of private anonymous memory in a loop.

Each round faults in 24,576 order-0 MOVABLE pages (one write per 4 KiB page) and unmaps
them at once, so the freeing CPU's pageset takes a burst of 24,576 frees (zap_pte_range's
batched frees through free_unref_folios).
Usage: anon_churn.py [SECONDS] [--cpu N] [--pause S]
  SECONDS   run this long (default: until killed)
  --cpu N   pin the process to CPU N
  --pause S sleep S seconds between rounds (default 0), so that a short recording of a
            busy machine stays small and the pagesets see idle time (decay) between bursts
"""
import mmap
import os
import sys
import time

SIZE = 96 << 20
PAGE = mmap.PAGESIZE


def parse(argv):
    """(seconds or None, cpu or None, pause)."""
    seconds = cpu = None
    pause = 0.0
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--cpu" and args:
            cpu = int(args.pop(0))
        elif arg == "--pause" and args:
            pause = float(args.pop(0))
        elif arg.replace(".", "", 1).isdigit():
            seconds = float(arg)
        else:
            sys.exit("usage: anon_churn.py [SECONDS] [--cpu N] [--pause S]")
    return seconds, cpu, pause


def main():
    seconds, cpu, pause = parse(sys.argv[1:])
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    end = None if seconds is None else time.monotonic() + seconds
    while end is None or time.monotonic() < end:
        area = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        # One byte per page faults in the page; a slice write would be a single memset
        # but also touches every page, so either way each page is allocated once.
        for offset in range(0, SIZE, PAGE):
            area[offset] = 1
        area.close()
        if pause:
            time.sleep(pause)


if __name__ == "__main__":
    main()
