"""Warp-shuffle reductions: ``lower_thread_allreduce`` (a reduction bound to ``threadIdx.x``
as ``__shfl_xor_sync`` butterflies and one shared exchange), its SIMT emulation (32 lanes
in lock step, the mask, lanes past the block) and ``reduce.shuffle_reduce``. Checked by
the emulated kernels against numpy over row lengths and block sizes, emulated CUDA bundles
against the reference executor, the race checker, and broken shuffles that must show."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import (
    emulated_matches_reference,
    layer_norm_model,
    make_model,
    nvcc_kernel_check,
)
from toolchain import te
from toolchain.bundle import compile_model
from toolchain.driver import lower
from toolchain.errors import ScheduleError
from toolchain.frontend.onnx import from_onnx
from toolchain.schedules.gpu.reduce import shuffle_reduce
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator
from toolchain.tir.interpreter import run
from toolchain.tir.race import check_races, find_races
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.inject_barriers import is_barrier
from toolchain.tir.transform.simt import emulate_threads

SM90 = load_target("cuda-sm90")


def _row_reduce(rows: int, n: int, kind: str) -> ir.PrimFunc:
    x = te.placeholder((rows, n), "float32", "x")
    k = te.reduce_axis((0, n), "k")
    fn = {"sum": te.sum, "max": te.max}[kind]
    y = te.compute((rows,), lambda i: fn(x[i, k], axis=k), name="y")
    return te.create_prim_func([x, y], name=f"row_{kind}")


def _lowered(rows: int, n: int, threads: int, kind: str = "sum") -> ir.PrimFunc:
    sch = Schedule(_row_reduce(rows, n, kind), SM90)
    done = shuffle_reduce(sch, sch.get_block("y"), SM90, threads)
    assert done is not None
    return lower(done, target=SM90)


def _emulate(f: ir.PrimFunc, x: np.ndarray) -> np.ndarray:
    y = np.zeros(x.shape[0], np.float32)
    run(emulate_threads(f), x.ravel().copy(), y)
    return y


#: (row length, block size): 2 to 1,024 threads, within one warp or several; lengths
#: shorter than the block (1, 31), one past a multiple (33, 4097), not a power of two
SHAPES = [(1, 32), (31, 32), (32, 32), (33, 32), (1000, 64), (4097, 1024), (33, 1024),
          (16, 16), (8, 2), (96, 32), (1024, 128), (2048, 1024), (4096, 256), (1000, 512)]


@pytest.mark.parametrize(("n", "threads"), SHAPES)
def test_shuffle_reductions_emulated_match_numpy(n: int, threads: int) -> None:
    x = np.random.default_rng(n + threads).standard_normal((2, n)).astype(np.float32)
    kind = "max" if n % 3 == 0 else "sum"
    f = _lowered(2, n, threads, kind)
    src = str(f)
    assert ("T.shfl_xor_sync(" in src) == (n > 1)  # a row of one: thread 0 copies it
    assert ("T.storage_sync('shared')" in src) == (threads > 32 and n > 1)  # across warps
    want = x.sum(axis=1) if kind == "sum" else x.max(axis=1)
    np.testing.assert_allclose(_emulate(f, x), want, rtol=1e-5, atol=1e-5)
    if threads > 32:
        check_races(f, max_blocks=1)


def test_a_row_shorter_than_the_block_reads_nothing_past_its_end() -> None:
    """31 elements on 32 threads (no partials): thread 31 contributes the identity and
    reads no element (a guarded load, not a clamped one)."""
    src = str(_lowered(2, 31, 32))
    pat = (r"if (\w+) < 31:\n\s+y_red\[0\] = x\[\w+ \* 31 \+ \1\]\n\s+else:\n"
           r"\s+y_red\[0\] = T.float32\(0.0\)")
    assert re.search(pat, src), src


class _Edit(StmtExprMutator):
    """Change the first shuffle (its offset, or its mask), or drop the barriers."""

    def __init__(self, offset: int | None = None, mask: int | None = None,
                 barriers: bool = True, width: int | None = None) -> None:
        self.offset, self.mask, self.barriers, self.done = offset, mask, barriers, False
        self.width = width

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:
        if e.op == "tir.shfl_xor_sync" and not self.done and (self.offset or self.mask):
            self.done = True
            m, v, o, w = e.args
            return ir.Call(e.dtype, e.op, [ir.IntImm(self.mask, "uint32") if self.mask else m,
                                           v, ir.IntImm(self.offset) if self.offset else o,
                                           ir.IntImm(self.width) if self.width else w])
        return super().visit_Call(e)

    def visit_Evaluate(self, s: ir.Evaluate) -> ir.Stmt:
        if not self.barriers and is_barrier(s):
            return ir.Evaluate(ir.IntImm(0))
        return super().visit_Evaluate(s)


def test_a_broken_shuffle_shows_in_the_emulation() -> None:
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    f = _lowered(2, 256, 64)
    np.testing.assert_allclose(_emulate(f, x), x.sum(axis=1), rtol=1e-5)
    # offset 8 instead of 16: lanes 16..31 never reach lanes 0..15 (a wrong sum)
    wrong = _emulate(_Edit(offset=8).visit(f), x)
    assert not np.allclose(wrong, x.sum(axis=1), rtol=1e-3)
    # a mask of 16 lanes while 32 take part: the others' results are undefined (NaN)
    assert np.isnan(_emulate(_Edit(mask=0xFFFF).visit(f), x)).all()
    # offset 32 in segments of 32 lanes: CUDA gives each lane its own value (a wrong sum)
    wrong = _emulate(_Edit(offset=32).visit(f), x)
    assert not np.allclose(wrong, x.sum(axis=1), rtol=1e-3)


def test_lanes_past_a_small_block_do_not_exist() -> None:
    """A block of 16 threads shuffles within 16 lanes (mask 0xffff); a full-warp mask
    names 16 lanes that do not exist, and reading them gives NaN in the emulation."""
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    f = _lowered(1, 64, 16)
    assert "T.shfl_xor_sync(T.uint32(65535), " in str(f)
    np.testing.assert_allclose(_emulate(f, x), x.sum(axis=1), rtol=1e-5)
    bad = _Edit(offset=16, mask=0xFFFFFFFF, width=32).visit(f)  # lane ^ 16: no such lane
    assert np.isnan(_emulate(bad, x)).all()


def test_the_race_checker_sees_the_shared_exchange() -> None:
    f = _lowered(1, 512, 128)
    assert find_races(f) == []
    races = find_races(_Edit(barriers=False).visit(f))
    assert races and "y_warps" in str(races[0])


def test_bind_refuses_a_reduction_that_is_not_a_cross_thread_one() -> None:
    x = te.placeholder((4, 64), "float32", "x")
    k = te.reduce_axis((0, 64), "k")
    y = te.compute((4,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="y")
    sch = Schedule(te.create_prim_func([x, y], name="sq"), SM90)
    _, kk = sch.get_loops(sch.get_block("y"))
    with pytest.raises(ScheduleError, match="reduce var"):
        sch.bind(kk, "threadIdx.y")  # only threadIdx.x makes a cross-thread reduction
    two = te.reduce_axis((0, 8), "a"), te.reduce_axis((0, 8), "b")
    z = te.compute((4,), lambda i: te.sum(x[i, two[0] * 8 + two[1]], axis=list(two)),
                   name="z")
    sch = Schedule(te.create_prim_func([x, z], name="two"), SM90)
    _, a, _ = sch.get_loops(sch.get_block("z"))
    with pytest.raises(ScheduleError, match="one reduce variable"):
        sch.bind(a, "threadIdx.x")


def _reduce(op: str, shape: list[int]):
    return make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)],
                      {"x": (np.float32, shape)}, {"y": (np.float32, shape[:-1])},
                      {"axes": np.array([len(shape) - 1], dtype=np.int64)}, opset=18)


def _softmax(shape: list[int]):
    return make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                      {"x": (np.float32, shape)}, {"y": (np.float32, shape)})


def _layer_norm(shape: list[int]):
    return layer_norm_model(shape, seed=5)


def _classifier():
    rng = np.random.default_rng(3)
    return make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
                      {"x": (np.float32, [1, 512])}, {"y": (np.float32, [1, 1000])},
                      {"w": rng.standard_normal((1000, 512)).astype(np.float32),
                       "b": rng.standard_normal(1000).astype(np.float32)})


BUNDLES = {
    "reduce_sum_3x4097": lambda: _reduce("ReduceSum", [3, 4097]),
    "reduce_sum_2x33": lambda: _reduce("ReduceSum", [2, 33]),  # short: a thread a row
    "reduce_sum_2x1": lambda: _reduce("ReduceSum", [2, 1]),
    "reduce_max_2x1000": lambda: _reduce("ReduceMax", [2, 1000]),
    "reduce_max_2x2048": lambda: _reduce("ReduceMax", [2, 2048]),
    "reduce_mean_2x1536": lambda: _reduce("ReduceMean", [2, 1536]),
    "softmax_2x4097": lambda: _softmax([2, 4097]),
    "softmax_2x4096": lambda: _softmax([2, 4096]),
    "classifier_512x1000": _classifier,
    "layer_norm_2x3x1000": lambda: _layer_norm([2, 3, 1000]),
    "layer_norm_2x4097": lambda: _layer_norm([2, 4097]),
}

#: long-row groups: one launch, a block a row (softmax: max then sum; layer norm: mean
#: then variance), each reduction one shuffle allreduce with one barrier
ROWS = {"softmax_2x4097": 2, "softmax_2x4096": 2, "layer_norm_2x3x1000": 2,
        "layer_norm_2x4097": 2}


@pytest.mark.parametrize("name", list(ROWS))
def test_long_rows_are_one_launch_of_a_block_a_row(name: str) -> None:
    from toolchain.graph.passes import run_pipeline
    from toolchain.graph.passes.layout import layout_for_target
    from toolchain.schedules.registry import schedule_for
    from toolchain.tir.transform.inject_barriers import kernels_of

    graph = run_pipeline(from_onnx(BUNDLES[name]()), layout_for_target(SM90))
    (node,) = graph.nodes
    f = lower(schedule_for(node, SM90).schedule, target=SM90)
    assert len(kernels_of(f.body)[1]) == 1, str(f)
    src = str(f)
    assert src.count("T.storage_sync('shared')") == ROWS[name], src
    assert src.count("_warps = T.allocate(") == 2
    check_races(f, max_blocks=1)


@pytest.mark.parametrize("name", list(BUNDLES))
def test_shuffle_bundles_emulated_match_the_reference(name: str, tmp_path: Path) -> None:
    emulated_matches_reference(BUNDLES[name](), tmp_path / name, seed=9, atol=1e-5)


def test_without_warp_size_the_shared_tree_stays() -> None:
    tree = replace(SM90, warp_size=None)
    sch = Schedule(_row_reduce(2, 2048, "sum"), tree)
    from toolchain.schedules.gpu.reduce import try_block_reduce

    f = lower(try_block_reduce(sch, sch.get_block("y"), tree, 256), target=tree)
    assert "shfl" not in str(f) and "y_rf_1" in str(f)
    sch = Schedule(_row_reduce(2, 2048, "sum"), SM90)
    f = lower(try_block_reduce(sch, sch.get_block("y"), SM90, 256), target=SM90)
    assert "T.shfl_xor_sync(" in str(f)


NVCC_CHECKED = ["layer_norm_2x4097", "reduce_max_2x1000", "softmax_2x4097"]


@nvcc_kernel_check("shuffle")
def _shuffle_kernels(out: Path) -> dict[str, Path]:
    """The ``cuda-sm90`` bundles of :data:`NVCC_CHECKED` (each model named apart)."""
    return {name: compile_model(BUNDLES[name](), "cuda-sm90", out / name, progress=False,
                                name=name) for name in NVCC_CHECKED}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is missing")
def test_shuffle_kernels_compile_with_nvcc_for_sm80_and_sm90(kernels_nvcc: Any,
                                                             tmp_path: Path) -> None:
    """Built with the other GPU tests' kernels in one nvcc run (``kernels_nvcc``); where
    that run failed, alone (its errors are these models'), and the shared run's errors
    must not name them (:meth:`~tests.bundle.helpers.KernelChecks.check`)."""
    for name, d in kernels_nvcc.of("shuffle").items():
        src = (d / "src/kernels.cu").read_text()
        assert "__shfl_xor_sync(0xffffffffu, " in src and "__syncthreads();" in src, name
    kernels_nvcc.check("shuffle", tmp_path)
