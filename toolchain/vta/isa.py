"""Instructions and micro-ops of the VTA-like accelerator: dataclasses, encode and decode.

The bit layout is defined in ``hw/ISA.md``; this module is its executable form.  Every
instruction is a frozen dataclass; :func:`encode` turns one into 16 little-endian bytes and
:func:`decode` reverses it, refusing reserved bits, unknown opcodes and illegal token flags
with a :class:`~toolchain.errors.SimulationError`.

Example::

    >>> insn = Load(memory_type=MEM_INP, sram_base=0, dram_base=4, y_size=2, x_size=3,
    ...             x_stride=3, push_next=True)
    >>> decode(encode(insn)) == insn
    True
    >>> Uop.decode(Uop(acc=1, inp=2, wgt=3).encode())
    Uop(acc=1, inp=2, wgt=3)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from toolchain.errors import SimulationError

INSN_BYTES = 16
UOP_BYTES = 4

OP_LOAD, OP_STORE, OP_GEMM, OP_FINISH, OP_ALU = 0, 1, 2, 3, 4
OPCODE_NAMES = {OP_LOAD: "LOAD", OP_STORE: "STORE", OP_GEMM: "GEMM", OP_FINISH: "FINISH",
                OP_ALU: "ALU"}

MEM_UOP, MEM_WGT, MEM_INP, MEM_ACC, MEM_OUT = 0, 1, 2, 3, 4
MEM_NAMES = {MEM_UOP: "UOP", MEM_WGT: "WGT", MEM_INP: "INP", MEM_ACC: "ACC", MEM_OUT: "OUT"}

ALU_MIN, ALU_MAX, ALU_ADD, ALU_SHR, ALU_MUL = 0, 1, 2, 3, 4
ALU_NAMES = {ALU_MIN: "MIN", ALU_MAX: "MAX", ALU_ADD: "ADD", ALU_SHR: "SHR", ALU_MUL: "MUL"}

#: engines, in pipeline order (hw/ISA.md section 3)
ENGINE_LOAD, ENGINE_COMPUTE, ENGINE_STORE = 0, 1, 2
ENGINE_NAMES = ("load", "compute", "store")

#: token queues: name -> (producer engine, consumer engine)
QUEUES = {"l2c": (0, 1), "c2l": (1, 0), "c2s": (1, 2), "s2c": (2, 1)}

# (field, low bit, width, signed) tables, straight from hw/ISA.md section 2
_HEADER = (("opcode", 0, 3, False), ("pop_prev", 3, 1, False), ("pop_next", 4, 1, False),
           ("push_prev", 5, 1, False), ("push_next", 6, 1, False))
_MEM = (("memory_type", 7, 3, False), ("sram_base", 10, 16, False), ("dram_base", 26, 32, False),
        ("y_size", 58, 16, False), ("x_size", 74, 16, False), ("x_stride", 90, 16, False),
        ("y_pad_top", 106, 4, False), ("y_pad_bottom", 110, 4, False),
        ("x_pad_left", 114, 4, False), ("x_pad_right", 118, 4, False))
_LOOP = (("uop_bgn", 8, 13, False), ("uop_end", 21, 14, False), ("iter_out", 35, 14, False),
         ("iter_in", 49, 14, False), ("dst_factor_out", 63, 11, False),
         ("dst_factor_in", 74, 11, False), ("src_factor_out", 85, 11, False),
         ("src_factor_in", 96, 11, False))
_GEMM = (("reset", 7, 1, False), *_LOOP, ("wgt_factor_out", 107, 10, False),
         ("wgt_factor_in", 117, 10, False))
_ALU = (*_LOOP, ("alu_op", 107, 3, False), ("use_imm", 110, 1, False), ("imm", 111, 16, True))
_UOP = (("acc", 0, 11), ("inp", 11, 11), ("wgt", 22, 10))


def _mask(layout) -> int:
    m = 0
    for _name, lo, width, *_ in layout:
        m |= ((1 << width) - 1) << lo
    return m


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """Base of all instructions: the four dependency flags of the common header."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    OPCODE: ClassVar[int] = -1
    LAYOUT: ClassVar[tuple] = ()

    @property
    def name(self) -> str:
        return OPCODE_NAMES[self.OPCODE]

    @property
    def engine(self) -> int:
        """Engine that executes this instruction (ENGINE_LOAD / _COMPUTE / _STORE)."""
        return ENGINE_COMPUTE

    def pops(self) -> list[str]:
        """Token queues this instruction pops from, in the order of hw/ISA.md section 3."""
        return _queues_of(self.engine, self.pop_prev, self.pop_next, pop=True)

    def pushes(self) -> list[str]:
        """Token queues this instruction pushes to."""
        return _queues_of(self.engine, self.push_prev, self.push_next, pop=False)


