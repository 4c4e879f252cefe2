"""Declared intrinsics in the built-in lowering: ``attach_intrinsics`` is a phase-1 pass
(after compaction), and ``compact_buffer_allocation`` counts an intrinsic's operand as the
tile it touches, so staging buffers and accumulators shrink like any other buffer."""

from __future__ import annotations

import numpy as np

from tests.tir_transform.helpers import STRICT
from toolchain import te
from toolchain.codegen.artifact import support_of
from toolchain.driver import build
from toolchain.intrinsics import attach_intrinsics, load_intrinsics
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.compact_buffer import compact_buffer_allocation
from toolchain.tir.transform.pipeline import PHASES, lower

FMA = "c-generic.fma_f32_4x4"


def staged_matmul(m: int = 12, n: int = 8, k: int = 16) -> Schedule:
    """C = Ap @ B with Ap = A + 1 staged per k tile, 4x4x4 tiles tensorized with the
    c-generic FMA intrinsic, the accumulator a ``local`` cache written back per tile."""
    load_intrinsics("c-generic")
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    Ap = te.compute((m, k), lambda i, r: A[i, r] + 1.0, name="Ap")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(Ap[i, r] * B[r, j], axis=r), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    loc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(loc, jo)
    sch.compute_at(sch.get_block("Ap"), ko)
    sch.decompose_reduction(c, ko)
    sch.tensorize(ii, FMA)
    return sch


def _alloc_shapes(f: ir.PrimFunc) -> dict[str, list[int]]:
    from toolchain.tir.functor import post_order_visit

    out: dict[str, list[int]] = {}
    post_order_visit(f.body, lambda s: out.__setitem__(
        s.buffer.name, [int(d.value) for d in s.buffer.shape])
        if isinstance(s, ir.Allocate) else None)
    return out


def test_attach_intrinsics_is_a_built_in_phase_1_pass_after_compaction() -> None:
    phase1 = PHASES[1]
    assert attach_intrinsics in phase1
    assert phase1.index(attach_intrinsics) > phase1.index(compact_buffer_allocation)


def test_lower_renders_the_intrinsic_without_extra_passes() -> None:
    sch = staged_matmul()
    f = lower(sch)
    text = str(f)
    assert '"kiln_fma_f32_4x4_' in text and '"kiln_fma_f32_4x4",' not in text
    # the target's C helpers (keyed by the functions they define), then the body
    helpers, d = support_of(f).definitions
    assert helpers.key.startswith("c_helpers:")
    assert d.key.startswith("kiln_fma_f32_4x4_") and d.key in text
    assert d.text.startswith(f"static inline int32_t {d.key}(")
    # a user pass that renders again finds nothing left to do
    assert support_of(lower(sch, passes={1: [attach_intrinsics]})) == support_of(f)


def test_rendering_is_a_no_op_without_intrinsic_calls() -> None:
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    trace: list[tuple[str, ir.PrimFunc]] = []
    lower(te.create_prim_func([A, B]), trace=trace)
    names = [n for n, _ in trace]
    k = names.index("attach_intrinsics")
    assert trace[k][1] is trace[k - 1][1]
    assert "c_support" not in trace[k][1].attrs


def test_intrinsic_operands_are_compacted_to_their_tiles() -> None:
    """Ap (read through the call's A pointer) becomes one 4x4 tile per k step and C_local
    (the call's C) one 4x4 accumulator per (i, j) tile; both were whole before."""
    sch = staged_matmul()
    trace: list[tuple[str, ir.PrimFunc]] = []
    lower(sch, trace=trace)
    f = dict(trace)["attach_intrinsics"]  # phase 1 done, buffers not flattened yet
    shapes = _alloc_shapes(f)
    assert shapes["Ap"] == [4, 4], shapes
    assert shapes["C_local"] == [4, 4], shapes
    text = str(f)
    assert text.index("for k_0") < text.index("Ap = T.allocate"), text
    assert [d.key[:17] for d in support_of(f).definitions][-1] == "kiln_fma_f32_4x4_"
    rng = np.random.default_rng(1)
    a, b = rng.random((12, 16), np.float32), rng.random((16, 8), np.float32)
    c = np.zeros((12, 8), np.float32)
    build(sch, "c-generic", extra_flags=STRICT)(a, b, c)
    np.testing.assert_allclose(c, (a + 1) @ b, rtol=1e-5)


def test_a_pointer_passed_to_other_code_keeps_the_buffer_whole() -> None:
    """An extern call that is not a registered intrinsic may touch anything: no shrinking."""
    buf = ir.Buffer("T", (16,), "float32")
    out = ir.Buffer("O", (16,), "float32")
    i = ir.Var("i", "int32")
    body = ir.For(i, ir.IntImm(0), ir.IntImm(16), "serial", ir.SeqStmt((
        ir.BufferStore(buf, ir.FloatImm("float32", 1.0), (i,)),
        ir.Evaluate(ir.Call("int32", "some_extern",
                            [ir.Call("handle", "tir.address_of", [buf[i]])])),
        ir.BufferStore(out, buf[i], (i,)),
    )))
    f = ir.PrimFunc([out], ir.Allocate(buf, body), "f")
    assert _alloc_shapes(compact_buffer_allocation(f))["T"] == [16]
    plain = ir.PrimFunc([out], ir.Allocate(buf, ir.For(i, ir.IntImm(0), ir.IntImm(16),
                                                       "serial", ir.SeqStmt((
        ir.BufferStore(buf, ir.FloatImm("float32", 1.0), (i,)),
        ir.BufferStore(out, buf[i], (i,)))))), "g")
    assert _alloc_shapes(compact_buffer_allocation(plain))["T"] == [1]


def test_unit_loop_variables_do_not_defeat_compaction() -> None:
    """``T[b * 16 + i]`` under ``for b in range(1)`` is the element ``T[i]``: written one
    way and read the other, the buffer still shrinks to one element per ``i``."""
    buf = ir.Buffer("T", (16,), "float32")
    out = ir.Buffer("O", (16,), "float32")
    b, i = ir.Var("b", "int32"), ir.Var("i", "int32")
    body = ir.For(b, ir.IntImm(0), ir.IntImm(1), "serial", ir.For(
        i, ir.IntImm(0), ir.IntImm(16), "serial", ir.SeqStmt((
            ir.BufferStore(buf, ir.FloatImm("float32", 1.0), (i,)),
            ir.BufferStore(out, buf[b * 16 + i], (i,))))))
    f = compact_buffer_allocation(ir.PrimFunc([out], ir.Allocate(buf, body), "f"))
    assert _alloc_shapes(f)["T"] == [1]
