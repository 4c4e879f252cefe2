"""Print any TIR node as readable, indented, TVMScript-like Python text.

``str(node)`` and ``print(func)`` call :func:`script`. The output is deterministic: names
are given in order of definition, and a name used by two different Vars gets a suffix
(``i``, ``i_1``). Consecutive plain serial loops print as one ``T.grid``.

Example::

    >>> from toolchain import te
    >>> A = te.placeholder((4, 4), name="A")
    >>> B = te.compute((4, 4), lambda i, j: A[i, j] * 2.0, name="B")
    >>> print(te.create_prim_func([A, B]))  # doctest: +NORMALIZE_WHITESPACE
    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32")):
        for i, j in T.grid(4, 4):
            with T.block("B"):
                vi = T.axis.spatial(4, i)
                vj = T.axis.spatial(4, j)
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
"""

from __future__ import annotations

import math
from typing import Any

from toolchain.tir import ir

_BIN = {
    ir.Add: ("+", 10), ir.Sub: ("-", 10), ir.Mul: ("*", 11), ir.FloorDiv: ("//", 11),
    ir.FloorMod: ("%", 11), ir.EQ: ("==", 6), ir.NE: ("!=", 6), ir.LT: ("<", 6),
    ir.LE: ("<=", 6), ir.GT: (">", 6), ir.GE: (">=", 6), ir.And: ("and", 4),
    ir.Or: ("or", 3),
}
_MATH = {"exp", "log", "sqrt", "tanh", "erf", "sigmoid", "fabs", "pow", "floor", "ceil",
         "round", "sin", "cos", "exp2", "log2", "log10", "rsqrt", "trunc", "fmod", "isnan",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1",
         "log1p"}
_LOOP_FN = {"parallel": "T.parallel", "vectorized": "T.vectorized", "unrolled": "T.unroll",
            "serial": "T.serial"}


class _Namer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def define(self, obj: Any, hint: str) -> str:
        if id(obj) in self.names:
            return self.names[id(obj)]
        base = hint or "v"
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        self.names[id(obj)] = name
        return name

    def get(self, obj: Any, hint: str) -> str:
        return self.names.get(id(obj)) or self.define(obj, hint)


