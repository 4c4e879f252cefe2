"""A compiled kernel loaded with ctypes: :class:`Module`."""

from __future__ import annotations

import ctypes
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.errors import InputError, OptionError
from toolchain.tir import ir

_NP = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8,
       "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
       "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}
_CT = {"float32": ctypes.c_float, "float64": ctypes.c_double, "int8": ctypes.c_int8,
       "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
       "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
       "uint64": ctypes.c_uint64, "bool": ctypes.c_bool}


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a TIR scalar dtype."""
    if dtype not in _NP:
        raise InputError(f"dtype {dtype!r} has no numpy equivalent")
    return np.dtype(_NP[dtype])


class Module:
    """A built function: call it with numpy arrays (outputs are written in place).

    ``func`` is the function as scheduled (its params give the expected shapes and dtypes),
    ``extra_args`` the symbolic sizes passed after the params (bound from array shapes).

    Example::

        mod = toolchain.build(sch)
        mod(a, b, c)                 # c is written
        print(mod.get_source())
        mod.export_library("matmul.so")
    """

    def __init__(self, lib_path: Path, entry: str, func: ir.PrimFunc, source: str,
                 extra_args: list[ir.Var], build_info: dict[str, Any]) -> None:
        self.lib_path = Path(lib_path)
        self.entry = entry
        self.func = func
        self.source = source
        self.extra_args = list(extra_args)
        self.build_info = dict(build_info)
        self._lib = ctypes.CDLL(str(self.lib_path))
        self._fn = getattr(self._lib, entry)
        self._fn.restype = ctypes.c_int32

    def get_source(self) -> str:
        """The generated C source."""
        return self.source

    def export_library(self, path: str | Path) -> Path:
        """Copy the shared library to ``path`` (entry symbol: :attr:`entry`)."""
        dst = Path(path)
        if dst.parent and not dst.parent.exists():
            raise OptionError(f"export_library: folder {dst.parent} does not exist")
        shutil.copyfile(self.lib_path, dst)
        return dst

    def __call__(self, *args: Any) -> None:
        self._run(self._c_args(args))

    def bind(self, *args: Any) -> Callable[[], None]:
        """The call with ``args`` checked once: a function of no arguments that runs the
        kernel on them (no per-call checking; the arrays are kept alive with it), for
        timing loops where the checks would cost more than a small kernel.

        >>> import numpy as np
        >>> from toolchain import build, te
        >>> A = te.placeholder((4,), name="A")
        >>> mod = build(te.create_prim_func([A, te.compute((4,), lambda i: A[i] + 1.0)]))
        >>> a, b = np.arange(4, dtype="float32"), np.zeros(4, "float32")
        >>> run = mod.bind(a, b); run(); b.tolist()
        [1.0, 2.0, 3.0, 4.0]
        """
        cargs, keep = self._c_args(args), list(args)

        def run() -> None:
            self._run(cargs)
            assert keep  # the arrays must outlive the pointers

        return run

    def _run(self, cargs: list[Any]) -> None:
        rc = self._fn(*cargs)
        if rc != 0:
            raise InputError(f"{self.entry}: the kernel returned error {rc} (out of memory "
                             "for a temporary buffer)")

    def _c_args(self, args: tuple[Any, ...]) -> list[Any]:
        func = self.func
        names = ", ".join(p.name for p in func.params)
        if len(args) != len(func.params):
            raise InputError(f"{self.entry}: takes {len(func.params)} arguments ({names}), "
                             f"got {len(args)}")
        sym: dict[ir.Var, int] = {}
        cargs: list[Any] = []
        for p, a in zip(func.params, args, strict=True):
            if isinstance(p, ir.Buffer):
                self._check(p, a, sym)
                cargs.append(ctypes.c_void_p(a.ctypes.data))
            else:
                if not isinstance(a, (int, float, np.number, bool)):
                    raise InputError(f"{self.entry}: argument {p.name!r} is a scalar of dtype "
                                     f"{p.dtype}, got {type(a).__name__}")
                sym[p] = a
                cargs.append(_CT[p.dtype](a))
        for v in self.extra_args:
            if v not in sym:
                raise InputError(f"{self.entry}: size {v.name!r} is not fixed by any "
                                 "argument's shape")
            cargs.append(_CT[v.dtype](sym[v]))
        return cargs

    def _check(self, p: ir.Buffer, a: Any, sym: dict[ir.Var, int]) -> None:
        want = "(" + ", ".join(str(s) for s in p.shape) + ")"
        if not isinstance(a, np.ndarray):
            raise InputError(f"{self.entry}: argument {p.name!r} must be a numpy array of "
                             f"shape {want} and dtype {p.dtype}, got {type(a).__name__}")
        if a.dtype != np_dtype(p.dtype):
            raise InputError(f"{self.entry}: argument {p.name!r} has dtype {a.dtype}, "
                             f"expected {p.dtype}")
        ok = a.ndim == p.ndim
        for s, n in zip(p.shape, a.shape, strict=False):
            if isinstance(s, ir.IntImm) and s.value != n:
                ok = False
            elif isinstance(s, ir.Var) and sym.setdefault(s, n) != n:
                ok = False
        if not ok:
            raise InputError(f"{self.entry}: argument {p.name!r} has shape {tuple(a.shape)}, "
                             f"expected {want}")
        if not a.flags.c_contiguous:
            raise InputError(f"{self.entry}: argument {p.name!r} is not C-contiguous; pass "
                             "np.ascontiguousarray(x)")
        if not a.flags.writeable:
            raise InputError(f"{self.entry}: argument {p.name!r} is read-only; pass a "
                             "writeable array (np.array(x))")

    def __repr__(self) -> str:
        return f"Module({self.entry!r}, {self.lib_path})"
