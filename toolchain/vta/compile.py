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

import warnings
from dataclasses import astuple, dataclass, field, is_dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from toolchain.autotune.apply import declare, steered
from toolchain.autotune.space import Space
from toolchain.errors import KilnWarning, ScheduleError
from toolchain.inprocess import ByTarget, Unkeyable, value_key
from toolchain.target import Target, load_target
from toolchain.tir import ir
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.checker import check_program
from toolchain.vta.codegen import emit_instructions
from toolchain.vta.config import VTAConfig, config_from_target
from toolchain.vta.deps import insert_tokens
from toolchain.vta.estimate import shortlist
from toolchain.vta.program import Program
from toolchain.vta.requant import (
    Constants,
    RequantPlan,
    build_constants,
    load_constants,
    requant_epilogue,
)
from toolchain.vta.schedule import (
    ConvShape,
    ConvTiles,
    DenseShape,
    Forks,
    Tiles,
    blocks,
    candidate_conv_tiles,
    candidate_tiles,
    conv2d_schedule,
    conv_blocks,
    dense_schedule,
    lower_dense,
)
from toolchain.vta.tiling import conv_space, dense_space, point_of, tiles_of
from toolchain.vta.timing import program_cost
from toolchain.vta.widen import join_planes, planes_needed, widen_epilogue

#: tilings compiled and compared on the cycle model when the caller gives none: the
#: points of the layer's whole tiling space with the lowest predicted cost
#: (:func:`toolchain.vta.estimate.shortlist`)
CANDIDATES = 8
#: ... of those, the ones predicted within this fraction of the best (the prediction's
#: instruction counts are exact and its cycles close: farther points never won on the
#: zoo's accelerator layers, ``benchmarks/vta_search.py``)
SLACK = 0.1
#: the virtual threads a layer gets where its tiles are given without a thread count
VTHREADS = 2
#: what a layer hands back: requantised int8 (``clip(acc >> shift)``), or the raw int32
#: accumulators as byte planes for the host to requantise (:mod:`toolchain.vta.widen`)
OUTPUTS = ("int8", "int32")

__all__ = ["CompiledConv2d", "CompiledDense", "ConvShape", "ConvTiles", "DenseShape", "Tiles",
           "compile_conv2d", "compile_conv2d_im2col", "compile_dense", "im2col",
           "pack_filters", "pack_image", "pack_input", "pack_weight"]


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
    #: ``"int8"`` (requantised) or ``"int32"`` (accumulators, see :data:`OUTPUTS`)
    output: str = "int8"
    #: the convolution this GEMM computes as im2col rows x flattened filters
    #: (:func:`compile_conv2d_im2col`), or None for a dense layer
    conv: ConvShape | None = None
    #: the requantization the program runs (bias, rounding shift, clamp: int8 out), or
    #: None (``clip(acc >> shift)``, or the accumulators)
    requant: RequantPlan | None = None
    #: the layer's tiling space (:mod:`toolchain.vta.tiling`; its default: the search's
    #: choice), or None where the tiles were given or a trace decided them
    space: Space | None = field(default=None, repr=False, compare=False)
    #: the call that compiled the layer (picklable): called inside
    #: :func:`~toolchain.autotune.apply.forcing` it builds another point of ``space``
    recompile: Any = field(default=None, repr=False, compare=False)

    @property
    def point(self) -> dict[str, Any]:
        """The tiling as a point of its space (:func:`~toolchain.vta.tiling.point_of`)."""
        return point_of(self.tiles, self.vthreads)

    @property
    def planes(self) -> int:
        """Byte planes of the ``int32`` output (fewer than 4 where the weights bound the
        accumulators: :func:`~toolchain.vta.widen.planes_needed`); 1 for ``int8``."""
        return self.program.regions["out"].shape[0] if self.output == "int32" else 1

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
        """The ``(M, N)`` result (int8, or int32 accumulators) from a DRAM image after a
        run."""
        out = _read_out(self.program, dram, self.output)       # (MB, NB, BATCH, BO)
        mb, nb, batch, bo = out.shape
        full = out.transpose(0, 2, 1, 3).reshape(mb * batch, nb * bo)
        return full[: self.shape.m, : self.shape.n]


