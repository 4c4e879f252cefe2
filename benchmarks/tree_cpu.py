"""The CPU seconds of a command and of every process it starts, daemons included: what
``benchmarks/suite_time.py``'s plugin cannot see (it counts the test's process and the
children it waited for; a Ray cluster's raylet, agents and workers are neither).

    python benchmarks/tree_cpu.py python -m pytest -q -n 0 tests/autotune/test_ray.py
    python benchmarks/tree_cpu.py --each python -m pytest ...   # a line per process

Polls ``/proc`` every 50 ms (Linux only): a process is counted from the first poll that
finds it below the command (its parent counted already) to its last poll, so a process
shorter than a poll (a short compile) may be missed and a longer one loses up to 50 ms.
Prints the total and the sum per process name, on stderr; exits with the command's
status.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(name, parent, user + system CPU s) of a live process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    end = s.rindex(")")
    fields = s[end + 2:].split()
    return s[s.index("(") + 1:end], int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ").strip()[:160]
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--each", action="store_true", help="also print a line per process")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if not args.command:
        ap.error("no command given")
    start = time.time()
    proc = subprocess.Popen(args.command)
    members, cpu, names, cmds = {proc.pid}, {}, {}, {}
    while True:
        done = proc.poll() is not None
        live = {}
        for d in os.listdir("/proc"):
            if d.isdigit() and (st := _stat(int(d))) is not None:
                live[int(d)] = st
        grew = True
        while grew:  # a child found this poll may have children of its own
            grew = False
            for pid, (_, parent, _) in live.items():
                if pid not in members and parent in members:
                    members.add(pid)
                    grew = True
        for pid in members & live.keys():
            names[pid], _, cpu[pid] = live[pid]
            if args.each and pid not in cmds:
                cmds[pid] = _cmdline(pid)
        if done:
            break
        time.sleep(0.05)
    by = collections.Counter()
    count = collections.Counter()
    for pid, c in cpu.items():
        by[names[pid]] += c
        count[names[pid]] += 1
    print(f"tree CPU {sum(cpu.values()):.2f} s in {len(cpu)} processes, wall "
          f"{time.time() - start:.1f} s", file=sys.stderr)
    for name, c in by.most_common(12):
        print(f"  {c:7.2f}  {name} x{count[name]}", file=sys.stderr)
    if args.each:
        for pid, c in sorted(cpu.items(), key=lambda kv: -kv[1]):
            print(f"  {c:7.2f}  {pid} {cmds.get(pid, names[pid])}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
