"""Graphs as ``torch.onnx.export`` writes them (TorchScript exporter at opsets 13-17, the
dynamo exporter at 18+), rebuilt with ``onnx.helper`` so that the suite needs no torch:
each is compiled into a C bundle, run, and compared with onnxruntime and with Kiln's
reference executor. Each case is an idiom a real export produced that Kiln once refused
or got wrong (docs/models.md, "Models exported from PyTorch")."""

from __future__ import annotations

import contextlib
import subprocess

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import (
    STRICT,
    assert_matches,
    compile_run,
    make_model,
    random_inputs,
    run_ort,
)
from toolchain.bundle import compile_model, load_bundle
from toolchain.errors import KilnWarning, ModelError, UnsupportedError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph

F = np.float32
N = helper.make_node


def check_bundle(model, tmp_path, feeds=None) -> dict[str, np.ndarray]:
    """Compile and run ``model``; its outputs must match onnxruntime's and the reference
    executor's. Returns the bundle's outputs."""
    feeds = feeds if feeds is not None else random_inputs(model, seed=1)
    want = run_ort(model, feeds)
    assert_matches(run_graph(from_onnx(model), feeds), want)
    _, got = compile_run(model, tmp_path, feeds)
    assert_matches(got, want)
    return got


@pytest.mark.parametrize("mode,padding,align", [("bilinear", "zeros", 0),
                                                ("bicubic", "border", 1),
                                                ("nearest", "reflection", 0)])
def test_grid_sample_opset16_mode_names(tmp_path, mode, padding, align):
    """``F.grid_sample`` exported at opsets 16-19 spells the modes ``bilinear`` and
    ``bicubic`` (opset 20 renamed them ``linear`` and ``cubic``)."""
    node = N("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
             align_corners=align, name="/GridSample")
    model = make_model([node], {"x": (F, [1, 2, 5, 6]), "grid": (F, [1, 4, 3, 2])},
                       {"y": (F, [1, 2, 4, 3])}, opset=17)
    feeds = random_inputs(model, seed=3)
    feeds["grid"] = np.random.default_rng(4).uniform(-1.2, 1.2, (1, 4, 3, 2)).astype(F)
    check_bundle(model, tmp_path, feeds)


def traced_head_split() -> object:
    """``nn.MultiheadAttention``'s head split as the TorchScript exporter writes it with
    ``dynamic_axes`` on batch and sequence: the input is symbolic, but the Reshape's target
    ``[seq, batch * heads, head_dim]`` is a constant of the traced sizes (6, 2 * 2, 2)."""
    nodes = [N("Transpose", ["x"], ["t"], perm=[1, 0, 2], name="/self_attn/Transpose"),
             N("Reshape", ["t", "shape"], ["h"], name="/self_attn/Reshape_4"),
             N("Transpose", ["h"], ["y"], perm=[1, 0, 2], name="/self_attn/Transpose_1")]
    return make_model(nodes, {"x": (F, ["batch", "seq", 4])}, {"y": (F, [4, 6, 2])},
                      {"shape": np.array([6, 4, 2], np.int64)}, opset=17)


def test_traced_sizes_compile_and_other_sizes_say_why(tmp_path):
    """At the traced sizes the model compiles and runs; at other sizes the Reshape error
    says that the exporter fixed the sizes and what to do."""
    model = traced_head_split()
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 6, 4)).astype(F)}
    want = run_ort(model, feeds)
    assert_matches(run_graph(from_onnx(model, input_shapes={"x": (2, 6, 4)}), feeds), want)
    bundle = compile_model(model, "c-generic", tmp_path / "b", input_shapes={"x": (2, 6, 4)})
    assert_matches(load_bundle(bundle)(feeds), want)
    with pytest.raises(ModelError) as err:
        from_onnx(model, input_shapes={"x": (3, 9, 4)})
    msg = str(err.value)
    assert "node '/self_attn/Reshape_4' (Reshape): cannot reshape [9, 3, 4]" in msg
    assert "--input-shape x=3,9,4" in msg and "dynamo=False" in msg
    assert "Compile at the sizes the model was exported with" in msg


