"""tests/covering.py: the reduced parametrizations keep every pair of values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.covering import pairs, params


@pytest.mark.parametrize("sizes", [(8, 2, 2, 2), (53, 3, 2), (6, 5, 2), (3, 4, 2), (5, 3, 2)])
def test_every_pair_of_values_meets(sizes: tuple[int, ...]) -> None:
    factors = [[f"f{i}v{k}" for k in range(n)] for i, n in enumerate(sizes)]
    rows = pairs(*factors, thorough=False)
    for i, j in itertools.combinations(range(len(factors)), 2):
        met = {(r[i], r[j]) for r in rows}
        assert met == set(itertools.product(factors[i], factors[j])), (i, j)
    assert len(set(rows)) == len(rows) < np.prod(sizes)
    assert pairs(*factors, thorough=True) == list(itertools.product(*factors))


def test_factors_named_together_meet_in_every_combination() -> None:
    factors = [list(range(8)), ["int8", "uint8"], ["avx512", "avx2"], ["c", "llvm"]]
    rows = pairs(*factors, together=(1, 2, 3), thorough=False)
    assert {r[1:] for r in rows} == set(itertools.product(*factors[1:]))
    assert len(rows) == 16


def test_params_flatten_tuples_and_keep_marks_and_ids() -> None:
    slow = pytest.param("b", marks=pytest.mark.slow, id="B")
    out = params([(1, 2)], [("x", 3)], ["a", slow], ids=[lambda c: f"cfg{c[0]}"])
    assert [p.values for p in out] == [((1, 2), "x", 3, "a"), ((1, 2), "x", 3, "b")]
    assert [p.id for p in out] == ["cfg1-x-3-a", "cfg1-x-3-B"]
    assert [len(p.marks) for p in out] == [0, 1]
