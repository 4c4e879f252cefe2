"""A bundle taken into a firmware team's own build (docs/bundle.md, "Into your own build"):
the generated C under strict warning flags at -O2 and -Os, C99 and C11, on the host and
for Cortex-M4 with its DSP kernels; no allocation or stdio in the library part; two
models' bundles in one C++ program, each giving what it gives alone."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.tools import needs
from toolchain.bundle import compile_model, load_bundle

#: the warning flags a firmware team builds with, as docs/bundle.md lists them
FIRMWARE_WARNINGS = ("-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Wsign-conversion",
                     "-Wshadow", "-Wcast-align", "-Wstrict-prototypes", "-Wundef", "-Werror",
                     "-Wcast-qual", "-Wwrite-strings", "-Wpointer-arith", "-Wredundant-decls",
                     "-Wdouble-promotion", "-Wmissing-prototypes",
                     "-fno-common", "-ffunction-sections", "-fdata-sections")
#: (standard, optimisation) pairs: GCC's -Wmaybe-uninitialized runs at -O1 and above but
#: finds different things at -O2 and -Os (the bundles' own -O3 found nothing)
LEVELS = (("-std=c99", "-O2"), ("-std=c11", "-Os"))
CORTEX_M4 = ("--specs=picolibc.specs", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
             "-mfpu=fpv4-sp-d16")
#: one worker compiles each of the module's two bundles once
pytestmark = pytest.mark.xdist_group("own-build")
#: what the library part of a bundle must not call on a board
FORBIDDEN = {"malloc", "free", "calloc", "realloc", "printf", "puts", "putchar", "fopen",
             "abort", "exit"}


def _kws_int8(tmp_path_factory: pytest.TempPathFactory, target: str) -> Path:
    """The int8 DS-CNN with int8 I/O (the MLPerf Tiny KWS model: its global average
    pool's one-element accumulator, and on cortex-m4 the DSP helpers) for ``target``."""
    from tests.boards.conftest import anchor

    return compile_model(anchor("ds_cnn"), target, tmp_path_factory.mktemp(target) / "kws",
                         name="kws")


@pytest.fixture(scope="module")
def kws_host(tmp_path_factory):
    return _kws_int8(tmp_path_factory, "c-generic")


@pytest.fixture(scope="module")
def kws_m4(tmp_path_factory):
    return _kws_int8(tmp_path_factory, "cortex-m4")


def _compile_all(cc: list[str], bundle: Path, out: Path, flags: tuple[str, ...],
                 with_main: bool) -> list[Path]:
    """Every C file of ``bundle`` (and its weights) compiled by ``cc`` with ``flags``,
    as an outside Makefile would: the include folders and the weight file's path given
    on the command line. Returns the objects; fails with the compiler's words."""
    sources = [*sorted((bundle / "src").glob("*.c")), bundle / "runtime" / "kiln_runtime.c",
               bundle / "runtime" / "kiln_threads.c", bundle / "src" / "weights_blob.S"]
    if with_main:
        sources.append(bundle / "main.c")
    objs = []
    for src in sources:
        obj = out / f"{bundle.name}-{src.stem}.o"
        cmd = [*cc, *flags, f"-I{bundle / 'include'}", f"-I{bundle / 'runtime'}",
               f"-I{bundle / 'src'}", f"-DKILN_WEIGHTS_FILE=\"{bundle / 'src' / 'weights.bin'}\"",
               "-c", str(src), "-o", str(obj)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"{' '.join(flags)}: {src.name}\n{res.stderr}"
        objs.append(obj)
    return objs


@needs("gcc")
@pytest.mark.parametrize("std,opt", LEVELS)
def test_host_bundle_builds_under_firmware_warnings(std, opt, kws_host, tmp_path):
    _compile_all(["gcc"], kws_host, tmp_path, (std, opt, *FIRMWARE_WARNINGS), with_main=True)


@needs("arm-none-eabi-gcc", "picolibc")
@pytest.mark.parametrize("std,opt", LEVELS)
def test_cortex_m4_bundle_builds_under_firmware_warnings(std, opt, kws_m4, tmp_path):
    """The DSP helpers (arm_acle.h's __sxtb16, __smlad, __ssat) included: their operands
    once warned under -Wsign-conversion. The library part calls nothing of the C
    library's allocation or stdio (nm), and every function's stack frame is of fixed
    size (-fstack-usage: no VLA, no alloca) and under 2 KiB (docs/bundle.md: scratch
    above 1 KiB goes to the arena)."""
    bundle = kws_m4
    assert "__smlad" in (bundle / "src" / "kernels.c").read_text()
    objs = _compile_all(["arm-none-eabi-gcc", *CORTEX_M4], bundle, tmp_path,
                        (std, opt, "-fstack-usage", *FIRMWARE_WARNINGS), with_main=False)
    res = subprocess.run(["arm-none-eabi-nm", "-u", *map(str, objs)], capture_output=True,
                         text=True, check=True)
    undefined = set(re.findall(r"\bU\s+(\S+)", res.stdout))
    assert not undefined & FORBIDDEN, sorted(undefined)
    frames = [line.split("\t") for su in tmp_path.glob("*.su")
              for line in su.read_text().splitlines()]
    assert any(f[0].endswith("kws_run") for f in frames)
    assert all(f[2] == "static" and int(f[1]) < 2048 for f in frames), frames


APP = r"""
#include <stdio.h>
#include "kws.h"
#include "tiny.h"

static uint8_t kws_arena[KWS_ARENA_BYTES] KILN_ALIGNED(KWS_ARENA_ALIGN) KILN_ARENA_PLACE;
static uint8_t tiny_arena[TINY_ARENA_BYTES] KILN_ALIGNED(TINY_ARENA_ALIGN) KILN_ARENA_PLACE;

int main() {
  static int8_t x[KWS_INPUT_INPUT_1_SIZE];
  static int8_t q[KWS_OUTPUT_DENSE_BIASADD_0_SIZE];
  static float p[KWS_OUTPUT_DENSE_SOFTMAX_0_SIZE];
  static float a[TINY_INPUT_A_SIZE], y[TINY_OUTPUT_Y_SIZE];
  for (unsigned i = 0; i < KWS_INPUT_INPUT_1_SIZE; ++i)
    x[i] = static_cast<int8_t>(i * 7u % 251u);
  for (unsigned i = 0; i < TINY_INPUT_A_SIZE; ++i) a[i] = static_cast<float>(i) * 0.25f - 1.0f;
  kws_inputs ki = { x };
  kws_outputs ko = { q, p };
  tiny_inputs ti = { a };
  tiny_outputs to = { y };
  if (kws_run(&ki, &ko, kws_arena) != KILN_OK || tiny_run(&ti, &to, tiny_arena) != KILN_OK)
    return 3;
  if (kws_run(&ki, nullptr, kws_arena) != KILN_ERR_NULL_ARGUMENT) return 4;
  if (tiny_run(&ti, &to, tiny_arena + 4) != KILN_ERR_ARENA_ALIGNMENT) return 5;
  for (unsigned i = 0; i < KWS_OUTPUT_DENSE_BIASADD_0_SIZE; ++i) printf("%d\n", q[i]);
  for (unsigned i = 0; i < KWS_OUTPUT_DENSE_SOFTMAX_0_SIZE; ++i)
    printf("%a\n", static_cast<double>(p[i]));
  for (unsigned i = 0; i < TINY_OUTPUT_Y_SIZE; ++i) printf("%a\n", static_cast<double>(y[i]));
  return 0;
}
"""


@needs("gcc", "c++")
def test_two_bundles_in_one_cplusplus_program(kws_host, tmp_path):
    """Two models' bundles linked into one program, each header included from C++
    (g++ -Wall -Wextra -Wpedantic -Werror): no symbol or macro clashes once the runtime,
    the same in every bundle, is compiled once; each model's outputs equal what its
    bundle gives alone (``load_bundle``: integers exactly, floats to rounding), and bad
    arguments get the documented codes."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["a"], ["s"]), helper.make_node("Softmax", ["s"], ["y"])],
        "tiny", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    tiny = compile_model(model, "c-generic", tmp_path / "tiny", name="tiny")
    flags = ("-std=c99", "-O2", *FIRMWARE_WARNINGS)
    objs = _compile_all(["gcc"], kws_host, tmp_path, flags, with_main=False)
    objs += [o for o in _compile_all(["gcc"], tiny, tmp_path, flags, with_main=False)
             if "kiln_" not in o.name]  # the runtime once: the first bundle's
    app = tmp_path / "app.cpp"
    app.write_text(APP)
    exe = tmp_path / "app"
    res = subprocess.run(["c++", "-std=c++11", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                          "-Wold-style-cast", f"-I{kws_host / 'include'}",
                          f"-I{kws_host / 'runtime'}", f"-I{tiny / 'include'}", str(app),
                          *map(str, objs), "-lm", "-o", str(exe)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.split()
    x = (np.arange(490) * 7 % 251).astype(np.uint8).view(np.int8).reshape(1, 49, 10, 1)
    alone = load_bundle(kws_host)({"input_1": x})
    meta = json.loads((kws_host / "metadata.json").read_text())
    q, p = (alone[t["name"]].ravel() for t in meta["outputs"])
    a = (np.arange(16, dtype=np.float32) * 0.25 - 1.0).reshape(2, 8)
    y = load_bundle(tiny)({"a": a})["y"].ravel()
    assert [int(v) for v in lines[:12]] == q.tolist()
    # floats within rounding: this build is -O2, load_bundle's -O3 -ffp-contract=fast
    np.testing.assert_allclose([float.fromhex(v) for v in lines[12:24]], p, rtol=1e-6)
    np.testing.assert_allclose([float.fromhex(v) for v in lines[24:]], y, rtol=1e-6)


@needs("gcc")
def test_header_usage_of_a_model_without_arena_compiles_pedantic(tmp_path):
    """A model whose ``<MODEL>_ARENA_BYTES`` is 0 (one fused element-wise kernel): the
    header's usage comment, followed as written, is ISO C (it showed
    ``static uint8_t arena[NOARENA_ARENA_BYTES]``, a zero-length array that -Wpedantic
    refuses) and runs."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["s", "a"], ["y"])],
        "noarena", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    bundle = compile_model(model, "c-generic", tmp_path / "b", name="noarena")
    header = (bundle / "include" / "noarena.h").read_text()
    assert "#define NOARENA_ARENA_BYTES 0u" in header
    usage = [line[5:].split(";")[0] + ";" for line in header.split("*/")[0].splitlines()
             if line.startswith(" *   ")]  # the statements, without their notes
    usage = [u.replace("{ ... }", "{ a }" if "inputs" in u else "{ y }") for u in usage]
    main = tmp_path / "use.c"
    main.write_text("#include \"noarena.h\"\nint main(void) {\n"
                    "  static const float a[4] = { 0.f, 1.f, -1.f, 2.f };\n"
                    "  static float y[4];\n  " + "\n  ".join(usage) +
                    "\n  return rc != KILN_OK || y[1] < 0.7f || y[1] > 0.75f;\n}\n")
    objs = _compile_all(["gcc"], bundle, tmp_path, ("-std=c99", "-O2", *FIRMWARE_WARNINGS),
                        with_main=False)
    exe = tmp_path / "use"
    res = subprocess.run(["gcc", "-std=c99", *FIRMWARE_WARNINGS, f"-I{bundle / 'include'}",
                          f"-I{bundle / 'runtime'}", str(main), *map(str, objs), "-lm",
                          "-o", str(exe)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, main.read_text() + res.stderr
    assert subprocess.run([str(exe)], check=False).returncode == 0


@needs("gcc")
def test_call_sequence_passes_const_weights_and_inputs_without_dropping_const(tmp_path):
    """MISRA C:2012 rule 11.8, ``-Wcast-qual``: the weights (``const uint8_t`` blob) and
    the inputs (``const`` in ``<m>_inputs``) reach the kernels without a cast that drops
    const, since each kernel takes what it only reads as ``const T *restrict`` and what
    it writes (its output) plain. ``<m>.c`` cast both to ``void *`` before session 26 (7
    warnings in examples/digits)."""
    from onnx import helper

    from tests.bundle.helpers import make_model

    rng = np.random.default_rng(0)
    m = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
                    helper.make_node("Relu", ["g"], ["y"])],
                   {"x": (np.float32, [2, 16])}, {"y": (np.float32, [2, 8])},
                   {"w": rng.standard_normal((8, 16)).astype(np.float32),
                    "b": rng.standard_normal(8).astype(np.float32)})
    bundle = compile_model(m, "c-generic", tmp_path / "b", name="cq")
    protos = re.findall(r"^int32_t \w+\((.*)\);$", (bundle / "src" / "kernels.h").read_text(),
                        re.MULTILINE)
    assert len(protos) == 1, protos
    params = protos[0].split(", ")
    assert [p.startswith("const ") for p in params] == [True, True, True, False], params
    res = subprocess.run(["gcc", "-std=c99", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                          "-Wcast-qual", "-Wwrite-strings", f"-I{bundle / 'include'}",
                          f"-I{bundle / 'runtime'}", str(bundle / "src" / "cq.c"),
                          str(bundle / "src" / "kernels.c")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
