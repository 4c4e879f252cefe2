"""``drain_async_products`` (``toolchain.tir.transform.drain_wgmma``): after a step loop of
products left in flight (the overlapped ``wgmma`` intrinsics), the same function called
with null operands on the same accumulator under the same thread bindings; nothing in a
kernel without them; a last call it cannot reach through loops is refused."""

from __future__ import annotations

import pytest

from toolchain import te
from toolchain.errors import UnsupportedError
from toolchain.schedules.gpu.tensorcore import WmmaTiles, try_tile_wmma
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.drain_wgmma import drain_async_products, in_flight_call, is_drain
from toolchain.tir.transform.inject_double_buffer import inject_double_buffer
from toolchain.tir.transform.pipeline import lower

SM90 = load_target("cuda-sm90")


def _before_drain(tiles: WmmaTiles) -> ir.PrimFunc:
    """A 64 x 64 x 64 float16 GEMM on ``tiles``, lowered up to ``inject_double_buffer``."""
    A = te.placeholder((64, 64), name="A", dtype="float16")
    B = te.placeholder((64, 64), name="B", dtype="float16")
    r = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = try_tile_wmma(Schedule(te.create_prim_func([A, B, C]), SM90), "C", SM90, tiles)
    assert sch is not None
    return lower(sch, target=SM90, stop_after=inject_double_buffer)


def _calls(f: ir.PrimFunc) -> list[ir.Evaluate]:
    return [n for n, _ in st.walk(f.body) if isinstance(n, ir.Evaluate)
            and isinstance(n.value, ir.Call) and "_pipe_" in n.value.op]


def test_the_drain_follows_the_step_loop_once() -> None:
    f = _before_drain(WmmaTiles(4, 1, 1, 4, 1, vector=8, async_copy=True, wgmma=True,
                                stages=3, in_flight=1))
    (call,) = _calls(f)
    assert in_flight_call(call) == 1
    out = drain_async_products(f)
    issued, drain = _calls(out)
    assert is_drain(drain.value) and not is_drain(issued.value)
    assert ir.structural_equal(drain.value.args[-1], issued.value.args[-1])  # one accumulator
    lines = str(out).splitlines()
    at = [i for i, ln in enumerate(lines) if "_pipe_" in ln and "T.call_extern" in ln]
    indent = [len(lines[i]) - len(lines[i].lstrip()) for i in at]
    # the drain after the step loop, one level out, under the same two thread bindings
    assert at[1] > at[0] and indent[1] == indent[0] - 4 and ", 0, 0, " in lines[at[1]]
    assert [ln.strip()[:9] for ln in lines[at[1] - 2:at[1]]] == ["for i_1 i", "for j_1 i"]
    assert len(_calls(drain_async_products(out))) == 2  # again: nothing more


def test_a_kernel_without_products_in_flight_is_returned_as_is() -> None:
    f = _before_drain(WmmaTiles(4, 1, 1, 4, 1, vector=8, async_copy=True, wgmma=True,
                                stages=3))
    assert drain_async_products(f) is f


def test_a_product_under_a_condition_is_refused() -> None:
    f = _before_drain(WmmaTiles(4, 1, 1, 4, 1, vector=8, async_copy=True, wgmma=True,
                                stages=3, in_flight=1))
    (call,) = _calls(f)
    guarded = st.replace_stmts(f, {id(call): ir.IfThenElse(ir.IntImm(1, "bool"), call)})
    with pytest.raises(UnsupportedError, match="under a IfThenElse"):
        drain_async_products(guarded)