class ScriptPrinter:
    """Renders nodes to text; one instance keeps the variable names consistent."""

    def __init__(self) -> None:
        self.namer = _Namer()
        self.lines: list[str] = []
        self._keep: list[Any] = []  # keep named objects alive so ids stay unique

    # ---------------------------------------------------------------- expressions
    def var(self, v: ir.Var) -> str:
        self._keep.append(v)
        return self.namer.get(v, v.name)

    def buf(self, b: ir.Buffer) -> str:
        self._keep.append(b)
        return self.namer.get(b, b.name)

    def expr(self, e: Any, prec: int = 0) -> str:
        text, p = self._expr(e)
        return f"({text})" if p < prec else text

    def _expr(self, e: Any) -> tuple[str, int]:  # noqa: C901 - one branch per node kind
        if isinstance(e, (int, float)):
            return repr(e), 100
        if isinstance(e, ir.Var):
            return self.var(e), 100
        if isinstance(e, ir.IntImm):
            if e.dtype == "bool":
                return ("True" if e.value else "False"), 100
            if e.dtype == "int32":
                return (str(e.value), 100) if e.value >= 0 else (str(e.value), 12)
            return f"T.{e.dtype}({e.value})", 100
        if isinstance(e, ir.FloatImm):
            v = float(e.value)
            return (f"T.{e.dtype}({v!r})" if math.isfinite(v) else f'T.{e.dtype}("{v}")'), 100
        if isinstance(e, ir.StringImm):
            return repr(e.value), 100
        if type(e) in _BIN:
            op, p = _BIN[type(e)]
            # left-assoc: the right operand needs parentheses at equal precedence
            return f"{self.expr(e.a, p)} {op} {self.expr(e.b, p + 1)}", p
        if isinstance(e, ir.Div):
            if ir.is_float(e.dtype):
                return f"{self.expr(e.a, 11)} / {self.expr(e.b, 12)}", 11
            return f"T.truncdiv({self.expr(e.a)}, {self.expr(e.b)})", 100
        if isinstance(e, ir.Mod):
            return f"T.truncmod({self.expr(e.a)}, {self.expr(e.b)})", 100
        if isinstance(e, (ir.Min, ir.Max)):
            name = "min" if isinstance(e, ir.Min) else "max"
            return f"T.{name}({self.expr(e.a)}, {self.expr(e.b)})", 100
        if isinstance(e, ir.Not):
            return f"not {self.expr(e.a, 5)}", 5
        if isinstance(e, ir.Select):
            args = ", ".join(self.expr(x) for x in (e.condition, e.true_value, e.false_value))
            return f"T.Select({args})", 100
        if isinstance(e, ir.Cast):
            return f'T.Cast("{e.dtype}", {self.expr(e.value)})', 100
        if isinstance(e, ir.Let):
            return (f"T.Let({self.var(e.var)}, {self.expr(e.value)}, "
                    f"{self.expr(e.body)})"), 100
        if isinstance(e, ir.Call):
            args = ", ".join(self.expr(a) for a in e.args)
            if e.op.startswith("tir."):
                return f"T.{e.op[4:]}({args})", 100
            if e.op in _MATH:
                return f"T.{e.op}({args})", 100
            sep = ", " if args else ""
            return f'T.call_extern("{e.dtype}", "{e.op}"{sep}{args})', 100
        if isinstance(e, ir.Ramp):
            return f"T.Ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes})", 100
        if isinstance(e, ir.Broadcast):
            return f"T.Broadcast({self.expr(e.value)}, {e.lanes})", 100
        if isinstance(e, ir.BufferLoad):
            return f"{self.buf(e.buffer)}[{self.indices(e.indices)}]", 100
        if isinstance(e, ir.PrimExpr):
            return f"<{type(e).__name__}>", 100
        return repr(e), 100

    def indices(self, idx: tuple[ir.PrimExpr, ...]) -> str:
        return ", ".join(self.expr(i) for i in idx) or "()"  # rank 0: A[()]

    def region(self, r: ir.BufferRegion) -> str:
        parts = []
        for rg in r.region:
            if ir.is_const_int(rg.extent, 1):
                parts.append(self.expr(rg.min))
            else:
                hi = rg.extent if ir.is_const_int(rg.min, 0) else _simplify(rg.min + rg.extent)
                parts.append(f"{self.expr(rg.min)}:{self.expr(hi)}")
        return f"{self.buf(r.buffer)}[{', '.join(parts) or '()'}]"

    def buffer_decl(self, b: ir.Buffer) -> str:
        shape = ", ".join(self.expr(s) for s in b.shape)
        if len(b.shape) == 1:
            shape += ","
        extra = ""
        if b.strides:
            extra += f", strides=({', '.join(self.expr(s) for s in b.strides)},)"
        if b.scope != "global":
            extra += f', scope="{b.scope}"'
        if b.swizzle:
            extra += f", swizzle={b.swizzle}"
        return f'(({shape}), "{b.dtype}"{extra})'

    # ---------------------------------------------------------------- statements
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def stmt(self, s: ir.Stmt, depth: int) -> None:  # noqa: C901 - one branch per node kind
        if isinstance(s, ir.SeqStmt):
            for x in s.seq:
                self.stmt(x, depth)
        elif isinstance(s, ir.BufferStore):
            self.emit(depth, f"{self.buf(s.buffer)}[{self.indices(s.indices)}] = "
                             f"{self.expr(s.value)}")
        elif isinstance(s, ir.For):
            self.loop(s, depth)
        elif isinstance(s, ir.BlockRealize):
            self.block(s, depth)
        elif isinstance(s, ir.Block):
            self.block(ir.BlockRealize((), ir.IntImm(1, "bool"), s), depth)
        elif isinstance(s, ir.IfThenElse):
            self.emit(depth, f"if {self.expr(s.condition)}:")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif isinstance(s, ir.LetStmt):
            name = self.namer.define(s.var, s.var.name)
            self._keep.append(s.var)
            self.emit(depth, f"{name}: T.{s.var.dtype} = {self.expr(s.value)}")
            self.stmt(s.body, depth)
        elif isinstance(s, ir.AttrStmt):
            node = s.node
            if isinstance(node, ir.Var):
                node_s = self.var(node)
            elif isinstance(node, ir.Buffer):
                node_s = self.buf(node)
            else:
                node_s = repr(node)
            self.emit(depth, f'with T.attr({node_s}, "{s.key}", {self.expr(s.value)}):')
            self.stmt(s.body, depth + 1)
        elif isinstance(s, ir.Allocate):
            name = self.namer.define(s.buffer, s.buffer.name)
            self._keep.append(s.buffer)
            self.emit(depth, f"{name} = T.allocate{self.buffer_decl(s.buffer)}")
            self.stmt(s.body, depth)
        elif isinstance(s, ir.Evaluate):
            self.emit(depth, self.expr(s.value))
        else:
            self.emit(depth, f"<{type(s).__name__}>")

    def loop(self, s: ir.For, depth: int) -> None:
        def plain(f: ir.For) -> bool:
            return f.kind == "serial" and not f.annotations and ir.is_const_int(f.min, 0)

        if plain(s) and isinstance(s.body, ir.For) and plain(s.body):
            loops = [s]
            while isinstance(loops[-1].body, ir.For) and plain(loops[-1].body):
                loops.append(loops[-1].body)
            names = ", ".join(self.namer.define(f.loop_var, f.loop_var.name) for f in loops)
            self._keep.extend(f.loop_var for f in loops)
            exts = ", ".join(self.expr(f.extent) for f in loops)
            self.emit(depth, f"for {names} in T.grid({exts}):")
            self.stmt(loops[-1].body, depth + 1)
            return
        name = self.namer.define(s.loop_var, s.loop_var.name)
        self._keep.append(s.loop_var)
        if ir.is_const_int(s.min, 0):
            rng = self.expr(s.extent)
        else:
            rng = f"{self.expr(s.min)}, {self.expr(s.min + s.extent)}"
        ann = f", annotations={_dict(s.annotations)}" if s.annotations else ""
        if s.kind == "thread_binding":
            head = f'T.thread_binding({rng}, thread="{s.thread_tag}"{ann})'
        elif s.kind == "serial" and not ann:
            head = f"range({rng})"
        else:
            head = f"{_LOOP_FN[s.kind]}({rng}{ann})"
        self.emit(depth, f"for {name} in {head}:")
        self.stmt(s.body, depth + 1)

    def block(self, r: ir.BlockRealize, depth: int) -> None:
        b = r.block
        self.emit(depth, f'with T.block("{b.name_hint}"):')
        d = depth + 1
        for iv, val in zip(b.iter_vars, r.iter_values, strict=False):
            name = self.namer.define(iv.var, iv.var.name)
            self._keep.append(iv.var)
            if ir.is_const_int(iv.dom.min, 0):
                dom = self.expr(iv.dom.extent)
            else:
                dom = f"({self.expr(iv.dom.min)}, {self.expr(iv.dom.min + iv.dom.extent)})"
            self.emit(d, f"{name} = T.axis.{iv.iter_type}({dom}, {self.expr(val)})")
        if not ir.is_const_int(r.predicate, 1):
            self.emit(d, f"T.where({self.expr(r.predicate)})")
        self.emit(d, f"T.reads({', '.join(self.region(x) for x in b.reads)})")
        self.emit(d, f"T.writes({', '.join(self.region(x) for x in b.writes)})")
        if b.annotations:
            self.emit(d, f"T.block_attr({_dict(b.annotations)})")
        for ab in b.alloc_buffers:
            name = self.namer.define(ab, ab.name)
            self._keep.append(ab)
            self.emit(d, f"{name} = T.alloc_buffer{self.buffer_decl(ab)}")
        if b.init is not None:
            self.emit(d, "with T.init():")
            self.stmt(b.init, d + 1)
        self.stmt(b.body, d)

    def func(self, f: ir.PrimFunc) -> None:
        params = []
        for p in f.params:
            if isinstance(p, ir.Buffer):
                name = self.namer.define(p, p.name)
                self._keep.append(p)
                params.append(f"{name}: T.Buffer{self.buffer_decl(p)}")
            else:
                name = self.namer.define(p, p.name)
                self._keep.append(p)
                params.append(f"{name}: T.{p.dtype}")
        self.emit(0, "@T.prim_func")
        self.emit(0, f"def {f.name}({', '.join(params)}):")
        attrs = {k: v for k, v in f.attrs.items()
                 if not (k == "global_symbol" and v == f.name)}
        if attrs:
            self.emit(1, f"T.func_attr({_dict(attrs)})")
        body = f.body
        if (isinstance(body, ir.BlockRealize) and not body.block.iter_vars
                and body.block.name_hint == "root"):
            blk = body.block
            if blk.alloc_buffers:
                self.emit(1, '# with T.block("root"):')
            for ab in blk.alloc_buffers:
                name = self.namer.define(ab, ab.name)
                self._keep.append(ab)
                self.emit(1, f"{name} = T.alloc_buffer{self.buffer_decl(ab)}")
            self.stmt(blk.body, 1)
        else:
            self.stmt(body, 1)


