"""Module-level cocotb benches: FIFO and the DRAM timing model (tests/hw/cocotb_units.py).

The selected benches run in one simulator process, one after another, as cocotb runs a
module's tests (each bench starts the clock, reloads the DRAM model's image and resets the
harness in its own ``setup``); each pytest item checks its own bench's outcome. One process
instead of five saves the simulator's start-up (about 0.25 CPU s each, docs/testing.md).
"""

from __future__ import annotations

import pytest

from toolchain.vta import rtl

CASES = [
    "fifo_keeps_order_and_reports_full",
    "dram_read_latency",
    "dram_bandwidth_limits_beats",
    "dram_pipelines_requests",
    "dram_writes_with_strobes_and_acks",
]


@pytest.fixture(scope="module")
def bench_outcomes(units_model: str, request: pytest.FixtureRequest) -> tuple[dict[str, str],
                                                                             str]:
    """Each selected bench's outcome by name (``""``: passed) and the simulator's log."""
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    return rtl.run_cocotb_cases("tests.hw.cocotb_units", "tb_units",
                                testcase=selected or CASES)


@pytest.mark.parametrize("case", CASES)
def test_unit_bench(bench_outcomes: tuple[dict[str, str], str], case: str) -> None:
    outcomes, log = bench_outcomes
    assert case in outcomes, f"bench {case} did not run ({outcomes}); {log}"
    assert not outcomes[case], f"bench {case} failed: {outcomes[case]}\n{log}"
