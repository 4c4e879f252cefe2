"""int32 results out of an 8-bit store port: ``widen_epilogue`` (an instruction-stream pass).

The accelerator stores only OUT, the int8 mirror of the accumulator (its low 8 bits). A
layer whose requantisation the ALU cannot do bit-exactly — Kiln's fixed-point
``requantize`` needs the high half of a 32x32-bit product, and the ALU multiplies int32
by int32 keeping the low half — hands its raw int32 accumulators to the host instead, as
byte planes: store the tile (bits 0-7), shift it right by 8 in place, store it again
(bits 8-15), and so on. The host rebuilds ``b0 + 2**8 b1 + 2**16 b2 + 2**24 int8(b3)``
(:func:`join_planes`), exactly. Where the weights bound every accumulator to fewer bits —
``|acc| <= 128 * sum |w|`` over an output channel's weights, since the input is int8 —
fewer planes suffice (:func:`planes_needed`; the top plane is sign-extended): a 3x3 layer
of 16 channels needs at most 22 bits, so three planes, one STORE and one SHR fewer per tile.

The pass runs on the emitted stream *before* dependency tokens are inserted
(:func:`~toolchain.vta.deps.insert_tokens` then orders the new instructions like any
other). The layer must have been scheduled with shift 0: its epilogue ALU instructions
(SHR 0, MIN, MAX) are dropped, the SHR becomes the template of the three ``SHR 8``, and
each STORE of a tile is repeated per plane at ``plane_elems`` OUT elements further on.

Before (one tile)::

    GEMM ...; ALU SHR imm=0; ALU MIN imm=127; ALU MAX imm=-128; STORE -> dram[e]

After::

    GEMM ...; STORE -> dram[e]; ALU SHR imm=8; STORE -> dram[e + P]; ALU SHR imm=8;
    STORE -> dram[e + 2P]; ALU SHR imm=8; STORE -> dram[e + 3P]

Example::

    >>> import numpy as np
    >>> planes = np.array([[0x78], [0x56], [0x34], [0x12]], np.uint8).view(np.int8)
    >>> hex(int(join_planes(planes)[0]))
    '0x12345678'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from toolchain.errors import ScheduleError
from toolchain.vta.deps import accesses
from toolchain.vta.isa import ALU_SHR, Alu, AnyInstruction, Store, Uop

#: byte planes of an int32 accumulator
PLANES = 4


def planes_needed(weight_abs_sums: np.ndarray) -> int:
    """The fewest byte planes (1-4) that hold every accumulator of int8 inputs against
    weights whose absolute values sum to ``weight_abs_sums`` per output channel: the
    signed range of ``8 * planes`` bits must contain ``+-128 * max(sum |w|)``.

    Example::

        >>> planes_needed(np.array([144 * 127]))        # 3x3 taps x 16 channels, |w| = 127
        3
        >>> planes_needed(np.array([100])), planes_needed(np.array([1_000_000]))
        (2, 4)
    """
    bound = 128 * int(np.max(weight_abs_sums, initial=0))
    for planes in range(1, PLANES):
        if bound < 2 ** (8 * planes - 1):
            return planes
    return PLANES


def widen_epilogue(insns: Sequence[AnyInstruction], uops: Sequence[Sequence[Uop]],
                   plane_elems: int, layer: str = "layer", planes: int = PLANES
                   ) -> tuple[list[AnyInstruction], list[list[Uop]]]:
    """``(insns, uops)`` storing each tile's int32 accumulators as ``planes`` byte planes
    ``plane_elems`` OUT elements apart (see the module docstring)."""
    if not 1 <= planes <= PLANES:
        raise ScheduleError(f"layer {layer!r}: {planes} byte planes; an int32 has 1 to "
                            f"{PLANES}")
    templates: list[tuple[int, int, int]] = []  # (index, lo, hi) of each epilogue SHR
    owner: dict[int, int] = {}                  # store index -> template index
    last: dict[int, int] = {}                   # template index -> its last store
    for i, (insn, u) in enumerate(zip(insns, uops, strict=True)):
        if isinstance(insn, Alu) and insn.alu_op == ALU_SHR:
            w = next(a for a in accesses(insn, u) if a.write)
            templates.append((i, w.lo, w.hi))
        elif isinstance(insn, Store):
            rows = accesses(insn, u)[0]
            t = next((t for t in reversed(templates) if t[1] <= rows.lo and rows.hi <= t[2]),
                     None)
            if t is None:
                raise ScheduleError(f"layer {layer!r}: STORE {i} follows no requantising "
                                    "SHR over its rows; cannot widen it to int32")
            owner[i] = t[0]
            last[t[0]] = i
    groups: dict[int, list[int]] = {}
    for s, t in owner.items():
        groups.setdefault(t, []).append(s)
    out: list[AnyInstruction] = []
    out_uops: list[list[Uop]] = []
    for i, (insn, u) in enumerate(zip(insns, uops, strict=True)):
        if isinstance(insn, Alu):
            continue  # the epilogue (SHR 0, MIN, MAX) is the host's now
        out.append(insn)
        out_uops.append(list(u))
        t = next((t for t, s in last.items() if s == i), None)
        if t is None:
            continue
        shr = replace(insns[t], imm=8, use_imm=True)  # type: ignore[type-var]
        for plane in range(1, planes):
            out.append(shr)
            out_uops.append(list(uops[t]))
            for s in groups[t]:
                st = insns[s]
                assert isinstance(st, Store)
                out.append(replace(st, dram_base=st.dram_base + plane * plane_elems))
                out_uops.append([])
    return out, out_uops


def join_planes(planes: np.ndarray) -> np.ndarray:
    """int32 values from their 1 to :data:`PLANES` byte planes (axis 0, low byte first;
    the top plane is signed)."""
    p = np.asarray(planes).view(np.uint8).astype(np.int32)
    n = p.shape[0]
    if not 1 <= n <= PLANES:
        raise ValueError(f"expected 1 to {PLANES} byte planes on axis 0, got {n}")
    out = p[n - 1].astype(np.int8).astype(np.int32) << (8 * (n - 1))
    for i in range(n - 1):
        out |= p[i] << (8 * i)
    return out
