"""The cost model: gradient-boosted trees (xgboost) ranking kernels by their features.

Only the *order* of candidates matters to the search, so the model is trained with a
rank objective (``rank:pairwise``): within a group — the trials of one workload — it
learns which of two kernels is faster. A label is the trial's throughput relative to the
group's best (``best_cost / cost``, in (0, 1]; failed trials 0). Trials of other
workloads of the same space kind (earlier records, other tasks of the run) are further
groups: that is the transfer — features describe the lowered loop program, so what
makes one conv fast tells about another.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.random((60, 5)).astype(np.float32)
>>> cost = 1.0 + 3.0 * x[:, 0] - x[:, 1]               # a synthetic cost
>>> m = CostModel(seed=0).fit([x], [cost])
>>> rank_accuracy(m.predict(x), cost) > 0.8           # pairs ordered right
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from toolchain.errors import KilnError


def _xgb() -> Any:
    try:
        import xgboost
    except ImportError:  # pragma: no cover - a declared dependency
        raise KilnError("the tuner's cost model needs xgboost: pip install 'kiln-toolchain"
                        "[tune]' (or pip install xgboost)") from None
    return xgboost


def labels_of(costs: np.ndarray) -> np.ndarray:
    """Relative throughput ``best / cost`` (0 for failed trials: inf or nan cost).

    >>> labels_of(np.array([2.0, 1.0, np.inf])).tolist()
    [0.5, 1.0, 0.0]
    """
    c = np.asarray(costs, np.float64)
    ok = np.isfinite(c) & (c > 0)
    out = np.zeros(len(c))
    if ok.any():
        out[ok] = c[ok].min() / c[ok]
    return out


class CostModel:
    """xgboost ranker over feature vectors (see the module docstring)."""

    def __init__(self, rounds: int = 80, max_depth: int = 6, eta: float = 0.2,
                 seed: int = 0, threads: int = 1) -> None:
        self.params = {"objective": "rank:pairwise", "max_depth": max_depth, "eta": eta,
                       "min_child_weight": 1, "subsample": 0.9, "colsample_bytree": 0.9,
                       "seed": seed, "nthread": threads, "verbosity": 0}
        self.rounds = rounds
        self.booster: Any = None

    def fit(self, features: Sequence[np.ndarray], costs: Sequence[np.ndarray]) -> CostModel:
        """Train on groups: ``features[g]`` (n_g x F) with ``costs[g]`` (n_g), one group
        per workload. Groups with fewer than two trials teach nothing and are skipped."""
        xgb = _xgb()
        xs, ys, sizes = [], [], []
        for f, c in zip(features, costs, strict=True):
            f, c = np.asarray(f, np.float32), np.asarray(c, np.float64)
            if len(c) < 2:
                continue
            xs.append(f)
            ys.append(labels_of(c))
            sizes.append(len(c))
        if not xs:
            self.booster = None
            return self
        d = xgb.DMatrix(np.concatenate(xs), label=np.concatenate(ys))
        d.set_group(sizes)
        self.booster = xgb.train(self.params, d, num_boost_round=self.rounds)
        return self

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores (higher: predicted faster); zeros before any training."""
        f = np.asarray(features, np.float32)
        if f.ndim == 1:
            f = f[None, :]
        if self.booster is None:
            return np.zeros(len(f))
        return self.booster.predict(_xgb().DMatrix(f))


def rank_accuracy(scores: np.ndarray, costs: np.ndarray) -> float:
    """The fraction of pairs of different cost that ``scores`` order right (higher score
    for the lower cost): 0.5 is a random guess, 1.0 a perfect ranking.

    >>> rank_accuracy(np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0]))
    1.0
    """
    s, c = np.asarray(scores, np.float64), np.asarray(costs, np.float64)
    ds = s[:, None] - s[None, :]
    dc = c[None, :] - c[:, None]  # > 0 where i is cheaper than j
    pairs = dc > 0
    if not pairs.any():
        return 0.5
    right = (ds > 0) & pairs
    ties = (ds == 0) & pairs
    return float((right.sum() + 0.5 * ties.sum()) / pairs.sum())
