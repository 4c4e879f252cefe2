"""The x86 int8 schedules (toolchain/schedules/x86/int8.py): built C vs the integer reference."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from tests.covering import params
from tests.schedules._cpu_targets import HOST_BACKENDS
from toolchain.codegen import get_renderer
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401  (registers ops)
from toolchain.quantize.fixed_point import quantize_multipliers, shift_table
from toolchain.schedules import CompiledOp, compile_op
from toolchain.schedules.registry import resolve_target
from toolchain.schedules.x86.int8 import DW_PLANE_BYTES, pixel_tile, schedule_x86_int8
from toolchain.topi.int8 import pack_x86_weights, x86_lanes
from toolchain.topi.int8_x86 import requant_fits_int32
from toolchain.topi.int8_x86_requant import pad_round_shifts, requant_shifts_right

RNG = np.random.default_rng(7)  # reseeded per test (tests/conftest.py)


def _requant(n: int) -> list[Value]:
    """Per-channel bias, multipliers and shifts (scales spread over two decades)."""
    m, s = quantize_multipliers(RNG.uniform(2e-4, 2e-2, n))
    return [Value.constant("b", RNG.integers(-5000, 5000, n).astype(np.int32)),
            Value.constant("m", m), Value.constant("s", shift_table(s))]


def _attrs(dtype: str, xzp: int, yzp: int) -> dict:
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    return {"x_zero_point": xzp, "y_zero_point": yzp, "out_min": lo, "out_max": hi,
            "out_dtype": dtype}


def _qx(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return RNG.integers(lo, hi, shape).astype(dtype)


def _built(node: Node, x: np.ndarray, target: str, backend: str = "c",
           **build_kwargs: Any) -> CompiledOp:
    """``node`` compiled for ``target`` and checked bit for bit against the reference on
    ``x``; the compiled op, whose schedule (``op_schedule``: info, packed weights) and
    source the callers inspect instead of scheduling or building the node again."""
    op = compile_op(node, target, backend=backend, **build_kwargs)
    got = op(x)[0]
    args = [v.data if v.data is not None else x for v in node.inputs]
    want = get_op(node.op).reference(args, node.attrs)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3  # not vacuous: the outputs vary
    return op


def _check(node: Node, x: np.ndarray, target: str, backend: str = "c") -> dict:
    return _built(node, x, target, backend).op_schedule.info


CONVS = [  # (c, m, hw, k, stride, pads, dilation)
    (3, 16, (9, 11), 3, 1, (1, 1, 1, 1), 1),     # first layer: 3 input channels, padded
    (5, 12, (7, 7), 3, 2, (1, 1, 1, 1), 1),      # odd channel counts, stride 2, 8 lanes
    (8, 20, (6, 13), 1, 1, (0, 0, 0, 0), 1),     # pointwise, 20 channels: padded to 2 x 16
    (4, 7, (10, 9), 3, 2, (0, 0, 1, 1), 1),      # TF SAME (asymmetric) padding, 7 outputs
    (6, 16, (9, 9), 3, 1, (2, 2, 2, 2), 2),      # dilated
    (16, 32, (5, 25), 3, 1, (1, 1, 1, 1), 1),    # DS-CNN-like row of 25 (tile of 5)
    (1, 16, (12, 6), 3, 2, (1, 1, 1, 1), 1),     # one input channel: half a pair
    (2, 8, (5, 6), 1, 1, (0, 0, 0, 0), 1),       # one pair, 1x1: the int32 kernel takes it
]


@pytest.mark.parametrize("cfg,dtype,xzp,yzp,target,backend", params(
    CONVS, [("int8", 3, -2), ("uint8", 131, 120)], ["x86_64-avx512", "x86_64-avx2"],
    HOST_BACKENDS, ids=[lambda c: f"c{c[0]}m{c[1]}k{c[3]}s{c[4]}"], together=(1, 2, 3)))
def test_qconv_bit_exact(cfg: tuple, dtype: str, xzp: int, yzp: int, target: str,
                         backend: str) -> None:
    """Group-1 convolutions on the AVX targets: u8 channel quads and the dot_u8s8_*x4
    intrinsics (vpdpbusd) on x86_64-avx512, int16 channel pairs and dot_i16_*x2 (vpmaddwd)
    on x86_64-avx2, except for one pair of channels and a 1x1 kernel."""
    c, m, (h, w), k, stride, pads, dil = cfg
    oh = (h + pads[0] + pads[2] - dil * (k - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dil * (k - 1) - 1) // stride + 1
    x = Value("x", (1, c, h, w), dtype)
    y = Value("y", (1, m, oh, ow), dtype)
    wt = Value.constant("w", RNG.integers(-127, 128, (m, c, k, k)).astype(np.int8))
    attrs = {**_attrs(dtype, xzp, yzp), "strides": [stride, stride], "pads": list(pads),
             "dilations": [dil, dil], "group": 1}
    node = Node("QConv", "conv", [x, wt, *_requant(m)], [y], attrs)
    info = _check(node, _qx((1, c, h, w), dtype), target, backend)
    pairs = c > 2 or k > 1
    kind = "quads" if target == "x86_64-avx512" else "pairs"
    assert info["schedule"] == (f"int8 x86 {kind}" if pairs else "int8 x86")
    assert info["lanes"] == x86_lanes(m)
    if pairs:
        lanes = x86_lanes(m)
        assert info["intrinsic"] == (f"{target}.dot_u8s8_{lanes}x4" if kind == "quads"
                                     else f"{target}.dot_i16_{lanes}x2")


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx2"])
def test_qconv_other_x86_targets(target: str) -> None:
    """c-generic keeps the int32 kernel (no intrinsic, no pair band in its arena)."""
    x = Value("x", (1, 6, 8, 8), "int8")
    y = Value("y", (1, 24, 8, 8), "int8")
    wt = Value.constant("w", RNG.integers(-127, 128, (24, 6, 3, 3)).astype(np.int8))
    attrs = {**_attrs("int8", -5, 4), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 1}
    node = Node("QConv", "conv", [x, wt, *_requant(24)], [y], attrs)
    want = "int8 x86" if target == "c-generic" else "int8 x86 pairs"
    assert _check(node, _qx((1, 6, 8, 8), "int8"), target)["schedule"] == want


@pytest.mark.parametrize("p,k,n,target,backend", params(
    [(1, 40, 10), (3, 64, 33), (2, 7, 16), (8, 640, 128), (13, 1, 8)],
    ["x86_64-avx512", "x86_64-avx2", "c-generic"], HOST_BACKENDS))
def test_qgemm_bit_exact(p: int, k: int, n: int, target: str, backend: str) -> None:
    """Dense layers: u8 quads (x86_64-avx512) or int16 pairs (x86_64-avx2) of k (a 1x1
    convolution over the rows, tiles of rows), odd k and one k included; the int32 kernel
    on c-generic."""
    x = Value("x", (p, k), "int8")
    y = Value("y", (p, n), "int8")
    wt = Value.constant("w", RNG.integers(-127, 128, (n, k)).astype(np.int8))
    node = Node("QGemm", "fc", [x, wt, *_requant(n)], [y], _attrs("int8", 7, -3))
    info = _check(node, _qx((p, k), "int8"), target, backend)
    pairs = target != "c-generic" and k > 2  # one pair of k: the int32 (or generic) kernel
    kind = "quads" if target == "x86_64-avx512" and k > 4 else "pairs"
    assert (info["schedule"] == f"int8 x86 {kind}") == pairs


DEPTHWISE = [  # (c, hw, k, stride, pads)
    (64, (25, 5), 3, 1, (1, 1, 1, 1)),     # DS-CNN
    (8, (12, 12), 3, 2, (0, 0, 1, 1)),     # MobileNet-like stride 2, TF SAME, 8 lanes
    (32, (7, 13), 3, 1, (1, 1, 1, 1)),     # row of 13: one pixel per tile
    (16, (6, 6), 5, 1, (2, 2, 2, 2)),      # 5x5
    (16, (100, 41), 3, 1, (1, 1, 1, 1)),   # padded pixels over DW_PLANE_BYTES: per row
]


@pytest.mark.parametrize("cfg,dtype,xzp,yzp,backend", params(
    DEPTHWISE, [("int8", 1, -3), ("uint8", 127, 130)], HOST_BACKENDS,
    ids=[lambda c: f"c{c[0]}k{c[2]}s{c[3]}"]))
def test_depthwise_bit_exact(cfg: tuple, dtype: str, xzp: int, yzp: int, backend: str) -> None:
    c, (h, w), k, stride, pads = cfg
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    x = Value("x", (1, c, h, w), dtype)
    y = Value("y", (1, c, oh, ow), dtype)
    wt = Value.constant("w", RNG.integers(-127, 128, (c, 1, k, k)).astype(np.int8))
    attrs = {**_attrs(dtype, xzp, yzp), "strides": [stride, stride], "pads": list(pads),
             "dilations": [1, 1], "group": c}
    node = Node("QConv", "dw", [x, wt, *_requant(c)], [y], attrs)
    info = _check(node, _qx((1, c, h, w), dtype), "x86_64-avx512", backend)
    assert info["schedule"] == "int8 x86 depthwise"
    assert info["lanes"] == (16 if c % 16 == 0 else 8)
    # u8 row quads (vpdpbusd) zipped per output row; the padded pixels (4 rows to a
    # quad) once for the plane where they fit DW_PLANE_BYTES, else per output row
    cols = (h + pads[0] + pads[2] + 4 * -(-k // 4) - k) * (w + pads[1] + pads[3]) * \
        info["lanes"]
    assert info["band"] == "row" and info["intrinsic"].endswith("x4")
    assert info.get("columns") == ("plane" if cols <= DW_PLANE_BYTES else None)


def test_depthwise_odd_channels_keep_generic_schedule() -> None:
    x = Value("x", (1, 6, 7, 7), "int8")
    y = Value("y", (1, 6, 7, 7), "int8")
    wt = Value.constant("w", RNG.integers(-127, 128, (6, 1, 3, 3)).astype(np.int8))
    attrs = {**_attrs("int8", 1, 0), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 6}
    node = Node("QConv", "dw", [x, wt, *_requant(6)], [y], attrs)
    op = schedule_x86_int8(node, "x86_64-avx512")
    assert op.info["schedule"] == "int8"
    _check(node, _qx((1, 6, 7, 7), "int8"), "x86_64-avx512")


def test_weights_packed_at_compile_time() -> None:
    w = RNG.integers(-127, 128, (20, 3, 3, 3)).astype(np.int8)
    packed = pack_x86_weights(w, 16)
    assert packed.shape == (2, 3, 3, 3, 16)
    assert packed[1, 2, 1, 0, 3] == w[19, 2, 1, 0] and not packed[1, ..., 4:].any()
    x = Value("x", (1, 3, 6, 6), "int8")
    y = Value("y", (1, 20, 6, 6), "int8")
    attrs = {**_attrs("int8", 0, 0), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 1}
    node = Node("QConv", "c", [x, Value.constant("w", w), *_requant(20)], [y], attrs)
    op = schedule_x86_int8(node, "c-generic")
    np.testing.assert_array_equal(op.input_values[1].data, packed)
    assert op.input_values[1].data.dtype == np.int8  # stored as int8, widened in the kernel
    # AVX2: pairs of input channels [Mo, C/2, KH, KW, L, 2], channel 3 zero, stored as
    # int8 (the dot_i16 intrinsic widens them as it loads)
    pairs = schedule_x86_int8(node, "x86_64-avx2").input_values[1].data
    assert pairs.shape == (2, 2, 3, 3, 16, 2) and pairs.dtype == np.int8
    np.testing.assert_array_equal(pairs[1, 1, :, :, 3, 0], w[19, 2])
    np.testing.assert_array_equal(pairs[0, 0, :, :, 5, 1], w[5, 1])
    assert not pairs[:, 1, ..., 1].any() and not pairs[1, ..., 4:, :].any()


def test_pixel_tile_and_lanes() -> None:
    assert [pixel_tile(w) for w in (32, 16, 25, 7, 11, 13, 1)] == [8, 8, 5, 7, 11, 1, 1]
    assert [x86_lanes(m) for m in (16, 64, 8, 24, 12, 4, 20)] == [16, 16, 8, 8, 16, 8, 16]


def test_requantization_is_lane_wise() -> None:
    """The epilogue requantizes the accumulator tile (L contiguous lanes, int32 result, one
    vectorized loop) and only copies bytes into NCHW; padded tables are constants."""
    x = Value("x", (1, 4, 6, 6), "int8")
    y = Value("y", (1, 20, 6, 6), "int8")
    wt = Value.constant("w", RNG.integers(-127, 128, (20, 4, 3, 3)).astype(np.int8))
    req = _requant(20)
    attrs = {**_attrs("int8", 2, -1), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 1}
    node = Node("QConv", "c", [x, wt, *req], [y], attrs)
    counts = np.stack([np.log2(req[2].data[:, 0]), 30 - np.log2(req[2].data[:, 1])])
    assert requant_shifts_right(node)  # every channel shifts right: the z1 form
    for target, helper in (("x86_64-avx2", "_r"), ("x86_64-avx512", "_z1")):
        built = _built(node, _qx((1, 4, 6, 6), "int8"), target)  # bit-exact, then its tables
        op = built.op_schedule
        lanes = op.info["lanes"]
        bias, mult, shifts = (v.data for v in op.input_values[2:5])
        assert bias.shape == mult.shape == (32,) and shifts.shape == (2, 32)
        if helper == "_r":  # (ls, rs) shift counts
            np.testing.assert_array_equal(shifts[:, :20], counts)
        else:  # the u8 quads: (rounding constant with the zero point, rs)
            np.testing.assert_array_equal(shifts, pad_round_shifts(req[2].data, -1, lanes))
            np.testing.assert_array_equal(shifts[1, :20], counts[1])
        assert not bias[20:].any() and not mult[20:].any() and not shifts[:, 20:].any()
        src = built.module.source
        assert "int32_t x86_req[" in src  # int32 tile: gcc keeps full-width vectors
        # acc + bias provably within int32, no left shift: a helper without the int64 step
        assert f"kiln_x86_requantize{helper}(x86_acc" in src
        assert "kiln_x86_requantize(x86_acc" not in src
        # the quads' accumulators start from the bias (bias_init): the helper adds 0
        assert bool(re.search(r"kiln_x86_requantize_z1?\(x86_acc\[[^]]*\], 0,", src)) == (
            helper == "_z1")
        # on_call_helpers: the definition only in the kernels that call it
        assert ("static inline int32_t kiln_x86_requantize_z1(" in src) == (helper == "_z1")


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_requantization_extremes(dtype: str, backend: str) -> None:
    """Saturating accumulators, left shifts and tiny scales give the reference integers."""
    n = 16
    m, s = quantize_multipliers(np.geomspace(1e-9, 30.0, n))
    req = [Value.constant("b", RNG.integers(-2**31, 2**31 - 1, n).astype(np.int32)),
           Value.constant("m", m), Value.constant("s", shift_table(s))]
    x = Value("x", (2, 64), dtype)
    yv = Value("y", (2, n), dtype)
    wt = Value.constant("w", np.where(RNG.random((n, 64)) < .5, -127, 127).astype(np.int8))
    node = Node("QGemm", "fc", [x, wt, *req], [yv], _attrs(dtype, 0 if dtype == "int8" else
                                                           128, 5))
    lowered: list = []
    built = _built(node, _qx((2, 64), dtype), "x86_64-avx512", backend,
                   on_lowered=lowered.append)
    # the C source: this build's, or (LLVM kernel) what the C backend renders from the
    # same lowered kernel (the lowering does not depend on the backend)
    src = built.module.source if backend == "c" else \
        get_renderer("c", openmp=True).render(lowered[0]).code
    assert "kiln_x86_requantize(x86_acc" in src  # left shifts, int32 overflow: int64 step
    # a bias that only just fits int32 with the accumulators (no left shift): the int64 step
    bound = 64 * 127 * (128 if dtype == "int8" else 128)
    for b, fits in ((2**31 - 2 - bound, True), (2**31 - 1 - bound, False)):
        req2 = [Value.constant("b", np.full(n, b, np.int32)), Value.constant("m", m),
                Value.constant("s", shift_table(np.minimum(s, 0)))]
        node2 = Node("QGemm", "fc", [x, wt, *req2], [yv], node.attrs)
        assert requant_fits_int32(node2) == fits


def test_depthwise_c_generic_keeps_generic_schedule() -> None:
    """c-generic is judged by its arena: no re-laid input band there."""
    x = Value("x", (1, 16, 5, 5), "int8")
    y = Value("y", (1, 16, 5, 5), "int8")
    wt = Value.constant("w", RNG.integers(-127, 128, (16, 1, 3, 3)).astype(np.int8))
    attrs = {**_attrs("int8", 1, 0), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 16}
    node = Node("QConv", "dw", [x, wt, *_requant(16)], [y], attrs)
    assert schedule_x86_int8(node, "c-generic").info["schedule"] == "int8"
    assert _check(node, _qx((1, 16, 5, 5), "int8"), "x86_64-avx2")["schedule"] == \
        "int8 x86 depthwise"


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_lane_requant_helper_edges(backend: str) -> None:
    """kiln_x86_requantize (the 32-bit-lane requantization of every x86 int8 kernel) vs
    the int64 reference on the edges: int32 extremes of acc + bias, left shifts that
    saturate, ties of both roundings, right shifts of 0 and 30, a zero multiplier; in C
    and as the target's ``llvm_helpers`` IR (backend="llvm")."""
    from toolchain import build, te
    from toolchain.intrinsics import load_intrinsics
    from toolchain.quantize.fixed_point import quantize_multiplier, requantize
    from toolchain.tir.schedule import Schedule
    from toolchain.topi.int8_x86 import lane_requant, pad_shifts

    load_intrinsics("c-generic")
    scales = [2.0**-31, 1e-9, 2.0**-30, 0.5, 0.75, 1e-3, 0.0123, 1.0, 3.7, 2.0**20, 1e9, 0.0,
              0.25, 0.375, 0.3, 2.0**-3]  # the last four: biases 0, ties below
    pairs = [quantize_multiplier(r) for r in scales]
    m = np.array([p[0] for p in pairs], np.int32)
    sh = np.array([p[1] for p in pairs], np.int32)
    lanes = len(scales)
    edge = [-2**31, 2**31 - 1, -2**30, 2**30, -1, 0, 1, -(2**29), 2**29 + 1, 12345, -12345,
            2**14, -(2**14) - 1, 3, -3, 7]
    small = np.repeat(np.arange(-40, 40), lanes)  # every residue of the small shifts
    accs = np.concatenate([edge, RNG.integers(-2**31, 2**31, lanes * 15), small])
    accs = accs.astype(np.int32).reshape(1, 1, -1, lanes)
    bias = RNG.integers(-2**31, 2**31, lanes).astype(np.int32)
    bias[:3] = [2**31 - 1, -2**31, 0]
    bias[-4:] = 0
    attrs = {"y_zero_point": 0, "out_min": -2**31, "out_max": 2**31 - 1}
    acc_t = te.placeholder(accs.shape, "int32", "acc")
    tabs = [te.placeholder((lanes,), "int32", n) for n in ("bias", "mult")]
    shifts_t = te.placeholder((2, lanes), "int32", "shifts")
    out = lane_requant(acc_t, tabs[0], tabs[1], shifts_t, attrs)
    fn = build(Schedule(te.create_prim_func([acc_t, *tabs, shifts_t, out])), backend=backend)
    if backend == "llvm":
        assert "define linkonce_odr i32 @kiln_x86_requantize(" in fn.get_source()
    got = np.zeros(accs.shape, np.int32)
    fn(accs, bias, m, pad_shifts(shift_table(sh), lanes), got)
    want = requantize(accs.astype(np.int64) + bias, m, sh)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("zp", [-128, 0, 127, 255])
