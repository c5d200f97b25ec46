#!/usr/bin/env python3
"""lmbench bw_unix-like workload: an AF_UNIX stream between two CPUs.

The writer is pinned to CPU 0 and sends 64 KiB messages; the reader is pinned to CPU 1
and reads them. Socket buffers are allocated on CPU 0 (orders 0-3) and freed on CPU 1.
Usage: af_unix.py [SECONDS]   (default: until killed)
       af_unix.py --mib N     (exactly N MiB, that is 16 N messages, then exit: a fixed
                               amount of work, so that counts compare per message)
"""
import os
import socket
import sys
import time

MESSAGE = 64 * 1024


def parse(argv):
    """(seconds, messages): at most one of them is not None."""
    if len(argv) == 2 and argv[0] == "--mib":
        mib = int(argv[1])
        if mib <= 0:
            sys.exit("af_unix.py: --mib needs a positive number of MiB")
        return None, mib * (1 << 20) // MESSAGE
    if len(argv) == 1:
        return float(argv[0]), None
    if not argv:
        return None, None
    sys.exit("usage: af_unix.py [SECONDS] | --mib N")


def main():
    seconds, messages = parse(sys.argv[1:])
    writer, reader = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        writer.close()
        os.sched_setaffinity(0, {1})
        while True:
            data = reader.recv(MESSAGE)
            if not data:
                os._exit(0)
    reader.close()
    os.sched_setaffinity(0, {0})
    payload = b"x" * MESSAGE
    end = None if seconds is None else time.monotonic() + seconds
    sent = 0
    try:
        while (end is None or time.monotonic() < end) and (messages is None or sent < messages):
            writer.sendall(payload)
            sent += 1
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    writer.close()
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
