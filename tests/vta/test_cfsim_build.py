"""The accelerator runtime's C: warning-free under strict flags, freestanding (builds for a
Cortex-M4 and needs nothing from libc but memset/memcpy/memmove), its defaults equal to
targets/vta.yaml, its error codes equal to toolchain.vta.cfsim's, and usable from a plain C
program with static memory only."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from toolchain.vta.cfsim import ERROR_CODES, RUNTIME
from toolchain.vta.compile import Tiles, compile_dense
from toolchain.vta.config import load_config
from toolchain.vta.fsim import run_fsim
from toolchain.vta.isa import (
    ALU_SHR,
    MEM_INP,
    MEM_WGT,
    Alu,
    Finish,
    Gemm,
    Load,
    Store,
    encode_program,
)
from toolchain.vta.randprog import random_program

C_FILES = ("kiln_vta.c", "kiln_vta_fsim.c")
STRICT = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wconversion",
          "-Wsign-conversion", "-Wshadow", "-Wstrict-prototypes", "-Wcast-qual")
MAIN = Path(__file__).with_name("c") / "fsim_main.c"


def _cc(*args: str, cc: str = "gcc") -> subprocess.CompletedProcess:
    return subprocess.run([cc, *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", C_FILES)
def test_runtime_compiles_without_warnings(name, tmp_path):
    res = _cc(*STRICT, f"-I{RUNTIME}", "-c", str(RUNTIME / name), "-o", str(tmp_path / "x.o"))
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None,
                    reason="arm-none-eabi-gcc is not installed")
def test_runtime_is_freestanding_for_cortex_m4(tmp_path):
    """Only string.h from the C library: a header that declares just memset, memcpy and
    memmove stands in for it, and the objects may need no other outside symbol."""
    (tmp_path / "string.h").write_text(
        "#include <stddef.h>\nvoid *memset(void *, int, size_t);\n"
        "void *memcpy(void *, const void *, size_t);\n"
        "void *memmove(void *, const void *, size_t);\n")
    objs = []
    for name in C_FILES:
        obj = tmp_path / f"{name}.o"
        res = _cc("-mcpu=cortex-m4", "-mthumb", "-ffreestanding", *STRICT, f"-I{tmp_path}",
                  f"-I{RUNTIME}", "-c", str(RUNTIME / name), "-o", str(obj),
                  cc="arm-none-eabi-gcc")
        assert res.returncode == 0, res.stderr
        objs.append(str(obj))
    nm = subprocess.run(["arm-none-eabi-nm", "-u", *objs], capture_output=True, text=True,
                        check=True).stdout
    undefined = {line.split()[-1] for line in nm.splitlines() if line.strip().startswith("U")}
    outside = {s for s in undefined if not s.startswith("kiln_vta_")}
    assert outside <= {"memset", "memcpy", "memmove"}, outside


def _defines(text: str, prefix: str) -> dict[str, int]:
    return {m[1]: int(m[2], 0) for m in re.finditer(
        rf"#define ({prefix}\w*) (0x[0-9A-Fa-f]+|\d+)u?\b", text)}


def test_compile_time_defaults_are_targets_vta_yaml():
    d = _defines((RUNTIME / "kiln_vta.h").read_text(), "KILN_VTA_")
    cfg = load_config()
    assert (d["KILN_VTA_BATCH"], d["KILN_VTA_BLOCK_IN"], d["KILN_VTA_BLOCK_OUT"]) == \
        (cfg.batch, cfg.block_in, cfg.block_out)
    assert (d["KILN_VTA_INP_DEPTH"], d["KILN_VTA_WGT_DEPTH"], d["KILN_VTA_ACC_DEPTH"],
            d["KILN_VTA_UOP_DEPTH"]) == (cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth,
                                         cfg.uop_depth)
    assert (d["KILN_VTA_CMD_QUEUE_DEPTH"], d["KILN_VTA_TOKEN_QUEUE_DEPTH"]) == \
        (cfg.cmd_queue_depth, cfg.token_queue_depth)
    assert d["KILN_VTA_ALU_OPS"] == 0x1F and len(cfg.alu_ops) == 5


def test_error_codes_agree_with_python():
    d = _defines((RUNTIME / "kiln_vta.h").read_text(), "KILN_VTA_(?:OK|ERR_)")
    codes = {v: k for k, v in d.items() if k != "KILN_VTA_ERR_COUNT"}
    assert codes == ERROR_CODES
    assert d["KILN_VTA_ERR_COUNT"] == len(ERROR_CODES)


def _build_main(tmp_path: Path, *flags: str) -> Path:
    exe = tmp_path / "fsim_main"
    res = _cc(*STRICT[1:], "-std=gnu99", *flags, f"-I{RUNTIME}", str(MAIN),
              *(str(RUNTIME / n) for n in C_FILES), "-o", str(exe))
    if res.returncode and flags and "sanitize" in res.stderr + res.stdout:
        pytest.skip(f"no sanitizer runtime here: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    return exe


def _run_main(exe: Path, tmp_path: Path, image: np.ndarray,
              insns: bytes) -> tuple[subprocess.CompletedProcess, np.ndarray]:
    (tmp_path / "image.bin").write_bytes(np.asarray(image, np.uint8).tobytes())
    (tmp_path / "insns.bin").write_bytes(insns)
    out = tmp_path / "out.bin"
    out.unlink(missing_ok=True)
    run = subprocess.run([str(exe), str(tmp_path / "image.bin"), str(tmp_path / "insns.bin"),
                          str(out)], capture_output=True, text=True, check=False, timeout=120)
    return run, (np.fromfile(out, np.uint8) if out.exists() else np.zeros(0, np.uint8))


def test_a_static_c_program_runs_a_compiled_layer(tmp_path):
    exe = _build_main(tmp_path)
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (64, 48), dtype=np.int8)
    x = rng.integers(-128, 128, (10, 64), dtype=np.int8)
    layer = compile_dense(w, 10, shift=8, tiles=Tiles(5, 3, 2), layer="fc")
    image = layer.image(x)
    run, got = _run_main(exe, tmp_path, image, layer.program.insn_bytes)
    assert run.returncode == 0, run.stdout + run.stderr
    py = run_fsim(layer.program, image, tokens=True)
    np.testing.assert_array_equal(got, py.dram)
    counters = {k: int(v) for k, v in (line.split() for line in run.stdout.splitlines())}
    assert {k: v for k, v in counters.items() if v} == \
        {k: v for k, v in py.counters.items() if v}


def test_no_undefined_behaviour_or_bad_access_under_sanitizers(tmp_path):
    """ASan + UBSan over random programs and over programs with huge, out-of-range fields."""
    exe = _build_main(tmp_path, "-O1", "-fsanitize=address,undefined",
                      "-fno-sanitize-recover=all")
    for seed in range(8):
        prog = random_program(seed)
        run, got = _run_main(exe, tmp_path, prog.dram, prog.insn_bytes)
        assert run.returncode == 0, run.stdout + run.stderr
        np.testing.assert_array_equal(got, run_fsim(prog).dram)
    big = dict(y_size=65535, x_size=65535, x_stride=65535)
    bad = [
        [Load(memory_type=MEM_INP, sram_base=65535, **big, y_pad_top=15, x_pad_right=15)],
        [Load(memory_type=MEM_WGT, dram_base=2**32 - 1, y_size=1, x_size=1)],
        [Store(dram_base=2**32 - 1, **big)],
        [Gemm(uop_end=8192, iter_out=16383, iter_in=16383, dst_factor_out=2047)],
        [Alu(alu_op=ALU_SHR, uop_end=1, iter_out=16383, src_factor_out=2047)],
    ]
    for insns in bad:
        run, _ = _run_main(exe, tmp_path, np.zeros(64, np.uint8),
                           encode_program([*insns, Finish()]))
        assert run.returncode == 2 and run.stdout.startswith("error "), run.stderr
