"""The C renderer on small hand-built functions: names, literals, operators, determinism."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tests.tir_transform.helpers import STRICT
from toolchain import te
from toolchain.codegen import get_renderer, sanitize
from toolchain.codegen.c import CRenderer
from toolchain.driver import build, lower
from toolchain.errors import TargetError, UnsupportedError
from toolchain.tir import ir


@pytest.mark.parametrize("name,expected", [
    ("conv 1/w", "conv_1_w"), ("3x3", "_3x3"), ("int", "v_int"), ("kiln_x", "v_kiln_x"),
    ("a.b-c", "a_b_c"), ("", "v"), ("__x", "v_x"), ("float32x16", "v_float32x16"),
    ("NAN", "v_NAN"),
])
def test_sanitize(name, expected):
    assert sanitize(name) == expected


def test_clashing_names_are_made_unique_and_deterministic():
    A = te.placeholder((4,), name="x.y")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="x y")
    func = te.create_prim_func([A, B])
    src1 = CRenderer().render(lower(func)).code
    src2 = CRenderer().render(lower(func)).code
    assert src1 == src2
    assert "float* restrict x_y, float* restrict x_y_1" in src1


def _run_expr(make, dtype="float32", n=8, inputs=None):
    """Build B[i] = make(A[i], i) and return (B, A)."""
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: make(A[i], i), name="B")
    mod = build(te.create_prim_func([A, B]), extra_flags=STRICT)
    a = inputs if inputs is not None else np.arange(n).astype(dtype)
    b = np.zeros(n, B.dtype)
    mod(a, b)
    return b, a, mod.get_source()


def test_floordiv_floormod_on_negative_values_match_python():
    vals = np.array([-7, -6, -1, 0, 1, 5, 6, 7], "int32")
    b, a, src = _run_expr(lambda x, i: te.floordiv(x, 3) * 10 + te.floormod(x, 3), "int32",
                          inputs=vals)
    np.testing.assert_array_equal(b, (a // 3) * 10 + a % 3)
    assert "kiln_floordiv_int32_t" in src


def test_non_negative_floordiv_uses_plain_division():
    A = te.placeholder((16,), name="A")
    B = te.compute((4,), lambda i: A[i * 4 + 3], name="B")
    src = CRenderer().render(lower(te.create_prim_func([A, B]))).code
    assert "kiln_floordiv" not in src.split("int32_t kiln_main")[1]


def test_float_literals_roundtrip_exactly():
    vals = [0.1, 1e-30, 3.4e38, -2.5, 1.0 / 3.0]
    for v in vals:
        f32 = float(np.float32(v))
        b, _, _ = _run_expr(lambda x, i, f32=f32: x * 0.0 + f32, n=2,
                            inputs=np.zeros(2, "float32"))
        assert b[0] == np.float32(v)


def test_inf_and_nan_literals():
    r = CRenderer()
    r.names = __import__("toolchain.codegen.cstyle", fromlist=["Namer"]).Namer()
    assert r.expr(ir.FloatImm(math.inf)) == "INFINITY"
    assert r.expr(ir.FloatImm(-math.inf)) == "(-INFINITY)"
    assert r.expr(ir.FloatImm(math.nan)) == "NAN"
    assert r.expr(ir.IntImm(-(1 << 31))) == "INT32_MIN"
    assert r.expr(ir.IntImm(7, "int64")) == "7LL"


def test_math_calls_casts_min_max_select():
    b, a, src = _run_expr(
        lambda x, i: te.exp(x * 0.1) + te.sqrt(x) + te.sigmoid(x) + te.tanh(x)
        + te.max(x, 3.0) + te.min(x, 2.0) + te.if_then_else(i > 3, 1.0, -1.0)
        + te.cast(te.cast(x, "int32") // 2, "float32"))
    expect = (np.exp(a * np.float32(0.1)) + np.sqrt(a) + 1 / (1 + np.exp(-a)) + np.tanh(a)
              + np.maximum(a, 3) + np.minimum(a, 2) + np.where(np.arange(8) > 3, 1, -1)
              + (a.astype("int32") // 2))
    np.testing.assert_allclose(b, expect, rtol=1e-5)
    assert "kiln_fast_expf(" in src and "sqrtf(" in src and "kiln_fast_sigmoidf(" in src


def test_float64_and_integer_dtypes():
    b, a, src = _run_expr(lambda x, i: x * 2.0 + 1.0, "float64")
    np.testing.assert_array_equal(b, a * 2 + 1)
    assert "double* restrict A" in src
    b, a, _ = _run_expr(lambda x, i: x * 3 + 1, "int64")
    np.testing.assert_array_equal(b, a * 3 + 1)
    b, a, _ = _run_expr(lambda x, i: x + 1, "uint8", inputs=np.array([0, 1, 254, 255, 3, 4, 5,
                                                                      6], "uint8"))
    np.testing.assert_array_equal(b, (a + 1).astype("uint8"))


def test_unlowered_function_is_refused():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i], name="B")
    with pytest.raises(UnsupportedError, match="BlockRealize is not lowered; call "
                                               r"toolchain.lower\(...\)"):
        CRenderer().render(te.create_prim_func([A, B]))


def test_unknown_dtype_and_renderer_kind():
    A = ir.Buffer("A", (4,), "float8")
    i = ir.Var("i")
    f = ir.PrimFunc((A,), ir.For(i, 0, 4, "serial", A.store(ir.FloatImm(0.0, "float8"), [i])))
    with pytest.raises(UnsupportedError, match="dtype 'float8' has no C type"):
        CRenderer().render(f)
    with pytest.raises(TargetError, match="no C-family code generator for target kind 'vta'"):
        get_renderer("vta")


def test_large_intermediate_goes_to_heap_and_is_freed():
    A = te.placeholder((256, 256), name="A")
    T1 = te.compute((256, 256), lambda i, j: A[i, j] * 2.0, name="T1")
    B = te.compute((256, 256), lambda i, j: T1[j, i] + 1.0, name="B")
    mod = build(te.create_prim_func([A, B]), extra_flags=STRICT)
    src = mod.get_source()
    assert "kiln_alloc(" in src and "free(T1);" in src
    a = np.random.rand(256, 256).astype("float32")
    b = np.zeros_like(a)
    mod(a, b)
    np.testing.assert_allclose(b, a.T * 2 + 1, rtol=1e-6)


def test_strided_vector_access_gathers_and_scatters():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[j, i] * 2.0, name="B")
    from toolchain.tir.schedule import Schedule

    sch = Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.reorder(j, i)
    sch.vectorize(i)  # B is written with stride 8, A read contiguously
    mod = build(sch, extra_flags=STRICT)
    a = np.random.rand(8, 8).astype("float32")
    b = np.zeros_like(a)
    mod(a, b)
    np.testing.assert_allclose(b, a.T * 2, rtol=1e-6)
    assert "vec" in mod.get_source()


def test_float16_vectors_and_bool_outputs():
    from toolchain.tir.schedule import Schedule

    A = te.placeholder((64,), name="A", dtype="float16")
    B = te.compute((64,), lambda i: A[i] * te.const(2.0, "float16") + te.const(1.0, "float16"),
                   name="B")
    C = te.compute((64,), lambda i: A[i] > te.const(3.0, "float16"), name="C")
    a = np.arange(64).astype("float16")
    for out, ref in ((B, a * 2 + 1), (C, a > 3)):
        sch = Schedule(te.create_prim_func([A, out]))
        (i,) = sch.get_loops(sch.get_block(out.name))
        _, ii = sch.split(i, [None, 16])
        sch.vectorize(ii)  # bool comparisons fall back to the simd pragma
        mod = build(sch, extra_flags=STRICT)
        res = np.zeros(64, ref.dtype)
        mod(a, res)
        np.testing.assert_array_equal(res, ref)


def test_select_loads_both_values_and_guarded_loads_are_clamped():
    """``Select`` may evaluate both values: one read only on one side becomes a call of the
    select helper, so gcc blends instead of if-converting to (miscompiled) masked loads; a
    ``tir.if_then_else`` (a guarded load) is loaded unconditionally from a clamped index
    (only where the index is not provably in bounds), and a value the condition reads
    already (Relu) keeps ``?:``."""
    X = te.placeholder((6,), name="X")
    S = te.placeholder((6,), name="S")
    sel = te.compute((6,), lambda i: te.select(X[i] < 0.0, X[i] * S[i], X[i]), name="sel")
    ite = te.compute((6,), lambda i: te.if_then_else(i > 0, X[i - 1], 0.0), name="ite")
    relu = te.compute((6,), lambda i: te.select(X[i] < 0.0, 0.0, X[i]), name="relu")
    src = CRenderer().render(lower(te.create_prim_func([X, S, sel, ite, relu]))).code
    assert re.search(r"kiln_select_float\(X\[(i\w*)\] < 0\.0f, X\[\1\] \* S\[\1\], X\[\1\]\)",
                     src), src
    assert re.search(r"kiln_select_float\(i\w* > 0, X\[kiln_max_int32_t\(kiln_min_int32_t\("
                     r"i\w* - 1, 5\), 0\)\], 0\.0f\)", src), src
    assert re.search(r"X\[(i\w*)\] < 0\.0f \? 0\.0f : X\[\1\]", src), src
    x = np.array([-2, -1, 0, 1, 2, 3], np.float32)
    s = np.full(6, 3.0, np.float32)
    out = [np.zeros(6, np.float32) for _ in range(3)]
    build(te.create_prim_func([X, S, sel, ite, relu]), "c")(x, s, *out)
    np.testing.assert_array_equal(out[0], np.where(x < 0, x * s, x))
    np.testing.assert_array_equal(out[1], np.concatenate([[0], x[:-1]]))
    np.testing.assert_array_equal(out[2], np.maximum(x, 0))


def test_without_vector_loads_selects_and_guarded_loads_stay_conditional():
    """A target whose compiler has no vector unit (Cortex-M4/M7: ``vector_width_bits`` 32)
    cannot turn a conditional load into a masked vector load: selects and guarded loads
    stay ``?:`` there (the clamp and the helper call cost DS-CNN 2.7 % more instructions),
    and the C backend chooses that from the descriptor."""
    from toolchain.codegen.backend import backend_for
    from toolchain.target import load_target

    X = te.placeholder((6,), name="X")
    S = te.placeholder((6,), name="S")
    sel = te.compute((6,), lambda i: te.select(X[i] < 0.0, X[i] * S[i], X[i]), name="sel")
    ite = te.compute((6,), lambda i: te.if_then_else(i > 0, X[i - 1], 0.0), name="ite")
    func = lower(te.create_prim_func([X, S, sel, ite]))
    src = CRenderer(vector_loads=False).render(func).code
    assert "kiln_select" not in src and "kiln_max_int32_t" not in src, src
    assert re.search(r"X\[(i\w*)\] < 0\.0f \? X\[\1\] \* S\[\1\] : X\[\1\]", src), src
    assert re.search(r"i\w* > 0 \? X\[i\w* - 1\] : 0\.0f", src), src
    assert not backend_for(load_target("cortex-m4")).vector_loads
    assert not backend_for(load_target("cortex-m7")).vector_loads
    assert all(backend_for(load_target(t)).vector_loads
               for t in ("c-generic", "x86_64-avx2", "x86_64-avx512"))
