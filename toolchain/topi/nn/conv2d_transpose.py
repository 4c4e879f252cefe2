"""2-D transposed convolution (ONNX ConvTranspose), NCHW, grouped, strided, dilated.

Input cell ``i`` and kernel tap ``t`` contribute to (full) output cell ``i*s + t*d``; output
cell ``o`` is full cell ``o + pad_begin``. As a gather over the kernel window:

    out[n, m, oy, ox] = Σ_{c in group(m), ky, kx} [(oy + pt - ky*dh) % sh == 0 and in range]
                        x[n, c, (oy + pt - ky*dh) / sh, ...] * w[c, m % (M/g), ky, kx]

The condition is an ``if_then_else`` inside the sum, so the load only happens where the
tap is real. ``output_padding`` / ``output_shape`` only change ``out_hw``, which the caller
(the registry) computes with the ONNX rules.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 2, 3, 3), name="x"); w = te.placeholder((2, 4, 3, 3), name="w")
    >>> y = conv2d_transpose_nchw(x, w, stride=2, padding=(1, 1, 1, 1))
    >>> [d.value for d in y.shape]
    [1, 4, 5, 5]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.nn.conv2d import normalize_padding
from toolchain.topi.utils import as_tuple, const_shape, scalar

Expr = ir.PrimExpr


def conv2d_transpose_nchw(data: te.Tensor, kernel: te.Tensor, stride: int | Sequence[int] = 1,
                          padding: int | Sequence[int] = 0,
                          dilation: int | Sequence[int] = 1, groups: int = 1,
                          output_padding: int | Sequence[int] = 0,
                          out_hw: Sequence[int] | None = None,
                          out_dtype: str | None = None) -> te.Tensor:
    """Transposed conv: data ``[N, C, H, W]``, kernel ``[C, M/groups, KH, KW]`` (ONNX).

    The output is ``s*(in-1) + output_padding + (k-1)*d + 1 - pad_begin - pad_end`` per
    axis unless ``out_hw`` gives it (then only the begin pads matter).
    """
    n, c, h, w = const_shape(data, "conv2d_transpose")
    ck, mg, kh, kw = const_shape(kernel, "conv2d_transpose")
    if ck != c or c % groups:
        raise OptionError(f"conv2d_transpose: kernel {[ck, mg, kh, kw]} must have the data's "
                          f"{c} input channels first, divisible by groups = {groups}")
    sh, sw = as_tuple(stride, 2, "conv2d_transpose: stride")
    dh, dw = as_tuple(dilation, 2, "conv2d_transpose: dilation")
    oph, opw = as_tuple(output_padding, 2, "conv2d_transpose: output_padding")
    pt, pl, pb, pr = normalize_padding(padding)
    if out_hw is None:
        oh = sh * (h - 1) + oph + (kh - 1) * dh + 1 - pt - pb
        ow = sw * (w - 1) + opw + (kw - 1) * dw + 1 - pl - pr
    else:
        oh, ow = (int(v) for v in out_hw)
    if oh <= 0 or ow <= 0:
        raise OptionError(f"conv2d_transpose: output {oh}x{ow} is empty")
    odt = out_dtype or data.dtype
    cg = c // groups
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def f(nn: Expr, m: Expr, y: Expr, x: Expr) -> Expr:
        ty = y + pt - ry * dh
        tx = x + pl - rx * dw
        iy, ix = te.floordiv(ty, sh), te.floordiv(tx, sw)
        conds = [ty >= 0, tx >= 0, iy < h, ix < w]
        if sh > 1:
            conds.append(te.equal(te.floormod(ty, sh), 0))
        if sw > 1:
            conds.append(te.equal(te.floormod(tx, sw), 0))
        ci = rc if groups == 1 else te.floordiv(m, mg) * cg + rc
        mi = m if groups == 1 else te.floormod(m, mg)
        prod = te.cast(data[nn, ci, iy, ix], odt) * te.cast(kernel[ci, mi, ry, rx], odt)
        return te.sum(te.if_then_else(te.all(*conds), prod, scalar(0, odt)), axis=[rc, ry, rx])

    return te.compute((n, mg * groups, oh, ow), f, name="conv2d_transpose_nchw",
                      tag="conv2d_transpose_nchw")
