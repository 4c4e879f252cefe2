"""The LLVM backend: lowered TIR -> LLVM IR (llvmlite.ir) -> object code, no C compiler.

:class:`LLVMCodegen` walks a lowered :class:`~toolchain.tir.ir.PrimFunc` (no blocks,
1-D buffers, ``Ramp``/``Broadcast`` vectors) like the C renderer does and builds one
function ``i32 kiln_<name>(ptr A, ptr B, ..., scalars..., sizes...)`` with the C
kernel's calling convention (returns 0; -1 when a heap temporary could not be allocated),
so the same ctypes :class:`~toolchain.runtime.module.Module` and the same bundle call it:

* buffer parameters are ``noalias`` where the C kernel says ``restrict`` and carry the
  alignment the caller guarantees (the element size unless told more);
* vectors are LLVM vectors (``<8 x float>``): contiguous ``Ramp`` loads and stores are one
  vector access, other indices gather or scatter lane by lane;
* ``vectorized`` loops that are still loops (the scalar fallback) and ``unrolled`` loops
  get ``llvm.loop`` metadata (``vectorize.enable`` and, for a constant power-of-two
  extent, ``vectorize.width``: the width the schedule chose; ``unroll.full`` /
  ``unroll.count``);
  ``parallel`` loops run serially (there is no OpenMP runtime in a JIT or a firmware);
* floating-point instructions carry the fast-math flags the target allows
  (:mod:`.llvm_target`; ``contract`` by default, as GCC does for the C backend);
* math calls are LLVM intrinsics or the fast float32 functions of :mod:`.llvm_math`;
* temporaries live on the stack (``alloca`` in the entry block) up to
  ``max_stack_bytes``, bigger ones on the heap (``malloc``) or, for a bundle, in the
  kernel's scratch (a trailing ``kiln_scratch`` pointer, as :mod:`toolchain.bundle.emit`).

What it cannot translate it refuses with :class:`~toolchain.errors.UnsupportedError`
naming the kernel and the call: calls of C functions (a tensor intrinsic's C ``impl`` or a
target's ``c_helpers``, which only a C compiler can compile) and GPU thread bindings.

>>> from toolchain import te
>>> from toolchain.tir.transform import lower
>>> A = te.placeholder((64,), name="A")
>>> B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
>>> k = LLVMCodegen().generate(lower(te.create_prim_func([A, B])), "scale")
>>> k.entry, "fmul contract float" in k.ir
('kiln_scale', True)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir as ll

from toolchain.codegen.artifact import llvm_support_of
from toolchain.codegen.c import CRenderer
from toolchain.codegen.llvm_analysis import (
    LEAVES,
    PureShapes,
    free_scalars,
    is_register_tile,
    loop_elem_bits,
    unit_stride,
)
from toolchain.codegen.llvm_math import (
    LIBM_ONLY,
    LLVM_INTRINSICS,
    MathCalls,
    external,
    intrinsic,
    splat,
)
from toolchain.codegen.llvm_target import DEFAULT_FAST_MATH, LLVMMachine
from toolchain.codegen.names import sanitize
from toolchain.errors import UnsupportedError
from toolchain.gcpause import paused_gc
from toolchain.tir import arith, ir
from toolchain.tir.analysis import written_buffers
from toolchain.tir.functor import StmtVisitor

I1, I8, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)
PTR = ll.PointerType()
#: integer dtypes whose constants :meth:`LLVMCodegen.typed` emits directly: their range
INT_CONSTANTS = {f"{u}int{n}": ((0, 2**n - 1) if u else (-2**(n - 1), 2**(n - 1) - 1))
                 for u in ("", "u") for n in (8, 16, 32, 64)}
#: TIR scalar dtype -> LLVM value type (bool is i1 in registers, i8 in memory)
SCALAR_TYPES: dict[str, ll.Type] = {
    "float16": ll.HalfType(), "float32": ll.FloatType(), "float64": ll.DoubleType(),
    "int8": I8, "int16": ll.IntType(16), "int32": I32, "int64": I64, "uint8": I8,
    "uint16": ll.IntType(16), "uint32": I32, "uint64": I64, "bool": I1, "handle": PTR,
}
_CMP = {ir.EQ: "==", ir.NE: "!=", ir.LT: "<", ir.LE: "<=", ir.GT: ">", ir.GE: ">="}
#: TIR arithmetic -> the llvmlite builder's method (integers; floats)
_INT_OPS = {ir.Add: "add", ir.Sub: "sub", ir.Mul: "mul"}
_FLOAT_OPS = {ir.Add: "fadd", ir.Sub: "fsub", ir.Mul: "fmul", ir.Div: "fdiv", ir.Mod: "frem"}
#: dtype -> LLVM value type, as :meth:`LLVMCodegen.vtype` made it
_VTYPES: dict[str, ll.Type] = {}
#: expression class -> the name of its ``expr_*`` hook (found along the MRO once)
_EXPR_HOOKS: dict[type, str] = {}
#: an ``unrolled`` loop of at most this many iterations is unrolled fully, longer ones by
#: this factor (the C backend's ``#pragma GCC unroll 16``)
UNROLL = 16


class AccessGroup(ll.MDValue):
    """A distinct empty node naming the memory accesses of one loop
    (``!llvm.access.group``)."""

    def __init__(self, module: ll.Module) -> None:
        super().__init__(module, [], name=str(len(module.metadata)))

    def descr(self, buf: list[str]) -> None:
        buf += ("distinct !{}", "\n")


class LoopID(ll.MDValue):
    """A distinct, self-referencing ``llvm.loop`` node (LLVM requires operand 0 to be
    the node itself); llvmlite's ``add_metadata`` makes neither."""

    def __init__(self, module: ll.Module, properties: list[ll.MDValue]) -> None:
        super().__init__(module, properties, name=str(len(module.metadata)))

    def descr(self, buf: list[str]) -> None:
        ops = ", ".join([self.get_reference(), *(p.get_reference() for p in self.operands)])
        buf += (f"distinct !{{ {ops} }}", "\n")


