"""The cocotb side of ``toolchain.vta.rtl.run_batch``: the test module the simulator imports.

It runs every job of the spec file named by ``KILN_RTL_SPEC`` on ``vta_sim_top`` (reset,
load the DRAM image, start, wait for done / deadlock / timeout, dump the DRAM image) and
writes each job's result JSON. It stands alone on purpose: the standard library and cocotb
only, so the simulator process imports neither numpy nor the ``toolchain`` package (about
0.12 of the 0.38 CPU s a run took when this code lived in ``toolchain/vta/rtl.py``,
docs/testing.md). What to read back comes in the spec: the clock period, the counter
ports (``cnt_<name>``) and the engine-state ports, so the names live in one place,
``toolchain.vta.rtl``.

Spec file (JSON)::

    {"clock_ns": 2, "counters": ["cycles", ...], "state": ["ld_state", ...],
     "jobs": [{"dram_in": ..., "dram_out": ..., "insn_addr": ..., "insn_count": ...,
               "latency": ..., "bw16": ..., "timeout": ..., "result": ...}, ...]}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cocotb


@cocotb.test()
async def kiln_run_programs(dut: Any) -> None:
    """Run every job of the spec file; write a result JSON and a DRAM dump for each."""
    from cocotb.clock import Clock

    spec = json.loads(Path(os.environ["KILN_RTL_SPEC"]).read_text())
    Clock(dut.clk, spec["clock_ns"], unit="ns").start()
    for job in spec["jobs"]:
        result = await run_one(dut, job, spec)
        Path(job["result"]).write_text(json.dumps(result))


async def run_one(dut: Any, job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Reset, load DRAM, start, wait for done / deadlock / timeout, dump DRAM."""
    from cocotb.triggers import ClockCycles, First, RisingEdge, Timer

    os.environ["KILN_DRAM_IN"] = job["dram_in"]
    os.environ["KILN_DRAM_OUT"] = job["dram_out"]
    dut.rst_n.value = 0
    dut.start.value = 0
    dut.sram_clear.value = 1
    dut.backdoor_load.value = 1
    dut.backdoor_dump.value = 0
    dut.dram_latency.value = job["latency"]
    dut.dram_bw16.value = job["bw16"]
    dut.insn_addr.value = job["insn_addr"]
    dut.insn_count.value = job["insn_count"]
    await ClockCycles(dut.clk, 2)
    dut.backdoor_load.value = 0
    dut.sram_clear.value = 0
    dut.rst_n.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    await First(RisingEdge(dut.done), RisingEdge(dut.deadlock),
                Timer(job["timeout"] * spec["clock_ns"], unit="ns"))
    await RisingEdge(dut.clk)
    status = ("done" if int(dut.done.value) else
              "deadlock" if int(dut.deadlock.value) else "timeout")
    dut.backdoor_dump.value = 1
    await RisingEdge(dut.clk)
    dut.backdoor_dump.value = 0
    await RisingEdge(dut.clk)
    counters = {n: int(getattr(dut, f"cnt_{n}").value) for n in spec["counters"]}
    state = {n: int(getattr(dut, n).value) for n in spec["state"]}
    return {"status": status, "counters": counters, "state": state}
