"""Default int8 schedules for Cortex-M targets: CMSIS-NN-style kernels on the DSP extension.

QConv (group 1) and QGemm use the ``algorithm="dsp"`` computes of
:mod:`toolchain.topi.int8`: the activations are widened to int16 minus the zero point in an
``im2col`` row per output pixel (the q7 -> q15 packing stage of CMSIS-NN), the weights are
packed at compile time (:func:`~toolchain.topi.int8.pack_dsp_weights`), and the inner
product is tensorized with the target's dual-MAC intrinsics (SXTB16 unpacking of four int8
weights, two SMLAD each, a C loop over G groups of four k with the accumulators in
registers).

Convolutions with an even channel count take **two output pixels a step** (CMSIS-NN's
``mat_mult_kernel_s8_s16`` tile): two im2col rows, and ``dot_q15q7_2x2x{4G}`` calls of two
channels x two pixels (G from :data:`PAIR_GROUPS`), so each weight word is loaded and
unpacked once for both pixels. The pixels are neighbours of a row when the width is even;
otherwise two of the flattened pixel index (batch 1), the im2col/accumulator rows rounded
up to an even count with the last pixel repeated (computed, not stored: the epilogue is
guarded). For a k x k window the im2col loops run (c, ry, pixel, rx), both pixels' kernel
row reads in one unrolled step. Before (one pixel, K = 144)::

    for y, x:
        im2col[0:144] = int16(x[...]) - x_zp
        for mo in 0..3:  kiln_m4_dot_q15q7_4x48(&im2col[0], &w[4 mo, 0], &acc[4 mo]) (x3)
        qconv[.., m, y, x] = requantize(acc[m] + bias[m])      (kiln_cm_requantize, SSAT)

after (``xx_0``: the pair)::

    for y, xx_0:
        for c, ry:  im2col[0, c, ry, 0:3], im2col[1, c, ry, 0:3] = ...   (6 statements)
        for mo in 0..7:  kiln_m4_dot_q15q7_2x2x144(&im2col[0, 0], &w[2 mo, 0], &acc[0, 2 mo])
        qconv[.., m, y, 2 xx_0 + xx_1] = requantize(acc[xx_1, m] + bias[m])

A k x k convolution (kernel larger than 1 x 1) reads its weights widened to int16 at
compile time where the target declares ``dot_q15q15_2x2x{4G}`` (:func:`wide_weights`: no
SXTB16 in the loop, twice the flash for those weights); 1 x 1 ones keep int8 weights.

Odd channel counts keep one pixel a step: ``dot_q15q7_4x{4G}`` (four channels, G from
:data:`MAX_GROUPS`) or ``dot_q15q7_1x4`` when 4 does not divide the channels.

Depthwise convolutions (channel multiplier 1) pad the channel's int16 input plane once and
call ``dwconv_q15q7_1x4`` per kernel row; dense layers accumulate per tile of four outputs
(the tile and the dot call are tunable: :func:`dsp_dense_space`).
The integers are those of the generic kernels (int32 accumulation, same requantization).

Both stage their input before writing over it, so they may run **in place** when the output
has the input's shape (``OpSchedule.in_place = 0``, honoured by the memory planner): a 1x1
convolution copies each step's pixels (all channels) into the ``im2col`` rows before it
writes those pixels' outputs, and a depthwise convolution whose padded plane is kept whole
pads channel c's plane into its stack buffer before it writes channel c. A depthwise plane
larger than :data:`PLANE_BYTES` is padded per output-row band (rows an earlier band's
outputs would overwrite), and a k x k convolution reads neighbouring pixels: neither runs
in place.  Every DSP convolution (these and the k x k ones, any shape) declares how it
walks its input and output instead (``OpSchedule.overlap``, an
:class:`~toolchain.graph.overlap.AccessOrder`: pixels, channel planes or row bands), from
which the memory planner may start the output inside its input at the lead that order
allows (docs/passes.md, "Overlap").

QAdd (stand-alone or fused) reads each input side from a 256-entry table built at
compile time (:func:`toolchain.topi.int8.qadd_lut`) and requantizes the sum with the C
helper; grouped convolutions and pooling keep the generic CPU schedules
(:mod:`toolchain.schedules.generic.int8`).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 16), "int8"); y = Value("y", (1, 4), "int8")
    >>> c = [Value.constant("w", np.ones((4, 16), np.int8)),
    ...      Value.constant("b", np.zeros(4, np.int32)),
    ...      Value.constant("m", np.full(4, 1 << 30, np.int32)),
    ...      Value.constant("s", np.full((4, 2), 1 << 30, np.int32))]
    >>> attrs = {"x_zero_point": 0, "y_zero_point": 0, "out_min": -128, "out_max": 127,
    ...          "out_dtype": "int8"}
    >>> op = schedule_cortex_m(Node("QGemm", "fc", [x, *c], [y], attrs), "cortex-m4")
    >>> op.info["schedule"], op.info["intrinsic"]
    ('int8 dsp', 'cortex-m4.dot_s8s8_4x8')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space
from toolchain.errors import KilnError
from toolchain.graph.ir import Node, Value
from toolchain.graph.overlap import AccessOrder
from toolchain.intrinsics import load_intrinsics
from toolchain.schedules.cortex_m.int8_pixel import (
    pixel_conv_space,
    tensorize_pixel,
    unroll_im2col,
)
from toolchain.schedules.generic.int8 import block_names, int8_kernel_name, schedule_int8
from toolchain.schedules.registry import OpSchedule
from toolchain.target import Target, resolve_target
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.partition_loop import PARTITION

#: groups of four k one dot call takes, largest first: 4 G k in one call for G >= 4 (a C loop
#: over the groups inside the intrinsic, the four accumulators in registers for the whole
#: loop), 8 k unrolled (G = 2) or 4 k otherwise.  An unrolled 16 k call measured no better
#: (gcc spills registers); the loop does not.
MAX_GROUPS = (16, 12, 10, 8, 6, 4, 2, 1)


def dot_intrinsic(target: Target, channels: int, k: int) -> tuple[str, int, int]:
    """(registered intrinsic name, output channels per call, groups of four k per call)
    for ``channels`` outputs and a (padded) reduction of ``k``: four channels and the largest
    :data:`MAX_GROUPS` entry dividing ``k / 4`` a call; one channel and 4 k when 4 does not
    divide ``channels``."""
    if channels % 4:
        return target.intrinsic("dot_q15q7_1x4"), 1, 1
    groups = next(g for g in MAX_GROUPS if (k // 4) % g == 0)
    return target.intrinsic(f"dot_q15q7_4x{4 * groups}"), 4, groups


#: groups of four k one two-pixel call (``dot_q15q7_2x2x{4G}``) takes, largest first (a C
#: loop inside the intrinsic: one body for every G)
PAIR_GROUPS = (36, 32, 24, 18, 16, 12, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)


def pair_intrinsic(target: Target, channels: int, k: int, width: int, wide: bool = False,
                   unrolled: bool = False) -> tuple[str, int] | None:
    """(registered name, groups of four k a call) of the two-pixel x two-channel dot for
    ``channels`` outputs, a (padded) reduction of ``k`` and an output row of ``width``
    pixels (0: pairs of the flattened pixel index, any count); None where it does not
    apply (odd channel count or odd width: one pixel a call). ``wide``: over int16 weights
    (``dot_q15q15``, see :func:`wide_weights`); ``unrolled``: its straight-line variant
    (``dot_q15q15_2x2x{4G}u``, a tuning choice: :func:`dsp_conv_space`)."""
    if channels % 2 or width % 2:
        return None
    groups = next(g for g in PAIR_GROUPS if (k // 4) % g == 0)
    name = f"dot_q15{'q15' if wide else 'q7'}_2x2x{4 * groups}{'u' if unrolled else ''}"
    return target.intrinsic(name), groups


def _foldable(node: Node) -> bool:
    """Whether the input zero point of QConv ``node`` folds into an int32 bias."""
    from toolchain.topi.int8 import fold_zero_point

    w, b = node.input(1), node.input(2) if len(node.inputs) > 2 else None
    if b is None or b.data is None or w is None or w.data is None:
        return False
    folded = fold_zero_point(b.data, w.data, node.attrs.get("x_zero_point", 0))
    return bool(np.all(np.abs(folded) < 2**31 - 1))


def dsp_conv_space(node: Node, target: Target, window: tuple[int, ...], k: int,
                   width: int) -> Space | None:
    """The knobs of the two-pixel DSP convolution of QConv ``node`` (kernel ``window``,
    padded reduction ``k``, pairs along rows of ``width`` pixels or, 0, of the flattened
    pixel index), or None where the two-pixel kernel does not apply:

    * ``wide`` -- int16 weights widened at compile time (``dot_q15q15_2x2``, 14
      instructions per 16 MACs, twice the flash of those weights) or int8 ones
      (``dot_q15q7_2x2``: SXTB16 in the loop, 18); the heuristic's :func:`wide_weights`
      (k x k only) is the default, the 1 x 1 layers may take them too;
    * ``unroll`` -- ``loop`` (the intrinsic's C loop over the groups of four k) or
      ``full`` (its straight-line variant ``dot_q15q15_2x2x{4G}u``: 12 per 16 MACs, a
      longer body; int16 weights only);
    * ``zero_point`` -- ``im2col`` (each im2col element is ``int16(x) - x_zp``) or ``bias``
      (the input zero point folded into the bias at compile time, ``bias - x_zp * sum_k
      w``: the im2col copies ``int16(x)``, the padding is ``x_zp``; offered where the
      folded bias fits int32).

    ``wide`` and ``unroll`` are offered only where the target declares the intrinsics (a
    flash-tight variant that drops ``dot_q15q15_*`` keeps int8 weights and the loop). The
    workload key holds the geometry, the layouts, which of the intrinsics the target has
    and whether the zero point folds.

    >>> w = Value.constant("w", np.ones((16, 16, 3, 3), np.int8))
    >>> b = Value.constant("b", np.zeros(16, np.int32))
    >>> n = Node("QConv", "c", [Value("x", (1, 16, 8, 8), "int8"), w, b],
    ...          [Value("y", (1, 16, 8, 8), "int8")],
    ...          {"pads": [1] * 4, "strides": [1, 1], "x_zero_point": -128})
    >>> s = dsp_conv_space(n, resolve_target("cortex-m4"), (3, 3), 144, 8)
    >>> s.default(), s.size, len(s.valid_points())
    ({'wide': True, 'unroll': 'loop', 'zero_point': 'im2col'}, 8, 6)
    """
    channels = int(node.input(1).shape[0])
    if pair_intrinsic(target, channels, k, width) is None:
        return None
    groups = next(g for g in PAIR_GROUPS if (k // 4) % g == 0)
    has_wide = target.has_intrinsic(f"dot_q15q15_2x2x{4 * groups}")
    has_full = has_wide and target.has_intrinsic(f"dot_q15q15_2x2x{4 * groups}u")
    fold = _foldable(node)
    knobs = (Knob("wide", (False, True) if has_wide else (False,),
                  wide_weights(target, window, k), "int16 weights (dot_q15q15) or int8"),
             Knob("unroll", ("loop", "full") if has_full else ("loop",), "loop",
                  "the dot's loop over the groups of four k, or straight-line code"),
             Knob("zero_point", ("im2col", "bias") if fold else ("im2col",),
                  "im2col", "the input zero point subtracted per im2col element or folded "
                  "into the bias"))
    rules = (Rule("the straight-line dot (unroll=full) is the int16-weight one (wide=True)",
                  lambda q: q["unroll"] == "loop" or q["wide"]),)
    x, y, a = node.input(0), node.outputs[0], node.attrs
    key = (f"cm_int8_conv|{x.dtype}|{'x'.join(map(str, x.shape))}|o{channels}|"
           f"k{'x'.join(map(str, window))}|s{'x'.join(map(str, a['strides']))}|"
           f"p{'x'.join(map(str, a['pads']))}|d{'x'.join(map(str, a.get('dilations', [1, 1])))}|"
           f"out{'x'.join(map(str, y.shape))}|{a.get('data_layout', 'NCHW')}|"
           f"pairs{width}|w16={int(has_wide)}|u={int(has_full)}|fold={int(fold)}")
    # the prior: every knob that saves instructions on (measured best on every layer of
    # DS-CNN, ResNet-8 and MobileNetV1, docs/tuning.md); dropped where the space lacks it
    seeds = ({"wide": True, "unroll": "full", "zero_point": "bias"},
             {"wide": True, "unroll": "full"})
    return Space("cm_int8_conv", key, knobs, rules, seeds=seeds)


def wide_weights(target: Target, window: tuple[int, ...] | None, k: int) -> bool:
    """Whether a two-pixel convolution with this kernel ``window`` and (padded) reduction
    ``k`` takes its weights widened to int16 at compile time (``dot_q15q15_2x2``: no
    SXTB16 in the dot loop, 14 instructions per 16 MACs instead of 18; its weights take
    twice the flash): a k x k kernel (1 x 1 ones keep int8 weights: their short reductions
    spend more on the im2col copy and the requantization than on unpacking, and they hold
    MobileNet's weight bytes) on a target that declares the widened intrinsic. A variant
    for a flash-tight board leaves them out (``drop_intrinsics: [dot_q15q15_*]``,
    docs/embedded.md) and keeps int8 weights.

    >>> from toolchain.target import load_target, parse_target
    >>> wide_weights(load_target("cortex-m4"), (3, 3), 144)
    True
    >>> compact = parse_target("{name: m4-compact, kind: c, extends: cortex-m4, "
    ...                        "drop_intrinsics: ['dot_q15q15_*']}")
    >>> wide_weights(compact, (3, 3), 144), wide_weights(load_target("cortex-m4"), (1, 1), 16)
    (False, False)
    """
    if window is None or window == (1, 1):
        return False
    groups = next(g for g in PAIR_GROUPS if (k // 4) % g == 0)
    return target.has_intrinsic(f"dot_q15q15_2x2x{4 * groups}")


def _tensorize_pairs(sch: Schedule, intrin: str, groups: int) -> None:
    """``dsp_acc`` (loops xi, m, ko, h, l under the pixel pair) -> init + one intrinsic per
    two channels and ``groups`` groups of four k."""
    acc = sch.get_block("dsp_acc")
    xi, m, ko, h, l_ = sch.get_loops(acc)[-5:]
    mo, mi = sch.split(m, [None, 2])
    if groups > 1:
        koo, g = sch.split(ko, [None, groups])
        sch.reorder(mo, koo, xi, mi, g, h, l_)
    else:  # a unit g loop is elided from the intrinsic's nest
        koo = ko
        sch.reorder(mo, koo, xi, mi, h, l_)
    sch.decompose_reduction(acc, koo)
    sch.tensorize(xi, intrin)


#: largest padded int16 input plane of one channel kept whole (kernel scratch); larger
#: planes are padded per output row band instead (kernel-height rows, recomputed per row:
#: 3x the padding work of a 3 x 3 kernel). 8 KiB takes MobileNetV1's 48 x 48 planes
#: (5,200 B) whole: its first depthwise layer then runs in place, below the arena's peak
PLANE_BYTES = 8192


def dsp_depthwise_space(node: Node, target: Target) -> Space:
    """The knobs of the DSP depthwise convolution of QConv ``node``:

    * ``pad`` -- the padded int16 plane written element by element with a padding test
      (``select``, the heuristic) or by loops cut into border and interior pieces
      (``partitioned``: :mod:`~toolchain.tir.transform.partition_loop`; the interior is a
      plain copy; offered where the plane has a padding);
    * ``zero_point`` -- ``im2col`` (each plane element is ``int16(x) - x_zp``) or ``bias``
      (folded into the bias at compile time, the plane pads with ``x_zp``; offered where the
      folded bias fits int32).

    >>> w = Value.constant("w", np.ones((8, 1, 3, 3), np.int8))
    >>> b = Value.constant("b", np.zeros(8, np.int32))
    >>> n = Node("QConv", "dw", [Value("x", (1, 8, 6, 6), "int8"), w, b],
    ...          [Value("y", (1, 8, 6, 6), "int8")],
    ...          {"pads": [1] * 4, "strides": [1, 1], "group": 8, "x_zero_point": 3})
    >>> s = dsp_depthwise_space(n, resolve_target("cortex-m4")); s.default(), s.size
    ({'pad': 'select', 'zero_point': 'im2col'}, 4)
    """
    x, y, a = node.input(0), node.outputs[0], node.attrs
    padded = any(int(v) for v in a["pads"]) or int(node.input(1).shape[3]) % 4 != 0
    fold = _foldable(node)
    knobs = (Knob("pad", ("select", "partitioned") if padded else ("select",), "select",
                  "the padded plane by a test per element or by border/interior loops"),
             Knob("zero_point", ("im2col", "bias") if fold else ("im2col",),
                  "im2col", "the input zero point subtracted per plane element or folded "
                  "into the bias"))
    key = (f"cm_int8_depthwise|{x.dtype}|{'x'.join(map(str, x.shape))}|"
           f"k{'x'.join(map(str, node.input(1).shape[2:]))}|"
           f"s{'x'.join(map(str, a['strides']))}|p{'x'.join(map(str, a['pads']))}|"
           f"out{'x'.join(map(str, y.shape))}|plane{PLANE_BYTES}|fold={int(fold)}")
    seeds = ({"pad": "partitioned", "zero_point": "bias"},)  # the prior, as above
    return Space("cm_int8_depthwise", key, knobs, seeds=seeds)


def _schedule_depthwise(func: Any, intrin: str, partitioned: bool = False
                        ) -> tuple[Schedule, bool]:
    """The padded int16 input of one channel (or of one output row's band of input rows
    when the plane is larger than :data:`PLANE_BYTES`), one intrinsic call per kernel row
    and four kernel columns; and whether a whole channel's plane is staged before the
    channel is written (the kernel may then write over its input). ``partitioned``: the
    padded copy's loops are cut into border and interior pieces."""
    sch = Schedule(func)
    sch.compute_inline(sch.get_block("x_shifted"))
    _, c, y, x = sch.get_loops(sch.get_block("qconv"))
    sch.compute_at(sch.get_block("dw_acc"), x)
    staged = False
    if "pad" in block_names(sch):
        _, _, hp, wp = (int(d.value) for d in _buffer_shape(sch, "pad"))
        staged = 2 * hp * wp <= PLANE_BYTES
        sch.compute_at(sch.get_block("pad"), c if staged else y)
        if partitioned:
            for loop in sch.get_loops(sch.get_block("pad"))[-2:]:
                sch.annotate(loop, PARTITION, 1)
    acc = sch.get_block("dw_acc")
    loops = sch.get_loops(acc)
    h = loops[-2]
    # the accumulator starts inside the pixel loop, at its first reduction loop (the
    # kernel row): one int32 the compiler keeps in a register across the row calls and
    # hands to the requantization, not an accumulator row zeroed, loaded and stored
    sch.decompose_reduction(acc, loops[len(sch.get_loops(sch.get_block("qconv")))])
    sch.tensorize(h, intrin)
    return sch, staged


def dsp_dense_space(node: Node, target: Target, s8: bool, kp: int) -> Space | None:
    """The knobs of the Cortex-M int8 dense layer QGemm ``node`` (``[P, K] x [M, K]``; ``kp``:
    ``K`` rounded up to 4), each default the heuristic's choice (None where there is no
    choice):

    * ``outputs`` per tile, one dot call each: 4 (where 4 divides ``M``; the default) or 1
      (``dot_s8s8_1x4`` / ``dot_q15q7_1x4``);
    * for the int8 x int8 kernel (``s8``: :func:`~toolchain.topi.int8.qgemm_s8_applies`)
      ``kc``: k per ``dot_s8s8_4x{kc}`` call, 8 (the default where 8 divides ``K``) or 4;
    * for the int16 ``x_q15`` kernel ``groups`` of four k per ``dot_q15q7_4x{4G}`` call
      (the :data:`MAX_GROUPS` entries dividing ``kp / 4`` the target declares; the default
      the largest: :func:`dot_intrinsic`).

    A rule refuses a ``kc`` that does not divide ``K``. The tuner's first point after the
    default (the seed) is ``kc=4``: it counts fewer instructions than 8 under QEMU (1,600
    against 1,760 on DS-CNN's 64 -> 12 shape, 28,520 against 32,000 on 256 -> 64).

    >>> from toolchain.target import load_target
    >>> x = Value("x", (1, 48), "uint8"); y = Value("y", (1, 8), "uint8")
    >>> w = Value.constant("w", np.ones((8, 48), np.int8))
    >>> s = dsp_dense_space(Node("QGemm", "fc", [x, w], [y], {}), load_target("cortex-m4"),
    ...                     False, 48)
    >>> s.default(), s.knob("groups").choices
    ({'outputs': 4, 'groups': 12}, (12, 6, 4, 2, 1))
    """
    p, k = (int(d) for d in node.input(0).shape)
    m = int(node.input(1).shape[0])
    four = m % 4 == 0
    tiled = lambda p_: p_["outputs"] == 4  # noqa: E731
    knobs = [Knob("outputs", (4, 1) if four else (1,), 4 if four else 1,
                  "outputs per tile (one dot call)")]
    rules: tuple[Rule, ...] = ()
    if s8:
        kcs = tuple(c for c in (8, 4) if target.has_intrinsic(f"dot_s8s8_4x{c}"))
        default = 8 if k % 8 == 0 and four and 8 in kcs else 4
        knobs.append(Knob("kc", kcs or (4,), default, "k per dot_s8s8_4x{kc} call",
                          active=tiled))
        rules = (Rule("kc divides K", lambda p_: k % p_["kc"] == 0),)
        caps = "s8:" + "/".join(map(str, kcs))
    else:
        default = next(g for g in MAX_GROUPS if (kp // 4) % g == 0)
        groups = tuple(g for g in MAX_GROUPS if (kp // 4) % g == 0 and
                       (g == default or target.has_intrinsic(f"dot_q15q7_4x{4 * g}")))
        knobs.append(Knob("groups", groups, default, "groups of four k per dot call",
                          active=tiled))
        caps = "q15:" + "/".join(map(str, groups))
    key = f"cm_int8_dense|x{p}x{k}{node.input(0).dtype}|m{m}|{caps}"
    space = Space("cm_int8_dense", key, tuple(knobs), rules,
                  seeds=({"kc": 4},) if s8 else ())
    return space if len(space.valid_points()) > 1 else None


def _schedule_s8(func: Any, intrin: str, lanes: int, kc: int) -> Schedule:
    """int8 x int8 dense: accumulators per tile of ``lanes`` outputs, ``kc`` k per call."""
    sch = Schedule(func)
    n, m = sch.get_loops(sch.get_block("qgemm"))
    mo, _ = sch.split(m, [None, lanes])
    acc = sch.get_block("dsp_acc")
    sch.compute_at(acc, mo)
    if lanes == 1:  # the unit channel loop is elided: the nest is k alone
        ko, ki = sch.split(sch.get_loops(acc)[-1], [None, kc])
        sch.decompose_reduction(acc, ko)
        sch.tensorize(ki, intrin)
        return sch
    mi, k = sch.get_loops(acc)[-2:]
    ko, ki = sch.split(k, [None, kc])
    sch.reorder(ko, mi, ki)
    sch.decompose_reduction(acc, ko)
    sch.tensorize(mi, intrin)
    return sch


def _buffer_shape(sch: Schedule, block: str) -> tuple[Any, ...]:
    """Shape of the buffer that ``block`` writes."""
    from toolchain.tir.schedule import state as st

    (r,) = [x for x in st.all_blocks(sch.mod) if x.block.name_hint == block]
    return tuple(r.block.writes[0].buffer.shape)


def _stage_channel_params(sch: Schedule, out: Any, channel: Any) -> None:
    """The epilogue's per-channel bias, multiplier and shift pair copied to locals at the
    ``channel`` loop: both pixels' requantizations read them from registers (gcc reloads
    them from memory after each output byte store otherwise, 4 loads an output)."""
    names = [r.buffer.name for r in sch.state.get_block(out)[0].block.reads]
    for name in names[1:]:  # dsp_acc first, then the channel's constants
        sch.compute_at(sch.cache_read(out, name, "local"), channel)


def _schedule_dsp(func: Any, op: str, intrin: str, lanes: int, groups: int,
                  window: tuple[int, int] | None = None, pairs: bool | str = False,
                  point: dict[str, Any] | None = None) -> Schedule:
    """One output pixel a step (``pairs``: two neighbouring pixels of a row, or with
    ``"flat"`` two of the flattened pixel index; the two-pixel intrinsic ``intrin`` with
    ``groups``), im2col row(s) and accumulators at that step; one pixel a step at ``point``
    of :func:`~toolchain.schedules.cortex_m.int8_pixel.pixel_conv_space`."""
    sch = Schedule(func)
    names = block_names(sch)
    for b in ("x_shifted", "pad"):
        if b in names:
            sch.compute_inline(sch.get_block(b))
    out = sch.get_block("qconv" if op == "QConv" else "qgemm")
    loops = sch.get_loops(out)
    if op == "QConv":  # n, m, y, x -> n, y, x, m: one output pixel at a time
        _, m, y, x = loops
        sch.reorder(y, x, m)
        if pairs == "flat":  # pairs of the flattened pixel index (odd widths)
            pixel = sch.split(sch.fuse(y, x), [None, 2])[0]
        else:
            pixel = sch.split(x, [None, 2])[0] if pairs else x
        sch.compute_at(sch.get_block("dsp_acc"), pixel)
    else:  # dense: accumulators per tile of output channels, not per row (large M)
        pixel, m = loops
        mo, _ = sch.split(m, [None, lanes])
        sch.compute_at(sch.get_block("dsp_acc"), mo)
    col = "im2col" if op == "QConv" else "x_q15"
    sch.compute_at(sch.get_block(col), pixel)
    if window is not None and window[0] * window[1] > 1:  # kk -> (c, ry, rx): no division
        kk = sch.get_loops(sch.get_block(col))[-1]
        c, ry, rx = sch.split(kk, [None, window[0], window[1]])
        if pairs:  # (c, ry, pixel, rx): both rows' kernel-row reads in one step (shared)
            pi = sch.get_loops(sch.get_block(col))[-4]
            sch.reorder(c, ry, pi, rx)
            sch.unroll(ry)
            sch.unroll(pi)
            sch.unroll(rx)
        elif point:  # one pixel: the window's loops (and the channels') unrolled
            unroll_im2col(sch, point, c, ry, rx)
    if pairs:
        _tensorize_pairs(sch, intrin, groups)
        # epilogue (channel, pixel): a channel's requantization parameters loaded once
        xi, m = sch.get_loops(out)[-2:]
        sch.reorder(m, xi)
        sch.unroll(xi)
        _stage_channel_params(sch, out, m)
    else:
        tensorize_pixel(sch, intrin, lanes, groups, point)
    return sch


def _schedule_qadd(node: Node, t: Any) -> OpSchedule:
    """QAdd with the C requantization helper, scheduled by the generic CPU rules."""
    from toolchain.schedules.generic.int8 import schedule_rules
    from toolchain.topi.int8 import qadd_dsp_applies
    from toolchain.topi.registry import node_compute

    if not qadd_dsp_applies(node.attrs):
        return schedule_int8(node, t)
    load_intrinsics(t)  # registers the C helpers the lowering attaches
    nc = node_compute(node, algorithm="dsp", lut=True)
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs), name=int8_kernel_name(node.name))
    sch = schedule_rules(func, t, node.op)
    lut = len(nc.input_values) > 2
    return OpSchedule(sch, list(nc.input_values), list(node.outputs),
                      {"schedule": "int8 dsp", "requantize": "kiln_cm_requantize",
                       **({"sides": "tables"} if lut else {})})


def compute_options(node: Node, target: Any) -> dict[str, Any]:
    """Compute options for ``node`` inside a fused group on a Cortex-M ``target``: QAdd
    (a residual add, usually the tail of a QConv) uses the C requantization helper where
    its shifts fit int32, as the stand-alone QAdd does (:func:`_schedule_qadd`)."""
    from toolchain.topi.int8 import qadd_dsp_applies

    if node.op == "QAdd" and qadd_dsp_applies(node.attrs):
        load_intrinsics(resolve_target(target))
        return {"algorithm": "dsp", "lut": True}
    return {}


def _pair_point(node: Node, t: Target, window: tuple[int, ...], kp: int
                ) -> tuple[tuple[str, int] | None, tuple[str, int] | None, bool, bool]:
    """The two-pixel kernel of QConv ``node`` at the point :func:`decide` gives its space
    (:func:`dsp_conv_space`): ``(pair, flat, wide, fold_zp)`` -- the intrinsic and groups
    (None: one pixel a step), the same when the pairs are of the flattened pixel index,
    int16 weights, the zero point folded into the bias."""
    ow = int(node.outputs[0].shape[3])
    if ow % 2 and int(node.outputs[0].shape[0]) == 1:
        ow = 0  # pairs of the flattened pixel index
    space = dsp_conv_space(node, t, window, kp, ow)
    point = decide(space) if space is not None else \
        {"wide": wide_weights(t, window, kp), "unroll": "loop", "zero_point": "im2col"}
    pair = pair_intrinsic(t, int(node.input(1).shape[0]), kp, ow, point["wide"],
                          point["unroll"] == "full")
    return pair, pair if ow == 0 else None, point["wide"], point["zero_point"] == "bias"


def schedule_cortex_m(node: Node, target: Any) -> OpSchedule:
    """The Cortex-M int8 schedule of ``node`` (generic int8 schedule where DSP kernels do
    not apply: depthwise/grouped convolutions, QGemm with a >2-D input, other ops)."""
    from toolchain.topi.int8 import dsp_applies, dsp_depthwise, qgemm_s8_applies
    from toolchain.topi.registry import node_compute

    t = resolve_target(target)
    if node.op == "QAdd":
        return _schedule_qadd(node, t)
    if node.op not in ("QConv", "QGemm") or not dsp_applies(node):
        return schedule_int8(node, target)
    w = node.input(1)
    kp = -(-int(np.prod(w.shape[1:])) // 4) * 4
    intrin, lanes, groups = dot_intrinsic(t, int(w.shape[0]), kp)
    depthwise = node.op == "QConv" and dsp_depthwise(node)
    s8 = node.op == "QGemm" and qgemm_s8_applies(node)
    window = tuple(w.shape[2:]) if node.op == "QConv" and not depthwise else None
    pair = flat = None
    fold_zp, wide = False, wide_weights(t, window, kp)
    if window is not None and not s8:
        pair, flat, wide, fold_zp = _pair_point(node, t, window, kp)
    px_space = pixel_conv_space(node, t, kp, lanes, groups, _foldable(node)) \
        if window is not None and pair is None else None
    px_point = decide(px_space) if px_space is not None else {}
    dw_point = decide(dsp_depthwise_space(node, t)) if depthwise else {}
    dense = dsp_dense_space(node, t, s8, kp) if node.op == "QGemm" else None
    fc_point = decide(dense) if dense is not None else {}
    if fc_point.get("outputs") == 1 and not s8:  # one output a call
        intrin, lanes, groups = t.intrinsic("dot_q15q7_1x4"), 1, 1
    elif "groups" in fc_point:
        groups = fc_point["groups"]
        intrin = t.intrinsic(f"dot_q15q7_4x{4 * groups}")
    fold_zp = fold_zp and pair is not None or "bias" in (dw_point.get("zero_point"),
                                                         px_point.get("zero_point"))
    extra = {"fold_zp": True} if fold_zp else {}
    nc = node_compute(node, algorithm="dsp", even_pixels=flat is not None,
                      q15_weights=wide and pair is not None, **extra)
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs), name=int8_kernel_name(node.name))
    nchw_in = node.attrs.get("data_layout", "NCHW") == "NCHW"
    same_shape = nchw_in and node.input(0).shape == node.outputs[0].shape and \
        node.input(0).dtype == node.outputs[0].dtype
    in_place = False
    staged_rows = True
    try:
        if depthwise:
            intrin = t.intrinsic("dwconv_q15q7_1x4")
            sch, in_place = _schedule_depthwise(func, intrin,
                                                dw_point["pad"] == "partitioned")
            # no padded copy: the pixels read the input directly (no access order)
            staged_rows = "pad" in block_names(sch)
        elif s8:
            kc = 8 if int(w.shape[1]) % 8 == 0 and lanes == 4 else 4
            if fc_point:
                lanes = fc_point["outputs"]
                kc = fc_point["kc"] if lanes == 4 else 4
            intrin = t.intrinsic(f"dot_s8s8_{lanes}x{kc}")
            sch = _schedule_s8(func, intrin, lanes, kc)
        else:
            if pair is not None:
                intrin, groups = pair
            sch = _schedule_dsp(func, node.op, intrin, lanes, groups, window,
                                pairs="flat" if flat else pair is not None,
                                point=px_point or None)
            # output pixel p reads input pixel p alone, copied to im2col first
            in_place = window == (1, 1) and tuple(node.attrs["strides"]) == (1, 1) and \
                not any(node.attrs["pads"])
    except KilnError as err:  # a shape the DSP nest cannot take: the generic kernel
        op = schedule_int8(node, target)
        op.info["dsp_refused"] = str(err)
        return op
    values: list[Value] = []
    for k, v in enumerate(nc.input_values):
        if k in nc.packs:
            v = Value.constant(f"{v.name}_dsp", nc.packs[k](v.data))
        values.append(v)
    info: dict[str, Any] = {"schedule": "int8 dsp", "intrinsic": intrin}
    # the output may take over input 0's buffer, or start inside it (overlap)
    return OpSchedule(sch, values, list(node.outputs), info,
                      in_place=0 if in_place and same_shape else None,
                      overlap=_access_order(node, depthwise, in_place)
                      if not s8 and staged_rows else None)


def _access_order(node: Node, depthwise: bool, staged: bool) -> AccessOrder | None:
    """How the DSP kernel of QConv ``node`` walks its input and output (the overlap
    contract with the memory planner, :mod:`toolchain.graph.overlap`): a dense convolution
    builds each output pixel's im2col row (every channel of its window) before it writes
    that pixel's channels (one pixel a step: the two-pixel kernels read both pixels first,
    which the one-pixel order covers); a depthwise one pads a channel's plane (``staged``)
    or one output row's band of input rows before it writes them.  A dense one reading an
    ``NHWC`` input (``data_layout``) gathers each pixel's channels from it the same way."""
    from toolchain.graph.ops.qops import nchw_qconv

    layout = node.attrs.get("data_layout", "NCHW")
    if layout not in ("NCHW", "NHWC") or node.attrs.get("out_layout", "NCHW") != "NCHW" or \
            (depthwise and layout != "NCHW"):
        return None
    x, y = nchw_qconv(node).input(0), node.outputs[0]  # NCHW shapes
    if len(x.shape) != 4 or int(x.shape[0]) != 1 or x.dtype != y.dtype:
        return None
    kind = ("channels" if staged else "rows") if depthwise else "pixels"
    w = node.input(1)
    return AccessOrder(kind, tuple(int(d) for d in x.shape), tuple(int(d) for d in y.shape),
                       np.dtype(x.dtype).itemsize, (int(w.shape[2]), int(w.shape[3])),
                       tuple(int(v) for v in node.attrs["strides"]),
                       tuple(int(v) for v in node.attrs["pads"]),
                       tuple(int(v) for v in node.attrs["dilations"]), layout)

