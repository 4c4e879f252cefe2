"""The suite's pytest-xdist groups reach the scheduler: ``tests/conftest.py`` marks the
``rtl`` tests (and the users of a shared build) in a hook that has to run before xdist's
worker turns the marks into the ``nodeid@group`` it schedules by. It ran after it until
session 13, and every one of those tests was scheduled on its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_an_rtl_test_is_scheduled_in_the_rtl_group() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "tests/hw/test_other_config.py::test_small_params"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "PASSED tests/hw/test_other_config.py::test_small_params@rtl" in res.stdout, \
        res.stdout[-2000:]
