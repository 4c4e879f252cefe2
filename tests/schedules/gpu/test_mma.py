"""The ``.mma`` tensor-core GEMM (``toolchain.schedules.gpu.mma``): ``mma.sync`` m16n8k16
on ``ldmatrix`` fragments, accumulators in each lane's registers, the epilogue straight
from them to global memory. Proven on the CPU: the SIMT emulation keeps the 32 lanes'
registers apart and moves fragments as the PTX ISA says (``targets/cuda-sm80.yaml``), and
its bundles are compared with the float32 reference (a plain product, never the emulation
with itself); a wrong lane mapping -- in the epilogue or in the addresses given to
ldmatrix -- fails that comparison. nvcc builds the kernels for sm_80 and sm_90."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.bundle.helpers import nvcc_kernel_check
from tests.bundle.test_cuda_fp16 import FP16_TOL, gemm_model
from tests.schedules.gpu.test_tensorcore import MODELS, wmma_gemm
from toolchain import te
from toolchain.bundle import compile_model, load_bundle
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.schedules.gpu import mma
from toolchain.schedules.gpu.gemm import lowered_shared_bytes, wmma_tiles
from toolchain.schedules.gpu.mma import mma_intrinsics, mma_shared_bytes
from toolchain.schedules.gpu.tensorcore import (
    WmmaTiles,
    loops_under,
    tensor_core_intrinsics,
)
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.race import check_races, find_races
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier

NVCC = shutil.which("nvcc")
SM80 = load_target("cuda-sm80")
#: the default's tiles (8 warps of 32 x 64, 128 x 128) on mma.sync
DEFAULT_MMA = WmmaTiles(4, 2, 2, 4, 2, pad=8, vector=8, async_copy=True, mma=True)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    want = want.astype(np.float64)
    return float(np.max(np.abs(got - want))) / float(np.max(np.abs(want)))


def _emulated(model: object, tiles: WmmaTiles, out: Path, target: str | Path = "cuda-sm80"
              ) -> tuple[Path, str]:
    with wmma_tiles(tiles):
        d = compile_model(model, str(target), out, progress=False, emulate=True,
                          precision="fp16")
    return d, (d / "src/kernels.c").read_text()


def test_the_mma_intrinsics_are_found_by_behaviour() -> None:
    """Both CUDA descriptors declare the mma.sync set (a fill, m16n8k16 and warp tiles of
    it, on an accumulator scope with no store); wmma stays the default's set; c-generic
    has neither."""
    for name in ("cuda-sm80", "cuda-sm90"):
        t = load_target(name)
        tc = mma_intrinsics(t)
        assert tc is not None and (tc.m, tc.n, tc.k) == (16, 8, 16) and not tc.store
        assert tc.accumulator == "mma.accumulator" and tc.accumulator in t.memory_scopes
        assert tc.warp_product(2, 8) == f"{name}.mma_sync_32x64x16"
        assert tensor_core_intrinsics(t).accumulator == "wmma.accumulator"
    assert mma_intrinsics(load_target("c-generic")) is None


def test_the_accumulators_stay_in_registers_and_the_epilogue_stores_them() -> None:
    """No float32 shared tile: the kernel's shared memory is the two operand tiles (37 KiB
    at 128 x 128, double-buffered: inside the static 48 KiB, where wmma needs 101 KiB);
    each lane holds 64 accumulators (32 x 64 / 32) and the epilogue reads them with
    constant indices (the register loops unrolled)."""
    from toolchain.codegen.backend import CUDABackend

    sch = wmma_gemm(256, 256, 64, DEFAULT_MMA)
    f = lower(sch, target=SM80)
    assert max(lowered_shared_bytes(sch, SM80).values()) == mma_shared_bytes(
        DEFAULT_MMA, mma_intrinsics(SM80)) == 37888
    art = CUDABackend().kernel(f, "g")
    body = "\n".join(line for k in art.launches for line in k["body"])
    assert "float C_mma_accumulator[64]" in body
    assert "extern __shared__" not in body and "C_shared" not in body
    reads = re.findall(r"C_mma_accumulator\[([^\]]*)\]", body)
    # the declaration, 16 fills (2 x 8 tiles of 16 x 8), 2 products a step (kf = 2, one call
    # a warp tile), 64 reads by the epilogue
    assert len(reads) == 1 + 16 + 2 + 64
    assert all(re.fullmatch(r"\d+", r) for r in reads)
    text = str(f.attrs)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in text


#: (model, tiles): the default's tiles (one block of 128 x 128); one m16n8k16 call a 16 x 8
#: tile (a warp tile the target declares no product for: 32 x 16) with ldmatrix.x2.trans,
#: three steps of k, two blocks; 4 x 4 fragments of one warp, single-buffered, 8-byte
#: fetches; a batch matmul with a Tanh tail; a float16 model with 3 x 2 fragments a warp;
#: shapes the tiles do not divide (the SIMT kernel: M, N, K = 40, 20, 24; and the
#: default's tiles on N = 64)
MODELS = {**MODELS, "matmul_128x32x128": (lambda: gemm_model(128, 32, 128), True),
          "matmul_64x96x64": (lambda: gemm_model(64, 96, 64), True),
          "matmul_64x32x64": (lambda: gemm_model(64, 32, 64), True)}
CASES = [
    ("matmul_128x32x128", DEFAULT_MMA),
    ("matmul_128x96x64", WmmaTiles(2, 2, 2, 1, 2, pad=8, vector=8, mma=True)),
    ("matmul_64x32x64", WmmaTiles(1, 1, 4, 4, 1, double_buffer=False, pad=8, vector=4,
                                  mma=True)),
    ("batch_matmul_tanh", WmmaTiles(2, 2, 1, 2, 1, pad=8, vector=8, async_copy=True, mma=True)),
    ("float16_io", WmmaTiles(1, 2, 3, 2, 2, pad=8, vector=8, mma=True)),
    ("matmul_40x24x20", DEFAULT_MMA),
    ("matmul_128x96x64", DEFAULT_MMA),
    # three and four stages of operand tiles: six steps of 16, mma.sync and wmma
    ("matmul_64x96x64", WmmaTiles(2, 2, 2, 2, 1, pad=8, vector=8, async_copy=True,
                                  mma=True, stages=3)),
    ("matmul_64x96x64", WmmaTiles(2, 2, 1, 1, 1, pad=8, vector=8, async_copy=True,
                                  mma=True, stages=4)),
    ("matmul_64x96x64", WmmaTiles(2, 2, 2, 2, 1, pad=8, vector=8, async_copy=True, stages=3)),
]


@pytest.mark.parametrize(("name", "tiles"), CASES, ids=[f"{n}-{t.label()}" for n, t in CASES])
def test_mma_gemms_emulated_match_the_reference(name: str, tiles: WmmaTiles,
                                                tmp_path: Path) -> None:
    build, tensor_cores = MODELS[name]
    model, feeds = build()
    want = run_graph(from_onnx(model), feeds)
    d, src = _emulated(model, tiles, tmp_path / "emu")
    divides = name != "matmul_128x96x64" or tiles != DEFAULT_MMA
    assert ("kiln_mma_f16_" in src) == (tensor_cores and divides and tiles.mma)
    if tiles.stages > 2:  # the copies of step k + stages - 1 fetched in step k
        assert f"% {tiles.stages} * " in src and f"k_0 + {tiles.stages - 1} < 6" in src
    got = load_bundle(d)(feeds)
    for k, v in want.items():
        assert _rel(got[k], v) < FP16_TOL, k


def test_a_wrong_lane_mapping_in_the_epilogue_is_caught(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The epilogue's lane as ``8 t + g`` instead of the ISA's ``4 g + t``: every lane
    reads registers that hold other elements, and the emulated bundle is far off the
    reference (the same bundle with the right mapping is within FP16_TOL above)."""

    def swapped(sch: Schedule, cf: object, bx: object, t: WmmaTiles, nt: int) -> list:
        ay, ax = loops_under(sch, cf, bx)
        swy, sfy, sh, sg = sch.split(ay, [t.wy, t.fm, 2, 8])
        swx, sfx, s4, s2 = sch.split(ax, [t.wx, nt, 4, 2])
        sch.reorder(swy, swx, s4, sg, sfy, sfx, sh, s2)
        lane = sch.fuse(s4, sg)
        return [(swy, "threadIdx.z"), (swx, "threadIdx.y"), (lane, "threadIdx.x")]

    model, feeds = gemm_model(64, 32, 64)
    want = run_graph(from_onnx(model), feeds)["y"]
    monkeypatch.setattr(mma, "epilogue_loops", swapped)
    d, _ = _emulated(model, WmmaTiles(2, 2, 2, 2, 2, pad=8, vector=8, mma=True), tmp_path / "e")
    assert _rel(load_bundle(d)(feeds)["y"], want) > 0.1


