"""Build a Schedule/PrimFunc for the host: lower, render C, compile, load (or, with
``backend="llvm"``, translate to LLVM and load in-process: :mod:`toolchain.runtime.jit`).

Shared libraries are cached by content hash (source + compiler + flags + compiler
version) in ``$KILN_CACHE_DIR`` or ``~/.cache/kiln``; a rebuild of the same source is a
file lookup.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from toolchain.codegen import get_renderer
from toolchain.codegen.artifact import support_of
from toolchain.errors import BuildError, GeneratedCodeError, OptionError, TargetError
from toolchain.runtime.cache import cache_dir, touch, trim
from toolchain.runtime.module import Module
from toolchain.runtime.pch import pch_flags
from toolchain.target import Target, resolve_target
from toolchain.tir import ir
from toolchain.tir.transform.pipeline import lower

#: Flags for every host build (``-march=native`` is replaced by ``march``).
BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared")

#: GCC's ``-O3`` loop transformations that redo what Kiln's schedules did (they tile, unroll
#: and vectorize): left out of every build of Kiln's code, as gcc allows. On every zoo
#: bundle gcc makes the same object code without them, in about a quarter less of its time
#: (ResNet-18's kernels less than half; ``benchmarks/cc_flags.py``, docs/bundle.md "The C
#: compiler's flags"); the bundle Makefile and CMakeLists probe the same.
LOOP_FLAGS = ("-fno-loop-unroll-and-jam", "-fno-tree-loop-distribution")


def find_compiler(cc: str | None = None) -> str:
    """The C compiler: ``cc`` argument, ``$CC``, or ``cc`` on PATH."""
    name = cc or os.environ.get("CC") or "cc"
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"C compiler {name!r} not found on PATH; install gcc or clang, or "
                         "set CC")
    return path


@lru_cache(maxsize=8)
def compiler_version(cc: str) -> str:
    """First line of ``cc --version``."""
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else "?"


@lru_cache(maxsize=8)
def loop_flags(cc: str) -> tuple[str, ...]:
    """:data:`LOOP_FLAGS` if ``cc`` takes them without a word (gcc), else ``()`` (clang
    refuses ``-fno-loop-unroll-and-jam``; a compiler that only warns would break the
    ``-Werror`` builds): probed once per compiler and process.

    >>> loop_flags(find_compiler()) in (LOOP_FLAGS, ())
    True
    """
    try:
        probe = subprocess.run([cc, "-Werror", *LOOP_FLAGS, "-x", "c", "-c", "-o", os.devnull,
                                os.devnull], capture_output=True, text=True, check=False)
    except OSError:
        return ()
    return LOOP_FLAGS if probe.returncode == 0 and not probe.stderr.strip() else ()


def _resolve_target(target: str | Target) -> Target:
    if target in ("c", "host"):
        # this machine as it is: -march=native, no descriptor's flags
        return Target(name="host", kind="c", description="the host CPU (C via cc)")
    t = resolve_target(target)
    if t.kind not in ("c", "llvm"):
        hint = (" (for CUDA source use toolchain.codegen.cuda.CUDARenderer().render(lower(sch))"
                " and compile_ptx; running kernels needs a GPU runtime Kiln does not have yet)"
                if t.kind == "cuda" else "")
        raise TargetError(f"build: target {t.name!r} has kind {t.kind!r}; host builds need a "
                          f"C target (target='c'){hint}")
    return t


def compile_shared(source: str, flags: Sequence[str], cc: str | None = None,
                   stem: str = "kernel") -> tuple[Path, dict[str, Any]]:
    """Compile C ``source`` into a cached shared library; return (path, build info)."""
    compiler = find_compiler(cc)
    version = compiler_version(compiler)
    key = hashlib.sha256("\0".join([source, compiler, *flags, version]).encode()).hexdigest()
    d = cache_dir()
    lib = d / f"{stem}-{key[:24]}.so"
    src = d / f"{stem}-{key[:24]}.c"
    info = {"compiler": compiler, "compiler_version": version, "flags": list(flags),
            "cache_key": key, "library": str(lib), "source_path": str(src)}
    if lib.exists():
        touch(lib)
        info["cached"] = True
        return lib, info
    src.write_text(source)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=d)
    os.close(fd)
    cmd = [compiler, *flags, str(src), "-o", tmp, "-lm"]
    pch = pch_flags(compiler, flags, source)  # <immintrin.h> precompiled: the same library
    res = subprocess.run([*cmd[:-4], *pch, *cmd[-4:]], capture_output=True, text=True,
                         check=False)
    if res.returncode != 0 and pch:  # whatever went wrong, the plain build says it
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        os.unlink(tmp)
        msg = (res.stderr or res.stdout).strip()
        raise GeneratedCodeError(f"compiling generated C failed (exit {res.returncode}).\n"
                         f"command: {' '.join(cmd)}\nsource kept at: {src}\n{msg}")
    os.replace(tmp, lib)
    trim(lib)
    info["cached"] = False
    return lib, info


def build(sch_or_func: Any, target: str | Target = "c", name: str | None = None, *,
          passes: Mapping[int, Sequence[Callable[[ir.PrimFunc], ir.PrimFunc]]] | None = None,
          openmp: bool = True, march: str | None = "auto", extra_flags: Sequence[str] = (),
          cc: str | None = None, backend: str | None = None,
          on_lowered: Callable[[ir.PrimFunc], None] | None = None) -> Module:
    """Lower, generate C, compile and load a Schedule or PrimFunc for the host.

    ``march`` and ``extra_flags`` (for example ``["-Wall", "-Wextra", "-Werror"]``) go to
    the compiler. ``march="auto"`` means ``native`` for the host target (``"c"``) and the
    descriptor's ``arch`` (or nothing: portable code) for a target file such as
    ``c-generic``; None leaves ``-march`` out. The descriptor's ``cflags`` follow (those
    not already in ``extra_flags``), then ``extra_flags``. The compiler is ``cc``, else the
    descriptor's ``compiler``, else ``$CC`` or ``cc`` (the host target names none).
    Parallel loops use OpenMP unless ``openmp=False``.

    ``backend="llvm"`` (the default for a descriptor of kind ``llvm``) compiles in this
    process through llvmlite instead (no C compiler, no subprocess;
    :mod:`toolchain.runtime.jit`, ``docs/llvm.md``): the same callable module, its object
    code cached by content hash; ``march``, ``cc``, ``openmp`` and the flags do not apply
    (the CPU is the host's for ``"c"``, the descriptor's ``llvm.cpu`` otherwise) and
    parallel loops run serially.

    ``on_lowered(func)`` is called with the lowered function before code generation (the
    tuner reads its features there instead of lowering twice).

    >>> import numpy as np
    >>> from toolchain import te
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> mod = build(te.create_prim_func([A, B]))
    >>> a = np.arange(4, dtype="float32"); b = np.empty(4, "float32")
    >>> mod(a, b); b.tolist()
    [1.0, 2.0, 3.0, 4.0]
    >>> build(te.create_prim_func([A, B]), backend="llvm")(a, b); b.tolist()
    [1.0, 2.0, 3.0, 4.0]
    """
    t = _resolve_target(target)
    if isinstance(sch_or_func, ir.PrimFunc):
        func = sch_or_func
    elif isinstance(getattr(sch_or_func, "mod", None), ir.PrimFunc):
        func = sch_or_func.mod
    else:
        raise OptionError(f"build: expected a Schedule or PrimFunc, got "
                          f"{type(sch_or_func).__name__}")
    lowered = lower(func, passes=passes, target=None if t.name == "host" else t)
    if on_lowered is not None:
        on_lowered(lowered)
    return build_lowered(lowered, func, t, name, openmp=openmp, march=march,
                         extra_flags=extra_flags, cc=cc, backend=backend)


def build_lowered(lowered: ir.PrimFunc, func: ir.PrimFunc, target: str | Target = "c",
                  name: str | None = None, *, openmp: bool = True,
                  march: str | None = "auto", extra_flags: Sequence[str] = (),
                  cc: str | None = None, backend: str | None = None) -> Module:
    """The second half of :func:`build`: a lowered function (``func``: the one it was
    lowered from, for the argument checks) -> a callable module, by the C compiler in a
    subprocess or in-process through LLVM (``backend``); the same options as
    :func:`build`. ``benchmarks/backends.py`` times the two paths on one lowered kernel.

    >>> from toolchain import te
    >>> A = te.placeholder((4,), name="A")
    >>> f = te.create_prim_func([A, te.compute((4,), lambda i: A[i] * 2.0, name="B")])
    >>> build_lowered(lower(f), f, backend="llvm").build_info["backend"]
    'llvm'
    """
    t = _resolve_target(target)
    backend = backend or t.kind
    if backend == "llvm":
        from toolchain.codegen.llvm_target import machine_for
        from toolchain.runtime.jit import jit_build

        mod = jit_build(lowered, func, machine_for(t), cache_dir(), name)
        mod.build_info["target"] = t.name
        return mod
    if backend != "c":
        raise OptionError(f"build: unknown backend {backend!r}; host builds use 'c' (C via "
                          "cc) or 'llvm' (in-process through llvmlite)")
    src = get_renderer("c", openmp=openmp).render(lowered, name=name)
    compiler = find_compiler(cc or t.compiler)
    flags = [*BASE_FLAGS, *loop_flags(compiler)]
    if march == "auto":
        march = "native" if t.name == "host" else t.arch
    if march:
        flags.append(f"-march={march}")
    if src.uses_openmp:
        flags.append("-fopenmp")
    elif src.uses_simd_pragma:
        flags.append("-fopenmp-simd")
    flags += [f for f in t.cflags if f not in extra_flags]
    flags.extend(extra_flags)
    # what the kernel's intrinsics need (typed, recorded by the lowering)
    flags += [f for f in support_of(lowered).flags if f not in flags]
    lib, info = compile_shared(src.code, flags, compiler, stem=src.entry)
    info["target"] = t.name
    return Module(lib, src.entry, func, src.code, src.extra_args, info)
