"""The tuning loop: a task scheduler over a model's kernels, an explorer per task, one
cost model per space kind, and measurement in batches.

:class:`Tuner` is independent of what is measured: it takes ``measure(items)`` (a batch
of ``(state, point)`` → one ``(features, MeasureResult)`` each) and ``featurize(state,
point)`` callables, so the same loop tunes real kernels (:func:`tune_tasks`: builders and
runners, records written as they come) and synthetic spaces in tests.

**Task scheduler.** Every task first gets one batch whose first point is its default (the
baseline every speed-up is quoted against). After that each batch goes to the task with
the largest expected gain ``weight x best_cost x rate``: ``best_cost`` (seconds, or
instructions) times how many kernels share it is what the model spends there, and
``rate`` is the task's relative improvement over its last two batches, floored by
``0.5 / sqrt(trials)`` so that no task starves. A task whose space is exhausted gets no
more trials.

Example (a synthetic space whose cost is known; the tuner finds its optimum)::

    >>> from toolchain.autotune.space import Knob, Space
    >>> s = Space("toy", "toy", (Knob("a", tuple(range(10)), 0), Knob("b", tuple(range(10)), 0)))
    >>> cost = lambda p: 1.0 + (p["a"] - 7) ** 2 + (p["b"] - 3) ** 2
    >>> t = Tuner([SimpleTask("toy", s)], synthetic_measure(cost), lambda st, p: s.encode(p),
    ...           strategy="xgb", batch=8, seed=1)
    >>> states = t.run(64)
    >>> states[0].best_point
    {'a': 7, 'b': 3}
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.autotune.measure import MeasureResult
from toolchain.autotune.model import CostModel
from toolchain.autotune.search import ModelSearch, RandomSearch
from toolchain.autotune.space import Space, Trace

Point = dict[str, Any]
STRATEGIES = ("xgb", "random")


@dataclass
class SimpleTask:
    """A task for the loop alone: a name, a space, a weight and FLOPs."""

    name: str
    space: Space
    weight: int = 1
    flops: int = 0


@dataclass
class TaskState:
    """What the tuner knows of one task."""

    task: Any
    explorer: Any = None
    tried: set[tuple] = field(default_factory=set)
    points: list[Point] = field(default_factory=list)
    features: list[np.ndarray] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    #: best cost after each trial (the tuning curve)
    curve: list[float] = field(default_factory=list)
    best_point: Point | None = None
    default_cost: float = math.inf
    exhausted: bool = False
    #: points measured right after the default, before the explorer's (the space's
    #: :meth:`~toolchain.autotune.space.Space.seed_points` and the best points of
    #: similar workloads' records)
    seeds: list[Point] = field(default_factory=list)
    #: after :meth:`Tuner.confirm`: the least cost of each re-measured point (by key)
    confirmed: dict[tuple, float] = field(default_factory=dict)
    #: trials that failed (build error, crash, time-out, a check over its tolerance)
    failed: int = 0
    #: the default point's trial came from the records of an earlier run (resumed)
    default_earlier: bool = False

    @property
    def space(self) -> Space:
        return self.task.space

    @property
    def trials(self) -> int:
        return len(self.curve)

    @property
    def best(self) -> float:
        return self.curve[-1] if self.curve else math.inf

    def add(self, point: Point, features: np.ndarray | None, cost: float) -> None:
        self.tried.add(self.space.key(point))
        if math.isfinite(cost) and cost < self.best:  # every trial, features or not
            self.best_point = dict(point)
        self.curve.append(min(self.best, cost))
        self.failed += not math.isfinite(cost)
        if self.space.key(point) == self.space.key(self.space.default()):
            self.default_cost = cost
        if features is not None:
            self.points.append(dict(point))
            self.features.append(np.asarray(features, np.float32))
            self.costs.append(cost)
            if isinstance(self.explorer, ModelSearch):
                self.explorer.remember(point, features)

    def gain_rate(self, batch: int) -> float:
        """The relative improvement of the best cost over the last two batches, floored
        by ``0.5 / sqrt(trials)`` (1.0 until there are two batches)."""
        if self.trials < 2 * batch:
            return 1.0
        old, new = self.curve[max(0, self.trials - 2 * batch - 1)], self.curve[-1]
        rate = (old - new) / old if math.isfinite(old) and old > 0 else 1.0
        return max(rate, 0.5 / math.sqrt(self.trials))


Measure = Callable[[list[tuple[TaskState, Point]]], list[tuple[np.ndarray | None,
                                                                MeasureResult]]]


class Tuner:
    """The loop (see the module docstring). ``transfer``: per space kind, groups of
    ``(features, costs)`` from earlier records, added to every training of that kind's
    model. ``seeds``: per workload, more points to measure right after the default (after
    the space's own :attr:`~toolchain.autotune.space.Space.seeds`; points outside the
    space are dropped). ``on_result(state, point, features, result)`` sees every trial."""

    def __init__(self, tasks: Sequence[Any], measure: Measure,
                 featurize: Callable[[TaskState, Point], np.ndarray], strategy: str = "xgb",
                 batch: int = 8, seed: int = 0,
                 transfer: Mapping[str, list[tuple[np.ndarray, np.ndarray]]] | None = None,
                 on_result: Callable[..., None] | None = None, evals: int | None = None,
                 progress: Any = None,
                 featurize_many: Callable[[TaskState, list[Point]], list[np.ndarray]] | None
                 = None, seeds: Mapping[str, Sequence[Point]] | None = None) -> None:
        if strategy not in STRATEGIES:
            from toolchain.errors import OptionError

            raise OptionError(f"search strategy {strategy!r}: choose one of "
                              f"{', '.join(STRATEGIES)}")
        self.measure, self.featurize = measure, featurize
        self.strategy, self.batch = strategy, max(1, batch)
        self.rng = random.Random(seed)
        self.transfer = dict(transfer or {})
        self.on_result = on_result
        self.progress = progress
        self.models: dict[str, CostModel] = {}
        self.states: list[TaskState] = []
        many = featurize_many or (lambda st, pts: [self.featurize(st, p) for p in pts])
        for t in tasks:
            st = TaskState(t)
            st.seeds = t.space.seed_points((seeds or {}).get(t.space.workload, ()))
            if strategy == "xgb":
                model = self.models.setdefault(t.space.kind, CostModel(seed=seed))
                st.explorer = ModelSearch(t.space, random.Random(self.rng.random()), model,
                                          lambda pts, st=st: many(st, pts),
                                          evals=evals or 4 * self.batch)
            else:
                st.explorer = RandomSearch(t.space, random.Random(self.rng.random()))
            self.states.append(st)

    # ---------------------------------------------------------------- bookkeeping

    def seed_state(self, st: TaskState, point: Point, features: np.ndarray | None,
                   cost: float) -> None:
        """Add an earlier trial (resuming from records)."""
        st.add(point, features, cost)

    def _train(self, kind: str) -> None:
        feats, costs = [], []
        for st in self.states:
            if st.task.space.kind == kind and len(st.costs) >= 2:
                feats.append(np.stack(st.features))
                costs.append(np.asarray(st.costs))
        for f, c in self.transfer.get(kind, []):
            feats.append(f)
            costs.append(c)
        if feats:
            self.models[kind].fit(feats, costs)

    def _pick(self) -> TaskState | None:
        live = [s for s in self.states if not s.exhausted]
        if not live:
            return None
        fresh = [s for s in live if s.trials == 0]
        if fresh:
            return fresh[0]

        def gain(s: TaskState) -> float:
            best = s.best if math.isfinite(s.best) else 1.0
            return s.task.weight * best * s.gain_rate(self.batch)

        return max(live, key=gain)

    # ---------------------------------------------------------------------- loop

    def run(self, trials: int) -> list[TaskState]:
        """Measure until ``trials`` trials in all (earlier ones included) or every space is
        exhausted; returns the task states."""
        while sum(s.trials for s in self.states) < trials:
            st = self._pick()
            if st is None:
                break
            n = min(self.batch, trials - sum(s.trials for s in self.states))
            if st.trials == 0:  # the first round of each task: the budget spread evenly
                n = min(n, max(1, trials // len(self.states)))
            points: list[Point] = []
            default = st.space.default()
            if st.space.key(default) not in st.tried:
                points.append(default)
            taken = st.tried | {st.space.key(p) for p in points}
            for seed in st.seeds:
                if len(points) < n and st.space.key(seed) not in taken:
                    points.append(seed)
                    taken.add(st.space.key(seed))
            if len(points) < n:
                if self.strategy == "xgb" and st.costs:
                    self._train(st.space.kind)
                more = st.explorer.next_batch(taken, n - len(points))
                points += more
            if not points:
                st.exhausted = True
                continue
            results = self.measure([(st, p) for p in points])
            for p, (feats, res) in zip(points, results, strict=True):
                cost = min(res.costs) if res.costs and res.error is None else math.inf
                st.add(p, feats, cost)
                if self.on_result is not None:
                    self.on_result(st, p, feats, res)
                if self.progress is not None:
                    self.progress(st)
        return self.states

    def confirm(self, top: int = 4, rounds: int = 2) -> None:
        """Measure each task's ``top`` best distinct points and its default ``rounds``
        more times, all of them in one batch a round (alternately), and keep each point's
        least cost over every measurement: the pick (``best_point``) and the default's
        cost are then the least of several timings, so a point that lost once to a busy
        machine is not dropped for it. The tuning curve is left as measured."""
        for st in self.states:
            least: dict[tuple, float] = {}
            pts: dict[tuple, Point] = {}
            for p, c in zip(st.points, st.costs, strict=True):
                k = st.space.key(p)
                if math.isfinite(c) and c < least.get(k, math.inf):
                    least[k], pts[k] = c, p
            keys = sorted(least, key=least.__getitem__)[:top]
            dkey = st.space.key(st.space.default())
            if dkey in least and dkey not in keys:
                keys.append(dkey)
            if len(keys) < 2:
                continue
            for _ in range(rounds):
                batch = [pts[k] for k in keys]
                for p, (feats, res) in zip(batch, self.measure([(st, p) for p in batch]),
                                           strict=True):
                    cost = min(res.costs) if res.costs and res.error is None else math.inf
                    least[st.space.key(p)] = min(least[st.space.key(p)], cost)
                    if self.on_result is not None:
                        self.on_result(st, p, feats, res)
            st.best_point = dict(pts[min(keys, key=least.__getitem__)])
            if dkey in least:
                st.default_cost = least[dkey]
            st.confirmed = {k: least[k] for k in keys}


def synthetic_measure(cost: Callable[[Point], float]) -> Measure:
    """A :data:`Measure` of a known cost function (features: the knob indices)."""

    def measure(items: list[tuple[TaskState, Point]]) -> list[tuple[np.ndarray | None,
                                                                    MeasureResult]]:
        return [(np.asarray(st.space.encode(p), np.float32), MeasureResult([cost(p)]))
                for st, p in items]

    return measure


# ----------------------------------------------------------------- real kernels

def trace_of(st: TaskState, point: Point) -> Trace:
    return st.space.trace(point)


def tune_tasks(tasks: Sequence[Any], trials: int, *, builder: Any, runner: Any,
               writer: Any = None, strategy: str = "xgb", batch: int = 8, seed: int = 0,
               earlier: Sequence[Any] = (), transfer: Sequence[Any] = (),
               progress: bool | None = None, evals: int | None = None,
               confirm: int = 0, confirm_rounds: int = 2,
               conditions: Mapping[str, Any] | None = None) -> list[TaskState]:
    """Tune real kernels: builds by ``builder``, measurements by ``runner``, every trial
    appended to ``writer`` (a :class:`~toolchain.autotune.records.RecordWriter`) as a
    record as soon as it is measured (a runner with ``run_one``; a Ray runner's when its
    batch ends), so an interrupted run keeps it. ``earlier``: records of these workloads
    to resume from (they count against ``trials``); ``transfer``: records of other
    workloads to train the models with (and whose best points are tried early,
    :func:`transfer_seeds`). ``confirm``: after the
    search, re-measure each task's ``confirm`` best points and its default
    ``confirm_rounds`` times (:meth:`Tuner.confirm`; recorded like trials).
    ``conditions``: how ``runner`` measures, written into every record (default: the
    runner's ``conditions()``, :mod:`toolchain.autotune.conditions`; a runner without
    one: not recorded)."""
    from toolchain.autotune.measure import BuildInput, featurize
    from toolchain.autotune.records import Record

    by_key = {t.space.workload: t for t in tasks}
    if conditions is None and hasattr(runner, "conditions"):
        conditions = runner.conditions()

    def measure(items: list[tuple[TaskState, Point]]) -> list[tuple[np.ndarray | None,
                                                                    MeasureResult]]:
        inputs = [BuildInput(st.task.node, st.task.target, st.space.workload,
                             st.space.trace(p)) for st, p in items]
        builds = builder.build(inputs)
        one = getattr(runner, "run_one", None)  # a Ray runner measures the batch at once
        results = runner.run(builds) if one is None else []
        out = []
        for i, ((st, p), b) in enumerate(zip(items, builds, strict=True)):
            feats = np.asarray(b.features, np.float32) if b.features is not None else None
            res = results[i] if one is None else one(b)
            record(st, p, feats, res)  # now, not when the batch ends: an interrupt keeps it
            out.append((feats, res))
        return out

    def feat(st: TaskState, p: Point) -> np.ndarray:
        return feat_many(st, [p])[0]

    def feat_many(st: TaskState, pts: list[Point]) -> list[np.ndarray]:
        inputs = [BuildInput(st.task.node, st.task.target, st.space.workload,
                             st.space.trace(p)) for p in pts]
        many = getattr(builder, "featurize", None)
        out = many(inputs) if many is not None else [featurize(i) for i in inputs]
        return [np.asarray(f, np.float32) for f in out]

    def record(st: TaskState, p: Point, feats: np.ndarray | None, res: MeasureResult) -> None:
        if writer is None:
            return
        writer.append(Record(st.space.workload, st.space.kind, st.task.target.name,
                             st.space.trace(p), res.costs, res.error, runner.name,
                             runner.unit, st.task.flops,
                             features=None if feats is None else
                             [round(float(x), 4) for x in feats], conditions=conditions))

    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    seeds = {t.space.workload: transfer_seeds(t.space, transfer) for t in tasks}
    for wl, recs in _by_workload(transfer).items():
        if wl in by_key:
            continue
        with_f = [r for r in recs if r.features is not None]
        if len(with_f) >= 2:
            groups.setdefault(with_f[0].space, []).append(
                (np.asarray([r.features for r in with_f], np.float32),
                 np.asarray([r.cost for r in with_f])))
    bar = _Progress(trials, progress, runner.unit)
    tuner = Tuner(tasks, measure, feat, strategy, batch, seed, groups, None, evals,
                  bar.update, feat_many, seeds)
    for st in tuner.states:
        for r in _by_workload(earlier).get(st.space.workload, []):
            try:
                point = st.space.canonical(st.space.point_of(r.trace))
            except Exception:  # noqa: BLE001 - a record of an older space: not resumed
                continue
            tuner.seed_state(st, point, None if r.features is None else
                             np.asarray(r.features, np.float32), r.cost)
        st.default_earlier = st.space.key(st.space.default()) in st.tried
    try:
        states = tuner.run(trials)
        if confirm:
            tuner.confirm(confirm, confirm_rounds)
        return states
    finally:
        bar.close()


def transfer_seeds(space: Space, records: Sequence[Any], per_workload: int = 2
                   ) -> list[Point]:
    """The best ``per_workload`` points of each other workload's ``records`` that are
    points of ``space`` too (same kind, every decision a valid choice here): every
    workload's best first, then every workload's second... What measured well on a
    similar layer is tried early on this one.
    A record of another kind, or whose trace breaks this space's rules, gives nothing."""
    ranked: list[tuple[float, Point]] = []
    for wl, recs in _by_workload(records).items():
        if wl == space.workload:
            continue
        ok = sorted((r for r in recs if r.space == space.kind and math.isfinite(r.cost)),
                    key=lambda r: r.cost)
        got = 0
        for r in ok:
            try:
                p = space.canonical(space.point_of(r.trace))
            except Exception:  # noqa: BLE001 - outside this space: not a seed
                continue
            ranked.append((got, p))
            got += 1
            if got == per_workload:
                break
    return [p for _, p in sorted(ranked, key=lambda x: x[0])]


