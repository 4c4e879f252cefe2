"""Float32 convolutions on Cortex-M: one output pixel at a time, no whole-tensor scratch.

The CPU schedules of :mod:`toolchain.schedules.generic.conv2d` are built for caches and vector
units: a 1x1 convolution packs its whole input into GEMM panels and keeps the whole
product before the bias is added, a k x k one copies the whole padded input. On a
microcontroller that is RAM the board does not have (DS-CNN fp32: 64 KiB of scratch next
to 64 KiB of activations). This schedule (``Conv``, group 1, constant float32 weights, on
the ``cortex-m4`` / ``cortex-m7`` targets) computes as the int8 Cortex-M kernels do
(:mod:`toolchain.schedules.cortex_m.int8`)::

    for each pair of output pixels p, p+1 (the last pair may repeat the last pixel):
        col[j, 0:K] = x[:, y*s + ry*d - pt, x*s + rx*d - pl] of pixel p+j
                                                (0 outside: padding inline; k = c, ry, rx)
        for each group of L output channels mo:   (2 x L accumulators in registers)
            acc[j, L mo + i] = sum_k col[j, k] * w[mo, k, i]   (w packed [M/L, K, L])
        y[:, pixel p+j] = acc[j] + bias                         (fused ReLU etc. here)

L is 8 when 8 divides M, else 4 (zero-padded channels): per k two input loads and L
weight loads feed 2 L FMAs. ``col`` (``8 K`` bytes) and ``acc`` (``8 M``) are the only
buffers: on the stack up to 1 KiB, else a scratch slice of that size. A 1x1 stride-1
convolution without padding copies every channel of both pixels into ``col`` before it
writes them, so it may run **in place** (``OpSchedule.in_place = 0``, docs/passes.md "In
place") when the output has the input's shape.

Depthwise convolutions (channel multiplier 1) stage each channel's zero-padded input plane
(up to :data:`PLANE_BYTES`) and compute the channel from it, the kh x kw weights unrolled
(kept in registers across the channel's pixels); staged, they run in place too.
Measured on nucleo-l4r5zi (`python benchmarks/embedded.py --precisions fp32`, QEMU
instructions, arena): DS-CNN 8.65 M / 125.5 KiB -> 7.19 M / 31.5 KiB, MobileNetV1-0.25
25.2 M / 432 KiB -> 23.3 M / 216 KiB, ResNet-8 25.7 M / 320 KiB -> 29.4 M / 129 KiB
(:data:`WINOGRAD`).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> w = np.ones((8, 8, 1, 1), np.float32)
    >>> node = Node("Conv", "c", [Value("x", (1, 8, 5, 5), "float32"), Value.constant("w", w)],
    ...             [Value("y", (1, 8, 5, 5), "float32")], {"strides": (1, 1)})
    >>> s = schedule_conv2d_m(node, "cortex-m4")
    >>> s.info["schedule"], s.in_place, [v.name for v in s.input_values]
    ('conv2d_pixel_rows', 0, ['x', 'w_rows'])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space
from toolchain.graph.ir import Node, Value
from toolchain.schedules.generic.conv2d import (
    ConvGeom,
    conv_geometry,
    cpu_params,
    is_pointwise,
    schedule_conv2d,
    winograd_choice,
)
from toolchain.schedules.generic.depthwise import DwGeom, dw_geometry, is_depthwise
from toolchain.schedules.registry import OpSchedule, resolve_target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.partition_loop import PARTITION

#: output pixels a register tile holds (each weight load feeds this many FMAs)
PIXELS = 2

#: keep the CPU schedule's Winograd F(2x2, 3x3) where it would pick it (>= 32 channels)?
#: Off: its transformed tiles are whole-tensor scratch (ResNet-8 fp32 on nucleo-l4r5zi:
#: arena 320 KiB with it, 129 KiB without) for ~9 % fewer instructions (26.8 M vs 29.4 M)
WINOGRAD = False


def lanes_for(m: int) -> int:
    """Output channels a register tile holds: 8 (one input load feeds 8 FMAs) when 8
    divides ``m``, else 4 (padded with zero weights)."""
    return 8 if m % 8 == 0 else 4


def pack_rows(w: np.ndarray, lanes: int = 4) -> np.ndarray:
    """``[M, C, KH, KW]`` -> ``[ceil(M/lanes), C*KH*KW, lanes]`` (zero rows pad M): the
    weights of one k for ``lanes`` output channels are contiguous.

    >>> pack_rows(np.arange(6, dtype=np.float32).reshape(3, 2, 1, 1))[0].tolist()
    [[0.0, 2.0, 4.0, 0.0], [1.0, 3.0, 5.0, 0.0]]
    """
    m = w.shape[0]
    k = int(np.prod(w.shape[1:]))
    mp = -(-m // lanes) * lanes
    out = np.zeros((mp, k), np.float32)
    out[:m] = w.reshape(m, k)
    return np.ascontiguousarray(out.reshape(mp // lanes, lanes, k).transpose(0, 2, 1))


def _bias_param(bv: Value | None, args: list[te.Tensor], values: list[Value]
                ) -> te.Tensor | None:
    """The bias placeholder (appended to the kernel's parameters), or None without one."""
    if bv is None:
        return None
    bias = te.placeholder(bv.shape, "float32", "bias")
    args.append(bias)
    values.append(bv)
    return bias


def conv_rows_space(g: ConvGeom, t: Any) -> Space:
    """The knobs of the pixel-rows convolution: ``pixels`` (output pixels per register
    tile), ``lanes`` (output channels per tile; the weights are padded to a multiple) and
    ``unroll_rx`` (unroll the window's column loop of the im2col row). Rule: the
    accumulators, a weight row and the pixels' inputs fit the 32 single-precision FPU
    registers. The default is the heuristic (:data:`PIXELS`, :func:`lanes_for`).

    >>> g = ConvGeom(1, 16, 10, 10, 32, 3, 3, 10, 10, 1, 1, 1, 1, 1, 1)
    >>> conv_rows_space(g, resolve_target("cortex-m4")).default()
    {'pixels': 2, 'lanes': 8, 'unroll_rx': True}
    """
    regs = 32

    def need(q: Any) -> int:
        return q["pixels"] * q["lanes"] + q["lanes"] + q["pixels"]

    default = {"pixels": PIXELS, "lanes": lanes_for(g.o), "unroll_rx": g.kh * g.kw > 1}
    budget = max(regs, need(default))
    knobs = (Knob("pixels", (2, 3, 4), PIXELS, "output pixels per register tile"),
             Knob("lanes", (2, 4, 8), default["lanes"], "output channels per register tile"),
             Knob("unroll_rx", (False, True), default["unroll_rx"],
                  "unroll the window's column loop", active=lambda q: g.kh * g.kw > 1))
    rules = (Rule(f"pixels * lanes accumulators, a weight row and the pixels' inputs fit "
                  f"{budget} FPU registers", lambda q: need(q) <= budget),)
    key = (f"conv2d_rows|{g.n}x{g.c}x{g.h}x{g.w}|o{g.o}|k{g.kh}x{g.kw}|s{g.sh}x{g.sw}|"
           f"d{g.dh}x{g.dw}|p{g.pt}x{g.pl}|out{g.oh}x{g.ow}")
    return Space("conv2d_rows", key, knobs, rules)


def conv_rows_compute(node: Node, g: ConvGeom, lanes: int | None = None,
                      pixels: int = PIXELS) -> tuple[list[te.Tensor], list[Value]]:
    """The TE of the module docstring: ``[X, W_rows, (bias), Y]`` and their values
    (``lanes``/``pixels`` of a tuned point; None: :func:`lanes_for`)."""
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    k = g.c * g.kh * g.kw
    lanes = lanes or lanes_for(g.o)
    wp = pack_rows(np.asarray(wv.data, np.float32), lanes)
    x = te.placeholder(xv.shape, "float32", "X")
    w = te.placeholder(wp.shape, "float32", "W_rows")
    args, values = [x, w], [xv, Value.constant(f"{wv.name}_rows", wp)]
    zero = ir.FloatImm(0.0, "float32")
    ohw = g.oh * g.ow

    npix = g.n * ohw
    pairs = -(-npix // pixels) * pixels  # the last pair may repeat the last pixel

    def col_f(p: Any, kk: Any) -> Any:
        if pairs != npix:
            p = te.min(p, npix - 1)
        n, rem = te.floordiv(p, ohw), te.floormod(p, ohw)
        y, xx = te.floordiv(rem, g.ow), te.floormod(rem, g.ow)
        c, r = te.floordiv(kk, g.kh * g.kw), te.floormod(kk, g.kh * g.kw)
        ry, rx = te.floordiv(r, g.kw), te.floormod(r, g.kw)
        iy = y * g.sh + ry * g.dh - g.pt
        ix = xx * g.sw + rx * g.dw - g.pl
        if is_pointwise(g):  # no padding can be read
            return x[n, c, iy, ix]
        inside = te.all(iy >= 0, iy < g.h, ix >= 0, ix < g.w)
        cy = te.max(te.min(iy, g.h - 1), 0)
        cx = te.max(te.min(ix, g.w - 1), 0)
        return te.if_then_else(inside, x[n, c, cy, cx], zero)

    col = te.compute((pairs, k), col_f, name="col")
    r = te.reduce_axis((0, k), name="rk")
    acc = te.compute((pairs, wp.shape[0] * lanes), lambda p, m: te.sum(
        col[p, r] * w[m // lanes, r, m % lanes], axis=r), name="acc")
    bias = _bias_param(bv, args, values)

    def out_f(n: Any, m: Any, y: Any, xx: Any) -> Any:
        v = acc[(n * g.oh + y) * g.ow + xx, m]
        return v + bias[m] if bias is not None else v

    return args + [te.compute((g.n, g.o, g.oh, g.ow), out_f, name="conv")], values


def _schedule(sch: Schedule, lanes: int, window: tuple[int, int], pixels: int = PIXELS,
              unroll_rx: bool = True, channels: int = 2, depth: int = 2) -> None:
    """``pixels`` output pixels at a time: ``col`` and ``acc`` under the pixel-pair
    loop, ``pixels x lanes`` accumulators unrolled inside the reduction. ``channels``
    (output channels) and ``depth`` (the reduction's length, C·KH·KW): a loop of ``acc``
    whose extent is 1 there is elided by ``compute_at``, so ``acc`` schedules the loops
    it has (one output channel, or a 1x1 window over one input channel, left the
    Cortex-M compile with a ScheduleError: fuzzer seed 234098)."""
    out = sch.get_block("conv")
    _, m, y, x = sch.get_loops(out)
    sch.reorder(y, x, m)
    po, _ = sch.split(sch.fuse(y, x), [None, pixels])
    acc = sch.get_block("acc")
    sch.compute_at(acc, po)
    col = sch.get_block("col")
    sch.compute_at(col, po)
    if window[0] * window[1] > 1:  # k -> (c, ry, rx): no division, bounds per ry / rx
        _, ry, rx = sch.split(sch.get_loops(col)[-1], [None, window[0], window[1]])
        if unroll_rx:
            sch.unroll(rx)
    # acc's own loops under the pixel-pair loop: pixels, then the channels (unless there
    # is one), then the reduction (unless it has one step)
    own = sch.get_loops(acc)[2:]
    ap, am, ak = own[0], own[1] if channels > 1 else None, own[-1] if depth > 1 else None
    assert len(own) == 1 + (am is not None) + (ak is not None), own
    mi = None
    if am is not None:
        mo, mi = sch.split(am, [None, lanes])
        sch.reorder(mo, *([ak] if ak is not None else []), ap, mi)
    elif ak is not None:
        sch.reorder(ak, ap)
    sch.decompose_reduction(acc, ak if ak is not None else ap)
    sch.unroll(ap)
    if mi is not None:
        sch.unroll(mi)


#: largest padded input plane of one channel a depthwise kernel stages (bytes): on the
#: stack up to 1 KiB, else a scratch slice; larger planes are read directly (not in place)
PLANE_BYTES = 16384


def dw_plane_compute(node: Node, g: DwGeom, staged: bool
                     ) -> tuple[list[te.Tensor], list[Value]]:
    """Depthwise ``[X, W, (bias), Y]``: with ``staged`` the channel's zero-padded plane
    (``pad``), else the input read with the bounds checked inline; a per-pixel reduction
    (``acc``) and the bias in an elementwise output block (``dwconv``), where a fused
    activation is inlined."""
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    x = te.placeholder(xv.shape, "float32", "X")
    w = te.placeholder(wv.shape, "float32", "W")
    args, values = [x, w], [xv, wv]
    zero = ir.FloatImm(0.0, "float32")

    def padded(n: Any, c: Any, iy: Any, ix: Any) -> Any:
        inside = te.all(iy >= 0, iy < g.h, ix >= 0, ix < g.w)
        cy = te.max(te.min(iy, g.h - 1), 0)
        cx = te.max(te.min(ix, g.w - 1), 0)
        return te.if_then_else(inside, x[n, c, cy, cx], zero)

    hp, wp = g.padded
    if staged:
        pad = te.compute((g.n, g.c, hp, wp), lambda n, c, i, j: padded(n, c, i - g.pt, j - g.pl),
                         name="pad")

        def read(n: Any, c: Any, i: Any, j: Any) -> Any:
            return pad[n, c, i, j]
    else:
        def read(n: Any, c: Any, i: Any, j: Any) -> Any:
            return padded(n, c, i - g.pt, j - g.pl)

    ry = te.reduce_axis((0, g.kh), name="ry")
    rx = te.reduce_axis((0, g.kw), name="rx")
    acc = te.compute((g.n, g.c, g.oh, g.ow), lambda n, c, y, xx: te.sum(
        read(n, c, y * g.sh + ry * g.dh, xx * g.sw + rx * g.dw) * w[c, 0, ry, rx],
        axis=[ry, rx]), name="acc")
    bias = _bias_param(bv, args, values)

    def out_f(n: Any, c: Any, y: Any, xx: Any) -> Any:
        return acc[n, c, y, xx] + bias[c] if bias is not None else acc[n, c, y, xx]

    return args + [te.compute(acc.shape, out_f, name="dwconv")], values


def dw_plane_space(g: DwGeom) -> Space:
    """The knobs of the Cortex-M float32 depthwise convolution (kind ``cm_depthwise``):

    * ``staged`` -- the channel's zero-padded plane copied first (the heuristic where it
      fits :data:`PLANE_BYTES`; the pixels then read it without a bounds test, and a
      same-shape layer runs in place) or the input read with the bounds tested per tap;
    * ``pad`` -- the staged plane written with a padding test per element (``select``,
      the heuristic) or by border and interior loops (``partitioned``: the
      ``partition_loops`` pass; the interior is a plain copy); staged planes with a
      padding only;
    * ``unroll`` -- the window's loops unrolled: ``window`` (the heuristic: the kh x kw
      weights in registers across the channel's pixels), ``columns`` (kw only) or ``none``.

    >>> g = DwGeom(1, 8, 10, 10, 3, 3, 10, 10, 1, 1, 1, 1, 1, 1)
    >>> s = dw_plane_space(g); s.default(), s.size
    ({'staged': True, 'pad': 'select', 'unroll': 'window'}, 12)
    """
    hp, wp = g.padded
    fits = 4 * hp * wp <= PLANE_BYTES
    padded = g.pt > 0 or g.pl > 0 or hp > g.h or wp > g.w
    knobs = (Knob("staged", (True, False) if fits else (False,), fits,
                  "the channel's padded plane copied first, or bounds tested per tap"),
             Knob("pad", ("select", "partitioned") if fits and padded else ("select",),
                  "select", "the staged plane by a test per element or by border/interior "
                  "loops", active=lambda q: q["staged"]),
             Knob("unroll", ("window", "columns", "none"), "window",
                  "the window's loops unrolled (both, the columns, neither)"))
    key = (f"cm_depthwise|{g.n}x{g.c}x{g.h}x{g.w}|k{g.kh}x{g.kw}|s{g.sh}x{g.sw}|"
           f"d{g.dh}x{g.dw}|p{g.pt}x{g.pl}|out{g.oh}x{g.ow}|plane{PLANE_BYTES}")
    return Space("cm_depthwise", key, knobs, seeds=({"pad": "partitioned"},))


def schedule_depthwise_m(node: Node, g: DwGeom) -> OpSchedule:
    """Per channel: the padded plane staged (when it fits :data:`PLANE_BYTES`), one
    accumulator per output pixel, the bias (and a fused activation) as it is written;
    at the point :func:`decide` gives :func:`dw_plane_space`."""
    point = decide(dw_plane_space(g))
    staged = point["staged"]
    args, values = dw_plane_compute(node, g, staged)
    name = f"dwconv_{g.c}x{g.h}x{g.w}_k{g.kh}s{g.sh}_plane"
    sch = Schedule(te.create_prim_func(args, name=name))
    _, c, _, x = sch.get_loops(sch.get_block("dwconv"))
    acc = sch.get_block("acc")
    sch.compute_at(acc, x)
    ry, rx = sch.get_loops(acc)[-2:]
    sch.decompose_reduction(acc, ry)  # init once, before ry
    if point["unroll"] == "window":
        # the kh x kw weights of the channel stay in registers across pixels
        sch.unroll(ry)
    if point["unroll"] != "none":
        sch.unroll(rx)
    if staged:
        sch.compute_at(sch.get_block("pad"), c)
        if point["pad"] == "partitioned":
            for loop in sch.get_loops(sch.get_block("pad"))[-2:]:
                sch.annotate(loop, PARTITION, 1)
    info: dict[str, Any] = {"schedule": "depthwise_plane", "layout": "NCHW",
                            "staged": staged, "flops": g.flops}
    # channel c's plane is staged before channel c is written
    same = node.inputs[0].shape == node.outputs[0].shape
    return OpSchedule(sch, values, list(node.outputs), info,
                      in_place=0 if staged and same else None)


def applies(node: Node) -> ConvGeom | None:
    """The geometry when this schedule takes ``node`` (float32, group 1, 2-D, constant
    weights), else None."""
    g = conv_geometry(node)
    if g is None or node.inputs[1].data is None:
        return None
    return g


def schedule_conv2d_m(node: Node, target: Any = None) -> OpSchedule:
    """The Cortex-M float32 Conv schedule (the CPU one where it does not apply)."""
    t = resolve_target(target)
    x, w = node.inputs[0], node.inputs[1]
    if is_depthwise(node) and w.data is not None and x.dtype == w.dtype == "float32":
        return schedule_depthwise_m(node, dw_geometry(node))
    g = applies(node)
    if g is None or (WINOGRAD and winograd_choice(g, cpu_params(t)) is not None):
        return schedule_conv2d(node, t)
    point = decide(conv_rows_space(g, t))
    args, values = conv_rows_compute(node, g, point["lanes"], point["pixels"])
    name = f"conv2d_{g.c}x{g.h}x{g.w}_{g.o}k{g.kh}s{g.sh}_rows"
    sch = Schedule(te.create_prim_func(args, name=name))
    _schedule(sch, point["lanes"], (g.kh, g.kw), point["pixels"], point["unroll_rx"],
              channels=g.o, depth=g.c * g.kh * g.kw)
    info: dict[str, Any] = {"schedule": "conv2d_pixel_rows", "layout": "NCHW",
                            "packed_weight": True, "flops": g.flops}
    # the pixel's channels are all in col before it is written
    staged = is_pointwise(g) and (g.sh, g.sw) == (1, 1) and x.shape == node.outputs[0].shape
    return OpSchedule(sch, values, list(node.outputs), info, in_place=0 if staged else None)


