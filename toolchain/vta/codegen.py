"""Instruction emission: lowered, tensorized TIR -> accelerator instructions and micro-ops.

``emit_instructions`` takes a function after ``lower_blocks``, ``compact_buffer_allocation``
and ``inject_virtual_thread`` (every accelerator stage a call to a target intrinsic declared
with ``instruction:``, each under a loop nest annotated ``instruction``) and produces the
instruction stream in sequential order, without dependency tokens:

- plain serial loops run here, at compile time (the stream is straight-line code);
- each ``instruction`` nest folds into one instruction: the operands' on-chip rows and DRAM
  elements are affine in the nest's loop variables, so a DMA nest becomes a 2-D LOAD/STORE
  (``y_size``, ``x_size``, ``x_stride``) and a GEMM/ALU nest becomes the instruction's two
  loops (``iter_out``/``iter_in`` and their index factors) plus one micro-op per point of the
  remaining loops (the fewest micro-ops whose factors fit the fields);
- each allocation in a ``vta.*`` scope (names from the target's GEMM intrinsic) gets fixed
  rows of its on-chip buffer, stacked in allocation order: the copy each virtual thread got
  from ``inject_virtual_thread`` is its own rows, i.e. double buffering. An ALU stage writes
  its input's rows (the ISA's ALU updates ACC in place), so a buffer written only by ALU ops
  from one buffer that nothing else reads shares that buffer's rows.

A copy nest that is not tensorized, ``tile[..] = if_then_else(cond, data[..], 0)`` (the
convolution's padded input), becomes one LOAD per point above its inner two loops, with the
zero padding where ``cond`` is false (evaluated over the tile at compile time).

Too many rows for a buffer, an index that is not affine, a nest that does not fit the
instruction's fields: a :class:`~toolchain.errors.ScheduleError` naming the layer.

Before (one thread's accumulator reset, after the three passes)::

    gemm = T.allocate((2, 2, 2, 1, 16), "int32", scope="vta.acc")
    for ax0_init in T.serial(2, annotations={'instruction': 1}):
        for ax1_init in range(2):
            T.call_extern("int32", "vta.gemm_reset",
                          T.address_of(gemm[1, ax0_init, ax1_init, 0, 0]))

After (rows 4..7 are thread 1's copy; one micro-op ``acc=4``)::

    GEMM   reset uop[0:1) out=2x(acc+2,inp+0,wgt+0) in=2x(acc+1,inp+0,wgt+0)

Example::

    >>> from toolchain.target import load_target
    >>> from toolchain.vta.schedule import DenseShape, Tiles, dense_schedule, lower_dense
    >>> t = load_target("vta")
    >>> f = lower_dense(dense_schedule(DenseShape(4, 32, 32), 4, t, Tiles(2, 2, 2)))
    >>> from toolchain.vta.builder import ProgramBuilder
    >>> b = ProgramBuilder()
    >>> regions = {n: b.alloc(n, (4, 2, 1, 16)) for n in ("data", "out")}
    >>> regions["weight"] = b.alloc("weight", (2, 2, 16, 16))
    >>> em = emit_instructions(f, t, regions, "dense_1")
    >>> sorted({type(i).__name__ for i in em.insns})
    ['Alu', 'Gemm', 'Load', 'Store']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from toolchain.errors import ScheduleError
from toolchain.intrinsics import IntrinsicSpec, intrinsic_of_function
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.dtype import bits_of
from toolchain.tir.functor import post_order_visit
from toolchain.tir.transform.inject_virtual_thread import INSTRUCTION
from toolchain.vta.config import VTAConfig, config_from_target
from toolchain.vta.isa import (
    ALU_NAMES,
    MEM_ACC,
    MEM_INP,
    MEM_NAMES,
    MEM_OUT,
    MEM_WGT,
    Alu,
    AnyInstruction,
    Gemm,
    Load,
    Store,
    Uop,
)
from toolchain.vta.program import Region

MAX_ITER = (1 << 14) - 1
MAX_FACTOR = {"acc": (1 << 11) - 1, "inp": (1 << 11) - 1, "wgt": (1 << 10) - 1}
MAX_DMA = (1 << 16) - 1
MAX_PAD = (1 << 4) - 1
_ALU_OPS = {name: op for op, name in ALU_NAMES.items()}


@dataclass(frozen=True)
class Affine:
    """``const + sum(coef[j] * loop_j)`` over the loops of one instruction nest."""

    const: int
    coef: tuple[int, ...]

    def at(self, point: Sequence[int]) -> int:
        """The value at one point of the nest (loop values counted from 0)."""
        return self.const + sum(c * p for c, p in zip(self.coef, point, strict=True))

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.const + other.const,
                      tuple(a + b for a, b in zip(self.coef, other.coef, strict=True)))

    def scale(self, k: int) -> Affine:
        """``k`` times this form."""
        return Affine(self.const * k, tuple(c * k for c in self.coef))


@dataclass
class Emitted:
    """Instructions in sequential order (no tokens), the micro-ops each one runs, the
    micro-op kernels to load (deduplicated, in UOP-buffer order), and the rows used per
    buffer."""

    insns: list[AnyInstruction] = field(default_factory=list)
    uops: list[list[Uop]] = field(default_factory=list)
    kernel: list[Uop] = field(default_factory=list)
    rows_used: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Place:
    base: int
    strides: tuple[int, ...]   # rows per step of each leading index


def _strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


class _Emitter:
    def __init__(self, func: ir.PrimFunc, target: Target, regions: Mapping[str, Region],
                 layer: str) -> None:
        self.cfg: VTAConfig = config_from_target(target)
        self.layer = layer
        scopes = target.intrinsics["gemm"]["scopes"]
        self.mem_of_scope = {scopes["A"]: MEM_INP, scopes["B"]: MEM_WGT, scopes["C"]: MEM_ACC}
        self.regions = regions
        self.params = {p.data: p for p in func.params if isinstance(p, ir.Buffer)}
        self.top = dict.fromkeys((MEM_INP, MEM_WGT, MEM_ACC), 0)
        self.high = dict(self.top)
        self.place: dict[ir.Var, _Place] = {}
        self.alias = _in_place_aliases(func)
        self.kernels: dict[tuple[Uop, ...], int] = {}
        self.out = Emitted()

    def fail(self, msg: str) -> None:
        raise ScheduleError(f"layer {self.layer!r}: {msg}")

    # ---- statements ---------------------------------------------------------------------
    def stmt(self, s: ir.Stmt, env: dict[ir.Var, int]) -> None:
        if isinstance(s, ir.SeqStmt):
            for x in s.seq:
                self.stmt(x, env)
        elif isinstance(s, ir.Allocate):
            self.allocate(s, env)
        elif isinstance(s, ir.For) and INSTRUCTION in s.annotations:
            self.instruction(s, env)
        elif isinstance(s, ir.For) and s.kind in ("serial", "unrolled"):
            lo, n = self.const(s.min, env), self.const(s.extent, env)
            for v in range(lo, lo + n):
                self.stmt(s.body, {**env, s.loop_var: v})
        elif isinstance(s, ir.Evaluate) and isinstance(s.value, ir.Call):
            self.instruction(s, env)
        elif isinstance(s, ir.For):
            self.fail(f"loop {s.loop_var.name} of kind {s.kind} cannot run on the accelerator "
                      "(bind virtual threads and run inject_virtual_thread first)")
        else:
            self.fail(f"statement {type(s).__name__} has no accelerator instruction")

    def allocate(self, s: ir.Allocate, env: dict[ir.Var, int]) -> None:
        buf = s.buffer
        mem = self.mem_of_scope.get(buf.scope)
        if mem is None:
            self.fail(f"buffer {buf.name} in scope {buf.scope!r} is not an on-chip buffer "
                      f"of the target ({', '.join(self.mem_of_scope)})")
        shape = [self.const(d, env) for d in buf.shape]
        self.row_shape(buf, shape, mem)
        if buf.data in self.alias:
            root = self.alias[buf.data]
            if root not in self.place:
                self.fail(f"{buf.name} computes in place of a buffer allocated inside it")
            self.place[buf.data] = self.place[root]
            self.stmt(s.body, env)
            return
        rows = math.prod(shape[:-2])
        base = self.top[mem]
        if base + rows > self.cfg.depth(mem):
            self.fail(f"{buf.name} needs {rows} rows of the {MEM_NAMES[mem]} buffer at row "
                      f"{base} but it has {self.cfg.depth(mem)} rows: choose smaller tiles or "
                      "fewer virtual threads")
        self.place[buf.data] = _Place(base, _strides(shape[:-2]))
        self.top[mem] = base + rows
        self.high[mem] = max(self.high[mem], self.top[mem])
        self.stmt(s.body, env)
        self.top[mem] = base

    def row_shape(self, buf: ir.Buffer, shape: Sequence[int], mem: int) -> None:
        row = math.prod(shape[-2:]) * bits_of(buf.dtype) // 8 if len(shape) >= 2 else 0
        if row != self.cfg.row_bytes(mem):
            self.fail(f"buffer {buf.name} {tuple(shape)} {buf.dtype}: its last two dimensions "
                      f"must be one {MEM_NAMES[mem]} row ({self.cfg.row_bytes(mem)} bytes)")

    # ---- expressions --------------------------------------------------------------------
    def const(self, e: ir.PrimExpr, env: dict[ir.Var, int]) -> int:
        a = self.affine(e, env, [])
        return a.const

    def affine(self, e: ir.PrimExpr, env: dict[ir.Var, int], loops: list[ir.Var]) -> Affine:
        zero = (0,) * len(loops)
        if isinstance(e, ir.IntImm):
            return Affine(e.value, zero)
        if isinstance(e, ir.Var):
            if e in loops:
                return Affine(0, tuple(int(v is e) for v in loops))
            if e in env:
                return Affine(env[e], zero)
            self.fail(f"variable {e.name} is not a loop of the accelerator program")
        if isinstance(e, (ir.Add, ir.Sub)):
            a, b = self.affine(e.a, env, loops), self.affine(e.b, env, loops)
            return a + (b if isinstance(e, ir.Add) else b.scale(-1))
        if isinstance(e, ir.Mul):
            a, b = self.affine(e.a, env, loops), self.affine(e.b, env, loops)
            if not any(a.coef):
                return b.scale(a.const)
            if not any(b.coef):
                return a.scale(b.const)
        if isinstance(e, (ir.FloorDiv, ir.FloorMod)):
            a, b = self.affine(e.a, env, loops), self.affine(e.b, env, loops)
            if not any(a.coef) and not any(b.coef) and b.const:
                v = a.const // b.const if isinstance(e, ir.FloorDiv) else a.const % b.const
                return Affine(v, zero)
        self.fail(f"index {e} is not affine in the loops of one instruction")
        raise AssertionError  # unreachable: fail raises

    def operand(self, arg: ir.PrimExpr, env: dict[ir.Var, int], loops: list[ir.Var],
                mem: int) -> tuple[Affine, bool]:
        """Row (on-chip) or element (DRAM, in units of ``mem``) of an ``address_of``
        operand, and whether it is in DRAM."""
        if not (isinstance(arg, ir.Call) and arg.op == "tir.address_of"
                and isinstance(arg.args[0], ir.BufferLoad)):
            self.fail(f"operand {arg} is not the address of a buffer element")
        return self.row(arg.args[0].buffer, arg.args[0].indices, env, loops, mem)

    def row(self, buf: ir.Buffer, indices: Sequence[ir.PrimExpr], env: dict[ir.Var, int],
            loops: list[ir.Var], mem: int) -> tuple[Affine, bool]:
        """Row / DRAM element of ``buf[indices]`` (which must start a row)."""
        idx = [self.affine(i, env, loops) for i in indices]
        if any(i.const or any(i.coef) for i in idx[-2:]):
            self.fail(f"operand {buf.name}{list(indices)} does not start at a whole row")
        dram = buf.data in self.params
        if dram:
            region = self.regions.get(buf.name)
            if region is None:
                self.fail(f"no DRAM region for parameter {buf.name}")
            shape = [self.const(d, {}) for d in buf.shape]
            self.row_shape(buf, shape, mem)
            place = _Place(region.elem(self.cfg.row_bytes(mem)), _strides(shape[:-2]))
        else:
            if buf.data not in self.place:
                self.fail(f"buffer {buf.name} is used outside its allocation")
            place = self.place[buf.data]
        row = Affine(place.base, (0,) * len(loops))
        for i, st in zip(idx[:-2], place.strides, strict=True):
            row = row + i.scale(st)
        return row, dram

    # ---- instructions -------------------------------------------------------------------
    def instruction(self, s: ir.Stmt, env: dict[ir.Var, int]) -> None:
        loops: list[ir.Var] = []
        extents: list[int] = []
        env = dict(env)
        while isinstance(s, ir.For):
            lo, n = self.const(s.min, env), self.const(s.extent, env)
            if n == 1:
                env[s.loop_var] = lo
            elif n > 1:
                loops.append(s.loop_var)
                extents.append(n)
                if lo:
                    self.fail(f"loop {s.loop_var.name} of an instruction starts at {lo}")
            else:
                return
            s = s.body
        if isinstance(s, ir.BufferStore):
            self.guarded_copy(s, env, loops, extents)
            return
        call = s.value if isinstance(s, ir.Evaluate) else None
        spec = intrinsic_of_function(call.op) if isinstance(call, ir.Call) else None
        if spec is None or not spec.instruction:
            self.fail(f"{s} is not a call to an accelerator intrinsic of the target")
        kind = spec.instruction
        nbuf = len(spec.tiles)
        args, scalars = call.args[:nbuf], call.args[nbuf:]
        imm = [self.const(x, env) for x in scalars]
        if kind == "LOAD":
            mem = self.mem_of_scope.get(_buffer_of(args[1]).scope, -1)
            if mem not in (MEM_INP, MEM_WGT):
                self.fail(f"{spec.name} loads into {_buffer_of(args[1]).scope!r}")
            src, _ = self.operand(args[0], env, loops, mem)
            dst, _ = self.operand(args[1], env, loops, mem)
            self.dma(spec, Load, mem, dst, src, extents)
        elif kind == "STORE":
            src, _ = self.operand(args[0], env, loops, MEM_ACC)
            dst, _ = self.operand(args[1], env, loops, MEM_OUT)
            self.dma(spec, Store, MEM_OUT, src, dst, extents)
        elif kind == "GEMM" and nbuf == 1:
            acc, _ = self.operand(args[0], env, loops, MEM_ACC)
            self.loop_insn(spec, extents, {"acc": acc}, lambda f: Gemm(reset=True, **f))
        elif kind == "GEMM":
            rows = {"inp": self.operand(args[0], env, loops, MEM_INP)[0],
                    "wgt": self.operand(args[1], env, loops, MEM_WGT)[0],
                    "acc": self.operand(args[2], env, loops, MEM_ACC)[0]}
            self.loop_insn(spec, extents, rows, lambda f: Gemm(**f))
        elif kind.startswith("ALU.") and kind[4:] in _ALU_OPS:
            op = _ALU_OPS[kind[4:]]
            a = self.operand(args[0], env, loops, MEM_ACC)[0]
            c = self.operand(args[-1], env, loops, MEM_ACC)[0]
            if a != c:
                self.fail(f"{spec.name} must write the rows it reads ({_buffer_of(args[0]).name}"
                          f" -> {_buffer_of(args[-1]).name}): the ALU updates ACC in place")
            rows = {"acc": c}  # an immediate op reads no source row
            if nbuf == 3:
                rows["inp"] = self.operand(args[1], env, loops, MEM_ACC)[0]
            if nbuf == 2 and len(imm) != 1:
                self.fail(f"{spec.name} needs one immediate, got {len(imm)}")
            value = imm[0] if nbuf == 2 else 0
            if not -(1 << 15) <= value < (1 << 15):
                self.fail(f"{spec.name} immediate {value} does not fit 16 bits")
            self.loop_insn(spec, extents, rows, lambda f: Alu(
                alu_op=op, use_imm=nbuf == 2, imm=value, **f))
        else:
            self.fail(f"intrinsic {spec.name}: unknown instruction {kind!r}")

    def dma(self, spec: IntrinsicSpec, cls: type, mem: int, sram: Affine, dram: Affine,
            extents: list[int]) -> None:
        """A DMA nest: loops contiguous in both memories merge; the inner two make a 2-D
        DMA (rows contiguous on chip, ``x`` contiguous in DRAM); outer loops left over run
        at compile time, one instruction per point."""
        extents, (sram, dram) = _merge_loops(extents, [sram, dram])
        n = len(extents)
        inner = [j for j in range(max(0, n - 2), n)]
        for point in itertools.product(*(range(e) for e in extents[:n - len(inner)])):
            full = [*point, *([0] * len(inner))]
            sr = Affine(sram.at(full), tuple(sram.coef[j] for j in inner))
            dr = Affine(dram.at(full), tuple(dram.coef[j] for j in inner))
            insn = _dma_2d(cls, mem, sr, dr, [extents[j] for j in inner])
            if insn is None:
                self.fail(f"{spec.name} over loops {extents} is not a 2-D DMA (rows must be "
                          "contiguous on chip and along the inner loop in DRAM)")
            self.push(insn, [])

    def guarded_copy(self, st: ir.BufferStore, env: dict[ir.Var, int], loops: list[ir.Var],
                     extents: list[int]) -> None:
        """A copy of whole rows from DRAM, ``dst[..] = if_then_else(cond, src[..], 0)`` or
        ``dst[..] = src[..]``: one LOAD per point of the loops above the inner two, with
        the rows where ``cond`` is false as the DMA's zero padding."""
        mem = self.mem_of_scope.get(st.buffer.scope)
        value, cond = st.value, None
        if isinstance(value, ir.Call) and value.op == "tir.if_then_else":
            cond, value, zero = value.args
            if self.const(zero, env) != 0:
                self.fail(f"copy into {st.buffer.name} pads with {zero}, not zero")
        if mem not in (MEM_INP, MEM_WGT) or not isinstance(value, ir.BufferLoad) or \
                value.buffer.data not in self.params:
            self.fail(f"{st.buffer.name}[..] = {st.value} is no accelerator instruction (only "
                      "a copy of DRAM rows into the input or weight buffer is)")
        if [str(i) for i in value.indices[-2:]] != [str(i) for i in st.indices[-2:]]:
            self.fail(f"copy into {st.buffer.name} does not copy whole rows")
        inside = {v for i in st.indices[-2:] for v in _vars_of(i)}
        keep = [j for j, v in enumerate(loops) if v not in inside]
        env = {**env, **{v: 0 for v in loops if v in inside}}
        loops, extents = [loops[j] for j in keep], [extents[j] for j in keep]
        while len(loops) < 2:
            loops.insert(0, ir.Var(f"unit{len(loops)}"))
            extents.insert(0, 1)
        sram = self.row(st.buffer, st.indices, env, loops, mem)[0]
        dram = self.row(value.buffer, value.indices, env, loops, mem)[0]
        ys, xs = extents[-2:]
        grid_y, grid_x = np.meshgrid(np.arange(ys), np.arange(xs), indexing="ij")
        for point in itertools.product(*(range(e) for e in extents[:-2])):
            at = {**env, **dict(zip(loops, point, strict=False)),
                  loops[-2]: grid_y, loops[-1]: grid_x}
            mask = np.broadcast_to(_evaluate(cond, at, self) if cond is not None else True,
                                   (ys, xs))
            rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
            if not rows.size:
                self.fail(f"copy into {st.buffer.name} is all padding at {point}")
            y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
            if not mask[y0:y1, x0:x1].all() or mask.sum() != (y1 - y0) * (x1 - x0):
                self.fail(f"copy into {st.buffer.name}: the rows read are not a rectangle")
            full = [*point, 0, 0]
            sr = Affine(sram.at(full), sram.coef[-2:])
            dr = Affine(dram.at([*point, y0, x0]), dram.coef[-2:])
            pads = (int(y0), int(ys - y1), int(x0), int(xs - x1))
            insn = _dma_2d(Load, mem, sr, dr, [ys, xs], pads)
            if insn is None or max(pads) > MAX_PAD:
                self.fail(f"copy into {st.buffer.name} over loops {extents[-2:]} is not a "
                          f"2-D DMA with padding at most {MAX_PAD} (pads {pads})")
            self.push(insn, [])

    def loop_insn(self, spec: IntrinsicSpec, extents: list[int], rows: dict[str, Affine],
                  make) -> None:
        """Fold a GEMM/ALU nest: two loops into the instruction's loops, the rest into
        micro-ops (fewest first; then the accumulator row changing in the inner levels)."""
        n = len(extents)
        best = None
        for o, i in itertools.permutations([*range(n), None, None], 2):
            if o is not None and o == i:
                continue
            if any(j is not None and not 0 <= rows[k].coef[j] <= MAX_FACTOR[k]
                   for k in rows for j in (o, i)):
                continue
            if any(j is not None and extents[j] > MAX_ITER for j in (o, i)):
                continue
            rest = [j for j in range(n) if j not in (o, i)]
            count = math.prod(extents[j] for j in rest)
            inner = [j for j in (*rest, i) if j is not None]
            key = (count, -sum(rows["acc"].coef[j] != 0 for j in inner[-2:]), o is None)
            if best is None or key < best[0]:
                best = (key, o, i, rest)
        if best is None:
            self.fail(f"{spec.name} over loops {extents}: no two loops fit the instruction's "
                      "loop fields")
        _, o, i, rest = best
        uops = []
        for vals in itertools.product(*(range(extents[j]) for j in rest)):
            point = [0] * n
            for j, v in zip(rest, vals, strict=True):
                point[j] = v
            r = {k: a.at(point) for k, a in rows.items()}
            uops.append(Uop(acc=r["acc"], inp=r.get("inp", 0), wgt=r.get("wgt", 0)))
        key = tuple(uops)
        if key not in self.kernels:
            self.kernels[key] = len(self.out.kernel)
            self.out.kernel.extend(uops)
        bgn = self.kernels[key]

        def factor(k: str, j: int | None) -> int:
            return rows[k].coef[j] if j is not None and k in rows else 0

        fields = {"uop_bgn": bgn, "uop_end": bgn + len(uops),
                  "iter_out": extents[o] if o is not None else 1,
                  "iter_in": extents[i] if i is not None else 1,
                  "dst_factor_out": factor("acc", o), "dst_factor_in": factor("acc", i),
                  "src_factor_out": factor("inp", o), "src_factor_in": factor("inp", i)}
        if "wgt" in rows:
            fields |= {"wgt_factor_out": factor("wgt", o), "wgt_factor_in": factor("wgt", i)}
        self.push(make(fields), uops)

    def push(self, insn: AnyInstruction, uops: list[Uop]) -> None:
        self.out.insns.append(insn)
        self.out.uops.append(uops)


