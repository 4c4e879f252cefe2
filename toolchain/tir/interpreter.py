"""A reference interpreter: run a PrimFunc on numpy arrays (slow but exact).

The function is translated once to Python source (loops become ``for`` loops, buffers
numpy arrays, blocks their bindings + predicate + init) and executed. It runs both
scheduled IR (blocks, any loop kind; thread-bound loops run serially, which is the
meaning of the block program) and lowered IR (flattened buffers, ``Ramp``/``Broadcast``
vectors become numpy index arrays). Intermediate float buffers start as NaN so that a
read before write shows up in the result.

>>> import numpy as np
>>> from toolchain import te
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> a = np.arange(4, dtype="float32"); b = np.zeros(4, "float32")
>>> run(te.create_prim_func([A, B]), a, b)
>>> b.tolist()
[0.0, 2.0, 4.0, 6.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from toolchain.errors import InputError
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprVisitor

_NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
       "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
       "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
       "bool": np.bool_}


#: per dtype string: the numpy scalar type a value is cast to (None: kept as it is) and
#: its kind (``f``, ``i``, ``u``, ``b``: an integer type truncates a float first)
_CASTS: dict[str, tuple[Any, str]] = {}


def _cast(x: Any, dtype: str) -> Any:
    to = _CASTS.get(dtype)
    if to is None:
        t = _NP.get(ir.element_of(dtype))
        to = _CASTS[dtype] = (t, "" if t is None else np.dtype(t).kind)
    t, kind = to
    if t is None or type(x) is t:  # (a scalar of the type already: the cast gives it back)
        return x
    if kind == "f" and (type(x) is float or isinstance(x, np.floating)):
        return t(x)  # a float scalar to another float type: the same rounding as astype
    arr = np.asarray(x)
    integer = kind in "iu"
    if integer and arr.dtype.kind == "f":
        arr = np.trunc(arr)
    out = arr.astype(t)
    return out if out.ndim else out[()]


def _ck(v: Any, n: Any, name: str, dim: int) -> Any:
    """``v`` if it is a valid index of a dimension of extent ``n``, else IndexError.

    numpy would wrap a negative index (and a flattened buffer would silently reach into the
    next row), hiding an out-of-bounds access that C would make.
    """
    if isinstance(v, np.ndarray):
        if v.size and (v.min() < 0 or v.max() >= n):
            bad = v[(v < 0) | (v >= n)][0]
            raise IndexError(f"interpreter: {name} index {bad} at dimension {dim} is "
                             f"outside [0, {n})")
    elif not 0 <= v < n:
        raise IndexError(f"interpreter: {name} index {v} at dimension {dim} is outside "
                         f"[0, {n})")
    return v


def _tdiv(a: Any, b: Any) -> Any:
    if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
        q = abs(int(a)) // abs(int(b))
        return q if (a >= 0) == (b > 0) else -q
    return np.trunc(np.asarray(a) / b).astype(np.result_type(a, b))


def _erf(x: Any) -> Any:
    arr = np.asarray(x)
    out = np.vectorize(math.erf, otypes=[np.float64])(arr).astype(arr.dtype)
    return out if out.ndim else out[()]


def _sigmoid(x: Any) -> Any:
    one = np.asarray(x).dtype.type(1)
    return one / (one + np.exp(-x))


_MATH: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "erf": _erf,
    "sigmoid": _sigmoid, "fabs": np.abs, "pow": np.power, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "sin": np.sin, "cos": np.cos, "tan": np.tan, "exp2": np.exp2,
    "log2": np.log2,
    "log10": np.log10, "trunc": np.trunc, "fmod": np.fmod, "isnan": np.isnan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "expm1": np.expm1, "log1p": np.log1p,
    "rsqrt": lambda x: np.asarray(x).dtype.type(1) / np.sqrt(x),
}


class _Gen:
    """Translate TIR to Python source."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.keep: list[Any] = []
        self.lines: list[str] = []
        self.data_buffers: dict[ir.Var, list[ir.Buffer]] = {}

    def name(self, obj: Any, hint: str) -> str:
        if id(obj) not in self.names:
            clean = "".join(c if c.isalnum() else "_" for c in hint)
            self.names[id(obj)] = f"_{clean}_{len(self.names)}"
            self.keep.append(obj)
        return self.names[id(obj)]

    def view(self, b: ir.Buffer) -> str:
        return self.name(b, b.name + "_v")

    def data(self, v: ir.Var) -> str:
        return self.name(v, v.name + "_d")

    # ------------------------------------------------------------------ exprs
    def e(self, x: ir.PrimExpr) -> str:  # noqa: C901 - one branch per node kind
        if isinstance(x, ir.Var):
            return self.name(x, x.name)
        if isinstance(x, ir.IntImm):
            return "True" if x.dtype == "bool" and x.value else (
                "False" if x.dtype == "bool" else repr(x.value))
        if isinstance(x, ir.FloatImm):
            v = float(x.value)
            return f"_np.{x.dtype}({v!r})" if math.isfinite(v) else f"_np.{x.dtype}('{v}')"
        if isinstance(x, ir.StringImm):
            return repr(x.value)
        ops = {ir.Add: "+", ir.Sub: "-", ir.Mul: "*", ir.FloorDiv: "//", ir.FloorMod: "%",
               ir.EQ: "==", ir.NE: "!=", ir.LT: "<", ir.LE: "<=", ir.GT: ">", ir.GE: ">="}
        if type(x) in ops:
            return f"({self.e(x.a)} {ops[type(x)]} {self.e(x.b)})"
        if isinstance(x, ir.And):
            vec = ir.lanes_of(x.dtype) > 1
            return f"({self.e(x.a)} {'&' if vec else 'and'} {self.e(x.b)})"
        if isinstance(x, ir.Or):
            vec = ir.lanes_of(x.dtype) > 1
            return f"({self.e(x.a)} {'|' if vec else 'or'} {self.e(x.b)})"
        if isinstance(x, ir.Not):
            return f"_np.logical_not({self.e(x.a)})"
        if isinstance(x, ir.Div):
            if ir.is_float(x.dtype):
                return f"({self.e(x.a)} / {self.e(x.b)})"
            return f"_tdiv({self.e(x.a)}, {self.e(x.b)})"
        if isinstance(x, ir.Mod):
            return f"(lambda _a, _b: _a - _b * _tdiv(_a, _b))({self.e(x.a)}, {self.e(x.b)})"
        if isinstance(x, (ir.Min, ir.Max)):
            fn = "_np.minimum" if isinstance(x, ir.Min) else "_np.maximum"
            return f"_cast({fn}({self.e(x.a)}, {self.e(x.b)}), {x.dtype!r})"
        if isinstance(x, ir.Select):
            if ir.lanes_of(x.dtype) > 1:
                return (f"_np.where({self.e(x.condition)}, {self.e(x.true_value)}, "
                        f"{self.e(x.false_value)})")
            return f"({self.e(x.true_value)} if {self.e(x.condition)} else " \
                   f"{self.e(x.false_value)})"
        if isinstance(x, ir.Cast):
            return f"_cast({self.e(x.value)}, {x.dtype!r})"
        if isinstance(x, ir.Let):
            return f"(lambda {self.e(x.var)}: {self.e(x.body)})({self.e(x.value)})"
        if isinstance(x, ir.Ramp):
            return f"_np.arange({x.lanes}) * {self.e(x.stride)} + {self.e(x.base)}"
        if isinstance(x, ir.Broadcast):
            return f"_np.full({x.lanes}, {self.e(x.value)})"
        if isinstance(x, ir.BufferLoad):
            return f"{self.view(x.buffer)}[{self.idx(x.indices, x.buffer)}]"
        if isinstance(x, ir.Call):
            return self.call(x)
        raise TypeError(f"interpreter: cannot evaluate {type(x).__name__}")

    def idx(self, indices: tuple[ir.PrimExpr, ...], buf: ir.Buffer | None = None) -> str:
        if not indices:
            return "()"  # a rank-0 buffer: numpy indexes a 0-d array with ()
        if buf is None:
            parts = [self.e(i) for i in indices]
        else:  # checked: an out-of-bounds index is an error, not numpy's wrap-around
            parts = [f"_ck({self.e(i)}, {self.e(n)}, {buf.name!r}, {d})"
                     for d, (i, n) in enumerate(zip(indices, buf.shape, strict=True))]
        return ", ".join(parts) + ("," if len(indices) == 1 else "")

    def call(self, x: ir.Call) -> str:
        if x.op == "tir.if_then_else":
            c, t, f = x.args
            if ir.lanes_of(c.dtype) > 1:  # a condition per lane (each side read whole)
                return f"_np.where({self.e(c)}, {self.e(t)}, {self.e(f)})"
            # one condition (for every lane too): only the side taken is read, as in C
            return f"({self.e(t)} if {self.e(c)} else {self.e(f)})"
        args = ", ".join(self.e(a) for a in x.args)
        if x.op in _MATH:
            return f"_cast(_math[{x.op!r}]({args}), {x.dtype!r})"
        if x.op == "tir.address_of":
            load = x.args[0]
            return f"_Addr({self.view(load.buffer)}, ({self.idx(load.indices)}))"
        if x.op.startswith("tir."):
            return "None"  # sync/barrier style builtins have no effect when run serially
        return f"_extern[{x.op!r}]({args})"

    # ------------------------------------------------------------------ stmts
    def emit(self, d: int, text: str) -> None:
        self.lines.append("    " * d + text)

    def alloc(self, b: ir.Buffer, d: int) -> None:
        shape = ", ".join(self.e(s) for s in b.shape) + ("," if b.ndim == 1 else "")
        fill = "_np.nan" if ir.is_float(b.dtype) else "0"
        dt = ir.element_of(b.dtype)
        self.emit(d, f"{self.data(b.data)} = _np.full(({shape}), {fill}, dtype=_np.{dt})")
        self.bind_views(b.data, d)

    def bind_views(self, data: ir.Var, d: int) -> None:
        for b in self.data_buffers.get(data, []):
            shape = ", ".join(self.e(s) for s in b.shape) + ("," if b.ndim == 1 else "")
            self.emit(d, f"{self.view(b)} = {self.data(data)}.reshape(({shape}))")

    def s(self, x: ir.Stmt, d: int) -> None:  # noqa: C901 - one branch per node kind
        if isinstance(x, ir.SeqStmt):
            for y in x.seq:
                self.s(y, d)
        elif isinstance(x, ir.BufferStore):
            val = f"_cast({self.e(x.value)}, {x.buffer.dtype!r})"
            self.emit(d, f"{self.view(x.buffer)}[{self.idx(x.indices, x.buffer)}] = {val}")
        elif isinstance(x, ir.For):
            v = self.e(x.loop_var)
            self.emit(d, f"for {v} in range({self.e(x.min)}, {self.e(x.min)} + "
                         f"{self.e(x.extent)}):")
            self.s(x.body, d + 1)
        elif isinstance(x, ir.BlockRealize):
            self.block(x, d)
        elif isinstance(x, ir.IfThenElse):
            self.emit(d, f"if {self.e(x.condition)}:")
            self.s(x.then_case, d + 1)
            if x.else_case is not None:
                self.emit(d, "else:")
                self.s(x.else_case, d + 1)
        elif isinstance(x, ir.LetStmt):
            self.emit(d, f"{self.e(x.var)} = {self.e(x.value)}")
            self.s(x.body, d)
        elif isinstance(x, ir.AttrStmt):
            self.s(x.body, d)
        elif isinstance(x, ir.Allocate):
            self.alloc(x.buffer, d)
            self.s(x.body, d)
        elif isinstance(x, ir.Evaluate):
            self.emit(d, self.e(x.value))
        else:
            raise TypeError(f"interpreter: cannot run {type(x).__name__}")
        self.emit(d, "pass")

    def block(self, r: ir.BlockRealize, d: int) -> None:
        b = r.block
        for iv, val in zip(b.iter_vars, r.iter_values, strict=True):
            self.emit(d, f"{self.e(iv.var)} = {self.e(val)}")
        if not ir.is_const_int(r.predicate, 1):
            self.emit(d, f"if {self.e(r.predicate)}:")
            d += 1
        for ab in b.alloc_buffers:
            self.alloc(ab, d)
        if b.init is not None:
            conds = [f"{self.e(iv.var)} == {self.e(iv.dom.min)}" for iv in b.iter_vars
                     if iv.iter_type == "reduce"]
            self.emit(d, f"if {' and '.join(conds) or 'True'}:")
            self.s(b.init, d + 1)
        self.s(b.body, d)


