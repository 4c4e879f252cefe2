"""Default CPU schedule for Conv (2-D, group 1): NCHW[x]c direct convolution.

The computation is rewritten in blocked layouts (as TVM's x86 ``conv2d_NCHWc``):

* **data** ``[N, C, H, W]`` is copied once into ``[N, C/cb, Hp, Wp, cb]`` with the zero
  padding built in (``Hp``/``Wp`` also cover the padded output tile, so no inner loop
  carries a bounds check); an input already in ``NCHW{cb}c`` is copied by whole vectors
  (:func:`vector_pack`), or read in place when nothing needs padding (1x1 convs);
* **weights** ``[O, C, KH, KW]`` are packed *at compile time* into
  ``[Op/ob, C/cb, KH, KW, cb, ob]`` (zero-padded to a multiple of ``ob`` output channels;
  ``OpSchedule.input_values`` names the packed constant ``<W>_packed``). Weights that are
  run-time inputs are packed by a stage inside the kernel instead;
* the **product** ``conv[N, Op/ob, OH, OWp, ob]`` keeps a tile of ``rw`` output columns by
  ``ob`` output channels in vector registers (``cache_write`` local); the reduction runs
  ``c_outer, kh, kw, c_inner`` around it, each step one vector load of weights and ``rw``
  broadcasts of data feeding ``rw * ob / lanes`` FMAs (the outer-product micro-kernel);
* the **epilogue** writes NCHW, adds the bias and crops the padding; it is attached to
  the output-row loop so the row it reads is still in L1. An output in ``NCHW{ob}c`` is
  written straight from the tile, whose write-back row stays a rolled loop (a fused
  Clip's lane loop is vectorized by the C compiler there, scalarized when unrolled).

For a ``LayoutConv`` (:func:`layout_conv_plan`) ``cb``/``ob`` are the layouts' own blocks,
an output block narrower than a vector gets a tile of that many lanes, and short output
rows are stacked ``ry`` high. 3x3 stride-1 convs with constant weights and at least 32
input and output channels use Winograd F(2x2, 3x3) instead
(:mod:`toolchain.schedules.generic.winograd`, :func:`winograd_choice`).

``ob`` is two vectors (``2 * lanes``), ``rw`` fills the register file
(:func:`~toolchain.schedules.generic.common.register_tile`) and ``cb`` is the largest divisor of
``C`` up to ``ob``. The row-of-output loop runs in parallel when the target has more
than one core. Depthwise convolutions (``group == C == O``, constant weights) go to
:mod:`toolchain.schedules.generic.depthwise` on ``NCHW{b}c`` targets (AVX) and for every
``LayoutConv``; other grouped ones use the generic schedule of
:mod:`toolchain.schedules.generic.ops`.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> w = np.ones((16, 8, 3, 3), np.float32)
    >>> node = Node("Conv", "c", [Value("x", (1, 8, 10, 10), "float32"),
    ...                           Value.constant("w", w)], [Value("y", (1, 16, 8, 8),
    ...                                                           "float32")])
    >>> s = schedule_conv2d(node, "x86_64-avx2")
    >>> s.info["layout"], s.info["ob"], s.info["rw"], [v.name for v in s.input_values]
    ('NCHW8c', 16, 6, ['x', 'w_packed'])
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space, divisors, with_default
from toolchain.errors import NoScheduleError
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops.nn_common import attrs_of, window_geometry
from toolchain.schedules.generic.common import CpuParams, ceil_div, cpu_params, register_tile
from toolchain.schedules.generic.conv_epilogue import (
    band_loops,
    nchw_epilogue,
    unblock_pixels,
)
from toolchain.schedules.generic.conv_seeds import (
    direct_seeds,
    only_knobs,
    winograd_channel_seeds,
    winograd_seeds,
)
from toolchain.schedules.packing import packed_constant, value_blind
from toolchain.schedules.registry import OpSchedule, resolve_target
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.transform.partition_loop import PARTITION

Expr = ir.PrimExpr

#: ``"auto"`` (the rule of :func:`~toolchain.schedules.generic.winograd.winograd_tile`),
#: ``"direct"`` (never Winograd) or ``"winograd2"``/``"winograd4"`` (that tile wherever
#: Winograd applies) — for benchmarks and tests that compare the algorithms
ALGORITHM = "auto"


@dataclass(frozen=True)
class ConvGeom:
    """Shapes of one 2-D convolution (NCHW, OIHW) after ONNX padding rules."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int

    @property
    def flops(self) -> int:
        return 2 * self.n * self.o * self.oh * self.ow * self.c * self.kh * self.kw


@dataclass(frozen=True)
class ConvPlan:
    """Blocking of one convolution: channel blocks ``cb``/``ob``, register row ``rw``
    (output columns) by ``ry`` output rows (a divisor of the output height)."""

    cb: int
    ob: int
    rw: int
    lanes: int
    ry: int = 1

    def padded(self, g: ConvGeom) -> tuple[int, int, int, int]:
        """``(Op, OWp, Hp, Wp)``: padded output channels and width, packed input size."""
        op_ = ceil_div(g.o, self.ob) * self.ob
        owp = ceil_div(g.ow, self.rw) * self.rw
        hp = max(g.h + g.pt, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1)
        wp = max(g.w + g.pl, (owp - 1) * g.sw + (g.kw - 1) * g.dw + 1)
        return op_, owp, hp, wp