def _merge_loops(extents: list[int], forms: list[Affine]) -> tuple[list[int], list[Affine]]:
    """Merge neighbouring loops that walk every form contiguously (outer step = inner
    step x inner extent); extent-1 loops are dropped."""
    ext = list(extents)
    coefs = [list(f.coef) for f in forms]
    j = 0
    while j + 1 < len(ext):
        if all(c[j] == c[j + 1] * ext[j + 1] for c in coefs):
            ext[j:j + 2] = [ext[j] * ext[j + 1]]
            for c in coefs:
                c[j:j + 2] = [c[j + 1]]
            j = max(0, j - 1)
        else:
            j += 1
    return ext, [Affine(f.const, tuple(c)) for f, c in zip(forms, coefs, strict=True)]


def _dma_2d(cls: type, mem: int, sram: Affine, dram: Affine, extents: list[int],
            pads: tuple[int, int, int, int] = (0, 0, 0, 0)) -> AnyInstruction | None:
    """One LOAD/STORE over at most two loops (``y`` outer, ``x`` inner), or None."""
    top, bottom, left, right = pads
    n = len(extents)
    orders = [(None, None)] if n == 0 else [(None, 0), (0, None)] if n == 1 else [(0, 1)]
    for y, x in orders:
        xs = extents[x] if x is not None else 1
        ys = extents[y] if y is not None else 1
        if x is not None and xs > 1 and (sram.coef[x] != 1 or dram.coef[x] != 1):
            continue
        if y is not None and ys > 1 and (sram.coef[y] != xs or dram.coef[y] < 0):
            continue
        stride = dram.coef[y] if y is not None and ys > 1 else xs - left - right
        sizes = (ys - top - bottom, xs - left - right)
        if max(*sizes, stride) > MAX_DMA or min(sizes) < 0:
            continue
        extra = {"y_pad_top": top, "y_pad_bottom": bottom, "x_pad_left": left,
                 "x_pad_right": right} if cls is Load else {}
        return cls(memory_type=mem, sram_base=sram.const, dram_base=dram.const,
                   y_size=sizes[0], x_size=sizes[1], x_stride=stride, **extra)
    return None


