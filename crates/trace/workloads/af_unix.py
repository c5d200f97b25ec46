#!/usr/bin/env python3
"""lmbench bw_unix-like workload: an AF_UNIX stream between two CPUs.

The writer is pinned to CPU 0 and sends 64 KiB messages; the reader is pinned to CPU 1
and reads them. Socket buffers are allocated on CPU 0 (orders 0-3) and freed on CPU 1.
Usage: af_unix.py [SECONDS]   (default: until killed)
"""
import os
import socket
import sys
import time

MESSAGE = 64 * 1024


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else None
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
    try:
        while end is None or time.monotonic() < end:
            writer.sendall(payload)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    writer.close()
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
