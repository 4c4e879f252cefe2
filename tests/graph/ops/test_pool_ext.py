"""GlobalLpPool and MaxUnpool: references against onnxruntime (MaxUnpool of MaxPool's
indices, with and without output_shape), errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError
from toolchain.graph.ops import get_op


@pytest.mark.parametrize("shape, p", [((2, 3, 5, 4), 2), ((1, 2, 7), 1), ((1, 2, 3, 2, 4), 3)])
def test_global_lp_pool_matches_onnxruntime(shape, p):
    check_vs_ort("GlobalLpPool", [data("float32", shape)], {"p": p}, rtol=1e-5, opset=18)


def pooled(shape, attrs, seed=0):
    """``(Y, Indices)`` of MaxPool over random data (Kiln's reference)."""
    x = data("float32", shape, seed=seed)
    return get_op("MaxPool").reference([x], attrs)


@pytest.mark.parametrize("shape, attrs", [
    ((1, 2, 6, 6), {"kernel_shape": (2, 2), "strides": (2, 2)}),
    ((2, 3, 7, 5), {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ((1, 2, 9), {"kernel_shape": (3,), "strides": (1,)}),  # overlapping windows
])
def test_max_unpool_of_max_pool_matches_onnxruntime(shape, attrs):
    y, idx = pooled(shape, attrs)
    check_vs_ort("MaxUnpool", [y, idx], attrs, opset=11)


@pytest.mark.parametrize("shape, attrs", [
    ((1, 2, 5, 5), {"kernel_shape": (2, 2), "strides": (2, 2)}),
    ((2, 1, 8, 7), {"kernel_shape": (3, 2), "strides": (2, 3), "pads": (1, 0, 0, 1)}),
])
def test_max_unpool_to_max_pool_input_shape_matches_onnxruntime(shape, attrs):
    """output_shape = MaxPool's input shape (pooling dropped its last rows/columns)."""
    y, idx = pooled(shape, attrs)
    out = np.array(shape, np.int64)
    assert infer("MaxUnpool", [y, idx, out], attrs, const=[2])[0].shape == shape
    check_vs_ort("MaxUnpool", [y, idx, out], attrs, const=[2], opset=11)


def test_pool_ext_errors():
    x = data("float32", (1, 2, 3, 3))
    i = np.zeros((1, 2, 3, 3), np.int64)
    with pytest.raises(ModelError, match=r"node 'n' \(MaxUnpool\): output_shape \[1, 3, 5, 5\]"
                                         r" must have X's rank 4, its N and C \[1, 2\]"):
        infer("MaxUnpool", [x, i, np.array([1, 3, 5, 5])], {"kernel_shape": (2, 2),
                                                              "strides": (2, 2)}, const=[2])
    with pytest.raises(ModelError, match=r"node 'n' \(MaxUnpool\): input 2 \(output_shape, "
                                         r"value 'in2'\) must be known at compile time"):
        infer("MaxUnpool", [x, i, np.array([1, 2, 6, 6])], {"kernel_shape": (2, 2)})
    with pytest.raises(ModelError, match=r"node 'n' \(MaxUnpool\): I \[1, 2, 3\] must have "
                                         r"X's shape"):
        infer("MaxUnpool", [x, i[..., 0]], {"kernel_shape": (2, 2)})
    with pytest.raises(ModelError, match=r"node 'n' \(GlobalLpPool\): X \[2, 3\] must have "
                                         r"rank >= 3"):
        infer("GlobalLpPool", [data("float32", (2, 3))])
