"""x86 int8 depthwise schedules (the computes: :mod:`toolchain.topi.int8_x86_dw`).

A depthwise QConv (multiplier 1, channels a multiple of 8) on the AVX targets runs per block
of ``L`` channels (``L`` = 16, or 8 for 8-channel layers) and per tile of output pixels:

* where the target declares ``dot_u8s8_lanes_Lx4`` and ``zip_u8_lanes_Lx4``
  (``x86_64-avx512``): the input made unsigned and padded (``x86_band``, once for the plane
  where it fits :data:`DW_PLANE_BYTES`, else per output row), zipped per output row into
  quads of kernel rows (``x86_dwquads``), one ``vpdpbusd`` per 3-high kernel column;
* else (``x86_64-avx2``) an int16 band and int32 lanes (``vpmulld``);

then requantized lane-wise (``kiln_x86_requantize``) and stored ``L`` lanes a pixel
(``narrow_i32_*`` where the target declares it, one ``vpmovdb``). The integers are those of
the generic kernels. Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> from toolchain.target import load_target
    >>> x = Value("x", (1, 16, 6, 6), "int8"); y = Value("y", (1, 16, 6, 6), "int8")
    >>> c = [Value.constant("w", np.ones((16, 1, 3, 3), np.int8)),
    ...      Value.constant("b", np.zeros(16, np.int32)),
    ...      Value.constant("m", np.full(16, 1 << 30, np.int32)),
    ...      Value.constant("s", np.full((16, 2), 1 << 30, np.int32))]
    >>> attrs = {"group": 16, "dilations": (1, 1), "pads": (1, 1, 1, 1), "strides": (1, 1),
    ...          "x_zero_point": 0, "y_zero_point": 0, "out_min": -128, "out_max": 127,
    ...          "out_dtype": "int8"}
    >>> node = Node("QConv", "dw", [x, *c], [y], attrs)
    >>> op = depthwise(node, load_target("x86_64-avx512"), dw_lanes(node))
    >>> op.info["intrinsic"], op.info["band"], op.info["columns"]
    ('x86_64-avx512.dot_u8s8_lanes_16x4', 'row', 'plane')
"""

from __future__ import annotations

from typing import Any

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space, divisors, with_default
from toolchain.errors import KilnError, ScheduleError
from toolchain.graph.ir import Node, Value
from toolchain.schedules.generic.int8 import block_names, int8_kernel_name, schedule_int8
from toolchain.schedules.registry import OpSchedule
from toolchain.target import Target
from toolchain.tir.schedule import Schedule

#: narrowest vector (bits) for which depthwise QConv takes the channel-vectorized kernel:
#: 8 int32 lanes (AVX2 and wider). Below it (c-generic's 128 bits) the re-laid input band,
#: KH rows x L channels of int32, would only add to the arena the portable target is
#: judged by (DS-CNN 16,000 -> 17,344 bytes)
DW_MIN_VECTOR_BITS = 256

#: largest int16 band of one block of channels re-laid for the whole padded plane (each
#: input row once; DS-CNN: 27 x 7 x 16 x 2 = 6,048 bytes); larger planes are re-laid per
#: output row (KH rows each time). 64 KiB takes MobileNet's 48 x 48 planes (8 channels,
#: 40 KB): its depthwise layers 32 -> 22 and 38 -> 24 us, the x86_64-avx512 arena 55,296 ->
#: 76,864 bytes (the AVX targets only; c-generic keeps the generic depthwise kernel).
DW_PLANE_BYTES = 65536


def dw_lanes(node: Node) -> int:
    """Channels per vector of the x86 depthwise kernel for QConv ``node`` (16 or 8), 0 when
    it does not apply (not depthwise with multiplier 1, a 1x1 kernel, channels not a
    multiple of 8, or non-constant weights: :func:`toolchain.topi.int8_x86.x86_depthwise`)."""
    from toolchain.topi.int8_x86 import x86_depthwise

    w = node.input(1)
    if node.op != "QConv" or w is None or w.data is None or len(w.shape) != 4:
        return 0
    if int(node.attrs.get("group", 1)) == 1 or not x86_depthwise(node):
        return 0
    c = int(w.shape[0])
    return 16 if c % 16 == 0 else 8 if c % 8 == 0 else 0