def _vars_of(e: ir.PrimExpr) -> set[ir.Var]:
    found: set[ir.Var] = set()
    post_order_visit(e, lambda x: found.add(x) if isinstance(x, ir.Var) else None)
    return found


_CMP = {ir.LT: np.less, ir.LE: np.less_equal, ir.GT: np.greater, ir.GE: np.greater_equal,
        ir.EQ: np.equal, ir.NE: np.not_equal, ir.And: np.logical_and, ir.Or: np.logical_or,
        ir.Add: np.add, ir.Sub: np.subtract, ir.Mul: np.multiply, ir.Min: np.minimum,
        ir.Max: np.maximum, ir.FloorDiv: np.floor_divide, ir.FloorMod: np.mod}


def _evaluate(e: ir.PrimExpr, env: dict, em: _Emitter):
    """Integer/boolean value of ``e`` with loop variables bound to ints or numpy arrays."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        if e not in env:
            em.fail(f"variable {e.name} is not a loop of the accelerator program")
        return env[e]
    if type(e) in _CMP:
        return _CMP[type(e)](_evaluate(e.a, env, em), _evaluate(e.b, env, em))
    if isinstance(e, ir.Not):
        return np.logical_not(_evaluate(e.a, env, em))
    if isinstance(e, ir.Cast):
        return _evaluate(e.value, env, em)
    if isinstance(e, ir.Call) and e.op == "tir.likely":
        return _evaluate(e.args[0], env, em)
    em.fail(f"cannot evaluate {e} at compile time")
    raise AssertionError  # unreachable: fail raises


def _buffer_of(arg: ir.PrimExpr) -> ir.Buffer:
    return arg.args[0].buffer  # type: ignore[attr-defined]


def _in_place_aliases(func: ir.PrimFunc) -> dict[ir.Var, ir.Var]:
    """Buffers an ALU stage may compute in place of its input: ``C -> A`` when every write
    of C is an ALU op reading A at the same indices and A is read by nothing else."""
    writes: dict[ir.Var, list[tuple[IntrinsicSpec, ir.BufferLoad, ir.BufferLoad]]] = {}
    reads: dict[ir.Var, int] = {}
    alu_reads: dict[tuple[ir.Var, ir.Var], int] = {}  # (source, destination) -> reads

    def visit(x: object) -> None:
        if not isinstance(x, ir.Call):
            return
        spec = intrinsic_of_function(x.op)
        if spec is None or not spec.instruction:
            return
        ops = [a.args[0] for a in x.args[:len(spec.tiles)]
               if isinstance(a, ir.Call) and a.op == "tir.address_of"]
        if len(ops) != len(spec.tiles):
            return
        out, ins = ops[-1], ops[:-1]
        for b in ins:
            reads[b.buffer.data] = reads.get(b.buffer.data, 0) + 1
        if spec.instruction.startswith("ALU.") and ins:
            writes.setdefault(out.buffer.data, []).append((spec, ins[0], out))
            pair = (ins[0].buffer.data, out.buffer.data)
            alu_reads[pair] = alu_reads.get(pair, 0) + 1
        else:
            writes.setdefault(out.buffer.data, []).append((spec, out, out))

    post_order_visit(func.body, visit)
    alias: dict[ir.Var, ir.Var] = {}
    for c, ws in writes.items():
        srcs = {a.buffer.data for _, a, _ in ws}
        if len(srcs) != 1 or any(not s.instruction.startswith("ALU.") for s, _, _ in ws):
            continue
        (a,) = srcs
        same = all(len(x.indices) == len(y.indices) and all(
            str(i) == str(j) for i, j in zip(x.indices, y.indices, strict=True))
            for _, x, y in ws)
        if a is not c and same and reads.get(a, 0) == alu_reads.get((a, c), 0):
            alias[c] = a
    for c in list(alias):  # chains: clip_lo -> clip_hi -> shr -> gemm
        root = alias[c]
        while root in alias:
            root = alias[root]
        alias[c] = root
    return alias


def emit_instructions(func: ir.PrimFunc, target: Target, regions: Mapping[str, Region],
                      layer: str) -> Emitted:
    """The instruction stream of ``func`` (see the module docstring); ``regions`` places
    each buffer parameter (by name) in DRAM."""
    em = _Emitter(func, target, regions, layer)
    em.stmt(func.body, {})
    em.out.rows_used = {MEM_NAMES[m].lower(): h for m, h in em.high.items()}
    if len(em.out.kernel) > em.cfg.uop_depth:
        em.fail(f"{len(em.out.kernel)} micro-ops do not fit the UOP buffer "
                f"({em.cfg.uop_depth})")
    return em.out
