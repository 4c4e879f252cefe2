"""The non-GEMM ops and a fused conv tail: Kiln's default schedules vs onnxruntime,
single-threaded, measured in the same run.

    python benchmarks/ops_misc.py                 # every case, target picked from the CPU
    python benchmarks/ops_misc.py --quick         # three cases
    python benchmarks/ops_misc.py --target x86_64-avx2 --repeat 50

Each case is one ONNX node (or a tiny graph for the fused tail). Kiln builds it with
``compile_op`` (the default schedule of the target, ``-O3 -march=native``); onnxruntime
runs a one-node model with ``intra_op_num_threads=1``. Both are timed alternately in rounds
and the best time of each is kept, by wall clock and by the thread's CPU time (the CPU
time is less disturbed when other jobs share the cores; read the ratios). The fused rows
time ``Conv`` alone and ``Conv -> Add(bias) -> Relu`` as one Kiln kernel (the graph pass
pipeline's ``Fused`` node) and as onnxruntime's own fused Conv: the tail overhead is the
extra time of the fused kernel over the bare convolution.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from toolchain.autotune.conditions import cpu_model  # noqa: E402
from toolchain.frontend.onnx import from_onnx  # noqa: E402
from toolchain.graph.passes.pipeline import run_pipeline  # noqa: E402
from toolchain.schedules import compile_op  # noqa: E402

F32 = np.float32


def _model(nodes: list, inputs: dict[str, tuple], outputs: dict[str, tuple],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s))
         for k, s in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _case(op: str, shape: tuple, out: tuple | None = None, **attrs: object
          ) -> tuple[str, onnx.ModelProto]:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    label = f"{op} {'x'.join(map(str, shape))}"
    return label, _model([node], {"x": shape}, {"y": out or shape}, {})


def _layer_norm(shape: tuple) -> tuple[str, onnx.ModelProto]:
    d = shape[-1]
    rng = np.random.default_rng(1)
    inits = {"g": rng.standard_normal(d).astype(F32), "b": rng.standard_normal(d).astype(F32)}
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    return (f"LayerNormalization {'x'.join(map(str, shape))}",
            _model([node], {"x": shape}, {"y": shape}, inits))


def _conv(cin: int, cout: int, hw: int, tail: bool) -> tuple[str, onnx.ModelProto]:
    rng = np.random.default_rng(2)
    inits = {"w": (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(F32),
             "b": rng.standard_normal(cout).astype(F32)}
    shape, out = (1, cin, hw, hw), (1, cout, hw, hw)
    if tail:
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Add", ["c", "b3"], ["a"]),
                 helper.make_node("Relu", ["a"], ["y"])]
        inits["b3"] = inits.pop("b").reshape(cout, 1, 1)
        label = f"Conv+bias+Relu {cin}->{cout} {hw}x{hw}"
    else:
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
        del inits["b"]
        label = f"Conv {cin}->{cout} {hw}x{hw}"
    return label, _model(nodes, {"x": shape}, {"y": out}, inits)


def _depthwise(c: int, hw: int, stride: int) -> tuple[str, onnx.ModelProto]:
    """A 3x3 depthwise conv (TVM paper's D1-D9 shapes): the generic schedule of cpu_ops."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((c, 1, 3, 3)) * 0.1).astype(F32)
    out = (hw + 2 - 3) // stride + 1
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1],
                            strides=[stride, stride], group=c)
    return (f"Depthwise {hw}x{hw}x{c} s{stride}",
            _model([node], {"x": (1, c, hw, hw)}, {"y": (1, c, out, out)}, {"w": w}))


