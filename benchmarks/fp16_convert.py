"""float16 kernels: the hardware conversions against the software path, same bundle, same run.

    python benchmarks/fp16_convert.py                        # every model on both CPU targets
    python benchmarks/fp16_convert.py --repeat 50 --targets x86_64-avx2

Each model (every tensor float16: fp16 attention, an fp16 MatMul with fp16 weights, the
fp16 conv net of tests/bundle/test_float16.py) is compiled once per target and its
``kernels.c`` built for the host twice: as Kiln builds it (the hardware conversions where
the flags provide them: F16C under ``c-generic``'s ``-march=native`` and
``x86_64-avx2``'s ``x86-64-v3``) and with ``-DKILN_F16_SOFTWARE`` (the runtime's portable
conversions). For each it prints gcc's CPU seconds for the build (a fresh build cache, so
nothing is reused), the best run time by the thread's CPU clock, the ratio software /
hardware, and whether the two libraries' outputs are bit-identical. Where they are not,
both are built again with ``-ffp-contract=off``: gcc fuses multiply-adds
(``-ffp-contract=fast``, the bundles' flag) where it sees them, and the conversions'
code around a product can change what it sees; without fusing the outputs must be
identical (the script exits 1 otherwise). The machine may be shared: read the ratios,
not the seconds.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F16 = TensorProto.FLOAT16


def _model(name: str, nodes: list, inputs: dict[str, list[int]], outputs: dict[str, list[int]],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info(k, F16, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, F16, s) for k, s in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def attention(heads: int = 4, seq: int = 128, dim: int = 64) -> onnx.ModelProto:
    """softmax(Q K^T / sqrt(d)) V, every tensor float16."""
    s = [1, heads, seq, dim]
    scale = np.array(1 / np.sqrt(dim), np.float16)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["qks"]),
             helper.make_node("Softmax", ["qks"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model("attn16", nodes, {"q": s, "k": s, "v": s}, {"y": s}, {"scale": scale})


def matmul(n: int = 256) -> onnx.ModelProto:
    """[n, n] x [n, n] float16 weights + bias."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    return _model("mm16", nodes, {"x": [n, n]}, {"y": [n, n]}, {"w": w, "b": b})


def conv_net() -> onnx.ModelProto:
    from tests.bundle.test_float16 import fp16_net

    return fp16_net()


MODELS = {"attention": attention, "matmul": matmul, "conv_net": conv_net}


def _inputs(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float16) for i in m.graph.input}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _best(mod, x: dict[str, np.ndarray], repeat: int) -> float:
    mod(x)
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        mod(x)
        best = min(best, time.thread_time() - t)
    return best


def measure(name: str, target: str, repeat: int, work: Path) -> tuple[list[str], bool]:
    from toolchain.bundle import compile_model
    from toolchain.bundle.host import BundleModule

    m = MODELS[name]()
    x = _inputs(m)
    path = compile_model(m, target, work / f"{name}-{target}", force=True)
    row, outs = [], []
    for flags in ((), ("-DKILN_F16_SOFTWARE",)):
        cpu = _children_cpu()
        mod = BundleModule(path, extra_flags=flags)
        row.append(_children_cpu() - cpu)
        outs.append(mod(x))
        row.append(_best(mod, x, repeat))
    differ = _differ(outs)
    verdict = "yes" if not differ else f"{differ} outputs differ"
    if differ:  # gcc's fused multiply-adds (-ffp-contract=fast) or the conversions?
        off = [BundleModule(path, extra_flags=(*f, "-ffp-contract=off"))(x)
               for f in ((), ("-DKILN_F16_SOFTWARE",))]
        if not _differ(off):
            verdict += ", none with -ffp-contract=off"
            differ = 0
    gh, th, gs, ts = row
    return ([name, target, f"{gh:.2f}", f"{gs:.2f}", f"{gs / gh:.2f}x", f"{th * 1e3:.3f}",
             f"{ts * 1e3:.3f}", f"{ts / th:.2f}x", verdict], not differ)


def _differ(outs: list[dict[str, np.ndarray]]) -> int:
    """How many float16 outputs of the two runs differ in their bits."""
    return sum(int((outs[0][k].view(np.uint16) != outs[1][k].view(np.uint16)).sum())
               for k in outs[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default="c-generic,x86_64-avx2")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    from toolchain.target import load_target, runs_here

    ok = True
    head = ["model", "target", "gcc s (hw)", "gcc s (sw)", "sw/hw", "run ms (hw)",
            "run ms (sw)", "sw/hw", "bit-identical"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KILN_CACHE_DIR"] = str(Path(tmp) / "cache")  # nothing built before
        for target in args.targets.split(","):
            if not runs_here(load_target(target)):
                print(f"(skipped {target}: this CPU cannot run it)")
                continue
            for name in args.models.split(","):
                row, same = measure(name, target, args.repeat, Path(tmp))
                ok = ok and same
                print("| " + " | ".join(row) + " |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
