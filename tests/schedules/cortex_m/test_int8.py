"""Cortex-M int8 DSP schedules: tensorized with the cortex-m4/m7 dot_q15q7 intrinsics, bit-exact
with the integer references on the host (portable C fallbacks of SXTB16/SMLAD) and on QEMU
(ACLE intrinsics), and the Arm build really contains SMLAD/SXTB16."""

from __future__ import annotations

import subprocess
from typing import Any

import numpy as np
import pytest

from tests.schedules._cpu_targets import cross_compile_m4, run_aliased, run_overlapped
from tests.schedules._cpu_targets import schedule_info as _info
from toolchain.codegen import get_renderer
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401  (registers ops)
from toolchain.quantize.fixed_point import quantize_multipliers, shift_table
from toolchain.runtime.build import build
from toolchain.schedules.cortex_m.int8 import MAX_GROUPS, PAIR_GROUPS, dot_intrinsic, pair_intrinsic
from toolchain.schedules.registry import schedule_for
from toolchain.target import load_target
from toolchain.tir.transform.pipeline import lower
from toolchain.topi.int8 import pack_dsp_weights

RNG = np.random.default_rng(7)


def _requant(n: int) -> list[Value]:
    m, s = quantize_multipliers(RNG.uniform(2e-4, 4e-3, n))
    return [Value.constant("b", RNG.integers(-4000, 4000, n).astype(np.int32)),
            Value.constant("m", m), Value.constant("s", shift_table(s))]


def _out(dtype: str, zp: int) -> dict:
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    return {"y_zero_point": zp, "out_min": lo, "out_max": hi, "out_dtype": dtype}


