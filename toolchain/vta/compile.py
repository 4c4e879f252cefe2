"""Compile an int8 dense layer for the accelerator: ``compile_dense``.

The whole path, each step a typed object handed to the next::

    dense_compute + dense_schedule        (toolchain.vta.schedule: TE -> tensorized TIR)
    lower_dense                            (lower_blocks, compact_buffer_allocation,
                                            inject_virtual_thread)
    emit_instructions                      (toolchain.vta.codegen: TIR -> instructions)
    insert_tokens                          (toolchain.vta.deps: dependency tokens)
    check_program                          (toolchain.vta.checker: refuse a bad program)

The weights are packed into the program's DRAM image (region ``weight``); the input goes
into region ``data`` at run time (:meth:`CompiledDense.image`) and the result comes out of
region ``out`` (:meth:`CompiledDense.read_output`). Any problem — tiles that do not divide
the layer, buffers that overflow, a program the static checker refuses (e.g. one that would
deadlock) — is a :class:`~toolchain.errors.ScheduleError` that names the layer.

Example::

    >>> import numpy as np
    >>> from toolchain.vta.fsim import run_fsim
    >>> rng = np.random.default_rng(0)
    >>> w = rng.integers(-128, 128, (40, 24), dtype=np.int8)
    >>> x = rng.integers(-128, 128, (6, 40), dtype=np.int8)
    >>> layer = compile_dense(w, m=6, shift=8, tiles=Tiles(3, 2, 3), layer="fc1")
    >>> out = layer.read_output(run_fsim(layer.program, layer.image(x), tokens=True).dram)
    >>> ref = np.clip((x.astype(np.int32) @ w.astype(np.int32)) >> 8, -128, 127)
    >>> bool((out == ref).all())
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolchain.errors import ScheduleError
from toolchain.target import Target, load_target
from toolchain.tir import ir
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.checker import check_program
from toolchain.vta.codegen import emit_instructions
from toolchain.vta.config import VTAConfig, config_from_target
from toolchain.vta.deps import insert_tokens
from toolchain.vta.program import Program
from toolchain.vta.schedule import (
    DenseShape,
    Tiles,
    blocks,
    candidate_tiles,
    dense_schedule,
    lower_dense,
)
from toolchain.vta.timing import estimate_cycles

#: tilings compiled and compared on the cycle model when the caller gives none
CANDIDATES = 8

__all__ = ["CompiledDense", "DenseShape", "Tiles", "compile_dense", "pack_input",
           "pack_weight"]


def pack_input(x: np.ndarray, cfg: VTAConfig) -> np.ndarray:
    """``(M, K)`` int8 -> ``(M/BATCH, K/BLOCK_IN, BATCH, BLOCK_IN)``, zero padded."""
    m, k = x.shape
    mb, kb = -(-m // cfg.batch), -(-k // cfg.block_in)
    p = np.zeros((mb * cfg.batch, kb * cfg.block_in), np.int8)
    p[:m, :k] = x
    return np.ascontiguousarray(p.reshape(mb, cfg.batch, kb, cfg.block_in).transpose(0, 2, 1, 3))


def pack_weight(w: np.ndarray, cfg: VTAConfig) -> np.ndarray:
    """``(K, N)`` int8 -> ``(N/BLOCK_OUT, K/BLOCK_IN, BLOCK_OUT, BLOCK_IN)``, zero padded."""
    k, n = w.shape
    kb, nb = -(-k // cfg.block_in), -(-n // cfg.block_out)
    p = np.zeros((kb * cfg.block_in, nb * cfg.block_out), np.int8)
    p[:k, :n] = w
    return np.ascontiguousarray(
        p.reshape(kb, cfg.block_in, nb, cfg.block_out).transpose(2, 0, 3, 1))


@dataclass
class CompiledDense:
    """A dense layer compiled to one accelerator program."""

    layer: str
    shape: DenseShape
    shift: int
    tiles: Tiles
    vthreads: int
    #: instructions (with tokens) + DRAM image (weights, micro-ops) + regions
    program: Program
    #: the lowered TIR the instructions were emitted from (prints as TVMScript-like text)
    func: ir.PrimFunc
    #: on-chip rows used per buffer (``inp``, ``wgt``, ``acc``)
    rows_used: dict[str, int]

    def image(self, x: np.ndarray) -> np.ndarray:
        """The program's DRAM image with the ``(M, K)`` int8 input packed into ``data``."""
        cfg = self.program.config
        if x.shape != (self.shape.m, self.shape.k) or x.dtype != np.int8:
            raise ScheduleError(f"layer {self.layer!r}: input must be int8 of shape "
                                f"({self.shape.m}, {self.shape.k}), got {x.dtype} {x.shape}")
        dram = self.program.dram.copy()
        region = self.program.regions["data"]
        blob = pack_input(x, cfg).tobytes()
        dram[region.offset:region.offset + len(blob)] = np.frombuffer(blob, np.uint8)
        return dram

    def read_output(self, dram: np.ndarray) -> np.ndarray:
        """The ``(M, N)`` int8 result from a DRAM image after a run."""
        out = self.program.read("out", dram)                   # (MB, NB, BATCH, BO)
        mb, nb, batch, bo = out.shape
        full = out.transpose(0, 2, 1, 3).reshape(mb * batch, nb * bo)
        return full[: self.shape.m, : self.shape.n]


