"""The VTA-like accelerator's software side: ISA, builder, checker, functional simulator.

The instruction set is defined in ``hw/ISA.md``; sizes come from ``targets/vta.yaml``.
Stable API for the RTL runner, the compiler backend and the benchmarks:

- :func:`load_config` / :class:`VTAConfig` — target sizes (``toolchain.vta.config``);
- :func:`encode` / :func:`decode`, instruction classes :class:`Load`, :class:`Store`,
  :class:`Gemm`, :class:`Alu`, :class:`Finish`, micro-op :class:`Uop` (``toolchain.vta.isa``);
- :class:`ProgramBuilder` and :class:`Program` (instructions + DRAM image + regions, the
  ``prog.bin`` container) (``builder``, ``program``);
- :func:`disassemble` (``disasm``), :func:`check_program` (``checker``);
- :func:`run_fsim` — bit-exact functional simulator, plain or token-honouring (``fsim``);
- :func:`gemm_workload`, :func:`resnet18_workload`, :data:`RESNET18_LAYERS` — tiled int8 GEMM
  programs, serial and with two virtual threads (``workloads``);
- :func:`compile_dense`, :func:`compile_conv2d` — the compiler's path from a layer to a
  checked program (``compile``; imported on first use, it pulls in the TIR stack).

The RTL runner (``toolchain.vta.rtl.run_rtl``) is provided separately and returns
``(dram_out, counters)`` like ``run_fsim`` returns ``FsimResult(dram, counters)``.

Example::

    >>> from toolchain.vta import gemm_workload, run_fsim
    >>> wl = gemm_workload(16, 32, 32, seed=0)
    >>> out = wl.read_output(run_fsim(wl.vthread, tokens=True).dram)
    >>> bool((out == wl.expected).all())
    True
"""

from __future__ import annotations

from toolchain.vta.builder import ProgramBuilder, UopKernel
from toolchain.vta.checker import CheckReport, check_program
from toolchain.vta.config import VTAConfig, load_config
from toolchain.vta.disasm import disassemble
from toolchain.vta.fsim import FsimResult, run_fsim
from toolchain.vta.isa import (
    Alu,
    Finish,
    Gemm,
    Load,
    Store,
    Uop,
    decode,
    decode_program,
    encode,
    encode_program,
)
from toolchain.vta.program import Program, Region
from toolchain.vta.workloads import (
    RESNET18_LAYERS,
    Workload,
    gemm_workload,
    resnet18_workload,
)

_LAZY = {"compile_dense": "toolchain.vta.compile", "compile_conv2d": "toolchain.vta.compile"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'toolchain.vta' has no attribute {name!r}")


__all__ = [
    "Alu", "CheckReport", "Finish", "FsimResult", "Gemm", "Load", "Program", "ProgramBuilder",
    "RESNET18_LAYERS", "Region", "Store", "Uop", "UopKernel", "VTAConfig", "Workload",
    "check_program", "compile_conv2d", "compile_dense", "decode", "decode_program",
    "disassemble", "encode", "encode_program",
    "gemm_workload", "load_config", "resnet18_workload", "run_fsim",
]
