"""build() compiles with the target descriptor's compiler and cflags (as compile_op and
bundles do); the host target keeps the host defaults."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from toolchain import te
from toolchain.errors import BuildError
from toolchain.runtime.build import BASE_FLAGS, build, find_compiler, loop_flags
from toolchain.target import load_target


def _func():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    return te.create_prim_func([A, B])


def _check(mod) -> None:
    a = np.arange(8, dtype="float32")
    b = np.empty(8, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_target_cflags_reach_the_compiler() -> None:
    t = load_target("x86_64-avx2")
    assert t.cflags, "x86_64-avx2 names cflags"
    mod = build(_func(), "x86_64-avx2", extra_flags=["-Wall"])
    flags = mod.build_info["flags"]
    assert flags[:len(BASE_FLAGS)] == list(BASE_FLAGS)
    assert f"-march={t.arch}" in flags
    # the descriptor's flags, each once, before the caller's
    for f in t.cflags:
        assert flags.count(f) == 1, (f, flags)
        assert flags.index(f) < flags.index("-Wall")
    assert mod.build_info["target"] == "x86_64-avx2"
    # compile_op passes the descriptor's flags itself: not repeated
    again = build(_func(), t, extra_flags=[*t.cflags])
    assert all(again.build_info["flags"].count(f) == 1 for f in t.cflags)


def test_host_target_keeps_host_defaults() -> None:
    mod = build(_func(), "c")
    loops = loop_flags(find_compiler())  # gcc's loop passes Kiln's schedules did, if it takes them
    assert mod.build_info["flags"] == [*BASE_FLAGS, *loops, "-march=native"]
    assert mod.build_info["target"] == "host"
    _check(mod)


def test_target_compiler_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc
    t = dataclasses.replace(load_target("c-generic"), compiler=gcc)
    mod = build(_func(), t)
    assert mod.build_info["compiler"] == gcc
    _check(mod)
    missing = dataclasses.replace(t, compiler="kiln-no-such-cc")
    with pytest.raises(BuildError, match="C compiler 'kiln-no-such-cc' not found"):
        build(_func(), missing)
