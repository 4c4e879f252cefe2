"""Helpers for lowering tests: build with strict warnings and compare with numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.driver import build
from toolchain.tir import ir

#: Every test build treats compiler warnings as errors.
STRICT = ("-Wall", "-Wextra", "-Werror", "-Wcast-qual")


#: the backend :func:`build_and_check` builds with; a test module runs its checks through
#: every backend with the fixture ``over_backends`` (``c`` and ``llvm``)
BACKEND = "c"


def build_and_check(sch_or_func: Any, workload: tuple, rtol: float = 1e-4,
                    **kwargs: Any) -> Any:
    """Build (C: with :data:`STRICT`; LLVM: in-process), run on the workload's inputs,
    compare with its reference."""
    _, inputs, ref = workload
    if BACKEND == "llvm":
        kwargs = {k: v for k, v in kwargs.items() if k not in ("openmp", "march")}
        mod = build(sch_or_func, backend="llvm", **kwargs)
    else:
        mod = build(sch_or_func, extra_flags=STRICT, **kwargs)
    args = inputs()
    mod(*args)
    np.testing.assert_allclose(args[-1], ref(*args), rtol=rtol, atol=1e-4)
    return mod


def count(node: Any, cls: type) -> int:
    """Number of nodes of class ``cls`` under ``node``."""
    from toolchain.tir.functor import post_order_visit

    found: list[Any] = []
    post_order_visit(node, lambda x: found.append(x) if isinstance(x, cls) else None)
    return len(found)


def loops(node: Any) -> list[ir.For]:
    """Every For loop under ``node`` (pre-order not guaranteed)."""
    from toolchain.tir.functor import post_order_visit

    found: list[ir.For] = []
    post_order_visit(node, lambda x: found.append(x) if isinstance(x, ir.For) else None)
    return found