def _by_workload(records: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in records:
        out.setdefault(r.workload, []).append(r)
    return out


def outcome(st: TaskState, unit: str) -> str:
    """A task's result in words, as ``kiln tune``'s summary and progress bar print it: its
    best (GFLOP/s for timed kernels with FLOPs, else the cost in ``unit``) against its
    default point's trial — the default's own failure, or that it was timed in an earlier
    run (resumed), said — and for an untimed check (``unit`` in
    :data:`~toolchain.autotune.records.UNTIMED_UNITS`) how many points passed it.

    >>> from toolchain.autotune.space import Knob
    >>> st = TaskState(SimpleTask("k", Space("toy", "toy", (Knob("a", (1, 2, 3), 1),)),
    ...                           flops=2_000_000))
    >>> st.add({"a": 1}, None, 4e-3); st.add({"a": 2}, None, 1e-3)
    >>> outcome(st, "s")
    'best 2.0 GFLOP/s (4.00x the default)'
    >>> st.add({"a": 3}, None, math.inf)
    >>> outcome(st, "check")
    '2 of 3 points pass the check against the default'
    """
    from toolchain.autotune.records import UNTIMED_UNITS

    best, base = st.best, st.default_cost
    if not st.trials:
        return "no trials yet"
    if unit in UNTIMED_UNITS:
        return f"{st.trials - st.failed} of {st.trials} points pass the check against " \
               "the default"
    if not math.isfinite(best):
        return f"no valid trial (the records hold the {'error' if st.failed == 1 else 'errors'})"
    shown = (f"{st.task.flops / best / 1e9:.1f} GFLOP/s" if unit == "s" and st.task.flops
             else f"{best:.4g} {unit}")
    if not math.isfinite(base):
        return f"best {shown} (the default point failed: no speed-up to quote)"
    when = ", timed in an earlier run" if st.default_earlier else ""
    return f"best {shown} ({base / best:.2f}x the default{when})"


class _Progress:
    """A tqdm bar of trials with the current task's best so far (GFLOP/s for timed
    kernels, instructions for counted ones) and its speed-up over the default."""

    def __init__(self, total: int, enabled: bool | None, unit: str) -> None:
        from tqdm import tqdm

        on = sys.stderr.isatty() if enabled is None else enabled
        self.unit = unit
        self.bar = tqdm(total=total, desc="kiln tune", unit="trial", disable=not on,
                        file=sys.stderr, dynamic_ncols=True)

    def update(self, st: TaskState) -> None:
        self.bar.set_description_str(f"kiln tune {st.task.name}", refresh=False)
        self.bar.set_postfix_str(outcome(st, self.unit), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
