"""Which point a tunable schedule builds: :func:`decide`, and the contexts that steer it.

A default schedule declares its :class:`~toolchain.autotune.space.Space` and builds the
point :func:`decide` returns:

1. inside :func:`forcing` (the tuner's builders): the trace forced for that workload;
2. inside :func:`applying` (``kiln compile --records``): the best record's trace for the
   workload, when one exists and is still a valid point (else a warning and the default);
3. otherwise the space's default — the heuristic, so nothing changes without records.

:func:`declared` collects the spaces the schedules declare inside it (how the tuner finds
a model's tasks: schedule each kernel once with its default point and look).

Example::

    >>> from toolchain.autotune.space import Knob, Space, Trace
    >>> s = Space("toy", "toy|n=8", (Knob("tile", (2, 4, 8), 4),))
    >>> decide(s)
    {'tile': 4}
    >>> with applying({"toy|n=8": Trace("toy", (("tile", 8),))}):
    ...     decide(s)
    {'tile': 8}
    >>> with declared() as seen:
    ...     _ = decide(s)
    >>> [x.workload for x in seen]
    ['toy|n=8']
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from toolchain.autotune.space import InvalidPoint, Space, Trace
from toolchain.errors import KilnWarning


@dataclass
class _Steer:
    forced: dict[str, Trace] = field(default_factory=dict)
    records: dict[str, Trace] = field(default_factory=dict)
    seen: list[Space] | None = None
    #: workload -> the trace applied from records (what a compile used)
    applied: dict[str, Trace] = field(default_factory=dict)


_STEER: ContextVar[_Steer | None] = ContextVar("kiln_autotune_steer", default=None)


@contextlib.contextmanager
def _push(**changes: Any) -> Iterator[_Steer]:
    old = _STEER.get()
    new = _Steer(dict(old.forced) if old else {}, dict(old.records) if old else {},
                 old.seen if old else None, old.applied if old else {})
    for k, v in changes.items():
        if k in ("forced", "records"):
            getattr(new, k).update(v)
        else:
            setattr(new, k, v)
    token = _STEER.set(new)
    try:
        yield new
    finally:
        _STEER.reset(token)


@contextlib.contextmanager
def forcing(traces: Mapping[str, Trace]) -> Iterator[None]:
    """Schedules of the workloads in ``traces`` build those points (an invalid one raises
    :class:`~toolchain.autotune.space.InvalidPoint` before anything is built)."""
    with _push(forced=dict(traces)):
        yield


@contextlib.contextmanager
def applying(records: Mapping[str, Trace]) -> Iterator[dict[str, Trace]]:
    """Schedules use the record's trace for their workload (``kiln compile --records``);
    yields the dict of the traces actually applied, by workload."""
    with _push(records=dict(records), applied={}) as s:
        yield s.applied


@contextlib.contextmanager
def declared() -> Iterator[list[Space]]:
    """Collect every space declared (by :func:`decide`) inside the block, in order."""
    seen: list[Space] = []
    with _push(seen=seen):
        yield seen


def decide(space: Space) -> dict[str, Any]:
    """The point the schedule of ``space`` builds (see the module docstring)."""
    s = _STEER.get()
    if s is None:
        return space.default()
    if s.seen is not None:
        s.seen.append(space)
    if space.workload in s.forced:
        return space.canonical(space.point_of(s.forced[space.workload]))
    if space.workload in s.records:
        trace = s.records[space.workload]
        try:
            point = space.canonical(space.point_of(trace))
        except InvalidPoint as exc:
            warnings.warn(f"tuning record not applied (the default schedule is used): {exc}",
                          KilnWarning, stacklevel=2)
            return space.default()
        s.applied[space.workload] = trace
        return point
    return space.default()
