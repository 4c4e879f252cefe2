"""Tensor expression and schedule of an int8 dense layer for the accelerator.

``dense_compute`` writes the layer in the packed layouts the GEMM core wants —
activations ``(M/BATCH, K/BLOCK_IN, BATCH, BLOCK_IN)`` (NC{BATCH}n{BLOCK_IN}c for a
1x1 image), weights ``(N/BLOCK_OUT, K/BLOCK_IN, BLOCK_OUT, BLOCK_IN)``
(OI{BLOCK_OUT}o{BLOCK_IN}i) — followed by the requantisation epilogue (arithmetic shift
right, clip to int8) and the narrowing to int8. ``dense_schedule`` then:

1. tiles the output ``(M/BATCH, N/BLOCK_OUT)`` by ``(tm, tn)`` and the reduction by ``tk``
   blocks (sizes from :func:`choose_tiles`, which fits them in the target's buffers);
2. splits the outer row-tile loop by the number of virtual threads and binds it to
   ``vthread`` (each thread gets its own half of every on-chip buffer);
3. computes the accumulator and the epilogue stages per tile in scope ``vta.acc``
   (``compute_at`` + ``set_scope``), the input and weight tiles per reduction step in
   ``vta.inp`` / ``vta.wgt`` (``cache_read`` + ``compute_at``), zeroes the accumulator
   with its own block (``decompose_reduction``);
4. tensorizes every block with the target's declared intrinsics: the GEMM step, the reset,
   the ALU ops (immediates matched as scalar operands), the DMA loads and the store; the
   loops just above each tensorized block are annotated ``instruction`` — they fold into
   that instruction's loop fields, DMA sizes or micro-ops (:mod:`toolchain.vta.codegen`).

``conv2d_compute`` / ``conv2d_schedule`` do the same for a 2-D convolution in the packed
layouts NCHW{BATCH}n{BLOCK_IN}c / OIHW{BLOCK_OUT}o{BLOCK_IN}i: output-row x output-channel
tiles, the zero-padding stage as the on-chip input tile per input-channel step, the GEMM over
the tile's pixels, channels and kernel taps.

Scope and intrinsic names come from the target descriptor (the GEMM intrinsic's declared
``scopes``), never from the target's name.

Example::

    >>> from toolchain.target import load_target
    >>> t = load_target("vta")
    >>> sch = dense_schedule(DenseShape(m=16, k=64, n=64), shift=4, target=t,
    ...                      tiles=Tiles(tm=2, tn=2, tk=2))
    >>> "vta.gemm" in str(sch.mod) and "thread_binding" in str(sch.mod)
    True
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolchain import te
from toolchain.errors import ScheduleError
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.tensorize import TensorIntrin
from toolchain.tir.transform import (
    compact_buffer_allocation,
    inject_virtual_thread,
    lower_blocks,
)
from toolchain.tir.transform.inject_virtual_thread import INSTRUCTION
from toolchain.vta.config import VTAConfig, config_from_target

#: the epilogue stages, in order: block name -> (intrinsic, scalar operand)
EPILOGUE = ("shr", "clip_hi", "clip_lo")


@dataclass(frozen=True)
class DenseShape:
    """``out[M, N] = requant(x[M, K] @ w[K, N])`` (unpadded sizes)."""

    m: int
    k: int
    n: int


@dataclass(frozen=True)
class Tiles:
    """Tile sizes in blocks: ``tm`` rows of BATCH, ``tn`` blocks of BLOCK_OUT, ``tk`` of
    BLOCK_IN; ``split``: the output axis whose tiles go to the virtual threads (``"m"``:
    row tiles, each thread loads its own copy of the weight tile; ``"n"``: column tiles,
    each thread loads its own copy of the input tile); ``resident``: see below."""

    tm: int
    tn: int
    tk: int
    split: str = "m"
    #: the whole weight matrix is loaded once, before the first tile, and shared by all
    #: tiles and threads (only when it fits the WGT buffer)
    resident: bool = False


def blocks(shape: DenseShape, cfg: VTAConfig) -> tuple[int, int, int]:
    """(M, K, N) in blocks of BATCH, BLOCK_IN, BLOCK_OUT (zero padded)."""
    return (-(-shape.m // cfg.batch), -(-shape.k // cfg.block_in),
            -(-shape.n // cfg.block_out))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


#: cycles a group of tiles costs beyond its GEMM steps and loads when latency is hidden
#: (instruction issue, token hand-offs): about 3 at M/4 and 5 at full size on the ResNet-18
#: layers (the RTL's cycles against the number of groups of two tilings of one layer)
GROUP_CYCLES = 5


def candidate_tiles(shape: DenseShape, cfg: VTAConfig, vthreads: int = 2,
                    count: int = 8) -> list[Tiles]:
    """The ``count`` tilings with the lowest estimate of the compute engine's time plus the
    DMA time that cannot overlap it, best first; every one fits ``1/vthreads`` of each
    buffer (resident weights: the whole matrix once) and splits evenly over the threads.

    Example::

        >>> for t in candidate_tiles(DenseShape(784, 1152, 128), VTAConfig(), count=2):
        ...     print(t)
        Tiles(tm=98, tn=8, tk=4, split='m', resident=False)
        Tiles(tm=98, tn=8, tk=3, split='m', resident=False)
    """
    mb, kb, nb = blocks(shape, cfg)
    share = max(1, vthreads)
    found: list[tuple[tuple[float, int], Tiles]] = []
    whole = nb * kb <= cfg.wgt_depth  # the weights fit on chip: may load them once
    splits = ("m", "n") if share > 1 else ("m",)
    for split, resident, tn, tk in itertools.product(splits, sorted({False, whole}),
                                                     _divisors(nb), _divisors(kb)):
        if not resident and tn * tk > cfg.wgt_depth // share:
            continue
        if min(tn, tk) < 2 and min(nb, kb) >= 2 or split == "n" and (nb // tn) % share:
            continue
        for tm in _divisors(mb):
            if tm < 2 <= mb or split == "m" and (mb // tm) % share:
                continue
            if tm * tk > cfg.inp_depth // share or tm * tn > cfg.acc_depth // share:
                continue
            wgt = 0 if resident else tn * tk * cfg.wgt_row_bytes
            load = (tm * tk * cfg.inp_row_bytes + wgt) / cfg.bytes_per_cycle \
                + cfg.latency_cycles
            groups = (mb // tm) * (nb // tn) * (kb // tk)
            tiles = (mb // tm) * (nb // tn)
            est = groups * max(tm * tn * tk, load) + tiles * (1 + len(EPILOGUE)) * tm * tn
            if share > 1:  # the first group's load is not hidden (the pipeline fills
                # sooner with smaller groups), but each group costs a few cycles of its own
                est += load + GROUP_CYCLES * groups
            if resident:  # the one weight load runs before any GEMM
                est += nb * kb * cfg.wgt_row_bytes / cfg.bytes_per_cycle
            found.append(((est, groups), Tiles(tm, tn, tk, split, resident)))
    if not found:
        why = f" with its {mb} rows of BATCH and {nb} blocks of BLOCK_OUT split over " \
              f"{share} virtual threads (use vthreads=1)" if mb % share and nb % share else ""
        raise ScheduleError(f"no tiling of the {mb}x{kb}x{nb}-block GEMM fits the buffers of "
                            f"target {cfg.name!r}{why}")
    found.sort(key=lambda x: x[0])
    return [t for _, t in found[:count]]


def choose_tiles(shape: DenseShape, cfg: VTAConfig, vthreads: int = 2) -> Tiles:
    """The first of :func:`candidate_tiles`.

    Example::

        >>> choose_tiles(DenseShape(784, 1152, 128), VTAConfig())
        Tiles(tm=98, tn=8, tk=4, split='m', resident=False)
    """
    return candidate_tiles(shape, cfg, vthreads, 1)[0]


def dense_compute(shape: DenseShape, shift: int, cfg: VTAConfig) -> list[te.Tensor]:
    """The packed dense layer with its requantisation: ``[data, weight, out]``."""
    mb, kb, nb = blocks(shape, cfg)
    b_, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    data = te.placeholder((mb, kb, b_, bi), "int8", "data")
    weight = te.placeholder((nb, kb, bo, bi), "int8", "weight")
    ko = te.reduce_axis((0, kb), name="ko")
    ki = te.reduce_axis((0, bi), name="ki")
    acc = te.compute((mb, nb, b_, bo), lambda m, n, b, o: te.sum(
        te.cast(data[m, ko, b, ki], "int32") * te.cast(weight[n, ko, o, ki], "int32"),
        axis=[ko, ki]), name="gemm")
    return [data, weight, _requant(acc, shift)]


def _requant(acc: te.Tensor, shift: int) -> te.Tensor:
    """``int8(clip(acc >> shift, -128, 127))`` as the stages of :data:`EPILOGUE` + ``out``."""
    shr = te.compute(acc.shape, lambda *i: ir.Call("int32", "tir.shift_right",
                                                   [acc[i], ir.IntImm(shift, "int32")]),
                     name="shr")
    hi = te.compute(acc.shape, lambda *i: ir.Min(shr[i], ir.IntImm(127, "int32")),
                    name="clip_hi")
    lo = te.compute(acc.shape, lambda *i: ir.Max(hi[i], ir.IntImm(-128, "int32")),
                    name="clip_lo")
    return te.compute(acc.shape, lambda *i: te.cast(lo[i], "int8"), name="out")


def _desc_loops(intrin: str) -> int:
    """How many loops the intrinsic's behaviour has (after unit loops are dropped)."""
    body = TensorIntrin.get(intrin).desc.body
    n = 0
    while True:
        if isinstance(body, ir.BlockRealize) and body.block.name_hint == "root":
            body = body.block.body
        elif isinstance(body, ir.For):
            n, body = n + 1, body.body
        else:
            return n


