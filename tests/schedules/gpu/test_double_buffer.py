"""``double_buffer`` (``toolchain.tir.schedule.double_buffer`` + the lowering pass
``inject_double_buffer``) on the tiled GPU GEMM: two halves per shared tile, the first
fetch before the step loop, one barrier a step; the race checker finds no race on every
block (and finds the one a missing barrier makes), the SIMT emulation gives numpy's
numbers, the descriptor's shared-memory limit counts both halves."""

from __future__ import annotations

import pytest

from tests.schedules.gpu.test_gemm import SM80, SMALL, check_relu_matmul, relu_matmul
from toolchain.driver import lower
from toolchain.errors import ScheduleError
from toolchain.schedules.gpu import gemm
from toolchain.tir import ir
from toolchain.tir.race import DataRaceError, check_races
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier


def _step_loop(f: ir.PrimFunc) -> ir.For:
    return next(n for n, _ in st.walk(f.body)
                if isinstance(n, ir.For) and n.loop_var.name == "k_0")


def _barriers(s: ir.Stmt) -> int:
    return sum(1 for n, _ in st.walk(s) if isinstance(n, ir.Stmt) and is_barrier(n))


#: (batch, M, N, K), whether the tiles end up double-buffered: a ragged edge's guard keeps
#: the shared tiles over the whole k range (compaction does not shrink them to one step),
#: and the pass then leaves the loop single-buffered -- still race-free and right. With
#: ``bk=8`` each has 3 to 5 steps, so both halves are written and read again (the race
#: checker's cost grows with the threads' work: 32 x 64 x 32 checks in a quarter of the
#: time 64 x 64 x 64 took, on the same 16 x 16 threads)
SHAPES = [((0, 32, 64, 32), True), ((3, 32, 64, 24), True), ((0, 50, 70, 40), False)]


@pytest.mark.parametrize("shape,doubled", SHAPES, ids=lambda s: "x".join(map(str, s))
                         if isinstance(s, tuple) else str(s))
def test_double_buffered_gemm_is_race_free_with_one_barrier_a_step(shape, doubled) -> None:
    b, m, n, k = shape
    t = gemm.choose_tiles(m, n, k, 1, SM80)
    t = gemm.Tiles(t.ty, t.tx, t.ry, t.rx, bk=8)  # several steps
    single = lower(gemm.tile_gemm(relu_matmul(b, m, n, k), "C", SM80,
                                  gemm.Tiles(t.ty, t.tx, t.ry, t.rx, t.bk, False)), target=SM80)
    f = lower(gemm.tile_gemm(relu_matmul(b, m, n, k), "C", SM80, t), target=SM80)
    text = str(f)
    # the next tile into the other half
    assert ("if k_0 + 1 <" in text and "k_0 % 2 *" in text) == doubled
    assert _barriers(_step_loop(single).body) == 2  # after the fetch and at the end
    assert _barriers(_step_loop(f).body) == (1 if doubled else 2)  # at the end only
    check_races(f)  # every block of these small instances
    check_relu_matmul(f, shape, seed=2, name=f"db_{b}_{m}_{n}_{k}")


def test_the_race_checker_sees_the_barrier_double_buffering_needs() -> None:
    """Without the barrier at the end of a step, the next step's fetch overwrites the half
    this step's products read (and they read what other threads fetched): a race."""
    f = lower(gemm.tile_gemm(relu_matmul(0, 64, 64, 64), "C", SM80,
                             gemm.Tiles(8, 8, 4, 4, 8)), target=SM80)
    loop = _step_loop(f)
    body = loop.body
    assert isinstance(body, ir.SeqStmt) and is_barrier(body.seq[-1])
    cut = st.replace_stmts(f, {id(body.seq[-1]): None})
    with pytest.raises(DataRaceError, match="data race"):
        check_races(cut, max_blocks=1)


def test_double_buffer_refuses_what_it_cannot_overlap() -> None:
    sch = gemm.tile_gemm(relu_matmul(0, 64, 64, 64), "C", SM80, gemm.Tiles(8, 8, 4, 4, 8, False))
    with pytest.raises(ScheduleError, match="must write one shared buffer"):
        sch.double_buffer(sch.get_block("C"))
    plain = relu_matmul(0, 16, 16, 16)
    cr = plain.cache_read(plain.get_block("C"), "A", "shared")
    with pytest.raises(ScheduleError, match="under no serial loop"):
        plain.double_buffer(cr)


def test_the_shared_memory_limit_counts_both_halves() -> None:
    """The small descriptor (4 KiB of shared memory): tiles that fit once do not fit
    twice, so the tiled GEMM it gets is single-buffered (or smaller)."""
    t = gemm.Tiles(4, 8, 1, 1, 16)  # (4 + 8) x 16 floats = 768 B a step
    ok = gemm.tile_gemm(relu_matmul(0, 64, 64, 64), "C", SMALL, t)
    ok.verify(SMALL)
    big = gemm.Tiles(8, 8, 4, 1, 16)  # (32 + 8) x 16 x 4 = 2560 B; doubled 5120 > 4096
    with pytest.raises(ScheduleError, match="shared memory"):
        gemm.tile_gemm(relu_matmul(0, 64, 64, 64), "C", SMALL, big).verify(SMALL)
    sch = gemm.try_tile_gemm(relu_matmul(0, 64, 64, 64), "C", SMALL)
    assert sch is not None
    assert max(gemm.lowered_shared_bytes(sch, SMALL).values()) <= 4096