def _queues_of(engine: int, prev: bool, nxt: bool, *, pop: bool) -> list[str]:
    names = ("l2c", "c2l", "c2s", "s2c")
    # (engine, prev?) -> queue, for pops and pushes
    pop_map = {(1, True): "l2c", (1, False): "s2c", (0, False): "c2l", (2, True): "c2s"}
    push_map = {(1, True): "c2l", (1, False): "c2s", (0, False): "l2c", (2, True): "s2c"}
    table = pop_map if pop else push_map
    out = []
    for is_prev, flag in ((True, prev), (False, nxt)):
        if flag:
            q = table.get((engine, is_prev))
            if q is not None:
                out.append(q)
    return sorted(out, key=names.index)


@dataclass(frozen=True, kw_only=True)
class _Dma(Instruction):
    """The fields of LOAD and STORE (the ``_MEM`` layout): a 2-D strided DMA."""

    memory_type: int
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 1
    x_size: int = 1
    x_stride: int = 0
    y_pad_top: int = 0
    y_pad_bottom: int = 0
    x_pad_left: int = 0
    x_pad_right: int = 0

    LAYOUT: ClassVar[tuple] = _MEM


@dataclass(frozen=True, kw_only=True)
class Load(_Dma):
    """LOAD: 2-D strided DMA from DRAM into UOP/WGT/INP/ACC with zero padding."""

    OPCODE: ClassVar[int] = OP_LOAD

    @property
    def engine(self) -> int:
        return ENGINE_LOAD if self.memory_type in (MEM_INP, MEM_WGT) else ENGINE_COMPUTE

    @property
    def rows_written(self) -> int:
        """Buffer rows written: (pads + y_size) x (pads + x_size)."""
        h = self.y_pad_top + self.y_size + self.y_pad_bottom
        w = self.x_pad_left + self.x_size + self.x_pad_right
        return h * w


@dataclass(frozen=True, kw_only=True)
class Store(_Dma):
    """STORE: 2-D strided DMA from OUT to DRAM (no padding)."""

    memory_type: int = MEM_OUT

    OPCODE: ClassVar[int] = OP_STORE

    @property
    def engine(self) -> int:
        return ENGINE_STORE


@dataclass(frozen=True, kw_only=True)
class _Loop(Instruction):
    """The fields of GEMM and ALU (the ``_LOOP`` layout): micro-ops uop_bgn..uop_end run in
    an iter_out x iter_in affine loop."""

    uop_bgn: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0

    @property
    def steps(self) -> int:
        """Micro-op steps executed: iter_out * iter_in * (uop_end - uop_bgn)."""
        return self.iter_out * self.iter_in * max(0, self.uop_end - self.uop_bgn)


@dataclass(frozen=True, kw_only=True)
class Gemm(_Loop):
    """GEMM: run micro-ops uop_bgn..uop_end in an iter_out x iter_in affine loop."""

    reset: bool = False
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0

    OPCODE: ClassVar[int] = OP_GEMM
    LAYOUT: ClassVar[tuple] = _GEMM


@dataclass(frozen=True, kw_only=True)
class Alu(_Loop):
    """ALU: elementwise MIN/MAX/ADD/SHR/MUL on ACC rows, tensor-tensor or with an immediate."""

    alu_op: int
    use_imm: bool = False
    imm: int = 0

    OPCODE: ClassVar[int] = OP_ALU
    LAYOUT: ClassVar[tuple] = _ALU


@dataclass(frozen=True, kw_only=True)
class Finish(Instruction):
    """FINISH: the last instruction; the machine is done when it retires and DMAs drain."""

    OPCODE: ClassVar[int] = OP_FINISH
    LAYOUT: ClassVar[tuple] = ()


AnyInstruction = Load | Store | Gemm | Alu | Finish
_CLASSES = {cls.OPCODE: cls for cls in (Load, Store, Gemm, Alu, Finish)}


def check_flags(insn: Instruction) -> str | None:
    """Return why the instruction's token flags are illegal for its engine, or None."""
    if insn.engine == ENGINE_LOAD and (insn.pop_prev or insn.push_prev):
        return (f"{insn.name} {MEM_NAMES[insn.memory_type]} runs on the load engine, which has "
                "no previous engine: pop_prev/push_prev must be 0")
    if insn.engine == ENGINE_STORE and (insn.pop_next or insn.push_next):
        return ("STORE runs on the store engine, which has no next engine: "
                "pop_next/push_next must be 0")
    return None


def _validate(insn: Instruction) -> None:
    if isinstance(insn, _Dma):
        if insn.memory_type not in MEM_NAMES:
            raise SimulationError(f"{insn.name}: memory_type {insn.memory_type} is not one of "
                                  "0 UOP, 1 WGT, 2 INP, 3 ACC, 4 OUT")
        if isinstance(insn, Load) and insn.memory_type == MEM_OUT:
            raise SimulationError("LOAD: memory_type OUT is invalid (OUT mirrors ACC; "
                                  "load ACC instead)")
        if isinstance(insn, Store):
            if insn.memory_type != MEM_OUT:
                raise SimulationError(f"STORE: memory_type must be OUT (4), got "
                                      f"{MEM_NAMES[insn.memory_type]}")
            if insn.y_pad_top or insn.y_pad_bottom or insn.x_pad_left or insn.x_pad_right:
                raise SimulationError("STORE: padding fields must be 0")
    if isinstance(insn, Alu) and insn.alu_op not in ALU_NAMES:
        raise SimulationError(f"ALU: alu_op {insn.alu_op} is not one of "
                              "0 MIN, 1 MAX, 2 ADD, 3 SHR, 4 MUL")
    problem = check_flags(insn)
    if problem:
        raise SimulationError(problem)


