"""DFT: reference against onnxruntime, the opset-19 axis attribute, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError


@pytest.mark.parametrize("inverse, onesided, channels", [(0, 0, 1), (0, 1, 1), (0, 0, 2),
                                                         (1, 0, 2), (1, 1, 2)])
@pytest.mark.parametrize("length", [None, 12])
def test_dft_matches_onnxruntime(inverse, onesided, channels, length):
    x = data("float32", (2, 8, 3, channels))
    ins = [x, None if length is None else np.array(length, np.int64), np.array(1, np.int64)]
    check_vs_ort("DFT", ins, {"inverse": inverse, "onesided": onesided}, const=[1, 2],
                 rtol=1e-4, atol=1e-4, opset=20)


def test_dft_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(DFT\): input \[2, 8, 3\] must end in an "
                                         "axis of 1 \\(real\\) or 2"):
        infer("DFT", [data("float32", (2, 8, 3))])
    with pytest.raises(ModelError, match=r"node 'n' \(DFT\): axis -1 is the real/imaginary"):
        infer("DFT", [data("float32", (2, 8, 1)), None, np.array(-1, np.int64)], const=[2])
