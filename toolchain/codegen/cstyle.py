"""One renderer for the C family over lowered TIR; dialects override tables and hooks.

:class:`CStyleRenderer` walks a lowered :class:`~toolchain.tir.ir.PrimFunc` (no blocks,
1-D buffers, vector ``Ramp``/``Broadcast`` expressions) and fills the jinja2 template
``templates/c/kernel.c.j2``. A dialect (plain C in :mod:`.c`, CUDA later) changes only:

* ``type_map`` (TIR dtype -> C type), ``includes``, ``kernel_prefix`` (``__global__``),
  ``smem_prefix`` (``__shared__``), ``barrier`` (``__syncthreads()``),
* ``code_for_workitem`` (thread tag -> index expression) and :meth:`render_thread_loop`,
* :meth:`render_parallel_pragma` / :meth:`render_simd_pragma`, ``math_suffix``,
* ``helper_qualifier`` (``static inline``) for the helper functions the kernel references
  (``kiln_min_float``, ``kiln_floordiv_int32_t``, ...: only those it uses are defined, from
  ``templates/c/helpers.c.j2``).

Names are made C identifiers by :mod:`.names` (never a keyword, a libc/libm name, a macro
or a helper); math intrinsics are spelled as :mod:`.math_intrinsics` says (``round`` is
``nearbyint``: halves to even).

>>> from toolchain import te
>>> from toolchain.tir.transform import lower
>>> from toolchain.codegen.c import CRenderer
>>> A = te.placeholder((64,), name="A")
>>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
>>> src = CRenderer().render(lower(te.create_prim_func([A, B])))
>>> "B[i] = A[i] + 1.0f;" in src.code
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import jinja2

from toolchain.codegen import cvector
from toolchain.codegen.artifact import support_of
from toolchain.codegen.fastmath import FAST_OPS, FUNCTIONS, SUPPORT_NAMES, render_fastmath
from toolchain.codegen.math_intrinsics import INTRINSICS
from toolchain.codegen.names import HELPER_PREFIX, Namer, is_reserved, sanitize
from toolchain.errors import UnsupportedError
from toolchain.tir import arith, ir
from toolchain.tir.analysis import written_buffers
from toolchain.tir.functor import ExprMutator, StmtExprVisitor, free_vars, post_order_visit
from toolchain.tir.structural import expr_key

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"

__all__ = ["ATOM", "INTRINSICS", "CSource", "CStyleRenderer", "Namer", "is_reserved",
           "render_helpers", "sanitize"]


def render_helpers(helpers: Iterable[Mapping[str, str]], qualifier: str = "static inline"
                   ) -> str:
    """C definitions of ``helpers`` (entries of :meth:`CStyleRenderer.helper_list`, from
    one or several kernels: each name defined once, sorted) for files that hold several
    kernels, such as a bundle's ``kernels.c``.

    >>> print(render_helpers([{"kind": "max", "type": "bool", "name": "kiln_max_bool"}]))
    static inline bool kiln_max_bool(bool a, bool b) { return a > b ? a : b; }
    """
    unique = {h["name"]: dict(h) for h in helpers}
    fast = render_fastmath((h["kind"] for h in unique.values()), qualifier)
    plain = [unique[k] for k in sorted(unique) if unique[k]["kind"] not in FUNCTIONS]
    env = c_templates(keep_trailing_newline=False)
    text = env.get_template("c/helpers.c.j2").render(helpers=plain, qualifier=qualifier)
    return "\n\n".join(t for t in (text.strip("\n"), fast) if t)


@dataclass
class CSource:
    """Rendered source plus what the runtime needs to call it."""

    code: str
    entry: str
    #: scalar arguments appended after the function's params: symbolic sizes, in order
    extra_args: list[ir.Var] = field(default_factory=list)
    uses_openmp: bool = False
    uses_simd_pragma: bool = False
    #: CUDA: one entry per kernel (name, grid and block extents as C expressions)
    kernels: list[dict[str, Any]] = field(default_factory=list)


# C operator precedence (higher binds tighter)
_BINOP = {
    ir.Mul: ("*", 13), ir.Div: ("/", 13), ir.Mod: ("%", 13), ir.Add: ("+", 12),
    ir.Sub: ("-", 12), ir.LT: ("<", 10), ir.LE: ("<=", 10), ir.GT: (">", 10),
    ir.GE: (">=", 10), ir.EQ: ("==", 9), ir.NE: ("!=", 9), ir.And: ("&&", 5),
    ir.Or: ("||", 4),
}
_ATOM = 20
#: the precedence of an atom (a name, a call, a parenthesised expression): for dialects'
#: ``expr_*`` hooks
ATOM = _ATOM


def _loads(e: ir.PrimExpr) -> set[Any]:
    """The memory reads in ``e`` (keys of its ``BufferLoad`` nodes)."""
    found: set[Any] = set()
    post_order_visit(e, lambda n: found.add(expr_key(n)) if isinstance(n, ir.BufferLoad)
                     else None)
    return found


def conditional_loads(e: ir.Select) -> bool:
    """Whether a value of ``e`` reads memory its condition does not (``c ? x[i] : 0``,
    ``x[i] < 0 ? x[i] * s[i] : x[i]``); ``x[i] < 0 ? 0 : x[i]`` does not."""
    return bool((_loads(e.true_value) | _loads(e.false_value)) - _loads(e.condition))


@functools.cache
def c_templates(keep_trailing_newline: bool = True) -> jinja2.Environment:
    """The jinja2 environment of ``templates/`` for C text (made once: jinja2 keeps the
    compiled templates, so rendering a bundle does not recompile them)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=keep_trailing_newline,
                              undefined=jinja2.StrictUndefined)


