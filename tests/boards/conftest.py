"""Shared fixtures of the board tests: zoo models compiled once per (model, board)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from toolchain.zoo import ZOO

HAVE_CROSS = shutil.which("arm-none-eabi-gcc") is not None and \
    Path("/usr/lib/picolibc/arm-none-eabi").is_dir()
HAVE_QEMU = shutil.which("qemu-system-arm") is not None

needs_cross = pytest.mark.skipif(not HAVE_CROSS, reason="arm-none-eabi-gcc + picolibc not "
                                 "installed (apt-get install gcc-arm-none-eabi "
                                 "picolibc-arm-none-eabi)")
needs_qemu = pytest.mark.skipif(not (HAVE_CROSS and HAVE_QEMU), reason="qemu-system-arm or "
                                "the cross compiler not installed")


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

    def for_board(self, board: str) -> tuple[Path, dict]:
        from toolchain.boards import compile_board

        if board not in self.bundles:
            self.bundles[board] = compile_board(self.path, board, self.root / f"{board}",
                                                name=self.name)
        return self.bundles[board]


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
