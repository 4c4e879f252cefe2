"""The tuning loop on synthetic spaces of known optimum, and the task scheduler."""

from __future__ import annotations

import math
import random

import pytest

from toolchain.autotune.measure import MeasureResult
from toolchain.autotune.space import Knob, Rule, Space
from toolchain.autotune.tuner import SimpleTask, TaskState, Tuner, synthetic_measure


def bowl(seed: int) -> tuple[Space, dict, object]:
    """A 12 x 12 x 2 space with one optimum at a seeded random place (some of the space
    ruled out), and its cost."""
    rng = random.Random(seed)
    best = {"a": rng.randrange(12), "b": rng.randrange(12), "c": rng.choice((False, True))}
    space = Space("bowl", f"bowl|{seed}", (Knob("a", tuple(range(12)), 0),
                                           Knob("b", tuple(range(12)), 0),
                                           Knob("c", (False, True), False)),
                  (Rule("a + b < 22", lambda p: p["a"] + p["b"] < 22),))

    def cost(p: dict) -> float:
        return 1.0 + (p["a"] - best["a"]) ** 2 + 0.5 * (p["b"] - best["b"]) ** 2 + \
            3.0 * (p["c"] != best["c"])

    return space, best, cost


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_model_guided_search_finds_the_known_optimum(seed):
    space, best, cost = bowl(seed)
    t = Tuner([SimpleTask("bowl", space)], synthetic_measure(cost),
              lambda st, p: space.encode(p), strategy="xgb", batch=8, seed=seed)
    st = t.run(96)[0]
    assert st.best_point == best and st.best == 1.0
    assert len(st.tried) == st.trials  # no point measured twice


def test_model_beats_random_search_on_average():
    """Trials until the optimum, summed over seeds: the model needs fewer."""
    def trials_to_optimum(strategy: str, seed: int) -> int:
        space, best, cost = bowl(seed)
        t = Tuner([SimpleTask("bowl", space)], synthetic_measure(cost),
                  lambda st, p: space.encode(p), strategy=strategy, batch=8, seed=seed)
        st = t.run(200)[0]
        return next(i for i, c in enumerate(st.curve) if c == 1.0) + 1

    seeds = range(4, 8)
    assert sum(trials_to_optimum("xgb", s) for s in seeds) < \
        sum(trials_to_optimum("random", s) for s in seeds)


def test_failed_trials_are_kept_and_never_best():
    space, best, cost = bowl(0)

    def measure(items):
        return [(space.encode(p) and None, MeasureResult(None, "run: crashed")
                 if p["c"] else MeasureResult([cost(p)])) for st, p in items]

    st = Tuner([SimpleTask("bowl", space)], measure, lambda st, p: space.encode(p),
               strategy="random", batch=8).run(40)[0]
    assert st.trials == 40 and math.isfinite(st.best) and st.best_point["c"] is False


def test_the_best_point_is_the_least_cost_with_or_without_features():
    """Trials without features (resumed records written without them, a build that gave
    none) are compared too: the best point was the last such trial, whatever its cost."""
    space, _, _ = bowl(0)
    st = TaskState(SimpleTask("bowl", space))
    pts = list(space.valid_points())[:4]
    for p, c in zip(pts, [3.0, 1.0, 2.0, math.inf], strict=True):
        st.add(p, None, c)
    assert st.best_point == pts[1] and st.best == 1.0 and st.failed == 1
    st.add(pts[2], space.encode(pts[2]), 1.5)  # one with features, not better
    assert st.best_point == pts[1]


def test_scheduler_spreads_trials_and_favours_heavy_tasks():
    heavy, _, cost_h = bowl(10)
    light, _, cost_l = bowl(11)
    tasks = [SimpleTask("light", light, weight=1), SimpleTask("heavy", heavy, weight=20)]

    def measure(items):
        return [(None, MeasureResult([(cost_h if st.task.name == "heavy" else cost_l)(p)]))
                for st, p in items]

    states = Tuner(tasks, measure, lambda st, p: st.space.encode(p), strategy="random",
                   batch=4, seed=0).run(80)
    by = {s.task.name: s for s in states}
    assert by["light"].trials >= 4 and by["heavy"].trials > by["light"].trials
    # every task starts with its default point (the baseline)
    assert all(s.default_cost < math.inf for s in states)


def test_a_tiny_space_is_exhausted_not_repeated():
    space = Space("tiny", "tiny", (Knob("a", (1, 2, 3), 1),))
    st = Tuner([SimpleTask("tiny", space)], synthetic_measure(lambda p: p["a"]),
               lambda st, p: space.encode(p), batch=2).run(10)[0]
    assert st.trials == 3 and st.exhausted and st.best_point == {"a": 1}


def test_an_interrupted_batch_keeps_the_trials_it_measured(tmp_path):
    """The records of a batch were written when the whole batch was measured: Ctrl-C
    during its timings lost the ones already timed."""
    from types import SimpleNamespace

    from toolchain.autotune.measure import BuildResult
    from toolchain.autotune.records import RecordWriter, load_records
    from toolchain.autotune.tuner import tune_tasks

    space, _, _ = bowl(0)
    task = SimpleNamespace(name="bowl", space=space, weight=1, flops=0, node=None,
                           target=SimpleNamespace(name="c-generic"))

    class Builder:
        def build(self, inputs):
            return [BuildResult(i.trace, features=[0.0]) for i in inputs]

    class Runner:
        name, unit, timed = "fake", "s", 0

        def run_one(self, b):
            if self.timed == 2:
                raise KeyboardInterrupt
            self.timed += 1
            return MeasureResult([float(self.timed)])

        def run(self, builds):
            return [self.run_one(b) for b in builds]

    writer = RecordWriter(tmp_path / "r.jsonl")
    with pytest.raises(KeyboardInterrupt), writer:
        tune_tasks([task], 8, builder=Builder(), runner=Runner(), writer=writer, batch=8,
                   strategy="random", progress=False)
    kept = load_records(tmp_path / "r.jsonl.partial")
    assert [r.costs for r in kept] == [[1.0], [2.0]]
    assert kept[0].trace == space.trace(space.default())
