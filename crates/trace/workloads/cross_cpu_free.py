#!/usr/bin/env python3
"""Cross-CPU frees beside anonymous churn (issue 20, item 11).

A pipe whose writer is pinned to CPU 0 and whose reader is pinned to CPU 1: the pipe
pages the writer allocates (order 0, anon_pipe_write) are freed by the reader on the
other CPU. Beside it runs anon_churn.py (map, touch and unmap 96 MiB in a loop).
Usage: cross_cpu_free.py [--rate N] [--pause S]
  --rate N   64 KiB pipe writes per second (default 1000: 16,000 pages/s), so that a short
             recording of the whole machine stays small
  --pause S  anon_churn.py's pause between rounds (default 0.3 s)
Runs until killed (`mmkit trace record --seconds` ends it with its process group).
"""
import os
import subprocess
import sys
import time

MESSAGE = 64 * 1024


def parse(argv):
    """(rate, pause)."""
    rate, pause = 1000.0, 0.3
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--rate" and args:
            rate = float(args.pop(0))
        elif arg == "--pause" and args:
            pause = float(args.pop(0))
        else:
            sys.exit("usage: cross_cpu_free.py [--rate N] [--pause S]")
    if rate <= 0:
        sys.exit("cross_cpu_free.py: --rate must be positive")
    return rate, pause


def main():
    rate, pause = parse(sys.argv[1:])
    here = os.path.dirname(os.path.abspath(__file__))
    churn = subprocess.Popen(
        [sys.executable, os.path.join(here, "anon_churn.py"), "--pause", str(pause)]
    )
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(write_end)
        os.sched_setaffinity(0, {1})
        while os.read(read_end, MESSAGE):
            pass
        os._exit(0)
    os.close(read_end)
    os.sched_setaffinity(0, {0})
    data = b"\0" * MESSAGE
    period = 1.0 / rate
    deadline = time.monotonic()
    try:
        while True:
            os.write(write_end, data)
            deadline += period
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    finally:
        churn.kill()


if __name__ == "__main__":
    main()
