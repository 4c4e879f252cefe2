"""End to end: te.compute -> create_prim_func -> lower -> C -> cc -> ctypes call."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain import te
from toolchain.driver import build, lower
from toolchain.errors import BuildError, InputError, OptionError, TargetError

STRICT = ["-Wall", "-Wextra", "-Werror"]


def _add(n: int = 64):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.create_prim_func([A, B, C])


def test_add_end_to_end():
    mod = build(_add(), extra_flags=STRICT)
    a = np.arange(64, dtype="float32")
    b = np.full(64, 0.5, "float32")
    c = np.zeros(64, "float32")
    mod(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    assert "kiln_main" in mod.get_source()
    assert mod.entry == "kiln_main"


def test_build_info_records_compiler_and_flags():
    mod = build(_add(), name="add")
    info = mod.build_info
    assert info["compiler"].endswith(("cc", "gcc", "clang"))
    assert "-O3" in info["flags"] and "-march=native" in info["flags"]
    assert info["compiler_version"] and info["compiler_version"] != "?"
    assert mod.entry == "kiln_add"


def test_cache_hit_on_rebuild():
    first = build(_add(32), name="cached")
    second = build(_add(32), name="cached")
    assert second.build_info["cached"] is True
    assert first.lib_path == second.lib_path


def test_export_library(tmp_path):
    mod = build(_add(), name="exp")
    out = mod.export_library(tmp_path / "k.so")
    assert out.exists() and out.stat().st_size > 0
    import ctypes

    assert hasattr(ctypes.CDLL(str(out)), "kiln_exp")


def test_wrong_shape_names_argument():
    mod = build(_add())
    a = np.zeros(64, "float32")
    with pytest.raises(InputError, match=r"argument 'B' has shape \(63,\), expected \(64\)"):
        mod(a, np.zeros(63, "float32"), a.copy())


def test_wrong_dtype_names_argument():
    mod = build(_add())
    a = np.zeros(64, "float32")
    with pytest.raises(InputError, match="argument 'A' has dtype float64, expected float32"):
        mod(np.zeros(64), a, a.copy())


def test_non_contiguous_refused():
    mod = build(_add())
    a = np.zeros(128, "float32")[::2]
    b = np.zeros(64, "float32")
    with pytest.raises(InputError, match="argument 'A' is not C-contiguous"):
        mod(a, b, b.copy())


def test_wrong_argument_count():
    mod = build(_add())
    with pytest.raises(InputError, match=r"takes 3 arguments \(A, B, C\), got 1"):
        mod(np.zeros(64, "float32"))


def test_not_an_array():
    mod = build(_add())
    with pytest.raises(InputError, match="argument 'A' must be a numpy array"):
        mod([0.0] * 64, np.zeros(64, "float32"), np.zeros(64, "float32"))


def test_symbolic_shape_bound_from_arrays():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    mod = build(te.create_prim_func([A, B]), extra_flags=STRICT)
    for size in (1, 7, 100):
        a = np.arange(size, dtype="float32")
        b = np.zeros(size, "float32")
        mod(a, b)
        np.testing.assert_array_equal(b, a * 2)
    with pytest.raises(InputError, match="argument 'B' has shape"):
        mod(np.zeros(3, "float32"), np.zeros(4, "float32"))


def test_compile_error_is_build_error_with_source_path():
    func = _add()
    bad = func.with_body(func.body)
    with pytest.raises(BuildError, match=r"(?s)source kept at: .*\.c.*error"):
        build(bad, name="bad", extra_flags=["-DKILN_BROKEN=1", "-include", "/nonexistent.h"])


def test_bad_inputs_to_build():
    with pytest.raises(OptionError, match="expected a Schedule or PrimFunc"):
        build("not a function")
    with pytest.raises(TargetError, match="has kind 'cuda'"):
        build(_add(), target="cuda-sm80")


def test_lower_accepts_schedule_and_phases():
    from toolchain.tir.schedule import Schedule

    seen = []

    def spy(f):
        seen.append(f)
        return f

    sch = Schedule(_add())
    out = lower(sch, passes={0: [spy], 4: [spy]})
    assert len(seen) == 2
    assert "T.block" in str(seen[0]) and "T.block" not in str(out)
    with pytest.raises(OptionError, match="unknown phase 9"):
        lower(sch, passes={9: [spy]})
    with pytest.raises(OptionError, match="returned NoneType"):
        lower(sch, passes={1: [lambda f: None]})


def test_portable_target_file_builds_without_march():
    mod = build(_add(), target="c-generic")
    assert not any(f.startswith("-march") for f in mod.build_info["flags"])
    assert mod.build_info["target"] == "c-generic"
    a = np.ones(64, "float32")
    c = np.zeros(64, "float32")
    mod(a, a, c)
    assert c.tolist() == [2.0] * 64
