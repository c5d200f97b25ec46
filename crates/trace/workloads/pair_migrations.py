#!/usr/bin/env python3
"""How long an unpinned stream's writer stays on one CPU: the scheduler's half of the
simulator's `--role-epoch-ms` (docs/EXPERIMENTS.md, "The pairs' swap rate, measured").

Runs PAIRS copies of bw_unix.c unpinned (as lmbench runs bw_unix) under `perf record` of
the scheduler's `sched_wakeup` and `sched_migrate_task` events on every CPU, follows each
writer's CPU through them (a wake-up names the CPU the task will run on, a migration the
CPU it moves to), and prints its residences: each stretch of time on one CPU. Also the
share of the time each writer and its reader sat on the same CPU. Needs root, perf and a
C compiler; writes nothing but a temporary perf file, removed at the end.

Usage: pair_migrations.py SECONDS [tcp] [--pairs N]
       tcp: a loopback TCP stream of 10 KiB writes, netperf's message size, for a kernel
            without SCTP
       --pairs N: N pairs at once (default 1), e.g. a quarter as many pairs as CPUs for
            lmbench's 16 pairs on 128 CPUs
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EVENT = re.compile(r"\s*([\d.]+):\s+sched:(sched_wakeup|sched_migrate_task):.*?\bpid=(\d+)"
                   r".*?\b(?:target_cpu|dest_cpu)=(\d+)")
USAGE = "usage: pair_migrations.py SECONDS [tcp] [--pairs N]"


def parse(argv):
    """(seconds, extra bw_unix arguments, pairs)."""
    if not argv:
        sys.exit(USAGE)
    seconds, rest, extra, pairs = float(argv[0]), argv[1:], [], 1
    while rest:
        if rest[0] == "tcp":
            extra, rest = ["tcp"], rest[1:]
        elif rest[0] == "--pairs" and len(rest) > 1 and rest[1].isdigit() and int(rest[1]) > 0:
            pairs, rest = int(rest[1]), rest[2:]
        else:
            sys.exit(USAGE)
    return seconds, extra, pairs


def record(seconds, extra, pairs):
    """The pairs' (writer, reader) pids and `perf script`'s text of the run."""
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "bw_unix")
        subprocess.run(["cc", "-O2", "-o", binary, os.path.join(HERE, "bw_unix.c")], check=True)
        data = os.path.join(tmp, "perf.data")
        one = " ".join([binary, str(seconds), "unpinned", *extra])
        run = subprocess.run(["perf", "record", "-q", "-a", "-o", data,
                              "-e", "sched:sched_migrate_task", "-e", "sched:sched_wakeup",
                              "--", "sh", "-c", f"for i in $(seq {pairs}); do {one} & done; wait"],
                             check=True, stderr=subprocess.PIPE, text=True)
        sys.stderr.write(run.stderr)
        found = [(int(w), int(r)) for w, r in re.findall(r"writer (\d+), reader (\d+)", run.stderr)]
        if len(found) != pairs:
            sys.exit(f"pair_migrations.py: {len(found)} of {pairs} pairs started")
        script = subprocess.run(["perf", "script", "-i", data, "-F", "time,event,trace"],
                                check=True, capture_output=True, text=True).stdout
    return found, script


def follow(writer, reader, events):
    """The writer's residences on one CPU (s) and the seconds the pair spent on one CPU
    and on two."""
    where, path = {}, []
    same = apart = 0.0
    last = None
    for t, pid, cpu in events:
        if pid not in (writer, reader):
            continue
        if last is not None and len(where) == 2:
            if where[writer] == where[reader]:
                same += t - last
            else:
                apart += t - last
        last = t
        where[pid] = cpu
        if pid == writer:
            path.append((t, cpu))
    if len(path) < 2:
        return [], same, apart
    stays = []
    start, cpu = path[0]
    for t, c in path[1:]:
        if c != cpu:
            stays.append(t - start)
            start, cpu = t, c
    stays.append(path[-1][0] - start)
    return stays, same, apart


def main():
    seconds, extra, pairs = parse(sys.argv[1:])
    found, script = record(seconds, extra, pairs)
    events = []
    for line in script.splitlines():
        m = EVENT.match(line)
        if m:
            events.append((float(m.group(1)), int(m.group(3)), int(m.group(4))))
    changes = span = 0.0
    all_stays = []
    for writer, reader in found:
        stays, same, apart = follow(writer, reader, events)
        if not stays:
            print(f"writer {writer}: too few scheduler events to follow it")
            continue
        length = sum(stays)
        changes += len(stays) - 1
        span += length
        all_stays += stays
        shared = 100 * same / (same + apart) if same + apart > 0 else 0.0
        print(f"writer {writer}: followed {length:.2f} s, {len(stays) - 1} changes of CPU "
              f"({(len(stays) - 1) / length:.1f} per second); residence mean "
              f"{1e3 * statistics.mean(stays):.1f} ms, median {1e3 * statistics.median(stays):.1f} ms, "
              f"longest {max(stays):.3f} s, time-weighted mean {sum(s * s for s in stays) / length:.3f} s; "
              f"on its reader's CPU {shared:.1f} % of the time")
    if span == 0:
        sys.exit("pair_migrations.py: no writer could be followed")
    print(f"all {len(found)} writers: {changes:.0f} changes of CPU in {span:.2f} s, "
          f"{changes / span:.2f} per second; residence median "
          f"{1e3 * statistics.median(all_stays):.1f} ms on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
