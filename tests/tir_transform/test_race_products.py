"""A plan (``toolchain.tir.race_products``) against the TIR interpreter's element loops.

Random loop nests of the form the race checker gives a tensor intrinsic's behaviour
(``C[o] = C[o] + cast(A[a]) * cast(B[b])``, an assignment, ``max``): random extents,
strides (0 included: every iteration on one element), offsets, float16 and float32
operands, A and C shared (their accesses recorded). The plan must leave every array bit
for bit as the interpreter does (float32 sums added in the loops' order), hand over the
same shared accesses in the same order (an iteration's loads left to right, then its
store), and run nothing where an index is out of bounds (the interpreter's own error then
comes from the loops).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toolchain.tir import ir
from toolchain.tir.interpreter import run
from toolchain.tir.race_products import ACCESS, PRODUCT, plan_of, run_plan


def _access(buf: ir.Buffer, index: ir.PrimExpr, site: int, thread: ir.Var) -> ir.PrimExpr:
    return ir.BufferLoad(buf, (ir.Call("int32", ACCESS, [index, ir.IntImm(site), thread]),))


def _nest(rng: np.random.Generator, kind: str, in_dt: str, out_dt: str, short: int = 0
          ) -> tuple[ir.PrimFunc, ir.Stmt, list[np.ndarray]]:
    """A kernel of one thread loop (2 threads) around a random loop nest (the nest
    returned too: the plan's) and its arrays; ``short``: B that many elements short."""
    nloops = int(rng.integers(1, 4))
    vs = [ir.Var(f"v{d}", "int32") for d in range(nloops)]
    ext = [int(rng.integers(1, 6)) for _ in vs]
    t = ir.Var("t", "int32")

    def affine(lo: int) -> tuple[ir.PrimExpr, int]:
        const = int(rng.integers(0, 4))
        e: ir.PrimExpr = ir.IntImm(const) + t * lo
        top = const + lo
        for v, n in zip(vs, ext, strict=True):
            s = int(rng.choice([0, 1, 2, 3, 7]))
            e = e + v * s
            top += s * (n - 1)
        return e, top + 1

    ia, na = affine(int(rng.integers(0, 3)))
    ib, nb = affine(0)
    ic, nc = affine(int(rng.integers(0, 2)) * 40)
    A, B = ir.Buffer("A", (na,), in_dt, scope="shared"), ir.Buffer("B", (nb - short,), in_dt)
    C = ir.Buffer("C", (nc + 40,), out_dt, scope="shared")
    a = ir.Cast(out_dt, _access(A, ia, 0, t))
    b = ir.Cast(out_dt, B[ib])
    if kind == "acc":
        value: ir.PrimExpr = _access(C, ic, 1, t) + a * b
    elif kind == "max":
        value = ir.Max(a, b)
    else:
        value = ir.Cast(out_dt, a * b + ir.FloatImm(0.5, out_dt))
    body: ir.Stmt = C.store(value, [ir.Call("int32", ACCESS, [ic, ir.IntImm(2), t])])
    for v, n in reversed(list(zip(vs, ext, strict=True))):
        body = ir.For(v, 0, n, "serial", body)
    arrays = [rng.standard_normal(int(x.shape[0].value)).astype(x.dtype) for x in (A, B, C)]
    return ir.PrimFunc((A, B, C), ir.For(t, 0, 2, "serial", body), "nest"), body, arrays


def _both(f: ir.PrimFunc, body: ir.Stmt, arrays: list[np.ndarray], only: bool | None = None
          ) -> tuple[Any, ...]:
    """The arrays and accesses of the element loops, then of the plan (``only``: one of
    them), and how often the plan handed back to the loops."""
    plan = plan_of(body)
    assert plan is not None
    results = []
    fallbacks = 0
    for planned in (False, True) if only is None else (only,):
        got = [x.copy() for x in arrays]
        seen: list[Any] = []
        results += [got, seen]

        def access(index: Any, site: Any, *thread: Any, seen: list[Any] = seen) -> Any:
            seen.append((int(site), tuple(int(x) for x in thread), int(index)))
            return index

        def batch(cols: list[tuple[int, tuple[Any, ...]]], idx: np.ndarray) -> None:
            for row in idx.tolist():
                for (site, thread), e in zip(cols, row, strict=True):
                    access(e, site, *thread)

        def product(_: int, *args: Any) -> bool:
            nonlocal fallbacks
            again = run_plan(plan, batch, args)
            fallbacks += again
            return again

        inner = ir.IfThenElse(plan.call(0), body) if planned else body
        kernel = f.with_body(ir.For(f.body.loop_var, 0, 2, "serial", inner))
        run(kernel, *got, externs={ACCESS: access, PRODUCT: product})
    return (*results, fallbacks)


@pytest.mark.parametrize("kind", ["acc", "assign", "max"])
@pytest.mark.parametrize(("in_dt", "out_dt"), [("float16", "float32"),
                                                ("float32", "float32"),
                                                ("float32", "float16")])
def test_a_plan_leaves_the_element_loops_bits_and_accesses(kind: str, in_dt: str,
                                                           out_dt: str) -> None:
    rng = np.random.default_rng([ord(c) for c in kind + in_dt + out_dt])
    for _ in range(12):
        f, body, arrays = _nest(rng, kind, in_dt, out_dt)
        want, want_seen, got, got_seen, fallbacks = _both(f, body, arrays)
        assert fallbacks == 0
        for x, y in zip(want, got, strict=True):
            assert x.tobytes() == y.tobytes()
        # the plan hands every access over (the tracker leaves out repeated reads)
        assert got_seen == want_seen


def test_an_index_out_of_bounds_runs_the_loops() -> None:
    """With B one element short the plan runs nothing and the loops raise the
    interpreter's IndexError."""
    for seed in range(5):
        f, body, arrays = _nest(np.random.default_rng(seed), "acc", "float16", "float32",
                                short=1)
        messages = []
        for planned in (False, True):
            with pytest.raises(IndexError, match="B index") as err:
                _both(f, body, arrays, only=planned)
            messages.append(str(err.value))
        assert messages[0] == messages[1]
