"""NHWC convolutions for microcontroller targets (CMSIS-NN's layout): fp32 and int8.

The float NHWC compute is :func:`toolchain.topi.nn.conv2d.conv2d_nhwc` (NHWC data, HWIO
kernel); this module adds what a graph in NHWC needs around it:

* :func:`oihw_to_hwio` — ONNX's ``[M, C/g, KH, KW]`` weights as the ``[KH, KW, C/g, M]``
  the NHWC compute reads (a compile-time pack of a constant);
* :func:`conv2d_nhwc_oihw` — fp32 NHWC convolution (grouped and depthwise included) over
  HWIO-packed weights, with an optional bias;
* :func:`qconv2d_nhwc` — the integer QConv of :mod:`toolchain.topi.int8` in NHWC: the same
  zero-point shift, int32 accumulation and per-channel requantization (channel axis 3), so
  its integers equal :func:`toolchain.topi.int8.qconv2d_nchw` transposed.

Example::

    >>> import numpy as np
    >>> from toolchain import te
    >>> x = te.placeholder((1, 5, 5, 8), name="x")
    >>> w = te.placeholder(oihw_to_hwio(np.zeros((4, 8, 3, 3), np.float32)).shape, name="w")
    >>> y = conv2d_nhwc_oihw(x, w, strides=(1, 1), pads=(1, 1, 1, 1))
    >>> [int(d.value) for d in y.shape]
    [1, 5, 5, 4]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.topi.int8 import finish_te, shifted
from toolchain.topi.nn.conv2d import conv2d_nhwc, pad_spatial


def oihw_to_hwio(w: np.ndarray) -> np.ndarray:
    """``[M, C/g, KH, KW]`` -> ``[KH, KW, C/g, M]`` (contiguous).

    >>> oihw_to_hwio(np.zeros((6, 2, 3, 1))).shape
    (3, 1, 2, 6)
    """
    return np.ascontiguousarray(np.asarray(w).transpose(2, 3, 1, 0))


def conv2d_nhwc_oihw(x: te.Tensor, w_hwio: te.Tensor, *, strides: tuple[int, int] = (1, 1),
                     pads: tuple[int, int, int, int] = (0, 0, 0, 0),
                     dilations: tuple[int, int] = (1, 1), group: int = 1,
                     bias: te.Tensor | None = None) -> te.Tensor:
    """fp32 NHWC convolution of ``x`` with :func:`oihw_to_hwio`-packed weights; ``pads`` in
    ONNX order ``(top, left, bottom, right)``; ``+ bias[m]`` when given."""
    pt, pl, pb, pr = pads
    y = conv2d_nhwc(x, w_hwio, tuple(strides), (pt, pl, pb, pr), tuple(dilations), group)
    if bias is None:
        return y
    return te.compute(y.shape, lambda n, h, w, m: y[n, h, w, m] + bias[m], name="bias_add",
                      tag="injective")


def qconv2d_nhwc(x: te.Tensor, w_hwio: te.Tensor, bias: te.Tensor, mult: te.Tensor,
                 shifts: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer NHWC QConv (attributes as :func:`toolchain.topi.int8.qconv2d_nchw`):
    ``x - x_zp`` in int16 (zero padding = padding with the zero point), int32 accumulation
    over HWIO int8 weights, requantization per output channel (axis 3)."""
    pt, pl, pb, pr = attrs["pads"]
    xs = pad_spatial(shifted(x, attrs["x_zero_point"]), (1, 2), (pt, pl), (pb, pr))
    acc = conv2d_nhwc(xs, w_hwio, tuple(attrs["strides"]), 0, tuple(attrs["dilations"]),
                      int(attrs["group"]), out_dtype="int32")

    def f(n: Any, h: Any, w: Any, m: Any) -> Any:
        total = te.cast(acc[n, h, w, m], "int64") + te.cast(bias[m], "int64")
        return finish_te(total, mult[m], shifts[m, 0], shifts[m, 1], attrs)

    return te.compute(acc.shape, f, name="qconv_nhwc", tag="injective")
