"""Block reductions (``reduce.block_reduce``): one thread block per output where the
reductions are long and the outputs too few to fill the GPU (a batch-1 classifier, a
long-row softmax or ReduceSum/ReduceMean). Checked by the rule on shapes, the race checker,
emulated CUDA bundles against the reference executor, nvcc for sm_80/sm_90, and (``gpu``)
on a GPU."""

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
    gpu_matches_reference,
    make_model,
    nvcc_kernel_check,
)
from toolchain.bundle import compile_model
from toolchain.bundle.host import gpu_available
from toolchain.driver import lower
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes import run_pipeline
from toolchain.graph.passes.layout import layout_for_target
from toolchain.schedules.gpu.reduce import block_threads, prefers_block_reduce
from toolchain.schedules.registry import schedule_for
from toolchain.target import load_target
from toolchain.tir.race import check_races
from toolchain.tir.transform.inject_barriers import kernels_of

SM90 = load_target("cuda-sm90")
NVCC = shutil.which("nvcc")


def _classifier(inputs: int = 512, outputs: int = 1000):
    """ResNet-18's classifier: ``Gemm`` of a 1 x ``inputs`` vector, weights transposed."""
    rng = np.random.default_rng(3)
    return make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
                      {"x": (np.float32, [1, inputs])}, {"y": (np.float32, [1, outputs])},
                      {"w": rng.standard_normal((outputs, inputs)).astype(np.float32),
                       "b": rng.standard_normal(outputs).astype(np.float32)})


def _matvec_relu():
    rng = np.random.default_rng(4)
    return make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                       helper.make_node("Relu", ["m"], ["y"])],
                      {"x": (np.float32, [1, 1024])}, {"y": (np.float32, [1, 96])},
                      {"w": rng.standard_normal((1024, 96)).astype(np.float32)})


def _unary(op: str, shape: list[int], out: list[int], **attrs):
    return make_model([helper.make_node(op, ["x"], ["y"], **attrs)],
                      {"x": (np.float32, shape)}, {"y": (np.float32, out)})


def _reduce(op: str, shape: list[int], out: list[int]):
    """``op`` over the last axis, kept where ``out`` has as many axes as ``shape``
    (opset 18: the axes an input)."""
    keep = int(len(out) == len(shape))
    return make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep)],
                      {"x": (np.float32, shape)}, {"y": (np.float32, out)},
                      {"axes": np.array([len(shape) - 1], dtype=np.int64)}, opset=18)


#: name -> (model, whether a block reduction is expected, launches): the element-wise
#: tail (bias, ReLU, the mean's division) runs on the output's thread; a long-row
#: softmax is one kernel of a block a row (``reduce.block_row_kernel``)
MODELS = {
    "classifier_512x1000": (_classifier, True, 1),
    "matvec_relu_1024x96": (_matvec_relu, True, 1),
    "softmax_4x2048": (lambda: _unary("Softmax", [4, 2048], [4, 2048], axis=-1), True, 1),
    "reduce_sum_3x4096": (lambda: _reduce("ReduceSum", [3, 4096], [3, 1]), True, 1),
    "reduce_mean_2x1536": (lambda: _reduce("ReduceMean", [2, 1536], [2]), True, 1),
    "short_rows_64x64": (lambda: _reduce("ReduceSum", [64, 64], [64, 1]), False, 1),
}


def _kernel_sources(model) -> tuple[list[str], int]:
    """The lowered functions of ``model``'s groups on cuda-sm90 (race-checked) and their
    launches."""
    graph = run_pipeline(from_onnx(model), layout_for_target(SM90))
    out, launches = [], 0
    for node in graph.nodes:
        f = lower(schedule_for(node, SM90).schedule, target=SM90)
        check_races(f, max_blocks=4)  # the blocks of a block reduction all alike
        out.append(str(f))
        launches += len(kernels_of(f.body)[1])
    return out, launches


def test_the_rule_reads_shapes_and_the_descriptor() -> None:
    assert prefers_block_reduce(1000, 512, SM90)          # ResNet-18's classifier
    assert prefers_block_reduce(4, 2048, SM90)            # a long softmax row, 4 rows
    assert not prefers_block_reduce(1000, 255, SM90)      # short reductions: a thread each
    assert not prefers_block_reduce(132 * 256, 4096, SM90)  # the grid fills 132 SMs
    assert not prefers_block_reduce(1000, 512, replace(SM90, sm_count=None))
    assert [block_threads(n, 256) for n in (256, 512, 1536, 4096, 1000)] == \
        [64, 128, 256, 256, None]


