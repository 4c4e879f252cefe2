"""The accelerator dense schedule: TE -> packed layouts -> tiles -> tensorize -> vthreads."""

from __future__ import annotations

import re

import pytest

from toolchain.errors import ScheduleError
from toolchain.target import load_target
from toolchain.tir.transform import inject_virtual_thread, lower_blocks
from toolchain.vta.config import VTAConfig
from toolchain.vta.schedule import DenseShape, Tiles, choose_tiles, dense_schedule, lower_dense

CALLS = ("gemm", "gemm_reset", "load_inp", "load_wgt", "alu_shr_imm", "alu_min_imm",
         "alu_max_imm", "store_out")


def _calls(text: str) -> list[str]:
    return re.findall(r'T.call_extern\("int32", "vta\.(\w+)"', text)


def test_every_stage_is_tensorized_with_a_declared_intrinsic() -> None:
    sch = dense_schedule(DenseShape(16, 64, 64), 4, load_target("vta"), Tiles(2, 2, 2))
    text = str(sch.mod)
    assert sorted(set(_calls(text))) == sorted(CALLS)
    assert 'scope="vta.acc"' in text or "vta.acc" in text
    assert "vthread" in text
    # the immediates reached the ALU calls as scalar operands
    assert re.search(r'"vta.alu_shr_imm", .*\), 4\)', text)
    assert re.search(r'"vta.alu_max_imm", .*\), -128\)', text)


def test_virtual_threads_interleave_two_copies_of_each_instruction() -> None:
    sch = dense_schedule(DenseShape(16, 64, 64), 4, load_target("vta"), Tiles(2, 2, 2))
    text = str(lower_dense(sch))
    assert "vthread" not in text
    calls = _calls(text)
    # every tile buffer is allocated inside the thread loop, so each thread has its own
    # copy — also of the weight tile, which the row thread does not index (double buffering)
    for name in ("gemm", "gemm_reset", "load_inp", "load_wgt", "alu_shr_imm", "store_out"):
        assert calls.count(name) == 2, name
    assert 'T.allocate((2, 2, 2, 16, 16), "int8", scope="vta.wgt")' in text
    # without compaction the buffers stay whole at the root and the weight load is shared
    assert _calls(str(inject_virtual_thread(lower_blocks(sch.mod)))).count("load_wgt") == 1


def test_single_thread_schedule_has_one_copy() -> None:
    sch = dense_schedule(DenseShape(16, 64, 64), 4, load_target("vta"), Tiles(2, 2, 2),
                         vthreads=1)
    assert _calls(str(inject_virtual_thread(lower_blocks(sch.mod)))).count("gemm") == 1


def test_tiles_fit_the_buffer_shares() -> None:
    cfg = VTAConfig()
    for shape in (DenseShape(3136, 576, 64), DenseShape(196, 2304, 256),
                  DenseShape(50, 4608, 512)):
        t = choose_tiles(shape, cfg)
        assert t.tm * t.tk <= cfg.inp_depth // 2 and t.tn * t.tk <= cfg.wgt_depth // 2
        assert t.tm * t.tn <= cfg.acc_depth // 2
        # the row (or column) tiles split evenly over 2 virtual threads
        assert (shape.m // t.tm if t.split == "m" else shape.n // 16 // t.tn) % 2 == 0
    # 49 rows do not split over two threads: the column tiles do
    assert choose_tiles(DenseShape(49, 4608, 512), cfg).split == "n"
    t = choose_tiles(DenseShape(49, 4608, 512), cfg, vthreads=1)
    assert t.tm * t.tk <= cfg.inp_depth and t.tm * t.tn <= cfg.acc_depth
    with pytest.raises(ScheduleError, match="49 rows of BATCH and 3 blocks of BLOCK_OUT split "
                                            "over 2 virtual threads"):
        choose_tiles(DenseShape(49, 64, 48), cfg)


def test_bad_tiles_are_refused_with_the_reason() -> None:
    t = load_target("vta")
    with pytest.raises(ScheduleError, match=r"must divide the layer's blocks \(M 16, N 4"):
        dense_schedule(DenseShape(16, 64, 64), 4, t, Tiles(3, 2, 2))
    with pytest.raises(ScheduleError, match="2 virtual threads need a number of row tiles"):
        dense_schedule(DenseShape(16, 64, 64), 4, t, Tiles(16, 2, 2))


#: split, resident, virtual threads
KNOBS = (("m", False, 1), ("m", True, 2), ("n", False, 2), ("n", True, 2))


@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_tilings_continued_from_shared_forks_lower_to_what_starting_over_gives(kind) -> None:
    """``Forks``: the candidates of one layer share the schedule's first steps (copied,
    not redone); every tiling lowers to the function it lowers to without them."""
    from toolchain.vta.schedule import ConvShape, ConvTiles, Forks, conv2d_schedule

    t = load_target("vta")
    if kind == "dense":
        shape, make = DenseShape(16, 64, 64), dense_schedule
        points = [(Tiles(2, 2, tk, split, res), vt) for tk in (1, 4)
                  for split, res, vt in KNOBS]
    else:
        shape, make = ConvShape(8, 8, 32, 32, 3, 1, 1), conv2d_schedule
        points = [(ConvTiles(4, 1, tic, split, res), vt) for tic in (1, 2)
                  for split, res, vt in KNOBS]
    forks = Forks()
    for tiles, vt in points:
        shared = lower_dense(make(shape, 4, t, tiles, vt, forks=forks))
        alone = lower_dense(make(shape, 4, t, tiles, vt))
        assert str(shared) == str(alone), (tiles, vt)
    stages = [k[0] for k in forks.kept]
    assert stages.count("compute") == 1
    assert stages.count("step") < len(points) and stages.count("threads") < len(points)
    with pytest.raises(ValueError, match="one layer"):
        make(shape, 5, t, *points[0], forks=forks)
