"""docs/schedule.md "Build and run": the lowered IR shown is what lower() prints."""

from __future__ import annotations

from pathlib import Path

from tests.tir.test_examples import blocked_packed_matmul
from toolchain.driver import lower
from toolchain.tir.schedule import Schedule

DOC = Path(__file__).resolve().parents[2] / "docs" / "schedule.md"


def _doc_schedule(n: int = 1024, bn: int = 32) -> Schedule:
    """The doc's schedule (the walk-through tests/tir/test_examples.py runs at a small size)
    at the doc's size."""
    return blocked_packed_matmul(n, bn)


def test_lowered_ir_in_the_doc_is_current():
    section = DOC.read_text().split("## Build and run", 1)[1]
    block = section.split("```\n@T.prim_func", 1)[1].split("```", 1)[0]
    lowered = str(lower(_doc_schedule())).splitlines()
    for line in ("@T.prim_func" + block).splitlines():
        if line.strip() and not line.strip().startswith("..."):
            assert line in lowered, f"docs/schedule.md Build and run is out of date: {line!r}"