@pytest.mark.parametrize("name", list(MODELS))
def test_block_reductions_only_where_the_rule_says_and_race_free(name: str) -> None:
    build, expected, launches = MODELS[name]
    srcs, n = _kernel_sources(build())
    used = any("T.shfl_xor_sync(" in s for s in srcs)  # the warp-shuffle block reduction
    assert used == expected, "\n".join(srcs)
    assert n == launches, "\n".join(srcs)
    if expected:
        assert any("T.storage_sync('shared')" in s for s in srcs)


def test_the_classifier_is_one_coalesced_launch() -> None:
    """ResNet-18's classifier: one kernel (the bias folded into the output's thread), one
    block per output, and thread ``t`` reads weights ``t, t + 128, ...`` of its row
    (consecutive threads, consecutive addresses)."""
    graph = run_pipeline(from_onnx(_classifier()), layout_for_target(SM90))
    (node,) = graph.nodes
    f = lower(schedule_for(node, SM90).schedule, target=SM90)
    assert len(kernels_of(f.body)[1]) == 1
    src = str(f)
    assert 'T.thread_binding(1000, thread="blockIdx.x")' in src
    m = re.search(r"w\[(\w+) \* 512 \+ (\w+)\]", src)
    assert m is not None, src
    assert f'for {m.group(1)} in T.thread_binding(1000, thread="blockIdx.x")' in src
    assert f'for {m.group(2)} in T.thread_binding(128, thread="threadIdx.x")' in src


@pytest.mark.parametrize("name", [n for n, (_, e, _) in MODELS.items() if e])
def test_block_reductions_emulated_match_the_reference(name: str, tmp_path: Path) -> None:
    emulated_matches_reference(MODELS[name][0](), tmp_path / name, seed=6)


@nvcc_kernel_check("block_reduce")
def _block_reductions(out: Path) -> dict[str, Path]:
    return {name: compile_model(MODELS[name][0](), "cuda-sm90", out / name, progress=False,
                                name=name)
            for name in ("classifier_512x1000", "softmax_4x2048")}


@pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
def test_block_reductions_compile_with_nvcc_for_sm80_and_sm90(kernels_nvcc: Any,
                                                              tmp_path: Path) -> None:
    """Both models' kernels (each model named apart), in one nvcc run with the other GPU
    tests' (``kernels_nvcc``)."""
    for name, d in kernels_nvcc.of("block_reduce").items():
        src = (d / "src/kernels.cu").read_text()
        assert "__shared__" in src and "__syncthreads();" in src, name
        assert "__shfl_xor_sync(0xffffffffu, " in src, name
    kernels_nvcc.check("block_reduce", tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU here (nvidia-smi -L)")
@pytest.mark.parametrize("name", [n for n, (_, e, _) in MODELS.items() if e])
def test_block_reductions_on_the_gpu_match_the_reference(name: str, tmp_path: Path) -> None:
    gpu_matches_reference(MODELS[name][0](), tmp_path / name, seed=7)


#: the zoo's groups that get a block reduction on cuda-sm90 (fast models; ResNet-18's
#: classifier is ``classifier_512x1000`` above)
ZOO_GROUPS = {
    "autoencoder": {"fused_sub_pow_reduce_mean_10"},
    "fcn_opset11": {"fused_softmax_15"},
    "mobilenet_v1": {"fused_dense_30"},
    "mobilenet_v2": {"fused_dense_54"},
    "transformer_encoder": set(),
}


@pytest.mark.parametrize("name", list(ZOO_GROUPS))
def test_the_zoo_groups_with_block_reductions_are_race_free(name: str) -> None:
    from toolchain.zoo import ZOO

    spec = ZOO[name]
    graph = run_pipeline(from_onnx(spec.build(), input_shapes=spec.input_shapes),
                         layout_for_target(SM90))
    seen = set()
    for node in graph.nodes:
        ops = {n.op for n in node.attrs["graph"].nodes} if node.op == "Fused" else {node.op}
        if not ops & {"Gemm", "MatMul", "ReduceMean", "ReduceSum", "Softmax"}:
            continue
        sch = schedule_for(node, SM90).schedule
        if "shfl_xor_sync" in str(lower(sch, target=SM90)):
            seen.add(node.name)
            check_races(lower(sch, target=SM90), max_blocks=2)  # every block alike
    assert seen == ZOO_GROUPS[name]
