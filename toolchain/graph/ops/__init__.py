"""The op registry (see :mod:`toolchain.graph.ops.registry`).

Importing this package registers every op.  Op modules group ops by family; each module
registers its ops at import time with :func:`~toolchain.graph.ops.registry.register`.
"""

import importlib as _importlib

from toolchain.graph.ops.registry import (  # noqa: F401
    REQUIRED,
    Attr,
    OpDef,
    PatternKind,
    all_ops,
    get_op,
    has_op,
    register,
)

# Each family module registers its ops on import.  A module missing from this checkout
# is skipped so that families can land one at a time.
_FAMILIES = (
    "elementwise",  # unary/binary math, activations, comparisons, logic, Where, Cast, Clip
    "reduce",       # ReduceMean/Sum/Max/Min, ArgMax
    "nn",           # Conv, ConvTranspose, MatMul, Gemm, pooling, normalisations, Softmax
    "transform",    # Reshape, Flatten, Transpose, Concat, Split, Slice, Gather, Pad, Resize …
    "misc",         # Constant, ConstantOfShape, Shape, Identity, Dropout
    "quant",        # QuantizeLinear, DequantizeLinear
    "qops",         # integer-only QConv, QGemm, QAdd, QAvgPool (from QDQ models)
)
for _family in _FAMILIES:
    try:
        _importlib.import_module(f"{__name__}.{_family}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"{__name__}.{_family}":
            raise