def _tensorize(sch: Schedule, block: BlockRV, intrin: str, below: LoopRV | None,
               stage: str = "compute") -> None:
    """Tensorize ``block`` at the loop matching the intrinsic's nest; annotate the first
    loop under ``below`` (the loops that fold into the instruction) ``instruction`` with
    the engine that runs it (``load``, ``compute`` or ``store``)."""
    loops = sch.get_loops(block)
    nd = _desc_loops(intrin)
    outer = loops[: len(loops) - nd]
    if below is not None:
        names = [sch.get(lp).loop_var for lp in outer]
        anchor = names.index(sch.get(below).loop_var)
        outer = outer[anchor + 1:]
    sch.tensorize(loops[len(loops) - nd], intrin)
    if outer:
        sch.annotate(outer[0], INSTRUCTION, stage)


def _virtual_threads(sch: Schedule, outer: tuple[LoopRV, LoopRV],
                     inner: tuple[LoopRV, LoopRV], split: str, vthreads: int,
                     scope_acc: str) -> LoopRV:
    """Split the first (``split == "m"``) or the second outer tile loop by ``vthreads``,
    put the virtual-thread loop just above the ``inner`` tile loops, and compute the GEMM
    and its epilogue there in the accumulator scope; the virtual-thread loop."""
    a, b = outer
    if split == "m":
        aq, vt = sch.split(a, [None, vthreads])
        sch.reorder(aq, b, vt, *inner)
    else:
        bq, vt = sch.split(b, [None, vthreads])
        sch.reorder(a, bq, vt, *inner)
    stages = ("gemm", *EPILOGUE)
    for name in reversed(stages):
        sch.compute_at(sch.get_block(name), vt)
    for name in stages:
        sch.set_scope(sch.get_block(name), 0, scope_acc)
    return vt


