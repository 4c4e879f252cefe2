"""GCC's ``-O3`` loop transformations that redo what Kiln's schedules did are off in every
build of Kiln's C (:data:`toolchain.runtime.build.LOOP_FLAGS`; docs/bundle.md, "The C
compiler's flags"), and only where the compiler takes the flags: a compiler that refuses
them (clang) or warns about them builds the same bundle without them."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from tests.bundle.helpers import make_model
from tests.tools import needs
from toolchain.bundle import compile_model
from toolchain.bundle.host import BundleModule, build_host
from toolchain.runtime.build import LOOP_FLAGS, loop_flags
from toolchain.runtime.pch import is_gcc

pytestmark = pytest.mark.skipif(not is_gcc(shutil.which("cc") or "cc"),
                                reason="cc is not gcc (the flags are gcc's)")

#: a compiler that logs its arguments and passes them to gcc, refusing the loop flags
#: (``refuse``: clang's "unknown argument"), warning about them (``warn``) or not (``take``)
WRAPPER = """#!/bin/sh
echo "$@" >> {log}
for a; do
  case "$a" in -fno-loop-unroll-and-jam)
    case {mode} in
      refuse) echo "error: unknown argument: '$a'" >&2; exit 1;;
      warn) echo "warning: optimization flag '$a' is not supported" >&2;;
    esac;;
  esac
done
exec {gcc} "$@"
"""


def wrapper(tmp_path, mode: str):
    """(the wrapper compiler's path, its argument log)."""
    log = tmp_path / f"{mode}.log"
    cc = tmp_path / f"cc-{mode}"
    cc.write_text(WRAPPER.format(log=log, mode=mode, gcc=shutil.which("gcc") or "gcc"))
    cc.chmod(0o755)
    return str(cc), log


@pytest.fixture()
def bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    from onnx import helper

    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       {"x": (np.float32, [2, 3])}, {"y": (np.float32, [2, 3])}, name="relu")
    return compile_model(model, "c-generic", tmp_path / "relu", progress=False)


@pytest.mark.parametrize("mode,expect", [("take", LOOP_FLAGS), ("refuse", ()), ("warn", ())])
def test_loop_flags_only_where_the_compiler_takes_them_silently(tmp_path, mode, expect):
    cc, _ = wrapper(tmp_path, mode)
    assert loop_flags(cc) == expect


@pytest.mark.parametrize("mode", ["take", "refuse"])
def test_the_host_build_passes_them_where_taken(bundle, tmp_path, mode):
    cc, log = wrapper(tmp_path, mode)
    lib = build_host(bundle, cc=cc)
    compiles = [line for line in log.read_text().splitlines() if "kernels.c" in line]
    assert compiles and all(("-fno-loop-unroll-and-jam" in c) == (mode == "take")
                            for c in compiles), compiles
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    mod = BundleModule(bundle, cc=cc)  # the library just built
    assert mod.library == lib
    np.testing.assert_array_equal(mod({"x": x})["y"], np.maximum(x, 0))


@needs("make")
@pytest.mark.parametrize("mode,args,on", [("take", [], True), ("refuse", [], False),
                                          ("take", ["KILN_LOOP_FLAGS="], False)])
def test_the_makefile_probes_the_compiler(bundle, tmp_path, mode, args, on):
    cc, _ = wrapper(tmp_path, mode)
    res = subprocess.run(["make", "-n", "-C", str(bundle), "lib", f"CC={cc}", *args],
                         capture_output=True, text=True, check=True)
    kernels = [line for line in res.stdout.splitlines() if "src/kernels.c" in line]
    assert kernels and all((" ".join(LOOP_FLAGS) in c) == on for c in kernels), kernels


@needs("cmake", "make")
@pytest.mark.parametrize("mode", ["take", "refuse"])
def test_the_cmake_build_probes_the_compiler(bundle, tmp_path, mode):
    cc, _ = wrapper(tmp_path, mode)
    build = tmp_path / f"cmake-{mode}"
    subprocess.run(["cmake", "-S", str(bundle), "-B", str(build), f"-DCMAKE_C_COMPILER={cc}",
                    "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], capture_output=True, check=True)
    commands = json.loads((build / "compile_commands.json").read_text())
    kernels = [c["command"] for c in commands if c["file"].endswith("kernels.c")]
    assert kernels and all((" ".join(LOOP_FLAGS) in c) == (mode == "take")
                           for c in kernels), kernels
