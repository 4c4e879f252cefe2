"""Vector min / max / select / masks / reinterpret / math calls in the C renderer
(toolchain/codegen/cvector.py), on hand-written vector TIR, built and compared with numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.tir_transform.helpers import STRICT
from toolchain.codegen.c import CRenderer
from toolchain.driver import build
from toolchain.errors import UnsupportedError
from toolchain.tir import ir

N = 64


def _vec(make, dtypes=("float32",), out="float32", lanes=16):
    """``B[i*L:(i+1)*L] = make(A0[...], A1[...], ...)`` over N elements, L lanes."""
    bufs = [ir.Buffer(f"A{k}", (N,), dt) for k, dt in enumerate(dtypes)]
    dst = ir.Buffer("B", (N,), out)
    i = ir.Var("i")
    idx = ir.Ramp(i * lanes, 1, lanes)
    body = ir.For(i, 0, N // lanes, "serial",
                  dst.store(make(*[ir.BufferLoad(b, (idx,)) for b in bufs]), [idx]))
    return ir.PrimFunc((*bufs, dst), body)


def _run(func, *arrays, out="float32"):
    mod = build(func, extra_flags=STRICT)
    res = np.zeros(N, out)
    mod(*arrays, res)
    return res, mod.get_source()


def _data(seed=0, dtype="float32"):
    v = np.random.default_rng(seed).normal(0, 2, N)
    return v.astype(dtype)


def _bc(v, lanes=16, dtype="float32"):
    return ir.Broadcast(ir.FloatImm(v, dtype) if "float" in dtype else ir.IntImm(v, dtype),
                        lanes)


def test_vector_min_max_float_and_int():
    a, b = _data(0), _data(1)
    got, src = _run(_vec(lambda x, y: ir.Max(x, _bc(0.0)) + ir.Min(x, y),
                         ("float32", "float32")), a, b)
    np.testing.assert_allclose(got, np.maximum(a, 0) + np.minimum(a, b), rtol=1e-6)
    assert "kiln_max_float" not in src and "float32x16" in src
    ai, bi = (np.arange(N) * 7 % 23 - 11).astype("int32"), np.full(N, 3, "int32")
    got, _ = _run(_vec(lambda x, y: ir.Max(ir.Min(x, y), _bc(-5, dtype="int32")),
                       ("int32", "int32"), "int32"), ai, bi, out="int32")
    np.testing.assert_array_equal(got, np.maximum(np.minimum(ai, bi), -5))


def test_vector_select_with_logic_of_comparisons():
    a, b = _data(2), _data(3)

    def make(x, y):
        cond = ir.Or(ir.And(ir.LT(x, y), ir.GT(x, _bc(-1.0))), ir.Not(ir.LT(y, _bc(2.0))))
        return ir.Select(cond, x * _bc(2.0), y)

    got, _ = _run(_vec(make, ("float32", "float32")), a, b)
    cond = ((a < b) & (a > -1)) | ~(b < 2)
    np.testing.assert_allclose(got, np.where(cond, a * 2, b), rtol=1e-6)


def test_vector_select_mask_of_another_width_and_broadcast_condition():
    a64, b = _data(4, "float64"), _data(5)
    got, src = _run(_vec(lambda x, y: ir.Select(ir.GT(x, _bc(0.0, 8, "float64")), y,
                                                _bc(0.0, 8)),
                         ("float64", "float32"), lanes=8), a64, b)
    np.testing.assert_array_equal(got, np.where(a64 > 0, b, 0))
    assert "__builtin_convertvector" in src
    flag = ir.Var("flag", "bool")
    i = ir.Var("i")
    A, B = ir.Buffer("A", (N,), "float32"), ir.Buffer("B", (N,), "float32")
    idx = ir.Ramp(i * 16, 1, 16)
    sel = ir.Select(ir.Broadcast(flag, 16), ir.BufferLoad(A, (idx,)), _bc(-1.0))
    func = ir.PrimFunc((A, flag, B), ir.For(i, 0, N // 16, "serial", B.store(sel, [idx])))
    mod = build(func, extra_flags=STRICT)
    for f in (True, False):
        out = np.zeros(N, "float32")
        mod(b, f, out)
        np.testing.assert_array_equal(out, b if f else -1)


def test_reinterpret_vectors_and_scalars():
    a = _data(6)

    def next_up(x):  # one unit in the last place away from zero, through the bits
        bits = ir.Call("int32x16", "reinterpret", (x,))
        return ir.Call("float32x16", "reinterpret", (bits + _bc(1, dtype="int32"),))

    got, src = _run(_vec(next_up), a)
    np.testing.assert_array_equal(got, (a.view("int32") + 1).view("float32"))
    assert "(int32x16)(" in src and "(float32x16)(" in src
    A, B = ir.Buffer("A", (N,), "float32"), ir.Buffer("B", (N,), "int32")
    i = ir.Var("i")
    func = ir.PrimFunc((A, B), ir.For(i, 0, N, "serial", B.store(
        ir.Call("int32", "reinterpret", (A[i],)), [i])))
    out = np.zeros(N, "int32")
    build(func, extra_flags=STRICT)(a, out)
    np.testing.assert_array_equal(out, a.view("int32"))


def test_reinterpret_of_another_size_is_refused():
    func = _vec(lambda x: ir.Call("float32x16", "reinterpret",
                                  (ir.Call("int16x16", "reinterpret", (x,)),)))
    with pytest.raises(UnsupportedError, match=r"reinterpret int16x16 -> float32x16 changes "
                                               r"the size \(256 -> 512 bits\)"):
        CRenderer().render(func)


@pytest.mark.parametrize("dtype,lanes", [("float32", 16), ("float64", 8)])
def test_vector_math_calls_lane_by_lane(dtype, lanes):
    a = _data(7, dtype)
    erf = np.vectorize(math.erf)

    def make(x):
        return (ir.Call(x.dtype, "exp", (x,)) + ir.Call(x.dtype, "erf", (x,))
                + ir.Call(x.dtype, "pow", (x, _bc(2.0, lanes, dtype))))

    got, src = _run(_vec(make, (dtype,), dtype, lanes), a, out=dtype)
    want = np.exp(a.astype("float64")) + erf(a.astype("float64")) + a.astype("float64") ** 2
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-12)
    assert ("kiln_fast_expf(" in src) == (dtype == "float32")


def test_vector_call_without_a_c_function_is_refused():
    func = _vec(lambda x: ir.Call("float32x16", "rsqrt", (x,)))
    with pytest.raises(UnsupportedError, match="vector call rsqrt of float32x16; keep the "
                                               "loop scalar"):
        CRenderer().render(func)
