"""CUDA dialect: thread-bound loops become ``blockIdx``/``threadIdx`` indices of kernels.

Each top-level statement of the lowered function is one ``__global__`` kernel; its
``blockIdx.*`` / ``threadIdx.*`` loops give the launch shape (listed in the file header
and in :attr:`CSource.kernels`). ``shared`` allocations are ``__shared__`` arrays, and the
barriers the lowering placed (``T.storage_sync('shared')``, from the shared-memory
read/write sets: :mod:`toolchain.tir.transform.inject_barriers`) are ``__syncthreads()``.
Vector expressions are written lane by lane (CUDA C has no GCC vector extensions), except a
contiguous copy the renderer can prove aligned: one ``uint32_t``/``uint2``/``uint4`` access
(or ``__pipeline_memcpy_async`` from global to shared in a kernel annotated ``ASYNC_COPY``).
A kernel whose shared buffers exceed the 48 KiB of static shared memory gets them from
dynamic shared memory (``extern __shared__``; its ``smem`` bytes are the launch's).
Without a GPU the source is checked with ``nvcc -arch=sm_80 -ptx`` (:func:`compile_ptx`).

>>> from toolchain import te
>>> from toolchain.tir.schedule import Schedule
>>> from toolchain.tir.transform import lower
>>> A = te.placeholder((1024,), name="A")
>>> B = te.compute((1024,), lambda i: A[i] * 2.0, name="B")
>>> sch = Schedule(te.create_prim_func([A, B]))
>>> bx, tx = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 128])
>>> sch.bind(bx, "blockIdx.x"); sch.bind(tx, "threadIdx.x")
>>> src = CUDARenderer().render(lower(sch), name="scale")
>>> src.kernels[0]["grid"], src.kernels[0]["block"]
(['8', '1', '1'], ['128', '1', '1'])
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import ClassVar

import jinja2

from toolchain.codegen.artifact import support_of
from toolchain.codegen.cstyle import TEMPLATES, CSource, CStyleRenderer
from toolchain.errors import BuildError, GeneratedCodeError, UnsupportedError
from toolchain.tir import arith, ir
from toolchain.tir.functor import ExprMutator, StmtVisitor, uses_var
from toolchain.tir.schedule.gpu import ASYNC_COPY, ASYNC_PROXY
from toolchain.tir.transform.inject_double_buffer import PIPELINE_STAGES
from toolchain.tir.transform.lower_thread_allreduce import SHUFFLES


class _Lane(ExprMutator):
    """The scalar expression of lane ``k`` of a vector expression."""

    def __init__(self, k: int) -> None:
        self.k = k

    def visit_Ramp(self, e: ir.Ramp) -> ir.PrimExpr:
        return arith.simplify(e.base + e.stride * self.k)

    def visit_Broadcast(self, e: ir.Broadcast) -> ir.PrimExpr:
        return e.value

    def visit_Cast(self, e: ir.Cast) -> ir.PrimExpr:
        return ir.Cast(ir.element_of(e.dtype), self.visit_expr(e.value))

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        return ir.BufferLoad(e.buffer, tuple(self.visit_expr(i) for i in e.indices))

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:
        # a call's own type too: lane k of a float16x8 ``if_then_else`` (a guarded operand
        # tile) is a float16, not a vector cast in scalar code
        return ir.Call(ir.element_of(e.dtype), e.op, tuple(self.visit_expr(a) for a in e.args))


class _Launch(StmtVisitor):
    def __init__(self) -> None:
        self.extents: dict[str, ir.PrimExpr] = {}

    def visit_For(self, s: ir.For) -> None:
        if s.kind == "thread_binding" and s.thread_tag and not s.thread_tag.startswith("v"):
            self.extents.setdefault(s.thread_tag, s.extent)
        super().visit_For(s)


#: the precedence a rendered call has (an atom: it binds tighter than any operator)
_CALL_PREC = 20


@functools.cache
def _templates() -> jinja2.Environment:
    """The jinja2 environment of the kernel file templates, made once (a fresh one compiled
    the template again for every kernel file)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                              trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


