"""Bundle kernels' C (toolchain/bundle/emit.py): where temporaries live."""

from __future__ import annotations

import pytest

from toolchain import te
from toolchain.bundle.emit import render_kernel
from toolchain.codegen.llvm import LLVMCodegen
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform import lower


def _lowered(rows: int, scope: str | None):
    """``B = A * 2`` (rows x 16 floats) read back transposed-ish by ``C``, so ``B`` is
    accessed by scalars (not declared as vector variables); ``B`` in ``scope``."""
    A = te.placeholder((rows, 16), name="A")
    B = te.compute((rows, 16), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((rows, 16), lambda i, j: B[j * rows // 16, i * 16 // rows] + 1.0, name="C")
    sch = Schedule(te.create_prim_func([A, C]))
    if scope:
        sch.set_scope(sch.get_block("B"), 0, scope)
    return lower(sch.mod)


TILES = [(28, "local", True), (28, None, False), (40, "local", False), (16, None, True)]


@pytest.mark.parametrize("rows,scope,on_stack", TILES)
def test_a_register_tile_up_to_the_largest_register_file_stays_on_the_stack(
        rows: int, scope: str | None, on_stack: bool) -> None:
    """A ``local`` buffer of 28 x 16 floats (1,792 bytes: the 28 accumulators of a tuned
    ResNet-18 stem tile) is declared on the stack, where the C compiler can keep it in
    registers; in the kernel's scratch it was loaded and stored at every accumulation
    (2.5x slower). A global temporary of that size, and a local one above 2 KiB, still
    go to scratch; 1 KiB stays on the stack either way."""
    k = render_kernel(_lowered(rows, scope), "net_tile")
    decl = f"float B[{rows * 16}]"
    assert (decl in "\n".join(k.body)) == on_stack
    assert k.scratch_bytes == (0 if on_stack else rows * 16 * 4)


@pytest.mark.parametrize("rows,scope,on_stack", TILES)
def test_an_llvm_bundle_kernel_keeps_the_same_register_tiles_on_the_stack(
        rows: int, scope: str | None, on_stack: bool) -> None:
    """The LLVM backend's bundle kernels follow the C renderer's rule: a ``local`` tile up
    to 2 KiB is an ``alloca`` even when it is accessed by scalars (it went to scratch
    before; only tiles accessed by whole vectors stayed on the stack)."""
    k = LLVMCodegen(scratch=True).generate(_lowered(rows, scope), "net_tile")
    assert (f"alloca [{rows * 16} x float]" in k.ir) == on_stack
    assert k.scratch_bytes == (0 if on_stack else rows * 16 * 4)