def compile_dense(weight: np.ndarray, m: int, shift: int, target: Target | str = "vta", *,
                  tiles: Tiles | None = None, vthreads: int | None = None,
                  layer: str = "dense", output: str = "int8",
                  requant: RequantPlan | None = None) -> CompiledDense:
    """Compile ``out[M, N] = clip((x[M, K] @ weight[K, N]) >> shift, -128, 127)`` (int8 in
    and out, int32 accumulation) into one accelerator program; see the module docstring.
    ``output="int32"``: the raw accumulators instead (``shift`` is then unused).
    ``requant``: the layer's own requantization instead of the shift (bias, rounding
    shift per channel, zero point, clamp: :mod:`toolchain.vta.requant`; ``shift`` unused).

    Without ``tiles``, every point of the layer's tiling space (:func:`~toolchain.vta.
    tiling.dense_space`; only those with ``vthreads`` threads where it is given) is ranked
    by its predicted :func:`~toolchain.vta.timing.program_cost`
    (:func:`~toolchain.vta.estimate.shortlist`, nothing built), the :data:`CANDIDATES`
    best (those predicted within :data:`SLACK` of the best) are compiled and the one whose
    program has the lowest ``program_cost`` (modelled cycles plus a per-instruction cost)
    is kept, unless a tuning trace decides the tiling (:mod:`toolchain.vta.tiling`).
    Given ``tiles`` without ``vthreads``: 2 threads."""
    done = _dense(weight, m, shift, target, tiles, vthreads, layer, output, requant, None)
    done.recompile = partial(compile_dense, weight, m, shift, target, tiles=tiles,
                             vthreads=vthreads, layer=layer, output=output, requant=requant)
    return done


