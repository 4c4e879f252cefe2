"""CPU targets the default-schedule tests run on: every shipped x86/generic descriptor this
machine executes (AVX-512 only where the CPU has it), plus cross-compile helpers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from toolchain.target import load_target, runs_here

RUNNABLE = [n for n in ("c-generic", "x86_64-avx2", "x86_64-avx512")
            if runs_here(load_target(n))]


def cross_compile_m4(code: str, tmp_path: Path) -> None:
    """Compile ``code`` for Cortex-M4 with the descriptor's flags (skip without the tools)."""
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi "
                    "picolibc-arm-none-eabi)")
    specs = subprocess.run([cc, "-print-file-name=picolibc.specs"], capture_output=True,
                           text=True, check=False).stdout.strip()
    if not specs or specs == "picolibc.specs":
        pytest.skip("picolibc-arm-none-eabi is not installed (kernels include <stdlib.h>)")
    src = tmp_path / "kernel.c"
    src.write_text(code)
    t = load_target("cortex-m4")
    res = subprocess.run([cc, *t.cflags, "--specs=picolibc.specs", "-Wall", "-Werror", "-c",
                          str(src), "-o", str(tmp_path / "kernel.o")], capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stderr
