"""Tensor cores (``toolchain.schedules.gpu.tensorcore``): the wmma intrinsics found in the
CUDA descriptors by their declared behaviour, ``set_dtype``, and float16 GEMMs compiled with
``--precision fp16`` -- run by the SIMT emulation (the fragments computed in C) against the
float32 reference, built by nvcc for sm_80 and sm_90 with every warning an error, and on a
GPU where there is one. Tolerance: ``FP16_TOL`` (tests/bundle/test_cuda_fp16.py says why)."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.bundle.helpers import make_model, nvcc_kernel_check, nvcc_object, random_inputs
from tests.bundle.test_cuda_fp16 import FP16_TOL, gemm_model
from toolchain import te
from toolchain.bundle import (
    build_spec,
    compile_model,
    load_bundle,
    render_cuda_files,
    render_files,
    write_bundle,
)
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.errors import ScheduleError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.schedules.gpu.gemm import wmma_tiles
from toolchain.schedules.gpu.tensorcore import (
    WmmaCaps,
    WmmaTiles,
    choose_wmma_tiles,
    tensor_core_intrinsics,
    tensor_core_sets,
    try_tile_wmma,
    wmma_shared_bytes,
)
from toolchain.target import Target, load_target, parse_target
from toolchain.tir import ir
from toolchain.tir.race import check_races, find_races
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier

NVCC = shutil.which("nvcc")
SM80 = load_target("cuda-sm80")
MMA_CALL = "kiln_wmma_f16_"  # the products (16 x 16 x 16 or a warp tile), not fill/store


def _batch_matmul() -> tuple[object, dict]:
    nodes = [helper.make_node("MatMul", ["a", "b"], ["c"]),
             helper.make_node("Tanh", ["c"], ["y"])]
    m = make_model(nodes, {"a": (np.float32, [2, 32, 48]), "b": (np.float32, [2, 48, 64])},
                   {"y": (np.float32, [2, 32, 64])})
    return m, random_inputs(m, seed=7)


def _dense_trans_b() -> tuple[object, dict]:
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    m = make_model(nodes, {"x": (np.float32, [32, 48])}, {"y": (np.float32, [32, 64])},
                   {"w": rng.standard_normal((64, 48)).astype(np.float32),
                    "b": rng.standard_normal(64).astype(np.float32)})
    return m, random_inputs(m, seed=8)


def _float16_io() -> tuple[object, dict]:
    """A float16 model (benchmarks/cuda.py's fp16 GEMM): no conversion at the API."""
    f16 = TensorProto.FLOAT16
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", f16, [48, 32]),
                           helper.make_tensor_value_info("b", f16, [32, 64])],
                          [helper.make_tensor_value_info("y", f16, [48, 64])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(9)
    return m, {"a": rng.standard_normal((48, 32)).astype(np.float16),
               "b": rng.standard_normal((32, 64)).astype(np.float16)}


#: name -> (model and feeds, whether the GEMM takes tensor cores)
MODELS = {
    "matmul_128x96x64": (lambda: gemm_model(128, 96, 64), True),   # 3 steps of k, 2 blocks
    "matmul_48x16x16": (lambda: gemm_model(48, 16, 16), True),     # one warp a block
    "batch_matmul_tanh": (_batch_matmul, True),
    "matmul_40x24x20": (lambda: gemm_model(40, 24, 20), False),    # not multiples of 16
    "gemm_trans_b": (_dense_trans_b, False),  # B[n, k]: no row-major tile, SIMT kernel
    "float16_io": (_float16_io, True),
}


def test_the_intrinsics_are_found_by_behaviour_not_by_name() -> None:
    for name in ("cuda-sm80", "cuda-sm90"):
        tc = tensor_core_intrinsics(load_target(name))
        assert tc is not None and (tc.m, tc.n, tc.k) == (16, 16, 16)
        assert tc.accumulator == "wmma.accumulator"
    renamed = parse_target("name: my-gpu\nkind: cuda\nextends: cuda-sm80\n")
    assert tensor_core_intrinsics(renamed).mma == "my-gpu.wmma_f16_16x16x16"
    assert tensor_core_intrinsics(load_target("c-generic")) is None
    assert tensor_core_intrinsics(load_target("cortex-m4")) is None


def test_tiles_divide_the_shapes_or_are_refused() -> None:
    tc = tensor_core_intrinsics(SM80)
    t = choose_wmma_tiles(64, 96, 48, tc, SM80)
    assert t is not None and t.wy * t.fm == 4  # the 64 rows: 4 fragments high
    assert 64 % (16 * t.wy * t.fm) == 0 and 96 % (16 * t.wx * t.fn) == 0
    assert 48 % (16 * t.kf) == 0
    big = choose_wmma_tiles(4096, 4096, 4096, tc, SM80)
    by, bx, bk = 16 * big.wy * big.fm, 16 * big.wx * big.fn, 16 * big.kf
    pad = big.pad
    assert by * bx * 4 + 2 * (by * (bk + pad) + bk * (bx + pad)) * 2 == \
        wmma_shared_bytes(big, tc) <= SM80.max_shared_memory_per_block_optin
    assert big.pad == 8 and big.vector == 8  # 256 threads: 128 x 32 and 32 x 128 in 16 bytes
    static = choose_wmma_tiles(4096, 4096, 4096, tc, SM80, WmmaCaps(optin=False))
    assert wmma_shared_bytes(static, tc) <= SM80.max_shared_memory_per_block
    assert choose_wmma_tiles(40, 32, 32, tc, SM80) is None


def test_set_dtype_sums_in_float32_and_rounds_where_the_value_leaves() -> None:
    A = te.placeholder((16, 16), name="A", dtype="float16")
    B = te.placeholder((16, 16), name="B", dtype="float16")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    cl = sch.cache_write(sch.get_block("C"), 0, "local")
    sch.set_dtype(sch.get_block("C"), 0, "float32")
    text = str(sch.mod)
    assert 'C_local = T.alloc_buffer((16, 16), "float32", scope="local")' in text
    assert ('C_local[vi, vj] = C_local[vi, vj] + T.Cast("float32", A[vi, vk]) * '
            'T.Cast("float32", B[vk, vj])') in text
    assert 'C[v0, v1] = T.Cast("float16", C_local[v0, v1])' in text
    assert "T.float32(0" in text  # the init too
    with pytest.raises(ScheduleError, match="argument of the function"):
        sch.set_dtype(cl, 0, "float32")
    with pytest.raises(ScheduleError, match="widens"):
        sch.set_dtype(sch.get_block("C"), 0, "float16")


def wmma_gemm(m: int, n: int, k: int, tiles: WmmaTiles | None = None,
              target: Target = SM80) -> Schedule:
    """A float16 ``C = A @ B`` (M x K by K x N) tiled for the tensor cores of ``target``
    (``tiles``: the wmma or, with ``mma=True``, the ``mma.sync`` kernel, with
    ``wgmma=True`` Hopper's; test_mma.py and test_wgmma.py use it too)."""
    A = te.placeholder((m, k), name="A", dtype="float16")
    B = te.placeholder((k, n), name="B", dtype="float16")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = try_tile_wmma(Schedule(te.create_prim_func([A, B, C]), target), "C", target, tiles)
    assert sch is not None
    return sch


def test_the_wmma_kernel_is_race_free_and_every_barrier_is_needed() -> None:
    """The race checker runs each intrinsic call as its declared behaviour on the operands'
    elements (``behaviour_of_call``): a 32 x 32 x 48 float16 GEMM (two warps, three
    double-buffered steps, one barrier a step) has no race, and taking out any one of its
    three barriers makes one."""
    sch = wmma_gemm(32, 32, 48)
    f = lower(sch, target=SM80)
    assert "k_0 % 2 *" in str(f)  # double-buffered
    check_races(f)
    barriers = [n for n, _ in st.walk(f.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert len(barriers) == 3  # after the first fetch, at the end of a step, before the tail
    for b in barriers:
        assert find_races(st.replace_stmts(f, {id(b): None}), max_blocks=1)


def test_a_long_reduction_keeps_one_barrier_a_step() -> None:
    """With 80 double-buffered steps (more than the barrier planner enumerates) the step's
    fetch into half ``(k + 1) % 2`` and its products from half ``k % 2`` still need no
    barrier between them (the halves repeat every 2 steps: two values of ``k`` decide),
    so the step loop holds one barrier, at its end, as a short one does (whose
    race-freedom, with the same two values of ``k`` deciding, the race test above runs);
    the fetch of the next step then overlaps this step's products."""
    sch = wmma_gemm(32, 32, 16 * 80, WmmaTiles(1, 1, 2, 2, 1, pad=8, vector=8))
    f = lower(sch, target=SM80)
    assert "(k_0 + 1) % 2 *" in str(f)
    (step,) = [n for n, _ in st.walk(f.body) if isinstance(n, ir.For)
               and n.loop_var.name == "k_0"]
    assert ir.const_int(step.extent) == 80
    inside = [n for n, _ in st.walk(step.body) if isinstance(n, ir.Stmt) and is_barrier(n)]
    assert len(inside) == 1 and is_barrier(step.body.seq[-1])


def test_each_product_gets_its_own_fragment_in_the_cuda_source() -> None:
    """The CUDA renderer passes an intrinsic the fragment of its 16 x 16 tile (the
    emulation, which keeps fragments as float tiles, cannot check this): for a warp tile
    of 2 x 2 fragments called one at a time (``warp_mma=False``), the four products of a
    step name fragments 0..3, each once, and the fill and the store name the same four;
    called as one warp tile (the default), each step's call names fragment 0, and the
    intrinsic's own body reaches the other three (``C[x * 2 + y]``)."""
    from toolchain.codegen.backend import CUDABackend

    tiles = WmmaTiles(2, 2, 2, 2, 2, pad=8, vector=8)
    f = lower(wmma_gemm(64, 64, 32, tiles), target=SM80)
    warp = CUDABackend().kernel(f, "g")
    body = "\n".join(line for k in warp.launches for line in k["body"])
    calls = re.findall(r"kiln_wmma_f16_32x32x16_[0-9a-f]{8}\([^;]*?"
                       r"&C_shared_wmma_accumulator\[([^\]]*)\]", body)
    assert len(calls) == 2 and all(eval(c.replace("/", "//")) == 0 for c in calls)  # noqa: S307
    assert "mma_sync(C[x * 2 + y], a[x], b[y], C[x * 2 + y])" in str(f.attrs)
    sch = wmma_gemm(64, 64, 32, replace(tiles, warp_mma=False))
    art = CUDABackend().kernel(lower(sch, target=SM80), "g")
    body = "\n".join(line for k in art.launches for line in k["body"])
    frags: dict[str, list[int]] = {}
    for fn, expr in re.findall(r"(kiln_wmma_\w+?)_[0-9a-f]{8}\([^;]*?"
                               r"&C_shared_wmma_accumulator\[([^\]]*)\]", body):
        # a constant index (the fragment loops are unrolled) in C's integer arithmetic
        assert re.fullmatch(r"[0-9()+*/% ]+", expr), expr
        frags.setdefault(fn, []).append(eval(expr.replace("/", "//")))  # noqa: S307
    assert sorted(frags["kiln_wmma_f16_16x16x16"]) == [0, 0, 1, 1, 2, 2, 3, 3]  # kf = 2
    assert sorted(frags["kiln_wmma_fill_16x16"]) == [0, 1, 2, 3]
    assert sorted(frags["kiln_wmma_store_16x16"]) == [0, 1, 2, 3]
    assert "kiln_wmma_acc C_shared_wmma_accumulator[4];" in body


@pytest.mark.parametrize("name", list(MODELS))
def test_fp16_gemms_emulated_match_the_reference(name: str, tmp_path: Path) -> None:
    build, wmma = MODELS[name]
    model, feeds = build()
    want = run_graph(from_onnx(model), feeds)
    d = compile_model(model, "cuda-sm80", tmp_path / "emu", progress=False, emulate=True,
                      precision="fp16")
    src = (d / "src/kernels.c").read_text()
    assert (MMA_CALL in src) == wmma
    if wmma:  # the warp-collective calls made once per warp in the emulation
        assert "threadIdx_x % 32 == 0" in src
    got = load_bundle(d)(feeds)
    for k, v in want.items():
        v = v.astype(np.float64)
        err = float(np.max(np.abs(got[k] - v))) / float(np.max(np.abs(v)))
        assert err < FP16_TOL, f"{name}: {k} off by {err:.2e} of its range"


@nvcc_kernel_check("wmma")
def _wmma_gemm(out: Path) -> dict[str, Path]:
    model, _ = gemm_model(128, 96, 64)
    return {"wmma_gemm": compile_model(model, "cuda-sm90", out / "wmma_gemm", progress=False,
                                       precision="fp16", name="wmma_gemm")}


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_wmma_kernels_compile_with_nvcc_for_sm80_and_sm90(kernels_nvcc: Any,
                                                         tmp_path: Path) -> None:
    """Through nvcc with the other GPU tests' kernels in one run (``kernels_nvcc``)."""
    src = (kernels_nvcc.of("wmma")["wmma_gemm"] / "src/kernels.cu").read_text()
    assert "nvcuda::wmma::mma_sync" in src and "kiln_wmma_acc " in src
    kernels_nvcc.check("wmma", tmp_path)


#: tile variants (the knobs benchmarks/cuda.py --gemm-sweep turns) on a GEMM 128 x 96 x 64
#: (M x K x N) they all divide: plain, padded + 16-byte fetches, 8 warps of 2 x 4
#: fragments, single-buffered steps of 48 with 8-byte fetches, 2 warps of 4 x 2 and
#: 4-byte fetches into rows padded by 16
VARIANTS = [WmmaTiles(2, 2, 2, 2, 2), WmmaTiles(2, 2, 2, 2, 2, pad=8, vector=8),
            WmmaTiles(4, 1, 2, 4, 2, pad=8, vector=8),
            WmmaTiles(2, 2, 2, 2, 3, double_buffer=False, pad=8, vector=4),
            WmmaTiles(1, 2, 4, 2, 1, pad=16, vector=2)]


@pytest.mark.parametrize("tiles", VARIANTS, ids=WmmaTiles.label)
def test_each_tile_variant_emulated_matches_the_reference(tiles: WmmaTiles,
                                                          tmp_path: Path) -> None:
    model, feeds = gemm_model(128, 96, 64)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    with wmma_tiles(tiles):
        d = compile_model(model, "cuda-sm80", tmp_path / "emu", progress=False,
                          emulate=True, precision="fp16")
    src = (d / "src/kernels.c").read_text()
    assert MMA_CALL in src
    assert ("float16x" in src) == (tiles.vector > 1)  # the vectorized fetches
    got = load_bundle(d)(feeds)["y"]
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) < FP16_TOL


def test_every_sweep_variant_is_a_tensor_core_kernel_at_4096() -> None:
    """``benchmarks/cuda.py --gemm-sweep 4096`` measures what it names: each label of its
    SWEEP parses back to itself and gives the wmma kernel, or the mma.sync one for a
    ``.mma`` label, the warpgroup one for a ``.wgmma`` label (inside the shared memory a
    block may opt in to: no silent fall-back to the SIMT kernel) for the fp16 GEMM 4096^3
    on sm_90."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "cuda.py"
    spec = importlib.util.spec_from_file_location("bench_cuda", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sm90 = load_target("cuda-sm90")
    A = te.placeholder((4096, 4096), name="A", dtype="float16")
    B = te.placeholder((4096, 4096), name="B", dtype="float16")
    r = te.reduce_axis((0, 4096), name="k")
    C = te.compute((4096, 4096), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    func = te.create_prim_func([A, B, C])
    from toolchain.schedules.gpu.mma import mma_intrinsics, mma_shared_bytes
    from toolchain.schedules.gpu.wgmma import wgmma_shared_bytes

    for label in bench.SWEEP:
        tiles = bench.parse_tiles(label)
        assert tiles.label() == label
        need = (wgmma_shared_bytes(tiles) if tiles.wgmma
                else mma_shared_bytes(tiles, mma_intrinsics(sm90)) if tiles.mma
                else wmma_shared_bytes(tiles, tensor_core_intrinsics(sm90)))
        assert need <= sm90.max_shared_memory_per_block_optin, label
        sch = try_tile_wmma(Schedule(func, sm90), "C", sm90, tiles)
        assert sch is not None, label
        assert ("kiln_mma_f16_" in str(sch.mod)) == tiles.mma, label
        assert ("kiln_wgmma_f16_" in str(sch.mod)) == tiles.wgmma, label


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_tiles_beyond_48_kib_take_dynamic_shared_memory_and_async_copies(tmp_path: Path) -> None:
    """A 128 x 128 block tile (2 x 2 warps of 4 x 4 fragments: 64 KiB of float32 output
    tile + two halves of each padded operand tile, 101 KiB) is past CUDA's 48 KiB of
    static shared memory: the schedule opts in (``DYNAMIC_SHARED_MEMORY`` on its block
    loop: the limit checked is the target's opt-in amount), the kernel carves its shared
    buffers out of ``extern __shared__`` memory, the launcher raises the kernel's limit
    once and passes the bytes at launch; the emulation matches the reference and nvcc
    builds the kernels and the launcher. The same tiles with ``async_copy``: the operand
    fetches are ``__pipeline_memcpy_async`` (cp.async), each barrier waits for them
    first."""
    tiles = WmmaTiles(2, 2, 4, 4, 2, pad=8, vector=8, async_copy=True)
    need = wmma_shared_bytes(tiles, tensor_core_intrinsics(SM80))
    assert need > SM80.max_shared_memory_per_block
    model, feeds = gemm_model(128, 64, 128)
    want = run_graph(from_onnx(model), feeds)["y"].astype(np.float64)
    with wmma_tiles(tiles):  # the bundle and its emulation from one compile
        both = build_spec(model, "cuda-sm80", progress=False, precision="fp16",
                          also_emulate=True)
    assert both.emulation is not None
    emu = write_bundle(render_files(both.emulation), tmp_path / "emu")
    d = write_bundle(render_cuda_files(both), tmp_path / "cu")
    got = load_bundle(emu)(feeds)["y"]
    assert float(np.max(np.abs(got - want))) / float(np.max(np.abs(want))) < FP16_TOL
    src = (d / "src/kernels.cu").read_text()
    assert "kiln_wmma_f16_64x64x16_" in src and "extern __shared__" in src
    assert "__shared__ float" not in src and "__shared__ __half" not in src
    assert src.count("__pipeline_memcpy_async(") == 4 and "uint4" not in src
    assert "(__pipeline_commit(), __pipeline_wait_prior(0), __syncthreads());" in src
    assert "__syncthreads();" not in src.replace("__syncthreads());", "")
    launcher = (d / "src/gemm.cu").read_text()
    assert f"cudaFuncAttributeMaxDynamicSharedMemorySize, {need})" in launcher
    assert f"dim3(32, 2, 2), {need}>>>" in launcher
    # the launcher and the kernels as one translation unit, the launcher first (it cannot
    # lean on what the kernels include): one nvcc run, as tests/bundle/test_cuda.py does
    unit = tmp_path / "bundle.cu"
    unit.write_text("".join(f'#include "{(d / "src" / f).resolve()}"\n'
                            for f in ("gemm.cu", "kernels.cu")))
    res = nvcc_object(d, unit, tmp_path / "o.o")
    assert res.returncode == 0, res.stderr[-3000:]


def test_padded_tiles_and_16_byte_fetches_in_the_cuda_source() -> None:
    """The kernel's operand tiles are padded (rows of 16 kf + 8 halves for A,
    16 wx fn + 8 for B: the strides the fragment loads are specialised for) and fetched
    with one 16-byte load and store a thread (``uint4``); a copy the renderer cannot prove
    16-byte aligned stays lane by lane."""
    from toolchain.codegen.backend import CUDABackend
    from toolchain.codegen.cuda import CUDARenderer

    tc = tensor_core_intrinsics(SM80)  # 2 x 2 warps of 2 x 2 fragments, steps of 32,
    tiles = choose_wmma_tiles(64, 64, 64, tc, SM80, WmmaCaps(wy=2, wx=2, fm=2, fn=2))
    sch = wmma_gemm(64, 64, 64, tiles)  # synchronous fetches (the default's are cp.async)
    f = lower(sch, target=SM80)
    art = CUDABackend().kernel(f, "g")
    body = "\n".join(line for k in art.launches for line in k["body"])
    assert body.count("*(uint4 *)") == 4  # A and B, first step and the next ones
    assert "load_matrix_sync(a[x], A + x * 640, 40)" in str(f.attrs) and \
        "load_matrix_sync(b[y], B + y * 16, 72)" in str(f.attrs)
    assert "2 * 2560" in body and "2 * 2304" in body  # two halves of 64 x 40, 32 x 72
    x = te.placeholder((64,), name="x", dtype="float16")
    y = te.compute((56,), lambda i: x[i + 1], name="y")  # starts one half in: not aligned
    s2 = Schedule(te.create_prim_func([x, y]))
    _, v = s2.split(s2.get_loops(s2.get_block("y"))[0], [None, 8])
    s2.vectorize(v)
    src = CUDARenderer().render(lower(s2), name="shift").code
    assert "uint4" not in src and "x[" in src


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", list(MODELS))
def test_fp16_gemms_on_the_gpu_match_the_reference(name: str, tmp_path: Path) -> None:
    model, feeds = MODELS[name][0]()
    want = run_graph(from_onnx(model), feeds)
    mod = load_bundle(compile_model(model, "cuda-sm90", tmp_path / name, progress=False,
                                    precision="fp16"))
    for _ in range(2):
        got = mod(feeds)
        for k, v in want.items():
            v = v.astype(np.float64)
            assert float(np.max(np.abs(got[k] - v))) / float(np.max(np.abs(v))) < FP16_TOL


def test_the_tensor_core_sets_are_found_once_a_target() -> None:
    """``tensor_core_sets`` parses a descriptor's behaviours once (every GEMM stage of a
    GPU schedule asks, float32 ones too): the same answer again, and a target made with
    other intrinsics gets its own."""
    first, again = tensor_core_sets(SM80), tensor_core_sets(SM80)
    assert sorted(first) == ["mma.accumulator", "wmma.accumulator"]
    assert all(again[k] is first[k] for k in first)
    first.clear()  # the caller's copy: the remembered answer is unchanged
    assert sorted(tensor_core_sets(SM80)) == ["mma.accumulator", "wmma.accumulator"]
    no_wmma = replace(SM80, intrinsics={k: v for k, v in SM80.intrinsics.items()
                                        if not k.startswith("wmma")})
    assert "wmma.accumulator" not in tensor_core_sets(no_wmma)
    assert tensor_core_intrinsics(no_wmma) is None
