"""int8 schedules for x86 (and c-generic): register-tiled QConv / QGemm over output channels.

QConv (group 1) and QGemm on ``x86_64-avx2`` / ``x86_64-avx512`` multiply **int16 pairs**
of input channels (of ``k`` for a dense layer, taken as a 1x1 convolution over its rows):
the weights are packed at compile time to int8 ``[M/L, C/2, KH, KW, L, 2]``
(:func:`~toolchain.topi.int8_x86.pack_x86_pairs`, ``L`` = 16 or 8 output channels,
zero-padded; one byte a weight in the bundle, widened to int16 by the intrinsic as it
loads them), the zero-point-shifted input is re-laid per output row as channel pairs
(``x86_pairs``), and each ``L`` lanes x 2 step is one call of the target's ``dot_i16_Lx2``
intrinsic (``vpdpwssd`` with AVX-512 VNNI, ``vpmaddwd`` + ``vpaddd`` on AVX2)::

    x86_pairs[c2, rows of y, x, h] = int16(x[2*c2 + h]) - x_zp   (0 in the padding, past C)
    for mo:                                   # L output channels
        for xo:                                 # T output pixels: T x L int32 in registers
            acc[T, L] = 0
            for c2, ry, rx:  for xi (unrolled T):
                acc[xi, :] += x86_pairs[c2, y*sh + ry, (xo*T + xi)*sw + rx, 0:2]
                              . w[mo, c2, ry, rx, :, 0:2]           (dot_i16_Lx2)
        qconv[mo*L + l, y, x] = requantize(acc[x, l] + bias)    (whole row of L channels)

Where the target declares ``dot_u8s8_Lx4`` (``x86_64-avx512``: ``vpdpbusd``, AVX-512 VNNI)
the same nest runs over **u8 quads** of input channels instead (``x86_quads``, int8 weights
``[M/L, C/4, KH, KW, L, 4]``, :func:`~toolchain.topi.int8_x86.pack_x86_quads`): the input
is made unsigned (``x + 128`` for int8) and ``(x_zp + 128) * sum w`` is taken off the bias at
compile time (:func:`~toolchain.topi.int8_x86.fold_quad_bias`), four channels a
``vpdpbusd``; the pairs remain where that fold would leave int32
(:func:`~toolchain.topi.int8_x86.quads_apply`) and on targets without the intrinsic.

Before (and still on c-generic, whose arena the pair band would grow, and for one pair of
channels with a 1x1 kernel) the ``algorithm="x86"`` computes of :mod:`toolchain.topi.int8`
multiply int32 lanes (int8 weights ``[M/L, C, KH, KW, L]`` widened to int32 in the
kernel, one ``vpmulld`` + ``vpaddd`` per ``L`` MACs). The tile is requantized lane-wise by
``kiln_x86_requantize``
(:mod:`toolchain.topi.int8_x86`: ``L`` contiguous int32 accumulators against channel-padded
tables, 32-bit lanes but one 64-bit product) and only then copied into NCHW. QAdd uses the
same helper. Depthwise convolutions (multiplier 1, channels a multiple of 8) on the AVX
targets re-lay the input of each block of ``L`` channels channel-minor (``x86_band``,
int16; the whole padded plane at once when it fits :data:`DW_PLANE_BYTES`, else ``KH``
rows per output row) and accumulate a pixel tile x ``L`` channels over ``(ry, rx)``::

    x86_band[c/L, rows, x, l] = pad[c/L*L + l, ...]
    acc[xi, l] += x86_band[mo, y*sh + ry, (xo*T + xi)*sw + rx, l] * w[mo, ry, rx, l]

The integers are those of the generic kernels (int32 accumulation, the same
requantization), so the outputs equal the integer reference bit for bit. Grouped
convolutions, depthwise ones on c-generic (the band would grow the arena) and the other
integer ops keep the generic schedules (:mod:`toolchain.schedules.generic.int8`), as does any
shape the tiled nest refuses.

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
    >>> op = schedule_x86_int8(Node("QGemm", "fc", [x, *c], [y], attrs), "x86_64-avx512")
    >>> op.info["schedule"], op.input_values[1].data.shape, op.input_values[1].data.dtype
    ('int8 x86 quads', (1, 4, 1, 1, 8, 4), dtype('int8'))
    >>> op = schedule_x86_int8(Node("QGemm", "fc", [x, *c], [y], attrs), "x86_64-avx2")
    >>> op.info["schedule"], op.input_values[1].data.shape, op.input_values[1].data.dtype
    ('int8 x86 pairs', (1, 8, 1, 1, 8, 2), dtype('int8'))
    >>> op = schedule_x86_int8(Node("QGemm", "fc", [x, *c], [y], attrs), "c-generic")
    >>> op.info["schedule"], op.input_values[1].data.shape, op.input_values[1].data.dtype
    ('int8 x86', (1, 16, 8), dtype('int8'))
"""

