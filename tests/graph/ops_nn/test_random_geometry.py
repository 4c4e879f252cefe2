"""Random convolution/pooling/slice geometries against onnxruntime (hypothesis, derandomised
so that every run checks the same examples)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolchain.errors import ModelError
from toolchain.graph.ops import get_op

from ._helpers import check_op, make_node, rand

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def conv_case(draw):
    group = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, 2))
    mg = draw(st.integers(1, 2))
    k = [draw(st.integers(1, 4)) for _ in range(2)]
    d = [draw(st.integers(1, 2)) for _ in range(2)]
    s = [draw(st.integers(1, 3)) for _ in range(2)]
    auto_pad = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    size = [(kk - 1) * dd + 1 + draw(st.integers(0, 5)) for kk, dd in zip(k, d, strict=True)]
    if auto_pad.startswith("SAME"):
        d = [1, 1]  # onnxruntime refuses dilations with SAME padding
    attrs = dict(group=group, dilations=d, strides=s, auto_pad=auto_pad)
    if auto_pad == "NOTSET":
        attrs["pads"] = pads
    return (1, group * cg, *size), (group * mg, cg, *k), attrs


@SETTINGS
@given(conv_case(), st.booleans())
def test_random_conv(case, bias):
    xs, ws, attrs = case
    b = rand(ws[0], seed=2) if bias else None
    check_op("Conv", [rand(*xs), rand(*ws, seed=1), b], attrs, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(conv_case())
def test_random_conv_transpose(case):
    xs, ws, attrs = case
    # ConvTranspose's W is (C, M/group, *K): reuse the geometry with channels swapped
    c = xs[1]
    wt = (c, ws[0] // attrs["group"], *ws[2:])
    if attrs["auto_pad"] != "NOTSET" and any(
            (k - 1) * d + 1 < st_ for k, d, st_ in zip(wt[2:], attrs["dilations"],
                                                        attrs["strides"], strict=True)):
        # window narrower than the stride: SAME needs negative padding, which onnxruntime
        # clamps to 0 (see test_conv_transpose_same_kernel_smaller_than_stride)
        attrs["auto_pad"] = "NOTSET"
    x, w = rand(*xs), rand(*wt, seed=1)
    pads = attrs.get("pads", [0] * 4)
    full = [st_ * (n - 1) + (k - 1) * d + 1 for st_, n, k, d in
            zip(attrs["strides"], xs[2:], wt[2:], attrs["dilations"], strict=True)]
    if any(f - pads[i] - pads[i + 2] <= 0 for i, f in enumerate(full)):
        with pytest.raises(ModelError, match="is empty"):
            get_op("ConvTranspose").infer(make_node("ConvTranspose", [x, w], attrs))
        return
    check_op("ConvTranspose", [x, w], attrs, rtol=1e-4, atol=1e-4)


@st.composite
def pool_case(draw):
    k = [draw(st.integers(1, 3)) for _ in range(2)]
    d = [draw(st.integers(1, 2)) for _ in range(2)]
    s = [draw(st.integers(1, 3)) for _ in range(2)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad.startswith("SAME"):
        # onnxruntime pads dilated SAME pooling as if undilated (the spec's output is
        # ceil(in / stride), which Kiln follows): compare only undilated SAME windows
        d = [1, 1]
    size = [(kk - 1) * dd + 1 + draw(st.integers(0, 4)) for kk, dd in zip(k, d, strict=True)]
    attrs = dict(kernel_shape=k, dilations=d, strides=s, auto_pad=auto_pad)
    if auto_pad == "NOTSET":
        # onnxruntime wants pads < kernel_shape (Kiln: < the dilated window)
        attrs["pads"] = [draw(st.integers(0, kk - 1)) for kk in k * 2]
        attrs["ceil_mode"] = draw(st.integers(0, 1))
    return (1, 2, *size), attrs


@SETTINGS
@given(pool_case(), st.integers(0, 1))
def test_random_pooling(case, include_pad):
    xs, attrs = case
    x = rand(*xs)
    check_op("MaxPool", [x], attrs, n_out=2)
    if attrs["auto_pad"] in ("NOTSET", "VALID") or include_pad == 0:
        check_op("AveragePool", [x], dict(attrs, count_include_pad=include_pad))


@SETTINGS
@given(st.lists(st.tuples(st.integers(-8, 8), st.integers(-8, 8), st.sampled_from(
    [-3, -2, -1, 1, 2, 3])), min_size=1, max_size=3))
def test_random_slice(spec):
    x = rand(4, 5, 6)
    starts, ends, steps = (np.array(v, np.int64) for v in zip(*spec, strict=True))
    axes = np.arange(len(spec), dtype=np.int64)
    check_op("Slice", [x, starts, ends, axes, steps], const=[1, 2, 3, 4])
