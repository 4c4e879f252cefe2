"""More primitive cases: stencils, producers/consumers, successful tensorize, GPU tiles."""

from __future__ import annotations

import dataclasses

import numpy as np

from tests.tir import workloads as W
from toolchain import te
from toolchain.tir import ir
from toolchain.tir.interpreter import run
from toolchain.tir.schedule import Schedule, TensorIntrin
from toolchain.tir.schedule import state as st


def test_compute_at_stencil_covers_the_union_of_reads() -> None:
    A = te.placeholder((18,), name="A")
    B = te.compute((18,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((16,), lambda i: B[i] + B[i + 2], name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    (i,) = sch.get_loops(sch.get_block("C"))
    i0, _ = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("B"), i0)
    text = str(sch.mod)
    assert "for ax0 in range(6):" in text and "vi = T.axis.spatial(18, i_0 * 4 + ax0)" in text
    a, c = np.arange(18, dtype="float32"), np.zeros(16, "float32")
    run(sch.mod, a, c)
    np.testing.assert_allclose(c, a[:16] * 2 + a[2:] * 2)


def test_producers_and_consumers() -> None:
    sch = Schedule(W.matmul_relu()[0])
    c, d = sch.get_block("C"), sch.get_block("D")
    assert sch.get_consumers(c) == [d] and sch.get_producers(d) == [c]
    assert sch.get_producers(c) == [] and sch.get_consumers(d) == []


def _mma_pair(n: int = 4) -> tuple[ir.PrimFunc, ir.PrimFunc]:
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.create_prim_func([A, B, C])
    (r,) = [x for x in st.all_blocks(f) if x.block.name_hint == "C"]
    desc = st.replace_block(f, r.block, dataclasses.replace(r.block, init=None))
    a, b, c = desc.buffers
    ptr = [ir.Call("handle", "tir.address_of", [x[0, 0]]) for x in (a, b, c)]
    impl = ir.PrimFunc((a, b, c), ir.Evaluate(ir.Call("int32", "mma4x4x4", ptr)))
    return desc, impl


def _tiled(sch: Schedule) -> object:
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.decompose_reduction(c, ko)
    return ii


def test_tensorize_with_loop_implementation_runs() -> None:
    desc, _ = _mma_pair()
    TensorIntrin.register("test_mma_loops", desc, desc, override=True)
    wl = W.matmul(8, 8, 8)
    sch = Schedule(wl[0])
    sch.tensorize(_tiled(sch), "test_mma_loops")
    text = str(sch.mod)
    assert "T.block_attr({'tensorized': 'test_mma_loops'})" in text
    assert "T.writes(C[i_0 * 4:i_0 * 4 + 4, j_0 * 4:j_0 * 4 + 4])" in text
    W.check(sch.mod, wl)


def test_tensorize_with_extern_call_runs() -> None:
    desc, impl = _mma_pair()
    TensorIntrin.register("test_mma_extern", desc, impl, override=True)
    wl = W.matmul(8, 8, 8)
    sch = Schedule(wl[0])
    sch.tensorize(_tiled(sch), "test_mma_extern")
    assert ('T.call_extern("int32", "mma4x4x4", T.address_of(A[i_0 * 4, k_0 * 4]), '
            'T.address_of(B[k_0 * 4, j_0 * 4]), T.address_of(C[i_0 * 4, j_0 * 4]))'
            in str(sch.mod))

    def mma(a: object, b: object, c: object) -> int:
        (ai, ak), (bk, bj), (ci, cj) = a.index, b.index, c.index
        c.array[ci:ci + 4, cj:cj + 4] += a.array[ai:ai + 4, ak:ak + 4] @ \
            b.array[bk:bk + 4, bj:bj + 4]
        return 0

    args = wl[1]()
    run(sch.mod, *args, externs={"mma4x4x4": mma})
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-5, atol=1e-5)


def test_register_refuses_mismatched_buffers() -> None:
    desc, _ = _mma_pair(4)
    other, _ = _mma_pair(8)
    import pytest

    from toolchain.errors import ScheduleError

    with pytest.raises(ScheduleError, match="desc buffers .* and impl buffers .* must match"):
        TensorIntrin.register("test_bad", desc, other)


def test_register_again_keeps_the_intrinsic_and_checks_new_functions() -> None:
    import pytest

    from toolchain.errors import ScheduleError

    desc, impl = _mma_pair(4)
    first = TensorIntrin.register("test_again", desc, impl, override=True)
    # the same functions again (what load_intrinsics does per schedule): the same one
    assert TensorIntrin.register("test_again", desc, impl, override=True) is first
    assert TensorIntrin.get("test_again") is first
    # other functions under the name are checked as the first ones were
    other, _ = _mma_pair(8)
    with pytest.raises(ScheduleError, match="desc buffers .* and impl buffers"):
        TensorIntrin.register("test_again", desc, other, override=True)
    assert TensorIntrin.get("test_again") is first
    with pytest.raises(ScheduleError, match="already registered"):
        TensorIntrin.register("test_again", desc, impl)
    desc2, impl2 = _mma_pair(4)  # equal, not the same objects: registered anew
    second = TensorIntrin.register("test_again", desc2, impl2, override=True)
    assert second is not first and TensorIntrin.get("test_again") is second


def test_gpu_tiled_matmul_with_shared_memory_runs() -> None:
    wl = W.matmul(32, 32, 32)
    sch = Schedule(wl[0], target="cuda-sm80")
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    bx, tx = sch.split(i, [None, 8])
    by, ty = sch.split(j, [None, 8])
    ko, ki = sch.split(k, [None, 8])
    sch.reorder(bx, by, ko, tx, ty, ki)
    sch.bind(bx, "blockIdx.x")
    sch.bind(by, "blockIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.bind(ty, "threadIdx.y")
    a_sh = sch.cache_read(c, "A", "shared")
    b_sh = sch.cache_read(c, "B", "shared")
    sch.compute_at(a_sh, ko)
    sch.compute_at(b_sh, ko)
    text = str(sch.mod)
    assert "for ax0, ax1 in T.grid(8, 8):" in text
    sch.verify()
    W.check(sch.mod, wl)


def test_cache_read_for_some_consumers_only() -> None:
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: A[i] + B[i], name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    sch.cache_read(sch.get_block("B"), "A", "local", consumer_blocks=[sch.get_block("B")])
    text = str(sch.mod)
    assert "B[vi] = A_local[vi] * T.float32(2.0)" in text
    assert "C[vi_1] = A[vi_1] + B[vi_1]" in text
    a, c = np.arange(8, dtype="float32"), np.zeros(8, "float32")
    run(sch.mod, a, c)
    np.testing.assert_allclose(c, a * 3)
    import pytest

    from toolchain.errors import ScheduleError

    with pytest.raises(ScheduleError, match="consumer block 'B' does not read A$"):
        sch.cache_read(sch.get_block("C"), "A", "shared", consumer_blocks=[sch.get_block("B")])


def test_compute_at_into_a_blockized_consumer() -> None:
    wl = W.matmul_relu(16, 16, 16)
    sch = Schedule(wl[0])
    i, j = sch.get_loops(sch.get_block("D"))
    i0, i1 = sch.split(i, [None, 4])
    sch.blockize(i1)
    sch.compute_at(sch.get_block("C"), i0)
    assert "for ax0, ax1, ax2 in T.grid(4, 16, 16):" in str(sch.mod)
    W.check(sch.mod, wl)


def test_thread_extents_are_per_kernel() -> None:
    """Two top-level nests are two kernels: each may bind threadIdx.x to its own extent."""
    wl = W.matmul_relu(16, 16, 16)
    sch = Schedule(wl[0], target="cuda-sm80")
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    i2, j2 = sch.get_loops(sch.get_block("D"))
    j2o, j2i = sch.split(j2, [None, 8])
    sch.bind(i2, "blockIdx.x")
    sch.bind(j2i, "threadIdx.x")
    sch.bind(j2o, "vthread")
    assert 'T.thread_binding(2, thread="vthread")' in str(sch.mod)
    W.check(sch.mod, wl)
