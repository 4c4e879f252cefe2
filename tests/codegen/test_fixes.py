"""Regression tests for code-generation defects: helpers, reserved names, round, rank 0, heap.

Each test failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.tir_transform.helpers import STRICT
from tests.tools import needs
from toolchain import te
from toolchain.codegen import get_renderer, sanitize
from toolchain.codegen.c import CRenderer
from toolchain.codegen.cstyle import is_reserved
from toolchain.driver import build, lower
from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.interpreter import run

ALL_DTYPES = ["bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
              "uint8", "uint16", "uint32", "uint64"]


def _values(dtype: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(n) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-4, 4, n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100) + 1, n).astype(dtype)


# ------------------------------------------------------------------ 1. helpers


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_min_max_build_for_every_supported_dtype(dtype):
    A = te.placeholder((8,), name="A", dtype=dtype)
    B = te.placeholder((8,), name="B", dtype=dtype)
    lo = te.compute((8,), lambda i: te.min(A[i], B[i]), name="lo")
    hi = te.compute((8,), lambda i: te.max(A[i], B[i]), name="hi")
    mod = build(te.create_prim_func([A, B, lo, hi]), extra_flags=STRICT)
    a, b = _values(dtype, 8, 1), _values(dtype, 8, 2)
    out_lo, out_hi = np.zeros(8, dtype), np.zeros(8, dtype)
    mod(a, b, out_lo, out_hi)
    np.testing.assert_array_equal(out_lo, np.minimum(a, b))
    np.testing.assert_array_equal(out_hi, np.maximum(a, b))


def _helper_defs(code: str) -> list[str]:
    return re.findall(r"^static inline [^(]*?\b(kiln_\w+)\(", code, flags=re.M)


def test_only_the_helpers_a_kernel_references_are_defined_in_a_fixed_order():
    A = te.placeholder((8,), name="A", dtype="float16")
    B = te.compute((8,), lambda i: te.max(te.min(A[i], A[7 - i]), A[i]), name="B")
    code = CRenderer().render(lower(te.create_prim_func([A, B]))).code
    assert _helper_defs(code) == ["kiln_max__Float16", "kiln_min__Float16"]
    plain = te.compute((8,), lambda i: A[i] + A[i], name="C")
    code = CRenderer().render(lower(te.create_prim_func([A, plain]))).code
    assert _helper_defs(code) == []
    assert "kiln_alloc" not in code


def test_every_referenced_helper_is_defined():
    A = te.placeholder((16,), name="A", dtype="int64")
    F = te.placeholder((16,), name="F", dtype="float32")
    B = te.compute((16,), lambda i: te.floordiv(A[i] - 8, 3) + te.floormod(A[i], -5)
                   + te.max(A[i], te.const(2, "int64")), name="B")
    C = te.compute((16,), lambda i: te.sigmoid(F[i]) + te.min(F[i], 0.5), name="C")
    code = CRenderer().render(lower(te.create_prim_func([A, F, B, C]))).code
    defined = set(_helper_defs(code))
    called = set(re.findall(r"\b(kiln_(?:min|max|floordiv|floormod|sigmoid)\w*)\(", code))
    assert called and called <= defined


def test_entry_point_never_collides_with_a_helper():
    A = te.placeholder((8,), name="A", dtype="float64")
    B = te.compute((8,), lambda i: te.max(A[i], 0.0), name="B")
    src = CRenderer().render(lower(te.create_prim_func([A, B], name="max_double")))
    assert src.entry != "kiln_max_double"
    assert src.code.count("kiln_max_double(") >= 2 and src.entry in src.code


# ------------------------------------------------------------------ 2. reserved names


@pytest.mark.parametrize("name", [
    "tanh", "erf", "exp", "expf", "nearbyint", "fmaxf", "isnan", "NAN", "INFINITY", "M_PI",
    "int32_t", "size_t", "SIZE_MAX", "NULL", "main", "free", "posix_memalign", "abort",
    "_Foo", "__x", "kiln_max_float", "float32x8", "bool", "restrict", "_Bool", "typeof",
    "static_assert", "offsetof", "errno", "signbit", "HUGE_VAL", "int8x16_t", "threadIdx",
])
def test_reserved_names_are_renamed(name):
    assert is_reserved(name)
    out = sanitize(name)
    assert out != name and not is_reserved(out) and re.fullmatch(r"[A-Za-z_]\w*", out)


@pytest.mark.parametrize("name", ["A", "x_1", "conv1_w", "tanh_out", "T_erf", "vi", "_9lives"])
def test_ordinary_names_are_kept(name):
    assert sanitize(name) == name


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_buffers_named_like_math_functions_compile(dtype):
    A = te.placeholder((8,), name="erf", dtype=dtype)
    X = te.placeholder((8,), name="v_tanh", dtype=dtype)
    B = te.compute((8,), lambda i: te.tanh(A[i]) + te.erf(X[i]) + te.exp(A[i])
                   + te.round(X[i]) + te.sqrt(te.abs(A[i])), name="tanh")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="exp")
    func = te.create_prim_func([A, X, C])
    mod = build(func, extra_flags=STRICT)
    a, x = _values(dtype, 8, 3), _values(dtype, 8, 4)
    got, want = np.zeros(8, dtype), np.zeros(8, dtype)
    mod(a, x, got)
    run(func, a, x, want)
    np.testing.assert_allclose(got.astype("float64"), want.astype("float64"),
                               rtol=2e-3 if dtype == "float16" else 1e-5)


def test_renamed_names_do_not_collide_with_each_other():
    names = ["tanh", "v_tanh", "v_tanh_1", "kiln", "kiln_1", "main", "v_main"]
    bufs = [te.placeholder((4,), name=n) for n in names]
    out = te.compute((4,), lambda i: sum((b[i] for b in bufs[1:]), bufs[0][i]), name="NAN")
    src = CRenderer().render(lower(te.create_prim_func([*bufs, out]))).code
    params = re.search(r"int32_t kiln_main\((.*)\)", src).group(1)
    got = [p.split()[-1] for p in params.split(",")]
    assert len(set(got)) == len(got) == len(names) + 1
    assert not any(is_reserved(n) for n in got)


# ------------------------------------------------------------------ 3. round


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_round_is_half_to_even_in_c_and_interpreter(dtype):
    vals = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, 3.5, -3.5, 0.0, 7.0],
                    dtype)
    A = te.placeholder((vals.size,), name="A", dtype=dtype)
    B = te.compute((vals.size,), lambda i: te.round(A[i]), name="B")
    func = te.create_prim_func([A, B])
    mod = build(func, extra_flags=STRICT)
    got, ref = np.zeros_like(vals), np.zeros_like(vals)
    mod(vals, got)
    run(func, vals, ref)
    np.testing.assert_array_equal(got, np.round(vals))
    np.testing.assert_array_equal(ref, np.round(vals))
    assert "nearbyint" in mod.get_source()


# ------------------------------------------------------------------ 4. rank 0


def _rank0_funcs():
    A = te.placeholder((), name="A")
    X = te.placeholder((3, 4), name="X")
    k = te.reduce_axis((0, 3), name="k")
    j = te.reduce_axis((0, 4), name="j")
    total = te.compute((), lambda: te.sum(X[k, j], axis=[k, j]), name="total")
    scaled = te.compute((), lambda: total[()] * A[()], name="scaled")
    bcast = te.compute((3, 4), lambda i, jj: X[i, jj] - scaled[()], name="bcast")
    return te.create_prim_func([A, X, scaled, bcast])


def test_rank0_buffers_build_and_match_the_interpreter():
    func = _rank0_funcs()
    a = np.array(0.5, "float32")
    x = np.arange(12, dtype="float32").reshape(3, 4)
    want_s = np.array(x.sum() * 0.5, "float32")
    for runner in (lambda f, *args: build(f, extra_flags=STRICT)(*args), run,
                   lambda f, *args: run(lower(f), *args)):
        s, b = np.zeros((), "float32"), np.zeros((3, 4), "float32")
        runner(func, a, x, s, b)
        np.testing.assert_allclose(s, want_s, rtol=1e-6)
        np.testing.assert_allclose(b, x - want_s, rtol=1e-6)


def test_rank0_integer_output_builds():
    A = te.placeholder((), name="A", dtype="int8")
    B = te.compute((), lambda: te.max(A[()], te.const(3, "int8")), name="B")
    mod = build(te.create_prim_func([A, B]), extra_flags=STRICT)
    for v in (-5, 3, 9):
        b = np.zeros((), "int8")
        mod(np.array(v, "int8"), b)
        assert int(b) == max(v, 3)


# ------------------------------------------------------------------ heap


def _big_temporary():
    A = te.placeholder((256, 128), name="A")
    T = te.compute((256, 128), lambda i, j: A[i, j] * 2.0, name="T_big")
    B = te.compute((256, 128), lambda i, j: T[255 - i, j] + 1.0, name="B")
    return lower(te.create_prim_func([A, B]))


def test_heap_is_used_for_large_temporaries_by_default():
    code = get_renderer("c").render(_big_temporary()).code
    assert "kiln_alloc(" in code and "posix_memalign" in code


def test_allow_heap_false_refuses_heap_and_names_the_buffer():
    with pytest.raises(UnsupportedError) as err:
        get_renderer("c", allow_heap=False).render(_big_temporary())
    msg = str(err.value)
    assert "T_big" in msg and "131072 bytes" in msg and "heap" in msg


def test_allow_heap_false_keeps_small_temporaries_on_the_stack():
    A = te.placeholder((8, 8), name="A")
    T = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="T_small")
    B = te.compute((8, 8), lambda i, j: T[7 - i, j] + 1.0, name="B")
    code = get_renderer("c", allow_heap=False).render(
        lower(te.create_prim_func([A, B]))).code
    assert "T_small[64]" in code
    for word in ("malloc", "posix_memalign", "free(", "kiln_alloc", "abort"):
        assert word not in code


def test_symbolic_temporary_without_heap_is_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    T = te.compute((n,), lambda i: A[i] * 2.0, name="T_sym")
    B = te.compute((n,), lambda i: T[n - 1 - i], name="B")
    with pytest.raises(UnsupportedError, match=r"T_sym.*run time"):
        get_renderer("c", allow_heap=False).render(lower(te.create_prim_func([A, B])))



# ------------------------------------------------------------------ the intrinsic table


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_math_intrinsic_means_the_same_in_c_and_the_interpreter(dtype):
    from toolchain.codegen.math_intrinsics import INTRINSICS

    x = np.array([0.25, 0.5, 1.5, 2.5, 1.9, 0.7, 3.5, 1.0], dtype)
    y = np.array([2.0, 0.5, 1.5, -1.0, 0.3, 2.0, 3.0, 0.75], dtype)
    A = te.placeholder((8,), name="A", dtype=dtype)
    B = te.placeholder((8,), name="B", dtype=dtype)
    outs = []
    for op, intr in sorted(INTRINSICS.items()):
        out_dtype = "bool" if op == "isnan" else dtype
        args = (lambda i: (A[i], B[i])) if intr.arity == 2 else (lambda i: (A[i],))
        outs.append(te.compute((8,), lambda i, op=op, args=args, dt=out_dtype:
                               ir.Call(dt, op, args(i)), name=f"out_{op}"))
    func = te.create_prim_func([A, B, *outs])
    got = [np.zeros(8, o.dtype) for o in outs]
    want = [np.zeros(8, o.dtype) for o in outs]
    build(func, extra_flags=STRICT)(x, y, *got)
    run(func, x, y, *want)
    for o, g, w in zip(outs, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == "float32" else 1e-12,
                                   err_msg=o.name)


MIN_MAX_DTYPES = ["bool", "float16", "int8", "float32"]


def _min_max_source(dtype: str) -> str:
    """CUDA source of a kernel taking the min and max of ``dtype`` values, named by dtype."""
    from toolchain.codegen.cuda import CUDARenderer
    from toolchain.tir.schedule import Schedule

    A = te.placeholder((64,), name="A", dtype=dtype)
    B = te.placeholder((64,), name="tanh", dtype=dtype)
    C = te.compute((64,), lambda i: te.max(te.min(A[i], B[i]), A[63 - i]), name="main")
    sch = Schedule(te.create_prim_func([A, B, C]))
    (i,) = sch.get_loops(sch.get_block("main"))
    io, ii = sch.split(i, [None, 32])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.x")
    return CUDARenderer().render(lower(sch.mod), name=f"mm_{dtype}").code


@pytest.fixture(scope="module")
def min_max_ptx() -> dict[str, str]:
    """Each dtype's source, and the PTX of all four from one ``compile_ptx`` (under
    ``"all"``; its error where it failed): one nvcc run, not four (its fixed cost, about
    0.4 CPU s, is most of each). The sources go one after the other: their kernels and
    helpers are named by dtype, so no source can use another's helper."""
    from toolchain.codegen.cuda import compile_ptx

    got = {d: _min_max_source(d) for d in MIN_MAX_DTYPES}
    try:
        got["all"] = compile_ptx("".join(got.values()), "sm_80")
    except Exception as e:  # (each test then compiles its own source alone)
        got["all"] = f"error: {e}"
    return got