@dataclass
class LLVMKernel:
    """One kernel as LLVM IR: the module text, its entry symbol, the symbolic sizes passed
    after the params (in order), the scratch it needs and its parameters as C."""

    ir: str
    entry: str
    extra_args: list[ir.Var] = field(default_factory=list)
    scratch_bytes: int = 0
    params: list[str] = field(default_factory=list)
    param_types: list[str] = field(default_factory=list)
    #: modules defining the functions it calls (tensor intrinsics' ``llvm_impl``), linked
    #: in before optimization
    definitions: list[str] = field(default_factory=list)


class LLVMCodegen(MathCalls):
    """Lowered TIR -> an llvmlite module (see the module docstring).

    ``scratch``: temporaries above ``max_stack_bytes`` become slices of a trailing
    ``kiln_scratch`` parameter (bundles) instead of ``malloc`` (host builds);
    ``param_align``: the byte alignment the caller guarantees for buffer parameters
    (default: the element size)."""

    def __init__(self, machine: LLVMMachine | None = None, *,
                 restrict: bool | frozenset[int] = True, scratch: bool = False,
                 max_stack_bytes: int = 64 * 1024, param_align: int | None = None,
                 c_types: Mapping[str, str] | None = None) -> None:
        """``c_types``: the C element types of the prototypes (default the host C
        renderer's; a bundle's spell float16 ``kiln_f16``)."""
        self.machine = machine
        self.c_types = dict(c_types or CRenderer.type_map)
        self.fast_math = tuple(machine.fast_math) if machine else DEFAULT_FAST_MATH
        self.restrict = restrict
        self.scratch = scratch
        self.max_stack_bytes = 1024 if scratch and max_stack_bytes == 64 * 1024 \
            else max_stack_bytes
        self.param_align = param_align

    # ------------------------------------------------------------------ entry point
    def generate(self, func: ir.PrimFunc, name: str | None = None, *,
                 symbol: str | None = None) -> LLVMKernel:
        """The kernel ``kiln_<name>`` (or ``symbol``) of a lowered function as LLVM IR."""
        with paused_gc():  # its many llvmlite objects live until the text is printed
            return self.translate(func, name, symbol)

    def translate(self, func: ir.PrimFunc, name: str | None, symbol: str | None
                  ) -> LLVMKernel:
        """:meth:`generate` (with the garbage collector running)."""
        self.kernel = name or func.name
        self.module = ll.Module(name=self.kernel)
        if self.machine is not None:
            self.module.triple = self.machine.triple
        entry = symbol or CRenderer().entry_name(self.kernel)
        extra = free_scalars(func)
        self.scratch_offsets, scratch_bytes = self._plan_scratch(func.body)
        params = list(func.params) + extra
        types = [PTR if isinstance(p, ir.Buffer) else self.vtype(p.dtype) for p in params]
        if scratch_bytes:
            types.append(PTR)
        fn = ll.Function(self.module, ll.FunctionType(I32, types), name=entry)
        fn.attributes.add("nounwind")
        self.vars: dict[ir.Var, ll.Value] = {}
        self.ranges: dict[ir.Var, ir.Range] = {}
        c_params, c_types = [], []
        written = written_buffers(func.body)  # the prototype's const, as the C kernel's
        for i, (p, arg) in enumerate(zip(params, fn.args, strict=False)):
            var = p.data if isinstance(p, ir.Buffer) else p
            arg.name = sanitize(var.name)
            self.vars[var] = arg
            if isinstance(p, ir.Buffer):
                noalias = self.restrict is True or (isinstance(self.restrict, frozenset)
                                                    and i not in self.restrict)
                if noalias:
                    arg.attributes.add("noalias")
                arg.attributes.align = self.param_align or max(1, self.mbits(p.dtype) // 8)
                ct = self.c_types[p.dtype]
                const = "" if var in written else "const "
                c_params.append(f"{const}{ct}* {'restrict ' if noalias else ''}{arg.name}")
                c_types.append(ct)
            else:
                c_params.append(f"{self.c_types[p.dtype]} {arg.name}")
        if scratch_bytes:
            fn.args[-1].name = "kiln_scratch"
            self.scratch_arg = fn.args[-1]
            c_params.append("uint8_t* kiln_scratch")
        self.fn = fn
        self.llvm_defs = {d.key: d for d in llvm_support_of(func)}
        self.used_defs: dict[str, str] = {}
        self.entry_block = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        self.b = ll.IRBuilder(body)
        self.heap: list[ll.Value] = []
        #: access groups of the enclosing vectorized loops, innermost last
        self.groups: list[AccessGroup] = []
        #: values of pure expressions already emitted where the builder is (see typed)
        self.memo: dict[tuple[int, str], ll.Value] = {}
        self.memo_log: list[tuple[int, str]] = []
        self.shape_of = PureShapes()
        self.stmt(func.body)
        self.b.ret(ll.Constant(I32, 0))
        ll.IRBuilder(self.entry_block).branch(body)
        return LLVMKernel(str(self.module), entry, extra, scratch_bytes, c_params, c_types,
                          [self.used_defs[k] for k in sorted(self.used_defs)])

    def _plan_scratch(self, body: ir.Stmt) -> tuple[dict[ir.Var, int], int]:
        """Scratch offsets of the allocations too big for the stack (bundles only), in the
        order the C bundle renderer assigns them (one 64-byte aligned slice each)."""
        if not self.scratch:
            return {}, 0
        from toolchain.bundle.emit import SCRATCH_ALIGN

        offsets: dict[ir.Var, int] = {}
        total = 0
        found: list[ir.Allocate] = []

        class _Allocs(StmtVisitor):
            def visit_Allocate(self, s: ir.Allocate) -> None:
                found.append(s)
                super().visit_Allocate(s)

        _Allocs().visit_stmt(body)
        for s in found:
            n = ir.const_int(s.buffer.shape[0]) if len(s.buffer.shape) == 1 else None
            if n is None:
                continue
            nbytes = n * ir.bits_of(s.buffer.dtype) // 8
            if nbytes > self.max_stack_bytes and not self.register_tile(s, nbytes) \
                    and s.buffer.data not in offsets:
                offsets[s.buffer.data] = total
                total += -(-max(nbytes, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
        return offsets, total

    @staticmethod
    def register_tile(s: ir.Allocate, nbytes: int) -> bool:
        """Whether allocation ``s`` (``nbytes``) stays an ``alloca`` above the stack limit:
        a tile accessed by whole vectors (any size), or a ``local`` one within the C
        renderer's ``max_register_tile_bytes`` (the same rule as C bundles)."""
        return is_register_tile(s) or (s.buffer.scope == "local"
                                       and nbytes <= CRenderer.max_register_tile_bytes)

    def refuse(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"llvm code generation: kernel {self.kernel}: {what}")

    # ------------------------------------------------------------------ types
    def vtype(self, dtype: str) -> ll.Type:
        """The LLVM value type of a TIR dtype (``float32x8`` -> ``<8 x float>``)."""
        t = _VTYPES.get(dtype)
        if t is None:
            elem, lanes = ir.element_of(dtype), ir.lanes_of(dtype)
            if elem not in SCALAR_TYPES:
                raise self.refuse(f"dtype {dtype!r} has no LLVM type")
            t = SCALAR_TYPES[elem]
            t = _VTYPES[dtype] = ll.VectorType(t, lanes) if lanes > 1 else t
        return t

    def mtype(self, dtype: str) -> ll.Type:
        """The in-memory type (bool is a byte, as C's ``bool`` and numpy's)."""
        t = self.vtype(dtype)
        if ir.element_of(dtype) != "bool":
            return t
        return ll.VectorType(I8, ir.lanes_of(dtype)) if ir.lanes_of(dtype) > 1 else I8

    def mbits(self, dtype: str) -> int:
        return 8 if ir.element_of(dtype) == "bool" else ir.bits_of(ir.element_of(dtype))

    def flag(self, inst: Any) -> ll.Value:
        """Add the allowed fast-math flags to a floating-point instruction."""
        for f in self.fast_math:
            inst.flags.append(f)
        return inst

    # ------------------------------------------------------------------ casts
    def cast(self, v: ll.Value, src: str, dst: str) -> ll.Value:
        """Convert ``v`` of TIR dtype ``src`` to ``dst`` as C does (a scalar is broadcast
        to the lanes of a vector ``dst``)."""
        if src == dst:
            return v
        b = self.b
        ls, ld = ir.lanes_of(src), ir.lanes_of(dst)
        if ls == 1 and ld > 1:
            v = self.splat_value(v, ld)
            src = ir.with_lanes(src, ld)
        if src == dst:
            return v
        es, ed = ir.element_of(src), ir.element_of(dst)
        t = self.vtype(ir.with_lanes(ed, ir.lanes_of(src)))
        if es == ed:
            return v
        if ed == "bool":
            if ir.is_float(es):
                return b.fcmp_unordered("!=", v, splat(v.type, 0.0))
            return b.icmp_unsigned("!=", v, splat(v.type, 0))
        if ir.is_float(es) and ir.is_float(ed):
            return b.fpext(v, t) if ir.bits_of(ed) > ir.bits_of(es) else b.fptrunc(v, t)
        if ir.is_float(es):
            return b.fptoui(v, t) if ed.startswith("uint") else b.fptosi(v, t)
        if ir.is_float(ed):
            return b.uitofp(v, t) if es.startswith("uint") or es == "bool" else \
                b.sitofp(v, t)
        bs, bd = ir.bits_of(es) if es != "bool" else 1, ir.bits_of(ed)
        if bd < bs:
            return b.trunc(v, t)
        if bd > bs:
            return b.zext(v, t) if es.startswith("uint") or es == "bool" else b.sext(v, t)
        return v

    def splat_value(self, v: ll.Value, lanes: int) -> ll.Value:
        vt = ll.VectorType(v.type, lanes)
        if isinstance(v, ll.Constant):
            return ll.Constant(vt, [v] * lanes)
        one = self.b.insert_element(ll.Constant(vt, ll.Undefined), v, ll.Constant(I32, 0))
        return self.b.shuffle_vector(one, ll.Constant(vt, ll.Undefined),
                                     ll.Constant(ll.VectorType(I32, lanes), [0] * lanes))

    def typed(self, e: ir.PrimExpr, dtype: str) -> ll.Value:
        """``e`` evaluated and converted to ``dtype``.

        An integer constant becomes a constant of ``dtype`` (no ``sext i32 16 to i64``).
        A pure expression (arithmetic, casts, selects of constants and variables: no load,
        no call) is emitted once per region and structure (:class:`.PureShapes`): the unrolled
        register tiles repeat the same index expressions in every copy (C1: 3,537 uses of
        731 expression objects, 163 distinct), and LLVM would only merge them again. A
        value is reused while the builder stays in the region that defined it
        (:meth:`region`: a loop body, a branch, a binding), so it always dominates its
        uses."""
        if type(e) is ir.IntImm and dtype in INT_CONSTANTS:
            lo, hi = INT_CONSTANTS[dtype]
            if lo <= e.value <= hi and e.dtype in INT_CONSTANTS:
                return ll.Constant(SCALAR_TYPES[dtype], e.value)
        shape = None if type(e) in LEAVES else self.shape_of(e)
        if shape is None:
            return self.cast(self.expr(e), e.dtype, dtype)
        key = (shape, dtype)
        v = self.memo.get(key)
        if v is None:
            v = self.cast(self.expr(e), e.dtype, dtype)
            self.memo[key] = v
            self.memo_log.append(key)
        return v

    @contextmanager
    def region(self) -> Iterator[None]:
        """Code emitted inside may reuse the values of pure expressions emitted before;
        the ones it emits are forgotten when it ends (they do not dominate what
        follows)."""
        mark = len(self.memo_log)
        try:
            yield
        finally:
            for key in self.memo_log[mark:]:
                del self.memo[key]
            del self.memo_log[mark:]

    # ------------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt) -> None:
        fn = getattr(self, "stmt_" + type(s).__name__, None)
        if fn is None:
            raise self.refuse(f"{type(s).__name__} is not lowered; call toolchain.lower(...) "
                              "(or build) so blocks become loops first")
        fn(s)

    def stmt_SeqStmt(self, s: ir.SeqStmt) -> None:  # noqa: N802 - visitor hook
        for x in s.seq:
            self.stmt(x)

    def stmt_AttrStmt(self, s: ir.AttrStmt) -> None:  # noqa: N802
        self.stmt(s.body)

    def stmt_Evaluate(self, s: ir.Evaluate) -> None:  # noqa: N802
        if isinstance(s.value, (ir.IntImm, ir.FloatImm)):
            return
        if isinstance(s.value, ir.Call) and s.value.op == "tir.storage_sync":
            return  # one thread: nothing to wait for
        self.expr(s.value)

    def stmt_LetStmt(self, s: ir.LetStmt) -> None:  # noqa: N802
        with self.bound(s.var, self.typed(s.value, s.var.dtype)):
            self.stmt(s.body)

    @contextmanager
    def bound(self, var: ir.Var, value: ll.Value) -> Iterator[None]:
        """``var`` bound to ``value`` in a new :meth:`region`; where it shadows a binding
        of the same variable, nothing emitted before is reused inside (those values were
        computed with the outer binding)."""
        old = self.vars.get(var)
        self.vars[var] = value
        saved = None
        if old is not None:
            saved, self.memo, self.memo_log = (self.memo, self.memo_log), {}, []
        try:
            with self.region():
                yield
        finally:
            if saved is not None:
                self.memo, self.memo_log = saved
            if old is None:
                self.vars.pop(var, None)
            else:
                self.vars[var] = old

    def stmt_IfThenElse(self, s: ir.IfThenElse) -> None:  # noqa: N802
        cond = self.typed(s.condition, "bool")
        if s.else_case is None:
            with self.b.if_then(cond), self.region():
                self.stmt(s.then_case)
            return
        with self.b.if_else(cond) as (then, other):
            with then, self.region():
                self.stmt(s.then_case)
            with other, self.region():
                self.stmt(s.else_case)

    def stmt_For(self, s: ir.For) -> None:  # noqa: N802
        if s.kind == "thread_binding":
            raise self.refuse(f"loop {s.loop_var.name} is bound to {s.thread_tag}; GPU "
                              "thread axes need a cuda target (or remove the bind)")
        b, dt = self.b, s.loop_var.dtype
        lo = self.typed(s.min, dt)
        end = self.typed(arith.simplify(s.min + s.extent), dt)
        pre = b.block
        head = b.append_basic_block(f"for_{s.loop_var.name}")
        body = b.append_basic_block(f"for_{s.loop_var.name}_body")
        done = b.append_basic_block(f"for_{s.loop_var.name}_end")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(self.vtype(dt), name=sanitize(s.loop_var.name))
        i.add_incoming(lo, pre)
        signed = not dt.startswith("uint")
        cmp = b.icmp_signed("<", i, end) if signed else b.icmp_unsigned("<", i, end)
        b.cbranch(cmp, body, done)
        b.position_at_end(body)
        self.ranges[s.loop_var] = ir.Range(s.min, s.extent)
        simd = s.kind == "vectorized" or bool(s.annotations.get("pragma_simd"))
        group = AccessGroup(self.module) if simd else None
        if group is not None:
            self.groups.append(group)
        with self.bound(s.loop_var, i):
            self.stmt(s.body)
        if group is not None:
            self.groups.pop()
        nxt = b.add(i, ll.Constant(i.type, 1))
        if signed:
            nxt.flags.append("nsw")
        i.add_incoming(nxt, b.block)
        latch = b.branch(head)
        md = self.loop_metadata(s, group)
        if md is not None:
            latch.set_metadata("llvm.loop", md)
        b.position_at_end(done)

    def loop_metadata(self, s: ir.For, group: AccessGroup | None = None
                      ) -> ll.MDValue | None:
        m = self.module
        props = []
        if group is not None:
            # the schedule vectorized it: its iterations are independent (what C's
            # #pragma omp simd says), so an in-place kernel (output over input, no
            # noalias) vectorizes without a run-time overlap check that would fail
            props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.parallel_accesses"),
                                         group]))
        if (s.kind == "vectorized" or s.annotations.get("pragma_simd")) and \
                unit_stride(s):
            props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.vectorize.enable"),
                                         ll.Constant(I1, 1)]))
            # else the full unroll (before the vectorizer) dissolves the loop into scalars
            # and LLVM vectorizes the loop around it, with gathers and scatters
            props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.unroll.disable")]))
            n = ir.const_int(s.extent)
            bits = self.machine.vector_bits if self.machine else None
            if n is not None and 1 < n <= 64 and n & (n - 1) == 0 and (
                    bits is None or n * loop_elem_bits(s) <= bits):
                # the width the schedule chose (from the target's vector width)
                props.append(m.add_metadata([
                    ll.MetaDataString(m, "llvm.loop.vectorize.width"), ll.Constant(I32, n)]))
        elif s.kind == "unrolled" or s.annotations.get("pragma_unroll"):
            n = ir.const_int(s.extent)
            if n is not None and n <= UNROLL:
                props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.unroll.full")]))
            else:
                props.append(m.add_metadata([ll.MetaDataString(m, "llvm.loop.unroll.count"),
                                             ll.Constant(I32, UNROLL)]))
        return LoopID(m, props) if props else None

    def stmt_Allocate(self, s: ir.Allocate) -> None:  # noqa: N802
        buf = s.buffer
        if len(buf.shape) != 1:
            raise self.refuse(f"allocation {buf.name} is not flattened; run the lowering "
                              "pipeline first")
        et = self.mtype(ir.element_of(buf.dtype))
        n = ir.const_int(buf.shape[0])
        nbytes = n * self.mbits(buf.dtype) // 8 if n is not None else None
        if buf.data in self.scratch_offsets:
            ptr = self.b.gep(self.scratch_arg, [ll.Constant(I64, self.scratch_offsets[
                buf.data])], source_etype=I8, inbounds=True)
            with self.bound(buf.data, ptr):
                self.stmt(s.body)
            return
        if nbytes is not None and (nbytes <= self.max_stack_bytes or buf.scope == "shared"
                                   or self.register_tile(s, nbytes)):
            # in the entry block: a loop around it must not grow the stack
            eb = ll.IRBuilder(self.entry_block)
            eb.position_at_start(self.entry_block)
            slot = eb.alloca(ll.ArrayType(et, max(n, 1)), name=sanitize(buf.name))
            slot.align = max(buf.align, 16)
            # llvmlite types an alloca's pointer (only in Python: the text says ptr)
            slot.type = PTR
            with self.bound(buf.data, slot):
                self.stmt(s.body)
            return
        if self.scratch:
            raise self.refuse(f"temporary buffer {buf.name!r} has a size known only at run "
                              f"time ({buf.shape[0]}); a bundle needs static sizes")
        size = self.b.mul(self.typed(buf.shape[0], "int64"),
                          ll.Constant(I64, self.mbits(buf.dtype) // 8))
        malloc = external(self.module, "malloc", PTR, [I64])
        ptr = self.b.call(malloc, [size])
        with self.b.if_then(self.b.icmp_unsigned("==", ptr, ll.Constant(PTR, None)),
                            likely=False):
            self.b.ret(ll.Constant(I32, -1))
        with self.bound(buf.data, ptr):
            self.stmt(s.body)
        self.b.call(external(self.module, "free", ll.VoidType(), [PTR]), [ptr])

    def stmt_BufferStore(self, s: ir.BufferStore) -> None:  # noqa: N802
        buf, idx = s.buffer, s.indices[0]
        if len(s.indices) != 1:
            raise self.refuse(f"store to {buf.name} is not flattened")
        dtype = ir.with_lanes(buf.dtype, ir.lanes_of(s.value.dtype))
        value = self.to_memory(self.typed(s.value, dtype), dtype)
        base = self.vars[buf.data]
        lanes = ir.lanes_of(dtype)
        align = self.mbits(buf.dtype) // 8
        if lanes == 1:
            self.store(value, self.address(base, buf, idx), align=align)
        elif isinstance(idx, ir.Ramp) and ir.is_const_int(idx.stride, 1):
            self.store(value, self.address(base, buf, idx.base), align=align)
        else:
            for k, lane_idx in enumerate(self.lane_indices(idx, lanes)):
                v = self.b.extract_element(value, ll.Constant(I32, k))
                self.store(v, self.address(base, buf, lane_idx), align=align)

    # ------------------------------------------------------------------ memory
    def load(self, ptr: ll.Value, typ: ll.Type, align: int) -> ll.Value:
        return self.in_group(self.b.load(ptr, typ=typ, align=align))

    def store(self, value: ll.Value, ptr: ll.Value, align: int) -> ll.Value:
        return self.in_group(self.b.store(value, ptr, align=align))

    def in_group(self, inst: Any) -> Any:
        """Tag a memory access with the innermost ``vectorized`` loop's access group."""
        if self.groups:
            inst.set_metadata("llvm.access.group", self.groups[-1])
        return inst

    def address(self, base: ll.Value, buf: ir.Buffer, index: Any) -> ll.Value:
        """``&buf[index]`` (``index``: a TIR expression or an LLVM integer value)."""
        if isinstance(index, ir.PrimExpr):
            index = self.typed(index, "int64")
        elif index.type != I64:
            index = self.b.sext(index, I64)
        return self.b.gep(base, [index], source_etype=self.mtype(ir.element_of(buf.dtype)))

    def lane_indices(self, idx: ir.PrimExpr, lanes: int) -> list[Any]:
        """The index of each lane of a vector access (expressions where they fold)."""
        if isinstance(idx, ir.Ramp):
            return [arith.simplify(idx.base + idx.stride * k) for k in range(lanes)]
        if isinstance(idx, ir.Broadcast):
            return [idx.value] * lanes
        v = self.expr(idx)
        return [self.b.extract_element(v, ll.Constant(I32, k)) for k in range(lanes)]

    def to_memory(self, v: ll.Value, dtype: str) -> ll.Value:
        if ir.element_of(dtype) != "bool":
            return v
        return self.b.zext(v, self.mtype(dtype))

    def from_memory(self, v: ll.Value, dtype: str) -> ll.Value:
        if ir.element_of(dtype) != "bool":
            return v
        return self.b.icmp_unsigned("!=", v, splat(v.type, 0))

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ir.PrimExpr) -> ll.Value:
        name = _EXPR_HOOKS.get(type(e))
        if name is None:
            name = next((f"expr_{k.__name__}" for k in type(e).__mro__
                         if hasattr(self, f"expr_{k.__name__}")), "")
            _EXPR_HOOKS[type(e)] = name
        if not name:
            raise self.refuse(f"cannot translate {type(e).__name__} {e}")
        return getattr(self, name)(e)

    def expr_IntImm(self, e: ir.IntImm) -> ll.Value:  # noqa: N802
        return ll.Constant(self.vtype(e.dtype), e.value)

    def expr_FloatImm(self, e: ir.FloatImm) -> ll.Value:  # noqa: N802
        return ll.Constant(self.vtype(e.dtype), e.value)

    def expr_Var(self, e: ir.Var) -> ll.Value:  # noqa: N802
        if e not in self.vars:
            raise self.refuse(f"variable {e.name} is used outside the statement that binds it")
        return self.vars[e]

    def expr_BinaryOp(self, e: ir.BinaryOp) -> ll.Value:  # noqa: N802
        if isinstance(e, (ir.EQ, ir.NE, ir.LT, ir.LE, ir.GT, ir.GE)):
            return self.compare(e)
        b = self.b
        if isinstance(e, (ir.And, ir.Or)):
            x, y = self.typed(e.a, e.dtype), self.typed(e.b, e.dtype)
            return b.and_(x, y) if isinstance(e, ir.And) else b.or_(x, y)
        x, y = self.typed(e.a, e.dtype), self.typed(e.b, e.dtype)
        elem = ir.element_of(e.dtype)
        if ir.is_float(elem):
            return self.float_binary(e, x, y)
        unsigned = elem.startswith("uint") or elem == "bool"
        if type(e) in _INT_OPS:
            inst = getattr(b, _INT_OPS[type(e)])(x, y)
            if not unsigned:
                inst.flags.append("nsw")  # signed overflow is undefined in C as well
            return inst
        if isinstance(e, ir.Div):
            return b.udiv(x, y) if unsigned else b.sdiv(x, y)
        if isinstance(e, ir.Mod):
            return b.urem(x, y) if unsigned else b.srem(x, y)
        if isinstance(e, (ir.Min, ir.Max)):
            kind = ("u" if unsigned else "s") + ("min" if isinstance(e, ir.Min) else "max")
            return b.call(intrinsic(self.module, f"llvm.{kind}", x.type, [x.type, x.type]),
                          [x, y])
        if isinstance(e, (ir.FloorDiv, ir.FloorMod)):
            return self.floor_divmod(e, x, y, unsigned)
        raise self.refuse(f"cannot translate {type(e).__name__} {e}")

    def float_binary(self, e: ir.BinaryOp, x: ll.Value, y: ll.Value) -> ll.Value:
        b = self.b
        if type(e) in _FLOAT_OPS:
            return self.flag(getattr(b, _FLOAT_OPS[type(e)])(x, y))
        if isinstance(e, (ir.Min, ir.Max)):
            # a < b ? a : b (the C helpers' NaN behaviour); LLVM forms minnum/maxnum or
            # a vector min/max from it where the fast-math flags allow
            op = "<" if isinstance(e, ir.Min) else ">"
            return b.select(self.flag(b.fcmp_ordered(op, x, y)), x, y)
        q = self.math("floor", e.dtype, [self.flag(b.fdiv(x, y))])
        if isinstance(e, ir.FloorDiv):
            return q
        return self.flag(b.fsub(x, self.flag(b.fmul(q, y))))

    def floor_divmod(self, e: ir.BinaryOp, x: ll.Value, y: ll.Value, unsigned: bool
                     ) -> ll.Value:
        b = self.b
        lo, _ = arith.const_bound(e.a, self.ranges)
        c = ir.const_int(e.b)
        if unsigned or (lo is not None and lo >= 0 and c is not None and c > 0):
            div = isinstance(e, ir.FloorDiv)
            if unsigned:
                return b.udiv(x, y) if div else b.urem(x, y)
            return b.sdiv(x, y) if div else b.srem(x, y)
        q, r = b.sdiv(x, y), b.srem(x, y)
        zero = splat(x.type, 0)
        # the remainder is non-zero and its sign differs from the divisor's: round down
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
        if isinstance(e, ir.FloorDiv):
            return b.sub(q, b.zext(fix, x.type))
        return b.add(r, b.select(fix, y, zero))

    def compare(self, e: ir.BinaryOp) -> ll.Value:
        common = ir.binary_dtype(e.a, e.b)
        x, y = self.typed(e.a, common), self.typed(e.b, common)
        op, elem = _CMP[type(e)], ir.element_of(common)
        if ir.is_float(elem):
            # C: every comparison with NaN is false except !=
            if op == "!=":
                return self.flag(self.b.fcmp_unordered(op, x, y))
            return self.flag(self.b.fcmp_ordered(op, x, y))
        if elem.startswith("uint") or elem == "bool":
            return self.b.icmp_unsigned(op, x, y)
        return self.b.icmp_signed(op, x, y)

    def expr_Not(self, e: ir.Not) -> ll.Value:  # noqa: N802
        v = self.typed(e.a, ir.with_lanes("bool", ir.lanes_of(e.a.dtype)))
        r = self.b.xor(v, splat(v.type, 1))
        return self.cast(r, ir.with_lanes("bool", ir.lanes_of(e.a.dtype)), e.dtype)

    def expr_Select(self, e: ir.Select) -> ll.Value:  # noqa: N802
        c = self.typed(e.condition, ir.with_lanes("bool", ir.lanes_of(e.condition.dtype)))
        return self.b.select(c, self.typed(e.true_value, e.dtype),
                             self.typed(e.false_value, e.dtype))

    def expr_Cast(self, e: ir.Cast) -> ll.Value:  # noqa: N802
        return self.typed(e.value, e.dtype)

    def expr_Let(self, e: ir.Let) -> ll.Value:  # noqa: N802
        with self.bound(e.var, self.typed(e.value, e.var.dtype)):
            return self.expr(e.body)

    def expr_Ramp(self, e: ir.Ramp) -> ll.Value:  # noqa: N802
        base = self.splat_value(self.expr(e.base), e.lanes)
        stride = self.splat_value(self.typed(e.stride, e.base.dtype), e.lanes)
        iota = ll.Constant(base.type, list(range(e.lanes)))
        return self.b.add(base, self.b.mul(iota, stride))

    def expr_Broadcast(self, e: ir.Broadcast) -> ll.Value:  # noqa: N802
        return self.splat_value(self.expr(e.value), e.lanes)

    def expr_BufferLoad(self, e: ir.BufferLoad) -> ll.Value:  # noqa: N802
        buf, idx = e.buffer, e.indices[0]
        if len(e.indices) != 1:
            raise self.refuse(f"load from {buf.name} is not flattened")
        base = self.vars[buf.data]
        lanes = ir.lanes_of(e.dtype)
        align = self.mbits(buf.dtype) // 8
        mt = self.mtype(e.dtype)
        if lanes == 1:
            v = self.load(self.address(base, buf, idx), typ=mt, align=align)
        elif isinstance(idx, ir.Ramp) and ir.is_const_int(idx.stride, 1):
            v = self.load(self.address(base, buf, idx.base), typ=mt, align=align)
        elif isinstance(idx, ir.Broadcast):
            one = self.load(self.address(base, buf, idx.value), typ=mt.element, align=align)
            v = self.splat_value(one, lanes)
        else:
            v = ll.Constant(mt, ll.Undefined)
            for k, lane_idx in enumerate(self.lane_indices(idx, lanes)):
                x = self.load(self.address(base, buf, lane_idx), typ=mt.element, align=align)
                v = self.b.insert_element(v, x, ll.Constant(I32, k))
        return self.from_memory(v, e.dtype)

    # ------------------------------------------------------------------ calls
    def expr_Call(self, e: ir.Call) -> ll.Value:  # noqa: N802
        op = e.op
        if op == "tir.if_then_else":
            return self.if_then_else(e)
        if op == "tir.address_of":
            load = e.args[0]
            assert isinstance(load, ir.BufferLoad)
            return self.address(self.vars[load.buffer.data], load.buffer, load.indices[0])
        if op == "tir.storage_sync":
            return ll.Constant(I32, 0)
        if op == "reinterpret":
            return self.b.bitcast(self.expr(e.args[0]), self.vtype(e.dtype))
        if op == "isnan":
            x = self.expr(e.args[0])
            return self.b.fcmp_unordered("uno", x, x)
        if op.startswith("tir."):
            raise self.refuse(f"builtin {op} is not supported")
        if op in LLVM_INTRINSICS or op in LIBM_ONLY or op in ("sigmoid", "rsqrt", "fmod"):
            if not ir.is_float(ir.element_of(e.dtype)):
                raise self.refuse(f"math call {op} of {e.dtype} (a float op)")
            return self.math(op, e.dtype, [self.typed(a, e.dtype) for a in e.args])
        if op in self.llvm_defs:
            return self.call_definition(e)
        from toolchain.intrinsics import intrinsic_of_function

        spec = intrinsic_of_function(op)
        if spec is not None:
            raise self.refuse(
                f"calls {op}(), the C implementation of tensor intrinsic {spec.name}, which "
                f"declares no llvm_impl; add one to target {spec.target!r} (LLVM IR: an "
                "LLVM intrinsic or inline asm, docs/llvm.md), build with backend='c', or "
                "schedule it without tensorize")
        raise self.refuse(
            f"calls the C function {op}() — a target's c_helpers or an extern function — "
            "and the LLVM backend has no LLVM mapping for it; build this kernel with the C "
            "backend (backend='c')")

    def call_definition(self, e: ir.Call) -> ll.Value:
        """A call of a function an ``llvm_impl`` defines (linked in before O3)."""
        args = [self.expr(a) for a in e.args]
        fn = self.module.globals.get(e.op)
        if fn is None:
            fn = ll.Function(self.module, ll.FunctionType(self.vtype(e.dtype),
                                                          [a.type for a in args]), e.op)
        self.used_defs[e.op] = self.llvm_defs[e.op].text
        return self.b.call(fn, args)

    def if_then_else(self, e: ir.Call) -> ll.Value:
        c, t, f = e.args
        if ir.lanes_of(c.dtype) > 1:
            return self.expr_Select(ir.Select(c, t, f))
        b = self.b
        cond = self.typed(c, "bool")
        # only the branch taken is evaluated: padding loads rely on it
        with b.if_else(cond) as (then, other):
            with then, self.region():
                tv, tb = self.typed(t, e.dtype), b.block
            with other, self.region():
                fv, fb = self.typed(f, e.dtype), b.block
        phi = b.phi(tv.type)
        phi.add_incoming(tv, tb)
        phi.add_incoming(fv, fb)
        return phi


__all__ = ["SCALAR_TYPES", "AccessGroup", "LLVMCodegen", "LLVMKernel", "LoopID"]
