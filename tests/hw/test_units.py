"""Module-level cocotb benches: FIFO and the DRAM timing model (tests/hw/cocotb_units.py)."""

from __future__ import annotations

import pytest

from toolchain.vta import rtl


@pytest.mark.parametrize("case", [
    "fifo_keeps_order_and_reports_full",
    "dram_read_latency",
    "dram_bandwidth_limits_beats",
    "dram_pipelines_requests",
    "dram_writes_with_strobes_and_acks",
])
def test_unit_bench(units_model: str, case: str) -> None:
    rtl.run_cocotb("tests.hw.cocotb_units", "tb_units", testcase=case)