def _lines_of(sources: dict[str, str], dtype: str) -> set[int]:
    """The lines (from 1) of ``dtype``'s source in the sources joined in order."""
    first = 1
    for d in MIN_MAX_DTYPES:
        n = sources[d].count("\n")
        if d == dtype:
            return set(range(first, first + n))
        first += n
    raise KeyError(dtype)


@needs("nvcc")
@pytest.mark.parametrize("dtype", MIN_MAX_DTYPES)
def test_cuda_defines_the_min_max_helpers_it_uses(dtype, min_max_ptx):
    from toolchain.codegen.cuda import compile_ptx

    src = min_max_ptx[dtype]
    assert "static __device__ __forceinline__" in src
    ptx = min_max_ptx["all"]
    if ptx.startswith("error: "):  # the shared run failed: this source alone says
        errors = ptx
        ptx = compile_ptx(src, "sm_80")
        # (built alone but not with the others: the joined sources broke it, and each test
        # would pay nvcc's fixed cost again)
        lines = {int(n) for n in re.findall(r"kernels\.cu\((\d+)\): error", errors)}
        assert not lines & _lines_of(min_max_ptx, dtype), \
            f"{dtype}: compiles alone, not with the others: {errors[-3000:]}"
    assert f".entry kiln_mm_{dtype}_kernel0" in ptx


