"""DFT compute vs the registry's reference: real and complex input, forward, inverse,
onesided, irfft, padding and truncation by dft_length, other axes; the window functions
and MelWeightMatrix (rising, falling and degenerate filters)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand


@pytest.mark.parametrize("inverse, onesided", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("length", [None, 6, 13])
def test_dft(inverse, onesided, channels, length):
    if inverse and onesided and channels == 1:
        pytest.skip("irfft takes a complex half spectrum")
    x = rand(2, 9, 3, channels)
    ins = [x, None if length is None else np.array(length, np.int64), np.array(1, np.int64)]
    check_node("DFT", ins, {"inverse": inverse, "onesided": onesided}, const=(1, 2),
               rtol=1e-5, atol=2e-6)


def test_dft_default_axis_and_float64():
    check_node("DFT", [rand(4, 7, 2, dtype="float64")], {}, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("size, periodic, dtype", [(16, 1, 1), (9, 0, 11), (1, 0, 1)])
def test_windows(op, size, periodic, dtype):
    check_node(op, [np.array(size, np.int64)], {"periodic": periodic,
                                                "output_datatype": dtype},
               const=(0,), rtol=1e-12, atol=1e-7)


@pytest.mark.parametrize("bins, length, rate, low, high", [
    (8, 16, 8192, 0.0, 4096.0), (6, 40, 1000, 50.0, 480.0), (5, 31, 100, 30.0, 10.0)])
def test_mel_weight_matrix(bins, length, rate, low, high):
    ins = [np.array(bins, np.int64), np.array(length, np.int64), np.array(rate, np.int64),
           np.array(low, np.float32), np.array(high, np.float32)]
    check_node("MelWeightMatrix", ins, {}, const=(0, 1, 2, 3, 4), rtol=1e-12, atol=0)
