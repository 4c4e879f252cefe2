"""Precompiled system headers for Kiln's own host builds (gcc's ``.gch``).

A C file of kernels for an x86 target with intrinsics includes ``<immintrin.h>``: some
70,000 lines that gcc parses at every build, about 0.15 CPU s, more than a small kernel
itself takes to compile. :func:`pch_flags` gives the flags that make gcc load that header
precompiled instead: ``-include <cache>/pch-<key>.h``, a one-line header that includes it,
beside which the precompiled ``pch-<key>.h.gch`` lies (gcc looks for ``NAME.gch`` before
``NAME``). The precompiled header is built once per compiler, version, flags and header
set (at the second build that could use it), into the build cache (``$KILN_CACHE_DIR``,
:mod:`toolchain.runtime.cache`, whose size limit counts it: about 24 MB each).

The library is the one the plain build gives, byte for byte (``tests/runtime/
test_pch.py``): the header is the one the source includes first anyway, and gcc uses a
``.gch`` only when the flags it was made with fit (otherwise it reads the header's text,
silently). Where nothing applies the flags are ``[]``: a source without such a header, one
that defines a feature-test macro (``#define _POSIX_C_SOURCE``: an earlier include would
change what the headers declare), a compiler that is not gcc, a header the compiler could
not precompile. Bundles built by their own Makefile or CMake are not affected.

    >>> pch_flags("cc", ["-O3"], "int f(void) { return 0; }")
    []
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from functools import lru_cache

from toolchain.runtime.cache import cache_dir, touch

#: the system headers worth precompiling (included by x86 intrinsic kernels)
HEADERS = ("immintrin.h",)

_FEATURE_MACRO = re.compile(r"^\s*#\s*define\s+_", re.M)


def key_flags(flags: Sequence[str]) -> list[str]:
    """The flags a precompiled header is made with and keyed by: all but the warnings
    (which do not change what a header means), the link or output mode, the folders of a
    build's own headers and libraries (a system header comes from the system's) and Kiln's
    own macros (``-DKILN_...``, which no system header reads; gcc checks that the macros a
    precompiled header uses are unchanged): one precompiled header serves every bundle
    built with the same target flags.

    >>> key_flags(["-O3", "-Wall", "-Werror", "-pedantic", "-march=native", "-shared",
    ...            "-I/tmp/bundle/include", '-DKILN_WEIGHTS_FILE="w.bin"', "-lm"])
    ['-O3', '-march=native']
    """
    return [f for f in flags
            if not (f.startswith(("-W", "-pedantic", "-I", "-L", "-l", "-DKILN_"))
                    or f in ("-shared", "-c"))]


def headers_of(source: str) -> tuple[str, ...]:
    """The :data:`HEADERS` that ``source`` includes (none when it defines a feature-test
    macro).

    >>> headers_of("#include <math.h>\\n#include <immintrin.h>\\n")
    ('immintrin.h',)
    >>> headers_of("#define _GNU_SOURCE\\n#include <immintrin.h>\\n")
    ()
    """
    if _FEATURE_MACRO.search(source):
        return ()
    return tuple(h for h in HEADERS if f"#include <{h}>" in source)


@lru_cache(maxsize=8)
def is_gcc(compiler: str) -> bool:
    """True when ``compiler`` is gcc (gcc's ``.gch`` lookup): it defines ``__GNUC__`` and
    not ``__clang__``."""
    try:
        res = subprocess.run([compiler, "-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, check=False)
    except OSError:
        return False
    return res.returncode == 0 and "__GNUC__" in res.stdout and "__clang__" not in res.stdout


def pch_flags(compiler: str, flags: Sequence[str], source: str) -> list[str]:
    """``["-include", header]`` that makes ``compiler`` (with ``flags``) load the system
    headers ``source`` includes precompiled; ``[]`` where none applies (see the module
    docstring) and the first time a key is seen.

    Making a precompiled header costs about four plain builds (0.6 CPU s, 24 MB written), so
    a key's first build only leaves its one-line header in the cache as a mark; the second
    makes the ``.gch``, and every build from then on uses it."""
    headers = headers_of(source)
    if not headers or not is_gcc(compiler):
        return []
    from toolchain.runtime.build import compiler_version

    kflags = key_flags(flags)
    key = hashlib.sha256("\0".join([compiler, compiler_version(compiler), *kflags,
                                    *headers]).encode()).hexdigest()[:24]
    d = cache_dir()
    header, gch = d / f"pch-{key}.h", d / f"pch-{key}.h.gch"
    text = "".join(f"#include <{h}>\n" for h in headers)
    seen = header.is_file() and header.read_text() == text
    if not seen:
        _write_atomic(header, text.encode())
    if gch.exists():
        touch(gch)
        touch(header)
        return ["-include", str(header)]
    if not seen:
        return []  # one build with these flags so far: not worth a precompiled header yet
    fd, tmp = tempfile.mkstemp(suffix=".gch.tmp", dir=d)
    os.close(fd)
    res = subprocess.run([compiler, *kflags, "-x", "c-header", str(header), "-o", tmp],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        os.unlink(tmp)
        return []  # the plain build parses the headers as before
    os.replace(tmp, gch)
    touch(header)
    return ["-include", str(header)]


def _write_atomic(path: os.PathLike[str], data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


__all__ = ["HEADERS", "headers_of", "is_gcc", "key_flags", "pch_flags"]
