"""Explorers: which points of a space to measure next.

* :class:`RandomSearch` — untried valid points, uniformly (the baseline the cost model
  must beat);
* :class:`ModelSearch` — simulated annealing over the cost model's scores: chains start
  at the best measured points (and a few random ones), each step moves one knob to a
  neighbouring value (:meth:`~toolchain.autotune.space.Space.mutate`) and is kept when
  the model scores it higher, or with probability ``exp(gain / T)`` as ``T`` cools. The
  batch is picked from everything the chains visited, best score first, skipping points
  within ``min_distance`` knobs of a point already picked (diversity), and a fraction
  ``epsilon`` of the batch is random (exploration). Until the model is trained it is
  :class:`RandomSearch`.

Features are computed by a ``featurize(points)`` callable (for kernels: schedule and lower
each point, :func:`toolchain.autotune.measure.featurize`, in the builder's processes);
they are cached by point.

>>> import random
>>> from toolchain.autotune.space import Knob, Space
>>> s = Space("toy", "toy", (Knob("a", tuple(range(8)), 0), Knob("b", tuple(range(8)), 0)))
>>> batch = RandomSearch(s, random.Random(0)).next_batch(set(), 4)
>>> len(batch), len({s.key(p) for p in batch})
(4, 4)
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from toolchain.autotune.model import CostModel
from toolchain.autotune.space import Space

Point = dict[str, Any]


class RandomSearch:
    """Uniformly random untried points."""

    def __init__(self, space: Space, rng: random.Random) -> None:
        self.space, self.rng = space, rng
        self._all: list[Point] | None = None
        if space.size <= 50_000:
            self._all = space.valid_points()

    def random_untried(self, tried: set[tuple], n: int,
                       avoid: set[tuple] | None = None) -> list[Point]:
        avoid = tried | (avoid or set())
        if self._all is not None:
            pool = [p for p in self._all if self.space.key(p) not in avoid]
            return self.rng.sample(pool, min(n, len(pool)))
        out: list[Point] = []
        keys: set[tuple] = set()
        for _ in range(n * 50):
            p = self.space.sample(self.rng)
            k = self.space.key(p)
            if k not in avoid and k not in keys:
                out.append(p)
                keys.add(k)
                if len(out) == n:
                    break
        return out

    def next_batch(self, tried: set[tuple], n: int) -> list[Point]:
        return self.random_untried(tried, n)


class ModelSearch(RandomSearch):
    """Simulated annealing over a :class:`CostModel` (see the module docstring)."""

    def __init__(self, space: Space, rng: random.Random, model: CostModel,
                 featurize: Callable[[list[Point]], list[np.ndarray]], evals: int = 32,
                 chains: int = 8, epsilon: float = 0.2, min_distance: int = 2,
                 start: float = 1.0) -> None:
        super().__init__(space, rng)
        #: ``featurize(points)``: their features, in order (a builder may spread the work
        #: over its processes)
        self.model, self.featurize = model, featurize
        self.evals, self.chains, self.epsilon = evals, chains, epsilon
        self.min_distance, self.start = min_distance, start
        self._feat: dict[tuple, np.ndarray] = {}
        self.best_points: list[Point] = []

    def features(self, pts: list[Point]) -> np.ndarray:
        """The features of ``pts`` (cached; the missing ones computed in one call)."""
        missing = list({self.space.key(p): p for p in pts
                        if self.space.key(p) not in self._feat}.values())
        if missing:
            for p, f in zip(missing, self.featurize(missing), strict=True):
                self._feat[self.space.key(p)] = np.asarray(f, np.float32)
        return np.stack([self._feat[self.space.key(p)] for p in pts])

    def remember(self, p: Mapping[str, Any], features: np.ndarray) -> None:
        """Cache the features of a measured point (the builder computed them)."""
        self._feat[self.space.key(p)] = np.asarray(features, np.float32)

    def _score(self, pts: list[Point]) -> np.ndarray:
        return self.model.predict(self.features(pts))

    def anneal(self, tried: set[tuple]) -> dict[tuple, tuple[float, Point]]:
        """Every point the chains visited, with its score."""
        starts = list(self.best_points[: self.chains // 2])
        starts += self.random_untried(tried, self.chains - len(starts))
        if not starts:
            return {}
        scores = self._score(starts)
        visited = {self.space.key(p): (float(s), p) for p, s in zip(starts, scores,
                                                                     strict=True)}
        chains = list(zip(starts, scores.tolist(), strict=True))
        spent, steps = len(starts), 0
        spread = float(np.ptp(scores)) or 1.0
        while spent < self.evals:
            temp = self.start * spread * (1.0 - spent / self.evals) + 1e-9
            props = [self.space.mutate(p, self.rng) for p, _ in chains]
            fresh = [q for q in props if self.space.key(q) not in visited]
            if fresh:
                for q, s in zip(fresh, self._score(fresh), strict=True):
                    visited[self.space.key(q)] = (float(s), q)
                spent += len(fresh)
            new = []
            for (p, s), q in zip(chains, props, strict=True):
                sq = visited.get(self.space.key(q), (s, p))[0]
                if sq >= s or self.rng.random() < math.exp((sq - s) / temp):
                    new.append((q, sq))
                else:
                    new.append((p, s))
            chains = new
            steps += 1
            if steps > 4 * self.evals:  # a tiny space: nothing left to visit
                break
        return visited

    def next_batch(self, tried: set[tuple], n: int) -> list[Point]:
        if not self.model.trained:
            return self.random_untried(tried, n)
        visited = self.anneal(tried)
        ranked = sorted((v for k, v in visited.items() if k not in tried),
                        key=lambda v: -v[0])
        n_model = n - int(round(self.epsilon * n))
        picked: list[Point] = []
        for _, p in ranked:
            if len(picked) >= n_model:
                break
            if all(self._distance(p, q) >= self.min_distance for q in picked):
                picked.append(p)
        for _, p in ranked:  # not enough diverse ones: fill by score
            if len(picked) >= n_model:
                break
            if all(self.space.key(p) != self.space.key(q) for q in picked):
                picked.append(p)
        avoid = {self.space.key(p) for p in picked}
        picked += self.random_untried(tried, n - len(picked), avoid)
        return picked

    def _distance(self, p: Point, q: Point) -> int:
        return sum(p[k.name] != q[k.name] for k in self.space.knobs)
