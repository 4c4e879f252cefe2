"""Where the test suite's C compiler time goes: every ``cc``/``gcc`` call, with its CPU.

    python benchmarks/suite_cc.py                           # the whole suite
    python benchmarks/suite_cc.py -n 0 tests/bundle         # any pytest arguments
    python benchmarks/suite_cc.py --save calls.jsonl --top 20

Runs ``pytest`` (``-p no:cacheprovider`` added) with a directory ahead of ``PATH`` that
holds ``cc`` and ``gcc``: a wrapper that runs the real compiler and records the CPU time
of the call and of everything it started (``cc1``, ``as``, ``ld``; ``os.wait4``'s
resource usage), the test that made it (``PYTEST_CURRENT_TEST``), and the size and hash
of each C source it was given. Builds that name another compiler (``arm-none-eabi-gcc``,
``nvcc``, Verilator's ``c++``) are not counted. Then prints the calls and their CPU, a
histogram by the CPU of one call, the CPU of the calls that compiled a source already
compiled with the same flags earlier in the run (folders and output names aside: what a
content cache could still save), and the test files that spent the most.

The wrapper's own start (a Python interpreter a call) adds to the run's wall time, not to
the figures. A fresh build cache (``KILN_CACHE_DIR``, ``CCACHE_DIR``) gives what a clean
CI machine pays.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the wrapper installed as ``cc`` and ``gcc``: the real compiler's path and the log's
#: come from the environment (``KILN_SUITE_CC_<NAME>``, ``KILN_SUITE_CC_LOG``)
WRAPPER = '''#!{python} -S
import hashlib, json, os, sys
name = os.path.basename(sys.argv[0])
real = os.environ["KILN_SUITE_CC_" + name.upper()]
pid = os.fork()
if pid == 0:
    os.execv(real, [real, *sys.argv[1:]])
_, status, use = os.wait4(pid, 0)
sources = []
for a in sys.argv[1:]:
    if a.endswith((".c", ".cc", ".cpp")) and os.path.isfile(a):
        with open(a, "rb") as f:
            data = f.read()
        sources.append([os.path.basename(a), hashlib.sha1(data).hexdigest()[:12], len(data)])
row = [use.ru_utime + use.ru_stime, os.environ.get("PYTEST_CURRENT_TEST", "").split(" (")[0],
       sources, sys.argv[1:]]
with open(os.environ["KILN_SUITE_CC_LOG"], "a") as f:
    f.write(json.dumps(row) + "\\n")
sys.exit(os.waitstatus_to_exitcode(status))
'''

#: the histogram's buckets: upper bound of one call's CPU seconds, label
BUCKETS = ((0.05, "up to 50 ms"), (0.1, "50-100 ms"), (0.3, "100-300 ms"), (1.0, "0.3-1 s"),
           (float("inf"), "over 1 s"))


def install(folder: Path) -> dict[str, str]:
    """Write the wrapper as ``folder/cc`` and ``folder/gcc``; the environment that points
    them at the real compilers and at the log (``folder/calls.jsonl``)."""
    env = {"KILN_SUITE_CC_LOG": str(folder / "calls.jsonl")}
    text = WRAPPER.format(python=sys.executable)
    for name in ("cc", "gcc"):
        real = shutil.which(name)
        if real is None:
            continue
        env[f"KILN_SUITE_CC_{name.upper()}"] = real
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return env


def flags_key(args: list[str]) -> tuple[str, ...]:
    """A call's flags without what differs between two builds of the same source in
    different folders (include and library folders, outputs, Kiln's weights-file macro).

    >>> flags_key(["-O3", "-I/tmp/a/include", "-o", "/tmp/a/k.o", "-c", "/tmp/a/k.c"])
    ('-O3', '-c')
    """
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if a.startswith(("-I", "-L", "-o", "-DKILN_WEIGHTS_FILE", "/")) \
                or a.endswith((".c", ".cc", ".cpp", ".o", ".so", ".a")):
            continue
        out.append(a)
    return tuple(out)


def report(rows: list[list], top: int) -> None:
    """Print the totals, the histogram, the repeated compiles and the top test files."""
    total = sum(r[0] for r in rows)
    print(f"{len(rows)} calls of cc/gcc, {total:.1f} CPU s")
    counts: dict[str, list[float]] = {label: [0, 0.0] for _, label in BUCKETS}
    for r in rows:
        label = next(lab for bound, lab in BUCKETS if r[0] <= bound)
        counts[label][0] += 1
        counts[label][1] += r[0]
    for _, label in BUCKETS:
        n, cpu = counts[label]
        print(f"  one call {label:>12}: {int(n):5d} calls {cpu:7.1f} CPU s "
              f"({100 * cpu / max(total, 1e-9):3.0f} %)")
    seen: set[tuple] = set()
    again = 0.0
    for r in rows:
        if not r[2]:
            continue
        key = (tuple(s[1] for s in r[2]), flags_key(r[3]))
        if key in seen:
            again += r[0]
        seen.add(key)
    print(f"compiles of a source already compiled with the same flags: {again:.1f} CPU s")
    by_file: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for r in rows:
        f = r[1].split("::")[0] or "<outside a test>"
        by_file[f] += r[0]
        calls[f] += 1
    print("   CPU s  calls  file")
    for f, cpu in by_file.most_common(top):
        print(f"{cpu:8.1f} {calls[f]:6d}  {f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=25, help="test files listed (default 25)")
    ap.add_argument("--save", type=Path, help="also keep every call's row (JSON lines)")
    args, pytest_args = ap.parse_known_args(argv)
    with tempfile.TemporaryDirectory(prefix="kiln-suite-cc-") as tmp:
        folder = Path(tmp)
        env = {**os.environ, **install(folder)}
        env["PATH"] = f"{folder}{os.pathsep}{env.get('PATH', '')}"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                               "-q", *pytest_args], cwd=ROOT, env=env)
        log = folder / "calls.jsonl"
        rows = [json.loads(line) for line in log.read_text().splitlines()] \
            if log.exists() else []
        if args.save:
            args.save.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(rows, args.top)
    print(f"(pytest exit {proc.returncode})")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
