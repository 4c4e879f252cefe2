"""The blocked, packed matrix multiply of the TVM notes, at 1024 x 1024 x 1024.

bn x bn blocks, reorder (k split, the k_1 loop between the block rows and columns), B
packed into ``[N/bn][K][bn]``, vectorized inner loop, parallel outer loop, accumulator
staged by ``cache_write``. Built to C and compared with numpy.
"""

from __future__ import annotations

import numpy as np

from tests.tir_transform.helpers import STRICT
from toolchain import te
from toolchain.driver import build, lower
from toolchain.tir.schedule import Schedule


def blocked_packed_matmul(n: int, bn: int = 32) -> Schedule:
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    packed = te.compute((n // bn, n, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * packed[j // bn, k, j % bn], axis=k),
                   name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, ii = sch.split(i, [None, bn])
    jo, ji = sch.split(j, [None, bn])
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(io, jo, ko, ii, ki, ji)
    out = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(out, jo)
    sch.unroll(ki)
    sch.vectorize(ji)
    sch.parallel(io)
    x, _, z = sch.get_loops(sch.get_block("packedB"))
    sch.vectorize(z)
    sch.parallel(x)
    return sch


def test_blocked_packed_matmul_1024_matches_numpy():
    n = 1024
    sch = blocked_packed_matmul(n)
    lowered = str(lower(sch))
    assert 'C_local = T.allocate((1024,), "float32", scope="local")' in lowered
    assert "T.parallel(32)" in lowered
    mod = build(sch, name="blocked_matmul", extra_flags=STRICT)
    src = mod.get_source()
    assert "#pragma omp parallel for" in src
    assert "float32x32" in src
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
