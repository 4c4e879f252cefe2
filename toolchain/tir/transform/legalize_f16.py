"""float16 storage, float32 compute: the form a CPU without fp16 arithmetic runs.

:func:`legalize_f16` rewrites a lowered function so that ``float16`` is only a *storage*
type: the function's float16 buffers (parameters: inputs, outputs, weights) keep their
16-bit elements, and every computation on them happens in float32. A load from such a
buffer is converted to float32 (``Cast("float32", load)``), a store into one rounds once
to float16 (``Cast("float16", value)``), an explicit cast to float16 rounds the value to
the nearest float16 (and continues in float32), and the function's own temporaries
(accumulators, packing buffers, register tiles) hold float32. So a fused kernel rounds
where its graph has a float16 tensor in memory, and a reduction accumulates in float32
(as onnxruntime's CPU kernels do).

The C renderer of a bundle then only meets float16 in two casts (``kiln_h2f`` and
``kiln_f2h``, and their whole-vector forms: hardware conversions where the C compiler
provides them, else the runtime's ``kiln_f16_to_f32`` / ``kiln_f32_to_f16``, the same bits;
``toolchain.bundle.emit.f16_definitions``), in pointer types (``kiln_f16``) and in bit
casts (ONNX BitCast) of the 16 bits, which are rounded back from float32 first (exact).

Example (the lowered function before the pass, then after it)::

    >>> from toolchain import te
    >>> from toolchain.tir.transform import lower
    >>> A = te.placeholder((64,), name="A", dtype="float16")
    >>> B = te.compute((64,), lambda i: A[i] * te.const(2.0, "float16"), name="B")
    >>> f = lower(te.create_prim_func([A, B]))
    >>> print(f.body)  # doctest: +NORMALIZE_WHITESPACE
    for i in range(64):
        B[i] = A[i] * T.float16(2.0)
    >>> print(legalize_f16(f).body)  # doctest: +NORMALIZE_WHITESPACE
    for i in range(64):
        B[i] = T.Cast("float16", T.Cast("float32", A[i]) * T.float32(2.0))
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator, StmtExprVisitor, StmtMutator, free_vars
from toolchain.tir.structural import expr_key
from toolchain.tir.transform.lower_blocks import CARRIED

F16, F32 = "float16", "float32"


def _is_f16(dtype: str) -> bool:
    return ir.element_of(dtype) == F16


def _f32(dtype: str) -> str:
    """``dtype`` with float16 lanes made float32 (other dtypes unchanged)."""
    return ir.with_lanes(F32, ir.lanes_of(dtype)) if _is_f16(dtype) else dtype


def _round_f16(v: ir.PrimExpr) -> ir.PrimExpr:
    """``v`` rounded to float16 (a float16 value: the stored form); float32 and float64
    round once, other types go through float32 (exact for every integer below 65520, the
    float16 overflow)."""
    lanes = ir.lanes_of(v.dtype)
    if ir.element_of(v.dtype) not in (F32, "float64"):
        v = ir.Cast(ir.with_lanes(F32, lanes), v)
    return ir.Cast(ir.with_lanes(F16, lanes), v)


class _Uses(StmtExprVisitor):
    """Whether a function mentions float16 anywhere (most do not: they pass unchanged)."""

    def __init__(self) -> None:
        self.found = False

    def visit_expr(self, e: ir.PrimExpr) -> None:
        if _is_f16(e.dtype):
            self.found = True
        else:
            super().visit_expr(e)

    def visit_Allocate(self, s: ir.Allocate) -> None:  # noqa: N802 - visitor hook
        self.found = self.found or _is_f16(s.buffer.dtype)
        super().visit_Allocate(s)


class _Legalize(StmtExprMutator):
    def __init__(self, where: str, storage: set[ir.Var]) -> None:
        self.where = where
        #: pointer Vars of the buffers that stay float16 in memory (the parameters)
        self.storage = storage
        self.vars: dict[ir.Var, ir.Var] = {}
        self.buffers: dict[int, ir.Buffer] = {}

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        if not _is_f16(b.dtype) or b.data in self.storage:
            return b
        if id(b) not in self.buffers:  # a temporary of the function: float32
            self.buffers[id(b)] = replace(b, dtype=_f32(b.dtype))
        return self.buffers[id(b)]

    def var(self, v: ir.Var) -> ir.Var:
        if not _is_f16(v.dtype):
            return v
        if v not in self.vars:
            self.vars[v] = ir.Var(v.name, _f32(v.dtype))
        return self.vars[v]

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:  # noqa: N802 - mutator hooks below
        return self.var(e)

    def visit_FloatImm(self, e: ir.FloatImm) -> ir.PrimExpr:  # noqa: N802
        return ir.FloatImm(e.value, F32) if _is_f16(e.dtype) else e

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
        load = super().visit_BufferLoad(e)
        assert isinstance(load, ir.BufferLoad)
        return ir.Cast(_f32(load.dtype), load) if _is_f16(load.dtype) else load

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:  # noqa: N802
        buf = self.visit_buffer(s.buffer)
        value = self.visit_expr(s.value)
        idx = tuple(self.visit_expr(i) for i in s.indices)
        if _is_f16(buf.dtype):
            value = _round_f16(value)
        return ir.BufferStore(buf, value, idx)

    def visit_Cast(self, e: ir.Cast) -> ir.PrimExpr:  # noqa: N802
        v = self.visit_expr(e.value)
        if _is_f16(e.dtype):  # a rounding, then float32 again
            return ir.Cast(_f32(e.dtype), _round_f16(v))
        return v if v.dtype == e.dtype else ir.Cast(e.dtype, v)

    def visit_Let(self, e: ir.Let) -> ir.PrimExpr:  # noqa: N802
        return ir.Let(self.var(e.var), self.visit_expr(e.value), self.visit_expr(e.body))

    def visit_LetStmt(self, s: ir.LetStmt) -> ir.Stmt:  # noqa: N802
        return ir.LetStmt(self.var(s.var), self.visit_expr(s.value), self.visit_stmt(s.body))

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:  # noqa: N802
        if e.op == "tir.address_of" and isinstance(e.args[0], ir.BufferLoad) and (
                e.args[0].buffer.data in self.storage or not _is_f16(e.args[0].dtype)):
            # a pointer into float16 storage (a tensor-core operand) or into a wider buffer
            load = e.args[0]
            buf = self.visit_buffer(load.buffer)
            idx = tuple(self.visit_expr(i) for i in load.indices)
            return ir.Call(e.dtype, e.op, (ir.BufferLoad(buf, idx),))
        if e.op == "tir.address_of":
            raise UnsupportedError(f"{self.where}: the address of a float16 element "
                                   f"({e.args[0]}) cannot be taken in float32 compute")
        if e.op == "reinterpret" and (_is_f16(e.dtype) or _is_f16(e.args[0].dtype)):
            return self._reinterpret_f16(e)
        args = tuple(self.visit_expr(a) for a in e.args)
        return ir.Call(_f32(e.dtype), e.op, args)

    def _reinterpret_f16(self, e: ir.Call) -> ir.PrimExpr:
        """A bit cast from or to float16 (ONNX BitCast): the float32 value of a float16 is
        rounded back to its (exact) float16 bits first; float16 bits are widened after.
        Rounding float16 -> float32 -> float16 is exact, NaN payloads included."""
        (x,) = e.args
        v = self.visit_expr(x)
        if _is_f16(x.dtype):
            v = ir.Cast(x.dtype, v)
        bits = ir.Call(e.dtype, "reinterpret", (v,))
        return ir.Cast(_f32(e.dtype), bits) if _is_f16(e.dtype) else bits


class _Accesses(StmtExprVisitor):
    """The indices ``data`` is accessed at inside a statement, and the Vars bound there."""

    def __init__(self, data: ir.Var) -> None:
        self.data = data
        self.indices: list[tuple[ir.PrimExpr, ...]] = []
        self.bound: set[ir.Var] = set()

    def visit_For(self, s: ir.For) -> None:  # noqa: N802 - visitor hooks
        self.bound.add(s.loop_var)
        super().visit_For(s)

    def visit_LetStmt(self, s: ir.LetStmt) -> None:  # noqa: N802
        self.bound.add(s.var)
        super().visit_LetStmt(s)

    def visit_Let(self, e: ir.Let) -> None:  # noqa: N802
        self.bound.add(e.var)
        super().visit_Let(e)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:  # noqa: N802
        if e.buffer.data is self.data:
            self.indices.append(e.indices)
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:  # noqa: N802
        if s.buffer.data is self.data:
            self.indices.append(s.indices)
        super().visit_BufferStore(s)


class _Redirect(StmtExprMutator):
    """Every access to ``data`` made an access to ``acc`` at ``index``."""

    def __init__(self, data: ir.Var, acc: ir.Buffer, index: ir.PrimExpr) -> None:
        self.data, self.acc, self.index = data, acc, index

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
        if e.buffer.data is self.data:
            return ir.BufferLoad(self.acc, (self.index,))
        return super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:  # noqa: N802
        if s.buffer.data is self.data:
            return ir.BufferStore(self.acc, self.visit_expr(s.value), (self.index,))
        return super().visit_BufferStore(s)


class _Accumulate(StmtMutator):
    """A reduction that accumulates straight into a float16 parameter (an unscheduled
    compute: ``for k (carried C): C[i] = C[i] + ...``) accumulates in a local instead,
    stored to the parameter once after its loop; the local becomes float32 (``_Legalize``),
    so the sum rounds once, not at every step."""

    def __init__(self, params: dict[str, ir.Buffer]) -> None:
        self.params = params  # float16 parameters by name

    def visit_For(self, s: ir.For) -> ir.Stmt:  # noqa: N802
        out: ir.Stmt = s
        for name in s.annotations.get(CARRIED, ()):
            buf = self.params.get(name)
            if buf is not None and isinstance(out, (ir.For, ir.Allocate)):
                out = self._accumulate(out, buf)
        if isinstance(out, ir.Allocate):  # rewritten: its loop's other reductions inside
            return ir.Allocate(out.buffer, self.visit_stmt(out.body))
        return super().visit_For(s)

    def visit_SeqStmt(self, s: ir.SeqStmt) -> ir.Stmt:  # noqa: N802
        # an unrolled reduction: consecutive stores into one float16 parameter element
        # (``C[i] = 0; C[i] = C[i] + p0; C[i] = C[i] + p1 ...``) accumulate in a local too
        seq = [self.visit_stmt(x) for x in s.seq]
        out: list[ir.Stmt] = []
        k = 0
        while k < len(seq):
            end = k + 1
            first = seq[k]
            if isinstance(first, ir.BufferStore) and first.buffer.name in self.params:
                key = expr_key(first.indices)
                while (end < len(seq) and isinstance(seq[end], ir.BufferStore)
                       and seq[end].buffer.data is first.buffer.data
                       and expr_key(seq[end].indices) == key):
                    end += 1
            if end - k > 1:
                out.append(self._accumulate(ir.seq(*seq[k:end]), first.buffer))
            else:
                out.append(first)
            k = end
        return ir.seq(*out)

    @staticmethod
    def _accumulate(s: ir.Stmt, buf: ir.Buffer) -> ir.Stmt:
        """``s`` with ``buf`` accumulated in a local, or ``s`` where the accesses are not all
        at one index invariant in the loop."""
        acc = _Accesses(buf.data)
        acc.visit_stmt(s)
        keys = {expr_key(idx) for idx in acc.indices}
        if len(keys) != 1 or len(acc.indices[0]) != 1:
            return s
        (idx,) = acc.indices[0]
        if set(free_vars(idx)) & acc.bound:
            return s
        lanes = ir.lanes_of(idx.dtype)
        local = ir.Buffer(f"{buf.name}_acc", (lanes,), buf.dtype, scope="local")
        at = ir.Ramp(0, 1, lanes) if lanes > 1 else ir.IntImm(0, "int32")
        # the local starts as the parameter's value (written before it is read anyway: the
        # copy keeps C compilers' "maybe uninitialized" analysis quiet)
        body = ir.seq(ir.BufferStore(local, ir.BufferLoad(buf, (idx,)), (at,)),
                      _Redirect(buf.data, local, at).visit_stmt(s),
                      ir.BufferStore(buf, ir.BufferLoad(local, (at,)), (idx,)))
        return ir.Allocate(local, body)


def legalize_f16(func: ir.PrimFunc, keep_scopes: tuple[str, ...] = ()) -> ir.PrimFunc:
    """``func`` with float16 kept for its parameters' storage and computed in float32
    (see the module docstring); a function without float16 is returned as it is.
    ``keep_scopes``: allocations of these memory scopes stay float16 too (the CUDA
    backend keeps ``shared`` tiles in float16: half the shared memory, and the operands
    tensor cores read; the values are the same, since a tile only holds what was loaded
    from float16 memory)."""
    uses = _Uses()
    uses.visit_stmt(func.body)
    if not uses.found:
        return func
    halves = {p.name: p for p in func.params if isinstance(p, ir.Buffer) and _is_f16(p.dtype)}
    func = _Accumulate(halves).visit(func)
    storage = {p.data for p in func.params if isinstance(p, ir.Buffer) and p.data is not None}
    if keep_scopes:
        from toolchain.tir.functor import post_order_visit

        def keep(x: object) -> None:
            if isinstance(x, ir.Allocate) and x.buffer.scope in keep_scopes \
                    and x.buffer.data is not None:
                storage.add(x.buffer.data)

        post_order_visit(func.body, keep)
    return _Legalize(f"kernel {func.name} (float16 as float32)", storage).visit(func)


__all__ = ["legalize_f16"]
