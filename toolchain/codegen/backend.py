"""Backends: lowered PrimFunc -> :class:`~toolchain.codegen.artifact.KernelArtifact`.

One interface, one explicit table. A backend renders one lowered kernel of a bundle; the
bundle renders the artifacts it gets and never looks inside generated code. The table is
keyed by target kind (``Target.kind``): C, CUDA and LLVM (object code through llvmlite,
:mod:`toolchain.codegen.llvm`); the accelerator plugs in beside them.

>>> from toolchain import te
>>> from toolchain.target import load_target
>>> from toolchain.tir.transform import lower
>>> t = load_target("c-generic")
>>> A = te.placeholder((4,), name="A")
>>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
>>> art = backend_for(t).kernel(lower(te.create_prim_func([A, B]), target=t), "net_k0")
>>> art.backend, art.name, art.params
('c', 'net_k0', ['const float* restrict A', 'float* restrict B'])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from toolchain.codegen.artifact import KernelArtifact
from toolchain.errors import TargetError
from toolchain.target import Target

if TYPE_CHECKING:
    from toolchain.codegen.llvm_target import LLVMMachine
from toolchain.tir import ir


class Backend(Protocol):
    """What every backend offers the bundle."""

    #: the backend's name (``KernelArtifact.backend``)
    name: str

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        """Kernel ``name`` from a lowered function; ``restrict``: which pointer parameters
        may be declared non-aliasing (True: all; a set: all but those positions)."""
        ...


class CBackend:
    """C99 source for a bundle's ``kernels.c`` (:func:`toolchain.bundle.emit.render_kernel`:
    no heap, scratch from the arena, no OpenMP)."""

    name = "c"

    def __init__(self, threads: int = 1, vector_loads: bool = True) -> None:
        #: the target's cores: kernels with parallel loops are rendered for that many
        #: threads (SPMD, :mod:`toolchain.bundle.emit`) when > 1
        self.threads = threads
        #: whether the target's C compiler vectorises (so a conditional load could become
        #: a masked vector load): guarded loads are then clamped and blended
        self.vector_loads = vector_loads

    @classmethod
    def for_target(cls, target: Target) -> CBackend:
        """The C backend as ``target`` needs it: its cores, and plain ``?:`` selects where
        its vectors are no wider than a scalar register (Cortex-M4/M7: no vector unit, so
        no masked loads to guard against; the clamped loads cost DS-CNN 2.7 % more
        instructions there)."""
        return cls(threads=target.cores or 1,
                   vector_loads=(target.vector_width_bits or 128) > 32)

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        from toolchain.bundle.emit import render_kernel

        return render_kernel(lowered, name, restrict=restrict, threads=self.threads,
                             vector_loads=self.vector_loads)


class SimtCBackend:
    """The GPU kernels' own lowered code as plain C for the CPU: a SIMT emulation.

    Each ``blockIdx`` / ``threadIdx`` loop runs as a serial loop (block by block, thread by
    thread), so a CUDA bundle's kernels can be checked against the reference executor on a
    machine without a GPU (``kiln compile --emulate``). A kernel with shared memory and
    barriers is split at each barrier into phases, each a serial loop over the block's
    threads, with shared memory once per block and the values a thread keeps across a
    barrier in per-thread arrays (:func:`~toolchain.tir.transform.simt.emulate_threads`);
    the barriers stay in the C as comments. Exact for kernels free of data races
    (:func:`toolchain.tir.race.find_races` looks for them)."""

    name = "simt"

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        from toolchain.bundle.emit import BundleRenderer, render_kernel
        from toolchain.tir.transform.inject_barriers import is_barrier
        from toolchain.tir.transform.simt import emulate_threads

        class _Serial(BundleRenderer):
            def stmt_Evaluate(self, s: ir.Evaluate) -> None:  # noqa: N802 - renderer hook
                if is_barrier(s):
                    self.emit("/* __syncthreads(): every thread of the block is here */")
                    return
                super().stmt_Evaluate(s)

        # shared tiles keep float16 storage as on the GPU (the same values; tensor-core
        # intrinsics take pointers to them)
        art = render_kernel(emulate_threads(lowered, name), name, restrict=restrict,
                            renderer=_Serial, keep_scopes=("shared",))
        art.backend = self.name
        return art


#: alignment of each intermediate buffer in a CUDA kernel's scratch (bytes)
CUDA_SCRATCH_ALIGN = 256


class CUDABackend:
    """CUDA C for a bundle's ``kernels.cu``: one ``__global__`` function per top-level loop
    nest of the lowered function (:class:`~toolchain.codegen.cuda.CUDARenderer`), launched
    in order by the host. A buffer two of those kernels share (allocated at the top of the
    lowered function) becomes a trailing pointer parameter into the kernel's scratch, which
    the memory plan reserves in the device workspace for the kernel's step."""

    name = "cuda"

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        from toolchain.codegen.artifact import support_of
        from toolchain.codegen.cuda import CUDARenderer
        from toolchain.errors import UnsupportedError
        from toolchain.tir.transform.legalize_f16 import legalize_f16

        # float16 as everywhere else in Kiln: 16-bit storage, float32 arithmetic (a sum
        # accumulates in float32, as the SIMT emulation and the CPU bundles compute it);
        # shared tiles stay float16 (the operands tensor cores read)
        lowered = legalize_f16(lowered, keep_scopes=("shared",))
        body, scratch = lowered.body, []
        # global buffers between kernels, and a local one compaction could not shrink into
        # its thread (a whole tensor, each thread its own element): device scratch
        while isinstance(body, ir.Allocate) and body.buffer.scope in ("", "global", "local"):
            scratch.append(body.buffer)
            body = body.body
        offsets, total = [], 0
        for b in scratch:
            n = ir.const_int(b.shape[0]) if len(b.shape) == 1 else None
            if n is None:
                raise UnsupportedError(f"cuda code generation: intermediate buffer {b.name} "
                                       f"of kernel {name} has no static size ({b.shape})")
            offsets.append(total)
            size = n * ir.bits_of(b.dtype) // 8
            total += -(-max(size, 1) // CUDA_SCRATCH_ALIGN) * CUDA_SCRATCH_ALIGN
        func = ir.PrimFunc((*lowered.params, *scratch), body, lowered.name, lowered.attrs)
        r = CUDARenderer(restrict=restrict)
        r.reset()
        params, extra, launches = r.render_kernels(func, name)
        if extra:
            raise UnsupportedError(f"cuda code generation: kernel {name} has sizes known only "
                                   f"at run time ({', '.join(v.name for v in extra)}); give "
                                   "every input a static shape (--input-shape NAME=D0,...)")
        for i, k in enumerate(launches):
            k["name"] = f"{name}_k{i}"
        types = [r.ctype(p.dtype) for p in func.params if isinstance(p, ir.Buffer)]
        return KernelArtifact(name, params, [], {}, total, support_of(lowered),
                              r.helper_list(), "cuda", launches, types, offsets)


class LLVMBackend:
    """Bundle kernels as object code for the target's triple
    (:class:`~toolchain.codegen.llvm.LLVMCodegen`, the
    O3 pipeline, ``TargetMachine.emit_object``, kept in the build cache by
    :func:`~toolchain.codegen.llvm_target.cached_object`): ``KernelArtifact.object_code``,
    with the C prototype in ``params`` so the bundle's ``model.c`` calls it like a C
    kernel."""

    name = "llvm"

    def __init__(self, machine: LLVMMachine | None = None) -> None:
        self.machine = machine

    def kernel(self, lowered: ir.PrimFunc, name: str, *,
               restrict: bool | frozenset[int] = True) -> KernelArtifact:
        from toolchain.bundle.emit import RUNTIME_HEADER, BundleRenderer
        from toolchain.codegen.artifact import CSupport, support_of
        from toolchain.codegen.llvm import LLVMCodegen
        from toolchain.codegen.llvm_target import cached_object, host_machine
        from toolchain.errors import UnsupportedError
        from toolchain.runtime.cache import cache_dir
        from toolchain.tir.transform.legalize_f16 import legalize_f16

        machine = self.machine or host_machine()
        # float16 as in the C backend: 16-bit storage (kiln_f16 in the prototypes), float32
        # arithmetic (LLVM would otherwise round each half-precision operation)
        legal = legalize_f16(lowered)
        support = support_of(lowered)
        if legal is not lowered:
            support = support.merge(CSupport(headers=(RUNTIME_HEADER,)))
        gen = LLVMCodegen(machine, restrict=restrict, scratch=True,
                          c_types=BundleRenderer.type_map)
        k = gen.generate(legal, name, symbol=name)
        if k.extra_args:
            sizes = ", ".join(v.name for v in k.extra_args)
            raise UnsupportedError(f"llvm code generation: kernel {name} has sizes known "
                                   f"only at run time ({sizes}); give every input a static "
                                   "shape")
        return KernelArtifact(name, k.params, [], {}, k.scratch_bytes, support, [], "llvm",
                              param_types=k.param_types,
                              object_code=cached_object(k.ir, machine, cache_dir(), name,
                                                        extra=k.definitions),
                              llvm_ir="\n".join([k.ir, *k.definitions]))


#: target kind (or backend name) -> backend; ``llvm`` compiles for the host here,
#: :func:`backend_for` gives one for a target's triple and CPU
BACKENDS: dict[str, Backend] = {"c": CBackend(), "cuda": CUDABackend(), "llvm": LLVMBackend()}


def backend_for(target: Target, emulate: bool = False, backend: str | None = None) -> Backend:
    """The backend that generates ``target``'s kernels (by its kind); ``emulate``: the SIMT
    emulation of a GPU target's kernels in C (:class:`SimtCBackend`); ``backend="llvm"``:
    object code for a CPU target through LLVM (its ``llvm:`` triple and CPU)."""
    if backend == "llvm" or (backend is None and target.kind == "llvm"):
        from toolchain.codegen.llvm_target import machine_for

        return LLVMBackend(machine_for(target))
    if backend not in (None, "c", target.kind):
        raise TargetError(f"backend {backend!r} does not generate code for target "
                          f"{target.name!r} (kind {target.kind!r}); backends: c, llvm")
    if emulate:
        if target.kind != "cuda":
            raise TargetError(f"--emulate runs a GPU target's kernels on the CPU; target "
                              f"{target.name!r} has kind {target.kind!r} (its bundle runs on "
                              "the CPU already)")
        return SimtCBackend()
    b = BACKENDS.get(target.kind)
    if isinstance(b, CBackend):
        return CBackend.for_target(target)
    if b is None:
        raise TargetError(f"target {target.name!r} has kind {target.kind!r}: no bundle backend "
                          f"for it in this version (backends: {', '.join(BACKENDS)})")
    return b


__all__ = ["BACKENDS", "Backend", "CBackend", "CUDABackend", "LLVMBackend", "SimtCBackend",
           "backend_for"]
