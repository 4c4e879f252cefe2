"""The ``.sw128`` tiles of the ``.wgmma`` kernel: Hopper's warpgroup MMA on 128-byte
swizzled operand tiles (``WmmaTiles(..., swizzle=128)``; the intrinsics
``wgmma_m64n64k16_sw128`` and ``wgmma_m64n64k64_sw128_pipe`` of ``targets/cuda-sm90.yaml``,
descriptors of layout type 1). Proven on the CPU: the fetches store through the XOR
(``flatten_buffer``), the intrinsics' emulation reads through the descriptors as the
hardware does (the XOR on the absolute address bits, the phase taken from the operand
pointers, the tiles 1024-byte aligned), and the emulated bundles match the float32
reference; each side broken on its own gives a wrong product. The race checker runs the
calls as their behaviour; nvcc builds the kernels for sm_90a. Never the default."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.bundle.helpers import BROKEN_BUILD, nvcc_kernel_check
from tests.bundle.test_cuda_fp16 import FP16_TOL, gemm_model
from tests.schedules.gpu.test_tensorcore import wmma_gemm
from tests.schedules.gpu.test_wgmma import gpu_gemm_matches_reference, on_the_gpu
from toolchain.bundle import compile_model, compiler, load_bundle
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.errors import KilnError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.schedules.gpu.gemm import lowered_shared_bytes, wmma_tiles
from toolchain.schedules.gpu.tensorcore import WmmaTiles, try_tile_wmma
from toolchain.schedules.gpu.wgmma import check_tiles, wgmma_intrinsics, wgmma_shared_bytes
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.race import check_races, find_races
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier

NVCC = shutil.which("nvcc")
SM90 = load_target("cuda-sm90")
#: one warpgroup of 64 x 64, steps of 64 (four k16 calls a step, each waiting), two
#: double-buffered cp.async stages
WAITING = WmmaTiles(4, 1, 1, 4, 4, vector=8, async_copy=True, wgmma=True, swizzle=128)
#: 2 x 2 warpgroups (128 x 128, 512 threads), one k64 call a step left in flight, 3 stages
OVERLAPPED = WmmaTiles(8, 2, 1, 4, 4, vector=8, async_copy=True, wgmma=True, swizzle=128,
                       stages=3, in_flight=1)


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_cuda", Path(__file__).resolve().parents[3] / "benchmarks" / "cuda.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error relative to the reference's range (a NaN -- bytes a broken
    descriptor reads as halves -- counts as infinitely far)."""
    want = want.astype(np.float64)
    err = np.nan_to_num(np.abs(got - want), nan=np.inf)
    return float(np.max(err)) / float(np.max(np.abs(want)))


def test_sw128_products_kept_apart_labelled_and_refused_with_reasons() -> None:
    """cuda-sm90's swizzled products are found by behaviour and their ``swizzle`` key,
    apart from the core-matrix ones (which stay what they were); the label ``.sw128``
    reads back; tiles that are not rows of 64 halves, padded, another swizzle or in
    flight on too few stages are refused with the reason, and so is ``swizzle`` outside
    the ``.wgmma`` kernel."""
    wg = wgmma_intrinsics(SM90)
    assert dict(wg.swizzled) == {(64, 16, 0): "cuda-sm90.wgmma_m64n64k16_sw128",
                                 (64, 64, 1): "cuda-sm90.wgmma_m64n64k64_sw128_pipe"}
    assert "sw128" not in repr(wg.products) + repr(wg.in_flight)
    assert wg.product(64, 16) == "cuda-sm90.wgmma_m64n64k16"
    assert WAITING.label() == "4x1w.1x4f.kf4.db.p0.v8.async.sw128.wgmma"
    assert OVERLAPPED.label() == "8x2w.1x4f.kf4.db.p0.v8.async.s3.ov1.sw128.wgmma"
    bench = _bench()
    for t in (WAITING, OVERLAPPED):
        assert bench.parse_tiles(t.label()) == t
    assert bench.parse_tiles("4x1w.1x4f.kf4.db.p0.v8.async.wgmma").swizzle == 0
    assert check_tiles(WAITING, wg)[1:] == ("cuda-sm90.wgmma_m64n64k16_sw128", False)
    assert check_tiles(OVERLAPPED, wg)[1:] == ("cuda-sm90.wgmma_m64n64k64_sw128_pipe", True)
    for bad, why in ((replace(WAITING, kf=2), "not kf 2"), (replace(WAITING, fn=8), "fn 8"),
                     (replace(WAITING, pad=8), r"pads \(8, 8\)"),
                     (replace(WAITING, swizzle=64), "not 64"),
                     (replace(OVERLAPPED, stages=2), "at least 3 stages")):
        with pytest.raises(KilnError, match=why):
            check_tiles(bad, wg)
    # (A 128 x 64 and B 64 x 128 halves a stage, three stages)
    assert wgmma_shared_bytes(OVERLAPPED) == 3 * 2 * (128 * 64 + 64 * 128) == 98304
    from toolchain import te
    from toolchain.tir.schedule import Schedule

    A = te.placeholder((64, 64), name="A", dtype="float16")
    B = te.placeholder((64, 64), name="B", dtype="float16")
    r = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    wmma = WmmaTiles(2, 2, 2, 2, 4, vector=8, swizzle=128)  # wmma: no swizzled tiles
    assert try_tile_wmma(Schedule(te.create_prim_func([A, B, C]), SM90), "C", SM90,
                         wmma) is None


