"""The two entry points users call: :func:`lower` and :func:`build`.

``toolchain/__init__.py`` re-exports them as ``toolchain.lower`` / ``toolchain.build``.

>>> import numpy as np
>>> from toolchain import te
>>> from toolchain.driver import build, lower
>>> A = te.placeholder((8,), name="A")
>>> B = te.compute((8,), lambda i: A[i] * 3.0, name="B")
>>> func = te.create_prim_func([A, B])
>>> print(lower(func))  # doctest: +NORMALIZE_WHITESPACE
@T.prim_func
def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        B[i] = A[i] * T.float32(3.0)
>>> a = np.ones(8, "float32"); b = np.zeros(8, "float32")
>>> build(func)(a, b); float(b.sum())
24.0
"""

from toolchain.runtime.build import build
from toolchain.tir.transform.pipeline import lower

__all__ = ["build", "lower"]
