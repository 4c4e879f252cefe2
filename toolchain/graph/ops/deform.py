"""Deformable convolution: DeformConv (OPAQUE).

ONNX's DeformConv (opset 19; 2-D): a grouped convolution whose kernel taps are moved by
learned offsets.  Output element ``(n, o, i, j)`` sums over the input channels ``c`` of
``o``'s group and the kernel taps ``(a, b)``:
``W[o, c, a, b] · mask · X̃[n, c, y, x]`` with ``y = i·stride_h − pad_h + a·dilation_h +
offset_h`` (likewise ``x``), where ``X̃`` is ``X`` interpolated bilinearly with zeros
outside the image; ``offset`` ``[N, offset_group·kh·kw·2, oh, ow]`` holds ``(offset_h,
offset_w)`` per offset group and tap, ``mask`` (default 1) ``[N, offset_group·kh·kw, oh,
ow]`` one factor per tap; ``B`` is added per output channel.  The input channels are split
evenly into the offset groups.  Output ``[N, M, oh, ow]`` with ``oh = ⌊(H + pads − (kh −
1)·dilation − 1) / stride⌋ + 1``.  Computed in float64, rounded once.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    >>> w = np.ones((1, 1, 1, 1), np.float32)
    >>> off = np.full((1, 2, 3, 3), 0.5, np.float32)  # half a pixel down and right
    >>> get_op("DeformConv").reference([x, w, off], {})[0][0, 0, 0]
    array([2.  , 3.  , 1.75], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import FLOAT_TYPES, check_dtype, defop, input_value
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind


def _positive(v: Any) -> str | None:
    return None if int(v) >= 1 else f"must be >= 1, got {v}"


def _ints_at_least(lo: int):
    def check(v: Any) -> str | None:
        bad = [int(x) for x in v if int(x) < lo]
        return f"must be >= {lo}, got {list(v)}" if bad else None
    return check


def deform_geometry(where: str, x: tuple[int, ...], w: tuple[int, ...],
                    attrs: dict[str, Any]) -> dict[str, Any]:
    """Strides, pads, dilations, kernel and output size of a 2-D DeformConv; raises naming
    ``where``."""
    if len(x) != 4 or len(w) != 4:
        raise ModelError(f"{where}: Kiln supports 2-D DeformConv only (X [N, C, H, W], W "
                         f"[M, C/group, kh, kw]); got X {list(x)}, W {list(w)}")
    kernel = tuple(attrs["kernel_shape"] or w[2:])
    if kernel != tuple(w[2:]):
        raise ModelError(f"{where}: kernel_shape {list(kernel)} disagrees with W {list(w)}")
    strides = tuple(attrs["strides"] or (1, 1))
    dil = tuple(attrs["dilations"] or (1, 1))
    pads = tuple(attrs["pads"] or (0, 0, 0, 0))
    if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
        raise ModelError(f"{where}: strides/dilations need 2 values and pads 4")
    group, og = attrs["group"], attrs["offset_group"]
    if x[1] != w[1] * group or w[0] % group:
        raise ModelError(f"{where}: X has {x[1]} channels and W {list(w)} with group {group}; "
                         f"need C = W.shape[1]·group and M divisible by group")
    if x[1] % og:
        raise ModelError(f"{where}: {x[1]} input channels do not split into offset_group "
                         f"{og} groups")
    out = tuple((x[2 + k] + pads[k] + pads[k + 2] - (kernel[k] - 1) * dil[k] - 1)
                // strides[k] + 1 for k in range(2))
    if min(out) < 1:
        raise ModelError(f"{where}: the kernel does not fit the padded input {list(x)}")
    return {"kernel": kernel, "strides": strides, "dilations": dil, "pads": pads,
            "out": out, "group": group, "offset_group": og}


def _deform_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, w, off = (input_value(node, i, n) for i, n in enumerate(("X", "W", "offset")))
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    for i, what in ((1, "W"), (2, "offset"), (3, "B"), (4, "mask")):
        if node.input(i) is not None:
            check_dtype(node, node.inputs[i], f"input {i} ({what})", (x.dtype,))
    g = deform_geometry(node.describe(), x.shape, w.shape, attrs)
    taps = g["offset_group"] * g["kernel"][0] * g["kernel"][1]
    n, (oh, ow) = x.shape[0], g["out"]
    for i, what, want in ((2, "offset", (n, 2 * taps, oh, ow)), (3, "B", (w.shape[0],)),
                          (4, "mask", (n, taps, oh, ow))):
        v = node.input(i)
        if v is not None and v.shape != want:
            raise ModelError(f"{node.describe()}: input {what} is {list(v.shape)}, expected "
                             f"{list(want)}")
    return [TensorType((n, w.shape[0], oh, ow), x.dtype)]


def _sample(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Bilinear samples of ``img`` [N, C, H, W] at ``y``, ``x`` [N, C, oh, ow], zeros
    outside."""
    hgt, wid = img.shape[2:]
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    fy, fx = y - y0, x - x0
    n = np.arange(img.shape[0])[:, None, None, None]
    c = np.arange(img.shape[1])[None, :, None, None]
    out = np.zeros(y.shape)
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            yy, xx = y0 + dy, x0 + dx
            ok = (yy >= 0) & (yy < hgt) & (xx >= 0) & (xx < wid)
            v = img[n, c, np.clip(yy, 0, hgt - 1), np.clip(xx, 0, wid - 1)]
            out += np.where(ok, wy * wx * v, 0.0)
    return out


