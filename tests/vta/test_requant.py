"""Requantizing on the accelerator (`toolchain.vta.requant`): layers with power-of-two
scales compiled with their bias, rounding shifts and clamp as ALU work, bit-exact with
Kiln's fixed-point `requantize` on the simulators; the plan's refusals; the row cover."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.graph.ops.qops import qconv_acc
from toolchain.quantize.fixed_point import requantize
from toolchain.vta.cfsim import run_cfsim
from toolchain.vta.checker import check_program
from toolchain.vta.compile import (
    compile_conv2d,
    compile_conv2d_im2col,
    compile_dense,
    im2col,
)
from toolchain.vta.fsim import run_fsim
from toolchain.vta.isa import ALU_SHR, Alu
from toolchain.vta.requant import RequantPlan, cover, plan_requant


def _shift_pow(n: np.ndarray) -> np.ndarray:
    """QConv's shift table for multipliers 2**-n (Q31 2**30, shift 1 - n)."""
    return np.stack([np.ones(len(n), np.int64), np.int64(1) << (31 - n)], axis=1)


def _want(acc: np.ndarray, bias: np.ndarray, n: np.ndarray, zp: int, lo: int, hi: int
          ) -> np.ndarray:
    """Kiln's reference requantization (SRDHM + rounding shift), channel axis 0."""
    x = acc.astype(np.int64) + bias.reshape(bias.shape + (1,) * (acc.ndim - bias.ndim))
    shift = (1 - n).reshape((-1,) + (1,) * (acc.ndim - 1))
    return np.clip(requantize(x, 1 << 30, shift) + zp, lo, hi).astype(np.int8)


def _plan(rng: np.random.Generator, w: np.ndarray, bias_shape: tuple[int, ...], zp: int,
          lo: int, n_lo: int = 2, n_hi: int = 14) -> tuple[RequantPlan, np.ndarray,
                                                            np.ndarray]:
    oc = w.shape[0]
    n = rng.integers(n_lo, n_hi, oc)
    bias = rng.integers(-5000, 5000, (oc, *bias_shape)).astype(np.int32)
    axes = tuple(range(1, w.ndim))
    bound = 128 * np.abs(w.astype(np.int64)).sum(axis=axes)
    plan = plan_requant(bias, np.full(oc, 1 << 30), _shift_pow(n), zp, lo, 127, bound)
    assert isinstance(plan, RequantPlan), plan
    return plan, bias, n


# (OC, IC, K, image, pad, stride, output zero point, clamp low): clamps below the zero point
# need the sign term (a second tile), a ReLU clamp (low = zero point) does not
CONVS = [(32, 16, 3, 8, 1, 1, 3, -128), (20, 24, 3, 6, 1, 2, -128, -128),
         (16, 3, 3, 8, 1, 1, 5, -128), (40, 16, 1, 4, 0, 1, -7, -7), (24, 8, 3, 4, 1, 1, 0, 0)]


@pytest.mark.parametrize("case", CONVS, ids=[f"{c[0]}x{c[1]}k{c[2]}lo{c[7]}" for c in CONVS])
def test_convolutions_requantized_on_the_accelerator_are_bit_exact(case: tuple) -> None:
    oc, ic, k, h, pad, stride, zp, lo = case
    rng = np.random.default_rng(oc + ic)
    w = rng.integers(-128, 128, (oc, ic, k, k), dtype=np.int8)
    x = rng.integers(-128, 128, (ic, h, h), dtype=np.int8)
    attrs = {"strides": (stride, stride), "pads": (pad,) * 4, "dilations": (1, 1),
             "group": 1, "x_zero_point": 0}
    acc = qconv_acc(x[None], w, attrs)[0]
    plan, bias, n = _plan(rng, w, acc.shape[1:], zp, lo)       # a bias per position
    want = _want(acc, bias, n, zp, lo, 127)
    np.testing.assert_array_equal(plan.reference(acc), want)
    assert plan.sign == (lo < zp)
    conv = compile_conv2d(w, h, h, 0, stride=stride, pad=pad, requant=plan, layer="c")
    assert check_program(conv.program).ok
    # the sign tile and the constants fit: no ACC row beyond the buffer, LOAD ACC once
    for seed in (0, 3):
        got = conv.read_output(run_fsim(conv.program, conv.image(x), tokens=True,
                                        seed=seed).dram)
        np.testing.assert_array_equal(got, want)
    got = conv.read_output(run_cfsim(conv.program, conv.image(x), tokens=True, seed=7).dram)
    np.testing.assert_array_equal(got, want)
    if k == 3:
        gemm = compile_conv2d_im2col(w, h, h, 0, stride=stride, pad=pad, requant=plan,
                                     vthreads=1, layer="g")
        got = gemm.read_output(run_fsim(gemm.program, gemm.image(im2col(x, gemm.conv)),
                                        tokens=True, seed=1).dram)
        np.testing.assert_array_equal(got.T.reshape(want.shape), want)


