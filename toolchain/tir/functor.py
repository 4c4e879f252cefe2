"""Generic visitors and mutators over the TIR (one ``visit_<NodeClass>`` method per node).

* :class:`ExprVisitor` / :class:`StmtExprVisitor` walk a tree (override what you need,
  call ``super()`` to keep walking).
* :class:`ExprMutator` / :class:`StmtExprMutator` rebuild a tree; a node whose children
  did not change is returned as is (identity), so "did anything change?" is ``new is old``.
* :class:`StmtVisitor` / :class:`StmtMutator` do the same for statements only: the
  base of a pass or analysis that overrides no expression method (it gives the same
  result without entering every expression, most of a kernel's nodes).
* Buffers are not rewritten by default; override :meth:`StmtExprMutator.visit_buffer` to
  swap buffers (it is called for every load, store, region and allocation).

A pass is typically a small mutator::

    class ZeroToOne(StmtExprMutator):
        def visit_IntImm(self, e):
            return IntImm(1, e.dtype) if e.value == 0 else e

    new_body = ZeroToOne().visit_stmt(func.body)

Helpers: :func:`substitute` (replace Vars by expressions), :func:`post_order_visit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from toolchain.tir import ir


class _Dispatch:
    """Dispatch ``visit(node)`` to ``visit_<ClassName>`` (resolved once per visitor class
    and node class: each subclass has its own table, keyed by the node's class)."""

    _table: dict[type, Callable[..., Any]]
    #: True where ``visit_expr`` is the plain dispatch (not overridden): the hottest
    #: ``visit_<Node>`` methods then dispatch their operands inline, one call per node
    #: instead of two
    _direct: bool

    def __init_subclass__(cls) -> None:
        cls._table = {}
        cls._direct = getattr(cls.visit_expr, "_plain_dispatch", False)  # type: ignore

    @classmethod
    def _resolve(cls, node_type: type) -> Callable[..., Any]:
        for klass in node_type.__mro__:
            fn = getattr(cls, "visit_" + klass.__name__, None)
            if fn is not None:
                cls._table[node_type] = fn
                return fn
        raise TypeError(f"{cls.__name__} cannot visit {node_type.__name__}")


def _plain_dispatch(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a base class's ``visit_expr`` as the plain dispatch (see ``_direct``)."""
    fn._plain_dispatch = True  # type: ignore[attr-defined]
    return fn


class ExprVisitor(_Dispatch):
    """Walk an expression tree."""

    @_plain_dispatch
    def visit_expr(self, e: ir.PrimExpr) -> None:
        """Visit ``e`` (dispatches on its class)."""
        t = type(e)
        (self._table.get(t) or self._resolve(t))(self, e)

    def visit_IntImm(self, e: ir.IntImm) -> None:
        pass

    def visit_FloatImm(self, e: ir.FloatImm) -> None:
        pass

    def visit_StringImm(self, e: ir.StringImm) -> None:
        pass

    def visit_Var(self, e: ir.Var) -> None:
        pass

    def visit_BinaryOp(self, e: ir.BinaryOp) -> None:
        if self._direct:
            table = self._table
            a, b = e.a, e.b
            ta, tb = type(a), type(b)
            (table.get(ta) or self._resolve(ta))(self, a)
            (table.get(tb) or self._resolve(tb))(self, b)
        else:
            self.visit_expr(e.a)
            self.visit_expr(e.b)

    def visit_Not(self, e: ir.Not) -> None:
        self.visit_expr(e.a)

    def visit_Select(self, e: ir.Select) -> None:
        self.visit_expr(e.condition)
        self.visit_expr(e.true_value)
        self.visit_expr(e.false_value)

    def visit_Cast(self, e: ir.Cast) -> None:
        self.visit_expr(e.value)

    def visit_Let(self, e: ir.Let) -> None:
        self.visit_expr(e.value)
        self.visit_expr(e.body)

    def visit_Call(self, e: ir.Call) -> None:
        for a in e.args:
            self.visit_expr(a)

    def visit_Ramp(self, e: ir.Ramp) -> None:
        self.visit_expr(e.base)
        self.visit_expr(e.stride)

    def visit_Broadcast(self, e: ir.Broadcast) -> None:
        self.visit_expr(e.value)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        for i in e.indices:
            self.visit_expr(i)


class StmtExprVisitor(ExprVisitor):
    """Walk statements and the expressions inside them."""

    def visit_stmt(self, s: ir.Stmt) -> None:
        """Visit ``s`` (dispatches on its class)."""
        t = type(s)
        (self._table.get(t) or self._resolve(t))(self, s)

    def visit(self, node: Any) -> None:
        """Visit any statement, expression or PrimFunc."""
        if isinstance(node, ir.PrimFunc):
            self.visit_stmt(node.body)
        elif isinstance(node, ir.Stmt):
            self.visit_stmt(node)
        else:
            self.visit_expr(node)

    def visit_region(self, r: ir.BufferRegion) -> None:
        for rg in r.region:
            self.visit_expr(rg.min)
            self.visit_expr(rg.extent)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self.visit_expr(s.value)
        for i in s.indices:
            self.visit_expr(i)

    def visit_For(self, s: ir.For) -> None:
        self.visit_expr(s.min)
        self.visit_expr(s.extent)
        self.visit_stmt(s.body)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> None:
        self.visit_expr(s.condition)
        self.visit_stmt(s.then_case)
        if s.else_case is not None:
            self.visit_stmt(s.else_case)

    def visit_LetStmt(self, s: ir.LetStmt) -> None:
        self.visit_expr(s.value)
        self.visit_stmt(s.body)

    def visit_AttrStmt(self, s: ir.AttrStmt) -> None:
        self.visit_expr(s.value)
        self.visit_stmt(s.body)

    def visit_Allocate(self, s: ir.Allocate) -> None:
        self.visit_stmt(s.body)

    def visit_SeqStmt(self, s: ir.SeqStmt) -> None:
        for x in s.seq:
            self.visit_stmt(x)

    def visit_Evaluate(self, s: ir.Evaluate) -> None:
        self.visit_expr(s.value)

    def visit_Block(self, s: ir.Block) -> None:
        for iv in s.iter_vars:
            self.visit_expr(iv.dom.min)
            self.visit_expr(iv.dom.extent)
        for r in s.reads + s.writes:
            self.visit_region(r)
        if s.init is not None:
            self.visit_stmt(s.init)
        self.visit_stmt(s.body)

    def visit_BlockRealize(self, s: ir.BlockRealize) -> None:
        for v in s.iter_values:
            self.visit_expr(v)
        self.visit_expr(s.predicate)
        self.visit_stmt(s.block)


class ExprMutator(_Dispatch):
    """Rebuild an expression tree bottom-up; unchanged subtrees keep their identity."""

    @_plain_dispatch
    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        """Mutate ``e`` (dispatches on its class)."""
        t = type(e)
        return (self._table.get(t) or self._resolve(t))(self, e)

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        """Hook to replace buffers (identity by default)."""
        return b

    def visit_IntImm(self, e: ir.IntImm) -> ir.PrimExpr:
        return e

    def visit_FloatImm(self, e: ir.FloatImm) -> ir.PrimExpr:
        return e

    def visit_StringImm(self, e: ir.StringImm) -> ir.PrimExpr:
        return e

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        return e

    def visit_BinaryOp(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a0, b0 = e.a, e.b
        if self._direct:
            table = self._table
            ta, tb = type(a0), type(b0)
            a = (table.get(ta) or self._resolve(ta))(self, a0)
            b = (table.get(tb) or self._resolve(tb))(self, b0)
        else:
            a, b = self.visit_expr(a0), self.visit_expr(b0)
        if a is a0 and b is b0:
            return e
        return type(e)(a, b)

    def visit_Not(self, e: ir.Not) -> ir.PrimExpr:
        a = self.visit_expr(e.a)
        return e if a is e.a else ir.Not(a)

    def visit_Select(self, e: ir.Select) -> ir.PrimExpr:
        visit = self.visit_expr
        c, t, f = visit(e.condition), visit(e.true_value), visit(e.false_value)
        if c is e.condition and t is e.true_value and f is e.false_value:
            return e
        return ir.Select(c, t, f)

    def visit_Cast(self, e: ir.Cast) -> ir.PrimExpr:
        v0 = e.value
        if self._direct:
            t = type(v0)
            v = (self._table.get(t) or self._resolve(t))(self, v0)
        else:
            v = self.visit_expr(v0)
        return e if v is v0 else ir.Cast(e.dtype, v)

    def visit_Let(self, e: ir.Let) -> ir.PrimExpr:
        v, b = self.visit_expr(e.value), self.visit_expr(e.body)
        return e if v is e.value and b is e.body else ir.Let(e.var, v, b)

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:
        visit = self.visit_expr
        args = tuple([visit(a) for a in e.args])
        if _same(args, e.args):
            return e
        return ir.Call(e.dtype, e.op, args)

    def visit_Ramp(self, e: ir.Ramp) -> ir.PrimExpr:
        b, s = self.visit_expr(e.base), self.visit_expr(e.stride)
        return e if b is e.base and s is e.stride else ir.Ramp(b, s, e.lanes)

    def visit_Broadcast(self, e: ir.Broadcast) -> ir.PrimExpr:
        v = self.visit_expr(e.value)
        return e if v is e.value else ir.Broadcast(v, e.lanes)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        buf = self.visit_buffer(e.buffer)
        visit = self.visit_expr
        idx = tuple([visit(i) for i in e.indices])
        if buf is e.buffer and _same(idx, e.indices):
            return e
        return ir.BufferLoad(buf, idx)


def _same(a: tuple, b: tuple) -> bool:
    """Same length and the same objects, in order."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):  # noqa: B905 - lengths checked
        if x is not y:
            return False
    return True


class StmtExprMutator(ExprMutator):
    """Rebuild statements and the expressions inside them."""

    def visit_stmt(self, s: ir.Stmt) -> ir.Stmt:
        """Mutate ``s`` (dispatches on its class)."""
        t = type(s)
        return (self._table.get(t) or self._resolve(t))(self, s)

    def visit(self, node: Any) -> Any:
        """Mutate a statement, an expression, or a PrimFunc's body."""
        if isinstance(node, ir.PrimFunc):
            body = self.visit_stmt(node.body)
            return node if body is node.body else node.with_body(body)
        if isinstance(node, ir.Stmt):
            return self.visit_stmt(node)
        return self.visit_expr(node)

    def visit_range(self, r: ir.Range) -> ir.Range:
        mn, ext = self.visit_expr(r.min), self.visit_expr(r.extent)
        return r if mn is r.min and ext is r.extent else ir.Range(mn, ext)

    def visit_region(self, r: ir.BufferRegion) -> ir.BufferRegion:
        buf = self.visit_buffer(r.buffer)
        rg = tuple([self.visit_range(x) for x in r.region])
        return r if buf is r.buffer and _same(rg, r.region) else ir.BufferRegion(buf, rg)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        buf = self.visit_buffer(s.buffer)
        v = self.visit_expr(s.value)
        idx = tuple([self.visit_expr(i) for i in s.indices])
        if buf is s.buffer and v is s.value and _same(idx, s.indices):
            return s
        return ir.BufferStore(buf, v, idx)

    def visit_For(self, s: ir.For) -> ir.Stmt:
        mn, ext = self.visit_expr(s.min), self.visit_expr(s.extent)
        body = self.visit_stmt(s.body)
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return ir.For(s.loop_var, mn, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        c = self.visit_expr(s.condition)
        t = self.visit_stmt(s.then_case)
        e = self.visit_stmt(s.else_case) if s.else_case is not None else None
        if c is s.condition and t is s.then_case and e is s.else_case:
            return s
        return ir.IfThenElse(c, t, e)

    def visit_LetStmt(self, s: ir.LetStmt) -> ir.Stmt:
        v, b = self.visit_expr(s.value), self.visit_stmt(s.body)
        return s if v is s.value and b is s.body else ir.LetStmt(s.var, v, b)

    def visit_AttrStmt(self, s: ir.AttrStmt) -> ir.Stmt:
        v, b = self.visit_expr(s.value), self.visit_stmt(s.body)
        return s if v is s.value and b is s.body else ir.AttrStmt(s.node, s.key, v, b)

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        buf, b = self.visit_buffer(s.buffer), self.visit_stmt(s.body)
        return s if buf is s.buffer and b is s.body else ir.Allocate(buf, b)

    def visit_SeqStmt(self, s: ir.SeqStmt) -> ir.Stmt:
        new = tuple([self.visit_stmt(x) for x in s.seq])
        return s if _same(new, s.seq) else ir.seq(*new)

    def visit_Evaluate(self, s: ir.Evaluate) -> ir.Stmt:
        v = self.visit_expr(s.value)
        return s if v is s.value else ir.Evaluate(v)

    def visit_IterVar(self, iv: ir.IterVar) -> ir.IterVar:
        dom = self.visit_range(iv.dom)
        return iv if dom is iv.dom else ir.IterVar(iv.var, dom, iv.iter_type)

    def visit_Block(self, s: ir.Block) -> ir.Stmt:
        ivs = tuple([self.visit_IterVar(iv) for iv in s.iter_vars])
        reads = tuple([self.visit_region(r) for r in s.reads])
        writes = tuple([self.visit_region(r) for r in s.writes])
        init = self.visit_stmt(s.init) if s.init is not None else None
        body = self.visit_stmt(s.body)
        allocs = tuple([self.visit_buffer(b) for b in s.alloc_buffers])
        if (_same(ivs, s.iter_vars) and _same(reads, s.reads) and _same(writes, s.writes)
                and init is s.init and body is s.body and _same(allocs, s.alloc_buffers)):
            return s
        return replace(s, iter_vars=ivs, reads=reads, writes=writes, init=init, body=body,
                       alloc_buffers=allocs)

    def visit_BlockRealize(self, s: ir.BlockRealize) -> ir.Stmt:
        vals = tuple([self.visit_expr(v) for v in s.iter_values])
        pred = self.visit_expr(s.predicate)
        blk = self.visit_stmt(s.block)
        if _same(vals, s.iter_values) and pred is s.predicate and blk is s.block:
            return s
        return ir.BlockRealize(vals, pred, blk)


class StmtVisitor(StmtExprVisitor):
    """Walk statements only (expressions are not entered)."""

    def visit_expr(self, e: ir.PrimExpr) -> None:
        pass


class StmtMutator(StmtExprMutator):
    """Rebuild statements only; expressions are kept as they are."""

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return e


class _Substitute(StmtExprMutator):
    def __init__(self, vmap: Mapping[ir.Var, ir.PrimExpr],
                 bmap: Mapping[ir.Buffer, ir.Buffer] | None = None) -> None:
        self.vmap = vmap
        self.bmap = bmap or {}

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        return self.vmap.get(e, e)

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.bmap.get(b, b)


def substitute(node: Any, vmap: Mapping[ir.Var, Any],
               bmap: Mapping[ir.Buffer, ir.Buffer] | None = None) -> Any:
    """Replace Vars (and optionally Buffers) in a statement or expression.

    >>> from toolchain.tir.ir import Var
    >>> i, j = Var("i"), Var("j")
    >>> str(substitute(i + 1, {i: j * 4}))
    'j * 4 + 1'
    """
    if not vmap and not bmap:
        return node
    vm = {k: ir.convert(v) for k, v in vmap.items()}
    return _Substitute(vm, bmap).visit(node)


class _PostOrder(StmtExprVisitor):
    def __init__(self, fn: Callable[[Any], None]) -> None:
        self.fn = fn

    def visit_expr(self, e: ir.PrimExpr) -> None:
        _post_order_expr(e, self.fn, self)

    def visit_stmt(self, s: ir.Stmt) -> None:
        super().visit_stmt(s)
        self.fn(s)


_LEAVES = (ir.IntImm, ir.FloatImm, ir.StringImm, ir.Var)


def _post_order_expr(e: ir.PrimExpr, fn: Callable[[Any], None], visitor: _PostOrder) -> None:
    """What ``_PostOrder`` does for an expression, children in :class:`ExprVisitor`'s
    order, without a dispatch and two calls per node (every analysis that collects
    Vars or loads walks whole kernels this way); any other node goes through the
    visitor's dispatch."""
    t = type(e)
    if t in _LEAVES:
        pass
    elif isinstance(e, ir.BinaryOp):
        _post_order_expr(e.a, fn, visitor)
        _post_order_expr(e.b, fn, visitor)
    elif t is ir.BufferLoad:
        for i in e.indices:
            _post_order_expr(i, fn, visitor)
    elif t is ir.Cast or t is ir.Broadcast:
        _post_order_expr(e.value, fn, visitor)
    elif t is ir.Call:
        for a in e.args:
            _post_order_expr(a, fn, visitor)
    elif t is ir.Select:
        _post_order_expr(e.condition, fn, visitor)
        _post_order_expr(e.true_value, fn, visitor)
        _post_order_expr(e.false_value, fn, visitor)
    else:
        StmtExprVisitor.visit_expr(visitor, e)
    fn(e)


def post_order_visit(node: Any, fn: Callable[[Any], None]) -> None:
    """Call ``fn`` on every statement and expression under ``node``, children first."""
    _PostOrder(fn).visit(node)


def free_vars(node: Any) -> list[ir.Var]:
    """Vars used in ``node`` (or a list of nodes), in first-use order, bound ones included."""
    seen: dict[ir.Var, None] = {}

    def f(x: Any) -> None:
        if isinstance(x, ir.Var):
            seen.setdefault(x, None)

    for n in node if isinstance(node, (list, tuple)) else (node,):
        post_order_visit(n, f)
    return list(seen)


def uses_var(node: Any, var: ir.Var) -> bool:
    """True if ``var`` occurs in ``node``."""
    return var in free_vars(node)
