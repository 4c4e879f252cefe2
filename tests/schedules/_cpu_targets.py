"""CPU targets the default-schedule tests run on: every shipped x86/generic descriptor this
machine executes (AVX-512 only where the CPU has it), plus cross-compile helpers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.tools import require
from toolchain.target import load_target, runs_here

RUNNABLE = [n for n in ("c-generic", "x86_64-avx2", "x86_64-avx512")
            if runs_here(load_target(n))]
#: the backends a kernel test builds through (``compile_op(..., backend=)``): the C
#: source path and LLVM (docs/llvm.md)
HOST_BACKENDS = ["c", "llvm"]


def cross_compile_m4(code: str, tmp_path: Path) -> None:
    """Compile ``code`` for Cortex-M4 with the descriptor's flags (skip without the tools)."""
    require("arm-none-eabi-gcc", "picolibc")
    cc = shutil.which("arm-none-eabi-gcc")
    src = tmp_path / "kernel.c"
    src.write_text(code)
    t = load_target("cortex-m4")
    res = subprocess.run([cc, *t.cflags, "--specs=picolibc.specs", "-Wall", "-Werror", "-c",
                          str(src), "-o", str(tmp_path / "kernel.o")], capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stderr


def run_aliased(node, x, target: str = "cortex-m4"):
    """Schedule ``node`` for ``target``, build its kernel for the host without
    ``restrict`` (as a bundle renders an in-place kernel) and run it with the output
    written over the input buffer: ``(output, schedule info)``."""
    from toolchain.codegen import get_renderer
    from toolchain.runtime.build import BASE_FLAGS, compile_shared
    from toolchain.runtime.module import Module
    from toolchain.schedules.registry import schedule_for
    from toolchain.tir.transform.pipeline import lower

    s = schedule_for(node, target)
    r = get_renderer("c", openmp=False)
    r.restrict = ""
    src = r.render(lower(s.schedule))
    assert "restrict" not in src.code.split("{", 1)[0]
    lib, info = compile_shared(src.code, [*BASE_FLAGS, "-Wall", "-Wextra", "-Werror"],
                               stem=src.entry)
    mod = Module(lib, src.entry, s.schedule.mod, src.code, src.extra_args, info)
    buf = x.copy()
    mod(buf, *[v.data for v in s.input_values[1:]], buf)
    return buf, _info(s)


def run_overlapped(node, x, lead: int, target: str = "cortex-m4", poison: int = 0x5A):
    """Like :func:`run_aliased`, with the output starting ``lead`` bytes before the input in
    one buffer (an overlap pair, ``OpSchedule.overlap``), the rest of it poisoned:
    ``(output, schedule)``."""
    import numpy as np

    from toolchain.codegen import get_renderer
    from toolchain.runtime.build import BASE_FLAGS, compile_shared
    from toolchain.runtime.module import Module
    from toolchain.schedules.registry import schedule_for
    from toolchain.tir.transform.pipeline import lower

    s = schedule_for(node, target)
    r = get_renderer("c", openmp=False)
    r.restrict = ""
    src = r.render(lower(s.schedule))
    lib, info = compile_shared(src.code, [*BASE_FLAGS, "-Wall", "-Wextra", "-Werror"],
                               stem=src.entry)
    mod = Module(lib, src.entry, s.schedule.mod, src.code, src.extra_args, info)
    y = node.outputs[0]
    buf = np.full(max(y.nbytes, lead + x.nbytes), poison, np.uint8)
    xin = buf[lead:lead + x.nbytes].view(x.dtype).reshape(x.shape)
    xin[...] = x
    out = buf[:y.nbytes].view(y.dtype).reshape(y.shape)
    mod(xin, *[v.data for v in s.input_values[1:]], out)
    return out.copy(), s


def schedule_info(s: Any) -> dict[str, Any]:
    """An OpSchedule's info with its typed ``in_place`` contract added (when it has one)."""
    return {**s.info, **({"in_place": s.in_place} if s.in_place is not None else {})}


_info = schedule_info
