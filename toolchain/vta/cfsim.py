"""The C functional simulator (``runtime_c/kiln_vta_fsim.c``) from Python, through ctypes.

:func:`run_cfsim` has the signature and result of :func:`toolchain.vta.fsim.run_fsim` and
runs the program through the C driver (``runtime_c/kiln_vta.c``) on the C simulator — the
code a bundle links — so tests can hold the two simulators to bit-exact agreement.  The C
sources are compiled once into a shared library cached by content hash
(:func:`toolchain.runtime.build.compile_shared`, ``-Wall -Wextra -Werror``).

Differences from ``run_fsim``: counters that are zero are left out (the Python simulator
keeps some zero counters, depending on which instructions ran); with a ``seed`` the engines'
turn order comes from the C simulator's own generator, so ``order`` differs from Python's
for the same seed (without a seed both take turns load, compute, store and agree).  Errors
raise :class:`CFsimError`, a :class:`~toolchain.errors.SimulationError` that also carries
the C error code (``code``, ``code_name``) and the failing instruction (``insn``).

Example::

    >>> from toolchain.vta.randprog import random_program
    >>> from toolchain.vta.fsim import run_fsim
    >>> prog = random_program(3)
    >>> c = run_cfsim(prog, tokens=True)
    >>> bool((c.dram == run_fsim(prog, tokens=True).dram).all()), c.counters["insn_FINISH"]
    (True, 1)
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

import numpy as np

from toolchain.errors import OptionError, SimulationError
from toolchain.runtime.build import BASE_FLAGS, compile_shared
from toolchain.vta.config import ALU_OP_NAMES, VTAConfig
from toolchain.vta.fsim import FsimResult
from toolchain.vta.isa import (
    ENGINE_NAMES,
    INSN_BYTES,
    MEM_NAMES,
    AnyInstruction,
    decode_program,
)
from toolchain.vta.program import Program, dram_image
from toolchain.vta.tokens import describe

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime_c"
#: the runtime files of the accelerator driver and simulator (headers first)
SOURCES = ("kiln_vta.h", "kiln_vta_fsim.h", "kiln_vta.c", "kiln_vta_fsim.c")
GLUE = Path(__file__).with_name("cfsim_glue.c")
FLAGS = (*BASE_FLAGS, "-Wall", "-Wextra", "-Werror")

#: return codes of runtime_c/kiln_vta.h (tests/vta/test_cfsim_build.py checks they agree)
ERROR_CODES = {
    0: "KILN_VTA_OK", 1: "KILN_VTA_ERR_ARGUMENT", 2: "KILN_VTA_ERR_DECODE",
    3: "KILN_VTA_ERR_FINISH", 4: "KILN_VTA_ERR_SRAM_RANGE", 5: "KILN_VTA_ERR_DRAM_RANGE",
    6: "KILN_VTA_ERR_ALU_UOP", 7: "KILN_VTA_ERR_UNSUPPORTED", 8: "KILN_VTA_ERR_DEADLOCK",
    9: "KILN_VTA_ERR_TIMEOUT", 10: "KILN_VTA_ERR_DEVICE", 11: "KILN_VTA_ERR_STEPS",
}
_BAD = {1: "invalid opcode", 2: "reserved bits set", 3: "invalid memory type",
        4: "invalid ALU op", 5: "a token flag its engine does not have",
        6: "STORE with padding"}
_QUEUES = ("l2c", "c2l", "c2s", "s2c")  # bit 0..3 of a queue mask
_NCOUNTERS = 14


class CFsimError(SimulationError):
    """A run on the C simulator failed; ``code`` is the ``KILN_VTA_ERR_*`` value."""

    def __init__(self, message: str, code: int, insn: int | None) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = ERROR_CODES.get(code, f"code {code}")
        self.insn = insn


class _Config(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in (
        "batch", "block_in", "block_out", "inp_depth", "wgt_depth", "acc_depth", "uop_depth",
        "cmd_queue_depth", "token_queue_depth", "alu_ops")]


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("insn", ctypes.c_uint32), ("what", ctypes.c_uint32),
                ("value", ctypes.c_uint64), ("limit", ctypes.c_uint64),
                ("state", ctypes.c_uint8 * 3), ("queues", ctypes.c_uint8 * 3),
                ("blocked_insn", ctypes.c_uint32 * 3)]


class _Counters(ctypes.Structure):
    _fields_ = [("v", ctypes.c_uint64 * _NCOUNTERS)]


def error_struct() -> _Error:
    """An empty C ``kiln_vta_error`` for another device's glue to fill."""
    return _Error()


