"""Search spaces of the default schedules: knobs, rules, points and replayable traces.

A default schedule declares what it could have chosen differently through one small API:

* a :class:`Knob` — a named decision (tile size, loop order, unroll or not, vector width,
  layout block, algorithm), its candidate values and the value the heuristic picks;
* a :class:`Rule` — a condition every point must meet (a block divides a size, a register
  tile fits the register file), with a message for the user when it does not;
* a :class:`Space` — the knobs and rules of one schedule for one workload (a shape on a
  target's capabilities); its :attr:`Space.workload` key is what records are matched by;
* a :class:`Trace` — a sampled point: the ordered decisions, printable, serialisable to
  JSON and replayable (the schedule given the same trace builds the same kernel).

The schedule asks :func:`toolchain.autotune.apply.decide` for its point: the tuner's
trace while tuning, the best record under ``kiln compile --records``, else
:meth:`Space.default` — the heuristic's own choices, so the default schedule is one point
of its space and a compile without records is unchanged.

Example (a toy space: a split factor and whether to unroll)::

    >>> s = Space("toy", "toy|n=12", (
    ...     Knob("tile", (1, 2, 3, 4, 6, 12), 4, "inner split factor"),
    ...     Knob("unroll", (False, True), False, "unroll the inner loop")),
    ...     (Rule("an unrolled tile fits 8 registers",
    ...           lambda p: not p["unroll"] or p["tile"] <= 8),))
    >>> t = s.trace(s.default()); print(t)
    toy: tile=4 unroll=False
    >>> Trace.from_json(t.to_json()) == t
    True
    >>> s.check({"tile": 12, "unroll": True})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    toolchain.autotune.space.InvalidPoint: toy|n=12: point tile=12 unroll=True breaks: ...
    >>> s.size, len(s.valid_points())
    (12, 11)
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolchain.errors import InputError

#: JSON scalar types a knob value may have (a trace must round-trip through JSON)
SCALARS = (bool, int, float, str)


class InvalidPoint(InputError):
    """A point outside its space: an unknown knob, a value that is not a candidate, or a
    broken rule. Raised before anything is built."""


@dataclass(frozen=True)
class Knob:
    """One decision of a schedule: ``name``, the candidate ``choices`` (JSON scalars, in a
    meaningful order: neighbours in the tuple are neighbours for the search), the
    heuristic's ``default`` (one of the choices) and a one-line ``doc``. ``active`` (a
    predicate of the point) says when the knob matters at all; an inactive knob is pinned
    to its default so two points that build the same kernel are one point."""

    name: str
    choices: tuple[Any, ...]
    default: Any
    doc: str = ""
    active: Callable[[Mapping[str, Any]], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.choices:
            raise ValueError(f"knob {self.name!r} has no choices")
        bad = [c for c in self.choices if not isinstance(c, SCALARS)]
        if bad:
            raise ValueError(f"knob {self.name!r}: choices must be JSON scalars, got {bad!r}")
        if self.default not in self.choices:
            raise ValueError(f"knob {self.name!r}: default {self.default!r} is not one of its "
                             f"choices {self.choices!r}")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise ValueError(f"knob {self.name!r}: repeated choices {self.choices!r}")

    def index(self, value: Any) -> int:
        """Position of ``value`` among the choices (the same type: ``True`` is not ``1``)."""
        for i, c in enumerate(self.choices):
            if type(c) is type(value) and c == value:
                return i
        raise KeyError(value)


@dataclass(frozen=True)
class Rule:
    """A condition every point of a space meets; ``message`` says it in words."""

    message: str
    holds: Callable[[Mapping[str, Any]], bool] = field(compare=False)


@dataclass(frozen=True)
class Trace:
    """A point of a space as the ordered decisions that replay it.

    >>> t = Trace("dense", (("mr", 6), ("nr", 16)))
    >>> str(t), t.to_json()
    ('dense: mr=6 nr=16', {'space': 'dense', 'decisions': [['mr', 6], ['nr', 16]]})
    """

    space: str
    decisions: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        """The decisions as ``{knob: value}``."""
        return dict(self.decisions)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_json` reads it back)."""
        return {"space": self.space, "decisions": [[k, v] for k, v in self.decisions]}

    @classmethod
    def from_json(cls, data: Any, where: str = "trace") -> Trace:
        """Read :meth:`to_json`'s dict; a malformed one is refused naming ``where``."""
        if not isinstance(data, Mapping) or not isinstance(data.get("space"), str) \
                or not isinstance(data.get("decisions"), list):
            raise InputError(f"{where}: expected {{'space': NAME, 'decisions': [[KNOB, "
                             f"VALUE], ...]}}, got {data!r}")
        out = []
        for d in data["decisions"]:
            if not (isinstance(d, list | tuple) and len(d) == 2 and isinstance(d[0], str)
                    and isinstance(d[1], SCALARS)):
                raise InputError(f"{where}: decision {d!r} is not a [KNOB, VALUE] pair")
            out.append((d[0], d[1]))
        return cls(data["space"], tuple(out))

    def __str__(self) -> str:
        return f"{self.space}: " + " ".join(f"{k}={v}" for k, v in self.decisions)


