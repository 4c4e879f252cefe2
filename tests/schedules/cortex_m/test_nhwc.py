"""NHWC convolutions (toolchain/topi/nn/conv2d_nhwc.py, CMSIS-NN's layout): fp32 against numpy
and int8 bit-exact against the NCHW integer reference, transposed."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain import te
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401  (registers ops)
from toolchain.quantize.fixed_point import quantize_multipliers, shift_table
from toolchain.runtime.build import build
from toolchain.tir.schedule import Schedule
from toolchain.topi.nn.conv2d_nhwc import conv2d_nhwc_oihw, oihw_to_hwio, qconv2d_nhwc

RNG = np.random.default_rng(5)

CASES = [
    dict(c=4, m=6, k=3, stride=1, pads=(1, 1, 1, 1), group=1),
    dict(c=6, m=6, k=3, stride=2, pads=(0, 0, 1, 1), group=6),   # depthwise, TF SAME
    dict(c=4, m=4, k=1, stride=1, pads=(0, 0, 0, 0), group=1),   # pointwise
    dict(c=4, m=6, k=3, stride=1, pads=(2, 2, 2, 2), group=2, dil=2),
]


def _conv_nchw_ref(x: np.ndarray, w: np.ndarray, stride: int, pads: tuple, group: int,
                   dil: int) -> np.ndarray:
    """float64 NCHW reference (direct loops over the padded input)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + pl + pr - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // group
    for o in range(m):
        g = o // mg
        for ry in range(kh):
            for rx in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, ry * dil:ry * dil + stride * (oh - 1) + 1:stride,
                         rx * dil:rx * dil + stride * (ow - 1) + 1:stride]
                out[:, o] += np.einsum("nchw,c->nhw", win, w[o, :, ry, rx])
    return out


def _run(func_tensors: list[te.Tensor], args: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    mod = build(Schedule(te.create_prim_func(func_tensors)), "c-generic")
    mod(*args, out)
    return out


@pytest.mark.parametrize("cfg", CASES)
def test_fp32_nhwc_matches_numpy(cfg: dict) -> None:
    c, m, k, g, dil = cfg["c"], cfg["m"], cfg["k"], cfg["group"], cfg.get("dil", 1)
    x = RNG.standard_normal((1, c, 7, 6)).astype(np.float32)
    w = RNG.standard_normal((m, c // g, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    want = _conv_nchw_ref(x, w, cfg["stride"], cfg["pads"], g, dil) + b[None, :, None, None]
    xt = te.placeholder((1, 7, 6, c), name="x")
    wt = te.placeholder(oihw_to_hwio(w).shape, name="w")
    bt = te.placeholder((m,), name="b")
    y = conv2d_nhwc_oihw(xt, wt, strides=(cfg["stride"],) * 2, pads=cfg["pads"],
                         dilations=(dil, dil), group=g, bias=bt)
    shape = tuple(int(d.value) for d in y.shape)
    got = _run([xt, wt, bt, y], [np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                                 oihw_to_hwio(w), b], np.empty(shape, np.float32))
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("cfg", CASES)
def test_int8_nhwc_bit_exact_with_the_nchw_reference(cfg: dict, dtype: str) -> None:
    c, m, k, g, dil = cfg["c"], cfg["m"], cfg["k"], cfg["group"], cfg.get("dil", 1)
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    x = RNG.integers(lo, hi, (1, c, 9, 7)).astype(dtype)
    w = RNG.integers(-127, 128, (m, c // g, k, k)).astype(np.int8)
    bias = RNG.integers(-4000, 4000, m).astype(np.int32)
    mult, sh = quantize_multipliers(RNG.uniform(2e-4, 4e-3, m))
    table = shift_table(sh)
    attrs = {"strides": (cfg["stride"],) * 2, "pads": cfg["pads"], "dilations": (dil, dil),
             "group": g, "x_zero_point": 3 if dtype == "int8" else 131,
             "y_zero_point": -5 if dtype == "int8" else 120,
             "out_min": lo, "out_max": hi - 1, "out_dtype": dtype}
    want = get_op("QConv").reference([x, w, bias, mult, table], attrs)[0]
    xt = te.placeholder((1, 9, 7, c), dtype, name="x")
    wt = te.placeholder(oihw_to_hwio(w).shape, "int8", name="w")
    bt = te.placeholder((m,), "int32", name="b")
    mt = te.placeholder((m,), "int32", name="m")
    st = te.placeholder((m, 2), "int32", name="s")
    y = qconv2d_nhwc(xt, wt, bt, mt, st, attrs)
    shape = tuple(int(d.value) for d in y.shape)
    got = _run([xt, wt, bt, mt, st, y], [np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                                         oihw_to_hwio(w), bias, mult, table],
               np.empty(shape, dtype))
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), want)
    assert len(np.unique(want)) > 3
