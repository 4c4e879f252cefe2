"""LLVM backend vs the C backend (gcc): compile time and kernel time, measured in one run.

    python benchmarks/llvm.py                    # every case, the host's widest target
    python benchmarks/llvm.py --quick            # a subset
    python benchmarks/llvm.py --target x86_64-avx2 --repeat 50
    python benchmarks/llvm.py --models resnet8,mobilenet_v2     # whole bundles too

Each case is one op with its default schedule (:func:`toolchain.schedules.compile_op`)
built twice for the same target descriptor: ``backend="c"`` (C source, the descriptor's
``-march`` and flags, gcc in a subprocess) and ``backend="llvm"`` (in-process through
llvmlite, the descriptor's ``llvm.cpu``). Compile times are cold (an empty
``KILN_CACHE_DIR`` for each build) and include scheduling and lowering, which both sides
share; kernel times are the best of ``--repeat`` calls through the same ctypes path, the
two sides measured alternately. Both results are checked against each other. The
machine is shared and noisy: read the ratios (LLVM / C; below 1 means LLVM is faster).
Then whole zoo models as bundles (``--models``): kernels as C or as LLVM objects, the same
C model code, weights and runtime, built for this host and timed through ctypes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

F32 = np.float32
RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(F32) * 0.1


#: (name, op, inputs (shape tuples are run-time inputs, arrays constants), attrs)
CASES = [
    ("conv3x3 64x56x56", "Conv", [(1, 64, 56, 56), _w(64, 64, 3, 3), _w(64)],
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("conv3x3 128x28x28", "Conv", [(1, 128, 28, 28), _w(128, 128, 3, 3), _w(128)],
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("dense 1x1024x1024", "MatMul", [(1, 1024), _w(1024, 1024)], {}),
    ("matmul 256^3", "MatMul", [(256, 256), _w(256, 256)], {}),
    ("softmax 64x1000", "Softmax", [(64, 1000)], {"axis": -1}),
    ("erf 1M", "Erf", [(1024, 1024)], {}),
    ("sigmoid 1M", "Sigmoid", [(1024, 1024)], {}),
    ("layernorm 128x768", "LayerNormalization", [(128, 768), _w(768), _w(768)], {"axis": -1}),
    ("maxpool 3x3/2 64x112", "MaxPool", [(1, 64, 112, 112)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("transpose 512x768", "Transpose", [(512, 768)], {"perm": [1, 0]}),
]
QUICK = {"conv3x3 64x56x56", "dense 1x1024x1024", "softmax 64x1000", "erf 1M"}


def _build(case: tuple, target: str, backend: str) -> tuple[object, float]:
    """(compiled op, cold compile seconds)."""
    from toolchain.schedules import compile_op

    _, op, inputs, attrs = case
    with tempfile.TemporaryDirectory() as d:
        os.environ["KILN_CACHE_DIR"] = d
        t0 = time.perf_counter()
        c = compile_op(op, target, inputs=inputs, attrs=attrs, backend=backend)
        return c, time.perf_counter() - t0


def _best(fn, args: list, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def models(names: list[str], target: str, repeat: int) -> None:
    """Whole zoo models: the bundle compiled with each backend (cold compile, including
    the host build of model.c, weights and runtime by cc), then the median latency of
    ``<model>_run`` through ctypes."""
    import toolchain
    from toolchain.bundle.host import BundleModule
    from toolchain.zoo import ZOO

    print(f"\nmodels ({target}): compile = kiln compile + host build, s; run = median of "
          f"{repeat}, us; ratio = LLVM / C")
    print(f"{'model':<22} {'C comp':>8} {'LLVM comp':>9} {'ratio':>6}   {'C us':>9} "
          f"{'LLVM us':>9} {'ratio':>6}")
    for name in names:
        spec = ZOO[name]
        m = spec.build()
        feeds = spec.inputs(m)
        row = {}
        for backend in ("c", "llvm"):
            with tempfile.TemporaryDirectory() as d:
                os.environ["KILN_CACHE_DIR"] = d
                t0 = time.perf_counter()
                pkg = toolchain.compile(toolchain.load(m, shape_dict=spec.input_shapes,
                                                       name=name), target,
                                        Path(d) / "b", backend=backend)
                mod = BundleModule(pkg.path)
                comp = time.perf_counter() - t0
                best = float("inf")
                for _ in range(3):
                    best = min(best, mod.time(feeds, repeat)["median"])
                row[backend] = (comp, best)
        (cc, ct), (lc, lt) = row["c"], row["llvm"]
        print(f"{name:<22} {cc:8.2f} {lc:9.2f} {lc / cc:6.2f}   {ct * 1e6:9.1f} "
              f"{lt * 1e6:9.1f} {lt / ct:6.2f}")


def main() -> int:
    from toolchain.target import host_target

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="target descriptor (default: the widest "
                    "shipped one this host runs)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default="lenet5,ds_cnn,resnet8,mobilenet_v2,"
                    "transformer_encoder", help="zoo models to compare as whole bundles "
                    "(comma-separated; empty: none)")
    args = ap.parse_args()
    target = args.target or host_target().name
    print(f"target {target}; compile: cold, seconds; kernel: best of {args.repeat}, "
          "microseconds; ratio = LLVM / C")
    print(f"{'case':<22} {'C comp':>8} {'LLVM comp':>9} {'ratio':>6}   {'C us':>9} "
          f"{'LLVM us':>9} {'ratio':>6}  max|diff|")
    comp_r, run_r = [], []
    for case in CASES:
        if args.quick and case[0] not in QUICK:
            continue
        c_op, c_s = _build(case, target, "c")
        l_op, l_s = _build(case, target, "llvm")
        feeds = [RNG.standard_normal(x).astype(F32) for x in case[2] if isinstance(x, tuple)]
        c_args, l_args = c_op.bound_args(*feeds), l_op.bound_args(*feeds)
        c_op.module(*c_args)
        l_op.module(*l_args)
        diff = max(float(np.abs(a - b).max()) for a, b in
                   zip(c_args[-len(c_op.op_schedule.output_values):],
                       l_args[-len(l_op.op_schedule.output_values):], strict=True))
        c_t = l_t = float("inf")
        for _ in range(3):  # alternate: the machine's load hits both sides alike
            c_t = min(c_t, _best(c_op.module, c_args, args.repeat))
            l_t = min(l_t, _best(l_op.module, l_args, args.repeat))
        comp_r.append(l_s / c_s)
        run_r.append(l_t / c_t)
        print(f"{case[0]:<22} {c_s:8.2f} {l_s:9.2f} {l_s / c_s:6.2f}   {c_t * 1e6:9.1f} "
              f"{l_t * 1e6:9.1f} {l_t / c_t:6.2f}  {diff:.1e}")
    gm = lambda r: float(np.exp(np.mean(np.log(r))))  # noqa: E731
    print(f"geometric mean ratio: compile {gm(comp_r):.2f}, kernel {gm(run_r):.2f}")
    names = [n for n in args.models.split(",") if n]
    if names:
        models(names[:2] if args.quick else names, target, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
