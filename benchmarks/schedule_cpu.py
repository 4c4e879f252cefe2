"""CPU seconds of Kiln's default schedules alone (``schedule_for``: the TE compute, the
schedule template and its primitives; no lowering, no C compiler), optionally against
another source tree measured in the same run.

    python benchmarks/schedule_cpu.py                        # this tree
    python benchmarks/schedule_cpu.py --ref /work/main       # this tree vs another, ratios
    python benchmarks/schedule_cpu.py --rounds 3 --repeat 5

The kernels: x86 int8 convolutions (``QConv``: 3x3 padded, strided, pointwise, dilated,
DS-CNN-like) for ``x86_64-avx512`` (u8 quads) and ``x86_64-avx2`` (int16 pairs), and
float32 ``Conv`` (3x3, strided 1x1, depthwise), ``MatMul`` and ``Softmax`` for
``x86_64-avx512`` and ``c-generic``: the schedules of ``tests/schedules``. ``--gpu``: for
``cuda-sm80`` and ``cuda-sm90`` instead, float32 convolutions (3x3, wide 3x3, depthwise)
and ``MatMul``s (tiled, matrix-vector), float16 ``MatMul`` and 3x3 convolution (tensor
cores) and ``Softmax``: the GPU tile searches and ``bind``'s launch-limit checks. Each tree runs
in a fresh process (``PYTHONPATH`` = the tree) that schedules every kernel once untimed
(imports, intrinsics, templates), then ``--repeat`` times timed (``time.process_time``,
the arithmetic memo cleared and the collector paused before each pass, as a compile
does); the minimum is printed, and of it the CPU inside the Schedule primitives
(``sch.split``, ``sch.compute_at`` ...: the outermost call of each). With ``--ref`` the
trees alternate for ``--rounds`` rounds and the
table gives the best of each and the ratio (below 1: this tree is faster).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_cpu import run_child  # noqa: E402  (benchmarks/compile_cpu.py)

_CHILD = r"""
import gc, importlib, json, sys, time
import numpy as np
from toolchain.graph.ir import Node, Value
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401 (the ops)
from toolchain.quantize.fixed_point import quantize_multipliers, shift_table
from toolchain.schedules import make_node
from toolchain.schedules.registry import schedule_for
from toolchain.tir.memo import clear_cache

repeat = int(sys.argv[1])
rng = np.random.default_rng(0)


