"""Depthwise Conv / LayoutConv schedule (toolchain.schedules.generic.depthwise) on every CPU
target that runs here vs the Conv numpy reference (max relative error <= 1e-4): strides 1
and 2, symmetric, asymmetric and SAME padding, odd widths, every data/output layout."""

from __future__ import annotations

import numpy as np
import pytest

from tests.covering import params
from tests.schedules._cpu_targets import HOST_BACKENDS, RUNNABLE
from toolchain.errors import UnsupportedError
from toolchain.graph.ops.registry import get_op
from toolchain.schedules import compile_op
from toolchain.schedules.generic.depthwise import pack_dw_weight, schedule_depthwise

RTOL = 1e-4

#: (x shape, kernel, attrs)
CASES = [
    ((1, 32, 12, 12), 3, {"pads": [1] * 4}),
    ((1, 16, 13, 11), 3, {"pads": [0, 0, 1, 1], "strides": [2, 2]}),  # TF "SAME" stride 2
    ((1, 24, 9, 7), 5, {"auto_pad": "SAME_UPPER"}),
    ((2, 8, 10, 10), 3, {"strides": [2, 2], "pads": [1] * 4, "dilations": [1, 1]}),
    ((1, 6, 7, 9), 3, {}),
]


def _data(xs, k, seed=0):
    rng = np.random.default_rng(seed)
    c = xs[1]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    return x, w, b


def _ref(x, w, b, attrs):
    a = {"group": x.shape[1], "auto_pad": "NOTSET", **attrs}
    return get_op("Conv").reference([x, w, b], a)[0]


BLOCKED = [t for t in RUNNABLE if t.startswith("x86_64")]  # NCHW{b}c targets


@pytest.mark.parametrize("xs, k, attrs, target, backend", params(
    [pytest.param(*c, id=f"xs{i}-{c[1]}-attrs{i}") for i, c in enumerate(CASES)], BLOCKED,
    HOST_BACKENDS))
def test_depthwise_conv_nchw(target, xs, k, attrs, backend) -> None:
    """Every case on both blocked targets, each through one of the two backends (both meet
    every case and every target: ``tests/covering.py``)."""
    x, w, b = _data(xs, k)
    op = compile_op("Conv", target, inputs=[xs, w, b], attrs={**attrs, "group": xs[1]},
                    backend=backend)
    got = op(x)[0]
    ref = _ref(x, w, b, attrs)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert got.shape == ref.shape and err <= RTOL, (op.metadata["info"], err)
    assert op.metadata["info"]["schedule"] == "depthwise_nchwc"
    assert op.op_schedule.input_values[1].name.endswith("_dw_packed")


@pytest.mark.parametrize("target", RUNNABLE)
@pytest.mark.parametrize("xs, k, attrs, dl, ol", [
    ((1, 32, 12, 12), 3, {"pads": [1] * 4}, "NCHW16c", "NCHW16c"),
    ((1, 32, 11, 11), 3, {"pads": [0, 0, 1, 1], "strides": [2, 2]}, "NCHW16c", "NCHW16c"),
    ((1, 16, 10, 10), 3, {"pads": [1] * 4}, "NCHW8c", "NCHW8c"),
    ((1, 16, 9, 9), 3, {"pads": [1] * 4}, "NCHW16c", "NCHW"),
    ((1, 8, 6, 6), 3, {"pads": [1] * 4}, "NHWC", "NHWC"),
    ((1, 16, 8, 8), 3, {"pads": [1] * 4}, "NCHW8c", "NCHW16c"),
])
def test_depthwise_layout_conv(target, xs, k, attrs, dl, ol) -> None:
    import toolchain.graph.passes  # noqa: F401 - registers LayoutConv
    from toolchain.graph.ir import Node, Value
    from toolchain.graph.passes.layout import parse_layout_target
    from toolchain.graph.passes.layout_ops import from_layout, kernel_to_layout, to_layout

    x, w, b = _data(xs, k, seed=3)
    ref = _ref(x, w, b, attrs)
    kl = "OHWI" if dl == "NHWC" else parse_layout_target("nchw16c").kernel_layout(w.shape)
    xl = to_layout(x, dl)
    node = Node("LayoutConv", "dw", [Value("x", xl.shape, "float32"),
                                     Value.constant("w", kernel_to_layout(w, kl)),
                                     Value.constant("b", b)],
                [Value("y", to_layout(ref, ol).shape, "float32")],
                {**attrs, "group": xs[1], "data_layout": dl, "out_layout": ol,
                 "kernel_layout": kl})
    op = compile_op(node, target)
    got = from_layout(op(xl)[0], ol)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= RTOL, (op.metadata["info"], err)
    info = op.metadata["info"]
    assert info["schedule"] == "depthwise_nchwc"
    if dl == ol and dl.startswith("NCHW") and dl != "NCHW":
        assert info["direct_out"] is True
        assert 'T.block("conv_out")' not in str(op.op_schedule.schedule.mod)
    # an input already in the schedule's channel blocks is read through the padded view
    # (inlined: no copy); other layouts are copied into it once
    blocked = dl.startswith("NCHW") and dl[4:-1] == str(info["cb"])
    assert ('T.block("data_pack")' in str(op.op_schedule.schedule.mod)) != blocked


def test_inner_loop_is_a_channel_vector() -> None:
    x, w, b = _data((1, 32, 12, 12), 3)
    op = compile_op("Conv", "x86_64-avx512", inputs=[(1, 32, 12, 12), w, b],
                    attrs={"pads": [1] * 4, "group": 32})
    text = str(op.op_schedule.schedule.mod)
    assert "T.vectorized(16)" in text


def test_pack_dw_weight_layout() -> None:
    w = np.arange(2 * 16 * 9, dtype=np.float32).reshape(32, 1, 3, 3)
    p = pack_dw_weight(w, 16)
    assert p.shape == (2, 3, 3, 16)
    assert p[1, 2, 0, 5] == w[16 + 5, 0, 2, 0]


def test_nchw_target_keeps_the_generic_schedule() -> None:
    x, w, b = _data((1, 8, 6, 6), 3)
    op = compile_op("Conv", "c-generic", inputs=[x.shape, w, b], attrs={"group": 8})
    assert op.metadata["info"]["schedule"] == "generic"


def test_runtime_weights_refused() -> None:
    from toolchain.graph.ir import Node, Value

    node = Node("Conv", "dw", [Value("x", (1, 8, 6, 6), "float32"),
                               Value("w", (8, 1, 3, 3), "float32")],
                [Value("y", (1, 8, 4, 4), "float32")], {"group": 8})
    with pytest.raises(UnsupportedError, match="constant weights"):
        schedule_depthwise(node, "c-generic")
