"""The examples in the docstrings of te/tir run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "toolchain.te", "toolchain.te.tensor", "toolchain.te.math", "toolchain.te.create",
    "toolchain.tir.ir", "toolchain.tir.dtype", "toolchain.tir.structural",
    "toolchain.tir.functor", "toolchain.tir.printer", "toolchain.tir.arith",
    "toolchain.tir.analysis", "toolchain.tir.interpreter", "toolchain.tir.race",
    "toolchain.tir.schedule",
    "toolchain.tir.schedule.schedule", "toolchain.tir.schedule.trace",
    "toolchain.tir.schedule.state", "toolchain.tir.schedule.handles",
    "toolchain.tir.schedule.queries", "toolchain.target", "toolchain.inprocess",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
