"""Single-threaded op benchmark: Kiln default schedules vs onnxruntime (MLAS) and numpy.

    python benchmarks/ops.py                      # ResNet-18 convs C1-C12 + dense cases
    python benchmarks/ops.py --quick              # a subset (C2, C6, C12, two dense)
    python benchmarks/ops.py --target x86_64-avx2 --only C2,D1024

For each case (the TVM paper's ResNet-18 conv set and the issue's dense shapes, batch 1,
fp32) it builds the op with :func:`toolchain.schedules.compile_op` (default schedule, no
tuning), checks the result against onnxruntime, and prints GFLOP/s of Kiln, onnxruntime
(a one-node ONNX model, ``intra_op_num_threads=1``, ``inter_op_num_threads=1``,
sequential) and numpy (dense only; run in a subprocess with ``OPENBLAS_NUM_THREADS=1`` and
``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` removed), the ratio Kiln/onnxruntime and Kiln's
fraction of the peak FMA throughput measured in the same run by a small C program of
independent FMA chains (AVX-512 and AVX2). Times are the best thread CPU time of
``--repeat`` runs (every side runs single-threaded on the calling thread), measured
alternately; the machine is shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from toolchain.autotune.conditions import cpu_model  # noqa: E402  (what the records say)

#: (name, input NCHW, out channels, kernel, stride) — TVM paper Table 2, ResNet-18
CONVS = [
    ("C1", (1, 3, 224, 224), 64, 7, 2), ("C2", (1, 64, 56, 56), 64, 3, 1),
    ("C3", (1, 64, 56, 56), 64, 1, 1), ("C4", (1, 64, 56, 56), 128, 3, 2),
    ("C5", (1, 64, 56, 56), 128, 1, 2), ("C6", (1, 128, 28, 28), 128, 3, 1),
    ("C7", (1, 128, 28, 28), 256, 3, 2), ("C8", (1, 128, 28, 28), 256, 1, 2),
    ("C9", (1, 256, 14, 14), 256, 3, 1), ("C10", (1, 256, 14, 14), 512, 3, 2),
    ("C11", (1, 256, 14, 14), 512, 1, 2), ("C12", (1, 512, 7, 7), 512, 3, 1),
]
#: (name, M, K, N)
DENSE = [("D512", 1, 512, 1000), ("D1024", 1, 1024, 1024), ("D768", 128, 768, 768),
         ("G1024", 1024, 1024, 1024)]
QUICK = {"C2", "C6", "C12", "D768", "G1024"}

_PEAK_C = r"""
#include <immintrin.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec; }
/* 12 independent FMA chains (latency 4 x 2 pipes needs >= 8) kept in registers. */
double peak_{isa}(long iters) {
  {vt} a = {set1}(1.0000001f), b = {set1}(0.9999999f);
  {vt} c0 = {set1}(0.f), c1 = {set1}(1.f), c2 = {set1}(2.f), c3 = {set1}(3.f);
  {vt} c4 = {set1}(4.f), c5 = {set1}(5.f), c6 = {set1}(6.f), c7 = {set1}(7.f);
  {vt} c8 = {set1}(8.f), c9 = {set1}(9.f), c10 = {set1}(10.f), c11 = {set1}(11.f);
  double t0 = now();
  for (long n = 0; n < iters; n++) {
    c0 = {fma}(c0, a, b); c1 = {fma}(c1, a, b); c2 = {fma}(c2, a, b);
    c3 = {fma}(c3, a, b); c4 = {fma}(c4, a, b); c5 = {fma}(c5, a, b);
    c6 = {fma}(c6, a, b); c7 = {fma}(c7, a, b); c8 = {fma}(c8, a, b);
    c9 = {fma}(c9, a, b); c10 = {fma}(c10, a, b); c11 = {fma}(c11, a, b);
  }
  double dt = now() - t0;
  {vt} s = {add}({add}({add}(c0, c1), {add}(c2, c3)), {add}({add}(c4, c5), {add}(c6, c7)));
  s = {add}(s, {add}({add}(c8, c9), {add}(c10, c11)));
  float out[{lanes}]; {store}(out, s);
  return out[0] == 12345.0f ? -1.0 : 2.0 * {lanes} * 12 * (double)iters / dt / 1e9;
}
"""
_ISAS = {
    "avx512": dict(vt="__m512", set1="_mm512_set1_ps", fma="_mm512_fmadd_ps",
                   add="_mm512_add_ps", store="_mm512_storeu_ps", lanes=16,
                   flags=["-mavx512f"]),
    "avx2": dict(vt="__m256", set1="_mm256_set1_ps", fma="_mm256_fmadd_ps",
                 add="_mm256_add_ps", store="_mm256_storeu_ps", lanes=8,
                 flags=["-mavx2", "-mfma"]),
}

_NUMPY_SNIPPET = """
import json, sys, time
import numpy as np
m, k, n, repeat = map(int, sys.argv[1:5])
rng = np.random.default_rng(0)
a = rng.random((m, k), dtype=np.float32); b = rng.random((k, n), dtype=np.float32)
a @ b
best = float("inf")
for _ in range(repeat):
    t = time.thread_time(); a @ b; best = min(best, time.thread_time() - t)
