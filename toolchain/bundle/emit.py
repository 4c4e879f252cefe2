"""Kernel C for a bundle: the host C renderer with three bundle rules (and const, below).

:class:`BundleRenderer` is :class:`~toolchain.codegen.c.CRenderer` with:

* **no heap**: an allocation larger than :attr:`max_stack_bytes` (packing buffers,
  ``cache_write`` tiles) becomes a slice of the kernel's scratch area — an extra
  ``uint8_t* kiln_scratch`` parameter pointing into the arena (the memory planner reserves
  it for exactly the kernel's step), instead of ``posix_memalign`` + ``free``. Each slice
  is taken through ``kiln_scratch_slice`` (:data:`SCRATCH_SLICE`), which GCC and Clang see
  as an allocator: the slices never overlap, and the compiler must know it as it knows
  two ``malloc`` blocks apart, or it assumes a store to one slice may change another
  and keeps such loops scalar (ResNet-18's Winograd kernels 20 % slower than the same C
  built for the tuner, docs/tuning.md);
* **threads through the bundle runtime, portable pragmas**: no OpenMP pragmas and no
  ``#pragma omp simd`` (unknown pragmas break ``-Werror`` builds; the loops are vectorised
  by the schedule or the compiler), and ``__extension__`` before GNU statement expressions
  (``-pedantic``). For a target with ``cores: N > 1`` (``threads=N``), a kernel whose
  schedule marks loops ``parallel`` is rendered SPMD (single program, many threads): it
  takes ``int32_t kiln_thread, int32_t kiln_nthreads`` and every thread of
  ``kiln_parallel`` (``runtime_c/kiln_threads.c``) runs it. Each top-level parallel loop is
  cut into chunks (about four per thread) that the threads claim in turn (``kiln_claim``);
  each top-level statement without one is run by the one thread that claims it;
  ``kiln_barrier`` separates them (the steps). A thread that starts late takes less work,
  and one the system never runs takes none. Buffers allocated outside the parallel
  loops are shared (arena scratch, one copy); scratch inside a parallel loop gets one slice
  per thread (``N`` slices planned into the arena);
* **no ``restrict`` where aliasing is planned**: where the memory plan puts a kernel's
  output over one of its inputs (in place), those two parameters are rendered without
  ``restrict`` (``restrict=`` a set of parameter positions); the others keep it, so the
  compiler still knows a store to the output leaves the weights alone;
* **const where only read** (every C-family renderer): a buffer parameter the kernel never
  writes is ``const`` (``const float* restrict W``), so ``<m>.c`` passes the weights and
  the inputs, which are const, without a cast that drops the qualifier (MISRA C:2012
  rule 11.8, ``-Wcast-qual``); an in-place input stays ``const``: it is written through
  the output's pointer, never its own.

Example::

    >>> from toolchain import te
    >>> from toolchain.tir.transform import lower
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    >>> k = render_kernel(lower(te.create_prim_func([A, B])), "net_add")
    >>> k.params, k.scratch_bytes
    (['const float* restrict A', 'float* restrict B'], 0)
    >>> C = te.placeholder((64,), name="C")
    >>> D = te.compute((64,), lambda i: A[i] + C[i], name="D")
    >>> render_kernel(lower(te.create_prim_func([A, C, D])), "net_add2",
    ...               restrict=frozenset({0, 2})).params  # D written over A
    ['const float* A', 'const float* restrict C', 'float* D']
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from toolchain.codegen.artifact import CDefinition, CSupport, KernelArtifact, support_of
from toolchain.codegen.c import CRenderer
from toolchain.codegen.cstyle import ATOM, c_templates
from toolchain.errors import UnsupportedError
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtVisitor
from toolchain.tir.transform.legalize_f16 import legalize_f16

#: the bundle runtime's header: ``kiln_f16`` and its conversions (float16 kernels)
RUNTIME_HEADER = "kiln_runtime.h"

@functools.cache
def f16_scalar() -> CDefinition:
    """The float16 conversions of the kernels (``templates/c/float16.c.j2``): the
    capability macros and ``kiln_h2f`` / ``kiln_f2h`` of one value (those of vectors:
    :func:`f16_vector`)."""
    text = c_templates(False).get_template("c/float16.c.j2").render(
        part="scalar", dir="", lanes=1, chunked=False)
    return CDefinition("kiln_f16_convert", text.strip("\n"))


@functools.cache
def f16_vector(direction: str, lanes: int) -> CDefinition:
    """``kiln_h2f_x<lanes>`` (``direction`` "h2f") or ``kiln_f2h_x<lanes>`` ("f2h"): a
    vector's float16 conversion, 8 (x86 F16C) or 4 lanes (F16C, AArch64) an instruction
    for a power of two from 4 lanes up (32: AVX-512's vectors of halves), else one lane
    at a time through the scalar helpers."""
    chunked = lanes >= 4 and lanes & (lanes - 1) == 0
    text = c_templates(False).get_template("c/float16.c.j2").render(
        part="vector", dir=direction, lanes=lanes, chunked=chunked)
    return CDefinition(f"kiln_{direction}_x{lanes}", text.strip("\n"))


def f16_definitions(used: set[tuple[str, int]]) -> tuple[CDefinition, ...]:
    """The definitions for the conversions ``used`` ((direction, lanes) pairs): the scalar
    ones first (the vector ones call them), then by direction and lanes."""
    return (f16_scalar(), *(f16_vector(d, n) for d, n in sorted(used) if n > 1))


#: alignment of each scratch slice (bytes)
SCRATCH_ALIGN = 64

#: the accessor of a scratch slice, as an allocator (``malloc`` attribute: the pointer it
#: returns aliases no other; the slices of a kernel never share bytes and hold no pointers)
#: and not inlined (the attribute describes the call, which inlining would drop)
SCRATCH_SLICE = CDefinition("kiln_scratch_slice", """\
/* A slice of a kernel's scratch area, seen by the compiler as a fresh allocation: slices
   never overlap, so a store to one leaves the others alone (as for two malloc blocks). */
#if defined(__GNUC__)
__attribute__((malloc, noinline))
#endif
static void *kiln_scratch_slice(uint8_t *scratch, size_t offset) { return scratch + offset; }""")


#: the C backend's kernel artifact (kept under its old name for callers)
KernelSource = KernelArtifact


class BundleRenderer(CRenderer):
    """The C renderer for bundle kernels (see the module docstring)."""

    #: allocations up to this size stay on the stack (register tiles, small temporaries)
    max_stack_bytes: ClassVar[int] = 1024
    #: float16 is storage only (16 bits, ``kiln_f16`` of the bundle runtime): kernels
    #: compute in float32 (:func:`~toolchain.tir.transform.legalize_f16.legalize_f16`)
    type_map: ClassVar[dict[str, str]] = {**CRenderer.type_map, "float16": "kiln_f16"}

    def __init__(self, restrict: bool | frozenset[int] = True, threads: int = 1,
                 vector_loads: bool = True) -> None:
        super().__init__(openmp=False, vector_loads=vector_loads)
        #: the most threads the kernel runs on (the target's ``cores``); > 1 renders
        #: kernels with parallel loops SPMD (see the module docstring)
        self.threads = max(int(threads), 1)
        self.restrict = "restrict" if restrict is not False else ""  # type: ignore[misc]
        #: buffer parameter positions that alias another parameter (no ``restrict``)
        self.aliased = restrict if isinstance(restrict, frozenset) else frozenset()

    def param_qualifier(self, index: int) -> str:
        return "" if index in self.aliased else self.restrict

    def reset(self) -> None:
        super().reset()
        self.scratch_bytes = 0
        self.scratch_offsets: dict[int, int] = {}
        self._keep: list[Any] = []
        #: rendered SPMD (the kernel takes kiln_thread / kiln_nthreads)
        self.spmd = False
        #: the float16 conversions used: (``"h2f"`` or ``"f2h"``, lanes)
        self.f16_lanes: set[tuple[str, int]] = set()

    # ------------------------------------------------------------------ SPMD kernels
    def render_body(self, body: ir.Stmt) -> None:
        """The function body: SPMD when threads > 1 and a loop is parallel, else serial."""
        if self.threads > 1 and has_parallel(body):
            self.spmd = True
            self.emit("int64_t kiln_local = 0; /* this step's next iteration, on one thread */")
            self.emit("(void)kiln_thread;")
            self.spine(body)
        else:
            self.stmt(body)

    @staticmethod
    def claim(grain: str) -> str:
        """The first iteration of this thread's next chunk of the current step: from the
        pool (``kiln_claim``) when the task runs on several threads, else counted here."""
        return f"(kiln_nthreads > 1 ? kiln_claim({grain}) : (kiln_local += {grain}) - {grain})"

    def step_end(self) -> None:
        """Every thread waits for the step's work; the next step's iterations start at 0."""
        self.emit("kiln_barrier(kiln_nthreads);")
        self.emit("kiln_local = 0;")

    def spine(self, s: ir.Stmt) -> None:
        """Render ``s``, run by every thread of the task: parallel loops shared out in
        chunks, each other statement run by the one thread that claims it."""
        if not has_parallel(s):
            self.emit(f"if ({self.claim('1')} == 0) {{")
            self.block(s)
            self.emit("}")
        elif isinstance(s, ir.SeqStmt):
            parts = [x for x in s.seq if not (isinstance(x, ir.Evaluate)
                                              and isinstance(x.value, (ir.IntImm, ir.FloatImm)))]
            for i, x in enumerate(parts):
                if i:
                    self.step_end()
                self.spine(x)
        elif isinstance(s, ir.For) and s.kind == "parallel":
            self.split_loop(s)
        elif isinstance(s, ir.For) and s.kind == "serial":
            v, t = self.var(s.loop_var), self.ctype(s.loop_var.dtype)
            end = self.expr(arith.simplify(s.min + s.extent))
            self.emit(f"for ({t} {v} = {self.expr(s.min)}; {v} < {end}; ++{v}) {{")
            self.ranges[s.loop_var] = ir.Range(s.min, s.extent)
            self.indent += 1
            self.spine(s.body)
            self.step_end()  # iteration i + 1 may read i's writes
            self.indent -= 1
            self.emit("}")
        elif isinstance(s, ir.LetStmt):
            self.emit(f"{{ const {self.ctype(s.var.dtype)} {self.var(s.var)} = "
                      f"{self.expr(s.value)};")
            self.indent += 1
            self.spine(s.body)
            self.indent -= 1
            self.emit("}")
        elif isinstance(s, ir.AttrStmt):
            self.spine(s.body)
        elif isinstance(s, ir.Allocate):
            self.shared_alloc(s)
        elif isinstance(s, ir.IfThenElse):
            self.emit(f"if ({self.expr(s.condition)}) {{")
            self.indent += 1
            self.spine(s.then_case)
            self.indent -= 1
            if s.else_case is not None:
                self.emit("} else {")
                self.indent += 1
                self.spine(s.else_case)
                self.indent -= 1
            self.emit("}")
        else:  # any other statement around a parallel loop: one thread runs it all
            self.emit(f"if ({self.claim('1')} == 0) {{")
            self.block(s)
            self.emit("}")

    def split_loop(self, s: ir.For) -> None:
        """A parallel loop as chunks of its iterations, each run by the thread that claims
        it (about four chunks per thread: a thread that starts late takes fewer)."""
        v, t = self.var(s.loop_var), self.ctype(s.loop_var.dtype)
        lo = self.expr(s.min)
        n, g = self.names.fresh(f"{v}_n"), self.names.fresh(f"{v}_grain")
        b, e = self.names.fresh(f"{v}_begin"), self.names.fresh(f"{v}_end")
        self.emit(f"{{ const int64_t {n} = (int64_t)({self.expr(s.extent)});")
        self.emit(f"  const int64_t {g} = {n} > 4 * kiln_nthreads ? ({n} + 4 * kiln_nthreads "
                  f"- 1) / (4 * kiln_nthreads) : 1;")
        self.emit(f"  int64_t {b};")
        self.emit(f"  while (({b} = {self.claim(g)}) < {n}) {{")
        self.emit(f"    const int64_t {e} = {b} + {g} < {n} ? {b} + {g} : {n};")
        self.emit(f"for ({t} {v} = {lo} + ({t}){b}; {v} < {lo} + ({t}){e}; ++{v}) {{")
        self.ranges[s.loop_var] = ir.Range(s.min, s.extent)
        self.parallel_depth += 1
        self.block(s.body)
        self.parallel_depth -= 1
        self.emit("}}}")

    def shared_alloc(self, s: ir.Allocate) -> None:
        """A buffer allocated around parallel loops: one arena slice all threads share."""
        buf = s.buffer
        n = ir.const_int(buf.shape[0]) if len(buf.shape) == 1 else None
        if n is None:
            raise UnsupportedError(f"bundle code generation: shared buffer {buf.name!r} is "
                                   "not flattened to a static size")
        name = self.names(buf.data, buf.name)
        et = self.ctype(buf.dtype)
        self.emit("{")
        self.indent += 1
        self.emit(self.scratch_pointer(buf, name, et, n, per_thread=False))
        self.spine(s.body)
        self.indent -= 1
        self.emit("}")

    def scratch_pointer(self, buf: ir.Buffer, name: str, et: str, n: int,
                        per_thread: bool) -> str:
        """The declaration of ``name``, a slice of the kernel's scratch for ``buf`` (one
        slice per thread when ``per_thread``)."""
        nbytes = n * ir.bits_of(buf.dtype) // 8
        slot = -(-max(nbytes, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
        key = id(buf.data)
        if key not in self.scratch_offsets:
            # one slice per buffer: nested or consecutive buffers never share bytes
            self.scratch_offsets[key] = self.scratch_bytes
            self.scratch_bytes += slot * (self.threads if per_thread else 1)
            self._keep.append(buf.data)
        off = self.scratch_offsets[key]
        where = f"{off} + (size_t)kiln_thread * {slot}" if per_thread else f"{off}"
        return (f"{et}* {self.restrict} {name} = ({et}*)kiln_scratch_slice(kiln_scratch, "
                f"{where});".replace("  ", " "))

    def render_simd_pragma(self, s: ir.For) -> None:
        return  # see the module docstring

    def expr_Let(self, e: ir.Let) -> tuple[str, int]:
        # a GNU statement expression: __extension__ keeps -pedantic builds clean
        text, prec = super().expr_Let(e)
        return f"__extension__ {text}", prec

    def expr_Cast(self, e: ir.Cast) -> tuple[str, int]:
        """float16 <-> float32 through ``kiln_h2f`` / ``kiln_f2h`` (:func:`f16_scalar`:
        hardware where the C compiler provides it, else the runtime's bit-exact helpers;
        round to nearest even); a vector through ``kiln_h2f_x<N>`` / ``kiln_f2h_x<N>``,
        whole vectors where the hardware converts several lanes an instruction."""
        src, dst = ir.element_of(e.value.dtype), ir.element_of(e.dtype)
        if "float16" not in (src, dst):
            return super().expr_Cast(e)
        direction = {("float16", "float32"): "h2f", ("float32", "float16"): "f2h",
                     ("float64", "float16"): "d2h"}.get((src, dst))
        if direction is None:
            raise UnsupportedError(f"bundle code generation: cast {e} (float16 converts "
                                   "to float32 and from float32/float64 only; run "
                                   "legalize_f16 first)")
        lanes = ir.lanes_of(e.dtype)
        if direction == "d2h":  # rare (a float64 graph cast): the runtime's, lane by lane
            if lanes == 1:
                return f"kiln_f64_to_f16({self.expr(e.value)})", ATOM
            tmp = self.names.fresh("cvt")
            parts = ", ".join(f"kiln_f64_to_f16({tmp}[{k}])" for k in range(lanes))
            return (f"__extension__ ({{ const {self.ctype(e.value.dtype)} {tmp} = "
                    f"{self.expr(e.value)}; ({self.ctype(e.dtype)}){{{parts}}}; }})"), ATOM
        self.f16_lanes.add((direction, 1))
        if lanes == 1:
            return f"kiln_{direction}({self.expr(e.value)})", ATOM
        self.f16_lanes.add((direction, lanes))
        src_t, dst_t = self.ctype(e.value.dtype), self.ctype(e.dtype)
        a, r = self.names.fresh("cvt"), self.names.fresh("cvt")
        return (f"__extension__ ({{ const {src_t} {a} = {self.expr(e.value)}; {dst_t} {r}; "
                f"kiln_{direction}_x{lanes}(&{r}, &{a}); {r}; }})"), ATOM

    def render_heap_alloc(self, buf: ir.Buffer, name: str, et: str, size: ir.PrimExpr,
                          body: ir.Stmt) -> None:
        n = ir.const_int(size)
        if n is None:
            raise UnsupportedError(f"bundle code generation: buffer {buf.name!r} has a size "
                                   f"known only at run time ({size}); a bundle needs static "
                                   "sizes (give every input a static shape)")
        self.emit(self.scratch_pointer(buf, name, et, n,
                                       per_thread=self.spmd and self.parallel_depth > 0))
        self.stmt(body)


def render_kernel(func: ir.PrimFunc, name: str, *, restrict: bool | frozenset[int] = True,
                  renderer: type[BundleRenderer] | None = None,
                  threads: int = 1, vector_loads: bool = True,
                  keep_scopes: tuple[str, ...] = ()) -> KernelArtifact:
    """Render a lowered PrimFunc as the bundle kernel ``name``: the C backend's
    :class:`~toolchain.codegen.artifact.KernelArtifact` (its ``support`` is the typed
    :class:`~toolchain.codegen.artifact.CSupport` the lowering attached);
    ``restrict``: True (every pointer parameter), False (none) or the positions of the
    parameters that alias each other (those without, the others with); ``threads`` > 1:
    SPMD when the kernel has parallel loops (``KernelArtifact.threaded``);
    ``vector_loads``: see :class:`~toolchain.codegen.cstyle.CStyleRenderer`;
    ``keep_scopes``: allocations of these scopes keep float16 storage (``legalize_f16``)."""
    r = (renderer or BundleRenderer)(restrict=restrict, threads=threads,
                                     vector_loads=vector_loads)
    r.reset()
    legal = legalize_f16(func, keep_scopes)
    support = support_of(func)
    if legal is not func:  # kiln_f16 and its conversions
        support = support.merge(CSupport(headers=(RUNTIME_HEADER,)))
    func = legal
    params, extra = r.signature(func)
    if extra:
        raise UnsupportedError(f"bundle code generation: kernel {name} has sizes known only "
                               f"at run time ({', '.join(v.name for v in extra)}); give every "
                               "input a static shape (--input-shape NAME=D0,D1,...)")
    r.render_body(func.body)
    if r.scratch_bytes:
        params = [*params, "uint8_t* kiln_scratch"]
        support = support.merge(CSupport(definitions=(SCRATCH_SLICE,)))
    if r.f16_lanes:  # after the vector types; the scalar helpers first
        support = support.merge(CSupport(definitions=f16_definitions(r.f16_lanes)))
    if r.spmd:
        params = [*params, "int32_t kiln_thread", "int32_t kiln_nthreads"]
        support = support.merge(CSupport(headers=(RUNTIME_HEADER,)))  # kiln_barrier
    return KernelArtifact(name, params, list(r.lines), dict(r.vec_types), r.scratch_bytes,
                          support, r.helper_list(), threaded=r.spmd)


def has_parallel(s: ir.Stmt) -> bool:
    """Whether ``s`` holds a ``parallel`` loop."""
    finder = _FindParallel()
    finder.visit_stmt(s)
    return finder.found


class _FindParallel(StmtVisitor):
    # loops are statements: no expression is entered, and the walk stops at the first
    # parallel loop (``spine`` asks again at every level of a kernel)
    found = False

    def visit_stmt(self, s: ir.Stmt) -> None:
        if not self.found:
            super().visit_stmt(s)

    def visit_For(self, s: ir.For) -> None:
        if s.kind == "parallel":
            self.found = True
        else:
            self.visit_stmt(s.body)
