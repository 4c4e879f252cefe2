"""The ``.wgmma`` tensor-core GEMM (``toolchain.schedules.gpu.wgmma``): Hopper's warpgroup
MMA on core-matrix shared tiles (``transform_layout``), accumulators in the 128 threads'
registers, the epilogue straight from them. Proven on the CPU: the SIMT emulation keeps
every thread's registers apart and the intrinsics' emulation reads the operands through
the descriptors as the hardware does (``tests/intrinsics/test_wgmma.py``); its bundles are
compared with the float32 reference. The race checker runs the calls as their behaviour;
nvcc builds the kernels for sm_90a. It is not the default (never run on a GPU here)."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.bundle.helpers import BROKEN_BUILD, logged_calls, nvcc_kernel_check, recording_nvcc
from tests.bundle.test_cuda_fp16 import FP16_TOL, gemm_model
from tests.schedules.gpu.test_tensorcore import wmma_gemm
from toolchain import te
from toolchain.bundle import compile_model, host, load_bundle
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.errors import KilnError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.schedules.gpu import wgmma
from toolchain.schedules.gpu.gemm import lowered_shared_bytes, wmma_tiles
from toolchain.schedules.gpu.gemm_space import IN_FLIGHT_ON_HARDWARE
from toolchain.schedules.gpu.tensorcore import (
    WmmaTiles,
    choose_wmma_tiles,
    loops_under,
    tensor_core_intrinsics,
    try_tile_wmma,
)
from toolchain.schedules.gpu.wgmma import wgmma_intrinsics, wgmma_shared_bytes
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.race import check_races, find_races
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier

NVCC = shutil.which("nvcc")
SM90 = load_target("cuda-sm90")
#: one warpgroup of 64 x 128, steps of 32 (one call: two m64n128k16), single-buffered
ONE_GROUP = WmmaTiles(4, 1, 1, 8, 2, double_buffer=False, vector=8, wgmma=True)
#: 2 x 2 warpgroups (128 x 256, 512 threads), steps of 16, double-buffered cp.async fetches
FOUR_GROUPS = WmmaTiles(8, 2, 1, 8, 1, vector=8, async_copy=True, wgmma=True)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    want = want.astype(np.float64)
    return float(np.max(np.abs(got - want))) / float(np.max(np.abs(want)))


def _gemm(m: int, n: int, k: int, tiles: WmmaTiles) -> Schedule:
    return wmma_gemm(m, n, k, tiles, SM90)


def test_found_by_behaviour_labelled_and_never_the_default() -> None:
    """cuda-sm90 declares the warpgroup products and fills (found by behaviour, not by
    name); cuda-sm80 none, so the variant is refused there; the default tiles stay wmma."""
    wg = wgmma_intrinsics(SM90)
    assert wg is not None and wg.accumulator == "wgmma.accumulator"
    assert dict(wg.products) == {(64, 16): "cuda-sm90.wgmma_m64n64k16",
                                 (128, 16): "cuda-sm90.wgmma_m64n128k16",
                                 (128, 32): "cuda-sm90.wgmma_m64n128k32"}
    assert wgmma_intrinsics(load_target("cuda-sm80")) is None
    assert ONE_GROUP.label() == "4x1w.1x8f.kf2.sb.p0.v8.wgmma"
    assert FOUR_GROUPS.label() == "8x2w.1x8f.kf1.db.p0.v8.async.wgmma"
    t = choose_wmma_tiles(4096, 4096, 4096, tensor_core_intrinsics(SM90), SM90)
    assert not t.wgmma
    A = te.placeholder((128, 64), name="A", dtype="float16")
    B = te.placeholder((64, 128), name="B", dtype="float16")
    r = te.reduce_axis((0, 64), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sm80 = load_target("cuda-sm80")
    assert try_tile_wmma(Schedule(te.create_prim_func([A, B, C]), sm80), "C", sm80,
                         ONE_GROUP) is None


def test_core_matrix_tiles_registers_and_the_async_proxy_fence() -> None:
    """The shared tiles are the core-matrix layouts (A [k / 8][m][8], B [n / 8][k][8]: no
    padding, 12 KiB for 64 x 128 with steps of 32), the fetches one 16-byte row of a core
    matrix a thread, the accumulator 64 registers a thread read with constant indices,
    and every barrier in the CUDA source comes after ``fence.proxy.async``."""
    from toolchain.codegen.backend import CUDABackend

    sch = _gemm(128, 128, 64, ONE_GROUP)
    text = str(sch.mod)
    assert "A_shared[v1_1 // 8, v0_1, v1_1 % 8] =" in text  # A[m, k] at [k / 8][m][k % 8]
    assert "B_shared[v1 // 8, v0, v1 % 8] =" in text  # B[k, n] at [n / 8][k][n % 8]
    f = lower(sch, target=SM90)
    assert max(lowered_shared_bytes(sch, SM90).values()) == wgmma_shared_bytes(ONE_GROUP) \
        == 12288
    art = CUDABackend().kernel(f, "g")
    body = "\n".join(line for k in art.launches for line in k["body"])
    assert "float C_wgmma_accumulator[64]" in body
    reads = re.findall(r"C_wgmma_accumulator\[([^\]]*)\]", body)
    # the declaration, the fill, the step's product, 64 reads by the epilogue
    assert len(reads) == 1 + 1 + 1 + 64 and all(re.fullmatch(r"\d+", r) for r in reads)
    lines = body.splitlines()
    syncs = [i for i, ln in enumerate(lines) if "__syncthreads()" in ln]
    assert syncs and all("fence.proxy.async.shared::cta" in lines[i - 2] for i in syncs)
    assert "*(uint4 *)" in body  # 16-byte fetches: one core-matrix row
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in str(f.attrs)


def test_the_wgmma_kernel_is_race_free_and_every_barrier_is_needed() -> None:
    """The race checker runs each call as its declared behaviour on the core-matrix tiles
    (the accumulator private to the threads): three double-buffered steps of 16 (a
    64 x 64 warpgroup) have no race, one barrier before the loop and one a step, and
    taking out either makes one."""
    sch = _gemm(64, 64, 48, WmmaTiles(4, 1, 1, 4, 1, pad=8, vector=8, async_copy=True,
                                      wgmma=True))
    f = lower(sch, target=SM90)
    assert "(k_0 + 1) % 2 * 1040" in str(f)  # double-buffered, 2 x (64 x 8 + 8) halves
    check_races(f)
    barriers = [n for n, _ in st.walk(f.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert len(barriers) == 2
    for b in barriers:  # (limit=1: the emulation stops at the first race it finds)
        assert find_races(st.replace_stmts(f, {id(b): None}), max_blocks=1, limit=1)


#: (m, k, n, tiles): one warpgroup, two 64-row blocks, two steps of 32; four warpgroups,
#: double-buffered cp.async steps of 16 (six of them), two blocks across; both with the
#: core-matrix slices padded (16 and 8 halves: descriptor offsets off powers of two); one
#: 64-row block with each operand its own pad (A 16 halves, B 8: ``p16b8``)
CASES = [(128, 64, 128, replace(ONE_GROUP, pad=16)), (128, 96, 512, replace(FOUR_GROUPS, pad=8)),
         (64, 64, 128, replace(ONE_GROUP, pad=16, pad_b=8))]


@pytest.mark.parametrize(("m", "k", "n", "tiles"), CASES,
                         ids=[f"{m}x{k}x{n}-{t.label()}" for m, k, n, t in CASES])
def test_wgmma_gemms_emulated_match_the_reference(m: int, k: int, n: int, tiles: WmmaTiles,
                                                  tmp_path: Path) -> None:
    """A dense layer (MatMul, bias, ReLU folded into the epilogue) emulated: within the
    fp16 tolerance of the float32 reference; the descriptors' offsets are the padded
    strides (A's leading offset 16 (BM + pad / 8) bytes, B's stride offset 16 (BK + pad_b /
    8))."""
    model, feeds = gemm_model(m, k, n)
    want = run_graph(from_onnx(model), feeds)["y"]
    with wmma_tiles(tiles):
        d = compile_model(model, "cuda-sm90", tmp_path / "e", progress=False, emulate=True,
                          precision="fp16")
    src = (d / "src/kernels.c").read_text()
    assert "kiln_wgmma_f16_64x128x" in src and "kiln_wgmma_fill_64x128" in src
    bm, bk = 16 * tiles.wy, 16 * tiles.kf
    pad_a, pad_b = tiles.pads
    assert f"((uint64_t)({16 * bm + 2 * pad_a} >> 4) << 16)" in src  # A: along K
    assert f"((uint64_t)({16 * bk + 2 * pad_b} >> 4) << 32)" in src  # B: along N
    assert _rel(load_bundle(d)(feeds)["y"], want) < FP16_TOL


def test_a_batch_matmul_with_a_tanh_tail_emulated_matches_the_reference(tmp_path: Path
                                                                        ) -> None:
    """Two 64 x 48 x 64 products (the batch on blockIdx.z: the tiles keep a leading
    dimension of 1), Tanh folded into the epilogue, three double-buffered steps of 16."""
    from onnx import helper

    from tests.schedules.gpu.test_tensorcore import make_model, random_inputs

    nodes = [helper.make_node("MatMul", ["a", "b"], ["c"]),
             helper.make_node("Tanh", ["c"], ["y"])]
    model = make_model(nodes, {"a": (np.float32, [2, 64, 48]), "b": (np.float32, [2, 48, 64])},
                       {"y": (np.float32, [2, 64, 64])})
    feeds = random_inputs(model, seed=7)
    want = run_graph(from_onnx(model), feeds)["y"]
    with wmma_tiles(WmmaTiles(4, 1, 1, 4, 1, vector=8, async_copy=True, wgmma=True)):
        d = compile_model(model, "cuda-sm90", tmp_path / "e", progress=False, emulate=True,
                          precision="fp16")
    assert "kiln_wgmma_f16_64x64x16" in (d / "src/kernels.c").read_text()
    assert _rel(load_bundle(d)(feeds)["y"], want) < FP16_TOL


def test_a_wrong_thread_mapping_in_the_epilogue_is_caught(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The epilogue's thread as ``32 w + 8 q + g`` instead of the ISA's ``32 w + 4 g + q``:
    the threads read registers that hold other elements, and the emulated bundle is far
    off the reference (the right mapping is within FP16_TOL above)."""

    def swapped(sch: Schedule, cf: object, bx: object, t: WmmaTiles, n: int) -> list:
        ay, ax = loops_under(sch, cf, bx)
        sgy, sw, sh, sg = sch.split(ay, [t.wy // 4, 4, 2, 8])
        sgx, sc, sq, s2 = sch.split(ax, [t.wx, n // 8, 4, 2])
        sch.reorder(sgy, sgx, sw, sq, sg, sc, sh, s2)
        lane = sch.fuse(sw, sq, sg)
        return [(sgy, "threadIdx.z"), (sgx, "threadIdx.y"), (lane, "threadIdx.x")]

    model, feeds = gemm_model(128, 64, 128)
    want = run_graph(from_onnx(model), feeds)["y"]
    monkeypatch.setattr(wgmma, "epilogue_loops", swapped)
    with wmma_tiles(ONE_GROUP):
        d = compile_model(model, "cuda-sm90", tmp_path / "e", progress=False, emulate=True,
                          precision="fp16")
    assert _rel(load_bundle(d, **BROKEN_BUILD)(feeds)["y"], want) > 0.1


#: one warpgroup, 64 x 64 steps of 16, a group of products left in flight, three stages
#: (the fetches one step ahead, a stage for the product in flight)
IN_FLIGHT = WmmaTiles(4, 1, 1, 4, 1, vector=8, async_copy=True, wgmma=True, stages=3,
                      in_flight=1)


def _late_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fetches run ``stages - 1`` steps ahead as if nothing stayed in flight: step k+1
    overwrites the stage step k's products (retired only by step k+1's call) still read
    -- the wait that retires them placed a step too late for this pipeline."""
    db = Schedule.double_buffer
    monkeypatch.setattr(Schedule, "double_buffer",
                        lambda self, s, stages=2, in_flight=0: db(self, s, stages=stages))


def test_per_operand_pads_label_refusals_and_bank_conflicts() -> None:
    """``pad_b``: B's own padding (``p16b8``), the label parsed back by the sweep's
    ``parse_tiles``; each operand's pad refused with a reason unless whole 16-byte rows
    under 128 bytes, and outside the ``.wgmma`` kernel (wmma, mma.sync: no tensor-core
    kernel); the shared tiles and their bytes follow each pad; and by the fetch
    stores' bank count (``store_ways``) every per-operand ``SWEEP`` row stores both
    operands conflict-free, where one pad for both leaves one of them 2-way."""
    import importlib.util

    from toolchain.schedules.gpu.wgmma_swizzle import store_ways

    spec = importlib.util.spec_from_file_location(
        "bench_cuda", Path(__file__).resolve().parents[3] / "benchmarks" / "cuda.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    both = replace(ONE_GROUP, pad=16, pad_b=8)
    assert both.label() == "4x1w.1x8f.kf2.sb.p16b8.v8.wgmma" and both.pads == (16, 8)
    assert bench.parse_tiles(both.label()) == both
    assert bench.parse_tiles("4x1w.1x8f.kf2.sb.p16.v8.wgmma").pad_b is None
    wg = wgmma_intrinsics(SM90)
    for bad, why in ((replace(both, pad_b=4), "not 4 [(]B[)]"),
                     (replace(both, pad_b=64), "not 64 [(]B[)]"),
                     (replace(both, pad=12), "not 12 [(]A[)]")):
        with pytest.raises(KilnError, match=why):
            wgmma.check_tiles(bad, wg)
    A = te.placeholder((128, 64), name="A", dtype="float16")
    B = te.placeholder((64, 128), name="B", dtype="float16")
    r = te.reduce_axis((0, 64), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    func = te.create_prim_func([A, B, C])
    wmma_tiles_b = WmmaTiles(2, 2, 2, 2, 2, pad=8, vector=8)  # wmma: one pad for both
    assert try_tile_wmma(Schedule(func, SM90), "C", SM90, wmma_tiles_b) is not None
    assert try_tile_wmma(Schedule(func, SM90), "C", SM90,
                         replace(wmma_tiles_b, pad_b=16)) is None
    # A [4][64 + 2][8] (16 halves after each slice), B [16][32 + 1][8]: 4224 + 8448 bytes
    assert wgmma_shared_bytes(both) == 2 * (4 * (64 * 8 + 16) + 16 * (32 * 8 + 8)) == 12672
    sch = _gemm(64, 128, 64, both)
    assert max(lowered_shared_bytes(sch, SM90).values()) == 12672
    rows = [bench.parse_tiles(x) for x in bench.SWEEP if ".p16b8." in x]
    lead = sum(".sw128." in x for x in bench.SWEEP)  # the swizzled rows lead, then these
    assert rows and bench.SWEEP[lead:lead + len(rows)] == tuple(t.label() for t in rows)
    for t in rows:
        bm, bn, bk, threads = 16 * t.wy, 16 * t.fn * t.wx, 16 * t.kf, 32 * t.wy * t.wx
        ways = [(store_ways("K", rows=bm, cols=bk, threads=threads, layout="core", pad=a),
                 store_ways("MN", rows=bk, cols=bn, threads=threads, layout="core", pad=b))
                for a, b in (t.pads, (t.pad, t.pad), (t.pads[1], t.pads[1]))]
        assert ways == [(1, 1), (1, 2), (2, 1)], t.label()


def test_overlapped_products_tiles_label_and_refusals() -> None:
    """``.ov1``: the product that leaves one group running (``wait_group 1``) over the
    whole step, the fetches a step less ahead; refused with a reason where a stage would
    be overwritten in flight (under in_flight + 2 stages, single-buffered) or the step
    takes more than one call (no 64 x 64 x 32 product: groups are counted in steps)."""
    wg = wgmma_intrinsics(SM90)
    assert IN_FLIGHT.label() == "4x1w.1x4f.kf1.db.p0.v8.async.s3.ov1.wgmma"
    assert wgmma.check_tiles(IN_FLIGHT, wg)[1:] == ("cuda-sm90.wgmma_m64n64k16_pipe", True)
    for bad, why in ((replace(IN_FLIGHT, stages=2), "at least 3 stages"),
                     (replace(IN_FLIGHT, double_buffer=False), "not 1"),
                     (replace(IN_FLIGHT, kf=2), "64 x 64 x 32")):
        with pytest.raises(KilnError, match=why):
            wgmma.check_tiles(bad, wg)
    f = lower(_gemm(64, 64, 64, IN_FLIGHT), target=SM90)
    text = str(f)
    assert "(k_0 + 1) % 3 * 1024" in text and "k_0 % 3 * 1024" in text  # 1 ahead, 3 stages
    after = text[text.index("T.storage_sync('shared')\n            for i_1"):]
    assert "_pipe_" in after and ", 0, 0, T.address_of(C_wgmma_accumulator[0])" in after


def test_overlapped_kernel_is_race_free_and_a_late_wait_races(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race checker reads an in-flight product's operands until the call that retires
    it: the overlapped 64 x 64 x 64 kernel has no race with one barrier before the loop
    and one a step (the step's needed); with the fetches a step further ahead (the wait
    too late for them) a fetch overwrites a stage an unretired product reads: a race."""
    f = lower(_gemm(64, 64, 64, IN_FLIGHT), target=SM90)
    check_races(f)
    barriers = [n for n, _ in st.walk(f.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert len(barriers) == 2
    assert find_races(st.replace_stmts(f, {id(barriers[-1]): None}), max_blocks=1, limit=1)
    _late_wait(monkeypatch)
    races = find_races(lower(_gemm(64, 64, 64, IN_FLIGHT), target=SM90), max_blocks=1,
                       limit=1)  # (the run stops at the first race)
    assert races and "is read by" in str(races[0])


@pytest.mark.parametrize("broken", ["", "late wait", "no drain"])
def test_overlapped_gemm_emulated_and_a_late_wait_or_no_drain_is_caught(
        broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulation computes a product when a wait retires it (the next call's
    ``wait_group 1``, or the drain), reading A and B then: the overlapped dense layer
    (64 x 64 x 64, bias, ReLU; four steps) matches the reference; with the wait too late
    for the pipeline (a stage overwritten before it) or without the drain (the last
    product never retired) it is far off."""
    from toolchain.bundle import compiler
    from toolchain.tir.transform import pipeline

    model, feeds = gemm_model(64, 64, 64)
    want = run_graph(from_onnx(model), feeds)["y"]
    if broken == "late wait":
        _late_wait(monkeypatch)
    elif broken == "no drain":
        monkeypatch.setitem(pipeline.PHASES, 3, tuple(
            p for p in pipeline.PHASES[3] if p.__name__ != "drain_async_products"))
        # (lowered afresh: not the kernel an earlier compile of this process lowered)
        monkeypatch.setattr(compiler, "LOWERED_IN_PROCESS",
                            type(compiler.LOWERED_IN_PROCESS)(limit=4))
    with wmma_tiles(IN_FLIGHT):
        d = compile_model(model, "cuda-sm90", tmp_path / "e", progress=False, emulate=True,
                          precision="fp16")
    assert "kiln_wgmma_f16_64x64x16_pipe" in (d / "src/kernels.c").read_text()
    err = _rel(load_bundle(d, **(BROKEN_BUILD if broken else {}))(feeds)["y"], want)
    assert err > 0.1 if broken else err < FP16_TOL


@nvcc_kernel_check("wgmma")
def _wgmma_gemm(out: Path) -> dict[str, Path]:
    model, _ = gemm_model(128, 96, 512)
    with wmma_tiles(replace(FOUR_GROUPS, pad=8)):
        plain = compile_model(model, "cuda-sm90", out / "wgmma_gemm", progress=False,
                              precision="fp16", name="wgmma_gemm")
    with wmma_tiles(replace(FOUR_GROUPS, pad=8, kf=2, stages=4, in_flight=1)):
        flying = compile_model(model, "cuda-sm90", out / "wgmma_pipe", progress=False,
                               precision="fp16", name="wgmma_pipe")
    return {"wgmma_gemm": plain, "wgmma_pipe": flying}


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_wgmma_kernels_compile_with_nvcc_for_sm90a(kernels_nvcc: Any, tmp_path: Path) -> None:
    """Through nvcc with the other GPU tests' kernels in one run (``kernels_nvcc``, whose
    Hopper code is then sm_90a's); the bundle's own build files name sm_90a, the other
    cuda-sm90 bundles keep sm_90."""
    d = kernels_nvcc.of("wgmma")["wgmma_gemm"]
    src = (d / "src/kernels.cu").read_text()
    assert "kiln_wgmma_f16_64x128x16_" in src and "fence.proxy.async.shared::cta" in src
    assert "-arch=sm_90a" in (d / "Makefile").read_text()
    assert "CUDA_ARCHITECTURES 90a" in (d / "CMakeLists.txt").read_text()
    pipe = (kernels_nvcc.of("wgmma")["wgmma_pipe"] / "src/kernels.cu").read_text()
    assert "wgmma.wait_group.sync.aligned 1;" in pipe and "_pipe_" in pipe
    assert re.search(r"kiln_wgmma_f16_64x128x32_pipe_\w+\(0, 0, ", pipe)  # the drain
    kernels_nvcc.check("wgmma", tmp_path)


def test_kilns_own_builds_of_a_wgmma_bundle_are_for_sm90a(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """``load_bundle``'s nvcc build (and its profiling build) compiles a bundle whose
    kernels call wgmma for sm_90a, as the bundle's Makefile does: built for plain sm_90 the
    calls are ``__trap()`` (the first GPU run of these kernels, 2026-11-29: every wgmma
    kernel stopped at a trap, under compute-sanitizer "Trace/breakpoint trap"); a bundle
    without them stays sm_90. (nvcc stood in for: the commands are what is checked.)"""
    nvcc, log = recording_nvcc(tmp_path / "bin")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host, "nvcc_launcher", lambda: [])
    model, _ = gemm_model(128, 64, 128)
    with wmma_tiles(replace(ONE_GROUP, pad=16)):
        wg = compile_model(model, "cuda-sm90", tmp_path / "wg", progress=False,
                           precision="fp16")
    plain = compile_model(model, "cuda-sm90", tmp_path / "plain", progress=False,
                          precision="fp16")
    for d, arch in ((wg, "-arch=sm_90a"), (plain, "-arch=sm_90")):
        for profile in (False, True):
            start = len(logged_calls(log))
            host.build_cuda(d, nvcc=str(nvcc), profile=profile)
            builds = [c for c in logged_calls(log, start) if "-o" in c]  # not --version
            assert len(builds) >= 3 and all(arch in c for c in builds), (d.name, builds)


#: on the GPU also the overlapped form: 2 x 2 warpgroups, steps of 32 over four stages
GPU_CASES = [*CASES, (128, 192, 512, replace(FOUR_GROUPS, pad=8, kf=2, stages=4,
                                             in_flight=1))]


def on_the_gpu(cases: list[tuple], tiles_at: int) -> list:
    """``cases`` as parameters of a GPU test; those whose tiles (item ``tiles_at``) leave
    products in flight are expected to fail there (``IN_FLIGHT_ON_HARDWARE``: an H200
    computed them wrong, by amounts that varied between runs, so a pass is no surprise
    either)."""
    xfail = pytest.mark.xfail(reason=IN_FLIGHT_ON_HARDWARE, strict=False)
    return [pytest.param(*c, marks=xfail) if c[tiles_at].in_flight else c for c in cases]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize(("m", "k", "n", "tiles"), on_the_gpu(GPU_CASES, 3),
                         ids=[f"{m}x{k}x{n}-{t.label()}" for m, k, n, t in GPU_CASES])
def test_wgmma_gemms_on_the_gpu_match_the_reference(m: int, k: int, n: int,
                                                    tiles: WmmaTiles, tmp_path: Path) -> None:
    """The PTX itself (the descriptors, the core-matrix layouts, wgmma's register layout
    the epilogue assumes), which the emulation can only follow as the ISA documents it,
    on an H100/H200 (sm_90a)."""
    gpu_gemm_matches_reference(tiles, m, k, n, tmp_path)


def gpu_gemm_matches_reference(tiles: WmmaTiles, m: int, k: int, n: int,
                               tmp_path: Path) -> None:
    """The fp16 ``m x k x n`` dense layer's cuda-sm90 bundle with ``tiles``, run twice on
    the GPU, within the fp16 tolerance of the reference executor."""
    model, feeds = gemm_model(m, k, n)
    want = run_graph(from_onnx(model), feeds)["y"]
    with wmma_tiles(tiles):
        mod = load_bundle(compile_model(model, "cuda-sm90", tmp_path / "g", progress=False,
                                        precision="fp16"))
    for _ in range(2):
        assert _rel(np.asarray(mod(feeds)["y"]), want) < FP16_TOL
