"""``transform_layout``: an intermediate buffer laid out anew (dimensions split, the split
axes permuted), every access and block region following it; the lowered function still
computes the same (the interpreter against numpy), the trace replays, misuse is refused."""

from __future__ import annotations

import pytest

from tests.tir import workloads as W
from toolchain.driver import lower
from toolchain.errors import ScheduleError
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule.trace import Trace


def _staged(m: int = 16, n: int = 16, k: int = 32) -> tuple[Schedule, object, W.Workload]:
    wl = W.matmul(m, n, k)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    return sch, c, wl


def test_core_matrix_layout_of_a_staged_operand() -> None:
    """A (16 x 32) staged as [k / 8][m][8]: 8-column slices outermost, each slice's rows
    of 8 elements consecutive (wgmma's K-major core matrices); the reader and the copy
    both index the new layout and the product is unchanged."""
    sch, c, wl = _staged()
    a_sh = sch.cache_read(c, 0, "shared")
    sch.transform_layout(a_sh, 0, factors=[[None], [None, 8]], order=[1, 0, 2])
    text = str(sch.mod)
    assert 'A_shared = T.alloc_buffer((4, 16, 8), "float32", scope="shared")' in text
    assert "A_shared[v1 // 8, v0, v1 % 8] = A[v0, v1]" in text
    assert "A_shared[vk // 8, vi, vk % 8] * B[vk, vj]" in text
    assert "T.reads(A_shared[vk // 8, vi, vk % 8], B[vk, vj])" in text
    W.check(lower(sch), wl)


def test_a_split_loop_folds_the_new_indices() -> None:
    """With the reduction split by 8 the reader's indices fold to the loops themselves
    (what tensorize needs), and an accumulator split on its columns ([m][n / 8][8], B
    as [n / 8][k][8]) still computes the product."""
    sch, c, wl = _staged()
    sch.cache_write(c, 0, "local")
    b_sh = sch.cache_read(c, 1, "shared")
    a_sh = sch.cache_read(c, 0, "shared")
    sch.transform_layout(a_sh, 0, factors=[[None], [None, 8]], order=[1, 0, 2])
    sch.transform_layout(b_sh, 0, factors=[[None], [None, 8]], order=[1, 0, 2])
    sch.transform_layout(c, 0, factors=[[None], [None, 8]], order=[0, 1, 2])
    i, j, k = sch.get_loops(c)
    ko, ki = sch.split(k, [None, 8])
    text = str(sch.mod)
    assert "vk = T.axis.reduce(32, k_0 * 8 + k_1)" in text
    assert "A_shared[vk // 8, vi, vk % 8]" in text and "B_shared[vj // 8, vk, vj % 8]" in text
    assert "C_local[vi, vj // 8, vj % 8]" in text
    W.check(lower(sch), wl)


def test_the_trace_replays_and_saves() -> None:
    sch, c, wl = _staged()
    a_sh = sch.cache_read(c, 0, "shared")
    sch.transform_layout(a_sh, 0, factors=[[None], [4, None]], order=[2, 0, 1])
    assert "sch.transform_layout(b1, 0, factors=[[None], [4, None]], order=[2, 0, 1])" in \
        str(sch.trace)
    again = Trace.from_json(sch.trace.as_json()).apply_to(wl[0])
    assert str(again.mod) == str(sch.mod)
    assert 'A_shared = T.alloc_buffer((8, 16, 4), "float32", scope="shared")' in str(sch.mod)
    W.check(lower(again), wl)


@pytest.mark.parametrize("factors, order, needle", [
    ([[None], [None, 5]], [1, 0, 2], "not a multiple of 5"),
    ([[None], [3, 8]], [1, 0, 2], "multiply to 24, not its extent 32"),
    ([[None]], [0], "one list of extents each"),
    ([[None], [None, 8]], [0, 1, 1], "permutation"),
    ([[None, None], [32]], [0, 1, 2], "at most one None"),
])
def test_bad_factors_and_orders_are_refused(factors: list, order: list, needle: str) -> None:
    sch, c, _ = _staged()
    a_sh = sch.cache_read(c, 0, "shared")
    before = str(sch.mod)
    with pytest.raises(ScheduleError, match=needle):
        sch.transform_layout(a_sh, 0, factors=factors, order=order)
    assert str(sch.mod) == before  # a refused primitive changes nothing


def test_arguments_and_padded_buffers_are_refused() -> None:
    sch, c, _ = _staged()
    with pytest.raises(ScheduleError, match="argument of the function"):
        sch.transform_layout(c, 0, factors=[[None], [None, 8]], order=[0, 1, 2])
    a_sh = sch.cache_read(c, 0, "shared")
    sch.storage_align(a_sh, 0, axis=0, factor=32, offset=8)
    with pytest.raises(ScheduleError, match="storage_align padding"):
        sch.transform_layout(a_sh, 0, factors=[[None], [None, 8]], order=[1, 0, 2])


