"""The CUDA GEMM search spaces (``toolchain.schedules.gpu.gemm_space``): the SIMT tiled
GEMM / implicit-GEMM convolution (``cuda_gemm``) and the float16 tensor-core GEMM
(``cuda_tensorcore``). Traces round-trip; the default point is the heuristic's kernel;
points that break the descriptor's limits are refused naming the block, its extents and
the limit; sampled points run by the SIMT emulation match numpy and the reference
executor (through emulated bundles), and their CUDA source compiles with nvcc for sm_80
and sm_90 (one nvcc run for all of them)."""

from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import make_model, nvcc_object, random_inputs
from tests.bundle.test_cuda_fp16 import FP16_TOL, gemm_model
from tests.codegen.gpu_workloads import run_simt
from toolchain.autotune.apply import forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.autotune.tasks import dense_task, extract_tasks
from toolchain.bundle import compile_model, load_bundle
from toolchain.errors import KilnError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.schedules.registry import schedule_for
from toolchain.target import load_target, parse_target
from toolchain.tir.transform.pipeline import lower

NVCC = shutil.which("nvcc")
SM80 = load_target("cuda-sm80")
#: a GPU known by its capabilities only, with small limits
SMALL = parse_target("name: tiny-gpu\nkind: cuda\nextends: cuda-sm80\n"
                     "max_threads_per_block: 64\nmax_shared_memory_per_block: 4096\n"
                     "max_registers_per_thread: 40\n")


def conv_model() -> tuple[Any, dict[str, np.ndarray]]:
    """A padded 3 x 3 convolution + ReLU, then a strided 1 x 1 one: two implicit GEMMs."""
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((32, 16, 1, 1)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], strides=[2, 2])]
    m = make_model(nodes, {"x": (np.float32, [1, 8, 12, 12])},
                   {"y": (np.float32, [1, 32, 6, 6])}, {"w1": w1, "w2": w2})
    return m, random_inputs(m, seed=4)


