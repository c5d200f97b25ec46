#!/usr/bin/env python3
"""How long an unpinned stream's writer stays on one CPU: the scheduler's half of the
simulator's `--role-epoch-ms` (docs/EXPERIMENTS.md, "lmbench's pairs swapping roles").

Runs bw_unix.c unpinned (as lmbench runs bw_unix) under `perf record` of the scheduler's
`sched_wakeup` and `sched_migrate_task` events on every CPU, follows the writer's CPU
through them (a wake-up names the CPU the task will run on, a migration the CPU it moves
to), and prints its residences: each stretch of time on one CPU. Also the share of the
time the writer and the reader sat on the same CPU. Needs root, perf and a C compiler;
writes nothing but a temporary perf file, removed at the end.

Usage: pair_migrations.py SECONDS [tcp]
       (tcp: a loopback TCP stream of 10 KiB writes, netperf's message size, for a
       kernel without SCTP)
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


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["tcp"]):
        sys.exit("usage: pair_migrations.py SECONDS [tcp]")
    seconds = float(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "bw_unix")
        subprocess.run(["cc", "-O2", "-o", binary, os.path.join(HERE, "bw_unix.c")], check=True)
        data = os.path.join(tmp, "perf.data")
        run = subprocess.run(["perf", "record", "-q", "-a", "-o", data,
                              "-e", "sched:sched_migrate_task", "-e", "sched:sched_wakeup",
                              "--", binary, str(seconds), "unpinned", *sys.argv[2:]],
                             check=True, stderr=subprocess.PIPE, text=True)
        sys.stderr.write(run.stderr)
        pids = re.search(r"writer (\d+), reader (\d+)", run.stderr)
        writer, reader = int(pids.group(1)), int(pids.group(2))
        script = subprocess.run(["perf", "script", "-i", data, "-F", "time,event,trace"],
                                check=True, capture_output=True, text=True).stdout
    where = {}
    writer_path = []  # (time, cpu) of the writer
    same = apart = 0.0
    last = None
    for line in script.splitlines():
        m = EVENT.match(line)
        if not m or int(m.group(3)) not in (writer, reader):
            continue
        t, pid, cpu = float(m.group(1)), int(m.group(3)), int(m.group(4))
        if last is not None and len(where) == 2:
            if where[writer] == where[reader]:
                same += t - last
            else:
                apart += t - last
        last = t
        where[pid] = cpu
        if pid == writer:
            writer_path.append((t, cpu))
    if len(writer_path) < 2:
        sys.exit("pair_migrations.py: too few scheduler events of the writer to follow it")
    stays = []
    start, cpu = writer_path[0]
    for t, c in writer_path[1:]:
        if c != cpu:
            stays.append(t - start)
            start, cpu = t, c
    stays.append(writer_path[-1][0] - start)
    span = sum(stays)
    print(f"followed the writer for {span:.2f} s: {len(stays) - 1} changes of CPU, "
          f"{(len(stays) - 1) / span:.1f} per second")
    print(f"residence on one CPU: mean {1e3 * statistics.mean(stays):.1f} ms, "
          f"median {1e3 * statistics.median(stays):.1f} ms, "
          f"longest {max(stays):.3f} s, "
          f"time-weighted mean {sum(s * s for s in stays) / span:.3f} s")
    if same + apart > 0:
        print(f"writer and reader on the same CPU {100 * same / (same + apart):.1f} % of the time")


if __name__ == "__main__":
    main()
