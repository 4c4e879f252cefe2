"""The lowering passes' shortcuts give what the plain walks give (session 25): the
shared-buffer search of ``inject_barriers``, and ``compact_buffer_allocation``'s repeated
accesses asked about once, each distinct bound's offset simplified once, and its
rewrite skipping statements without an access."""

from __future__ import annotations

import pytest

from tests.codegen.gpu_workloads import tiled_gemm
from tests.tir import workloads
from tests.tir_transform.test_intrinsic_lowering import staged_matmul
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, post_order_visit
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform import compact_buffer
from toolchain.tir.transform.inject_barriers import has_shared, is_shared
from toolchain.tir.transform.lower_blocks import lower_blocks
from toolchain.tir.transform.pipeline import lower

S = ir.Buffer("S", (16,), "float32", scope="shared")
G = ir.Buffer("G", (16,), "float32")
I = ir.Buffer("I", (16,), "int32")  # noqa: E741 - an index buffer
i = ir.Var("i")


def _walked(node: ir.Node) -> bool:
    """The plain search: every node :func:`post_order_visit` reaches."""
    found: list[bool] = []
    post_order_visit(node, lambda x: found.append(True) if isinstance(
        x, (ir.Allocate, ir.BufferStore, ir.BufferLoad)) and is_shared(x.buffer) else None)
    return bool(found)


def _loop(body: ir.Stmt) -> ir.Stmt:
    return ir.For(i, 0, 16, "serial", body)


SHARED_SOMEWHERE = {
    "allocation alone": ir.Allocate(S, ir.Evaluate(ir.IntImm(0))),
    "store": _loop(S.store(G[i], [i])),
    "load in a value": _loop(G.store(G[i] + S[i], [i])),
    "load in a global load's index": _loop(
        G.store(G[ir.Cast("int32", S[i]) % 16], [i])),
    "load in a store's index": _loop(G.store(1.0, [ir.Cast("int32", S[i]) % 16])),
    "load in a condition": _loop(ir.IfThenElse(S[i] > 0.0, G.store(1.0, [i]))),
    "load in a loop extent": ir.For(i, 0, ir.Cast("int32", S[0]), "serial",
                                    G.store(1.0, [i])),
    "load in a call argument": _loop(ir.Evaluate(ir.Call("int32", "f", [S[i]]))),
    "load under a Let": _loop(G.store(ir.Let(ir.Var("x", "float32"), S[i], G[i]), [i])),
    "load in a select": _loop(G.store(ir.Select(i < 8, G[i], S[i]), [i])),
}
NO_SHARED = {
    "global only": _loop(G.store(G[i] + 1.0, [I[i]])),
    "calls and conditions": _loop(ir.IfThenElse(
        I[i] > 0, ir.Evaluate(ir.Call("int32", "f", [G[i], i])), G.store(0.0, [i]))),
}


@pytest.mark.parametrize("name", sorted(SHARED_SOMEWHERE) + sorted(NO_SHARED))
def test_has_shared_answers_as_the_plain_walk(name: str) -> None:
    node = SHARED_SOMEWHERE.get(name) or NO_SHARED[name]
    assert has_shared(node) is _walked(node) is (name in SHARED_SOMEWHERE)


def _local_matmul() -> Schedule:
    """The docstring's case: a ``local`` accumulator written back per tile."""
    sch = Schedule(workloads.matmul(32, 32, 32)[0])
    c = sch.get_block("C")
    y, x, k = sch.get_loops(c)
    yo, yi = sch.split(y, [None, 8])
    xo, xi = sch.split(x, [None, 16])
    sch.reorder(yo, xo, k, yi, xi)
    loc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(loc, xo)
    return sch


WORKLOADS = {
    "local accumulator": _local_matmul,
    "tensorized, staged operand": staged_matmul,
    "GPU tiled GEMM, shared tiles": lambda: tiled_gemm(),
    "GPU tiled GEMM, local accumulator": lambda: tiled_gemm(local=True),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_compaction_shortcuts_give_the_plain_result(name: str, monkeypatch) -> None:
    before = lower(WORKLOADS[name](), stop_after=lower_blocks)
    plain_rewrite = compact_buffer._Rewrite.visit_stmt
    skipped = [0]

    def counting(self, s):  # noqa: ANN001, ANN202
        if self.on_path is not None and id(s) not in self.on_path:
            skipped[0] += 1
        return plain_rewrite(self, s)

    monkeypatch.setattr(compact_buffer._Rewrite, "visit_stmt", counting)
    fast = compact_buffer.compact_buffer_allocation(before)
    # the rewrite skipped statements without an access (the docstring's case has none)
    assert (skipped[0] > 0) is (name != "local accumulator")
    monkeypatch.setattr(compact_buffer._Rewrite, "visit_stmt", StmtExprMutator.visit_stmt)
    monkeypatch.setattr(compact_buffer, "_distinct", list)
    monkeypatch.setattr(compact_buffer, "_offsets", lambda bounds, lo: [
        arith.simplify(x - lo) for x in bounds])
    slow = compact_buffer.compact_buffer_allocation(before)
    assert str(fast) == str(slow)
    assert str(fast) != str(before)  # something was compacted