class Forks:
    """The schedules of one layer's first steps, kept for its next candidate tiling.

    :func:`dense_schedule` and :func:`conv2d_schedule` go through the same steps for every
    tiling: the compute, then the output tiles, the virtual threads and the tensorized
    epilogue below them (which depend on the tile sizes, the split and the thread count),
    then the reduction step and the GEMM reset's tensorize (the step's size), then the rest.
    Given one ``Forks`` for all the tilings of one layer (its shape, shift and target), each
    such stage is scheduled once per distinct set of the parameters it depends on and copied
    (:meth:`~toolchain.tir.schedule.Schedule.copy`) for the next tiling that shares them.
    The primitives are deterministic and a copy carries the function, the trace and the
    handles, so going on from the copy gives the function starting over would.

    Example::

        >>> from toolchain.target import load_target
        >>> t, forks = load_target("vta"), Forks()
        >>> one = dense_schedule(DenseShape(16, 64, 64), 4, t, Tiles(2, 2, 2), forks=forks)
        >>> two = dense_schedule(DenseShape(16, 64, 64), 4, t, Tiles(2, 2, 2, resident=True),
        ...                      forks=forks)
        >>> sorted(k[0] for k in forks.kept)
        ['compute', 'step', 'threads']
        >>> str(two.mod) == str(dense_schedule(DenseShape(16, 64, 64), 4, t,
        ...                                    Tiles(2, 2, 2, resident=True)).mod)
        True
    """

    def __init__(self) -> None:
        self._layer: tuple[Any, int, Target] | None = None
        #: a stage's key (its name and the parameters it depends on) -> (the schedule
        #: after it, the handles the next steps take)
        self.kept: dict[tuple[Any, ...], tuple[Schedule, tuple[Any, ...]]] = {}

    def check(self, shape: Any, shift: int, target: Target) -> None:
        """Refuse a layer other than the one these forks were first used for (the same
        shape and shift, the same target object)."""
        if self._layer is None:
            self._layer = (shape, shift, target)
        elif not (self._layer[0] == shape and self._layer[1] == shift
                  and self._layer[2] is target):
            raise ValueError("a Forks is for the tilings of one layer (shape, shift, target)")


