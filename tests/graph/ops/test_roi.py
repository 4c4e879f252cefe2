"""RoiAlign and MaxRoiPool: references against onnxruntime (both modes, both coordinate
modes, adaptive and fixed sampling grids, boxes reaching outside the image, halves rounded
away from zero), errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError

ROIS = np.array([[0.0, 0.0, 7.0, 7.0], [1.5, 2.0, 5.5, 3.0], [-3.0, -2.0, 4.0, 11.0],
                 [6.0, 6.5, 9.5, 12.0], [2.0, 2.0, 2.2, 2.1]], np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coords", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio, scale", [(2, 1.0), (0, 0.5), (3, 1.25)])
def test_roi_align_matches_onnxruntime(mode, coords, ratio, scale):
    x = data("float32", (2, 3, 9, 8))
    attrs = {"mode": mode, "coordinate_transformation_mode": coords, "output_height": 3,
             "output_width": 2, "sampling_ratio": ratio, "spatial_scale": scale}
    check_vs_ort("RoiAlign", [x, ROIS, np.array([0, 1, 1, 0, 1])], attrs, rtol=1e-5,
                 atol=1e-5, opset=16)


def test_roi_align_errors():
    x = data("float32", (1, 2, 5, 5))
    with pytest.raises(ModelError, match=r"node 'n' \(RoiAlign\): input rois \[2, 5\] must be "
                                         r"\[num_rois, 4\]"):
        infer("RoiAlign", [x, data("float32", (2, 5)), np.array([0, 0])])
    with pytest.raises(ModelError, match=r"node 'n' \(RoiAlign\): input batch_indices \[3\] "
                                         r"must be \[2\]"):
        infer("RoiAlign", [x, data("float32", (2, 4)), np.array([0, 0, 0])])


BOXES = np.array([[0, 0.0, 0.0, 7.0, 7.0], [1, 1.5, 2.0, 5.5, 3.0], [1, -3.0, -2.0, 4.0, 11.0],
                  [0, 6.0, 6.5, 9.5, 12.0], [1, 2.0, 2.0, 2.2, 2.1], [0, 7.4, 8.6, 12, 14]],
                 np.float32)


@pytest.mark.parametrize("pooled, scale", [((2, 2), 1.0), ((3, 2), 0.5), ((4, 5), 1.25)])
def test_max_roi_pool_matches_onnxruntime(pooled, scale):
    x = data("float32", (2, 3, 9, 8))
    check_vs_ort("MaxRoiPool", [x, BOXES], {"pooled_shape": pooled, "spatial_scale": scale},
                 opset=16)


def test_max_roi_pool_errors():
    x = data("float32", (1, 2, 5, 5))
    with pytest.raises(ModelError, match=r"node 'n' \(MaxRoiPool\): input rois \[2, 4\] must be "
                                         r"\[num_rois, 5\]"):
        infer("MaxRoiPool", [x, data("float32", (2, 4))], {"pooled_shape": (2, 2)})
    with pytest.raises(ModelError, match=r"pooled_shape \[2\] must have 2 values"):
        infer("MaxRoiPool", [x, data("float32", (2, 5))], {"pooled_shape": (2,)})