class CUDARenderer(CStyleRenderer):
    """CUDA C for NVIDIA GPUs (see the module docstring)."""

    dialect: ClassVar[str] = "cuda"
    template: ClassVar[str] = "c/cuda.cu.j2"
    kernel_prefix: ClassVar[str] = 'extern "C" __global__ '
    smem_prefix: ClassVar[str] = "__shared__ "
    barrier: ClassVar[str] = "__syncthreads()"
    restrict: ClassVar[str] = "__restrict__"
    helper_qualifier: ClassVar[str] = "static __device__ __forceinline__"
    vector_locals: ClassVar[bool] = False
    #: CUDA's own expf / erff / tanhf are fast device functions
    fast_math: ClassVar[bool] = False
    #: the most bytes of static ``__shared__`` arrays a kernel may declare (CUDA's limit
    #: on every architecture); a kernel whose shared buffers need more takes them from
    #: dynamic shared memory (``extern __shared__``, sized at launch: the kernel's
    #: ``smem``), which a target may offer up to its ``max_shared_memory_per_block_optin``
    static_smem_bytes: ClassVar[int] = 48 * 1024
    #: alignment of each shared buffer carved out of dynamic shared memory
    smem_align: ClassVar[int] = 128
    type_map: ClassVar[dict[str, str]] = {**CStyleRenderer.type_map, "float16": "__half"}
    code_for_workitem: ClassVar[dict[str, str]] = {
        f"{k}.{a}": f"{k}.{a}" for k in ("blockIdx", "threadIdx") for a in "xyz"}

    def __init__(self, openmp: bool = False, allow_heap: bool = False,
                 restrict: bool | frozenset[int] = True) -> None:
        # kernels never allocate from the heap (render_heap_alloc refuses), whatever is asked
        super().__init__(openmp=False, allow_heap=False)
        #: ``__restrict__`` on every pointer parameter (True), none (False), or all but
        #: these positions (the pair a memory plan puts in one buffer)
        self.restricted = restrict
        #: the kernel being rendered: its shared buffers' byte offsets in dynamic shared
        #: memory (empty: static ``__shared__`` arrays)
        self.dynamic_smem: dict[ir.Var, int] = {}
        #: the alignment its ``extern __shared__`` array declares (``smem_align``, or a
        #: larger one a buffer asks for: a swizzled tile's 1024 bytes)
        self.smem_base_align = self.smem_align
        #: the kernel being rendered copies global -> shared asynchronously (its schedule
        #: annotated a loop ``ASYNC_COPY``)
        self.async_copy = False
        #: the kernel's shared memory is read by the async proxy (wgmma: ASYNC_PROXY)
        self.async_proxy = False
        #: the pipelined step loops being rendered (PIPELINE_STAGES): their stages, loop
        #: variable and first value, as C
        self.stages: list[tuple[int, str, str]] = []

    def stmt_For(self, s: ir.For) -> None:
        n = s.annotations.get(PIPELINE_STAGES)
        if n is not None:
            self.stages.append((int(n), self.var(s.loop_var), self.expr(s.min)))
        try:
            super().stmt_For(s)
        finally:
            if n is not None:
                self.stages.pop()

    def param_qualifier(self, index: int) -> str:
        r = self.restricted
        return "" if r is False or (isinstance(r, frozenset) and index in r) else self.restrict

    def render(self, func: ir.PrimFunc, name: str | None = None) -> CSource:
        """One ``__global__`` kernel per top-level statement of the lowered function."""
        self.reset()
        entry = self.entry_name(name or func.name)
        params, extra, kernels = self.render_kernels(func, entry)
        code = self._render_file(func, entry, params, kernels)
        return CSource(code, entry, extra,
                       kernels=[{k: v for k, v in kn.items() if k != "body"} for kn in kernels])

    def render_kernels(self, func: ir.PrimFunc, entry: str
                       ) -> tuple[list[str], list[ir.Var], list[dict]]:
        """(parameter declarations, symbolic sizes, kernels): one kernel per top-level
        statement, each ``{name, params, grid, block, threads, body}`` (``body``: its
        lines; ``params``: its own declarations, ``const`` for what it only reads)."""
        body = func.body
        if isinstance(body, ir.Allocate):
            raise UnsupportedError(
                f"cuda code generation: buffer {body.buffer.name} ({body.buffer.scope}) is "
                "shared by several kernels; give it shared/local scope inside one kernel "
                "(compute_at under the blockIdx loop) or make it a function argument")
        items = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
        kernels = []
        # the function's parameters: const where no kernel writes the buffer; each kernel
        # declares its own (const where it only reads)
        params, extra = self.signature(func)
        for n, item in enumerate(items):
            self.lines, self.indent = [], 1
            own, _ = self.signature(func, item)
            launch = _Launch()
            launch.visit_stmt(item)
            grid = [self._dim(launch.extents, f"blockIdx.{a}") for a in "xyz"]
            block = [self._dim(launch.extents, f"threadIdx.{a}") for a in "xyz"]
            self.dynamic_smem, smem = self._carve_shared(item)
            self.async_copy = _annotated(item, ASYNC_COPY)
            self.async_proxy = _annotated(item, ASYNC_PROXY)
            if smem:
                self.emit(f"extern __shared__ __align__({self.smem_base_align}) unsigned char "
                          "kiln_smem[];")
            self.stmt(item)
            threads = 1
            for b in block:
                threads *= int(b) if b.isdigit() else 1024
            kernels.append({"name": f"{entry}_kernel{n}", "params": own,
                            "grid": grid, "block": block,
                            "threads": min(threads, 1024), "smem": smem,
                            "body": self.lines})
        self.dynamic_smem, self.async_copy, self.async_proxy = {}, False, False
        return params, extra, kernels

    def _carve_shared(self, kernel: ir.Stmt) -> tuple[dict[ir.Var, int], int]:
        """Where a kernel's shared buffers lie in dynamic shared memory, and its bytes:
        ``({}, 0)`` when their static arrays fit :attr:`static_smem_bytes`; else each
        buffer at its own offset (aligned to :attr:`smem_align`, or to the buffer's own
        ``align`` where larger -- a swizzled tile's 1024 bytes --, none reused)."""
        found: list[ir.Buffer] = []

        class _Shared(StmtVisitor):
            def visit_Allocate(self, s: ir.Allocate) -> None:
                if s.buffer.scope == "shared" and all(s.buffer.data is not b.data
                                                      for b in found):
                    found.append(s.buffer)
                super().visit_Allocate(s)

        _Shared().visit_stmt(kernel)
        offsets, total = {}, 0
        self.smem_base_align = max([self.smem_align, *(b.align for b in found)])
        for buf in found:
            n = ir.const_int(buf.shape[0]) if len(buf.shape) == 1 else None
            if n is None:
                return {}, 0  # not flattened or symbolic: the static path reports it
            align = max(self.smem_align, buf.align)
            total = -(-total // align) * align
            offsets[buf.data] = total
            total += -(-n * ir.bits_of(buf.dtype) // 8 // self.smem_align) * self.smem_align
        static = sum(ir.const_int(b.shape[0]) * ir.bits_of(b.dtype) // 8 for b in found)
        if static <= self.static_smem_bytes:
            return {}, 0
        return offsets, total

    def _dim(self, extents: dict[str, ir.PrimExpr], tag: str) -> str:
        return self.expr(extents[tag]) if tag in extents else "1"

    def _render_file(self, func: ir.PrimFunc, entry: str, params: list[str],
                     kernels: list[dict]) -> str:
        return _templates().get_template(self.template).render(
            entry=entry, func_name=func.name, prelude=support_of(func).render(),
            helpers=self.helper_list(), qualifier=self.helper_qualifier,
            kernels=kernels, params=params or ["void"])

    # ------------------------------------------------------------------ hooks
    def render_thread_loop(self, s: ir.For) -> None:
        tag = s.thread_tag or ""
        v = self.var(s.loop_var)
        if tag.startswith("vthread"):
            raise UnsupportedError(f"cuda code generation: vthread loop {v} was not lowered; "
                                   "run the lowering pipeline (inject_virtual_thread)")
        idx = self.code_for_workitem[tag]
        start = "" if ir.is_const_int(s.min, 0) else f"{self.expr(s.min)} + "
        if uses_var(s.body, s.loop_var):
            self.emit(f"{{ const {self.ctype(s.loop_var.dtype)} {v} = {start}(int32_t){idx};")
        else:  # a grid axis of extent 1 the body never reads (nvcc warns of it)
            self.emit(f"{{ /* {v} = {start}{idx}: unused */")
        self.ranges[s.loop_var] = ir.Range(s.min, s.extent)
        self.block(s.body)
        self.emit("}")

    def render_parallel_pragma(self, s: ir.For) -> None:
        pass  # a parallel loop inside a kernel runs serially per thread

    def render_simd_pragma(self, s: ir.For) -> None:
        pass

    def stmt_Allocate(self, s: ir.Allocate) -> None:
        buf = s.buffer
        if buf.data in self.dynamic_smem:  # a slice of the kernel's dynamic shared memory
            et = self.ctype(buf.dtype)
            self.emit("{")
            self.indent += 1
            self.emit(f"{et} *{self.names(buf.data, buf.name)} = ({et} *)(kiln_smem + "
                      f"{self.dynamic_smem[buf.data]});")
            self.stmt(s.body)
            self.indent -= 1
            self.emit("}")
            return
        if not buf.scope.startswith("wmma."):
            super().stmt_Allocate(s)
            return
        # tensor-core fragments: one per 16 x 16 tile of the buffer (the tensor-core
        # schedule's warp tile: toolchain.schedules.gpu.tensorcore), addressed through
        # the intrinsic calls (expr_Call below); the type comes from the target's
        # c_helpers (kiln_wmma_acc)
        n = ir.const_int(buf.shape[0]) if len(buf.shape) == 1 else None
        if n is None or n % 256:
            raise UnsupportedError(f"cuda code generation: fragment buffer {buf.name} "
                                   f"({buf.scope}) must hold whole 16 x 16 tiles, not {buf.shape}")
        if buf.scope != "wmma.accumulator":
            raise UnsupportedError(f"cuda code generation: fragment scope {buf.scope} of "
                                   f"{buf.name}: only wmma.accumulator buffers are declared")
        self.emit("{")
        self.indent += 1
        self.emit(f"kiln_wmma_acc {self.names(buf.data, buf.name)}[{n // 256}];")
        self.stmt(s.body)
        self.indent -= 1
        self.emit("}")

    def stmt_Evaluate(self, s: ir.Evaluate) -> None:
        if not (self.async_proxy and isinstance(s.value, ir.Call)
                and s.value.op == "tir.storage_sync"):
            super().stmt_Evaluate(s)
            return
        # shared memory the async proxy reads (wgmma's operands): each thread's writes --
        # plain stores, or cp.async copies once waited for -- ordered before it, then the
        # barrier
        if self.async_copy:
            self.emit(f"__pipeline_commit(); __pipeline_wait_prior({self._pipeline_wait()});")
        # (sm_90 and later: built for an older architecture, the wgmma calls are traps)
        self.emit("#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900")
        self.emit('asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
        self.emit("#endif")
        self.emit(f"{self.barrier};")

    def _pipeline_wait(self) -> str:
        """The groups of asynchronous copies a barrier may leave in flight: inside a step
        loop pipelined over n stages (inject_double_buffer), those committed by the n - 2
        latest barriers (the tile the next step reads was fetched n - 1 barriers ago or
        more); not in the first step: the fetches before the loop (n - 1 steps' tiles)
        are one group, committed by its first barrier (or the one before it)."""
        if self.stages and self.stages[-1][0] > 2:
            n, k, lo = self.stages[-1]
            return f"{k} == {lo} ? 0 : {n - 2}"
        return "0"

    def expr_Call(self, e: ir.Call) -> tuple[str, int]:
        from toolchain.intrinsics import operand_elements

        if e.op == "tir.storage_sync" and self.async_copy:  # the copies land first
            return (f"(__pipeline_commit(), __pipeline_wait_prior({self._pipeline_wait()}), "
                    f"{self.barrier})"), _CALL_PREC

        ops = operand_elements(e)
        if ops is not None and any(b.scope.startswith("wmma.") for b, _, _, _ in ops):
            # a fragment operand: the fragment of the 16 x 16 tile whose first element is
            # at flat index f of a buffer with rows of L elements (its tile's row stride):
            # fragments row-major, L / 16 a row
            args = []
            for (buf, first, dims, _), arg in zip(ops, e.args, strict=True):
                if not buf.scope.startswith("wmma."):
                    args.append(self.expr(arg))
                    continue
                row = dims[0][1]
                f = self.expr(first)
                frag = f"({f}) / {16 * row} * {row // 16} + ({f}) % {row} / 16"
                args.append(f"&{self.var(buf.data)}[{frag}]")
            return f"{e.op}({', '.join(args)})", _CALL_PREC
        if e.op in SHUFFLES:  # T.shfl_xor_sync(mask, value, offset, width)
            mask, *rest = e.args
            m = ir.const_int(mask)
            head = f"{m:#x}u" if m is not None else self.expr(mask)
            name = "__" + e.op[len("tir."):]
            return f"{name}({head}, {', '.join(self.expr(a) for a in rest)})", _CALL_PREC
        if e.op == "tir.address_of" and isinstance(e.args[0], ir.BufferLoad) and \
                e.args[0].buffer.scope.startswith("wmma."):
            raise UnsupportedError(f"cuda code generation: the address of fragment buffer "
                                   f"{e.args[0].buffer.name} outside a tensor intrinsic call")
        return super().expr_Call(e)

    def render_heap_alloc(self, buf: ir.Buffer, name: str, et: str, size: ir.PrimExpr,
                          body: ir.Stmt) -> None:
        raise UnsupportedError(
            f"cuda code generation: allocation {buf.name} ({buf.scope}, {size} elements) "
            "inside a kernel must have a constant size of at most "
            f"{self.max_stack_bytes} bytes; tile it smaller")

    def stmt_BufferStore(self, s: ir.BufferStore) -> None:
        lanes = ir.lanes_of(s.value.dtype)
        if lanes == 1:
            super().stmt_BufferStore(s)
            return
        word = _vector_copy(s)
        if word is not None:  # one 4/8/16-byte load and store instead of lane by lane
            src = _copied(s.value)
            assert src is not None
            dst_at = f"&{self.var(s.buffer.data)}[{self.expr(s.indices[0].base)}]"
            src_at = f"&{self.var(src.buffer.data)}[{self.expr(src.indices[0].base)}]"
            if self.async_copy and s.buffer.scope == "shared" and \
                    src.buffer.scope in ("", "global"):
                nbytes = ir.lanes_of(s.value.dtype) * ir.bits_of(s.value.dtype) // 8
                self.emit(f"__pipeline_memcpy_async({dst_at}, {src_at}, {nbytes});")
                return
            self.emit(f"*({word} *)({dst_at}) = *(const {word} *)({src_at});")
            return
        for k in range(lanes):
            lane = _Lane(k)
            self.stmt_BufferStore(ir.BufferStore(
                s.buffer, lane.visit_expr(s.value),
                tuple(lane.visit_expr(i) for i in s.indices)))

    def expr_BufferLoad(self, e: ir.BufferLoad) -> tuple[str, int]:
        if ir.lanes_of(e.dtype) > 1:
            raise UnsupportedError(f"cuda code generation: vector load {e} outside a store")
        return super().expr_BufferLoad(e)


def _annotated(s: ir.Stmt, key: str) -> bool:
    """Whether a loop of ``s`` carries annotation ``key``."""
    found: list[bool] = []

    class _Find(StmtVisitor):
        def visit_For(self, f: ir.For) -> None:
            if f.annotations.get(key):
                found.append(True)
            super().visit_For(f)

    _Find().visit_stmt(s)
    return bool(found)


#: bytes of a vector copy -> the CUDA type that moves them in one access
_WORDS = {4: "uint32_t", 8: "uint2", 16: "uint4"}


def _copied(e: ir.PrimExpr) -> ir.BufferLoad | None:
    """The load ``e`` copies unchanged: ``e`` itself, or ``e`` under casts that widen
    and narrow back to its own type exactly (float16 -> float32 -> float16: what
    ``legalize_f16`` makes of a float16 copy)."""
    want = e.dtype
    while isinstance(e, ir.Cast):
        inner = e.value
        if not (isinstance(inner, ir.Cast) and ir.element_of(inner.value.dtype)
                == ir.element_of(want) and ir.bits_of(inner.dtype) >= ir.bits_of(want)
                and ir.is_float(inner.dtype) == ir.is_float(want)):
            return None
        e = inner.value
    return e if isinstance(e, ir.BufferLoad) and e.dtype == want else None


def _divisible(e: ir.PrimExpr, n: int) -> bool:
    """Whether ``e`` is a multiple of ``n`` for every value of its variables (a sufficient
    syntactic check: constants, sums, products with a constant, ``x % c`` with ``c`` a
    multiple of ``n``)."""
    if n == 1:
        return True
    if isinstance(e, ir.IntImm):
        return e.value % n == 0
    if isinstance(e, (ir.Add, ir.Sub)):
        return _divisible(e.a, n) and _divisible(e.b, n)
    if isinstance(e, ir.Mul):
        for c, x in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, ir.IntImm):
                return _divisible(x, n // math.gcd(c.value, n))
        return _divisible(e.a, n) or _divisible(e.b, n)
    if isinstance(e, ir.FloorMod) and isinstance(e.b, ir.IntImm):
        return e.b.value % n == 0 and _divisible(e.a, n)
    return False


def _vector_copy(s: ir.BufferStore) -> str | None:
    """The word type that copies the vector store ``s`` in one access: a copy (see
    :func:`_copied`) between two flat buffers of the same type, both indices contiguous
    ramps whose first element is a multiple of the lanes in buffers at least that aligned;
    else None (the store is written lane by lane)."""
    src = _copied(s.value)
    if src is None or len(s.indices) != 1 or len(src.indices) != 1:
        return None
    lanes = ir.lanes_of(s.value.dtype)
    nbytes = lanes * ir.bits_of(s.value.dtype) // 8
    word = _WORDS.get(nbytes)
    if word is None or src.buffer.dtype != s.buffer.dtype:
        return None
    for buf, idx in ((s.buffer, s.indices[0]), (src.buffer, src.indices[0])):
        if not (isinstance(idx, ir.Ramp) and ir.is_const_int(idx.stride, 1)
                and buf.elem_offset is None and buf.align >= nbytes
                and _divisible(arith.simplify(idx.base), lanes)):
            return None
    return word


def compile_ptx(source: str, arch: str = "sm_80", nvcc: str | None = None) -> str:
    """Compile CUDA source to PTX with ``nvcc -arch=<arch> -ptx``; return the PTX text."""
    exe = nvcc or shutil.which("nvcc")
    if exe is None:
        raise BuildError("nvcc not found on PATH; install the CUDA toolkit to compile CUDA")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "kernels.cu"
        out = Path(d) / "kernels.ptx"
        src.write_text(source)
        cmd = [exe, f"-arch={arch}", "-ptx", "-O3", str(src), "-o", str(out)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            keep = Path(tempfile.mkdtemp(prefix="kiln-cuda-")) / "kernels.cu"
            keep.write_text(source)
            raise GeneratedCodeError(f"nvcc failed (exit {res.returncode}).\ncommand: "
                                     f"{' '.join(cmd)}\nsource kept at: {keep}\n"
                                     f"{res.stderr.strip()}")
        return out.read_text()
