"""Built int8 kernels (default CPU schedules, compiled C) vs the integer references: bit-exact."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401  (registers ops)
from toolchain.quantize.fixed_point import (
    quantize_multiplier,
    quantize_multipliers,
    shift_table,
)
from toolchain.schedules import compile_op

RNG = np.random.default_rng(2024)


def _requant(name: str, n: int, lo: float, hi: float) -> list[Value]:
    m, s = quantize_multipliers(RNG.uniform(lo, hi, n))
    return [Value.constant(f"{name}_b", RNG.integers(-5000, 5000, n).astype(np.int32)),
            Value.constant(f"{name}_m", m), Value.constant(f"{name}_s", shift_table(s))]


def _out(dtype: str, zp: int, lo: int | None = None) -> dict:
    qmin, qmax = (-128, 127) if dtype == "int8" else (0, 255)
    return {"y_zero_point": zp, "out_min": qmin if lo is None else lo, "out_max": qmax,
            "out_dtype": dtype}


def _check(node: Node, x_arrays: list[np.ndarray]) -> None:
    op = compile_op(node, "c-generic")
    got = op(*x_arrays)[0]
    args = [v.data if v.data is not None else x_arrays.pop(0) for v in node.inputs]
    want = get_op(node.op).reference(args, node.attrs)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # the test is not vacuous: outputs vary and some saturate or sit at the clamp
    assert len(np.unique(want)) > 3


def _qx(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return RNG.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("cfg", [
    dict(c=8, m=12, k=3, stride=1, pads=(1, 1, 1, 1), group=1, dil=1),
    dict(c=8, m=8, k=3, stride=2, pads=(0, 0, 1, 1), group=8, dil=1),   # depthwise, TF SAME
    dict(c=6, m=4, k=1, stride=1, pads=(0, 0, 0, 0), group=1, dil=1),   # pointwise
    dict(c=4, m=6, k=3, stride=1, pads=(2, 2, 2, 2), group=2, dil=2),   # grouped, dilated
])
def test_qconv_bit_exact(cfg: dict, dtype: str) -> None:
    c, m, k = cfg["c"], cfg["m"], cfg["k"]
    x = Value("x", (1, c, 9, 7), dtype)
    w = Value.constant("w", RNG.integers(-127, 128, (m, c // cfg["group"], k, k)).astype(np.int8))
    zp = 3 if dtype == "int8" else 131
    yzp = -5 if dtype == "int8" else 120
    attrs = {"strides": (cfg["stride"],) * 2, "pads": cfg["pads"],
             "dilations": (cfg["dil"],) * 2, "group": cfg["group"], "x_zero_point": zp,
             **_out(dtype, yzp)}
    node = Node("QConv", "conv", [x, w, *_requant("c", m, 1e-4, 3e-3)], [], attrs)
    out = get_op("QConv").infer(node)[0]
    node = node.replace(outputs=(Value("y", out.shape, out.dtype),))
    _check(node, [_qx(x.shape, dtype)])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qgemm_bit_exact(dtype: str) -> None:
    x = Value("x", (3, 40), dtype)
    w = Value.constant("w", RNG.integers(-127, 128, (10, 40)).astype(np.int8))
    attrs = {"x_zero_point": -7 if dtype == "int8" else 140, **_out(dtype, 2, lo=2)}  # Relu
    node = Node("QGemm", "fc", [x, w, *_requant("g", 10, 5e-4, 5e-3)], [Value("y", (3, 10),
                                                                            dtype)], attrs)
    _check(node, [_qx(x.shape, dtype)])


def test_qadd_bit_exact() -> None:
    a, b = Value("a", (2, 5, 6), "int8"), Value("b", (2, 5, 6), "int8")
    sa, sb, sy = 0.05, 0.031, 0.07
    twice = 2 * max(sa, sb)
    pairs = [quantize_multiplier(r) for r in (sa / twice, sb / twice, twice / (2**20 * sy))]
    attrs = {"a_zero_point": 4, "b_zero_point": -9, "a_multiplier": pairs[0][0],
             "a_shift": pairs[0][1], "b_multiplier": pairs[1][0], "b_shift": pairs[1][1],
             "y_multiplier": pairs[2][0], "y_shift": pairs[2][1], "left_shift": 20,
             **_out("int8", -1)}
    node = Node("QAdd", "add", [a, b], [Value("y", a.shape, "int8")], attrs)
    _check(node, [_qx(a.shape, "int8"), _qx(b.shape, "int8")])


@pytest.mark.parametrize("kernel,pads", [((3, 3), (0, 0, 0, 0)), ((2, 3), (1, 1, 1, 1))])
def test_qavgpool_bit_exact(kernel: tuple[int, int], pads: tuple[int, ...]) -> None:
    x = Value("x", (1, 5, 8, 9), "uint8")
    m, s = quantize_multiplier(0.9 / (kernel[0] * kernel[1]))
    attrs = {"kernel_shape": kernel, "strides": (2, 2), "pads": pads, "x_zero_point": 128,
             "multiplier": m, "shift": s, **_out("uint8", 128)}
    node = Node("QAvgPool", "pool", [x], [], attrs)
    out = get_op("QAvgPool").infer(node)[0]
    node = node.replace(outputs=(Value("y", out.shape, out.dtype),))
    _check(node, [_qx(x.shape, "uint8")])


def test_generated_kernel_is_integer_only() -> None:
    x = Value("x", (2, 24), "int8")
    w = Value.constant("w", RNG.integers(-127, 128, (6, 24)).astype(np.int8))
    node = Node("QGemm", "fc", [x, w, *_requant("g", 6, 5e-4, 5e-3)],
                [Value("y", (2, 6), "int8")], {"x_zero_point": 1, **_out("int8", 2)})
    src = compile_op(node, "c-generic").module.get_source()
    start = src.rfind("kiln_fc_int8(")
    assert start > 0
    body = src[start:]
    # the int64 requantization arithmetic is the helper the body calls (c_helpers)
    assert "int8_t" in body and "kiln_x86_requantize" in body and "int64_t" in src
    assert "float" not in body and "double" not in body
