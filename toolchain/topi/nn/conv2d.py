"""2-D convolution in three data layouts, grouped and depthwise, with an explicit pad stage.

Layouts (data / kernel / output):

* ``conv2d_nchw``: ``NCHW`` / ``OIHW`` (O = output channels, I = C / groups) / ``NCHW``
* ``conv2d_nhwc``: ``NHWC`` / ``HWIO`` / ``NHWC``
* ``conv2d_nchwc``: ``NCHW{cb}c`` / ``OIHW{ib}i{ob}o`` / ``NCHW{ob}c`` — the blocked layout
  CPU schedules vectorize over (the innermost ``c``/``o`` blocks are SIMD lanes). Channel
  counts that are not a multiple of the block are zero-padded by
  :func:`~toolchain.topi.transform.layout_transform` / :func:`pack_kernel_nchwc`.

Every variant has a padding stage ``pad`` (a ``te.compute`` whose body is
``if_then_else(inside, data[...], 0)``; omitted when all pads are 0) and the convolution
stage ``conv2d_*``, a ``te.sum`` over input channels and the kernel window:

    out[n, m, y, x] = sum_{rc, ry, rx} pad[n, g(m) * I + rc, y*sh + ry*dh, x*sw + rx*dw]
                                     * w[m, rc, ry, rx],      g(m) = m // (O / groups)

``padding`` is ``(top, left, bottom, right)`` (or one int, or ``(h, w)``); ``stride`` and
``dilation`` are ints or pairs.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 3, 8, 8), name="x"); w = te.placeholder((4, 3, 3, 3), name="w")
    >>> y = conv2d_nchw(x, w, stride=1, padding=1)
    >>> [d.value for d in y.shape]
    [1, 4, 8, 8]
    >>> [t.name for t in y.op.input_tensors()]
    ['pad', 'w']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.utils import as_tuple, const_shape, scalar, window_index

Expr = ir.PrimExpr
IntOrPair = int | Sequence[int]


def normalize_padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` from an int, ``(h, w)`` or a 4-tuple."""
    if isinstance(padding, int):
        return (padding,) * 4
    p = tuple(int(v) for v in padding)
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return p  # type: ignore[return-value]
    raise OptionError(f"conv2d: padding {list(p)} must be an int, (h, w) or "
                      "(top, left, bottom, right)")


def out_size(n: int, k: int, stride: int, dilation: int, pad_lo: int, pad_hi: int) -> int:
    """Output extent of one spatial axis."""
    return (n + pad_lo + pad_hi - ((k - 1) * dilation + 1)) // stride + 1


def pad_spatial(data: te.Tensor, axes: Sequence[int], before: Sequence[int],
                after: Sequence[int], value: float = 0.0, name: str = "pad") -> te.Tensor:
    """Zero-pad (or pad with ``value``) the listed axes; returns ``data`` if nothing to pad.

    >>> x = te.placeholder((1, 2, 4, 4), name="x")
    >>> [d.value for d in pad_spatial(x, (2, 3), (1, 1), (1, 2)).shape]
    [1, 2, 6, 7]
    """
    if not any(before) and not any(after):
        return data
    shape = const_shape(data, name)
    out = list(shape)
    for a, b, e in zip(axes, before, after, strict=True):
        out[a] += b + e

    def f(*i: Expr) -> Expr:
        idx = list(i)
        conds = []
        for a, b, e in zip(axes, before, after, strict=True):
            if b:
                idx[a] = i[a] - b
                conds.append(i[a] >= b)
            if e:
                conds.append(i[a] < b + shape[a])
        load = data[tuple(idx)]
        return te.if_then_else(te.all(*conds), load, scalar(value, data.dtype)) if conds \
            else load

    return te.compute(tuple(out), f, name=name, tag="pad")


def conv2d_geometry(h: int, w: int, kh: int, kw: int, stride: IntOrPair, padding: IntOrPair,
              dilation: IntOrPair) -> tuple[tuple[int, int], tuple[int, int, int, int],
                                            tuple[int, int], int, int]:
    sh, sw = as_tuple(stride, 2, "conv2d: stride")
    dh, dw = as_tuple(dilation, 2, "conv2d: dilation")
    pt, pl, pb, pr = normalize_padding(padding)
    oh = out_size(h, kh, sh, dh, pt, pb)
    ow = out_size(w, kw, sw, dw, pl, pr)
    if oh <= 0 or ow <= 0:
        raise OptionError(f"conv2d: the {kh}x{kw} kernel (dilation {dh}x{dw}) does not fit "
                          f"the padded {h}x{w} input; output would be {oh}x{ow}")
    return (sh, sw), (pt, pl, pb, pr), (dh, dw), oh, ow


