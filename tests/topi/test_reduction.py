"""Reductions and ArgMax vs the op registry's numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand

OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0),
                                           (None, 1), ([0, 1, 2], 0)])
def test_reduce_float(op: str, axes: list[int] | None, keepdims: int) -> None:
    x = rand(3, 5, 7)
    a = None if axes is None else np.array(axes, np.int64)
    check_node(op, [x, a], {"keepdims": keepdims}, const=(1,), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", OPS)
def test_reduce_int(op: str) -> None:
    x = rand(4, 6, dtype="int32", lo=-100, hi=100)
    check_node(op, [x, np.array([1], np.int64)], {"keepdims": 0}, const=(1,))


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_bool_and_int8(op: str) -> None:
    check_node(op, [rand(3, 4, dtype="bool"), np.array([0], np.int64)], const=(1,))
    check_node(op, [rand(3, 4, dtype="int8", lo=-128, hi=127), np.array([1], np.int64)],
               const=(1,))


def test_reduce_noop_with_empty_axes() -> None:
    check_node("ReduceSum", [rand(3, 4), np.zeros((0,), np.int64)],
               {"noop_with_empty_axes": 1}, const=(1,))
    check_node("ReduceSum", [rand(3, 4), None], {"noop_with_empty_axes": 0})


def test_reduce_mean_int_truncates() -> None:
    x = np.array([[-7, 0, 0], [7, 1, 1]], np.int32)
    check_node("ReduceMean", [x, np.array([1], np.int64)], const=(1,))


@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1)])
def test_argmax(axis: int, keepdims: int, last: int) -> None:
    x = np.round(rand(4, 5, 6, lo=-2, hi=2))  # many ties
    check_node("ArgMax", [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last})


def test_argmax_1d_to_rank0_and_ints() -> None:
    check_node("ArgMax", [np.array([3, 9, 9, 1], np.int32)], {"keepdims": 0})
    check_node("ArgMax", [np.array([3, 9, 9, 1], np.int32)],
               {"keepdims": 0, "select_last_index": 1})