def narrow_intrinsic(target: Target, dtype: str, lanes: int) -> str | None:
    """The target's intrinsic that stores ``lanes`` requantized int32 lanes as ``dtype``
    (``narrow_i32_i8_16`` ...; None where it declares none: the store stays a vectorized
    conversion)."""
    name = f"narrow_i32_{'u8' if dtype == 'uint8' else 'i8'}_{lanes}"
    return target.intrinsic(name) if target.has_intrinsic(name) else None


def store_lanes(sch: Schedule, lane_loop: Any, narrow: str | None) -> None:
    """The store of an ``NCHW{L}c`` output tile, ``L`` requantized int32 lanes a pixel: one
    ``narrow`` call (``vpmovdb``; gcc 12 turns the vectorized 16 x int32 -> 16 x int8
    conversion into 16 byte inserts, about 24 instructions a pixel: MobileNet's 24 x 24 x
    32 depthwise layer 8.3 -> TODO us), else the vectorized conversion."""
    if narrow is None:
        sch.vectorize(lane_loop)
    else:
        sch.tensorize(lane_loop, narrow)


def _schedule_dw(func: Any, lanes: int, plane: bool, intrin: str | None = None,
                 zip_intrin: str | None = None, narrow: str | None = None,
                 cols_plane: bool = False, zip_pair: str | None = None,
                 tile: int | None = None) -> Schedule:
    """Per block of L channels the input band (L channels contiguous, int16) re-laid once
    for the whole padded plane (``plane``; every input row re-laid once) or per output row
    (KH rows; larger planes), then per tile of output pixels x L channels accumulated over
    (ry, rx) in int32 vectors, requantized lane-wise, copied to NCHW (or stored as it is in
    ``NCHW{L}c``). ``intrin``: the lane-wise ``dot_i16_lanes_Lx2`` over the column-pair
    band of :func:`toolchain.topi.int8_x86.qdwconv_x86_pairs` instead, zipped from the
    columns by ``zip_intrin``. ``narrow``: the ``narrow_i32_*`` intrinsic that stores an
    ``NCHW{L}c`` output's L requantized lanes (:func:`store_lanes`). ``cols_plane``
    (with ``intrin``, not ``plane``): the columns once for the whole plane, their zipped
    pairs (quads) per output row. ``zip_pair``: the intrinsic that zips two adjacent
    pixels' quads at once (``zip_u8_lanes_8x4x2``: an 8-channel layer's quads of two pixels
    are one 16-lane zip), used instead of ``zip_intrin``. ``tile``: output pixels per
    register tile (None: :func:`~toolchain.schedules.x86.int8.pixel_tile`)."""
    from toolchain.schedules.x86.int8 import pixel_tile

    sch = Schedule(func)
    outer = plane or cols_plane  # the block loop outside the row loop
    names = block_names(sch)
    sch.compute_inline(sch.get_block("x_shifted"))
    if "pad" in names:
        sch.compute_inline(sch.get_block("pad"))
    out = sch.get_block(names[-1])
    loops = sch.get_loops(out)
    if len(loops) == 5:  # NCHW{L}c output: the tile is stored as it is
        _, mo, y, x, mi = loops
    else:
        _, ch, y, x = loops
        mo, mi = sch.split(ch, [None, lanes])
    tile = tile or pixel_tile(int(sch.get(x).extent.value))
    xo, xi = sch.split(x, [None, tile])
    if len(loops) == 5:
        sch.reorder(*((mo, y) if outer else (y, mo)), xo, xi, mi)
        store_lanes(sch, mi, narrow)
    else:
        sch.reorder(*((mo, y) if outer else (y, mo)), xo, mi, xi)
    req = sch.get_block("x86_req")
    sch.compute_at(req, xo)
    acc = sch.get_block("x86_acc")
    sch.compute_at(acc, xo)
    if intrin is None:
        band = sch.get_block("x86_band")
        sch.compute_at(band, mo)
        sch.vectorize(sch.get_loops(band)[-1])
    else:  # the columns, then their pairs (quads) zipped (L channels of adjacent columns)
        band = sch.get_block("x86_dwquads" if "x86_dwquads" in names else "x86_dwpairs")
        sch.compute_at(band, y if cols_plane and not plane else mo)
        cols = sch.get_block("x86_band")
        sch.compute_at(cols, mo)
        sch.vectorize(sch.get_loops(cols)[-1])
        if zip_pair is None:
            sch.tensorize(sch.get_loops(band)[-2], zip_intrin)
        else:  # [.., xx, (q of 1,) l, k] -> [.., xx/2, 2, l, k]: 2 x l x k zipped at once
            bl = sch.get_loops(band)
            q = bl[-3] if int(sch.get(bl[-3]).extent.value) == 1 else None
            zo, zi = sch.split(bl[-4] if q is not None else bl[-3], [None, 2])
            if q is not None:
                sch.reorder(zo, q, zi)
            sch.tensorize(zi, zip_pair)
    loops = sch.get_loops(acc)
    inner = loops[loops.index(xo) + 1:]
    spatial = 2 if tile > 1 else 1
    sp, red = inner[:spatial], inner[spatial:]
    if intrin is None:
        sch.reorder(*red, *sp)
    else:
        sch.reorder(*red[:-1], *sp, red[-1])
    init = sch.decompose_reduction(acc, red[0])
    if intrin is None:
        sch.vectorize(sp[-1])
    if tile > 1:
        sch.unroll(sp[0])
    if intrin is not None:
        sch.tensorize(sp[-1], intrin)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(req)[-1])
    return sch


