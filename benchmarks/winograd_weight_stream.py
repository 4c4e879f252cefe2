"""Would C12's Winograd weights be cheaper transformed on the fly? (docs/tuning.md, Results,
session 16)

Builds ``winograd_weight_stream.c`` (the F(2x2) GEMMs of ResNet-18's C12 written by hand
with AVX-512 intrinsics: the bundle's row streams, one panel stream, and the weight
transform on the fly from the 3x3 weights, 9.4 instead of 16.8 MB) for register tiles of
12 and 16 rows, runs each ``--rounds`` times alternately (cold: the weights rotate
through copies larger than the L3) and prints each variant's least time and its ratio
to ``rows`` measured in the same run::

    python benchmarks/winograd_weight_stream.py --rounds 3

Needs gcc and an AVX-512 CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SRC = Path(__file__).with_name("winograd_weight_stream.c")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="alternating runs of each build")
    p.add_argument("--mr", default="12,16", help="register tile rows, comma-separated")
    args = p.parse_args(argv)
    if shutil.which("gcc") is None:
        p.error("gcc is needed")
    work = Path(tempfile.mkdtemp(prefix="kiln-wino-stream-"))
    exes = {}
    for mr in (int(x) for x in args.mr.split(",")):
        exe = work / f"ws{mr}"
        subprocess.run(["gcc", "-O3", "-march=x86-64-v4", f"-DMR={mr}", str(SRC), "-o",
                        str(exe)], check=True)
        exes[mr] = exe
    best: dict[tuple[int, str], float] = {}
    for _ in range(args.rounds):
        for mr, exe in exes.items():
            out = subprocess.run([str(exe), "4", "10"], check=True, capture_output=True,
                                 text=True).stdout
            for line in out.splitlines():
                _, name, us = line.split()
                key = (mr, name)
                best[key] = min(best.get(key, float("inf")), float(us))
    print(f"load {os.getloadavg()[0]:.1f}; least of {args.rounds} runs x 10 calls, us")
    print("| MR | rows | panels | otf | otf/rows | transform alone (warm) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for mr in exes:
        r, pa, o, t = (best[(mr, n)] for n in ("rows", "panels", "otf", "otf_transform"))
        print(f"| {mr} | {r:,.0f} | {pa:,.0f} | {o:,.0f} | {o / r:.2f} | {t:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
