"""``quantize_model(..., integer_io=True)``: int8 graph inputs and outputs, same integers as
the float-I/O QDQ model, float readers of an input or output still served."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.quantize.ptq import quantize_model
from toolchain.zoo import ZOO


def _cal(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {v.name: rng.standard_normal((4, *v.shape)).astype(np.float32)
            for v in from_onnx(model).inputs}


def _io(model: onnx.ModelProto) -> dict[str, tuple[float, int]]:
    out = {}
    for p in model.metadata_props:
        assert p.key.startswith("kiln.io.")
        scale, zp, dtype = p.value.split()
        assert dtype == "int8"
        out[p.key[len("kiln.io."):]] = (float(scale), int(zp))
    return out


@pytest.mark.parametrize("name", ["ds_cnn", "autoencoder"])
def test_integer_io_same_integers_as_float_io(name: str) -> None:
    model = ZOO[name].build()
    cal = _cal(model)
    qf, _ = quantize_model(model, cal)
    qi, result = quantize_model(model, cal, integer_io=True)
    onnx.checker.check_model(qi, full_check=True)
    io = _io(qi)
    assert io == {k: v[:2] for k, v in result.io.items()}
    gi, gf = quantize_ops(from_onnx(qi)), quantize_ops(from_onnx(qf))
    (xname,) = [v.name for v in gf.inputs]
    assert xname in io and [v.dtype for v in gi.inputs] == ["int8"]
    scale, zp = io[xname]
    x = np.random.default_rng(9).standard_normal(gf.inputs[0].shape).astype(np.float32)
    xq = np.clip(np.rint(x / np.float32(scale)) + zp, -128, 127).astype(np.int8)
    x_back = (xq.astype(np.int64) - zp).astype(np.float32) * np.float32(scale)
    want = run_graph(gf, {xname: x_back})
    got = run_graph(gi, {xname: xq})
    assert set(got) == set(want)
    for k, w in want.items():
        if k in io:  # an integer output: its dequantized value is the float model's
            s, z = io[k]
            assert got[k].dtype == np.int8
            deq = (got[k].astype(np.int64) - z).astype(np.float32) * np.float32(s)
            np.testing.assert_array_equal(deq, w)
        else:  # computed in float from dequantized values (Softmax, anomaly score)
            np.testing.assert_allclose(got[k], w, rtol=1e-6, atol=1e-7)
    integer = [k for k in io if k != xname]
    assert integer, "no output became an integer tensor"


def test_float_io_unchanged_by_default() -> None:
    model = ZOO["ds_cnn"].build()
    q, result = quantize_model(model, _cal(model))
    assert result.io == {} and not q.metadata_props
    assert [i.type.tensor_type.elem_type for i in q.graph.input] == [onnx.TensorProto.FLOAT]


def test_float_op_reads_the_float_graph_input() -> None:
    """The autoencoder's score ``mean((y - x)^2)`` reads ``x`` itself, not ``DQ(Q(x))``: exact,
    and the int8 copy of ``x`` dies after the first dense layer."""
    model = ZOO["autoencoder"].build(batch=1)
    q, _ = quantize_model(model, _cal(model))
    (sub,) = [n for n in q.graph.node if n.op_type == "Sub"]
    assert "input" in sub.input
    (quant,) = [n for n in q.graph.node if n.input and n.input[0] == "input"
                and n.op_type == "QuantizeLinear"]
    readers = [n for n in q.graph.node if quant.output[0] in n.input]
    assert [n.op_type for n in readers] == ["DequantizeLinear"]
