"""float16 across a bundle: the runtime's conversions bit for bit against numpy, and a small
fp16 conv net (fp16 inputs, weights and outputs) against onnxruntime on the host targets,
through main.c's .bin files, and built for a Cortex-M4."""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.boards.conftest import needs_cross, needs_qemu
from tests.bundle.helpers import STRICT, compile_run, make, max_rel, run_main, run_ort
from toolchain.target import load_target, runs_here

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"

#: a C driver over whole arrays (the helpers are static inline in the runtime header)
_DRIVER = r"""
#include "kiln_runtime.h"
void to_f32(const kiln_f16 *h, uint32_t *out, long n) {
  long i;
  for (i = 0; i < n; ++i) {
    union { float f; uint32_t u; } v;
    v.f = kiln_f16_to_f32(h[i]);
    out[i] = v.u;
  }
}
void f64_to_f16(const double *d, kiln_f16 *out, long n) {
  long i;
  for (i = 0; i < n; ++i) out[i] = kiln_f64_to_f16(d[i]);
}
void to_f16(const uint32_t *bits, kiln_f16 *out, long n) {
  long i;
  for (i = 0; i < n; ++i) {
    union { uint32_t u; float f; } v;
    v.u = bits[i];
    out[i] = kiln_f32_to_f16(v.f);
  }
}
"""