def test_rounded_requant_helper_edges(zp: int, right: bool, backend: str) -> None:
    """kiln_x86_requantize_z (RDBPOT as one add and shift, the output zero point in its
    rounding constant: the u8-quad kernels) vs the int64 reference plus the zero point:
    every residue of right shifts 0-12 (ties of both signs), shifts up to 22, a zero
    multiplier, and the largest sums ``requant_rounding_fits`` admits; C and LLVM.
    ``right``: kiln_x86_requantize_z1 on the channels that shift right (rs >= 1)."""
    from toolchain import build, te
    from toolchain.intrinsics import load_intrinsics
    from toolchain.quantize.fixed_point import quantize_multiplier, requantize
    from toolchain.tir.schedule import Schedule
    from toolchain.topi.int8_x86 import lane_requant
    from toolchain.topi.int8_x86_requant import pad_round_shifts

    load_intrinsics("c-generic")
    scales = [2.0**-k for k in range(1, 14)] + [0.75 * 2.0**-k for k in range(13)] + [
        1e-3, 0.0123, 2.0**-22, 0.0, 0.3, 0.999, 3e-7]
    pairs = [quantize_multiplier(r) for r in scales]
    if right:  # rs >= 1 (0 shifts the zero multiplier by 0: left out too)
        pairs = [p for p in pairs if p[1] <= -1]
        assert len(pairs) >= 20
    m = np.array([p[0] for p in pairs], np.int32)
    sh = np.array([p[1] for p in pairs], np.int32)
    lanes = len(pairs)
    rs = np.maximum(-sh, 0).astype(np.int64)
    # |h| + (|zp| + 1) 2**rs < 2**31 - 1 with |h| ~ |acc| m / 2**31: the admitted range
    top = ((2**31 - 2 - (abs(zp) + 1) * (1 << rs)) * 2**31 // np.maximum(m, 1) // 2
           ).clip(0, 2**31 - 2)
    small = np.repeat(np.arange(-5000, 5000), 1)[:, None] * np.ones(lanes, np.int64)
    edge = np.stack([top, -top, top - 1, 1 - top])
    rand = RNG.integers(-top - 1, top + 1, (64, lanes))
    accs = np.concatenate([edge, small, rand]).astype(np.int32).reshape(1, 1, -1, lanes)
    bias = np.zeros(lanes, np.int32)
    attrs = {"y_zero_point": zp, "out_min": -2**31, "out_max": 2**31 - 1}
    acc_t = te.placeholder(accs.shape, "int32", "acc")
    tabs = [te.placeholder((lanes,), "int32", n) for n in ("bias", "mult")]
    shifts_t = te.placeholder((2, lanes), "int32", "shifts")
    out = lane_requant(acc_t, tabs[0], tabs[1], shifts_t, attrs, rounded=True, right=right)
    fn = build(Schedule(te.create_prim_func([acc_t, *tabs, shifts_t, out])), backend=backend)
    assert f"kiln_x86_requantize_z{'1' if right else ''}(" in (
        fn.get_source() if backend == "c" else fn.get_source().replace("@", ""))
    got = np.zeros(accs.shape, np.int32)
    fn(accs, bias, m, pad_round_shifts(shift_table(sh), zp, lanes), got)
    want = requantize(accs.astype(np.int64) + bias, m, sh) + zp
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("dtype,shifts", [("int8", (0, -1, -18)), ("uint8", (1, 0, -20))])
def test_qadd_bit_exact(target: str, dtype: str, shifts: tuple[int, int, int],
                        backend: str) -> None:
    """QAdd with kiln_x86_requantize (three requantizations in 32-bit lanes) vs the int64
    reference, a left shift in one case; in fused groups too (compute_options)."""
    from toolchain.quantize.fixed_point import quantize_multiplier
    from toolchain.schedules.generic.fused import compute_options

    a, b = Value("a", (1, 7, 5, 6), dtype), Value("b", (1, 7, 5, 6), dtype)
    ma, mb, my = (quantize_multiplier(r)[0] for r in (0.61, 0.93, 0.77))
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    attrs = {"a_zero_point": 4 if dtype == "int8" else 130, "b_zero_point": -9 if dtype ==
             "int8" else 101, "a_multiplier": ma, "a_shift": shifts[0], "b_multiplier": mb,
             "b_shift": shifts[1], "y_multiplier": my, "y_shift": shifts[2],
             "left_shift": 20, "y_zero_point": 3 if dtype == "int8" else 125, "out_min": lo,
             "out_max": hi, "out_dtype": dtype}
    node = Node("QAdd", "add", [a, b], [Value("y", a.shape, dtype)], attrs)
    op = compile_op(node, target, backend=backend)
    assert op.op_schedule.info["requantize"] == "kiln_x86_requantize"
    xa, xb = _qx(a.shape, dtype), _qx(b.shape, dtype)
    want = get_op("QAdd").reference([xa, xb], attrs)[0]
    np.testing.assert_array_equal(op(xa, xb)[0], want)
    assert len(np.unique(want)) > 3
    opts = compute_options(resolve_target(target))
    assert opts is not None and opts(node) == {"algorithm": "x86"}
    assert opts(Node("QAdd", "wide", [], [], {"left_shift": 24})) == {}  # int32 overflow