def _deform_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, w, off = (np.asarray(a) for a in ins[:3])
    g = deform_geometry("DeformConv", x.shape, w.shape, attrs)
    (kh, kw), (sh, sw), (dh, dw) = g["kernel"], g["strides"], g["dilations"]
    (oh, ow), og, group = g["out"], g["offset_group"], g["group"]
    n, ic = x.shape[:2]
    m, icg = w.shape[0], w.shape[1]
    off = off.astype(np.float64).reshape(n, og, kh, kw, 2, oh, ow)
    mask = (np.ones((n, og, kh, kw, oh, ow)) if ins[4] is None
            else np.asarray(ins[4], np.float64).reshape(n, og, kh, kw, oh, ow))
    per_og = ic // og
    chan_og = np.arange(ic) // per_og  # offset group of each input channel
    img = x.astype(np.float64)
    out = np.zeros((n, m, oh, ow))
    rows = (np.arange(oh) * sh - g["pads"][0])[:, None]
    cols = (np.arange(ow) * sw - g["pads"][1])[None, :]
    for a in range(kh):
        for b in range(kw):
            y = rows + a * dh + off[:, chan_og, a, b, 0]
            xx = cols + b * dw + off[:, chan_og, a, b, 1]
            s = _sample(img, y, xx) * mask[:, chan_og, a, b]  # [N, C, oh, ow]
            for grp in range(group):
                ws = w[grp * (m // group):(grp + 1) * (m // group), :, a, b]
                out[:, grp * (m // group):(grp + 1) * (m // group)] += np.einsum(
                    "oc,nchw->nohw", ws.astype(np.float64), s[:, grp * icg:(grp + 1) * icg])
    if ins[3] is not None:
        out += np.asarray(ins[3], np.float64)[None, :, None, None]
    return [out.astype(x.dtype)]


def _deform_flops(node: Node) -> int:
    w = node.inputs[1]
    return 2 * sum(o.size for o in node.outputs) * (w.size // w.shape[0]) * 6 if w else 0


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("DeformConv", ("X", "W", "offset", "B?", "mask?"), PatternKind.OPAQUE,
          infer=_deform_infer, reference=_deform_ref,
          attrs=(Attr("dilations", "ints", (), check=_ints_at_least(1)),
                 Attr("group", "int", 1, check=_positive),
                 Attr("kernel_shape", "ints", (), check=_ints_at_least(1)),
                 Attr("offset_group", "int", 1, check=_positive),
                 Attr("pads", "ints", (), check=_ints_at_least(0)),
                 Attr("strides", "ints", (), check=_ints_at_least(1))),
          flops=_deform_flops, min_opset=19,
          doc="2-D deformable convolution (offsets per tap and offset group, optional mask "
              "and bias); bilinear sampling with zeros outside; float64 accumulation"),
)