@pytest.fixture(scope="module")
def conv(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    d = tmp_path_factory.mktemp("f16conv")
    (d / "drv.c").write_text(_DRIVER)
    subprocess.run(["cc", "-std=c99", "-O2", *STRICT, "-shared", "-fPIC", f"-I{RUNTIME}",
                    str(d / "drv.c"), "-o", str(d / "drv.so")], check=True)
    return ctypes.CDLL(str(d / "drv.so"))


def _to_f32(lib: ctypes.CDLL, h: np.ndarray) -> np.ndarray:
    h = np.ascontiguousarray(h, np.uint16)
    out = np.empty(h.shape, np.uint32)
    lib.to_f32(ctypes.c_void_p(h.ctypes.data), ctypes.c_void_p(out.ctypes.data),
               ctypes.c_long(h.size))
    return out


def _to_f16(lib: ctypes.CDLL, bits: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(bits, np.uint32)
    out = np.empty(bits.shape, np.uint16)
    lib.to_f16(ctypes.c_void_p(bits.ctypes.data), ctypes.c_void_p(out.ctypes.data),
               ctypes.c_long(bits.size))
    return out


def test_f16_to_f32_all_65536_patterns(conv):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = _to_f32(conv, h)
    want = h.view(np.float16).astype(np.float32).view(np.uint32)
    nan = np.isnan(h.view(np.float16))
    np.testing.assert_array_equal(got[~nan], want[~nan])  # subnormals, +-0, +-Inf exact
    f = got[nan].view(np.float32)  # NaN: a NaN of the same sign and payload
    assert np.isnan(f).all()
    np.testing.assert_array_equal(got[nan] >> 31, h[nan] >> 15)
    np.testing.assert_array_equal((got[nan] >> 13) & 0x3ff, h[nan] & 0x3ff)


def _f32_cases() -> np.ndarray:
    """Every float16 widened, the midpoints between neighbours (ties: to even) and one
    float32 ulp either side of them, the overflow edge, and random bit patterns."""
    h = np.arange(0x7c00, dtype=np.uint16)  # every finite non-negative float16
    lo = h.view(np.float16).astype(np.float64)
    nxt = (h + 1).view(np.float16).astype(np.float64)  # 0x7c00 is +Inf: skip the last
    mid = ((lo[:-1] + nxt[:-1]) / 2).astype(np.float32).view(np.uint32)  # exact in f32
    pos = np.concatenate([lo.astype(np.float32).view(np.uint32), mid, mid - 1, mid + 1,
                          np.array([0x477fe000, 0x477ff000, 0x477fefff, 0x477ff001,
                                    0x7f7fffff, 0x7f800000, 0x33000000, 0x33000001,
                                    0x32ffffff, 0x00000001], np.uint32)])
    rng = np.random.default_rng(0)
    rand = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([pos, pos | 0x80000000, rand])


def test_f32_to_f16_round_to_nearest_even(conv):
    bits = _f32_cases()
    f = bits.view(np.float32)
    got = _to_f16(conv, bits)
    with np.errstate(over="ignore"):
        want = f.astype(np.float16).view(np.uint16)
    nan = np.isnan(f)
    assert nan.sum() > 1000
    np.testing.assert_array_equal(got[~nan], want[~nan])
    # NaN: stays a NaN (never Inf), keeps its sign and the payload's top bits, as numpy
    assert np.isnan(got[nan].view(np.float16)).all()
    np.testing.assert_array_equal(got[nan] >> 15, bits[nan] >> 31)
    np.testing.assert_array_equal(got[nan], want[nan])


def test_f64_to_f16_rounds_once(conv):
    """A double rounds to float16 directly: just above a float16 tie (where rounding to
    float first would land on the tie and go to even), ties, NaN, Inf, overflow."""
    h = np.arange(0x7bff, dtype=np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    mid = (lo + (h + 1).view(np.float16).astype(np.float64)) / 2
    rng = np.random.default_rng(0)
    d = np.concatenate([mid, mid * (1 + 2.0 ** -40), mid * (1 - 2.0 ** -40), lo,
                        rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-9, 6, 1 << 16),
                        [np.nan, np.inf, -np.inf, 65519.99, 65520.0, 1e300, -1e-300, 0.0]])
    d = np.concatenate([d, -d])
    out = np.empty(d.shape, np.uint16)
    conv.f64_to_f16(ctypes.c_void_p(d.ctypes.data), ctypes.c_void_p(out.ctypes.data),
                    ctypes.c_long(d.size))
    with np.errstate(over="ignore"):
        want = d.astype(np.float16)
    nan = np.isnan(d)
    np.testing.assert_array_equal(out[~nan], want[~nan].view(np.uint16))
    assert np.isnan(out[nan].view(np.float16)).all()
    # the case it exists for: float32 rounding would put these on a tie
    assert (out[len(mid):2 * len(mid)] != d[len(mid):2 * len(mid)].astype(np.float32)
            .astype(np.float16).view(np.uint16)).any()


def fp16_net(seed: int = 0) -> onnx.ModelProto:
    """Conv 3x3 + Relu + MaxPool + MatMul + Add + Sigmoid, every tensor float16."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.standard_normal((4, 2, 3, 3)) * 0.3, "b1": rng.standard_normal(4) * 0.1,
             "w2": rng.standard_normal((64, 5)) * 0.2, "b2": rng.standard_normal(5) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "w2"], ["m"]),
             helper.make_node("Add", ["m", "b2"], ["logits"]),
             helper.make_node("Sigmoid", ["logits"], ["prob"])]
    g = helper.make_graph(
        nodes, "fp16net", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT16, [1, 5]),
         helper.make_tensor_value_info("prob", TensorProto.FLOAT16, [1, 5])],
        [numpy_helper.from_array(v.astype(np.float16), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


#: one float16 ulp is 2^-11 relative: the net rounds where onnxruntime does, but fuses
#: (Add + Sigmoid in one kernel: the sum is not rounded before the Sigmoid)
RTOL16 = 2e-3


def _input() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 2, 8, 8)).astype(np.float16)}


@pytest.mark.parametrize("options", [{"target": "c-generic"}, {"target": "x86_64-avx2"},
                                     {"target": "c-generic", "backend": "llvm"}],
                         ids=["c-generic", "x86_64-avx2", "llvm"])
def test_fp16_net_matches_onnxruntime(tmp_path, options):
    if not runs_here(load_target(options["target"])):
        pytest.skip(f"this host cannot run {options['target']} code")
    m, x = fp16_net(), _input()
    ref = run_ort(m, x)
    path, got = compile_run(m, tmp_path, x, **options)
    for k, r in ref.items():
        assert got[k].dtype == np.float16
        assert max_rel(got[k], r) <= RTOL16, (k, got[k], r)
    meta = json.loads((path / "metadata.json").read_text())
    assert [t["dtype"] for t in meta["inputs"] + meta["outputs"]] == ["float16"] * 3
    assert meta["weight_bytes"] == 2 * (72 + 4 + 320 + 5)  # half size in flash
    header = (path / "include" / "fp16net.h").read_text()
    assert "const kiln_f16 *x;" in header and "kiln_f16 *prob;" in header


def test_fp16_reductions_accumulate_in_float32(tmp_path):
    """ReduceSum / ReduceL2 / MatMul over 512 fp16 values accumulate in float32 and round
    once, as onnxruntime's CPU kernels do."""
    rng = np.random.default_rng(2)
    x = {"x": (rng.standard_normal((4, 512)) + 0.5).astype(np.float16)}
    w = rng.standard_normal((512, 3)).astype(np.float16)
    nodes = [helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0),
             helper.make_node("ReduceL2", ["x", "ax"], ["l2"], keepdims=0),
             helper.make_node("MatMul", ["x", "w"], ["mm"])]
    g = helper.make_graph(
        nodes, "red16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 512])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT16, [4]),
         helper.make_tensor_value_info("l2", TensorProto.FLOAT16, [4]),
         helper.make_tensor_value_info("mm", TensorProto.FLOAT16, [4, 3])],
        [numpy_helper.from_array(np.array([1]), "ax"), numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    ref = run_ort(m, x)
    _, got = compile_run(m, tmp_path, x)
    for k in ("s", "l2", "mm"):  # one rounding: within one float16 ulp (the sum's order
        # differs); a float16 accumulator is ~10 ulps off over 512 terms
        ulps = np.abs(got[k].astype(np.float64) - ref[k]) / np.spacing(np.abs(ref[k]))
        assert ulps.max() <= 1.0, (k, got[k], ref[k])


def _stores(func, buf) -> int:
    from toolchain.tir import ir
    from toolchain.tir.functor import post_order_visit

    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, ir.BufferStore)
                     and n.buffer is buf else None)
    return len(found)