def test_embedding_bag_sequences_are_refused_with_what_to_do():
    """The dynamo exporter writes ``nn.EmbeddingBag`` as a Loop that inserts one bag per
    step into a sequence, then ``ConcatFromSequence``: Kiln has no sequence type, and the
    error names each sequence op (the one in the Loop body too) and what to do."""
    from onnx import TensorProto

    body = helper.make_graph(
        [N("Gather", ["table", "i"], ["row"], axis=0),
         N("SequenceInsert", ["seq_in", "row"], ["seq_out"], name="insert"),
         N("Identity", ["cond_in"], ["cond_out"])],
        "bag_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, None)])
    nodes = [N("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT, name="n16"),
             N("Loop", ["bags", "", "empty"], ["seq"], body=body, name="n19_2"),
             N("ConcatFromSequence", ["seq"], ["stacked"], axis=0, new_axis=1, name="n20"),
             N("Add", ["stacked", "x"], ["y"])]
    model = make_model(nodes, {"x": (F, [2, 4])}, {"y": (F, [2, 4])},
                       {"table": np.ones((10, 4), F), "bags": np.array(2, np.int64)},
                       opset=18)
    with pytest.raises(UnsupportedError) as err:
        from_onnx(model)
    msg = str(err.value)
    assert "ConcatFromSequence works on an ONNX sequence" in msg and "at node 'n20'" in msg
    assert "SequenceInsert works on an ONNX sequence" in msg and "at node 'n19_2/insert'" in msg
    assert "dynamo=False" in msg


@pytest.mark.parametrize("scale,ctm,nearest_mode", [(0.6, "asymmetric", "floor"),
                                                    (1.7, "asymmetric", "floor"),
                                                    (0.6, "half_pixel", "round_prefer_floor")])
def test_nearest_resize_picks_the_cells_of_float32_arithmetic(tmp_path, scale, ctm,
                                                               nearest_mode):
    """``F.interpolate(x, scale_factor=0.6, mode="nearest")``: the exporter writes the
    scale as the float32 0.6000000238; output cell 3 maps to input cell 5 in float32 (what
    PyTorch and onnxruntime compute) but to 4 in float64, which Kiln used, shifting whole
    rows and columns of the output."""
    scales = np.array([1, 1, scale, scale], F)
    node = N("Resize", ["x", "", "scales"], ["y"], mode="nearest",
             coordinate_transformation_mode=ctm, nearest_mode=nearest_mode, name="/Resize")
    out = [1, 2, int(10 * scales[2]), int(9 * scales[3])]
    model = make_model([node], {"x": (F, [1, 2, 10, 9])}, {"y": (F, out)},
                       {"scales": scales}, opset=17)
    check_bundle(model, tmp_path)


@pytest.mark.parametrize("pooled", [False, True])
def test_resize_output_length_is_floored_in_float32(tmp_path, pooled):
    """``F.interpolate(x, scale_factor=0.7, mode="bilinear")`` on 10 x 10: PyTorch and
    onnxruntime give 7 x 7; float64 of the exported float32 0.7 gives 6.99999988 and 6 x 6,
    which Kiln computed (refusing the export's declared 7 x 7 output, or, with a mean after
    it, returning a mean over the wrong image, 0.5 off). ONNX's shape inference says 6 x 6:
    Kiln warns and keeps onnxruntime's shape."""
    nodes = [N("Resize", ["x", "", "scales"], ["r"], mode="linear",
               coordinate_transformation_mode="pytorch_half_pixel", name="/Resize")]
    out = {"r": (F, [1, 2, 7, 7])}
    if pooled:
        nodes.append(N("ReduceMean", ["r", "axes"], ["y"], keepdims=0, name="/ReduceMean"))
        out = {"y": (F, [1, 2])}
    model = make_model(nodes, {"x": (F, [1, 2, 10, 10])}, out,
                       {"scales": np.array([1, 1, 0.7, 0.7], F),
                        "axes": np.array([2, 3], np.int64)}, opset=18)
    feeds = random_inputs(model, seed=1)
    want = run_ort(model, feeds)
    with pytest.warns(KilnWarning, match=r"ONNX shape inference says \[1, 2, 6, 6\]") \
            if pooled else contextlib.nullcontext():
        assert_matches(run_graph(from_onnx(model), feeds), want)
        path, got = compile_run(model, tmp_path, feeds)  # -O3 -Wall -Wextra -Werror
    assert_matches(got, want)
    if pooled:
        # the fused resize + mean's accumulator, set under `if (ax2 == 0 && ax3 == 0)` in
        # its loop: gcc's -Wmaybe-uninitialized misfired on it at -O1, -O2 and -O3 until
        # one-element locals were declared `= {0}` (CRenderer.zero_scalar_locals)
        assert "fused_resize_reduce_mean" in (path / "src" / "kernels.c").read_text()
        for level in ("-O1", "-O2", "-Os"):
            res = subprocess.run(["cc", level, "-std=c99", *STRICT, f"-I{path / 'src'}",
                                  f"-I{path / 'runtime'}", "-c", str(path / "src" / "kernels.c"),
                                  "-o", str(tmp_path / "kernels.o")],
                                 capture_output=True, text=True, check=False)
            assert res.returncode == 0, (level, res.stderr)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axis_whose_length_stays_is_copied(tmp_path, mode):
    """``F.interpolate(x, scale_factor=1.1)`` on 7 x 7 keeps 7 x 7, and PyTorch and
    onnxruntime then copy the input; Kiln sampled it at the scale's coordinates (error up
    to 3.1 on a normal input)."""
    node = N("Resize", ["x", "", "scales"], ["y"], mode=mode,
             coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="floor",
             name="/Resize")
    model = make_model([node], {"x": (F, [1, 2, 7, 7])}, {"y": (F, [1, 2, 7, 7])},
                       {"scales": np.array([1, 1, 1.1, 1.1], F)}, opset=17)
    got = check_bundle(model, tmp_path)
    assert np.array_equal(got["y"], random_inputs(model, seed=1)["x"])
