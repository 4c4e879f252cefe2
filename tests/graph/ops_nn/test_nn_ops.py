"""Pooling, MatMul/Gemm, normalisations and Softmax against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.graph.ir import Value
from toolchain.graph.ops import PatternKind, get_op

from ._helpers import check_op, make_node, rand

X = (2, 4, 5, 6)

POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1, pads=[1, 0, 1, 0]),
    dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 1], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 3], strides=[2, 3], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2], auto_pad="VALID"),
    dict(kernel_shape=[2, 3], pads=[1, 1, 0, 0], dilations=[2, 2]),
]


@pytest.mark.parametrize("attrs", POOL_CASES)
def test_maxpool_with_indices(attrs):
    check_op("MaxPool", [rand(*X)], attrs, n_out=2)


@pytest.mark.parametrize("attrs", POOL_CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_averagepool(attrs, include_pad):
    check_op("AveragePool", [rand(*X)], dict(attrs, count_include_pad=include_pad))


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 7), dict(kernel_shape=[3], strides=[2])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[3, 2, 2], strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0])),
    ((1, 3, 6, 5), dict(kernel_shape=[2, 2], storage_order=1)),
])
def test_pool_other_ranks_and_storage_order(shape, attrs):
    check_op("MaxPool", [rand(*shape)], attrs, n_out=2)
    if "storage_order" not in attrs:
        check_op("AveragePool", [rand(*shape)], attrs)


def test_maxpool_int8_and_uint8():
    x = rand(*X) * 40
    check_op("MaxPool", [x.astype(np.int8)], dict(kernel_shape=[2, 3], pads=[1, 1, 0, 0]))
    check_op("MaxPool", [np.abs(x).astype(np.uint8)], dict(kernel_shape=[3, 3], strides=[2, 2]))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 4, 5, 6), (1, 2, 3, 4, 5)])
def test_global_pool(op, shape):
    check_op(op, [rand(*shape)])


@pytest.mark.parametrize("a,b", [
    ((3,), (3,)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
    ((7, 5), (5, 3)), ((1, 6, 8), (3, 8, 2)),
])
def test_matmul(a, b):
    check_op("MatMul", [rand(*a), rand(*b, seed=1)], rtol=1e-4, atol=1e-5)


def test_matmul_int32():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    check_op("MatMul", [a, a.T.copy()])


@pytest.mark.parametrize("a,b,c,attrs", [
    ((3, 4), (5, 4), (5,), dict(transB=1, alpha=0.5, beta=2.0)),
    ((4, 3), (4, 5), (3, 1), dict(transA=1)),
    ((4, 3), (5, 4), (1,), dict(transA=1, transB=1, beta=0.0)),
    ((4, 3), (3, 5), None, {}),
    ((2, 3), (3, 4), (2, 4), dict(alpha=-1.5)),
])
def test_gemm(a, b, c, attrs):
    check_op("Gemm", [rand(*a), rand(*b, seed=1), None if c is None else rand(*c, seed=2)],
             attrs, rtol=1e-5, atol=1e-5)


def test_batchnorm():
    x = rand(*X)
    var = np.abs(rand(4, seed=4)) + 0.1
    check_op("BatchNormalization", [x, rand(4, seed=1), rand(4, seed=2), rand(4, seed=3), var],
             dict(epsilon=1e-3))
    check_op("BatchNormalization", [rand(3, 4), rand(4, seed=1), rand(4, seed=2),
                                    rand(4, seed=3), var])


@pytest.mark.parametrize("scale_shape,axis,bias", [
    ((6,), -1, True), ((5, 6), -2, False), ((4, 5, 6), 1, True), ((1, 6), -2, True),
])
def test_layernorm_with_statistics(scale_shape, axis, bias):
    check_op("LayerNormalization",
             [rand(*X), rand(*scale_shape, seed=1), rand(*scale_shape, seed=2) if bias else None],
             dict(axis=axis, epsilon=1e-4), n_out=3, rtol=1e-4, atol=1e-5)


def test_layernorm_float64_stash_float():
    x = rand(*X, dtype=np.float64)
    check_op("LayerNormalization", [x, rand(6, dtype=np.float64)], n_out=3,
             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 4, 5, 6)])
def test_instancenorm(shape):
    c = shape[1]
    check_op("InstanceNormalization", [rand(*shape), rand(c, seed=1), rand(c, seed=2)],
             dict(epsilon=1e-3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1, 3])
def test_softmax(op, axis):
    check_op(op, [rand(*X) * 4], dict(axis=axis), rtol=1e-5, atol=1e-6)


def test_softmax_float16_keeps_dtype():
    check_op("Softmax", [rand(*X, dtype=np.float16)], rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("op,kind", [
    ("Conv", PatternKind.COMPLEX_OUT_FUSABLE), ("MatMul", PatternKind.COMPLEX_OUT_FUSABLE),
    ("MaxPool", PatternKind.COMPLEX_OUT_FUSABLE), ("Softmax", PatternKind.OPAQUE),
    ("LayerNormalization", PatternKind.OPAQUE), ("BatchNormalization", PatternKind.INJECTIVE),
    ("Reshape", PatternKind.INJECTIVE), ("Resize", PatternKind.INJECTIVE),
])
def test_pattern_kinds(op, kind):
    assert get_op(op).pattern == kind


def test_flops():
    a, b = rand(2, 3, 4), rand(4, 5)
    node = make_node("MatMul", [a, b], {})
    node = node.replace(outputs=(Value("y", (2, 3, 5), "float32"),))
    assert get_op("MatMul").flops_of(node) == 2 * 2 * 3 * 5 * 4
    x = rand(1, 2, 6, 6)
    pool = make_node("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]})
    pool = pool.replace(outputs=(Value("y", (1, 2, 3, 3), "float32"),))
    assert get_op("MaxPool").flops_of(pool) == 18 * 4
    gemm = make_node("Gemm", [rand(4, 3), rand(4, 5)], {"transA": 1})
    gemm = gemm.replace(outputs=(Value("y", (3, 5), "float32"),))
    assert get_op("Gemm").flops_of(gemm) == 2 * 3 * 5 * 4


def _minimal_inputs(op: str, dt: str) -> tuple[list[np.ndarray], dict]:
    def z(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=dt)

    table = {
        "Conv": ([z(1, 1, 3, 3), z(1, 1, 1, 1)], {}),
        "ConvTranspose": ([z(1, 1, 3, 3), z(1, 1, 1, 1)], {}),
        "MatMul": ([z(2, 2), z(2, 2)], {}),
        "Gemm": ([z(2, 2), z(2, 2)], {}),
        "MaxPool": ([z(1, 1, 2, 2)], {"kernel_shape": [1, 1]}),
        "AveragePool": ([z(1, 1, 2, 2)], {"kernel_shape": [1, 1]}),
        "GlobalAveragePool": ([z(1, 1, 2, 2)], {}),
        "GlobalMaxPool": ([z(1, 1, 2, 2)], {}),
        "Softmax": ([z(2, 2)], {}),
        "LogSoftmax": ([z(2, 2)], {}),
        "InstanceNormalization": ([z(1, 2, 2), z(2), z(2)], {}),
        "LayerNormalization": ([z(2, 2), z(2)], {}),
        "BatchNormalization": ([z(1, 2)] + [z(2)] * 4, {}),
    }
    return table[op]


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose", "MatMul", "Gemm", "MaxPool",
                                "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Softmax",
                                "LogSoftmax", "InstanceNormalization", "LayerNormalization",
                                "BatchNormalization"])
def test_accepted_dtypes_match_the_onnx_schema(op):
    import onnx.defs

    from toolchain.errors import ModelError
    from toolchain.graph.ir import DTYPES

    schema = onnx.defs.get_schema(op, 28)
    param = schema.inputs[0].type_str
    allowed = next(t.allowed_type_strs for t in schema.type_constraints
                   if t.type_param_str == param)
    for dt in DTYPES:
        onnx_name = {"float32": "float", "float64": "double"}.get(dt, dt)
        inputs, attrs = _minimal_inputs(op, dt)
        try:
            get_op(op).infer(make_node(op, inputs, attrs))
            accepted = True
        except ModelError as err:
            assert "dtype" in str(err)
            accepted = False
        assert accepted == (f"tensor({onnx_name})" in allowed), (op, dt)