def source() -> str:
    """The single translation unit that is compiled: the runtime files, then the glue."""
    parts = [(RUNTIME / name).read_text() for name in SOURCES]
    return "\n".join([*parts, GLUE.read_text()])


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """Build (or find in the cache) and load the C simulator's shared library."""
    path, _info = compile_shared(source(), [*FLAGS, f"-I{RUNTIME}"], stem="kiln_vta_fsim")
    lib = ctypes.CDLL(str(path))
    lib.kiln_vta_py_run.restype = ctypes.c_int
    lib.kiln_vta_py_run.argtypes = [
        ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
        ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_int,
        ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(_Counters),
        ctypes.POINTER(_Error)]
    lib.kiln_vta_fsim_mem_bytes.restype = ctypes.c_size_t
    lib.kiln_vta_fsim_mem_bytes.argtypes = [ctypes.POINTER(_Config)]
    lib.kiln_vta_counter_name.restype = ctypes.c_char_p
    lib.kiln_vta_counter_name.argtypes = [ctypes.c_int]
    lib.kiln_vta_program_counters.restype = ctypes.c_int
    lib.kiln_vta_program_counters.argtypes = [ctypes.POINTER(_Config), ctypes.c_char_p,
                                              ctypes.c_uint32, ctypes.POINTER(_Counters)]
    lib.kiln_vta_strerror.restype = ctypes.c_char_p
    lib.kiln_vta_strerror.argtypes = [ctypes.c_int]
    sizes = (ctypes.c_uint32 * 3)()
    lib.kiln_vta_py_sizes(sizes)
    want = (ctypes.sizeof(_Config), ctypes.sizeof(_Error), ctypes.sizeof(_Counters))
    if tuple(sizes) != want:
        raise SimulationError(f"runtime_c/kiln_vta.h and toolchain/vta/cfsim.py disagree on "
                              f"struct sizes (C {tuple(sizes)}, ctypes {want}); update the "
                              "ctypes mirrors in cfsim.py")
    return lib


def counter_names() -> list[str]:
    """Names of the C simulator's counters, in its order (those of ``run_fsim``)."""
    lib = library()
    return [lib.kiln_vta_counter_name(i).decode() for i in range(_NCOUNTERS)]