def encode_int(insn: Instruction) -> int:
    """Encode an instruction as a 128-bit integer (bit 0 = bit 0 of byte 0)."""
    _validate(insn)
    word = 0
    for name, lo, width, signed in (*_HEADER, *insn.LAYOUT):
        value = insn.OPCODE if name == "opcode" else int(getattr(insn, name))
        lo_lim, hi_lim = ((-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed
                          else (0, (1 << width) - 1))
        if not lo_lim <= value <= hi_lim:
            raise SimulationError(f"{insn.name}: field '{name}' = {value} does not fit in "
                                  f"{width} {'signed ' if signed else ''}bits "
                                  f"({lo_lim}..{hi_lim})")
        word |= (value & ((1 << width) - 1)) << lo
    return word


def encode(insn: Instruction) -> bytes:
    """Encode one instruction as 16 little-endian bytes (hw/ISA.md section 2)."""
    return encode_int(insn).to_bytes(INSN_BYTES, "little")


def decode(data: bytes | int, index: int | None = None) -> AnyInstruction:
    """Decode 16 bytes (or a 128-bit int) into an instruction; refuses malformed words.

    ``index`` only improves the error message ("instruction 7: ...").
    """
    where = f"instruction {index}: " if index is not None else ""
    word = int.from_bytes(bytes(data), "little") if not isinstance(data, int) else data
    opcode = word & 7
    cls = _CLASSES.get(opcode)
    if cls is None:
        raise SimulationError(f"{where}invalid opcode {opcode} (word 0x{word:032x})")
    layout = (*_HEADER, *cls.LAYOUT)
    reserved = word & ~_mask(layout) & ((1 << 128) - 1)
    if reserved:
        raise SimulationError(f"{where}{OPCODE_NAMES[opcode]} has reserved bits set "
                              f"(mask 0x{reserved:032x}); see hw/ISA.md")
    kwargs = {}
    for name, lo, width, signed in layout[1:]:
        value = (word >> lo) & ((1 << width) - 1)
        if signed and value >> (width - 1):
            value -= 1 << width
        kwargs[name] = value
    for flag in ("pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm"):
        if flag in kwargs:
            kwargs[flag] = bool(kwargs[flag])
    insn = cls(**kwargs)
    try:
        _validate(insn)
    except SimulationError as exc:
        raise SimulationError(f"{where}{exc}") from None
    return insn


def encode_program(insns: list[Instruction]) -> bytes:
    """Concatenate the encodings of a list of instructions."""
    return b"".join(encode(i) for i in insns)


def decode_program(data: bytes) -> list[AnyInstruction]:
    """Decode a byte string of whole instructions."""
    if len(data) % INSN_BYTES:
        raise SimulationError(f"instruction stream is {len(data)} bytes, not a multiple of "
                              f"{INSN_BYTES}")
    return [decode(data[i:i + INSN_BYTES], i // INSN_BYTES)
            for i in range(0, len(data), INSN_BYTES)]


@dataclass(frozen=True)
class Uop:
    """A 32-bit micro-op: ACC row, INP row (ALU: source ACC row) and WGT row."""

    acc: int = 0
    inp: int = 0
    wgt: int = 0

    def encode(self) -> int:
        """Encode as a 32-bit unsigned integer (hw/ISA.md section 2.3)."""
        word = 0
        for name, lo, width in _UOP:
            value = getattr(self, name)
            if not 0 <= value < (1 << width):
                raise SimulationError(f"micro-op field '{name}' = {value} does not fit in "
                                      f"{width} bits (0..{(1 << width) - 1})")
            word |= value << lo
        return word

    @staticmethod
    def decode(word: int) -> Uop:
        """Decode a 32-bit micro-op."""
        return Uop(*(((word >> lo) & ((1 << width) - 1)) for _n, lo, width in _UOP))


def encode_uops(uops: list[Uop]) -> bytes:
    """Micro-ops as little-endian 32-bit words, ready for a DRAM image."""
    return np.array([u.encode() for u in uops], dtype="<u4").tobytes()


def uop_fields(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised decode of uint32 micro-op words into (acc, inp, wgt) int64 arrays."""
    w = words.astype(np.int64)
    return tuple((w >> lo) & ((1 << width) - 1) for _n, lo, width in _UOP)


def field_names(insn: Instruction) -> list[str]:
    """Names of the instruction's encoded fields (header flags excluded)."""
    skip = {"pop_prev", "pop_next", "push_prev", "push_next"}
    return [f.name for f in fields(insn) if f.name not in skip]