def _qx(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    return RNG.integers(lo, hi, shape).astype(dtype)


def _conv(c: int, m: int, k: int, stride: int, pads: tuple[int, ...], dtype: str = "int8",
          hw: tuple[int, int] = (7, 6), group: int = 1) -> Node:
    x = Value("x", (1, c, *hw), dtype)
    w = Value.constant("w", RNG.integers(-127, 128, (m, c // group, k, k)).astype(np.int8))
    attrs = {"strides": (stride, stride), "pads": pads, "dilations": (1, 1), "group": group,
             "x_zero_point": 5 if dtype == "int8" else 130, **_out(dtype, -3)}
    node = Node("QConv", "conv", [x, w, *_requant(m)], [], attrs)
    out = get_op("QConv").infer(node)[0]
    return node.replace(outputs=(Value("y", out.shape, out.dtype),))


def _gemm(n: int, k: int, m: int) -> Node:
    x = Value("x", (n, k), "int8")
    w = Value.constant("w", RNG.integers(-127, 128, (m, k)).astype(np.int8))
    return Node("QGemm", "fc", [x, w, *_requant(m)], [Value("y", (n, m), "int8")],
                {"x_zero_point": -9, **_out("int8", 4)})


def _run_host(node: Node, x: np.ndarray, target: Any = "cortex-m4") -> tuple[np.ndarray, dict]:
    """Schedule for ``target``, build the kernel for the host (portable fallbacks), run."""
    s = schedule_for(node, target)
    mod = build(s.schedule, "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
    out = np.empty(node.outputs[0].shape, node.outputs[0].dtype)
    mod(x, *[v.data for v in s.input_values[1:]], out)
    return out, _info(s)


def _reference(node: Node, x: np.ndarray) -> np.ndarray:
    return get_op(node.op).reference([x, *[v.data for v in node.inputs[1:]]], node.attrs)[0]


# --------------------------------------------------------------------------- weight packing

def test_pack_dsp_weights_pairs_match_sxtb16_lanes() -> None:
    w = RNG.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)   # K = 18 -> 20
    p = pack_dsp_weights(w)
    assert p.shape == (3, 20) and p.dtype == np.int8
    flat = np.zeros((3, 20), np.int8)
    flat[:, :18] = w.reshape(3, 18)   # the padded tail is zero
    # SXTB16 of a word takes bytes 0 and 2, SXTB16 ROR 8 bytes 1 and 3: they must be k, k+1
    # and k+2, k+3 of each group of four
    for g in range(5):
        word = p[:, 4 * g:4 * g + 4]
        np.testing.assert_array_equal(word[:, [0, 2]], flat[:, 4 * g:4 * g + 2])
        np.testing.assert_array_equal(word[:, [1, 3]], flat[:, 4 * g + 2:4 * g + 4])


# --------------------------------------------------------------------------- tiles, helpers

@pytest.mark.parametrize("channels,k,want,groups", [
    (64, 64, "4x64", 16), (64, 40, "4x40", 10), (8, 36, "4x4", 1), (8, 8, "4x8", 2),
    (12, 96, "4x48", 12), (4, 28, "4x4", 1), (6, 64, "1x4", 1),
])
def test_one_call_takes_the_largest_loop_of_groups(channels: int, k: int, want: str,
                                                   groups: int) -> None:
    """The largest MAX_GROUPS entry dividing K / 4 (96 k: 24 groups -> 12 a call, 48 k);
    one channel a call when 4 does not divide the channel count."""
    assert dot_intrinsic(load_target("cortex-m4"), channels, k) == (
        f"cortex-m4.dot_q15q7_{want}", 1 if channels % 4 else 4, groups)


@pytest.mark.parametrize("channels,k,width,want", [
    (16, 144, 32, ("2x2x144", 36)), (32, 96, 16, ("2x2x96", 24)), (8, 4, 2, ("2x2x4", 1)),
    (16, 28, 32, ("2x2x28", 7)),
    (6, 64, 4, ("2x2x64", 16)), (16, 144, 5, None), (5, 16, 8, None),
])
def test_two_pixel_calls_take_even_rows_and_channel_pairs(channels: int, k: int, width: int,
                                                         want: tuple | None) -> None:
    """Two pixels of a row a call where the row width and the channel count are even, the
    largest PAIR_GROUPS entry dividing K / 4 (24 groups: 24, 1 group: 1); None: one pixel a call."""
    got = pair_intrinsic(load_target("cortex-m4"), channels, k, width)
    assert got == (None if want is None else (f"cortex-m4.dot_q15q7_{want[0]}", want[1]))


def test_requantize_helper_equals_requantize_pow(tmp_path) -> None:
    """kiln_cm_requantize (int32 fast path, out-of-line saturation, SRDHM as one rounding
    shift) gives requantize_pow's integers, overflowing sums and extreme multipliers too;
    kiln_cm_requantize_b (no left shift, |acc + bias| < 2**30: SRDHM as SMMULR) as well."""
    import ctypes
    import shutil

    import yaml

    from toolchain.quantize.fixed_point import requantize_pow

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no host C compiler")
    from pathlib import Path

    helpers = yaml.safe_load(
        (Path(__file__).parents[3] / "targets" / "cortex-m4.yaml").read_text())["c_helpers"]
    src = tmp_path / "rq.c"
    src.write_text("#include <stdint.h>\n#include <string.h>\n" + helpers + """
void run(int n, const int32_t *a, const int32_t *b, const int32_t *m, const int32_t *l,
         const int32_t *r, int32_t *o) {
  for (int i = 0; i < n; ++i) o[i] = kiln_cm_requantize(a[i], b[i], m[i], l[i], r[i]);
}
void run_b(int n, const int32_t *a, const int32_t *b, const int32_t *m, const int32_t *r,
           int32_t *o) {
  for (int i = 0; i < n; ++i) o[i] = kiln_cm_requantize_b(a[i], b[i], m[i], r[i]);
}
void run_s(int n, const int32_t *a, const int32_t *b, const int32_t *m, const int32_t *h,
           const int32_t *e, int32_t *o) {
  for (int i = 0; i < n; ++i) o[i] = kiln_cm_requantize_s(a[i], b[i], m[i], h[i], e[i]);
}
""")
    so = tmp_path / "rq.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(so), str(src)],
                   check=True, capture_output=True)
    rng = np.random.default_rng(11)
    n, lo, hi = 200_000, -(2**31), 2**31 - 1

    def pick(edges: list[int]) -> np.ndarray:
        kind = rng.integers(0, 3, n)
        return np.where(kind == 0, rng.integers(lo, hi, n, endpoint=True),
                        np.where(kind == 1, rng.integers(-70000, 70000, n),
                                 rng.choice(np.array(edges, np.int64), n))).astype(np.int32)

    acc, bias = pick([lo, hi, 0, -1, 1]), pick([lo, hi, 0, -1, 1])
    mult = pick([hi, lo + 1, 1 << 30, 0, 1])
    mult[mult == lo] = lo + 1   # |mult| < 2**31 (quantize_multiplier's range)
    shift = rng.integers(-31, 31, n)
    lp = (2 ** np.maximum(shift, 0)).astype(np.int32)
    rq = (2 ** (30 - np.minimum(np.maximum(-shift, 0), 30))).astype(np.int32)
    out = np.zeros(n, np.int32)
    ptr = ctypes.c_void_p
    ctypes.CDLL(str(so)).run(ctypes.c_int(n),
                             *(ptr(v.ctypes.data) for v in (acc, bias, mult, lp, rq, out)))
    want = requantize_pow(acc.astype(np.int64) + bias, mult, lp, rq)
    np.testing.assert_array_equal(out, want)
    assert len(np.unique(want)) > 1000
    # kiln_cm_requantize_b: lp = 1 and |acc + bias| < 2**30 (SRDHM as one SMMULR)
    edge = 2**30 - 1
    acc = np.where(rng.integers(0, 4, n) == 0, rng.choice([edge, -edge, 0, 1, -1], n),
                   rng.integers(-(2**29), 2**29, n)).astype(np.int32)
    bias = np.clip(rng.integers(-(2**29), 2**29, n), -edge - acc.astype(np.int64),
                   edge - acc.astype(np.int64)).astype(np.int32)
    rq[shift > 0] = 1 << 30   # no left shift
    ctypes.CDLL(str(so)).run_b(ctypes.c_int(n),
                               *(ptr(v.ctypes.data) for v in (acc, bias, mult, rq, out)))
    want = requantize_pow(acc.astype(np.int64) + bias, mult, np.ones(n, np.int32), rq)
    np.testing.assert_array_equal(out, want)
    assert len(np.unique(want)) > 1000
    # kiln_cm_requantize_s: the same with e >= 1 and the output zero point inside the shift,
    # its operands from pack_shift_halves, wherever requantize_shift's int32 bound holds
    from toolchain.topi.int8 import pack_shift_halves

    e = rng.integers(1, 31, n)
    zp = rng.choice(np.array([-128, 127, 255, 0, -1, 3]), n)
    ok = 2**30 + (1 << (e - 1)) + (np.abs(zp) << e) < 2**31
    e[~ok] = rng.integers(1, 23, int((~ok).sum()))
    assert (2**30 + (1 << (e - 1)) + (np.abs(zp) << e) < 2**31).all() and (e >= 20).sum() > 100
    rq = (1 << (30 - e)).astype(np.int32)
    round_zp, ee = np.empty(n, np.int32), np.empty(n, np.int32)
    for z in np.unique(zp):
        at = zp == z
        packed = pack_shift_halves(np.stack([np.ones(int(at.sum())), rq[at]], 1), int(z))
        round_zp[at], ee[at] = packed[:, 0], packed[:, 1]
    ctypes.CDLL(str(so)).run_s(ctypes.c_int(n), *(ptr(v.ctypes.data) for v in
                                                  (acc, bias, mult, round_zp, ee, out)))
    want = requantize_pow(acc.astype(np.int64) + bias, mult, np.ones(n, np.int32), rq) + zp
    np.testing.assert_array_equal(out, want)
    assert len(np.unique(want)) > 1000


def test_shift_requantization_only_where_int32_holds_it() -> None:
    """QConv takes kiln_cm_requantize_s only when every channel shifts right (e >= 1) and
    2**30 + 2**(e-1) + |zp| 2**e stays below 2**31; otherwise kiln_cm_requantize_b."""
    from toolchain.topi.int8 import requantize_bounded, requantize_shift

    node = _conv(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8)
    assert requantize_bounded(node) and requantize_shift(node)
    table = np.asarray(node.input(4).data).copy()
    for row, zp, want in (((1, 1 << 30), -3, False),      # e = 0
                          ((1, 1 << 7), -3, True),        # e = 23: 3 * 2**23 fits
                          ((1, 1 << 7), -128, False),     # 2**30 + 2**22 + 2**30 does not
                          ((1, 1 << 8), -128, True)):     # e = 22: 2**30 + 2**21 + 2**29
        table[3] = row
        n = node.replace(inputs=(*node.inputs[:4], Value.constant("s", table.copy())),
                         attrs={**node.attrs, "y_zero_point": zp})
        assert requantize_shift(n) is want, (row, zp)


# --------------------------------------------------------------------------- host, bit-exact

@pytest.mark.parametrize("cfg", [
    dict(c=3, m=8, k=3, stride=1, pads=(1, 1, 1, 1)),                  # K = 27 (padded to 28)
    dict(c=8, m=6, k=1, stride=1, pads=(0, 0, 0, 0)),                  # pointwise, M % 4 != 0
    dict(c=4, m=12, k=3, stride=2, pads=(0, 0, 1, 1), dtype="uint8"),  # TF SAME, uint8
    dict(c=1, m=4, k=4, stride=2, pads=(1, 2, 1, 2), hw=(10, 4)),       # KWS-like first conv
    dict(c=6, m=8, k=2, stride=1, pads=(0, 0, 1, 1)),                  # K = 24: 24 k a call
    dict(c=64, m=8, k=1, stride=1, pads=(0, 0, 0, 0), hw=(5, 3)),      # KWS pointwise: 64 k
    dict(c=10, m=4, k=2, stride=1, pads=(0, 0, 0, 0)),                 # K = 40: 40 k a call
    dict(c=16, m=16, k=3, stride=1, pads=(1, 1, 1, 1), hw=(6, 8)),     # pairs, K = 144
    dict(c=3, m=16, k=3, stride=2, pads=(0, 0, 1, 1), hw=(9, 8), dtype="uint8"),  # pairs, s2
    dict(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), hw=(3, 5)),       # odd width and count
    dict(c=64, m=4, k=3, stride=1, pads=(1, 1, 1, 1), hw=(3, 4)),      # K = 576: rows > 1 KiB
    dict(c=4, m=5, k=3, stride=1, pads=(1, 1, 1, 1), hw=(4, 6)),       # odd channels: 1x4
])
def test_qconv_dsp_is_tensorized_and_bit_exact(cfg: dict) -> None:
    node = _conv(**cfg)
    x = _qx(node.inputs[0].shape, node.inputs[0].dtype)
    got, info = _run_host(node, x)
    assert info["schedule"] == "int8 dsp"
    groups = (cfg["c"] * cfg["k"] ** 2 + 3) // 4  # groups of four k (padded)
    tile = "1x4" if cfg["m"] % 4 else f"4x{4 * next(g for g in MAX_GROUPS if groups % g == 0)}"
    weights = "q7"
    if cfg["m"] % 2 == 0:  # two pixels a call (of a row; odd widths: of the flat index)
        tile = f"2x2x{4 * next(g for g in PAIR_GROUPS if groups % g == 0)}"
        weights = "q15" if cfg["k"] > 1 else "q7"  # k x k: weights widened to int16
    assert info["intrinsic"] == f"cortex-m4.dot_q15{weights}_{tile}"
    want = _reference(node, x)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3  # not vacuous


@pytest.mark.parametrize("cfg", [
    dict(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1)),                  # pairs
    dict(c=8, m=5, k=1, stride=1, pads=(0, 0, 0, 0)),                  # 1x4
    dict(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8),         # depthwise
])
def test_left_shifted_channels_keep_the_general_requantization(cfg: dict) -> None:
    """Multipliers above 1 (a left shift in some channels) keep ``lp`` from the shift table;
    all-right shifts (the other tests) make it the constant 1. Both bit-exact."""
    from toolchain.topi.int8 import unit_left_shift

    node = _conv(**cfg)
    assert unit_left_shift(node)
    m, sh = quantize_multipliers(RNG.uniform(0.05, 4.0, cfg["m"]))
    assert (sh > 0).any()
    w = node.input(1)  # small weights, bias and inputs: outputs inside int8 at a scale of 4
    node = node.replace(inputs=(
        node.inputs[0], Value.constant("w", RNG.integers(-2, 3, w.shape).astype(np.int8)),
        Value.constant("b", RNG.integers(-20, 20, cfg["m"]).astype(np.int32)),
        Value.constant("m", m), Value.constant("s", shift_table(sh))))
    assert not unit_left_shift(node)
    x = RNG.integers(2, 9, node.inputs[0].shape).astype(np.int8)   # zero point 5
    got, info = _run_host(node, x)
    assert info["schedule"] == "int8 dsp"
    want = _reference(node, x)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3


@pytest.mark.parametrize("n,k,m,intrin", [
    (1, 64, 12, "dot_s8s8_4x8"),     # int8 x int8, zero point folded into the bias
    (2, 36, 8, "dot_s8s8_4x4"),
    (2, 40, 10, "dot_s8s8_1x4"),
    (2, 37, 10, "dot_q15q7_1x4"),    # K % 4 != 0: the widened, padded input row
])
def test_qgemm_dsp_bit_exact(n: int, k: int, m: int, intrin: str) -> None:
    node = _gemm(n, k, m)
    x = _qx((n, k), "int8")
    got, info = _run_host(node, x, "cortex-m7")
    assert info == {"schedule": "int8 dsp", "intrinsic": f"cortex-m7.{intrin}"}
    want = _reference(node, x)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3


@pytest.mark.parametrize("cfg", [
    dict(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8),
    dict(c=8, m=8, k=3, stride=2, pads=(0, 0, 1, 1), group=8, hw=(9, 7)),   # TF SAME
    dict(c=4, m=4, k=5, stride=1, pads=(2, 2, 2, 2), group=4, dtype="uint8"),  # 2 groups of 4
    dict(c=6, m=6, k=3, stride=1, pads=(1, 1, 1, 1), group=6, hw=(70, 60)),  # row bands
])
def test_depthwise_dsp_is_tensorized_and_bit_exact(cfg: dict) -> None:
    node = _conv(**cfg)
    x = _qx(node.inputs[0].shape, node.inputs[0].dtype)
    got, info = _run_host(node, x)
    assert info.pop("in_place", None) == (0 if cfg["stride"] == 1 and "hw" not in cfg else None)
    assert info == {"schedule": "int8 dsp", "intrinsic": "cortex-m4.dwconv_q15q7_1x4"}
    want = _reference(node, x)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3


def _qadd(dtype: str, zp: int, ls: int, shape: tuple[int, ...] = (2, 5, 6),
          sb: float = 0.031, y_ratio: float | None = None) -> Node:
    """A QAdd of scales 0.05 and ``sb`` (TFLite's scheme); ``y_ratio`` sets the output's
    real multiplier (default: an output scale of 0.07)."""
    from toolchain.quantize.fixed_point import quantize_multiplier

    a, b = Value("a", shape, dtype), Value("b", shape, dtype)
    sa = 0.05
    twice = 2 * max(sa, sb)
    sy = 0.07 if y_ratio is None else twice / (2**ls * y_ratio)
    pairs = [quantize_multiplier(r) for r in (sa / twice, sb / twice, twice / (2**ls * sy))]
    attrs = {"a_zero_point": 4, "b_zero_point": -9, "a_multiplier": pairs[0][0],
             "a_shift": pairs[0][1], "b_multiplier": pairs[1][0], "b_shift": pairs[1][1],
             "y_multiplier": pairs[2][0], "y_shift": pairs[2][1], "left_shift": ls,
             **_out(dtype, zp)}
    return Node("QAdd", "add", [a, b], [Value("y", a.shape, dtype)], attrs)


@pytest.mark.parametrize("dtype,zp,ls", [("int8", -1, 20), ("uint8", 128, 20), ("int8", 3, 22)])
def test_qadd_dsp_bit_exact(dtype: str, zp: int, ls: int) -> None:
    """Without side tables (``node_compute(..., algorithm="dsp")``): the three
    requantizations by the C helper; with left_shift <= 20 by the bounded one (|side| <
    255 * 2**20), with 22 by the general one."""
    from toolchain import te
    from toolchain.intrinsics import load_intrinsics
    from toolchain.schedules.generic.int8 import schedule_rules
    from toolchain.topi.registry import node_compute

    load_intrinsics(load_target("cortex-m4"))  # the C helpers the lowering attaches
    node = _qadd(dtype, zp, ls)
    xa, xb = _qx(node.inputs[0].shape, dtype), _qx(node.inputs[1].shape, dtype)
    nc = node_compute(node, algorithm="dsp")
    sch = schedule_rules(te.create_prim_func(nc.inputs + nc.outputs, name="qadd"),
                         load_target("cortex-m4"), "QAdd")
    code = get_renderer("c", openmp=False).render(lower(sch)).code
    assert "kiln_cm_requantize(" in code and "static inline int32_t kiln_cm_requantize" in code
    calls = code.split("int32_t kiln_", 1)[1].split("\n}\n")[-2]  # the kernel's body
    assert calls.count("kiln_cm_requantize_b(" if ls <= 20 else "kiln_cm_requantize(") == 3
    mod = build(sch, "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
    got = np.empty(xa.shape, dtype)
    mod(xa, xb, got)
    want = get_op("QAdd").reference([xa, xb], node.attrs)[0]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3


@pytest.mark.parametrize("dtype,zp,ls,more,finish", [
    ("int8", -1, 20, {}, "kiln_cm_requantize_s("),
    ("uint8", 128, 20, {}, "kiln_cm_requantize_s("),
    ("int8", 3, 0, {"y_ratio": 0.75}, "kiln_cm_requantize_b("),  # no output shift: e = 0
    ("int8", 3, 23, {"sb": 0.05}, "kiln_cm_requantize(")])      # sums up to 255 * 2**23
def test_qadd_side_tables_bit_exact(dtype: str, zp: int, ls: int, more: dict,
                                    finish: str) -> None:
    """The Cortex-M QAdd reads each side from a 256-entry table computed at compile time
    (kernel inputs 2 and 3) and requantizes the sum once: by the shift helper where the
    table sums stay below 2**30 and the output divides by 2**e, e >= 1; by the bounded one
    where it does not shift; by the general one where the sums reach 2**30. All 256 values
    of each side and every pair of edge values, bit-exact with the reference."""
    from toolchain.topi.int8 import qadd_side_table

    node = _qadd(dtype, zp, ls, (4, 16, 16), **more)
    lo = -128 if dtype == "int8" else 0
    every = np.arange(lo, lo + 256).astype(dtype)
    xa = np.tile(every, 4).reshape(4, 16, 16)
    xb = RNG.permutation(xa.reshape(-1)).reshape(4, 16, 16)
    edges = np.array([lo, lo + 1, lo + 127, lo + 128, lo + 254, lo + 255], dtype)
    xa[0, 0, :6], xb[0, 0, :6] = edges, edges[::-1]
    xa[0, 1, :6], xb[0, 1, :6] = edges, edges
    s = schedule_for(node, "cortex-m4")
    assert s.info["sides"] == "tables"
    assert [v.name for v in s.input_values] == ["a", "b", "add_side_a", "add_side_b"]
    for v, p in zip(s.input_values[2:], "ab", strict=True):
        np.testing.assert_array_equal(v.data, qadd_side_table(node.attrs, p, dtype))
    code = get_renderer("c", openmp=False).render(lower(s.schedule)).code
    body = code.split("int32_t kiln_", 1)[1].split("\n}\n")[-2]  # the kernel's body
    assert body.count("kiln_cm_requantize") == 1 and finish in body, body
    mod = build(s.schedule, "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
    got = np.empty(xa.shape, dtype)
    mod(xa, xb, *[v.data for v in s.input_values[2:]], got)
    want = get_op("QAdd").reference([xa, xb], node.attrs)[0]
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 100


@pytest.mark.parametrize("cfg", [
    dict(c=12, m=12, k=1, stride=1, pads=(0, 0, 0, 0), hw=(5, 7)),       # pointwise
    dict(c=64, m=64, k=1, stride=1, pads=(0, 0, 0, 0), hw=(25, 5)),      # KWS pointwise
    dict(c=6, m=6, k=1, stride=1, pads=(0, 0, 0, 0), dtype="uint8"),    # pairs, uint8
    dict(c=16, m=16, k=1, stride=1, pads=(0, 0, 0, 0), hw=(3, 8)),      # pairs, 16 k
    dict(c=5, m=5, k=1, stride=1, pads=(0, 0, 0, 0), hw=(3, 5)),        # one pixel a call
    dict(c=8, m=8, k=3, stride=1, pads=(1, 1, 1, 1), group=8),          # depthwise
    dict(c=4, m=4, k=5, stride=1, pads=(2, 2, 2, 2), group=4, dtype="uint8"),
    dict(c=64, m=64, k=3, stride=1, pads=(1, 1, 1, 1), group=64, hw=(25, 5)),  # KWS depthwise
])
def test_in_place_kernels_are_bit_exact_over_their_own_input(cfg: dict) -> None:
    """The kernels that say they may write over their input (``OpSchedule.in_place``) give the
    reference's bytes when they do."""
    node = _conv(**cfg)
    x = _qx(node.inputs[0].shape, node.inputs[0].dtype)
    got, info = run_aliased(node, x)
    assert info["in_place"] == 0
    want = _reference(node, x)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 3


def test_aliasing_check_catches_a_kernel_that_reads_its_neighbours() -> None:
    """A 3x3 convolution reads pixels an earlier pixel's outputs overwrote: it does not say
    in_place, and run over its own input it really is wrong (so the test above can fail)."""
    node = _conv(8, 8, 3, 1, (1, 1, 1, 1))
    x = _qx(node.inputs[0].shape, "int8")
    got, info = run_aliased(node, x)
    assert "in_place" not in info
    assert (got != _reference(node, x)).any()


@pytest.mark.parametrize("cfg", [
    dict(c=8, m=16, k=1, stride=1, pads=(0, 0, 0, 0)),                  # channels change
    dict(c=8, m=8, k=1, stride=2, pads=(1, 1, 1, 1), hw=(2, 2)),        # same shape, stride 2
    dict(c=6, m=6, k=3, stride=1, pads=(1, 1, 1, 1), group=6, hw=(70, 60)),  # row bands
    dict(c=8, m=8, k=3, stride=2, pads=(0, 0, 1, 1), group=8, hw=(9, 7)),    # smaller out
])
def test_kernels_that_may_not_write_over_their_input_do_not_say_so(cfg: dict) -> None:
    s = schedule_for(_conv(**cfg), "cortex-m4")
    assert s.info["schedule"] == "int8 dsp"
    assert s.in_place is None


@pytest.mark.parametrize("cfg,kind", [
    (dict(c=8, m=16, k=1, stride=1, pads=(0, 0, 0, 0)), "pixels"),           # more channels
    (dict(c=16, m=8, k=1, stride=1, pads=(0, 0, 0, 0)), "pixels"),           # fewer
    (dict(c=4, m=8, k=3, stride=1, pads=(1, 1, 1, 1)), "pixels"),            # 3 x 3
    (dict(c=4, m=8, k=3, stride=2, pads=(0, 0, 1, 1), hw=(9, 8)), "pixels"),  # 3 x 3 / 2
    (dict(c=8, m=8, k=3, stride=2, pads=(0, 0, 1, 1), group=8, hw=(9, 7)), "channels"),
    (dict(c=3, m=3, k=3, stride=1, pads=(1, 1, 1, 1), group=3, hw=(70, 60)), "rows"),
])
def test_overlapped_kernels_are_bit_exact_at_their_lead(cfg: dict, kind: str) -> None:
    """Each DSP convolution declares its access order (``OpSchedule.overlap``); run with
    its output starting the declared lead before its input in one poisoned buffer, it
    gives the reference's bytes.  One byte short of the lead, where the access order says
    input bytes are overwritten before their last read, the dense 3 x 3 one is wrong (so
    the check can fail)."""
    node = _conv(**cfg)
    x = _qx(node.inputs[0].shape, node.inputs[0].dtype)
    want = _reference(node, x)
    s = schedule_for(node, "cortex-m4")
    assert s.overlap is not None and s.overlap.kind == kind
    lead = s.overlap.lead(1)
    assert lead is not None and lead < node.outputs[0].nbytes
    for poison in (0x00, 0xA5):
        got, _ = run_overlapped(node, x, lead, poison=poison)
        np.testing.assert_array_equal(got, want)
    if kind == "pixels" and cfg["k"] == 3 and cfg["stride"] == 1:
        assert lead > 0 and s.overlap.clobbered(lead - 1) > 0
        got, _ = run_overlapped(node, x, lead - 1)
        assert (got != want).any()


def test_dense_layers_declare_no_access_order() -> None:
    assert schedule_for(_gemm(1, 16, 8), "cortex-m4").overlap is None


def test_grouped_conv_keeps_the_generic_int8_schedule() -> None:
    node = _conv(4, 6, 3, 1, (1, 1, 1, 1), group=2)
    x = _qx(node.inputs[0].shape, "int8")
    got, info = _run_host(node, x)
    assert info["schedule"] == "int8"
    np.testing.assert_array_equal(got, _reference(node, x))


def test_dsp_kernel_source_uses_acle_with_portable_fallback() -> None:
    s = schedule_for(_conv(4, 8, 3, 1, (1, 1, 1, 1)), "cortex-m4")
    code = get_renderer("c", openmp=False).render(
        lower(s.schedule)).code
    assert "#if defined(__ARM_FEATURE_DSP)" in code and "__smlad(" in code
    assert "static inline int32_t kiln_smlad(" in code  # the host fallback
    assert "kiln_m4_dot_q15q15_2x2x36_" in code  # two pixels of the 6-wide rows a call
    helpers = code[code.index("#if defined(__ARM_FEATURE_DSP)"):code.index("kiln_read_q7x4")]
    assert "\n\n" not in helpers  # one prelude block: the bundle splits at blank lines
    assert "kiln_cm_requantize(" in code and "kiln_ssat8(" in code


@pytest.mark.parametrize("m,hw,pixels", [(32, (12, 10), 2), (32, (3, 5), 2), (31, (12, 10), 1)])
def test_stages_are_one_step_of_rows_in_scratch(m: int, hw: tuple[int, int],
                                                pixels: int) -> None:
    """The im2col rows and the accumulators are compacted to the pixels of one step (two
    for an even channel count; the intrinsic calls take their addresses: compaction counts
    each as the operand tile it touches)."""
    s = schedule_for(_conv(16, m, 3, 1, (1, 1, 1, 1), hw=hw), "cortex-m4")
    code = get_renderer("c", openmp=False).render(lower(s.schedule)).code
    assert f"int16_t im2col[{144 * pixels}]" in code, code
    assert f"dsp_acc[{m * pixels}]" in code


def test_two_pixel_epilogue_reads_the_channel_constants_once() -> None:
    """The bias, multiplier and shift pair of a channel are copied to locals before both
    pixels' requantizations (one load each, not one per output byte)."""
    s = schedule_for(_conv(16, 16, 3, 1, (1, 1, 1, 1), hw=(4, 6)), "cortex-m4")
    code = get_renderer("c", openmp=False).render(lower(s.schedule)).code
    for name in ("b", "m"):
        assert f"int32_t {name}_local[1]" in code and f"{name}_local[0] = {name}[ch];" in code
    assert "int32_t s_local[2]" in code
    epilogue = code[code.index("b_local[0] = b[ch];"):]
    assert epilogue.count("kiln_cm_requantize_s(dsp_acc[") == 2
    assert epilogue.count("b_local[0], m_local[0], s_local[0], s_local[1])") == 2


@pytest.mark.parametrize("c,hw", [(16, (4, 6)), (64, (3, 4))])   # K = 144, 576
def test_widened_weights_at_the_int8_edges_are_bit_exact(c: int, hw: tuple[int, int]) -> None:
    """dot_q15q15 on the extreme operands: weights -128 / -127 / 127, inputs -128 / 127
    (widened to int16 minus the zero point: -133 ... 122), every accumulator far from 0."""
    node = _conv(c, 8, 3, 1, (1, 1, 1, 1), hw=hw)
    w = node.input(1)
    m, sh = quantize_multipliers(RNG.uniform(4e-5, 1.5e-4, 8))  # outputs mostly inside int8
    node = node.replace(inputs=(node.inputs[0], Value.constant(
        "w", RNG.choice(np.array([-128, -127, 127], np.int8), w.shape)), node.inputs[2],
        Value.constant("m", m), Value.constant("s", shift_table(sh))))
    x = RNG.choice(np.array([-128, 127], np.int8), node.inputs[0].shape)
    got, info = _run_host(node, x)
    assert info["intrinsic"].startswith("cortex-m4.dot_q15q15_2x2x")
    want = _reference(node, x)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 10


def test_a_variant_without_the_widened_dot_keeps_int8_weights() -> None:
    """A flash-tight variant (``drop_intrinsics: [dot_q15q15_*]``) schedules the same 3 x 3
    convolution on the int8-weight two-pixel dot: half the weight bytes, the same
    integers."""
    from toolchain.target import parse_target

    compact = parse_target("{name: m4-compact, kind: c, extends: cortex-m4, "
                           "drop_intrinsics: ['dot_q15q15_*']}")
    node = _conv(16, 8, 3, 1, (1, 1, 1, 1), hw=(6, 6))
    x = RNG.integers(-128, 128, node.inputs[0].shape).astype(np.int8)
    wide, narrow = schedule_for(node, "cortex-m4"), schedule_for(node, compact)
    assert _info(wide)["intrinsic"].startswith("cortex-m4.dot_q15q15_2x2x")
    assert _info(narrow)["intrinsic"].startswith("m4-compact.dot_q15q7_2x2x")
    bytes_of = [sum(v.data.nbytes for v in s.input_values[1:] if v.data.dtype.itemsize <= 2
                    and v.data.ndim > 1) for s in (wide, narrow)]
    assert bytes_of[1] > 0 and bytes_of[1] * 2 == bytes_of[0]
    got, _ = _run_host(node, x, compact)
    np.testing.assert_array_equal(got, _reference(node, x))


def test_scheduling_leaves_the_lowering_pipeline_as_it_is() -> None:
    """The pipeline renders the intrinsics itself: a Cortex-M schedule adds no pass."""
    from toolchain.tir.transform.pipeline import PHASES

    before = {k: tuple(v) for k, v in PHASES.items()}
    schedule_for(_conv(4, 8, 3, 1, (1, 1, 1, 1)), "cortex-m7")
    schedule_for(_gemm(1, 16, 4), "cortex-m4")
    assert PHASES == before


@pytest.mark.parametrize("c,k", [(8, 3), (64, 3), (64, 1)])
def test_arm_build_contains_smlad_and_sxtb16(c: int, k: int, tmp_path) -> None:
    """K = 72, 576 (im2col and int16 weight rows 144 B, 1,152 B apart: LDRD at an offset,
    two LDRs past 1,020 B), 64: SMLAD on LDRD-loaded pairs; SXTB16 only where the weights
    stay int8 (1 x 1), the k x k kernels read theirs widened."""
    s = schedule_for(_conv(c, 16, k, 1, (1, 1, 1, 1) if k == 3 else (0, 0, 0, 0)),
                     "cortex-m4")
    code = get_renderer("c", openmp=False).render(
        lower(s.schedule)).code
    cross_compile_m4(code, tmp_path)  # skips without the Arm tools
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(tmp_path / "kernel.o")],
                         capture_output=True, text=True, check=True).stdout
    assert "smlad" in dis and ("sxtb16" in dis) == (k == 1)
    assert "ldrd" in dis and "], #8" in dis  # both pixels' pairs by LDRD, post-indexed


# --------------------------------------------------------------------------- QEMU, bit-exact

@pytest.mark.slow
@pytest.mark.parametrize("board,target", [("qemu-mps2-an500", "cortex-m7"),
                                          ("qemu-mps2-an386", "cortex-m4")])
def test_int8_ds_cnn_on_qemu_bit_exact_with_host(board: str, target: str,
                                                 qdq_compiled: Any) -> None:
    """DS-CNN int8 on the board's QEMU machine (DSP kernels, ACLE intrinsics) equals the host
    c-generic int8 build bit for bit, and the firmware's kernels are the tensorized ones.
    The model, its host build, board bundles and QEMU runs are the board tests'
    (``qdq_compiled``, tests/conftest.py: ``test_int8_qemu.py`` runs the same bundle on
    ``qemu-mps2-an386``, ``test_llvm_qemu.py`` on ``qemu-mps2-an500``), made once a session
    on one worker (the ``boards`` group)."""
    from tests.boards.conftest import HAVE_CROSS, HAVE_QEMU

    if not (HAVE_CROSS and HAVE_QEMU):
        pytest.skip("arm-none-eabi-gcc + picolibc and qemu-system-arm are needed")
    m = qdq_compiled("ds_cnn", "kiln")
    bundle, _ = m.for_board(board)
    kernels = (bundle / "src" / "kernels.c").read_text()
    prefix = "kiln_m7_" if target == "cortex-m7" else "kiln_m4_"
    assert f"{prefix}dot_q15q7_2x2x" in kernels and f"{prefix}dwconv_q15q7_1x4_" in kernels
    run = m.run_on(board)
    assert set(run.outputs) == set(m.host)
    for name, want in m.host.items():
        np.testing.assert_array_equal(run.outputs[name], want, err_msg=name)


# --------------------------------------------------------------------------- NHWC input

def _nhwc(node: Node) -> Node:
    """``node`` reading its input channels-last (``data_layout="NHWC"``, the layout pass's
    fold of a model's NHWC -> NCHW transpose)."""
    x = node.inputs[0]
    n, c, h, w = x.shape
    return node.replace(inputs=(Value(x.name, (n, h, w, c), x.dtype), *node.inputs[1:]),
                        attrs={**node.attrs, "data_layout": "NHWC"})


@pytest.mark.parametrize("c,m,k,stride,pads,hw,dtype", [
    (3, 8, 3, 2, (0, 0, 1, 1), (12, 12), "int8"),   # VWW's first layer, two pixels a step
    (3, 5, 3, 2, (1, 1, 1, 1), (7, 6), "uint8"),    # odd channels: one pixel, 1x4 calls
    (4, 8, 3, 1, (1, 1, 1, 1), (5, 7), "int8"),     # odd width: flat pixel pairs
    (6, 8, 1, 1, (0, 0, 0, 0), (4, 4), "int8"),     # pointwise (no in-place with NHWC)
])
def test_dsp_convolution_reads_an_nhwc_input(c, m, k, stride, pads, hw, dtype) -> None:
    """The DSP convolution gathers its im2col rows from an NHWC input: the same integers
    as the reference on the NCHW tensor; the overlap contract says NHWC; never in place."""
    plain = _conv(c, m, k, stride, pads, dtype, hw)
    node = _nhwc(plain)
    x = _qx((1, c, *hw), dtype)
    got, info = _run_host(node, np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    assert info["schedule"] == "int8 dsp"
    np.testing.assert_array_equal(got, _reference(plain, x))
    op = schedule_for(node, "cortex-m4")
    assert op.in_place is None and op.overlap is not None
    assert op.overlap.in_layout == "NHWC" and op.overlap.in_shape == (1, c, *hw)


def test_generic_int8_kernel_reads_an_nhwc_input() -> None:
    """Where the DSP kernel refuses a QConv, the generic int8 kernel takes it: it reads an
    NHWC input through an NCHW view (toolchain.topi.int8.nhwc_as_nchw)."""
    from toolchain.schedules.generic.int8 import schedule_int8

    plain = _conv(3, 4, 3, 2, (0, 0, 1, 1), "int8", (8, 8))
    node = _nhwc(plain)
    x = _qx((1, 3, 8, 8), "int8")
    s = schedule_int8(node, "cortex-m4")
    mod = build(s.schedule, "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
    out = np.empty(node.outputs[0].shape, node.outputs[0].dtype)
    mod(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), *[v.data for v in s.input_values[1:]],
        out)
    np.testing.assert_array_equal(out, _reference(plain, x))
