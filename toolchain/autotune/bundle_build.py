"""The tuner's local build of a trial: the kernel's C as a bundle renders it, compiled with
the bundle's flags, so what is timed is what the bundle runs.

:func:`build_as_bundle` renders a lowered kernel with the C backend of bundles
(:class:`~toolchain.codegen.backend.CBackend`, :class:`~toolchain.bundle.emit.BundleRenderer`:
no ``#pragma omp`` of any kind, temporaries over 1 KiB in slices of a ``kiln_scratch`` area
instead of the heap, ``__extension__`` and the target's clamped or plain selects) and
compiles it alone in a shared library with the flags of the bundle's Makefile for the
target (``-O3 -std=c99 -ffp-contract=fast``, the target's ``-march`` and ``cflags``, gcc's
loop flags where the compiler takes them, the intrinsics' flags) plus ``-fPIC -shared``.
The timing child (:func:`toolchain.autotune.measure.time_kernel`) passes a scratch area of
``scratch_bytes``, 64-byte aligned as the arena's slices are.

Before (session 15) the tuner built with :func:`toolchain.runtime.build.build` — the host C
renderer, which keeps ``#pragma omp simd`` on loops a schedule vectorizes and ``malloc``\\ s
big temporaries — and a point could time faster than the bundle runs it (docs/tuning.md,
"What a task builds"). ``runtime.build`` itself is unchanged for everything else.

One difference remains: the kernel is rendered for one thread (``threads=1``), as the tuner
times one core; a target with ``cores: N > 1`` renders a kernel with parallel loops SPMD
in its bundle. Every CPU target in ``targets/`` has one core.

Example::

    >>> from toolchain import te
    >>> from toolchain.target import resolve_target
    >>> from toolchain.tir.transform.pipeline import lower
    >>> A = te.placeholder((64,), name="A")
    >>> f = te.create_prim_func([A, te.compute((64,), lambda i: A[i] * 2.0, name="B")])
    >>> b = build_as_bundle(lower(f, target=resolve_target("c-generic")), "c-generic")
    >>> b.entry, b.scratch_bytes, "#pragma" in b.code, "-std=c99" in b.flags
    ('tuned_kernel', 0, False, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.codegen.artifact import KernelArtifact
from toolchain.tir import ir

#: the kernel's name in the measured library
ENTRY = "tuned_kernel"

#: the bundle Makefile's ``CFLAGS`` before the target's (templates/bundle/Makefile.j2)
BUNDLE_CFLAGS = ("-O3", "-std=c99", "-ffp-contract=fast")

#: what makes the kernel a loadable library (not in a bundle: it links a static one)
SHARED_FLAGS = ("-fPIC", "-shared")


@dataclass
class BundleBuild:
    """A kernel built as its bundle renders it: the library, its entry, the C, the flags,
    the scratch bytes it takes (0: no ``kiln_scratch`` parameter) and the artifact."""

    lib: Path
    entry: str
    code: str
    flags: list[str]
    scratch_bytes: int
    artifact: KernelArtifact


def bundle_artifact(lowered: ir.PrimFunc, target: Any) -> KernelArtifact:
    """The bundle's kernel for ``lowered`` on ``target`` (the C backend the bundle compiler
    uses for the target, rendered for one thread), named :data:`ENTRY`, every pointer
    ``restrict`` (a bundle drops it only where its memory plan writes an output in place)."""
    from toolchain.codegen.backend import CBackend
    from toolchain.target import resolve_target

    t = resolve_target(target)
    backend = CBackend(threads=1, vector_loads=CBackend.for_target(t).vector_loads)
    return backend.kernel(lowered, ENTRY)


def bundle_flags(target: Any, art: KernelArtifact, compiler: str) -> list[str]:
    """The flags the bundle's Makefile compiles ``art`` with on ``target`` (with
    ``compiler``): :data:`BUNDLE_CFLAGS`, the bundle's kernel flags
    (:func:`toolchain.bundle.render.kernel_flags`), gcc's loop flags where ``compiler``
    takes them, ``-I`` the bundle runtime where the kernel includes its header (float16
    kernels), then :data:`SHARED_FLAGS`."""
    from toolchain.bundle.emit import RUNTIME_HEADER
    from toolchain.bundle.render import RUNTIME, kernel_flags
    from toolchain.runtime.build import loop_flags
    from toolchain.target import resolve_target

    flags = [*BUNDLE_CFLAGS, *kernel_flags(resolve_target(target), [art]),
             *loop_flags(compiler)]
    if RUNTIME_HEADER in art.support.headers:
        flags.append(f"-I{RUNTIME}")
    return [*flags, *SHARED_FLAGS]


def build_as_bundle(lowered: ir.PrimFunc, target: Any) -> BundleBuild:
    """Render ``lowered`` as the bundle does for ``target`` and compile it into a cached
    shared library (:func:`toolchain.runtime.build.compile_shared`)."""
    from toolchain.bundle.render import kernel_file
    from toolchain.runtime.build import compile_shared, find_compiler
    from toolchain.target import resolve_target

    art = bundle_artifact(lowered, target)
    code = kernel_file(art, "the tuner's trial")
    compiler = find_compiler(resolve_target(target).compiler)
    flags = bundle_flags(target, art, compiler)
    lib, _ = compile_shared(code, flags, compiler, stem=ENTRY)
    return BundleBuild(lib, ENTRY, code, flags, art.scratch_bytes, art)
