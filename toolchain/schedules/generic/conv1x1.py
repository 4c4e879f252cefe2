"""CPU schedules of 1x1 convolutions (no padding, any stride): a GEMM or the direct kernel.

A pointwise convolution is ``Y[o, pixels] = W[o, c] @ X[c, pixels]`` per image. By default
it is the packed GEMM of :mod:`toolchain.schedules.generic.dense` over the (subsampled)
pixels, whose tail of pixels is padded to the register tile's ``nr`` columns (ResNet-18's
C11, 7x7 = 49 pixels, computes 64 columns). Its tuning space (:func:`conv1x1_space`, kind
``gemm``) adds ``algorithm``: ``direct`` runs the channel-blocked direct convolution of
:mod:`toolchain.schedules.generic.conv2d` instead (register tiles of output pixels by
output channels, no pixel padding; a strided one packs only the pixels it reads), with
its knobs; and ``b_pack``: for strided ones ``panels`` (subsample, then ``nr``-wide
panels) or ``rows`` (one strided copy the GEMM reads in place), for stride 1 where the
pixels fill whole panels ``panels`` or ``in_place`` (no copy: the GEMM's ``nr`` pixels of
each input channel are read straight from X; ResNet-18's C3 gains 6-8 %); and
``gemm_epilogue``: ``pass`` (the heuristic's: the product buffer, then a pass adding the
bias into the NCHW output) or ``fused`` (where ``mr`` divides the output channels and
``nr`` the output pixels: the pass is inlined into the register tiles' write-back, which
stores each tile plus its bias straight into the output, at ``[j // OW, j % OW]`` for
flat pixel ``j`` — no product buffer; C3 at 97 % of one core's FMA peak, from 81 %).
The direct kernel's ``direct_pack``: ``copy`` (the heuristic's: the pixels it reads are
copied into channel blocks first) or ``none`` (each pixel broadcast straight from X: a
1x1 kernel broadcasts its pixels one by one anyway, so it needs no copy; C8 gains 4 %).

Example (before: ``Conv`` 1x1 stride 2, 8 -> 16 channels on 8x8; after, the default: the
GEMM over the 16 subsampled pixels, ``C_prod[o, j] = sum_c W_mat[o, c] * B_packed[j/nr,
c, j%nr]``)::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> from toolchain.schedules.generic.conv2d import schedule_conv2d
    >>> w = np.ones((16, 8, 1, 1), np.float32)
    >>> node = Node("Conv", "c", [Value("x", (1, 8, 8, 8), "float32"), Value.constant(
    ...     "w", w)], [Value("y", (1, 16, 4, 4), "float32")], {"strides": [2, 2]})
    >>> schedule_conv2d(node, "x86_64-avx2").info["schedule"]
    'conv2d_1x1_gemm'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space
from toolchain.graph.ir import Node, Value
from toolchain.schedules.generic.common import CpuParams, ceil_div
from toolchain.schedules.generic.conv2d import (
    ConvGeom,
    conv_compute,
    conv_space,
    loop_defaults,
    plan_conv,
    schedule_conv,
    tuned_plan,
)
from toolchain.schedules.generic.conv_epilogue import unblock_pixels
from toolchain.schedules.generic.conv_seeds import gemm_seeds, only_knobs
from toolchain.schedules.generic.dense import (
    GemmPlan,
    gemm_space,
    gemm_workload,
    plan_gemm,
    schedule_gemm,
    tuned_gemm,
)
from toolchain.schedules.packing import packed_constant
from toolchain.schedules.registry import OpSchedule
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

Expr = ir.PrimExpr

#: the direct convolution's knobs a 1x1 convolution keeps (its window loops have one step)
DIRECT_KNOBS = ("ob", "rw", "ry", "cb", "unroll_cb", "epilogue", "epilogue_at")


def conv1x1_compute(node: Node, g: ConvGeom, plan: GemmPlan, b_pack: str = "panels"
                    ) -> tuple[list[te.Tensor], list[Value]]:
    """``Y[n, o, pixels] = W[o, c] @ X[n, c, pixels]`` with the (strided) pixels of X packed
    into ``nr``-wide panels and W (padded to a multiple of ``mr`` rows) constant.

    ``b_pack="rows"``: the (strided) pixels are copied once into rows of
    ``ceil(np_ / OW) * OW`` floats per input channel (``B_rows``, zeros past the last
    pixel) that the GEMM reads in place, where ``panels`` copies twice for a strided
    convolution (subsample, then panels). ``b_pack="in_place"`` (stride 1, the pixels
    filling whole panels: :func:`in_place_ok`): no copy, the GEMM reads its ``nr`` pixels
    of each input channel straight from X (one row of ``H * W`` floats per channel)."""
    xv, wv = node.inputs[0], node.inputs[1]
    bv = node.input(2)
    nr, mp, np_ = plan.nr, plan.mp, plan.np_
    hw = g.oh * g.ow
    x = te.placeholder(xv.shape, "float32", "X")
    def matrix(data: np.ndarray) -> np.ndarray:
        wm = np.zeros((mp, g.c), np.float32)
        wm[:g.o] = data.reshape(g.o, g.c)
        return wm

    wm = packed_constant(wv, "_matrix", matrix)
    w = te.placeholder(wm.shape, "float32", "W_mat")
    args, values = [x, w], [xv, wm]
    zero = ir.FloatImm(0.0, "float32")
    if b_pack == "rows":
        return _rows_compute(x, w, bv, args, values, g, plan)
    if b_pack == "in_place":
        if not in_place_ok(g, nr):
            raise ValueError(f"b_pack='in_place' needs stride 1 and the {hw} pixels in whole "
                             f"panels of {nr}")
        return _product(g, w, mp, np_, lambda n, r, j: x[n, r, j // g.ow, j % g.ow], bv,
                        args, values)
    src = x
    if (g.sh, g.sw) != (1, 1) or (g.oh, g.ow) != (g.h, g.w):
        # subsample first: the pack then reads pixel q at flat offset q (no div/mod)
        src = te.compute((g.n, g.c, g.oh, g.ow),
                         lambda n, c, y, xx: x[n, c, y * g.sh, xx * g.sw], name="X_sub")

    def pack(n: Expr, j0: Expr, c: Expr, j1: Expr) -> Expr:
        q = te.min(j0 * nr + j1, hw - 1)
        val = src[n, c, q // g.ow, q % g.ow]
        return te.if_then_else(j0 * nr + j1 < hw, val, zero) if np_ != hw else val

    bp = te.compute((g.n, np_ // nr, g.c, nr), pack, name="B_packed")
    return _product(g, w, mp, np_, lambda n, r, j: bp[n, j // nr, r, j % nr], bv, args,
                    values)


def in_place_ok(g: ConvGeom, nr: int) -> bool:
    """Whether the GEMM can read X in place (``b_pack="in_place"``): stride 1, no
    padding, and the pixels a whole number of ``nr``-wide panels (no padded columns)."""
    return (g.sh, g.sw) == (1, 1) and (g.oh, g.ow) == (g.h, g.w) \
        and (g.oh * g.ow) % nr == 0


def fused_ok(g: ConvGeom, nr: int, mr: int) -> bool:
    """Whether the GEMM's register tiles can store the output with its bias directly
    (``gemm_epilogue="fused"``): ``mr`` divides the output channels and ``nr`` the output
    pixels, so no tile is padded and the product is the output itself."""
    return g.o % mr == 0 and (g.oh * g.ow) % nr == 0


def _product(g: ConvGeom, w: te.Tensor, mp: int, np_: int,
             read_b: Callable[[Expr, Expr, Expr], Expr], bv: Value | None,
             args: list[te.Tensor], values: list[Value]
             ) -> tuple[list[te.Tensor], list[Value]]:
    """The GEMM ``C_prod[n, i, j] = sum_r W[i, r] * read_b(n, r, j)`` and the NCHW output
    ``C`` (with the bias, if the node has one) that both packings of
    :func:`conv1x1_compute` end in."""
    r = te.reduce_axis((0, g.c), name="rc")
    bias = None
    if bv is not None:
        bias = te.placeholder(bv.shape, "float32", "bias")
        args.append(bias)
        values.append(bv)
    prod = te.compute((g.n, mp, np_), lambda n, i, j: te.sum(
        w[i, r] * read_b(n, r, j), axis=r), name="C_prod")

    def epi(n: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
        v = prod[n, o, y * g.ow + xx]
        return v + bias[o] if bias is not None else v

    out = te.compute((g.n, g.o, g.oh, g.ow), epi, name="C")
    return args + [out], values


def _rows_compute(x: te.Tensor, w: te.Tensor, bv: Value | None, args: list[te.Tensor],
                  values: list[Value], g: ConvGeom, plan: GemmPlan
                  ) -> tuple[list[te.Tensor], list[Value]]:
    """The ``b_pack="rows"`` tensors of :func:`conv1x1_compute`: ``B_rows[n, c, y, x]``
    holds ``ceil(np_ / OW)`` rows per channel (rows past the image are zeros) and the
    product reads its pixel ``j`` at ``[j // OW, j % OW]``, which flattens to ``j``."""
    rows = ceil_div(plan.np_, g.ow)

    def row(n: Expr, c: Expr, y: Expr, xx: Expr) -> Expr:
        val = x[n, c, te.min(y, g.oh - 1) * g.sh, xx * g.sw]
        return te.if_then_else(y < g.oh, val, ir.FloatImm(0.0, "float32")) \
            if rows > g.oh else val

    br = te.compute((g.n, g.c, rows, g.ow), row, name="B_rows")
    return _product(g, w, plan.mp, plan.np_, lambda n, r, j: br[n, r, j // g.ow, j % g.ow],
                    bv, args, values)


def _when(alg: str, holds: Callable[[Mapping[str, Any]], bool] | None
          ) -> Callable[[Mapping[str, Any]], bool]:
    """A knob's activity (or a rule) that only matters for algorithm ``alg``."""
    if holds is None:
        return lambda q: q["algorithm"] == alg
    return lambda q: q["algorithm"] == alg and holds(q)


def conv1x1_space(g: ConvGeom, p: CpuParams, plan: GemmPlan, unblock: tuple[int, ...] = ()
                  ) -> Space:
    """The knobs of a 1x1 convolution: the GEMM's (``mr``, ``nr``, ``mc_tiles``), then
    ``algorithm`` (``gemm``, the heuristic's, or ``direct``), ``b_pack`` for a strided one
    (GEMM only) and the direct convolution's :data:`DIRECT_KNOBS` (direct only). Each
    algorithm's rules bind only its own points; the space's kind stays ``gemm`` and its
    workload key that of the GEMM, so records written before ``algorithm`` existed replay
    (as ``gemm``, ``panels``). ``unblock``: the pixel counts of the transposing
    write-back the target declares
    (:func:`~toolchain.schedules.generic.conv_epilogue.unblock_pixels`).

    >>> from toolchain.schedules.generic.common import cpu_params
    >>> g = ConvGeom(1, 256, 14, 14, 512, 1, 1, 7, 7, 2, 2, 1, 1, 0, 0)
    >>> p = cpu_params("x86_64-avx512")
    >>> s = conv1x1_space(g, p, plan_gemm(512, 49, 256, p))
    >>> [k.name for k in s.knobs]  # doctest: +NORMALIZE_WHITESPACE
    ['mr', 'nr', 'mc_tiles', 'algorithm', 'b_pack', 'ob', 'rw', 'ry', 'cb', 'unroll_cb',
     'epilogue', 'epilogue_at', 'direct_pack']
    >>> d = {**s.default(), "algorithm": "direct", "rw": 7, "cb": 8, "unroll_cb": True}
    >>> s.is_valid(d), s.canonical(d)["nr"] == s.default()["nr"]
    (True, True)
    """
    key = gemm_workload("conv1x1", (g.n,), g.o, g.oh * g.ow, g.c, p,
                        f"in{g.c}x{g.h}x{g.w}s{g.sh}x{g.sw}")
    gemm = gemm_space(plan, p, key)
    direct = conv_space(g, p, plan_conv(g, p), unblock=unblock)
    knobs = [replace(k, active=_when("gemm", k.active)) for k in gemm.knobs]
    knobs.append(Knob("algorithm", ("gemm", "direct"), "gemm",
                      "the packed GEMM over the pixels, or the channel-blocked direct "
                      "convolution (tiles of output pixels x output channels)"))
    if (g.sh, g.sw) != (1, 1):
        knobs.append(Knob("b_pack", ("panels", "rows"), "panels",
                          "the GEMM's pixels: subsampled, then copied into nr-wide panels; "
                          "or one strided copy into rows the GEMM reads in place",
                          active=_when("gemm", None)))
    elif any(in_place_ok(g, nr) for nr in gemm.knob("nr").choices):
        knobs.append(Knob("b_pack", ("panels", "in_place"), "panels",
                          "the GEMM's pixels: copied into nr-wide panels, or read in place "
                          "from X (no copy; the pixels fill whole panels)",
                          active=_when("gemm", None)))
    if any(fused_ok(g, plan.lanes * v, mr) for v in (1, 2, 3, 4)
           for mr in range(1, min(g.o, 16) + 1)):
        knobs.append(Knob("gemm_epilogue", ("pass", "fused"), "pass",
                          "the bias: added by a pass over the product buffer, or as each "
                          "register tile is stored straight into the NCHW output (no "
                          "product buffer; the tiles must not pad the rows or pixels)",
                          active=_when("gemm", None)))
    knobs += [replace(direct.knob(n), active=_when("direct", direct.knob(n).active))
              for n in DIRECT_KNOBS]
    knobs.append(Knob("direct_pack", ("copy", "none"), "copy",
                      "the direct kernel's pixels: copied (subsampled) into channel blocks "
                      "first, or broadcast straight from X (no copy)",
                      active=_when("direct", None)))
    rules = [Rule(r.message, _unless("gemm", r.holds)) for r in gemm.rules] + \
        [Rule(r.message, _unless("direct", r.holds)) for r in direct.rules] + \
        [Rule("b_pack=in_place needs the pixels in whole nr-wide panels",
              lambda q: q.get("b_pack") != "in_place" or q["algorithm"] != "gemm"
              or in_place_ok(g, q["nr"])),
         Rule("gemm_epilogue=fused needs mr to divide the output channels and nr the "
              "output pixels (no padded tile)",
              lambda q: q.get("gemm_epilogue") != "fused" or q["algorithm"] != "gemm"
              or fused_ok(g, q["nr"], q["mr"]))]
    seeds = gemm_seeds(g, plan.lanes, p.vector_registers)
    return Space("gemm", key, tuple(knobs), tuple(rules),
                 only_knobs(seeds, {k.name for k in knobs}))


def _unless(alg: str, holds: Callable[[Mapping[str, Any]], bool]
            ) -> Callable[[Mapping[str, Any]], bool]:
    """A rule of algorithm ``alg``: it holds for the other algorithm's points."""
    return lambda q: q["algorithm"] != alg or holds(q)


def schedule_conv1x1(node: Node, g: ConvGeom, p: CpuParams, target: Target) -> OpSchedule:
    """The schedule of a pointwise Conv with constant weights (the module docstring)."""
    plan = plan_gemm(g.o, g.oh * g.ow, g.c, p)
    point = decide(conv1x1_space(g, p, plan, unblock_pixels(target, p.lanes("float32"))))
    name = f"conv2d_{g.c}x{g.h}x{g.w}_{g.o}k1s{g.sh}"
    if point["algorithm"] == "direct":
        cplan = tuned_plan(plan_conv(g, p), point)
        args, values, _ = conv_compute(node, g, cplan, subsample=(g.sh, g.sw) != (1, 1),
                                       in_place=point.get("direct_pack") == "none")
        sch = Schedule(te.create_prim_func(args, name=name))
        schedule_conv(sch, g, cplan, p, knobs={**loop_defaults(g, cplan), **point},
                      target=target)
        return OpSchedule(sch, values, list(node.outputs), {
            "schedule": "conv2d_nchwc", "layout": f"NCHW{cplan.cb}c", "cb": cplan.cb,
            "ob": cplan.ob, "rw": cplan.rw, "packed_weight": True, "flops": g.flops})
    plan = tuned_gemm(plan, point)
    args, values = conv1x1_compute(node, g, plan, point.get("b_pack", "panels"))
    sch = Schedule(te.create_prim_func(args, name=name))
    epi = sch.get_block("C")
    sch.fuse(*sch.get_loops(epi)[2:])  # rows of the output are contiguous pixels
    schedule_gemm(sch, plan, p, 1, "C_prod")
    if point.get("gemm_epilogue", "pass") == "fused":
        # the bias added as each register tile is stored, straight into the NCHW output
        sch.reverse_compute_inline(sch.get_block("C"))
    info: dict[str, Any] = {"schedule": "conv2d_1x1_gemm", "layout": "NCHW (GEMM)",
                            "mr": plan.mr, "nr": plan.nr, "packed_weight": True,
                            "flops": g.flops}
    return OpSchedule(sch, values, list(node.outputs), info)


