"""Property test: random valid primitive sequences, BUILT to C and run, match numpy.

Hypothesis applies 1-6 random primitives to four workloads (matmul + relu, conv2d with a
padding stage, a row reduction, an elementwise chain). A primitive may refuse
(ScheduleError); whatever it accepts is lowered, compiled with ``-Wall -Wextra -Werror``
and must compute what numpy computes.

CI runs a fixed (derandomized) set of 10 examples per workload; explore further with
``KILN_PROP_RANDOM=1 KILN_BUILD_PROP_EXAMPLES=150 pytest tests/codegen/test_property_build.py``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from tests.tir import workloads as W
from tests.tir_transform.helpers import build_and_check
from toolchain.errors import ScheduleError
from toolchain.tir.schedule import Schedule

WORKLOADS = {
    "matmul": lambda: W.matmul_relu(8, 16, 8),
    "conv2d": lambda: W.conv2d(1, 2, 5, 5, 2, 3),
    "reduction": lambda: W.row_sum(6, 16),
    "elementwise": lambda: W.elementwise_chain(6, 16),
}
LOOP_PRIMS = ["split", "split", "fuse", "reorder", "tile", "parallel", "vectorize", "unroll",
              "bind_vthread", "decompose_reduction", "rfactor", "blockize", "compute_at",
              "reverse_compute_at"]
BLOCK_PRIMS = ["compute_inline", "reverse_compute_inline", "cache_read", "cache_write",
               "set_scope"]
EXAMPLES = int(os.environ.get("KILN_BUILD_PROP_EXAMPLES", "10"))
#: CI runs a fixed set of examples (no flakes); KILN_PROP_RANDOM=1 explores new ones
DERANDOMIZE = os.environ.get("KILN_PROP_RANDOM", "") != "1"


def _apply_loop_prim(sch: Schedule, prim: str, block: Any, loops: list, data: Any) -> None:
    pick = lambda: data.draw(hs.sampled_from(loops), label="loop")  # noqa: E731
    if prim == "split":
        f = data.draw(hs.sampled_from([2, 3, 4, 8, 16]), label="factor")
        sch.split(pick(), data.draw(hs.sampled_from([[None, f], [f, None]]), label="form"))
    elif prim == "fuse" and len(loops) >= 2:
        k = data.draw(hs.integers(0, len(loops) - 2), label="at")
        sch.fuse(*loops[k:k + 2])
    elif prim == "reorder":
        sch.reorder(*data.draw(hs.permutations(loops), label="perm"))
    elif prim == "tile" and len(loops) >= 2:
        k = data.draw(hs.integers(0, len(loops) - 2), label="at")
        f1, f2 = data.draw(hs.integers(1, 4)), data.draw(hs.integers(1, 8))
        sch.tile(loops[k:k + 2], [[None, f1], [None, f2]])
    elif prim in ("parallel", "vectorize", "unroll"):
        getattr(sch, prim)(pick())
    elif prim == "bind_vthread":
        sch.bind(pick(), "vthread")
    elif prim == "decompose_reduction":
        sch.decompose_reduction(block, pick())
    elif prim == "rfactor":
        sch.rfactor(pick(), data.draw(hs.integers(0, 1), label="axis"))
    elif prim == "blockize":
        sch.blockize(pick())
    elif prim in ("compute_at", "reverse_compute_at"):
        names = _block_names(sch)
        other = sch.get_block(data.draw(hs.sampled_from(names), label="other"))
        other_loops = sch.get_loops(other)
        if other_loops:
            getattr(sch, prim)(block, data.draw(hs.sampled_from(other_loops), label="at"))


def _block_names(sch: Schedule) -> list[str]:
    from toolchain.tir.schedule import state as st

    return st.block_names(sch.mod)


def _step(sch: Schedule, data: Any) -> None:
    block = sch.get_block(data.draw(hs.sampled_from(_block_names(sch)), label="block"))
    loops = sch.get_loops(block)
    prims = BLOCK_PRIMS + (LOOP_PRIMS if loops else [])
    prim = data.draw(hs.sampled_from(prims), label="primitive")
    if prim in BLOCK_PRIMS:
        scope = data.draw(hs.sampled_from(["global", "local", "shared"]), label="scope")
        if prim == "cache_read":
            sch.cache_read(block, data.draw(hs.integers(0, 1), label="index"), scope)
        elif prim in ("cache_write", "set_scope"):
            getattr(sch, prim)(block, 0, scope)
        else:
            getattr(sch, prim)(block)
    else:
        _apply_loop_prim(sch, prim, block, loops, data)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=hs.data())
def test_random_schedules_build_and_match_numpy(name: str, data: Any) -> None:
    wl = WORKLOADS[name]()
    sch = Schedule(wl[0])
    for _ in range(data.draw(hs.integers(1, 6), label="steps")):
        try:
            _step(sch, data)
        except ScheduleError:
            pass
    build_and_check(sch, wl)