def test_legalize_f16_rounds_a_reduction_once():
    """An unscheduled reduction into a float16 output (a carried loop), and one unrolled
    into consecutive stores, accumulate in a float32 local: one store to the output."""
    from toolchain import te
    from toolchain.tir import ir
    from toolchain.tir.transform import lower
    from toolchain.tir.transform.legalize_f16 import legalize_f16

    A = te.placeholder((8, 8), name="A", dtype="float16")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8,), lambda i: te.sum(A[i, k] * A[k, i], axis=k), name="C")
    f = lower(te.create_prim_func([A, C]))
    out = f.params[1]
    assert _stores(f, out) == 2 and _stores(legalize_f16(f), out) == 1
    # unrolled: C[0] = 0; C[0] = C[0] + A[0]; ... C[0] = C[0] + A[3]
    Cb, Ab = ir.Buffer("C", (1,), "float16"), ir.Buffer("A", (4,), "float16")
    body = ir.seq(ir.BufferStore(Cb, ir.FloatImm(0.0, "float16"), (0,)),
                  *[ir.BufferStore(Cb, ir.BufferLoad(Cb, (0,)) + ir.BufferLoad(Ab, (j,)), (0,))
                    for j in range(4)])
    g = legalize_f16(ir.PrimFunc((Ab, Cb), body, "unrolled"))
    assert _stores(g, Cb) == 1
    text = str(g)
    assert 'T.allocate((1,), "float32"' in text and text.count('T.Cast("float16"') == 1


def test_fp16_reduce_sum_of_4096_ones(tmp_path):
    """Accumulated in float16, 2048 + 1 rounds back to 2048: the sum would stall there."""
    x = {"x": np.ones((2, 4096), np.float16)}
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0)], "ones16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4096])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT16, [2])],
        [numpy_helper.from_array(np.array([1]), "ax")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    _, got = compile_run(m, tmp_path, x)
    np.testing.assert_array_equal(got["s"], run_ort(m, x)["s"])
    np.testing.assert_array_equal(got["s"], [4096, 4096])


def test_fp16_bundle_is_deterministic():
    from toolchain.bundle import build_spec, render_files

    a, b = (render_files(build_spec(fp16_net(), t, progress=False))
            for t in ("x86_64-avx2", "x86_64-avx2"))
    assert a == b


def test_kiln_run_check_of_an_fp16_bundle(tmp_path, capsys):
    """``kiln run DIR --check``: float16 outputs are compared at FLOAT16_TOLERANCE at least
    (the default 1e-4 is below half a float16 ulp)."""
    from toolchain.bundle.check import FLOAT16_TOLERANCE, compare
    from toolchain.cli import main

    onnx.save(fp16_net(), tmp_path / "net.onnx")
    np.savez(tmp_path / "in.npz", **_input())
    assert main(["compile", str(tmp_path / "net.onnx"), "-o", str(tmp_path / "b")]) == 0
    assert main(["run", str(tmp_path / "b"), "--inputs", str(tmp_path / "in.npz"),
                 "--check"]) == 0
    assert "ok (float16: tolerance 0.002)" in capsys.readouterr().out
    ref = np.array([1.0, 2.0], np.float16)
    (row,) = compare({"y": ref + np.float16(0.01)}, {"y": ref})  # 0.5 %: too far
    assert not row["ok"] and row["tolerance"] == FLOAT16_TOLERANCE


def test_fp16_net_main_reads_and_writes_fp16_files(tmp_path):
    m, x = fp16_net(), _input()
    path, got = compile_run(m, tmp_path, x)
    make(path, "main", cflags="-O2 -std=c99 " + " ".join(STRICT))
    out = run_main(path, x, json.loads((path / "metadata.json").read_text()))
    for k, v in got.items():
        np.testing.assert_array_equal(out[k], v)


@needs_cross
def test_fp16_net_builds_for_cortex_m4(tmp_path):
    from toolchain.bundle import compile_model

    path = compile_model(fp16_net(), "cortex-m4", tmp_path / "bundle")
    flags = ("-O2 -std=c99 -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 "
             "--specs=picolibc.specs " + " ".join(STRICT))
    make(path, "CC=arm-none-eabi-gcc", "lib", cflags=flags)
    assert (path / "libfp16net.a").is_file()


@needs_qemu
def test_fp16_net_on_qemu_cortex_m4(tmp_path):
    from toolchain.boards import compile_board, run_on_qemu

    m, x = fp16_net(), _input()
    onnx.save(m, tmp_path / "fp16net.onnx")
    out, _ = compile_board(tmp_path / "fp16net.onnx", "qemu-mps2-an386", tmp_path / "fw")
    got = run_on_qemu(out, x).outputs
    for k, r in run_ort(m, x).items():
        assert got[k].dtype == np.float16
        assert max_rel(got[k], r) <= RTOL16, (k, got[k], r)