QUAD_CONVS = [  # (c, m, hw, k, stride, pads): channel tails (C not a multiple of 4, M of L)
    (3, 8, (11, 10), 3, 2, (1, 1, 1, 1)),     # MobileNet-like first layer, 8 lanes (ymm)
    (1, 20, (13, 4), 3, 1, (1, 1, 1, 1)),     # DS-CNN-like one input channel: 3 of 4 zero
    (7, 17, (5, 9), 1, 1, (0, 0, 0, 0)),      # pointwise, two quads (one padded), 17 outputs
    (13, 24, (6, 7), 3, 1, (0, 0, 1, 1)),     # TF SAME padding: the zero point in the pad
    (2, 16, (17, 9), 5, 2, (2, 1, 2, 1)),     # 5 rows at stride 2: the whole-plane band
    (9, 16, (9, 10), 3, 2, (1, 1, 1, 1)),     # 3 quads, 3 rows at stride 2: the row band
]


@pytest.mark.parametrize("cfg,dtype,xzp,yzp,backend", params(
    QUAD_CONVS, [("int8", -128, 127), ("int8", 127, -128), ("int8", 0, 0), ("uint8", 0, 255),
                 ("uint8", 255, 0)], HOST_BACKENDS, ids=[lambda c: f"c{c[0]}m{c[1]}k{c[3]}"]))
