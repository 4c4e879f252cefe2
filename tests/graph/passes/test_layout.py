"""transform_layout: preferred layouts per target, transforms only where layouts disagree,
weights pre-transformed at compile time, external layout kept."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, ops
from toolchain.errors import OptionError
from toolchain.graph.passes import parse_layout_target, transform_layout
from toolchain.graph.passes.layout import LayoutTarget, layout_for_target
from toolchain.graph.passes.layout_ops import (
    from_layout,
    kernel_from_layout,
    kernel_to_layout,
    layout_shape,
    to_layout,
)
from toolchain.graph.reference import run_node


def _conv(b, x, cin, cout, name, group=1, k=3):
    return b.op("Conv", [x, b.weight(f"{name}.w", (cout, cin // group, k, k)),
                         b.weight(f"{name}.b", (cout,))],
                {"pads": (k // 2,) * 4, "group": group}, name=name)


def _transforms(g):
    return [(n.attrs["src_layout"], n.attrs["dst_layout"]) for n in g.nodes
            if n.op == "LayoutTransform"]


def test_conv_relu_conv_needs_transforms_only_at_the_borders():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    h = b.op("Relu", [_conv(b, x, 3, 16, "c1")], name="relu")
    y = _conv(b, h, 16, 16, "c2")
    g = b.graph([y])
    out = transform_layout(g, "nchw8c")
    assert ops(out) == ["LayoutTransform", "LayoutConv", "Relu", "LayoutConv", "LayoutTransform"]
    assert _transforms(out) == [("NCHW", "NCHW3c"), ("NCHW8c", "NCHW")]
    assert out.nodes[2].outputs[0].shape == (1, 2, 8, 8, 8)  # relu runs blocked
    assert out.inputs == g.inputs and out.outputs[0] is y  # external layout kept
    assert_same_results(g, out)


def test_weights_are_pretransformed_constants_not_runtime_transforms():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 6, 6))
    y = _conv(b, x, 8, 16, "conv")
    g = b.graph([y])
    for target, k_layout, shape in (("nchw8c", "OIHW8i8o", (2, 1, 3, 3, 8, 8)),
                                    ("nhwc", "OHWI", (16, 3, 3, 8))):
        out = transform_layout(g, target)
        conv = next(n for n in out.nodes if n.op == "LayoutConv")
        w = conv.inputs[1]
        assert conv.attrs["kernel_layout"] == k_layout
        assert w.is_constant and w.shape == shape
        np.testing.assert_array_equal(w.data, kernel_to_layout(g.nodes[0].inputs[1].data,
                                                               k_layout))
        assert not any(n.op == "LayoutTransform" and n.inputs[0].is_constant
                       for n in out.nodes)
        assert_same_results(g, out)


def test_one_transform_per_value_and_layout_however_many_consumers():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    c = _conv(b, x, 8, 8, "conv")
    f1 = b.op("Flatten", [c], name="f1")  # NCHW-only consumers
    f2 = b.op("ReduceMean", [c, b.const("ax", np.array([2, 3], np.int64))], name="mean")
    c2 = _conv(b, c, 8, 8, "conv2")  # a consumer that agrees with the producer
    g = b.graph([f1, f2, c2])
    out = transform_layout(g, "nchw8c")
    assert _transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW"), ("NCHW8c", "NCHW")]
    back = [n for n in out.nodes if n.op == "LayoutTransform"][1]
    assert back.outputs[0] is c  # the NCHW form of c keeps its name and is shared
    assert out.node("conv2").inputs[0] is out.node("conv").outputs[0]
    assert_same_results(g, out)


def test_elementwise_follows_its_inputs_and_constants_are_rewritten():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    c = _conv(b, x, 8, 16, "conv")
    s = b.op("Mul", [c, b.weight("scale", (16, 1, 1))], name="mul")
    p = b.op("Add", [s, b.weight("row", (4,))], name="add")  # broadcasts over N, C, H
    y = b.op("Clip", [p, b.const("lo", np.float32(0)), b.const("hi", np.float32(6))],
             name="clip")
    g = b.graph([y])
    out = transform_layout(g, "nchw8c")
    assert ops(out) == ["LayoutTransform", "LayoutConv", "Mul", "Add", "Clip",
                        "LayoutTransform"]
    assert out.node("mul").inputs[1].shape == (1, 2, 1, 1, 8)
    assert out.node("add").inputs[1].shape == (1, 1, 1, 4, 1)
    assert out.node("clip").inputs[1].shape == ()
    assert_same_results(g, out)


def test_elementwise_on_model_layout_inputs_stays_nchw():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    y = b.op("Relu", [b.op("Neg", [x])])
    g = b.graph([y])
    assert ops(transform_layout(g, "nchw8c")) == ["Neg", "Relu"]


def test_mixed_layout_elementwise_converts_the_model_layout_operand():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    c = _conv(b, x, 8, 8, "conv")
    y = b.op("Add", [x, c], name="add")  # x is NCHW, c is blocked
    g = b.graph([y])
    out = transform_layout(g, "nchw4c")
    assert _transforms(out) == [("NCHW", "NCHW4c"), ("NCHW4c", "NCHW")]
    assert out.node("add").inputs[0] is out.node("conv").inputs[0]  # shared transform
    assert_same_results(g, out)


def test_depthwise_conv_and_pools_run_blocked():
    b = GraphBuilder()
    x = b.input("x", (1, 12, 9, 9))
    d = _conv(b, x, 12, 12, "dw", group=12)
    m = b.op("MaxPool", [d], {"kernel_shape": (3, 3), "strides": (2, 2)}, name="pool")
    a = b.op("AveragePool", [m], {"kernel_shape": (2, 2), "pads": (1, 1, 0, 0),
                                  "count_include_pad": 0}, name="avg")
    y = b.op("GlobalAveragePool", [a], name="gap")
    g = b.graph([y])
    out = transform_layout(g, "nchw8c")  # 12 channels: block 6 (largest divisor <= 8)
    assert ops(out) == ["LayoutTransform", "LayoutConv", "LayoutPool", "LayoutPool",
                        "LayoutPool", "LayoutTransform"]
    assert out.node("dw").attrs["kernel_layout"] == "OIHW1i6o"
    assert _transforms(out) == [("NCHW", "NCHW6c"), ("NCHW6c", "NCHW")]
    assert_same_results(g, out)


def test_nhwc_target_for_cortex_m():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    h = b.op("Relu", [_conv(b, x, 3, 8, "c1")], name="relu")
    y = b.op("Flatten", [_conv(b, h, 8, 4, "c2")], name="flat")
    g = b.graph([y])
    out = transform_layout(g, "nhwc")
    assert _transforms(out) == [("NCHW", "NHWC"), ("NHWC", "NCHW")]
    assert out.node("relu").outputs[0].shape == (1, 8, 8, 8)
    assert_same_results(g, out)


def test_generic_c_target_keeps_the_graph():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    g = b.graph([_conv(b, x, 3, 8, "c")])
    assert transform_layout(g, "nchw") is g


def test_grouped_and_non_2d_convs_keep_nchw():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 6, 6))
    y = _conv(b, x, 8, 8, "grouped", group=2)
    z = b.input("z", (1, 4, 10))
    c1 = b.op("Conv", [z, b.weight("w1", (4, 4, 3))], name="conv1d")
    g = b.graph([y, c1])
    out = transform_layout(g, "nchw8c")
    assert ops(out) == ["Conv", "Conv"]


def test_bad_target_layout_is_an_option_error():
    with pytest.raises(OptionError, match="'nwhc' is not one of nchw, nhwc, nchwc"):
        parse_layout_target("nwhc")
    assert parse_layout_target("NCHWc").block == 8


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NCHW1c", "NCHW2c", "NCHW6c"])
def test_layout_round_trips(layout):
    x = np.random.default_rng(0).standard_normal((2, 6, 3, 5)).astype(np.float32)
    y = to_layout(x, layout)
    assert y.shape == layout_shape(x.shape, layout)
    np.testing.assert_array_equal(from_layout(y, layout), x)
    if layout.startswith("NCHW") and layout[4:]:
        b = int(layout[4:-1])
        assert y[1, 5 // b, 2, 4, 5 % b] == x[1, 5, 2, 4]


@pytest.mark.parametrize("layout", ["OIHW", "OHWI", "OIHW3i2o", "OIHW1i6o"])
def test_kernel_layout_round_trips(layout):
    w = np.random.default_rng(1).standard_normal((6, 3, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(kernel_from_layout(kernel_to_layout(w, layout), layout), w)


def test_layout_transform_op_between_two_blocked_layouts():
    from toolchain.graph.ir import Node, Value

    x = np.random.default_rng(2).standard_normal((1, 8, 2, 2)).astype(np.float32)
    src = Value("a", layout_shape(x.shape, "NCHW4c"), "float32")
    dst = Value("b", layout_shape(x.shape, "NCHW2c"), "float32")
    node = Node("LayoutTransform", "t", [src], [dst],
                {"src_layout": "NCHW4c", "dst_layout": "NCHW2c"})
    (got,) = run_node(node, [to_layout(x, "NCHW4c")])
    np.testing.assert_array_equal(got, to_layout(x, "NCHW2c"))


def test_channel_concat_follows_its_inputs_when_the_blocks_agree():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    c1, c2 = _conv(b, x, 8, 16, "c1"), _conv(b, x, 8, 8, "c2")
    cat = b.op("Concat", [c1, c2], {"axis": 1}, name="cat")  # 16 + 8 = 24: block 8 all
    y = _conv(b, cat, 24, 8, "c3")
    g = b.graph([y])
    out = transform_layout(g, "nchw8c")
    assert _transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    assert out.node("cat").outputs[0].shape == (1, 3, 4, 4, 8)
    assert_same_results(g, out)
    nhwc = transform_layout(g, "nhwc")
    assert nhwc.node("cat").attrs["axis"] == 3 and len(_transforms(nhwc)) == 2
    assert_same_results(g, nhwc)
    # 16 + 12 channels: blocks 8 and 4 (output 28: block 7) disagree -> NCHW concat
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    cat = b.op("Concat", [_conv(b, x, 8, 16, "c1"), _conv(b, x, 8, 12, "c2")], {"axis": 1},
               name="cat")
    g = b.graph([cat])
    out = transform_layout(g, "nchw8c")
    assert out.node("cat").outputs[0].shape == (1, 28, 4, 4)
    assert_same_results(g, out)


def test_layout_for_shipped_and_described_targets():
    from types import SimpleNamespace

    from toolchain.target import load_target

    assert layout_for_target(load_target("c-generic")).kind == "nchw"
    assert layout_for_target(load_target("cuda-sm80")).kind == "nchw"
    assert layout_for_target(load_target("x86_64-avx2")) == parse_layout_target("nchw8c")
    assert layout_for_target(load_target("cortex-m7")) == LayoutTarget("nhwc", nhwc_qconv=True)
    # the layout is what the descriptor declares, never guessed from the name
    unnamed = SimpleNamespace(name="x86_64-avx2", kind="c", vector_width_bits=256)
    assert layout_for_target(unnamed).kind == "nchw"
    renamed = SimpleNamespace(name="my-zen4", kind="c", vector_width_bits=512,
                              layout="nchw16c")
    assert layout_for_target(renamed) == parse_layout_target("nchw16c")
    explicit = SimpleNamespace(name="x86_64-avx2", kind="c", vector_width_bits=256,
                               layout="nchw")
    assert layout_for_target(explicit).kind == "nchw"


@pytest.mark.parametrize("target,pad_shape", [("nchw8c", (1, 2, 7, 7, 8)),
                                              ("nhwc", (1, 7, 7, 16))])
def test_spatial_pad_between_convs_follows_the_layout(target, pad_shape):
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    c = _conv(b, x, 8, 16, "c1")
    p = b.op("Pad", [c, b.const("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)),
                     b.const("v", np.float32(0.5))], name="pad")
    y = b.op("Conv", [p, b.weight("w2", (8, 16, 3, 3))], name="c2")
    g = b.graph([y])
    out = transform_layout(g, target)
    assert len(_transforms(out)) == 2  # in and out only
    assert out.node("pad").outputs[0].shape == pad_shape
    assert_same_results(g, out)
    # a pad that adds channels stays NCHW
    b = GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    p = b.op("Pad", [_conv(b, x, 8, 16, "c1"),
                     b.const("pads", np.array([0, 1, 0, 0, 0, 1, 0, 0], np.int64))], name="pad")
    g = b.graph([p])
    out = transform_layout(g, target)
    assert out.node("pad").outputs[0].shape == (1, 18, 4, 4)
    assert_same_results(g, out)


def _qconv(b, x, cout, name, group=1, k=3, stride=2):
    cin = int(x.shape[1])
    rng = np.random.default_rng(len(name))
    w = rng.integers(-9, 10, (cout, cin // group, k, k)).astype(np.int8)
    consts = [b.const(f"{name}.w", w),
              b.const(f"{name}.b", rng.integers(-50, 50, cout).astype(np.int32)),
              b.const(f"{name}.m", np.full(cout, 1 << 30, np.int32)),
              b.const(f"{name}.s", np.tile(np.array([[1, 1 << 27]], np.int32), (cout, 1)))]
    attrs = {"strides": (stride, stride), "pads": (0, 0, 1, 1), "group": group,
             "x_zero_point": 3, "y_zero_point": -2, "out_min": -128, "out_max": 127,
             "out_dtype": "int8"}
    return b.op("QConv", [x, *consts], attrs, name=name)


DSP = {kind: LayoutTarget(kind, nhwc_qconv=True) for kind in ("nhwc", "nchw")}


@pytest.mark.parametrize("kind", ["nhwc", "nchw"])
@pytest.mark.parametrize("other_reader", [False, True])
def test_dsp_target_folds_the_models_transpose_into_a_dense_qconv(other_reader, kind):
    """A TensorFlow export's Transpose(NHWC -> NCHW) before a dense int8 convolution: on a
    target whose dense int8 kernel gathers NHWC (``nhwc_qconv``, NHWC or NCHW activations,
    as the Cortex-M boards compile) the QConv reads the NHWC source (``data_layout``) and
    ``simplify`` removes the transpose, unless another node reads the NCHW copy too."""
    from toolchain.graph.passes.dce import dead_code_elimination
    from toolchain.graph.passes.simplify import simplify

    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 3), "int8")
    t = b.op("Transpose", [x], {"perm": (0, 3, 1, 2)}, name="t")
    y = _qconv(b, t, 4, "conv")
    outs = [y, b.op("Relu", [t], name="relu")] if other_reader else [y]
    g = b.graph(outs)
    out = dead_code_elimination(simplify(transform_layout(g, DSP[kind])))
    conv = out.node("conv")
    if other_reader:
        assert conv.attrs.get("data_layout", "NCHW") == "NCHW" and "Transpose" in ops(out)
    else:
        assert ops(out) == ["QConv"] and conv.inputs[0] is x
        assert conv.attrs["data_layout"] == "NHWC"
    # targets without the flag: the rule is not taken
    for plain in ("nhwc", "nchw16c", "nchw"):
        assert "data_layout" not in transform_layout(g, plain).node("conv").attrs
    rng = np.random.default_rng(0)
    assert_same_results(g, out, {"x": rng.integers(-128, 128, (1, 8, 8, 3)).astype(np.int8)})


def test_dsp_target_keeps_the_transpose_before_a_depthwise_qconv():
    b = GraphBuilder()
    x = b.input("x", (1, 8, 8, 4), "int8")
    t = b.op("Transpose", [x], {"perm": (0, 3, 1, 2)}, name="t")
    g = b.graph([_qconv(b, t, 4, "dw", group=4)])
    out = transform_layout(g, DSP["nhwc"])
    assert "data_layout" not in out.node("dw").attrs and "Transpose" in ops(out)


def test_cortex_m_targets_declare_the_nhwc_qconv_capability():
    from dataclasses import replace

    from toolchain.target import load_target

    m4 = load_target("cortex-m4")
    assert layout_for_target(m4).nhwc_qconv
    assert layout_for_target(replace(m4, layout="nchw")).nhwc_qconv  # the boards' layout
    assert not layout_for_target(load_target("x86_64-avx512")).nhwc_qconv
    assert not layout_for_target(load_target("c-generic")).nhwc_qconv
