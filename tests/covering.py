"""Covering arrays for parametrized tests: every pair of values, not every combination.

A kernel test parametrized by shape x dtype x target x backend runs the product of its
factors; most of what can go wrong there depends on two of them at a time (a shape's tail
on one target's lanes, a zero point under one backend's codegen). :func:`pairs` keeps a
subset of the product rows in which every value of every factor meets every value of every
other factor at least once (a greedy strength-2 covering array; factors named in
``together`` meet in every combination), so each shape still runs on each target, with
each dtype, under each backend:

>>> rows = pairs([1, 2, 3], ["int8", "uint8"], ["c", "llvm"], thorough=False)
>>> len(rows), len(pairs([1, 2, 3], ["int8", "uint8"], ["c", "llvm"], thorough=True))
(6, 12)
>>> all(any(r[0] == a and r[2] == b for r in rows) for a in (1, 2, 3) for b in ("c", "llvm"))
True

``KILN_TEST_THOROUGH=1`` runs the whole product instead (docs/testing.md, "The thorough
run"): ``KILN_TEST_THOROUGH=1 pytest tests/schedules/x86/test_int8.py``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest

#: run every combination of a covered parametrization (docs/testing.md, "The thorough run")
THOROUGH = os.environ.get("KILN_TEST_THOROUGH", "") == "1"

#: the type of a ``pytest.param(...)`` (pytest does not export it by name)
ParameterSet = type(pytest.param(None))


def pairs(*factors: Sequence[Any], together: Sequence[int] = (),
          thorough: bool | None = None) -> list[tuple[Any, ...]]:
    """Rows of the product of ``factors`` (one value of each, in order) in which every pair
    of values of two factors occurs, and every combination of the factors at the indices
    ``together``; the whole product where ``thorough`` (default :data:`THOROUGH`).
    Deterministic: the greedy pick takes the first product row that covers the most
    combinations not covered yet."""
    if THOROUGH if thorough is None else thorough:
        return list(itertools.product(*factors))
    # work on the values' positions: values need not be hashable (arrays, dicts)
    product = list(itertools.product(*(range(len(f)) for f in factors)))
    groups = [g for g in itertools.combinations(range(len(factors)), 2)
              if not set(g) <= set(together)]
    if len(together) > 1:
        groups.append(tuple(sorted(together)))

    # each row's combinations made once (collection builds these at import, in every
    # process: recomputed for every candidate of every pick: 0.064 -> 0.008 CPU s over the
    # suite's 11 calls)
    needs = [frozenset((g, tuple(row[i] for i in g)) for g in groups) for row in product]
    wanted = set().union(*needs)
    rows: list[tuple] = []
    while wanted:
        best = max(range(len(product)), key=lambda k: len(needs[k] & wanted))
        rows.append(product[best])
        wanted -= needs[best]
    return [tuple(f[i] for f, i in zip(factors, r, strict=True)) for r in sorted(rows)]


def params(*factors: Sequence[Any], ids: Sequence[Callable[[Any], str] | None] = (),
           together: Sequence[int] = ()) -> list:
    """:func:`pairs` as ``pytest.param`` rows of the factors' values flattened (a tuple
    value of a factor gives several arguments), each with an id made of the factors' ids
    (``ids[i]`` for factor ``i``, else the value itself). A factor with an id function is
    passed whole (a shape tuple is one argument); a ``pytest.param`` value brings its
    marks."""
    out = []
    for row in pairs(*factors, together=together):
        values: list = []
        marks: list = []
        names = []
        for i, v in enumerate(row):
            f = ids[i] if i < len(ids) else None
            if isinstance(v, ParameterSet):  # a pytest.param: its values, marks and id
                values.extend(v.values)
                marks.extend(v.marks)
                names.append(v.id or "-".join(map(str, v.values)))
                continue
            values.extend(v if isinstance(v, tuple) and f is None else (v,))
            names.append(f(v) if f else "-".join(map(str, v)) if isinstance(v, tuple)
                         else str(v))
        out.append(pytest.param(*values, marks=marks, id="-".join(names)))
    return out
