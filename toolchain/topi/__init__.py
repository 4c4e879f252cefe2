"""The operator inventory: tensor-expression compute definitions for every op of the
foundation op set, and the graph-op → compute mapping (:mod:`toolchain.topi.registry`).

Modules by family: :mod:`.elemwise`, :mod:`.reduction`, :mod:`.transform`,
:mod:`.nn.conv2d` (NCHW / NHWC / NCHW[x]c, grouped, depthwise), :mod:`.nn.winograd`,
:mod:`.nn.conv2d_transpose`, :mod:`.nn.dense`, :mod:`.nn.pooling`, :mod:`.nn.softmax`,
:mod:`.nn.norm`. ``docs/topi.md`` lists every op and its function.

Build and run one op::

    >>> import numpy as np
    >>> from toolchain import te, topi
    >>> from toolchain.tir.interpreter import run
    >>> x = te.placeholder((1, 2, 4, 4), name="x"); w = te.placeholder((3, 2, 3, 3), name="w")
    >>> y = topi.nn.conv2d.conv2d_nchw(x, w, stride=1, padding=1)
    >>> f = te.create_prim_func([x, w, y])
    >>> out = np.zeros((1, 3, 4, 4), np.float32)
    >>> run(f, np.ones((1, 2, 4, 4), np.float32), np.ones((3, 2, 3, 3), np.float32), out)
    >>> float(out[0, 0, 1, 1]), float(out[0, 0, 0, 0])
    (18.0, 8.0)
"""

from toolchain.topi import elemwise, nn, reduction, transform
from toolchain.topi.nn import conv2d, conv2d_transpose, dense, norm, pooling, softmax, winograd

__all__ = ["conv2d", "conv2d_transpose", "dense", "elemwise", "nn", "norm", "pooling",
           "reduction", "softmax", "transform", "winograd"]
