"""Safety of the generated bundle: strict C, sanitizers, no malloc, deterministic output,
atomic writes, hostile names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import (
    STRICT,
    ZooBundle,
    assert_matches,
    compile_run,
    make,
    make_model,
    random_inputs,
    run_main,
    run_ort,
)
from tests.tools import needs
from toolchain.bundle import compile_model
from toolchain.errors import OptionError
from toolchain.zoo import ZOO

F = np.float32
STRICT_CFLAGS = "-O1 -std=c99 " + " ".join(STRICT)
#: debug information for the sanitizer and valgrind builds: line tables only (``-g1``).
#: Their reports name each frame's file and line as with ``-g`` (the instrumentation and
#: the code are the same at every ``-g`` level); ``-g``'s variable locations, which only a
#: debugger reads, made the ASan/UBSan compile of ResNet-8's kernels 2.5x as costly
SANITIZER_DEBUG = "-g1"

#: names the C must survive: quotes, backslashes, comment ends, newlines, keywords,
#: leading digits, trigraphs, non-ASCII, and names that collide after sanitising
HOSTILE = ['in"put*/', "a\\b\nc", "int", "9lives", "x??/y", "caf\u00e9", "a.b", "a_b",
           "for", "main", "/* open", "kiln_run", "w" * 200]


def _hostile_model():
    names = iter(HOSTILE)
    x = next(names)
    nodes, prev = [], x
    inits = {}
    for k, name in enumerate(names):
        op = ["Relu", "Add", "Mul", "Tanh"][k % 4]
        inputs = [prev]
        if op in ("Add", "Mul"):
            cname = f"{name}*/const\"{k}"
            inits[cname] = np.full((1, 4), 0.5 + k, F)
            inputs.append(cname)
        nodes.append(helper.make_node(op, inputs, [name], name=f'node "{name}" */ {k}'))
        prev = name
    return make_model(nodes, {x: (F, [2, 4])}, {prev: (F, [2, 4]), HOSTILE[4]: (F, [2, 4])},
                      inits, name='my "net" */\n2')


def test_hostile_names_give_valid_c(tmp_path):
    model = _hostile_model()
    inputs = random_inputs(model)
    path, got = compile_run(model, tmp_path, inputs)
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((path / "metadata.json").read_text())
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", meta["model"]["name"])
    fields = [t["field"] for t in meta["inputs"] + meta["outputs"]]
    assert len(set(fields)) == len(fields)
    for f in path.rglob("*.[ch]"):
        text = f.read_text()
        assert "\u00e9" not in text and "??/" not in text
    make(path, cflags=STRICT_CFLAGS)  # the library and main.c, strict


def test_no_malloc_anywhere(tmp_path, zoo_c_bundle):
    """ResNet-8's c-generic bundle (``zoo_c_bundle``: Kiln's compile shared with
    ``test_zoo.py`` and the sanitizer test below; each test builds in its own copy)."""
    path = zoo_c_bundle("resnet8").copy(tmp_path / "b").path
    sources = list(path.rglob("*.c")) + list(path.rglob("*.h"))
    lib_sources = [p for p in sources if p.name != "main.c"]
    # a CPU bundle's runtime is the CPU runtime alone (not the accelerator's driver)
    assert sorted(p.name for p in (path / "runtime").iterdir()) == [
        "kiln_profile.c", "kiln_runtime.c", "kiln_runtime.h", "kiln_threads.c"]
    pattern = re.compile(r"\b(malloc|calloc|realloc|free|posix_memalign|alloca)\s*\(")
    for p in lib_sources:
        assert not pattern.search(p.read_text()), p
    make(path, "lib")
    objs = sorted(str(p) for p in (path / "build").glob("*.o"))
    res = subprocess.run(["nm", "-u", *objs], capture_output=True, text=True, check=True)
    undefined = set(re.findall(r"\bU\s+(\S+)", res.stdout))
    assert not undefined & {"malloc", "calloc", "realloc", "free", "posix_memalign"}, undefined


def test_recompile_is_byte_identical(tmp_path):
    """Twice in this process and once in another (another string-hash seed)."""
    import os
    import sys

    spec = ZOO["ds_cnn"]
    a = compile_model(spec.build(), "c-generic", tmp_path / "a", name="kws")
    b = compile_model(spec.build(), "c-generic", tmp_path / "b", name="kws")
    root = Path(__file__).resolve().parents[2]
    code = ("from toolchain.zoo import ZOO; from toolchain.bundle import compile_model; "
            f"compile_model(ZOO['ds_cnn'].build(), 'c-generic', {str(tmp_path / 'c')!r}, "
            "name='kws')")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True)
    c = tmp_path / "c"
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert len(files) >= 12
    for other in (b, c):
        assert sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file()) == files
        for rel in files:
            assert (a / rel).read_bytes() == (other / rel).read_bytes(), (other, rel)


def test_failed_compile_leaves_nothing(tmp_path, monkeypatch):
    import toolchain.bundle.render as render

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure while copying the runtime")

    monkeypatch.setattr(render.shutil, "copytree", boom)
    out = tmp_path / "deep" / "out"
    with pytest.raises(RuntimeError, match="injected"):
        compile_model(ZOO["lenet5"].build(), "c-generic", out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temp dir, no parent folders


def test_failed_compile_keeps_previous_bundle(tmp_path, monkeypatch):
    import toolchain.bundle.compiler as compiler

    out = compile_model(ZOO["lenet5"].build(), "c-generic", tmp_path / "b")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure in planning")

    monkeypatch.setattr(compiler, "plan_memory", boom)
    with pytest.raises(RuntimeError, match="injected"):
        compile_model(ZOO["ds_cnn"].build(), "c-generic", out, force=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_existing_output_is_refused_unless_force(tmp_path):
    out = compile_model(ZOO["lenet5"].build(), "c-generic", tmp_path / "b")
    with pytest.raises(OptionError, match="already exists.*--force"):
        compile_model(ZOO["lenet5"].build(), "c-generic", out)
    compile_model(ZOO["mlp"].build(), "c-generic", out, force=True,
                  input_shapes={"input": (1, 1, 28, 28)})
    assert json.loads((out / "metadata.json").read_text())["model"]["name"] == "mlp"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(OptionError, match="not a Kiln bundle"):
        compile_model(ZOO["lenet5"].build(), "c-generic", other, force=True)
    assert (other / "keep.txt").read_text() == "mine"


def _sanitized_run(bundle: ZooBundle, flags: str, prefix=()) -> None:
    """``make main`` with ``flags`` in ``bundle`` (a copy of ``zoo_c_bundle``'s: Kiln's
    c-generic compile of the zoo model, shared with ``test_zoo.py``), run on the model's
    inputs (under ``prefix``), the outputs against onnxruntime's."""
    make(bundle.path, "main", cflags=flags)
    meta = json.loads((bundle.path / "metadata.json").read_text())
    assert_matches(run_main(bundle.path, bundle.inputs, meta, prefix=prefix), bundle.ref)


