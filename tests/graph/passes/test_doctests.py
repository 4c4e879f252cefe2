"""The examples in the passes' and the planner's docstrings still hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "toolchain.graph.passes", "toolchain.graph.passes._util",
    "toolchain.graph.passes.constant_fold", "toolchain.graph.passes.dce",
    "toolchain.graph.passes.fold_affine", "toolchain.graph.passes.fused_op",
    "toolchain.graph.passes.fusion", "toolchain.graph.passes.layout",
    "toolchain.graph.passes.layout_ops", "toolchain.graph.passes.pipeline",
    "toolchain.graph.passes.simplify", "toolchain.graph.memory",
    "tests.graph.passes.helpers",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
