"""Shared fixtures of the board tests: zoo models compiled once per (model, board)."""

from __future__ import annotations

import functools
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

#: the xdist group of the tests that read :func:`anchor` models (the arena tests, the
#: anchor models' board runs, the Cortex-M straight-line-dot and ``kiln tune`` whole-model
#: tests): each model is quantized once, on one worker
ANCHORS_GROUP = "boards-anchors"


@functools.cache
def anchor(name: str) -> onnx.ModelProto:
    """:func:`toolchain.zoo.quantized.anchor_model`, quantized once per process (the arena
    tests and the board runs of ``test_int8_qemu.py`` read the same models; no test
    changes them)."""
    from toolchain.zoo.quantized import anchor_model

    return anchor_model(name)


def compile_for_board(model: Path, board: str, output: Path, name: str,
                      specs: dict[tuple[str, str], Any]) -> tuple[Path, dict]:
    """``toolchain.boards.compile_board(model, board, output, name=name)``, with Kiln's
    compile of the model (``build_spec``) made once for the boards that compile it for
    the same target (``qemu-mps2-an386`` and ``nucleo-l4r5zi``: both ``cortex-m4``).
    ``specs`` (the caller's, one per model file) keeps the compiles.

    What reuse skips is what the first board's compile did already, the same way: the
    compile's result depends on the model, the target and the options, and on the board's
    RAM budget only where the plain arena exceeds it (a patch stage). So a compile is
    kept only without a patch stage and reused only where its arena fits the budget;
    ``build_spec`` decides the same (``_compile_kernels``). Each board still renders its
    bundle and firmware from it, links, and reports its sizes (the board bundles are
    byte-identical to those of a compile of their own)."""
    from toolchain.boards import compile_board
    from toolchain.bundle import compiler

    real = compiler.build_spec

    def build_spec(model_: Any, target: Any, *, ram_budget: int | None = None,
                   **options: Any) -> Any:
        key = repr(target), repr(sorted(options.items()))
        spec = specs.get(key)
        if spec is None or (ram_budget is not None and spec.plan.arena_bytes > ram_budget):
            spec = real(model_, target, ram_budget=ram_budget, **options)
            if "ram_budget" not in spec.options:  # no patch stage
                specs[key] = spec
        return spec

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compiler, "build_spec", build_spec)
        return compile_board(model, board, output, name=name)


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
        self.specs: dict[tuple[str, str], Any] = {}

    def for_board(self, board: str) -> tuple[Path, dict]:
        if board not in self.bundles:
            self.bundles[board] = compile_for_board(self.path, board, self.root / f"{board}",
                                                    self.name, self.specs)
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
