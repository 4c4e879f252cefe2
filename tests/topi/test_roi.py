"""MaxRoiPool compute vs the registry's reference: bins of several sizes, boxes reaching
outside the image, empty bins, a scale that lands on halves."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand

BOXES = np.array([[0, 0.0, 0.0, 7.0, 7.0], [1, 1.5, 2.0, 5.5, 3.0], [1, -3.0, -2.0, 4.0, 11.0],
                  [0, 6.0, 6.5, 9.5, 12.0], [1, 2.0, 2.0, 2.2, 2.1], [0, 7.4, 8.6, 12, 14]],
                 np.float32)


@pytest.mark.parametrize("pooled, scale", [((2, 2), 1.0), ((3, 2), 0.5), ((4, 5), 1.25)])
def test_max_roi_pool(pooled, scale):
    check_node("MaxRoiPool", [rand(2, 3, 9, 8), BOXES], {"pooled_shape": pooled,
                                                         "spatial_scale": scale})
