"""The vectorizable float32 exp / erf / tanh / sigmoid helpers (toolchain/codegen/fastmath.py),
built as C and checked against numpy over the whole float range and its edges."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.tir_transform.helpers import STRICT
from tests.tools import needs
from toolchain import te
from toolchain.codegen.c import CRenderer
from toolchain.codegen.cstyle import render_helpers
from toolchain.codegen.cuda import CUDARenderer
from toolchain.codegen.fastmath import needed, render_fastmath
from toolchain.driver import build, lower
from toolchain.schedules.generic.ops import CpuConfig, schedule_cpu

F32 = np.float32
TINY = float(np.finfo(F32).tiny)


def _inputs() -> np.ndarray:
    """Random bit patterns (every exponent, both signs, NaNs, denormals), a dense sweep of
    [-110, 110] and hand-picked edges (thresholds between the formulas, overflow)."""
    bits = np.random.default_rng(0).integers(0, 1 << 32, size=1 << 17, dtype=np.uint64)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, TINY, 3.4e38, -3.4e38,
             88.72, 88.73, 89.5, -87.33, -103.9, -104.5, 0.9, -0.9, 0.625, -0.625, 4.0,
             9.0, 1e-20, -1e-20]
    return np.concatenate([bits.astype(np.uint32).view(F32),
                           np.linspace(-110, 110, 40001, dtype=F32), np.array(edges, F32)])


_REF = {"exp": np.exp, "tanh": np.tanh, "erf": np.vectorize(math.erf, otypes=[float]),
        "sigmoid": lambda v: np.where(v < 0, np.exp(v) / (1 + np.exp(v)), 1 / (1 + np.exp(-v)))}


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, str]]:
    x = _inputs()
    A = te.placeholder((x.size,), name="A")
    outs = [te.compute((x.size,), lambda i, op=op: getattr(te, op)(A[i]), name=op)
            for op in _REF]
    mod = build(te.create_prim_func([A, *outs]), extra_flags=STRICT)
    got = [np.zeros_like(x) for _ in outs]
    mod(x, *got)
    with np.errstate(all="ignore"):
        return {op: (x, y, _REF[op](x.astype(np.float64)), mod.get_source())
                for op, y in zip(_REF, got, strict=True)}


@pytest.mark.parametrize("op", list(_REF))
def test_relative_error_below_4e7_over_the_float_range(results, op):
    x, y, ref, src = results[op]
    assert f"kiln_fast_{op}f(" in src
    finite = np.isfinite(ref) & (np.abs(ref) <= np.finfo(F32).max)
    err = np.abs(y[finite] - ref[finite]) / np.maximum(np.abs(ref[finite]), TINY)
    worst = int(np.argmax(err))
    assert err[worst] < (4e-7 if op == "erf" else 2.5e-7), (
        op, x[finite][worst], y[finite][worst], ref[finite][worst])


@pytest.mark.parametrize("op", list(_REF))
def test_nan_inf_and_overflow_edges(results, op):
    x, y, ref, _ = results[op]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(np.isinf(y), np.isinf(ref.astype(F32)))
    lim = {"exp": (0.0, np.inf), "tanh": (-1.0, 1.0), "erf": (-1.0, 1.0),
           "sigmoid": (0.0, 1.0)}[op]
    at = {v: y[np.flatnonzero(x == v)[0]] for v in (-np.inf, np.inf)}
    assert (at[-np.inf], at[np.inf]) == lim
    assert lim[0] <= np.nanmin(y) and np.nanmax(y) <= lim[1]  # never past the limits
    if op != "exp":  # odd functions keep the sign of zero; exp(+-0) is 1
        zeros = y[(x == 0) & np.signbit(x)] if op != "sigmoid" else y[x == 0] - 0.5
        assert np.all(zeros == 0)


def test_exp_reaches_the_denormals_and_overflows_to_inf():
    x = np.array([-87.0, -95.0, -100.0, -103.0, -104.0, -200.0, 88.5, 88.8, 1000.0], F32)
    A = te.placeholder((x.size,), name="A")
    B = te.compute((x.size,), lambda i: te.exp(A[i]), name="B")
    y = np.zeros_like(x)
    build(te.create_prim_func([A, B]))(x, y)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(F32)
    # denormal results are right to within two of their (coarse) units in the last place
    np.testing.assert_allclose(y, want, rtol=2e-7, atol=3e-45)
    assert y[5] == 0 and np.isinf(y[-2:]).all()


def test_float64_and_cuda_keep_libm():
    A = te.placeholder((8,), name="A", dtype="float64")
    B = te.compute((8,), lambda i: te.exp(A[i]) + te.erf(A[i]), name="B")
    src = CRenderer().render(lower(te.create_prim_func([A, B]))).code
    assert "exp(" in src and "kiln_fast" not in src
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.tanh(A[i]), name="B")
    assert "kiln_fast" not in CUDARenderer().render(lower(te.create_prim_func([A, B]))).code


def test_helpers_defined_once_in_dependency_order():
    assert needed(["fast_tanh", "fast_erf", "max"]) == ["fast_exp", "fast_erf", "fast_tanh"]
    assert render_fastmath(["min", "sigmoid"]) == ""
    text = render_helpers([{"kind": "fast_tanh", "type": "float", "name": "kiln_fast_tanhf"},
                           {"kind": "fast_tanh", "type": "float", "name": "kiln_fast_tanhf"},
                           {"kind": "max", "type": "float", "name": "kiln_max_float"}])
    assert text.count("float kiln_fast_expf(") == 1
    assert text.index("kiln_fast_expf(float") < text.index("kiln_fast_tanhf(float")
    assert "kiln_fast_erff" not in text
    assert "kiln_max_float(" in text


def test_kernel_named_like_a_helper_is_renamed():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.exp(A[i]), name="B")
    src = CRenderer().render(lower(te.create_prim_func([A, B])), name="fast_expf")
    assert src.entry == "kiln_fast_expf_kernel"
    src = CRenderer().render(lower(te.create_prim_func([A, B])), name="f32_as_u32")
    assert src.entry == "kiln_f32_as_u32_kernel"


@needs("gcc")
def test_gcc_vectorizes_a_loop_of_fast_calls(tmp_path: Path):
    """The point of the helpers: a loop calling them is vectorized (libm's are not)."""
    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: te.erf(A[i]) + te.tanh(A[i]) + te.sigmoid(A[i]),
                   name="B")
    src = tmp_path / "k.c"
    src.write_text(CRenderer().render(lower(te.create_prim_func([A, B]))).code)
    res = subprocess.run(["gcc", "-O3", "-std=gnu99", "-mavx2", "-mfma", "-c", str(src),
                          "-o", str(tmp_path / "k.o"), "-fopt-info-vec-optimized"],
                         capture_output=True, text=True, check=True)
    assert "loop vectorized" in res.stderr


