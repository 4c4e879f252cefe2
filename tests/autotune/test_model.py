"""The cost model on recorded data: it must rank kernels it has not seen better than chance.

``data/conv_records.jsonl`` holds random-search trials (features of the lowered program
and the measured time) of four small direct convolutions on x86_64-avx2, measured once on
this project's machine by ``data/make_conv_records.py`` and committed: the test is a
fixed check, not a timing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolchain.autotune.model import CostModel, rank_accuracy
from toolchain.autotune.records import load_records

DATA = Path(__file__).with_name("data") / "conv_records.jsonl"


def groups() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out: dict[str, list] = {}
    for r in load_records(DATA):
        if r.ok and r.features is not None:
            out.setdefault(r.workload, []).append((r.features, r.cost))
    return {w: (np.asarray([f for f, _ in v], np.float32), np.asarray([c for _, c in v]))
            for w, v in out.items()}


def test_the_data_set_is_what_the_test_expects():
    g = groups()
    assert len(g) == 4 and all(len(c) >= 40 for _, c in g.values())
    # the trials differ: a model has something to rank
    assert all(c.max() > 1.3 * c.min() for _, c in g.values())


@pytest.mark.parametrize("held_out", range(4))
def test_transfer_ranks_an_unseen_workload_better_than_chance(held_out):
    """Trained on three convolutions, ranking the fourth's kernels."""
    g = list(groups().values())
    train = [x for i, x in enumerate(g) if i != held_out]
    model = CostModel(seed=0).fit([f for f, _ in train], [c for _, c in train])
    f, c = g[held_out]
    acc = rank_accuracy(model.predict(f), c)
    chance = np.mean([rank_accuracy(np.random.default_rng(s).random(len(c)), c)
                      for s in range(20)])
    assert acc > 0.6 and acc > chance + 0.1, (acc, chance)


def test_half_of_a_workload_and_the_others_rank_the_other_half():
    """The situation mid-tuning: the task's own trials so far plus other workloads'."""
    g = list(groups().values())
    accs = []
    for i, (f, c) in enumerate(g):
        idx = np.random.default_rng(0).permutation(len(c))
        a, b = idx[: len(c) // 2], idx[len(c) // 2:]
        others = [x for j, x in enumerate(g) if j != i]
        model = CostModel(seed=0).fit([f[a], *(x for x, _ in others)],
                                      [c[a], *(y for _, y in others)])
        accs.append(rank_accuracy(model.predict(f[b]), c[b]))
    assert np.mean(accs) > 0.65 and min(accs) > 0.55, accs