def _forked(forks: Forks | None, key: tuple[Any, ...],
            make: Callable[[], tuple[Schedule, tuple[Any, ...]]]
            ) -> tuple[Schedule, tuple[Any, ...]]:
    """``make()`` — a schedule and the handles the next steps take — or, where ``forks``
    kept one made for an equal ``key``, a copy of it (see :class:`Forks`)."""
    if forks is None:
        return make()
    got = forks.kept.get(key)
    if got is None:
        got = forks.kept[key] = make()
    sch, handles = got
    return sch.copy(), handles


def dense_schedule(shape: DenseShape, shift: int, target: Target, tiles: Tiles | None = None,
                   vthreads: int = 2, *, forks: Forks | None = None) -> Schedule:
    """The scheduled, tensorized dense layer (see the module docstring). ``forks``: the
    first steps shared with the layer's other tilings (:class:`Forks`)."""
    cfg = config_from_target(target)
    mb, kb, nb = blocks(shape, cfg)
    t = tiles or choose_tiles(shape, cfg, vthreads)
    if mb % t.tm or nb % t.tn or kb % t.tk:
        raise ScheduleError(f"tiles {t} must divide the layer's blocks (M {mb}, N {nb}, "
                            f"K {kb})")
    if min(t.tm, t.tn, t.tk) < 1:
        raise ScheduleError(f"tiles {t}: every tile size must be at least 1 block")
    if t.resident and nb * kb > cfg.wgt_depth:
        raise ScheduleError(f"tiles {t}: the {nb}x{kb}-block weight matrix does not fit the "
                            f"WGT buffer ({cfg.wgt_depth} rows) to stay resident")
    if t.split not in ("m", "n"):
        raise ScheduleError(f"tiles {t}: split must be 'm' (row tiles) or 'n' (column tiles)")
    if t.split == "m" and mb // t.tm % vthreads:
        raise ScheduleError(f"{vthreads} virtual threads need a number of row tiles "
                            f"divisible by {vthreads}; M has {mb // t.tm} tiles of {t.tm}")
    if t.split == "n" and nb // t.tn % vthreads:
        raise ScheduleError(f"{vthreads} virtual threads need a number of column tiles "
                            f"divisible by {vthreads}; N has {nb // t.tn} tiles of {t.tn}")
    gemm_spec = target.intrinsics["gemm"]
    scope_inp, scope_wgt, scope_acc = (gemm_spec["scopes"][x] for x in ("A", "B", "C"))
    if forks is not None:
        forks.check(shape, shift, target)

    def compute() -> tuple[Schedule, tuple[Any, ...]]:
        return Schedule(te.create_prim_func(dense_compute(shape, shift, cfg)), target), ()

    def threads() -> tuple[Schedule, tuple[Any, ...]]:
        sch, _ = _forked(forks, ("compute",), compute)
        out = sch.get_block("out")
        m, n, _, _ = sch.get_loops(out)
        mo, mi = sch.split(m, [None, t.tm])
        no, ni = sch.split(n, [None, t.tn])
        vt = _virtual_threads(sch, (mo, no), (mi, ni), t.split, vthreads, scope_acc)
        _epilogue(sch, target, vt)
        return sch, (vt,)

    def step() -> tuple[Schedule, tuple[Any, ...]]:
        sch, (vt,) = _forked(forks, ("threads", t.tm, t.tn, t.split, vthreads), threads)
        gemm = sch.get_block("gemm")
        # compute_at leaves out the loops of extent 1 (a tile of one block, one row of
        # BATCH, one block of K): name the ones that are there
        axes = [n for n, e in (("m", t.tm), ("n", t.tn), ("b", cfg.batch),
                               ("o", cfg.block_out), ("k", kb), ("ki", cfg.block_in)) if e > 1]
        lp = dict(zip(axes, sch.get_loops(gemm)[-len(axes):], strict=True))
        tile = [lp[n] for n in ("m", "n") if n in lp]
        inner = [lp[n] for n in ("b", "o", "ki") if n in lp]
        if "k" in lp:
            k0, k1 = sch.split(lp["k"], [None, t.tk])
            sch.reorder(k0, *tile, k1, *inner)
            init = sch.decompose_reduction(gemm, k0)
        else:  # one block of K: the tile's input and weights load once, under the threads
            k0 = vt
            if len(tile) + len(inner) > 1:
                sch.reorder(*tile, *inner)
            init = sch.decompose_reduction(gemm, (tile + inner)[0])
        cin = sch.cache_read(gemm, "data", scope_inp)
        cwt = sch.cache_read(gemm, "weight", scope_wgt)
        sch.compute_at(cin, k0)
        _tensorize(sch, init, target.intrinsic("gemm_reset"), vt)
        return sch, (vt, gemm, k0, init, cin, cwt)

    sch, (vt, gemm, k0, init, cin, cwt) = _forked(
        forks, ("step", t.tm, t.tn, t.split, vthreads, t.tk), step)
    if not t.resident:
        sch.compute_at(cwt, k0)
    _tensorize(sch, gemm, target.intrinsic("gemm"), k0)
    _tensorize(sch, cin, target.intrinsic("load_inp"), k0, "load")
    _tensorize(sch, cwt, target.intrinsic("load_wgt"), None if t.resident else k0, "load")
    if vthreads > 1:
        sch.bind(vt, "vthread")
    return sch


