"""Every schedule primitive, built to C (strict warnings) and run against numpy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.tir import workloads as W
from tests.tir_transform.helpers import STRICT, build_and_check
from toolchain import te
from toolchain.codegen.artifact import CDefinition, CSupport
from toolchain.driver import build
from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule, TensorIntrin


@pytest.fixture(autouse=True, params=["c", "llvm"])
def over_backends(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every check of this file through the C backend and through LLVM."""
    from tests.tir_transform import helpers

    if request.param == "llvm" and request.node.get_closest_marker("c_only"):
        pytest.skip("checks the C text or a C-only intrinsic (tests/codegen/test_llvm.py "
                    "covers the LLVM side)")
    monkeypatch.setattr(helpers, "BACKEND", request.param)
    return request.param


def _loops(sch: Schedule, name: str) -> list:
    return sch.get_loops(sch.get_block(name))


@pytest.mark.parametrize("factors", [[None, 4], [3, None], [None, 5], [2, None, 3]])
def test_split(factors):
    wl = W.matmul(16, 12, 8)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    sch.split(i, factors)
    sch.split(j, [None, 5])
    build_and_check(sch, wl)


def test_fuse_and_reorder():
    wl = W.matmul(8, 12, 6)
    sch = Schedule(wl[0])
    i, j, k = _loops(sch, "C")
    sch.reorder(k, j, i)
    f = sch.fuse(j, i)
    sch.split(f, [None, 7])
    build_and_check(sch, wl)


def test_tile():
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    sch.tile([i, j], [[None, 4], [None, 8]])
    build_and_check(sch, wl)


def test_compute_at_and_compute_inline_conv():
    wl = W.conv2d(1, 3, 8, 8, 4, 3)
    sch = Schedule(wl[0])
    _, o, y, _, *_ = _loops(sch, "Y")
    sch.compute_at(sch.get_block("P"), y)
    build_and_check(sch, wl)
    sch2 = Schedule(wl[0])
    sch2.compute_inline(sch2.get_block("P"))
    build_and_check(sch2, wl)


def test_reverse_compute_at_and_reverse_compute_inline():
    wl = W.matmul_relu(16, 16, 8)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    io, ii = sch.split(i, [None, 4])
    sch.reorder(io, j, ii)
    sch.reverse_compute_at(sch.get_block("D"), io)
    build_and_check(sch, wl)
    chain = W.elementwise_chain(6, 10)
    sch2 = Schedule(chain[0])
    sch2.reverse_compute_inline(sch2.get_block("D"))
    build_and_check(sch2, chain)


@pytest.mark.parametrize("scope", ["global", "local", "shared"])
def test_cache_read_and_cache_write(scope):
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    sch.reorder(io, j, k, ii)
    cr = sch.cache_read(c, 0, scope)
    sch.compute_at(cr, io)
    cw = sch.cache_write(c, 0, scope)
    sch.reverse_compute_at(cw, io)
    build_and_check(sch, wl)


def test_set_scope_and_storage_align():
    wl = W.elementwise_chain(8, 12)
    sch = Schedule(wl[0])
    sch.set_scope(sch.get_block("B"), 0, "local")
    sch.storage_align(sch.get_block("C"), 0, axis=0, factor=16, offset=3)
    build_and_check(sch, wl)


@pytest.mark.c_only
def test_vectorize_parallel_unroll():
    wl = W.matmul(16, 32, 8)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(i, jo, k, ji)
    sch.decompose_reduction(c, k)
    sch.vectorize(ji)
    sch.parallel(i)
    sch.unroll(k)
    mod = build_and_check(sch, wl)
    src = mod.get_source()
    assert "#pragma omp parallel for" in src and "float32x16" in src
    assert "-fopenmp" in mod.build_info["flags"]


def test_parallel_without_openmp_is_a_plain_loop():
    wl = W.row_sum(8, 8)
    sch = Schedule(wl[0])
    i, _ = _loops(sch, "B")
    sch.parallel(i)
    mod = build_and_check(sch, wl, openmp=False)
    assert "omp" not in mod.get_source()


