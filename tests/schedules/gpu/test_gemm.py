"""The tiled GPU GEMM (``toolchain.schedules.gpu.gemm``): odd shapes (M, N, K that the
tiles do not divide, batch matmul, strided and padded convolution) checked without a GPU —
no data race (``check_races``), the SIMT emulation's numbers against numpy and, through
emulated bundles, against the reference executor; the CUDA source built by nvcc for sm_80
and sm_90 with every warning an error; tiles sized from the descriptor's limits."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import (
    emulated_matches_reference,
    gpu_matches_reference,
    make_model,
    nvcc_kernel_check,
    random_inputs,
)
from tests.codegen.gpu_workloads import run_simt
from toolchain import te
from toolchain.bundle import compile_model, load_bundle
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Node, Value
from toolchain.graph.passes import run_pipeline
from toolchain.graph.passes.layout import layout_for_target
from toolchain.graph.reference import run_graph
from toolchain.schedules.gpu import gemm
from toolchain.schedules.gpu.generic import fused_schedule
from toolchain.schedules.registry import schedule_for
from toolchain.target import load_target, parse_target
from toolchain.tir.race import check_races
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.gpu import shared_footprint, thread_extents
from toolchain.tir.transform.inject_barriers import kernels_of

NVCC = shutil.which("nvcc")
SM80 = load_target("cuda-sm80")
#: a GPU with small limits, known by its capabilities only (``extends``: a new name)
SMALL = parse_target("name: tiny-gpu\nkind: cuda\nextends: cuda-sm80\n"
                     "max_threads_per_block: 64\nmax_shared_memory_per_block: 4096\n"
                     "max_registers_per_thread: 40\n")


def relu_matmul(b: int, m: int, n: int, k: int) -> Schedule:
    """``D = relu(A @ W)``, batched when ``b`` > 0, as the schedule before tiling."""
    lead = (b,) if b else ()
    A = te.placeholder((*lead, m, k), name="A")
    W = te.placeholder((*lead, k, n), name="W")
    r = te.reduce_axis((0, k), name="k")
    if b:
        C = te.compute((b, m, n), lambda z, i, j: te.sum(A[z, i, r] * W[z, r, j], axis=r),
                       name="C")
        D = te.compute((b, m, n), lambda z, i, j: te.max(C[z, i, j], te.const(0.0)), name="D")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[r, j], axis=r), name="C")
        D = te.compute((m, n), lambda i, j: te.max(C[i, j], te.const(0.0)), name="D")
    return Schedule(te.create_prim_func([A, W, D], name="mm"), SM80)


#: (batch, M, N, K): divisible, ragged in every dimension, tiny, batched and ragged
SHAPES = [(0, 64, 64, 32), (0, 50, 70, 37), (0, 7, 9, 5), (3, 17, 29, 23)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tiled_matmul_is_race_free_and_gives_numpys_numbers(shape) -> None:
    b, m, n, k = shape
    sch = gemm.tile_gemm(relu_matmul(b, m, n, k), "C", SM80)
    f = lower(sch, target=SM80)
    text = str(f)
    assert "T.storage_sync('shared')" in text and 'scope="shared"' in text
    check_races(f)  # every block of these small instances
    check_relu_matmul(f, shape, seed=1, name=f"mm_{b}_{m}_{n}_{k}")


def check_relu_matmul(f: Any, shape: tuple[int, int, int, int], seed: int,
                      name: str) -> None:
    """``f`` (a lowered :func:`relu_matmul` of ``shape`` = (batch, M, N, K)) run by the SIMT
    emulation on random data gives numpy's ``relu(A @ W)`` (every output written: the
    result starts as NaN)."""
    b, m, n, k = shape
    rng = np.random.default_rng(seed)
    lead = (b,) if b else ()
    a = rng.standard_normal((*lead, m, k)).astype(np.float32)
    w = rng.standard_normal((*lead, k, n)).astype(np.float32)
    d = np.full((*lead, m, n), np.nan, np.float32)
    run_simt(f, a, w, d, name=name)
    np.testing.assert_allclose(d, np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)


def test_the_accumulator_is_a_per_thread_register_tile() -> None:
    """Each thread keeps its ``ry x rx`` outputs (not the block's whole tile) in ``local``
    memory, and every shared tile lives inside the k-step loop."""
    sch = gemm.tile_gemm(relu_matmul(0, 64, 64, 64), "C", SM80,
                         gemm.Tiles(ty=8, tx=8, ry=4, rx=2, bk=16, double_buffer=False))
    text = str(lower(sch, target=SM80))
    assert 'C_local = T.allocate((8,), "float32", scope="local")' in text
    assert 'A_shared = T.allocate((512,), "float32", scope="shared")' in text  # 32 x 16
    assert 'W_shared = T.allocate((256,), "float32", scope="shared")' in text  # 16 x 16
    assert text.index("for k_0 in") < text.index("A_shared = T.allocate")


def test_the_shared_memory_check_counts_one_step_of_k() -> None:
    """K = 2048: the A tile over the whole k range would be 64 x 2048 floats (512 KiB);
    after ``compute_at`` the step loop each block holds one step's tiles, which is what
    the launch-limit check counts (and what the lowered kernel allocates)."""
    sch = gemm.tile_gemm(relu_matmul(0, 64, 64, 2048), "C", SM80,
                         gemm.Tiles(ty=16, tx=16, ry=4, rx=4, bk=32))
    sch.verify(SM80)
    foot = {b.name: n for b, n in shared_footprint(st.root_block(sch.mod).body).items()}
    assert foot == {"A_shared": 64 * 32 * 4, "W_shared": 32 * 64 * 4}
    # double-buffered: two tiles of each operand
    assert max(gemm.lowered_shared_bytes(sch, SM80).values()) == 2 * 2 * 64 * 32 * 4


def test_tiles_follow_the_descriptor_limits() -> None:
    """A descriptor with 64 threads, 4 KiB of shared memory and 40 registers per thread
    gets kernels inside those limits (and still the right numbers)."""
    t = gemm.choose_tiles(256, 256, 256, 1, SMALL)
    assert t.threads <= 64 and t.rx * t.ry + t.rx + t.ry + gemm.REGISTER_OVERHEAD <= 40
    big = gemm.choose_tiles(256, 256, 256, 1, SM80)
    assert big.threads > t.threads
    sch = relu_matmul(0, 96, 80, 72)
    small = gemm.try_tile_gemm(Schedule(sch.mod, SMALL), sch.get_block("C"), SMALL)
    assert small is not None
    for k in kernels_of(lower(small, target=SMALL).body)[1]:
        tags = thread_extents(k)
        threads = np.prod([int(tags[x].value) for x in tags if x.startswith("threadIdx")])
        assert threads <= 64
    assert max(gemm.lowered_shared_bytes(small, SMALL).values()) <= 4096
    f = lower(small, target=SMALL)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((96, 72)).astype(np.float32)
    w = rng.standard_normal((72, 80)).astype(np.float32)
    d = np.zeros((96, 80), np.float32)
    run_simt(f, a, w, d, name="mm_small_gpu")
    np.testing.assert_allclose(d, np.maximum(a @ w, 0), rtol=1e-5, atol=1e-5)


def test_a_matrix_vector_product_keeps_the_generic_kernel() -> None:
    """One row (a batch-1 dense layer): no tile to share, so no GEMM axes."""
    sch = relu_matmul(0, 1, 50, 40)
    assert gemm.gemm_axes(sch.get(sch.get_block("C"))) is None
    assert gemm.try_tile_gemm(sch, sch.get_block("C"), SM80) is None


def test_where_no_tile_fits_the_generic_kernel_stays(tmp_path: Path) -> None:
    """A descriptor with 256 bytes of shared memory per block: not even the smallest tiles
    fit, so the GEMM keeps the generic kernel, and the bundle is still right."""
    tiny = parse_target("name: no-smem-gpu\nkind: cuda\nextends: cuda-sm80\n"
                        "max_shared_memory_per_block: 256\n")
    sch = relu_matmul(0, 96, 80, 72)
    assert gemm.try_tile_gemm(Schedule(sch.mod, tiny), sch.get_block("C"), tiny) is None
    model = MODELS["batch_matmul"]()
    node = run_pipeline(from_onnx(model), layout_for_target(tiny)).nodes[0]
    assert fused_schedule(node, tiny).info["schedule"] == "gpu generic"
    feeds = random_inputs(model, seed=6)
    got = load_bundle(compile_model(model, tiny, tmp_path / "emu", progress=False,
                                    emulate=True))(feeds)
    np.testing.assert_allclose(got["y"], run_graph(from_onnx(model), feeds)["y"],
                               rtol=1e-4, atol=1e-4)


def test_the_table_entry_schedules_a_lone_matmul_node() -> None:
    """``schedule_for`` on a MatMul node (not a fused group) uses the same entry."""
    x, w = Value("x", (20, 30), "float32"), Value("w", (30, 40), "float32")
    s = schedule_for(Node("MatMul", "mm", [x, w], [Value("y", (20, 40), "float32")]), SM80)
    assert s.info["schedule"] == "gpu tiled gemm"
    assert [v.name for v in s.input_values] == ["x", "w"]
    check_races(lower(s.schedule, target=SM80))


# ---------------------------------------------------------------- through bundles

def _conv(stride: tuple[int, int], pads: list[int], kernel: tuple[int, int], ci: int,
          co: int, hw: tuple[int, int], out: list[int], relu: bool = True):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((co, ci, *kernel)).astype(np.float32) * 0.3
    bias = rng.standard_normal(co).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"],
                              strides=list(stride), pads=pads, kernel_shape=list(kernel))]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return make_model(nodes, {"x": (np.float32, [1, ci, *hw])}, {"y": (np.float32, out)},
                      {"w": w, "b": bias})


def _batch_matmul():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["c"]),
             helper.make_node("Tanh", ["c"], ["y"])]
    return make_model(nodes, {"a": (np.float32, [3, 17, 23]), "b": (np.float32, [3, 23, 29])},
                      {"y": (np.float32, [3, 17, 29])})


def _dense():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((37, 45)).astype(np.float32)  # transB: [N, K]
    bias = rng.standard_normal(37).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    return make_model(nodes, {"x": (np.float32, [5, 45])}, {"y": (np.float32, [5, 37])},
                      {"w": w, "b": bias})


MODELS = {
    "conv_stride2_pad1": lambda: _conv((2, 2), [1, 1, 1, 1], (3, 3), 5, 7, (13, 11),
                                       [1, 7, 7, 6]),
    "conv_asym_pads": lambda: _conv((2, 1), [0, 1, 2, 1], (2, 3), 3, 9, (9, 10),
                                    [1, 9, 5, 10], relu=False),
    "conv_1x1": lambda: _conv((1, 1), [0, 0, 0, 0], (1, 1), 6, 10, (7, 5), [1, 10, 7, 5]),
    # 1024 products per output, 64 outputs: split-K in 8 parts (gemm.split_k), a 1 x 1
    # window (rfactor leaves its unit loops: gemm's _fuse_unit_loops)
    "conv1x1_split_k": lambda: _conv((1, 1), [0, 0, 0, 0], (1, 1), 1024, 8, (2, 4),
                                     [1, 8, 2, 4]),
    # 1152 products: split-K with the padded window in shared memory (ResNet-18's layer4)
    "conv3x3_split_k": lambda: _conv((1, 1), [1, 1, 1, 1], (3, 3), 128, 8, (2, 4),
                                     [1, 8, 2, 4]),
    "batch_matmul": _batch_matmul,
    "dense_batch5": _dense,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_odd_shaped_models_are_tiled_race_free_and_match_the_reference(
        name: str, tmp_path: Path) -> None:
    model = MODELS[name]()
    graph = run_pipeline(from_onnx(model), layout_for_target(SM80))
    tiled = 0
    for node in graph.nodes:
        s = fused_schedule(node, SM80)
        if s.info["schedule"] == "gpu tiled gemm":
            tiled += 1
            check_races(lower(s.schedule, target=SM80))
    assert tiled == 1, f"{name}: the GEMM group was not tiled"
    d = emulated_matches_reference(model, tmp_path / "emu", seed=5, target="cuda-sm80")
    assert "__syncthreads()" in (d / "src/kernels.c").read_text()  # the barriers' markers


@nvcc_kernel_check("gemm")
def _odd_shaped(out: Path) -> dict[str, Path]:
    return {name: compile_model(MODELS[name](), "cuda-sm90", out / name, progress=False,
                                name=name)
            for name in ("conv_asym_pads", "batch_matmul", "conv1x1_split_k")}  # the zoo: the rest


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_odd_shaped_models_compile_with_nvcc_for_sm80_and_sm90(kernels_nvcc: Any,
                                                               tmp_path: Path) -> None:
    """The three models' kernels (each model named apart), in one nvcc run with the other
    GPU tests' (``kernels_nvcc``)."""
    for name, d in kernels_nvcc.of("gemm").items():
        src = (d / "src/kernels.cu").read_text()
        assert "__shared__" in src and "__syncthreads();" in src, name
    kernels_nvcc.check("gemm", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", list(MODELS))
def test_odd_shaped_models_on_the_gpu_match_the_reference(name: str, tmp_path: Path) -> None:
    gpu_matches_reference(MODELS[name](), tmp_path / name, seed=5)


def test_the_schedule_kind_is_read_off_the_statements_not_the_printed_module(
        monkeypatch: Any) -> None:
    """``schedule_group`` labels its schedule (``info["schedule"]``) by one walk of the
    statements (``conv_tc.kernel_kind``), not by printing the module: with the printer
    made to fail, a float32 MatMul is still ``gpu tiled gemm``, a float16 one ``gpu
    tensor-core gemm`` and a matrix-vector product (one row) ``gpu generic``; each label
    is the one the printed text gives (a thread-bound loop and a ``shared`` buffer: tiled;
    and a tensorized block: tensor cores)."""
    from toolchain.tir import printer

    cases = [("float32", 64, "gpu tiled gemm"), ("float16", 64, "gpu tensor-core gemm"),
             ("float32", 1, "gpu generic")]
    got = []
    with monkeypatch.context() as m:
        def no_print(*_: Any) -> None:
            raise AssertionError("schedule_group printed the module")

        m.setattr(printer.ScriptPrinter, "func", no_print)
        for dtype, rows, _ in cases:
            x, w = Value("x", (rows, 64), dtype), Value("w", (64, 64), dtype)
            node = Node("MatMul", "mm", [x, w], [Value("y", (rows, 64), dtype)])
            got.append(schedule_for(node, SM80))
    for s, (_, _, kind) in zip(got, cases, strict=True):
        assert s.info["schedule"] == kind
        text = str(s.schedule.mod)
        staged = "T.thread_binding" in text and 'scope="shared"' in text
        assert staged == (kind != "gpu generic")
        assert ("'tensorized':" in text) == (kind == "gpu tensor-core gemm")
