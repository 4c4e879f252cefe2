"""The examples in the docstrings of the lowering, codegen and runtime modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "toolchain.tir.transform", "toolchain.tir.transform.pipeline",
    "toolchain.tir.transform.inject_barriers", "toolchain.tir.transform.simt", "toolchain.codegen",
    "toolchain.codegen.cstyle", "toolchain.codegen.c", "toolchain.codegen.cuda",
    "toolchain.runtime.build", "toolchain.driver",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
