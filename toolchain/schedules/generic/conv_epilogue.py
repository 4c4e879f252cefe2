"""The NCHW write-back of the CPU convolution's channel-blocked product (its ``epilogue``
and ``epilogue_at`` knobs, :func:`~toolchain.schedules.generic.conv2d.conv_space`).

The direct convolution computes ``conv[N, O/ob, OH, OWp, ob]`` (register tiles of pixels x
``ob`` channels); an NCHW output is written from it by :func:`nchw_epilogue` in one of
three orders (``channel_rows``, ``pixel_tiles``, ``transposed`` through the targets'
``unblock_*`` tensor intrinsics, :func:`unblock_intrinsic`), either after the whole
product or, with :func:`band_loops` (``epilogue_at=rows``), after each band of ``ob``
channels x ``ry`` rows.

Before (``epilogue_at=end``, C4 of ResNet-18 with ``transposed``): the product, then::

    for n, o_0, y, xx_0, o_1_0 in T.grid(1, 4, 28, 7, 2):
        kiln_avx512_unblock_bias_f32_4x16(conv[0, o_0, y, xx_0 * 4, o_1_0 * 16], ...)

After (``rows``): the product computed band by band under the write-back's loops, and
compacted to one band::

    for n, o_0, y_0 in T.grid(1, 4, 14):
        ... the product's tiles of rows y_0 * 2 .. y_0 * 2 + 1 ...
        for y_1, xx_0, o_1_0 in T.grid(2, 7, 2):
            kiln_avx512_unblock_bias_f32_4x16(conv[0, o_0, y_0 * 2 + y_1, xx_0 * 4, ...], ...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolchain.target import Target
from toolchain.tir.schedule import Schedule

if TYPE_CHECKING:
    from toolchain.schedules.generic.conv2d import ConvGeom, ConvPlan

__all__ = ["band_loops", "nchw_epilogue", "unblock_intrinsic", "unblock_pixels"]


def unblock_intrinsic(pixels: int, lanes: int, bias: bool) -> str:
    """The tensor intrinsic that writes a ``pixels x lanes`` (channels) block of a
    ``[..., pixels, ob]`` product into an NCHW output, transposed in registers (plus the
    channels' bias): ``C[n, j, y, i] = A[i, j] (+ B[j])``, declared by the AVX targets.

    >>> unblock_intrinsic(16, 16, True), unblock_intrinsic(4, 8, False)
    ('unblock_bias_f32_16x16', 'unblock_f32_4x8')
    """
    return f"unblock{'_bias' if bias else ''}_f32_{pixels}x{lanes}"


def unblock_pixels(t: Target, lanes: int) -> tuple[int, ...]:
    """The pixel counts (``lanes``, ``lanes / 2`` ... down to 4) of the
    :func:`unblock_intrinsic` blocks ``t`` declares, with and without a bias.

    >>> from toolchain.schedules.registry import resolve_target
    >>> unblock_pixels(resolve_target("x86_64-avx512"), 16), unblock_pixels(
    ...     resolve_target("c-generic"), 4)
    ((16, 8, 4), ())
    """
    counts = [lanes >> e for e in range(lanes.bit_length()) if lanes >> e >= 4]
    return tuple(q for q in counts
                 if all(t.has_intrinsic(unblock_intrinsic(q, lanes, b)) for b in (False, True)))


def band_loops(sch: Schedule, plan: ConvPlan, blocks: tuple[Any, ...]) -> tuple[Any, ...]:
    """``epilogue_at=rows``: the NCHW write-back's loops ``n o y x`` become ``n o0 y0 | o1
    y1 x`` (bands of ``ob`` channels x ``ry`` rows) and the product (``blk``) is computed
    under ``y0``, band by band, so the write-back reads a band just written (and
    :func:`~toolchain.tir.transform.compact_buffer_allocation` shrinks the product to one
    band). Returns ``(n, o0, y0, o1, y1, x)``; the product's own loops under ``y0`` are
    ``y1 x o1`` and its reduction loops."""
    out = sch.get_block("conv_out")
    n, o, y, x = sch.get_loops(out)
    o0, o1 = sch.split(o, [None, plan.ob])
    y0, y1 = sch.split(y, [None, plan.ry])
    sch.reorder(o0, y0, o1, y1)
    for b in blocks:  # the register tile's write-back, then the product before it
        sch.compute_at(b, y0, preserve_unit_loops=True)
    return n, o0, y0, o1, y1, x


def nchw_epilogue(sch: Schedule, g: ConvGeom, plan: ConvPlan, out: Any, epilogue: str,
                   target: Target | None, band: tuple[Any, ...] | None = None) -> None:
    """The write-back of the product's tiles into an NCHW output in the ``epilogue`` order
    (:func:`conv_space`); ``transposed`` tensorizes ``P`` pixels x ``lanes`` channels
    blocks with ``target``'s :func:`unblock_intrinsic`. ``band``: the loops ``(o1, y1,
    x)`` of one band of the product (:func:`band_loops`, ``epilogue_at=rows``)."""
    if band is None:
        # split the channel loop by ob so o // ob and o % ob fold away
        ol = sch.get_loops(out)
        if g.o % plan.ob == 0:
            sch.split(ol[1], [None, plan.ob])
    pixels = 0
    if epilogue == "transposed":
        if target is None:
            raise ValueError("schedule_conv: epilogue='transposed' needs the target whose "
                             "unblock intrinsics it calls")
        pixels = max(q for q in unblock_pixels(target, plan.lanes) if g.ow % q == 0)
        sch.split(sch.get_loops(out)[-1], [None, pixels])
    elif g.ow % plan.lanes == 0:
        _, wi = sch.split(sch.get_loops(out)[-1], [None, plan.lanes])
        sch.vectorize(wi)
    if g.o % plan.ob == 0 and epilogue in ("pixel_tiles", "transposed"):
        # n o0 o1 y x0 [x1] -> n o0 y x0 o1 [x1]: a lanes x ob block of the product (in a
        # band: n o0 y0 o1 y1 x0 [x1] -> n o0 y0 y1 x0 o1 [x1])
        el = sch.get_loops(out)[1 if band is not None else 0:]
        sch.reorder(el[3], el[4], el[2])
    if pixels:
        # ... o1 x1 -> ... o1_0 | o1_1 x1: pixels x lanes blocks, one call each
        _, o1i = sch.split(sch.get_loops(out)[-2], [None, plan.lanes])
        bias = any(b.name == "bias" for b in sch.mod.buffers)
        sch.tensorize(o1i, target.intrinsic(unblock_intrinsic(pixels, plan.lanes, bias)))