def test_sw128_rows_lead_the_sweep_and_the_tuning_spaces_wgmma_points() -> None:
    """The ``.sw128`` rows come first in ``SWEEP`` (step 3 of cuda_check.sh) and are
    tiles the kernel takes; in cuda-sm90's tensor-core space (a knob ``swizzle``, 0 or
    128, with a rule naming why a swizzled point is refused) the swizzled seeds are the
    first warpgroup points, and the first of them schedules through the tuner's path to
    the swizzled product, waiting (none leaves products in flight: ``IN_FLIGHT_ON_HARDWARE``)."""
    from tests.bundle.test_cuda_fp16 import gemm_model as model_of
    from toolchain.autotune.apply import forcing
    from toolchain.autotune.tasks import extract_tasks
    from toolchain.schedules.gpu.gemm_space import wmma_tiles_of
    from toolchain.schedules.registry import schedule_for

    bench, wg = _bench(), wgmma_intrinsics(SM90)
    lead = [bench.parse_tiles(x) for x in bench.SWEEP[:3]]
    assert all(t.swizzle == 128 and t.wgmma for t in lead)
    assert not any(".sw128." in x for x in bench.SWEEP[3:])
    for t in lead:
        check_tiles(t, wg)
    model, _ = model_of(128, 128, 256)
    (task,) = [t for t in extract_tasks(model, SM90, precision="fp16")
               if t.space.kind == "cuda_tensorcore"]
    s = task.space
    assert s.knob("swizzle").choices == (0, 128) and s.default()["swizzle"] == 0
    wgs = [p for p in s.seed_points() if p["intrinsic"] == "wgmma"]
    assert [wmma_tiles_of(p).label() for p in wgs[:3]] == [t.label() for t in lead]
    assert not any(p["swizzle"] for p in wgs[3:])
    bad = {**wgs[0], "kf": 2}
    assert any(m.startswith("wgmma swizzled: rows of 64 halves") for m in s.problems(bad))
    with pytest.raises(KilnError):
        check_tiles(wmma_tiles_of(bad), wg)
    with forcing({s.workload: s.trace(wgs[0])}):
        sch = schedule_for(task.node, SM90)
    text = str(lower(sch.schedule, target=SM90))
    assert "wgmma_f16_64x64x16_sw128" in text and "_pipe" not in text
    assert not any(p["in_flight"] for p in wgs)


def test_swizzled_tiles_descriptors_and_shared_memory() -> None:
    """The shared tiles are rows of 64 halves marked ``swizzle=128`` (A [k / 64][m][64],
    B [n / 64][k][64]), 1024-byte aligned; the fetch stores through the XOR; a step makes
    four k16 calls whose A starts 16 halves (32 bytes) apart in a row and whose B starts
    16 rows (1024 halves) apart; the descriptors say layout type 1, stride offset 1024."""
    sch = wmma_gemm(64, 64, 128, WAITING, SM90)
    text = str(sch.mod)
    # (before compaction: the whole K of A, 2 x 64, and of B, 128)
    assert 'A_shared = T.alloc_buffer((2, 64, 64), "float16", scope="shared", swizzle=128)' \
        in text
    assert 'B_shared = T.alloc_buffer((1, 128, 64), "float16", scope="shared", swizzle=128)' \
        in text
    assert "B_shared[v1 // 64, v0, v1 % 64] =" in text
    f = lower(sch, target=SM90)
    assert max(lowered_shared_bytes(sch, SM90).values()) == wgmma_shared_bytes(WAITING) \
        == 2 * 2 * 2 * 64 * 64
    calls = [n.value for n, _ in st.walk(f.body) if isinstance(n, ir.Evaluate)
             and isinstance(n.value, ir.Call) and "sw128" in n.value.op]
    assert [str(c.args[0].args[0].indices[0]) for c in calls] == \
        ["k_0 * 4096", "k_0 * 4096 + 16", "k_0 * 4096 + 32", "k_0 * 4096 + 48"]
    assert [str(c.args[1].args[0].indices[0]) for c in calls] == \
        ["k_0 * 4096", "k_0 * 4096 + 1024", "k_0 * 4096 + 2048", "k_0 * 4096 + 3072"]
    assert "% 2 * 8 +" in str(f)  # the fetch's stored column: the XOR, bit by bit
    defs = str(f.attrs)
    assert "((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62)" in defs
    assert "m64n64k16.f32.f16.f16" in defs and "wgmma.wait_group.sync.aligned 0;" in defs


