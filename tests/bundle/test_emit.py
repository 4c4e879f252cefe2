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


def test_scratch_slices_are_taken_as_fresh_allocations() -> None:
    """Two temporaries in scratch: each is a ``kiln_scratch_slice`` (GCC/Clang's
    ``malloc`` attribute: the compiler knows a store to one leaves the other alone, as for
    two heap blocks; with plain ``kiln_scratch + offset`` pointers it kept the Winograd
    kernels' copies between them scalar), at disjoint offsets, and the kernel's support
    carries the accessor's definition once."""
    A = te.placeholder((64, 16), name="A")
    B = te.compute((64, 16), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((64, 16), lambda i, j: B[63 - i, 15 - j] + 1.0, name="C")
    D = te.compute((64, 16), lambda i, j: C[i, 15 - j] - A[i, j], name="D")
    k = render_kernel(lower(te.create_prim_func([A, D])), "net_two")
    body = "\n".join(k.body)
    assert "kiln_scratch_slice(kiln_scratch, 0)" in body
    assert "kiln_scratch_slice(kiln_scratch, 4096)" in body
    assert "kiln_scratch +" not in body
    assert k.scratch_bytes == 2 * 64 * 16 * 4
    assert [d.key for d in k.support.definitions] == ["kiln_scratch_slice"]
    assert "__attribute__((malloc, noinline))" in k.support.definitions[0].text


def test_a_kernel_without_scratch_has_no_slice_accessor() -> None:
    k = render_kernel(_lowered(16, None), "net_tile")
    assert k.scratch_bytes == 0
    assert not any(d.key == "kiln_scratch_slice" for d in k.support.definitions)


def test_winograd_bundle_with_scratch_slices_matches_onnxruntime(tmp_path) -> None:
    """A tuned Winograd convolution (its padded input, tiles and products: three scratch
    slices) plus a residual Add and Relu through a bundle built with the strict flags
    (``-Wall -Wextra -Werror -pedantic``: the accessor compiles clean) on an AVX-512
    target, against onnxruntime."""
    import numpy as np

    from tests.bundle.helpers import assert_matches, compile_run, make_model, run_ort
    from toolchain.autotune.apply import applying
    from toolchain.autotune.tasks import extract_tasks

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    model = make_model(
        [onnx_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         onnx_node("Add", ["y", "x"], ["s"]), onnx_node("Relu", ["s"], ["z"])],
        {"x": (np.float32, [1, 16, 12, 12])}, {"z": (np.float32, [1, 16, 12, 12])},
        {"w": w, "b": b})
    task, = extract_tasks(model, "x86_64-avx512")
    point = task.space.canonical({**task.space.default(), "algorithm": "winograd4h",
                                  "wino_pad": "partitioned"})
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    with applying({task.space.workload: task.space.trace(point)}) as applied:
        path, got = compile_run(model, tmp_path, {"x": x}, target="x86_64-avx512",
                                progress=False)
    assert applied
    assert "kiln_scratch_slice(kiln_scratch" in (path / "src" / "kernels.c").read_text()
    assert_matches(got, run_ort(model, {"x": x}))


def onnx_node(op: str, inputs: list[str], outputs: list[str], **attrs):
    from onnx import helper

    return helper.make_node(op, inputs, outputs, **attrs)
