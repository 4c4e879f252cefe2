"""A tiny, safe parser for the ``behaviour`` of a tensor intrinsic (no ``eval``).

Grammar (whitespace free-form)::

    stmt   := access ("+=" | "=") expr
    expr   := shift ("+" shift)*
    shift  := term (">>" term)*
    term   := factor ("*" factor)*
    factor := access | "(" expr ")" | ("min" | "max") "(" expr "," expr ")" | NAME | INT
    access := NAME "[" index ("," index)* "]"
    index  := iterm (("+" | "-") iterm)*        an affine expression of loop variables
    iterm  := INT | NAME | INT "*" NAME | NAME "*" INT

``+=`` accumulates over the variables that do not index the output (a GEMM); ``=`` is an
elementwise operation (an accelerator's vector ALU). A bare ``NAME`` is a scalar operand
(an instruction's immediate), matched by ``tensorize`` against any loop-invariant value.
:func:`behaviour_func` turns a parsed statement, the loop extents and the operand dtypes
into the intrinsic's description PrimFunc (a ``te.sum`` over the variables that do not
index the output, with operands cast to the output dtype), without its init statement —
the intrinsic only accumulates.

>>> b = parse_behaviour("C[i, j] += A[i, k] * B[k, j]")
>>> b.output.name, [a.name for a in b.inputs()]
('C', ['A', 'B'])
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass

from toolchain import te
from toolchain.errors import TargetError
from toolchain.tir import ir

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\+=|>>|[\[\](),=+*-]))")


@dataclass(frozen=True)
class Affine:
    """``const + Σ coef * var``."""

    terms: tuple[tuple[str, int], ...]
    const: int = 0


@dataclass(frozen=True)
class Access:
    """``name[index, ...]``."""

    name: str
    index: tuple[Affine, ...]


@dataclass(frozen=True)
class BinOp:
    """``lhs op rhs`` with ``op`` in ``+``, ``*``, ``>>``, ``min``, ``max``."""

    op: str
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True)
class Scalar:
    """A scalar operand (an immediate), e.g. ``imm`` in ``C[i] = A[i] >> imm``."""

    name: str


@dataclass(frozen=True)
class Const:
    """An integer constant, e.g. ``0`` in ``C[i] = 0`` (zeroing accumulators)."""

    value: int


Expr = Access | BinOp | Scalar | Const


@dataclass(frozen=True)
class Behaviour:
    """A parsed ``out[...] += expr`` (``accumulate``) or ``out[...] = expr``."""

    output: Access
    expr: Expr
    accumulate: bool = True

    def inputs(self) -> list[Access]:
        """The first access of each input operand, in order of appearance."""
        seen: dict[str, Access] = {}

        def walk(e: Expr) -> None:
            if isinstance(e, Access):
                seen.setdefault(e.name, e)
            elif isinstance(e, BinOp):
                walk(e.lhs)
                walk(e.rhs)

        walk(self.expr)
        return list(seen.values())

    def scalars(self) -> list[str]:
        """Names of the scalar operands, in order of appearance.

        >>> parse_behaviour("C[i] = max(A[i], lo)").scalars()
        ['lo']
        """
        out: list[str] = []

        def walk(e: Expr) -> None:
            if isinstance(e, Scalar) and e.name not in out:
                out.append(e.name)
            elif isinstance(e, BinOp):
                walk(e.lhs)
                walk(e.rhs)

        walk(self.expr)
        return out


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                self.fail(f"unexpected character {text[pos:].strip()[:1]!r} at column {pos + 1}")
            num, name, sym = m.groups()
            self.toks.append(("int", num) if num else ("name", name) if name else ("sym", sym))
            pos = m.end()
        self.i = 0

    def fail(self, msg: str) -> None:
        raise TargetError(f"{self.where}: behaviour {self.text!r}: {msg}")

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, kind: str, value: str | None = None) -> str:
        t = self.peek()
        if t is None or t[0] != kind or (value is not None and t[1] != value):
            want = value or kind
            got = "the end" if t is None else repr(t[1])
            self.fail(f"expected {want!r}, found {got}")
        self.i += 1
        return t[1]

    def at(self, value: str) -> bool:
        t = self.peek()
        return t is not None and t[0] == "sym" and t[1] == value

    def stmt(self) -> Behaviour:
        out = self.access()
        acc = self.at("+=")
        if not acc and not self.at("="):
            self.take("sym", "+=")
        self.i += 1
        e = self.expr()
        if self.peek() is not None:
            self.fail(f"unexpected {self.peek()[1]!r} after the expression")
        return Behaviour(out, e, acc)

    def expr(self) -> Expr:
        e = self.shift()
        while self.at("+"):
            self.i += 1
            e = BinOp("+", e, self.shift())
        return e

    def shift(self) -> Expr:
        e = self.term()
        while self.at(">>"):
            self.i += 1
            e = BinOp(">>", e, self.term())
        return e

    def term(self) -> Expr:
        e = self.factor()
        while self.at("*"):
            self.i += 1
            e = BinOp("*", e, self.factor())
        return e

    def factor(self) -> Expr:
        if self.at("("):
            self.i += 1
            e = self.expr()
            self.take("sym", ")")
            return e
        t = self.peek()
        if t is not None and t[0] == "int":
            self.i += 1
            return Const(int(t[1]))
        nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
        if t is not None and t[0] == "name" and t[1] in ("min", "max") and nxt == ("sym", "("):
            self.i += 2
            a = self.expr()
            self.take("sym", ",")
            b = self.expr()
            self.take("sym", ")")
            return BinOp(t[1], a, b)
        if t is not None and t[0] == "name" and nxt != ("sym", "["):
            self.i += 1
            return Scalar(t[1])
        return self.access()

    def access(self) -> Access:
        name = self.take("name")
        self.take("sym", "[")
        idx = [self.index()]
        while self.at(","):
            self.i += 1
            idx.append(self.index())
        self.take("sym", "]")
        return Access(name, tuple(idx))

    def index(self) -> Affine:
        terms: dict[str, int] = {}
        const, sign = 0, 1
        while True:
            t = self.peek()
            if t is None:
                self.fail("index ended early")
            if t[0] == "int":
                c = int(self.take("int"))
                if self.at("*"):
                    self.i += 1
                    v = self.take("name")
                    terms[v] = terms.get(v, 0) + sign * c
                else:
                    const += sign * c
            else:
                v = self.take("name")
                c = 1
                if self.at("*"):
                    self.i += 1
                    c = int(self.take("int"))
                terms[v] = terms.get(v, 0) + sign * c
            if self.at("+") or self.at("-"):
                sign = 1 if self.take("sym") == "+" else -1
                continue
            return Affine(tuple(terms.items()), const)


def parse_behaviour(text: str, where: str = "intrinsic") -> Behaviour:
    """Parse ``text`` (see the module grammar); errors name ``where`` and the column."""
    return _Parser(text, where).stmt()


def binop(op: str, x: ir.PrimExpr, y: ir.PrimExpr) -> ir.PrimExpr:
    """The TIR expression of a behaviour operator (``>>`` is ``tir.shift_right``).

    >>> str(binop("max", ir.Var("a"), ir.IntImm(3)))
    'T.max(a, 3)'
    """
    if op == "+":
        return x + y
    if op == "*":
        return x * y
    if op == "min":
        return ir.Min(x, y)
    if op == "max":
        return ir.Max(x, y)
    return ir.Call(x.dtype, "tir.shift_right", [x, y])


def _extent_of(a: Affine, extents: dict[str, int], where: str, name: str) -> int:
    hi = a.const
    for v, c in a.terms:
        if v not in extents:
            raise TargetError(f"{where}: index variable {v!r} of {name} has no extent; "
                              f"extents give {', '.join(extents) or 'none'}")
        if c < 0:
            raise TargetError(f"{where}: {name}: negative coefficient of {v!r} is not "
                              "supported")
        hi += c * (extents[v] - 1)
    return hi + 1


def behaviour_func(b: Behaviour, extents: dict[str, int], dtypes: dict[str, str],
                   where: str = "intrinsic") -> ir.PrimFunc:
    """The description PrimFunc of ``b`` (buffers: inputs in order of appearance, then the
    output), without init.

    >>> f = behaviour_func(parse_behaviour("C[i, j] += A[i, k] * B[k, j]"),
    ...                    {"i": 2, "j": 4, "k": 3}, {"A": "float32", "B": "float32",
    ...                                               "C": "float32"})
    >>> [(x.name, [int(d.value) for d in x.shape]) for x in f.buffers]
    [('A', [2, 3]), ('B', [3, 4]), ('C', [2, 4])]
    """
    from toolchain.tir.schedule import state as st

    for name, ext in extents.items():
        if not isinstance(ext, int) or isinstance(ext, bool) or ext <= 0:
            raise TargetError(f"{where}: extent of {name!r} must be a positive integer, "
                              f"got {ext!r}")
    operands = [*b.inputs(), b.output]
    if any(a.name == b.output.name for a in b.inputs()):
        raise TargetError(f"{where}: {b.output.name} is the output; it may appear only on the "
                          "left of +=")
    for a in operands:
        if a.name not in dtypes:
            raise TargetError(f"{where}: operand {a.name!r} has no dtype; dtypes give "
                              f"{', '.join(dtypes) or 'none'}")
    out_vars = []
    for a in b.output.index:
        if len(a.terms) != 1 or a.terms[0][1] != 1 or a.const:
            raise TargetError(f"{where}: every index of the output {b.output.name} must be "
                              "one loop variable (like C[i, j])")
        out_vars.append(a.terms[0][0])
    red_vars = [v for v in extents if v not in out_vars]
    if not b.accumulate and red_vars:
        raise TargetError(f"{where}: {', '.join(red_vars)} do(es) not index the output "
                          f"{b.output.name}; an elementwise '=' behaviour has no reduction "
                          "(use '+=' to accumulate)")
    if b.accumulate and not red_vars:
        raise TargetError(f"{where}: the behaviour must accumulate over at least one loop "
                          "variable that does not index the output (like k in "
                          "C[i, j] += A[i, k] * B[k, j])")
    unused = [v for v in out_vars if v not in extents]
    if unused:
        raise TargetError(f"{where}: output index {unused[0]!r} has no extent")
    tensors = {}
    for a in b.inputs():
        shape = [_extent_of(x, extents, where, a.name) for x in a.index]
        tensors[a.name] = te.placeholder(shape, dtypes[a.name], a.name)
    odt = dtypes[b.output.name]
    raxes = {v: te.reduce_axis((0, extents[v]), name=v) for v in red_vars}
    scalars = {n: te.var(n, dtypes.get(n, odt)) for n in b.scalars()}

    def lower(e: Expr, env: dict[str, ir.PrimExpr]) -> ir.PrimExpr:
        if isinstance(e, Scalar):
            return scalars[e.name]
        if isinstance(e, Const):
            return ir.FloatImm(float(e.value), odt) if ir.is_float(odt) else ir.IntImm(e.value,
                                                                                      odt)
        if isinstance(e, BinOp):
            x, y = lower(e.lhs, env), lower(e.rhs, env)
            return binop(e.op, x, y)
        idx = []
        for a in e.index:
            v: ir.PrimExpr = ir.IntImm(a.const)
            for n, c in a.terms:
                v = v + env[n] * c if c != 1 else v + env[n]
            idx.append(v)
        load = tensors[e.name][tuple(idx)]
        return te.cast(load, odt) if tensors[e.name].dtype != odt else load

    def body(*ivs: ir.PrimExpr) -> ir.PrimExpr:
        env: dict[str, ir.PrimExpr] = dict(zip(out_vars, ivs, strict=True))
        env.update(raxes)
        e = lower(b.expr, env)
        return te.sum(e, axis=list(raxes.values())) if raxes else e

    # name the description's loops after the behaviour's variables (error messages)
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(v, inspect.Parameter.POSITIONAL_OR_KEYWORD) for v in out_vars])
    shape = [extents[v] for v in out_vars]
    out = te.compute(shape, body, name=b.output.name)
    f = te.create_prim_func([*tensors.values(), out])
    (r,) = [x for x in st.all_blocks(f) if x.block.name_hint == b.output.name]
    f = st.replace_block(f, r.block, dataclasses.replace(r.block, init=None))
    return _drop_unit_loops(f)


def _drop_unit_loops(f: ir.PrimFunc) -> ir.PrimFunc:
    """Remove loops of extent 1 (their variable becomes 0): schedules elide such loops
    (``compute_at`` of a one-row region has none), so the nest to match has none either.

    Before: ``for i, j in T.grid(1, 4): C[vi, vj] ...``; after: ``for j in range(4):`` with
    ``vi`` bound to 0 — the matched tile then sits at one row of a 2-D operand.
    """
    from toolchain.tir.functor import StmtMutator, substitute

    class _Drop(StmtMutator):
        def visit_For(self, s: ir.For) -> ir.Stmt:  # noqa: N802 - visitor naming
            if ir.is_const_int(s.extent, 1) and ir.is_const_int(s.min, 0):
                return self.visit_stmt(substitute(s.body, {s.loop_var: ir.IntImm(0)}))
            return super().visit_For(s)

    body = _Drop().visit_stmt(f.body)
    return ir.PrimFunc(f.params, body, f.name, dict(f.attrs)) if body is not f.body else f
