"""The shared-memory data-race check (toolchain.tir.race): correct tiled kernels pass,
kernels with a barrier taken out (planted races) are reported."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.codegen.gpu_workloads import A8 as A
from tests.codegen.gpu_workloads import B8 as B
from tests.codegen.gpu_workloads import one_block, tiled_gemm, without_barrier
from tests.codegen.test_cuda import shared_memory_matmul
from toolchain.driver import lower
from toolchain.tir import ir
from toolchain.tir.race import DataRaceError, check_races, find_races


@pytest.mark.parametrize("make", [
    lambda: tiled_gemm(n=32, tile=16, bk=8, threads=4),
    lambda: tiled_gemm(n=32, tile=16, bk=8, threads=4, local=True),
    lambda: shared_memory_matmul(32, 8),
])
def test_correct_tiled_kernels_are_race_free(make) -> None:
    f = lower(make())
    assert find_races(f) == []
    check_races(f)


def test_missing_barrier_before_the_product_is_a_read_after_write_race() -> None:
    f = without_barrier(lower(tiled_gemm(n=32, tile=16, bk=8, threads=4)), 0)
    races = find_races(f, max_blocks=1)
    assert races
    r = races[0]
    assert r.kernel == "gemm" and r.buffer in ("A_shared", "B_shared")
    # the load and the product of one phase: which comes first is the emulation's order
    assert {(r.first_writes, r.first_stmt[:2]), (r.second_writes, r.second_stmt[:2])} == \
        {(True, r.buffer[:2]), (False, "C[")}
    assert r.first_thread != r.second_thread and set(r.block) == {"blockIdx.y", "blockIdx.x"}
    text = str(r)
    assert text.startswith("data race in kernel gemm, block (blockIdx.y=0, blockIdx.x=0): "
                           f"shared buffer {r.buffer} element ")
    assert "with no barrier between them" in text


def test_missing_barrier_at_the_end_of_the_k_loop_is_a_write_after_read_race() -> None:
    f = without_barrier(lower(tiled_gemm(n=32, tile=16, bk=8, threads=4)), 1)
    races = find_races(f, max_blocks=1)
    assert races and not races[0].first_writes and races[0].second_writes
    assert races[0].first_stmt.startswith("C[")  # the product read it, the next load wrote
    with pytest.raises(DataRaceError, match=r"data race in kernel gemm.*\n.*put a barrier"):
        check_races(f, max_blocks=1)


def test_two_threads_writing_one_element_is_a_race() -> None:
    f = one_block(lambda t, S: ir.seq(S.store(A[t], [t // 2]), B.store(S[t // 2], [t])))
    races = find_races(f)
    assert races[0].first_writes and races[0].second_writes
    assert races[0].first_thread == {"threadIdx.x": 0}
    assert races[0].second_thread == {"threadIdx.x": 1}


def test_max_blocks_limits_the_blocks_run() -> None:
    f = without_barrier(lower(shared_memory_matmul(32, 8)), 0)
    races = find_races(f, max_blocks=1, limit=100)
    assert races and all(r.block == {"blockIdx.y": 0, "blockIdx.x": 0} for r in races)


def test_races_name_the_kernel_of_a_function_with_several() -> None:
    racy = one_block(lambda t, S: ir.seq(S.store(A[t], [t]), B.store(S[7 - t], [t])))
    t = ir.Var("u")
    first = ir.For(t, 0, 8, "thread_binding", A.store(A[t] + 1.0, [t]), "threadIdx.x")
    f = racy.with_body(ir.seq(first, racy.body))
    races = find_races(f)
    assert races and {r.kernel for r in races} == {"k_k1"} and races[0].block == {}


def test_two_shared_buffers_of_one_name_are_told_apart() -> None:
    """Two ``rfactor``s of one output make two shared buffers named alike: thread 0
    reading element 1 of the first is no race with thread 1 writing element 1 of the
    second (the accesses were keyed by name: a race reported that was none); a real race
    on the second is still found, under a suffixed name."""
    S2 = ir.Buffer("S", (8,), "float32", scope="shared")
    sync = ir.Evaluate(ir.Call("int32", "tir.storage_sync", [ir.StringImm("shared")]))

    def kernel(read_back: Callable[[ir.Var], ir.PrimExpr]) -> ir.PrimFunc:
        return one_block(lambda t, S: ir.Allocate(S2, ir.seq(
            S.store(A[t], [t]), sync, S2.store(S[(t + 1) % 8], [t]),
            B.store(S2[read_back(t)], [t]))))

    assert find_races(kernel(lambda t: t)) == []
    races = find_races(kernel(lambda t: 7 - t))
    assert races and {r.buffer for r in races} == {"S_1"}