def _simplify(e: ir.PrimExpr) -> ir.PrimExpr:
    from toolchain.tir.arith import simplify

    return simplify(e)


def _dict(d: Any) -> str:
    items = sorted(d.items(), key=lambda kv: str(kv[0]))
    return "{" + ", ".join(f"{k!r}: {_val(v)}" for k, v in items) + "}"


def _val(v: Any) -> str:
    if isinstance(v, ir.Node):
        return ScriptPrinter().expr(v) if isinstance(v, ir.PrimExpr) else str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    return repr(v)


def script(node: Any) -> str:
    """Text of any IR node (PrimFunc, statement, expression, Buffer, Range, ...)."""
    p = ScriptPrinter()
    if isinstance(node, ir.PrimFunc):
        p.func(node)
        return "\n".join(p.lines)
    if isinstance(node, ir.Stmt):
        p.stmt(node, 0)
        return "\n".join(p.lines)
    if isinstance(node, ir.PrimExpr):
        return p.expr(node)
    if isinstance(node, ir.Buffer):
        return f"T.Buffer{p.buffer_decl(node)}  # {node.name}"
    if isinstance(node, ir.Range):
        return f"T.Range({p.expr(node.min)}, {p.expr(node.extent)})"
    if isinstance(node, ir.BufferRegion):
        return p.region(node)
    if isinstance(node, ir.IterVar):
        return f"T.axis.{node.iter_type}({p.expr(node.dom.extent)}, {p.var(node.var)})"
    return repr(node)
