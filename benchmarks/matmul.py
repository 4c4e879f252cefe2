"""1024^3 fp32 matmul: Kiln's scheduled kernel vs numpy's sgemm, single thread, same run.

    python benchmarks/matmul.py                    # default schedule (8x32 register tile)
    python benchmarks/matmul.py --mr 4 --nr 64     # another register tile
    python benchmarks/matmul.py --size 512 --repeat 20 --show-source

The Kiln kernel packs B into ``[N/nr][K][nr]`` panels, keeps an ``mr x nr`` tile of C in
vector registers (``cache_write(..., "local")`` + ``decompose_reduction``; the tile is split
into 16-float vectors), runs ``k`` innermost-but-one, and is built with ``-O3
-march=native``. numpy runs in a subprocess with ``OPENBLAS_NUM_THREADS=1`` and with
``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` removed (they slow OpenBLAS down on this
machine). The two are measured alternately and the best time of each is reported, by the
wall clock and by the thread's CPU time (less disturbed when other jobs share the cores):
the machine is shared, so compare the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from toolchain import te  # noqa: E402
from toolchain.driver import build  # noqa: E402
from toolchain.tir.schedule import Schedule  # noqa: E402

_NUMPY_SNIPPET = """
import json, sys, time
import numpy as np
n, repeat = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
a = rng.random((n, n), dtype=np.float32); b = rng.random((n, n), dtype=np.float32)
a @ b
wall = cpu = float("inf")
for _ in range(repeat):
    t, c = time.perf_counter(), time.thread_time()
    a @ b
    wall = min(wall, time.perf_counter() - t)
    cpu = min(cpu, time.thread_time() - c)
print(json.dumps([wall, cpu]))
"""


def matmul_schedule(n: int, mr: int = 8, nr: int = 32, vec: int = 16,
                    parallel: bool = False, pack_a: bool = False) -> Schedule:
    """The default CPU matmul schedule: packed B, ``mr x nr`` register tile, vector ``vec``.

    ``pack_a`` also packs A into ``[M/mr][K][mr]`` panels so the micro-kernel's broadcasts
    read consecutive addresses.
    """
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    packed = te.compute((n // nr, n, nr), lambda x, y, z: B[y, x * nr + z], name="packedB")
    if pack_a:
        pa = te.compute((n // mr, n, mr), lambda x, y, z: A[x * mr + z, y], name="packedA")

        def a_at(i, kk):
            return pa[i // mr, kk, i % mr]
    else:
        def a_at(i, kk):
            return A[i, kk]
    C = te.compute((n, n), lambda i, j: te.sum(a_at(i, k) * packed[j // nr, k, j % nr],
                                               axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    sch.reorder(jo, io, kk, ii, ji)          # B panel stays in L2 across io
    out = sch.cache_write(c, 0, "local")     # the register tile
    sch.reverse_compute_at(out, io)
    init = sch.decompose_reduction(c, kk)
    for block in (c, init, out):
        *_, rows, cols = sch.get_loops(block)
        cv, lanes = sch.split(cols, [None, vec])
        sch.vectorize(lanes)
        sch.unroll(cv)
        sch.unroll(rows)
    x, _, z = sch.get_loops(sch.get_block("packedB"))
    zo, zv = sch.split(z, [None, vec])
    sch.vectorize(zv)
    if parallel:
        sch.parallel(jo)
        sch.parallel(x)
    return sch


def _numpy_time(n: int, repeat: int) -> tuple[float, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    out = subprocess.run([sys.executable, "-c", _NUMPY_SNIPPET, str(n), str(repeat)], env=env,
                         capture_output=True, text=True, check=True)
    wall, cpu = json.loads(out.stdout)
    return float(wall), float(cpu)


def _kiln_time(mod, n: int, repeat: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    wall = cpu = float("inf")
    for _ in range(repeat):
        t, ct = time.perf_counter(), time.thread_time()
        mod(a, b, c)
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, time.thread_time() - ct)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--mr", type=int, default=8, help="rows of the register tile")
    p.add_argument("--nr", type=int, default=32, help="columns of the register tile")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per round")
    p.add_argument("--rounds", type=int, default=3, help="alternating kiln/numpy rounds")
    p.add_argument("--pack-a", action="store_true", help="also pack A into panels")
    p.add_argument("--show-source", action="store_true", help="print the generated C")
    args = p.parse_args(argv)
    n = args.size
    if n % args.mr or n % args.nr:
        p.error(f"--size {n} must be a multiple of --mr {args.mr} and --nr {args.nr}")
    mod = build(matmul_schedule(n, args.mr, args.nr, pack_a=args.pack_a),
                name=f"matmul_{args.mr}x{args.nr}{'_pa' if args.pack_a else ''}")
    if args.show_source:
        print(mod.get_source())
    kiln = numpy = (float("inf"), float("inf"))
    for _ in range(args.rounds):
        kiln = tuple(map(min, kiln, _kiln_time(mod, n, args.repeat)))
        numpy = tuple(map(min, numpy, _numpy_time(n, args.repeat)))
    flop = 2.0 * n * n * n
    print(f"matmul {n}x{n}x{n} fp32, single thread, register tile {args.mr}x{args.nr}")
    print(f"| {'implementation':<32} | {'GFLOP/s':>8} | {'ms':>8} | {'GFLOP/s (CPU time)':>18} |")
    print(f"| {'-' * 32} | {'-' * 8}:| {'-' * 8}:| {'-' * 18}:|")
    for label, (wall, cpu) in ((f"kiln ({mod.entry})", kiln),
                               ("numpy (OpenBLAS, 1 thread)", numpy)):
        print(f"| {label:<32} | {flop / wall / 1e9:8.1f} | {wall * 1e3:8.2f} | "
              f"{flop / cpu / 1e9:18.1f} |")
    print(f"kiln / numpy = {numpy[0] / kiln[0]:.2f} (wall clock), "
          f"{numpy[1] / kiln[1]:.2f} (thread CPU time)")
    print(f"compiler: {mod.build_info['compiler_version']}; flags: "
          f"{' '.join(mod.build_info['flags'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
