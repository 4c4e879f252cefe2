"""Compile time against graph size: elementwise chains of growing length, in one run.

    python benchmarks/compile_scaling.py                       # 250 .. 20,000 nodes
    python benchmarks/compile_scaling.py --sizes 100,1000 --ops Relu

Each model is a chain of N elementwise nodes on a [1, 64] input (default: Relu and Neg
alternating; Relu reads its input twice, so before the fusion depth limit a chain of k
Relus compiled to a 2^k-leaf expression). The table gives ``kiln compile`` time (ONNX to
bundle files, c-generic), the time per node, and its ratio to the smallest size's time
per node: a ratio near 1 means compile time is linear in the graph's size. The bundle of
the smallest and the largest size is built and checked against onnxruntime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402


def chain(n: int, ops: list[str]):  # type: ignore[no-untyped-def]
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(helper.make_node(ops[i % len(ops)], [prev], [f"t{i}"]))
        prev = f"t{i}"
    g = helper.make_graph(nodes, f"chain{n}",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 64])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, prev


def main(argv: list[str] | None = None) -> int:
    from toolchain.bundle import compile_model, load_bundle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="250,2000,20000")
    ap.add_argument("--ops", default="Relu,Neg")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    ops = args.ops.split(",")
    print(f"{'nodes':>7} {'compile s':>10} {'ms/node':>8} {'ratio':>6}")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            model, out = chain(n, ops)
            t0 = time.perf_counter()
            path = compile_model(model, "c-generic", Path(tmp) / f"c{n}", progress=False)
            dt = time.perf_counter() - t0
            per = dt / n
            base = base or per
            print(f"{n:>7} {dt:>10.2f} {per * 1e3:>8.3f} {per / base:>6.2f}", flush=True)
            if n in (sizes[0], sizes[-1]):
                import onnxruntime as ort

                x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
                got = load_bundle(path)({"x": x})[out]
                want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
                assert np.allclose(got, want, rtol=1e-5, atol=1e-6), f"chain {n}: mismatch"
    return 0


if __name__ == "__main__":
    sys.exit(main())