@dataclass(frozen=True)
class Space:
    """The knobs and rules of one schedule on one workload.

    ``kind`` names the schedule (``conv2d``, ``dense`` ...): records of one kind
    share a cost model. ``workload`` is the key records are matched by; it holds the
    shapes and the target capabilities the space depends on (vector lanes, registers),
    never a target's name.
    """

    kind: str
    workload: str
    knobs: tuple[Knob, ...]
    rules: tuple[Rule, ...] = ()
    #: partial points (knob -> value over the default) the tuner measures right after the
    #: default: the schedule's priors, points of this kind of workload that measured well
    #: (:meth:`seed_points`); they change no kernel that is built without the tuner
    seeds: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"space {self.kind}: knob names repeat: {names}")

    def __str__(self) -> str:
        """The space in words: its workload, each knob's choices (the default marked *)
        and its rules.

        >>> print(Space("toy", "toy|n=8", (Knob("tile", (2, 4, 8), 4, "split factor"),),
        ...             (Rule("tile divides 8", lambda p: 8 % p["tile"] == 0),)))
        space toy for toy|n=8 (3 points before the rules)
          tile: 2 4* 8  -- split factor
          rule: tile divides 8
        """
        lines = [f"space {self.kind} for {self.workload} ({self.size} points before the "
                 "rules)"]
        for k in self.knobs:
            vals = " ".join(f"{c}*" if k.index(k.default) == i else str(c)
                            for i, c in enumerate(k.choices))
            lines.append(f"  {k.name}: {vals}" + (f"  -- {k.doc}" if k.doc else ""))
        lines += [f"  rule: {r.message}" for r in self.rules]
        return "\n".join(lines)

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def size(self) -> int:
        """Points before the rules (the product of the knobs' choices)."""
        return math.prod(len(k.choices) for k in self.knobs)

    def default(self) -> dict[str, Any]:
        """The heuristic's point (what the schedule builds without records)."""
        return {k.name: k.default for k in self.knobs}

    def seed_points(self, extra: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        """The :attr:`seeds` (then ``extra``) as valid canonical points, in order: each
        seed's knobs over the default; a seed naming a knob the space lacks or breaking a
        rule is dropped, as are repeats and the default itself.

        >>> s = Space("toy", "toy|n=8", (Knob("tile", (2, 4, 8), 4),
        ...                             Knob("unroll", (False, True), False)),
        ...           (Rule("unroll only tiles up to 4", lambda p: p["tile"] <= 4 or
        ...                 not p["unroll"]),),
        ...           seeds=({"tile": 8}, {"tile": 8, "unroll": True}, {"tile": 4},
        ...                  {"depth": 2}, {"unroll": True}, {"tile": 8}))
        >>> s.seed_points()
        [{'tile': 8, 'unroll': False}, {'tile': 4, 'unroll': True}]
        """
        names = {k.name for k in self.knobs}
        seen = {self.key(self.default())}
        out = []
        for seed in (*self.seeds, *extra):
            if not set(seed) <= names:
                continue
            p = self.canonical({**self.default(), **seed})
            if not self.is_valid(p) or self.key(p) in seen:
                continue
            seen.add(self.key(p))
            out.append(p)
        return out

    def canonical(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """``point`` with every inactive knob at its default."""
        out = dict(point)
        for k in self.knobs:
            if k.active is not None and not k.active(out):
                out[k.name] = k.default
        return out

    def problems(self, point: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``point`` (empty: it is valid)."""
        errs = []
        names = {k.name for k in self.knobs}
        for n in point:
            if n not in names:
                errs.append(f"unknown knob {n!r} (knobs: {', '.join(sorted(names))})")
        for k in self.knobs:
            if k.name not in point:
                errs.append(f"knob {k.name!r} has no value")
                continue
            try:
                k.index(point[k.name])
            except KeyError:
                errs.append(f"{k.name}={point[k.name]!r} is not one of {list(k.choices)}")
        if errs:
            return errs
        return [r.message for r in self.rules if not r.holds(point)]

    def is_valid(self, point: Mapping[str, Any]) -> bool:
        return not self.problems(point)

    def check(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """``point`` as a dict if it is valid; else :class:`InvalidPoint` saying why."""
        errs = self.problems(point)
        if errs:
            shown = " ".join(f"{k}={v}" for k, v in point.items())
            raise InvalidPoint(f"{self.workload}: point {shown} breaks: {'; '.join(errs)}")
        return dict(point)

    def trace(self, point: Mapping[str, Any]) -> Trace:
        """The :class:`Trace` of a (checked) point, decisions in knob order."""
        p = self.check(point)
        return Trace(self.kind, tuple((k.name, p[k.name]) for k in self.knobs))

    def point_of(self, trace: Trace) -> dict[str, Any]:
        """The checked point a trace replays (its space kind must be this one). A knob the
        trace does not decide takes its default: a knob added to a space after a record
        was written defaults to what the schedule did before it existed, so old records
        replay the kernel they measured."""
        if trace.space != self.kind:
            raise InvalidPoint(f"{self.workload}: trace of space {trace.space!r} given to a "
                               f"schedule of space {self.kind!r}")
        return self.check({**self.default(), **trace.as_dict()})

    def encode(self, point: Mapping[str, Any]) -> list[float]:
        """The point as knob indices (a compact numeric form for search bookkeeping)."""
        return [float(k.index(point[k.name])) for k in self.knobs]

    def key(self, point: Mapping[str, Any]) -> tuple[int, ...]:
        """A hashable identity of a canonical point."""
        c = self.canonical(point)
        return tuple(k.index(c[k.name]) for k in self.knobs)

    # ------------------------------------------------------------------ enumeration

    def iter_points(self) -> Iterator[dict[str, Any]]:
        """Every valid canonical point, once (for small spaces; see :meth:`valid_points`)."""
        seen: set[tuple[int, ...]] = set()
        for combo in itertools.product(*(k.choices for k in self.knobs)):
            p = self.canonical({k.name: v for k, v in zip(self.knobs, combo, strict=True)})
            key = self.key(p)
            if key in seen or not self.is_valid(p):
                continue
            seen.add(key)
            yield p

    def valid_points(self, limit: int = 200_000) -> list[dict[str, Any]]:
        """All valid points when the space has at most ``limit`` points before the rules."""
        if self.size > limit:
            raise ValueError(f"space {self.kind} has {self.size} points; sample it instead")
        return list(self.iter_points())

    def sample(self, rng: random.Random, tries: int = 1000) -> dict[str, Any]:
        """A random valid canonical point (rejection sampling; the default if none found)."""
        for _ in range(tries):
            p = self.canonical({k.name: rng.choice(k.choices) for k in self.knobs})
            if self.is_valid(p):
                return p
        return self.default()

    def mutate(self, point: Mapping[str, Any], rng: random.Random,
               tries: int = 50) -> dict[str, Any]:
        """A valid neighbour: one knob moved to an adjacent choice (or, one time in four,
        to any choice)."""
        for _ in range(tries):
            k = rng.choice(self.knobs)
            if len(k.choices) < 2:
                continue
            i = k.index(point[k.name])
            if rng.random() < 0.25:
                j = rng.randrange(len(k.choices))
            else:
                j = min(len(k.choices) - 1, max(0, i + rng.choice((-1, 1))))
            if j == i:
                continue
            q = self.canonical({**point, k.name: k.choices[j]})
            if self.is_valid(q) and self.key(q) != self.key(point):
                return q
        return dict(point)


def divisors(n: int, up_to: int | None = None) -> tuple[int, ...]:
    """The divisors of ``n`` (at most ``up_to``), ascending.

    >>> divisors(12), divisors(12, 5)
    ((1, 2, 3, 4, 6, 12), (1, 2, 3, 4))
    """
    top = n if up_to is None else min(n, up_to)
    return tuple(d for d in range(1, top + 1) if n % d == 0)


def with_default(choices: Sequence[Any], default: Any) -> tuple[Any, ...]:
    """``choices`` with ``default`` added in sorted position when missing (a heuristic's
    value is always a candidate, so the default schedule is a point of its space).

    >>> with_default((1, 2, 4, 8), 6)
    (1, 2, 4, 6, 8)
    """
    if default in choices:
        return tuple(choices)
    return tuple(sorted({*choices, default}))
