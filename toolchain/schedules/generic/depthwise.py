"""Default CPU schedule for depthwise convolution (``group == C == O``): ``NCHW[x]c``.

Depthwise convolution does ``KH * KW`` multiply-adds per output element and reads each
input element ``KH * KW / (SH * SW)`` times: it is bound by loads, not FMAs. The schedule
therefore keeps every access a full vector over a channel block (as TVM's x86
``depthwise_conv2d_NCHWc``):

* **data** (``NCHW``, ``NHWC`` or ``NCHW{b}c``) is read through a zero-padded view
  ``[N, C/cb, Hp, Wp, cb]`` whose border is a select, by a condition that does not depend
  on the channel lane, of the nearest edge element's vector or zeros, so every load stays
  a vector whatever the padding (asymmetric ``SAME`` pads of stride 2 included). (It was
  the edge element times a 0/1 factor until session 26: an infinite element there gave
  NaN in the padding; the select is as fast, ``benchmarks/models.py``.) The view is
  inlined into the product (``compute_inline``), not copied: depthwise work is so small
  that a padded copy cost as much as the convolution (2x slower at stride 2, where the
  copy is 4x the output). An
  ``NCHW``/``NHWC`` input is copied once into the view instead (a gather per vector);
* **weights** ``[C, 1, KH, KW]`` (any kernel layout) are packed *at compile time* into
  ``[C/cb, KH, KW, cb]`` (``OpSchedule.input_values`` names ``<W>_dw_packed``);
* the **product** keeps ``rw`` output columns of one channel block in vector registers
  (``cache_write`` local); each ``(kh, kw)`` step is one weight vector load and ``rw``
  input vector loads feeding ``rw`` FMAs; ``kh``, ``kw`` and the tile are unrolled;
* the **write-back** adds the bias and writes the output layout directly (``NCHW{cb}c``
  needs no re-layout, so a fused ReLU/Clip tail lands in the same store).

``cb`` is the input's channel block when it has one, else the largest divisor of ``C`` up
to the vector width. ``rw`` is the largest divisor of ``OW`` up to 8.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> w = np.ones((32, 1, 3, 3), np.float32)
    >>> node = Node("Conv", "dw", [Value("x", (1, 32, 12, 12), "float32"),
    ...                            Value.constant("w", w)],
    ...             [Value("y", (1, 32, 12, 12), "float32")], {"group": 32, "pads": [1] * 4})
    >>> s = schedule_depthwise(node, "x86_64-avx512")
    >>> s.info["schedule"], s.info["cb"], s.info["rw"], [v.name for v in s.input_values]
    ('depthwise_nchwc', 16, 6, ['x', 'w_dw_packed'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space, divisors, with_default
from toolchain.errors import NoScheduleError
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops.nn_common import attrs_of, window_geometry
from toolchain.schedules.generic.common import CpuParams, cpu_params
from toolchain.schedules.packing import packed_constant
from toolchain.schedules.registry import OpSchedule, resolve_target
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

Expr = ir.PrimExpr

#: widest register row of output columns (accumulators + one weight + one input vector)
MAX_ROW = 8


@dataclass(frozen=True)
class DwGeom:
    """Shapes of one depthwise convolution (``NCHW`` view)."""

    n: int
    c: int
    h: int
    w: int
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
        return 2 * self.n * self.c * self.oh * self.ow * self.kh * self.kw

    @property
    def padded(self) -> tuple[int, int]:
        """``(Hp, Wp)``: the padded input that every output window reads inside."""
        hp = max(self.h + self.pt, (self.oh - 1) * self.sh + (self.kh - 1) * self.dh + 1)
        wp = max(self.w + self.pl, (self.ow - 1) * self.sw + (self.kw - 1) * self.dw + 1)
        return hp, wp


def is_depthwise(node: Node) -> bool:
    """Whether a ``Conv``/``LayoutConv`` node is depthwise with channel multiplier 1."""
    from toolchain.graph.passes.layout_ops import nchw_node

    conv = nchw_node(node) if node.op == "LayoutConv" else node
    x, w = conv.inputs[0], conv.inputs[1]
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4:
        return False
    g = int(conv.attrs.get("group", 1) or 1)
    return g > 1 and g == x.shape[1] == w.shape[0] and w.shape[1] == 1


def dw_geometry(conv: Node) -> DwGeom:
    """The :class:`DwGeom` of a plain depthwise ``Conv`` node (``NCHW``/``OIHW`` shapes)."""
    x, w = conv.inputs[0], conv.inputs[1]
    a = attrs_of(conv)
    strides = list(a["strides"] or [1, 1])
    dil = list(a["dilations"] or [1, 1])
    pads = list(a["pads"] or [0] * 4)
    geom = window_geometry(x.shape[2:], w.shape[2:], strides=strides, dilations=dil,
                           pads=pads, auto_pad=a["auto_pad"])
    n, c, h, wd = x.shape
    return DwGeom(n, c, h, wd, w.shape[2], w.shape[3], geom.out[0], geom.out[1], strides[0],
                  strides[1], dil[0], dil[1], geom.pads_begin[0], geom.pads_begin[1])


def _block(layout: str) -> int | None:
    from toolchain.graph.passes.layout_ops import block_of

    return block_of(layout)


def pack_dw_weight(w: np.ndarray, cb: int) -> np.ndarray:
    """``[C, 1, KH, KW]`` -> ``[C/cb, KH, KW, cb]``.

    >>> pack_dw_weight(np.arange(8, dtype=np.float32).reshape(4, 1, 1, 2), 2)[1, 0, 1]
    array([5., 7.], dtype=float32)
    """
    c, _, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(c // cb, cb, kh, kw).transpose(0, 2, 3, 1))


def _reader(x: te.Tensor, layout: str, cb: int):
    ib = _block(layout)

    def at(n: Expr, c0: Expr, c1: Expr, ih: Expr, iw: Expr) -> Expr:
        if ib == cb:
            return x[n, c0, ih, iw, c1]
        c = c0 * cb + c1
        if ib is not None:
            return x[n, c // ib, ih, iw, c % ib]
        return x[n, ih, iw, c] if layout == "NHWC" else x[n, c, ih, iw]

    return at


def depthwise_compute(node: Node, g: DwGeom, cb: int, w_oihw: np.ndarray,
                      data_layout: str = "NCHW", out_layout: str = "NCHW"
                      ) -> tuple[list[te.Tensor], list[Value]]:
    """Tensors of the blocked depthwise convolution: (args, input values)."""
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    hp, wp = g.padded
    x = te.placeholder(xv.shape, "float32", "X")
    at = _reader(x, data_layout, cb)

    def pad_x(n: Expr, c0: Expr, hh: Expr, ww: Expr, c1: Expr) -> Expr:
        ih, iw = hh - g.pt, ww - g.pl
        inside = te.all(ih >= 0, ih < g.h, iw >= 0, iw < g.w)
        val = at(n, c0, c1, te.max(te.min(ih, g.h - 1), 0), te.max(te.min(iw, g.w - 1), 0))
        # the clamped load is always in bounds; a select, not ``val * float(inside)``
        # (NaN for an infinite border element: fuzzer seed 320017), of a condition the
        # same for every channel lane, so the copy stays vector code
        return te.if_then_else(inside, val, ir.FloatImm(0.0, "float32"))

    xp = te.compute((g.n, g.c // cb, hp, wp, cb), pad_x, name="data_pack")
    if wv.data is not None:  # w_oihw is oihw_weights(node, wv.data) as float32
        from toolchain.schedules.generic.conv2d import oihw_weights

        packed = packed_constant(wv, "_dw_packed", lambda w: pack_dw_weight(
            np.asarray(oihw_weights(node, w), np.float32), cb))
    else:
        packed = Value.constant(f"{wv.name}_dw_packed", pack_dw_weight(w_oihw, cb))
    wt = te.placeholder(packed.shape, "float32", "W_packed")
    args, values = [x, wt], [xv, packed]
    rkh = te.reduce_axis((0, g.kh), name="rkh")
    rkw = te.reduce_axis((0, g.kw), name="rkw")
    conv = te.compute((g.n, g.c // cb, g.oh, g.ow, cb), lambda n, c0, y, xx, c1: te.sum(
        xp[n, c0, y * g.sh + rkh * g.dh, xx * g.sw + rkw * g.dw, c1] * wt[c0, rkh, rkw, c1],
        axis=[rkh, rkw]), name="conv")
    bias = None
    if bv is not None:
        bias = te.placeholder(bv.shape, "float32", "bias")
        args.append(bias)
        values.append(bv)

    def value(n: Expr, c0: Expr, y: Expr, xx: Expr, c1: Expr) -> Expr:
        v = conv[n, c0, y, xx, c1]
        return v + bias[c0 * cb + c1] if bias is not None else v

    bo = _block(out_layout)
    if bo == cb:
        out = te.compute(conv.shape, value, name="conv_out")
    elif bo is not None:
        out = te.compute((g.n, g.c // bo, g.oh, g.ow, bo), lambda n, o0, y, xx, o1: value(
            n, (o0 * bo + o1) // cb, y, xx, (o0 * bo + o1) % cb), name="conv_out")
    elif out_layout == "NHWC":
        out = te.compute((g.n, g.oh, g.ow, g.c), lambda n, y, xx, c: value(
            n, c // cb, y, xx, c % cb), name="conv_out")
    else:
        out = te.compute((g.n, g.c, g.oh, g.ow), lambda n, c, y, xx: value(
            n, c // cb, y, xx, c % cb), name="conv_out")
    return args + [out], values


def _row(ow: int) -> int:
    return max(d for d in range(1, min(MAX_ROW, ow) + 1) if ow % d == 0)


def dw_space(g: DwGeom, p: CpuParams, cb: int, rw: int, layouts: tuple[str, str],
             cb_free: bool) -> Space:
    """The knobs of the depthwise schedule around the heuristic's ``cb``/``rw``: ``rw``
    (output columns per register row, a divisor of the output width), ``cb`` (channel
    block; only when the input has no channel block of its own), ``unroll_kw`` and
    ``unroll_kh``. Rule: the row fits the register file.

    >>> g = DwGeom(1, 32, 12, 12, 3, 3, 12, 12, 1, 1, 1, 1, 1, 1)
    >>> s = dw_space(g, cpu_params("x86_64-avx2"), 8, 6, ("NCHW8c", "NCHW8c"), False)
    >>> s.default(), s.knob("rw").choices
    ({'rw': 6, 'cb': 8, 'unroll_kw': True, 'unroll_kh': True}, (1, 2, 3, 4, 6, 12))
    """
    lanes = p.lanes("float32")

    def need(q: Mapping[str, Any]) -> int:
        return q["rw"] * -(-q["cb"] // lanes) + 2

    budget = max(p.vector_registers, need({"rw": rw, "cb": cb}))
    cbs = with_default(divisors(g.c, lanes), cb) if cb_free else (cb,)
    knobs = (Knob("rw", with_default(divisors(g.ow, 16), rw), rw,
                  "output columns per register row"),
             Knob("cb", cbs, cb, "channels per block (vector lanes)"),
             Knob("unroll_kw", (False, True), g.kw <= 7, "unroll the kernel-width loop"),
             Knob("unroll_kh", (False, True), g.kh * g.kw <= 9,
                  "unroll the kernel-height loop"))
    rules = (Rule(f"the register row (rw accumulators of cb channels, a weight and an input "
                  f"vector) fits {budget} vector registers", lambda q: need(q) <= budget),)
    key = (f"depthwise|{layouts[0]}>{layouts[1]}|{g.n}x{g.c}x{g.h}x{g.w}|k{g.kh}x{g.kw}|"
           f"s{g.sh}x{g.sw}|d{g.dh}x{g.dw}|p{g.pt}x{g.pl}|out{g.oh}x{g.ow}|"
           f"v{lanes}r{p.vector_registers}c{p.cores}")
    return Space("depthwise", key, knobs, rules)


def schedule_dw(sch: Schedule, g: DwGeom, cb: int, rw: int, p: CpuParams, direct: bool,
                blocked_input: bool = True, knobs: Mapping[str, Any] | None = None) -> None:
    """Register-tile and vectorize the blocked depthwise product (see the module doc).

    ``blocked_input``: the input already is ``NCHW{cb}c``, so the padded view is inlined;
    other layouts are copied into it once (a channel-block vector of ``NCHW`` is a
    gather, which the product's vector loads must not repeat for every tap).
    ``knobs``: ``unroll_kw``/``unroll_kh`` of :func:`dw_space` (None: the heuristic's)."""
    k = dict(knobs) if knobs is not None else {"unroll_kw": g.kw <= 7,
                                              "unroll_kh": g.kh * g.kw <= 9}
    if blocked_input:
        sch.compute_inline(sch.get_block("data_pack"))
    else:
        sch.vectorize(sch.get_loops(sch.get_block("data_pack"))[-1])
    blk = sch.get_block("conv")
    n, c0, y, xx, c1, rkh, rkw = sch.get_loops(blk)
    xo, xi = sch.split(xx, [None, rw])
    sch.reorder(n, c0, y, xo, rkh, rkw, xi, c1)
    local = sch.cache_write(blk, 0, "local")
    # one pixel a tile (rw=1): write back a row's tiles at once, a 2-D loop as for rw > 1;
    # a lone 16-lane loop with a fused Clip is unrolled by gcc into scalar compares and
    # branches, not vectorized (30x slower: the bundle has no ``omp simd``, docs/tuning.md)
    sch.reverse_compute_at(local, y if rw == 1 and g.ow > 1 else xo)
    init = sch.decompose_reduction(blk, rkh)
    for b in (blk, init, local):
        *_, rows, cols = sch.get_loops(b)
        sch.vectorize(cols)
        if b is not local:  # a rolled write-back keeps a fused Clip vectorized (cpu_conv2d)
            sch.unroll(rows)
    loops = sch.get_loops(blk)  # n c0 y xo | kh kw | xi c1
    if k["unroll_kw"]:
        sch.unroll(loops[5])
    if k["unroll_kh"]:
        sch.unroll(loops[4])
    out = sch.get_block("conv_out")
    if direct:
        sch.reverse_compute_inline(out)
        out = None
    if p.cores > 1:
        sch.parallel(sch.fuse(n, c0, y))
        if out is not None:
            sch.parallel(sch.fuse(*sch.get_loops(out)[:2]))


def schedule_depthwise(node: Node, target: str | Target | None = None) -> OpSchedule:
    """The default CPU schedule of a depthwise ``Conv`` or ``LayoutConv`` node.

    Needs constant weights with channel multiplier 1 (raises
    :class:`~toolchain.errors.NoScheduleError` otherwise).
    """
    from toolchain.graph.passes.layout_ops import kernel_from_layout, nchw_node

    t = resolve_target(target)
    layout = node.op == "LayoutConv"
    conv = nchw_node(node) if layout else node
    wv = node.inputs[1]
    if not is_depthwise(node) or wv.data is None or node.inputs[0].dtype != "float32":
        raise NoScheduleError(f"{node.describe()}: the depthwise schedule needs a float32 "
                               "2-D depthwise conv (group == channels, one output channel "
                               "per group) with constant weights")
    a = node.attrs
    data_layout = a.get("data_layout", "NCHW") if layout else "NCHW"
    out_layout = a.get("out_layout", "NCHW") if layout else "NCHW"
    w_oihw = kernel_from_layout(wv.data, a["kernel_layout"]) if layout else wv.data
    g = dw_geometry(conv)
    p = cpu_params(t)
    lanes = p.lanes("float32")
    ib = _block(data_layout)
    cb = ib if ib is not None else max(d for d in range(1, min(g.c, lanes) + 1)
                                       if g.c % d == 0)
    rw = _row(g.ow)
    point = decide(dw_space(g, p, cb, rw, (data_layout, out_layout), ib is None))
    cb, rw = point["cb"], point["rw"]
    args, values = depthwise_compute(node, g, cb, np.asarray(w_oihw, np.float32),
                                     data_layout, out_layout)
    name = f"dwconv_{data_layout}_{g.c}x{g.h}x{g.w}_k{g.kh}s{g.sh}"
    sch = Schedule(te.create_prim_func(args, name=name))
    direct = _block(out_layout) == cb
    schedule_dw(sch, g, cb, rw, p, direct, ib == cb, knobs=point)
    info: dict[str, Any] = {"schedule": "depthwise_nchwc", "layout": f"NCHW{cb}c", "cb": cb,
                            "rw": rw, "direct_out": direct, "packed_weight": True,
                            "flops": g.flops}
    return OpSchedule(sch, values, list(node.outputs), info)


__all__ = ["DwGeom", "depthwise_compute", "dw_geometry", "dw_space", "is_depthwise",
           "pack_dw_weight", "schedule_depthwise", "schedule_dw"]
