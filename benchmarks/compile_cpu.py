"""CPU seconds of Kiln's compile in Python (ONNX -> bundle files, in memory), per workload,
optionally against another source tree measured in the same run.

    python benchmarks/compile_cpu.py                          # this tree
    python benchmarks/compile_cpu.py --ref /tmp/old-kiln      # this tree vs another, ratios
    python benchmarks/compile_cpu.py --workloads nodes,resnet18 --rounds 3
    python benchmarks/compile_cpu.py --workloads resnet8,mobilenet_v2 --target cuda-sm90

Workloads: ``nodes`` -- 24 single-op graphs like the ONNX node tests (Conv, pooling,
MatMul, Softmax, Gather, Resize ...; small shapes) compiled one after another for the host
target, the way the node-conformance suite compiles its ~1,540 cases; ``ops`` -- four times six
kernels (a 3x3 and a strided 1x1 convolution at 56x56x64, a softmax; ``x86_64-avx512`` and
``c-generic``) through ``compile_op``, the path of the kernel tests and of the tuner's
builders (scheduled, lowered, rendered and built: the build cache, warmed by the untimed
first pass, answers the C compiler's part), in a process whose objects are not frozen out
of the garbage collector's reach, like a builder's (the other workloads freeze them first,
as the test suite does); ``resnet8``,
``mobilenet_v1``, ``resnet18``, ``mobilenet_v2`` -- zoo models, for the host target or
``--target``. Each workload runs in a
fresh process per tree (``PYTHONPATH`` = the tree), compiles once untimed (imports, the
templates, the target), then ``--repeat`` times timed (``time.process_time``: Python's own
CPU; a compile runs no subprocess); the minimum is printed. With ``--ref`` the two trees
alternate for ``--rounds`` rounds and the table gives the best of each and the ratio
(below 1: this tree is faster). A reference tree: ``git worktree add /tmp/old-kiln
<commit>``. CPU time, so a machine loaded by other jobs changes the figures less than
wall time, but still some: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("nodes", "ops", "resnet8", "mobilenet_v1", "resnet18", "mobilenet_v2")

_CHILD = r"""
import gc, json, sys, time, warnings
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from toolchain.bundle import build_spec, render_files
from toolchain.gcpause import paused_gc

