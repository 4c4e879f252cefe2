"""Neural-network compute definitions: convolution (direct, Winograd, transposed), dense /
matmul, pooling, softmax and normalisations (LRN, LpNormalization, LpPool: ``norm_ext``)."""

from toolchain.topi.nn import (
    conv2d,
    conv2d_transpose,
    conv_nd,
    dense,
    einsum,
    grid_sample,
    norm,
    norm_ext,
    pooling,
    softmax,
    winograd,
)

__all__ = ["conv2d", "conv2d_transpose", "conv_nd", "dense", "einsum", "grid_sample", "norm",
           "norm_ext", "pooling", "softmax", "winograd"]