def test_render_helpers_merges_the_helpers_of_several_kernels(tmp_path):
    import subprocess

    from toolchain.codegen.cstyle import render_helpers

    used = []
    for dtype in ("bool", "float16", "bool", "int64"):
        A = te.placeholder((8,), name="A", dtype=dtype)
        B = te.compute((8,), lambda i, A=A: te.max(A[i], A[7 - i]), name="B")
        r = CRenderer()
        r.render(lower(te.create_prim_func([A, B])))
        used += r.helper_list()
    text = render_helpers(used)
    names = _helper_defs(text)
    assert names == ["kiln_max__Float16", "kiln_max_bool", "kiln_max_int64_t"]
    src = tmp_path / "h.c"
    src.write_text("#include <stdbool.h>\n#include <stdint.h>\n" + text
                   + "\nint use(void) { return kiln_max_bool(true, false)"
                   " + (int)kiln_max__Float16(1, 2) + (int)kiln_max_int64_t(3, 4); }\n")
    res = subprocess.run(["cc", "-c", *STRICT, str(src), "-o", str(tmp_path / "h.o")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def test_register_tile_variables_do_not_collide_with_buffer_names():
    from toolchain.tir.schedule import Schedule

    n = 16
    A = te.placeholder((n, n), name="C_local_0")   # the name of the tile's first register
    B = te.placeholder((n, n), name="C_local_1")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    sch.reorder(io, kk, ii, j)
    out = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(out, io)
    init = sch.decompose_reduction(c, kk)
    for blk in (c, init, out):
        *_, rows, cols = sch.get_loops(blk)
        sch.vectorize(cols)
        sch.unroll(rows)
    mod = build(sch, extra_flags=STRICT)
    src = mod.get_source()
    assert "C_local_0_1" in src  # registers renamed, the parameters kept their names
    assert "const float* restrict C_local_0, const float* restrict C_local_1" in src
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    got = np.zeros((n, n), np.float32)
    mod(a, b, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)


def test_every_dialect_takes_allow_heap():
    assert get_renderer("c", allow_heap=False).allow_heap is False
    assert get_renderer("cuda", allow_heap=False).allow_heap is False
    assert get_renderer("cuda").allow_heap is False  # GPU kernels never use the heap


def test_loop_variables_named_like_math_functions_compile():
    A = te.placeholder((8, 8), name="A", dtype="float64")
    B = te.compute((8, 8), lambda erf, tanh: te.erf(A[erf, tanh]) + te.tanh(A[tanh, erf]),
                   name="B")
    mod = build(te.create_prim_func([A, B]), extra_flags=STRICT)
    a = np.linspace(-1, 1, 64).reshape(8, 8)
    b = np.zeros((8, 8))
    mod(a, b)
    from math import erf, tanh
    want = np.array([[erf(a[i, j]) + tanh(a[j, i]) for j in range(8)] for i in range(8)])
    np.testing.assert_allclose(b, want, rtol=1e-12)
    assert "v_erf" in mod.get_source() and "v_tanh" in mod.get_source()
