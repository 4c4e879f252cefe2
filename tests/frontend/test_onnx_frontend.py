"""Unit tests of the ONNX frontend: loading, canonical forms, folding, overrides, checks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.frontend.helpers import make_model, relu_model, run_onnxruntime, save, tiny_cnn
from toolchain.errors import InputError, ModelError, OptionError, UnsupportedError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ops.registry import get_op
from toolchain.graph.reference import InternalError, run_graph

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _matches_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **kw) -> None:
    got = run_graph(from_onnx(model, **kw), feeds)
    want = run_onnxruntime(model, feeds)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


# -- loading --------------------------------------------------------------------------------

def test_path_bytes_and_proto_give_the_same_graph(tmp_path):
    model = relu_model()
    path = save(model, tmp_path / "relu.onnx")
    graphs = [from_onnx(path), from_onnx(str(path)), from_onnx(model.SerializeToString()),
              from_onnx(model)]
    assert len({str(g) for g in graphs}) == 1
    assert graphs[0].metadata["source"] == str(path)


def test_the_callers_model_is_not_modified():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [("x", F, [2, 3]), ("s", I64, [1])], [("y", F, [6])])
    before = model.SerializeToString()
    from_onnx(model, bind={"s": np.array([6], np.int64)})
    assert model.SerializeToString() == before


def test_unnamed_and_duplicate_nodes_get_stable_unique_names():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Abs", ["b"], ["y"], name="n")]
    g = from_onnx(make_model(nodes, [("x", F, [2])], [("y", F, [2])]))
    assert [n.name for n in g.nodes] == ["Relu_0", "n", "n__2"]


def test_unsorted_nodes_are_put_in_topological_order():
    nodes = [helper.make_node("Neg", ["a"], ["y"], name="second"),
             helper.make_node("Relu", ["x"], ["a"], name="first")]
    g = from_onnx(make_model(nodes, [("x", F, [3])], [("y", F, [3])]))
    assert [n.name for n in g.nodes] == ["first", "second"]
    x = np.array([-1, 0, 2], np.float32)
    np.testing.assert_array_equal(run_graph(g, {"x": x})["y"], -np.maximum(x, 0))


def test_opset_older_than_11_is_converted():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [4])],
                       [("y", F, [4])], opset=9)
    g = from_onnx(model)
    assert g.opset == 11
    x = _rand(4)
    np.testing.assert_array_equal(run_graph(g, {"x": x})["y"], np.maximum(x, 0))


# -- folding --------------------------------------------------------------------------------

def test_pytorch_flatten_chain_is_folded_to_a_constant_shape():
    g = from_onnx(tiny_cnn(), input_shapes={"x": (2, 3, 8, 8)})
    assert [n.op for n in g.nodes] == ["Conv", "Relu", "MaxPool", "Reshape", "MatMul",
                                       "Softmax"]
    reshape = g.node("flatten")
    assert reshape.inputs[1].data.tolist() == [2, -1]


def test_tiny_cnn_matches_onnxruntime():
    model = tiny_cnn(batch=2)
    _matches_ort(model, {"x": _rand(2, 3, 8, 8, seed=3)})


def test_constant_nodes_and_constant_subgraphs_fold():
    nodes = [helper.make_node("Constant", [], ["c"],
                              value=helper.make_tensor("v", F, [3], [1.0, 2.0, 3.0])),
             helper.make_node("Mul", ["c", "c"], ["c2"]),
             helper.make_node("Add", ["x", "c2"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", F, [3])], [("y", F, [3])]))
    assert [n.op for n in g.nodes] == ["Add"]
    assert g.nodes[0].inputs[1].data.tolist() == [1.0, 4.0, 9.0]


def test_quantization_nodes_are_not_folded():
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    inits = {"wq": np.ones((4, 2), np.int8), "s": np.array(0.5, np.float32),
             "z": np.array(0, np.int8)}
    g = from_onnx(make_model(nodes, [("x", F, [1, 4])], [("y", F, [1, 2])], inits))
    assert [n.op for n in g.nodes] == ["DequantizeLinear", "MatMul"]


def test_large_expansions_of_constants_are_not_folded():
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["z"],
                              value=helper.make_tensor("v", F, [1], [0.5])),
             helper.make_node("Add", ["x", "z"], ["y"])]
    inits = {"shape": np.array([512, 512], np.int64)}
    g = from_onnx(make_model(nodes, [("x", F, [512, 512])], [("y", F, [512, 512])], inits))
    assert [n.op for n in g.nodes] == ["ConstantOfShape", "Add"]


def test_graph_may_return_an_input_and_a_folded_constant():
    nodes = [helper.make_node("Shape", ["x"], ["s"])]
    g = from_onnx(make_model(nodes, [("x", F, [2, 5])],
                             [("s", I64, [2]), ("x", F, [2, 5])]))
    out = run_graph(g, {"x": _rand(2, 5)})
    assert out["s"].tolist() == [2, 5] and out["x"].shape == (2, 5)


# -- canonical forms of older opsets ---------------------------------------------------------

def test_split_attribute_becomes_an_input_opset11():
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])
    model = make_model([node], [("x", F, [2, 4])], [("a", F, [2, 1]), ("b", F, [2, 3])],
                       opset=11)
    g = from_onnx(model)
    (split,) = g.nodes
    assert "split" not in split.attrs and split.inputs[1].data.tolist() == [1, 3]
    _matches_ort(model, {"x": _rand(2, 4)})


def test_split_without_sizes_gets_num_outputs_opset13():
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0)
    model = make_model([node], [("x", F, [4, 2])], [("a", F, [2, 2]), ("b", F, [2, 2])],
                       opset=13)
    assert from_onnx(model).nodes[0].attrs["num_outputs"] == 2
    _matches_ort(model, {"x": _rand(4, 2)})


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_squeeze_axes_attribute_becomes_an_input_opset11(op):
    shape_in, shape_out = ([2, 1, 3], [2, 3]) if op == "Squeeze" else ([2, 3], [2, 1, 3])
    model = make_model([helper.make_node(op, ["x"], ["y"], axes=[1])],
                       [("x", F, shape_in)], [("y", F, shape_out)], opset=11)
    g = from_onnx(model)
    assert g.nodes[0].inputs[1].data.tolist() == [1]
    _matches_ort(model, {"x": _rand(*shape_in)})


@pytest.mark.parametrize(("op", "opset"), [("ReduceSum", 11), ("ReduceMean", 13),
                                           ("ReduceMax", 17), ("ReduceMin", 11)])
def test_reduce_axes_attribute_becomes_an_input(op, opset):
    model = make_model([helper.make_node(op, ["x"], ["y"], axes=[-1], keepdims=0)],
                       [("x", F, [2, 3, 4])], [("y", F, [2, 3])], opset=opset)
    g = from_onnx(model)
    assert "axes" not in g.nodes[0].attrs and g.nodes[0].inputs[1].data.tolist() == [-1]
    _matches_ort(model, {"x": _rand(2, 3, 4)})


def test_dropout_ratio_attribute_opset11_is_identity_at_inference():
    model = make_model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.3)],
                       [("x", F, [5])], [("y", F, [5])], opset=11)
    x = _rand(5)
    np.testing.assert_array_equal(run_graph(from_onnx(model), {"x": x})["y"], x)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_before_opset13_normalises_over_the_flattened_tail(op, axis):
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis, name="sm")],
                       [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4])], opset=11)
    g = from_onnx(model)
    ops = [n.op for n in g.nodes]
    assert ops == ([op] if axis in (2, -1) else ["Reshape", op, "Reshape"])
    _matches_ort(model, {"x": _rand(2, 3, 4, seed=axis + 5)})


def test_softmax_before_opset13_default_axis_is_1():
    model = make_model([helper.make_node("Softmax", ["x"], ["y"])],
                       [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4])], opset=12)
    _matches_ort(model, {"x": _rand(2, 3, 4)})


def test_resize_opset11_empty_roi_and_scales_become_absent():
    nodes = [helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"],
                              mode="nearest")]
    inits = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
             "sizes": np.array([1, 1, 4, 4], np.int64)}
    model = make_model(nodes, [("x", F, [1, 1, 2, 2])], [("y", F, [1, 1, 4, 4])], inits,
                       opset=11)
    g = from_onnx(model)
    assert g.nodes[0].inputs[1] is None and g.nodes[0].inputs[2] is None
    _matches_ort(model, {"x": _rand(1, 1, 2, 2)})


# -- overrides ------------------------------------------------------------------------------

def test_input_shapes_fix_dynamic_dims():
    g = from_onnx(tiny_cnn(), input_shapes={"x": (3, 3, 8, 8)})
    assert g.inputs[0].shape == (3, 3, 8, 8) and g.outputs[0].shape == (3, 10)


def test_input_shapes_unknown_name_lists_the_inputs():
    with pytest.raises(OptionError, match=r"no input 'y'; its inputs are: x"):
        from_onnx(tiny_cnn(), input_shapes={"y": (1, 3, 8, 8)})


def test_input_shapes_may_not_contradict_a_fixed_dim():
    with pytest.raises(OptionError, match=r"dimension 1 of input 'x' is fixed to 3"):
        from_onnx(tiny_cnn(), input_shapes={"x": (1, 4, 8, 8)})


def test_input_shapes_rank_must_match():
    with pytest.raises(OptionError, match=r"rank 4 \(\[N, 3, 8, 8\]\), not 2"):
        from_onnx(tiny_cnn(), input_shapes={"x": (1, 3)})


def test_bind_turns_an_input_into_a_constant():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [("x", F, [2, 3]), ("s", I64, [2])], [("y", F, [3, 2])])
    g = from_onnx(model, bind={"s": np.array([3, 2], np.int64)})
    assert [v.name for v in g.inputs] == ["x"] and g.nodes[0].inputs[1].is_constant


def test_bind_checks_the_dtype():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                       [("x", F, [2, 3]), ("s", I64, [2])], [("y", F, [3, 2])])
    with pytest.raises(InputError, match=r"input 's' is INT64 in the model"):
        from_onnx(model, bind={"s": np.array([3, 2], np.int32)})


def test_runtime_shape_operand_asks_for_static_shapes():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                       [("x", F, [2, 3]), ("s", I64, [2])], [("y", F, [3, 2])])
    with pytest.raises(ModelError, match=r"node 'rs' \(Reshape\).*--input-shape.*'s' is "
                                         r"itself an input of the model.*bind=\{'s': array\}"):
        from_onnx(model)


# -- external data --------------------------------------------------------------------------

def _external_model(tmp_path, location="weights.bin"):
    w = _rand(16, 4)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", F, [1, 16])], [("y", F, [1, 4])], {"w": w})
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location=location, size_threshold=0)
    return model, w


def test_external_data_inside_the_model_folder_is_read(tmp_path):
    model, w = _external_model(tmp_path)
    onnx.save(model, str(tmp_path / "m.onnx"))
    g = from_onnx(tmp_path / "m.onnx")
    np.testing.assert_array_equal(g.value("w").data, w)


def test_external_data_through_a_symlink_leaving_the_folder_is_refused(tmp_path):
    model, _ = _external_model(tmp_path)
    (tmp_path / "model").mkdir()
    onnx.save(model, str(tmp_path / "model" / "m.onnx"))
    (tmp_path / "model" / "weights.bin").rename(tmp_path / "secret.bin")
    (tmp_path / "model" / "weights.bin").symlink_to(tmp_path / "secret.bin")
    with pytest.raises(ModelError, match=r"tensor 'w' .*'weights.bin', which resolves to "
                                         r".*secret.bin, outside the model's folder"):
        from_onnx(tmp_path / "model" / "m.onnx")


def test_missing_external_data_file_is_named(tmp_path):
    model, _ = _external_model(tmp_path)
    onnx.save(model, str(tmp_path / "m.onnx"))
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelError, match=r"external data file 'weights.bin' of tensor 'w' "
                                         r"was not found"):
        from_onnx(tmp_path / "m.onnx")


def test_external_data_of_an_in_memory_model_needs_the_path(tmp_path):
    model, _ = _external_model(tmp_path)
    with pytest.raises(ModelError, match=r"pass the model's path"):
        from_onnx(model)


# -- unsupported features and internal checks -----------------------------------------------

def test_every_unsupported_op_attribute_and_dtype_is_listed_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             *[helper.make_node("ImageDecoder", ["enc"], [f"e{i}"], name=f"lp{i}")
               for i in range(7)],
             helper.make_node("Resize", ["x", "", "sc"], ["r"], mode="area", name="up"),
             helper.make_node("Frob", ["x"], ["c"], domain="com.example", name="custom")]
    model = make_model(nodes, [("x", F, [2, 2]), ("b", TensorProto.BFLOAT16, [2]),
                               ("enc", TensorProto.UINT8, [64])],
                       [("e6", TensorProto.UINT8, [4, 4, 3]), ("r", F, [4, 4]),
                        ("c", F, [2, 2])],
                       {"sc": np.array([2.0, 2.0], np.float32)}, opset=20)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedError) as info:
        from_onnx(model)
    msg = str(info.value)
    assert "ImageDecoder: op not supported by Kiln — at node 'lp0' (opset 20)" in msg
    assert "and 2 more" in msg
    assert "Resize: attribute 'mode' = 'area'" in msg and "node 'up' (opset 20)" in msg
    assert "Frob: op domain 'com.example' is not supported" in msg
    assert "input 'b': dtype BFLOAT16 is not supported" in msg
    assert "Relu" not in msg.split("Kiln supports these ops")[0]


def test_shape_rule_disagreeing_with_onnx_is_an_internal_error(monkeypatch):
    from toolchain.graph.ir import TensorType

    monkeypatch.setattr(get_op("Relu"), "infer", lambda node: [TensorType((7,), "float32")])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])])
    with pytest.raises(InternalError, match=r"node 'relu' \(Relu\): output 'r': Kiln infers "
                                            r"float32\[7\] but ONNX shape inference gives "
                                            r"float32\[2, 3\]"):
        from_onnx(model)


def test_a_wrongly_declared_output_is_a_model_error():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])],
                       [("y", F, ["N", 4])])
    with pytest.raises(ModelError, match=r"declares output 'y' as float32\[N, 4\], but it "
                                         r"computes float32\[2, 3\]"):
        from_onnx(model)


def test_model_local_functions_are_inlined():
    body = [helper.make_node("Mul", ["a", "a"], ["sq"]),
            helper.make_node("Add", ["sq", "a"], ["out"])]
    fn = helper.make_function("custom", "SquarePlus", ["a"], ["out"], body,
                              [helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("SquarePlus", ["x"], ["y"], domain="custom")],
                       [("x", F, [4])], [("y", F, [4])])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    model.functions.append(fn)
    g = from_onnx(model)
    assert [n.op for n in g.nodes] == ["Mul", "Add"]
    _matches_ort(model, {"x": _rand(4)})


def test_opset9_attribute_forms_of_clip_pad_slice_and_upsample_convert():
    """Forms older than opset 11 (operands as attributes) reach Kiln's canonical form
    through onnx.version_converter; the result must match onnxruntime on the original."""
    nodes = [helper.make_node("Clip", ["x"], ["c"], min=-0.5, max=0.5),
             helper.make_node("Pad", ["c"], ["p"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.25),
             helper.make_node("Slice", ["p"], ["s"], starts=[1, 0], ends=[4, 3], axes=[2, 3]),
             helper.make_node("Upsample", ["s", "scales"], ["y"], mode="nearest")]
    model = make_model(nodes, [("x", F, [1, 2, 3, 3])], [("y", F, [1, 2, 6, 6])],
                       {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=9)
    g = from_onnx(model)
    assert g.opset == 11
    assert [n.op for n in g.nodes] == ["Clip", "Pad", "Slice", "Resize"]
    _matches_ort(model, {"x": _rand(1, 2, 3, 3, seed=9)})


def test_opset10_scatter_converts_to_scatter_elements():
    """Scatter (opset 9/10, deprecated in 11) is raised to ScatterElements by
    onnx.version_converter; the result must match onnxruntime on the original."""
    nodes = [helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)]
    model = make_model(nodes, [("x", F, [2, 4]), ("u", F, [2, 2])], [("y", F, [2, 4])],
                       {"i": np.array([[3, 0], [1, 2]], np.int64)}, opset=10)
    g = from_onnx(model)
    assert g.opset == 11
    assert [n.op for n in g.nodes] == ["ScatterElements"]
    _matches_ort(model, {"x": _rand(2, 4, seed=3), "u": _rand(2, 2, seed=4)})


def test_torch_style_expand_and_slice_chains_fold():
    """Patterns the PyTorch exporter emits for ``x.expand(...)`` and ``x.view(x.shape[:1] +
    (-1,))``: ConstantOfShape/Mul/Equal/Where on shapes, and Shape/Slice/Concat."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        helper.make_node("Constant", [], ["target"], value=helper.make_tensor(
            "t", I64, [3], [4, 2, 3])),
        helper.make_node("ConstantOfShape", ["three"], ["ones"],
                         value=helper.make_tensor("o", I64, [1], [1])),
        helper.make_node("Mul", ["ones", "minus1"], ["neg"]),
        helper.make_node("Equal", ["target", "neg"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "target"], ["eshape"]),
        helper.make_node("Expand", ["x", "eshape"], ["big"]),
        helper.make_node("Shape", ["big"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["s0"]),
        helper.make_node("Concat", ["s0", "minus1"], ["vshape"], axis=0),
        helper.make_node("Reshape", ["big", "vshape"], ["y"]),
    ]
    inits = {"three": i64(3), "minus1": i64(-1), "zero": i64(0), "one": i64(1)}
    model = make_model(nodes, [("x", F, [2, 1])], [("y", F, [4, 6])], inits)
    g = from_onnx(model)
    assert [n.op for n in g.nodes] == ["Expand", "Reshape"]
    assert g.nodes[0].inputs[1].data.tolist() == [4, 2, 3]
    assert g.nodes[1].inputs[1].data.tolist() == [4, -1]
    _matches_ort(model, {"x": _rand(2, 1)})


