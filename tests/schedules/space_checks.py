"""Checks every tuning space of a default schedule must pass (tests/schedules/*/test_*_space.py)."""

from __future__ import annotations

import json
from typing import Any

from toolchain.autotune.apply import forcing
from toolchain.autotune.space import Space, Trace
from toolchain.schedules import compile_op


def assert_default_and_traces(node: Any, target: Any, space: Space) -> None:
    """Forcing the default point's trace builds the very kernel built without one, and
    every point's trace round-trips through JSON to the same canonical point."""
    plain = compile_op(node, target)
    with forcing({space.workload: space.trace(space.default())}):
        forced = compile_op(node, target)
    assert forced.op_schedule.info == plain.op_schedule.info
    assert str(forced.op_schedule.schedule.mod) == str(plain.op_schedule.schedule.mod)
    for p in space.iter_points():
        t = space.trace(p)
        back = Trace.from_json(json.loads(json.dumps(t.to_json())))
        assert back == t and space.canonical(space.point_of(back)) == p
