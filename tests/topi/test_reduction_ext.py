"""ReduceProd/L1/L2/SumSquare/LogSum/LogSumExp, ArgMin and Hardmax computes vs the
registry's references (axes sets, keepdims, integers, -inf rows, ties)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand

OPS = ["ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
       "ReduceLogSumExp"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, 2], 0), ([-1], 0), (None, 1),
                                            (None, 0)])
def test_float_reductions(op, axes, keepdims):
    x = rand(3, 4, 5, lo=0.5 if op == "ReduceLogSum" else -1.5, hi=1.5)
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    check_node(op, ins, {"keepdims": keepdims}, const=(1,), rtol=2e-5, atol=1e-6)


def test_log_sum_exp_is_max_shifted_and_handles_minus_inf_rows():
    x = np.array([[100.0, 101.0, 99.0], [-np.inf, -np.inf, -np.inf], [-1000.0, 0.0, np.inf]],
                 np.float32)
    check_node("ReduceLogSumExp", [x, np.array([1], np.int64)], {}, const=(1,), rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_reductions(op, dtype):
    x = rand(3, 6, dtype=dtype, lo=-4, hi=4)
    check_node(op, [x, np.array([1], np.int64)], {"keepdims": 0}, const=(1,))


def test_noop_with_empty_axes():
    check_node("ReduceL2", [rand(2, 3), np.array([], np.int64)],
               {"noop_with_empty_axes": 1}, const=(1,))


@pytest.mark.parametrize("axis, keepdims, last", [(0, 1, 0), (1, 0, 1), (-1, 1, 1)])
def test_argmin_ties(axis, keepdims, last):
    x = np.round(rand(4, 5, lo=-2, hi=2))  # many ties
    check_node("ArgMin", [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax_first_maximum(axis):
    x = np.round(rand(3, 4, 5, lo=-2, hi=2))
    check_node("Hardmax", [x], {"axis": axis})


@pytest.mark.parametrize("axis, k, largest", [(-1, 3, 1), (0, 2, 0), (1, 4, 1), (1, 1, 0)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_topk_values_indices_ties(axis, k, largest, dtype):
    x = np.round(rand(4, 6, lo=0, hi=4)).astype(dtype)  # many ties: lower index first
    check_node("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest},
               const=(1,), n_out=2)