from __future__ import annotations

from typing import Any

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space, divisors, with_default
from toolchain.errors import KilnError, ScheduleError
from toolchain.graph.ir import Node, Value
from toolchain.intrinsics import load_intrinsics
from toolchain.schedules.generic.int8 import block_names, int8_kernel_name, schedule_int8
from toolchain.schedules.registry import OpSchedule, resolve_target
from toolchain.schedules.x86.int8_dw import (
    DW_MIN_VECTOR_BITS,
    DW_PLANE_BYTES,
    depthwise,
    dw_lanes,
    narrow_intrinsic,
    store_lanes,
)
from toolchain.target import Target
from toolchain.tir.schedule import Schedule

#: most channel pairs whose band re-lay is vectorized across the pairs (ResNet-8 16 -> 16
#: channels, 8 pairs: 81 -> 50 us)
MAX_PAIR_LANES = 16

#: most output pixels whose accumulators one tile keeps (T x L int32 in registers)
MAX_PIXELS = 8

#: rows up to this width are one tile (12 accumulators + weights fit the 32 zmm registers)
MAX_ROW = 12


def pixel_tile(width: int, most: int = MAX_PIXELS) -> int:
    """Output pixels per register tile: the whole row up to :data:`MAX_ROW`, else the largest
    divisor of ``width`` not above ``most`` (no remainder loop).

    >>> pixel_tile(32), pixel_tile(25), pixel_tile(11), pixel_tile(13)
    (8, 5, 11, 1)
    """
    if width <= MAX_ROW:
        return width
    return next(t for t in range(min(width, most), 0, -1) if width % t == 0)


def _schedule_conv(func: Any, lanes: int, tile: int | None = None) -> Schedule:
    """The tiled convolution nest of the module docstring (``tile``: pixels per register
    tile of a tuned point; None: :func:`pixel_tile`)."""
    sch = Schedule(func)
    names = block_names(sch)
    sch.compute_inline(sch.get_block("x_shifted"))
    out = sch.get_block("qconv")
    _, ch, y, x = sch.get_loops(out)
    xo, tile, acc, req = _tile_nest(sch, ch, x, lanes, y, tile)
    if "pad" in names:
        sch.compute_at(sch.get_block("pad"), y)
    # under xo: (xi,) li, then the reduction loops (rc, ry, rx; unit loops are elided)
    loops = sch.get_loops(acc)
    inner = loops[loops.index(xo) + 1:]
    spatial = 2 if tile > 1 else 1
    sp, red = inner[:spatial], inner[spatial:]
    if not red:
        raise ScheduleError(f"x86 int8 convolution: no reduction loop under {xo.name} "
                            "(a 1x1 convolution of one channel); the generic schedule takes it")
    sch.reorder(*red, *sp)
    init = sch.decompose_reduction(acc, red[0])
    sch.vectorize(sp[-1])
    if tile > 1:
        sch.unroll(sp[0])
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(req)[-1])  # L lanes of int64 requantization
    return sch


def _tile_nest(sch: Schedule, ch: Any, x: Any, lanes: int, y: Any = None,
               tile: int | None = None, vectors: int = 1) -> tuple[Any, int, Any, Any]:
    """Output channels by ``lanes`` and pixels by :func:`pixel_tile` (``y, mo, xo, mi,
    xi``), the accumulators and their requantization computed at ``xo``: ``(xo, tile,
    x86_acc, x86_req)``. ``vectors`` > 1 (a tuned dense point): that many vectors of
    ``lanes`` channels in one tile (``y, moo, xo, moi, mi, xi``)."""
    mo, mi = sch.split(ch, [None, lanes])
    tile = tile or pixel_tile(int(sch.get(x).extent.value))
    xo, xi = sch.split(x, [None, tile])
    if vectors > 1:
        mo, moi = sch.split(mo, [None, vectors])
        sch.reorder(*([y] if y is not None else []), mo, xo, moi, mi, xi)
    else:
        sch.reorder(*([y] if y is not None else []), mo, xo, mi, xi)
    req = sch.get_block("x86_req")
    sch.compute_at(req, xo)
    acc = sch.get_block("x86_acc")
    sch.compute_at(acc, xo)
    return xo, tile, acc, req


