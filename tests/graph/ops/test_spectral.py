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


@pytest.mark.parametrize("channels, onesided, window, length", [
    (1, 1, None, 8), (1, 0, 6, None), (2, 0, 8, 8), (1, 1, 5, None)])
def test_stft_matches_onnxruntime(channels, onesided, window, length):
    x = data("float32", (2, 20, channels))
    ins = [x, np.array(3, np.int64), None if window is None else data("float32", (window,)),
           None if length is None else np.array(length, np.int64)]
    check_vs_ort("STFT", ins, {"onesided": onesided}, const=[1, 3], rtol=1e-4, atol=1e-4,
                 opset=17)


def test_stft_errors():
    x = data("float32", (1, 16, 1))
    with pytest.raises(ModelError, match=r"node 'n' \(STFT\): the window has 6 samples but "
                                         r"frame_length is 8"):
        infer("STFT", [x, np.array(2, np.int64), data("float32", (6,)), np.array(8, np.int64)],
              const=[1, 3])
    with pytest.raises(ModelError, match=r"node 'n' \(STFT\): frame length 20 must be from 1 "
                                         r"to the signal length 16"):
        infer("STFT", [x, np.array(2, np.int64), None, np.array(20, np.int64)], const=[1, 3])