def qconv(c, m, h, w, k, stride, pads, dil, dtype):
    oh = (h + pads[0] + pads[2] - dil * (k - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dil * (k - 1) - 1) // stride + 1
    mult, shift = quantize_multipliers(rng.uniform(2e-4, 2e-2, m))
    ins = [Value("x", (1, c, h, w), dtype),
           Value.constant("w", rng.integers(-127, 128, (m, c, k, k)).astype(np.int8)),
           Value.constant("b", rng.integers(-5000, 5000, m).astype(np.int32)),
           Value.constant("m", mult), Value.constant("s", shift_table(shift))]
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    attrs = {"x_zero_point": 3, "y_zero_point": -2, "out_min": lo, "out_max": hi,
             "out_dtype": dtype, "strides": [stride, stride], "pads": list(pads),
             "dilations": [dil, dil], "group": 1}
    return Node("QConv", "conv", ins, [Value("y", (1, m, oh, ow), dtype)], attrs)


def w(*shape):
    return rng.standard_normal(shape).astype(np.float32)


KERNELS = []
GPU = len(sys.argv) > 2 and sys.argv[2] == "gpu"
for t in (("cuda-sm80", "cuda-sm90") if GPU else ()):
    KERNELS += [
        (make_node("Conv", [(1, 16, 28, 28), w(32, 16, 3, 3)], {"pads": [1, 1, 1, 1]}), t),
        (make_node("Conv", [(1, 64, 14, 14), w(128, 64, 3, 3)], {"pads": [1, 1, 1, 1]}), t),
        (make_node("Conv", [(1, 32, 14, 14), w(32, 1, 3, 3)],
                   {"pads": [1, 1, 1, 1], "group": 32}), t),
        (make_node("MatMul", [(64, 256), w(256, 128)]), t),
        (make_node("MatMul", [(1, 512), w(512, 10)]), t),
        (make_node("MatMul", [((128, 256), "float16"), ((256, 128), "float16")]), t),
        (make_node("Conv", [((1, 64, 16, 16), "float16"), ((64, 64, 3, 3), "float16")],
                   {"pads": [1, 1, 1, 1]}), t)]
for t in (() if GPU else ("x86_64-avx512", "x86_64-avx2")):
    for cfg in [(3, 16, 9, 11, 3, 1, (1, 1, 1, 1), 1), (5, 12, 7, 7, 3, 2, (1, 1, 1, 1), 1),
                (8, 20, 6, 13, 1, 1, (0, 0, 0, 0), 1), (6, 16, 9, 9, 3, 1, (2, 2, 2, 2), 2),
                (16, 32, 5, 25, 3, 1, (1, 1, 1, 1), 1)]:
        KERNELS.append((qconv(*cfg, "int8"), t))
for t in (() if GPU else ("x86_64-avx512", "c-generic")):
    KERNELS += [
        (make_node("Conv", [(1, 16, 28, 28), w(32, 16, 3, 3)], {"pads": [1, 1, 1, 1]}), t),
        (make_node("Conv", [(1, 32, 28, 28), w(64, 32, 1, 1)], {"strides": [2, 2]}), t),
        (make_node("Conv", [(1, 32, 14, 14), w(32, 1, 3, 3)],
                   {"pads": [1, 1, 1, 1], "group": 32}), t),
        (make_node("MatMul", [(16, 64), w(64, 48)]), t),
        (make_node("Softmax", [(8, 100)]), t)]


# CPU inside the Schedule primitives (the outermost call of each), apart from the rest
from toolchain.tir.schedule import Schedule
inside = [0.0, 0]


def timed(method):
    def call(*args, **kwargs):
        if inside[1]:
            return method(*args, **kwargs)
        inside[1] = 1
        t0 = time.process_time()
        try:
            return method(*args, **kwargs)
        finally:
            inside[0] += time.process_time() - t0
            inside[1] = 0
    return call


for name, value in list(vars(Schedule).items()):
    if callable(value) and hasattr(value, "__wrapped__"):  # the traced primitives
        setattr(Schedule, name, timed(value))


def run():
    for node, t in KERNELS:
        schedule_for(node, t)


run()
gc.collect()
gc.freeze()
best, prims = float("inf"), float("inf")
for _ in range(repeat):
    clear_cache()  # the arithmetic memo, as a compile starts it (toolchain.tir.memo)
    # the shared-memory counts of earlier passes (a tree that keeps them): each pass
    # counts its own, as a fresh process does
    getattr(importlib.import_module("toolchain.schedules.gpu.gemm"),
            "SHARED_BYTES_IN_PROCESS", set()).clear()
    gc.disable()
    inside[0] = 0.0
    t0 = time.process_time()
    run()
    best = min(best, time.process_time() - t0)
    prims = min(prims, inside[0])
    gc.enable()
    gc.collect()
print(json.dumps({"cpu_s": best, "primitives_s": prims, "kernels": len(KERNELS)}))
"""


def measure(tree: Path, repeat: int, gpu: bool = False) -> dict:
    """The kernels scheduled in a fresh process on ``tree`` (``gpu``: the CUDA set):
    ``{"cpu_s": best, ...}``."""
    return run_child(tree, _CHILD, [str(repeat)] + (["gpu"] if gpu else []), "scheduling")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, default=None, help="another Kiln source tree")
    ap.add_argument("--repeat", type=int, default=5, help="timed passes per process")
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree (alternating)")
    ap.add_argument("--gpu", action="store_true", help="the CUDA kernels instead (see above)")
    args = ap.parse_args(argv)
    trees = [("this", ROOT)] + ([("ref", args.ref.resolve())] if args.ref else [])
    rows: dict[str, list[dict]] = {name: [] for name, _ in trees}
    n = 0
    for _ in range(args.rounds):
        for name, tree in reversed(trees):
            r = measure(tree, args.repeat, args.gpu)
            rows[name].append(r)
            n = r["kernels"]
    print(f"{n} kernels scheduled, CPU s per pass (best of {args.repeat}) per round: "
          "schedule_for (of it inside the Schedule primitives)")
    for name, _ in trees:
        print(f"  {name:5} " + "  ".join(f"{r['cpu_s']:.3f} ({r['primitives_s']:.3f})"
                                         for r in rows[name]))
    if args.ref:
        for key, what in (("cpu_s", "schedule_for"), ("primitives_s", "primitives")):
            ratio = min(r[key] for r in rows["this"]) / min(r[key] for r in rows["ref"])
            print(f"  this/ref, {what} (best of each): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