print(json.dumps(best))
"""


def measure_peak(isa: str, seconds: float = 0.2) -> float | None:
    """Peak single-core fp32 FMA GFLOP/s of ``isa`` (None when the CPU lacks it)."""
    from toolchain.target import host_cpu_flags

    need = {"avx512": {"avx512f"}, "avx2": {"avx2", "fma"}}[isa]
    if not need <= host_cpu_flags():
        return None
    from toolchain.runtime.build import compile_shared

    spec = dict(_ISAS[isa])
    flags = ["-O2", "-fPIC", "-shared", "-fno-unroll-loops", *spec.pop("flags")]
    src = _PEAK_C.replace("{isa}", isa)
    for k, v in spec.items():
        src = src.replace("{" + k + "}", str(v))
    lib, _ = compile_shared(src, flags, stem=f"peak_{isa}")
    fn = getattr(ctypes.CDLL(str(lib)), f"peak_{isa}")
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_long]
    iters = 1_000_000
    while True:
        t = time.perf_counter()
        fn(iters)
        if time.perf_counter() - t > seconds / 4:
            break
        iters *= 4
    return max(fn(iters) for _ in range(5))


def ort_session(model_bytes: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def onnx_model(op: str, x_shape: tuple, consts: dict[str, np.ndarray], attrs: dict,
                y_shape: tuple) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node(op, ["x", *consts], ["y"], **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def best_time(fn, repeat: int) -> float:
    """Best thread CPU time of ``repeat`` calls (both sides run on this thread; CPU time
    is far less disturbed than the wall clock when other jobs share the cores)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t)
    return best


def raw_call(module, args: list[np.ndarray]):
    """The kernel called through ctypes with prepared pointers: no per-call argument
    checking (``Module.__call__`` spends tens of microseconds on it), so small ops time
    the kernel, not Python."""
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in args]
    fn, keep = module._fn, list(args)  # the arrays must outlive the pointers

    def call() -> None:
        fn(*ptrs)
        assert keep

    return call


def ort_bound_call(sess, x: np.ndarray, y_shape: tuple):
    """``run_with_iobinding`` on pre-bound numpy buffers: onnxruntime's lowest-overhead
    call from Python (the counterpart of :func:`raw_call`)."""
    y = np.empty(y_shape, np.float32)
    io = sess.io_binding()
    io.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    io.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
    keep = (x, y)  # the bound buffers must outlive the binding

    def call() -> None:
        sess.run_with_iobinding(io)
        assert keep

    return call


def _numpy_time(m: int, k: int, n: int, repeat: int) -> float:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    out = subprocess.run([sys.executable, "-c", _NUMPY_SNIPPET, str(m), str(k), str(n),
                          str(repeat)], env=env, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout))