@pytest.mark.parametrize("name", ["lenet5", "transformer_encoder", "resnet8"])
def test_bundle_clean_under_asan_ubsan(name, tmp_path, zoo_c_bundle):
    flags = (f"-O1 {SANITIZER_DEBUG} -std=c99 -fsanitize=address,undefined "
             "-fno-sanitize-recover=all -fno-omit-frame-pointer")
    _sanitized_run(zoo_c_bundle(name).copy(tmp_path / name), flags)


@needs("valgrind", "make")
def test_bundle_clean_under_valgrind(tmp_path, zoo_c_bundle):
    _sanitized_run(zoo_c_bundle("lenet5").copy(tmp_path / "lenet5"),
                   f"-O1 {SANITIZER_DEBUG} -std=c99",
                   prefix=("valgrind", "--error-exitcode=9", "--quiet"))


@needs("cmake", "make")
def test_cmake_builds_library_and_demo(tmp_path):
    path = compile_model(ZOO["mlp"].build(), "c-generic", tmp_path / "b",
                         input_shapes={"input": (1, 1, 28, 28)})
    build = tmp_path / "cmake-build"
    for cmd in (["cmake", "-S", str(path), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                ["cmake", "--build", str(build)]):
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
    assert (build / "libmlp.a").is_file() and (build / "mlp_main").is_file()


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                    reason="arm-none-eabi-gcc is not installed")
def test_cortex_m4_library_cross_compiles_strict(tmp_path):
    """The firmware path: `make lib` with the board's compiler and flags, -Werror."""
    path = compile_model(Path(__file__).resolve().parents[2] / "examples" / "digits" /
                         "digits.onnx", "cortex-m4", tmp_path / "m4")
    probe = subprocess.run(["arm-none-eabi-gcc", "--specs=picolibc.specs", "-E", "-x", "c",
                            "-", "-o", "/dev/null"], input="#include <math.h>\n",
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip("picolibc for arm-none-eabi is not installed")
    make(path, "lib", cflags="-O2 -std=c99 -mcpu=cortex-m4 -mthumb -mfloat-abi=hard "
                             "-mfpu=fpv4-sp-d16 --specs=picolibc.specs " + " ".join(STRICT))
    res = subprocess.run(["arm-none-eabi-nm", "-u", str(path / "libdigits.a")],
                         capture_output=True, text=True, check=True)
    undefined = set(re.findall(r"\bU\s+(\S+)", res.stdout))
    assert not undefined & {"malloc", "free", "calloc", "realloc"}
    # the firmware runtime is single-threaded: no thread library at all
    assert not {u for u in undefined if u.startswith(("pthread_", "omp_", "GOMP_"))}


def test_run_checks_arguments_and_arena_alignment(zoo_c_bundle):
    """<model>_run refuses NULLs and a misaligned arena with the documented codes
    (LeNet-5's c-generic bundle: ``zoo_c_bundle``'s compile, read only)."""
    import ctypes

    from toolchain.bundle import load_bundle

    mod = load_bundle(zoo_c_bundle("lenet5").path)
    x = np.zeros((1, 1, 28, 28), F)
    out = [np.zeros((1, 10), F), np.zeros((1, 10), F)]
    ins = (ctypes.c_void_p * 1)(x.ctypes.data)
    outs = (ctypes.c_void_p * 2)(*[o.ctypes.data for o in out])
    arena = mod.arena.ctypes.data
    assert mod._fn(ins, outs, arena) == 0
    assert mod._fn(None, outs, arena) == 1
    assert mod._fn(ins, outs, None) == 1
    assert mod._fn(ins, (ctypes.c_void_p * 2)(out[0].ctypes.data, None), arena) == 1
    assert mod._fn(ins, outs, arena + 4) == 2
    strerror = mod._lib.kiln_strerror
    strerror.restype = ctypes.c_char_p
    assert b"aligned" in strerror(2) and b"NULL" in strerror(1)


def test_timing_hooks_see_every_kernel(tmp_path, zoo_c_bundle):
    path = zoo_c_bundle("lenet5").copy(tmp_path / "b").path
    meta = json.loads((path / "metadata.json").read_text())
    hook = path / "hook.c"
    hook.write_text(
        '#include <stdio.h>\n#include "kiln_runtime.h"\n'
        "void kiln_timing_hook(const char *kernel, int index, int phase) {\n"
        '  fprintf(stderr, "hook %d %d %s\\n", index, phase, kernel);\n}\n')
    exe = path / "timed"
    # by hand, as a user's build: every source in src/ (weights_blob.S finds weights.bin
    # relative to the bundle's folder, where the compiler runs)
    srcs = [str(p) for p in sorted((path / "src").glob("*.[cS]"))] + [
        str(path / "runtime" / "kiln_runtime.c"), str(path / "runtime" / "kiln_threads.c"),
        str(path / "main.c"), str(hook)]
    res = subprocess.run(["cc", "-O1", "-std=c99", "-DKILN_ENABLE_TIMING", *STRICT,
                          f"-I{path / 'include'}", f"-I{path / 'runtime'}",
                          f"-I{path / 'src'}", *srcs, "-o", str(exe), "-lm"],
                         capture_output=True, text=True, check=False, cwd=path)
    assert res.returncode == 0, res.stderr
    x = np.zeros((1, 1, 28, 28), F)
    x.tofile(path / "x.bin")
    res = subprocess.run([str(exe), str(path / "x.bin"), str(path / "l.bin"),
                          str(path / "p.bin")], capture_output=True, text=True, check=True)
    lines = [ln.split() for ln in res.stderr.splitlines() if ln.startswith("hook")]
    run = [(k["index"], k["name"]) for k in meta["kernels"] if not k["elided"]]
    assert [(int(i), int(p), n) for _, i, p, n in lines] == [
        (i, p, n) for i, n in run for p in (0, 1)]
    # LeNet-5's Flatten is planned in place: a reshape in place needs no code at all
    flat = [k for k in meta["kernels"] if k["ops"] == ["Flatten"]]
    assert flat and all(k["elided"] and k["in_place"] for k in flat)
    assert flat[0]["name"] not in (path / "src" / "kernels.c").read_text()


def test_make_profile_reports_every_kernel(tmp_path, zoo_c_bundle):
    path = zoo_c_bundle("lenet5").copy(tmp_path / "b").path
    meta = json.loads((path / "metadata.json").read_text())
    make(path, "profile", cflags=STRICT_CFLAGS)
    np.zeros((1, 1, 28, 28), F).tofile(path / "x.bin")
    res = subprocess.run([str(path / "main_profile"), "--repeat", "3", str(path / "x.bin"),
                          str(path / "l.bin"), str(path / "p.bin")],
                         capture_output=True, text=True, check=True)
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("kiln-profile")]
    assert [r[2] for r in rows] == [k["name"] for k in meta["kernels"] if not k["elided"]]
    assert all(r[5] == "3" and float(r[3]) <= float(r[4]) for r in rows)
