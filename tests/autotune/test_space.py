"""Spaces, points and traces: round trips, refusals, the default as one point."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from toolchain.autotune.apply import forcing
from toolchain.autotune.measure import BuildInput, build_one
from toolchain.autotune.space import InvalidPoint, Knob, Rule, Space, Trace
from toolchain.autotune.tasks import conv_task, dense_task
from toolchain.schedules.registry import schedule_for

#: the ResNet-18 convs that take the direct or 1x1 schedule (stride 2, or 1x1), and the
#: dense shapes of benchmarks/ops.py
CONVS = [((1, 3, 224, 224), 64, 7, 2), ((1, 64, 56, 56), 64, 1, 1),
         ((1, 64, 56, 56), 128, 3, 2), ((1, 128, 28, 28), 256, 1, 2),
         ((1, 256, 14, 14), 512, 3, 2)]
DENSE = [(1, 512, 1000), (128, 768, 768)]


def toy() -> Space:
    return Space("toy", "toy|1", (Knob("tile", (1, 2, 4, 8), 4), Knob("flag", (False, True),
                                                                       False)),
                 (Rule("tile 8 needs flag off", lambda p: not (p["tile"] == 8 and p["flag"])),))


def test_trace_round_trips_through_json_lines():
    s = toy()
    for p in s.valid_points():
        t = s.trace(p)
        back = Trace.from_json(json.loads(json.dumps(t.to_json())))
        assert back == t and s.point_of(back) == p
    assert len(s.valid_points()) == 7


@pytest.mark.parametrize("point, words", [
    ({"tile": 3, "flag": False}, "tile=3 is not one of"),
    ({"tile": 8, "flag": True}, "tile 8 needs flag off"),
    ({"tile": 4}, "'flag' has no value"),
    ({"tile": 4, "flag": False, "extra": 1}, "unknown knob 'extra'"),
    ({"tile": 4, "flag": 1}, "flag=1 is not one of"),  # 1 is not True: types matter
])
def test_invalid_points_are_refused_with_the_reason(point, words):
    with pytest.raises(InvalidPoint, match=words):
        toy().check(point)


def test_malformed_trace_json_is_refused():
    with pytest.raises(Exception, match="decision"):
        Trace.from_json({"space": "toy", "decisions": [["tile"]]})


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx2", "x86_64-avx512"])
def test_default_schedule_is_a_valid_point_of_its_space(target):
    for x, o, k, st in CONVS:
        task = conv_task(x, o, k, st, target)
        assert task.space.is_valid(task.space.default()), task.space.workload
    for m, k, n in DENSE:
        task = dense_task(m, k, n, target)
        assert task.space.is_valid(task.space.default()), task.space.workload


def test_forcing_the_default_builds_the_default_schedule():
    task = conv_task((1, 16, 14, 14), 32, 3, 2, "x86_64-avx2")
    plain = str(schedule_for(task.node, task.target).schedule.mod)
    with forcing({task.space.workload: task.space.trace(task.space.default())}):
        forced = str(schedule_for(task.node, task.target).schedule.mod)
    assert forced == plain


def test_another_point_builds_another_schedule():
    task = conv_task((1, 16, 14, 14), 32, 3, 2, "x86_64-avx2")
    s = task.space
    other = next(p for p in s.valid_points() if p["rw"] != s.default()["rw"])
    plain = str(schedule_for(task.node, task.target).schedule.mod)
    with forcing({s.workload: s.trace(other)}):
        forced = schedule_for(task.node, task.target)
    assert str(forced.schedule.mod) != plain
    assert forced.info["rw"] == other["rw"]


def test_invalid_point_is_refused_before_anything_is_built():
    task = dense_task(32, 64, 64, "x86_64-avx2")
    bad = Trace("gemm", (("mr", 16), ("nr", 32), ("mc_tiles", 1)))  # 16 x 4 accumulators
    b = build_one(BuildInput(task.node, task.target, task.space.workload, bad))
    assert b.lib is None and b.error.startswith("invalid point")
    assert "vector registers" in b.error


def test_sampling_and_mutation_stay_valid():
    task = conv_task((1, 64, 56, 56), 128, 3, 2, "x86_64-avx512")
    s, rng = task.space, random.Random(0)
    p = s.sample(rng)
    for _ in range(200):
        assert s.is_valid(p)
        p = s.mutate(p, rng)


def _cover(points: list[dict], t: int = 3) -> list[dict]:
    """A subset of ``points`` in which every ``t`` (knob, value) settings that occur
    together in some point occur together again (greedy, in a fixed shuffled order)."""
    order = points[:]
    random.Random(0).shuffle(order)
    seen: set = set()
    out = []
    for p in order:
        combos = set(itertools.combinations(sorted(p.items(), key=lambda kv: kv[0]), t))
        if not combos <= seen:
            seen |= combos
            out.append(p)
    return out


@pytest.mark.parametrize("make", [
    lambda: conv_task((1, 8, 10, 10), 16, 3, 1, "cortex-m4"),
    lambda: dense_task(6, 16, 24, "x86_64-avx2"),
    lambda: conv_task((1, 4, 9, 9), 8, 3, 2, "c-generic"),
], ids=["cortex-m-rows", "gemm", "direct-small"])
def test_every_valid_point_schedules(make):
    """The rules are the whole truth: no valid point fails inside the schedule. Spaces of
    up to 500 points are tried whole; larger ones (direct-small: 1,920 since the
    ``epilogue_at`` and ``pack`` knobs) through a subset holding every three knob values
    that occur together in a valid point (every point up to 2,000, else 60 samples)."""
    task = make()
    pts = task.space.valid_points() if task.space.size <= 2000 else \
        [task.space.sample(random.Random(i)) for i in range(60)]
    if len(pts) > 500:
        pts = _cover(pts)
    for p in pts:
        with forcing({task.space.workload: task.space.trace(p)}):
            schedule_for(task.node, task.target)
