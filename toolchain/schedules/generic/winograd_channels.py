"""Winograd F(m×m, 3×3) with the channels innermost: the ``wino_layout=channels`` point of
the convolution space, for a ``LayoutConv`` whose input and output are channel-blocked
(``NCHW{b}c``, the layout AVX bundles compute in).

:mod:`toolchain.schedules.generic.winograd` (``wino_layout=planes``) keeps the tiles
innermost: the blocked input is first copied into planes, the α×α tiles are gathered from
them (a stride-``m`` read per element), the GEMMs have the output channels as rows and
the tiles as vector columns, and the write-back gathers each output vector of ``b``
channels from ``b`` planes. Here every stage reads and writes whole vectors of channels
where the blocked layout already has them:

1. ``xp[n, c0, r, s, c1]`` — the zero-padded input, still blocked (a vector copy);
2. ``V[ε, ν, q, c] = Σ Bᵀ[ε,a] Bᵀ[ν,b] xp[tile q: a, b; c]`` — straight from ``xp``, no
   tile copy; ``ε, ν`` unrolled (the select chain of
   :func:`~toolchain.schedules.generic.winograd.winograd_compute`), ``c`` vectorized;
3. ``M[ε, ν, q, k] = Σ_c V[ε, ν, q, c] U[ε, ν, k/nr, c, k%nr]`` — α² GEMMs by
   :func:`~toolchain.schedules.generic.dense.schedule_gemm` with the *tiles* as rows
   (``wino_mr``) and the output channels as vector columns (``wino_nr``); ``U = G g Gᵀ``
   is packed at compile time in panels of ``nr`` output channels, so each GEMM reads the
   weights as one sequential stream (the planes layout reads ``mr`` rows at once);
4. ``Y2[q, i, j, k] = Σ Aᵀ[i,a] Aᵀ[j,b] M[a, b, q, k]`` (``k`` vectorized);
5. ``out[n, k0, y, x, k1] = Y2[tile(y, x), y%m, x%m, k0*b + k1] + bias`` — a vector copy.

Tiles past the last (the GEMM rows padded to ``mr``) repeat the last tile; their products
are never read.

>>> from toolchain.schedules.generic.conv2d import ConvGeom
>>> from toolchain.schedules.generic.common import cpu_params
>>> g = ConvGeom(1, 512, 7, 7, 512, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1)  # ResNet-18's C12
>>> p = channels_gemm_plan(g, 2, cpu_params("x86_64-avx512"), (8, 48))
>>> (p.m, p.n, p.k, p.mr, p.nr, p.mp, p.np_)
(16, 512, 512, 8, 48, 16, 528)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.graph.ir import Node, Value
from toolchain.schedules.generic.common import CpuParams, ceil_div
from toolchain.schedules.generic.dense import GemmPlan, plan_gemm, schedule_gemm
from toolchain.schedules.generic.winograd import lin_terms, select_pair
from toolchain.schedules.packing import packed_constant
from toolchain.schedules.registry import OpSchedule
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.partition_loop import PARTITION
from toolchain.topi.nn.winograd import winograd_matrices, winograd_weight_transform

Expr = ir.PrimExpr


def layout_block(layout: str) -> int | None:
    """The channel block ``b`` of ``NCHW{b}c`` (None for any other layout).

    >>> layout_block("NCHW16c"), layout_block("NCHW")
    (16, None)
    """
    return int(layout[4:-1]) if layout.startswith("NCHW") and layout.endswith("c") else None


def channels_applies(data_layout: str, out_layout: str) -> bool:
    """Whether ``wino_layout=channels`` is offered: input and output channel-blocked."""
    return layout_block(data_layout) is not None and layout_block(out_layout) is not None


def channels_gemm_plan(g: Any, m: int, p: CpuParams, tiles: tuple[int, int]) -> GemmPlan:
    """The α² GEMMs' plan: rows = the tiles, columns = the output channels, reduction =
    the input channels; ``tiles`` = ``(mr, nr)`` of the point."""
    ntiles = g.n * ceil_div(g.oh, m) * ceil_div(g.ow, m)
    return plan_gemm(ntiles, g.o, g.c, p, mr=tiles[0], nr=tiles[1])


def _weights(node: Node, g: Any, m: int, plan: GemmPlan, w_oihw: np.ndarray | None,
             points: str, tag: str) -> Value:
    """``U`` packed as ``[α, α, Kp/nr, C, nr]`` (output channels padded with zeros)."""
    from toolchain.schedules.generic.conv2d import oihw_weights

    al, nr, kp = m + 2, plan.nr, plan.np_

    def transform(oihw: np.ndarray) -> np.ndarray:
        u = winograd_weight_transform(oihw, m, points)  # [α, α, C, K]
        up = np.zeros((al, al, g.c, kp), np.float32)
        up[..., :g.o] = u
        return np.ascontiguousarray(
            up.reshape(al, al, g.c, kp // nr, nr).transpose(0, 1, 3, 2, 4))

    wv = node.inputs[1]
    if wv.data is not None:
        return packed_constant(wv, f"_winograd{tag}c{nr}",
                               lambda w: transform(oihw_weights(node, w)))
    return Value.constant(f"{wv.name}_winograd{tag}c{nr}", transform(w_oihw))


def channels_compute(node: Node, g: Any, m: int, plan: GemmPlan, data_layout: str,
                     out_layout: str, w_oihw: np.ndarray | None = None,
                     points: str = "lavin") -> tuple[list[te.Tensor], list[Value]]:
    """The five stages of the module docstring; returns (kernel args, input values)."""
    xv, bv = node.inputs[0], node.input(2)
    ib, ob = layout_block(data_layout), layout_block(out_layout)
    assert ib is not None and ob is not None, "channels layout needs NCHW{b}c in and out"
    at, _, bt = winograd_matrices(m, points)
    tag = f"{m}h" if points == "half" else f"{m}"
    al = m + 2
    nh, nw = ceil_div(g.oh, m), ceil_div(g.ow, m)
    ntiles = g.n * nh * nw
    nr, pp, kp = plan.nr, plan.mp, plan.np_
    x = te.placeholder(xv.shape, "float32", "X")
    upv = _weights(node, g, m, plan, w_oihw, points, tag)
    ut = te.placeholder(upv.shape, "float32", "U")
    args, values = [x, ut], [xv, upv]
    zero = ir.FloatImm(0.0, "float32")
    hp, wp = nh * m + 2, nw * m + 2

    def pad_f(n: Expr, c0: Expr, r: Expr, s_: Expr, c1: Expr) -> Expr:
        iy, ix = r - g.pt, s_ - g.pl
        ok = te.all(iy >= 0, iy < g.h, ix >= 0, ix < g.w)
        cy, cx = te.max(te.min(iy, g.h - 1), 0), te.max(te.min(ix, g.w - 1), 0)
        return te.if_then_else(ok, x[n, c0, cy, cx, c1], zero)

    xp = te.compute((g.n, g.c // ib, hp, wp, ib), pad_f, name="wino_pad")

    def vtrans(e1: Expr, e2: Expr, q: Expr, c: Expr) -> Expr:
        t = te.min(q, ntiles - 1) if pp > ntiles else q
        n, th, tw = t // (nh * nw), (t // nw) % nh, t % nw

        def d(r: int, s: int) -> Expr:
            return xp[n, c // ib, th * m + r, tw * m + s, c % ib]

        def val(a: int, b: int) -> Expr:
            rows = [lin_terms(bt[b], [d(r, s) for s in range(al)]) for r in range(al)]
            return lin_terms(bt[a], rows)

        return select_pair(al, e1, e2, val)

    v = te.compute((al, al, pp, g.c), vtrans, name="wino_V")
    rc = te.reduce_axis((0, g.c), name="rc")
    mm = te.compute((al, al, pp, kp), lambda e1, e2, i, j: te.sum(
        v[e1, e2, i, rc] * ut[e1, e2, j // nr, rc, j % nr], axis=rc), name="wino_M")

    def ytrans(q: Expr, i: Expr, j: Expr, k: Expr) -> Expr:
        def val(a: int, b: int) -> Expr:
            rows = [lin_terms(at[b], [mm[r, s, q, k] for s in range(al)]) for r in range(al)]
            return lin_terms(at[a], rows)

        return select_pair(m, i, j, val)

    y2 = te.compute((ntiles, m, m, g.o), ytrans, name="wino_Y")
    bias = None
    if bv is not None:
        bias = te.placeholder(bv.shape, "float32", "bias")
        args.append(bias)
        values.append(bv)

    def out_f(n: Expr, k0: Expr, yy: Expr, xx: Expr, k1: Expr) -> Expr:
        k = k0 * ob + k1
        val = y2[(n * nh + yy // m) * nw + xx // m, yy % m, xx % m, k]
        return val + bias[k] if bias is not None else val

    out = te.compute((g.n, g.o // ob, g.oh, g.ow, ob), out_f, name="conv_out")
    return args + [out], values


def _split_vector(sch: Schedule, loop: Any, lanes: int) -> tuple[Any, Any | None]:
    """``loop`` split into (outer, vectorized lanes) when its extent is a multiple of
    ``lanes``; else (loop, None)."""
    f = sch.get(loop)
    ext = int(f.extent.value) if isinstance(f.extent, ir.IntImm) else 0
    if ext and ext % lanes == 0:
        o, i = sch.split(loop, [None, lanes])
        sch.vectorize(i)
        return o, i
    return loop, None


def schedule_winograd_channels(node: Node, g: Any, p: CpuParams, m: int, data_layout: str,
                               out_layout: str, w_oihw: np.ndarray | None,
                               tiles: tuple[int, int], points: str = "lavin",
                               pad: str = "select") -> OpSchedule:
    """Build and schedule the channels-innermost Winograd kernel (the module docstring);
    ``tiles`` = the GEMMs' ``(mr, nr)``: ``mr`` tiles by ``nr`` output channels;
    ``pad=partitioned`` cuts the padded copy into border and interior loops."""
    plan = channels_gemm_plan(g, m, p, tiles)
    args, values = channels_compute(node, g, m, plan, data_layout, out_layout, w_oihw,
                                    points)
    hv = "h" if points == "half" else ""
    name = f"conv2d_winograd{m}{hv}c_{g.c}x{g.h}x{g.w}_{g.o}"
    sch = Schedule(te.create_prim_func(args, name=name))
    lanes = plan.lanes
    pb = sch.get_block("wino_pad")
    _, c0, r, s_, c1 = sch.get_loops(pb)
    _split_vector(sch, c1, lanes)
    if pad == "partitioned":
        sch.annotate(r, PARTITION, 1)
        sch.annotate(s_, PARTITION, 1)
    vb = sch.get_block("wino_V")
    e1, e2, q, c = sch.get_loops(vb)
    co, ci = _split_vector(sch, c, lanes)
    sch.reorder(q, co, e1, e2, *([ci] if ci is not None else []))
    sch.unroll(e1)
    sch.unroll(e2)
    schedule_gemm(sch, plan, p, 2, "wino_M")
    yb = sch.get_block("wino_Y")
    q, i, j, k = sch.get_loops(yb)
    ko, ki = _split_vector(sch, k, lanes)
    sch.reorder(q, ko, i, j, *([ki] if ki is not None else []))
    sch.unroll(i)
    sch.unroll(j)
    ob = sch.get_block("conv_out")
    ol = sch.get_loops(ob)
    _split_vector(sch, ol[4], lanes)
    if g.ow % m == 0 and g.oh % m == 0:
        y0, y1 = sch.split(ol[2], [None, m])
        x0, x1 = sch.split(ol[3], [None, m])
        sch.reorder(y0, x0, y1, x1)
    if p.cores > 1:
        sch.parallel(sch.get_loops(pb)[1])
        sch.parallel(sch.get_loops(vb)[0])
        sch.parallel(sch.get_loops(yb)[0])
        sch.parallel(sch.fuse(*sch.get_loops(ob)[:2]))
    info: dict[str, Any] = {"schedule": f"conv2d_winograd_f{m}",
                            "layout": f"Winograd F({m}x{m}), channels innermost", "m": m,
                            "mr": plan.mr, "nr": plan.nr, "packed_weight": True,
                            "flops": g.flops}
    return OpSchedule(sch, values, list(node.outputs), info)


__all__ = ["channels_applies", "channels_compute", "channels_gemm_plan", "layout_block",
           "schedule_winograd_channels"]
