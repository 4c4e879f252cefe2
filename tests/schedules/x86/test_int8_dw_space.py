"""The x86 int8 depthwise kernel's search space (toolchain/schedules/x86/int8_dw.py,
``dw_space``): its default is the heuristic's kernel, its traces replay, invalid points are
refused before anything is built, and every point's host build gives the integers of the
reference."""

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

RNG = np.random.default_rng(11)  # reseeded per test (tests/conftest.py)


def _dw(c: int, hw: tuple[int, int], dtype: str = "int8", xzp: int = 3,
        yzp: int = -2) -> Node:
    """A 3x3 depthwise QConv, stride 1, padded 1, seeded weights and requantization."""
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    m, sh = quantize_multipliers(RNG.uniform(2e-3, 2e-2, c))
    return Node("QConv", "dw", [
        Value("x", (1, c, *hw), dtype),
        Value.constant("w", RNG.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8)),
        Value.constant("b", RNG.integers(-3000, 3000, c).astype(np.int32)),
        Value.constant("m", m), Value.constant("s", shift_table(sh))],
        [Value("y", (1, c, *hw), dtype)],
        {"x_zero_point": xzp, "y_zero_point": yzp, "out_min": lo, "out_max": hi,
         "out_dtype": dtype, "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
         "group": c})


def test_default_is_the_heuristic_and_traces_round_trip() -> None:
    """x86_64-avx512 offers the three kernels (u8 quads the default); x86_64-avx2 only the
    int32 lanes. Forcing the default's trace builds the kernel built without one."""
    node = _dw(16, (5, 6))
    task = task_of(node, "x86_64-avx512")
    assert task is not None and task.space.kind == "int8_depthwise"
    s = task.space
    assert s.default() == {"intrinsic": "dot_u8s8_quads", "pixels": 6, "whole_plane": True}
    assert s.knob("intrinsic").choices == ("dot_u8s8_quads", "dot_i16_pairs", "int32")
    assert s.knob("pixels").choices == (1, 2, 3, 6)
    assert_default_and_traces(node, task.target, s)
    a2 = task_of(node, "x86_64-avx2").space
    assert a2.knob("intrinsic").choices == ("int32",) and a2.default()["whole_plane"]
    assert a2.workload != s.workload


def test_invalid_points_refused_before_building() -> None:
    """A plane too big for DW_PLANE_BYTES (62 x 42 padded pixels x 16 lanes x 2 bytes) takes
    no whole-plane band; an unknown kernel is refused; forcing either raises before any
    compute is built."""
    node = _dw(16, (60, 40))
    s = task_of(node, "x86_64-avx512").space
    assert s.default()["intrinsic"] == "dot_u8s8_quads"
    assert "dot_i16_pairs" not in s.knob("intrinsic").choices  # their band does not fit
    bad = {**s.default(), "intrinsic": "int32", "whole_plane": True}
    with pytest.raises(InvalidPoint, match="whole_plane: the band fits"):
        s.check(bad)
    assert s.is_valid({**bad, "intrinsic": "dot_u8s8_quads"})  # u8 columns: 64 x 42 x 16
    for decisions in ((("intrinsic", "int32"), ("whole_plane", True)),
                      (("intrinsic", "dot_i16_pairs"),)):
        with forcing({s.workload: Trace("int8_depthwise", decisions)}), \
                pytest.raises(InvalidPoint):
            compile_op(node, "x86_64-avx512")


@pytest.mark.parametrize("c,hw,dtype,xzp,yzp", [(16, (5, 6), "int8", 3, -2),
                                                (8, (4, 4), "uint8", 127, 130)])
def test_every_point_bit_exact(c: int, hw: tuple[int, int], dtype: str, xzp: int,
                               yzp: int) -> None:
    """Each (kernel, whole-plane) pair of the space, its pixel tiles taken in turn (every
    point with ``KILN_TEST_THOROUGH=1``), built for the host and run: the reference's
    integers. The 8-channel uint8 layer zips two pixels' quads at once. (5 host builds
    each: about 7 and 3 s on the loaded 2-core machine.)"""
    node = _dw(c, hw, dtype, xzp, yzp)
    target = load_target("x86_64-avx512")
    s = task_of(node, target).space
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    x = RNG.integers(lo, hi, (1, c, *hw)).astype(dtype)
    want = get_op("QConv").reference([x, *(v.data for v in node.inputs[1:])], node.attrs)[0]
    assert len(np.unique(want)) > 3
    points = s.iter_points() if THOROUGH else _covering(s)
    seen = set()
    for p in points:
        with forcing({s.workload: s.trace(p)}):
            op = compile_op(node, target)
        np.testing.assert_array_equal(op(x)[0], want, err_msg=str(p))
        info = op.op_schedule.info
        assert info["schedule"] == "int8 x86 depthwise"
        assert info["intrinsic"].endswith("x4" if p["intrinsic"] == "dot_u8s8_quads" else
                                          "x2") if p["intrinsic"] != "int32" \
            else "intrinsic" not in info
        if p["intrinsic"] == "int32":
            assert info["band"] == ("plane" if p["whole_plane"] else "row")
        elif p["intrinsic"] == "dot_u8s8_quads":
            assert info.get("columns") == ("plane" if p["whole_plane"] else None)
        seen.add((p["intrinsic"], p["pixels"]))
    assert {k for k, _ in seen} == set(s.knob("intrinsic").choices)


def _covering(s) -> list[dict]:
    """One point per (kernel, whole_plane) pair, the pixel tiles in turn across them."""
    pairs = sorted({(p["intrinsic"], p["whole_plane"]) for p in s.iter_points()})
    tiles = s.knob("pixels").choices
    return [s.canonical({"intrinsic": k, "whole_plane": wp, "pixels": tiles[i % len(tiles)]})
            for i, (k, wp) in enumerate(pairs)]
