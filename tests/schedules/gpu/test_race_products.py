"""The race checker's tensor products run as whole arrays give what the element loops give.

``find_races`` runs each tensor intrinsic call's declared behaviour; since session 25 as
numpy operations over all of a call's elements (``toolchain.tir.race_products``), and with
``elementwise=True`` one element at a time in the TIR interpreter, as before. The two must
agree exactly: the same races with the same messages, in the same order, and every array
the kernel writes bit for bit (the products' float32 sums added in the loops' order).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.schedules.gpu.test_tensorcore import wmma_gemm
from tests.schedules.gpu.test_wgmma import IN_FLIGHT
from toolchain.driver import lower
from toolchain.schedules.gpu.tensorcore import WmmaTiles
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator
from toolchain.tir.race import find_races
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.inject_barriers import is_barrier

SM80 = load_target("cuda-sm80")
SM90 = load_target("cuda-sm90")


def _args(f: ir.PrimFunc, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([ir.const_int(s) for s in p.shape]).astype(
        ir.element_of(p.dtype)) for p in f.params]


def _both(f: ir.PrimFunc, seed: int = 0, **kw: Any) -> tuple[list[str], list[np.ndarray]]:
    """The races (as messages) and the written arrays of both runs; asserts they agree."""
    runs = []
    for elementwise in (True, False):
        args = _args(f, seed)
        races = find_races(f, args, elementwise=elementwise, **kw)
        runs.append(([str(r) for r in races], args))
    (want, want_args), (got, got_args) = runs
    assert got == want
    for x, y in zip(want_args, got_args, strict=True):
        assert x.tobytes() == y.tobytes()  # bit for bit (NaNs included)
    return got, got_args


def _without_barrier(f: ir.PrimFunc, n: int) -> ir.PrimFunc:
    bars = [b for b, _ in st.walk(f.body) if isinstance(b, ir.Stmt) and is_barrier(b)]
    return st.replace_stmts(f, {id(bars[n]): None})


@pytest.fixture(scope="module")
def wmma_kernel() -> ir.PrimFunc:
    return lower(wmma_gemm(32, 32, 48), target=SM80)


def test_wmma_products_give_the_element_loops_numbers_and_races(
        wmma_kernel: ir.PrimFunc) -> None:
    """wmma (fill, loads from shared, products, stores): race-free, the output is the
    GEMM (so the products ran) and the same bits both ways; without the step's last
    barrier both runs find the same four races (reads and writes of the fragments' shared
    tiles, the plans recording writes as well as reads)."""
    f = wmma_kernel
    races, (a, b, c) = _both(f, seed=1)
    assert races == []
    want = a.reshape(32, 48).astype(np.float32) @ b.reshape(48, 32).astype(np.float32)
    np.testing.assert_allclose(c.reshape(32, 32).astype(np.float32), want, rtol=1e-2,
                               atol=1e-2)
    races, _ = _both(_without_barrier(f, 2), seed=2, max_blocks=1)
    assert len(races) == 4 and all("data race in kernel" in r for r in races)


@pytest.mark.parametrize("kind", ["mma.sync", "wgmma in flight"])
def test_mma_sync_and_in_flight_wgmma_products_agree(kind: str) -> None:
    """mma.sync's three-stage pipeline and the overlapped wgmma (its products' reads
    until the call retiring them, their register accumulators): race-free and the same
    arrays; with a barrier taken out the same first race (the run stops there)."""
    if kind == "mma.sync":
        tiles = WmmaTiles(1, 1, 2, 2, 1, pad=8, vector=8, async_copy=True, mma=True,
                          stages=3)
        f = lower(wmma_gemm(32, 32, 64, tiles), target=SM80)
    else:
        f = lower(wmma_gemm(64, 64, 64, IN_FLIGHT, SM90), target=SM90)
    assert _both(f)[0] == []
    assert len(_both(_without_barrier(f, 1), max_blocks=1, limit=1)[0]) == 1


def test_an_operand_outside_its_buffer_is_the_interpreters_error(
        wmma_kernel: ir.PrimFunc) -> None:
    """A product whose operand tile reaches past its shared buffer runs as the element
    loops (the plan touches nothing first): the interpreter's IndexError, with the same
    message both ways."""
    f = wmma_kernel

    class _Shift(StmtExprMutator):
        done = False

        def visit_Call(self, e: ir.Call) -> ir.PrimExpr:  # noqa: N802 - visitor naming
            if not self.done and "mma" in e.op and e.args and \
                    getattr(e.args[0], "op", "") == "tir.address_of":
                self.done = True
                (load,) = e.args[0].args
                far = ir.BufferLoad(load.buffer, (load.indices[0] + 100000,))
                ptr = ir.Call("handle", "tir.address_of", [far])
                return ir.Call(e.dtype, e.op, [ptr, *e.args[1:]])
            return super().visit_Call(e)

    shift = _Shift()
    g = f.with_body(shift.visit_stmt(f.body))
    assert shift.done
    messages = []
    for elementwise in (True, False):
        with pytest.raises(IndexError, match="outside") as err:
            find_races(g, _args(g, 0), elementwise=elementwise)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