def test_the_overlapped_sw128_kernel_is_race_free_and_its_barrier_needed() -> None:
    """The race checker runs the calls as their behaviour on the (logical) swizzled tiles,
    the in-flight product's reads until the call that retires it: the overlapped 64 x 64
    x 128 kernel (two steps of 64, three stages) has no race, one barrier before the loop
    and one a step; without the step's barrier a fetch races with a product. (The waiting
    tiles are the same pipeline with each product retired in its own step; one race run
    costs about 2 CPU s, so they are left to the emulated GEMMs below.)"""
    f = lower(wmma_gemm(64, 64, 128, replace(OVERLAPPED, wy=4, wx=1), SM90), target=SM90)
    check_races(f)
    barriers = [n for n, _ in st.walk(f.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert len(barriers) == 2
    assert find_races(st.replace_stmts(f, {id(barriers[-1]): None}), max_blocks=1, limit=1)


def _emulated(tmp: Path, tiles: WmmaTiles, m: int, k: int, n: int) -> tuple[Path, Any, Any]:
    model, feeds = gemm_model(m, k, n)
    want = run_graph(from_onnx(model), feeds)["y"]
    with wmma_tiles(tiles):
        d = compile_model(model, "cuda-sm90", tmp / "e", progress=False, emulate=True,
                          precision="fp16")
    return d, feeds, want


#: the waiting tiles on a 128 x 192 x 64 dense layer (two blocks down, three steps); the
#: overlapped 2 x 2 warpgroups on 128 x 256 x 128 (four steps, one block: the warpgroups'
#: tiles 8 KiB apart, whole atoms)
CASES = [(WAITING, 128, 192, 64), (OVERLAPPED, 128, 256, 128)]


@pytest.mark.parametrize(("tiles", "m", "k", "n"), CASES,
                         ids=[t.label() for t, *_ in CASES])
def test_sw128_gemms_emulated_match_the_reference(tiles: WmmaTiles, m: int, k: int, n: int,
                                                  tmp_path: Path) -> None:
    """A dense layer (MatMul, bias, ReLU) emulated with the swizzled tiles is within the
    fp16 tolerance of the float32 reference. For the waiting tiles, the generated C then
    broken on purpose, one side at a time, gives a product more than 0.1 off: the
    descriptors saying layout type 0 (the emulation decodes it as core matrices, as the
    hardware would) or the phase taken as 0 (the start addresses relative to the operand
    pointer, as the unswizzled products' emulation does: the k16 calls 32 bytes into a
    row then read through the wrong XOR)."""
    d, feeds, want = _emulated(tmp_path, tiles, m, k, n)
    src = (d / "src/kernels.c").read_text()
    assert ("kiln_wgmma_f16_64x64x64_sw128_pipe_" if tiles.in_flight
            else "kiln_wgmma_f16_64x64x16_sw128_") in src
    assert "__attribute__((aligned(1024)))" in src  # the tiles on 1024-byte boundaries
    assert _rel(load_bundle(d)(feeds)["y"], want) < FP16_TOL
    if tiles.in_flight:
        return
    kernels = d / "src/kernels.c"
    phase = "const uintptr_t a_phase = (uintptr_t)pa & 1023, b_phase = (uintptr_t)pb & 1023;"
    for old, new in (("((uint64_t)1 << 62)", "((uint64_t)0 << 62)"),
                     (phase, "const uintptr_t a_phase = 0, b_phase = 0;")):
        assert old in src
        kernels.write_text(src.replace(old, new))
        assert _rel(load_bundle(d, **BROKEN_BUILD)(feeds)["y"], want) > 0.1, new
    kernels.write_text(src)


def test_a_fetch_stored_unswizzled_is_caught(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The fetches storing the tiles unswizzled (``flatten_buffer`` without the XOR) while
    the descriptors say 128B swizzle: the emulated dense layer is far off (the same
    layer with the XOR is within FP16_TOL above)."""
    flatten = importlib.import_module("toolchain.tir.transform.flatten_buffer")
    monkeypatch.setattr(flatten, "swizzled_column", lambda row, col, width: col)
    monkeypatch.setattr(compiler, "LOWERED_IN_PROCESS",
                        type(compiler.LOWERED_IN_PROCESS)(limit=4))
    d, feeds, want = _emulated(tmp_path, WAITING, 128, 192, 64)
    assert _rel(load_bundle(d, **BROKEN_BUILD)(feeds)["y"], want) > 0.1


@nvcc_kernel_check("wgmma_sw128")
def _sw128_gemm(out: Path) -> dict[str, Path]:
    model, _ = gemm_model(128, 192, 128)
    built = {}
    for name, t in (("wgmma_sw128", replace(OVERLAPPED, in_flight=0, stages=2)),
                    ("wgmma_sw128_pipe", OVERLAPPED)):
        with wmma_tiles(t):
            built[name] = compile_model(model, "cuda-sm90", out / name, progress=False,
                                        precision="fp16", name=name)
    return built


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_sw128_kernels_compile_with_nvcc_for_sm90a(kernels_nvcc: Any, tmp_path: Path) -> None:
    """Through nvcc with the other GPU tests' kernels in one run (its Hopper code sm_90a's,
    every warning an error): the waiting and the overlapped 2 x 2-warpgroup kernels, their
    tiles in dynamic shared memory on a 1024-byte aligned base."""
    got = kernels_nvcc.of("wgmma_sw128")
    for name, call in (("wgmma_sw128", "kiln_wgmma_f16_64x64x16_sw128_"),
                       ("wgmma_sw128_pipe", "kiln_wgmma_f16_64x64x64_sw128_pipe_")):
        src = (got[name] / "src/kernels.cu").read_text()
        assert call in src and "((uint64_t)1 << 62)" in src
        assert "__align__(1024)" in src or "aligned(1024)" in src
        assert "-arch=sm_90a" in (got[name] / "Makefile").read_text()
    kernels_nvcc.check("wgmma_sw128", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize(("tiles", "m", "k", "n"), on_the_gpu(CASES, 0),
                         ids=[t.label() for t, *_ in CASES])
def test_sw128_gemms_on_the_gpu_match_the_reference(tiles: WmmaTiles, m: int, k: int,
                                                    n: int, tmp_path: Path) -> None:
    """What the emulation can only follow as documented: the hardware reading layout type
    1 (the XOR on the absolute address bits, the k16 calls' start addresses 32 bytes into
    a row) and the launch giving dynamic shared memory a 1024-byte aligned base, on an
    H100/H200 (sm_90a)."""
    gpu_gemm_matches_reference(tiles, m, k, n, tmp_path)


def _tile_of_registers(regs: np.ndarray) -> np.ndarray:
    """A warpgroup's 64 x 64 float32 tile from its registers (register r of thread t at
    ``regs[r, t]``) in the PTX ISA's layout: thread 32 w + 4 g + q holds, per 8 columns
    c, (16 w + g, 8 c + 2 q), (.., + 1), (16 w + g + 8, 8 c + 2 q), (.., + 1)."""
    tile = np.full((64, 64), np.nan, np.float32)
    for t in range(128):
        for r in range(32):
            tile[t // 32 * 16 + t % 32 // 4 + 8 * (r % 4 // 2),
                 8 * (r // 4) + 2 * (t % 4) + r % 2] = regs[r, t]
    return tile


#: where the tiles start in their buffers (bytes; the buffers 256 KiB aligned): three atoms
#: in; 256 bytes off an atom; the last atom before a 256 KiB boundary (the tiles across it)
BASES = [3 * 1024, 3 * 1024 + 256, 256 * 1024 - 1024]


@pytest.mark.parametrize("base", BASES)
def test_the_emulated_sw128_products_read_the_swizzle_on_absolute_addresses(
        tmp_path: Path, base: int) -> None:
    """The intrinsics alone, against session 23's Python model of the layout
    (``wgmma_swizzle.sw128_tile_offset``): A (64 x 64) and B (64 x 64) stored where the
    model says, the tiles 3 atoms into their buffers; four waiting k16 calls (A's pointer
    16 halves further each, B's 16 rows) and, into another accumulator, one k64 call left
    in flight and the drain, each equal to ``A @ B``; so too with the tiles across a
    256 KiB boundary of the host address (the descriptors' start field holds the address
    modulo 1024, the phase: not bits above a shared address's 18, which would wrap it).
    With the tiles 256 bytes off the 1024-byte boundary (the pointers' phase no longer the
    row's) the XOR lands elsewhere and both products are wrong: the emulation takes the
    phase from the address, as the hardware does."""
    import subprocess

    from tests.tools import require
    from toolchain.codegen.artifact import support_of
    from toolchain.intrinsics import attach_intrinsics, get_spec, load_intrinsics
    from toolchain.schedules.gpu.wgmma_swizzle import sw128_tile_offset
    from toolchain.tir.functor import post_order_visit

    require("cc")
    load_intrinsics(SM90)
    a_s = ir.Buffer("A_s", (64, 64), "float16", "shared")
    b_s = ir.Buffer("B_s", (64, 64), "float16", "shared")
    c_acc = ir.Buffer("C_acc", (64, 8, 8), "float32", "wgmma.accumulator")
    calls = [ir.Call("int32", get_spec(f"cuda-sm90.{p}").function,
                     [ir.Call("handle", "tir.address_of", [x[0, 0]]) for x in (a_s, b_s)]
                     + [ir.Call("handle", "tir.address_of", [c_acc[0, 0, 0]])])
             for p in ("wgmma_m64n64k16_sw128", "wgmma_m64n64k64_sw128_pipe")]
    f = attach_intrinsics(ir.PrimFunc([a_s, b_s, c_acc], ir.SeqStmt(
        [ir.Evaluate(x) for x in calls]), "sw"))
    names: list[str] = []
    post_order_visit(f.body, lambda x: names.append(x.op) if isinstance(x, ir.Call)
                     and x.op.startswith("kiln_wgmma") else None)
    k16, k64 = names
    defs = "\n".join(d.text for d in support_of(f).definitions)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    b = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    a_bytes, b_bytes = np.zeros(8192, np.uint8), np.zeros(8192, np.uint8)
    for r in range(64):
        for col in range(64):
            a_bytes[sw128_tile_offset("K", r, col, rows=64, cols=64):][:2] = \
                np.frombuffer(a[r, col].tobytes(), np.uint8)
            b_bytes[sw128_tile_offset("MN", r, col, rows=64, cols=64):][:2] = \
                np.frombuffer(b[r, col].tobytes(), np.uint8)
    a_bytes.tofile(tmp_path / "a.bin")
    b_bytes.tofile(tmp_path / "b.bin")
    main = f"""#include <stdio.h>
#include <stdint.h>
#include "kiln_runtime.h"
{defs}
static kiln_f16 A_s[262144] __attribute__((aligned(262144)));
static kiln_f16 B_s[262144] __attribute__((aligned(262144)));
static float C1[32 * 128], C2[32 * 128];
int main(int argc, char **argv) {{
  kiln_f16 *a = A_s + {base // 2}, *b = B_s + {base // 2};
  FILE *f = fopen(argv[1], "rb");
  if (!f || fread(a, 1, 8192, f) != 8192) return 2;
  fclose(f);
  f = fopen(argv[2], "rb");
  if (!f || fread(b, 1, 8192, f) != 8192) return 2;
  fclose(f);
  for (int j = 0; j < 4; ++j)
    if ({k16}(a + 16 * j, b + 1024 * j, C1) != 0) return 3;
  if ({k64}(a, b, C2) != 0 || {k64}(0, 0, C2) != 0) return 3;
  fwrite(C1, 4, 32 * 128, stdout);
  fwrite(C2, 4, 32 * 128, stdout);
  return 0;
}}
"""
    (tmp_path / "sw.c").write_text(main)
    root = Path(__file__).resolve().parents[3]
    subprocess.run(["cc", "-O1", "-std=c11", "-Wall", "-Werror", "-I", str(root / "runtime_c"),
                    str(tmp_path / "sw.c"), "-o", str(tmp_path / "sw"), "-lm"], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(tmp_path / "sw"), str(tmp_path / "a.bin"),
                          str(tmp_path / "b.bin")], capture_output=True, check=True).stdout
    regs = np.frombuffer(out, np.float32).reshape(2, 32, 128)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for got in (_tile_of_registers(regs[0]), _tile_of_registers(regs[1])):
        err = float(np.max(np.nan_to_num(np.abs(got - want), nan=np.inf)))
        assert err > 0.1 if base % 1024 else err < 1e-3