def _epilogue(sch: Schedule, target: Target, vt: LoopRV) -> None:
    """Tensorize the requantisation and the store below the thread loop (a step of the
    output tiles and threads, shared by the tilings that share those: :class:`Forks`)."""
    for name, intrin in zip(EPILOGUE, ("alu_shr_imm", "alu_min_imm", "alu_max_imm"),
                            strict=True):
        _tensorize(sch, sch.get_block(name), target.intrinsic(intrin), vt)
    _tensorize(sch, sch.get_block("out"), target.intrinsic("store_out"), vt, "store")


def lower_dense(sch: Schedule) -> ir.PrimFunc:
    """The scheduled layer lowered for instruction emission: blocks lowered, each scoped
    buffer shrunk to its tile and placed in its tile loop, virtual threads interleaved (one
    copy of every tile buffer per thread)."""
    return inject_virtual_thread(compact_buffer_allocation(lower_blocks(sch.mod)))


# ---- convolution ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution of one ``h x w x ic`` image by ``oc`` filters of ``k x k``, stride
    ``s``, ``pad`` zero rows/columns on every side (unpadded channel counts).

    A layer that is not square in all three gives the rest: ``kw`` the filter width (``k``
    is then its height), ``sw`` the horizontal stride (``s`` the vertical), ``pads`` the
    zero rows/columns ``(top, left, bottom, right)`` as ONNX orders them (``pad`` then
    unused); 0 and None mean "as the square form". Only the im2col form
    (:func:`~toolchain.vta.compile.compile_conv2d_im2col`) takes such a layer; the direct
    schedule needs :attr:`square`.

    >>> ConvShape(49, 10, 1, 64, 10, 2, kw=4, pads=(4, 1, 5, 1)).out_hw
    (25, 5)
    >>> ConvShape(8, 8, 16, 16, 3, 1, 1)
    ConvShape(h=8, w=8, ic=16, oc=16, k=3, s=1, pad=1)
    """

    h: int
    w: int
    ic: int
    oc: int
    k: int
    s: int = 1
    pad: int = 0
    kw: int = 0
    sw: int = 0
    pads: tuple[int, int, int, int] | None = None

    def __repr__(self) -> str:  # the square form's fields only where the rest are defaults
        extra = "".join(f", {f}={v!r}" for f, v in (("kw", self.kw), ("sw", self.sw),
                                                     ("pads", self.pads)) if v)
        return (f"ConvShape(h={self.h}, w={self.w}, ic={self.ic}, oc={self.oc}, k={self.k}, "
                f"s={self.s}, pad={self.pad}{extra})")

    @property
    def taps(self) -> tuple[int, int]:
        """The filter's (height, width)."""
        return self.k, self.kw or self.k

    @property
    def strides(self) -> tuple[int, int]:
        """(vertical, horizontal) stride."""
        return self.s, self.sw or self.s

    @property
    def padding(self) -> tuple[int, int, int, int]:
        """Zero rows/columns (top, left, bottom, right)."""
        return self.pads if self.pads is not None else (self.pad,) * 4

    @property
    def square(self) -> bool:
        """Square filters, equal strides and the same padding on every side."""
        (kh, kw), (sh, sw) = self.taps, self.strides
        return kh == kw and sh == sw and len(set(self.padding)) == 1

    @property
    def out_hw(self) -> tuple[int, int]:
        """(OH, OW)."""
        (kh, kw), (sh, sw), (pt, pl, pb, pr) = self.taps, self.strides, self.padding
        return (self.h + pt + pb - kh) // sh + 1, (self.w + pl + pr - kw) // sw + 1


