"""Build a bundle on the host and call it from Python: :class:`BundleModule`.

The bundle's sources are compiled into a shared library (cached by content hash in
``$KILN_CACHE_DIR`` or ``~/.cache/kiln``, like :mod:`toolchain.runtime.build`) and
``<model>_run`` is called through ctypes with numpy arrays.  The inputs and outputs
structs of a bundle hold only pointers, so they are passed as arrays of ``void*``.

Example::

    >>> mod = BundleModule("build/lenet5")                             # doctest: +SKIP
    >>> out = mod({"input": np.zeros((1, 1, 28, 28), np.float32)})     # doctest: +SKIP
    >>> out["probs"].shape                                             # doctest: +SKIP
    (1, 10)
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.errors import BuildError, GeneratedCodeError, InputError, TargetError
from toolchain.graph.ir import np_dtype
from toolchain.runtime.build import compiler_version, find_compiler, loop_flags
from toolchain.runtime.cache import cache_dir, touch, trim
from toolchain.runtime.pch import pch_flags

#: flags of a host build (the target's flags are added; ``-march=native`` if it has none;
#: and :data:`toolchain.runtime.build.LOOP_FLAGS` where the compiler takes them)
HOST_FLAGS = ("-O3", "-std=c99", "-ffp-contract=fast", "-fPIC", "-shared")

_ERRORS = {1: "a NULL argument", 2: "the arena is misaligned", 3: "a kernel failed",
           4: "no weights set", 5: "the weights have the wrong size",
           6: "the weights are misaligned", 7: "the weights' CRC-32 differs (corrupted?)",
           8: "the thread pool could not start"}


def read_metadata(path: str | Path) -> dict[str, Any]:
    """``metadata.json`` of the bundle at ``path`` (clear errors when it is not one)."""
    d = Path(path)
    meta = d / "metadata.json"
    if not d.is_dir():
        raise InputError(f"{d}: no such bundle directory (write one with kiln compile)")
    if not meta.is_file():
        raise InputError(f"{d} is not a Kiln bundle: it has no metadata.json")
    try:
        data = json.loads(meta.read_text())
    except ValueError as exc:
        raise InputError(f"{meta}: not valid JSON ({exc})") from None
    if not str(data.get("format", "")).startswith("kiln-bundle/"):
        raise InputError(f"{meta}: not a Kiln bundle's metadata (no 'format' kiln-bundle/1)")
    return data


def weights_mode(meta: Mapping[str, Any]) -> str:
    """How a bundle stores its weights (``incbin``, ``c-array``, ``external``; bundles
    older than the blob have a ``weights.c``: ``c-array``)."""
    return (meta.get("weights_storage") or {}).get("mode", "c-array")


def _weights_sources(d: Path, meta: Mapping[str, Any]) -> tuple[list[Path], list[str]]:
    """(sources, preprocessor flags) of the weights: ``weights_blob.S`` with the absolute
    path of ``weights.bin`` (the host build runs elsewhere), or ``weights.c``."""
    if weights_mode(meta) == "incbin":
        blob = d / "src" / "weights.bin"
        _present(d, [blob])
        return [d / "src" / "weights_blob.S"], [f'-DKILN_WEIGHTS_FILE="{blob.absolute()}"']
    return [d / "src" / "weights.c"], []


#: the accelerator devices a bundle can be built with (``make DEVICE=...``)
DEVICES = ("fsim", "rtl")


def _sources(d: Path, model: str, meta: Mapping[str, Any] | None = None,
             device: str = "fsim") -> list[Path]:
    files = [d / "src" / f"{model}.c", d / "src" / "kernels.c",
             d / "runtime" / "kiln_runtime.c", d / "runtime" / "kiln_threads.c"]
    if meta is not None and accelerated(meta):  # the driver and its device
        files += [d / "src" / "kiln_vta_bundle.c", d / "runtime" / "kiln_vta.c"]
        if device == "fsim":
            files.append(d / "runtime" / "kiln_vta_fsim.c")
    return _present(d, files)


def device_flags(meta: Mapping[str, Any], device: str = "fsim") -> list[str]:
    """The accelerator device an accelerator bundle is built with on the host: ``fsim``
    (the C simulator) or ``rtl`` (the Verilator model of the bundle's ``rtl/``)."""
    if not accelerated(meta):
        return []
    return ["-DKILN_VTA_DEVICE_RTL"] if device == "rtl" else ["-DKILN_VTA_DEVICE_FSIM"]


def check_device(meta: Mapping[str, Any], device: str, where: str) -> None:
    """Refuse a device the bundle at ``where`` cannot be built with, saying which it can."""
    if device not in DEVICES:
        raise InputError(f"device {device!r}: choose one of {', '.join(DEVICES)}")
    if device == "fsim":
        return
    if not accelerated(meta):
        raise InputError(f"bundle {where} runs no layer on the accelerator: --device "
                         f"{device} applies to bundles compiled with --target vta")
    offered = meta["accelerator"].get("devices", ["fsim"])
    if device not in offered:
        raise InputError(f"bundle {where} offers the devices {', '.join(offered)} (its "
                         f"accelerator target's shapes have no RTL build), not {device!r}")


def accelerated(meta: Mapping[str, Any]) -> bool:
    """Whether a bundle runs layers on the accelerator (and carries its driver)."""
    return bool(meta.get("accelerator", {}).get("layers"))


def _present(d: Path, files: list[Path]) -> list[Path]:
    """``files`` of bundle ``d``, all of them there (else a clear error)."""
    missing = [str(f.relative_to(d)) for f in files if not f.is_file()]
    if missing:
        raise InputError(f"bundle {d} is incomplete: missing {', '.join(missing)}")
    return files


def _cached_library(d: Path, model: str, files: list[Path], tool: str, flags: list[str],
                    tag: str = "") -> Path:
    """Where the library built from ``files`` by ``tool`` with ``flags`` is cached (keyed
    by their content, the tool's version and the flags)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:  # a slice at a time: weights.bin may be gigabytes
            while block := fh.read(1 << 24):
                h.update(block)
        h.update(b"\0")
    h.update("\0".join([tool, compiler_version(tool), *flags]).encode())
    return cache_dir() / f"bundle-{model}{tag}-{h.hexdigest()[:24]}.so"


def _run_build(cmd: list[str], d: Path, cwd: Path | None = None) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    if res.returncode != 0:
        raise GeneratedCodeError(f"building bundle {d} failed (exit {res.returncode}).\ncommand: "
                         f"{' '.join(cmd)}\n{(res.stderr or res.stdout).strip()[-4000:]}")


def thread_flags(meta: Mapping[str, Any]) -> list[str]:
    """The thread library of a bundle whose kernels run on several threads (the pthread
    pool of ``runtime/kiln_threads.c``; none for a single-threaded bundle)."""
    if any(k.get("threaded") for k in meta.get("kernels", ())):
        return ["-DKILN_THREADS_PTHREAD", "-pthread"]
    return []


def host_flags(meta: Mapping[str, Any], cc: str) -> list[str]:
    """Target flags for a host build of a bundle; refuses targets this host cannot run
    (a cross compiler, CPU features this machine lacks, an ``-march`` it refuses)."""
    from toolchain.target import HOST_COMPILERS, bare_metal, host_cpu_flags

    t = meta.get("target") or {}
    name = t.get("name", "?")
    compiler = t.get("compiler")
    if compiler not in HOST_COMPILERS:
        head = f"the bundle's target {name!r} is built with {compiler}: it cannot run on this host"
        prefix = str(compiler).removesuffix("-gcc")
        if not bare_metal(compiler):  # a Linux cross target: its demo runs under qemu-user
            arch = prefix.split("-")[0]
            raise TargetError(f"{head}; build its demo with `make main` in the bundle "
                              f"directory and run it on {arch} Linux, or here under "
                              f"QEMU's user mode: `qemu-{arch} -L /usr/{prefix} ./main IN.bin "
                              "OUT.bin ...` (docs/llvm.md)")
        raise TargetError(f"{head}; cross-compile it with `make lib` in the bundle directory "
                          "(docs/bundle.md) and run it on the board, or compile the model with "
                          "--board NAME, whose bundles kiln run runs under QEMU "
                          "(docs/embedded.md)")
    missing = sorted(set(t.get("cpu_flags") or ()) - host_cpu_flags())
    if missing and host_cpu_flags():
        raise TargetError(f"the bundle's target {name!r} needs CPU features this host lacks "
                          f"({', '.join(missing)}); compile for another target (kiln compile "
                          "--target c-generic) to run it here")
    flags = list(t.get("cflags") or ())
    if not any(f.startswith("-march=") for f in flags):
        flags.insert(0, "-march=native")
    refusal = _refused_flags(cc, tuple(flags))
    if refusal is not None:
        raise TargetError(f"the bundle's target {name!r} cannot be built on this host ({cc} "
                          f"refuses {' '.join(flags)}): {refusal[:300]}")
    return flags


@functools.lru_cache(maxsize=32)
def _refused_flags(cc: str, flags: tuple[str, ...]) -> str | None:
    """Why ``cc`` refuses ``flags`` (its message), or None: probed once per process."""
    probe = subprocess.run([cc, *flags, "-x", "c", "-c", "-o", os.devnull, os.devnull],
                           capture_output=True, text=True, check=False)
    return (probe.stderr.strip() or f"exit {probe.returncode}") if probe.returncode else None


#: the runtime sources every host bundle compiles the same way: built once as objects
#: (the accelerator's driver and C simulator too: fixed files whose only inputs are the
#: runtime's headers and the flags, 0.4 CPU s a bundle of ``vta`` when compiled with it)
SHARED_RUNTIME = ("kiln_runtime.c", "kiln_threads.c", "kiln_vta.c", "kiln_vta_fsim.c")


def _runtime_objects(files: list[Path], compiler: str, flags: list[str]) -> list[Path]:
    """The runtime's sources of a bundle compiled to cached object files.

    Every bundle carries the same runtime (``kiln_runtime.c``, ``kiln_threads.c``, the
    accelerator's driver and C simulator); compiled once per content, flags and compiler,
    a bundle's build compiles only its own sources and links these (the suite builds some
    3,000 bundles).
    The key covers each file and the runtime headers beside it, so an edited runtime is
    compiled again; the link gives the library a one-command build gives."""
    headers = sorted({h for f in files for h in f.parent.glob("*.h")})
    common = hashlib.sha256()
    for h in headers:
        common.update(h.name.encode() + b"\0" + h.read_bytes() + b"\0")
    common.update("\0".join([compiler, compiler_version(compiler), *flags]).encode())
    objects = []
    for f in files:
        key = common.copy()
        key.update(f.name.encode() + b"\0" + f.read_bytes())
        obj = cache_dir() / f"runtime-{f.stem}-{key.hexdigest()[:24]}.o"
        objects.append(_in_cache(obj, lambda tmp, f=f: _run_build(
            [compiler, *(x for x in flags if x != "-shared"), f"-I{f.parent}", "-c", str(f),
             "-o", str(tmp)], f.parent.parent)))
    return objects


def _in_cache(obj: Path, make: Callable[[Path], None]) -> Path:
    """``obj`` (a build-cache path named by its content's key): kept as it is where it
    exists, else made by ``make(tmp)`` into a temporary file beside it and moved there
    whole (a failed or interrupted ``make`` leaves nothing behind)."""
    if obj.exists():
        touch(obj)
        return obj
    fd, tmp = tempfile.mkstemp(suffix=obj.suffix, dir=obj.parent)
    os.close(fd)
    try:
        make(Path(tmp))
    except BaseException:
        os.unlink(tmp)
        raise
    os.replace(tmp, obj)
    trim(obj)
    return obj


def _compile_object(src: Path, compiler: str, cflags: list[str], obj: Path, d: Path) -> None:
    """``src`` compiled to ``obj`` as the bundle's one-command build compiles it: with
    the header :func:`toolchain.runtime.pch.pch_flags` precompiles where it has one (the
    kernels of an x86 target with intrinsics: ``<immintrin.h>``, 0.15 CPU s less; the same
    object code), else plainly."""
    cmd = [compiler, *(f for f in cflags if f != "-shared"), "-c", str(src), "-o", str(obj)]
    pch = pch_flags(compiler, cflags, src.read_text())
    if pch and subprocess.run([*cmd[:-4], *pch, *cmd[-4:]], capture_output=True,
                              check=False).returncode == 0:
        return
    _run_build(cmd, d)  # whatever went wrong with the header, the plain compile says it


def _with_pch(src: Path, compiler: str, cflags: list[str], work: Path, d: Path) -> str:
    """``src`` as the bundle's one-command build takes it: the source itself, or, for a
    C file that includes a header :func:`toolchain.runtime.pch.pch_flags` precompiles,
    its object (:func:`_compile_object`; the same object code, so the same library)."""
    if src.suffix != ".c" or not pch_flags(compiler, cflags, src.read_text()):
        return str(src)
    obj = work / f"{src.stem}.o"
    _compile_object(src, compiler, cflags, obj, d)
    return str(obj)


#: the bundle sources a host build compiles to objects kept in the build cache by
#: content (the source, the headers it reaches in the bundle, the compiler and the
#: flags): the kernels, most of a build's gcc time, which bundles with the same layers
#: share whatever their weights, weights storage, model file, folder or run file
CACHED_SOURCES = ("kernels.c",)

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^">]+)[">]', re.M)


def bundle_headers(src: Path, dirs: Sequence[Path]) -> list[Path]:
    """The headers of the folders ``dirs`` (a build's ``-I`` folders, searched in that
    order) that ``src`` includes, directly or through one another, found where the
    compiler finds them (``"x.h"`` first beside the including file); system headers are
    not listed (they come with the compiler).

    >>> import tempfile; t = Path(tempfile.mkdtemp())
    >>> _ = (t / "k.c").write_text('#include <math.h>\\n#include "k.h"\\n')
    >>> _ = (t / "k.h").write_text('#include "w.h"\\n'); _ = (t / "w.h").write_text("")
    >>> [h.name for h in bundle_headers(t / "k.c", [t])]
    ['k.h', 'w.h']
    """
    found: list[Path] = []
    todo = [src]
    while todo:
        f = todo.pop()
        for quote, name in _INCLUDE.findall(f.read_text(errors="replace")):
            for base in ([f.parent] if quote == '"' else []) + list(dirs):
                h = base / name
                if h.is_file():
                    if h not in found:
                        found.append(h)
                        todo.append(h)
                    break
    return found


def _cached_object(src: Path, compiler: str, cflags: list[str], d: Path) -> Path:
    """``src`` (one of :data:`CACHED_SOURCES`) compiled to an object in the build cache,
    keyed by its text, the text of the bundle headers it includes (:func:`bundle_headers`),
    the compiler, its version and the flags; the ``-I`` folders and the weights file's
    path (which only the weights' source reads) are not part of the key nor of the
    compile. The object is the one the one-command build makes of ``src``, so a library
    linked from it is the same."""
    dirs = [Path(f[2:]) for f in cflags if f.startswith("-I")]
    flags = [f for f in cflags if not f.startswith(("-I", "-DKILN_WEIGHTS_FILE="))]
    key = hashlib.sha256()
    for f in (src, *bundle_headers(src, dirs)):
        key.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    key.update("\0".join([compiler, compiler_version(compiler), *flags]).encode())
    obj = cache_dir() / f"object-{src.stem}-{key.hexdigest()[:24]}.o"
    return _in_cache(obj, lambda tmp: _compile_object(
        src, compiler, [*flags, *(f"-I{x}" for x in dirs)], tmp, d))


def is_cuda_bundle(meta: Mapping[str, Any]) -> bool:
    """Whether a bundle's ``metadata.json`` describes CUDA code (not its C emulation)."""
    return (meta.get("target") or {}).get("kind") == "cuda" and \
        not (meta.get("options") or {}).get("emulate")


def gpu_available() -> bool:
    """Whether this machine has an NVIDIA GPU and driver (``nvidia-smi -L`` lists one)."""
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    res = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return res.returncode == 0 and "GPU" in res.stdout


#: the include flags of a CUDA bundle's Makefile (``CPPFLAGS``), relative to its folder
MAKE_INCLUDES = ("-Iinclude", "-Iruntime", "-Isrc")


def nvcc_launcher() -> list[str]:
    """What runs nvcc in Kiln's CUDA builds: ``ccache`` where it is installed (it caches
    nvcc's objects by the preprocessed source and the command), else nothing.

    :func:`build_cuda` compiles each source with the bundle Makefile's own command in the
    bundle's folder (relative paths), so its objects are the ones ``make
    NVCC="ccache nvcc"`` made in this or any copy of the bundle, and a bundle's kernels
    (the same ``kernels.cu`` in every weights mode) are compiled once. The objects are
    nvcc's own either way; the library is still cached whole (:func:`_cached_library`)."""
    import shutil

    ccache = shutil.which("ccache")
    return [ccache] if ccache else []


def cuda_arch_flags(meta: Mapping[str, Any]) -> list[str]:
    """The ``-arch`` a CUDA bundle is built with: the one its Makefile and CMakeLists name
    (``metadata.json``'s ``target.cflags``: ``sm_90a`` where a kernel calls ``wgmma``, whose
    code built for plain ``sm_90`` is a trap), or the target's architecture for a bundle
    written before the metadata said it.

    >>> cuda_arch_flags({"target": {"arch": "sm_90", "cflags": ["-arch=sm_90a"]}})
    ['-arch=sm_90a']
    >>> cuda_arch_flags({"target": {"arch": "sm_90"}})
    ['-arch=sm_90']
    """
    t = meta["target"]
    named = [f for f in t.get("cflags") or () if f.startswith("-arch=")]
    return named or [f"-arch={t.get('arch') or 'sm_80'}"]


def build_cuda(path: str | Path, nvcc: str | None = None, profile: bool = False) -> Path:
    """Compile a CUDA bundle with nvcc into a cached shared library; return its path.
    ``profile``: the profiling build (``-DKILN_PROFILE``: each launch between CUDA events,
    ``<m>_profile_ms``; :meth:`BundleModule.launch_times`). Each source is compiled with
    the bundle Makefile's command, through ``ccache`` where installed (:func:`nvcc_launcher`)."""
    import shutil

    d = Path(path)
    meta = read_metadata(d)
    model = meta["model"]["name"]
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        raise BuildError(f"bundle {d} is CUDA code for {meta['target']['name']}: building it "
                         "needs nvcc (the CUDA toolkit) on PATH; or compile with --emulate to "
                         "check its kernels on the CPU")
    cu = [d / "src" / f"{model}.cu", d / "src" / "kernels.cu"]
    weights, wflags = _weights_sources(d, meta)
    c = [*weights, d / "runtime" / "kiln_runtime.c"]
    _present(d, cu + c)
    # the Makefile's NVCCFLAGS (``make NVCCFLAGS="... -DKILN_PROFILE"`` for profiling),
    # then its -fPIC
    flags = ["-O3", *cuda_arch_flags(meta), *(["-DKILN_PROFILE"] if profile else []),
             "-Xcompiler", "-fPIC"]
    headers = [d / "include" / f"{model}.h", d / "src" / "kernels.cuh", d / "src" / "weights.h",
               d / "runtime" / "kiln_runtime.h"]
    blob = [d / "src" / "weights.bin"] if wflags else []
    lib = _cached_library(d, model, [*cu, *c, *headers, *blob], nvcc, flags, "-cuda")
    inc = [f"-I{d / 'include'}", f"-I{d / 'runtime'}", f"-I{d / 'src'}"]

    def make(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(dir=lib.parent) as work:
            objs = []
            for f in cu + c:  # nvcc's -x applies to every file: one command per source
                obj = Path(work) / f"{f.stem}.o"
                if f.suffix == ".S":  # the weights' .incbin stub: the host C compiler
                    _run_build([find_compiler(None), "-fPIC", *wflags, *inc, "-c", str(f),
                                "-o", str(obj)], d)
                else:  # the bundle Makefile's command, in the bundle's folder
                    lang = ["-x", "c"] if f.suffix == ".c" else []
                    _run_build([*nvcc_launcher(), nvcc, *MAKE_INCLUDES, *flags, *lang, "-c",
                                str(f.relative_to(d)), "-o", str(obj.absolute())], d, cwd=d)
                objs.append(str(obj))
            _run_build([nvcc, *flags, "-shared", *objs, "-o", str(tmp), "-lm"], d)

    return _in_cache(lib, make)
    inc = [f"-I{d / 'include'}", f"-I{d / 'runtime'}", f"-I{d / 'src'}"]
    with tempfile.TemporaryDirectory(dir=lib.parent) as work:
        objs = []
        for f in cu + c:  # nvcc's -x applies to every file: one command per source
            obj = Path(work) / f"{f.stem}.o"
            if f.suffix == ".S":  # the weights' .incbin stub: the host C compiler
                _run_build([find_compiler(None), "-fPIC", *wflags, *inc, "-c", str(f), "-o",
                            str(obj)], d)
            else:  # the bundle Makefile's command, in the bundle's folder
                lang = ["-x", "c"] if f.suffix == ".c" else []
                _run_build([*nvcc_launcher(), nvcc, *MAKE_INCLUDES, *flags, *lang, "-c",
                            str(f.relative_to(d)), "-o", str(obj.absolute())], d, cwd=d)
            objs.append(str(obj))
        tmp = Path(work) / "bundle.so"
        _run_build([nvcc, *flags, "-shared", *objs, "-o", str(tmp), "-lm"], d)
        os.replace(tmp, lib)
    return lib


def build_host(path: str | Path, cc: str | None = None,
               extra_flags: Sequence[str] = (), device: str = "fsim",
               profile: bool = False) -> Path:
    """Compile the bundle at ``path`` into a cached shared library; return its path (a
    CUDA bundle with nvcc: :func:`build_cuda`). An accelerator bundle runs its layers on
    ``device``: ``fsim`` (the C simulator) or ``rtl`` (its ``rtl/`` verilated, once per
    content, by :func:`toolchain.vta.rtl_device.bundle_rtl_objects`). ``profile``: the
    ``make profile`` build (``runtime/kiln_profile.c``, every kernel timed)."""
    d = Path(path)
    meta = read_metadata(d)
    check_device(meta, device, str(d))
    if is_cuda_bundle(meta):
        return build_cuda(d, profile=profile)
    model = meta["model"]["name"]
    compiler = find_compiler(cc)
    flags = [*HOST_FLAGS, *loop_flags(compiler), *host_flags(meta, compiler),
             *thread_flags(meta), *device_flags(meta, device), *extra_flags]
    weights, wflags = _weights_sources(d, meta)
    srcs = [*_sources(d, model, meta, device), *weights]
    if profile:
        flags += PROFILE_FLAGS
        srcs += _present(d, [d / "runtime" / "kiln_profile.c"])
    # LLVM bundles: the kernels' object files, linked as they are
    srcs += _present(d, [d / o for o in meta.get("kernel_objects", ())])
    headers = [d / "include" / f"{model}.h", d / "src" / "kernels.h", d / "src" / "weights.h",
               d / "runtime" / "kiln_runtime.h"]
    blob = [d / "src" / "weights.bin"] if wflags else []
    rtl = sorted((d / "rtl").rglob("*.*")) if device == "rtl" else []
    lib = _cached_library(d, model, [*srcs, *headers, *blob, *rtl], compiler, flags)
    # the runtime every bundle carries, and the accelerator's driver and simulator
    runtime = [f for f in srcs if f.parent == d / "runtime" and f.name in SHARED_RUNTIME]
    cflags = [*flags, *wflags, f"-I{d / 'include'}", f"-I{d / 'runtime'}", f"-I{d / 'src'}",
              *([f"-I{d / 'rtl' / 'sim'}"] if rtl else [])]

    def make(tmp: Path) -> None:
        link: list[str] = []
        if device == "rtl":
            from toolchain.vta.rtl_device import bundle_rtl_objects

            link = [*bundle_rtl_objects(d / "rtl"), "-lstdc++"]
        with tempfile.TemporaryDirectory(dir=lib.parent) as work:
            objects = _runtime_objects(runtime, compiler, flags)
            own = [str(_cached_object(f, compiler, cflags, d)) if f.name in CACHED_SOURCES
                   and f.parent == d / "src" else _with_pch(f, compiler, cflags, Path(work), d)
                   for f in srcs if f not in runtime]
            _run_build([compiler, *cflags, *own, *map(str, objects), "-o", str(tmp), *link,
                        "-lm"], d)

    return _in_cache(lib, make)


def allocate(shape: Any, dtype: Any, what: str, zero: bool = False) -> np.ndarray:
    """``np.empty`` (or ``np.zeros``), with a user error naming ``what`` and its size when
    this machine cannot hold it (instead of numpy's MemoryError)."""
    try:
        return (np.zeros if zero else np.empty)(shape, dtype)
    except MemoryError:
        size = int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
        raise InputError(f"{what} needs {size:,} bytes, more memory than this machine can "
                         "give") from None


#: hardware counters per layer in an accelerator bundle (``KILN_VTA_BUNDLE_HW_COUNTERS``)
HW_COUNTERS = 11

#: what ``make profile`` adds to a build (``BundleModule(profile=True)``)
PROFILE_FLAGS = ("-DKILN_ENABLE_TIMING", "-DKILN_PROFILE")

#: the byte every output buffer holds before a run (``BundleModule.__call__``)
POISON = 0xA5


class BundleModule:
    """A bundle built for the host, callable with a dict of numpy arrays."""

    def __init__(self, path: str | Path, cc: str | None = None,
                 extra_flags: Sequence[str] = (), device: str = "fsim",
                 profile: bool = False) -> None:
        self.path = Path(path)
        self.metadata = read_metadata(self.path)
        self.model = self.metadata["model"]["name"]
        if is_cuda_bundle(self.metadata) and not gpu_available():
            raise TargetError(f"bundle {self.path} is CUDA code for "
                              f"{self.metadata['target']['name']}: running it needs an NVIDIA "
                              "GPU and driver, and this machine has none (nvidia-smi -L); "
                              "compile with --emulate to check its kernels on the CPU")
        self.device = device
        self.profiled = profile
        self.library = build_host(self.path, cc, extra_flags, device, profile)
        self._lib = ctypes.CDLL(str(self.library))
        self._fn = getattr(self._lib, f"{self.model}_run")
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        if weights_mode(self.metadata) == "external":
            self.set_weights(self.path / "src" / "weights.bin")
        align = int(self.metadata["arena_align"])
        raw = allocate((int(self.metadata["arena_bytes"]) + align,), np.uint8,
                       f"the arena of bundle {self.model}", zero=True)
        skip = (-raw.ctypes.data) % align
        self._raw = raw
        self.arena = raw[skip:skip + int(self.metadata["arena_bytes"])]
        self.inputs = self.metadata["inputs"]
        self.outputs = self.metadata["outputs"]

    def set_weights(self, path: str | Path) -> np.ndarray:
        """External weights (``--weights external``): read ``path`` into aligned memory
        and hand it to ``<model>_set_weights``; returns the buffer (kept alive by the
        module too). A file the bundle refuses (size, CRC-32) is an :class:`InputError`
        naming the file and the reason."""
        store = self.metadata["weights_storage"]
        size = Path(path).stat().st_size if Path(path).is_file() else None
        if size is None:
            raise InputError(f"bundle {self.model} has external weights: {path} does not "
                             "exist (the bundle's src/weights.bin)")
        raw = allocate((size + store["align"],), np.uint8, f"the weights of {self.model}")
        skip = (-raw.ctypes.data) % store["align"]
        data = raw[skip:skip + size]
        with open(path, "rb") as f:
            f.readinto(memoryview(data))
        fn = getattr(self._lib, f"{self.model}_set_weights")
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        # the aligned address itself: numpy gives an empty slice (a model without weights)
        # an address of its own, not its offset into ``raw``
        rc = fn(raw.ctypes.data + skip, size)
        if rc != 0:
            raise InputError(f"{self.model}_set_weights({path}) returned {rc} "
                             f"({_ERRORS.get(rc, 'unknown')})")
        self._weights = raw
        return raw

    def _check(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        want = {t["name"] for t in self.inputs}
        unknown = sorted(set(inputs) - want)
        missing = [t["name"] for t in self.inputs if t["name"] not in inputs]
        if unknown or missing:
            raise InputError(f"bundle {self.model}: inputs are {sorted(want)}; "
                             + (f"missing {missing}" if missing else "")
                             + ("; " if missing and unknown else "")
                             + (f"unknown {unknown}" if unknown else ""))
        arrays = []
        for t in self.inputs:
            a = inputs[t["name"]]
            if not isinstance(a, np.ndarray):
                raise InputError(f"input {t['name']!r} must be a numpy array")
            dt = np_dtype(t["dtype"])
            if a.dtype != dt or tuple(a.shape) != tuple(t["shape"]):
                raise InputError(f"input {t['name']!r} is {a.dtype}{list(a.shape)}; the bundle "
                                 f"expects {t['dtype']}{t['shape']}")
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def _args(self, ins: list[np.ndarray], outs: list[np.ndarray]) -> tuple[Any, Any]:
        cin = (ctypes.c_void_p * max(len(ins), 1))(*[a.ctypes.data for a in ins])
        cout = (ctypes.c_void_p * max(len(outs), 1))(*[a.ctypes.data for a in outs])
        return cin, cout

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run the bundle once; the outputs by name."""
        ins = self._check(inputs)
        outs = [allocate(t["shape"], np_dtype(t["dtype"]), f"output {t['name']!r}")
                for t in self.outputs]
        for a in outs:  # poisoned, so an output the bundle fails to write never looks right
            a.reshape(-1).view(np.uint8).fill(POISON)
        cin, cout = self._args(ins, outs)
        rc = self._fn(cin, cout, self.arena.ctypes.data if self.arena.size else None)
        if rc != 0:
            raise BuildError(f"{self.model}_run returned {rc} ({_ERRORS.get(rc, 'unknown')})")
        return {t["name"]: a for t, a in zip(self.outputs, outs, strict=True)}

    def accelerator_counters(self) -> list[dict[str, Any]]:
        """Per accelerator layer (call order) its counters after the last run: ``layer``
        (node name), the driver's counters (``instructions``, ``insn_<OP>``,
        ``bytes_loaded_<mem>``, ``bytes_stored_out``, ``gemm_steps``, ``macs``,
        ``alu_steps``: the fsim counts them as it runs; on the RTL the driver counts them from
        the program, ``kiln_vta_program_counters``) and the RTL's hardware
        counters (``cycles``, ``gemm_cycles``, ... ``dram_wr_beats``: 0 on the fsim).
        Empty for a bundle without accelerator layers."""
        if not accelerated(self.metadata):
            return []
        lib = self._lib
        n = len(self.metadata["accelerator"]["layers"])
        name_of = lib.kiln_vta_counter_name
        name_of.restype, name_of.argtypes = ctypes.c_char_p, [ctypes.c_int]
        names = []
        while (nm := name_of(len(names))) is not None:
            names.append(nm.decode())
        soft = (ctypes.c_uint64 * (n * len(names))).in_dll(lib, "kiln_vta_bundle_counters")
        hw_names = [ctypes.string_at(p).decode() for p in
                    (ctypes.c_void_p * HW_COUNTERS).in_dll(lib, "kiln_vta_bundle_hw_names")]
        hw = (ctypes.c_uint64 * (n * HW_COUNTERS)).in_dll(lib, "kiln_vta_bundle_hw")
        layers = (ctypes.c_char_p * n).in_dll(lib, "kiln_vta_bundle_layer_names")
        return [{"layer": layers[i].decode(),
                 **{k: int(soft[i * len(names) + j]) for j, k in enumerate(names)},
                 **{k: int(hw[i * HW_COUNTERS + j]) for j, k in enumerate(hw_names)}}
                for i in range(n)]

    def kernel_times(self, inputs: Mapping[str, Any], repeat: int = 3) -> list[dict[str, Any]]:
        """A profiling build's (``profile=True``) kernels over ``repeat`` runs on
        ``inputs``: per kernel (run order) ``kernel``, ``mean_ns``, ``min_ns``, ``calls``,
        and for an accelerator layer's kernel ``device_ns``, the mean ns its device run
        took (the rest of ``mean_ns`` is host work: packing, staging, unpacking)."""
        if not self.profiled:
            raise TargetError(f"bundle {self.model}: kernel_times needs a profiling build "
                              "(BundleModule(..., profile=True))")
        lib = self._lib
        for name, restype in (("kiln_profile_reset", None), ("kiln_profile_entry", ctypes.c_int)):
            getattr(lib, name).restype = restype
        lib.kiln_profile_entry.argtypes = [
            ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_double),
            ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_long)]
        layers = self.metadata.get("accelerator", {}).get("layers", []) if accelerated(
            self.metadata) else []
        dev = (ctypes.c_double * len(layers)).in_dll(lib, "kiln_vta_bundle_device_ns") \
            if layers else []
        self(inputs)  # a first run outside the table (the device opens, pages are touched)
        lib.kiln_profile_reset()
        for i in range(len(layers)):
            dev[i] = 0.0
        for _ in range(repeat):
            self(inputs)
        rows = []
        name, lo, mean, calls = (ctypes.c_char_p(), ctypes.c_double(), ctypes.c_double(),
                                 ctypes.c_long())
        for i in range(max((k["index"] for k in self.metadata["kernels"]), default=-1) + 1):
            if lib.kiln_profile_entry(i, ctypes.byref(name), ctypes.byref(lo),
                                      ctypes.byref(mean), ctypes.byref(calls)) == 0:
                rows.append({"kernel": name.value.decode(), "mean_ns": mean.value,
                             "min_ns": lo.value, "calls": int(calls.value)})
        # rows and layers are both in call order: the k-th accelerator kernel is layer k
        kernels = {la["kernel"] for la in layers}
        for r, j in zip([r for r in rows if r["kernel"] in kernels], range(len(layers)),
                        strict=False):
            r["device_ns"] = dev[j] / repeat
        return rows

    def set_threads(self, n: int) -> int:
        """Run the parallel kernels on ``n`` threads (``<m>_set_threads``); the count in
        effect (``n`` clamped to 1 .. the target's cores)."""
        if is_cuda_bundle(self.metadata):
            raise TargetError(f"bundle {self.model} is a CUDA bundle: it has no CPU threads")
        fn = getattr(self._lib, f"{self.model}_set_threads")
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int]
        return int(fn(int(n)))

    def device_time(self, inputs: Mapping[str, Any], repeat: int = 20) -> float:
        """A CUDA bundle's kernels alone (``<m>_run_device``: no copies): the median
        seconds of ``repeat`` runs on ``inputs`` (copied to the device once first)."""
        if not is_cuda_bundle(self.metadata):
            raise TargetError(f"bundle {self.model} is not a CUDA bundle: time() measures it")
        self(inputs)
        fn = getattr(self._lib, f"{self.model}_run_device")
        fn.restype = ctypes.c_int
        times = []
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            rc = fn()
            times.append(time.perf_counter() - t0)
            if rc != 0:
                raise BuildError(f"{self.model}_run_device returned {rc} "
                                 f"({_ERRORS.get(rc, 'unknown')})")
        return float(np.median(times[1:]))

    def launch_times(self, inputs: Mapping[str, Any], repeat: int = 20
                     ) -> list[dict[str, Any]]:
        """A CUDA bundle's profiling build (``profile=True``): each device launch's
        milliseconds on the GPU (CUDA events around it), the median of ``repeat`` runs of
        the kernels on ``inputs`` (copied to the device once first): the rows of
        ``metadata.json``'s ``device.launch_table`` (step, ops, shape, kernel, grid, block,
        kind) with ``ms`` added."""
        if not (is_cuda_bundle(self.metadata) and self.profiled):
            raise TargetError(f"bundle {self.model}: launch_times needs a CUDA bundle's "
                              "profiling build (BundleModule(..., profile=True))")
        table = self.metadata["device"]["launch_table"]
        count = getattr(self._lib, f"{self.model}_profile_launches")
        count.restype = ctypes.c_int
        if count() != len(table):
            raise BuildError(f"bundle {self.model}: {count()} launches, but metadata.json "
                             f"lists {len(table)}")
        fn = getattr(self._lib, f"{self.model}_profile_ms")
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p]
        self(inputs)
        ms = np.zeros((repeat + 1, max(len(table), 1)), np.float32)
        for r in range(repeat + 1):  # the first run outside the table (warm-up)
            rc = fn(ms[r].ctypes.data)
            if rc != 0:
                raise BuildError(f"{self.model}_profile_ms returned {rc} "
                                 f"({_ERRORS.get(rc, 'unknown')})")
        med = np.median(ms[1:], axis=0)
        return [{**row, "ms": float(med[i])} for i, row in enumerate(table)]

    def time(self, inputs: Mapping[str, Any], repeat: int = 20) -> dict[str, float]:
        """Seconds per call through ctypes: min and median of ``repeat`` calls, and the
        ctypes call overhead (a call that fails its NULL check at once)."""
        ins = self._check(inputs)
        outs = [np.empty(t["shape"], np_dtype(t["dtype"])) for t in self.outputs]
        cin, cout = self._args(ins, outs)
        arena = self.arena.ctypes.data if self.arena.size else None
        fn = self._fn
        times, over = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn(cin, cout, arena)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fn(None, None, None)
            over.append(time.perf_counter() - t0)
        return {"min": min(times), "median": float(np.median(times)),
                "overhead": float(np.median(over))}