def _check_groups(c: int, i: int, o: int, groups: int, op: str) -> None:
    if groups < 1 or c % groups or o % groups or c // groups != i:
        raise OptionError(f"{op}: groups = {groups} needs input channels {c} and output "
                          f"channels {o} divisible by it, and kernel input channels {i} = "
                          f"{c} / {groups}")


def _direct(data: te.Tensor, kernel: te.Tensor, layout: str, kernel_layout: str,
            stride: IntOrPair, padding: IntOrPair, dilation: IntOrPair, groups: int,
            out_dtype: str | None) -> tuple[dict[str, int], Callable[..., Expr]]:
    """The unblocked convolution in data ``layout`` (``NCHW``/``NHWC``, also the output's)
    and ``kernel_layout`` (``OIHW``/``HWIO``): the sizes by axis letter (``N C H W`` of the
    data, ``O I KH KW`` of the kernel, ``OH OW`` of the output) and the body
    ``body(n, m, y, x)``, a ``te.sum`` over the kernel's I, H, W axes in the order the data
    layout has C, H, W (NCHW: ``rc, ry, rx``; NHWC: ``ry, rx, rc``)."""
    op = f"conv2d_{layout.lower()}"
    size = dict(zip(layout, const_shape(data, op), strict=True))
    size |= {("K" + a if a in "HW" else a): e
             for a, e in zip(kernel_layout, const_shape(kernel, op), strict=True)}
    c, i, o = size["C"], size["I"], size["O"]
    _check_groups(c, i, o, groups, op)
    (sh, sw), (pt, pl, pb, pr), (dh, dw), size["OH"], size["OW"] = conv2d_geometry(
        size["H"], size["W"], size["KH"], size["KW"], stride, padding, dilation)
    odt = out_dtype or data.dtype
    padded = pad_spatial(data, (layout.index("H"), layout.index("W")), (pt, pl), (pb, pr))
    extent = {"C": ("rc", i), "H": ("ry", size["KH"]), "W": ("rx", size["KW"])}
    red = {a: te.reduce_axis((0, extent[a][1]), name=extent[a][0])
           for a in layout if a in extent}
    rc, ry, rx = red["C"], red["H"], red["W"]
    og = o // groups

    def body(nn: Expr, m: Expr, y: Expr, x: Expr) -> Expr:
        ci = rc if groups == 1 else te.floordiv(m, og) * i + rc
        at = {"N": nn, "C": ci, "H": window_index(y, sh, ry, dh),
              "W": window_index(x, sw, rx, dw)}
        wt = {"O": m, "I": rc, "H": ry, "W": rx}
        return te.sum(te.cast(padded[tuple(at[a] for a in layout)], odt)
                      * te.cast(kernel[tuple(wt[a] for a in kernel_layout)], odt),
                      axis=list(red.values()))

    return size, body


def conv2d_nchw(data: te.Tensor, kernel: te.Tensor, stride: IntOrPair = 1,
                padding: IntOrPair = 0, dilation: IntOrPair = 1, groups: int = 1,
                out_dtype: str | None = None) -> te.Tensor:
    """NCHW data, OIHW kernel (I = C / groups) → NCHW output; see the module docstring."""
    s, body = _direct(data, kernel, "NCHW", "OIHW", stride, padding, dilation, groups,
                      out_dtype)
    tag = "depthwise_conv2d_nchw" if groups == s["C"] and s["I"] == 1 else "conv2d_nchw"
    return te.compute((s["N"], s["O"], s["OH"], s["OW"]),
                      lambda nn, m, y, x: body(nn, m, y, x), name=tag, tag=tag)


def depthwise_conv2d_nchw(data: te.Tensor, kernel: te.Tensor, stride: IntOrPair = 1,
                          padding: IntOrPair = 0, dilation: IntOrPair = 1,
                          out_dtype: str | None = None) -> te.Tensor:
    """Depthwise: NCHW data, kernel ``[C * multiplier, 1, KH, KW]`` (ONNX's group = C)."""
    c = const_shape(data, "depthwise_conv2d_nchw")[1]
    return conv2d_nchw(data, kernel, stride, padding, dilation, groups=c, out_dtype=out_dtype)