def _dense(weight: np.ndarray, m: int, shift: int, target: Target | str, tiles: Tiles | None,
           vthreads: int | None, layer: str, output: str, requant: RequantPlan | None,
           conv: ConvShape | None) -> CompiledDense:
    t = load_target(target) if isinstance(target, str) else target
    cfg = config_from_target(t)
    w = np.asarray(weight)
    if w.ndim != 2 or w.dtype != np.int8 or min(w.shape) < 1 or m < 1:
        raise ScheduleError(f"layer {layer!r}: needs an int8 (K, N) weight and M >= 1, got "
                            f"{w.dtype} {w.shape} and M={m}")
    shift = _check_output(output, 0 if requant is not None else shift, layer, requant)
    shape = DenseShape(m, w.shape[0], w.shape[1])
    mb, kb, nb = blocks(shape, cfg)
    arrays = {"data": np.zeros((mb, kb, cfg.batch, cfg.block_in), np.int8),
              "weight": pack_weight(w, cfg),
              "out": _out_array((mb, nb, cfg.batch, cfg.block_out), output,
                                planes_needed(np.abs(w.astype(np.int64)).sum(axis=0)))}
    epi, tt = None, t
    if requant is not None:
        e = np.arange(mb * nb)
        lanes = (e // nb)[:, None] * cfg.batch + np.arange(cfg.batch)[None, :]
        if conv is None:
            pos = np.where(lanes < m, 0, -1)
        else:
            pos = np.where(lanes < m, lanes, -1)
        epi, tt = _epilogue(requant, cfg, t, e % nb, pos, layer)

    forks = Forks()  # the schedule steps the candidate tilings share

    def build(tl: Tiles, vt: int) -> CompiledDense:
        func = _lowered(dense_schedule, forks, shape, shift, tt, tl, vt, layer)
        prog, rows = _program(func, tt, cfg, arrays, layer, f"tiles {tl}, {vt} threads",
                              output, epi)
        return CompiledDense(layer, shape, shift, tl, vt, prog, func, rows, output,
                             conv, requant)

    tcfg = config_from_target(tt)
    tag = _epilogue_tag(output, requant, arrays["out"])
    return _best(build, tiles, vthreads,
                 lambda vt: candidate_tiles(shape, tcfg, vt, 1),
                 lambda d: dense_space(shape, tcfg, tag, d),
                 partial(shortlist, shape, tcfg, tag), layer,
                 (t, ("dense", w, m, shift, layer, output, requant, conv)))


@dataclass(frozen=True)
class _Epilogue:
    """A requantising epilogue: the plan, its constant rows and the sign tile's offset."""

    plan: RequantPlan
    consts: Constants
    sign_offset: int


def _epilogue(plan: RequantPlan, cfg: VTAConfig, t: Target, block: np.ndarray,
              position: np.ndarray, layer: str) -> tuple[_Epilogue, Target]:
    """The epilogue's constants and the target the layer is scheduled for: its ACC
    buffer less the constant rows, halved for the sign tile where the plan needs one."""
    consts = build_constants(plan, cfg, block, position)
    free = cfg.acc_depth - len(consts.rows)
    tile_rows = free // 2 if plan.sign else free
    if tile_rows < 1:
        raise ScheduleError(f"layer {layer!r}: {len(consts.rows)} constant rows of the "
                            f"requantization leave no ACC rows for the tiles")
    consts.base = 2 * tile_rows if plan.sign else tile_rows
    buffers = {**t.buffers, "accumulator": tile_rows * cfg.acc_row_bytes}
    return _Epilogue(plan, consts, tile_rows), replace(t, buffers=buffers)


def _check_shift(shift: int, layer: str) -> None:
    if not 0 <= shift < 32:
        raise ScheduleError(f"layer {layer!r}: shift {shift} is outside 0..31")


def _check_output(output: str, shift: int, layer: str,
                  requant: RequantPlan | None = None) -> int:
    """The shift the schedule uses: ``shift`` for int8 results, 0 for accumulators."""
    if output not in OUTPUTS:
        raise ScheduleError(f"layer {layer!r}: output {output!r} must be one of "
                            f"{', '.join(OUTPUTS)}")
    if requant is not None and output != "int8":
        raise ScheduleError(f"layer {layer!r}: a requantising epilogue gives int8, not "
                            f"{output}")
    if output == "int32":
        return 0
    _check_shift(shift, layer)
    return shift


def _out_array(shape: tuple[int, ...], output: str, planes: int) -> np.ndarray:
    """The ``out`` region: one int8 tile image, or ``planes`` byte planes of it."""
    return np.zeros(((planes,) if output == "int32" else ()) + shape, np.int8)


def _read_out(program: Program, dram: np.ndarray, output: str) -> np.ndarray:
    out = program.read("out", dram)
    return join_planes(out) if output == "int32" else out


def _scheduled(make, shape, shift: int, t: Target, tiles, vthreads: int, layer: str):
    try:
        return make(shape, shift, t, tiles, vthreads)
    except ScheduleError as exc:
        raise ScheduleError(f"layer {layer!r}: {exc}") from None


#: the lowered functions of the tilings built, by the schedule's inputs (the schedule, the
#: layer's shape and shift, the tiles and threads) and the target: a function of those
#: alone, not of the weights or the layer's name, so layers of one shape — a model's
#: repeated blocks, a layer compiled again with another output or other weights — lower a
#: tiling once in a process (their programs differ in the DRAM image alone); the 128 most
#: recently used are kept
LOWERED = ByTarget(limit=128)


def _lowered(make, forks: Forks, shape, shift: int, t: Target, tiles, vthreads: int,
             layer: str) -> ir.PrimFunc:
    """``lower_dense`` of ``make(shape, shift, t, tiles, vthreads, forks=forks)``, or the
    function lowered for equal inputs before (:data:`LOWERED`)."""
    key = (make.__name__, shape, shift, tiles, vthreads)
    func = LOWERED.get(key, t)
    if func is None:
        func = lower_dense(_scheduled(partial(make, forks=forks), shape, shift, t, tiles,
                                      vthreads, layer))
        LOWERED.put(key, t, func)
    return func


def _epilogue_tag(output: str, requant: RequantPlan | None, out: np.ndarray) -> str:
    """What a layer's program ends with, for its workload key: ``int8`` (shift and clip),
    ``requant`` (:mod:`~toolchain.vta.requant`) or ``int32xP`` (``P`` byte planes)."""
    if output == "int32":
        return f"int32x{out.shape[0]}"
    return "requant" if requant is not None else "int8"


#: the tiles each default search chose (:func:`_best`), by the layer's exact inputs (its
#: compile function's arguments: weights and requantization by digest) and target: the
#: search is a function of those alone, so a layer compiled again in this process builds
#: the point it chose before, once, not its whole short list
CHOSEN = ByTarget(limit=1024)


def _inputs_key(*values: Any) -> Any:
    """:func:`~toolchain.inprocess.value_key` of a layer's inputs (dataclasses such as
    :class:`ConvShape` and :class:`~toolchain.vta.requant.RequantPlan` field by field), or
    None where one cannot be keyed exactly (then nothing is remembered)."""
    try:
        return value_key([astuple(v) if is_dataclass(v) and not isinstance(v, type) else v
                          for v in values])
    except Unkeyable:
        return None


def _best(build, tiles, vthreads: int | None, fits, space, rank, layer: str,
          inputs: tuple[Target, tuple]):
    """``build(tiles, vthreads)``; without tiles the point a tuning trace gives the
    layer's space (``space(default)``), else the search: ``rank(points, count, slack)``
    short-lists the space's valid points (those with ``vthreads`` threads where it is
    given) by their predicted cost, each is built and the program with the lowest
    :func:`~toolchain.vta.timing.program_cost` is kept (the space's default, declared with
    it). ``fits(vthreads)`` raises the analytic search's error where no point is valid.
    ``inputs``: the target and the compile function's other arguments; a search made for
    equal ones before in this process is not made again (:data:`CHOSEN`)."""
    if tiles is not None:
        return build(tiles, VTHREADS if vthreads is None else vthreads)
    probe = space(None)
    got = steered(probe)
    if got is not None:
        try:
            done = build(*tiles_of(probe, got.point))
        except ScheduleError as exc:
            if got.forced:  # the tuner's point: a failed trial
                raise
            warnings.warn(f"tuning record not applied (the default search is used): {exc}",
                          KilnWarning, stacklevel=3)
        else:
            got.commit()
            return done
    target, args = inputs
    key = _inputs_key(probe.workload, vthreads, *args)
    point = CHOSEN.get(key, target)
    if point is not None:
        done = build(*point)
    else:
        done = _search(build, probe, vthreads, fits, rank, layer)
        CHOSEN.put(key, target, (done.tiles, done.vthreads))
    done.space = space((done.tiles, done.vthreads))
    declare(done.space)
    return done


def _search(build, probe: Space, vthreads: int | None, fits, rank, layer: str):
    """The layer :func:`_best`'s search keeps: the cheapest short-listed point of
    ``probe``'s space that builds (the next points where none does)."""
    points = [tiles_of(probe, p) for p in probe.valid_points()]
    points = [(t, vt) for t, vt in points if vthreads is None or vt == vthreads]
    if not points:
        try:
            fits(VTHREADS if vthreads is None else vthreads)
        except ScheduleError as exc:
            raise ScheduleError(f"layer {layer!r}: {exc}") from None
        raise ScheduleError(f"layer {layer!r}: no point of {probe.workload} is valid")
    problems: list[str] = []
    short = rank(points, CANDIDATES, SLACK)
    best = _cheapest(build, short, problems, stop_at_first=False)
    if best is None:  # the schedule refused every short-listed point: the next ones
        rest = [p for p in rank(points, len(points), None) if p not in short]
        best = _cheapest(build, rest, problems, stop_at_first=True)
    if best is None:
        raise ScheduleError("; ".join(list(dict.fromkeys(problems))[:CANDIDATES]))
    return best[1]

def _cheapest(build, points, problems: list[str], stop_at_first: bool):
    """``(program_cost, layer)`` of the cheapest of ``points`` that builds (the first one
    with ``stop_at_first``), or None; each refusal's message goes to ``problems``."""
    best = None
    for cand, vt in points:
        try:
            done = build(cand, vt)
        except ScheduleError as exc:
            problems.append(str(exc))
            continue
        cycles = program_cost(done.program)
        if best is None or cycles < best[0]:
            best = (cycles, done)
        if stop_at_first:
            break
    return best


def _program(func: ir.PrimFunc, t: Target, cfg: VTAConfig, arrays: dict[str, np.ndarray],
             layer: str, what: str, output: str = "int8", epi: _Epilogue | None = None
             ) -> tuple[Program, dict[str, int]]:
    """Emit, add tokens, check: the program of a lowered layer. ``arrays`` give the DRAM
    regions of the parameters by name (constants, e.g. packed weights, or zeros);
    ``output="int32"`` widens the epilogue to byte planes (:func:`widen_epilogue`); ``epi``
    replaces it by a requantization (:func:`~toolchain.vta.requant.requant_epilogue`)."""
    b = ProgramBuilder(cfg)
    regions = {name: b.data(name, a) for name, a in arrays.items()}
    em = emit_instructions(func, t, regions, layer)
    insns, uops, kernel = list(em.insns), list(em.uops), list(em.kernel)
    head: list = []
    if output == "int32":
        plane = arrays["out"][0].nbytes // (cfg.batch * cfg.block_out)
        insns, uops = widen_epilogue(insns, uops, plane, layer, arrays["out"].shape[0])
    elif epi is not None:
        out_elem = regions["out"].elem(cfg.out_row_bytes)
        insns, uops, kernel = requant_epilogue(insns, uops, kernel, epi.plan, epi.consts,
                                               out_elem, epi.sign_offset, layer)
        consts = b.data("requant", epi.consts.rows)
        head.append(load_constants(consts.elem(cfg.acc_row_bytes), epi.consts))
    b.load_uops(b.uops("uops", kernel), sram_base=0)
    head.insert(0, b.insns.pop())
    for insn in insert_tokens([*head, *insns], [[] for _ in head] + uops):
        b.emit(insn)
    b.finish()
    prog = b.build()
    report = check_program(prog)
    if not report.ok:
        raise ScheduleError(f"layer {layer!r}: the emitted program fails the static check "
                            f"({what}): " + "; ".join(report.errors))
    return prog, em.rows_used


# ---- convolution -------------------------------------------------------------------------
def pack_image(x: np.ndarray, cfg: VTAConfig) -> np.ndarray:
    """``(IC, H, W)`` int8 -> ``(1, IC/BLOCK_IN, H, W, BATCH, BLOCK_IN)`` (image 0 of the
    batch; channels zero padded)."""
    ic, h, w = x.shape
    cb = -(-ic // cfg.block_in)
    p = np.zeros((cb * cfg.block_in, h, w), np.int8)
    p[:ic] = x
    out = np.zeros((1, cb, h, w, cfg.batch, cfg.block_in), np.int8)
    out[0, :, :, :, 0, :] = p.reshape(cb, cfg.block_in, h, w).transpose(0, 2, 3, 1)
    return out


def pack_filters(w: np.ndarray, cfg: VTAConfig) -> np.ndarray:
    """``(OC, IC, K, K)`` int8 -> ``(OC/BLOCK_OUT, IC/BLOCK_IN, K, K, BLOCK_OUT, BLOCK_IN)``."""
    oc, ic, kh, kw = w.shape
    ob, cb = -(-oc // cfg.block_out), -(-ic // cfg.block_in)
    p = np.zeros((ob * cfg.block_out, cb * cfg.block_in, kh, kw), np.int8)
    p[:oc, :ic] = w
    return np.ascontiguousarray(p.reshape(ob, cfg.block_out, cb, cfg.block_in, kh, kw)
                                .transpose(0, 2, 4, 5, 1, 3))


@dataclass
class CompiledConv2d:
    """A convolution layer compiled to one accelerator program (as :class:`CompiledDense`;
    input ``(IC, H, W)`` int8, output ``(OC, OH, OW)`` int8)."""

    layer: str
    shape: ConvShape
    shift: int
    tiles: ConvTiles
    vthreads: int
    program: Program
    func: ir.PrimFunc
    rows_used: dict[str, int]
    output: str = "int8"
    requant: RequantPlan | None = None
    space: Space | None = field(default=None, repr=False, compare=False)
    recompile: Any = field(default=None, repr=False, compare=False)

    @property
    def point(self) -> dict[str, Any]:
        """The tiling as a point of its space (:func:`~toolchain.vta.tiling.point_of`)."""
        return point_of(self.tiles, self.vthreads)

    @property
    def planes(self) -> int:
        """Byte planes of the ``int32`` output (fewer than 4 where the weights bound the
        accumulators: :func:`~toolchain.vta.widen.planes_needed`); 1 for ``int8``."""
        return self.program.regions["out"].shape[0] if self.output == "int32" else 1

    def image(self, x: np.ndarray) -> np.ndarray:
        """The program's DRAM image with the input packed into ``data``."""
        s = self.shape
        if x.shape != (s.ic, s.h, s.w) or x.dtype != np.int8:
            raise ScheduleError(f"layer {self.layer!r}: input must be int8 of shape "
                                f"({s.ic}, {s.h}, {s.w}), got {x.dtype} {x.shape}")
        dram = self.program.dram.copy()
        region = self.program.regions["data"]
        blob = pack_image(x, self.program.config).tobytes()
        dram[region.offset:region.offset + len(blob)] = np.frombuffer(blob, np.uint8)
        return dram

    def read_output(self, dram: np.ndarray) -> np.ndarray:
        """The ``(OC, OH, OW)`` result (int8, or int32 accumulators) from a DRAM image
        after a run."""
        out = _read_out(self.program, dram, self.output)[0, :, :, :, 0, :]  # (OB, OH, OW, BO)
        ob, oh, ow, bo = out.shape
        return out.transpose(0, 3, 1, 2).reshape(ob * bo, oh, ow)[: self.shape.oc]


def compile_conv2d(weight: np.ndarray, h: int, w: int, shift: int,
                   target: Target | str = "vta", *, stride: int = 1, pad: int = 0,
                   tiles: ConvTiles | None = None, vthreads: int | None = None,
                   layer: str = "conv", output: str = "int8",
                   requant: RequantPlan | None = None) -> CompiledConv2d:
    """Compile ``out = clip(conv2d(x, weight, stride, pad) >> shift, -128, 127)`` for one
    ``(IC, H, W)`` int8 image and ``(OC, IC, K, K)`` int8 filters into one accelerator
    program (tiles as :func:`compile_dense`; the zero padding is done by the input DMA).
    ``output="int32"``: the raw accumulators instead (``shift`` is then unused);
    ``requant``: the layer's requantization instead (as :func:`compile_dense`).

    Example::

        >>> from toolchain.vta.fsim import run_fsim
        >>> rng = np.random.default_rng(1)
        >>> wt = rng.integers(-128, 128, (20, 24, 3, 3), dtype=np.int8)
        >>> conv = compile_conv2d(wt, 6, 6, shift=10, pad=1, layer="conv1")
        >>> x = rng.integers(-128, 128, (24, 6, 6), dtype=np.int8)
        >>> conv.read_output(run_fsim(conv.program, conv.image(x), tokens=True).dram).shape
        (20, 6, 6)
    """
    t = load_target(target) if isinstance(target, str) else target
    cfg = config_from_target(t)
    wt = np.asarray(weight)
    if wt.ndim != 4 or wt.dtype != np.int8 or wt.shape[2] != wt.shape[3] or min(wt.shape) < 1:
        raise ScheduleError(f"layer {layer!r}: needs int8 (OC, IC, K, K) filters, got "
                            f"{wt.dtype} {wt.shape}")
    shift = _check_output(output, 0 if requant is not None else shift, layer, requant)
    shape = ConvShape(h, w, wt.shape[1], wt.shape[0], wt.shape[2], stride, pad)
    oh, ow = shape.out_hw
    if stride < 1 or pad < 0 or oh < 1 or ow < 1:
        raise ScheduleError(f"layer {layer!r}: stride {stride}, pad {pad} give no output for "
                            f"a {h}x{w} image and {shape.k}x{shape.k} filters")
    cb, ob = conv_blocks(shape, cfg)
    epi, tt = None, t
    if requant is not None:
        e = np.arange(ob * oh * ow)
        pos = np.full((len(e), cfg.batch), -1)
        pos[:, 0] = e % (oh * ow)
        epi, tt = _epilogue(requant, cfg, t, e // (oh * ow), pos, layer)
    arrays = {"data": np.zeros((1, cb, h, w, cfg.batch, cfg.block_in), np.int8),
              "weight": pack_filters(wt, cfg),
              "out": _out_array((1, ob, oh, ow, cfg.batch, cfg.block_out), output,
                                planes_needed(np.abs(wt.astype(np.int64)).sum(axis=(1, 2, 3))))}

    forks = Forks()  # the schedule steps the candidate tilings share

    def build(tl: ConvTiles, vt: int) -> CompiledConv2d:
        func = _lowered(conv2d_schedule, forks, shape, shift, tt, tl, vt, layer)
        prog, rows = _program(func, tt, cfg, arrays, layer, f"tiles {tl}, {vt} threads",
                              output, epi)
        return CompiledConv2d(layer, shape, shift, tl, vt, prog, func, rows, output,
                              requant)

    tcfg = config_from_target(tt)
    tag = _epilogue_tag(output, requant, arrays["out"])
    done = _best(build, tiles, vthreads,
                 lambda vt: candidate_conv_tiles(shape, tcfg, vt, 1),
                 lambda d: conv_space(shape, tcfg, tag, d),
                 partial(shortlist, shape, tcfg, tag), layer,
                 (t, ("conv2d", wt, h, w, shift, stride, pad, layer, output, requant)))
    done.recompile = partial(compile_conv2d, weight, h, w, shift, target, stride=stride,
                             pad=pad, tiles=tiles, vthreads=vthreads, layer=layer,
                             output=output, requant=requant)
    return done


# ---- convolution as an im2col GEMM ----------------------------------------------------------
def im2col(x: np.ndarray, shape: ConvShape) -> np.ndarray:
    """``(IC, H, W)`` -> ``(OH*OW, IC*K*K)``: row ``p`` holds the window of output pixel
    ``p`` in the order of the flattened OIHW filters, zero where the padding is.

    Example::

        >>> im2col(np.arange(4, dtype=np.int8).reshape(1, 2, 2), ConvShape(2, 2, 1, 1, 2))
        array([[0, 1, 2, 3]], dtype=int8)
    """
    s = shape
    oh, ow = s.out_hw
    (fh, fw), (sh, sw), (pt, pl, pb, pr) = s.taps, s.strides, s.padding
    xp = np.zeros((s.ic, s.h + pt + pb, s.w + pl + pr), x.dtype)
    xp[:, pt:pt + s.h, pl:pl + s.w] = x
    cols = np.empty((oh * ow, s.ic, fh, fw), x.dtype)
    for kh in range(fh):
        for kw in range(fw):
            win = xp[:, kh:kh + (oh - 1) * sh + 1:sh, kw:kw + (ow - 1) * sw + 1:sw]
            cols[:, :, kh, kw] = win.reshape(s.ic, oh * ow).T
    return cols.reshape(oh * ow, s.ic * fh * fw)


def compile_conv2d_im2col(weight: np.ndarray, h: int, w: int, shift: int,
                          target: Target | str = "vta", *,
                          stride: int | tuple[int, int] = 1,
                          pad: int | tuple[int, int, int, int] = 0,
                          vthreads: int | None = None, layer: str = "conv",
                          output: str = "int8",
                          requant: RequantPlan | None = None) -> CompiledDense:
    """The convolution of :func:`compile_conv2d` as a GEMM of its im2col rows
    (:func:`im2col`, built by the caller: the bundle's kernel while it packs the input) by
    the flattened filters ``(IC*K*K, OC)``. It pays where the input channels fill the
    GEMM's BLOCK_IN lanes badly: an RGB 3x3 layer has K = 27, two blocks of 16, where the
    direct convolution pads each of the 9 taps' 3 channels to a block of its own. It also
    takes what the direct schedule does not: ``(OC, IC, KH, KW)`` filters with KH != KW,
    ``stride`` as (vertical, horizontal) and ``pad`` as (top, left, bottom, right) (DS-CNN's
    first layer: 10x4, stride 2, pads 4, 1, 5, 1).
    ``read_output`` gives ``(OH*OW, OC)``; ``conv`` holds the geometry.

    Example::

        >>> from toolchain.vta.fsim import run_fsim
        >>> rng = np.random.default_rng(2)
        >>> wt = rng.integers(-128, 128, (16, 3, 3, 3), dtype=np.int8)
        >>> x = rng.integers(-128, 128, (3, 8, 8), dtype=np.int8)
        >>> gemm = compile_conv2d_im2col(wt, 8, 8, 0, pad=1, output="int32")
        >>> acc = gemm.read_output(run_fsim(gemm.program, gemm.image(im2col(x, gemm.conv))).dram)
        >>> direct = compile_conv2d(wt, 8, 8, 0, pad=1, output="int32")
        >>> ref = direct.read_output(run_fsim(direct.program, direct.image(x)).dram)
        >>> bool((acc.T.reshape(16, 8, 8) == ref).all())
        True
    """
    wt = np.asarray(weight)
    if wt.ndim != 4 or wt.dtype != np.int8 or min(wt.shape) < 1:
        raise ScheduleError(f"layer {layer!r}: needs int8 (OC, IC, KH, KW) filters, got "
                            f"{wt.dtype} {wt.shape}")
    shape = _conv_shape(wt, h, w, stride, pad, layer)
    flat = np.ascontiguousarray(wt.reshape(wt.shape[0], -1).T)      # (IC*KH*KW, OC)
    oh, ow = shape.out_hw
    done = _dense(flat, oh * ow, shift, target, None, vthreads, layer, output, requant, shape)
    done.recompile = partial(compile_conv2d_im2col, weight, h, w, shift, target,
                             stride=stride, pad=pad, vthreads=vthreads, layer=layer,
                             output=output, requant=requant)
    return done


def _conv_shape(wt: np.ndarray, h: int, w: int, stride: int | tuple[int, int],
                pad: int | tuple[int, int, int, int], layer: str) -> ConvShape:
    """The geometry of filters ``wt`` on an ``h x w`` image (square fields where square),
    or a ScheduleError naming what gives no output."""
    st = (stride, stride) if isinstance(stride, int) else tuple(int(v) for v in stride)
    pd = (pad,) * 4 if isinstance(pad, int) else tuple(int(v) for v in pad)
    if len(st) != 2 or len(pd) != 4:
        raise ScheduleError(f"layer {layer!r}: stride {stride} must be 1 or 2 numbers, pad "
                            f"{pad} 1 or 4 (top, left, bottom, right)")
    kh, kw = int(wt.shape[2]), int(wt.shape[3])
    shape = ConvShape(h, w, int(wt.shape[1]), int(wt.shape[0]), kh, st[0], pd[0],
                      kw=0 if kw == kh else kw, sw=0 if st[1] == st[0] else st[1],
                      pads=None if len(set(pd)) == 1 else pd)  # type: ignore[arg-type]
    if min(st) < 1 or min(pd) < 0 or min(shape.out_hw) < 1:
        raise ScheduleError(f"layer {layer!r}: stride {stride}, pad {pad} give no output for "
                            f"a {h}x{w} image and {kh}x{kw} filters")
    return shape
