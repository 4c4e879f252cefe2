"""The row kernel of the generic GPU schedule (``generic.row_kernel``): a group of row
reductions feeding one element-wise output (layer norm, softmax) as one kernel of one
thread a row where the reductions' own kernels would not fill the GPU. Checked through
emulated CUDA bundles against the reference executor, with the race checker, and the
cases it must leave to the generic kernels (many rows, long rows, a reduction across the
rows' inner axis)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import emulated_matches_reference, layer_norm_model, make_model
from toolchain.driver import lower
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes import run_pipeline
from toolchain.graph.passes.layout import layout_for_target
from toolchain.schedules.gpu.generic import ROW_WORK_MAX, fused_schedule
from toolchain.target import load_target
from toolchain.tir.race import check_races
from toolchain.tir.transform.inject_barriers import kernels_of

SM90 = load_target("cuda-sm90")


def _layer_norm(shape: list[int]):
    return layer_norm_model(shape, seed=1)


def _softmax(shape: list[int], axis: int = -1):
    return make_model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
                      {"x": (np.float32, shape)}, {"y": (np.float32, shape)})


def _kernels(model, target=SM90) -> list[int]:
    """Per node of the fused graph on ``target``: its kernel count (launches)."""
    graph = run_pipeline(from_onnx(model), layout_for_target(target))
    out = []
    for node in graph.nodes:
        f = lower(fused_schedule(node, target).schedule, target=target)
        check_races(f)
        out.append(len(kernels_of(f.body)[1]))
    return out


#: name -> (model, launches of its one group): the transformer encoder's layer norm
#: (64 rows of 64) and attention-sized softmax (256 rows of 32) as one kernel; a softmax
#: over the middle axis (a row is not the output's inner loop), many rows (157 blocks of
#: one-thread-a-row reductions fill 132 SMs) keep one kernel a stage; long rows are one
#: kernel of a block a row (``reduce.block_row_kernel``, warp shuffles: see
#: test_warp_shuffle.py), and three again on a descriptor without ``warp_size``
CASES = {
    "layer_norm_2x32x64": (lambda: _layer_norm([2, 32, 64]), 1),
    "softmax_2x4x32x32": (lambda: _softmax([2, 4, 32, 32]), 1),
    "softmax_rows_of_5": (lambda: _softmax([3, 7, 5]), 1),
    "softmax_middle_axis": (lambda: _softmax([2, 8, 5], axis=1), 3),
    "layer_norm_many_rows": (lambda: _layer_norm([40192, 4]), 3),
    "layer_norm_long_rows": (lambda: _layer_norm([4, ROW_WORK_MAX // 2]), 1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_row_groups_are_one_kernel_only_where_the_rule_says(name: str) -> None:
    build, launches = CASES[name]
    assert _kernels(build()) == [launches]


def test_long_rows_without_warp_shuffles_keep_a_kernel_a_stage() -> None:
    assert _kernels(_layer_norm([4, ROW_WORK_MAX // 2]),
                    replace(SM90, warp_size=None)) == [3]


@pytest.mark.parametrize("name", ["layer_norm_2x32x64", "softmax_2x4x32x32",
                                  "softmax_middle_axis"])
def test_row_kernels_emulated_match_the_reference(name: str, tmp_path: Path) -> None:
    emulated_matches_reference(CASES[name][0](), tmp_path / name, seed=2, rtol=1e-5,
                               atol=1e-5)


def test_the_encoders_layer_norms_and_attention_are_one_kernel_each() -> None:
    """The transformer encoder (the zoo's): its four layer norms and two attention groups
    (scores, max, weighted sum, sum, division: 5 launches before) are one launch each,
    race-free; its matmuls (one reduction and a tail) keep their own kernels."""
    from toolchain.schedules.registry import schedule_for
    from toolchain.zoo import ZOO

    spec = ZOO["transformer_encoder"]
    graph = run_pipeline(from_onnx(spec.build(), input_shapes=spec.input_shapes),
                         layout_for_target(SM90))
    seen = {"LayerNormalization": 0, "FusedAttention": 0}
    for node in graph.nodes:
        ops = [n.op for n in node.attrs["graph"].nodes] if node.op == "Fused" else [node.op]
        for op in seen:
            if op in ops:
                seen[op] += 1
                f = lower(schedule_for(node, SM90).schedule, target=SM90)
                assert len(kernels_of(f.body)[1]) == 1, node.name
                check_races(f)
    assert seen == {"LayerNormalization": 4, "FusedAttention": 2}


def test_a_reduction_that_is_also_an_output_keeps_its_kernels() -> None:
    """A row sum the group also returns cannot live in the row's registers: the row
    kernel refuses (``set_scope`` of a parameter) and the stages keep a kernel each."""
    from toolchain import te
    from toolchain.schedules.gpu.generic import schedule_gpu

    X = te.placeholder((8, 16), name="X")
    k, k2 = te.reduce_axis((0, 16), name="k"), te.reduce_axis((0, 16), name="k2")
    S = te.compute((8,), lambda i: te.sum(X[i, k], axis=k), name="S")
    M = te.compute((8,), lambda i: te.max(X[i, k2], axis=k2), name="M")
    Y = te.compute((8, 16), lambda i, j: X[i, j] / S[i] + M[i], name="Y")
    f = lower(schedule_gpu(te.create_prim_func([X, S, Y]), SM90), target=SM90)
    assert len(kernels_of(f.body)[1]) == 3
    assert 'scope="local"' in str(f) and "S[i] = S_local[0]" in str(f)