def test_sparse_initializers_are_refused_by_name():
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [4])],
                       [("y", F, [4])])
    values = helper.make_tensor("w", F, [1], [2.0])
    indices = helper.make_tensor("w_idx", I64, [1], [1])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    with pytest.raises(UnsupportedError, match=r"sparse initializer 'w' is not supported"):
        from_onnx(model)


@pytest.mark.parametrize(("content", "hint"), [
    (b"PK\x03\x04" + b"\x00" * 40, "it is a zip archive"),
    (b"\x1c\x00\x00\x00TFL3" + b"\x00" * 40, "it is a TensorFlow Lite model"),
    (b"<\n  ir_version: 8,\n  opset_import: [\"\" : 17]\n>\n", "it is ONNX text format"),
])
def test_not_onnx_says_what_the_file_looks_like(tmp_path, content, hint):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=f"{path}: not an ONNX model.*{hint}"):
        from_onnx(path)



def _lacking_model(m_is_input: bool) -> onnx.ModelProto:
    """y = x + Cast(NonZero(m)): NonZero is a standard op Kiln does not have (its output
    shape depends on m's values)."""
    nodes = [helper.make_node("NonZero", ["m"], ["nz"], name="the_nonzero"),
             helper.make_node("Cast", ["nz"], ["d"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "d"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    inits = []
    if m_is_input:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 2]))
    else:
        m = np.array([[0, 2], [3, 4]], np.float32)
        inits.append(onnx.numpy_helper.from_array(m, "m"))
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _decoder_model() -> onnx.ModelProto:
    """ImageDecoder: a standard op Kiln does not have, on a run-time input."""
    return make_model([helper.make_node("Relu", ["x"], ["r"]),
                       helper.make_node("ImageDecoder", ["enc"], ["img"], name="dec1")],
                      [("x", F, [2]), ("enc", TensorProto.UINT8, [100])],
                      [("r", F, [2]), ("img", TensorProto.UINT8, [4, 4, 3])], opset=20)


