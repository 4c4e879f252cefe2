"""CPU of one RTL simulator run (``toolchain.vta.rtl.run_rtl``), this tree against another.

    python benchmarks/rtl_launch.py                    # this tree
    python benchmarks/rtl_launch.py --ref /tmp/main    # and a reference tree, alternating

Each run starts a simulator process (the Verilator model with cocotb's embedded Python)
for a 16x32x32 GEMM program with two virtual threads; the figure is the CPU of the
processes the run waited for (``RUSAGE_CHILDREN``), the best and the median of
``--repeat`` runs, after one run that builds the model (or finds it in
``$KILN_SIM_BUILD``). Each tree is measured in a fresh Python process of its own, and
the trees take turns for ``--rounds`` rounds; the last line is the ratio of the best runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = '''
import json, resource, sys
from toolchain.vta import gemm_workload
from toolchain.vta.rtl import run_rtl
wl = gemm_workload(16, 32, 32, seed=0)
def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
run_rtl(wl.vthread)
out = []
for _ in range(int(sys.argv[1])):
    c = cpu()
    dram, counters = run_rtl(wl.vthread)
    out.append(cpu() - c)
    assert (wl.read_output(dram) == wl.expected).all()
print(json.dumps(out))
'''


def measure(tree: Path, repeat: int) -> list[float]:
    """CPU seconds of ``repeat`` simulator runs of ``tree``'s ``run_rtl``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    res = subprocess.run([sys.executable, "-c", CHILD, str(repeat)], cwd=tree, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, help="a reference tree (e.g. a git archive of main)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per round (default 5)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per tree (default 2)")
    args = ap.parse_args(argv)
    trees = {"this": ROOT} if args.ref is None else {"ref": args.ref.resolve(), "this": ROOT}
    runs: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name] += measure(tree, args.repeat)
    for name, out in runs.items():
        out.sort()
        print(f"{name:5} {trees[name]}: best {out[0]:.3f} CPU s, median "
              f"{out[len(out) // 2]:.3f} ({len(out)} runs)")
    if args.ref is not None:
        print(f"this / ref (best): {runs['this'][0] / runs['ref'][0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