def test_a_swizzled_layout_is_marked_flattened_swizzled_and_still_computes() -> None:
    """``swizzle=128``: A (16 x 64 float32) as [k / 32][m][32] (rows of 128 bytes) and B
    as [n / 32][k][32]; the buffers are printed with the mark, the indices stay logical
    until flattening, the flattened stores carry the chunk XOR, the product is unchanged
    and the trace replays."""
    sch, c, wl = _staged(16, 32, 64)
    b_sh = sch.cache_read(c, 1, "shared")
    a_sh = sch.cache_read(c, 0, "shared")
    sch.transform_layout(a_sh, 0, factors=[[None], [None, 32]], order=[1, 0, 2], swizzle=128)
    sch.transform_layout(b_sh, 0, factors=[[None], [None, 32]], order=[1, 0, 2], swizzle=128)
    text = str(sch.mod)
    assert 'A_shared = T.alloc_buffer((2, 16, 32), "float32", scope="shared", swizzle=128)' \
        in text
    assert "A_shared[vk // 32, vi, vk % 32] * B_shared[vj // 32, vk, vj % 32]" in text
    assert "swizzle=128" in str(sch.trace)
    again = Trace.from_json(sch.trace.as_json()).apply_to(wl[0])
    assert str(again.mod) == str(sch.mod)
    low = lower(sch)
    flat = str(low)
    assert "% 2 * 4" in flat and "% 2 * 16" in flat  # the XOR's three bits, chunks of 4
    W.check(low, wl)
    W.check(lower(again), wl)


def test_the_flattened_swizzle_is_the_wgmma_128_byte_layout() -> None:
    """The column ``flatten_buffer`` stores a float16 element at is the one of the 128B
    swizzle model (``wgmma_swizzle.sw128_tile_offset``, checked there against the
    descriptors the hardware reads); without the XOR it is not."""
    from toolchain.schedules.gpu.wgmma_swizzle import sw128_tile_offset
    from toolchain.tir import ir
    from toolchain.tir.transform.flatten_buffer import swizzled_column

    def col(r: int, c: int) -> int:
        return swizzled_column(ir.IntImm(r), ir.IntImm(c), 64).value

    assert all(r * 128 + 2 * col(r, c) == sw128_tile_offset("K", r, c, rows=16, cols=64)
               for r in range(16) for c in range(64))
    assert any(r * 128 + 2 * c != sw128_tile_offset("K", r, c, rows=16, cols=64)
               for r in range(16) for c in range(64))


@pytest.mark.parametrize("factors, swizzle, needle", [
    ([[None], [None, 8]], 128, "one 128-byte row"),   # rows of 8 floats: 32 bytes
    ([[None], [None, 32]], 64, "needs swizzle=128"),
])
def test_bad_swizzles_are_refused(factors: list, swizzle: int, needle: str) -> None:
    sch, c, _ = _staged(16, 32, 64)
    a_sh = sch.cache_read(c, 0, "shared")
    before = str(sch.mod)
    with pytest.raises(ScheduleError, match=needle):
        sch.transform_layout(a_sh, 0, factors=factors, order=[1, 0, 2], swizzle=swizzle)
    assert str(sch.mod) == before


def test_a_swizzled_fetch_stays_one_16_byte_vector_store() -> None:
    """A float16 tile of 128-byte rows fetched 8 halves a thread (vectorized): the XOR
    touches only the chunk bits above the vector's lanes, so the lowered store is still
    one 8-lane ``Ramp`` at the swizzled base, and the reader's index carries the XOR."""
    from toolchain import te

    A = te.placeholder((64, 64), name="A", dtype="float16")
    C = te.compute((64, 64), lambda i, j: A[i, j] + A[i, j], name="C")
    sch = Schedule(te.create_prim_func([A, C]), "cuda-sm90")
    c = sch.get_block("C")
    a_sh = sch.cache_read(c, 0, "shared")
    io, _ = sch.split(sch.get_loops(c)[0], [None, 64])
    sch.compute_at(a_sh, io)
    sch.transform_layout(a_sh, 0, factors=[[None], [None]], order=[0, 1], swizzle=128)
    _, t, v = sch.split(sch.fuse(*sch.get_loops(a_sh)[-2:]), [None, 128, 8])
    sch.bind(t, "threadIdx.x")
    sch.vectorize(v)
    _, ct = sch.split(sch.fuse(*sch.get_loops(c)[-2:]), [None, 128])
    sch.bind(ct, "threadIdx.x")
    sch.bind(io, "blockIdx.x")
    text = str(lower(sch))
    store = [ln for ln in text.splitlines() if ln.strip().startswith("A_shared[")]
    assert len(store) == 1 and store[0].strip().startswith("A_shared[T.Ramp(")
    assert ", 1, 8)] = A[T.Ramp(" in store[0] and "% 2 * 32" in store[0]
    assert "% 2 * 32" in next(ln for ln in text.splitlines() if "= A_shared[" in ln)