def test_wrong_ldmatrix_addresses_are_caught(tmp_path: Path) -> None:
    """A descriptor whose mma.sync product gives ldmatrix A's k halves in the wrong order
    (lane l: columns 8 (l / 8 % 2) instead of 8 (l / 16): matrices 1 and 2 swapped, so a1
    holds A[g][8 + 2t..] where the ISA wants A[g + 8][2t..]) computes a wrong product in
    the emulation, which the reference catches."""
    text = (Path(__file__).resolve().parents[3] / "targets/cuda-sm80.yaml").read_text()
    good = '"(x * 16 + l % 16) * " ~ A_t0 ~ " + l / 16 * 8"'
    assert good in text
    bad = text.replace(good, '"(x * 16 + l % 8 + l / 16 * 8) * " ~ A_t0 ~ " + l / 8 % 2 * 8"')
    bad = bad.replace("name: cuda-sm80", "name: cuda-sm80-bad-ldmatrix")
    path = tmp_path / "cuda-sm80-bad-ldmatrix.yaml"
    path.write_text(bad)
    model, feeds = gemm_model(64, 32, 64)
    want = run_graph(from_onnx(model), feeds)["y"]
    d, src = _emulated(model, WmmaTiles(2, 2, 2, 2, 2, pad=8, vector=8, mma=True),
                       tmp_path / "e", path)
    assert "l / 8 % 2 * 8" in src
    assert _rel(load_bundle(d)(feeds)["y"], want) > 0.1


