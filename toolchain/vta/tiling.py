"""The accelerator's tilings as search spaces: what ``kiln tune`` varies for a VTA layer.

Without tiles, :func:`~toolchain.vta.compile.compile_dense` and
:func:`~toolchain.vta.compile.compile_conv2d` choose a layer's tiling by a search over
the space this module declares: every valid point is ranked by its predicted cost
(:func:`toolchain.vta.estimate.shortlist`, nothing built), the
:data:`~toolchain.vta.compile.CANDIDATES` best are compiled and the program with the lowest
cost on the cycle model (:func:`~toolchain.vta.timing.program_cost`: cycles plus a
per-instruction cost) is kept. The space is a :class:`~toolchain.autotune.space.Space`,
declared through the same API as the CPU schedules:

* ``vta_dense`` (a dense layer, a QAdd's GEMM, a convolution as an im2col GEMM): ``tm``
  rows of BATCH, ``tn`` blocks of BLOCK_OUT, ``tk`` blocks of BLOCK_IN per tile;
* ``vta_conv2d`` (a direct convolution): ``toh`` output rows, ``toc`` output-channel blocks,
  ``tic`` input-channel blocks per reduction step;
* both: ``split`` — the output axis whose tiles go to the virtual threads (``m``: rows,
  ``n``: columns/channels; only with more than one thread), ``resident`` — the whole weight
  tensor loaded once, ``vthreads`` — virtual threads (1-4: the latency hiding; each thread
  gets its own share of every on-chip buffer).

Tile sizes are the divisors of the layer's blocks, so a tile always divides its axis; the
rules refuse, before anything is built and with the numbers, a point whose tiles overflow
a thread's share of the INP, WGT or ACC buffer, whose virtual threads do not split the
tiles evenly, or whose resident weights do not fit. The schedule has one loop order (the
reduction step outside the tile's loops, the only order whose input and weight tiles fit
one step), so there is no order knob.

The default point is the search's choice: the compiler declares the space after its
search (:func:`toolchain.autotune.apply.declare`), so a compile without records is
unchanged, and a compile whose trace decides (the tuner's forced point, or ``kiln compile
--records``: :func:`toolchain.autotune.apply.steered`) skips the search.

Example::

    >>> from toolchain.vta.config import VTAConfig
    >>> from toolchain.vta.schedule import DenseShape, Tiles
    >>> s = dense_space(DenseShape(64, 128, 64), VTAConfig(), "int8", (Tiles(32, 4, 4), 2))
    >>> print(s.trace(s.default()))
    vta_dense: tm=32 tn=4 tk=4 split=m resident=False vthreads=2
    >>> s.check({**s.default(), "tm": 64})           # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    toolchain.autotune.space.InvalidPoint: vta_dense|m64k128n64|...: ... virtual threads split ...
    >>> tiles_of(s, {**s.default(), "vthreads": 1})
    (Tiles(tm=32, tn=4, tk=4, split='m', resident=False), 1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from toolchain.autotune.space import Knob, Rule, Space, divisors
from toolchain.vta.config import VTAConfig
from toolchain.vta.schedule import (
    EPILOGUE,
    ConvShape,
    ConvTiles,
    DenseShape,
    Tiles,
    blocks,
    conv_blocks,
    conv_rows,
)

DENSE, CONV = "vta_dense", "vta_conv2d"
#: the virtual-thread counts offered (the compiler's own choice is 2, or 1 where 2 fits no
#: tiling; 3 and 4 hide latency behind smaller tiles)
VTHREADS = (1, 2, 3, 4)


def config_key(cfg: VTAConfig) -> str:
    """The capabilities a tiling's cost and validity depend on: GEMM shape, buffer depths
    in rows, queue depths, DRAM latency and bandwidth (never the target's name).

    >>> config_key(VTAConfig())
    'b1i16o16|inp2048wgt1024acc2048uop8192|q64t8|dram64x16'
    """
    c = cfg
    return (f"b{c.batch}i{c.block_in}o{c.block_out}|inp{c.inp_depth}wgt{c.wgt_depth}"
            f"acc{c.acc_depth}uop{c.uop_depth}|q{c.cmd_queue_depth}t{c.token_queue_depth}"
            f"|dram{c.latency_cycles}x{c.bytes_per_cycle}")


def _knobs(names: Sequence[str], sizes: Sequence[int], default: Mapping[str, Any] | None,
           docs: Sequence[str]) -> tuple[Knob, ...]:
    """The six knobs; ``default`` None gives the first choices (a probe space whose
    default is never built: see :func:`probe`)."""
    choices = [divisors(n) for n in sizes] + [("m", "n"), (False, True), VTHREADS]
    all_names = (*names, "split", "resident", "vthreads")
    all_docs = (*docs, "output axis whose tiles go to the virtual threads (m: rows, n: "
                "columns / channels)", "the whole weight tensor loaded once, before the "
                "first tile", "virtual threads (each gets its share of every buffer)")
    active = {"split": lambda p: p["vthreads"] > 1}
    return tuple(Knob(n, tuple(c), c[0] if default is None else default[n], d, active.get(n))
                 for n, c, d in zip(all_names, choices, all_docs, strict=True))


def _rules(cfg: VTAConfig, axes: tuple[str, str], tiles: tuple[int, int], whole_wgt: int,
           rows: Any) -> tuple[Rule, ...]:
    """The buffer and thread rules; ``rows(point)`` gives one thread's (INP, WGT, ACC)
    rows, ``whole_wgt`` the rows of the whole weight tensor."""
    (am, an), (nm, nn) = axes, tiles

    def even(p: Mapping[str, Any]) -> bool:
        count = nm // p[am] if p["split"] == "m" else nn // p[an]
        return p["vthreads"] == 1 or count % p["vthreads"] == 0

    def wgt(p: Mapping[str, Any]) -> bool:
        return p["resident"] or p["vthreads"] * rows(p)[1] <= cfg.wgt_depth

    return (
        Rule(f"the virtual threads split the row tiles (split=m: {nm} blocks / {am}) or the "
             f"column tiles (split=n: {nn} blocks / {an}) evenly", even),
        Rule(f"vthreads x a tile's input rows fit the INP buffer ({cfg.inp_depth} rows)",
             lambda p: p["vthreads"] * rows(p)[0] <= cfg.inp_depth),
        Rule(f"vthreads x a tile's weight rows fit the WGT buffer ({cfg.wgt_depth} rows)",
             wgt),
        Rule(f"resident weights ({whole_wgt} rows) fit the WGT buffer ({cfg.wgt_depth} rows)",
             lambda p: not p["resident"] or whole_wgt <= cfg.wgt_depth),
        Rule(f"vthreads x a tile's accumulator rows fit the ACC buffer ({cfg.acc_depth} "
             "rows)", lambda p: p["vthreads"] * rows(p)[2] <= cfg.acc_depth),
    )


def dense_space(shape: DenseShape, cfg: VTAConfig, epilogue: str,
                default: tuple[Tiles, int] | None,
                seeds: Sequence[tuple[Tiles, int]] = ()) -> Space:
    """The ``vta_dense`` space of a GEMM ``shape`` on ``cfg`` (the configuration the layer
    is scheduled with: a requantising epilogue's constants take ACC rows); ``epilogue``
    names the layer's output (``int8``, ``int32x3``: byte planes, ``requant``);
    ``default``: the search's tiles and threads (None: a probe, see :func:`probe`);
    ``seeds``: more points the tuner measures first (the other ranked candidates)."""
    mb, kb, nb = blocks(shape, cfg)
    wl = f"{DENSE}|m{shape.m}k{shape.k}n{shape.n}|{epilogue}|{config_key(cfg)}"
    knobs = _knobs(("tm", "tn", "tk"), (mb, nb, kb), _point(default),
                   ("rows of BATCH per tile", "blocks of BLOCK_OUT per tile",
                    "blocks of BLOCK_IN per reduction step"))

    def rows(p: Mapping[str, Any]) -> tuple[int, int, int]:
        return p["tm"] * p["tk"], p["tn"] * p["tk"], p["tm"] * p["tn"]

    rules = _rules(cfg, ("tm", "tn"), (mb, nb), nb * kb, rows)
    return Space(DENSE, wl, knobs, rules, tuple(_point(s) for s in seeds))


def conv_space(shape: ConvShape, cfg: VTAConfig, epilogue: str,
               default: tuple[ConvTiles, int] | None,
               seeds: Sequence[tuple[ConvTiles, int]] = ()) -> Space:
    """The ``vta_conv2d`` space of a direct convolution (arguments as :func:`dense_space`).

    >>> from toolchain.vta.schedule import ConvTiles
    >>> s = conv_space(ConvShape(16, 16, 32, 32, 3, 1, 1), VTAConfig(), "int32x3",
    ...                (ConvTiles(16, 1, 1, "n"), 2))
    >>> s.workload
    'vta_conv2d|h16w16c32o32k3s1p1|int32x3|b1i16o16|inp2048wgt1024acc2048uop8192|q64t8|dram64x16'
    >>> len(s.valid_points())
    116
    """
    cb, ob = conv_blocks(shape, cfg)
    oh, _ = shape.out_hw
    s = shape
    wl = (f"{CONV}|h{s.h}w{s.w}c{s.ic}o{s.oc}k{s.k}s{s.s}p{s.pad}|{epilogue}|"
          f"{config_key(cfg)}")
    knobs = _knobs(("toh", "toc", "tic"), (oh, ob, cb), _point(default),
                   ("output rows per tile (whole width)", "blocks of BLOCK_OUT output "
                    "channels per tile", "blocks of BLOCK_IN input channels per step"))

    def rows(p: Mapping[str, Any]) -> tuple[int, int, int]:
        inp, wgt, acc = conv_rows(shape, ConvTiles(p["toh"], p["toc"], p["tic"]), cfg)
        return inp, wgt, acc

    rules = _rules(cfg, ("toh", "toc"), (oh, ob), ob * cb * s.k ** 2, rows)
    return Space(CONV, wl, knobs, rules, tuple(_point(x) for x in seeds))


def _point(choice: tuple[Tiles | ConvTiles, int] | None) -> dict[str, Any] | None:
    """The point of a tiling and thread count (knob names of its space kind)."""
    if choice is None:
        return None
    t, vt = choice
    sizes = (("tm", t.tm), ("tn", t.tn), ("tk", t.tk)) if isinstance(t, Tiles) else \
        (("toh", t.toh), ("toc", t.toc), ("tic", t.tic))
    return {**dict(sizes), "split": t.split, "resident": t.resident, "vthreads": vt}


def point_of(tiles: Tiles | ConvTiles, vthreads: int) -> dict[str, Any]:
    """The point of ``tiles`` with ``vthreads`` threads.

    >>> point_of(Tiles(4, 2, 1, "n"), 2)
    {'tm': 4, 'tn': 2, 'tk': 1, 'split': 'n', 'resident': False, 'vthreads': 2}
    """
    p = _point((tiles, vthreads))
    assert p is not None
    return p


def tiles_of(space: Space, point: Mapping[str, Any]) -> tuple[Tiles | ConvTiles, int]:
    """The tiles and thread count a point of ``space`` builds."""
    p = space.canonical(point)
    if space.kind == DENSE:
        return Tiles(p["tm"], p["tn"], p["tk"], p["split"], p["resident"]), p["vthreads"]
    return ConvTiles(p["toh"], p["toc"], p["tic"], p["split"], p["resident"]), p["vthreads"]


def features(shape: DenseShape | ConvShape, cfg: VTAConfig, point: Mapping[str, Any]
             ) -> list[float]:
    """Features of a point for the tuner's cost model, without building it: the knobs and
    the analytic quantities of :func:`~toolchain.vta.schedule.candidate_tiles` (groups,
    GEMM steps and DMA bytes per group, the modelled load time, the estimate), log-scaled.

    >>> f = features(DenseShape(64, 128, 64), VTAConfig(), point_of(Tiles(32, 4, 4), 2))
    >>> len(f), f[-2:]
    (17, [1.0, 0.0])
    """
    vt, res = point["vthreads"], bool(point["resident"])
    if isinstance(shape, DenseShape):
        mb, kb, nb = blocks(shape, cfg)
        tm, tn, tk = point["tm"], point["tn"], point["tk"]
        tiles = (mb // tm) * (nb // tn)
        groups = tiles * (kb // tk)
        steps, inp, wgt, acc = tm * tn * tk, tm * tk, tn * tk, tm * tn
        whole = nb * kb
    else:
        cb, ob = conv_blocks(shape, cfg)
        oh, ow = shape.out_hw
        t = ConvTiles(point["toh"], point["toc"], point["tic"])
        tiles = (oh // t.toh) * (ob // t.toc)
        groups = tiles * (cb // t.tic)
        inp, wgt, acc = conv_rows(shape, t, cfg)
        steps = t.toh * ow * t.toc * t.tic * shape.k ** 2
        whole = ob * cb * shape.k ** 2
    dma = inp * cfg.inp_row_bytes + (0 if res else wgt * cfg.wgt_row_bytes)
    load = dma / cfg.bytes_per_cycle + cfg.latency_cycles
    est = groups * max(steps, load) + tiles * (1 + len(EPILOGUE)) * acc + load \
        + (whole * cfg.wgt_row_bytes / cfg.bytes_per_cycle if res else 0)
    logs = [math.log2(1 + x) for x in (
        vt, groups, tiles, steps, dma, load, est, steps / load, inp, wgt, acc)]
    fill = [vt * inp / cfg.inp_depth, vt * wgt / cfg.wgt_depth, vt * acc / cfg.acc_depth]
    return [round(x, 4) for x in (*logs, *fill, float(point.get("split") == "m"),
                                  float(point.get("split") == "m" and vt > 1), float(res))]
