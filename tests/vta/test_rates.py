"""The per-layer rates of benchmarks/vta_models.py and ``kiln run --device rtl``: one name
for one figure (``util`` = GEMM cycles / cycles, ``MAC rate`` = MACs / (core x cycles))."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from toolchain.commands.run_cmd import accelerator_report, layer_rates
from toolchain.vta.config import VTAConfig

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "vta_models.py"


@pytest.mark.parametrize("core", [(1, 16, 16), (1, 32, 32), (2, 16, 32)])
def test_mac_rate_uses_the_targets_core(core: tuple[int, int, int]) -> None:
    batch, bi, bo = core
    cfg = VTAConfig(batch=batch, block_in=bi, block_out=bo)
    # a layer whose every GEMM step is full: MACs = steps x core, rate 1 at cycles = steps
    steps = 300
    rate = layer_rates(steps * batch * bi * bo, steps, steps, cfg.macs_per_step)
    assert rate == {"util": 1.0, "MAC rate": 1.0}
    half = layer_rates(steps * batch * bi * bo // 2, steps, 2 * steps, cfg.macs_per_step)
    assert half == {"util": 0.5, "MAC rate": 0.25}


def test_util_is_what_kiln_run_calls_util() -> None:
    row = {"layer": "c1", "cycles": 400, "gemm_cycles": 100, "instructions": 3}
    table = accelerator_report([row], "rtl").splitlines()
    head = table[1].split()
    cell = table[2].split()[head.index("util") - 1]  # -1: the heading "GEMM cyc" is two words
    assert cell == f"{layer_rates(0, 100, 400, 256)['util']:.1%}" == "25.0%"


def test_benchmark_table_names_its_columns_as_kiln_run() -> None:
    """vta_models.py heads GEMM cycles / cycles ``util`` and MACs / (core x cycles) ``MAC
    rate``, computes them with layer_rates, and never divides by a fixed 256 or says busy."""
    src = BENCH.read_text()
    tree = ast.parse(src)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "layer_rates" in names
    consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert 256 not in consts
    assert "busy" not in consts                               # the f-strings' headings
    assert {"util", "MAC rate"} <= consts