@nvcc_kernel_check("mma")
def _mma_gemm(out: Path) -> dict[str, Path]:
    model, _ = gemm_model(128, 96, 64)
    with wmma_tiles(WmmaTiles(2, 2, 2, 1, 2, pad=8, vector=8, async_copy=True, mma=True)):
        return {"mma_gemm": compile_model(model, "cuda-sm90", out / "mma_gemm", progress=False,
                                          precision="fp16", name="mma_gemm")}


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_mma_kernels_compile_with_nvcc_for_sm80_and_sm90(kernels_nvcc: Any,
                                                        tmp_path: Path) -> None:
    """Through nvcc with the other GPU tests' kernels in one run (``kernels_nvcc``)."""
    src = (kernels_nvcc.of("mma")["mma_gemm"] / "src/kernels.cu").read_text()
    assert "kiln_mma_f16_16x8x16_" in src and "kiln_ldmatrix_x2_trans(b[" in src
    kernels_nvcc.check("mma", tmp_path)


def test_a_deeper_pipeline_keeps_one_barrier_a_step_and_waits_for_its_tile(
        tmp_path: Path) -> None:
    """Three stages: the fetches of steps 0 and 1 before the loop, step k fetching step
    k + 2 into copy (k + 2) % 3 while its products read copy k % 3 -- one barrier a step
    (race-free; each barrier needed); with cp.async the barrier after the fetches before
    the loop waits for every copy, and the one inside the loop for all but the latest
    group (the tile the next step reads was fetched two barriers ago), except in the
    first step, whose barrier commits the fetches of the loop's first steps. (The race
    checker runs the mma.sync kernel's calls as their declared behaviour, as for wmma.)"""
    from toolchain.codegen.backend import CUDABackend

    tiles = WmmaTiles(1, 1, 2, 2, 1, pad=8, vector=8, async_copy=True, mma=True, stages=3)
    f = lower(wmma_gemm(32, 32, 16 * 4, tiles), target=SM80)
    text = str(f)
    assert "if k_0 + 2 < 4" in text and "(k_0 + 2) % 3 * " in text and "k_0 % 3 * " in text
    barriers = [n for n, _ in st.walk(f.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert len(barriers) == 2  # after the fetches before the loop, at the end of a step
    check_races(f)
    for b in barriers:
        assert find_races(st.replace_stmts(f, {id(b): None}), max_blocks=1)
    art = CUDABackend().kernel(f, "g")
    body = "\n".join(line for k in art.launches for line in k["body"])
    assert body.count("(__pipeline_commit(), __pipeline_wait_prior(0), __syncthreads())") == 1
    assert body.count("__pipeline_wait_prior(k_0 == 0 ? 0 : 1), __syncthreads())") == 1


def test_stages_are_checked() -> None:
    from toolchain.errors import ScheduleError

    A = te.placeholder((32, 64), name="A", dtype="float16")
    B = te.placeholder((64, 32), name="B", dtype="float16")
    r = te.reduce_axis((0, 64), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]), SM80)
    with pytest.raises(ScheduleError, match="stages must be 2"):
        sch.double_buffer(sch.get_block("C"), stages=9)