@pytest.mark.parametrize("lo", [-128, 0])
def test_channel_blocks_sharing_their_constants_are_each_requantized(lo: int) -> None:
    """One shift for every channel (per-tensor scales): the channel blocks share their
    shift and offset rows, and each block's rows still get the ops."""
    rng = np.random.default_rng(6)
    w = rng.integers(-128, 128, (48, 8, 3, 3), dtype=np.int8)
    x = rng.integers(-128, 128, (8, 4, 4), dtype=np.int8)
    bias = rng.integers(-5000, 5000, 48).astype(np.int32)
    n = np.full(48, 9)
    plan = plan_requant(bias, np.full(48, 1 << 30), _shift_pow(n), 0, lo, 127,
                        128 * np.abs(w.astype(np.int64)).sum(axis=(1, 2, 3)))
    assert isinstance(plan, RequantPlan)
    acc = qconv_acc(x[None], w, {"strides": (1, 1), "pads": (1,) * 4, "dilations": (1, 1),
                                 "group": 1, "x_zero_point": 0})[0]
    conv = compile_conv2d(w, 4, 4, 0, pad=1, requant=plan, vthreads=1)
    got = conv.read_output(run_fsim(conv.program, conv.image(x), tokens=True).dram)
    np.testing.assert_array_equal(got, _want(acc, bias, n, 0, lo, 127))


def test_a_dense_layer_requantized_on_the_accelerator_is_bit_exact() -> None:
    rng = np.random.default_rng(4)
    w = rng.integers(-128, 128, (70, 20), dtype=np.int8)
    x = rng.integers(-128, 128, (6, 70), dtype=np.int8)
    acc = (x.astype(np.int64) @ w.astype(np.int64)).T                  # [N, M]
    plan, bias, n = _plan(rng, w.T, (), -54, -128, n_hi=20)
    dense = compile_dense(w, 6, 0, requant=plan, layer="fc")
    got = dense.read_output(run_fsim(dense.program, dense.image(x), tokens=True, seed=2).dram)
    np.testing.assert_array_equal(got, _want(acc, bias, n, -54, -128, 127).T)


def test_relu_layers_may_have_multiplier_one_half_and_skip_the_sign_tile() -> None:
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (16, 16, 3, 3), dtype=np.int8)
    x = rng.integers(-128, 128, (16, 4, 4), dtype=np.int8)
    plan, bias, n = _plan(rng, w, (), -128, -128, n_lo=1, n_hi=3)
    assert 1 in n.tolist() and not plan.sign
    conv = compile_conv2d(w, 4, 4, 0, pad=1, requant=plan, vthreads=1)
    acc = qconv_acc(x[None], w, {"strides": (1, 1), "pads": (1,) * 4, "dilations": (1, 1),
                                 "group": 1, "x_zero_point": 0})[0]
    got = conv.read_output(run_fsim(conv.program, conv.image(x), tokens=True).dram)
    np.testing.assert_array_equal(got, _want(acc, bias, n, -128, -128, 127))
    # one SHR per channel block and no sign tile: every ALU op writes the tile's rows
    shr = [i for i in conv.program.insns if isinstance(i, Alu) and i.alu_op == ALU_SHR]
    assert shr and all(not i.use_imm for i in shr)


def test_layers_the_alu_cannot_requantize_exactly_are_refused_with_the_reason() -> None:
    bias, bound = np.zeros(2, np.int32), np.array([100, 100])
    good = _shift_pow(np.array([3, 4]))
    assert "not 2**30" in plan_requant(bias, np.array([1 << 30, 1 << 29]), good, 0, -128,
                                       127, bound)
    assert "left shift" in plan_requant(bias, np.full(2, 1 << 30), [[2, 1 << 30]] * 2, 0,
                                        -128, 127, bound)
    # multiplier 1/2 has no sign term: fine under a ReLU clamp, refused without one
    half = _shift_pow(np.array([1, 3]))
    assert isinstance(plan_requant(bias, np.full(2, 1 << 30), half, 0, 0, 127, bound),
                      RequantPlan)
    assert "2**-1" in plan_requant(bias, np.full(2, 1 << 30), half, 0, -128, 127, bound)
    assert "int32" in plan_requant(bias, np.full(2, 1 << 30), good, 100, -128, 127,
                                   np.array([2**31 - 10, 5]))


