"""Precompiled <immintrin.h> in Kiln's host builds (toolchain/runtime/pch.py): used from a
key's second build on, and the libraries are the plain build's, byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolchain.runtime import pch
from toolchain.runtime.build import compile_shared, find_compiler

BUILD = sys.modules["toolchain.runtime.build"]  # the module (toolchain.runtime.build is a function)
FLAGS = ["-O3", "-std=gnu11", "-fPIC", "-shared", "-march=x86-64-v3", "-Wall", "-Werror"]

pytestmark = pytest.mark.skipif(not pch.is_gcc(find_compiler(None)),
                                reason="precompiled headers are used with gcc only")


def _source(scale: float) -> str:
    return ("#include <stdint.h>\n#include <immintrin.h>\n"
            "void axpy(float *restrict y, const float *restrict x) {\n"
            f"  __m256 a = _mm256_set1_ps({scale}f);\n"
            "  _mm256_storeu_ps(y, _mm256_fmadd_ps(a, _mm256_loadu_ps(x),"
            " _mm256_loadu_ps(y)));\n}\n")


def test_second_build_uses_the_precompiled_header_and_gives_the_same_library(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "pch"))
    compile_shared(_source(1.0), FLAGS)
    assert not list((tmp_path / "pch").glob("pch-*.gch"))  # one build: only the mark
    assert len(list((tmp_path / "pch").glob("pch-*.h"))) == 1
    with_pch, _ = compile_shared(_source(2.0), FLAGS)
    gch, = (tmp_path / "pch").glob("pch-*.h.gch")
    # gcc really loads it ('!' before the .gch in -H's list; 'x' would be a refused one)
    cc = find_compiler(None)
    used = subprocess.run([cc, *FLAGS, *pch.pch_flags(cc, FLAGS, _source(3.0)), "-H", "-x",
                           "c", "-", "-o", str(tmp_path / "probe.so")], input=_source(3.0),
                          capture_output=True, text=True, check=True)
    assert f"! {gch}" in used.stderr
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "plain"))
    monkeypatch.setattr(BUILD, "pch_flags", lambda *a: [])
    plain, _ = compile_shared(_source(2.0), FLAGS)
    assert plain.name == with_pch.name and plain.read_bytes() == with_pch.read_bytes()


def test_a_bundle_of_an_x86_target_builds_to_the_same_library(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain.bundle import compile_model, host
    from toolchain.target import load_target, runs_here
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    if not runs_here(load_target("x86_64-avx2")):
        pytest.skip("this CPU lacks x86_64-avx2's features")
    d = compile_model(kiln_qdq(ZOO["lenet5"].build()), "x86_64-avx2", tmp_path / "b",
                      progress=False)
    assert "#include <immintrin.h>" in (d / "src" / "kernels.c").read_text()
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "pch"))
    (tmp_path / "pch").mkdir()
    host.build_host(d).unlink()  # the first build with these flags leaves the mark ...
    for obj in (tmp_path / "pch").glob("object-kernels-*.o"):  # (kept by content)
        obj.unlink()
    lib = host.build_host(d)  # ... the second compiles the kernels again, makes the .gch
    assert len(list((tmp_path / "pch").glob("object-kernels-*.o"))) == 1  # and uses it
    assert len(list((tmp_path / "pch").glob("pch-*.h.gch"))) == 1
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "plain"))
    monkeypatch.setattr(host, "pch_flags", lambda *a: [])
    plain = host.build_host(d)
    assert plain.name == lib.name and plain.read_bytes() == lib.read_bytes()


def test_only_gcc_and_only_sources_without_feature_macros() -> None:
    assert pch.headers_of("#include <immintrin.h>\nint x;\n") == ("immintrin.h",)
    assert pch.headers_of("#define _POSIX_C_SOURCE 199309L\n#include <immintrin.h>\n") == ()
    assert pch.headers_of("#include <math.h>\n") == ()
    assert pch.pch_flags("/bin/false", FLAGS, "#include <immintrin.h>\n") == []


def test_the_docstring_examples_run() -> None:
    import doctest

    assert doctest.testmod(pch).failed == 0
