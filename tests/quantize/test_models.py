"""The MLPerf-Tiny-style zoo models quantized (by ``kiln quantize`` and by onnxruntime),
rewritten into integer ops, and checked against onnxruntime and the built C kernels."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

from tests.quantize.helpers import (
    MLPERF_TINY,
    compare_ops,
    compare_steps,
    float_model,
    ort_quantize,
    random_inputs,
)
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops, unconverted
from toolchain.graph.reference import run_graph
from toolchain.quantize.ptq import quantize_model
from toolchain.schedules import compile_op

INT_OPS = ("QConv", "QGemm", "QAdd", "QAvgPool")
#: ops of these models that have no integer form and stay float
FLOAT_OK = {"Softmax", "Sub", "Pow", "ReduceMean"}
#: the layers' kernels built as the model's c-generic bundle is built on this host
#: (``toolchain.bundle.host``: ``-march=native`` where the target names no ``arch``): the
#: kernels' 64-byte vector types are then the host's registers. Without it gcc lowers
#: them to 16-byte operations in 4x its time (a ResNet-8 QConv layer 0.5 CPU s, 0.13 with
#: it); the portable build of the int8 kernels is ``test_kernels.py``'s
HOST_MARCH = "native"


@functools.cache
def _kiln_qdq(name: str) -> onnx.ModelProto:
    from toolchain.zoo import ZOO

    model = ZOO[name].build()
    g = from_onnx(model)
    rng = np.random.default_rng(1234)
    cal = {v.name: rng.standard_normal((8, *v.shape)).astype(np.float32) for v in g.inputs}
    qdq, result = quantize_model(model, cal)
    assert set(result.float_ops) <= FLOAT_OK
    return qdq


@functools.cache
def _ort_qdq(name: str, activation: str, tmp: str) -> onnx.ModelProto:
    fm = float_model(name)
    return ort_quantize(fm, random_inputs(from_onnx(fm), 8, 0), f"{tmp}/{name}_{activation}.onnx",
                        activation)


def _check_against_ort(qdq: onnx.ModelProto) -> Graph:
    onnx.checker.check_model(qdq, full_check=True)
    g = quantize_ops(from_onnx(qdq))
    ops = {n.op for n in g.nodes}
    assert ops & set(INT_OPS), "nothing was rewritten into integer ops"
    assert not ({"Conv", "Gemm", "MatMul", "AveragePool", "Add"} & ops - FLOAT_OK)
    assert {n.op for n in unconverted(g)} <= FLOAT_OK
    inp = random_inputs(g, 1, 77)[0]
    stats = compare_ops(qdq, g, inp)
    for op, (_, _, worst) in stats.items():
        # each integer op, fed onnxruntime's own int8 inputs, is within one step of it
        assert worst <= 1, f"{op}: {worst} steps off onnxruntime"
    total = sum(s[0] for s in stats.values())
    equal = sum(s[1] for s in stats.values())
    assert equal / total >= 0.99, f"only {equal}/{total} outputs equal to onnxruntime's"
    total, equal, worst = compare_steps(qdq, g, inp)
    # whole model: one-step differences compound through up to 28 layers (docs/int8.md has
    # the measured figures); this only guards against a gross error
    assert worst <= 24, f"model outputs {worst} steps off onnxruntime ({equal}/{total} equal)"
    return g


@pytest.mark.parametrize("name", MLPERF_TINY)
def test_kiln_quantize_matches_onnxruntime(name: str) -> None:
    _check_against_ort(_kiln_qdq(name))


@pytest.mark.parametrize("name,activation", [(n, "QInt8") for n in MLPERF_TINY] +
                         [("ds_cnn", "QUInt8"), ("resnet8", "QUInt8")])
def test_ort_quantize_static_matches_onnxruntime(name: str, activation: str,
                                                 tmp_path_factory: pytest.TempPathFactory
                                                 ) -> None:
    tmp = str(tmp_path_factory.mktemp("ort"))
    qdq = _ort_qdq(name, activation, tmp)
    g = _check_against_ort(qdq)
    want = "uint8" if activation == "QUInt8" else "int8"
    assert all(n.outputs[0].dtype == want for n in g.nodes if n.op in INT_OPS)


def test_float_model_accuracy_kept() -> None:
    """The integer graph stays close to the float model (the quantization is sane)."""
    from toolchain.zoo import ZOO

    model = ZOO["resnet8"].build()
    fg = from_onnx(model)
    g = quantize_ops(from_onnx(_kiln_qdq("resnet8")))
    inp = random_inputs(fg, 1, 9)[0]
    want, got = run_graph(fg, inp)["logits"], run_graph(g, inp)["logits"]
    assert np.abs(want - got).max() < 0.1 * np.abs(want).max()


def anonymous(node: Node) -> Node:
    """``node`` with its own and its values' names replaced by positional ones (``k``,
    ``i0``, ``o0`` ...): its kernel's C source then depends only on what it computes, so
    two layers of one shape share one build of the content-keyed build cache (MobileNetV1's
    repeated blocks: 8 of its 29 kernels, DS-CNN's: 6 of 11). Each layer still runs with
    its own weights, which the kernel takes as arguments."""
    def named(v: Value | None, name: str) -> Value | None:
        return None if v is None else Value(name, v.shape, v.dtype, v.data)

    return node.replace(name="k",
                        inputs=[named(v, f"i{i}") for i, v in enumerate(node.inputs)],
                        outputs=[named(v, f"o{i}") for i, v in enumerate(node.outputs)])


def _built_vs_reference(name: str) -> None:
    g = quantize_ops(from_onnx(_kiln_qdq(name)))
    inp = random_inputs(g, 1, 3)[0]
    values = [v for n in g.nodes if n.op in INT_OPS for v in n.inputs
              if v is not None and v.data is None]
    env = run_graph(g.replace(outputs=list(dict.fromkeys(values))), inp)
    seen = set()
    for n in g.nodes:
        if n.op not in INT_OPS:
            continue
        key = (n.op, tuple(v.shape for v in n.inputs if v is not None), repr(sorted(
            (k, v) for k, v in n.attrs.items())))
        if key in seen and n.op != "QConv":
            continue
        seen.add(key)
        args = [v.data if v.data is not None else env[v.name] for v in n.inputs]
        want = get_op(n.op).reference(args, n.attrs)[0]
        got = compile_op(anonymous(n), "c-generic", march=HOST_MARCH)(
            *[env[v.name] for v in n.inputs if v.data is None])[0]
        np.testing.assert_array_equal(got, want, err_msg=f"{n.describe()}")


@pytest.mark.parametrize("name", MLPERF_TINY)
def test_built_kernels_bit_exact(name: str) -> None:
    _built_vs_reference(name)
