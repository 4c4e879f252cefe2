"""The one-pixel Cortex-M int8 DSP convolution: its search space and its dot loop nest.

Where the two-pixel x two-channel tile of :mod:`toolchain.schedules.cortex_m.int8` does not
apply (an odd output channel count, or an odd width in a batch), a QConv takes one output
pixel a step: one im2col row, then per tile of ``lanes`` channels (4 where 4 divides the
channels: ``dot_q15q7_4x{4G}``; else 1: ``dot_q15q7_1x4``, one channel and four k a call)
the dot calls over the row.  The heuristic walks the channels outermost, one call per step
of the row.  Its space (:func:`pixel_conv_space`, kind ``cm_int8_conv1``) offers:

* ``block`` (one channel a call): channels whose row is walked together, a divisor of
  the channels up to :data:`BLOCK_CHANNELS`: 1 (the heuristic: each channel's whole row,
  its accumulator in a register, the im2col row read once per channel) or more (per block,
  each step of four k for every channel of the block, its loop unrolled: the row's two
  words loaded once for the block, its accumulators in registers);
* ``unroll_k``: the row's calls unrolled by 1 (the heuristic), 2, 4 or 8 (dividing them),
  or all of them up to 16: fewer loop updates and branches per call;
* ``zero_point``: ``im2col`` or ``bias`` (folded at compile time, as ``cm_int8_conv``);
* ``im2col`` (a k x k window): the im2col copy's loops over (channel, kernel row, kernel
  column) as loops (``loops``, the heuristic), the window unrolled (``window``: kh x kw
  statements a channel) or every loop unrolled (``all``, a row of at most
  :data:`UNROLL_ROW` elements: the padding of K to a multiple of 4 and the channel index
  fold to constants).

Before (``block=1``, ``unroll_k=1``; 3 channels, K = 72)::

    for ax1 in 0..2:
        dsp_acc[ax1] = 0
        for ax2 in 0..17:
            dot_q15q7_1x4(&im2col[4 ax2], &w[72 ax1 + 4 ax2], &dsp_acc[ax1])

after (``block=3``, ``unroll_k=2``)::

    dsp_acc[0:3] = 0
    for ax2_0 in 0..8:                                  (unrolled: 2 steps x 3 channels)
        dot_q15q7_1x4(&im2col[8 ax2_0], &w[8 ax2_0], &dsp_acc[0])
        dot_q15q7_1x4(&im2col[8 ax2_0], &w[72 + 8 ax2_0], &dsp_acc[1])
        dot_q15q7_1x4(&im2col[8 ax2_0], &w[144 + 8 ax2_0], &dsp_acc[2])
        dot_q15q7_1x4(&im2col[8 ax2_0 + 4], &w[8 ax2_0 + 4], &dsp_acc[0]) ...

>>> import numpy as np
>>> from toolchain.graph.ir import Node, Value
>>> from toolchain.target import resolve_target
>>> w = Value.constant("w", np.ones((3, 8, 3, 3), np.int8))
>>> b = Value.constant("b", np.zeros(3, np.int32))
>>> n = Node("QConv", "c", [Value("x", (1, 8, 6, 8), "int8"), w, b],
...          [Value("y", (1, 3, 6, 8), "int8")],
...          {"pads": [1] * 4, "strides": [1, 1], "x_zero_point": 5})
>>> s = pixel_conv_space(n, resolve_target("cortex-m4"), 72, 1, 1, True)
>>> s.default()
{'block': 1, 'unroll_k': 1, 'zero_point': 'im2col', 'im2col': 'loops'}
>>> s.knob("block").choices
(1, 3)
>>> s.knob("unroll_k").choices
(1, 2)
"""

from __future__ import annotations

from typing import Any

from toolchain.autotune.space import Knob, Rule, Space
from toolchain.graph.ir import Node
from toolchain.target import Target
from toolchain.tir.schedule import Schedule

#: most channels a ``block`` takes: their accumulators, a call's two im2col words, its
#: weight word (unpacked twice) and pointers in the 13 general registers
BLOCK_CHANNELS = 8

#: the row's dot calls unrolled by (those dividing the calls are offered, and all of
#: them where they are at most :data:`FULL_UNROLL`)
UNROLLS = (1, 2, 4, 8)
FULL_UNROLL = 16

#: the longest im2col row ``im2col=all`` unrolls (elements)
UNROLL_ROW = 64


