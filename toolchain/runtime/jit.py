"""In-process builds through LLVM: :func:`jit_build` and :class:`JITModule`.

``toolchain.build(sch, backend="llvm")`` lowers as the C path does, translates the lowered
function with :class:`~toolchain.codegen.llvm.LLVMCodegen`, optimizes it at O3 for the
host (or the descriptor's LLVM CPU), and loads the object code with llvmlite's MCJIT: no
subprocess, no C compiler. Object code is cached by content hash (the IR text, the
machine's triple, CPU, features, fast-math flags and the LLVM version) as
``<entry>-<hash>.o`` in the same folder as the C path's libraries
(:func:`~toolchain.runtime.build.cache_dir`), so a rebuild parses no IR and runs no pass.

The result is a :class:`~toolchain.runtime.module.Module` (same call, same argument checks);
``get_source()`` is the LLVM IR, ``export_object()`` writes the object file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.codegen.llvm import LLVMCodegen
from toolchain.codegen.llvm_target import PIPELINE, LLVMMachine, emit_object, llvm_binding
from toolchain.errors import BuildError, OptionError, TargetError
from toolchain.runtime.cache import touch, trim
from toolchain.runtime.module import Module
from toolchain.tir import ir


@functools.cache
def _process_symbols() -> None:
    """Make libm's, libc's and libgcc's symbols (``expf``, ``malloc``, ``__truncdfhf2``...)
    visible to the JIT's linker: LLVM lowers math intrinsics without an instruction to libm
    calls, and float16 conversions without one to the compiler runtime's."""
    llvm = llvm_binding()
    for lib in ("m", "c", "gcc_s"):
        path = ctypes.util.find_library(lib)
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:  # pragma: no cover - already in the process
                pass


#: symbols the JIT's linker provides itself
LINKER_SYMBOLS = frozenset({"_GLOBAL_OFFSET_TABLE_"})


def undefined_symbols(obj: bytes) -> list[str]:
    """The symbols an ELF64 little-endian object file uses but does not define (what the
    JIT's linker must find in the process), from its symbol table.

    >>> undefined_symbols(b"not an ELF file")
    []
    """
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
                for i in range(shnum)]
    out = []
    for _, kind, _, _, off, size, link, _, _, entsize in sections:
        if kind != 2 or not entsize:  # SHT_SYMTAB
            continue
        stroff = sections[link][4]
        for k in range(1, size // entsize):
            name_at, info, _, shndx = struct.unpack_from("<IBBH", obj, off + k * entsize)
            if shndx == 0 and info >> 4 != 0 and name_at:  # undefined, not local
                end = obj.index(b"\0", stroff + name_at)
                out.append(obj[stroff + name_at:end].decode())
    return out


def object_for(kernel_ir: str, entry: str, machine: LLVMMachine, cache: Path,
               definitions: Sequence[str] = ()) -> tuple[bytes, dict[str, Any]]:
    """Object code of ``kernel_ir`` (with ``definitions`` linked in) for ``machine``, from
    the cache or compiled (and then cached); with build info (cache key, path, whether
    cached, compile seconds)."""
    key = hashlib.sha256("\0".join([kernel_ir, *definitions, machine.key(), PIPELINE, "jit"])
                         .encode()).hexdigest()
    path = cache / f"{entry}-{key[:24]}.o"
    info: dict[str, Any] = {"backend": "llvm", "triple": machine.triple, "cpu": machine.cpu,
                            "features": machine.features, "fast_math": list(machine.fast_math),
                            "cache_key": key, "object": str(path)}
    if path.exists():
        touch(path)
        info.update(cached=True, compile_seconds=0.0)
        return path.read_bytes(), info
    t0 = time.perf_counter()
    obj = emit_object(kernel_ir, machine, jit=True, extra=definitions)
    info.update(cached=False, compile_seconds=time.perf_counter() - t0)
    fd, tmp = tempfile.mkstemp(suffix=".o", dir=cache)
    with os.fdopen(fd, "wb") as f:
        f.write(obj)
    os.replace(tmp, path)
    trim(path)
    return obj, info


class JITModule(Module):
    """A kernel loaded into this process by LLVM's MCJIT (see the module docstring)."""

    def __init__(self, obj: bytes, obj_path: Path, entry: str, func: ir.PrimFunc,
                 source: str, extra_args: list[ir.Var], build_info: dict[str, Any],
                 machine: LLVMMachine) -> None:
        llvm = llvm_binding()
        _process_symbols()
        # an unresolved symbol would abort the process inside LLVM: name it here instead
        missing = [s for s in undefined_symbols(obj) if s not in LINKER_SYMBOLS
                   and not llvm.address_of_symbol(s)]
        if missing:
            raise BuildError(f"LLVM JIT: the object code of {entry} ({obj_path}) calls "
                             f"{', '.join(missing)}, which no library loaded in this process "
                             "defines")
        # the engine wants a module of its own; the kernel comes as an object file
        empty = llvm.parse_assembly(f'target triple = "{machine.triple}"')
        self.engine = llvm.create_mcjit_compiler(empty, machine.target_machine(jit=True))
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        addr = self.engine.get_function_address(entry)
        if not addr:
            raise BuildError(f"LLVM JIT: symbol {entry} not found in the object code of "
                             f"{obj_path}")
        self.lib_path = Path(obj_path)
        self.entry = entry
        self.func = func
        self.source = source
        self.extra_args = list(extra_args)
        self.build_info = dict(build_info)
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32)(addr)
        self._fn.restype = ctypes.c_int32

    def get_source(self) -> str:
        """The LLVM IR the object code was compiled from (before optimization)."""
        return self.source

    def export_library(self, path: str | Path) -> Path:
        raise OptionError("export_library: an LLVM JIT module has no shared library; "
                          "use export_object(path) for its object file, or build with "
                          "backend='c'")

    def export_object(self, path: str | Path) -> Path:
        """Copy the object file (entry symbol: :attr:`entry`) to ``path``."""
        dst = Path(path)
        if dst.parent and not dst.parent.exists():
            raise OptionError(f"export_object: folder {dst.parent} does not exist")
        shutil.copyfile(self.lib_path, dst)
        return dst


def jit_build(lowered: ir.PrimFunc, func: ir.PrimFunc, machine: LLVMMachine, cache: Path,
              name: str | None = None) -> JITModule:
    """Translate, optimize (or fetch from the cache) and load a lowered function."""
    host = llvm_binding().get_process_triple()
    if machine.triple.split("-")[0] != host.split("-")[0]:
        raise TargetError(f"build(..., backend='llvm') runs the kernel in this process "
                          f"({host}); the target's LLVM triple is {machine.triple}: write "
                          "its object code with kiln compile --backend llvm (or "
                          "backend_for(target, backend='llvm').kernel(...)) instead")
    t0 = time.perf_counter()
    k = LLVMCodegen(machine).generate(lowered, name)
    gen = time.perf_counter() - t0
    obj, info = object_for(k.ir, k.entry, machine, cache, k.definitions)
    info["codegen_seconds"] = gen
    return JITModule(obj, Path(info["object"]), k.entry, func, "\n".join([k.ir, *k.definitions]),
                     k.extra_args, info, machine)


__all__ = ["JITModule", "jit_build", "object_for"]
