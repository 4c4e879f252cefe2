"""toolchain.gcpause: the cyclic garbage collector paused while IR is built, and the stages
that pause it (LLVM translation, a bundle compile)."""

from __future__ import annotations

import doctest
import gc
import threading

import pytest

import toolchain.bundle
import toolchain.gcpause
from toolchain.codegen.llvm import LLVMCodegen
from toolchain.gcpause import paused_gc
from toolchain.tir import ir


def test_nested_and_threaded_pauses_enable_it_once_at_the_end() -> None:
    assert gc.isenabled()
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with paused_gc():
            entered.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert entered.wait(10) and not gc.isenabled()
    with paused_gc():
        with paused_gc():
            pass
        assert not gc.isenabled()
        leave.set()
        t.join(10)
        assert not gc.isenabled()  # the other thread left; this block has not
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_enabled_again_after_an_exception() -> None:
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("x")
    assert gc.isenabled()


def test_docstring_example() -> None:
    assert doctest.testmod(toolchain.gcpause).failed == 0


def test_llvm_translation_runs_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    translate = LLVMCodegen.translate

    def spy(self, *args):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        return translate(self, *args)

    monkeypatch.setattr(LLVMCodegen, "translate", spy)
    A, B, i = ir.Buffer("A", (4,)), ir.Buffer("B", (4,)), ir.Var("i")
    k = LLVMCodegen().generate(ir.PrimFunc((A, B), ir.For(i, 0, 4, "serial",
                                                          B.store(A[i] + 1.0, [i]))), "g")
    assert seen == [False] and "fadd" in k.ir and gc.isenabled()


def test_bundle_compile_runs_paused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    seen = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())
        raise RuntimeError("stop here")

    monkeypatch.setattr(toolchain.bundle, "build_spec", spy)
    with pytest.raises(RuntimeError, match="stop here"):
        toolchain.bundle.compile_model("unused.onnx", "c-generic", tmp_path / "b")
    assert seen == [False] and gc.isenabled()