def test_qconv_quads_bit_exact(cfg: tuple, dtype: str, xzp: int, yzp: int,
                               backend: str) -> None:
    """The u8 x s8 quad kernel (dot_u8s8_*x4, vpdpbusd; activations made unsigned and
    (x_zp + off) * sum w folded into the bias) on zero points at both ends of the range:
    the padding holds the zero point, so a wrong fold or pad value shows at the edges."""
    c, m, (h, w), k, stride, pads = cfg
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    x = Value("x", (1, c, h, w), dtype)
    y = Value("y", (1, m, oh, ow), dtype)
    wt = Value.constant("w", RNG.integers(-127, 128, (m, c, k, k)).astype(np.int8))
    attrs = {**_attrs(dtype, xzp, yzp), "strides": [stride, stride], "pads": list(pads),
             "dilations": [1, 1], "group": 1}
    node = Node("QConv", "conv", [x, wt, *_requant(m)], [y], attrs)
    info = _check(node, _qx((1, c, h, w), dtype), "x86_64-avx512", backend)
    assert info["schedule"] == "int8 x86 quads"
    assert info["intrinsic"] == f"x86_64-avx512.dot_u8s8_{x86_lanes(m)}x4"
    assert info["band"] == ("plane" if k > 2 * stride or (c <= 4 and k > stride) else "row")