def dw_quads_apply(node: Node, target: Target, lanes: int) -> bool:
    """Whether depthwise QConv ``node`` takes the u8 column quads
    (:func:`toolchain.topi.int8_x86.qdwconv_x86_quads`): the target declares
    ``dot_u8s8_lanes_{L}x4`` and ``zip_u8_lanes_{L}x4``, dilation 1 along the rows, and
    the folded bias stays inside int32 (:func:`toolchain.topi.int8_x86.quads_apply`)."""
    from toolchain.topi.int8_x86 import quads_apply

    return target.has_intrinsic(f"dot_u8s8_lanes_{lanes}x4") and \
        target.has_intrinsic(f"zip_u8_lanes_{lanes}x4") and \
        tuple(node.attrs.get("dilations", (1, 1)))[0] == 1 and quads_apply(node)


def dw_space(node: Node, target: Target, lanes: int, real: Node) -> Space:
    """The knobs of the x86 int8 depthwise kernel of QConv ``node`` (NCHW; ``real``: the
    graph's node, maybe ``NCHW{L}c``), each default the heuristic's choice:

    * ``intrinsic``: ``dot_u8s8_quads`` (u8 row quads, ``vpdpbusd``; where
      :func:`dw_quads_apply`), ``dot_i16_pairs`` (int16 column pairs; where the target
      has them and their band fits :data:`DW_PLANE_BYTES`) or ``int32`` (int16 band, int32
      lanes);
    * ``pixels``: output pixels per register tile (divisors of the output width up to
      ``MAX_ROW``; default :func:`~toolchain.schedules.x86.int8.pixel_tile`);
    * ``whole_plane``: the band (int32: int16 pixels; quads: u8 columns) re-laid once for
      the whole padded plane rather than per output row; only where it fits
      :data:`DW_PLANE_BYTES` (a rule); the pairs always take the plane.

    >>> import numpy as np
    >>> from toolchain.target import load_target
    >>> t = load_target("x86_64-avx512")
    >>> x = Value("x", (1, 16, 14, 14), "int8"); y = Value("y", (1, 16, 14, 14), "int8")
    >>> c = [Value.constant("w", np.ones((16, 1, 3, 3), np.int8)),
    ...      Value.constant("b", np.zeros(16, np.int32)),
    ...      Value.constant("m", np.full(16, 1 << 30, np.int32)),
    ...      Value.constant("s", np.full((16, 2), 1 << 30, np.int32))]
    >>> a = {"group": 16, "dilations": (1, 1), "pads": (1, 1, 1, 1), "strides": (1, 1),
    ...      "x_zero_point": 0, "y_zero_point": 0, "out_min": -128, "out_max": 127,
    ...      "out_dtype": "int8"}
    >>> node = Node("QConv", "dw", [x, *c], [y], a)
    >>> s = dw_space(node, t, 16, node)
    >>> s.default()
    {'intrinsic': 'dot_u8s8_quads', 'pixels': 7, 'whole_plane': True}
    >>> s.knob("intrinsic").choices, s.knob("pixels").choices
    (('dot_u8s8_quads', 'dot_i16_pairs', 'int32'), (1, 2, 7))
    """
    from toolchain.graph.ops.nn_common import attrs_of
    from toolchain.schedules.x86.int8 import MAX_ROW, pixel_tile

    attrs = attrs_of(node)
    _, _, h, w = (int(d) for d in node.inputs[0].shape)
    pt, pl, pb, pr = attrs["pads"]
    kh = int(node.inputs[1].shape[2])
    hp, wp = h + pt + pb, w + pl + pr
    quads = dw_quads_apply(node, target, lanes)
    pairs = target.has_intrinsic(f"dot_i16_lanes_{lanes}x2") and \
        target.has_intrinsic(f"zip_i16_{lanes}x2") and tuple(attrs["dilations"])[1] == 1 \
        and hp * (wp + 1) * lanes * 6 <= DW_PLANE_BYTES
    kinds = (("dot_u8s8_quads",) if quads else ()) + (("dot_i16_pairs",) if pairs else ()) \
        + ("int32",)
    fits = {"int32": hp * wp * lanes * 2 <= DW_PLANE_BYTES,
            "dot_u8s8_quads": (hp + 4 * -(-kh // 4) - kh) * wp * lanes <= DW_PLANE_BYTES,
            "dot_i16_pairs": True}
    width = int(node.outputs[0].shape[3])
    tile = pixel_tile(width)
    knobs = (
        Knob("intrinsic", kinds, kinds[0], "u8 row quads through dot_u8s8 (vpdpbusd), "
             "int16 column pairs through dot_i16, or int32 lanes"),
        Knob("pixels", with_default(divisors(width, MAX_ROW), tile), tile,
             "output pixels per register tile"),
        Knob("whole_plane", (False, True), fits[kinds[0]],
             "the band re-laid once for the padded plane (else per output row)",
             active=lambda p: p["intrinsic"] != "dot_i16_pairs"),
    )
    rules = (Rule(f"whole_plane: the band fits {DW_PLANE_BYTES} bytes",
                  lambda p: not p["whole_plane"] or fits[p["intrinsic"]]),)
    a = {k: attrs.get(k) for k in ("strides", "pads", "dilations")}
    key = (f"int8_depthwise|x{'x'.join(map(str, node.inputs[0].shape))}"
           f"{node.inputs[0].dtype}|k{kh}x{int(node.inputs[1].shape[3])}|{a}|lanes{lanes}|"
           f"v{target.vector_width_bits}|{'/'.join(kinds)}|out{len(real.outputs[0].shape)}d")
    return Space("int8_depthwise", key, knobs, rules)


def depthwise(node: Node, target: Any, lanes: int, real: Node | None = None) -> OpSchedule:
    """The x86 depthwise schedule (the generic one where the nest refuses). ``real``: the
    graph's node where it reads and writes ``NCHW{L}c`` (``node`` its NCHW form)."""
    from toolchain.graph.ops.nn_common import attrs_of
    from toolchain.schedules.x86.int8 import layout_info
    from toolchain.topi.int8_x86 import (
        fold_quad_bias,
        lane_requant,
        pack_blocked,
        pad_channels,
        pad_shifts,
        quad_offset,
        requant_fits_int32,
        unpack_lanes,
    )
    from toolchain.topi.int8_x86_dw import (
        pack_dw_pairs,
        pack_dw_quads,
        pack_dw_weights,
        qdwconv_x86,
        qdwconv_x86_pairs,
        qdwconv_x86_quads,
    )
    from toolchain.topi.int8_x86_requant import (
        bias_init,
        pad_round_shifts,
        requant_rounding_fits,
        requant_shifts_right,
    )

    attrs = attrs_of(node)
    vals = list(node.inputs)
    w = int(vals[0].shape[3])
    _, pl, _, pr = attrs["pads"]
    kh = int(vals[1].shape[2])
    real = real or node
    point = decide(dw_space(node, target, lanes, real))
    quads = point["intrinsic"] == "dot_u8s8_quads"
    intrin, zipper = (f"dot_u8s8_lanes_{lanes}x4", f"zip_u8_lanes_{lanes}x4") if quads else \
        (f"dot_i16_lanes_{lanes}x2", f"zip_i16_{lanes}x2")
    # the columns and their int16 pairs (three times the single-column band) for the whole
    # plane, or the single columns: pairs re-laid per output row cost more than they save
    # (MobileNet's 48 x 48 x 8 layer 13.3 -> 17.0 us); dw_space offers them where they fit
    pairs = point["intrinsic"] != "int32"
    pack_w = pack_dw_quads if quads else pack_dw_pairs if pairs else pack_dw_weights
    packs = {1: lambda v: pack_w(v, lanes), 2: lambda v: pad_channels(v, lanes),
             3: lambda v: pad_channels(v, lanes), 4: lambda v: pad_shifts(v, lanes)}
    if quads:  # sum (x - zp) w = sum (x + off) w - (zp + off) sum w: off the bias
        zu = int(attrs["x_zero_point"]) + quad_offset(str(vals[0].dtype))
        packs[2] = lambda v: pad_channels(fold_quad_bias(v, vals[1].data, zu), lanes)
    # the quads' requantization rounds in one add and shift (the pairs keep theirs)
    rounded = quads and requant_rounding_fits(node)
    if rounded:
        yzp = int(attrs["y_zero_point"])
        packs[4] = lambda v: pad_round_shifts(v, yzp, lanes)
    data = {k: f(vals[k].data) for k, f in packs.items()}
    xv = real.inputs[0]
    x = te.placeholder(tuple(xv.shape), str(xv.dtype), "x")
    ph = {k: te.placeholder(d.shape, str(d.dtype), f"in{k}") for k, d in data.items()}
    if pairs:
        compute = qdwconv_x86_quads if quads else qdwconv_x86_pairs
        acc = compute(x, ph[1], dict(attrs, kernel_width=int(vals[1].shape[3]),
                                     kernel_height=kh))
        if rounded:  # the accumulators start from the bias (one add less a vector)
            acc = bias_init(acc, ph[2])
        req = lane_requant(acc, ph[2], ph[3], ph[4], attrs, fits=requant_fits_int32(node),
                           rounded=rounded, biased=rounded,
                           right=rounded and requant_shifts_right(node))
    else:
        req, _ = qdwconv_x86(x, ph[1], ph[2], ph[3], ph[4], attrs, requant_fits_int32(node))
    y = real.outputs[0]
    out = pack_blocked(req, str(y.dtype), "qconv") if len(y.shape) == 5 else \
        unpack_lanes(req, tuple(int(d) for d in y.shape), str(y.dtype), "qconv")
    func = te.create_prim_func([x, *ph.values(), out], name=int8_kernel_name(node.name))
    # int32: the int16 band once for the plane (whole_plane) or per output row; quads: the
    # u8 pixels once for the plane (whole_plane) or per row, one row of quads at a time
    plane = pairs and not quads or not pairs and point["whole_plane"]
    cols_plane = quads and point["whole_plane"]
    # 8 lanes: two pixels' quads are 64 contiguous bytes, zipped at once where a padded
    # row has whole pairs and one quad a kernel column (MobileNet's 48 x 48 x 8 layer)
    pair = f"zip_u8_lanes_{lanes}x4x2"
    zip_pair = target.intrinsic(pair) if quads and target.has_intrinsic(pair) and \
        kh <= 4 and (w + pl + pr) % 2 == 0 else None
    try:
        narrow = narrow_intrinsic(target, str(y.dtype), lanes) if len(y.shape) == 5 else None
        sch = _schedule_dw(func, lanes, plane, *((target.intrinsic(intrin),
                                                   target.intrinsic(zipper)) if pairs else
                                                  (None, None)), narrow=narrow,
                           cols_plane=cols_plane, zip_pair=zip_pair,
                           tile=point["pixels"])
    except KilnError as err:
        if real is not node:
            raise ScheduleError(f"{real.describe()}: the x86 depthwise kernel refused a "
                                f"channel-blocked convolution: {err}") from err
        op = schedule_int8(node, target)
        op.info["x86_refused"] = str(err)
        return op
    values = [xv] + [Value.constant(f"{vals[k].name}_x86", d) for k, d in data.items()]
    return OpSchedule(sch, values, list(real.outputs),
                      {"schedule": "int8 x86 depthwise", "lanes": lanes,
                       "band": "plane" if plane else "row", **layout_info(real),
                       **({"columns": "plane"} if cols_plane and not plane else {}),
                       **({"intrinsic": target.intrinsic(intrin)} if pairs else {}),
                       **({"zip": zip_pair} if zip_pair else {}),
                       **({"store": narrow} if narrow else {})})
