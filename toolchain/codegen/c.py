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

from toolchain.codegen.cstyle import CStyleRenderer, c_templates, sanitize
from toolchain.errors import UnsupportedError
from toolchain.tir import ir


class CRenderer(CStyleRenderer):
    """The host C dialect (GCC/Clang)."""

    dialect: ClassVar[str] = "c"
    zero_scalar_locals: ClassVar[bool] = True


def render_standalone_main(func: ir.PrimFunc, kernel_source: str, entry: str) -> str:
    """A C program that loads every array argument from a file, calls ``entry`` and
    writes every array back (for sanitizer runs and debugging without Python).

    Only constant shapes and no scalar parameters are supported.
    """
    arrays, call_args = [], []
    renderer = CRenderer()
    for p in func.params:
        if not isinstance(p, ir.Buffer):
            raise UnsupportedError(f"standalone driver: scalar parameter {p.name!r} is not "
                                   "supported; make it a constant")
        count = 1
        for d in p.shape:
            if not isinstance(d, ir.IntImm):
                raise UnsupportedError(f"standalone driver: {p.name} has a symbolic shape "
                                       f"{tuple(str(s) for s in p.shape)}")
            count *= d.value
        name = "arg_" + sanitize(p.name)
        arrays.append({"name": name, "ctype": renderer.ctype(p.dtype), "count": count})
        call_args.append(name)
    return c_templates().get_template("c/standalone_main.c.j2").render(
        entry=entry, kernel_source=kernel_source, arrays=arrays, call_args=call_args)