def test_an_op_kiln_lacks_is_folded_when_its_inputs_are_constant():
    """Fold, then check: an op Kiln lacks whose inputs are constants is folded by ONNX's
    reference implementation (PyTorch's attention exports Mod of constants)."""
    from toolchain.graph.ops.registry import has_op

    assert not has_op("NonZero")
    g = from_onnx(_lacking_model(m_is_input=False))
    assert [n.op for n in g.nodes] == ["Add"]
    y = run_graph(g, {"x": np.zeros((2, 3), np.float32)})["y"]
    np.testing.assert_array_equal(y, [[0, 1, 1], [1, 0, 1]])


def test_an_op_kiln_lacks_on_run_time_values_is_refused():
    with pytest.raises(UnsupportedError, match=r"NonZero: NonZero's output shape depends on "
                                               r"the input data .* at node 'the_nonzero'"):
        from_onnx(_lacking_model(m_is_input=True))
    with pytest.raises(UnsupportedError, match=r"ImageDecoder: op not supported by Kiln — at "
                                               r"node 'dec1'"):
        from_onnx(_decoder_model())


def test_the_supported_op_list_names_only_onnx_ops():
    with pytest.raises(UnsupportedError) as info:
        from_onnx(_decoder_model())
    listed = str(info.value).split("Kiln supports these ops: ")[1].split(", ")
    assert "Conv" in listed and "Relu" in listed
    for internal in ("Fused", "LayoutConv", "LayoutPool", "LayoutTransform", "QConv"):
        assert internal not in listed
