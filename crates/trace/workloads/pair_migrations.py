#!/usr/bin/env python3
"""How long an unpinned stream's writer stays on one CPU: the scheduler's half of the
simulator's `--role-epoch-ms` (docs/EXPERIMENTS.md, "The pairs' swap rate, measured").

Runs PAIRS copies of bw_unix.c unpinned (as lmbench runs bw_unix) under `perf record` of
the scheduler's `sched_wakeup` and `sched_migrate_task` events on every CPU, follows each
writer's CPU through them (a wake-up names the CPU the task will run on, a migration the
CPU it moves to), and prints its residences: each stretch of time on one CPU. Also the
share of the time each writer and its reader sat on the same CPU. Needs root, perf and a
C compiler; writes nothing but a temporary perf file, removed at the end.

Over the middle 80 % of the run it also reads, without tracing, what the simulator's
other stream parameters need (docs/EXPERIMENTS.md, "What a published-class machine would
settle"): each task's `/proc/PID/schedstat` (the time it waited on a run queue and how
many times it ran, so the mean wait from being woken or preempted to running: the
scheduler's part of `--wakeup-us`) and voluntary context switches (its sleeps) per
message, and `/proc/stat`'s busy share of every CPU (LKP's `turbostat.Busy%`).

Usage: pair_migrations.py SECONDS [tcp] [pinned] [untraced] [--pairs N]
       tcp: a loopback TCP stream of 10 KiB writes, netperf's message size, for a kernel
            without SCTP
       pinned: bw_unix's writer on CPU 0 and reader on CPU 1, as the pinned clone runs
            (no migrations to follow: for the counters alone, beside an unpinned run)
       untraced: no `perf record`, so that nothing recording slows the wake-ups the
            counters measure; the migrations are then not followed
       --pairs N: N pairs at once (default 1), e.g. a quarter as many pairs as CPUs for
            lmbench's 16 pairs on 128 CPUs
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EVENT = re.compile(r"\s*([\d.]+):\s+sched:(sched_wakeup|sched_migrate_task):.*?\bpid=(\d+)"
                   r".*?\b(?:target_cpu|dest_cpu)=(\d+)")
USAGE = "usage: pair_migrations.py SECONDS [tcp] [pinned] [untraced] [--pairs N]"


def parse(argv):
    """(seconds, bw_unix's arguments after SECONDS, pairs, whether to trace)."""
    if not argv:
        sys.exit(USAGE)
    seconds, rest, extra, pairs = float(argv[0]), argv[1:], [], 1
    pinned, traced = False, True
    while rest:
        if rest[0] == "tcp":
            extra, rest = extra + ["tcp"], rest[1:]
        elif rest[0] == "pinned":
            pinned, rest = True, rest[1:]
        elif rest[0] == "untraced":
            traced, rest = False, rest[1:]
        elif rest[0] == "--pairs" and len(rest) > 1 and rest[1].isdigit() and int(rest[1]) > 0:
            pairs, rest = int(rest[1]), rest[2:]
        else:
            sys.exit(USAGE)
    if not pinned:
        extra = ["unpinned"] + extra
    return seconds, extra, pairs, traced


def task_counters(pid):
    """(ns waited on a run queue, times run, voluntary context switches) of `pid`, or
    None once it has gone."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            _, waited, runs = (int(x) for x in f.read().split()[:3])
        with open(f"/proc/{pid}/status") as f:
            sleeps = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", f.read(), re.M).group(1))
    except (OSError, ValueError, AttributeError):
        return None
    return waited, runs, sleeps


def cpu_times():
    """(busy, all) jiffies of every CPU, from `/proc/stat`'s first line."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])  # user .. steal (guest time is inside user)
    return total - idle, total


def snapshot(found):
    """Every task's counters and the CPUs' times, now."""
    return {pid: task_counters(pid) for pair in found for pid in pair}, cpu_times(), time.time()


def record(seconds, extra, pairs, traced):
    """The pairs' (writer, reader) pids, `perf script`'s text of the run, the messages
    each writer sent, and two snapshots of the tasks' counters, at 10 % and 90 % of the
    run."""
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "bw_unix")
        subprocess.run(["cc", "-O2", "-o", binary, os.path.join(HERE, "bw_unix.c")], check=True)
        data = os.path.join(tmp, "perf.data")
        one = " ".join([binary, str(seconds), *extra])
        perf = ["perf", "record", "-q", "-a", "-o", data,
                "-e", "sched:sched_migrate_task", "-e", "sched:sched_wakeup", "--"]
        run = subprocess.Popen([*(perf if traced else []),
                                "sh", "-c", f"for i in $(seq {pairs}); do {one} & done; wait"],
                               stderr=subprocess.PIPE, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(run.stderr))
        reader.start()
        started = time.time()
        time.sleep(0.1 * seconds)
        found = [(int(w), int(r)) for w, r in re.findall(r"writer (\d+), reader (\d+)", "".join(lines))]
        first = snapshot(found)
        time.sleep(max(0.0, started + 0.9 * seconds - time.time()))
        last = snapshot(found)
        reader.join()
        if run.wait() != 0:
            sys.exit(f"pair_migrations.py: the run failed: {''.join(lines)}")
        text = "".join(lines)
        sys.stderr.write(text)
        found = [(int(w), int(r)) for w, r in re.findall(r"writer (\d+), reader (\d+)", text)]
        if len(found) != pairs:
            sys.exit(f"pair_migrations.py: {len(found)} of {pairs} pairs started")
        sent = [int(n) for n in re.findall(r"bw_unix: (\d+) messages", text)]
        script = ""
        if traced:
            script = subprocess.run(["perf", "script", "-i", data, "-F", "time,event,trace"],
                                    check=True, capture_output=True, text=True).stdout
    return found, script, sent, (first, last)