def cases(quick: bool) -> list[tuple[str, onnx.ModelProto]]:
    out = [
        _case("Softmax", (128, 1000), axis=-1),
        _layer_norm((128, 768)),
        _conv(64, 64, 28, tail=False),
        _conv(64, 64, 28, tail=True),
    ]
    if quick:
        return out[:2] + out[3:]
    out += [
        _case("Softmax", (12, 128, 128), axis=-1),
        _case("LogSoftmax", (64, 1000), axis=-1),
        _layer_norm((64, 33)),
        _case("ReduceMean", (1, 256, 56 * 56), (1, 256, 1), axes=[2]),
        _case("MaxPool", (1, 64, 112, 112), (1, 64, 56, 56), kernel_shape=[3, 3],
              strides=[2, 2], pads=[1, 1, 1, 1]),
        _case("GlobalAveragePool", (1, 512, 7, 7), (1, 512, 1, 1)),
        _case("Transpose", (1, 64, 56, 56), (1, 56, 56, 64), perm=[0, 2, 3, 1]),
        _case("Sigmoid", (1, 64, 56, 56)),
        _case("Relu", (1, 64, 56, 56)),
        _depthwise(32, 112, 1),
        _depthwise(64, 112, 2),
        _depthwise(256, 28, 1),
        _depthwise(1024, 7, 1),
    ]
    return out


def _kiln(model: onnx.ModelProto, target: str) -> tuple[Callable[[], None], dict]:
    graph = run_pipeline(from_onnx(model))
    (node,) = [n for n in graph.nodes]
    op = compile_op(node, target)
    rng = np.random.default_rng(0)
    runtime = [rng.standard_normal(v.shape).astype(v.dtype) for v in op.runtime_inputs]
    args = op.bound_args(*runtime)
    op.module(*args)  # checks the arguments once
    # then time the raw entry point: Module.__call__'s per-call argument checks cost tens
    # of microseconds in Python, more than many of these kernels
    fn, ptrs = op.module._fn, [ctypes.c_void_p(a.ctypes.data) for a in args]
    return (lambda: fn(*ptrs)), {"feeds": runtime, "op": op, "args": args}


def _ort(model: onnx.ModelProto) -> Callable[[], None]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    feeds = {i.name: np.random.default_rng(0).standard_normal(
        [int(d) for d in i.shape]).astype(F32) for i in sess.get_inputs()}
    return lambda: sess.run(None, feeds)


def _best(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.thread_time() - c0)
    return wall, cpu


def _host_target() -> str:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "c-generic"
    return "x86_64-avx512" if " avx512f" in flags else (
        "x86_64-avx2" if " avx2" in flags else "c-generic")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=None, help="Kiln target (default: from the CPU)")
    ap.add_argument("--quick", action="store_true", help="three cases only")
    ap.add_argument("--repeat", type=int, default=20, help="runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = ap.parse_args(argv)
    target = args.target or _host_target()
    print(f"# {cpu_model()}; Kiln target {target}; single thread; best of "
          f"{args.rounds} x {args.repeat}; times in microseconds (wall / thread CPU)")
    print(f"{'case':<38} {'kiln us':>15} {'ort us':>15} {'ort/kiln':>9}")
    conv_times: dict[str, float] = {}
    for label, model in cases(args.quick):
        kiln, keep = _kiln(model, target)  # keep: the arrays the raw pointers point to
        ort_fn = _ort(model)
        kiln()
        ort_fn()
        kw = kc = ow = oc = float("inf")
        for _round in range(args.rounds):
            w, c = _best(kiln, args.repeat)
            kw, kc = min(kw, w), min(kc, c)
            w, c = _best(ort_fn, args.repeat)
            ow, oc = min(ow, w), min(oc, c)
        conv_times[label] = kc
        del keep
        print(f"{label:<38} {kw * 1e6:7.1f} /{kc * 1e6:7.1f} {ow * 1e6:7.1f} /{oc * 1e6:7.1f} "
              f"{oc / kc:9.2f}")
    bare = [v for k, v in conv_times.items() if k.startswith("Conv ")]
    fused = [v for k, v in conv_times.items() if k.startswith("Conv+bias+Relu")]
    if bare and fused:
        print(f"# fused bias+Relu tail overhead over the bare Kiln conv (thread CPU): "
              f"{(fused[0] / bare[0] - 1) * 100:+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
