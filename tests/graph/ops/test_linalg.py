"""Det: reference against onnxruntime (batches, pivoting, singular matrices), errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 1, 1)])
def test_det_matches_onnxruntime(dtype, shape):
    x = data(dtype, shape)
    check_vs_ort("Det", [x], rtol=1e-5, atol=1e-6, opset=22)


def test_det_of_singular_and_pivot_needing_matrices():
    x = np.array([[[0.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [2.0, 4.0]]], np.float32)
    check_vs_ort("Det", [x], rtol=1e-6, atol=1e-6, opset=22)


def test_det_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(Det\): input X \[2, 3\] must end in a "
                                         r"square matrix"):
        infer("Det", [data("float32", (2, 3))])
