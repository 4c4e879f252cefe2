"""The examples in the docstrings of the frontend, executor and CLI modules still hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "toolchain.frontend.onnx", "toolchain.frontend.onnx_build",
    "toolchain.frontend.onnx_upgrade", "toolchain.frontend.onnx_functions",
    "toolchain.frontend.backend", "toolchain.frontend.mapped",
    "toolchain.frontend.onnx_nodes", "toolchain.frontend.onnx_control",
    "toolchain.graph.reference", "toolchain.commands.inspect_cmd",
    "toolchain.commands.run_cmd", "toolchain.commands._model_args",
    "toolchain.commands.compile_cmd",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
