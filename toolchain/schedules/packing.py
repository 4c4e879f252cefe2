"""Weights packed at compile time, recorded so that a kernel's schedule can be reused.

A bundle schedules each fused group with the group's constant inputs bound to their data
(:func:`~toolchain.schedules.generic.fused.bind_constants`), so a conv or dense schedule
packs its weights once, offline, into a new constant that becomes a kernel *parameter*.
Two groups that differ only in those weights schedule to the same function; the bundle
compiler schedules the first one and reuses its schedule for the others
(:mod:`toolchain.bundle.reuse`). For that it must produce *each* group's packed weights by
the *same* packing, which is what this module records:

* :func:`packed_constant` — a schedule packs a bound constant through it: the packed
  :class:`~toolchain.graph.ir.Value` and the recipe (source value, name suffix, pure numpy
  function) that made it;
* :func:`value_blind` — marks an anchor schedule that reads constant data *only* through
  :func:`packed_constant` (no decision depends on a weight's values; a bound constant it
  does not pack is handed on as a run-time parameter). Only such schedules let a bundle
  share a schedule between groups whose bound weights differ; for any other schedule the
  weights' values are part of the reuse key (it never shares wrongly, it shares less);
* :func:`recording` — the bundle compiler opens one around each schedule call and reads
  what was packed, bound and by which kind of schedule.

>>> import numpy as np
>>> from toolchain.graph.ir import Value
>>> w = Value.constant("w", np.arange(6, dtype=np.float32).reshape(2, 3))
>>> with recording() as rec:
...     p = packed_constant(w, "_t", lambda a: np.ascontiguousarray(a.T))
>>> p.name, p.shape, rec.recipes[id(p)].source is w
('w_t', (3, 2), True)
>>> rec.recipes[id(p)].replay(np.ones((2, 3), np.float32)).shape
(3, 2)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from toolchain.graph.ir import Value


@dataclass(frozen=True)
class Recipe:
    """How a packed constant was made: ``fn(source.data)``, named ``source.name + suffix``."""

    source: Value
    suffix: str
    fn: Callable[[np.ndarray], np.ndarray]

    def replay(self, data: np.ndarray) -> np.ndarray:
        """The same packing applied to another group's weights ``data``."""
        return np.asarray(self.fn(data))


@dataclass
class Record:
    """What one schedule call packed and bound (see :func:`recording`)."""

    #: id(packed value) -> its recipe
    recipes: dict[int, Recipe] = field(default_factory=dict)
    #: id(bound copy) -> position of the Fused node's input it copies
    bound: dict[int, int] = field(default_factory=dict)
    #: the anchor schedule that saw the bound constants was :func:`value_blind`
    blind: bool = False


_CURRENT: ContextVar[Record | None] = ContextVar("kiln_packing_record", default=None)


@contextlib.contextmanager
def recording() -> Iterator[Record]:
    """Collect the recipes and bindings of the schedule calls inside the block."""
    rec = Record()
    token = _CURRENT.set(rec)
    try:
        yield rec
    finally:
        _CURRENT.reset(token)


def current() -> Record | None:
    """The open :func:`recording`, or None."""
    return _CURRENT.get()


def packed_constant(source: Value, suffix: str,
                    fn: Callable[[np.ndarray], np.ndarray]) -> Value:
    """The constant ``fn(source.data)`` named ``source.name + suffix``; ``fn`` must be a
    pure function of the array (shapes and plans it closes over are fixed by the group's
    structure), so it can be replayed on another group's weights."""
    assert source.data is not None, f"{source.name}: packing needs constant data"
    value = Value.constant(source.name + suffix, np.asarray(fn(source.data)))
    rec = _CURRENT.get()
    if rec is not None:
        rec.recipes[id(value)] = Recipe(source, suffix, fn)
    return value


F = TypeVar("F", bound=Callable[..., Any])


def value_blind(fn: F) -> F:
    """Mark an anchor schedule as reading constant data only through
    :func:`packed_constant` (see the module docstring); ``is_value_blind`` tells."""
    fn.value_blind = True  # type: ignore[attr-defined]
    return fn


def is_value_blind(fn: Any) -> bool:
    """True for a schedule marked with :func:`value_blind`.

    >>> is_value_blind(value_blind(lambda node, target: None)), is_value_blind(print)
    (True, False)
    """
    return bool(getattr(fn, "value_blind", False))


__all__ = ["Recipe", "Record", "current", "is_value_blind", "packed_constant", "recording",
           "value_blind"]