def test_pow_squares_exactly_and_falls_back_to_libm():
    """pow(x, 2) is x * x (bit-exact); any other exponent still calls powf."""
    x = np.concatenate([np.random.default_rng(1).normal(0, 3, 500), [0.0, -0.0, np.inf,
                                                                      -np.inf, np.nan]])
    x = x.astype(F32)
    A = te.placeholder((x.size,), name="A")
    Y = te.placeholder((1,), name="Y")
    B = te.compute((x.size,), lambda i: te.power(A[i], Y[0]), name="B")
    mod = build(te.create_prim_func([A, Y, B]), extra_flags=STRICT)
    assert "kiln_fast_powf(" in mod.get_source()
    for y in (2.0, 3.0, 0.5, -1.0):
        out = np.zeros_like(x)
        mod(x, np.array([y], F32), out)
        with np.errstate(all="ignore"):
            want = np.power(x, F32(y)) if y != 2.0 else x * x
        ok = np.isfinite(x) & (x > 0) if y != 2.0 else np.ones(x.size, bool)
        np.testing.assert_allclose(out[ok], want[ok], rtol=1e-6, equal_nan=True)
        if y == 2.0:
            assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


def test_float_min_max_keep_the_plain_semantics_and_vectorize(tmp_path: Path):
    """max(a, b) = a > b ? a : b (a NaN b is returned), as bit masks in SIMD loops: a loop
    where the result feeds more arithmetic is vectorized even without masked instructions;
    scalar code keeps the plain helper."""
    a = np.array([1.0, -2.0, np.nan, 3.0, -0.0, 0.0, np.inf, -np.inf], F32)
    b = np.array([0.5, np.nan, 1.0, 3.0, 0.0, -0.0, 1.0, 1.0], F32)
    A, B = te.placeholder((8,), name="A"), te.placeholder((8,), name="B")
    mx = te.compute((8,), lambda i: te.max(A[i], B[i]), name="mx")
    mn = te.compute((8,), lambda i: te.min(A[i], B[i]), name="mn")
    mod = build(schedule_cpu(te.create_prim_func([A, B, mx, mn]), CpuConfig(vector_bits=128)),
                extra_flags=STRICT)
    assert "kiln_fast_maxf(" in mod.get_source() and "kiln_fast_minf(" in mod.get_source()
    got_max, got_min = np.zeros(8, F32), np.zeros(8, F32)
    mod(a, b, got_max, got_min)
    with np.errstate(invalid="ignore"):
        want_max, want_min = np.where(a > b, a, b), np.where(a < b, a, b)
    assert np.array_equal(got_max.view(np.uint32), want_max.view(np.uint32))
    assert np.array_equal(got_min.view(np.uint32), want_min.view(np.uint32))
    if shutil.which("gcc") is None:
        return
    X = te.placeholder((1024,), name="X")
    Y = te.compute((1024,), lambda i: te.max(X[i] * 3.0, 0.0) * 2.0 + 1.0, name="Y")
    func = te.create_prim_func([X, Y])
    # plain loop (scalar code): the one-instruction a > b ? a : b
    assert "kiln_max_float(" in CRenderer().render(lower(func)).code
    # a loop meant for SIMD (Kiln's vectorizer leaves a Max to gcc): the bit-mask blend
    code = CRenderer().render(lower(schedule_cpu(func, CpuConfig(vector_bits=256)))).code
    assert "kiln_fast_maxf(" in code
    src = tmp_path / "relu.c"
    src.write_text(code)
    res = subprocess.run(["gcc", "-O3", "-std=gnu99", "-mavx2", "-mfma", "-c", str(src),
                          "-o", str(tmp_path / "relu.o"), "-fopt-info-vec-optimized"],
                         capture_output=True, text=True, check=True)
    assert "loop vectorized" in res.stderr