def test_the_fp16_transformer_emulated_on_mma_sync_matches_the_reference(
        tmp_path: Path) -> None:
    """The zoo's fp16 model whose GEMMs (attention projections, feed-forward) take tensor
    cores, every GEMM on mma.sync (one warp of 16 x 16 a block: tiles that divide each
    of them), emulated, against the float32 reference. (10-25 s here: the emulation of
    its softmax, layer norm and GELU on float16 storage, as in test_cuda_fp16.)"""
    from toolchain.zoo import ZOO

    spec = ZOO["transformer_encoder"]
    model = spec.build()
    feeds = spec.inputs(model)
    want = run_graph(from_onnx(model, input_shapes=spec.input_shapes), feeds)
    with wmma_tiles(WmmaTiles(1, 1, 1, 1, 1, pad=8, vector=8, async_copy=True, mma=True)):
        d = compile_model(model, "cuda-sm80", tmp_path / "t", input_shapes=spec.input_shapes,
                          progress=False, emulate=True, precision="fp16")
    src = (d / "src/kernels.c").read_text()
    assert len(re.findall(r"kiln_mma_f16_16x16x16_\w+\(&", src)) >= 4  # its GEMMs' calls
    got = load_bundle(d)(feeds)
    for k, v in want.items():
        assert _rel(np.asarray(got[k]), v) < FP16_TOL, k


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize(("name", "tiles"), CASES, ids=[f"{n}-{t.label()}" for n, t in CASES])
def test_mma_gemms_on_the_gpu_match_the_reference(name: str, tiles: WmmaTiles,
                                                  tmp_path: Path) -> None:
    """The PTX itself (ldmatrix, mma.sync, the register layout the epilogue assumes), which
    the emulation can only follow as the ISA documents it, on the hardware."""
    model, feeds = MODELS[name][0]()
    want = run_graph(from_onnx(model), feeds)
    with wmma_tiles(tiles):
        mod = load_bundle(compile_model(model, "cuda-sm90", tmp_path / "g", progress=False,
                                        precision="fp16"))
    for _ in range(2):
        got = mod(feeds)
        for k, v in want.items():
            assert _rel(np.asarray(got[k]), v) < FP16_TOL, k