class _Buffers(StmtExprVisitor):
    def __init__(self) -> None:
        self.by_data: dict[ir.Var, list[ir.Buffer]] = {}

    def add(self, b: ir.Buffer) -> None:
        lst = self.by_data.setdefault(b.data, [])
        if all(x is not b for x in lst):
            lst.append(b)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        self.add(e.buffer)
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self.add(s.buffer)
        super().visit_BufferStore(s)

    def visit_Allocate(self, s: ir.Allocate) -> None:
        self.add(s.buffer)
        super().visit_Allocate(s)

    def visit_Block(self, s: ir.Block) -> None:
        for b in s.alloc_buffers:
            self.add(b)
        super().visit_Block(s)


class _Addr:
    """A pointer into an array, passed to extern functions (``tir.address_of``)."""

    def __init__(self, array: np.ndarray, index: tuple[Any, ...]) -> None:
        self.array = array
        self.index = index


def compile_func(func: ir.PrimFunc,
                 externs: Mapping[str, Callable[..., Any]] | None = None) -> Callable[..., None]:
    """Translate ``func`` once; the result is called with one argument per param."""
    g = _Gen()
    finder = _Buffers()
    finder.visit_stmt(func.body)
    for p in func.params:
        if isinstance(p, ir.Buffer):
            finder.add(p)
    g.data_buffers = finder.by_data
    args = [g.data(p.data) if isinstance(p, ir.Buffer) else g.e(p) for p in func.params]
    g.emit(0, f"def _kernel({', '.join(args)}):")
    # bind symbolic shape vars from the arrays, then the views of every param buffer
    bound: set[ir.Var] = {p for p in func.params if isinstance(p, ir.Var)}
    for p in func.params:
        if isinstance(p, ir.Buffer):
            for dim, s in enumerate(p.shape):
                if isinstance(s, ir.Var) and s not in bound:
                    bound.add(s)
                    g.emit(1, f"{g.e(s)} = {g.data(p.data)}.shape[{dim}]")
    for p in func.params:
        if isinstance(p, ir.Buffer):
            g.bind_views(p.data, 1)
    g.s(func.body, 1)
    src = "\n".join(g.lines)
    env: dict[str, Any] = {"_np": np, "_cast": _cast, "_ck": _ck, "_tdiv": _tdiv, "_math": _MATH,
                           "_extern": dict(externs or {}), "_Addr": _Addr}
    exec(compile(src, f"<tir {func.name}>", "exec"), env)  # noqa: S102 - our own codegen
    kernel = env["_kernel"]
    kernel.source = src
    return kernel


