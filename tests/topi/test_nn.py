"""Dense/MatMul/Gemm, pooling, softmax and normalisations vs the op registry."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand, run_te
from toolchain import te
from toolchain.topi.nn import dense

# -- matrix products ----------------------------------------------------------------------


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 4)), ((5,), (5, 3)), ((3, 5), (5,)),
                                   ((5,), (5,)), ((2, 1, 3, 5), (4, 5, 2)), ((2, 3, 4), (4, 7)),
                                   ((7, 9), (1, 9, 6))])
def test_matmul_broadcasting(sa: tuple, sb: tuple) -> None:
    check_node("MatMul", [rand(*sa), rand(*sb, seed=1)], rtol=1e-5, atol=1e-5)


def test_matmul_int() -> None:
    check_node("MatMul", [rand(3, 4, dtype="int32", lo=-9, hi=9),
                          rand(4, 2, dtype="int32", lo=-9, hi=9, seed=1)])


@pytest.mark.parametrize("attrs,cshape", [
    ({}, None), ({}, (4,)), ({"transA": 1}, (3, 1)), ({"transB": 1, "alpha": 0.5}, (3, 4)),
    ({"transA": 1, "transB": 1, "alpha": 2.0, "beta": -1.5}, (1,)), ({"beta": 0.0}, (3, 4)),
])
def test_gemm(attrs: dict, cshape: tuple | None) -> None:
    a = rand(5, 3) if attrs.get("transA") else rand(3, 5)
    b = rand(4, 5, seed=1) if attrs.get("transB") else rand(5, 4, seed=1)
    c = None if cshape is None else rand(*cshape, seed=2)
    check_node("Gemm", [a, b, c], attrs, rtol=1e-5, atol=1e-5)


def test_dense_and_batch_matmul() -> None:
    x, w = rand(6, 10), rand(7, 10, seed=1)
    a, b = te.placeholder(x.shape, name="a"), te.placeholder(w.shape, name="b")
    (got,) = run_te([a, b], [dense.dense(a, b)], [x, w])
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-5, atol=1e-5)
    p, q = rand(3, 4, 5), rand(1, 6, 5, seed=2)
    a, b = te.placeholder(p.shape, name="a"), te.placeholder(q.shape, name="b")
    (got,) = run_te([a, b], [dense.batch_matmul(a, b, transpose_b=True)], [p, q])
    np.testing.assert_allclose(got, p @ q.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    pt = np.ascontiguousarray(p.transpose(0, 2, 1))  # [B, K, M]
    r = rand(3, 5, 2, seed=3)
    a, b = te.placeholder(pt.shape, name="a"), te.placeholder(r.shape, name="b")
    (got,) = run_te([a, b], [dense.batch_matmul(a, b, transpose_a=True)], [pt, r])
    np.testing.assert_allclose(got, p @ r, rtol=1e-5, atol=1e-5)


# -- pooling ------------------------------------------------------------------------------

POOLS = [
    {"kernel_shape": (3, 3)},
    {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
    {"kernel_shape": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 1), "ceil_mode": 1},
    {"kernel_shape": (2, 2), "strides": (2, 2), "ceil_mode": 1},
    {"kernel_shape": (2, 3), "dilations": (2, 1), "pads": (1, 1, 0, 1)},
    {"kernel_shape": (3, 3), "strides": (2, 2), "auto_pad": "SAME_UPPER"},
    {"kernel_shape": (2, 2), "auto_pad": "SAME_LOWER"},
]


@pytest.mark.parametrize("attrs", POOLS)
def test_maxpool(attrs: dict) -> None:
    check_node("MaxPool", [rand(2, 3, 7, 6)], attrs)


@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_avgpool(attrs: dict, include_pad: int) -> None:
    check_node("AveragePool", [rand(2, 3, 7, 6)], attrs | {"count_include_pad": include_pad},
               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_1d_and_3d(op: str) -> None:
    check_node(op, [rand(1, 2, 9)], {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1)})
    check_node(op, [rand(1, 2, 4, 5, 3)], {"kernel_shape": (2, 2, 2), "pads": (0, 1, 1) * 2})


def test_maxpool_int8() -> None:
    check_node("MaxPool", [rand(1, 2, 5, 5, dtype="int8", lo=-128, hi=127)],
               {"kernel_shape": (2, 2), "pads": (1, 1, 1, 1)})


@pytest.mark.parametrize("attrs", POOLS[:5])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(attrs: dict, storage_order: int) -> None:
    x = np.round(rand(2, 3, 7, 6))  # ties: the first maximum in window order wins
    check_node("MaxPool", [x], attrs | {"storage_order": storage_order}, n_out=2)


def test_maxpool_indices_3d() -> None:
    check_node("MaxPool", [np.round(rand(1, 2, 4, 5, 3))],
               {"kernel_shape": (2, 2, 2), "pads": (1, 0, 1) * 2, "storage_order": 1},
               n_out=2)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 4, 7)])
def test_global_pools(op: str, shape: tuple) -> None:
    check_node(op, [rand(*shape)], rtol=1e-5, atol=1e-6)


# -- softmax and norms --------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 5, 4), 1), ((4, 3), 0), ((9,), 0)])
def test_softmax(op: str, shape: tuple, axis: int) -> None:
    check_node(op, [rand(*shape, lo=-30, hi=30)], {"axis": axis}, rtol=1e-5, atol=1e-6)


def test_softmax_large_values_are_stable() -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.5, -1e4]], np.float32)
    got = check_node("Softmax", [x], {"axis": 1})[0]
    assert np.isfinite(got).all()
    check_node("LogSoftmax", [x], {"axis": 1}, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("axis,sshape,bshape", [(-1, (6,), (6,)), (1, (4, 6), None),
                                                (0, (1, 4, 1), (3, 4, 6))])
def test_layer_norm(axis: int, sshape: tuple, bshape: tuple | None) -> None:
    x = rand(3, 4, 6, lo=-5, hi=5)
    b = None if bshape is None else rand(*bshape, seed=2)
    check_node("LayerNormalization", [x, rand(*sshape, seed=1), b], {"axis": axis},
               n_out=3, rtol=1e-5, atol=2e-5)


def test_layer_norm_stash_float64() -> None:
    check_node("LayerNormalization", [rand(2, 5), rand(5, seed=1)], {"stash_type": 11},
               n_out=3, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 2, 7)])
def test_instance_norm(shape: tuple) -> None:
    c = shape[1]
    check_node("InstanceNormalization", [rand(*shape), rand(c, seed=1), rand(c, seed=2)],
               {"epsilon": 1e-3}, rtol=1e-5, atol=2e-5)


def test_batch_norm() -> None:
    var = rand(3, seed=4, lo=0.1, hi=2.0)
    check_node("BatchNormalization", [rand(2, 3, 4, 5), rand(3, seed=1), rand(3, seed=2),
                                      rand(3, seed=3), var], {"epsilon": 1e-3},
               rtol=1e-5, atol=1e-5)
