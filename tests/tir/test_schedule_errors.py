"""Every schedule precondition failure names the culprit and says how to fix it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.tir import workloads as W
from toolchain import te
from toolchain.errors import InputError, ScheduleError
from toolchain.tir import ir
from toolchain.tir.interpreter import run
from toolchain.tir.schedule import Schedule, TensorIntrin
from toolchain.tir.schedule import state as st


def _grid(m: int, n: int) -> ir.PrimFunc:
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    return te.create_prim_func([A, B])


def test_bind_same_axis_twice_with_different_extents() -> None:
    sch = Schedule(_grid(1024, 16))
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, factors=[4, 4])
    sch.bind(i, "blockIdx.y")
    with pytest.raises(ScheduleError) as e:
        sch.bind(j0, "blockIdx.y")
    assert "blockIdx.y bound to extents 1024 and 4: bind loops of equal extent, or split " \
           "first" in str(e.value)
    assert "j_0" in str(e.value) and "loop i" in str(e.value)


def test_bind_unknown_thread_axis() -> None:
    sch = Schedule(_grid(8, 8))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="unknown thread axis 'threadIdx.w'"):
        sch.bind(i, "threadIdx.w")


def test_reorder_fused_spatial_and_reduction_loop_is_refused() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    i, j, k = sch.get_loops(sch.get_block("C"))
    jk = sch.fuse(j, k)
    with pytest.raises(ScheduleError) as e:
        sch.reorder(jk, i)
    msg = str(e.value)
    assert "loop j_k_fused" in msg and "spatial var vj" in msg and "reduce var vk" in msg
    assert "fuse only loops of the same kind" in msg


def test_parallel_on_reduction_loop_is_refused() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    _, _, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError) as e:
        sch.parallel(k)
    assert "loop k (extent 8) feeds the reduce var vk of block 'C'" in str(e.value)
    assert "rfactor" in str(e.value)


def test_reorder_loops_of_different_nests() -> None:
    sch = Schedule(W.matmul_relu(8, 8, 8)[0])
    i, _, _ = sch.get_loops(sch.get_block("C"))
    i2, _ = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="not in the perfect nest under loop"):
        sch.reorder(i2, i)


def test_compute_at_to_a_loop_that_is_not_an_ancestor_of_a_consumer() -> None:
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((16,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((16,), lambda i: A[i] - 1.0, name="D")
    sch = Schedule(te.create_prim_func([A, C, D]))
    (d_loop,) = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError) as e:
        sch.compute_at(sch.get_block("B"), d_loop)
    msg = str(e.value)
    assert "loop i is not an ancestor of any consumer of block 'B'" in msg
    assert "'C' under loops i(16)" in msg and "sch.get_loops" in msg


def test_compute_at_producer_after_loop_is_refused() -> None:
    sch = Schedule(W.matmul_relu(8, 8, 8)[0])
    i, _, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="not an ancestor of any consumer"):
        sch.compute_at(sch.get_block("D"), i)


def test_loop_handle_consumed_by_split() -> None:
    sch = Schedule(_grid(64, 64))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[None, 32])
    with pytest.raises(ScheduleError) as e:
        sch.parallel(i)
    assert str(e.value) == ("loop handle i was consumed by split(i, factors=[None, 32]) at "
                            "step 3; use the new loops returned by it")


def test_loop_handle_consumed_by_fuse() -> None:
    sch = Schedule(_grid(8, 8))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.fuse(i, j)
    with pytest.raises(ScheduleError, match=r"loop handle j was consumed by fuse\(i, j\) at "
                                            r"step 3"):
        sch.split(j, factors=[2, 4])


def test_block_handle_removed_by_inline() -> None:
    sch = Schedule(W.elementwise_chain()[0])
    b = sch.get_block("B")
    sch.compute_inline(b)
    with pytest.raises(ScheduleError, match=r"block handle 'B' was removed by "
                                            r"compute_inline\(B\) at step 2"):
        sch.get_loops(b)


def test_unknown_block_lists_the_blocks() -> None:
    sch = Schedule(W.matmul_relu()[0])
    with pytest.raises(ScheduleError, match="no block named 'X'; blocks: C, D"):
        sch.get_block("X")


def _mma_desc(n: int = 4, dtype: str = "float32") -> ir.PrimFunc:
    A = te.placeholder((n, n), dtype, name="A")
    B = te.placeholder((n, n), dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.create_prim_func([A, B, C])
    (r,) = [x for x in st.all_blocks(f) if x.block.name_hint == "C"]
    return st.replace_block(f, r.block, dataclasses.replace(r.block, init=None))


def _tiled_matmul(order: str = "ijk") -> tuple[Schedule, object]:
    sch = Schedule(W.matmul(16, 16, 16)[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    inner = {"i": ii, "j": ji, "k": ki}
    sch.reorder(io, jo, ko, *[inner[x] for x in order])
    sch.decompose_reduction(c, ko)
    return sch, inner[order[0]]


@pytest.fixture(scope="module")
def mma_intrinsics() -> None:
    for dtype in ("float32", "float16"):
        desc = _mma_desc(4, dtype)
        TensorIntrin.register(f"test_mma4_{dtype}", desc, desc, override=True)


def test_tensorize_reports_the_index_that_differs(mma_intrinsics: None) -> None:
    sch, first = _tiled_matmul("ikj")
    with pytest.raises(ScheduleError) as e:
        sch.tensorize(first, "test_mma4_float32")
    msg = str(e.value)
    assert "index 1 of C differs" in msg and "j_0 * 4 + j_1" in msg
    assert "reorder" in msg


def test_tensorize_reports_the_dtype_that_differs(mma_intrinsics: None) -> None:
    sch, first = _tiled_matmul("ijk")
    with pytest.raises(ScheduleError, match="buffer C has dtype float32 but the intrinsic's C "
                                            "is float16"):
        sch.tensorize(first, "test_mma4_float16")


def test_tensorize_reports_the_extent_that_differs(mma_intrinsics: None) -> None:
    sch = Schedule(W.matmul(16, 16, 16)[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.decompose_reduction(c, ko)
    with pytest.raises(ScheduleError, match=r"loop 0 \(i_1\) has extent 8, the intrinsic's "
                                            r"loop i has 4; split i_1 by 4"):
        sch.tensorize(ii, "test_mma4_float32")


def test_tensorize_asks_for_decompose_reduction(mma_intrinsics: None) -> None:
    sch = Schedule(W.matmul(4, 4, 4)[0])
    i, _, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="decompose_reduction"):
        sch.tensorize(i, "test_mma4_float32")


def test_tensorize_unknown_intrinsic() -> None:
    sch = Schedule(W.matmul(4, 4, 4)[0])
    i, _, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="no tensor intrinsic 'nope'"):
        sch.tensorize(i, "nope")


def test_too_many_threads_for_the_target() -> None:
    sch = Schedule(_grid(4, 2048), target="cuda-sm80")
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    with pytest.raises(ScheduleError) as e:
        sch.bind(j, "threadIdx.x")
    msg = str(e.value)
    assert "uses 2048 threads per block (threadIdx.x=2048)" in msg
    assert "'cuda-sm80' allows (1024)" in msg and "split" in msg


def _gpu_matmul_tiles() -> tuple[Schedule, object, tuple[object, ...]]:
    """A 256³ float32 matmul on cuda-sm80 in 32 x 32 output tiles: the schedule, block
    ``C`` and its loops ``(i0, j0, i1, j1)`` (the reduction loop innermost)."""
    sch = Schedule(W.matmul(256, 256, 256)[0], target="cuda-sm80")
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1 = sch.split(j, [None, 32])
    sch.reorder(i0, j0, i1, j1, k)
    return sch, c, (i0, j0, i1, j1)


def test_shared_memory_over_the_target_limit() -> None:
    sch, c, (i0, j0, i1, j1) = _gpu_matmul_tiles()
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    a_sh = sch.cache_read(c, 0, "shared")
    sch.compute_at(a_sh, j0)  # A tile 32 x 256 floats = 32 KiB: fits
    with pytest.raises(ScheduleError) as e:
        sch.cache_read(c, "B", "shared")  # C now reads a 256 x 32 tile of B_shared per block
    msg = str(e.value)
    assert "needs 65536 bytes of shared memory per block" in msg
    assert "A_shared 32768 B, B_shared 32768 B" in msg and "(49152 B)" in msg


def test_the_limits_check_measures_only_a_kernel_that_changed(monkeypatch) -> None:
    """``check_gpu_limits`` keeps each kernel's shared footprint by the kernel statement
    (IR is immutable): verifying again relaxes nothing, a primitive that rebuilds the
    kernel has it measured anew (and the over-limit kernel of the test above is still
    refused)."""
    from toolchain.tir.schedule import gpu

    sch, c, (i0, j0, i1, j1) = _gpu_matmul_tiles()
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    sch.compute_at(sch.cache_read(c, 0, "shared"), j0)
    measured = []
    real = gpu.shared_footprint
    monkeypatch.setattr(gpu, "shared_footprint", lambda k: measured.append(k) or real(k))
    sch.verify()
    sch.verify()
    assert len(measured) == 1  # the kernel compute_at changed, once
    sch.bind(i1, "threadIdx.y")  # a new kernel statement: measured again
    assert len(measured) == 2 and measured[1] is not measured[0]
    sch.verify()
    assert len(measured) == 2


def test_a_kernel_that_opts_in_may_use_the_opt_in_shared_memory() -> None:
    """The same 64 KiB of shared tiles pass the check once the kernel's block loop is
    annotated ``DYNAMIC_SHARED_MEMORY`` (cuda-sm80 lets a block opt in to 163 KiB), and
    the CUDA renderer carves them out of dynamic shared memory (``extern __shared__``,
    the kernel's ``smem`` bytes given at launch)."""
    from toolchain.codegen.cuda import CUDARenderer
    from toolchain.tir.schedule.gpu import DYNAMIC_SHARED_MEMORY
    from toolchain.tir.transform import lower

    sch, c, (i0, j0, i1, j1) = _gpu_matmul_tiles()
    sch.annotate(i0, DYNAMIC_SHARED_MEMORY, 1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    for name in ("A", "B"):
        sch.compute_at(sch.cache_read(c, name, "shared"), j0)  # 64 KiB: no error now
    src = CUDARenderer().render(lower(sch), name="mm")
    assert src.kernels[0]["smem"] == 65536
    assert "extern __shared__ __align__(128) unsigned char kiln_smem[];" in src.code
    assert "(float *)(kiln_smem + 32768)" in src.code


def test_failed_primitive_leaves_the_schedule_unchanged() -> None:
    sch = Schedule(_grid(4, 2048), target="cuda-sm80")
    i, j = sch.get_loops(sch.get_block("B"))
    before = str(sch.mod)
    with pytest.raises(ScheduleError):
        sch.bind(j, "threadIdx.x")
    assert str(sch.mod) == before
    assert len(sch.trace) == 2


def test_unknown_memory_scope() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    with pytest.raises(ScheduleError, match="unknown memory scope 'sram'"):
        sch.cache_read(sch.get_block("C"), 0, "sram")


def test_split_factor_errors() -> None:
    sch = Schedule(_grid(16, 16))
    i, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="only one factor may be None"):
        sch.split(i, [None, None])
    with pytest.raises(ScheduleError, match="multiply to 8 but loop i has extent 16"):
        sch.split(i, [2, 4])


def test_fuse_requires_adjacent_loops() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    i, _, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="loop k is not directly inside loop i"):
        sch.fuse(i, k)


