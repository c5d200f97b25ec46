#!/usr/bin/env python3
"""netperf SCTP_STREAM_MANY-like workload: one SCTP association over loopback, 10 KiB
messages from a sender pinned to CPU 0 to a receiver pinned to CPU 1.

Both ends use one-to-many (SOCK_SEQPACKET) sockets, as netperf's SCTP_STREAM_MANY does,
and the sender sends 10 KiB messages, the size LKP's netperf runs send. The kernel
allocates each message's chunk buffer and the packet buffers that carry the chunks on the
sender's CPU; which CPU frees them, and at which orders, is what a recording shows.
Needs a kernel with SCTP (`modprobe sctp`).
Usage: sctp_stream.py SECONDS [SEND_BYTES]
"""
import os
import socket
import sys
import time

PORT = 47123


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: sctp_stream.py SECONDS [SEND_BYTES]")
    seconds = float(sys.argv[1])
    size = int(sys.argv[2]) if len(sys.argv) == 3 else 10 * 1024
    server = socket.socket(socket.AF_INET, socket.SOCK_SEQPACKET, socket.IPPROTO_SCTP)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", PORT))
    server.listen(1)
    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {1})
        while True:
            data, _ = server.recvfrom(1 << 16)
            if data == b"end":
                os._exit(0)
    server.close()
    os.sched_setaffinity(0, {0})
    client = socket.socket(socket.AF_INET, socket.SOCK_SEQPACKET, socket.IPPROTO_SCTP)
    payload = b"x" * size
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        client.sendto(payload, ("127.0.0.1", PORT))
        sent += 1
    client.sendto(b"end", ("127.0.0.1", PORT))
    os.waitpid(pid, 0)
    print(f"sctp_stream.py: {sent} messages of {size} bytes in {seconds} s", file=sys.stderr)


if __name__ == "__main__":
    main()