def report_counters(found, seconds, sent, snapshots):
    """Print the run queue wait per run, the sleeps per message of writers and readers,
    and the CPUs' busy share, between the two snapshots."""
    (tasks0, (busy0, all0), t0), (tasks1, (busy1, all1), t1) = snapshots
    if not sent or t1 <= t0 or not tasks0:
        print("counters: none (no pair had started 10 % into the run: give it more seconds)")
        return
    # Messages in the window: each writer's rate over the whole run times the window.
    messages = sum(sent) / seconds * (t1 - t0)
    for role, index in (("writers", 0), ("readers", 1)):
        waited = runs = sleeps = 0
        for pair in found:
            pid = pair[index]
            a, b = tasks0.get(pid), tasks1.get(pid)
            if a is None or b is None:
                continue
            waited += b[0] - a[0]
            runs += b[1] - a[1]
            sleeps += b[2] - a[2]
        if runs == 0:
            print(f"{role}: not running in the middle of the run")
            continue
        print(f"{role}: run queue wait {waited / runs / 1e3:.2f} us per run ({runs} runs), "
              f"{sleeps / messages:.3f} sleeps per message ({sleeps / (t1 - t0) / len(found):.0f} "
              f"a second each)")
    busy = 100 * (busy1 - busy0) / (all1 - all0) if all1 > all0 else 0.0
    print(f"CPUs busy {busy:.1f} % of the middle {t1 - t0:.2f} s ({os.cpu_count()} CPUs); "
          f"{messages / (t1 - t0):.0f} messages a second in all")


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
    seconds, extra, pairs, traced = parse(sys.argv[1:])
    found, script, sent, snapshots = record(seconds, extra, pairs, traced)
    if not traced:
        print(f"{len(found)} pairs, untraced: no migrations followed")
        report_counters(found, seconds, sent, snapshots)
        return
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
    report_counters(found, seconds, sent, snapshots)


if __name__ == "__main__":
    main()