def free_scalars(func: ir.PrimFunc, bound: set[ir.Var] | None = None,
                 used: list[ir.Var] | None = None) -> list[ir.Var]:
    """Scalar variables the body uses but nothing binds (symbolic sizes; ``bound``: the
    parameters, default all of them), sorted by their C name: the trailing arguments of
    the C and LLVM kernels. ``used``: ``free_vars(func.body)``, where the caller has it."""
    if bound is None:
        bound = {p.data if isinstance(p, ir.Buffer) else p for p in func.params}
    defined: set[ir.Var] = set(bound)

    class _Def(StmtExprVisitor):
        def visit_For(self, s: ir.For) -> None:
            defined.add(s.loop_var)
            super().visit_For(s)

        def visit_LetStmt(self, s: ir.LetStmt) -> None:
            defined.add(s.var)
            super().visit_LetStmt(s)

        def visit_Let(self, e: ir.Let) -> None:
            defined.add(e.var)
            super().visit_Let(e)

        def visit_Allocate(self, s: ir.Allocate) -> None:
            defined.add(s.buffer.data)
            for d in s.buffer.shape:
                self.visit_expr(d)
            super().visit_Allocate(s)

    _Def().visit_stmt(func.body)
    used = free_vars(func.body) if used is None else used
    free = [v for v in used if v not in defined and v.dtype != "handle"]
    return sorted(free, key=lambda v: sanitize(v.name))


_COMPARE = (ir.LT, ir.LE, ir.GT, ir.GE, ir.EQ, ir.NE)


def _operand_prec(op: type, operand: ir.PrimExpr, prec: int) -> int:
    """The precedence an operand of ``op`` must have to print bare: a comparison of
    comparisons (``(a < b) != (c < d)``) and ``&&`` inside ``||`` get parentheses though C
    does not need them (gcc's -Wparentheses, an error in strict builds)."""
    if (op in _COMPARE and isinstance(operand, _COMPARE)) or \
            (op is ir.Or and isinstance(operand, ir.And)):
        return _ATOM
    return prec


