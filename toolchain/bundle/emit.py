"""Kernel C for a bundle: the host C renderer with three bundle rules.

:class:`BundleRenderer` is :class:`~toolchain.codegen.c.CRenderer` with:

* **no heap**: an allocation larger than :attr:`max_stack_bytes` (packing buffers,
  ``cache_write`` tiles) becomes a slice of the kernel's scratch area — an extra
  ``uint8_t* kiln_scratch`` parameter pointing into the arena (the memory planner reserves
  it for exactly the kernel's step), instead of ``posix_memalign`` + ``free``;
* **single thread, portable pragmas**: no OpenMP (a bundle runs on one core; a firmware
  has no OpenMP runtime) and no ``#pragma omp simd`` (unknown pragmas break
  ``-Werror`` builds; the loops are vectorised by the schedule or the compiler), and
  ``__extension__`` before GNU statement expressions (``-pedantic``);
* **no ``restrict`` where aliasing is planned**: where the memory plan puts a kernel's
  output over one of its inputs (in place), those two parameters are rendered without
  ``restrict`` (``restrict=`` a set of parameter positions); the others keep it, so the
  compiler still knows a store to the output leaves the weights alone.

Example::

    >>> from toolchain import te
    >>> from toolchain.tir.transform import lower
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    >>> k = render_kernel(lower(te.create_prim_func([A, B])), "net_add")
    >>> k.params, k.scratch_bytes
    (['float* restrict A', 'float* restrict B'], 0)
    >>> C = te.placeholder((64,), name="C")
    >>> D = te.compute((64,), lambda i: A[i] + C[i], name="D")
    >>> render_kernel(lower(te.create_prim_func([A, C, D])), "net_add2",
    ...               restrict=frozenset({0, 2})).params  # D written over A
    ['float* A', 'float* restrict C', 'float* D']
"""

from __future__ import annotations

from typing import Any, ClassVar

from toolchain.codegen.artifact import CSupport, KernelArtifact, support_of
from toolchain.codegen.c import CRenderer
from toolchain.codegen.cstyle import ATOM
from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.transform.legalize_f16 import legalize_f16

#: the bundle runtime's header: ``kiln_f16`` and its conversions (float16 kernels)
RUNTIME_HEADER = "kiln_runtime.h"

#: alignment of each scratch slice (bytes)
SCRATCH_ALIGN = 64


#: the C backend's kernel artifact (kept under its old name for callers)
KernelSource = KernelArtifact


class BundleRenderer(CRenderer):
    """The C renderer for bundle kernels (see the module docstring)."""

    #: allocations up to this size stay on the stack (register tiles, small temporaries)
    max_stack_bytes: ClassVar[int] = 1024
    #: float16 is storage only (16 bits, ``kiln_f16`` of the bundle runtime): kernels
    #: compute in float32 (:func:`~toolchain.tir.transform.legalize_f16.legalize_f16`)
    type_map: ClassVar[dict[str, str]] = {**CRenderer.type_map, "float16": "kiln_f16"}

    def __init__(self, restrict: bool | frozenset[int] = True) -> None:
        super().__init__(openmp=False)
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

    def render_simd_pragma(self, s: ir.For) -> None:
        return  # see the module docstring

    def expr_Let(self, e: ir.Let) -> tuple[str, int]:
        # a GNU statement expression: __extension__ keeps -pedantic builds clean
        text, prec = super().expr_Let(e)
        return f"__extension__ {text}", prec

    def expr_Cast(self, e: ir.Cast) -> tuple[str, int]:
        """float16 <-> float32 through the runtime's bit-exact helpers (round to nearest
        even); a vector converts lane by lane."""
        src, dst = ir.element_of(e.value.dtype), ir.element_of(e.dtype)
        if "float16" not in (src, dst):
            return super().expr_Cast(e)
        fn = {("float16", "float32"): "kiln_f16_to_f32", ("float32", "float16"): "kiln_f32_to_f16",
              ("float64", "float16"): "kiln_f64_to_f16"}.get((src, dst))
        if fn is None:
            raise UnsupportedError(f"bundle code generation: cast {e} (float16 converts "
                                   "to float32 and from float32/float64 only; run "
                                   "legalize_f16 first)")
        lanes = ir.lanes_of(e.dtype)
        if lanes == 1:
            return f"{fn}({self.expr(e.value)})", ATOM
        vt = self.ctype(e.dtype)
        v = e.value
        if (isinstance(v, ir.BufferLoad) and v.buffer.data not in self.vec_locals
                and isinstance(v.indices[0], ir.Ramp)):
            name = self.var(v.buffer.data)
            parts = ", ".join(f"{fn}({name}[{self._lane(v.indices[0], k)}])"
                              for k in range(lanes))
            return f"({vt}){{{parts}}}", ATOM
        tmp = self.names.fresh("cvt")
        parts = ", ".join(f"{fn}({tmp}[{k}])" for k in range(lanes))
        return (f"__extension__ ({{ const {self.ctype(e.value.dtype)} {tmp} = "
                f"{self.expr(e.value)}; ({vt}){{{parts}}}; }})"), ATOM

    def render_heap_alloc(self, buf: ir.Buffer, name: str, et: str, size: ir.PrimExpr,
                          body: ir.Stmt) -> None:
        n = ir.const_int(size)
        if n is None:
            raise UnsupportedError(f"bundle code generation: buffer {buf.name!r} has a size "
                                   f"known only at run time ({size}); a bundle needs static "
                                   "sizes (give every input a static shape)")
        nbytes = n * ir.bits_of(buf.dtype) // 8
        key = id(buf.data)
        if key not in self.scratch_offsets:
            # one slice per buffer: nested or consecutive buffers never share bytes
            self.scratch_offsets[key] = self.scratch_bytes
            self.scratch_bytes += -(-max(nbytes, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
            self._keep.append(buf.data)
        off = self.scratch_offsets[key]
        self.emit(f"{et}* {self.restrict} {name} = ({et}*)(void*)(kiln_scratch + {off});"
                  .replace("  ", " "))
        self.stmt(body)


def render_kernel(func: ir.PrimFunc, name: str, *, restrict: bool | frozenset[int] = True,
                  renderer: type[BundleRenderer] | None = None) -> KernelArtifact:
    """Render a lowered PrimFunc as the bundle kernel ``name``: the C backend's
    :class:`~toolchain.codegen.artifact.KernelArtifact` (its ``support`` is the typed
    :class:`~toolchain.codegen.artifact.CSupport` the lowering attached);
    ``restrict``: True (every pointer parameter), False (none) or the positions of the
    parameters that alias each other (those without, the others with)."""
    r = (renderer or BundleRenderer)(restrict=restrict)
    r.reset()
    legal = legalize_f16(func)
    support = support_of(func)
    if legal is not func:  # kiln_f16 and its conversions
        support = support.merge(CSupport(headers=(RUNTIME_HEADER,)))
    func = legal
    params, extra = r.signature(func)
    if extra:
        raise UnsupportedError(f"bundle code generation: kernel {name} has sizes known only "
                               f"at run time ({', '.join(v.name for v in extra)}); give every "
                               "input a static shape (--input-shape NAME=D0,D1,...)")
    r.stmt(func.body)
    if r.scratch_bytes:
        params = [*params, "uint8_t* kiln_scratch"]
    return KernelArtifact(name, params, list(r.lines), dict(r.vec_types), r.scratch_bytes,
                          support, r.helper_list())
