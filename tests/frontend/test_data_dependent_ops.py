"""Ops whose output shape depends on the data (NonZero, Unique, Compress,
NonMaxSuppression) are refused with that reason, naming the node."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from toolchain.errors import UnsupportedError
from toolchain.frontend.onnx import from_onnx


@pytest.mark.parametrize("op, inputs", [("NonZero", ["x"]), ("Unique", ["x"]),
                                        ("Compress", ["x", "c"])])
def test_data_dependent_shape_is_refused_naming_the_node(op, inputs):
    g = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name="dd1")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [2])][:len(inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match=rf"{op}'s output shape depends on the input "
                                               r"data .*static shapes.* at node 'dd1'"):
        from_onnx(m)
