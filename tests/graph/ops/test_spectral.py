"""DFT, STFT, the windows and MelWeightMatrix: reference against onnxruntime, the opset-19
axis attribute, errors."""

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


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size, dtype", [(10, 1), (7, 11), (1, 1)])
def test_windows_match_onnxruntime(op, periodic, size, dtype):
    check_vs_ort(op, [np.array(size, np.int64)], {"periodic": periodic,
                                                  "output_datatype": dtype},
                 const=[0], rtol=1e-6, atol=1e-7, opset=17)


@pytest.mark.parametrize("bins, length, rate, low, high", [
    (8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 8000.0), (5, 31, 100, 3.0, 44.0)])
def test_mel_weight_matrix_matches_onnxruntime(bins, length, rate, low, high):
    ins = [np.array(bins, np.int64), np.array(length, np.int64), np.array(rate, np.int64),
           np.array(low, np.float32), np.array(high, np.float32)]
    check_vs_ort("MelWeightMatrix", ins, {}, const=[0, 1, 2, 3, 4], rtol=1e-6, atol=1e-7,
                 opset=17)


def test_window_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(HannWindow\): input 0 \(size, value "
                                         r"'in0'\) must be known at compile time"):
        infer("HannWindow", [np.array(8, np.int64)])
    with pytest.raises(ModelError, match=r"node 'n' \(HammingWindow\): size 0 must be >= 1"):
        infer("HammingWindow", [np.array(0, np.int64)], const=[0])
    with pytest.raises(ModelError, match=r"node 'n' \(MelWeightMatrix\): input 4 "
                                         r"\(upper_edge_hertz, value 'in4'\) must be known"):
        infer("MelWeightMatrix", [np.array(8), np.array(16), np.array(8000),
                                  np.array(0.0, np.float32), np.array(4e3, np.float32)],
              const=[0, 1, 2, 3])
