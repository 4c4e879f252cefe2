"""The seeds of the convolution spaces: points the tuner measures right after the default.

A 64-trial search on a loaded machine does not always reach the best points of the
direct convolution's space (thousands of points, a few of them good). These are the
families of points that measured best on ResNet-18's C1-C12 (``docs/tuning.md``,
"Results"), written as rules of the shape rather than as the points themselves, so a
layer of the same kind gets its own version of each:

* **direct**: where the heuristic's tile is one vector of output channels, first two
  vectors of them on the widest row that fits (ResNet-18's strided C4: 570 -> 510 us,
  C1: 1,091 -> 1,050, cold, session 16); then register tiles of the widest row of
  pixels that divides the output width and
  fits the register file (1 row), half of it, and 2 rows of the widest that fits; each
  with one input channel per block read window-outer, and with blocks of 16 channels (the
  heuristic's block where a layer has fewer than 16); the window and the channel block not
  unrolled, the NCHW
  write-back transposed in registers where the target can (else by pixel tiles) after
  each band of rows, and the padded input copied by partitioned loops;
* **Winograd** (where offered): F(4x4) with the accurate points on 2-vector-wide GEMM
  tiles of 8 and 12 rows and 1-vector-wide ones of 16 rows; F(2x2) at 12 x 1 vector;
  each with the padded input copied by partitioned loops, then by the per-element
  select; then only the first two direct seeds (Winograd won every 3x3 stride-1 layer
  measured);
* **1x1**: the GEMM storing its tiles with the bias straight into the output
  (``gemm_epilogue=fused``, where no tile pads): strided, on single-copy pixel rows in
  tiles of 16 or 8 rows x 1 vector, one tile a cache block; stride 1, reading X in place
  in tiles of the heuristic's shape or 4 rows x 4 vectors; then the strided GEMM's
  single-copy pixel rows, the stride-1 GEMM reading X in place (with the heuristic's
  cache block and with 4 tiles a block), GEMM tiles of 8 rows x 2 vectors and 16 x 1,
  the direct kernel broadcasting the widest row of pixels straight from X (no copy:
  ``direct_pack=none``) written back transposed by bands where it can, or as the
  heuristic writes it, and the direct kernel on the widest row of pixels with 16-channel
  blocks or on 2 x 2 pixels of 4 vectors of channels.

A seed naming a knob its space lacks loses that decision; one its space's rules refuse is
dropped (:meth:`~toolchain.autotune.space.Space.seed_points`). Seeds never change a kernel
built without the tuner.

>>> from toolchain.schedules.generic.conv2d import ConvGeom
>>> g = ConvGeom(1, 64, 56, 56, 128, 3, 3, 28, 28, 2, 2, 1, 1, 1, 1)  # C4
>>> [(s["ry"], s["rw"], s["cb"]) for s in direct_seeds(g, 16, 32, 32, 64)]
[(1, 14, 1), (1, 14, 16), (1, 7, 1), (1, 7, 16), (2, 7, 1), (2, 7, 16)]
>>> [(s.get("ob"), s["rw"], s["cb"]) for s in direct_seeds(g, 16, 16, 32, 64)][:3]
[(32, 14, 16), (32, 14, 1), (None, 14, 1)]
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolchain.schedules.generic.conv2d import ConvGeom

__all__ = ["channel_tile", "direct_seeds", "gemm_seeds", "only_knobs", "winograd_channel_seeds",
           "winograd_seeds"]

Seed = dict[str, Any]


def _tiles(g: ConvGeom, vecs: int, budget: int) -> list[tuple[int, int]]:
    """``(ry, rw)`` pixel tiles: the widest divisor of the output width that fits the
    register file in one row, half of it, and the widest in two rows."""
    def widest(ry: int) -> int | None:
        fits = [d for d in range(2, min(g.ow, 16) + 1)
                if g.ow % d == 0 and ry * d * vecs + vecs + 1 <= budget]
        return max(fits) if fits else None

    out: list[tuple[int, int]] = []
    one = widest(1)
    if one is not None:
        out.append((1, one))
        if one % 2 == 0 and one // 2 >= 2:
            out.append((1, one // 2))
    two = widest(2) if g.oh % 2 == 0 else None
    if two is not None:
        out.append((2, two))
    return list(dict.fromkeys(out))


def direct_seeds(g: ConvGeom, lanes: int, ob: int, budget: int, cb: int,
                 transposed: bool = False) -> list[Seed]:
    """The direct convolution's seeds (the module docstring), ``ob`` output channels per
    tile (the heuristic's), ``budget`` vector registers, ``cb`` the heuristic's channel
    block; ``transposed``: the target writes NCHW back through in-register transposes."""
    common = {"unroll_kw": False, "unroll_cb": False,
              "epilogue": "transposed" if transposed else "pixel_tiles",
              "epilogue_at": "rows", "pack": "partitioned"}
    blocks = [{"cb": 1, "order": "window_outer"},
              {"cb": 16 if g.c % 16 == 0 else cb, "order": "channels_outer"}]
    wide: list[Seed] = []
    if ob < 2 * lanes and g.o % (2 * lanes) == 0:
        # two vectors of output channels on the widest row: half the broadcasts per FMA
        wide = [{"ob": 2 * lanes, "ry": ry, "rw": rw, **blk, **common}
                for ry, rw in _tiles(g, 2, budget)[:1] for blk in reversed(blocks)]
    return wide + [{"ry": ry, "rw": rw, **blk, **common}
                   for ry, rw in _tiles(g, ob // lanes, budget) for blk in blocks]


def winograd_seeds(lanes: int, blocked: bool = False) -> list[Seed]:
    """Winograd GEMM tiles that measured best on ResNet-18's 3x3 stride-1 layers, each
    with the partitioned padded copy, then with the per-element one. ``blocked`` (a
    channel-blocked input, ``wino_pad_order``): the F(4x4) tiles copy it block by block
    (8-15 % faster on C2, C6, C9 in NCHW16c), the F(2x2) tile plane by plane first (C12's
    7x7 planes: blocks 10 % slower), then block by block."""
    tiles = [{"algorithm": "winograd4h", "wino_mr": mr, "wino_nr": nr}
             for mr, nr in ((8, 2 * lanes), (12, 2 * lanes), (16, lanes))]
    f2 = {"algorithm": "winograd2", "wino_mr": 12, "wino_nr": lanes}
    order = {"wino_pad_order": "blocks"} if blocked else {}
    seeds = [{**t, "wino_pad": "partitioned", **order} for t in tiles] + \
        [{**f2, "wino_pad": "partitioned"}, {**f2, "wino_pad": "partitioned", **order}] + \
        [{**t, "wino_pad": "select"} for t in [*tiles, f2]]
    return [dict(t) for t in dict.fromkeys(tuple(x.items()) for x in seeds)]


def channel_tile(tiles: int, vecs: int, budget: int) -> int:
    """Rows of a channels-innermost Winograd GEMM tile (``vecs`` vectors of output
    channels wide): the fewest padded rows of ``tiles``, then the most rows that fit.

    >>> channel_tile(196, 2, 32), channel_tile(16, 2, 32), channel_tile(16, 1, 32)
    (14, 8, 16)
    """
    rows = [r for r in (*range(1, 9), 10, 12, 14, 16, 20, 24, 28)
            if r * vecs + vecs + 1 <= budget]
    return min(rows, key=lambda r: (-(-tiles // r) * r, -r))


def winograd_channel_seeds(g: ConvGeom, lanes: int, budget: int) -> list[Seed]:
    """Channels-innermost Winograd points (``wino_layout=channels``, where input and output
    are channel-blocked), measured before the other seeds: F(4x4) with the accurate
    points on 2 vectors of output channels, F(2x2) on 3 and 4, F(4x4) on 1, F(2x2) on 2
    (F(4x4) only where it has at least 8 tiles: on fewer, its weights, 4x the direct
    ones, are what the kernel waits for); the rows from :func:`channel_tile`, the padded
    copy partitioned.

    >>> from toolchain.schedules.generic.conv2d import ConvGeom
    >>> c12 = ConvGeom(1, 512, 7, 7, 512, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1)
    >>> [(s["algorithm"], s["wino_mr"], s["wino_nr"])
    ...  for s in winograd_channel_seeds(c12, 16, 32)]
    [('winograd2', 8, 48), ('winograd2', 4, 64), ('winograd2', 8, 32)]
    """
    out: list[Seed] = []
    for alg, m, vecs in (("winograd4h", 4, 2), ("winograd2", 2, 3), ("winograd2", 2, 4),
                         ("winograd4h", 4, 1), ("winograd2", 2, 2)):
        tiles = g.n * -(-g.oh // m) * -(-g.ow // m)
        if (vecs > 1 and lanes * (vecs - 1) >= g.o) or (m == 4 and tiles < 8):
            continue
        out.append({"algorithm": alg, "wino_layout": "channels", "wino_pad": "partitioned",
                    "wino_mr": channel_tile(tiles, vecs, budget), "wino_nr": vecs * lanes})
    return out


def gemm_seeds(g: ConvGeom, lanes: int, budget: int) -> list[Seed]:
    """A 1x1 convolution's seeds (GEMM and direct; the module docstring)."""
    out: list[Seed] = []
    fused = {"algorithm": "gemm", "gemm_epilogue": "fused"}
    if (g.sh, g.sw) != (1, 1):
        out += [{**fused, "b_pack": "rows", "mr": 16, "nr": lanes, "mc_tiles": 1},
                {**fused, "b_pack": "rows", "mr": 8, "nr": lanes, "mc_tiles": 1},
                {"algorithm": "gemm", "b_pack": "rows"}]
    else:
        out += [{**fused, "b_pack": "in_place"},
                {**fused, "b_pack": "in_place", "mr": 4, "nr": 4 * lanes},
                {"algorithm": "gemm", "b_pack": "in_place"},
                {"algorithm": "gemm", "b_pack": "in_place", "mc_tiles": 4}]
    out += [{"algorithm": "gemm", "mr": 8, "nr": 2 * lanes, "mc_tiles": 4},
            {"algorithm": "gemm", "mr": 16, "nr": lanes, "mc_tiles": 16}]
    one = _tiles(g, 2, budget)[:1]
    bare = {"algorithm": "direct", "ob": 2 * lanes, "cb": 1, "direct_pack": "none"}
    out += [{**bare, "ry": ry, "rw": rw, **epi} for ry, rw in one
            for epi in ({"epilogue": "transposed", "epilogue_at": "rows"}, {})]
    out += [{"algorithm": "direct", "ob": 2 * lanes, "ry": ry, "rw": rw, "cb": 16,
             "epilogue": "pixel_tiles"} for ry, rw in one if g.c % 16 == 0]
    if g.oh % 2 == 0 and g.ow % 2 == 0:
        out.append({"algorithm": "direct", "ob": 4 * lanes, "ry": 2, "rw": 2, "cb": 1})
    return out


def only_knobs(seeds: list[Seed], names: Collection[str]) -> tuple[Mapping[str, Any], ...]:
    """``seeds`` with the decisions on knobs outside ``names`` left out (repeats once).

    >>> only_knobs([{"a": 1, "b": 2}, {"a": 1, "c": 3}], {"a", "b"})
    ({'a': 1, 'b': 2}, {'a': 1})
    """
    out = [{k: v for k, v in s.items() if k in names} for s in seeds]
    return tuple(dict(t) for t in dict.fromkeys(tuple(s.items()) for s in out))