def conv_geometry(node: Node) -> ConvGeom | None:
    """The :class:`ConvGeom` of a Conv node, or None when it is not a float32 2-D
    convolution with one group."""
    x, w = node.inputs[0], node.inputs[1]
    a = attrs_of(node)
    if len(x.shape) != 4 or a["group"] != 1 or x.dtype != "float32" or w.dtype != "float32":
        return None
    strides = list(a["strides"] or [1, 1])
    dil = list(a["dilations"] or [1, 1])
    pads = list(a["pads"] or [0] * 4)
    geom = window_geometry(x.shape[2:], w.shape[2:], strides=strides, dilations=dil,
                           pads=pads, auto_pad=a["auto_pad"])
    n, c, h, wd = x.shape
    return ConvGeom(n, c, h, wd, w.shape[0], w.shape[2], w.shape[3], geom.out[0], geom.out[1],
                    strides[0], strides[1], dil[0], dil[1], geom.pads_begin[0],
                    geom.pads_begin[1])


def plan_conv(g: ConvGeom, p: CpuParams) -> ConvPlan:
    """Channel blocks and register row for ``g`` on ``p``.

    >>> g = ConvGeom(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1)
    >>> plan_conv(g, cpu_params("x86_64-avx512"))
    ConvPlan(cb=32, ob=32, rw=8, lanes=16, ry=1)
    """
    lanes = p.lanes("float32")
    rw, ob = register_tile(lanes, p.vector_registers, g.o)
    if g.ow < rw:
        rw = g.ow
    cb = max(d for d in range(1, min(g.c, ob) + 1) if g.c % d == 0)
    return ConvPlan(cb, ob, rw, lanes)


def oihw_weights(node: Node, w: np.ndarray) -> np.ndarray:
    """The weights ``w`` of ``node`` in OIHW (a ``LayoutConv`` stores its kernel layout)."""
    if node.op != "LayoutConv":
        return w
    from toolchain.graph.passes.layout_ops import kernel_from_layout

    return kernel_from_layout(w, node.attrs["kernel_layout"])


