"""GlobalLpPool and MaxUnpool computes vs the registry's reference (MaxUnpool of MaxPool's
indices: 1-D, 2-D, 3-D, overlapping windows, pads, output_shape = MaxPool's input shape)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand
from toolchain.graph.ops import get_op


@pytest.mark.parametrize("shape, p", [((2, 3, 5, 4), 2), ((1, 2, 7), 1), ((1, 2, 3, 2, 3), 3)])
def test_global_lp_pool(shape, p):
    check_node("GlobalLpPool", [rand(*shape)], {"p": p}, rtol=1e-5)


@pytest.mark.parametrize("shape, attrs, out", [
    ((1, 2, 6, 6), {"kernel_shape": (2, 2), "strides": (2, 2)}, None),
    ((2, 2, 7, 5), {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 0, 1, 1)},
     (2, 2, 7, 5)),
    ((1, 3, 9), {"kernel_shape": (3,), "strides": (1,)}, None),
    ((1, 1, 4, 4, 6), {"kernel_shape": (2, 2, 3), "strides": (2, 2, 3)}, None),
    ((1, 2, 5, 5), {"kernel_shape": (2, 2), "strides": (2, 2)}, (1, 2, 5, 5)),
    ((1, 2, 8, 7), {"kernel_shape": (3, 2), "strides": (2, 3), "pads": (1, 0, 0, 1)},
     (1, 2, 8, 7)),
    ((2, 1, 9), {"kernel_shape": (4,), "strides": (1,), "pads": (2, 1)}, (2, 1, 9)),
])
def test_max_unpool(shape, attrs, out):
    y, idx = get_op("MaxPool").reference([rand(*shape)], attrs)
    ins = [y, idx] + ([] if out is None else [np.array(out, np.int64)])
    check_node("MaxUnpool", ins, attrs, const=(2,))
