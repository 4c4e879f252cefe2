"""Winograd F(m×m, 3×3) convolution as the default CPU schedule of 3×3 stride-1 convs.

Same algebra as :mod:`toolchain.topi.nn.winograd` (``Y = Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A``),
laid out for speed:

1. ``D[c, a, b, p]`` — the α×α input tiles, tiles ``p`` innermost (zero padding and the
   partial last tiles folded in): every later stage reads whole vectors of tiles;
2. ``V[ε, ν, p/nr, c, p%nr] = Σ Bᵀ[ε,a] Bᵀ[ν,b] D[c, a, b, p]`` written straight into the
   packed-panel layout the GEMM micro-kernel reads; ``ε, ν`` are unrolled so each of the α²
   outputs is a sum of only the non-zero terms (the coefficients are Python constants
   in a select chain that unrolling folds);
3. ``M[ε, ν, k, p] = Σ_c U[ε, ν, k, c] V[ε, ν, c, p]`` — α² GEMMs scheduled by
   :func:`toolchain.schedules.generic.dense.schedule_gemm` (register tile, L2 blocking);
   ``U = G g Gᵀ`` is computed at compile time (float64) and zero-padded to the tile rows;
4. ``Y2[k, i, j, p] = Σ Aᵀ[i,a] Aᵀ[j,b] M[a, b, k, p]`` (unrolled like 2.);
5. ``out[n, k, y, x] = Y2[k, y%m, x%m, tile(y, x)] + bias[k]``.

**When** (:func:`winograd_tile`, a rule measured on this project's benchmark, see
``docs/performance.md``, section "CNN kernels"): 3×3, stride 1, dilation 1, one group,
constant weights, at least :data:`MIN_CHANNELS` (32) input *and* output channels, and the
tiles fill at least half of the vectors they are rounded up to; then F(2×2). Below 32
channels the transforms (work ∝ C + K per tile) outweigh the GEMM they shrink (∝ C·K):
16→16 channels on 32×32 runs faster direct. F(4×4) does fewer multiplications but, in
bundles (blocked ``NCHW16c`` activations), measured no faster than F(2×2) on any ResNet
layer while its weights are 4× the direct ones (F(2×2): 16/9×); it is used only when asked
for (``cpu_conv2d.ALGORITHM = "winograd4"``, up to :data:`F4_MAX_CHANNELS` input channels:
its error grows with C, 2.3e-5 of the largest output at C = 512).

This is the tuning space's ``wino_layout=planes`` (tiles innermost); a channel-blocked
``LayoutConv`` may instead be tuned to ``channels``
(:mod:`toolchain.schedules.generic.winograd_channels`).

>>> from toolchain.schedules.generic.conv2d import ConvGeom
>>> g = ConvGeom(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1)
>>> winograd_tile(g, cpu_params("x86_64-avx512")), winograd_tile(
...     ConvGeom(1, 512, 7, 7, 512, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1), cpu_params("x86_64-avx512"))
(2, 2)
>>> winograd_tile(ConvGeom(1, 16, 32, 32, 16, 3, 3, 32, 32, 1, 1, 1, 1, 1, 1),
...               cpu_params("x86_64-avx512")) is None
True
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from toolchain import te
from toolchain.graph.ir import Node, Value
from toolchain.schedules.generic.common import CpuParams, ceil_div, cpu_params
from toolchain.schedules.generic.dense import GemmPlan, plan_gemm, schedule_gemm
from toolchain.schedules.packing import packed_constant
from toolchain.schedules.registry import OpSchedule
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.partition_loop import PARTITION
from toolchain.topi.nn.winograd import winograd_matrices, winograd_weight_transform

Expr = ir.PrimExpr

#: a forced F(4x4, 3x3) is used up to this many input channels (accuracy, see the module
#: docstring)
F4_MAX_CHANNELS = 512
#: most input channels for which the tuner is offered F(4x4, 3x3): a tuned kernel stays
#: within 1e-5 of the reference (largest error / largest output against onnxruntime,
#: three seeds: 7.1-8.1e-6 at 128 channels, 1.0-1.4e-5 at 256, 1.9e-5 at 512)
F4_TUNE_MAX_CHANNELS = 128
#: most input channels for which the tuner is offered F(4x4) with the points 0, ±1, 1/2,
#: -2 (``winograd4h``), whose error is about 2.5x smaller (docs/tuning.md)
F4H_TUNE_MAX_CHANNELS = 512
#: fewest input and output channels for which Winograd beats the direct convolution
MIN_CHANNELS = 32


def winograd_applies(g: Any) -> bool:
    """Whether Winograd F(m×m, 3×3) computes convolution ``g`` at all (3×3, stride 1,
    dilation 1); :func:`winograd_tile` decides whether it should."""
    return (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)


def winograd_tile(g: Any, p: CpuParams) -> int | None:
    """The output tile ``m`` for conv geometry ``g`` (2), or None for the direct conv
    (the rule of the module docstring)."""
    if not winograd_applies(g) or min(g.c, g.o) < MIN_CHANNELS:
        return None
    lanes = p.lanes("float32")
    tiles = g.n * ceil_div(g.oh, 2) * ceil_div(g.ow, 2)
    if ceil_div(tiles, lanes) * lanes > 2 * tiles:
        return None  # more than half of every GEMM row would be padding
    return 2


def algorithm_tile(algorithm: str) -> tuple[int, str]:
    """``(m, points)`` of a Winograd ``algorithm`` knob value: ``winograd2``,
    ``winograd4`` (Lavin & Gray's points) or ``winograd4h`` (F(4×4) with the points
    0, ±1, 1/2, −2: :data:`F4H_TUNE_MAX_CHANNELS`).

    >>> algorithm_tile("winograd4"), algorithm_tile("winograd4h")
    ((4, 'lavin'), (4, 'half'))
    """
    half = algorithm.endswith("h")
    return int(algorithm[len("winograd"):len(algorithm) - half]), "half" if half else "lavin"


def forced_tile(g: Any, algorithm: str) -> int | None:
    """The tile an explicit ``algorithm`` (``"winograd2"``/``"winograd4"``) asks for, where
    Winograd applies; F(4×4) above :data:`F4_MAX_CHANNELS` input channels falls back to
    F(2×2) (accuracy).

    >>> from toolchain.schedules.generic.conv2d import ConvGeom
    >>> forced_tile(ConvGeom(1, 8, 9, 9, 8, 3, 3, 9, 9, 1, 1, 1, 1, 1, 1), "winograd4")
    4
    """
    if not winograd_applies(g):
        return None
    m = int(algorithm[-1])
    return 2 if m == 4 and g.c > F4_MAX_CHANNELS else m


def lin_terms(coefs: np.ndarray, terms: list[Expr]) -> Expr:
    """``Σ coefs[i] * terms[i]`` over the non-zero coefficients (±1 without a multiply)."""
    out: Expr | None = None
    for c, t in zip(coefs, terms, strict=True):
        if c == 0:
            continue
        neg = c < 0
        mag = abs(float(c))
        v = t if mag == 1.0 else t * ir.FloatImm(mag, "float32")
        if out is None:
            out = -v if neg else v
        else:
            out = out - v if neg else out + v
    return out if out is not None else ir.FloatImm(0.0, "float32")


def select_pair(n: int, i: Expr, j: Expr, value: Any) -> Expr:
    """``value(a, b)`` for the (constant after unrolling) pair ``(i, j)`` in ``n x n``."""
    out: Expr = value(n - 1, n - 1)
    for a in range(n):
        for b in range(n):
            if (a, b) != (n - 1, n - 1):
                out = te.select(te.all(te.equal(i, a), te.equal(j, b)), value(a, b), out)
    return out


def winograd_gemm_plan(g: Any, m: int, p: CpuParams,
                       tiles: tuple[int, int] | None = None) -> GemmPlan:
    """The plan of the α² GEMMs of F(m×m, 3×3); ``tiles`` = ``(mr, nr)`` of a tuned point
    (None: the heuristic's)."""
    ntiles = g.n * ceil_div(g.oh, m) * ceil_div(g.ow, m)
    if tiles is not None:
        return plan_gemm(g.o, ntiles, g.c, p, mr=tiles[0], nr=tiles[1])
    return _gemm_plan(g, m, p)


def _gemm_plan(g: Any, m: int, p: CpuParams) -> GemmPlan:
    tiles = g.n * ceil_div(g.oh, m) * ceil_div(g.ow, m)
    plan = plan_gemm(g.o, tiles, g.c, p)
    lanes = plan.lanes
    # one vector of tiles wastes less than two when the tile count is just over a vector
    if plan.nr > lanes and ceil_div(tiles, lanes) * lanes < ceil_div(tiles, plan.nr) * plan.nr:
        plan = dataclasses.replace(plan, nr=lanes)
    return plan


def _block(layout: str) -> int | None:
    return int(layout[4:-1]) if layout.startswith("NCHW") and layout.endswith("c") else None


def winograd_compute(node: Node, g: Any, m: int, plan: GemmPlan, data_layout: str = "NCHW",
                     out_layout: str = "NCHW", w_oihw: np.ndarray | None = None,
                     points: str = "lavin") -> tuple[list[te.Tensor], list[Value]]:
    """The five stages of the module docstring; returns (kernel args, input values).

    ``data_layout``/``out_layout`` (``NCHW``, ``NHWC``, ``NCHW{b}c``) are the layouts of
    the node's input and output (a ``LayoutConv``); ``w_oihw`` its weights in OIHW;
    ``points`` the interpolation points (:func:`~toolchain.topi.nn.winograd.
    winograd_matrices`)."""
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    ib, ob = _block(data_layout), _block(out_layout)
    at, _, bt = winograd_matrices(m, points)
    tag = f"{m}h" if points == "half" else f"{m}"
    al = m + 2
    nh, nw = ceil_div(g.oh, m), ceil_div(g.ow, m)
    nr, pp, kp = plan.nr, plan.np_, plan.mp
    x = te.placeholder(xv.shape, "float32", "X")
    from toolchain.schedules.generic.conv2d import oihw_weights

    def transform(oihw: np.ndarray) -> np.ndarray:
        u = winograd_weight_transform(oihw, m, points).transpose(0, 1, 3, 2)  # [α,α,K,C]
        up = np.zeros((al, al, kp, g.c), np.float32)
        up[:, :, :g.o] = u
        return up

    if wv.data is not None:  # w_oihw, if given, is oihw_weights(node, wv.data)
        upv = packed_constant(wv, f"_winograd{tag}", lambda w: transform(oihw_weights(node,
                                                                                       w)))
    else:
        upv = Value.constant(f"{wv.name}_winograd{tag}", transform(w_oihw))
    ut = te.placeholder(upv.shape, "float32", "U")
    args, values = [x, ut], [xv, upv]
    zero = ir.FloatImm(0.0, "float32")

    # zero-padded copy of X covering every (partial) tile, then the tiles with the tile
    # column innermost: D[c, a, b, T, tw] (T = n * nh + th) is D[c, a, b, q] in memory
    hp, wp = nh * m + 2, nw * m + 2

    def pad_f(n: Expr, c: Expr, r: Expr, s_: Expr) -> Expr:
        iy, ix = r - g.pt, s_ - g.pl
        ok = te.all(iy >= 0, iy < g.h, ix >= 0, ix < g.w)
        cy, cx = te.max(te.min(iy, g.h - 1), 0), te.max(te.min(ix, g.w - 1), 0)
        if ib is not None:
            val = x[n, c // ib, cy, cx, c % ib]
        elif data_layout == "NHWC":
            val = x[n, cy, cx, c]
        else:
            val = x[n, c, cy, cx]
        return te.if_then_else(ok, val, zero)

    xp = te.compute((g.n, g.c, hp, wp), pad_f, name="wino_pad")
    rows_t = ceil_div(pp, nw)

    def tile_in(c: Expr, a: Expr, b: Expr, t: Expr, tw: Expr) -> Expr:
        n = te.min(t // nh, g.n - 1)
        val = xp[n, c, (t % nh) * m + a, tw * m + b]
        return te.if_then_else(t < g.n * nh, val, zero) if rows_t > g.n * nh else val

    d5 = te.compute((g.c, al, al, rows_t, nw), tile_in, name="wino_tiles")

    class _Flat:
        def __getitem__(self, idx: tuple) -> Expr:
            c, a, b, q = idx
            return d5[c, a, b, q // nw, q % nw]

    d = _Flat()

    def vtrans(e1: Expr, e2: Expr, j0: Expr, c: Expr, j1: Expr) -> Expr:
        q = j0 * nr + j1

        def val(a: int, b: int) -> Expr:
            rows = [lin_terms(bt[b], [d[c, r, s, q] for s in range(al)]) for r in range(al)]
            return lin_terms(bt[a], rows)

        return select_pair(al, e1, e2, val)

    v = te.compute((al, al, pp // nr, g.c, nr), vtrans, name="wino_V")
    rc = te.reduce_axis((0, g.c), name="rc")
    mm = te.compute((al, al, kp, pp), lambda e1, e2, i, j: te.sum(
        ut[e1, e2, i, rc] * v[e1, e2, j // nr, rc, j % nr], axis=rc), name="wino_M")

    def ytrans(k: Expr, i: Expr, j: Expr, q: Expr) -> Expr:
        def val(a: int, b: int) -> Expr:
            rows = [lin_terms(at[b], [mm[r, s, k, q] for s in range(al)]) for r in range(al)]
            return lin_terms(at[a], rows)

        return select_pair(m, i, j, val)

    y2 = te.compute((g.o, m, m, pp), ytrans, name="wino_Y")
    bias = None
    if bv is not None:
        bias = te.placeholder(bv.shape, "float32", "bias")
        args.append(bias)
        values.append(bv)

    def out_f(n: Expr, k: Expr, yy: Expr, xx: Expr) -> Expr:
        q = (n * nh + yy // m) * nw + xx // m
        val = y2[k, yy % m, xx % m, q]
        return val + bias[k] if bias is not None else val

    if ob is not None:
        out = te.compute((g.n, g.o // ob, g.oh, g.ow, ob), lambda n, k0, yy, xx, k1: out_f(
            n, k0 * ob + k1, yy, xx), name="conv_out")
    elif out_layout == "NHWC":
        out = te.compute((g.n, g.oh, g.ow, g.o), lambda n, yy, xx, k: out_f(n, k, yy, xx),
                         name="conv_out")
    else:
        out = te.compute((g.n, g.o, g.oh, g.ow), out_f, name="conv_out")
    return args + [out], values


def _vectorize_last(sch: Schedule, block: Any, lanes: int) -> None:
    loops = sch.get_loops(block)
    f = sch.get(loops[-1])
    ext = int(f.extent.value) if isinstance(f.extent, ir.IntImm) else 0
    if ext and ext % lanes == 0:
        _, vl = sch.split(loops[-1], [None, lanes])
        sch.vectorize(vl)


def schedule_winograd(node: Node, g: Any, p: CpuParams, m: int, data_layout: str = "NCHW",
                      out_layout: str = "NCHW", w_oihw: np.ndarray | None = None,
                      tiles: tuple[int, int] | None = None, points: str = "lavin",
                      pad: str = "select", pad_order: str = "planes") -> OpSchedule:
    """Build and schedule the Winograd kernel of a Conv (or ``LayoutConv``) node;
    ``tiles``: the GEMMs' ``(mr, nr)`` of a tuned point (None: the heuristic's);
    ``points``: F(4×4)'s interpolation points; ``pad``: ``partitioned`` cuts the padded
    copy's rows and columns into border and interior loops (the ``partition_loops``
    lowering pass), so the interior is a plain copy a C compiler vectorizes;
    ``pad_order``: for a channel-blocked input (``NCHW{b}c``), ``blocks`` copies it block
    by block with the block's ``b`` channels innermost — each input vector read once and
    scattered to ``b`` planes, instead of each element gathered plane by plane (``planes``:
    a 16-float stride between consecutive reads on AVX-512); ResNet-18's C2 in a bundle
    went 608 → 550-577 µs."""
    plan = winograd_gemm_plan(g, m, p, tiles)
    args, values = winograd_compute(node, g, m, plan, data_layout, out_layout, w_oihw,
                                    points)
    name = f"conv2d_winograd{m}{'h' if points == 'half' else ''}_{g.c}x{g.h}x{g.w}_{g.o}"
    sch = Schedule(te.create_prim_func(args, name=name))
    lanes = plan.lanes
    # input transform: per (c, vector of tiles), all α² outputs unrolled
    vb = sch.get_block("wino_V")
    e1, e2, j0, c, j1 = sch.get_loops(vb)
    sch.reorder(j0, c, e1, e2, j1)
    sch.unroll(e1)
    sch.unroll(e2)
    _vectorize_last(sch, vb, lanes)
    schedule_gemm(sch, plan, p, 2, "wino_M")
    yb = sch.get_block("wino_Y")
    k, i, j, q = sch.get_loops(yb)
    q0, q1 = sch.split(q, [None, lanes])
    sch.reorder(k, q0, i, j, q1)
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(q1)
    ob = sch.get_block("conv_out")
    ol = sch.get_loops(ob)
    if g.ow % m == 0 and g.oh % m == 0 and out_layout != "NHWC":
        y0, y1 = sch.split(ol[2], [None, m])
        x0, x1 = sch.split(ol[3], [None, m])
        sch.reorder(y0, x0, y1, x1)
    pad_rows = sch.get_loops(sch.get_block("wino_pad"))[2:]  # n c | r s
    ib = _block(data_layout)
    if pad_order == "blocks" and ib is not None:
        c0, c1 = sch.split(sch.get_loops(sch.get_block("wino_pad"))[1], [None, ib])
        sch.reorder(c0, *pad_rows, c1)
    if pad == "partitioned":
        for loop in pad_rows:
            sch.annotate(loop, PARTITION, 1)
        # the tiles' rows past the image (a GEMM panel's padding): a loop of zeros
        sch.annotate(sch.get_loops(sch.get_block("wino_tiles"))[3], PARTITION, 1)
    if p.cores > 1:
        sch.parallel(sch.get_loops(sch.get_block("wino_pad"))[1])
        sch.parallel(sch.get_loops(sch.get_block("wino_tiles"))[0])
        sch.parallel(sch.get_loops(vb)[0])
        sch.parallel(sch.get_loops(yb)[0])
        sch.parallel(sch.fuse(*sch.get_loops(ob)[:2]))
    info: dict[str, Any] = {"schedule": f"conv2d_winograd_f{m}", "layout": f"Winograd F({m}x{m})",
                            "m": m, "mr": plan.mr, "nr": plan.nr, "packed_weight": True,
                            "flops": g.flops}
    return OpSchedule(sch, values, list(node.outputs), info)


__all__ = ["F4H_TUNE_MAX_CHANNELS", "F4_MAX_CHANNELS", "F4_TUNE_MAX_CHANNELS", "MIN_CHANNELS",
           "algorithm_tile", "forced_tile",
           "schedule_winograd", "winograd_applies", "winograd_compute", "winograd_gemm_plan",
           "winograd_tile", "cpu_params"]