def program_counters(insn_bytes: bytes, config: VTAConfig) -> dict[str, int]:
    """The counters of an encoded program counted from its instructions alone by the C
    driver (``kiln_vta_program_counters``, what a bundle on the RTL reports): the counters
    :func:`run_cfsim` returns when the program runs to FINISH, in the same form.

    Example::

        >>> from toolchain.vta.isa import Finish, encode
        >>> program_counters(encode(Finish()), VTAConfig())
        {'insn_FINISH': 1, 'instructions': 1}
    """
    lib = library()
    counters = _Counters()
    rc = lib.kiln_vta_program_counters(ctypes.byref(c_config(config)), insn_bytes,
                                       len(insn_bytes) // INSN_BYTES, ctypes.byref(counters))
    if rc != 0:
        raise SimulationError(f"kiln_vta_program_counters: {lib.kiln_vta_strerror(rc).decode()}")
    return _named(counters)


def _named(counters: _Counters) -> dict[str, int]:
    names = counter_names()
    values = {names[i]: int(counters.v[i]) for i in range(_NCOUNTERS)}
    out = {k: v for k, v in sorted(values.items()) if v and k != "instructions"}
    out["instructions"] = values["instructions"]
    return out


def c_config(cfg: VTAConfig) -> _Config:
    """The C ``kiln_vta_config`` of a :class:`VTAConfig`."""
    mask = sum(1 << ALU_OP_NAMES.index(op) for op in cfg.alu_ops)
    return _Config(cfg.batch, cfg.block_in, cfg.block_out, cfg.inp_depth, cfg.wgt_depth,
                   cfg.acc_depth, cfg.uop_depth, cfg.cmd_queue_depth, cfg.token_queue_depth,
                   mask)


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.zeros(nbytes + align, np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip:skip + nbytes]


def run_cfsim(program: Program, dram: np.ndarray | None = None, *, tokens: bool = False,
              seed: int | None = None, config: VTAConfig | None = None) -> FsimResult:
    """Run ``program`` on the C simulator; the same arguments and result as
    :func:`~toolchain.vta.fsim.run_fsim` (see the module docstring for the differences).

    The DRAM window is the data image, padding to 16 bytes, then the instructions
    (``Program.insn_addr``, hw/ISA.md section 4); DMA may only touch the data image.
    """
    image = program.dram if dram is None else dram
    return run_cfsim_bytes(program.insn_bytes, image, config or program.config, tokens=tokens,
                           seed=seed, insns=program.insns)


def run_cfsim_bytes(insn_bytes: bytes, dram: np.ndarray, config: VTAConfig, *,
                    tokens: bool = False, seed: int | None = None,
                    data_bytes: int | None = None,
                    insns: list[AnyInstruction] | None = None) -> FsimResult:
    """:func:`run_cfsim` on an encoded instruction stream, which may be malformed (the C
    side decodes and checks it).  ``data_bytes`` bounds DMA (default: the DRAM image;
    0: the whole window, instructions included, which the simulator then protects).
    ``insns`` (the decoded program) only improves error messages.

    Example::

        >>> from toolchain.vta.isa import Finish, encode
        >>> run_cfsim_bytes(encode(Finish()), np.zeros(16, np.uint8), VTAConfig()).order
        [0]
    """
    if seed is not None and not tokens:
        raise OptionError(f"run_cfsim: seed={seed} picks the engines' turns in token mode; "
                          "pass tokens=True with it (plain mode runs in program order)")
    image = dram_image(dram)
    if data_bytes is not None and (isinstance(data_bytes, bool) or not (
            isinstance(data_bytes, (int, np.integer)) and 0 <= data_bytes <= len(image))):
        # ctypes wraps a negative size_t, and the C side takes a bound past the image as the
        # whole window: either let DMA reach the instructions unchecked
        raise OptionError(f"run_cfsim_bytes: data_bytes={data_bytes!r}: must be an int from "
                          f"1 to the DRAM image's {len(image)} bytes, or 0 for the whole "
                          "window")
    insn_addr = (len(image) + INSN_BYTES - 1) // INSN_BYTES * INSN_BYTES
    window = _aligned(insn_addr + len(insn_bytes))
    window[:len(image)] = image
    window[insn_addr:] = np.frombuffer(insn_bytes, np.uint8)
    lib = library()
    ccfg = c_config(config)
    mem = _aligned(max(1, lib.kiln_vta_fsim_mem_bytes(ctypes.byref(ccfg))))
    n = len(insn_bytes) // INSN_BYTES
    order = np.zeros(max(1, n), np.uint32)
    counters, err = _Counters(), _Error()
    cseed = 0 if seed is None else (seed * 2654435761 + 1) % (1 << 32) or 1
    limit = len(image) if data_bytes is None else data_bytes
    rc = lib.kiln_vta_py_run(ctypes.byref(ccfg), mem.ctypes.data, mem.nbytes,
                             window.ctypes.data, len(window), limit, insn_addr, n,
                             int(not tokens), cseed, order.ctypes.data, len(order),
                             ctypes.byref(counters), ctypes.byref(err))
    if rc != 0:
        if insns is None:
            try:
                insns = decode_program(insn_bytes)
            except SimulationError:
                insns = []
        raise CFsimError(error_message(rc, err, insns, len(image), config), rc,
                         None if err.insn == 0xFFFFFFFF else int(err.insn))
    return FsimResult(window[:len(image)].copy(), _named(counters),
                      [int(i) for i in order[:n]])


# ---- messages --------------------------------------------------------------------------
def error_message(rc: int, err: _Error, insns: list[AnyInstruction], data_bytes: int,
             cfg: VTAConfig) -> str:
    """A message in the words of run_fsim's errors, from a C ``kiln_vta_error``."""
    lib = library()
    code = f"{ERROR_CODES.get(rc, rc)}: "
    where = ""
    if err.insn != 0xFFFFFFFF and err.insn < len(insns):
        where = f"instruction {err.insn} ({describe(insns[err.insn])}): "
    elif err.insn != 0xFFFFFFFF:
        where = f"instruction {err.insn}: "
    if rc == 2:
        return f"{code}{where}malformed: {_BAD.get(err.what, 'bad field')} ({err.value})"
    if rc == 3:
        return (f"{code}{where}the program must end with FINISH and have no other FINISH")
    if rc == 4:
        buf = MEM_NAMES.get(err.what, f"buffer {err.what}")
        what = "micro-op range end" if err.what == 0 else f"{buf} row"
        return (f"{code}{where}{what} {err.value} is outside the buffer (depth "
                f"{err.limit})")
    if rc == 5:
        if err.what == 1:
            return (f"{code}{where}DMA up to element {err.value} reaches the instruction "
                    f"stream at byte {err.limit}")
        return (f"{code}{where}DRAM element {err.value} is outside the {data_bytes}-byte "
                "DRAM image")
    if rc == 6:
        return f"{code}{where}ALU micro-ops must have wgt_idx = 0 (hw/ISA.md 2.3)"
    if rc == 7:
        op = ALU_OP_NAMES[err.what] if err.what < len(ALU_OP_NAMES) else str(err.what)
        return (f"{code}{where}target '{cfg.name}' does not offer ALU {op} (alu.ops: "
                f"{', '.join(cfg.alu_ops)})")
    if rc == 8:
        return f"{code}deadlock in token mode: " + "; ".join(_blocked(err, insns, cfg))
    if rc == 11 and err.insn < len(insns):
        d = insns[err.insn]
        return (f"{code}{where}{err.value:,} micro-op steps (iter_out {d.iter_out} x iter_in "
                f"{d.iter_in} x {d.uop_end - d.uop_bgn} micro-ops) are more than the "
                f"functional simulator runs in one instruction ({err.limit:,}); split the loop")
    return f"{code}{where}{lib.kiln_vta_strerror(rc).decode()}"


def _blocked(err: _Error, insns: list[AnyInstruction], cfg: VTAConfig) -> list[str]:
    out = []
    for e, name in enumerate(ENGINE_NAMES):
        i = int(err.blocked_insn[e])
        what = describe(insns[i]) if i < len(insns) else "see the listing"
        queues = ", ".join(q for b, q in enumerate(_QUEUES) if err.queues[e] >> b & 1)
        state = err.state[e]
        if state == 1:
            out.append(f"{name} engine blocked at instruction {i} ({what}) waiting to pop "
                       f"{queues} (queue empty)")
        elif state == 2:
            out.append(f"{name} engine blocked at instruction {i} ({what}) waiting to push "
                       f"{queues} (queue full, {cfg.token_queue_depth} tokens)")
        elif state == 3:
            full = f"the {ENGINE_NAMES[insns[i].engine]}" if i < len(insns) else "an"
            out.append(f"{name} engine idle: fetch is stalled at instruction {i} ({what}) "
                       f"because {full} engine's command queue is full ({cfg.cmd_queue_depth})")
        else:
            out.append(f"{name} engine finished")
    return out