def compile_dense(weight: np.ndarray, m: int, shift: int, target: Target | str = "vta", *,
                  tiles: Tiles | None = None, vthreads: int = 2,
                  layer: str = "dense") -> CompiledDense:
    """Compile ``out[M, N] = clip((x[M, K] @ weight[K, N]) >> shift, -128, 127)`` (int8 in
    and out, int32 accumulation) into one accelerator program; see the module docstring.

    Without ``tiles``, the :data:`CANDIDATES` best tilings of
    :func:`~toolchain.vta.schedule.candidate_tiles` are compiled and the one with the fewest
    cycles on :func:`~toolchain.vta.timing.estimate_cycles` is kept."""
    t = load_target(target) if isinstance(target, str) else target
    cfg = config_from_target(t)
    w = np.asarray(weight)
    if w.ndim != 2 or w.dtype != np.int8 or min(w.shape) < 1 or m < 1:
        raise ScheduleError(f"layer {layer!r}: needs an int8 (K, N) weight and M >= 1, got "
                            f"{w.dtype} {w.shape} and M={m}")
    if not 0 <= shift < 32:
        raise ScheduleError(f"layer {layer!r}: shift {shift} is outside 0..31")
    shape = DenseShape(m, w.shape[0], w.shape[1])
    if tiles is not None:
        return _compile(w, shape, shift, t, cfg, tiles, vthreads, layer)
    try:
        candidates = candidate_tiles(shape, cfg, vthreads, CANDIDATES)
    except ScheduleError as exc:
        raise ScheduleError(f"layer {layer!r}: {exc}") from None
    best: tuple[int, CompiledDense] | None = None
    problems = []
    for cand in candidates:  # the analytic ranking is rough: keep the best modelled program
        try:
            done = _compile(w, shape, shift, t, cfg, cand, vthreads, layer)
        except ScheduleError as exc:
            problems.append(str(exc))
            continue
        cycles = estimate_cycles(done.program)
        if best is None or cycles < best[0]:
            best = (cycles, done)
    if best is None:
        raise ScheduleError("; ".join(problems))
    return best[1]


def _compile(w: np.ndarray, shape: DenseShape, shift: int, t: Target, cfg: VTAConfig,
             tiles: Tiles, vthreads: int, layer: str) -> CompiledDense:
    try:
        sch = dense_schedule(shape, shift, t, tiles, vthreads)
    except ScheduleError as exc:
        raise ScheduleError(f"layer {layer!r}: {exc}") from None
    func = lower_dense(sch)
    mb, kb, nb = blocks(shape, cfg)
    b = ProgramBuilder(cfg)
    regions = {"data": b.alloc("data", (mb, kb, cfg.batch, cfg.block_in), "int8"),
               "weight": b.data("weight", pack_weight(w, cfg)),
               "out": b.alloc("out", (mb, nb, cfg.batch, cfg.block_out), "int8")}
    em = emit_instructions(func, t, regions, layer)
    b.load_uops(b.uops("uops", em.kernel), sram_base=0)
    head = b.insns.pop()
    for insn in insert_tokens([head, *em.insns], [[], *em.uops]):
        b.emit(insn)
    b.finish()
    prog = b.build()
    report = check_program(prog)
    if not report.ok:
        raise ScheduleError(f"layer {layer!r}: the emitted program fails the static check "
                            f"(tiles {tiles}, {vthreads} virtual threads): "
                            + "; ".join(report.errors))
    return CompiledDense(layer, shape, shift, tiles, vthreads, prog,
                         func, em.rows_used)