@pytest.mark.parametrize("p,k,n,dtype,xzp,backend", params(
    [(3, 13, 20), (8, 640, 128), (6, 5, 8)],
    [("int8", -128), ("int8", 127), ("uint8", 255), ("uint8", 0)], HOST_BACKENDS))
def test_qgemm_quads_bit_exact(p: int, k: int, n: int, dtype: str, xzp: int,
                               backend: str) -> None:
    """Dense layers through the quad kernel: k tails (13, 5), zero points at the edges."""
    x = Value("x", (p, k), dtype)
    y = Value("y", (p, n), dtype)
    wt = Value.constant("w", RNG.integers(-127, 128, (n, k)).astype(np.int8))
    node = Node("QGemm", "fc", [x, wt, *_requant(n)], [y], _attrs(dtype, xzp, 9))
    assert _check(node, _qx((p, k), dtype), "x86_64-avx512", backend)["schedule"] == \
        "int8 x86 quads"


def test_quad_packing_and_bias_fold() -> None:
    """Weights as [Mo, C/4, KH, KW, L, 4] int8 (channel tail zero); the bias takes
    (x_zp + 128) * sum w off; where that leaves int32 the pair kernel computes instead."""
    w = RNG.integers(-127, 128, (20, 5, 3, 3)).astype(np.int8)
    x = Value("x", (1, 5, 6, 6), "int8")
    y = Value("y", (1, 20, 6, 6), "int8")
    attrs = {**_attrs("int8", -7, 0), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 1}
    req = _requant(20)
    node = Node("QConv", "c", [x, Value.constant("w", w), *req], [y], attrs)
    op = schedule_x86_int8(node, "x86_64-avx512")
    quads, bias = op.input_values[1].data, op.input_values[2].data
    assert quads.shape == (2, 2, 3, 3, 16, 4) and quads.dtype == np.int8
    np.testing.assert_array_equal(quads[1, 1, :, :, 3, 0], w[19, 4])
    np.testing.assert_array_equal(quads[0, 0, :, :, 5, 2], w[5, 2])
    assert not quads[:, 1, ..., 1:].any() and not quads[1, ..., 4:, :].any()
    want = req[0].data.astype(np.int64) - 121 * w.reshape(20, -1).astype(np.int64).sum(1)
    np.testing.assert_array_equal(bias[:20], want)
    big = [Value.constant("b", np.full(20, 2**31 - 1, np.int32)), *req[1:]]
    node2 = Node("QConv", "c", [x, Value.constant("w", -np.abs(w)), *big], [y], attrs)
    assert schedule_x86_int8(node2, "x86_64-avx512").info["schedule"] == "int8 x86 pairs"