def test_cover_hits_every_row_once_with_affine_loops() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = sorted(set(rng.integers(0, 300, rng.integers(1, 60)).tolist()))
        if rng.random() < 0.5:  # rectangles, as a tile's interior positions are
            a, b, step = rng.integers(1, 6), rng.integers(1, 9), rng.integers(9, 20)
            rows = sorted({int(i * step + j) for i in range(a) for j in range(b)})
        got = [base + i * fo + j * fi for base, no, fo, ni, fi in cover(rows)
               for i in range(no) for j in range(ni)]
        assert sorted(got) == rows and len(got) == len(rows)
    assert cover(list(range(8, 14)) + list(range(24, 30))) == [(8, 2, 16, 6, 1)]


def _qadd_attrs(za: int, zb: int, sa: int, sb: int, sy: int, zy: int, lo: int) -> dict:
    return {"a_zero_point": za, "b_zero_point": zb, "a_multiplier": 1 << 30, "a_shift": sa,
            "b_multiplier": 1 << 30, "b_shift": sb, "y_multiplier": 1 << 30, "y_shift": sy,
            "left_shift": 20, "y_zero_point": zy, "out_min": lo, "out_max": 127,
            "out_dtype": "int8"}


# ResNet-8's three adds (power-of-two scales), then signed clamps, a left shift, m = 0
QADDS = [(1, -128, 0, 0, -19, -128, -128), (-41, -35, -2, 0, -17, -128, -128),
         (-40, -56, -1, 0, -17, -128, -128), (-40, -56, -1, 0, -17, 3, -128),
         (7, -56, -3, -1, -20, 3, -128), (7, -56, 1, -1, -20, -9, -128),
         (7, -56, -1, -1, -18, -9, -128)]


@pytest.mark.parametrize("case", QADDS)
def test_a_qadd_with_power_of_two_scales_is_one_rounding_shift_of_a_gemm(case: tuple) -> None:
    """Every pair of int8 inputs: the plan's formula equals QAdd's reference, and the
    compiled program (both inputs through the GEMM, the epilogue on the ALU) equals it on
    the simulator."""
    from toolchain.graph.ops import get_op
    from toolchain.vta.requant import plan_qadd

    attrs = _qadd_attrs(*case)
    c = 4
    a = np.tile(np.arange(-128, 128, dtype=np.int8), 256 * c // 4).reshape(1, c, -1)
    b = np.repeat(np.arange(-128, 128, dtype=np.int8), 256 * c // 4).reshape(1, c, -1)
    want = get_op("QAdd").reference([a, b], attrs)[0][0]                  # [C, P]
    got = plan_qadd(attrs, c)
    assert not isinstance(got, str), got
    plan, (da, db) = got
    u = a[0].astype(np.int64) * da + b[0].astype(np.int64) * db
    np.testing.assert_array_equal(plan.reference(u), want)
    if case[0] == 7 and case[2] == -3:  # one program on the simulator (a signed clamp)
        pix = 64
        w = np.zeros((2 * c, c), np.int8)
        w[np.arange(c), np.arange(c)] = da
        w[c + np.arange(c), np.arange(c)] = db
        x = np.concatenate([a[0, :, :pix], b[0, :, :pix]]).T.copy()        # [P, 2C]
        layer = compile_dense(w, pix, 0, requant=plan, vthreads=1)
        out = layer.read_output(run_fsim(layer.program, layer.image(x), tokens=True).dram)
        np.testing.assert_array_equal(out.T, want[:, :pix])


def test_qadds_the_alu_cannot_compute_exactly_are_refused_with_the_reason() -> None:
    from toolchain.vta.requant import plan_qadd

    attrs = _qadd_attrs(0, 0, 0, 0, -19, 0, -128)
    assert "not 2**30" in plan_qadd({**attrs, "b_multiplier": 3 << 28}, 4)
    assert "64" in plan_qadd({**attrs, "a_shift": -8}, 4)           # weights 1 and 256
    assert "rounding shift" in plan_qadd({**attrs, "y_shift": 1}, 4)