def pack_weight(w: np.ndarray, plan: ConvPlan, op_: int) -> np.ndarray:
    """OIHW -> ``[Op/ob, C/cb, KH, KW, cb, ob]`` (zero rows for padded output channels).

    >>> pack_weight(np.zeros((3, 4, 1, 1), np.float32), ConvPlan(2, 8, 4, 8), 8).shape
    (1, 2, 1, 1, 2, 8)
    """
    o, c, kh, kw = w.shape
    full = np.zeros((op_, c, kh, kw), np.float32)
    full[:o] = w
    blk = full.reshape(op_ // plan.ob, plan.ob, c // plan.cb, plan.cb, kh, kw)
    return np.ascontiguousarray(blk.transpose(0, 2, 4, 5, 3, 1))


def _layout_block(layout: str) -> int | None:
    m = re.fullmatch(r"NCHW(\d+)c", layout)
    return int(m.group(1)) if m else None


def conv_compute(node: Node, g: ConvGeom, plan: ConvPlan, data_layout: str = "NCHW",
                 out_layout: str = "NCHW", w_oihw: np.ndarray | None = None,
                 subsample: bool = False, in_place: bool = False
                 ) -> tuple[list[te.Tensor], list[Value], str]:
    """Tensors of the blocked convolution; returns (args, input values, product name).

    ``data_layout``/``out_layout`` (``NCHW``, ``NHWC``, ``NCHW{b}c``) are the layouts of
    the node's input and output; ``w_oihw`` the constant weights in OIHW when the node's
    are stored in another kernel layout. An output in ``NCHW{ob}c`` is the product itself
    (the schedule inlines the bias into the register tile's write-back). ``subsample``
    (a strided 1x1 convolution without padding, :func:`is_pointwise`): the pack copies
    only the pixels the convolution reads, ``[N, C/cb, OH, OWp, cb]``, and the product
    reads it with stride 1. ``in_place`` (a 1x1 convolution without padding): no copy at
    all, the product broadcasts each pixel of each input channel straight from X."""
    xv, wv = node.inputs[0], node.inputs[1]
    bv = node.input(2)
    cb, ob = plan.cb, plan.ob
    op_, owp, hp, wp = plan.padded(g)
    x = te.placeholder(xv.shape, "float32", "X")
    args, values = [x], [xv]
    zero = ir.FloatImm(0.0, "float32")
    ib = _layout_block(data_layout)

    def in_at(n: Expr, c0: Expr, c1: Expr, ih: Expr, iw: Expr) -> Expr:
        if ib == cb:
            return x[n, c0, ih, iw, c1]
        c = c0 * cb + c1
        if ib is not None:
            return x[n, c // ib, ih, iw, c % ib]
        return x[n, ih, iw, c] if data_layout == "NHWC" else x[n, c, ih, iw]

    def pad_x(n: Expr, c0: Expr, hh: Expr, ww: Expr, c1: Expr) -> Expr:
        ih, iw = hh - g.pt, ww - g.pl
        inside = te.all(ih >= 0, ih < g.h, iw >= 0, iw < g.w)
        val = in_at(n, c0, c1, te.max(te.min(ih, g.h - 1), 0), te.max(te.min(iw, g.w - 1), 0))
        # a select, not ``val * float(inside)``: an infinite element on the border times
        # 0 was NaN in the padding (fuzzer seed 320017); the condition is the same for
        # every channel lane, so the select of two vectors stays vector code
        return te.if_then_else(inside, val, zero)

    sh, sw = g.sh, g.sw
    if in_place:
        if not is_pointwise(g):
            raise ValueError("in_place reads need a 1x1 convolution without padding")

        def xread(n: Expr, c0: Expr, y: Expr, xx: Expr, c1: Expr) -> Expr:
            return in_at(n, c0, c1, y * g.sh, te.min(xx, g.ow - 1) * g.sw)

        sh = sw = 1
    elif subsample:
        xp = te.compute((g.n, g.c // cb, g.oh, owp, cb), lambda n, c0, y, xx, c1: in_at(
            n, c0, c1, y * g.sh, te.min(xx, g.ow - 1) * g.sw), name="data_pack")
        sh = sw = 1
    elif ib == cb and (g.pt, g.pl, hp, wp) == (0, 0, g.h, g.w):
        xp = x  # already blocked, nothing to pad (1x1 convs): read the input in place
    else:
        xp = te.compute((g.n, g.c // cb, hp, wp, cb), pad_x, name="data_pack")
    if not in_place:
        def xread(n: Expr, c0: Expr, y: Expr, xx: Expr, c1: Expr) -> Expr:
            return xp[n, c0, y, xx, c1]
    const_w = wv.data is not None or w_oihw is not None
    if const_w:
        if wv.data is not None:  # w_oihw, if given, is oihw_weights(node, wv.data)
            packed = packed_constant(wv, "_packed",
                                     lambda w: pack_weight(oihw_weights(node, w), plan, op_))
        else:
            packed = Value.constant(f"{wv.name}_packed", pack_weight(w_oihw, plan, op_))
        wp_t = te.placeholder(packed.shape, "float32", "W_packed")
        values.append(packed)
    else:
        w = te.placeholder(wv.shape, "float32", "W")
        values.append(wv)

        def pack_w(o0: Expr, c0: Expr, a: Expr, b: Expr, c1: Expr, o1: Expr) -> Expr:
            o = o0 * ob + o1
            val = w[te.min(o, g.o - 1), c0 * cb + c1, a, b]
            return te.if_then_else(o < g.o, val, zero) if op_ != g.o else val

        wp_t = te.compute((op_ // ob, g.c // cb, g.kh, g.kw, cb, ob), pack_w, name="W_pack")
        args.append(w)
    if const_w:
        args.append(wp_t)
    rc0 = te.reduce_axis((0, g.c // cb), name="rc0")
    rkh = te.reduce_axis((0, g.kh), name="rkh")
    rkw = te.reduce_axis((0, g.kw), name="rkw")
    rc1 = te.reduce_axis((0, cb), name="rc1")
    conv = te.compute((g.n, op_ // ob, g.oh, owp, ob), lambda n, o0, y, xx, o1: te.sum(
        xread(n, rc0, y * sh + rkh * g.dh, xx * sw + rkw * g.dw, rc1)
        * wp_t[o0, rc0, rkh, rkw, rc1, o1], axis=[rc0, rkh, rkw, rc1]), name="conv")
    bias = None
    if bv is not None:
        bias = te.placeholder(bv.shape, "float32", "bias")
        args.append(bias)
        values.append(bv)
    if direct_blocked_out(g, plan, out_layout):
        out = te.compute(conv.shape, lambda n, o0, y, xx, o1: conv[n, o0, y, xx, o1] + bias[
            o0 * ob + o1] if bias is not None else conv[n, o0, y, xx, o1], name="conv_out")
        return args + [out], values, conv.name
    bo = _layout_block(out_layout)

    def unpack(n: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
        v = conv[n, o // ob, y, xx, o % ob]
        return v + bias[o] if bias is not None else v

    if bo is not None:
        def reblock(n: Expr, o0: Expr, y: Expr, xx: Expr, o1: Expr) -> Expr:
            return unpack(n, o0 * bo + o1, y, xx)

        out = te.compute((g.n, g.o // bo, g.oh, g.ow, bo), reblock, name="conv_out")
    elif out_layout == "NHWC":
        out = te.compute((g.n, g.oh, g.ow, g.o), lambda n, y, xx, o: unpack(n, o, y, xx),
                         name="conv_out")
    else:
        out = te.compute((g.n, g.o, g.oh, g.ow), unpack, name="conv_out")
    return args + [out], values, conv.name


def vector_pack(ib: int | None, cb: int) -> bool:
    """Whether the padded copy of a ``NCHW{ib}c`` input into blocks of ``cb`` channels is
    a loop of whole vectors: same block, a power of two of at least 4 lanes (others, like
    the 3 channels of an image, copy element by element)."""
    return ib == cb and cb >= 4 and cb & (cb - 1) == 0


def direct_blocked_out(g: ConvGeom, plan: ConvPlan, out_layout: str) -> bool:
    """Whether the product's tiles are exactly the ``NCHW{ob}c`` output (no re-layout)."""
    op_, owp, _, _ = plan.padded(g)
    return _layout_block(out_layout) == plan.ob and op_ == g.o and owp == g.ow


def loop_defaults(g: ConvGeom, plan: ConvPlan) -> dict[str, Any]:
    """The heuristic's loop decisions: the window loop unrolls for short windows of few
    channels (or any window of at most 3), the inner channel loop for blocks up to 4; an
    NCHW output is written back channel by channel (``epilogue``)."""
    return {"order": "channels_outer", "unroll_kw": g.kw * plan.cb <= 32 or g.kw <= 3,
            "unroll_cb": plan.cb <= 4, "epilogue": "channel_rows"}


def conv_workload(g: ConvGeom, p: CpuParams, lanes: int, layouts: tuple[str, str],
                  const_w: bool) -> str:
    """The key of a direct convolution's tuning records: its geometry, the layouts and the
    target capabilities its space depends on (never the target's name).

    >>> g = ConvGeom(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1)
    >>> conv_workload(g, cpu_params("x86_64-avx2"), 8, ("NCHW", "NCHW"), True)
    'conv2d|NCHW>NCHW|1x64x56x56|o64|k3x3|s1x1|d1x1|p1x1|out56x56|v8r16c1|w=const'
    """
    return (f"conv2d|{layouts[0]}>{layouts[1]}|{g.n}x{g.c}x{g.h}x{g.w}|o{g.o}|"
            f"k{g.kh}x{g.kw}|s{g.sh}x{g.sw}|d{g.dh}x{g.dw}|p{g.pt}x{g.pl}|out{g.oh}x{g.ow}|"
            f"v{lanes}r{p.vector_registers}c{p.cores}|w={'const' if const_w else 'runtime'}")


def conv_space(g: ConvGeom, p: CpuParams, plan: ConvPlan, layouts: tuple[str, str] = (
        "NCHW", "NCHW"), const_w: bool = True, winograd: int | None | bool = False,
               unblock: tuple[int, ...] = ()) -> Space:
    """The knobs of the convolution around the heuristic's choices (its default point).

    The direct convolution's ``ob`` (output channels per register tile, whole vectors),
    ``rw``/``ry`` (output columns/rows per tile), ``cb`` (input channel block), ``order``
    (reduction loops ``c_outer kh kw c_inner`` or ``kh kw c_outer c_inner``),
    ``unroll_kw``/``unroll_cb``. Where Winograd applies (``winograd`` is the heuristic's
    tile, None for direct; False: it does not apply) also ``algorithm`` (``direct``,
    ``winograd2``, ``winograd4``) and the Winograd GEMMs' register tile ``wino_mr`` x
    ``wino_nr``; the direct knobs matter only for ``direct``, the Winograd ones only for
    Winograd. With an NCHW output, ``epilogue`` orders the write-back that turns the
    product's ``[O/ob, OH, OW, ob]`` tiles into NCHW: ``channel_rows`` (the heuristic's:
    one output channel's whole plane after the other, each vector gathered from ``lanes``
    pixels ``ob`` floats apart) or ``pixel_tiles`` (for each ``lanes`` pixels of a row, the
    ``ob`` channels of the tile: the ``lanes x ob`` block it reads stays in L1; C1 of
    ResNet-18 gains about a third); where the target declares the ``unblock_*`` tensor
    intrinsics for blocks of ``P`` pixels (``unblock``: :func:`unblock_pixels`) and ``P``
    divides the output width, also ``transposed`` (the order of ``pixel_tiles``, blocks
    of ``P`` pixels x ``lanes`` channels transposed in registers, the largest such ``P``),
    and ``epilogue_at``: ``end`` (the heuristic's: after the whole product) or ``rows``
    (after each band of ``ob`` channels x ``ry`` rows, the product computed band by band
    and shrunk to one). With padding and an input copied element by element, ``pack``:
    ``select`` (the heuristic's: a padding condition and clamped index per element) or
    ``partitioned`` (the copy's rows and columns split into border and interior loops,
    :mod:`~toolchain.tir.transform.partition_loop`).
    Rules: the tile fits the register file; an unrolled channel loop has at most 16 steps.

    >>> g = ConvGeom(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1)
    >>> s = conv_space(g, cpu_params("x86_64-avx2"), ConvPlan(8, 16, 6, 8))
    >>> [f"{k}={v}" for k, v in s.default().items()]  # doctest: +NORMALIZE_WHITESPACE
    ['ob=16', 'rw=6', 'ry=1', 'cb=8', 'order=channels_outer', 'unroll_kw=True',
     'unroll_cb=False', 'epilogue=channel_rows', 'epilogue_at=end', 'pack=select']
    >>> s.is_valid({**s.default(), "rw": 14})  # 14 x 2 accumulators: too many registers
    False
    """
    lanes = plan.lanes
    top = max(ceil_div(g.o, lanes) * lanes, plan.ob)
    obs = with_default([lanes * m for m in (1, 2, 3, 4) if lanes * m <= top], plan.ob)
    loops = loop_defaults(g, plan)

    def need(q: Mapping[str, Any]) -> int:
        vecs = q["ob"] // lanes
        return q["ry"] * q["rw"] * vecs + vecs + 1

    budget = max(p.vector_registers, need({"ob": plan.ob, "rw": plan.rw, "ry": plan.ry}))
    knobs = (
        Knob("ob", obs, plan.ob, "output channels per register tile (whole vectors)"),
        Knob("rw", with_default(range(1, min(g.ow, 16) + 1), plan.rw), plan.rw,
             "output columns per register tile"),
        Knob("ry", with_default(divisors(g.oh, 4), plan.ry), plan.ry,
             "output rows per register tile"),
        Knob("cb", with_default(divisors(g.c, 64), plan.cb), plan.cb,
             "input channels per block of the packed data and weights"),
        Knob("order", ("channels_outer", "window_outer"), loops["order"],
             "reduction loop order: c_outer kh kw c_inner, or kh kw c_outer c_inner"),
        Knob("unroll_kw", (False, True), loops["unroll_kw"], "unroll the kernel-width loop"),
        Knob("unroll_cb", (False, True), loops["unroll_cb"],
             "unroll the inner channel loop"),
    )
    if layouts[1] == "NCHW":
        orders = ("channel_rows", "pixel_tiles") + (
            ("transposed",) if any(g.ow % q == 0 for q in unblock) else ())
        knobs += (Knob("epilogue", orders, loops["epilogue"],
                       "write-back order of the NCHW output: whole channel planes, or "
                       "the tile's channels for each vector of pixels (gathered, or "
                       "transposed in registers)",
                       active=lambda q: g.o % q["ob"] == 0),
                  Knob("epilogue_at", ("end", "rows"), "end",
                       "where the NCHW write-back runs: after the whole product, or after "
                       "each band of ob channels x ry rows (the product shrinks to a band)",
                       active=lambda q: g.o % q["ob"] == 0))
    ib = _layout_block(layouts[0])
    if (g.pt, g.pl) != (0, 0):
        knobs += (Knob("pack", ("select", "partitioned"), "select",
                       "the padded input copy: one loop with a padding condition per "
                       "element, or its rows and columns split into border and interior "
                       "loops (no condition, no clamped index inside)",
                       active=lambda q: not vector_pack(ib, q["cb"])),)
    rules = [
        Rule(f"the register tile (ry * rw * ob/{lanes} accumulators, ob/{lanes} weight "
             f"vectors and a broadcast) fits {budget} vector registers",
             lambda q: need(q) <= budget),
        Rule("an unrolled inner channel loop has at most 16 steps",
             lambda q: not q["unroll_cb"] or q["cb"] <= 16),
    ]
    seeds = direct_seeds(g, lanes, plan.ob, budget, plan.cb, any(
        k.name == "epilogue" and "transposed" in k.choices for k in knobs))
    if winograd is not False:
        chan = ib is not None and _layout_block(layouts[1]) is not None
        knobs, more = _winograd_knobs(g, p, winograd, knobs, blocked=ib is not None,
                                      channels=chan)
        rules += more
        seeds = (winograd_channel_seeds(g, lanes, p.vector_registers) if chan else []) + \
            winograd_seeds(lanes, ib is not None) + \
            [{"algorithm": "direct", **s} for s in seeds[:2]]
    return Space("conv2d", conv_workload(g, p, lanes, layouts, const_w), knobs,
                 tuple(rules), only_knobs(seeds, {k.name for k in knobs}))


def _winograd_knobs(g: ConvGeom, p: CpuParams, m: int | None, direct: tuple[Knob, ...],
                    blocked: bool = False, channels: bool = False
                    ) -> tuple[tuple[Knob, ...], list[Rule]]:
    """``algorithm`` first, the direct knobs active for ``direct`` only, then the Winograd
    GEMM tile (its default: the heuristic's plan for the default tile, F(2x2) if direct);
    ``blocked``: the input is channel-blocked (``NCHW{b}c``), which adds
    ``wino_pad_order``; ``channels``: input and output are, which adds ``wino_layout``
    (:mod:`~toolchain.schedules.generic.winograd_channels`; its GEMM columns are output
    channels, so ``wino_nr`` goes up to four vectors of them there)."""
    from toolchain.schedules.generic.winograd import (
        F4_TUNE_MAX_CHANNELS,
        F4H_TUNE_MAX_CHANNELS,
        winograd_gemm_plan,
    )

    algs = ("direct", "winograd2") + (("winograd4",) if g.c <= F4_TUNE_MAX_CHANNELS else ()) \
        + (("winograd4h",) if g.c <= F4H_TUNE_MAX_CHANNELS else ())
    default = "direct" if m is None else f"winograd{m}"
    wplan = winograd_gemm_plan(g, m or 2, p)
    lanes = wplan.lanes
    # rows up to what one vector of columns leaves of the register file (AVX-512: 16 x 16
    # tiles for ResNet-18's 14x14 layers, whose 16 F(4x4) tiles are exactly one vector);
    # columns up to four vectors, no more than the tiles of F(2x2) fill
    mrs = tuple(r for r in (*range(1, 9), 10, 12, 14, 16, 20, 24, 28)
                if r + 2 <= max(p.vector_registers, wplan.mr + 2))
    tiles2 = g.n * ceil_div(g.oh, 2) * ceil_div(g.ow, 2)
    nrs = tuple(lanes * v for v in (1, 2, 3, 4) if v == 1 or lanes * (v - 1) < tiles2)
    nrs_c = tuple(lanes * v for v in (1, 2, 3, 4) if v == 1 or lanes * (v - 1) < g.o)
    planes_nrs = nrs
    if channels:
        nrs = tuple(sorted(set(nrs) | set(nrs_c)))

    def is_direct(q: Mapping[str, Any]) -> bool:
        return q["algorithm"] == "direct"

    def is_wino(q: Mapping[str, Any]) -> bool:
        return q["algorithm"] != "direct"

    knobs = (Knob("algorithm", with_default(algs, default) if default in algs else algs,
                  default, "direct convolution or Winograd F(2x2, 3x3) / F(4x4, 3x3)"),
             *(replace(k, active=_both(is_direct, k.active)) for k in direct),
             Knob("wino_mr", with_default(mrs, wplan.mr), wplan.mr,
                  "rows of the Winograd GEMMs' register tile", active=is_wino),
             Knob("wino_nr", with_default(nrs, wplan.nr), wplan.nr,
                  "columns of the Winograd GEMMs' register tile", active=is_wino),
             Knob("wino_pad", ("select", "partitioned"), "select",
                  "the Winograd input's zero-padded copy: a padding condition and clamped "
                  "index per element, or its rows and columns split into border and "
                  "interior loops (no condition inside: a vector copy)", active=is_wino))
    if blocked:
        knobs += (Knob("wino_pad_order", ("planes", "blocks"), "planes",
                       "the padded copy of a channel-blocked input: plane by plane (each "
                       "element gathered from its block) or block by block with the "
                       "block's channels innermost (each input vector read once)",
                       active=is_wino),)
    if channels:
        knobs += (Knob("wino_layout", ("planes", "channels"), "planes",
                       "tiles innermost (weights as GEMM rows, the blocked input copied "
                       "into planes and tiles) or channels innermost (tiles as GEMM rows, "
                       "output channels as columns, every stage on whole channel vectors)",
                       active=is_wino),)
    budget = max(p.vector_registers, wplan.mr * (wplan.nr // lanes) + wplan.nr // lanes + 1)
    rule = Rule(f"the Winograd GEMM tile (wino_mr * wino_nr/{lanes} accumulators, "
                f"wino_nr/{lanes} vectors and a broadcast) fits {budget} vector registers",
                lambda q: q["wino_mr"] * (q["wino_nr"] // lanes) + q["wino_nr"] // lanes + 1
                <= budget)
    rules = [rule]
    if channels and nrs != planes_nrs:
        rules.append(Rule(f"with the tiles innermost, wino_nr is one of {planes_nrs}",
                          lambda q: q["algorithm"] == "direct" or q["wino_nr"] in planes_nrs
                          or q["wino_layout"] == "channels"))
    return knobs, rules


def _both(first: Callable[[Mapping[str, Any]], bool],
          then: Callable[[Mapping[str, Any]], bool] | None
          ) -> Callable[[Mapping[str, Any]], bool]:
    """The activity of a direct knob in a space with Winograd: ``first`` and its own."""
    if then is None:
        return first
    return lambda q: first(q) and then(q)


def tuned_plan(plan: ConvPlan, point: Mapping[str, Any]) -> ConvPlan:
    """``plan`` with the blocking knobs of ``point`` (:func:`conv_space`)."""
    return replace(plan, ob=point["ob"], rw=point["rw"], ry=point["ry"], cb=point["cb"])


def schedule_conv(sch: Schedule, g: ConvGeom, plan: ConvPlan, p: CpuParams,
                  out_layout: str = "NCHW", data_layout: str = "NCHW",
                  knobs: Mapping[str, Any] | None = None, target: Target | None = None
                  ) -> None:
    """Register-tile, vectorize and unroll the blocked convolution.

    ``knobs`` are the loop decisions of :func:`conv_space` (``order``, ``unroll_kw``,
    ``unroll_cb``, ``epilogue``); None: the heuristic's (:func:`conv_space`'s defaults).
    ``epilogue="transposed"`` tensorizes the write-back with ``target``'s
    :func:`unblock_intrinsic`."""
    k = dict(knobs) if knobs is not None else loop_defaults(g, plan)
    blk = sch.get_block("conv")
    band = local = None
    if out_layout == "NCHW" and k.get("epilogue_at", "end") == "rows":
        local = sch.cache_write(blk, 0, "local")
        band = band_loops(sch, plan, (local, blk))
        n, o0, y = band[:3]
        *_, yi, xx, o1, rc0, rkh, rkw, rc1 = sch.get_loops(blk)  # under n o0 y 1 1
        band = band[3:]
    else:
        n, o0, y, xx, o1, rc0, rkh, rkw, rc1 = sch.get_loops(blk)
    xo, xi = sch.split(xx, [None, plan.rw])
    window_outer = k["order"] == "window_outer"
    red = [rkh, rkw, rc0, rc1] if window_outer else [rc0, rkh, rkw, rc1]
    if band is not None:  # the band's rows: yi, below the write-back's (n, o0, y)
        sch.reorder(xo, *red, yi, xi, o1)
    elif plan.ry > 1:  # a tile of several short rows (small images)
        y, yi = sch.split(y, [None, plan.ry])
        sch.reorder(n, o0, y, xo, *red, yi, xi, o1)
    else:
        sch.reorder(n, o0, y, xo, *red, xi, o1)
    if local is None:
        local = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(local, xo)
    init = sch.decompose_reduction(blk, red[0])
    for b in (blk, init, local):
        *_, rows, cols = sch.get_loops(b)
        cv, vl = sch.split(cols, [None, plan.lanes])
        sch.vectorize(vl)
        sch.unroll(cv)
        if b is not local:
            # the write-back row stays a loop: a fused tail the vector expansion cannot
            # express (Clip's min/max) keeps a scalar lane loop there, which the C compiler
            # vectorizes inside a rolled loop but scalarizes (a branch per lane) once the
            # row is unrolled around register-resident accumulators
            sch.unroll(rows)
            if plan.ry > 1:
                sch.unroll(sch.get_loops(b)[-4])
    loops = sch.get_loops(blk)  # n o0 y xo | rc0 kh kw rc1 (or kh kw rc0 rc1) | tile
    if band is not None:  # n o0 y 1 1 xo | ...: the band's unit loops
        loops = loops[:3] + loops[5:]
    if k["unroll_kw"]:
        sch.unroll(loops[5 if window_outer else 6])
    if k["unroll_cb"]:
        sch.unroll(loops[7])
    out = sch.get_block("conv_out")
    if direct_blocked_out(g, plan, out_layout):
        # the output is the product's layout: bias added in the register tile's write-back
        sch.reverse_compute_inline(out)
        out = None
    elif out_layout == "NCHW":
        nchw_epilogue(sch, g, plan, out, k.get("epilogue", "channel_rows"), target, band)
        if band is not None:
            out = None  # the write-back's band loop is the product's: parallel already
    packs = "data_pack" in st.block_names(sch.mod)
    if packs and vector_pack(_layout_block(data_layout), plan.cb):
        sch.vectorize(sch.get_loops(sch.get_block("data_pack"))[4])  # one vector per block
    elif packs:  # read rows of X contiguously (the writes stride by cb)
        pl = sch.get_loops(sch.get_block("data_pack"))
        sch.reorder(pl[3], pl[4])
        if k.get("pack", "select") == "partitioned":  # n c0 | hh ww | c1
            for loop in pl[2:4]:
                sch.annotate(loop, PARTITION, 1)
    if p.cores > 1:
        sch.parallel(sch.fuse(n, o0, y))
        if out is not None:
            sch.parallel(sch.fuse(*sch.get_loops(out)[:2]))
        if packs:
            sch.parallel(sch.fuse(*sch.get_loops(sch.get_block("data_pack"))[:2]))
    try:
        wpk = sch.get_block("W_pack")
    except Exception:  # noqa: BLE001 - weights were packed at compile time
        return
    *_, wl = sch.get_loops(wpk)
    if plan.ob % plan.lanes == 0:
        _, v = sch.split(wl, [None, plan.lanes])
        sch.vectorize(v)


def is_pointwise(g: ConvGeom) -> bool:
    """A 1x1 convolution without padding or dilation: a GEMM over the pixels."""
    return (g.kh, g.kw, g.pt, g.pl) == (1, 1, 0, 0) and g.oh == (g.h - 1) // g.sh + 1 \
        and g.ow == (g.w - 1) // g.sw + 1


def winograd_choice(g: ConvGeom, p: CpuParams) -> int | None:
    """The Winograd tile for ``g`` under :data:`ALGORITHM` (None: direct convolution).

    >>> winograd_choice(ConvGeom(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1),
    ...                 cpu_params("x86_64-avx512"))
    2
    """
    from toolchain.schedules.generic.winograd import forced_tile, winograd_tile

    if ALGORITHM == "direct":
        return None
    if ALGORITHM in ("winograd2", "winograd4"):
        return forced_tile(g, ALGORITHM)
    return winograd_tile(g, p)


def _winograd_default(g: ConvGeom, p: CpuParams, const_w: bool) -> int | None | bool:
    """The ``winograd`` argument of :func:`conv_space`: False where Winograd does not
    apply (or the weights are not constant), else the heuristic's tile (None: direct)."""
    from toolchain.schedules.generic.winograd import winograd_applies

    if not const_w or not winograd_applies(g):
        return False
    return winograd_choice(g, p)


def _generic(node: Node, target: Target, reason: str) -> OpSchedule:
    from toolchain.schedules.generic import ops as cpu_ops
    from toolchain.topi.registry import node_compute

    nc = node_compute(node)
    sch = cpu_ops.schedule_cpu(te.create_prim_func(nc.inputs + nc.outputs), target)
    return OpSchedule(sch, list(nc.input_values), list(node.outputs),
                      {"schedule": "generic", "reason": reason})


@value_blind
def schedule_conv2d(node: Node, target: str | Target | None = None) -> OpSchedule:
    """The default CPU schedule of a Conv node (see the module docstring)."""
    t = resolve_target(target)
    g = conv_geometry(node)
    if g is None:
        from toolchain.graph.passes.layout import layout_for_target
        from toolchain.schedules.generic.depthwise import is_depthwise, schedule_depthwise

        # channel-blocked depthwise where the target computes in NCHW{b}c (AVX); NCHW
        # targets keep the generic schedule (no blocked tensors to read there)
        if is_depthwise(node) and node.inputs[1].data is not None \
                and node.inputs[0].dtype == "float32" and layout_for_target(t).kind == "nchwc":
            return schedule_depthwise(node, t)
        return _generic(node, t, "grouped, non-2-D or non-float32 convolution")
    p = cpu_params(t)
    if is_pointwise(g) and node.inputs[1].data is not None:
        from toolchain.schedules.generic.conv1x1 import schedule_conv1x1

        return schedule_conv1x1(node, g, p, t)
    const_w = node.inputs[1].data is not None
    plan = plan_conv(g, p)
    point = decide(conv_space(g, p, plan, const_w=const_w,
                              winograd=_winograd_default(g, p, const_w),
                              unblock=unblock_pixels(t, plan.lanes)))
    if point.get("algorithm", "direct") != "direct":
        from toolchain.schedules.generic.winograd import algorithm_tile, schedule_winograd

        m, points = algorithm_tile(point["algorithm"])
        return schedule_winograd(node, g, p, m, tiles=(point["wino_mr"], point["wino_nr"]),
                                 points=points, pad=point.get("wino_pad", "select"))
    plan = tuned_plan(plan, point)
    args, values, _ = conv_compute(node, g, plan)
    name = f"conv2d_{g.c}x{g.h}x{g.w}_{g.o}k{g.kh}s{g.sh}"
    sch = Schedule(te.create_prim_func(args, name=name))
    schedule_conv(sch, g, plan, p, knobs=point, target=t)
    info: dict[str, Any] = {"schedule": "conv2d_nchwc", "layout": f"NCHW{plan.cb}c",
                            "cb": plan.cb, "ob": plan.ob, "rw": plan.rw,
                            "packed_weight": values[1].data is not None, "flops": g.flops}
    return OpSchedule(sch, values, list(node.outputs), info)


def layout_conv_plan(g: ConvGeom, p: CpuParams, data_layout: str, out_layout: str
                     ) -> ConvPlan:
    """Blocks of a ``LayoutConv``'s direct convolution: ``cb`` = the input's channel block,
    ``ob`` = the output's block when it is whole vectors, so the register tile is the
    output itself. An output block narrower than a vector but a power of two (``NCHW8c``
    on AVX-512: 8, 16 or 24 channels) gets a tile of that many lanes instead of a full
    vector half of zeros (same FMA rate on cores that split wide FMAs, half the work).

    >>> g = ConvGeom(1, 16, 48, 48, 8, 1, 1, 48, 48, 1, 1, 1, 1, 0, 0)
    >>> layout_conv_plan(g, cpu_params("x86_64-avx512"), "NCHW16c", "NCHW8c")
    ConvPlan(cb=16, ob=8, rw=8, lanes=8, ry=1)
    """
    base = plan_conv(g, p)
    ib, bo = _layout_block(data_layout), _layout_block(out_layout)
    lanes = base.lanes
    if bo is not None and bo % lanes == 0:
        ob = bo
    elif bo is not None and 4 <= bo < lanes and bo & (bo - 1) == 0 and g.o % bo == 0:
        ob = lanes = bo
    else:
        ob = base.ob
    cb = ib if ib is not None and g.c % ib == 0 else base.cb
    rw = min(next((r for r in range(base.rw, 3, -1) if g.ow % r == 0), base.rw), g.ow)
    ry = 1
    if rw == g.ow < register_tile(base.lanes, p.vector_registers, g.o)[0]:
        # short rows (small images): stack rows until the tile holds about 12 vectors
        vecs = ob // lanes
        ry = max(d for d in range(1, g.oh + 1) if g.oh % d == 0 and d * rw * vecs <= 12)
    return ConvPlan(cb, ob, rw, lanes, ry)


@value_blind
def schedule_layout_conv(node: Node, target: str | Target | None = None) -> OpSchedule:
    """Default CPU schedule of a ``LayoutConv`` (a Conv the graph layout pass moved into
    ``NCHW{b}c`` / ``NHWC``): the direct blocked convolution with the channel blocks of
    the node's layouts, so a ``NCHW16c -> NCHW16c`` conv reads its input block by block
    and writes its output straight from the register tile (bias in the write-back).

    Needs constant weights (any kernel layout; repacked at compile time); anything else
    raises :class:`~toolchain.errors.NoScheduleError`.
    """
    from toolchain.graph.passes.layout_ops import kernel_from_layout, nchw_node
    from toolchain.schedules.generic.depthwise import is_depthwise, schedule_depthwise

    t = resolve_target(target)
    if is_depthwise(node):
        return schedule_depthwise(node, t)
    a = node.attrs
    wv = node.inputs[1]
    conv = nchw_node(node)
    g = conv_geometry(conv)
    if g is None or wv.data is None:
        raise NoScheduleError(f"{node.describe()}: LayoutConv needs a float32 2-D conv with "
                               "one group and constant weights for its default schedule")
    p = cpu_params(t)
    w_oihw = kernel_from_layout(wv.data, a["kernel_layout"])
    plan = layout_conv_plan(g, p, a["data_layout"], a["out_layout"])
    point = decide(conv_space(g, p, plan, (a["data_layout"], a["out_layout"]),
                              winograd=_winograd_default(g, p, True)))
    if point.get("algorithm", "direct") != "direct":
        from toolchain.schedules.generic.winograd import algorithm_tile, schedule_winograd

        m, points = algorithm_tile(point["algorithm"])
        if point.get("wino_layout", "planes") == "channels":
            from toolchain.schedules.generic.winograd_channels import (
                schedule_winograd_channels,
            )

            return schedule_winograd_channels(
                node, g, p, m, a["data_layout"], a["out_layout"], w_oihw,
                (point["wino_mr"], point["wino_nr"]), points, point.get("wino_pad", "select"))
        return schedule_winograd(node, g, p, m, a["data_layout"], a["out_layout"], w_oihw,
                                 tiles=(point["wino_mr"], point["wino_nr"]), points=points,
                                 pad=point.get("wino_pad", "select"),
                                 pad_order=point.get("wino_pad_order", "planes"))
    plan = tuned_plan(plan, point)
    args, values, _ = conv_compute(node, g, plan, a["data_layout"], a["out_layout"], w_oihw)
    name = f"conv2d_{a['data_layout']}_{g.c}x{g.h}x{g.w}_{g.o}k{g.kh}s{g.sh}"
    sch = Schedule(te.create_prim_func(args, name=name))
    schedule_conv(sch, g, plan, p, a["out_layout"], a["data_layout"], knobs=point)
    info: dict[str, Any] = {"schedule": "conv2d_nchwc", "layout": f"NCHW{plan.cb}c",
                            "cb": plan.cb, "ob": plan.ob, "rw": plan.rw, "ry": plan.ry,
                            "direct_out": direct_blocked_out(g, plan, a["out_layout"]),
                            "packed_weight": True, "flops": g.flops}
    return OpSchedule(sch, values, list(node.outputs), info)