def sampled(space: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` distinct valid points of ``space`` other than the default, tiled ones first
    (a seeded sample)."""
    rng = random.Random(seed)
    seen = {space.key(space.default())}
    out: list[dict[str, Any]] = []
    for _ in range(2000):
        p = space.sample(rng)
        if space.key(p) in seen or p.get("kernel") == "generic" and len(out) < n - 1:
            continue
        seen.add(space.key(p))
        out.append(p)
        if len(out) == n:
            break
    return out


def test_traces_round_trip_and_the_default_is_the_heuristic() -> None:
    task = dense_task(64, 96, 80, SM80)
    s = task.space
    assert s.kind == "cuda_gemm"
    for p in [s.default(), *sampled(s, 3, seed=0)]:
        t = s.trace(p)
        assert Trace.from_json(t.to_json()) == t and s.point_of(t) == s.canonical(p)
    plain = str(lower(schedule_for(task.node, SM80).schedule.mod, target=SM80))
    with forcing({s.workload: s.trace(s.default())}):
        forced = str(lower(schedule_for(task.node, SM80).schedule.mod, target=SM80))
    assert forced == plain
    # another point builds another kernel
    other = next(p for p in sampled(s, 8, seed=1) if p["kernel"] == "tiled")
    with forcing({s.workload: s.trace(other)}):
        assert str(lower(schedule_for(task.node, SM80).schedule.mod, target=SM80)) != plain


def test_points_over_the_descriptors_limits_are_refused_naming_block_extents_limit() -> None:
    s = dense_task(64, 96, 80, SMALL).space
    d = s.default()
    assert s.is_valid(d) and d["ty"] * d["tx"] <= 64
    cases = [({"ty": 16, "tx": 16}, "threads per block ty*tx at most 64 (the target's "
              "max_threads_per_block)"),
             ({"ry": 8, "rx": 4}, "at most 40 (the target's max_registers_per_thread)"),
             ({"ty": 8, "tx": 8, "ry": 1, "rx": 1, "bk": 48, "double_buffer": True},
              "at most 4096 B (the target's max_shared_memory_per_block)")]
    for change, words in cases:
        with pytest.raises(InvalidPoint) as e:
            s.check({**d, **change})
        msg = str(e.value)
        assert words in msg, msg
        assert "block 'matmul' (y=64, x=80, k=96)" in msg and "t64s4096" in msg
    # refused when forced too, before anything is built
    task = dense_task(64, 96, 80, SMALL)
    bad = Trace("cuda_gemm", (("ty", 16), ("tx", 16)))
    with forcing({task.space.workload: bad}), pytest.raises(InvalidPoint, match="at most 64"):
        schedule_for(task.node, SMALL)


def test_tensor_core_points_are_refused_over_the_opt_in_shared_memory() -> None:
    model, _ = gemm_model(128, 256, 128)
    (task,) = [t for t in extract_tasks(model, SM80, precision="fp16")
               if t.space.kind == "cuda_tensorcore"]
    s = task.space
    d = s.default()
    t = s.trace(d)
    assert Trace.from_json(t.to_json()) == t
    assert {k.name for k in s.knobs} >= {"wy", "wx", "fm", "fn", "kf", "stages", "pad",
                                          "vector", "async_copy", "intrinsic", "warp_mma"}
    assert s.knob("intrinsic").choices == ("wmma", "mma")
    with pytest.raises(InvalidPoint) as e:  # 256 x 128 fp32 output tile + 4 stages
        s.check({**d, "wy": 8, "wx": 2, "fm": 2, "fn": 4, "kf": 4, "stages": 4})
    assert "at most 166912 B (the target's max_shared_memory_per_block_optin" in str(e.value)
    assert "block 'gemm_matmul' (y=128, x=128, k=256)" in str(e.value)
    with pytest.raises(InvalidPoint, match=r"threads per block wy\*wx\*32 at most 1024"):
        s.check({**d, "wy": 8, "wx": 8, "fm": 1, "fn": 1})


def test_sampled_matmul_points_emulated_give_numpys_numbers() -> None:
    task = dense_task(48, 64, 40, SM80)
    a = np.random.default_rng(0).standard_normal((48, 64)).astype(np.float32)
    w = task.node.inputs[1].data
    points = sampled(task.space, 4, seed=2)
    for i, p in enumerate([*points, {**task.space.default(), "split_k": 2, "bk": 8}]):
        with forcing({task.space.workload: task.space.trace(p)}):
            f = lower(schedule_for(task.node, SM80).schedule.mod, target=SM80)
        out = np.full((48, 40), np.nan, np.float32)
        run_simt(f, a, w, out, name=f"space_mm{i}")
        np.testing.assert_allclose(out, a @ w, rtol=1e-5, atol=1e-4, err_msg=str(p))


def batch_matmul_task() -> Any:
    """``A[2, 24, 40] @ B[2, 40, 32]`` (both inputs): the batch on ``blockIdx.z``."""
    from toolchain.autotune.tasks import task_of
    from toolchain.schedules import make_node

    task = task_of(make_node("MatMul", [(2, 24, 40), (2, 40, 32)], name="bmm"), SM80)
    assert task is not None and task.space.kind == "cuda_gemm"
    return task


def test_sampled_batch_matmul_points_emulated_give_numpys_numbers() -> None:
    task = batch_matmul_task()
    assert "z2|" in task.space.workload
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 24, 40)).astype(np.float32)
    b = rng.standard_normal((2, 40, 32)).astype(np.float32)
    for i, p in enumerate(sampled(task.space, 3, seed=9)):
        with forcing({task.space.workload: task.space.trace(p)}):
            f = lower(schedule_for(task.node, SM80).schedule.mod, target=SM80)
        out = np.full((2, 24, 32), np.nan, np.float32)
        run_simt(f, a, b, out, name=f"space_bmm{i}")
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4, err_msg=str(p))


def _emulated(model: Any, feeds: dict[str, np.ndarray], traces: dict[str, Trace], out: Path,
              precision: str = "fp32", target: str = "cuda-sm80") -> dict[str, np.ndarray]:
    with forcing(traces):
        d = compile_model(model, target, out, progress=False, emulate=True,
                          precision=precision)
    return load_bundle(d)(feeds)


#: the warpgroup knobs of a 64 x 32 x 64 float16 GEMM's points tried below (16-byte
#: cp.async fetches): (wy, fm, fn, kf, stages, pad, in_flight)
WGMMA_GRID = list(itertools.product((2, 4, 8), (1, 2), (2, 4, 8), (1, 2), (1, 2, 3, 4),
                                    (0, 8), (0, 1)))


def test_every_valid_wgmma_point_of_a_small_gemm_schedules_and_emulates(
        tmp_path: Path) -> None:
    """cuda-sm90's tensor-core space offers the warpgroup kernel (``intrinsic`` wgmma;
    cuda-sm80's has none). Of the grid's points, those the rules let through are exactly
    those the kernel takes, less the four that leave products in flight (``in_flight``
    1), which the kernel takes and the emulation finds right but an H200 computed wrong:
    refused by that rule alone (``IN_FLIGHT_ON_HARDWARE``; tests/schedules/gpu/
    test_wgmma.py still emulates such kernels). Every one of the 10 schedules and lowers
    through the tuner's path; two padded by 8 -- the single-buffered one and the one of
    steps of 32 -- emulated within the fp16 tolerance of the reference: the others differ
    from them only in stages or in padding; the others are refused naming the rule
    broken, and the kernel refuses them too."""
    from toolchain.schedules.gpu.gemm_space import IN_FLIGHT_ON_HARDWARE, wmma_tiles_of
    from toolchain.schedules.gpu.wgmma import check_tiles, wgmma_intrinsics

    model, feeds = gemm_model(64, 32, 64)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    sm90 = load_target("cuda-sm90")
    (task,) = [t for t in extract_tasks(model, sm90, precision="fp16")
               if t.space.kind == "cuda_tensorcore"]
    s, wg = task.space, wgmma_intrinsics(sm90)
    assert wg is not None and s.knob("in_flight").choices == (0, 1)
    assert s.knob("intrinsic").choices == ("wmma", "mma", "wgmma")
    assert s.default()["intrinsic"] == "wmma" and s.default()["in_flight"] == 0
    valid, reasons, on_hardware = [], set(), []
    for wy, fm, fn, kf, stages, pad, flying in WGMMA_GRID:
        p = s.canonical({**s.default(), "intrinsic": "wgmma", "wy": wy, "wx": 1, "fm": fm,
                         "fn": fn, "kf": kf, "stages": stages, "pad": pad, "vector": 8,
                         "async_copy": True, "in_flight": flying})
        problems = s.problems(p)
        wgmma_rule = [m for m in problems
                      if m.startswith("wgmma") and m != IN_FLIGHT_ON_HARDWARE]
        if not problems:
            check_tiles(wmma_tiles_of(p), wg)
            if p not in valid:
                valid.append(p)
        elif problems == [IN_FLIGHT_ON_HARDWARE]:
            # the kernel takes it (and the emulation finds it right); the GPU did not
            check_tiles(wmma_tiles_of(p), wg)
            if p not in on_hardware:
                on_hardware.append(p)
        elif wgmma_rule:
            reasons.update(wgmma_rule)
            with pytest.raises(KilnError):
                check_tiles(wmma_tiles_of(p), wg)
    assert len(valid) == 10 and not any(p["in_flight"] for p in valid)
    assert len(on_hardware) == 4 and all(p["in_flight"] for p in on_hardware)
    assert reasons == {
        "wgmma: a warpgroup is 4 warps down of one 16-row fragment each (wy a multiple of "
        "4, fm 1)",
        "wgmma: the target declares a 64 x fn*16 warpgroup product and fill (fn 4, 8)",
        "wgmma in flight: double-buffered over at least in_flight + 2 stages (a stage for "
        "the fetch, one for each group still reading)",
        "wgmma in flight: one product call a step (the target's 64 x fn*16 x kf*16 product "
        "leaving in_flight groups running: groups are counted in steps)"}
    for i, p in enumerate(valid):
        with forcing({s.workload: s.trace(p)}):
            sch = schedule_for(task.node, sm90)
        text = str(lower(sch.schedule, target=sm90))
        assert ("_pipe_" in text) == bool(p["in_flight"]) and "kiln_wgmma_f16_64x64x16" in text
        if p["pad"] == 8 and (p["in_flight"] or p["kf"] == 2 or p["stages"] == 1):
            got = _emulated(model, feeds, {s.workload: s.trace(p)}, tmp_path / f"w{i}",
                            "fp16", "cuda-sm90")
            err = float(np.max(np.abs(got["y"] - want))) / float(np.max(np.abs(want)))
            assert err < FP16_TOL, (wmma_tiles_of(p).label(), err)


def test_sampled_convolution_points_through_emulated_bundles_match_the_reference(
        tmp_path: Path) -> None:
    model, feeds = conv_model()
    want = run_graph(from_onnx(model), feeds)["y"]
    spaces = [t.space for t in extract_tasks(model, SM80)]
    assert [s.kind for s in spaces] == ["cuda_gemm", "cuda_gemm"]
    picks = [sampled(s, 2, seed=5) for s in spaces]
    for i in range(2):
        traces = {s.workload: s.trace(p[i]) for s, p in zip(spaces, picks, strict=True)}
        got = _emulated(model, feeds, traces, tmp_path / f"b{i}")["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                   err_msg=str(list(traces.values())))


def test_sampled_tensor_core_points_through_emulated_bundles_match_the_reference(
        tmp_path: Path) -> None:
    """(About 10 s: three emulated float16 bundles, the wmma and mma.sync fragments
    computed element by element in C.)"""
    model, feeds = gemm_model(64, 64, 128)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    (task,) = extract_tasks(model, SM80, precision="fp16")
    s = task.space
    d = s.default()
    points = [p for p in sampled(s, 2, seed=6)]
    points.append(s.canonical({**d, "intrinsic": "mma", "stages": 3}))  # mma.sync
    for i, p in enumerate(points):
        got = _emulated(model, feeds, {s.workload: s.trace(p)}, tmp_path / f"h{i}", "fp16")
        err = float(np.max(np.abs(got["y"] - want))) / float(np.max(np.abs(want)))
        assert err < FP16_TOL, (p, err)


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_sampled_points_compile_with_nvcc_for_sm80_and_sm90(tmp_path: Path) -> None:
    """Every space's default and sampled points, as the bundle renders them, in one file
    compiled once for both architectures (about 1.9 CPU s of nvcc for the 15 kernels, as
    much Python lowering them)."""
    from toolchain.autotune.cuda import kernel_sources
    from toolchain.codegen.backend import CUDABackend

    conv, _ = conv_model()
    mm, _ = gemm_model(64, 64, 128)
    tasks = [*extract_tasks(conv, SM80), *extract_tasks(mm, SM80, precision="fp16"),
             dense_task(48, 64, 40, SM80), batch_matmul_task()]
    arts = []
    for task in tasks:
        s = task.space
        for p in [s.default(), *sampled(s, 2, seed=7)]:
            with forcing({s.workload: s.trace(p)}):
                f = lower(schedule_for(task.node, SM80).schedule.mod, target=SM80)
            arts.append(CUDABackend().kernel(f, f"k{len(arts)}"))
    files = kernel_sources(arts[0], SM80, "points", more=arts[1:])
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    from toolchain.bundle.render import RUNTIME

    # the suite's one nvcc check (sm_80 and sm_90 object code, warnings as errors, device
    # code only), as the bundle tests run it; the runtime's headers from the package
    res = nvcc_object(tmp_path, "kernels.cu", tmp_path / "k.fatbin",
                      [f"-I{RUNTIME}", "-I."], device_only=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert sum("__global__" in line for line in files["kernels.cu"].splitlines()) >= len(arts)


def test_a_point_whose_lowered_kernel_exceeds_shared_memory_is_refused_when_scheduled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule counts the operand tiles from their access patterns, an estimate (a ragged
    edge can keep a larger tile); the lowered kernel's own count is checked when the point
    is scheduled, before anything is compiled. Here the estimate is made to pass a point
    whose tiles are 2 x (8 + 32) x 32 floats, 10 KiB, on a GPU with 4 KiB."""
    import toolchain.schedules.gpu.gemm_space as gs

    monkeypatch.setattr(gs, "shared_estimate", lambda *a, **k: 0)
    task = dense_task(64, 96, 80, SMALL)
    s = task.space
    p = s.check({**s.default(), "kernel": "tiled", "split_k": 1, "ty": 4, "tx": 16, "ry": 2,
                 "rx": 2, "bk": 32, "double_buffer": True})
    with forcing({s.workload: s.trace(p)}), pytest.raises(InvalidPoint) as e:
        schedule_for(task.node, SMALL)
    msg = str(e.value)
    # (the schedule's own launch-limit check finds it first, the double-buffered tiles
    # counted: the schedule verifies before the lowered count is taken)
    assert "10240 bytes of shared memory" in msg and "(4096 B)" in msg, msg
    assert "block 'matmul' (y=64, x=80, k=96)" in msg
