"""DeformConv: reference against onnxruntime (groups, offset groups, mask, bias, strides,
pads, dilations, samples outside the image), errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError


@pytest.mark.parametrize("group, offset_group, strides, pads, dilations, extras", [
    (1, 1, (1, 1), (0, 0, 0, 0), (1, 1), ()),
    (2, 2, (2, 1), (1, 0, 1, 2), (1, 2), ("B", "mask")),
    (1, 4, (1, 1), (1, 1, 1, 1), (2, 1), ("mask",)),
])
def test_deform_conv_matches_onnxruntime(group, offset_group, strides, pads, dilations,
                                         extras):
    rng = np.random.default_rng(4)
    x = data("float32", (2, 4, 7, 6))
    w = data("float32", (6, 4 // group, 3, 2))
    attrs = {"group": group, "offset_group": offset_group, "strides": strides, "pads": pads,
             "dilations": dilations}
    oh = (7 + pads[0] + pads[2] - 2 * dilations[0] - 1) // strides[0] + 1
    ow = (6 + pads[1] + pads[3] - dilations[1] - 1) // strides[1] + 1
    taps = offset_group * 6
    off = (rng.standard_normal((2, 2 * taps, oh, ow)) * 2).astype(np.float32)  # some outside
    ins = [x, w, off, data("float32", (6,)) if "B" in extras else None,
           rng.random((2, taps, oh, ow)).astype(np.float32) if "mask" in extras else None]
    while ins[-1] is None:
        ins.pop()
    check_vs_ort("DeformConv", ins, attrs, rtol=1e-4, atol=1e-5, opset=19)


def test_deform_conv_errors():
    x, w = data("float32", (1, 4, 5, 5)), data("float32", (2, 4, 3, 3))
    with pytest.raises(ModelError, match=r"node 'n' \(DeformConv\): input offset is "
                                         r"\[1, 16, 3, 3\], expected \[1, 18, 3, 3\]"):
        infer("DeformConv", [x, w, data("float32", (1, 16, 3, 3))])
    with pytest.raises(ModelError, match=r"node 'n' \(DeformConv\): 4 input channels do not "
                                         r"split into offset_group 3 groups"):
        infer("DeformConv", [x, w, data("float32", (1, 54, 3, 3))], {"offset_group": 3})