@dataclass(frozen=True)
class ConvTiles:
    """Tiles of a convolution: ``toh`` output rows (whole output width), ``toc`` blocks of
    BLOCK_OUT output channels, ``tic`` blocks of BLOCK_IN input channels per reduction step;
    ``split``, ``resident`` as in :class:`Tiles` (``"m"``: output-row tiles on the threads)."""

    toh: int
    toc: int
    tic: int
    split: str = "m"
    resident: bool = False


def conv_blocks(shape: ConvShape, cfg: VTAConfig) -> tuple[int, int]:
    """(IC, OC) in blocks of BLOCK_IN, BLOCK_OUT (zero padded)."""
    return -(-shape.ic // cfg.block_in), -(-shape.oc // cfg.block_out)


def conv_rows(shape: ConvShape, t: ConvTiles, cfg: VTAConfig) -> tuple[int, int, int]:
    """On-chip rows one thread's tile needs: (INP, WGT, ACC)."""
    cb, ob = conv_blocks(shape, cfg)
    oh, ow = shape.out_hw
    in_rows = ((t.toh - 1) * shape.s + shape.k) * (shape.w + 2 * shape.pad)
    wgt = ob * cb * shape.k ** 2 if t.resident else t.toc * t.tic * shape.k ** 2
    return t.tic * in_rows, wgt, t.toc * t.toh * ow


def candidate_conv_tiles(shape: ConvShape, cfg: VTAConfig, vthreads: int = 2,
                         count: int = 8) -> list[ConvTiles]:
    """The ``count`` convolution tilings with the lowest analytic estimate (as
    :func:`candidate_tiles`), best first.

    Example::

        >>> candidate_conv_tiles(ConvShape(14, 14, 64, 64, 3, 1, 1), VTAConfig(), count=1)
        [ConvTiles(toh=7, toc=4, tic=4, split='m', resident=False)]
    """
    cb, ob = conv_blocks(shape, cfg)
    oh, ow = shape.out_hw
    share = max(1, vthreads)
    found: list[tuple[tuple[float, int], ConvTiles]] = []
    whole = ob * cb * shape.k ** 2 <= cfg.wgt_depth
    splits = ("m", "n") if share > 1 else ("m",)
    for split, resident, toh, toc, tic in itertools.product(
            splits, sorted({False, whole}), _divisors(oh), _divisors(ob), _divisors(cb)):
        if split == "m" and (oh // toh) % share or split == "n" and (ob // toc) % share:
            continue
        t = ConvTiles(toh, toc, tic, split if share > 1 else "m", resident)
        inp, wgt, acc = conv_rows(shape, t, cfg)
        if inp > cfg.inp_depth // share or acc > cfg.acc_depth // share or \
                wgt > (cfg.wgt_depth if resident else cfg.wgt_depth // share):
            continue
        steps = toh * ow * toc * tic * shape.k ** 2
        load = (inp * cfg.inp_row_bytes + (0 if resident else wgt * cfg.wgt_row_bytes)) \
            / cfg.bytes_per_cycle + cfg.latency_cycles
        tiles = (oh // toh) * (ob // toc)
        groups = tiles * (cb // tic)
        est = groups * max(steps, load) + tiles * (1 + len(EPILOGUE)) * acc
        if resident:
            est += ob * cb * shape.k ** 2 * cfg.wgt_row_bytes / cfg.bytes_per_cycle
        found.append(((est, groups), t))
    if not found:
        raise ScheduleError(f"no tiling of the {shape} convolution fits the buffers of "
                            f"target {cfg.name!r} with {share} virtual threads")
    found.sort(key=lambda x: x[0])
    return [t for _, t in found[:count]]


def conv2d_compute(shape: ConvShape, shift: int, cfg: VTAConfig) -> list[te.Tensor]:
    """The packed convolution with its requantisation: ``[data, weight, out]`` with data
    ``(1, IC/BLOCK_IN, H, W, BATCH, BLOCK_IN)`` (NCHW{BATCH}n{BLOCK_IN}c), weight
    ``(OC/BLOCK_OUT, IC/BLOCK_IN, K, K, BLOCK_OUT, BLOCK_IN)`` (OIHW{BLOCK_OUT}o{BLOCK_IN}i),
    out ``(1, OC/BLOCK_OUT, OH, OW, BATCH, BLOCK_OUT)``; the zero padding is its own stage
    (``pad``), which the schedule makes the on-chip input tile."""
    cb, ob = conv_blocks(shape, cfg)
    b_, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    h, w, k, s, p = shape.h, shape.w, shape.k, shape.s, shape.pad
    oh, ow = shape.out_hw
    data = te.placeholder((1, cb, h, w, b_, bi), "int8", "data")
    weight = te.placeholder((ob, cb, k, k, bo, bi), "int8", "weight")
    pad = te.compute((1, cb, h + 2 * p, w + 2 * p, b_, bi), lambda n, c, y, x, b, i:
                     te.if_then_else(te.all(y >= p, y < h + p, x >= p, x < w + p),
                                     data[n, c, y - p, x - p, b, i], ir.IntImm(0, "int8")),
                     name="pad")
    ric = te.reduce_axis((0, cb), name="ric")
    rkh = te.reduce_axis((0, k), name="rkh")
    rkw = te.reduce_axis((0, k), name="rkw")
    rki = te.reduce_axis((0, bi), name="rki")
    acc = te.compute((1, ob, oh, ow, b_, bo), lambda n, o, y, x, b, oo: te.sum(
        te.cast(pad[n, ric, y * s + rkh, x * s + rkw, b, rki], "int32")
        * te.cast(weight[o, ric, rkh, rkw, oo, rki], "int32"),
        axis=[ric, rkh, rkw, rki]), name="gemm")
    return [data, weight, _requant(acc, shift)]


def conv2d_schedule(shape: ConvShape, shift: int, target: Target, tiles: ConvTiles,
                    vthreads: int = 2, *, forks: Forks | None = None) -> Schedule:
    """The scheduled, tensorized convolution: output-row x output-channel tiles (whole
    output width) with their accumulator and epilogue in ``vta.acc``; per reduction step
    of ``tic`` input-channel blocks the padded input tile (the ``pad`` stage itself, in
    ``vta.inp``: a guarded copy the emitter turns into 2-D DMAs with zero padding) and the
    weight tile in ``vta.wgt``; the GEMM over the tile's pixels, channels and kernel taps.
    ``forks``: the first steps shared with the layer's other tilings (:class:`Forks`).

    Example::

        >>> from toolchain.target import load_target
        >>> sch = conv2d_schedule(ConvShape(8, 8, 32, 32, 3, 1, 1), 4, load_target("vta"),
        ...                       ConvTiles(4, 2, 2))
        >>> "vta.gemm" in str(sch.mod) and "if_then_else" in str(sch.mod)
        True
    """
    cfg = config_from_target(target)
    cb, ob = conv_blocks(shape, cfg)
    oh, _ = shape.out_hw
    t = tiles
    if oh % t.toh or ob % t.toc or cb % t.tic:
        raise ScheduleError(f"tiles {t} must divide the layer (OH {oh}, OC blocks {ob}, IC "
                            f"blocks {cb})")
    if t.split not in ("m", "n"):
        raise ScheduleError(f"tiles {t}: split must be 'm' (output rows) or 'n' (channels)")
    if (oh // t.toh if t.split == "m" else ob // t.toc) % vthreads:
        raise ScheduleError(f"tiles {t}: {vthreads} virtual threads need a number of "
                            f"{'row' if t.split == 'm' else 'channel'} tiles divisible by "
                            f"{vthreads}")
    if t.resident and ob * cb * shape.k ** 2 > cfg.wgt_depth:
        raise ScheduleError(f"tiles {t}: the weights do not fit the WGT buffer "
                            f"({cfg.wgt_depth} rows) to stay resident")
    gemm_spec = target.intrinsics["gemm"]
    scope_inp, scope_wgt, scope_acc = (gemm_spec["scopes"][x] for x in ("A", "B", "C"))
    if forks is not None:
        forks.check(shape, shift, target)

    def compute() -> tuple[Schedule, tuple[Any, ...]]:
        return Schedule(te.create_prim_func(conv2d_compute(shape, shift, cfg)), target), ()

    def threads() -> tuple[Schedule, tuple[Any, ...]]:
        sch, _ = _forked(forks, ("compute",), compute)
        out = sch.get_block("out")
        _, oc, y, _, _, _ = sch.get_loops(out)
        oco, oci = sch.split(oc, [None, t.toc])
        yo, yi = sch.split(y, [None, t.toh])
        vt = _virtual_threads(sch, (yo, oco), (oci, yi), t.split, vthreads, scope_acc)
        _epilogue(sch, target, vt)
        return sch, (vt,)

    def step() -> tuple[Schedule, tuple[Any, ...]]:
        sch, (vt,) = _forked(forks, ("threads", t.toh, t.toc, t.split, vthreads), threads)
        gemm = sch.get_block("gemm")
        # compute_at leaves out the loops of extent 1: name the ones that are there
        _, ow = shape.out_hw
        axes = [(n, e) for n, e in (("oc", t.toc), ("oh", t.toh), ("ow", ow),
                                    ("o", cfg.block_out), ("ic", cb), ("kh", shape.k),
                                    ("kw", shape.k), ("ki", cfg.block_in)) if e > 1]
        lp = dict(zip((n for n, _ in axes), sch.get_loops(gemm)[-len(axes):], strict=True))
        tile = [lp[n] for n in ("oc", "oh", "ow") if n in lp]
        taps = [lp[n] for n in ("kh", "kw") if n in lp]
        if "ic" in lp:
            c0, c1 = sch.split(lp["ic"], [None, t.tic])
            sch.reorder(c0, *tile, c1, *taps, lp["o"], lp["ki"])
            init = sch.decompose_reduction(gemm, c0)
        else:
            # one block of input channels: no reduction loop over them, so the whole
            # tile's input and weights are loaded once per tile, under the thread loop
            c0 = vt
            sch.reorder(*tile, *taps, lp["o"], lp["ki"])
            init = sch.decompose_reduction(gemm, (tile or taps or [lp["o"]])[0])
        pad = sch.get_block("pad")
        sch.set_scope(pad, 0, scope_inp)
        sch.compute_at(pad, c0)
        cwt = sch.cache_read(gemm, "weight", scope_wgt)
        _tensorize(sch, init, target.intrinsic("gemm_reset"), vt)
        return sch, (vt, gemm, c0, init, pad, cwt)

    sch, (vt, gemm, c0, init, pad, cwt) = _forked(
        forks, ("step", t.toh, t.toc, t.split, vthreads, t.tic), step)
    if not t.resident:
        sch.compute_at(cwt, c0)
    _tensorize(sch, gemm, target.intrinsic("gemm"), c0)
    _tensorize(sch, cwt, target.intrinsic("load_wgt"), None if t.resident else c0, "load")
    pad_loops = sch.get_loops(pad)
    names = [sch.get(lp).loop_var for lp in pad_loops]
    sch.annotate(pad_loops[names.index(sch.get(c0).loop_var) + 1], INSTRUCTION, "load")
    if vthreads > 1:
        sch.bind(vt, "vthread")
    return sch