def test_bind_vthread_builds_and_gpu_axes_are_refused_on_c():
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, _, _ = _loops(sch, "C")
    io, _ = sch.split(i, [4, None])
    sch.bind(io, "vthread")
    build_and_check(sch, wl)
    sch2 = Schedule(wl[0])
    i, _, _ = _loops(sch2, "C")
    sch2.bind(i, "threadIdx.x")
    with pytest.raises(UnsupportedError, match=r"loop i is bound to threadIdx.x; GPU thread "
                                               "axes need a cuda target"):
        build(sch2)


def test_decompose_reduction_and_rfactor():
    wl = W.row_sum(8, 24)
    sch = Schedule(wl[0])
    i, k = _loops(sch, "B")
    sch.decompose_reduction(sch.get_block("B"), k)
    build_and_check(sch, wl)
    for axis in (0, 1):
        sch = Schedule(wl[0])
        i, k = _loops(sch, "B")
        ko, ki = sch.split(k, [None, 4])
        sch.rfactor(ki, axis)
        build_and_check(sch, wl, rtol=1e-4)


def test_blockize_and_annotate_pragma():
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, j, k = _loops(sch, "C")
    io, ii = sch.split(i, [None, 4])
    sch.annotate(io, "my_note", 1)
    sch.pragma(ii, "unroll_max_step", 16)
    sch.blockize(ii)
    build_and_check(sch, wl)


def _mma_desc(n: int) -> ir.PrimFunc:
    from toolchain.tir.schedule import state as st

    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.create_prim_func([A, B, C])
    (r,) = [x for x in st.all_blocks(f) if x.block.name_hint == "C"]
    return st.replace_block(f, r.block, dataclasses.replace(r.block, init=None))


def _tensorize_schedule(intrin: str) -> Schedule:
    sch = Schedule(W.matmul(16, 16, 16)[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.decompose_reduction(c, ko)
    sch.tensorize(ii, intrin)
    return sch


def test_tensorize_with_loop_implementation():
    desc = _mma_desc(4)
    TensorIntrin.register("kiln_test_mma4_loops", desc, desc, override=True)
    build_and_check(_tensorize_schedule("kiln_test_mma4_loops"), W.matmul(16, 16, 16))


@pytest.mark.c_only
def test_tensorize_with_extern_call_implementation():
    desc = _mma_desc(4)
    a, b, c = desc.buffers
    call = ir.Call("int32", "mma4_ld16", [ir.Call("handle", "tir.address_of", [x[0, 0]])
                                          for x in (c, a, b)])
    impl = ir.PrimFunc((a, b, c), ir.Evaluate(call), "mma4_impl")
    TensorIntrin.register("kiln_test_mma4_extern", desc, impl, override=True)
    sch = _tensorize_schedule("kiln_test_mma4_extern")
    prelude = (
        "static int32_t mma4_ld16(float *c, const float *a, const float *b) {\n"
        "  for (int i = 0; i < 4; ++i)\n    for (int j = 0; j < 4; ++j)\n"
        "      for (int k = 0; k < 4; ++k) c[i * 16 + j] += a[i * 16 + k] * b[k * 16 + j];\n"
        "  return 0;\n}")

    def add_prelude(f: ir.PrimFunc) -> ir.PrimFunc:
        return ir.PrimFunc(f.params, f.body, f.name, {
            **f.attrs, "c_support": CSupport(definitions=(CDefinition("mma4_ld16", prelude),))})

    wl = W.matmul(16, 16, 16)
    mod = build_and_check(sch, wl, passes={4: [add_prelude]})
    assert "mma4_ld16(&C[" in mod.get_source()


def test_symbolic_shapes_build_for_any_size():
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    B = te.compute((n, 8), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 3])
    mod = build(sch, extra_flags=STRICT)
    for rows in (1, 5, 9):
        a = np.random.rand(rows, 8).astype("float32")
        b = np.zeros_like(a)
        mod(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


@pytest.mark.c_only
def test_unrolled_loop_around_a_local_tile_builds():
    """The tile is allocated outside the unrolled loop (never duplicated per copy)."""
    wl = W.matmul(8, 16, 8)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [2, None])
    sch.reorder(i, jo, k, ji)
    out = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(out, jo)
    sch.unroll(jo)
    mod = build_and_check(sch, wl)
    assert mod.get_source().count("float C_local[16]") == 1
