"""``drain_async_products``: wait for the products a step loop leaves in flight before
anything after the loop reads their accumulators.

An intrinsic declared with ``in_flight: g`` (the overlapped ``wgmma`` products of
``targets/cuda-sm90.yaml``) returns with its latest ``g`` commit groups still running:
each call retires the groups before them, but the last ``g`` of a step loop are retired
by nobody. This pass places, after the innermost serial loop that makes such calls, the
*drain*: the same function called with null operand pointers (``wgmma.wait_group 0`` on
the device; the emulation computes what it still holds queued), under the same thread
bindings as the last call, on the same accumulator. Before (lowered, phase 3)::

    for k_0 in T.serial(4):
        ...
        for i_1 in T.thread_binding(1, thread="threadIdx.z"):
            T.call_extern("int32", "kiln_wgmma_f16_64x64x16_pipe_1a2b", T.address_of(
                A_shared[k_0 % 3 * 1024]), T.address_of(B_shared[..]), T.address_of(C_acc[0]))
        T.storage_sync("shared")
    C[..] = T.Cast("float16", C_acc[0])                    # the epilogue

after::

    for k_0 in T.serial(4):
        ... (unchanged)
    for i_1 in T.thread_binding(1, thread="threadIdx.z"):
        T.call_extern("int32", "kiln_wgmma_f16_64x64x16_pipe_1a2b", 0, 0,
                      T.address_of(C_acc[0]))             # wait_group 0
    C[..] = T.Cast("float16", C_acc[0])

A function with no such call is returned as it is; running the pass again changes
nothing (a drain is no call in flight). A last call reached through anything but loops
(an ``if``, an allocation) or whose accumulator depends on the loop is refused
(:class:`~toolchain.errors.UnsupportedError`): its registers would be read unretired.
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.functor import StmtMutator, post_order_visit


def in_flight_call(s: ir.Node) -> int:
    """The groups the call ``s`` (an ``Evaluate``) leaves running: its intrinsic's
    ``in_flight``, 0 for a drain (null operands) and any other statement."""
    if not isinstance(s, ir.Evaluate) or not isinstance(s.value, ir.Call):
        return 0
    from toolchain.intrinsics import intrinsic_of_function

    spec = intrinsic_of_function(s.value.op)
    if spec is None or not spec.in_flight or is_drain(s.value):
        return 0
    return spec.in_flight


def is_drain(call: ir.Call) -> bool:
    """Whether ``call`` is a drain: an in-flight intrinsic called with null operands
    (every argument but the last, the accumulator, the constant 0)."""
    if len(call.args) < 2 or not all(isinstance(a, ir.IntImm) and a.value == 0
                                     for a in call.args[:-1]):
        return False
    from toolchain.intrinsics import intrinsic_of_function

    spec = intrinsic_of_function(call.op)
    return spec is not None and spec.in_flight > 0


def _has_flying(s: ir.Stmt) -> bool:
    found: list[ir.Node] = []
    post_order_visit(s, lambda n: found.append(n) if in_flight_call(n) else None)
    return bool(found)


def _free_of(e: ir.PrimExpr, var: ir.Var) -> bool:
    hit: list[ir.Node] = []
    post_order_visit(e, lambda n: hit.append(n) if n is var else None)
    return not hit


def _drain_of(s: ir.Stmt, loop: ir.Var) -> ir.Stmt | None:
    """The thread-bound loops down to the last in-flight call of ``s`` around that
    call's drain, or None where ``s`` makes none."""
    if in_flight_call(s):
        call = s.value
        acc = call.args[-1]
        if not _free_of(acc, loop):
            raise UnsupportedError(f"drain_async_products: {call.op}'s accumulator depends "
                                   f"on the step loop {loop.name}")
        zeros = [ir.IntImm(0) for _ in call.args[:-1]]
        return ir.Evaluate(ir.Call(call.dtype, call.op, [*zeros, acc]))
    if isinstance(s, ir.SeqStmt):
        for x in reversed(s.seq):
            d = _drain_of(x, loop)
            if d is not None:
                return d
        return None
    if isinstance(s, ir.For):
        d = _drain_of(s.body, loop)
        if d is None or not s.thread_tag:  # a serial loop inside: its calls' accumulator
            return d
        return replace(s, body=d)
    if _has_flying(s):
        raise UnsupportedError(f"drain_async_products: an in-flight product under a "
                               f"{type(s).__name__} in step loop {loop.name}: no drain placed")
    return None


class _Drain(StmtMutator):
    def visit_SeqStmt(self, s: ir.SeqStmt) -> ir.Stmt:  # noqa: N802 - visitor naming
        out: list[ir.Stmt] = []
        for i, x in enumerate(s.seq):
            y = self.visit_stmt(x)
            if isinstance(x, ir.For) and isinstance(y, ir.SeqStmt) and len(y.seq) == 2 \
                    and i + 1 < len(s.seq) and ir.structural_equal(y.seq[1], s.seq[i + 1]):
                y = y.seq[0]  # drained already (the pass run again)
            out.append(y)
        return ir.seq(*out)

    def visit_For(self, s: ir.For) -> ir.Stmt:  # noqa: N802 - visitor naming
        if s.thread_tag or s.kind not in ("serial", "unrolled") or not _has_flying(s.body):
            return super().visit_For(s)
        inner: list[ir.Node] = []
        post_order_visit(s.body, lambda n: inner.append(n) if isinstance(n, ir.For)
                         and not n.thread_tag and n.kind in ("serial", "unrolled")
                         and _has_flying(n.body) else None)
        if inner:  # the calls' own step loop is further in
            return super().visit_For(s)
        drain = _drain_of(s.body, s.loop_var)
        return ir.seq(s, drain) if drain is not None else s


def _defines_flying(func: ir.PrimFunc) -> bool:
    """Whether ``attach_intrinsics`` recorded the definition of an in-flight intrinsic
    for ``func`` (a cheap test before walking the body: most kernels have none)."""
    from toolchain.codegen.artifact import support_of
    from toolchain.intrinsics import intrinsic_of_function

    for d in support_of(func).definitions:
        spec = intrinsic_of_function(d.key)
        if spec is not None and spec.in_flight:
            return True
    return False


def drain_async_products(func: ir.PrimFunc) -> ir.PrimFunc:
    """Lowering pass (phase 3, after ``inject_double_buffer``; see the module docstring):
    a drain after each step loop of in-flight products."""
    if not _defines_flying(func) or not _has_flying(func.body):
        return func
    return ir.PrimFunc(func.params, _Drain().visit_stmt(func.body), func.name, func.attrs)


__all__ = ["drain_async_products", "in_flight_call", "is_drain"]
