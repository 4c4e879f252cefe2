"""Plain C99 (GNU dialect) for host CPUs: vector extensions, OpenMP, ``#pragma omp simd``.

Everything is in :class:`~toolchain.codegen.cstyle.CStyleRenderer`; this dialect only
names itself. A ``parallel`` loop becomes ``#pragma omp parallel for`` when OpenMP is on
(``CRenderer(openmp=False)`` renders it as a plain loop).

>>> from toolchain import te
>>> from toolchain.tir.transform import lower
>>> A = te.placeholder((64,), name="A")
>>> B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
>>> print(CRenderer().render(lower(te.create_prim_func([A, B]), ), name="scale").entry)
kiln_scale
"""

from __future__ import annotations

from typing import ClassVar

from toolchain.codegen.cstyle import CStyleRenderer


class CRenderer(CStyleRenderer):
    """The host C dialect (GCC/Clang)."""

    dialect: ClassVar[str] = "c"