def _schedule_dense(func: Any, lanes: int) -> Schedule:
    """Accumulators per vector of ``lanes`` outputs, ``k`` outermost in the tile."""
    sch = Schedule(func)
    sch.compute_inline(sch.get_block("x_shifted"))
    _, j = sch.get_loops(sch.get_block("qgemm"))
    mo, _ = sch.split(j, [None, lanes])
    req = sch.get_block("x86_req")
    sch.compute_at(req, mo)
    acc = sch.get_block("x86_acc")
    sch.compute_at(acc, mo)
    li, k = sch.get_loops(acc)[-2:]
    sch.reorder(k, li)
    init = sch.decompose_reduction(acc, k)
    sch.vectorize(li)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(req)[-1])
    return sch


def _lane_requant(nc: Any, node: Node, lanes: int) -> tuple[list, list, dict]:
    """The compute of ``nc`` with its epilogue split into the lane-wise requantization
    ``x86_req`` and a byte copy (:mod:`toolchain.topi.int8_x86`); the bias, multiplier and
    shift tables (inputs 2-4) become channel-padded constants. Returns (inputs, outputs,
    packs)."""
    from toolchain.graph.ops.nn_common import attrs_of
    from toolchain.topi.int8_x86 import (
        find_tensor,
        lane_requant,
        pad_channels,
        pad_shifts,
        requant_fits_int32,
        unpack_lanes,
    )

    out = nc.outputs[0]
    acc = find_tensor(out, "x86_acc")
    inputs = list(nc.inputs)
    packs = dict(nc.packs)
    for k in (2, 3, 4):
        pack = pad_shifts if k == 4 else pad_channels
        data = pack(nc.input_values[k].data, lanes)
        inputs[k] = te.placeholder(data.shape, str(data.dtype), f"{inputs[k].op.name}_p")
        packs[k] = lambda v, _l=lanes, _p=pack: _p(v, _l)
    req = lane_requant(acc, inputs[2], inputs[3], inputs[4], attrs_of(node),
                       fits=requant_fits_int32(node))
    shape = tuple(int(d.value) for d in out.shape)
    return inputs, [unpack_lanes(req, shape, out.dtype, out.op.name)], packs


def compute_options(node: Node, target: Target) -> dict[str, Any]:
    """Compute options for ``node`` inside a fused group on a CPU target: QAdd requantizes
    with ``kiln_x86_requantize`` (the target's C helpers) where its shifts fit int32, as the
    stand-alone QAdd does (:func:`_schedule_qadd`); the same integers."""
    from toolchain.topi.int8 import qadd_dsp_applies

    if node.op == "QAdd" and qadd_dsp_applies(node.attrs):
        load_intrinsics(target)
        return {"algorithm": "x86"}
    return {}


def _schedule_qadd(node: Node, target: Any) -> OpSchedule:
    """QAdd with the 32-bit requantization helper (:func:`toolchain.topi.int8_x86.qadd_x86`),
    scheduled by the generic CPU rules; the int64 kernel where the shifts do not fit."""
    from toolchain.schedules.generic.int8 import schedule_rules
    from toolchain.topi.registry import node_compute

    opts = compute_options(node, resolve_target(target))
    if not opts:
        return schedule_int8(node, target)
    nc = node_compute(node, **opts)
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs), name=int8_kernel_name(node.name))
    sch = schedule_rules(func, target, node.op)
    return OpSchedule(sch, list(nc.input_values), list(node.outputs),
                      {"schedule": "int8 x86", "requantize": "kiln_x86_requantize"})


def _vectorize_pairs(sch: Schedule, band: Any, y: Any | None) -> None:
    """Re-lay the pair (or quad) band channel pairs innermost, vectorized (loops c2, rows, x, h ->
    rows, x, h, c2): the padding test then depends on outer loops only and the loop
    becomes vector code (strided loads and stores lane by lane) instead of a scalar loop
    with a test per element. Left as it is where the loops do not have that shape or
    there are more than :data:`MAX_PAIR_LANES` pairs (ResNet-8's 64 channels: 28 -> 32 us,
    the 32 lanes built one by one cost more than the scalar loop)."""
    loops = sch.get_loops(band)
    inner = loops[loops.index(y) + 1:] if y is not None else loops[1:]  # root: below n
    if len(inner) != 4 or int(sch.get(inner[-1]).extent.value) not in (2, 4):
        return
    c2, rows, x, h = inner
    if int(sch.get(c2).extent.value) > MAX_PAIR_LANES:
        return
    sch.reorder(rows, x, h, c2)
    sch.vectorize(c2)


#: widest vector (bytes) of a contiguous band copy
COPY_BYTES = 64


