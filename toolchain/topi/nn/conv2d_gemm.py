"""2-D convolution (NCHW data, OIHW kernel, groups 1) written as an explicit im2col GEMM.

The tensor-core convolution of CUDA targets (``toolchain/schedules/gpu/conv_tc.py``) needs
the convolution as a plain row-major GEMM ``C[co, p] += A[co, k] * B[k, p]`` over the
output's flat pixels ``p = oh * OW + ow`` and the flat window ``k = (ci * KH + kh) * KW +
kw``. Four stages say exactly that:

* ``conv_weight_rows[co, k]``: the kernel read as rows of ``K = C * KH * KW`` (OIHW
  already is; the stage is an index map, staged into shared memory by the schedule);
* ``im2col[n, k, p]``: the window element of pixel ``p``, zero where the window is in the
  padding (the guard is the stage's ``if_then_else``: no padded copy of the input exists);
* ``conv2d_gemm[n, co, p] = sum_k conv_weight_rows[co, k] * im2col[n, k, p]``;
* ``conv2d_nchw[n, co, oh, ow] = conv2d_gemm[n, co, oh * OW + ow]``: the NCHW output (a
  reshape, which ``reverse_compute_inline`` folds into the GEMM's write-back: its index is
  a mixed-radix number covering the flat pixels exactly, or their first ``OH * OW`` where
  ``pixel_multiple`` pads them).

The same numbers as :func:`~toolchain.topi.nn.conv2d.conv2d_nchw` (the same products,
summed in another order). Nothing is materialised by a GPU schedule that stages the
operands: the two operand stages are computed straight into the shared tiles.

>>> from toolchain import te
>>> x = te.placeholder((1, 8, 6, 6), name="x"); w = te.placeholder((16, 8, 3, 3), name="w")
>>> y = conv2d_nchw_im2col(x, w, stride=1, padding=1)
>>> [d.value for d in y.shape], y.op.input_tensors()[0].name
([1, 16, 6, 6], 'conv2d_gemm')
>>> im2col_gemm_shape((1, 8, 6, 6), (16, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
(16, 36, 72)

With ``window_multiple`` / ``channel_multiple`` the GEMM's ``K`` / ``M`` are rounded up
(the extra weight and im2col rows and columns guarded zeros; 3 x 3 x 3 = 27 as 32, 24
channels as 32):

>>> x = te.placeholder((1, 3, 6, 6), name="x"); w = te.placeholder((24, 3, 3, 3), name="w")
>>> y = conv2d_nchw_im2col(x, w, padding=1, window_multiple=16, channel_multiple=16)
>>> gemm = y.op.input_tensors()[0]
>>> [[d.value for d in t.shape] for t in (y, gemm, *gemm.op.input_tensors())]
[[1, 24, 6, 6], [1, 32, 36], [32, 32], [1, 32, 36]]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.nn.conv2d import IntOrPair, conv2d_geometry
from toolchain.topi.utils import const_shape, scalar


def im2col_gemm_shape(data: Sequence[int], kernel: Sequence[int], stride: IntOrPair,
                      padding: IntOrPair, dilation: IntOrPair) -> tuple[int, int, int]:
    """``(M, N, K)`` of the GEMM a convolution of NCHW ``data`` by OIHW ``kernel`` (groups 1)
    is: output channels, output pixels ``OH * OW``, window ``C * KH * KW``."""
    _, c, h, w = data
    o, _, kh, kw = kernel
    *_, oh, ow = conv2d_geometry(h, w, kh, kw, stride, padding, dilation)
    return o, oh * ow, c * kh * kw


def conv2d_nchw_im2col(data: te.Tensor, kernel: te.Tensor, stride: IntOrPair = 1,
                       padding: IntOrPair = 0, dilation: IntOrPair = 1,
                       out_dtype: str | None = None, pixel_multiple: int = 1,
                       window_multiple: int = 1, channel_multiple: int = 1) -> te.Tensor:
    """The convolution as the four stages of the module docstring; groups 1 only.
    ``pixel_multiple``: the GEMM's pixel axis rounded up to a multiple of it (ResNet-18's
    14 x 14 = 196 pixels as 208 for 16-wide tensor-core tiles): the extra im2col columns
    are 0 and the reshape reads only the first ``OH * OW`` columns of the product.
    ``window_multiple``: the reduction ``K`` rounded up so (the stem's 3 x 7 x 7 = 147 as
    160): the extra im2col rows and weight columns are 0 (guards: no padded tensor exists)
    and add nothing. ``channel_multiple``: the output channels ``M`` rounded up so (24 as
    32): the extra weight rows are 0 and the reshape reads only the first ``O`` rows."""
    n, c, h, w = const_shape(data, "conv2d_nchw_im2col")
    o, i, kh, kw = const_shape(kernel, "conv2d_nchw_im2col")
    if i != c:
        raise OptionError(f"conv2d_nchw_im2col: the kernel has {i} input channels, the data "
                          f"{c}: only groups 1 is an im2col GEMM here")
    (sh, sw), (pt, pl, _, _), (dh, dw), oh, ow = conv2d_geometry(h, w, kh, kw, stride, padding,
                                                           dilation)
    odt = out_dtype or data.dtype
    win, kk = kh * kw, c * kh * kw
    pixels = -(-(oh * ow) // pixel_multiple) * pixel_multiple
    kpad = -(-kk // window_multiple) * window_multiple
    opad = -(-o // channel_multiple) * channel_multiple

    def weight(m: ir.PrimExpr, k: ir.PrimExpr) -> ir.PrimExpr:
        load = kernel[m, k // win, k % win // kw, k % kw]
        conds = ([m < o] if opad != o else []) + ([k < kk] if kpad != kk else [])
        return te.if_then_else(te.all(*conds), load, scalar(0, kernel.dtype)) if conds \
            else load

    rows = te.compute((opad, kpad), weight, name="conv_weight_rows", tag="injective")

    def gather(nn: ir.PrimExpr, k: ir.PrimExpr, p: ir.PrimExpr) -> ir.PrimExpr:
        y = p // ow * sh + k % win // kw * dh - pt
        x = p % ow * sw + k % kw * dw - pl
        load = data[nn, k // win, y, x]
        conds = []
        if pt or (oh - 1) * sh + (kh - 1) * dh - pt >= h:  # the window may leave the rows
            conds += [y >= 0, y < h]
        if pl or (ow - 1) * sw + (kw - 1) * dw - pl >= w:
            conds += [x >= 0, x < w]
        if pixels != oh * ow:  # the padding columns: never a read past the input
            conds.append(p < oh * ow)
        if kpad != kk:  # the padding rows of the window: 0, never a read past the channels
            conds.append(k < kk)
        return te.if_then_else(te.all(*conds), load, scalar(0, data.dtype)) if conds else load

    col = te.compute((n, kpad, pixels), gather, name="im2col", tag="injective")
    rk = te.reduce_axis((0, kpad), name="rk")

    def product(nn: ir.PrimExpr, m: ir.PrimExpr, p: ir.PrimExpr) -> ir.PrimExpr:
        a, b = rows[m, rk], col[nn, rk, p]
        if a.dtype != odt:
            a, b = te.cast(a, odt), te.cast(b, odt)
        return te.sum(a * b, axis=[rk])

    gemm = te.compute((n, opad, pixels), product, name="conv2d_gemm")
    return te.compute((n, o, oh, ow), lambda nn, m, y, x: gemm[nn, m, y * ow + x],
                      name="conv2d_nchw", tag="conv2d_nchw")


__all__ = ["conv2d_nchw_im2col", "im2col_gemm_shape"]
