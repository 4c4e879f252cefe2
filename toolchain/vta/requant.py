"""Requantising on the accelerator: ``requant_epilogue`` (an instruction-stream pass).

A layer quantized with power-of-two scales (``kiln quantize --power-of-two-scales``) has,
per output channel, the requantization multiplier ``2**-n``: Q31 ``2**30`` with shift
``1 - n``. Kiln's reference (SRDHM, then a rounding right shift, ties away from zero) then
equals, for ``x = acc + bias`` (``tests/quantize/test_power_of_two.py``)::

    q = (x + 2**(n-1) + 1 - 2 [x < 0]) >> n      (n >= 2)        q = (x + 1) >> 1   (n = 1)
    y = clamp(q + zero_point, lo, hi)

which the ALU computes exactly with ADD, SHR, MIN and MAX (:class:`RequantPlan` says when a
layer qualifies, or why not). The pass rewrites the epilogue that the schedule emits for
shift 0 (``SHR 0; MIN 127; MAX -128`` over a tile's accumulator rows ``T``), given

* constant ACC rows loaded once at the start of the program (``LOAD ACC``, a compute-engine
  instruction, so no token changes): the bias of each distinct (channel block, bias row)
  — the bias depends on the output position where padding cuts a window and the input
  has a zero point — and per channel block the shifts ``n`` and the constants
  ``c + zero_point * 2**n`` (``c = 2**(n-1) + 1``, or 1 for ``n = 1``);
* for layers whose clamp can go below the zero point (no ReLU folded into it), a second
  tile ``S = T + sign_offset`` for the sign term (the layer is compiled for fewer ACC rows
  so that it is free).

Broadcast operands: an ALU op whose source row is a constant row takes ``src`` factors 0,
and its destination rows are those of the tile with that constant — found from the tile's
STOREs (OUT row -> DRAM element -> channel block and position) and covered by as few
two-level affine loops as possible (:func:`cover`).

Before (one tile)::

    GEMM reset T; GEMM ...; ALU SHR imm=0 T; ALU MIN imm=127 T; ALU MAX imm=-128 T; STORE T

After (ReLU folded into the clamp, ``lo >= zero_point``: the sign term cannot matter, since
a negative ``x`` makes both roundings ``<= zero_point``)::

    GEMM reset T; GEMM ...; ALU ADD T, K[bias + c + zp 2**n] (one op per constant's rows);
    ALU SHR T, K[n] (one per channel block); ALU MIN imm=hi T; ALU MAX imm=lo T; STORE T

After (otherwise)::

    ...; ALU ADD T, K[bias]...; ALU SHR S, imm=-32 (S = 0); ALU ADD S, T; ALU SHR S, imm=31;
    ALU SHR S, imm=-1 (S = -2 [x < 0]); ALU ADD T, S; ALU ADD T, K[c + zp 2**n]...;
    ALU SHR T, K[n]...; ALU MIN imm=hi T; ALU MAX imm=lo T; STORE T

Example::

    >>> cover([4, 5, 6, 12, 13, 14, 40])
    [(4, 2, 8, 3, 1), (40, 1, 0, 1, 0)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from toolchain.errors import ScheduleError
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import (
    ALU_ADD,
    ALU_MAX,
    ALU_MIN,
    ALU_SHR,
    MEM_ACC,
    Alu,
    AnyInstruction,
    Load,
    Store,
    Uop,
)

#: loop-field limits of GEMM/ALU (hw/ISA.md section 2.3)
MAX_ITER = (1 << 14) - 1
MAX_FACTOR = (1 << 11) - 1
INT32_MAX = 2**31 - 1
#: the one multiplier a requantization on the accelerator can have (Q31 2**30 = 1/2)
POW2_MULTIPLIER = 1 << 30


@dataclass(frozen=True)
class RequantPlan:
    """A layer's requantization as the ALU computes it: per output channel ``c`` the bias
    (``[C]``, or ``[C, OH, OW]`` when it depends on the position), the shift ``n``, the
    output zero point and the clamp ``[lo, hi]``; ``q = (x + rounding - sign_weight
    [x < 0]) >> n`` with ``rounding`` (``[C]``) by default QConv's ``2**(n-1) + 1`` (1 for
    ``n = 1``) and ``sign_weight`` 2 (a QAdd's: :func:`plan_qadd`)."""

    bias: np.ndarray
    shift: np.ndarray
    zero_point: int
    lo: int
    hi: int
    rounding: np.ndarray | None = None
    sign_weight: int = 2

    @property
    def sign(self) -> bool:
        """Whether the sign term is needed: the clamp lets values below the zero point
        through (no ReLU folded into it)."""
        return self.lo < self.zero_point and self.sign_weight > 0

    @property
    def channels(self) -> int:
        return int(self.shift.shape[0])

    def round_const(self) -> np.ndarray:
        """``[C]`` int64: the rounding constant added before the shift."""
        if self.rounding is not None:
            return np.asarray(self.rounding, np.int64)
        n = self.shift.astype(np.int64)
        return np.where(n >= 2, (np.int64(1) << np.maximum(n - 1, 0)) + 1, 1)

    def offset(self) -> np.ndarray:
        """``[C]`` int64: what is added after the sign term, ``c + zero_point * 2**n``."""
        return self.round_const() + self.zero_point * (np.int64(1) << self.shift.astype(
            np.int64))

    def reference(self, acc: np.ndarray) -> np.ndarray:
        """The int8 result of ``acc`` (``[C, ...]`` int32) by the formula of the module
        docstring, in numpy (the accelerator must equal it)."""
        a = np.asarray(acc, np.int64)
        ex = (1,) * (a.ndim - 1)
        b = self.bias.astype(np.int64)
        x = a + b.reshape(b.shape + (1,) * (a.ndim - b.ndim))
        n = self.shift.astype(np.int64).reshape((-1, *ex))
        rnd = self.round_const().reshape((-1, *ex)) - self.sign_weight * (x < 0)
        q = (x + rnd) >> n
        return np.clip(q + self.zero_point, self.lo, self.hi).astype(np.int8)


def plan_requant(bias: np.ndarray, multiplier: np.ndarray, shift_pow: np.ndarray,
                 zero_point: int, lo: int, hi: int, acc_bound: np.ndarray
                 ) -> RequantPlan | str:
    """The :class:`RequantPlan` of a layer (``bias`` ``[C]`` or ``[C, ...]`` int32, QConv's
    ``multiplier`` ``[C]`` and ``shift_pow`` ``[C, 2]`` (:func:`~toolchain.quantize.
    fixed_point.shift_table`), ``acc_bound`` ``[C]``: the largest ``|acc|``), or why the
    ALU cannot requantize it exactly.

    Example::

        >>> print(plan_requant(np.zeros(2, np.int32), np.array([1 << 30, 1 << 29]),
        ...                    np.array([[1, 1 << 28]] * 2), 0, -128, 127, np.array([10, 10])))
        ... # doctest: +ELLIPSIS
        multiplier 536870912 is not 2**30: its scales are not powers of two (kiln quantize ...)
        >>> p = plan_requant(np.array([3, -5], np.int32), np.array([1 << 30] * 2),
        ...                  np.array([[1, 1 << 28]] * 2), -128, -128, 127, np.array([9, 9]))
        >>> p.shift.tolist(), p.sign
        ([3, 3], False)
    """
    mult = np.asarray(multiplier, np.int64).ravel()
    sp = np.asarray(shift_pow, np.int64).reshape(-1, 2)
    bad = mult[mult != POW2_MULTIPLIER]
    if bad.size:
        return (f"multiplier {int(bad[0])} is not 2**30: its scales are not powers of two "
                "(kiln quantize --power-of-two-scales)")
    if np.any(sp[:, 0] != 1):
        return "a left shift (multiplier above 1): the ALU's shifts round only rightwards"
    rq = sp[:, 1]
    if np.any(rq <= 0) or np.any(rq & (rq - 1)):
        return "a shift table that is not a power of two"
    n = 31 - np.log2(rq).astype(np.int64)
    if np.any(n < 1) or np.any(n > 31):
        return f"shift {int(n.max())} is outside 1..31"
    plan = RequantPlan(np.asarray(bias, np.int32), n, int(zero_point), int(lo), int(hi))
    if plan.sign and np.any(n == 1):
        return ("a channel with multiplier 2**-1 and no ReLU in the clamp: its rounding has "
                "no sign term, which the ALU's per-channel epilogue does not vary")
    b = np.abs(plan.bias.astype(np.int64)).reshape(plan.channels, -1).max(axis=1)
    worst = (np.asarray(acc_bound, np.int64) + b + np.abs(plan.offset()) + 2)
    if worst.max() > INT32_MAX:
        return ("acc + bias + rounding constants can leave int32 "
                f"(bound {int(worst.max())}); the ALU wraps")
    return plan


def plan_qadd(attrs: dict, channels: int) -> tuple[RequantPlan, tuple[int, int]] | str:
    """A QAdd with power-of-two scales as ``u = (a - za) 2**da + (b - zb) 2**db`` (``da``,
    ``db`` the weights ``<= 64`` of the GEMM that brings both int8 inputs into ACC) and a
    :class:`RequantPlan` of ``u``; or why the ALU cannot compute it exactly.

    With multipliers ``2**30``, ``(v - zv) << left_shift`` through SRDHM and the right
    shift ``e`` is exactly ``(v - zv) 2**(left_shift - 1 - e)`` (``pv``, below); the sum is
    ``2**p u`` with ``p = min(pa, pb)``, and the output requantization by ``2**-n`` of
    ``2**p u`` is ``(u + 2**(m-1) - [u < 0]) >> m`` with ``m = n - p >= 1`` (the reference's
    ``+1`` becomes less than one unit of ``u``), or ``u`` itself for ``m = 0``.

    Example::

        >>> attrs = {"a_zero_point": 1, "b_zero_point": -128, "a_multiplier": 1 << 30,
        ...          "a_shift": 0, "b_multiplier": 1 << 30, "b_shift": 0,
        ...          "y_multiplier": 1 << 30, "y_shift": -19, "left_shift": 20,
        ...          "y_zero_point": -128, "out_min": -128, "out_max": 127}
        >>> plan, weights = plan_qadd(attrs, 16)
        >>> weights, int(plan.bias[0]), int(plan.shift[0]), plan.sign
        ((1, 1), 127, 1, False)
    """
    ls = int(attrs["left_shift"])
    p = {}
    for k in "aby":
        if int(attrs[f"{k}_multiplier"]) != POW2_MULTIPLIER:
            return (f"{k}'s multiplier {attrs[f'{k}_multiplier']} is not 2**30: its scales "
                    "are not powers of two (kiln quantize --power-of-two-scales)")
    for k in "ab":
        s = int(attrs[f"{k}_shift"])
        if s > 0 and 255 << (ls + s) > INT32_MAX or ls < 1 or ls - 1 + s < 0:
            return f"{k}'s shift {s} with left shift {ls} is not exact on the ALU"
        p[k] = ls - 1 + s
    base = min(p["a"], p["b"])
    da, db = 1 << (p["a"] - base), 1 << (p["b"] - base)
    if max(da, db) > 64:
        return f"input scales 2**{abs(p['a'] - p['b'])} apart: the GEMM's int8 weights hold 64"
    n = 1 - int(attrs["y_shift"])
    m = n - base
    if base < 1 or m < 0 or m > 31:
        return f"output shift {n} against input scale 2**{base}: not one rounding shift"
    zp, lo, hi = (int(attrs[k]) for k in ("y_zero_point", "out_min", "out_max"))
    bias = np.full(channels, -int(attrs["a_zero_point"]) * da
                   - int(attrs["b_zero_point"]) * db, np.int32)
    rounding = np.full(channels, (1 << (m - 1)) if m else 0, np.int64)
    plan = RequantPlan(bias, np.full(channels, m, np.int64), zp, lo, hi, rounding,
                       1 if m else 0)
    return plan, (da, db)


# ---- constants ----------------------------------------------------------------------------
@dataclass
class Constants:
    """The constant ACC rows of a layer's epilogue (``rows`` ``[R, BATCH, BLOCK_OUT]``
    int32, loaded at ``base``) and which row each output element and channel block
    uses."""

    rows: np.ndarray
    #: output element (OUT row of the ``out`` region) -> its bias row
    bias_row: np.ndarray
    #: output element -> its channel block
    block: np.ndarray
    #: channel block -> its shift row / its offset row (sign variant; else -1)
    shift_row: list[int]
    offset_row: list[int]
    base: int = 0


def build_constants(plan: RequantPlan, cfg: VTAConfig, block: np.ndarray,
                    position: np.ndarray) -> Constants:
    """The constant rows for output elements whose channel block is ``block[e]`` and whose
    lanes' positions are ``position[e, b]`` (a flat index into the bias's spatial shape, or
    -1 for a lane no output uses)."""
    bo, batch = cfg.block_out, cfg.batch
    nblocks = int(block.max()) + 1
    c = plan.channels
    width = nblocks * bo

    def per_channel(v: np.ndarray) -> np.ndarray:
        out = np.zeros(width, np.int64)
        out[:c] = v
        return out.reshape(nblocks, bo)

    bias = plan.bias.astype(np.int64).reshape(c, -1)                  # [C, P]
    full = np.zeros((width, bias.shape[1]), np.int64)
    full[:c] = bias
    if not plan.sign:
        full[:c] += plan.offset()[:, None]
    rows: list[np.ndarray] = []
    index: dict[bytes, int] = {}

    def row_of(v: np.ndarray) -> int:
        key = v.astype(np.int32).tobytes()
        if key not in index:
            index[key] = len(rows)
            rows.append(v.astype(np.int32))
        return index[key]

    bias_row = np.empty(len(block), np.int64)
    for e, (ob, pos) in enumerate(zip(block, position, strict=True)):
        lanes = [full[ob * bo:(ob + 1) * bo, max(int(p), 0) % full.shape[1]] for p in pos]
        bias_row[e] = row_of(np.stack(lanes))
    shifts, offsets = per_channel(plan.shift), per_channel(plan.offset())
    shift_row = [row_of(np.broadcast_to(shifts[ob], (batch, bo))) for ob in range(nblocks)]
    offset_row = ([row_of(np.broadcast_to(offsets[ob], (batch, bo))) for ob in range(nblocks)]
                  if plan.sign else [-1] * nblocks)
    return Constants(np.stack(rows), bias_row, np.asarray(block, np.int64), shift_row,
                     offset_row)


# ---- the pass -----------------------------------------------------------------------------
def cover(rows: Sequence[int]) -> list[tuple[int, int, int, int, int]]:
    """Sorted distinct ``rows`` as few two-level affine loops ``(base, n_out, f_out, n_in,
    f_in)`` as a greedy scan finds (each within the ALU's field limits)."""
    rows = sorted(rows)
    out: list[tuple[int, int, int, int, int]] = []
    i = 0
    while i < len(rows):
        # the inner run: constant stride from rows[i]
        n_in, f_in = 1, 0
        if i + 1 < len(rows) and rows[i + 1] - rows[i] <= MAX_FACTOR:
            f_in = rows[i + 1] - rows[i]
            n_in = 2
            while (i + n_in < len(rows) and n_in < MAX_ITER
                   and rows[i + n_in] - rows[i + n_in - 1] == f_in):
                n_in += 1
        # the outer loop: further runs of the same shape at a constant step
        n_out, f_out = 1, 0
        nxt = i + n_in
        if n_in > 1 and nxt + n_in <= len(rows) and rows[nxt] - rows[i] <= MAX_FACTOR:
            step = rows[nxt] - rows[i]
            while (n_out < MAX_ITER and i + (n_out + 1) * n_in <= len(rows)
                   and all(rows[i + n_out * n_in + k] == rows[i] + n_out * step + k * f_in
                           for k in range(n_in))):
                n_out += 1
            f_out = step if n_out > 1 else 0
        out.append((rows[i], n_out, f_out, n_in, f_in))
        i += n_out * n_in
    return out


class _Kernel:
    """The micro-op kernel, grown by deduplicated blocks."""

    def __init__(self, kernel: Sequence[Uop]) -> None:
        self.uops = list(kernel)
        self.index: dict[tuple[Uop, ...], int] = {}

    def add(self, block: Sequence[Uop]) -> int:
        key = tuple(block)
        if key not in self.index:
            self.index[key] = len(self.uops)
            self.uops.extend(key)
        return self.index[key]


def _rows_of(insn: Alu, uops: Sequence[Uop]) -> list[int]:
    return sorted({u.acc + i * insn.dst_factor_out + j * insn.dst_factor_in
                   for u in uops for i in range(insn.iter_out) for j in range(insn.iter_in)})


def _row_elements(insns: Sequence[AnyInstruction], uops: Sequence[Sequence[Uop]],
                  out_elem: int, n_elems: int) -> dict[int, dict[int, int]]:
    """For each epilogue SHR (by index): its ACC rows -> the output element each is stored
    to (the first STORE after it that reads the row)."""
    owners: list[tuple[int, set[int]]] = []
    found: dict[int, dict[int, int]] = {}
    for i, insn in enumerate(insns):
        if isinstance(insn, Alu) and insn.alu_op == ALU_SHR:
            rows = set(_rows_of(insn, uops[i]))
            owners = [(j, r - rows) for j, r in owners if r - rows] + [(i, rows)]
            found[i] = {}
        elif isinstance(insn, Store):
            for y in range(insn.y_size):
                for x in range(insn.x_size):
                    row = insn.sram_base + y * insn.x_size + x
                    e = insn.dram_base + y * insn.x_stride + x - out_elem
                    if not 0 <= e < n_elems:
                        continue
                    for j, rows in owners:
                        if row in rows:
                            found[j].setdefault(row, e)
    return found


def requant_epilogue(insns: Sequence[AnyInstruction], uops: Sequence[Sequence[Uop]],
                     kernel: Sequence[Uop], plan: RequantPlan, consts: Constants,
                     out_elem: int, sign_offset: int, layer: str = "layer"
                     ) -> tuple[list[AnyInstruction], list[list[Uop]], list[Uop]]:
    """``(insns, uops, kernel)`` with each tile's ``SHR 0; MIN; MAX`` epilogue replaced by
    the requantization of ``plan`` (see the module docstring). ``out_elem`` is the first
    OUT element of the ``out`` region; ``consts.base`` the first constant row;
    ``sign_offset`` the distance of the sign tile (used when ``plan.sign``)."""
    n_elems = len(consts.block)
    elems = _row_elements(insns, uops, out_elem, n_elems)
    k = _Kernel(kernel)
    out: list[AnyInstruction] = []
    out_uops: list[list[Uop]] = []

    def emit(insn: AnyInstruction, u: Sequence[Uop]) -> None:
        out.append(insn)
        out_uops.append(list(u))

    def broadcast(op: int, groups: dict[int, list[int]]) -> None:
        for const, rows in sorted(groups.items()):
            for base, n_out, f_out, n_in, f_in in cover(rows):
                u = Uop(acc=base, inp=consts.base + const)
                at = k.add([u])
                emit(Alu(alu_op=op, uop_bgn=at, uop_end=at + 1, iter_out=n_out,
                         iter_in=n_in, dst_factor_out=f_out, dst_factor_in=f_in), [u])

    def tile(t: Alu, u: Sequence[Uop], op: int, *, imm: int | None = None,
             dst: int = 0, src: int | None = None) -> None:
        """``op`` over the template's rows shifted by ``dst``, with an immediate or the
        same rows shifted by ``src``."""
        if imm is not None and dst == 0:   # the template's own micro-ops
            emit(replace(t, alu_op=op, imm=imm), u)
            return
        if imm is not None:
            new = [Uop(acc=x.acc + dst, inp=0) for x in u]
            fields = {"use_imm": True, "imm": imm, "src_factor_out": 0, "src_factor_in": 0}
        else:
            assert src is not None
            new = [Uop(acc=x.acc + dst, inp=x.acc + src) for x in u]
            fields = {"use_imm": False, "imm": 0, "src_factor_out": t.dst_factor_out,
                      "src_factor_in": t.dst_factor_in}
        at = k.add(new)
        emit(replace(t, alu_op=op, uop_bgn=at, uop_end=at + len(new), **fields), new)

    for i, (insn, u) in enumerate(zip(insns, uops, strict=True)):
        if not isinstance(insn, Alu):
            emit(insn, u)
            continue
        if insn.alu_op != ALU_SHR:
            continue  # the schedule's MIN/MAX: the new epilogue clamps
        if insn.imm != 0 or not insn.use_imm:
            raise ScheduleError(f"layer {layer!r}: the epilogue to requantise must be "
                                f"scheduled with shift 0, got SHR {insn.imm}")
        rows = elems[i]
        if not rows:
            raise ScheduleError(f"layer {layer!r}: ALU {i} writes rows no STORE reads")
        by_bias: dict[int, list[int]] = {}
        by_block: dict[int, list[int]] = {}
        for row, e in rows.items():
            by_bias.setdefault(int(consts.bias_row[e]), []).append(row)
            by_block.setdefault(int(consts.block[e]), []).append(row)
        broadcast(ALU_ADD, by_bias)
        if plan.sign:
            s = sign_offset
            tile(insn, u, ALU_SHR, imm=-32, dst=s)   # a left shift by 32: S = 0
            tile(insn, u, ALU_ADD, dst=s, src=0)
            tile(insn, u, ALU_SHR, imm=31, dst=s)
            if plan.sign_weight == 2:
                tile(insn, u, ALU_SHR, imm=-1, dst=s)
            tile(insn, u, ALU_ADD, src=s)
            broadcast(ALU_ADD, _by_row(consts.offset_row, by_block))
        broadcast(ALU_SHR, _by_row(consts.shift_row, by_block))
        tile(insn, u, ALU_MIN, imm=plan.hi)
        tile(insn, u, ALU_MAX, imm=plan.lo)
    return out, out_uops, k.uops


def _by_row(row_of_block: Sequence[int], rows: dict[int, list[int]]) -> dict[int, list[int]]:
    """Channel blocks' rows grouped by their constant row (blocks may share one)."""
    out: dict[int, list[int]] = {}
    for block, r in rows.items():
        out.setdefault(row_of_block[block], []).extend(r)
    return out


def load_constants(region_elem: int, consts: Constants) -> Load:
    """The LOAD ACC that brings the constant rows to ``consts.base`` (``region_elem``: the
    region's first ACC element)."""
    n = len(consts.rows)
    return Load(memory_type=MEM_ACC, sram_base=consts.base, dram_base=region_elem, y_size=1,
                x_size=n, x_stride=n)
