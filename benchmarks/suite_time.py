"""Where the test suite's time goes, in CPU seconds per file: a profile a busy machine
barely changes (wall-clock durations grow with the load; CPU time mostly does not).

    python benchmarks/suite_time.py                          # the whole suite
    python benchmarks/suite_time.py tests/schedules -n 0     # any pytest arguments
    python benchmarks/suite_time.py --top 15 tests/bundle
    python benchmarks/suite_time.py --save rows.jsonl        # keep every test's row

Runs ``pytest`` with the given arguments (``-p no:cacheprovider`` added) and a plugin that
records, for every test, the CPU time of the process running it and of the processes it
waited for (the C compiler, QEMU, Verilator ...), then prints one row per test file (the
node-conformance functions each get their own row), largest first: CPU seconds, the
Python / subprocess split, the number of tests, and each row's share. The last lines give
the total, the CPU of each worker before its first test (start-up and collection), and
the wall time, with the wall time an ideal 2-core machine would need for that CPU.
A fresh build cache (``KILN_CACHE_DIR``) gives what a clean CI machine pays; a warm one
hides the compilers' share.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the plugin pytest loads (``-p kiln_suite_cpu``): one JSON line per test and per worker
PLUGIN = '''
import json, os, resource, time

def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime

def _write(row):
    who = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["KILN_SUITE_CPU_DIR"], who + ".jsonl"), "a") as f:
        f.write(json.dumps(row) + "\\n")

def pytest_runtest_protocol(item, nextitem):
    if not hasattr(item.config, "_kiln_cpu_started"):
        item.config._kiln_cpu_started = True
        _write(["<before the first test>", *_cpu()])
    return None

import pytest

def _timed(item):
    a = _cpu()
    t = time.time()
    yield
    b = _cpu()
    _write([item.nodeid, b[0] - a[0], b[1] - a[1], t, time.time()])

# a test's set-up (fixtures that compile models) counts with its call
pytest_runtest_setup = pytest.hookimpl(hookwrapper=True)(_timed)
pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(_timed)
'''


def row_key(nodeid: str) -> str:
    """The row a test counts in: its file, or file::function for the node tests.

    >>> row_key("tests/test_node_conformance.py::test_node_bundle[test_abs]")
    'tests/test_node_conformance.py::test_node_bundle'
    >>> row_key("tests/tir/test_ir.py::test_print[x]")
    'tests/tir/test_ir.py'
    """
    path, _, rest = nodeid.partition("::")
    if path.endswith("test_node_conformance.py") and rest:
        return f"{path}::{rest.split('[')[0]}"
    return path


def summarise(rows: list[list], top: int) -> list[str]:
    """The table's lines from the plugin's rows ``[nodeid, python_s, subprocess_s]``."""
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    starts = []
    tests = set()
    for nodeid, py, sub, *_when in rows:
        if nodeid.startswith("<"):
            starts.append(py + sub)
            continue
        k = row_key(nodeid)
        per[k][0] += py
        per[k][1] += sub
        if nodeid not in tests:
            tests.add(nodeid)
            per[k][2] += 1
    total = sum(p + s for p, s, _ in per.values()) or 1.0
    lines = [f"{'CPU s':>8} {'python':>8} {'subproc':>8} {'tests':>6} {'share':>6}  file"]
    ranked = sorted(per.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    for k, (py, sub, n) in ranked[:top]:
        lines.append(f"{py + sub:8.1f} {py:8.1f} {sub:8.1f} {n:6d} {100 * (py + sub) / total:5.1f}%"
                     f"  {k}")
    rest = ranked[top:]
    if rest:
        r = sum(p + s for _, (p, s, _n) in rest)
        lines.append(f"{r:8.1f} {'':8} {'':8} {sum(v[2] for _, v in rest):6d} "
                     f"{100 * r / total:5.1f}%  ({len(rest)} more files)")
    lines.append(f"{total:8.1f} CPU s in {len(tests)} tests; before the first test, per worker: "
                 + ", ".join(f"{s:.1f}" for s in sorted(starts)) + " CPU s")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    ap.add_argument("--save", type=Path, metavar="FILE",
                    help="also write every row (JSON lines: node id, Python CPU s, subprocess "
                         "CPU s, wall start and end, worker) to FILE")
    args, pytest_args = ap.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "kiln_suite_cpu.py").write_text(PLUGIN)
        env = {**os.environ, "KILN_SUITE_CPU_DIR": d,
               "PYTHONPATH": os.pathsep.join([d, os.environ.get("PYTHONPATH", "")])}
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "kiln_suite_cpu", *pytest_args], cwd=ROOT, env=env,
                            check=False).returncode
        wall = time.perf_counter() - t0
        rows = [[*json.loads(line), f.stem] for f in sorted(Path(d).glob("*.jsonl"))
                for line in f.read_text().splitlines()]
    if args.save:
        args.save.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("\n".join(summarise(rows, args.top)))
    cpu = sum(r[1] + r[2] for r in rows)
    print(f"wall {wall:.0f} s (pytest exit {rc}); this CPU on 2 ideal cores: {cpu / 2:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