class _LoadRewriter(ExprMutator):
    """Rewrites each ``BufferLoad`` (innermost first) with ``fn``."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e2 = super().visit_BufferLoad(e)
        return self.fn(e2) if isinstance(e2, ir.BufferLoad) else e2


class _VectorLocal(StmtExprVisitor):
    """Can a local buffer be declared as an array of vectors (register tiles)?"""

    def __init__(self, data: ir.Var, ranges: dict[ir.Var, ir.Range]) -> None:
        self.data, self.ranges = data, dict(ranges)
        self.lanes: int | None = None
        self.ok = True
        self.const_index = True

    def visit_For(self, s: ir.For) -> None:
        self.ranges[s.loop_var] = ir.Range(s.min, s.extent)
        super().visit_For(s)

    def visit_Var(self, e: ir.Var) -> None:
        if e is self.data:
            self.ok = False

    def _access(self, buf: ir.Buffer, idx: tuple[ir.PrimExpr, ...]) -> None:
        if buf.data is not self.data:
            return
        r = idx[0] if len(idx) == 1 else None
        if not isinstance(r, ir.Ramp) or not ir.is_const_int(r.stride, 1):
            self.ok = False
            return
        if self.lanes is None:
            self.lanes = r.lanes
        m = arith.simplify(ir.FloorMod(r.base, r.lanes), self.ranges)
        if r.lanes != self.lanes or not ir.is_const_int(m, 0):
            self.ok = False
        if not isinstance(arith.simplify(r.base), ir.IntImm):
            self.const_index = False

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        self._access(e.buffer, e.indices)
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self._access(s.buffer, s.indices)
        super().visit_BufferStore(s)


class CStyleRenderer:
    """Base renderer; see the module docstring for the dialect hooks."""

    dialect: ClassVar[str] = "c"
    template: ClassVar[str] = "c/kernel.c.j2"
    includes: ClassVar[tuple[str, ...]] = ("stdint.h", "stdbool.h", "stddef.h", "stdlib.h",
                                           "math.h")
    kernel_prefix: ClassVar[str] = ""
    smem_prefix: ClassVar[str] = ""
    barrier: ClassVar[str] = ""
    restrict: ClassVar[str] = "restrict"
    code_for_workitem: ClassVar[dict[str, str]] = {}
    type_map: ClassVar[dict[str, str]] = {
        "float16": "_Float16", "float32": "float", "float64": "double", "int8": "int8_t",
        "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
        "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "bool": "bool",
        "handle": "void*",
    }
    #: storage class of the helper functions (``kiln_min_float``, ...)
    helper_qualifier: ClassVar[str] = "static inline"
    #: a local tile of at most this many vectors, all at constant offsets, becomes one
    #: variable per vector (register blocking)
    max_vector_registers: ClassVar[int] = 32
    #: declare local tiles accessed by whole vectors as arrays of vector type
    vector_locals: ClassVar[bool] = True
    #: largest allocation (bytes) placed on the stack; bigger ones use the heap
    max_stack_bytes: ClassVar[int] = 64 * 1024
    #: a ``local`` buffer (a register tile, ``cache_write(..., "local")``) up to this size
    #: stays on the stack even above ``max_stack_bytes``: the largest register file Kiln
    #: targets, 32 AVX-512 registers. In scratch or heap memory the compiler cannot keep
    #: it in registers, and every accumulation loads and stores it (a 28-vector tile of
    #: ResNet-18's stem ran 2.5x slower in a bundle, whose limit is 1 KiB)
    max_register_tile_bytes: ClassVar[int] = 2048
    #: a one-element local (a reduction's accumulator) is declared ``= {0}``: its init is a
    #: store under ``if (k == 0 && ...)`` inside the reduction loop, which GCC at -O1, -O2
    #: and -Os reports as ``-Wmaybe-uninitialized`` (a firmware's -Wall -Werror build
    #: failed); at -O3, the bundles' kernel level, the object code is the same
    zero_scalar_locals: ClassVar[bool] = False
    #: float32 exp / erf / tanh / sigmoid / pow / min / max call the vectorizable helpers of
    #: :mod:`.fastmath` instead of libm (relative error < 1e-6)
    fast_math: ClassVar[bool] = True

    def __init__(self, openmp: bool = True, allow_heap: bool = True,
                 vector_loads: bool = True) -> None:
        """``allow_heap=False``: a temporary too big for the stack (or of symbolic size) is
        an error naming it instead of ``posix_memalign`` + ``free`` (for code that must not
        allocate; the bundle renderer gives such buffers arena scratch instead).
        ``vector_loads=False``: the target's compiler has no vector unit to if-convert a
        conditional load into a masked vector load (Cortex-M4/M7), so selects and guarded
        loads stay plain ``?:`` (see :meth:`expr_Select`)."""
        self.openmp = openmp
        self.allow_heap = allow_heap
        self.vector_loads = vector_loads

    # ------------------------------------------------------------------ entry point
    def render(self, func: ir.PrimFunc, name: str | None = None) -> CSource:
        """Render a lowered PrimFunc into a C source file."""
        self.reset()
        entry = self.entry_name(name or func.name)
        params, extra = self.signature(func)
        self.stmt(func.body)
        code = self._fill(func, entry, params or ["void"])
        return CSource(code, entry, extra, self.uses_openmp, self.uses_simd)

    def entry_name(self, name: str) -> str:
        """``kiln_<name>``, kept clear of every helper name this dialect can define."""
        entry = HELPER_PREFIX + "".join(c if c.isascii() and (c.isalnum() or c == "_")
                                        else "_" for c in name)
        return entry + "_kernel" if entry in self.all_helper_names() else entry

    def all_helper_names(self) -> set[str]:
        """Every helper function name the renderer may define (used or not)."""
        scalars = [self.type_map[t] for t in self.type_map if t != "handle"]
        names = {self._helper_name(k, t) for k in ("min", "max", "select") for t in scalars}
        names |= {self._helper_name(k, t) for k in ("floordiv", "floormod")
                  for t in ("int32_t", "int64_t")}
        return names | {self._helper_name("sigmoid", t) for t in ("float", "double")} | {
            self._helper_name("alloc", "void")} | set(FUNCTIONS.values()) | set(SUPPORT_NAMES)

    @staticmethod
    def _helper_name(kind: str, ctype: str) -> str:
        if kind == "alloc":
            return HELPER_PREFIX + "alloc"
        if kind in FUNCTIONS:
            return FUNCTIONS[kind]
        if kind == "sigmoid":
            return HELPER_PREFIX + ("sigmoidf" if ctype == "float" else "sigmoid")
        return f"{HELPER_PREFIX}{kind}_" + "".join(c if c.isascii() and c.isalnum() else "_"
                                                   for c in ctype)

    def helper(self, kind: str, ctype: str) -> str:
        """Name of the helper ``kind`` (``min``, ``max``, ``select``, ``floordiv``, ``floormod``,
        ``sigmoid``, ``alloc``) for the C type ``ctype``; it will be defined in the file."""
        name = self._helper_name(kind, ctype)
        self.helpers[name] = {"kind": kind, "type": ctype, "name": name}
        return name

    def reset(self) -> None:
        """Fresh naming and rendering state (one call per file)."""
        self.names = Namer()
        #: helper functions referenced so far: name -> {kind, type, name}
        self.helpers: dict[str, dict[str, str]] = {}
        #: register tiles: the C variable of each vector of a local buffer
        self.vec_regs: dict[ir.Var, list[str]] = {}
        self.lines: list[str] = []
        self.indent = 1
        self.vec_types: dict[str, tuple[str, int]] = {}
        self.vec_locals: dict[ir.Var, int] = {}
        self.ranges: dict[ir.Var, ir.Range] = {}
        self.parallel_depth = 0
        #: inside a loop meant for SIMD (vectorized, or the scalar fallback gcc vectorizes)
        self.simd_depth = 0
        self.uses_openmp = False
        self.uses_simd = False

    def param_qualifier(self, index: int) -> str:
        """The qualifier of buffer parameter ``index`` (``restrict`` unless overridden)."""
        return self.restrict

    def signature(self, func: ir.PrimFunc, body: ir.Stmt | None = None
                  ) -> tuple[list[str], list[ir.Var]]:
        """C parameter declarations (buffers, scalars, then symbolic sizes) and the sizes.

        A buffer ``body`` only reads is ``const`` (``const float* restrict A``): see
        :func:`~toolchain.tir.analysis.written_buffers` for what counts as a write.

        Emits ``(void)x;`` for parameters ``body`` (default: the function body) never uses.
        """
        body = func.body if body is None else body
        params = []
        bound: set[ir.Var] = set()
        written = written_buffers(body)
        for i, p in enumerate(func.params):
            if isinstance(p, ir.Buffer):
                const = "" if p.data in written else "const "
                params.append(f"{const}{self.ctype(p.dtype)}* {self.param_qualifier(i)} "
                              f"{self.names(p.data, p.name)}".replace("  ", " "))
                bound.add(p.data)
            else:
                params.append(f"{self.ctype(p.dtype)} {self.names(p, p.name)}")
                bound.add(p)
        in_body = free_vars(body)  # one walk for both questions where body is the function's
        extra = free_scalars(func, bound, in_body if body is func.body else None)
        for v in extra:
            params.append(f"{self.ctype(v.dtype)} {self.names(v, v.name)}")
        named = set(in_body)
        used: set[ir.Var] | None = None  # one walk for every buffer's accesses, if needed
        for p in list(func.params) + extra:
            var = p.data if isinstance(p, ir.Buffer) else p
            if var in named:
                continue
            if used is None:
                from toolchain.tir.transform.remove_noop import vars_used

                used = vars_used(body)
            if var not in used:
                self.emit(f"(void){self.names(var, var.name)};  /* unused */")
        return params, extra

    def _fill(self, func: ir.PrimFunc, entry: str, params: list[str]) -> str:
        env = c_templates()
        vts = [dict(name=n, elem=self.ctype(e), lanes=lanes,
                    elem_bytes=ir.bits_of(e) // 8, bytes=ir.bits_of(e) // 8 * lanes)
               for n, (e, lanes) in sorted(self.vec_types.items())]
        helpers = self.helper_list()
        fast = render_fastmath((h["kind"] for h in helpers), self.helper_qualifier)
        prelude = "\n\n".join(t for t in (fast, support_of(func).render()) if t)
        return env.get_template(self.template).render(
            dialect=self.dialect, entry=entry, func_name=func.name, includes=self.includes,
            prelude=prelude, helpers=[h for h in helpers if h["kind"] not in FUNCTIONS],
            qualifier=self.helper_qualifier, vector_types=vts,
            kernel_prefix=self.kernel_prefix, params=params, body=self.lines)

    def helper_list(self) -> list[dict[str, str]]:
        """The referenced helpers, sorted by name (the order they are defined in)."""
        return [self.helpers[k] for k in sorted(self.helpers)]

    # ------------------------------------------------------------------ helpers
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def ctype(self, dtype: str) -> str:
        lanes = ir.lanes_of(dtype)
        elem = ir.element_of(dtype)
        if elem not in self.type_map:
            raise UnsupportedError(f"{self.dialect} code generation: dtype {dtype!r} has no C "
                                   f"type; supported: {', '.join(self.type_map)}")
        if lanes == 1:
            return self.type_map[elem]
        name = f"{sanitize(elem)}x{lanes}"
        self.vec_types[name] = (elem, lanes)
        return name

    def var(self, v: ir.Var) -> str:
        return self.names(v, v.name)

    # ------------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt) -> None:
        fn = getattr(self, "stmt_" + type(s).__name__, None)
        if fn is None:
            raise UnsupportedError(
                f"{self.dialect} code generation: {type(s).__name__} is not lowered; call "
                "toolchain.lower(...) (or build) so blocks become loops first")
        fn(s)

    def stmt_SeqStmt(self, s: ir.SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    def stmt_Evaluate(self, s: ir.Evaluate) -> None:
        if isinstance(s.value, (ir.IntImm, ir.FloatImm)):
            return
        self.emit(self.expr(s.value) + ";")

    def stmt_BufferStore(self, s: ir.BufferStore) -> None:
        buf, idx = s.buffer, s.indices[0]
        lanes = ir.lanes_of(s.value.dtype)
        value = self.expr(s.value)
        if lanes == 1:
            self.emit(f"{self.var(buf.data)}[{self.expr(idx)}] = {value};")
            return
        if buf.data in self.vec_locals:
            self.emit(f"{self._vec_local(buf, idx)} = {value};")
        elif isinstance(idx, ir.Ramp) and ir.is_const_int(idx.stride, 1):
            vt = self.ctype(s.value.dtype)
            self.emit(f"*({vt}_u*)({self.var(buf.data)} + {self.expr(idx.base, 12)}) = {value};")
        else:
            tmp = self.names.fresh("vec")
            self.emit(f"{{ {self.ctype(s.value.dtype)} {tmp} = {value};")
            for k in range(lanes):
                self.emit(f"  {self.var(buf.data)}[{self._lane(idx, k)}] = {tmp}[{k}];")
            self.emit("}")

    def stmt_IfThenElse(self, s: ir.IfThenElse) -> None:
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.block(s.then_case)
        if s.else_case is not None:
            self.emit("} else {")
            self.block(s.else_case)
        self.emit("}")

    def stmt_LetStmt(self, s: ir.LetStmt) -> None:
        # own scope: unrolled copies of the same statement may declare the same name
        self.emit(f"{{ const {self.ctype(s.var.dtype)} {self.var(s.var)} = "
                  f"{self.expr(s.value)};")
        self.block(s.body)
        self.emit("}")

    def stmt_AttrStmt(self, s: ir.AttrStmt) -> None:
        self.stmt(s.body)

    def block(self, s: ir.Stmt) -> None:
        self.indent += 1
        self.stmt(s)
        self.indent -= 1

    def stmt_For(self, s: ir.For) -> None:
        if s.kind == "thread_binding":
            self.render_thread_loop(s)
            return
        v, t = self.var(s.loop_var), self.ctype(s.loop_var.dtype)
        lo = self.expr(s.min)
        end = self.expr(arith.simplify(s.min + s.extent))
        parallel = s.kind == "parallel"
        if parallel:
            self.render_parallel_pragma(s)
        elif s.annotations.get("pragma_simd") or s.kind == "vectorized":
            self.render_simd_pragma(s)
        elif s.annotations.get("pragma_unroll") or s.kind == "unrolled":
            self.emit("#pragma GCC unroll 16")
        self.emit(f"for ({t} {v} = {lo}; {v} < {end}; ++{v}) {{")
        self.ranges[s.loop_var] = ir.Range(s.min, s.extent)
        simd = bool(s.annotations.get("pragma_simd")) or s.kind == "vectorized"
        self.parallel_depth += parallel
        self.simd_depth += simd
        self.block(s.body)
        self.parallel_depth -= parallel
        self.simd_depth -= simd
        self.emit("}")

    def stmt_Allocate(self, s: ir.Allocate) -> None:
        # own scope: unrolled copies of a loop body may allocate the same buffer again
        self.emit("{")
        self.indent += 1
        self._allocate(s)
        self.indent -= 1
        self.emit("}")

    def _allocate(self, s: ir.Allocate) -> None:
        buf = s.buffer
        name = self.names(buf.data, buf.name)
        size = buf.shape[0] if len(buf.shape) == 1 else None
        n = ir.const_int(size) if size is not None else None
        if size is None:
            raise UnsupportedError(f"{self.dialect} code generation: allocation {buf.name} is "
                                   "not flattened; run the lowering pipeline first")
        et = self.ctype(buf.dtype)
        check = _VectorLocal(buf.data, self.ranges)
        check.visit_stmt(s.body)
        if (self.vector_locals and n is not None and check.ok and check.lanes
                and n % check.lanes == 0 and buf.scope != "global"):
            vt = self.ctype(ir.with_lanes(buf.dtype, check.lanes))
            count = n // check.lanes
            if check.const_index and count <= self.max_vector_registers:
                # one variable per vector: the C compiler keeps them in registers
                self.vec_locals[buf.data] = -check.lanes
                regs = [self.names.fresh(f"{name}_{k}") for k in range(count)]
                self.vec_regs[buf.data] = regs
                decl = ", ".join(f"{r} = {{0}}" for r in regs)
                self.emit(f"{vt} {decl};")
            else:
                self.vec_locals[buf.data] = check.lanes
                self.emit(f"{self.alloc_prefix(buf)}{vt} {name}[{count}];")
            self.stmt(s.body)
            return
        nbytes = n * ir.bits_of(buf.dtype) // 8 if n is not None else None
        if nbytes is not None and (nbytes <= self.max_stack_bytes or buf.scope == "shared"
                                   or (buf.scope == "local"
                                       and nbytes <= self.max_register_tile_bytes)):
            init = (" = {0}" if self.zero_scalar_locals and n == 1 and buf.scope != "shared"
                    else "")
            self.emit(f"{self.alloc_prefix(buf)}{et} {name}[{n}] "
                      f"__attribute__((aligned({max(buf.align, 16)}))){init};")
            self.stmt(s.body)
            return
        self.render_heap_alloc(buf, name, et, size, s.body)

    def alloc_prefix(self, buf: ir.Buffer) -> str:
        """Storage qualifier for an allocation (``__shared__`` in CUDA)."""
        return self.smem_prefix if buf.scope == "shared" else ""

    def render_heap_alloc(self, buf: ir.Buffer, name: str, et: str, size: ir.PrimExpr,
                          body: ir.Stmt) -> None:
        """Large or symbolic allocations: aligned heap memory freed at the end of scope."""
        if not self.allow_heap:
            n = ir.const_int(size)
            need = (f"needs {n * ir.bits_of(buf.dtype) // 8} bytes ({n} x {buf.dtype}), "
                    f"more than the {self.max_stack_bytes}-byte stack limit"
                    if n is not None else f"has a size known only at run time ({size})")
            raise UnsupportedError(
                f"{self.dialect} code generation: temporary buffer {buf.name!r} {need}, and "
                "heap allocation is off (allow_heap=False); shrink it by scheduling "
                "(compute_at / tiling), give it static sizes, or render it with memory the "
                "caller provides (the bundle's arena scratch)")
        fail = "abort();" if self.parallel_depth else "return -1;"
        alloc = self.helper("alloc", "void")
        self.emit(f"{et}* {self.restrict} {name} = ({et}*){alloc}((size_t)({self.expr(size)})"
                  f" * sizeof({et}));")
        self.emit(f"if ({name} == NULL) {{ {fail} }}")
        self.stmt(body)
        self.emit(f"free({name});")

    # ------------------------------------------------------------------ dialect hooks
    def render_thread_loop(self, s: ir.For) -> None:
        """Thread-bound loops; the plain C dialect has no threads."""
        raise UnsupportedError(
            f"{self.dialect} code generation: loop {s.loop_var.name} is bound to "
            f"{s.thread_tag}; GPU thread axes need a cuda target (or remove the bind)")

    def render_parallel_pragma(self, s: ir.For) -> None:
        if self.openmp and not self.parallel_depth:
            self.uses_openmp = True
            self.emit("#pragma omp parallel for schedule(static)")

    def render_simd_pragma(self, s: ir.For) -> None:
        self.uses_simd = True
        self.emit("#pragma omp simd")

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ir.PrimExpr, prec: int = 0) -> str:
        fn = None
        for klass in type(e).__mro__:
            fn = getattr(self, "expr_" + klass.__name__, None)
            if fn is not None:
                break
        if fn is None:
            raise UnsupportedError(f"{self.dialect} code generation: cannot render "
                                   f"{type(e).__name__} {e}")
        text, p = fn(e)
        return f"({text})" if p < prec else text

    def expr_IntImm(self, e: ir.IntImm) -> tuple[str, int]:
        if e.dtype == "bool":
            return ("true" if e.value else "false"), _ATOM
        suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}.get(e.dtype, "")
        if e.dtype == "int64" and e.value == -(1 << 63):
            return "INT64_MIN", _ATOM
        if e.dtype == "int32" and e.value == -(1 << 31):
            return "INT32_MIN", _ATOM
        text = f"{e.value}{suffix}"
        return (f"({text})" if e.value < 0 else text), _ATOM

    def expr_FloatImm(self, e: ir.FloatImm) -> tuple[str, int]:
        v = e.value
        f32 = e.dtype == "float32"
        if math.isnan(v):
            return ("NAN" if f32 else "(double)NAN"), _ATOM
        if math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
            return (text if f32 else f"(double){text}"), _ATOM
        text = repr(float(v))
        if "e" not in text and "." not in text:
            text += ".0"
        text += "f" if f32 else ""
        return (f"({text})" if v < 0 else text), _ATOM

    def expr_StringImm(self, e: ir.StringImm) -> tuple[str, int]:
        return '"' + e.value.replace("\\", "\\\\").replace('"', '\\"') + '"', _ATOM

    def expr_Var(self, e: ir.Var) -> tuple[str, int]:
        return self.var(e), _ATOM

    def expr_BinaryOp(self, e: ir.BinaryOp) -> tuple[str, int]:
        t = type(e)
        if t in (ir.FloorDiv, ir.FloorMod):
            return self._floor_divmod(e)
        if t in (ir.Min, ir.Max):
            return self._minmax(e)
        if t is ir.Mod and ir.is_float(e.dtype):
            return self.call_math("fmod", e.dtype, [e.a, e.b]), _ATOM
        if t in (ir.And, ir.Or) and ir.lanes_of(e.dtype) > 1:
            raise UnsupportedError(f"{self.dialect} code generation: vector logic {e}")
        op, p = _BINOP[t]
        return f"{self.expr(e.a, _operand_prec(t, e.a, p))} {op} " \
               f"{self.expr(e.b, _operand_prec(t, e.b, p + 1))}", p

    def _floor_divmod(self, e: ir.BinaryOp) -> tuple[str, int]:
        if ir.is_float(e.dtype):
            q = self.call_math("floor", e.dtype, [ir.Div(e.a, e.b)])
            if isinstance(e, ir.FloorDiv):
                return q, _ATOM
            return f"{self.expr(e.a, 12)} - {q} * {self.expr(e.b, 13)}", 12
        lo, _ = arith.const_bound(e.a, self.ranges)
        c = ir.const_int(e.b)
        op = "/" if isinstance(e, ir.FloorDiv) else "%"
        if lo is not None and lo >= 0 and c is not None and c > 0:
            return f"{self.expr(e.a, 13)} {op} {self.expr(e.b, 14)}", 13
        fn = "floordiv" if isinstance(e, ir.FloorDiv) else "floormod"
        t = self.ctype(e.dtype)
        if t not in ("int32_t", "int64_t"):
            t = "int64_t"
        helper = self.helper(fn, t)
        return f"({self.ctype(e.dtype)}){helper}({self.expr(e.a)}, {self.expr(e.b)})", 15

    def _minmax(self, e: ir.BinaryOp) -> tuple[str, int]:
        if ir.lanes_of(e.dtype) > 1:
            return cvector.minmax(self, e), _ATOM
        kind = "min" if isinstance(e, ir.Min) else "max"
        if self.fast_math and e.dtype == "float32" and self.simd_depth:
            # a bit-mask blend: gcc vectorizes it without masked instructions (AVX2), but
            # in scalar code (a reduction's tail) the plain a > b ? a : b is one maxss
            fn = self.helper("fast_" + kind, "float")
        else:
            fn = self.helper(kind, self.ctype(e.dtype))
        return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM

    def expr_Not(self, e: ir.Not) -> tuple[str, int]:
        return f"!{self.expr(e.a, 15)}", 15

    def expr_Select(self, e: ir.Select, guarded: bool = False) -> tuple[str, int]:
        """``c ? a : b``; ``guarded`` (a ``tir.if_then_else``): a value may be read only
        where its side is taken (a padded load), so it stays a C conditional."""
        if ir.lanes_of(e.dtype) > 1:
            return cvector.select(self, e), _ATOM
        if not guarded and self.vector_loads and conditional_loads(e):
            # Select may evaluate both sides: as a call, both are loaded unconditionally, so
            # gcc vectorizes a blend instead of if-converting to masked loads (gcc 12 at -O3
            # with AVX-512 gives unrolled masked loads the wrong mask: wrong PRelu/Where)
            fn = self.helper("select", self.ctype(e.dtype))
            return (f"{fn}({self.expr(e.condition)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})"), _ATOM
        return (f"{self.expr(e.condition, 4)} ? {self.expr(e.true_value, 3)} : "
                f"{self.expr(e.false_value, 3)}"), 3

    def _clamped_loads(self, e: ir.PrimExpr) -> ir.PrimExpr | None:
        """``e`` with the index of every scalar load that is not provably inside its
        buffer clamped into it, so the guarded value of a ``tir.if_then_else`` can be
        loaded unconditionally (its value is used only where the guard holds, and there
        the clamp changes nothing); None when a buffer's size is not a constant.

        Loaded unconditionally and blended, a guarded value never becomes a masked load:
        gcc 12 at -O3 with AVX-512 gives the masked loads of an if-converted, unrolled
        loop the mask of the first vector (a Concat kernel read the wrong half)."""
        ok = True

        def clamp(load: ir.BufferLoad) -> ir.PrimExpr:
            nonlocal ok
            size = 1
            for d in load.buffer.shape:
                if not isinstance(d, ir.IntImm):
                    ok = False
                    return load
                size *= int(d.value)
            (idx,) = load.indices
            if ir.lanes_of(idx.dtype) != 1:
                ok = False
                return load
            lo, hi = arith.const_bound(idx, self.ranges)
            if lo is not None and hi is not None and 0 <= lo and hi < size:
                return load
            safe = ir.Max(ir.Min(idx, ir.IntImm(size - 1, idx.dtype)), ir.IntImm(0, idx.dtype))
            return ir.BufferLoad(load.buffer, (safe,))

        out = _LoadRewriter(clamp).visit_expr(e)
        return out if ok else None

    def expr_Cast(self, e: ir.Cast) -> tuple[str, int]:
        t = self.ctype(e.dtype)
        if ir.lanes_of(e.dtype) > 1:
            return f"__builtin_convertvector({self.expr(e.value)}, {t})", _ATOM
        return f"({t}){self.expr(e.value, 15)}", 15

    def expr_Let(self, e: ir.Let) -> tuple[str, int]:
        t = self.ctype(e.var.dtype)
        return (f"({{ const {t} {self.var(e.var)} = {self.expr(e.value)}; "
                f"{self.expr(e.body)}; }})"), _ATOM

    def expr_Ramp(self, e: ir.Ramp) -> tuple[str, int]:
        t = self.ctype(e.dtype)
        iota = "{" + ", ".join(str(k) for k in range(e.lanes)) + "}"
        scale = "" if ir.is_const_int(e.stride, 1) else f" * {self.expr(e.stride, 14)}"
        return f"{self.expr(e.base, 13)} + ({t}){iota}{scale}", 12

    def expr_Broadcast(self, e: ir.Broadcast) -> tuple[str, int]:
        return f"{self.ctype(e.dtype)}_splat({self.expr(e.value)})", _ATOM

    def expr_BufferLoad(self, e: ir.BufferLoad) -> tuple[str, int]:
        buf, idx = e.buffer, e.indices[0]
        name = self.var(buf.data)
        if ir.lanes_of(e.dtype) == 1:
            return f"{name}[{self.expr(idx)}]", _ATOM
        if buf.data in self.vec_locals:
            return self._vec_local(buf, idx), _ATOM
        vt = self.ctype(e.dtype)
        if isinstance(idx, ir.Ramp) and ir.is_const_int(idx.stride, 1):
            return f"*(const {vt}_u*)({name} + {self.expr(idx.base, 12)})", 15
        lanes = ", ".join(f"{name}[{self._lane(idx, k)}]" for k in range(ir.lanes_of(e.dtype)))
        return f"({vt}){{{lanes}}}", _ATOM

    def _lane(self, idx: ir.PrimExpr, k: int) -> str:
        if isinstance(idx, ir.Ramp):
            return self.expr(arith.simplify(idx.base + idx.stride * k))
        if isinstance(idx, ir.Broadcast):
            return self.expr(idx.value)
        return f"({self.expr(idx)})[{k}]"

    def _vec_local(self, buf: ir.Buffer, idx: ir.PrimExpr) -> str:
        assert isinstance(idx, ir.Ramp)
        k = arith.simplify(ir.FloorDiv(idx.base, idx.lanes), self.ranges)
        if self.vec_locals[buf.data] < 0:
            return self.vec_regs[buf.data][ir.const_int(arith.simplify(k))]
        return f"{self.var(buf.data)}[{self.expr(k)}]"

    def expr_Call(self, e: ir.Call) -> tuple[str, int]:
        op = e.op
        if op == "tir.if_then_else":
            c, t, f = e.args
            if ir.lanes_of(e.dtype) > 1 and ir.lanes_of(c.dtype) == 1:
                # one condition for every lane: C's ?: evaluates only the branch taken
                # (both cast to the plain vector type: an unaligned load is a variant)
                vt = self.ctype(e.dtype)
                return (f"{self.expr(c, 4)} ? ({vt}){self.expr(t, 15)} : "
                        f"({vt}){self.expr(f, 15)}"), 3
            if self.dialect == "c" and self.vector_loads and ir.lanes_of(e.dtype) == 1:
                clamped = self._clamped_loads(t), self._clamped_loads(f)
                if clamped[0] is not None and clamped[1] is not None:
                    return self.expr_Select(ir.Select(c, *clamped))
            return self.expr_Select(ir.Select(c, t, f), guarded=True)
        if op == "tir.address_of":
            load = e.args[0]
            assert isinstance(load, ir.BufferLoad)
            return f"&{self.var(load.buffer.data)}[{self.expr(load.indices[0])}]", 15
        if op == "tir.storage_sync":
            return self.barrier or "0", _ATOM
        if op == "reinterpret":
            return cvector.reinterpret(self, e), _ATOM
        if op.startswith("tir."):
            raise UnsupportedError(f"{self.dialect} code generation: builtin {op} is not "
                                   "supported")
        if ir.lanes_of(e.dtype) > 1:
            return cvector.lane_call(self, e, self._scalar_math(e)), _ATOM
        if self.fast_math and e.dtype == "float32" and op in FAST_OPS:
            args = ", ".join(self.expr(a) for a in e.args)
            return f"{self.helper(FAST_OPS[op], 'float')}({args})", _ATOM
        if op == "sigmoid":
            fn = self.helper("sigmoid", "float" if e.dtype == "float32" else "double")
            return f"{fn}({self.expr(e.args[0])})", _ATOM
        if op == "rsqrt":
            one = "1.0f" if e.dtype == "float32" else "1.0"
            return f"{one} / {self.call_math('sqrt', e.dtype, list(e.args))}", 13
        if op == "isnan":
            return f"isnan({self.expr(e.args[0])})", _ATOM
        if op in INTRINSICS:
            return self.call_math(op, e.dtype, list(e.args)), _ATOM
        args = ", ".join(self.expr(a) for a in e.args)
        return f"{sanitize(op) if not op.isidentifier() else op}({args})", _ATOM

    def _scalar_math(self, e: ir.Call) -> str:
        """The scalar C function applied to each lane of a vector math call."""
        elem, op = ir.element_of(e.dtype), e.op
        if self.fast_math and elem == "float32" and op in FAST_OPS:
            return self.helper(FAST_OPS[op], "float")
        if op == "sigmoid" and elem in ("float32", "float64"):
            return self.helper("sigmoid", "float" if elem == "float32" else "double")
        if op in INTRINSICS and INTRINSICS[op].c_name and op != "isnan" and ir.is_float(elem):
            return INTRINSICS[op].c_function(elem)
        raise UnsupportedError(f"{self.dialect} code generation: vector call {op} of "
                               f"{e.dtype}; keep the loop scalar")

    def call_math(self, op: str, dtype: str, args: list[ir.PrimExpr]) -> str:
        """The C call of math intrinsic ``op`` (see :mod:`.math_intrinsics`): ``expf(x)``
        for float32, ``exp(x)`` for float64, ``nearbyintf(x)`` for ``round``."""
        name = INTRINSICS[op].c_function(dtype)
        return f"{name}({', '.join(self.expr(a) for a in args)})"