work, repeat, target = sys.argv[1], int(sys.argv[2]), sys.argv[3]
F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def model(op, ins, out_shape, attrs=None, consts=(), out_type=F):
    inputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in ins]
    inits = [numpy_helper.from_array(a, n) for n, a in consts]
    names = [n for n, _, _ in ins] + [n for n, _ in consts]
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    g = helper.make_graph([node], op.lower(), inputs,
                          [helper.make_tensor_value_info("y", out_type, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def w(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def node_models():
    x4 = [("x", F, [1, 3, 8, 8])]
    yield model("Conv", x4, [1, 4, 8, 8], {"pads": [1, 1, 1, 1]}, [("w", w(4, 3, 3, 3))])
    yield model("Conv", x4, [1, 4, 4, 4], {"strides": [2, 2]}, [("w", w(4, 3, 1, 1))])
    yield model("Conv", x4, [1, 3, 6, 6], {"group": 3}, [("w", w(3, 1, 3, 3))])
    yield model("MaxPool", x4, [1, 3, 4, 4], {"kernel_shape": [2, 2], "strides": [2, 2]})
    yield model("AveragePool", x4, [1, 3, 4, 4], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                   "ceil_mode": 1})
    yield model("GlobalAveragePool", x4, [1, 3, 1, 1])
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg"):
        yield model(op, [("x", F, [3, 4, 5])], [3, 4, 5])
    for op in ("Add", "Mul", "Sub", "Max"):
        yield model(op, [("a", F, [3, 4, 5]), ("b", F, [4, 5])], [3, 4, 5])
    yield model("MatMul", [("a", F, [3, 4])], [3, 5], consts=[("b", w(4, 5))])
    yield model("Gemm", [("a", F, [3, 4])], [3, 5], {"transB": 1}, [("b", w(5, 4))])
    yield model("Softmax", [("x", F, [3, 4, 5])], [3, 4, 5], {"axis": 1})
    yield model("ReduceMean", [("x", F, [3, 4, 5])], [3, 1, 5], {"keepdims": 1},
                [("axes", np.array([1], np.int64))])
    yield model("Transpose", [("x", F, [2, 3, 4])], [4, 2, 3], {"perm": [2, 0, 1]})
    yield model("Gather", [("x", F, [5, 4, 3])], [2, 4, 3], {"axis": 0},
                [("i", np.array([0, 3], np.int64))])
    yield model("Reshape", [("x", F, [2, 3, 4])], [6, 4],
                consts=[("s", np.array([6, 4], np.int64))])
    yield model("Resize", x4, [1, 3, 4, 4], {"mode": "cubic"},
                [("roi", np.zeros(0, np.float32)),
                 ("scales", np.array([1, 1, .5, .5], np.float32))])


def zoo(name):
    from toolchain.zoo import ZOO
    spec = ZOO[name]
    return [(spec.build(), spec.input_shapes, name)]


OPS = [("Conv", [(1, 64, 56, 56), w(64, 64, 3, 3)], {"pads": [1, 1, 1, 1]}),
       ("Conv", [(1, 64, 56, 56), w(128, 64, 1, 1)], {"strides": [2, 2]}),
       ("Softmax", [(4, 1000)], {})]
items = ([(m, None, "model") for m in node_models()] if work == "nodes"
         else [] if work == "ops" else zoo(work))


def run():
    if work == "ops":  # compile_op pauses the collector itself where the tree does
        from toolchain.schedules import compile_op
        for _ in range(4):  # a builder compiles trial after trial: collections amortised
            for t in ("x86_64-avx512", "c-generic"):
                for op, ins, attrs in OPS:
                    compile_op(op, t, inputs=ins, attrs=attrs)
    for m, shapes, name in items:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with paused_gc():
                render_files(build_spec(m, target, input_shapes=shapes, name=name,
                                        progress=False))


if work != "ops":  # the tuner's builder processes freeze nothing
    gc.collect()
    gc.freeze()
run()
best = float("inf")
for _ in range(repeat):
    t = time.process_time()
    run()
    best = min(best, time.process_time() - t)
print(json.dumps({"cpu_s": best, "models": len(items) or 8 * len(OPS)}))
"""


def run_child(tree: Path, child: str, args: list[str], what: str) -> dict:
    """Run the script ``child`` with ``args`` in a fresh process on the Kiln source
    ``tree`` (its ``toolchain`` first on the path, numeric libraries single-threaded) and
    return the JSON object its last line prints; a failure exits naming ``what``. Shared
    by the benchmarks that compare two trees (``schedule_cpu.py``, ``lower_replay.py``,
    ``vta_compile_cpu.py``)."""
    res = subprocess.run([sys.executable, "-c", child, *args], cwd=tree,
                         env=dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1"),
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{what} on {tree}: exit {res.returncode}\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure(tree: Path, work: str, repeat: int, target: str = "host") -> dict:
    """One workload in a fresh process on ``tree``: ``{"cpu_s": best, "models": n}``."""
    return run_child(tree, _CHILD, [work, str(repeat), target], work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, default=None, help="another Kiln source tree")
    ap.add_argument("--workloads", default="nodes,resnet8,mobilenet_v1",
                    help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument("--repeat", type=int, default=3, help="timed compiles per process")
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree (alternating)")
    ap.add_argument("--target", default="host", help="the target compiled for (default host)")
    args = ap.parse_args(argv)
    works = [w for w in args.workloads.split(",") if w]
    bad = [w for w in works if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {', '.join(bad)}; choose from {', '.join(WORKLOADS)}")
    trees = [("this", ROOT)] + ([("ref", args.ref.resolve())] if args.ref else [])
    print(f"{'workload':14} {'models':>6} " + " ".join(f"{n + ' CPU s':>11}" for n, _ in trees)
          + ("   this/ref" if args.ref else ""))
    for work in works:
        best: dict[str, float] = {}
        n = 0
        for _ in range(args.rounds):
            for name, tree in reversed(trees):
                r = measure(tree, work, args.repeat, args.target)
                best[name] = min(best.get(name, float("inf")), r["cpu_s"])
                n = r["models"]
        row = f"{work:14} {n:>6} " + " ".join(f"{best[name]:>11.3f}" for name, _ in trees)
        if args.ref:
            row += f"   {best['this'] / best['ref']:8.2f}"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
