"""What a tiling's program will cost, predicted without building it: ``predict``.

The compiler's default tile search (:func:`toolchain.vta.compile.compile_dense`,
``compile_conv2d``) ranks the programs it builds by
:func:`~toolchain.vta.timing.program_cost` (the cycle model plus ``INSN_CYCLES`` an
instruction). Building one — schedule, lowering, emission, tokens — costs tens of
milliseconds of Python, so it cannot build every point of a layer's tiling space
(:mod:`toolchain.vta.tiling`: up to ~900). This module predicts the same cost from the
point alone, by laying out the instruction stream the emitter writes for it as a list of
abstract instructions and timing them as :func:`~toolchain.vta.timing.estimate_cycles`
does; the search ranks the whole space by the prediction and builds only a short list.

The stream of a tiling (what :mod:`toolchain.vta.codegen` emits; ``T`` tiles in ``T/vt``
rounds of ``vt`` virtual threads, ``S`` reduction steps a tile):

* a round: each thread's accumulator reset (a GEMM with ``reset``; a convolution with
  one input-channel block resets just before each thread's GEMM); per step, each
  thread's weight load (none when the weights are resident: one load before everything)
  and its input load(s) — one for a GEMM, one per input-channel block for a convolution
  (one 2-D load of them all where nothing is padded and a block's window is one image
  row) — then each thread's GEMM; then each thread's epilogue (ALU instructions) and its
  store(s) (byte planes: store, then shift and store per further plane);
* the epilogue by the layer's output: ``int8`` three immediate ALU ops (shift, clip,
  clip) and one store; ``int32xP`` ``P - 1`` shifts and ``P`` stores (byte planes);
  ``requant`` the requantization of :mod:`toolchain.vta.requant` (modelled as five ALU
  ops a tile, two of them with a tensor operand, and one store: its exact count depends on
  the constants).

Each abstract instruction waits for its engine (load, compute, store: in order) and for
what it depends on — a GEMM for its thread's loads of the step, a load for its thread's
previous GEMM (the thread's buffer is reused), a reset for its thread's previous store, a
store for its thread's epilogue —, the dependencies the emitted tokens enforce. Durations
are :func:`~toolchain.vta.timing.duration`'s. The prediction is not the judge: the
short list is built and ranked by the built programs' ``program_cost`` (validated on every
layer of the zoo's accelerator models: ``benchmarks/vta_search.py``).

Example::

    >>> import numpy as np
    >>> from toolchain.vta.compile import compile_dense
    >>> from toolchain.vta.config import VTAConfig
    >>> from toolchain.vta.schedule import DenseShape, Tiles
    >>> from toolchain.vta.timing import program_cost
    >>> p = predict(DenseShape(64, 128, 64), VTAConfig(), "int8", Tiles(16, 2, 8, "n"), 2)
    >>> p
    Prediction(insns=66, cycles=4508)
    >>> w = np.zeros((128, 64), np.int8)
    >>> built = compile_dense(w, 64, 8, tiles=Tiles(16, 2, 8, "n"), vthreads=2).program
    >>> len(built.insns), program_cost(built) == p.cost
    (66, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from toolchain.vta.config import VTAConfig
from toolchain.vta.schedule import (
    ConvShape,
    ConvTiles,
    DenseShape,
    Tiles,
    blocks,
    conv_blocks,
    conv_rows,
)
from toolchain.vta.timing import INSN_CYCLES, STARTUP

__all__ = ["Prediction", "predict", "shortlist"]


@dataclass(frozen=True)
class Prediction:
    """The predicted program of one tiling: instructions, modelled cycles and
    ``cost`` = cycles + ``INSN_CYCLES`` an instruction (what
    :func:`~toolchain.vta.timing.program_cost` gives the built program)."""

    insns: int
    cycles: int

    @property
    def cost(self) -> int:
        return self.cycles + INSN_CYCLES * self.insns


@dataclass(frozen=True)
class _Layout:
    """The numbers the stream of a tiling is made of (see the module docstring)."""

    tiles: int          # T
    steps: int          # S: reduction steps a tile
    vthreads: int
    inp_loads: int      # input loads a thread's step
    inp_bytes: int      # bytes of each
    wgt_bytes: int      # bytes of a thread's weight load a step (0: resident)
    whole_wgt_bytes: int  # the resident weights' one load (0: not resident)
    gemm_steps: int     # micro-op steps of a thread's GEMM a step
    acc_rows: int       # accumulator rows of a tile
    paired: bool        # a reset or immediate ALU op is one micro-op: two rows a cycle
    late_reset: bool    # each thread's reset just before its GEMM (one input block)


def _layout(shape: DenseShape | ConvShape, cfg: VTAConfig, tiles: Tiles | ConvTiles,
            vthreads: int) -> _Layout:
    if isinstance(shape, DenseShape):
        assert isinstance(tiles, Tiles)
        mb, kb, nb = blocks(shape, cfg)
        t = tiles
        count, steps = (mb // t.tm) * (nb // t.tn), kb // t.tk
        inp_loads, inp = 1, t.tm * t.tk * cfg.inp_row_bytes
        wgt, whole = t.tn * t.tk, nb * kb
        gemm, acc = t.tm * t.tn * t.tk, t.tm * t.tn
        paired = True                    # the tile's rows and columns are the two loops
        late = False
    else:
        assert isinstance(tiles, ConvTiles)
        cb, ob = conv_blocks(shape, cfg)
        oh, ow = shape.out_hw
        t = tiles
        count, steps = (oh // t.toh) * (ob // t.toc), cb // t.tic
        _, _, acc = conv_rows(shape, ConvTiles(t.toh, t.toc, t.tic), cfg)
        # a load reads the tile's window: its rows and the columns the taps reach; one
        # per input-channel block, or one 2-D load of them all where nothing is padded
        # and each block's window is one image row (blocks x columns)
        rows, cols = (t.toh - 1) * shape.s + shape.k, (ow - 1) * shape.s + shape.k
        window = rows * cols * cfg.inp_row_bytes
        if shape.pad == 0 and rows == 1:
            inp_loads, inp = 1, t.tic * window
        else:
            inp_loads, inp = t.tic, window
        wgt, whole = t.toc * t.tic * shape.k ** 2, ob * cb * shape.k ** 2
        gemm = t.toh * ow * t.toc * t.tic * shape.k ** 2
        paired = t.toc == 1              # else a micro-op per output-channel block
        late = cb == 1                   # tiles computed at the thread loop (docs/vta.md)
    res = tiles.resident
    return _Layout(count, steps, vthreads, inp_loads, inp,
                   0 if res else wgt * cfg.wgt_row_bytes,
                   whole * cfg.wgt_row_bytes if res else 0, gemm, acc, paired, late)


def _epilogue(tag: str) -> tuple[int, int, int]:
    """(immediate ALU ops, tensor ALU ops, stores) a tile for an epilogue tag."""
    if tag.startswith("int32x"):
        planes = int(tag[len("int32x"):])
        return planes - 1, 0, planes
    if tag == "requant":
        return 3, 2, 1
    return 3, 0, 1


def predict(shape: DenseShape | ConvShape, cfg: VTAConfig, epilogue: str,
            tiles: Tiles | ConvTiles, vthreads: int) -> Prediction:
    """The predicted instructions and cycles of ``tiles`` with ``vthreads`` threads for a
    layer whose output is ``epilogue`` (``int8``, ``int32xP``, ``requant``: the tags of
    the tiling spaces' workloads); see the module docstring."""
    lay = _layout(shape, cfg, tiles, vthreads)
    return Prediction(_insns(lay, epilogue), _cycles(lay, cfg, *_epilogue(epilogue)))


def _insns(lay: _Layout, epilogue: str) -> int:
    """The stream's instructions: the micro-op load and FINISH, the resident weights'
    load, per tile its reset, epilogue and stores and per step its loads and GEMM."""
    per_step = 1 + lay.inp_loads + (1 if lay.wgt_bytes else 0)
    return 2 + (1 if lay.whole_wgt_bytes else 0) \
        + lay.tiles * (1 + sum(_epilogue(epilogue)) + lay.steps * per_step)


def _cycles(lay: _Layout, cfg: VTAConfig, imm: int, tensor: int, stores: int) -> int:
    """The stream's modelled end (engines in order, each thread's dependencies)."""
    def dma(nbytes: int) -> int:
        return cfg.latency_cycles + math.ceil(nbytes / cfg.bytes_per_cycle)

    inp_d, wgt_d = dma(lay.inp_bytes), dma(lay.wgt_bytes)
    # a reset or an immediate ALU op: the RTL pairs rows where it is one micro-op
    half = STARTUP + (-(-lay.acc_rows // 2) if lay.paired else lay.acc_rows)
    alu_d = imm * half + tensor * (STARTUP + lay.acc_rows)
    gemm_d = STARTUP + lay.gemm_steps
    store_d = math.ceil(lay.acc_rows * cfg.out_row_bytes / cfg.bytes_per_cycle)
    planes = stores if stores > 1 else 0
    if not planes:
        store_d *= stores
    vt = lay.vthreads
    load = dma(lay.whole_wgt_bytes) if lay.whole_wgt_bytes else 0
    comp = store = 0
    gemm_end, store_end = [0] * vt, [0] * vt
    for _ in range(lay.tiles // vt):
        for t in range(0 if lay.late_reset else vt):   # a reset waits for the last store
            comp = max(comp, store_end[t]) + half
        for _ in range(lay.steps):
            ready = []
            for t in range(vt):                   # a thread's loads wait for its GEMM
                load = max(load, gemm_end[t])
                if lay.wgt_bytes:
                    load += wgt_d
                load += lay.inp_loads * inp_d
                ready.append(load)
            for t in range(vt):
                if lay.late_reset:
                    comp = max(comp, store_end[t]) + half
                comp = max(comp, ready[t]) + gemm_d
                gemm_end[t] = comp
        if planes:     # int32 planes: store, then (shift, store) per further plane
            for t in range(vt):
                store = max(store, comp) + store_d
                for _ in range(planes - 1):
                    comp = max(comp, store) + half
                    store = max(store, comp) + store_d
                store_end[t] = store
            continue
        alu_end = []
        for _ in range(vt):
            comp += alu_d
            alu_end.append(comp)
        for t in range(vt):
            store = max(store, alu_end[t]) + store_d
            store_end[t] = store
    return max(load, comp, store)


def shortlist(shape: DenseShape | ConvShape, cfg: VTAConfig, epilogue: str,
              points: Iterable[tuple[Tiles | ConvTiles, int]], count: int,
              slack: float | None = None) -> list[tuple[Tiles | ConvTiles, int]]:
    """The ``count`` points with the lowest predicted cost, best first (ties: the order
    given); with ``slack``, only those predicted within ``1 + slack`` times the best. A
    point's instructions and its GEMM work bound its cost from below without the timing,
    so points that cannot make the list are not timed.

    Example::

        >>> from toolchain.vta.config import VTAConfig
        >>> from toolchain.vta.schedule import DenseShape, Tiles
        >>> pts = [(Tiles(32, 4, 4), 2), (Tiles(2, 1, 1), 2), (Tiles(64, 4, 8), 1)]
        >>> [t for t, _ in shortlist(DenseShape(64, 128, 64), VTAConfig(), "int8", pts, 2)]
        [Tiles(tm=32, tn=4, tk=4, split='m', resident=False), Tiles(tm=64, tn=4, tk=8, \
split='m', resident=False)]
    """
    bound = []
    for i, (tl, vt) in enumerate(points):
        lay = _layout(shape, cfg, tl, vt)
        work = lay.tiles * lay.steps * (STARTUP + lay.gemm_steps)  # the compute engine's
        bound.append((INSN_CYCLES * _insns(lay, epilogue) + work, i, tl, vt))
    bound.sort(key=lambda b: (b[0], b[1]))
    best: list[tuple[int, int, Tiles | ConvTiles, int]] = []
    for low, i, tl, vt in bound:
        if len(best) >= count and low > best[count - 1][0]:
            break
        best.append((predict(shape, cfg, epilogue, tl, vt).cost, i, tl, vt))
        best.sort(key=lambda b: (b[0], b[1]))
    best = best[:count]
    if slack is not None and best:
        best = [b for b in best if b[0] <= best[0][0] * (1 + slack)]
    return [(tl, vt) for _, _, tl, vt in best]
