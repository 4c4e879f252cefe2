"""Backends: lowered PrimFunc -> :class:`~toolchain.codegen.artifact.KernelArtifact`.

One interface, one explicit table. A backend renders one lowered kernel of a bundle; the
bundle renders the artifacts it gets and never looks inside generated code. The table is
keyed by target kind (``Target.kind``): C is the first backend; CUDA, LLVM and the
accelerator plug in beside it (their issues add them).

>>> from toolchain import te
>>> from toolchain.target import load_target
>>> from toolchain.tir.transform import lower
>>> t = load_target("c-generic")
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
>>> art = backend_for(t).kernel(lower(te.create_prim_func([A, B]), target=t), "net_k0")
>>> art.backend, art.name, art.params
('c', 'net_k0', ['float* restrict A', 'float* restrict B'])
"""

from __future__ import annotations

from typing import Protocol

from toolchain.codegen.artifact import KernelArtifact
from toolchain.errors import TargetError
from toolchain.target import Target
from toolchain.tir import ir


class Backend(Protocol):
    """What every backend offers the bundle."""

    #: the backend's name (``KernelArtifact.backend``)
    name: str

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        """Kernel ``name`` from a lowered function; ``restrict``: which pointer parameters
        may be declared non-aliasing (True: all; a set: all but those positions)."""
        ...


class CBackend:
    """C99 source for a bundle's ``kernels.c`` (:func:`toolchain.bundle.emit.render_kernel`:
    no heap, scratch from the arena, no OpenMP)."""

    name = "c"

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        from toolchain.bundle.emit import render_kernel

        return render_kernel(lowered, name, restrict=restrict)


#: target kind -> backend
BACKENDS: dict[str, Backend] = {"c": CBackend()}


def backend_for(target: Target) -> Backend:
    """The backend that generates ``target``'s kernels (by its kind)."""
    b = BACKENDS.get(target.kind)
    if b is None:
        raise TargetError(f"target {target.name!r} has kind {target.kind!r}: no bundle backend "
                          f"for it in this version (backends: {', '.join(BACKENDS)})")
    return b


__all__ = ["BACKENDS", "Backend", "CBackend", "backend_for"]