def bench_case(case: tuple, target: str, repeat: int, rounds: int) -> dict:
    """Build, check and time one case; returns a row of the table."""
    from toolchain.schedules import compile_op

    rng = np.random.default_rng(0)
    if case[0].startswith("C"):
        name, xs, oc, k, s = case
        w = (rng.standard_normal((oc, xs[1], k, k)) * 0.1).astype(np.float32)
        b = rng.standard_normal(oc).astype(np.float32)
        attrs = {"strides": [s, s], "pads": [k // 2] * 4, "kernel_shape": [k, k]}
        op = compile_op("Conv", target, inputs=[xs, w, b], attrs=attrs)
        consts = {"w": w, "b": b}
        onnx_op, m_k_n = "Conv", None
    else:
        name, m, kk, n = case
        xs = (m, kk)
        w = (rng.standard_normal((kk, n)) * 0.1).astype(np.float32)
        op = compile_op("MatMul", target, inputs=[xs, w])
        consts, attrs, onnx_op, m_k_n = {"w": w}, {}, "MatMul", (m, kk, n)
    x = rng.standard_normal(xs).astype(np.float32)
    ys = op.op_schedule.output_values[0].shape
    sess = ort_session(onnx_model(onnx_op, xs, consts, attrs, ys))
    ref = sess.run(None, {"x": x})[0]
    args = op.bound_args(x)
    op.module(*args)
    got = args[-1].reshape(ys)
    err = float(np.abs(got - ref).max() / max(1e-30, float(np.abs(ref).max())))
    flops = op.metadata["flops"] or (2 * math.prod(m_k_n) if m_k_n else 0)
    kiln_call = raw_call(op.module, args)
    ort_call = ort_bound_call(sess, x, ys)
    tk = to = float("inf")
    for _ in range(rounds):
        tk = min(tk, best_time(kiln_call, repeat))
        to = min(to, best_time(ort_call, repeat))
    tn = _numpy_time(*m_k_n, repeat) if m_k_n else None
    return {"case": name, "flops": flops, "kiln_s": tk, "ort_s": to, "numpy_s": tn,
            "rel_err": err, "info": op.metadata["info"]}


def compare_tensorized(n: int, repeat: int) -> tuple[float, float]:
    """GFLOP/s of an ``n``³ matmul tensorized with ``x86_64-avx512.fma_f32_8x32`` (B
    unpacked, the layout the intrinsic matches) vs the default schedule, same run."""
    from toolchain import te
    from toolchain.driver import build
    from toolchain.intrinsics import attach_intrinsics, load_intrinsics
    from toolchain.schedules import compile_op
    from toolchain.tir.schedule import Schedule

    load_intrinsics("x86_64-avx512")
    a_t, b_t = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c_t = te.compute((n, n), lambda i, j: te.sum(a_t[i, k] * b_t[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([a_t, b_t, c_t]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 32])
    i0, i1, i2 = sch.split(i, [None, 8, 8])
    ko, ki = sch.split(kk, [None, 64])
    sch.reorder(j0, i0, i1, ko, i2, j1, ki)
    loc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(loc, i1)
    sch.decompose_reduction(c, ko)
    sch.tensorize(i2, "x86_64-avx512.fma_f32_8x32")
    for blk in (loc, sch.get_block("C_init")):
        *_, cols = sch.get_loops(blk)
        sch.vectorize(sch.split(cols, [None, 16])[1])
    mod = build(sch, "x86_64-avx512", passes={1: [attach_intrinsics]})
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    op = compile_op("MatMul", "x86_64-avx512", inputs=[(n, n), b])
    args = op.bound_args(a)
    mod(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4)
    t_int = min(best_time(lambda: mod(a, b, out), repeat) for _ in range(3))
    t_def = min(best_time(lambda: op.module(*args), repeat) for _ in range(3))
    return 2 * n ** 3 / t_int / 1e9, 2 * n ** 3 / t_def / 1e9


def bench_blocked(case: tuple, target: str, repeat: int, rounds: int) -> tuple[float, float,
                                                                               float]:
    """Kiln's ``LayoutConv`` in the graph layout pass's ``NCHW{lanes}c`` (input blocked when
    C divides, output blocked) vs onnxruntime's NCHW Conv: (kiln s, ort s, rel err)."""
    from toolchain.graph.ir import Node, Value
    from toolchain.graph.passes.layout_ops import from_layout, kernel_to_layout, to_layout
    from toolchain.schedules import compile_op
    from toolchain.schedules.generic.common import cpu_params

    name, xs, oc, k, s = case
    lanes = cpu_params(target).lanes("float32")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((oc, xs[1], k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    attrs = {"strides": [s, s], "pads": [k // 2] * 4}
    x = rng.standard_normal(xs).astype(np.float32)
    ys = (1, oc, (xs[2] - 1) // s + 1, (xs[3] - 1) // s + 1)
    sess = ort_session(onnx_model("Conv", xs, {"w": w, "b": b},
                                    {**attrs, "kernel_shape": [k, k]}, ys))
    blocked_in = xs[1] % lanes == 0
    dl = f"NCHW{lanes}c" if blocked_in else "NCHW"
    kl = f"OIHW{lanes if blocked_in else xs[1]}i{lanes}o"
    xl = to_layout(x, dl)
    node = Node("LayoutConv", name, [Value("x", xl.shape, "float32"),
                                     Value.constant("w", kernel_to_layout(w, kl)),
                                     Value.constant("b", b)],
                [Value("y", (1, oc // lanes, ys[2], ys[3], lanes), "float32")],
                {**attrs, "data_layout": dl, "out_layout": f"NCHW{lanes}c", "kernel_layout": kl})
    op = compile_op(node, target)
    args = op.bound_args(xl)
    kiln_call, ort_call = raw_call(op.module, args), ort_bound_call(sess, x, ys)
    ref = sess.run(None, {"x": x})[0]
    kiln_call()
    err = float(np.abs(from_layout(args[-1], f"NCHW{lanes}c") - ref).max() / np.abs(ref).max())
    tk = to = float("inf")
    for _ in range(rounds):
        tk = min(tk, best_time(kiln_call, repeat))
        to = min(to, best_time(ort_call, repeat))
    return tk, to, err


def default_target() -> str:
    """The widest x86 descriptor this CPU runs (c-generic elsewhere)."""
    from toolchain.target import host_cpu_flags

    flags = host_cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "x86_64-avx512"
    if {"avx2", "fma"} <= flags:
        return "x86_64-avx2"
    return "c-generic"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a subset: " + ", ".join(sorted(QUICK)))
    p.add_argument("--only", help="comma-separated case names (C1..C12, D512, D1024, D768, "
                                  "G1024)")
    p.add_argument("--target", default=None, help="target descriptor (default: widest x86 "
                                                  "one the CPU runs)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.add_argument("--blocked", action="store_true",
                   help="also time the convs as LayoutConv in the blocked layout the graph "
                        "layout pass gives them")
    p.add_argument("--tensorize-check", type=int, metavar="N",
                   help="only compare an N^3 matmul tensorized with the AVX-512 FMA "
                        "intrinsic against the default schedule")
    args = p.parse_args(argv)
    if args.tensorize_check:
        gi, gd = compare_tensorized(args.tensorize_check, args.repeat)
        print(f"matmul {args.tensorize_check}^3: tensorized x86_64-avx512.fma_f32_8x32 "
              f"{gi:.1f} GFLOP/s, default schedule {gd:.1f} GFLOP/s")
        return 0
    target = args.target or default_target()
    cases = CONVS + DENSE
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in cases if c[0] in want]
    elif args.quick:
        cases = [c for c in cases if c[0] in QUICK]
    peaks = {isa: measure_peak(isa) for isa in ("avx512", "avx2")}
    peak = peaks["avx512"] if target == "x86_64-avx512" else peaks["avx2"]
    print(f"CPU: {cpu_model()}; target {target}; single thread")
    print("measured peak fp32 FMA GFLOP/s: " + ", ".join(
        f"{k} {v:.1f}" if v else f"{k} n/a" for k, v in peaks.items()))
    print(f"| {'case':<6} | {'MFLOP':>7} | {'kiln GF/s':>9} | {'ort GF/s':>8} | "
          f"{'numpy GF/s':>10} | {'kiln/ort':>8} | {'% peak':>6} | {'max rel err':>11} | "
          "schedule |")
    print("|" + "|".join(["-" * 8, "-" * 8 + ":", "-" * 10 + ":", "-" * 9 + ":",
                          "-" * 11 + ":", "-" * 9 + ":", "-" * 7 + ":", "-" * 12 + ":",
                          "-" * 10]) + "|")
    rows, ratios = [], []
    for case in cases:
        r = bench_case(case, target, args.repeat, args.rounds)
        rows.append(r)
        gk, go = r["flops"] / r["kiln_s"] / 1e9, r["flops"] / r["ort_s"] / 1e9
        gn = f"{r['flops'] / r['numpy_s'] / 1e9:10.1f}" if r["numpy_s"] else f"{'-':>10}"
        ratios.append(gk / go)
        info = r["info"]
        sched = info.get("layout") or f"{info.get('mr')}x{info.get('nr')}"
        pk = f"{100 * gk / peak:5.1f}%" if peak else "   n/a"
        print(f"| {r['case']:<6} | {r['flops'] / 1e6:7.1f} | {gk:9.1f} | {go:8.1f} | {gn} | "
              f"{gk / go:8.2f} | {pk} | {r['rel_err']:11.1e} | {sched} |")
    conv_r = [x for x, c in zip(ratios, cases, strict=True) if c[0].startswith("C")]
    if conv_r:
        gm = math.exp(sum(math.log(x) for x in conv_r) / len(conv_r))
        print(f"geometric mean kiln/ort over {len(conv_r)} convs: {gm:.2f}")
    if args.blocked:
        from toolchain.schedules.generic.common import cpu_params

        lanes = cpu_params(target).lanes("float32")
        print(f"\nConvs in NCHW{lanes}c (LayoutConv, as inside a network after the layout "
              "pass) vs onnxruntime's NCHW Conv:")
        print("| case | kiln GF/s | ort GF/s | kiln/ort | max rel err |")
        print("|------|----------:|---------:|---------:|------------:|")
        for case in cases:
            if not case[0].startswith("C"):
                continue
            tk, to, err = bench_blocked(case, target, args.repeat, args.rounds)
            f = 2 * case[2] * case[1][1] * case[3] ** 2 * ((case[1][2] - 1) // case[4] + 1) ** 2
            print(f"| {case[0]} | {f / tk / 1e9:9.1f} | {f / to / 1e9:8.1f} | {to / tk:8.2f} | "
                  f"{err:11.1e} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_model(), "target": target,
                                               "peaks": peaks, "rows": rows}, indent=1,
                                              default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
