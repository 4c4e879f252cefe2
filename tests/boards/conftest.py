"""Shared fixtures of the board tests: zoo models compiled once per (model, board)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.tools import have, needs
from toolchain.zoo import ZOO

HAVE_CROSS = have("arm-none-eabi-gcc") and have("picolibc") and have("make")
HAVE_QEMU = have("qemu-system-arm")

needs_cross = needs("arm-none-eabi-gcc", "picolibc", "make")
needs_qemu = needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")


class Compiled:
    """A zoo model saved as ONNX, its sample inputs, and board bundles compiled from it."""

    def __init__(self, root: Path, name: str) -> None:
        spec = ZOO[name]
        self.name = name
        self.model = spec.build()
        self.inputs = spec.inputs(self.model)
        self.root = root
        self.path = root / f"{name}.onnx"
        onnx.save(self.model, self.path)
        self.npz = root / f"{name}_in.npz"
        np.savez(self.npz, **self.inputs)
        self.bundles: dict[str, tuple[Path, dict]] = {}
        self.runs: dict[str, Any] = {}

    def for_board(self, board: str) -> tuple[Path, dict]:
        from toolchain.boards import compile_board

        if board not in self.bundles:
            self.bundles[board] = compile_board(self.path, board, self.root / f"{board}",
                                                name=self.name)
        return self.bundles[board]

    def run_on(self, board: str) -> Any:
        """The board bundle's run under QEMU on :attr:`inputs` (run once): what the fp32
        board tests check and the LLVM-backend build of the model is compared with."""
        from toolchain.boards import run_on_qemu

        if board not in self.runs:
            self.runs[board] = run_on_qemu(self.for_board(board)[0], self.inputs, timeout=120)
        return self.runs[board]


@pytest.fixture(scope="session")
def zoo_compiled(tmp_path_factory):
    """``zoo_compiled(name)`` -> :class:`Compiled` (cached for the session)."""
    cache: dict[str, Compiled] = {}

    def get(name: str) -> Compiled:
        if name not in cache:
            cache[name] = Compiled(tmp_path_factory.mktemp(f"board_{name}"), name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def qdq_compiled(tmp_path_factory):
    """``qdq_compiled(name, quantizer)`` -> :class:`tests.boards.qdq_models.QdqModel`
    (quantized, host-built and run under onnxruntime once per session)."""
    from tests.boards.qdq_models import QdqModel

    cache: dict[tuple[str, str], QdqModel] = {}

    def get(name: str, quantizer: str = "kiln") -> QdqModel:
        if (name, quantizer) not in cache:
            root = tmp_path_factory.mktemp(f"int8_{name}_{quantizer}")
            cache[name, quantizer] = QdqModel(root, name, quantizer)
        return cache[name, quantizer]

    return get