def run(func: ir.PrimFunc, *args: Any,
        externs: Mapping[str, Callable[..., Any]] | None = None) -> None:
    """Run ``func`` in place on numpy arrays (one per Buffer param) and scalars.

    Raises InputError naming the argument if a shape or dtype does not match.
    """
    if len(args) != len(func.params):
        raise InputError(f"{func.name} takes {len(func.params)} arguments "
                         f"({', '.join(_pname(p) for p in func.params)}), got {len(args)}")
    sym: dict[ir.Var, int] = {}
    for p, a in zip(func.params, args, strict=True):
        if isinstance(p, ir.Buffer):
            _check_array(func, p, a, sym)
    compile_func(func, externs)(*args)


def _pname(p: Any) -> str:
    return p.name


def _check_array(func: ir.PrimFunc, p: ir.Buffer, a: Any, sym: dict[ir.Var, int]) -> None:
    if not isinstance(a, np.ndarray):
        raise InputError(f"{func.name}: argument {p.name!r} must be a numpy array, "
                         f"got {type(a).__name__}")
    want_dt = np.dtype(_NP[ir.element_of(p.dtype)])
    if a.dtype != want_dt:
        raise InputError(f"{func.name}: argument {p.name!r} has dtype {a.dtype}, "
                         f"expected {p.dtype}")
    if p.ndim == 1 and isinstance(p.shape[0], ir.IntImm) and a.ndim != 1:
        # a flattened parameter (lowered IR) takes the array's elements in row-major order
        if a.size != p.shape[0].value:
            raise InputError(f"{func.name}: argument {p.name!r} has {a.size} elements "
                             f"(shape {tuple(a.shape)}), expected {p.shape[0].value}")
        ok = True
    else:
        ok = a.ndim == p.ndim
    if ok and a.ndim == p.ndim:
        for s, n in zip(p.shape, a.shape, strict=True):
            if isinstance(s, ir.IntImm) and s.value != n:
                ok = False
            elif isinstance(s, ir.Var):
                if sym.setdefault(s, n) != n:
                    ok = False
    if not ok:
        want = "(" + ", ".join(str(s) for s in p.shape) + ")"
        raise InputError(f"{func.name}: argument {p.name!r} has shape {tuple(a.shape)}, "
                         f"expected {want}")
    if not a.flags.c_contiguous:
        raise InputError(f"{func.name}: argument {p.name!r} must be C-contiguous "
                         "(use np.ascontiguousarray)")