def test_compute_inline_of_an_output_is_refused() -> None:
    sch = Schedule(W.matmul_relu()[0])
    with pytest.raises(ScheduleError, match="writes D, an argument of the function"):
        sch.compute_inline(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="block 'C' is a reduction"):
        sch.compute_inline(sch.get_block("C"))


def test_vectorize_needs_constant_extent() -> None:
    m = te.var("m")
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="loop i has extent m, not a constant; split it"):
        sch.vectorize(i)


def test_calling_with_a_wrong_array_names_the_argument() -> None:
    func = W.matmul(4, 4, 4)[0]
    a = np.zeros((4, 4), "float32")
    with pytest.raises(InputError, match=r"argument 'B' has shape \(4, 5\), expected "
                                         r"\(4, 4\)"):
        run(func, a, np.zeros((4, 5), "float32"), a.copy())
    with pytest.raises(InputError, match="argument 'C' has dtype float64, expected float32"):
        run(func, a, a.copy(), np.zeros((4, 4)))
    with pytest.raises(InputError, match="takes 3 arguments"):
        run(func, a)


def test_tensorize_refuses_a_guarded_tile(mma_intrinsics: None) -> None:
    sch = Schedule(W.matmul(10, 8, 8)[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, jo, ko, ii, ji, ki)
    sch.decompose_reduction(c, ko)
    with pytest.raises(ScheduleError, match=r"has the guard T.where\(i_0 \* 4 \+ i_1 < 10\)"):
        sch.tensorize(ii, "test_mma4_float32")