def conv2d_nhwc(data: te.Tensor, kernel: te.Tensor, stride: IntOrPair = 1,
                padding: IntOrPair = 0, dilation: IntOrPair = 1, groups: int = 1,
                out_dtype: str | None = None) -> te.Tensor:
    """NHWC data, HWIO kernel (I = C / groups) → NHWC output."""
    s, body = _direct(data, kernel, "NHWC", "HWIO", stride, padding, dilation, groups,
                      out_dtype)
    return te.compute((s["N"], s["OH"], s["OW"], s["O"]),
                      lambda nn, y, x, m: body(nn, m, y, x), name="conv2d_nhwc",
                      tag="conv2d_nhwc")


def conv2d_nchwc(data: te.Tensor, kernel: te.Tensor, stride: IntOrPair = 1,
                 padding: IntOrPair = 0, dilation: IntOrPair = 1, groups: int = 1,
                 out_dtype: str | None = None) -> te.Tensor:
    """Blocked layout: data ``[N, C/cb, H, W, cb]``, kernel ``[O/ob, I/ib, KH, KW, ib, ob]``
    → ``[N, O/ob, OH, OW, ob]``.

    With ``groups == 1`` the input-channel blocks must match (``ib == cb``; zero-padded
    channels contribute nothing). With ``groups > 1`` no channel may be padding: C and O
    must be multiples of ``cb`` and ``ob``, and ``I = C / groups`` a multiple of ``ib``
    (depthwise: ``ib = 1``, ``I/ib = 1``). Output blocks may span several groups.
    """
    n, cbn, h, w, cb = const_shape(data, "conv2d_nchwc")
    obn, ibn, kh, kw, ib, ob = const_shape(kernel, "conv2d_nchwc")
    c_tot, i_tot, o_tot = cbn * cb, ibn * ib, obn * ob
    if groups == 1 and (ib != cb or ibn != cbn):
        raise OptionError(f"conv2d_nchwc: the kernel's input blocks {ibn}x{ib} must match the "
                          f"data's channel blocks {cbn}x{cb}; pack both with the same block")
    if groups > 1 and (c_tot % groups or o_tot % groups or c_tot // groups != i_tot):
        raise OptionError(f"conv2d_nchwc: groups = {groups} needs unpadded channels: data has "
                          f"{c_tot} (blocks of {cb}), kernel {i_tot} per group (blocks of "
                          f"{ib}) and {o_tot} outputs (blocks of {ob}); use NCHW or blocks that "
                          "divide the channel counts")
    (sh, sw), (pt, pl, pb, pr), (dh, dw), oh, ow = conv2d_geometry(h, w, kh, kw, stride, padding,
                                                             dilation)
    odt = out_dtype or data.dtype
    padded = pad_spatial(data, (2, 3), (pt, pl), (pb, pr))
    rco = te.reduce_axis((0, ibn), name="rco")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rci = te.reduce_axis((0, ib), name="rci")
    og = o_tot // groups

    def f(nn: Expr, mo: Expr, y: Expr, x: Expr, mi: Expr) -> Expr:
        yy, xx = window_index(y, sh, ry, dh), window_index(x, sw, rx, dw)
        if groups == 1:
            src = padded[nn, rco, yy, xx, rci]
        else:
            ci = te.floordiv(mo * ob + mi, og) * i_tot + rco * ib + rci
            src = padded[nn, te.floordiv(ci, cb), yy, xx, te.floormod(ci, cb)]
        return te.sum(te.cast(src, odt) * te.cast(kernel[mo, rco, ry, rx, rci, mi], odt),
                      axis=[rco, ry, rx, rci])

    return te.compute((n, obn, oh, ow, ob), f, name="conv2d_nchwc", tag="conv2d_nchwc")


def bias_add(x: te.Tensor, bias: te.Tensor, axis: int = 1) -> te.Tensor:
    """``x + bias`` broadcast along ``axis`` (a 1-D bias; a 2-D ``[C/cb, cb]`` bias for a
    blocked layout with ``axis`` the outer channel axis, the block being last)."""
    shape = const_shape(x, "bias_add")
    axis = axis % len(shape)
    if bias.ndim == 1:
        return te.compute(shape, lambda *i: x[i] + bias[i[axis]], name="bias_add",
                          tag="broadcast")
    return te.compute(shape, lambda *i: x[i] + bias[i[axis], i[-1]], name="bias_add",
                      tag="broadcast")
