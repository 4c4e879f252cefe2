"""Computes of DepthToSpace, SpaceToDepth, Trilu, Size, Range, OneHot, CumSum,
GatherElements, GatherND, ScatterElements, ScatterND and TensorScatter vs the registry's
references (constant operands as the frontend gives them; run-time index tensors)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand

I64 = np.int64


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(op, mode):
    x = rand(2, 8, 4, 6) if op == "DepthToSpace" else rand(2, 3, 4, 6)
    check_node(op, [x], {"blocksize": 2, "mode": mode})


@pytest.mark.parametrize("k", [None, 0, 2, -1])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(k, upper):
    ins = [rand(2, 4, 5)] + ([] if k is None else [np.array(k, I64)])
    check_node("Trilu", ins, {"upper": upper}, const=(1,))


def test_size_and_range():
    check_node("Size", [rand(3, 4)])
    check_node("Range", [np.array(1.5, np.float32), np.array(7.0, np.float32),
                         np.array(0.5, np.float32)], const=(0, 1, 2))
    check_node("Range", [np.array(10, I64), np.array(-3, I64), np.array(-3, I64)],
               const=(0, 1, 2))
    check_node("Range", [np.array(0.1, np.float16), np.array(3.0, np.float16),
                         np.array(0.3, np.float16)], const=(0, 1, 2))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    idx = np.array([[0, 3, -1], [5, -4, 2]], I64)  # 5 and -4 are out of range for depth 4
    values = np.array([-2.0, 7.0], np.float32)
    check_node("OneHot", [idx, np.array(4, I64), values], {"axis": axis}, const=(1,))
    check_node("OneHot", [idx.astype(np.float32), np.array(4.0, np.float32),
                          np.array([0, 1], np.int32)], {"axis": axis}, const=(1,))


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(exclusive, reverse, axis):
    attrs = {"exclusive": exclusive, "reverse": reverse}
    check_node("CumSum", [rand(3, 7), np.array(axis, I64)], attrs, const=(1,), rtol=1e-5)
    check_node("CumSum", [rand(3, 7, dtype="int32", lo=-9, hi=9), np.array(axis, np.int32)],
               attrs, const=(1,))
    check_node("CumProd", [rand(3, 7, lo=0.5, hi=1.5), np.array(axis, I64)], attrs,
               const=(1,), rtol=1e-5)
    check_node("CumProd", [rand(3, 7, dtype="int64", lo=-3, hi=3), np.array(axis, I64)],
               attrs, const=(1,))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    x = rand(3, 4, 5)
    n = x.shape[axis]
    idx = np.random.default_rng(1).integers(-n, n, (3, 2, 5) if axis != 1 else (2, 3, 5))
    idx = idx if axis != 1 else idx.transpose(1, 0, 2)
    idx = idx[:, :, :4] if axis == -1 else idx
    check_node("GatherElements", [x, idx.astype(np.int32)], {"axis": axis})


@pytest.mark.parametrize("ishape, batch_dims", [((4, 2), 0), ((2, 3, 1), 0), ((2, 3), 0),
                                                ((3, 2, 1), 1), ((3, 1), 1)])
def test_gather_nd(ishape, batch_dims):
    x = rand(3, 4, 5)
    rng = np.random.default_rng(2)
    k = ishape[-1]
    hi = np.array(x.shape[batch_dims:batch_dims + k])
    idx = (rng.integers(0, 1 << 20, ishape) % hi) - rng.integers(0, 2, ishape) * hi
    check_node("GatherND", [x, idx.astype(I64)], {"batch_dims": batch_dims})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_with_duplicates(reduction, axis):
    x = rand(4, 5)
    idx = np.array([[1, 0, 3], [1, -1, 2]], I64)  # (2, 3): duplicates along both axes
    idx = idx if axis == 1 else np.array([[1, 0, 3], [1, -4, 2]], I64)
    upd = rand(2, 3, seed=3)
    check_node("ScatterElements", [x, idx, upd], {"axis": axis, "reduction": reduction})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_rows_and_duplicates(reduction):
    x = rand(4, 3, 2)
    idx = np.array([[[1], [3]], [[1], [-4]]], I64)  # rows 1, 3, 1 (again), 0
    upd = rand(2, 2, 3, 2, seed=4)
    check_node("ScatterND", [x, idx, upd], {"reduction": reduction})
    idx2 = np.array([[0, 1], [3, 2], [0, 1]], I64)  # element-level, a duplicate
    check_node("ScatterND", [x, idx2, rand(3, 2, seed=5)], {"reduction": reduction})


def test_scatter_nd_single_row():
    check_node("ScatterND", [rand(4, 3), np.array([2], I64), rand(3, seed=6)])


@pytest.mark.parametrize("k", [0, 2, -1])
@pytest.mark.parametrize("dtype", [None, 7, 9])  # input's, INT64, BOOL
def test_eye_like(k, dtype):
    attrs = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    check_node("EyeLike", [rand(4, 6)], attrs)


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rand(5, 4, 3) if time_axis == 0 else rand(4, 5, 3)
    lens = np.array([1, 5, 0, 3], I64)
    check_node("ReverseSequence", [x, lens], {"batch_axis": batch_axis,
                                              "time_axis": time_axis})


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("cache, update, axis, starts", [
    ((2, 3, 8, 4), (2, 3, 3, 4), -2, [0, 5]), ((3, 6, 2), (3, 6, 2), 1, [4, 0, 9]),
    ((2, 5), (2, 2), 1, None),
])
def test_tensor_scatter(mode, cache, update, axis, starts):
    ins = [rand(*cache), rand(*update, seed=1)]
    if starts is not None:
        ins.append(np.array(starts, I64))
    check_node("TensorScatter", ins, {"mode": mode, "axis": axis})
