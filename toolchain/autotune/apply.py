"""Which point a tunable schedule builds: :func:`decide`, and the contexts that steer it.

A default schedule declares its :class:`~toolchain.autotune.space.Space` and builds the
point :func:`decide` returns:

1. inside :func:`forcing` (the tuner's builders): the trace forced for that workload;
2. inside :func:`applying` (``kiln compile --records``): the best record's trace for the
   workload, when one exists and is still a valid point (else a warning and the default);
3. otherwise the space's default — the heuristic, so nothing changes without records.

:func:`declared` collects the spaces the schedules declare inside it (how the tuner finds
a model's tasks: schedule each kernel once with its default point and look).

A schedule whose default point is costly to find (the accelerator's tilings: a search that
builds candidate programs, :mod:`toolchain.vta.tiling`) asks :func:`steered` first and runs
its search only when no trace decides; it then declares its space (:func:`declare`) with
the search's choice as the default.

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
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from toolchain.autotune.space import InvalidPoint, Space, Trace
from toolchain.errors import KilnWarning


@dataclass(eq=False)  # compared as the mapping, with a dict of traces too
class Applied(Mapping[str, Trace]):
    """What a compile took from its records (:func:`applying`), by workload: ``traces``
    the traces its kernels were built from; of those, ``tuned`` the workloads whose point
    differs from the space's default and ``default`` those whose best record is the
    default point itself (a workload in neither: a space whose default is a search, the
    accelerator's tilings, is not compared); ``skipped`` the workloads whose record is no
    longer a valid point (warned; built with the default). As a mapping it is ``traces``
    (workload -> the trace applied), what :func:`applying` yielded before it counted more.

    ``kernels`` counts, by workload, the compile's kernels that asked for its record (one
    workload serves every kernel of its shape: ResNet-18's repeated blocks; a kernel whose
    schedule was reused from an equal earlier one counts too, :func:`count_kernel`), and
    ``kernel_total`` the kernels that asked for any (a kernel of two spaces, the Cortex-M
    int8 ones, counts once there and under each workload).

    >>> a = Applied(traces={"w1": Trace("toy", ())}, tuned={"w1"})
    >>> sorted(a), len(a), "w1" in a, a == {"w1": Trace("toy", ())}
    (['w1'], 1, True, True)
    """

    traces: dict[str, Trace] = field(default_factory=dict)
    tuned: set[str] = field(default_factory=set)
    default: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    kernels: dict[str, int] = field(default_factory=dict)
    kernel_total: int = 0

    def kernels_of(self, workloads: set[str] | dict[str, Trace]) -> int:
        """The kernels built from the records of ``workloads`` (by :attr:`kernels`; a
        workload whose kernels were not counted, a schedule outside a compile, as one)."""
        return sum(self.kernels.get(w, 1) for w in workloads)

    def __getitem__(self, workload: str) -> Trace:
        return self.traces[workload]

    def __iter__(self) -> Iterator[str]:
        return iter(self.traces)

    def __len__(self) -> int:
        return len(self.traces)


@dataclass
class _Steer:
    forced: dict[str, Trace] = field(default_factory=dict)
    records: dict[str, Trace] = field(default_factory=dict)
    seen: list[Space] | None = None
    #: what a compile used from its records
    applied: Applied = field(default_factory=Applied)


_STEER: ContextVar[_Steer | None] = ContextVar("kiln_autotune_steer", default=None)
#: the workloads whose records the kernel being scheduled asked for (:func:`kernel`)
_KERNEL: ContextVar[set[str] | None] = ContextVar("kiln_autotune_kernel", default=None)


@contextlib.contextmanager
def _push(**changes: Any) -> Iterator[_Steer]:
    old = _STEER.get()
    new = _Steer(dict(old.forced) if old else {}, dict(old.records) if old else {},
                 old.seen if old else None, old.applied if old else Applied())
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
def applying(records: Mapping[str, Trace]) -> Iterator[Applied]:
    """Schedules use the record's trace for their workload (``kiln compile --records``);
    yields the :class:`Applied` record of what was used."""
    with _push(records=dict(records), applied=Applied()) as s:
        yield s.applied


@contextlib.contextmanager
def declared() -> Iterator[list[Space]]:
    """Collect every space declared (by :func:`decide`) inside the block, in order."""
    seen: list[Space] = []
    with _push(seen=seen):
        yield seen


@dataclass(frozen=True)
class Steered:
    """The point a trace gives a schedule (:func:`steered`): ``forced`` by the tuner's
    builder, else from a record; ``commit(default=None)`` counts a record as applied
    (call it once the kernel is built from the point; ``default``: whether the point is
    the space's default, where the caller knows it)."""

    point: dict[str, Any]
    forced: bool
    commit: Callable[..., None] = field(compare=False)


def steered(space: Space) -> Steered | None:
    """The forced or recorded point for ``space``'s workload, or None where the schedule
    builds its default (no trace; or a record that is no longer a valid point: warned).
    A forced trace that is not a valid point raises
    :class:`~toolchain.autotune.space.InvalidPoint`."""
    s = _STEER.get()
    if s is None:
        return None
    if space.workload in s.forced:
        return Steered(space.canonical(space.point_of(s.forced[space.workload])), True,
                       lambda default=None: None)
    if space.workload in s.records:
        trace = s.records[space.workload]
        try:
            point = space.canonical(space.point_of(trace))
        except InvalidPoint as exc:
            warnings.warn(f"tuning record not applied (the default schedule is used): {exc}",
                          KilnWarning, stacklevel=3)
            s.applied.skipped.add(space.workload)
            _asked(space.workload)
            return None

        def commit(default: bool | None = None) -> None:
            s.applied.traces[space.workload] = trace
            if default is not None:
                (s.applied.default if default else s.applied.tuned).add(space.workload)
            _asked(space.workload)

        return Steered(point, False, commit)
    return None


def _asked(workload: str) -> None:
    """Note that a kernel took (or tried) ``workload``'s record: for the kernel being
    scheduled inside :func:`kernel`, else (the accelerator's layers) as one kernel."""
    seen = _KERNEL.get()
    if seen is not None:
        seen.add(workload)
    else:
        count_kernel({workload})


@contextlib.contextmanager
def kernel() -> Iterator[set[str]]:
    """Schedule one kernel inside: yields the workloads whose records it asked for
    (applied or skipped as invalid), each counted once for this kernel in the compile's
    :class:`Applied` when the block ends — however often its schedule decided. A kernel
    given an equal earlier kernel's schedule instead is counted by :func:`count_kernel`
    with the set this yielded for that one.

    >>> from toolchain.autotune.space import Knob, Space, Trace
    >>> s = Space("toy", "toy|n=8", (Knob("tile", (2, 4, 8), 4),))
    >>> with applying({"toy|n=8": Trace("toy", (("tile", 8),))}) as used:
    ...     with kernel() as asked:
    ...         _ = decide(s), decide(s)
    ...     count_kernel(asked)   # a second kernel of the same shape, schedule reused
    >>> used.kernels, used.kernel_total
    ({'toy|n=8': 2}, 2)
    """
    seen: set[str] = set()
    token = _KERNEL.set(seen)
    try:
        yield seen
    finally:
        _KERNEL.reset(token)
    count_kernel(seen)


def count_kernel(workloads: set[str] | frozenset[str]) -> None:
    """Count one kernel of the compile as built from the records of ``workloads`` (none:
    a kernel without a record, not counted)."""
    s = _STEER.get()
    if s is None or not workloads:
        return
    for w in workloads:
        s.applied.kernels[w] = s.applied.kernels.get(w, 0) + 1
    s.applied.kernel_total += 1


def declare(space: Space) -> None:
    """Note ``space`` for :func:`declared` (what :func:`decide` does before deciding)."""
    s = _STEER.get()
    if s is not None and s.seen is not None:
        s.seen.append(space)


def decide(space: Space) -> dict[str, Any]:
    """The point the schedule of ``space`` builds (see the module docstring)."""
    declare(space)
    got = steered(space)
    if got is None:
        return space.default()
    got.commit(default=got.point == space.canonical(space.default()))
    return got.point
