"""The examples in the toolchain.vta docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["builder", "checker", "config", "deps", "disasm", "fsim", "isa", "program",
           "randprog", "schedule", "cfsim", "widen", "compile", "estimate",
           "tokens", "workloads", "rtl", "__init__"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module("toolchain.vta" if name == "__init__"
                                     else f"toolchain.vta.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
