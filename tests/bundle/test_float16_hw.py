"""The kernels' float16 conversions (``templates/c/float16.c.j2``, placed in ``kernels.c`` by
:func:`toolchain.bundle.emit.f16_definitions`): the hardware paths (x86 F16C, AArch64) give
the bits of the runtime's software conversions for every float16 and every float32 case
(ties, subnormals, overflow, NaNs with their payloads, signalling NaNs), one value and
whole vectors, with and without the feature flag; and the flags decide which path is built
(the instructions are in the assembly, or are not)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.bundle.helpers import STRICT
from tests.bundle.test_float16 import _f32_cases
from tests.tools import require
from toolchain.bundle.emit import f16_definitions
from toolchain.target import host_cpu_flags

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
#: vector widths the kernels use (2: no hardware chunk, one lane at a time)
LANES = (2, 4, 8, 16, 32)
#: the conversion paths the driver writes, in its order
PATHS = ("software", "scalar", *(f"x{n}" for n in LANES))

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *slurp(const char *path, long size) {
  FILE *f = fopen(path, "rb");
  void *p = malloc((size_t)size);
  if (!f || !p || fread(p, 1, (size_t)size, f) != (size_t)size) exit(2);
  fclose(f);
  return p;
}
/* argv: halves file, count, floats file, count (both multiples of 16), output file;
   output: every path's float32 bits of the halves, then every path's halves of the floats */
int main(int argc, char **argv) {
  long nh, nf, i;
  const kiln_f16 *h;
  const float *f;
  uint32_t *o32;
  kiln_f16 *o16;
  FILE *out;
  if (argc != 6) return 2;
  nh = atol(argv[2]);
  nf = atol(argv[4]);
  h = (const kiln_f16 *)slurp(argv[1], nh * 2);
  f = (const float *)slurp(argv[3], nf * 4);
  o32 = (uint32_t *)malloc((size_t)nh * 4u * PATHS);
  o16 = (kiln_f16 *)malloc((size_t)nf * 2u * PATHS);
  if (!o32 || !o16) return 2;
  for (i = 0; i < nh; ++i) {
    float a = kiln_f16_to_f32(h[i]), b = kiln_h2f(h[i]);
    memcpy(&o32[i], &a, 4);
    memcpy(&o32[nh + i], &b, 4);
  }
  for (i = 0; i < nf; ++i) {
    o16[i] = kiln_f32_to_f16(f[i]);
    o16[nf + i] = kiln_f2h(f[i]);
  }
{% for n in lanes %}
  for (i = 0; i < nh; i += {{ n }}) {
    float16x{{ n }} a;
    float32x{{ n }} b;
    memcpy(&a, h + i, sizeof a);
    kiln_h2f_x{{ n }}(&b, &a);
    memcpy(&o32[{{ loop.index + 1 }} * nh + i], &b, sizeof b);
  }
  for (i = 0; i < nf; i += {{ n }}) {
    float32x{{ n }} a;
    float16x{{ n }} b;
    memcpy(&a, f + i, sizeof a);
    kiln_f2h_x{{ n }}(&b, &a);
    memcpy(&o16[{{ loop.index + 1 }} * nf + i], &b, sizeof b);
  }
{% endfor %}
  out = fopen(argv[5], "wb");
  if (!out || fwrite(o32, 4, (size_t)(nh * PATHS), out) != (size_t)(nh * PATHS) ||
      fwrite(o16, 2, (size_t)(nf * PATHS), out) != (size_t)(nf * PATHS)) return 2;
  return fclose(out) != 0;
}
"""


def driver_source() -> str:
    """The test program: the runtime header, the vector types as ``kernels.c`` declares
    them, every conversion definition a kernel can get, and a main over whole arrays."""
    import jinja2

    used = {(d, n) for d in ("h2f", "f2h") for n in (1, *LANES)}
    types = "\n".join(f"typedef {e} {t}x{n} __attribute__((vector_size({b * n})));"
                      for n in LANES for t, e, b in (("float16", "kiln_f16", 2),
                                                     ("float32", "float", 4)))
    main = jinja2.Template(_MAIN, trim_blocks=True, lstrip_blocks=True).render(lanes=LANES)
    return "\n\n".join(['#include "kiln_runtime.h"', f"#define PATHS {len(PATHS)}", types,
                        *(d.text for d in f16_definitions(used)), main])


