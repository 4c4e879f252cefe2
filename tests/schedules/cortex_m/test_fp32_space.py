"""The search space of the Cortex-M float32 depthwise convolution (``cm_depthwise``): the
default is the heuristic and builds the kernel it built before, traces round-trip, invalid
points are refused, every point matches the reference (host build), records change the
generated kernel, and tuned points count fewer instructions under QEMU."""

from __future__ import annotations

import numpy as np
import pytest

from tests.schedules.cortex_m.test_fp32 import _conv, _reference, _x
from tests.tools import needs
from toolchain.autotune.apply import applying, declared, forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.codegen import get_renderer
from toolchain.runtime.build import build
from toolchain.schedules.registry import schedule_for
from toolchain.tir.transform.pipeline import lower

DEPTHWISE = [
    dict(c=8, m=8, k=3, pads=(1, 1, 1, 1), group=8, hw=(25, 5)),        # DS-CNN-like
    dict(c=6, m=6, k=3, stride=2, pads=(0, 0, 1, 1), group=6, hw=(12, 11)),  # TF SAME
    dict(c=4, m=4, k=5, pads=(2, 2, 2, 2), group=4, hw=(11, 9)),
    dict(c=3, m=3, k=3, pads=(1, 1, 1, 1), group=3, hw=(70, 66)),       # plane too big
    dict(c=4, m=4, k=3, group=4, hw=(6, 7), bias=False),                # no padding
]


def _space(node):
    with declared() as seen:
        schedule_for(node, "cortex-m4")
    (space,) = seen
    return space


def _code(op) -> str:
    return get_renderer("c", openmp=False).render(lower(op.schedule.mod), name=None).code


def test_default_is_the_heuristic_and_traces_round_trip() -> None:
    node = _conv(**DEPTHWISE[0])
    s = _space(node)
    assert s.kind == "cm_depthwise"
    assert s.default() == {"staged": True, "pad": "select", "unroll": "window"}
    points = s.valid_points()
    assert len(points) == 9   # pad is pinned when nothing is staged
    for p in points:
        t = s.trace(p)
        assert Trace.from_json(t.to_json()) == t and s.point_of(t) == p
    with forcing({s.workload: s.trace(s.default())}):
        forced = schedule_for(node, "cortex-m4")
    assert _code(forced) == _code(schedule_for(node, "cortex-m4"))
    big = _space(_conv(**DEPTHWISE[3]))
    assert big.default()["staged"] is False and big.knob("staged").choices == (False,)
    assert _space(_conv(**DEPTHWISE[4])).knob("pad").choices == ("select",)


def test_invalid_points_are_refused() -> None:
    big = _space(_conv(**DEPTHWISE[3]))
    with pytest.raises(InvalidPoint, match="staged=True is not one of"):
        big.check({"staged": True, "pad": "select", "unroll": "window"})
    s = _space(_conv(**DEPTHWISE[0]))
    with pytest.raises(InvalidPoint, match="unroll='rows' is not one of"):
        s.check({"staged": True, "pad": "select", "unroll": "rows"})
    # pad does not matter for an unstaged plane: one canonical point
    assert s.canonical({"staged": False, "pad": "partitioned", "unroll": "none"})["pad"] == \
        "select"


@pytest.mark.parametrize("cfg", DEPTHWISE)
def test_every_point_matches_the_reference(cfg: dict) -> None:
    node = _conv(**cfg)
    x = _x(node)
    want = _reference(node, x)
    s = _space(node)
    for p in s.valid_points():
        with forcing({s.workload: s.trace(p)}):
            op = schedule_for(node, "cortex-m4")
        assert op.info["staged"] == p["staged"]
        mod = build(op.schedule, "c-generic", extra_flags=["-Wall", "-Wextra", "-Werror"])
        out = np.empty(node.outputs[0].shape, np.float32)
        mod(x, *[v.data for v in op.input_values[1:]], out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=str(p))


def test_records_change_the_generated_kernel() -> None:
    """The partitioned plane has no padding test; an unstaged point has no plane and no
    longer runs in place."""
    node = _conv(**DEPTHWISE[0])
    s = _space(node)
    base = schedule_for(node, "cortex-m4")
    trace = s.trace({"staged": True, "pad": "partitioned", "unroll": "window"})
    with applying({s.workload: trace}) as applied:
        tuned = schedule_for(node, "cortex-m4")
    assert applied.traces == {s.workload: trace} and applied.tuned == {s.workload}
    pads = {k: [ln for ln in _code(op).splitlines() if "pad[" in ln and "= " in ln]
            for k, op in (("base", base), ("tuned", tuned))}
    assert any("?" in ln or "kiln_select" in ln for ln in pads["base"])
    assert pads["tuned"] and not any("?" in ln or "kiln_select" in ln for ln in pads["tuned"])
    with applying({s.workload: s.trace({**s.default(), "staged": False})}):
        direct = schedule_for(node, "cortex-m4")
    assert base.in_place == 0 and direct.in_place is None
    assert "pad[" not in _code(direct)


@needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm")
def test_tuned_points_count_fewer_instructions(tmp_path) -> None:
    """Under QEMU: the partitioned plane on a DS-CNN-like layer (24,000 -> 20,480), the
    input read directly on a stride-2 TF SAME layer (127,840 -> 86,920)."""
    from toolchain.autotune.measure import BuildInput
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.autotune.tasks import task_of

    for cfg, point in ((DEPTHWISE[0], {"pad": "partitioned"}),
                       (dict(c=16, m=16, k=3, stride=2, pads=(0, 0, 1, 1), group=16,
                             hw=(24, 24)), {"staged": False})):
        task = task_of(_conv(**cfg), "cortex-m4")
        s = task.space
        builds = QemuBuilder("cortex-m4", tmp_path).build(
            [BuildInput(task.node, task.target, s.workload, s.trace({**s.default(), **p}))
             for p in ({}, point)])
        base, tuned = (r.costs[0] for r in QemuRunner("cortex-m4").run(builds))
        assert tuned < base, (cfg, base, tuned)