def pixel_conv_space(node: Node, target: Target, kp: int, lanes: int, groups: int,
                     fold: bool) -> Space | None:
    """The knobs of the one-pixel DSP convolution of QConv ``node`` (padded reduction
    ``kp``, ``lanes`` channels and ``groups`` groups of four k a call, ``fold``: whether the
    input zero point folds into an int32 bias), or None where there is nothing to choose.
    The key holds the geometry, the layouts, the call's shape and the fold; ``target`` only
    through the call (:func:`~toolchain.schedules.cortex_m.int8.dot_intrinsic`)."""
    del target  # the call's shape (lanes, groups) is all the space depends on
    m = int(node.input(1).shape[0])
    calls = kp // (4 * groups)
    blocks = tuple(b for b in range(1, BLOCK_CHANNELS + 1) if m % b == 0) if lanes == 1 \
        else (1,)
    knobs = (Knob("block", blocks, 1, "channels walking the row together (accumulators "
                  "in registers, the row's words loaded once for them)"),
             Knob("unroll_k", tuple(sorted({u for u in UNROLLS if calls % u == 0} |
                                           ({calls} if calls <= FULL_UNROLL else set()))), 1,
                  "the row's dot calls unrolled by"),
             Knob("zero_point", ("im2col", "bias") if fold else ("im2col",), "im2col",
                  "the input zero point subtracted per im2col element or folded into the "
                  "bias"))
    window = tuple(int(d) for d in node.input(1).shape[2:])
    if window != (1, 1):
        knobs += (Knob("im2col", ("loops", "window", "all") if kp <= UNROLL_ROW else
                       ("loops", "window"), "loops", "the im2col copy's loops unrolled: "
                       "none, the window's, all"),)
    rules = (Rule("unroll_k divides the row's dot calls", lambda q: calls % q["unroll_k"] == 0),)
    x, y, a = node.input(0), node.outputs[0], node.attrs
    key = (f"cm_int8_conv1|{x.dtype}|{'x'.join(map(str, x.shape))}|o{m}|"
           f"k{'x'.join(map(str, node.input(1).shape[2:]))}|"
           f"s{'x'.join(map(str, a['strides']))}|p{'x'.join(map(str, a['pads']))}|"
           f"d{'x'.join(map(str, a.get('dilations', [1, 1])))}|"
           f"out{'x'.join(map(str, y.shape))}|{a.get('data_layout', 'NCHW')}|"
           f"l{lanes}g{groups}|fold={int(fold)}")
    # the prior (docs/tuning.md, session 16): the folded zero point with the largest
    # block and the im2col unrolled, or the row unrolled; a seed the space refuses (or
    # naming a knob it lacks) is dropped
    top = blocks[-1]
    seeds = ({"block": top, "zero_point": "bias", "im2col": "all"},
             {"block": top, "zero_point": "bias", "im2col": "window"},
             {"block": top, "unroll_k": 2, "zero_point": "bias"},
             {"block": top, "zero_point": "bias"},
             {"unroll_k": 8, "zero_point": "bias"}, {"unroll_k": 4, "zero_point": "bias"},
             {"zero_point": "bias"})
    space = Space("cm_int8_conv1", key, knobs, rules, seeds=seeds)
    return space if space.size > 1 else None


def unroll_im2col(sch: Schedule, point: dict[str, Any], c: Any, ry: Any, rx: Any) -> None:
    """The im2col copy's (channel ``c``, kernel row ``ry``, column ``rx``) loops unrolled
    as ``point["im2col"]`` says (``loops``: none)."""
    how = point.get("im2col", "loops")
    for loop in {"loops": (), "window": (ry, rx), "all": (c, ry, rx)}[how]:
        sch.unroll(loop)


def tensorize_pixel(sch: Schedule, intrin: str, lanes: int, groups: int,
                    point: dict[str, Any] | None = None) -> None:
    """``dsp_acc`` (loops m, ko, h, l under the pixel) -> init + one intrinsic per tile of
    ``lanes`` channels and ``groups`` groups of four k, at ``point`` of
    :func:`pixel_conv_space` (None: the heuristic's: channels outermost, no unrolling)."""
    p = point or {"block": 1, "unroll_k": 1}
    u, block = int(p["unroll_k"]), int(p["block"])
    acc = sch.get_block("dsp_acc")
    m, ko, h, l_ = sch.get_loops(acc)[-4:]
    if lanes == 1:
        kin = mi = None
        if block > 1:
            m, mi = sch.split(m, [None, block])
        if u > 1:
            ko, kin = sch.split(ko, [None, u])
        if mi is not None:
            sch.reorder(ko, *([kin] if kin is not None else []), mi)
        sch.decompose_reduction(acc, ko)
        for loop in (kin, mi):
            if loop is not None:
                sch.unroll(loop)
        sch.tensorize(h, intrin)
        return
    mo, mi = sch.split(m, [None, lanes])
    kin = None
    if groups > 1:
        koo, g = sch.split(ko, [None, groups])
        inner = [mi, g, h, l_]
    else:
        koo, inner = ko, [mi, h, l_]
    if u > 1:
        koo, kin = sch.split(koo, [None, u])
    sch.reorder(mo, koo, *([kin] if kin is not None else []), *inner)
    sch.decompose_reduction(acc, koo)
    if kin is not None:
        sch.unroll(kin)
    sch.tensorize(mi, intrin)
