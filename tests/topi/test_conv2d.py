"""Convolution: NCHW via the registry vs the Conv reference; NHWC and NCHW[x]c agree with
NCHW; Winograd F(2x2,3x3) / F(4x4,3x3) vs direct; transposed convolution."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand, run_te
from toolchain import te
from toolchain.errors import OptionError
from toolchain.graph.ops import get_op
from toolchain.topi import transform
from toolchain.topi.nn import conv2d, winograd


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 3, 7, 6), (4, 3, 3, 3), {"pads": (1, 1, 1, 1)}),
    ((2, 2, 9, 8), (3, 2, 3, 2), {"strides": (2, 3), "pads": (0, 1, 2, 0)}),
    ((1, 3, 9, 9), (2, 3, 3, 3), {"dilations": (2, 2), "pads": (2, 1, 2, 1)}),
    ((1, 4, 7, 7), (6, 2, 3, 3), {"group": 2, "pads": (1, 1, 1, 1)}),
    ((1, 4, 6, 7), (8, 1, 3, 3), {"group": 4, "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ((1, 3, 7, 5), (5, 3, 1, 1), {}),
    ((1, 2, 7, 6), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
    ((1, 2, 7, 6), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 5, 5), (3, 2, 2, 2), {"auto_pad": "VALID"}),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_vs_reference(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[0], seed=2) if bias else None
    check_node("Conv", [x, w, b], attrs, const=(1,), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 2, 9), (3, 2, 3), {"strides": (2,), "pads": (1, 2)}),
    ((2, 4, 8), (4, 2, 2), {"group": 2, "dilations": (3,)}),
    ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2), {"pads": (1, 0, 1, 0, 1, 1), "strides": (1, 2, 1)}),
])
def test_conv_1d_and_3d(xs: tuple, ws: tuple, attrs: dict) -> None:
    check_node("Conv", [rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2)], attrs,
               rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 2, 5), (2, 3, 3), {"strides": (2,), "pads": (1, 0), "output_padding": (1,)}),
    ((1, 2, 3, 2, 3), (2, 2, 2, 2, 2), {"strides": (2, 1, 2)}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": (2, 2), "output_shape": (9, 9)}),
])
def test_conv_transpose_nd_and_negative_begin_pad(xs: tuple, ws: tuple, attrs: dict) -> None:
    check_node("ConvTranspose", [rand(*xs), rand(*ws, seed=1)], attrs, rtol=1e-5, atol=2e-5)


def _layouts(xv: np.ndarray, wv: np.ndarray, stride: int, padding: tuple, dilation: int,
             groups: int, cb: int, ob: int) -> list[np.ndarray]:
    n, c, h, w = xv.shape
    o = wv.shape[0]
    x = te.placeholder(xv.shape, name="x")
    wt = te.placeholder(wv.shape, name="w")
    y_nchw = conv2d.conv2d_nchw(x, wt, stride, padding, dilation, groups)
    # NHWC: data transposed in the compute, kernel packed HWIO in numpy
    x_nhwc = transform.layout_transform(x, "NCHW", "NHWC")
    w_hwio = te.placeholder((wv.shape[2], wv.shape[3], wv.shape[1], o), name="w_hwio")
    y_nhwc = transform.layout_transform(
        conv2d.conv2d_nhwc(x_nhwc, w_hwio, stride, padding, dilation, groups), "NHWC", "NCHW")
    # NCHW[x]c: data blocked in the compute, kernel packed OIHW{ib}i{ob}o in numpy
    ib = cb if groups == 1 else (1 if wv.shape[1] == 1 else cb)
    x_blk = transform.layout_transform(x, "NCHW", f"NCHW{cb}c")
    w_blk = te.placeholder(transform.pack_kernel_nchwc(wv, ib, ob).shape, name="w_blk")
    y_blk = transform.layout_transform(
        conv2d.conv2d_nchwc(x_blk, w_blk, stride, padding, dilation, groups),
        f"NCHW{ob}c", "NCHW", channels=o)
    return run_te([x, wt, w_hwio, w_blk], [y_nchw, y_nhwc, y_blk],
                  [xv, wv, wv.transpose(2, 3, 1, 0), transform.pack_kernel_nchwc(wv, ib, ob)])


@pytest.mark.parametrize("c,o,cb,ob,groups,stride,padding,dilation", [
    (8, 8, 4, 4, 1, 1, (1, 1, 1, 1), 1),
    (6, 5, 4, 4, 1, 2, (1, 0, 2, 1), 1),     # channels not divisible by the blocks
    (3, 7, 2, 8, 1, 1, (2, 2, 2, 2), 2),
    (8, 8, 4, 4, 8, 1, (1, 1, 1, 1), 1),     # depthwise
    (8, 16, 4, 8, 8, 2, (1, 1, 1, 1), 1),    # depthwise, multiplier 2
    (8, 12, 4, 4, 2, 1, (0, 1, 0, 1), 1),    # grouped
])
def test_three_layouts_agree(c: int, o: int, cb: int, ob: int, groups: int, stride: int,
                             padding: tuple, dilation: int) -> None:
    xv = rand(2, c, 7, 6)
    wv = rand(o, c // groups, 3, 3, seed=1)
    nchw, nhwc, blk = _layouts(xv, wv, stride, padding, dilation, groups, cb, ob)
    want = get_op("Conv").reference([xv, wv], {
        "strides": (stride,) * 2, "pads": padding, "dilations": (dilation,) * 2,
        "group": groups})[0]
    np.testing.assert_allclose(nchw, want, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(nhwc, nchw, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(blk, nchw, rtol=1e-5, atol=2e-5)


def test_nchwc_rejects_mismatched_blocks() -> None:
    x = te.placeholder((1, 2, 4, 4, 4), name="x")
    w = te.placeholder((1, 1, 3, 3, 8, 4), name="w")
    with pytest.raises(OptionError, match="input blocks 1x8 must match the data's channel "
                                          "blocks 2x4"):
        conv2d.conv2d_nchwc(x, w)


def test_winograd_matrices_are_exact() -> None:
    rng = np.random.default_rng(0)
    for m in (2, 4):
        at, g, bt = winograd.winograd_matrices(m)
        d = rng.standard_normal((m + 2, m + 2))
        k = rng.standard_normal((3, 3))
        y = at @ ((g @ k @ g.T) * (bt @ d @ bt.T)) @ at.T
        direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * k) for j in range(m)]
                           for i in range(m)])
        np.testing.assert_allclose(y, direct, rtol=1e-12, atol=1e-12)


def _winograd_vs_direct(m: int, shape: tuple, k: int, padding: tuple) -> float:
    """Max |winograd - direct| / max |direct| (both fp32; direct checked vs float64)."""
    xv = rand(*shape)
    wv = rand(k, shape[1], 3, 3, seed=1)
    x = te.placeholder(xv.shape, name="x")
    w = te.placeholder(wv.shape, name="w")
    u_np = winograd.winograd_weight_transform(wv, m)
    u = te.placeholder(u_np.shape, name="u")
    direct, wino = run_te([x, w, u], [conv2d.conv2d_nchw(x, w, 1, padding),
                                      winograd.conv2d_winograd_nchw(x, u, m, padding)],
                          [xv, wv, u_np])
    ref = get_op("Conv").reference([xv.astype(np.float64), wv.astype(np.float64)],
                                   {"pads": padding})[0]
    np.testing.assert_allclose(direct, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    return float(np.max(np.abs(wino - direct)) / np.max(np.abs(direct)))


@pytest.mark.parametrize("shape,k,padding", [((1, 4, 8, 8), 5, (1, 1, 1, 1)),
                                             ((2, 3, 7, 9), 4, (0, 1, 2, 0)),
                                             ((1, 5, 5, 6), 3, (0, 0, 0, 0))])
def test_winograd_f2_matches_direct(shape: tuple, k: int, padding: tuple) -> None:
    # F(2x2, 3x3): within 1e-4 of the largest output, relative
    assert _winograd_vs_direct(2, shape, k, padding) < 1e-4


@pytest.mark.parametrize("shape,k,padding", [((1, 4, 8, 8), 5, (1, 1, 1, 1)),
                                             ((2, 3, 7, 9), 4, (0, 1, 2, 0))])
def test_winograd_f4_matches_direct(shape: tuple, k: int, padding: tuple) -> None:
    # F(4x4, 3x3) is less accurate (Aᵀ has entries up to 8, G down to 1/24): documented
    # tolerance 1e-4 of the largest output; measured errors are in docs/topi.md
    assert _winograd_vs_direct(4, shape, k, padding) < 1e-4


@pytest.mark.slow
def test_winograd_error_on_a_resnet_like_layer() -> None:
    """256 input channels at 14x14: the error measured for docs/topi.md."""
    e2 = _winograd_vs_direct(2, (1, 256, 14, 14), 8, (1, 1, 1, 1))
    e4 = _winograd_vs_direct(4, (1, 256, 14, 14), 8, (1, 1, 1, 1))
    print(f"winograd max error relative to max |y|: F(2,3) {e2:.2e}, F(4,3) {e4:.2e}")
    assert e2 < 1e-4 and e4 < 1e-4


def test_winograd_refuses_a_wrong_kernel_pack() -> None:
    x = te.placeholder((1, 4, 8, 8), name="x")
    u = te.placeholder((4, 4, 4, 2), name="u")
    with pytest.raises(OptionError, match=r"must be \[6, 6, 4, K\] for F\(4x4, 3x3\)"):
        winograd.conv2d_winograd_nchw(x, u, 4)


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 2, 3, 4), (2, 3, 3, 3), {}),
    ((1, 2, 3, 3), (2, 4, 3, 3), {"strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ((2, 4, 3, 2), (4, 1, 2, 3), {"group": 2, "strides": (2, 1), "dilations": (1, 2)}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": (3, 2), "output_padding": (1, 1)}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": (2, 2), "output_shape": (6, 7)}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": (2, 2), "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": (2, 2), "auto_pad": "SAME_LOWER"}),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_vs_reference(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    g = attrs.get("group", 1)
    b = rand(ws[1] * g, seed=2) if bias else None
    check_node("ConvTranspose", [rand(*xs), rand(*ws, seed=1), b], attrs, const=(1,),
               rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("algorithm,options", [
    ("winograd2", {}), ("winograd4", {}), ("nchwc", {"block": (4, 4)}),
    ("nchwc", {"block": (8, 16)}),
])
@pytest.mark.parametrize("attrs", [{"pads": (1, 1, 1, 1)}, {"auto_pad": "SAME_UPPER"},
                                   {"pads": (0, 2, 1, 0)}])
def test_registry_conv_algorithms(algorithm: str, options: dict, attrs: dict) -> None:
    """The registry builds Winograd / NCHW[x]c computes with weights packed at compile
    time (NodeCompute.packs) and they agree with the Conv reference."""
    x, w, b = rand(1, 6, 7, 9), rand(5, 6, 3, 3, seed=1), rand(5, seed=2)
    check_node("Conv", [x, w, b], attrs, const=(1, 2), rtol=1e-4, atol=1e-4,
               algorithm=algorithm, **options)


def test_registry_nchwc_depthwise_and_grouped() -> None:
    x = rand(1, 8, 6, 6)
    check_node("Conv", [x, rand(8, 1, 3, 3, seed=1)], {"group": 8, "pads": (1, 1, 1, 1)},
               const=(1,), rtol=1e-5, atol=2e-5, algorithm="nchwc", block=(4, 4))
    check_node("Conv", [x, rand(8, 4, 3, 3, seed=1)], {"group": 2, "strides": (2, 2)},
               const=(1,), rtol=1e-5, atol=2e-5, algorithm="nchwc", block=(4, 4))


def test_registry_conv_algorithm_errors_name_the_node() -> None:
    from tests.topi.util import make_node
    from toolchain.errors import UnsupportedError
    from toolchain.topi.registry import compute_for_node

    strided = make_node("Conv", [rand(1, 2, 6, 6), rand(3, 2, 3, 3)], {"strides": (2, 2)},
                        const=(1,))
    with pytest.raises(UnsupportedError, match=r"node 'n0' \(Conv\): Winograd F\(2x2, 3x3\) "
                                               r"needs a 3x3 kernel, stride 1"):
        compute_for_node(strided, algorithm="winograd2")
    runtime_w = make_node("Conv", [rand(1, 2, 6, 6), rand(3, 2, 3, 3)])
    with pytest.raises(UnsupportedError, match="needs input 1 to be a constant"):
        compute_for_node(runtime_w, algorithm="winograd4")
    with pytest.raises(UnsupportedError, match="algorithm 'fft' is not one of"):
        compute_for_node(runtime_w, algorithm="fft")
    grouped = make_node("Conv", [rand(1, 6, 4, 4), rand(6, 3, 3, 3)], {"group": 2},
                        const=(1,))
    with pytest.raises(UnsupportedError, match="divisible by the blocks 4, 4"):
        compute_for_node(grouped, algorithm="nchwc", block=(4, 4))