COLQUAD_CONVS = [  # (m, hw, (kh, kw), stride, pads, dilation): one input channel
    (64, (49, 10), (10, 4), 2, (4, 1, 5, 1), 1),   # DS-CNN's first layer: one quad a row
    (20, (13, 9), (3, 3), 1, (1, 1, 1, 1), 1),     # 3 columns: the fourth weight zero
    (16, (12, 11), (3, 5), 2, (1, 2, 1, 2), 1),    # 5 columns: two quads, the second 1/4
    (8, (10, 12), (2, 3), 1, (0, 0, 1, 2), 2),     # dilated columns, 8 lanes
]


@pytest.mark.parametrize("cfg,dtype,xzp,backend", params(
    COLQUAD_CONVS, [("int8", -128), ("int8", 127), ("uint8", 0), ("uint8", 255)],
    HOST_BACKENDS, ids=[lambda c: f"m{c[0]}k{c[2][0]}x{c[2][1]}"]))
def test_qconv_column_quads_bit_exact(cfg: tuple, dtype: str, xzp: int, backend: str) -> None:
    """One input channel: the quads run along the kernel's columns (four taps of a row a
    vpdpbusd instead of one channel and three zeros), bit-exact with the reference."""
    m, (h, w), (kh, kw), stride, pads, dil = cfg
    oh = (h + pads[0] + pads[2] - dil * (kh - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dil * (kw - 1) - 1) // stride + 1
    x = Value("x", (1, 1, h, w), dtype)
    y = Value("y", (1, m, oh, ow), dtype)
    wt = Value.constant("w", RNG.integers(-127, 128, (m, 1, kh, kw)).astype(np.int8))
    attrs = {**_attrs(dtype, xzp, 1), "strides": [stride, stride], "pads": list(pads),
             "dilations": [dil, dil], "group": 1}
    node = Node("QConv", "conv", [x, wt, *_requant(m)], [y], attrs)
    sched = _built(node, _qx((1, 1, h, w), dtype), "x86_64-avx512", backend).op_schedule
    info = sched.info
    assert info["schedule"] == "int8 x86 quads" and info["quads"] == "kernel columns"
    packed = sched.input_values[1].data  # the weights the built kernel ran with
    assert packed.shape == (-(-m // x86_lanes(m)), -(-kw // 4), kh, 1, x86_lanes(m), 4)
    np.testing.assert_array_equal(packed[0, 0, :, 0, 1, :min(kw, 4)], wt.data[1, 0, :, :4])


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("target", ["x86_64-avx512", "x86_64-avx2"])
@pytest.mark.parametrize("m", [8, 20], ids=["8x2", "16x2"])
def test_pair_weights_int8_widened_bit_exact(m: int, target: str, backend: str) -> None:
    """The int16-pair kernels (forced on x86_64-avx512, where the u8 quads would take this
    node) keep their weights int8 and widen them in ``dot_i16_{8,16}x2`` (vpmovsxbw):
    extreme weights (-128, 127) against shifted inputs down to -255 (x_zp 127) stay exact."""
    from toolchain.autotune.apply import forcing
    from toolchain.autotune.tasks import task_of

    w = RNG.integers(-128, 128, (m, 5, 3, 3)).astype(np.int8)
    w[0], w[-1, ::2] = -128, 127  # sign extension of every lane position and both extremes
    x = Value("x", (1, 5, 6, 7), "int8")
    attrs = {**_attrs("int8", 127, -1), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": 1}
    node = Node("QConv", "c", [x, Value.constant("w", w), *_requant(m)],
                [Value("y", (1, m, 6, 7), "int8")], attrs)
    task = task_of(node, target)
    with forcing({task.space.workload: task.space.trace({"intrinsic": "dot_i16_pairs",
                                                         "pixels": 7})}):
        sched = _built(node, _qx((1, 5, 6, 7), "int8"), target, backend).op_schedule
    info, packed = sched.info, sched.input_values[1].data  # the built kernel's weights
    assert info["schedule"] == "int8 x86 pairs"
    assert info["intrinsic"].endswith(f"dot_i16_{x86_lanes(m)}x2")
    assert packed.dtype == np.int8 and packed.shape[-1] == 2
    assert packed.nbytes < 2 * w.size  # one byte a weight, channel and lane padding only


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("target,hw", [("x86_64-avx2", (9, 10)), ("x86_64-avx512", (9, 10)),
                                       ("x86_64-avx512", (120, 41))],
                         ids=["avx2", "avx512-quads", "avx512-row"])
def test_depthwise_weights_int8_widened_bit_exact(target: str, hw: tuple[int, int],
                                                  backend: str) -> None:
    """The depthwise kernels keep their weights int8, one byte a weight, and widen them in
    the kernel: the int32-lane kernel (x86_64-avx2) ``[C/L, KH, KW, L]``, x86_64-avx512's
    lane-wise u8 row quads ``[C/L, KW, ceil(KH/4), L, 4]`` (``dot_u8s8_lanes_16x4``,
    vpdpbusd; zipped per output row, from the padded pixels of the plane or, where they do
    not fit, of the row). Extreme weights (-128, 127) against shifted inputs down to -255
    (x_zp 127) stay exact."""
    h, w = hw
    c = 32
    wt = RNG.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8)
    wt[0], wt[-1, :, ::2] = -128, 127  # sign extension in every lane block, both extremes
    x = Value("x", (1, c, h, w), "uint8")
    attrs = {**_attrs("uint8", 127, 130), "strides": [1, 1], "pads": [1, 1, 1, 1],
             "dilations": [1, 1], "group": c}
    node = Node("QConv", "dw", [x, Value.constant("w", wt), *_requant(c)],
                [Value("y", (1, c, h, w), "uint8")], attrs)
    sched = _built(node, _qx((1, c, h, w), "uint8"), target, backend).op_schedule
    info, packed = sched.info, sched.input_values[1].data  # the built kernel's weights
    assert info["schedule"] == "int8 x86 depthwise"
    assert packed.dtype == np.int8
    if target == "x86_64-avx512":  # quads of kernel rows, a zero row past KH
        assert info["intrinsic"].endswith("dot_u8s8_lanes_16x4")
        assert info.get("columns") == ("plane" if h < 60 else None)
        assert packed.shape == (2, 3, 1, 16, 4) and packed.nbytes == c * 3 * 4
        np.testing.assert_array_equal(packed[1, 2, 0, 15], [*wt[31, 0, :, 2], 0])
    else:
        assert packed.shape == (2, 3, 3, 16) and packed.nbytes == wt.size  # [C/L, KH, KW, L]
        np.testing.assert_array_equal(packed[1, 2, 0, 15], wt[31, 0, 2, 0])
