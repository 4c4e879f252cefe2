"""The x86 int8 dense kernel's search space (toolchain/schedules/x86/int8.py,
``dense_space``): its default is the heuristic's kernel, its traces replay, invalid points
are refused before anything is built, and every point's host build gives the integers of
the reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.covering import THOROUGH
from tests.schedules.space_checks import assert_default_and_traces
from toolchain.autotune.apply import forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.autotune.tasks import task_of
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401  (registers ops)
from toolchain.quantize.fixed_point import quantize_multipliers, shift_table
from toolchain.schedules import compile_op
from toolchain.target import load_target

RNG = np.random.default_rng(13)  # reseeded per test (tests/conftest.py)


def _fc(p: int, k: int, m: int, dtype: str = "int8", xzp: int = 5, yzp: int = -3) -> Node:
    """A QGemm ``[p, k] x [m, k]`` with seeded weights, bias and requantization."""
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    mult, sh = quantize_multipliers(RNG.uniform(1e-3, 1e-2, m))
    return Node("QGemm", "fc", [
        Value("x", (p, k), dtype),
        Value.constant("w", RNG.integers(-127, 128, (m, k)).astype(np.int8)),
        Value.constant("b", RNG.integers(-3000, 3000, m).astype(np.int32)),
        Value.constant("m", mult), Value.constant("s", shift_table(sh))],
        [Value("y", (p, m), dtype)],
        {"x_zero_point": xzp, "y_zero_point": yzp, "out_min": lo, "out_max": hi,
         "out_dtype": dtype})


def test_default_is_the_heuristic_and_traces_round_trip() -> None:
    """x86_64-avx512 offers u8 quads (the default), int16 pairs and int32 lanes;
    x86_64-avx2 pairs and int32. Forcing the default's trace builds the very kernel built
    without one; every point's trace round-trips through JSON."""
    node = _fc(2, 40, 64)
    task = task_of(node, "x86_64-avx512")
    assert task is not None and task.space.kind == "int8_dense"
    s = task.space
    assert s.default() == {"intrinsic": "dot_u8s8_quads", "rows": 2, "vectors": 1,
                           "unroll_k": 1}
    assert s.knob("intrinsic").choices == ("dot_u8s8_quads", "dot_i16_pairs", "int32")
    assert s.knob("rows").choices == (1, 2) and s.knob("vectors").choices == (1, 2, 4)
    assert_default_and_traces(node, task.target, s)
    a2 = task_of(node, "x86_64-avx2").space
    assert a2.knob("intrinsic").choices == ("dot_i16_pairs", "int32")
    assert a2.workload != s.workload
    # int32 lanes: the tile knobs do not matter, so they are one point
    assert sum(p["intrinsic"] == "int32" for p in s.iter_points()) == 1


def test_invalid_points_refused_before_building() -> None:
    """40 k: 10 quads, 20 pairs; a 4-step unroll divides only the pairs. 4 vectors x 12 rows
    of accumulators pass MAX_ROW. Forcing a broken point raises before any compute."""
    node = _fc(12, 40, 64)
    s = task_of(node, "x86_64-avx512").space
    with pytest.raises(InvalidPoint, match="unroll_k divides"):
        s.check({**s.default(), "unroll_k": 4})
    assert s.is_valid({**s.default(), "intrinsic": "dot_i16_pairs", "unroll_k": 4})
    with pytest.raises(InvalidPoint, match="vectors \\* rows accumulators"):
        s.check({**s.default(), "vectors": 2})
    assert s.is_valid({**s.default(), "vectors": 2, "rows": 6})
    for decisions in ((("unroll_k", 4),), (("vectors", 4), ("rows", 12)),
                      (("vectors", 3),)):
        with forcing({s.workload: Trace("int8_dense", decisions)}), \
                pytest.raises(InvalidPoint):
            compile_op(node, "x86_64-avx512")


@pytest.mark.parametrize("p,k,m,dtype,xzp", [
    (2, 40, 64, "int8", 5), (1, 24, 32, "uint8", 131),
    (3, 36, 20, "int8", 5),  # 20 outputs in two vectors of 16 (padded), 9 quads, 3 rows
])
def test_every_point_bit_exact(p: int, k: int, m: int, dtype: str, xzp: int) -> None:
    """Each kernel, its tile and unroll knobs taken in turn (every point with
    ``KILN_TEST_THOROUGH=1``), built for the host and run: the reference's integers.
    (9, 7 and 7 host builds: each case under 2 s on the 2-core machine.)"""
    node = _fc(p, k, m, dtype, xzp)
    target = load_target("x86_64-avx512")
    s = task_of(node, target).space
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    x = RNG.integers(lo, hi, (p, k)).astype(dtype)
    want = get_op("QGemm").reference([x, *(v.data for v in node.inputs[1:])], node.attrs)[0]
    assert len(np.unique(want)) > 3
    points = list(s.iter_points()) if THOROUGH else _covering(s)
    for pt in points:
        with forcing({s.workload: s.trace(pt)}):
            op = compile_op(node, target)
        np.testing.assert_array_equal(op(x)[0], want, err_msg=str(pt))
        info = op.op_schedule.info
        kind = {"dot_u8s8_quads": "int8 x86 quads", "dot_i16_pairs": "int8 x86 pairs",
                "int32": "int8 x86"}[pt["intrinsic"]]
        assert info["schedule"] == kind, pt
        if pt["intrinsic"] != "int32":
            assert info.get("vectors", 1) == pt["vectors"]
            assert info.get("unroll_k", 1) == pt["unroll_k"]
    assert {q["intrinsic"] for q in points} == set(s.knob("intrinsic").choices)
    assert {q["vectors"] for q in points} == set(s.knob("vectors").choices)


def _covering(s) -> list[dict]:
    """One point per kernel (its default tile), then per tiled kernel each ``vectors`` with
    the valid unroll factors and row counts taken in turn across them."""
    out = [s.canonical({**s.default(), "intrinsic": k}) for k in s.knob("intrinsic").choices]
    for k in s.knob("intrinsic").choices[:-1]:
        base = {**s.default(), "intrinsic": k}
        unrolls = [u for u in s.knob("unroll_k").choices if s.is_valid({**base, "unroll_k": u})]
        rows = s.knob("rows").choices
        for j, v in enumerate(s.knob("vectors").choices):
            out.append(s.check({**base, "vectors": v, "unroll_k": unrolls[(j + 1) % len(unrolls)],
                                "rows": rows[j % len(rows)]}))
    return out
