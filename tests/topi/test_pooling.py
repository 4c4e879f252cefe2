"""Max pooling's padding: nearest-edge clamping where it gives the same maximum, ``-inf``
cells otherwise; both built to C (and interpreted) and compared with the op reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import BUILD, rand
from toolchain import te
from toolchain.graph.ops import get_op
from toolchain.topi.nn.pooling import pool


def _reference(x: np.ndarray, attrs: dict) -> np.ndarray:
    full = {"auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0, **attrs}
    return get_op("MaxPool").reference([x], full)[0]


def _pad_body(y: te.Tensor) -> str:
    (pad,) = y.op.input_tensors()
    return str(pad.op.body)


@pytest.mark.parametrize("shape, attrs", [
    ((1, 16, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [2, 0, 0, 1],
                    "ceil_mode": 1}),
    ((2, 4, 7, 7), {"kernel_shape": [2, 2], "strides": [3, 3], "pads": [1, 1, 1, 1],
                    "ceil_mode": 1}),
    # not clamped: dilated windows, pads as large as the kernel
    ((1, 4, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 5, 5), {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2]}),
])
def test_max_pool_padding_matches_reference(shape: tuple, attrs: dict) -> None:
    # all-negative inputs: a pad cell that wrongly counted as 0 would show
    x = -np.abs(rand(*shape, seed=3)) - 0.5
    xt = te.placeholder(shape, "float32", "x")
    k = attrs["kernel_shape"]
    y = pool(xt, "max", kernel=k, strides=attrs.get("strides"),
             dilations=attrs.get("dilations"), pads=attrs.get("pads"),
             ceil_mode=bool(attrs.get("ceil_mode", 0)))
    want = _reference(x, attrs)
    out = np.zeros(want.shape, np.float32)
    BUILD(te.create_prim_func([xt, y]), target="c")(x, out)
    np.testing.assert_array_equal(out, want)
    clamped = "dilations" not in attrs and all(
        p < kk for p, kk in zip(attrs["pads"], k + k, strict=True))
    # the clamped pad stage is a plain load (no guard, no -inf fill)
    assert ("if_then_else" in _pad_body(y)) == (not clamped), _pad_body(y)