def _cases() -> tuple[np.ndarray, np.ndarray]:
    """Every float16 pattern; every float16 widened (numpy's bits: signalling NaNs stay
    signalling), the float32 cases of ``test_float16`` and signalling and quiet NaNs whose
    payloads do and do not reach float16, padded to 16."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    nans = np.array([0x7f800001, 0x7f801fff, 0x7f802000, 0x7fa00000, 0x7fbfffff, 0x7fc00000,
                     0x7fc00001, 0x7fffe000, 0x7fffffff, 0x7f804000, 0x7fbfe000], np.uint32)
    wide = h.view(np.float16).astype(np.float32).view(np.uint32)
    f = np.concatenate([wide, _f32_cases(), nans, nans | 0x80000000])
    f = np.concatenate([f, np.zeros(-len(f) % 16, np.uint32)])
    return h, f


def _run(tmp: Path, exe: list[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    h, f = _cases()
    h.tofile(tmp / "h.bin")
    f.tofile(tmp / "f.bin")
    subprocess.run([*exe, str(tmp / "h.bin"), str(len(h)), str(tmp / "f.bin"), str(len(f)),
                    str(tmp / "out.bin")], check=True, timeout=120)
    raw = (tmp / "out.bin").read_bytes()
    o32 = np.frombuffer(raw, np.uint32, len(h) * len(PATHS)).reshape(len(PATHS), -1)
    o16 = np.frombuffer(raw, np.uint16, offset=o32.nbytes).reshape(len(PATHS), -1)
    return dict(zip(PATHS, o32, strict=True)), dict(zip(PATHS, o16, strict=True))


def _check(widen: dict[str, np.ndarray], narrow: dict[str, np.ndarray]) -> None:
    h, f = _cases()
    # the software path is numpy's conversions, bit for bit (NaN payloads, signalling NaNs)
    np.testing.assert_array_equal(widen["software"], h.view(np.float16).astype(np.float32)
                                  .view(np.uint32))
    with np.errstate(over="ignore", invalid="ignore"):
        want16 = f.view(np.float32).astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(narrow["software"], want16)
    for path in PATHS[1:]:  # every other path: the software path's bits
        np.testing.assert_array_equal(widen[path], widen["software"], err_msg=path)
        np.testing.assert_array_equal(narrow[path], narrow["software"], err_msg=path)
        # a float16 copied through float32 keeps its bits, signalling NaNs included
        np.testing.assert_array_equal(narrow[path][:len(h)], h, err_msg=path)


def _build(tmp: Path, cc: str, flags: list[str], static: bool = False) -> tuple[Path, str]:
    src = tmp / "drv.c"
    src.write_text(driver_source())
    common = [cc, "-std=c99", "-O2", *STRICT, f"-I{RUNTIME}", *flags]
    asm = subprocess.run([*common, "-S", "-o", "-", str(src)], check=True,
                         capture_output=True, text=True).stdout
    exe = tmp / "drv"
    subprocess.run([*common, *(["-static"] if static else []), str(src), "-o", str(exe)],
                   check=True)
    return exe, asm


X86 = {"software": ["-march=native", "-DKILN_F16_SOFTWARE"],
       "no-f16c": ["-march=x86-64-v3", "-mno-f16c"],
       "f16c": ["-march=x86-64-v3"],
       "avx512": ["-march=x86-64-v4"]}


@pytest.mark.parametrize("build", list(X86))
def test_x86_paths_match_the_software_path(tmp_path, build):
    need = {"f16c": {"f16c", "avx2"}, "avx512": {"f16c", "avx512f"}}.get(build, set())
    if not need <= host_cpu_flags():
        pytest.skip(f"this CPU lacks {sorted(need - host_cpu_flags())}")
    exe, asm = _build(tmp_path, "cc", X86[build])
    hardware = build in ("f16c", "avx512")
    for insn in ("vcvtph2ps", "vcvtps2ph"):
        assert (insn in asm) == hardware, (build, insn)
    if hardware:  # whole vectors: the 256-bit forms, rounding by the immediate (0)
        assert re.search(r"vcvtph2ps\s+%xmm\d+, %ymm", asm)
        assert re.search(r"vcvtps2ph\s+\$0, %ymm", asm)
    _check(*_run(tmp_path, [str(exe)]))


def test_aarch64_path_matches_the_software_path(tmp_path):
    """fcvt / fcvtl / fcvtn (AArch64 quiets a signalling NaN as F16C does), run by QEMU."""
    require("aarch64-linux-gnu-gcc", "qemu-aarch64")
    exe, asm = _build(tmp_path, "aarch64-linux-gnu-gcc", ["-mcpu=cortex-a72"], static=True)
    for insn in ("fcvtl\t", "fcvtn\t", "fcvt\ts", "fcvt\th"):
        assert insn in asm, insn
    _check(*_run(tmp_path, ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", str(exe)]))


#: external functions over the conversions (static inline ones alone emit no code)
_ENTRIES = """
float h2f(kiln_f16 h);
float h2f(kiln_f16 h) { return kiln_h2f(h); }
kiln_f16 f2h(float f);
kiln_f16 f2h(float f) { return kiln_f2h(f); }
void h2f4(float32x4 *o, const float16x4 *i);
void h2f4(float32x4 *o, const float16x4 *i) { kiln_h2f_x4(o, i); }
"""


@pytest.mark.parametrize("cpu", ["cortex-m55", "cortex-m4"])
def test_cortex_m_uses_hardware_where_the_fpu_converts(tmp_path, cpu):
    """Cortex-M55 (IEEE __fp16, FP16 conversions: ``__ARM_FP & 2``) converts with vcvtb;
    Cortex-M4's FPv4-SP (``__ARM_FP`` 4) keeps the software path: the C builds strict
    either way (not run here: no Cortex-M55 board under QEMU in the suite)."""
    require("arm-none-eabi-gcc")
    fpu = ["-mfpu=fpv4-sp-d16"] if cpu == "cortex-m4" else []
    src = tmp_path / "conv.c"
    src.write_text(driver_source().split("#include <stdio.h>")[0] + _ENTRIES)
    asm = subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-O2", *STRICT, f"-I{RUNTIME}",
                          f"-mcpu={cpu}", "-mthumb", "-mfloat-abi=hard", *fpu, "-S", "-o", "-",
                          str(src)],
                         check=True, capture_output=True, text=True).stdout
    assert ("vcvtb.f32.f16" in asm) == (cpu == "cortex-m55")


def _copy_net() -> onnx.ModelProto:
    """Transpose (a copy through float32), Add and Sigmoid of a [256, 256] float16 input."""
    s = [256, 256]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Add", ["x", "x"], ["a"]),
             helper.make_node("Sigmoid", ["x"], ["g"])]
    g = helper.make_graph(nodes, "copy16",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, s)],
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT16, s)
                           for k in ("t", "a", "g")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx2"])
def test_bundle_built_both_ways_is_bit_identical(tmp_path, target):
    """A float16 bundle's library as Kiln builds it (hardware conversions where this CPU
    has F16C) and with -DKILN_F16_SOFTWARE: the same bits for all 65,536 input patterns,
    and the Transpose copies every pattern exactly (signalling NaNs included)."""
    from toolchain.bundle import compile_model
    from toolchain.bundle.host import BundleModule
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target(target)):
        pytest.skip(f"this host cannot run {target} code")
    path = compile_model(_copy_net(), target, tmp_path / "b")
    kernels = (path / "src" / "kernels.c").read_text()
    assert "kiln_h2f_x" in kernels and "kiln_f2h_x" in kernels  # whole vectors
    x = {"x": np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
         .reshape(256, 256)}
    hw, sw = (BundleModule(path, extra_flags=f)(x) for f in ((), ("-DKILN_F16_SOFTWARE",)))
    for k in hw:
        np.testing.assert_array_equal(hw[k].view(np.uint16), sw[k].view(np.uint16), err_msg=k)
    np.testing.assert_array_equal(hw["t"].view(np.uint16), x["x"].T.view(np.uint16))
