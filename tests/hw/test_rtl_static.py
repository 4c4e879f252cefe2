"""RTL hygiene: the committed vta_params.svh matches targets/vta.yaml, the RTL is lint clean
under `verilator --lint-only -Wall`, and unsupported shapes are refused with a reason."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from toolchain.errors import TargetError
from toolchain.vta import rtl
from toolchain.vta.config import load_config


def test_committed_params_match_the_target_file() -> None:
    committed = (rtl.RTL_DIR / "vta_params.svh").read_text()
    assert committed == rtl.params_svh(load_config()), (
        "hw/rtl/vta_params.svh is stale: python -m toolchain.vta.rtl --params "
        "> hw/rtl/vta_params.svh")


@pytest.mark.parametrize("top", ["vta_sim_top", "tb_units"])
def test_rtl_is_lint_clean(top: str) -> None:
    files = [str(p) for p in rtl.rtl_sources(top)]
    proc = subprocess.run(["verilator", "--lint-only", "-Wall", f"-I{rtl.RTL_DIR}",
                           "--top-module", top, *files], capture_output=True, text=True,
                          env=rtl.verilator_env(), check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "%Warning" not in proc.stderr, proc.stderr[-4000:]


def test_params_follow_the_config() -> None:
    cfg = dataclasses.replace(load_config(), block_in=8, input_bytes=8192, weight_bytes=131072)
    text = rtl.params_svh(cfg)
    assert "localparam int BLOCK_IN = 8;" in text
    assert "localparam int INP_DEPTH = 1024;" in text


def test_unsupported_bus_is_refused() -> None:
    cfg = dataclasses.replace(load_config(), bus_width_bits=256, bytes_per_cycle=32)
    with pytest.raises(TargetError, match="at most 128 bits"):
        rtl.params_svh(cfg)



def test_the_rtl_device_keeps_module_instances_as_classes() -> None:
    """The bundles' RTL device build (its Makefile, CMake and Kiln's own build all run
    ``verilate_command``) does not pass Verilator's ``-O3``: that is ``--inline-mult -1``,
    every instance of every module inlined into the top, which made the model a third larger
    to compile and its simulation slower (docs/testing.md). cocotb's builds keep it
    (``COCOTB_BUILD_ARGS`` says why)."""
    from toolchain.vta.rtl_device import verilate_command

    args = verilate_command("/b", ["rtl/vta_pkg.sv"])
    assert "-O3" not in args and "--inline-mult" not in args, args
    assert "-O3" in rtl.COCOTB_BUILD_ARGS
