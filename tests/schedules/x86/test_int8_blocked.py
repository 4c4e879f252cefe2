"""Channel-blocked int8 chains on x86_64-avx512: the layout pass keeps QConv outputs in
``NCHW{L}c`` between x86 int8 kernels (toolchain/graph/passes/layout.py, rule ``qconv``), and
the depthwise / u8-quad kernels read and write that layout bit-exactly (built C)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.schedules._cpu_targets import HOST_BACKENDS
from toolchain.errors import ScheduleError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.layout import LayoutTarget, layout_for_target, transform_layout
from toolchain.graph.passes.layout_ops import layout_shape, to_layout
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401  (registers ops)
from toolchain.graph.reference import run_graph
from toolchain.quantize.fixed_point import quantize_multipliers, shift_table
from toolchain.schedules import compile_op
from toolchain.target import load_target
from toolchain.topi.int8_x86 import blocked_layouts

RNG = np.random.default_rng(5)  # reseeded per test (tests/conftest.py)


def _qconv(name: str, x: Value, m: int, k: int, stride: int = 1, group: int = 1,
           out_shape: tuple[int, ...] | None = None, **layouts: str) -> Node:
    """A QConv of ``x`` (NCHW shape read from ``x`` unless blocked: then ``out_shape``)."""
    c = m if group > 1 else int(layouts.get("c", 0)) or x.shape[1]
    pads = (k // 2,) * 4 if stride == 1 else (0, 0, k // 2, k // 2)
    mm, sh = quantize_multipliers(RNG.uniform(2e-4, 2e-2, m))
    ins = [x, Value.constant(f"{name}.w", RNG.integers(-127, 128, (m, c // group, k, k))
                             .astype(np.int8)),
           Value.constant(f"{name}.b", RNG.integers(-5000, 5000, m).astype(np.int32)),
           Value.constant(f"{name}.m", mm), Value.constant(f"{name}.s", shift_table(sh))]
    attrs = {"x_zero_point": 3, "y_zero_point": -2, "out_min": -128, "out_max": 127,
             "out_dtype": "int8", "strides": [stride, stride], "pads": list(pads),
             "dilations": [1, 1], "group": group}
    attrs.update({k: v for k, v in layouts.items() if k != "c"})
    if out_shape is None:
        h, w = x.shape[2], x.shape[3]
        out_shape = (1, m, (h + pads[0] + pads[2] - k) // stride + 1,
                     (w + pads[1] + pads[3] - k) // stride + 1)
    return Node("QConv", name, ins, [Value(f"{name}.y", out_shape, "int8")], attrs)


def _chain() -> Graph:
    """DS-CNN-like: one-channel 3x3 conv (kernel-column quads) -> depthwise -> pointwise."""
    x = Value("x", (1, 1, 12, 10), "int8")
    c1 = _qconv("c1", x, 16, 3)
    dw = _qconv("dw", c1.outputs[0], 16, 3, group=16)
    pw = _qconv("pw", dw.outputs[0], 32, 1)
    return Graph("chain", [x], [pw.outputs[0]], [c1, dw, pw])


def test_blocked_layouts_per_kernel() -> None:
    g = _chain()
    assert [blocked_layouts(n) for n in g.nodes] == [
        ("NCHW", "NCHW16c"), ("NCHW16c", "NCHW16c"), ("NCHW16c", "NCHW16c")]
    odd = _qconv("odd", Value("x", (1, 12, 6, 6), "int8"), 12, 3, group=12)
    assert blocked_layouts(odd) is None  # 12 channels: no 8- or 16-channel block
    twenty = _qconv("m20", Value("x", (1, 16, 6, 6), "int8"), 20, 1)
    assert blocked_layouts(twenty) is None  # 20 outputs: lanes of 16 leave a ragged block


def test_layout_pass_keeps_the_chain_blocked_and_results_equal() -> None:
    g = _chain()
    target = layout_for_target(load_target("x86_64-avx512"))
    assert target.int8
    out = transform_layout(g, target)
    assert [n.op for n in out.nodes] == ["QConv", "QConv", "QConv"]  # no LayoutTransform
    assert [(n.attrs.get("data_layout"), n.attrs.get("out_layout")) for n in out.nodes] == [
        ("NCHW", "NCHW16c"), ("NCHW16c", "NCHW16c"), ("NCHW16c", "NCHW")]
    assert out.nodes[1].outputs[0].shape == (1, 1, 12, 10, 16)
    x = {"x": RNG.integers(-128, 128, (1, 1, 12, 10)).astype(np.int8)}
    np.testing.assert_array_equal(run_graph(out, x)["pw.y"], run_graph(g, x)["pw.y"])
    # a target without the u8 quads (or a layout given by hand) keeps int8 in NCHW
    for t in (layout_for_target(load_target("x86_64-avx2")), LayoutTarget("nchwc", 16)):
        assert not t.int8
        assert all("data_layout" not in n.attrs for n in transform_layout(g, t).nodes)


def _pool(x: Value, y_shape: tuple[int, ...], kernel: tuple[int, int] = (6, 5),
          **layouts: str) -> Node:
    attrs = {"kernel_shape": list(kernel), "x_zero_point": 3, "y_zero_point": -1, "out_min": -128,
             "out_max": 127, "out_dtype": "int8", "multiplier": 1668426848, "shift": -5,
             **layouts}
    return Node("QAvgPool", "pool", [x], [Value("pool.y", y_shape, "int8")], attrs)


def test_layout_pass_hands_blocks_to_qavgpool() -> None:
    g = _chain()
    pool = _pool(g.outputs[0], (1, 32, 7, 6))
    g = Graph("chain_pool", g.inputs, pool.outputs, [*g.nodes, pool])
    out = transform_layout(g, layout_for_target(load_target("x86_64-avx512")))
    assert [n.op for n in out.nodes] == ["QConv", "QConv", "QConv", "QAvgPool",
                                         "LayoutTransform"]
    assert out.nodes[2].attrs["out_layout"] == "NCHW16c"
    assert out.nodes[3].attrs["data_layout"] == "NCHW16c"
    assert out.nodes[3].outputs[0].shape == (1, 2, 7, 6, 16)
    x = {"x": RNG.integers(-128, 128, (1, 1, 12, 10)).astype(np.int8)}
    np.testing.assert_array_equal(run_graph(out, x)["pool.y"], run_graph(g, x)["pool.y"])


def test_layout_pass_keeps_a_residual_block_blocked() -> None:
    """ResNet-like: conv -> conv -> QAdd(first conv, second) -> conv; the QAdd follows."""
    x = Value("x", (1, 16, 6, 6), "int8")
    c1 = _qconv("c1", x, 16, 3)
    c2 = _qconv("c2", c1.outputs[0], 16, 3)
    y = Value("add.y", (1, 16, 6, 6), "int8")
    add = Node("QAdd", "add", [c1.outputs[0], c2.outputs[0]], [y], {
        "a_zero_point": -2, "b_zero_point": -2, "y_zero_point": 1, "left_shift": 20,
        "a_multiplier": 1 << 30, "a_shift": -1, "b_multiplier": 1518500250, "b_shift": -1,
        "y_multiplier": 1 << 30, "y_shift": -18, "out_min": -128, "out_max": 127,
        "out_dtype": "int8"})
    c3 = _qconv("c3", y, 32, 1)
    g = Graph("res", [x], [c3.outputs[0]], [c1, c2, add, c3])
    out = transform_layout(g, layout_for_target(load_target("x86_64-avx512")))
    assert [(n.op, n.attrs.get("data_layout"), n.attrs.get("out_layout")) for n in out.nodes] \
        == [("QConv", "NCHW", "NCHW16c"), ("QConv", "NCHW16c", "NCHW16c"), ("QAdd", None, None),
            ("QConv", "NCHW16c", "NCHW")]  # no LayoutTransform anywhere
    add2 = next(n for n in out.nodes if n.op == "QAdd")
    assert add2.outputs[0].shape == (1, 1, 6, 6, 16)
    assert all(v.shape == (1, 1, 6, 6, 16) for v in add2.inputs)
    xs = {"x": RNG.integers(-128, 128, (1, 16, 6, 6)).astype(np.int8)}
    want = run_graph(g, xs)["c3.y"]
    assert len(np.unique(want)) > 3
    np.testing.assert_array_equal(run_graph(out, xs)["c3.y"], want)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("kernel", [(6, 5), (12, 10)], ids=["window", "global"])
def test_blocked_qavgpool_bit_exact(backend: str, kernel: tuple[int, int]) -> None:
    x = RNG.integers(-128, 128, (1, 32, 12, 10)).astype(np.int8)
    oh, ow = 13 - kernel[0], 11 - kernel[1]
    node = _pool(Value("x", (1, 2, 12, 10, 16), "int8"), (1, 2, oh, ow, 16), kernel,
                 data_layout="NCHW16c")
    op = compile_op(node, "x86_64-avx512", backend=backend)
    plain = {k: v for k, v in node.attrs.items() if k != "data_layout"}
    want = get_op("QAvgPool").reference([x], plain)[0]
    np.testing.assert_array_equal(op(to_layout(x, "NCHW16c"))[0], to_layout(want, "NCHW16c"))
    assert len(np.unique(want)) > 3
    assert op.op_schedule.info["rules"] == "blocked window sums"


BLOCKED = [  # (c, m, hw, k, stride, group, data_layout, out_layout)
    (64, 64, (25, 5), 3, 1, 64, "NCHW16c", "NCHW16c"),   # DS-CNN depthwise
    (8, 8, (12, 12), 3, 2, 8, "NCHW8c", "NCHW8c"),       # MobileNet-like, 8 lanes
    (16, 16, (13, 11), 5, 2, 16, "NCHW16c", "NCHW16c"),  # 5 x 5: two quads a kernel column
    (8, 8, (48, 40), 3, 1, 8, "NCHW8c", "NCHW8c"),       # MobileNet's 48 x 48 x 8 layer
    (8, 8, (7, 10), 5, 1, 8, "NCHW8c", "NCHW8c"),        # 8 lanes, two quads a column
    (32, 64, (6, 7), 1, 1, 1, "NCHW16c", "NCHW16c"),     # pointwise quads from blocks
    (24, 16, (9, 9), 3, 1, 1, "NCHW8c", "NCHW16c"),      # 3 blocks of 8 into 16 lanes
    (16, 32, (6, 5), 1, 1, 1, "NCHW16c", "NCHW"),        # last of a chain: NCHW out
    (3, 8, (12, 12), 3, 2, 1, "NCHW", "NCHW8c"),         # first layer: NCHW in
    (3, 8, (9, 16), 3, 2, 1, "NCHW", "NCHW8c"),          # RGB, whole zips: planes zipped
    (2, 16, (11, 32), 3, 2, 1, "NCHW", "NCHW16c"),       # 33 padded columns: 3 zips
]


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("cfg", BLOCKED, ids=lambda c: f"c{c[0]}m{c[1]}g{c[5]}_{c[6]}_{c[7]}")
def test_blocked_qconv_bit_exact(cfg: tuple, backend: str) -> None:
    c, m, (h, w), k, stride, group, din, dout = cfg
    plain = _qconv("cv", Value("x", (1, c, h, w), "int8"), m, k, stride, group)
    y = plain.outputs[0]
    node = _qconv("cv", Value("x", layout_shape((1, c, h, w), din), "int8"), m, k, stride,
                  group, layout_shape(y.shape, dout), c=str(c), data_layout=din,
                  out_layout=dout)
    node = node.replace(inputs=(node.inputs[0], *plain.inputs[1:]))
    op = compile_op(node, "x86_64-avx512", backend=backend)
    x = RNG.integers(-128, 128, (1, c, h, w)).astype(np.int8)
    got = op(to_layout(x, din))[0]
    want = get_op("QConv").reference([x, *(v.data for v in plain.inputs[1:])],
                                     plain.attrs)[0]
    np.testing.assert_array_equal(got, to_layout(want, dout))
    assert len(np.unique(want)) > 3
    info = op.op_schedule.info
    assert info["schedule"] == ("int8 x86 depthwise" if group > 1 else "int8 x86 quads")
    if group > 1:  # lane-wise u8 row quads (vpdpbusd), zipped per output row from the
        # padded pixels laid out once for the plane
        assert info["intrinsic"].endswith(f"dot_u8s8_lanes_{info['lanes']}x4")
        assert info["band"] == "row" and info["columns"] == "plane"
        # 8 lanes: two pixels' quads zipped at once where a padded row has whole pairs
        # and a kernel column one quad (48 x 40: 42 columns; not 13, nor a 5-high kernel)
        wp = w + (2 * (k // 2) if stride == 1 else k // 2)
        pair = info["lanes"] == 8 and k <= 4 and wp % 2 == 0
        assert info.get("zip", "").endswith("zip_u8_lanes_8x4x2") == pair
    # one quad of channels: the quad band zipped from four planes, 16 pixels a call
    assert info.get("zip", "").endswith("zip_u8_16x4") == (group == 1 and c <= 4
                                                            and w % 16 == 0)
    assert info.get("data_layout", "NCHW") == din and info.get("out_layout", "NCHW") == dout
    # a blocked output tile is stored by vpmovdb, L lanes a call (not byte by byte)
    assert info.get("store", "").endswith(f"narrow_i32_i8_{info['lanes']}") == (dout != "NCHW")


def test_blocked_qconv_without_a_kernel_is_refused_by_name() -> None:
    plain = _qconv("cv", Value("x", (1, 16, 6, 6), "int8"), 16, 1)
    node = _qconv("cv", Value("x", (1, 1, 6, 6, 16), "int8"), 16, 1, 1, 1, (1, 1, 6, 6, 16),
                  c="16", data_layout="NCHW16c", out_layout="NCHW16c")
    node = node.replace(inputs=(node.inputs[0], *plain.inputs[1:]))
    with pytest.raises(ScheduleError, match="'cv'.*NCHW16c -> NCHW16c"):
        compile_op(node, "x86_64-avx2")  # int16 pairs only: no blocked kernel
