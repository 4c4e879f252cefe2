"""Shared pytest setup."""

from __future__ import annotations

import os

# Keep numeric libraries single-threaded in tests: the CI machine has two cores and the
# suites run generated code that uses them.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(items: list) -> None:
    """The suite runs in parallel (pytest-xdist, ``--dist loadgroup``): the Verilator
    models are built once into ``sim_build/`` per configuration, so every test that may
    build or run one stays on one worker (group ``rtl``)."""
    import pytest

    for item in items:
        path = str(item.fspath).replace(os.sep, "/")
        if "/tests/hw/" in path or "/tests/vta/" in path:
            item.add_marker(pytest.mark.xdist_group("rtl"))
