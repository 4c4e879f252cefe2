"""The search space of the Cortex-M int8 dense layer (``cm_int8_dense``,
toolchain/schedules/cortex_m/int8.py ``dsp_dense_space``): the default is the heuristic,
traces round-trip, invalid points are refused before anything is built, and every point is
bit-exact with the integer reference (host build: the portable C of the intrinsics); under
QEMU the points build and count differently."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.schedules.cortex_m.test_int8 import _out, _qx, _reference, _requant, _run_host
from tests.tools import needs
from toolchain.autotune.apply import declared, forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.graph.ir import Node, Value
from toolchain.schedules.registry import schedule_for

RNG = np.random.default_rng(17)  # reseeded per test (tests/conftest.py)


def _fc(p: int, k: int, m: int, dtype: str) -> Node:
    """QGemm ``[p, k] x [m, k]``: an int8 input takes the int8 x int8 kernel (``kc``), a
    uint8 one the int16 ``x_q15`` kernel (``groups``)."""
    w = Value.constant("w", RNG.integers(-127, 128, (m, k)).astype(np.int8))
    return Node("QGemm", "fc", [Value("x", (p, k), dtype), w, *_requant(m)],
                [Value("y", (p, m), dtype)],
                {"x_zero_point": -9 if dtype == "int8" else 131, **_out(dtype, 4)})


def _space(node):
    with declared() as seen:
        schedule_for(node, "cortex-m4")
    return seen[-1] if seen else None


def test_default_is_the_heuristic_and_traces_round_trip() -> None:
    s8, q15 = _space(_fc(1, 64, 12, "int8")), _space(_fc(1, 48, 8, "uint8"))
    assert s8.kind == q15.kind == "cm_int8_dense"
    assert s8.default() == {"outputs": 4, "kc": 8}
    assert q15.default() == {"outputs": 4, "groups": 12}
    assert q15.knob("groups").choices == (12, 6, 4, 2, 1)
    for s in (s8, q15):
        node = _fc(1, 64, 12, "int8") if s is s8 else _fc(1, 48, 8, "uint8")
        plain = schedule_for(node, "cortex-m4")
        with forcing({s.workload: s.trace(s.default())}):
            forced = schedule_for(node, "cortex-m4")
        assert forced.info == plain.info and str(forced.schedule.mod) == str(plain.schedule.mod)
        for p in s.iter_points():
            t = s.trace(p)
            back = Trace.from_json(json.loads(json.dumps(t.to_json())))
            assert back == t and s.canonical(s.point_of(back)) == p
    assert s8.seed_points() == [{"outputs": 4, "kc": 4}] and q15.seed_points() == []
    # one output a tile: kc and groups do not matter (one point each)
    assert sum(p["outputs"] == 1 for p in s8.iter_points()) == 1
    # 10 outputs, 4 k: one tile shape, one call shape: no space at all
    assert _space(_fc(1, 4, 10, "int8")) is None


def test_invalid_points_refused_before_building() -> None:
    """K = 20: 8 k a call does not divide it (the heuristic takes 4)."""
    node = _fc(1, 20, 8, "int8")
    s = _space(node)
    assert s.default() == {"outputs": 4, "kc": 4}
    with pytest.raises(InvalidPoint, match="kc divides K"):
        s.check({"outputs": 4, "kc": 8})
    with forcing({s.workload: Trace("cm_int8_dense", (("outputs", 4), ("kc", 8)))}), \
            pytest.raises(InvalidPoint):
        schedule_for(node, "cortex-m4")


@pytest.mark.parametrize("p,k,m,dtype", [(2, 64, 12, "int8"), (1, 48, 8, "uint8")])
def test_every_point_bit_exact(p: int, k: int, m: int, dtype: str) -> None:
    """Every point, built for the host and run: the reference's integers, through the
    intrinsic the point names (3 and 6 host builds: under 1 s each on the 2-core machine)."""
    node = _fc(p, k, m, dtype)
    s = _space(node)
    x = _qx((p, k), dtype)
    want = _reference(node, x)
    assert len(np.unique(want)) > 3
    calls = set()
    for pt in s.iter_points():
        with forcing({s.workload: s.trace(pt)}):
            got, info = _run_host(node, x)
        np.testing.assert_array_equal(got, want, err_msg=str(pt))
        name = info["intrinsic"].split(".")[-1]
        if dtype == "int8":
            assert name == (f"dot_s8s8_4x{pt['kc']}" if pt["outputs"] == 4 else "dot_s8s8_1x4")
        else:
            assert name == (f"dot_q15q7_4x{4 * pt['groups']}" if pt["outputs"] == 4
                            else "dot_q15q7_1x4")
        calls.add(name)
    assert len(calls) == len(s.valid_points())


@needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm")
def test_the_points_build_for_the_board_and_count_differently(tmp_path) -> None:
    """Under QEMU (deterministic counts; the Arm asm of the intrinsics): on a 256 -> 64
    layer one output a call costs the most, and 4 k a ``dot_s8s8`` call counts fewer
    instructions than the heuristic's 8 (28,520 and 32,000 when written: a point the
    tuner finds)."""
    from toolchain.autotune.measure import BuildInput
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.target import load_target

    node = _fc(1, 256, 64, "int8")
    s = _space(node)
    points = [s.default(), {"outputs": 4, "kc": 4}, s.canonical({"outputs": 1, "kc": 8})]
    builds = QemuBuilder("cortex-m4", tmp_path).build(
        [BuildInput(node, load_target("cortex-m4"), s.workload, s.trace(p)) for p in points])
    assert [b.error for b in builds] == [None] * 3
    kc8, kc4, one = (r.costs[0] for r in QemuRunner("cortex-m4").run(builds))
    assert kc4 < kc8 < one, (kc4, kc8, one)