def _vectorize_copy(sch: Schedule, band: Any, last: Any, unpadded: bool) -> None:
    """The band copy of an ``NCHW{B}c`` input: its ``B`` channels vectorized, or, where
    the input is not padded (a pointwise layer: the band row is one contiguous run), the
    row's pixels and channels fused and copied :data:`COPY_BYTES` a vector (MobileNet's
    8-channel 48 x 48 rows took 48 copies of 8 bytes)."""
    loops = sch.get_loops(band)
    width = int(sch.get(loops[-2]).extent.value) * int(sch.get(last).extent.value)
    vec = next((v for v in (COPY_BYTES, COPY_BYTES // 2, COPY_BYTES // 4) if width % v == 0),
               None)
    if not unpadded or vec is None or width <= int(sch.get(last).extent.value):
        sch.vectorize(last)
        return
    _, inner = sch.split(sch.fuse(loops[-2], last), [None, vec])
    sch.vectorize(inner)


def _zip_planes(sch: Schedule, planes: Any, band: Any, zip_intrin: str | None) -> None:
    """The four padded plane rows of a one-quad input (``x86_planes``,
    :func:`toolchain.topi.int8_x86.qconv2d_x86_quads`) copied 16 columns a vector per row
    of the band (so the planes take 4 rows, not the whole plane, of the arena), then
    zipped into the quad band 16 pixels a ``zip_intrin`` call (MobileNet's RGB first
    layer: 16.8 -> 10.6 us with the band so built by hand, against byte by byte)."""
    from toolchain.topi.int8_x86 import ZIP_PIXELS

    sch.compute_at(planes, sch.get_loops(band)[-3])  # per band row: 4 rows of planes
    _, xo = sch.split(sch.get_loops(planes)[-1], [None, ZIP_PIXELS])
    sch.vectorize(xo)
    if zip_intrin is not None:
        _, xi = sch.split(sch.get_loops(band)[-2], [None, ZIP_PIXELS])
        sch.tensorize(xi, zip_intrin)


def _schedule_pairs(func: Any, lanes: int, intrin: str, tile: int | None = None,
                    plane: bool = False, zip_intrin: str | None = None,
                    narrow: str | None = None, vectors: int = 1, unroll_k: int = 1
                    ) -> Schedule:
    """The tiled convolution nest of :func:`_schedule_conv` over int16 channel pairs: the
    pair band (:func:`toolchain.topi.int8_x86.qconv2d_x86_pairs`) re-laid per output row,
    the pair loop ``rh`` innermost and ``L`` lanes x 2 one ``dot_i16_*x2`` call (or, over the
    u8 quad band of :func:`toolchain.topi.int8_x86.qconv2d_x86_quads`, ``L`` lanes x 4 one
    ``dot_u8s8_*x4`` call). ``narrow``: as for :func:`_schedule_dw`. A dense layer's tuned
    point (:func:`dense_space`) may also take ``vectors`` of ``L`` outputs per tile
    (independent accumulators, each row's pair or quad broadcast once for all) and unroll
    the reduction's steps by ``unroll_k``."""
    sch = Schedule(func)
    names = block_names(sch)
    for b in ("x_shifted", "pad"):
        if b in names:
            sch.compute_inline(sch.get_block(b))
    out = sch.get_block(names[-1])
    loops = sch.get_loops(out)
    if len(loops) == 2:  # dense [P, M]: the pairs of every row re-laid once (at the root)
        x, ch = loops
        xo, tile, acc, req = _tile_nest(sch, ch, x, lanes, tile=tile, vectors=vectors)
    elif len(loops) == 5:  # NCHW{L}c output: the tile is stored as it is
        _, mo, y, x, mi = loops
        tile = tile or pixel_tile(int(sch.get(x).extent.value))
        xo, xi = sch.split(x, [None, tile])
        sch.reorder(y, mo, xo, xi, mi)
        store_lanes(sch, mi, narrow)
        req = sch.get_block("x86_req")
        sch.compute_at(req, xo)
        acc = sch.get_block("x86_acc")
        sch.compute_at(acc, xo)
    else:
        _, ch, y, x = loops
        xo, tile, acc, req = _tile_nest(sch, ch, x, lanes, y, tile)
    if len(loops) >= 4:
        band = sch.get_block("x86_quads" if "x86_quads" in names else "x86_pairs")
        if not plane:  # per output row: the KH input rows it reads
            sch.compute_at(band, y)
        last = sch.get_loops(band)[-1]
        if "x86_planes" in names:  # one quad: planes (vector copies), zipped into quads
            _zip_planes(sch, sch.get_block("x86_planes"), band, zip_intrin)
        elif int(sch.get(last).extent.value) > 4:  # NCHW{B}c blocks: a contiguous copy
            _vectorize_copy(sch, band, last, "pad" not in names)
        else:
            _vectorize_pairs(sch, band, None if plane else y)
    loops = sch.get_loops(acc)
    inner = loops[loops.index(xo) + 1:]
    spatial = 1 + (tile > 1) + (vectors > 1)
    sp, red = inner[:spatial], inner[spatial:]
    if len(red) < 2:
        raise ScheduleError("x86 int8 pairs/quads: one pair (quad) of channels and a 1x1 "
                            "kernel; the int16 pair or int32 kernel takes it")
    sch.reorder(*red[:-1], *sp, red[-1])
    if unroll_k > 1:  # dense_space's rule: the factor divides the steps
        ko, ki = sch.split(red[0], [None, unroll_k])
        init = sch.decompose_reduction(acc, ko)
        sch.unroll(ki)
    else:
        init = sch.decompose_reduction(acc, red[0])
    for loop in sp[:-1]:  # the tile's vectors and rows
        sch.unroll(loop)
    sch.tensorize(sp[-1], intrin)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(req)[-1])
    return sch


def plane_band(node: Node) -> bool:
    """Whether the u8 quad band of QConv ``node`` is re-laid once for the whole padded
    input (each input row once) instead of per output row (``KH`` rows each time, a row
    read ``KH / stride`` times): a kernel taller than its stride, and the band (the padded
    input, channels rounded up to 4; of a one-channel input taking quads of kernel columns,
    ``ceil(KW/4) * 4`` bytes per padded row and output column) within
    :data:`DW_PLANE_BYTES`. "Taller" means more than twice the stride: ResNet-8's 3 x 3
    stride-1 layers 27 -> 22 us, DS-CNN's 10 x 4 stride-2 first layer 8.2 -> 7.3 us, but
    its 3 x 3 stride-2 ones (1.5 rows re-laid per output row) 11.5 -> 15 us: there the row
    band stays, except for one quad of channels (1-4 input channels, a band built element
    by element either way), where re-laying each row once wins (MobileNet's 3 -> 8
    stride-2 first layer 22.9 -> 18.4 us)."""
    from toolchain.topi.int8_x86 import colquads_apply

    x, w = node.inputs[0], node.input(1)
    if node.op != "QConv" or len(x.shape) != 4 or w is None or len(w.shape) != 4:
        return False
    pt, _, pb, _ = node.attrs.get("pads", (0, 0, 0, 0))
    _, pl, _, pr = node.attrs.get("pads", (0, 0, 0, 0))
    kh, sh = int(w.shape[2]), int(node.attrs.get("strides", (1, 1))[0])
    c4 = -(-int(x.shape[1]) // 4)
    size = c4 * 4 * (int(x.shape[2]) + pt + pb) * (int(x.shape[3]) + pl + pr)
    if colquads_apply(node):  # quads of kernel columns per output column
        size = -(-int(w.shape[3]) // 4) * 4 * (int(x.shape[2]) + pt + pb) * int(
            node.outputs[0].shape[3])
    return (kh > 2 * sh or (c4 == 1 and kh > sh)) and size <= DW_PLANE_BYTES


def _paired(node: Node, target: Target, lanes: int, tile: int | None = None,
            quads: bool = False, real: Node | None = None, vectors: int = 1,
            unroll_k: int = 1) -> OpSchedule | None:
    """The x86 convolution (or 2-D dense layer, as a 1x1 convolution over its rows) over
    int16 pairs of input channels, or (``quads``) u8 quads with the zero point folded into
    the bias (None where the nest refuses). ``real``: the graph's node where it reads or
    writes ``NCHW{b}c`` (``node`` its NCHW form). ``vectors``, ``unroll_k``: a dense
    layer's tuned point (:func:`dense_space`)."""
    from toolchain.graph.ops.nn_common import attrs_of
    from toolchain.topi import int8_x86 as k8
    from toolchain.topi import int8_x86_requant as rq
    from toolchain.topi.int8_x86 import (
        lane_requant,
        pad_channels,
        pad_shifts,
        requant_fits_int32,
        unpack_dense,
        unpack_lanes,
    )

    attrs = attrs_of(node)
    vals = list(node.inputs)
    dense = node.op == "QGemm"
    kind = "quads" if quads else "pairs"
    cols = quads and k8.colquads_apply(node)  # one channel: quads along the kernel row
    pack_w = k8.pack_x86_colquads if cols else \
        getattr(k8, f"pack_x86_{'dense_' if dense else ''}{kind}")
    packs = {1: lambda v: pack_w(v, lanes), 2: lambda v: pad_channels(v, lanes),
             3: lambda v: pad_channels(v, lanes), 4: lambda v: pad_shifts(v, lanes)}
    if quads:  # sum (x - zp) w = sum (x + off) w - (zp + off) sum w: off the bias
        zu = int(attrs["x_zero_point"]) + k8.quad_offset(str(vals[0].dtype))
        w = vals[1].data
        packs[2] = lambda v: pad_channels(k8.fold_quad_bias(v, w, zu), lanes)
    # the quads' requantization rounds in one add and shift (the pairs keep theirs)
    rounded = quads and rq.requant_rounding_fits(node)
    if rounded:
        yzp = int(attrs["y_zero_point"])
        packs[4] = lambda v: rq.pad_round_shifts(v, yzp, lanes)
    data = {k: f(vals[k].data) for k, f in packs.items()}
    real = real or node
    xv = real.inputs[0]
    x = te.placeholder(tuple(xv.shape), str(xv.dtype), "x")
    ph = {k: te.placeholder(d.shape, str(d.dtype), f"in{k}") for k, d in data.items()}
    compute = getattr(k8, f"q{'gemm' if dense else 'conv2d'}_x86_{kind}")
    if cols:
        compute = k8.qconv2d_x86_colquads
        attrs = dict(attrs, kernel_width=int(vals[1].shape[3]))
    acc = compute(x, ph[1], attrs)
    if rounded:  # the accumulators start from the bias (one add less a vector)
        acc = rq.bias_init(acc, ph[2])
    req = lane_requant(acc, ph[2], ph[3], ph[4], attrs, fits=requant_fits_int32(node),
                       rounded=rounded, biased=rounded,
                       right=rounded and rq.requant_shifts_right(node))
    y = real.outputs[0]
    if dense:
        out = unpack_dense(req, int(y.shape[1]), str(y.dtype))
    elif len(y.shape) == 5:
        out = k8.pack_blocked(req, str(y.dtype), "qconv")
    else:
        out = unpack_lanes(req, tuple(int(d) for d in y.shape), str(y.dtype), "qconv")
    func = te.create_prim_func([x, *ph.values(), out], name=int8_kernel_name(node.name))
    intrin = target.intrinsic(f"dot_u8s8_{lanes}x4" if quads else f"dot_i16_{lanes}x2")
    try:
        plane = quads and plane_band(node)
        zipper = "zip_u8_16x4"
        zipper = target.intrinsic(zipper) if "x86_planes" in block_names(Schedule(func)) \
            and target.has_intrinsic(zipper) else None
        narrow = narrow_intrinsic(target, str(y.dtype), lanes) \
            if not dense and len(y.shape) == 5 else None
        sch = _schedule_pairs(func, lanes, intrin, tile, plane=plane, zip_intrin=zipper,
                              narrow=narrow, vectors=vectors, unroll_k=unroll_k)
    except KilnError:
        return None
    values = [xv] + [Value.constant(f"{vals[k].name}_x86", d) for k, d in data.items()]
    return OpSchedule(sch, values, list(real.outputs),
                      {"schedule": f"int8 x86 {kind}", "lanes": lanes, "intrinsic": intrin,
                       **({} if dense else {"band": "plane" if plane else "row"}),
                       **({"quads": "kernel columns"} if cols else {}),
                       **({"zip": zipper} if zipper else {}),
                       **({"store": narrow} if narrow else {}),
                       **({"vectors": vectors} if vectors > 1 else {}),
                       **({"unroll_k": unroll_k} if unroll_k > 1 else {}), **layout_info(real)})


def layout_info(node: Node) -> dict[str, str]:
    """``data_layout`` / ``out_layout`` of a QConv the layout pass channel-blocked (none
    for an NCHW one: its schedule info stays as it was)."""
    return {k: node.attrs[k] for k in ("data_layout", "out_layout")
            if node.attrs.get(k, "NCHW") != "NCHW"}


def _schedule_blocked(node: Node, t: Target) -> OpSchedule:
    """A QConv that reads or writes ``NCHW{b}c`` (the layout pass chose it only where
    :func:`toolchain.topi.int8_x86.blocked_layouts` said the depthwise or u8-quad kernel
    takes it): that kernel, on the node's ``NCHW`` form for every shape rule."""
    from toolchain.graph.ops.qops import nchw_qconv
    from toolchain.topi.int8 import x86_lanes

    plain = nchw_qconv(node)
    if dw_lanes(plain) and (t.vector_width_bits or 0) >= DW_MIN_VECTOR_BITS:
        return depthwise(plain, t, dw_lanes(plain), real=node)
    lanes = x86_lanes(int(node.input(1).shape[0]))
    if t.has_intrinsic(f"dot_u8s8_{lanes}x4"):
        point = decide(int8_space(plain, t, lanes, t.has_intrinsic(f"dot_i16_{lanes}x2"),
                                  True))
        op = _paired(plain, t, lanes, point.get("pixels"), quads=True, real=node)
        if op is not None:
            return op
    raise ScheduleError(f"{node.describe()}: no x86 int8 kernel takes this QConv in "
                        f"{node.attrs.get('data_layout')} -> {node.attrs.get('out_layout')} "
                        "(the layout pass blocks a QConv only where one does: see "
                        "toolchain.topi.int8_x86.blocked_layouts)")


def int8_space(node: Node, t: Target, lanes: int, pairs: bool, quads: bool = False
               ) -> Space:
    """The knobs of the register-tiled int8 convolution: ``pixels`` (output pixels per
    register tile: divisors of the output width up to :data:`MAX_ROW`; default
    :func:`pixel_tile`) and, where the target has the ``dot_i16_{L}x2`` (``dot_u8s8_{L}x4``)
    intrinsic, which kernel computes (``intrinsic``: ``dot_u8s8_quads``, the default where
    it applies, ``dot_i16_pairs`` or ``int32``)."""
    width = int(node.outputs[0].shape[3])
    default = pixel_tile(width)
    knobs = [Knob("pixels", with_default(divisors(width, MAX_ROW), default), default,
                  "output pixels per register tile")]
    if pairs or quads:
        kinds = (("dot_u8s8_quads",) if quads else ()) + \
            (("dot_i16_pairs",) if pairs else ()) + ("int32",)
        knobs.insert(0, Knob("intrinsic", kinds, kinds[0],
                             "u8 channel quads through dot_u8s8 (vpdpbusd), int16 channel "
                             "pairs through dot_i16, or int32 lanes"))
    a = {k: node.attrs.get(k) for k in ("strides", "pads", "dilations", "group")}
    key = (f"int8_conv|x{'x'.join(map(str, node.inputs[0].shape))}|"
           f"w{'x'.join(map(str, node.inputs[1].shape))}|{a}|lanes{lanes}|"
           f"v{t.vector_width_bits}|pairs{int(pairs)}" + ("|quads1" if quads else ""))
    return Space("int8_conv", key, tuple(knobs))


#: most output vectors (of ``L`` channels) in one tuned dense tile
MAX_DENSE_VECTORS = 4

#: unroll factors of a dense layer's reduction steps
DENSE_UNROLLS = (1, 2, 4, 8)


def dense_space(node: Node, t: Target, lanes: int, pairs: bool, quads: bool) -> Space:
    """The knobs of the x86 int8 dense kernel of QGemm ``node`` (``[P, K] x [M, K]``), each
    default the heuristic's choice:

    * ``intrinsic``: ``dot_u8s8_quads`` (u8 quads of ``k``, ``vpdpbusd``; where the
      target has it and the zero point folds), ``dot_i16_pairs`` (int16 pairs) or
      ``int32`` (int32 lanes, :func:`_schedule_dense`);
    * ``rows``: rows of the batch per register tile (divisors of ``P`` up to
      :data:`MAX_ROW`; default :func:`pixel_tile`);
    * ``vectors``: vectors of ``L`` outputs per tile (divisors of ``M / L`` up to
      :data:`MAX_DENSE_VECTORS`; default 1): independent accumulator chains, each row's
      pair or quad broadcast once for all of them;
    * ``unroll_k``: the reduction's steps (pairs or quads of ``k``) unrolled by 1 (the
      default), 2, 4 or 8.

    Rules: ``unroll_k`` divides the steps of the chosen intrinsic, and the tile's
    ``vectors * rows`` accumulators stay within :data:`MAX_ROW`. The knobs of the tile
    are pinned for ``int32``.

    >>> import numpy as np
    >>> from toolchain.target import load_target
    >>> x = Value("x", (1, 40), "int8"); y = Value("y", (1, 64), "int8")
    >>> c = [Value.constant("w", np.ones((64, 40), np.int8)),
    ...      Value.constant("b", np.zeros(64, np.int32)),
    ...      Value.constant("m", np.full(64, 1 << 30, np.int32)),
    ...      Value.constant("s", np.full((64, 2), 1 << 30, np.int32))]
    >>> a = {"x_zero_point": 0, "y_zero_point": 0, "out_min": -128, "out_max": 127,
    ...      "out_dtype": "int8"}
    >>> s = dense_space(Node("QGemm", "fc", [x, *c], [y], a), load_target("x86_64-avx512"),
    ...                 16, True, True)
    >>> s.default()
    {'intrinsic': 'dot_u8s8_quads', 'rows': 1, 'vectors': 1, 'unroll_k': 1}
    >>> s.knob("vectors").choices, s.is_valid({**s.default(), "unroll_k": 4})
    ((1, 2, 4), False)
    """
    p, k = (int(d) for d in node.inputs[0].shape)
    m = int(node.input(1).shape[0])
    default = pixel_tile(p)
    kinds = (("dot_u8s8_quads",) if quads else ()) + (("dot_i16_pairs",) if pairs else ()) \
        + ("int32",)
    steps = {"dot_u8s8_quads": -(-k // 4), "dot_i16_pairs": -(-k // 2), "int32": 1}
    tiled = lambda p_: p_["intrinsic"] != "int32"  # noqa: E731
    knobs = (
        Knob("intrinsic", kinds, kinds[0], "u8 quads of k through dot_u8s8 (vpdpbusd), "
             "int16 pairs through dot_i16, or int32 lanes"),
        Knob("rows", with_default(divisors(p, MAX_ROW), default), default,
             "rows of the batch per register tile", active=tiled),
        Knob("vectors", divisors(-(-m // lanes), MAX_DENSE_VECTORS), 1,
             f"vectors of {lanes} outputs per register tile", active=tiled),
        Knob("unroll_k", DENSE_UNROLLS, 1, "reduction steps unrolled", active=tiled),
    )
    rules = (
        Rule("unroll_k divides the reduction's steps",
             lambda p_: steps[p_["intrinsic"]] % p_["unroll_k"] == 0),
        Rule(f"the tile's vectors * rows accumulators are at most {MAX_ROW}",
             lambda p_: p_["vectors"] * p_["rows"] <= MAX_ROW),
    )
    key = (f"int8_dense|x{p}x{k}{node.inputs[0].dtype}|m{m}|lanes{lanes}|"
           f"v{t.vector_width_bits}|{'/'.join(kinds)}")
    return Space("int8_dense", key, knobs, rules)


def schedule_x86_int8(node: Node, target: Any) -> OpSchedule:
    """The x86 int8 schedule of ``node`` (QAdd: :func:`_schedule_qadd`; the generic int8
    schedule where the tiled kernels do not apply: grouped convolutions, QGemm with a >2-D
    input, other ops, or a nest the schedule refuses)."""
    from toolchain.topi.int8 import x86_applies, x86_lanes
    from toolchain.topi.int8_x86 import quads_apply
    from toolchain.topi.registry import node_compute

    t = resolve_target(target)
    load_intrinsics(t)  # kiln_x86_requantize (c_helpers), the lane-wise requantization
    if node.op == "QAdd":
        return _schedule_qadd(node, t)
    if node.op == "QConv" and layout_info(node):
        return _schedule_blocked(node, t)
    if dw_lanes(node) and (t.vector_width_bits or 0) >= DW_MIN_VECTOR_BITS:
        return depthwise(node, t, dw_lanes(node))
    if node.op not in ("QConv", "QGemm") or not x86_applies(node):
        return schedule_int8(node, target)
    lanes = x86_lanes(int(node.input(1).shape[0]))
    pairs = t.has_intrinsic(f"dot_i16_{lanes}x2")
    quads = t.has_intrinsic(f"dot_u8s8_{lanes}x4") and quads_apply(node)
    if node.op == "QConv":
        point = decide(int8_space(node, t, lanes, pairs, quads))
    else:
        point = decide(dense_space(node, t, lanes, pairs, quads)) if pairs or quads else {}
    tile = point.get("pixels", point.get("rows"))
    tuned = {"vectors": point.get("vectors", 1), "unroll_k": point.get("unroll_k", 1)}
    kind = point.get("intrinsic", "dot_u8s8_quads" if quads else "dot_i16_pairs")
    if quads and kind == "dot_u8s8_quads":
        op = _paired(node, t, lanes, tile, quads=True, **tuned)  # u8 x s8 quads (vpdpbusd)
        if op is not None:
            return op
        kind = "dot_i16_pairs"
    if pairs and kind == "dot_i16_pairs":
        op = _paired(node, t, lanes, tile, **tuned)  # int16 channel pairs (vpdpwssd, vpmaddwd)
        if op is not None:
            return op
    nc = node_compute(node, algorithm="x86")
    inputs, outputs, packs = _lane_requant(nc, node, lanes)
    func = te.create_prim_func(inputs + outputs, name=int8_kernel_name(node.name))
    try:
        sch = _schedule_conv(func, lanes, tile) if node.op == "QConv" else \
            _schedule_dense(func, lanes)
    except KilnError as err:  # a shape the tiled nest cannot take: the generic kernel
        op = schedule_int8(node, target)
        op.info["x86_refused"] = str(err)
        return op
    values: list[Value] = []
    for k, v in enumerate(nc.input_values):
        if k in packs:
            v = Value.constant(f"{v.name}_x86", packs[k](v.data))
        values.append(v)
    return OpSchedule(sch, values, list(node.outputs), {"schedule": "int8 x86", "lanes": lanes})

