"""LRN, LpNormalization and LpPool computes vs the registry's references."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn(size):
    check_node("LRN", [rand(2, 6, 3, 4)], {"size": size, "alpha": 0.3, "beta": 0.6,
                                           "bias": 1.5}, rtol=2e-6)


def test_lrn_float16_and_3d():
    check_node("LRN", [rand(1, 4, 5, dtype="float16")], {"size": 3}, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization(axis, p):
    x = rand(3, 4, 5)
    x[1] = 0.0  # zero norms along axis 1 and -1 give 0
    check_node("LpNormalization", [x], {"axis": axis, "p": p}, rtol=2e-6)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 1, 2], "p": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "p": 3},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "dilations": [2, 1]},
])
def test_lp_pool(attrs):
    check_node("LpPool", [rand(1, 2, 7, 6)], attrs, rtol=2e-5)


def test_lp_pool_1d():
    check_node("LpPool", [rand(2, 3, 9)], {"kernel_shape": [3], "strides": [2]}, rtol=2e-6)


@pytest.mark.parametrize("equation, shapes", [
    ("ij->ji", [(3, 4)]), ("ij->i", [(3, 4)]), ("...ii->...i", [(3, 5, 5)]),
    ("i,i", [(5,), (5,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("->", [()]),
    ("ij,jk", [(3, 4), (4, 2)]), ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ii", [(4, 4)]), ("i,j->ij", [(3,), (4,)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 2), (2, 3)]),
])
def test_einsum(equation, shapes):
    ins = [rand(*s, seed=k) for k, s in enumerate(shapes)]
    check_node("Einsum", ins, {"equation": equation}, rtol=2e-6)


def test_einsum_integers_and_float16():
    a, b = rand(3, 4, dtype="int32", lo=-5, hi=5), rand(4, 2, dtype="int32", lo=-5, hi=5, seed=1)
    check_node("Einsum", [a, b], {"equation": "ij,jk->ik"})
    h = rand(3, 8, dtype="float16")
    check_node("Einsum", [h, h], {"equation": "ij,ij->i"}, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    x = rand(2, 3, 4, 5)
    grid = rand(2, 3, 6, 2, lo=-1.6, hi=1.6, seed=1)  # some positions outside the image
    grid[0, 0, :3] = [[-1.0, -1.0], [0.5, 0.25], [1.0, 1.0]]  # corners and exact taps
    check_node("GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode,
                                         "align_corners": align_corners}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
def test_grid_sample_3d(mode, padding_mode):
    x = rand(1, 2, 3, 4, 2)
    grid = rand(1, 2, 3, 2, 3, lo=-1.4, hi=1.4, seed=2)
    check_node("GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode},
               rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 2, 3, 4, 2), (1, 1, 1, 3)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid(size, align_corners):
    r = len(size) - 2
    theta = rand(size[0], r, r + 1, seed=3)
    check_node("AffineGrid", [theta, np.array(size, np.int64)],
               {"align_corners": align_corners}, const=(1,), rtol=1e-6, atol=1e-6)



@pytest.mark.parametrize("image, block, attrs", [
    ((5, 5), (1, 5), {}), ((5, 5), (3, 3), {"strides": [2, 2]}),
    ((5, 5), (1, 5), {"pads": [0, 1, 0, 1]}), ((6, 6), (2, 2), {"dilations": [1, 3]}),
    ((3, 4, 5), (1, 2, 2), {}),
])
def test_col2im(image, block, attrs):
    r = len(image)
    st, dl = attrs.get("strides", [1] * r), attrs.get("dilations", [1] * r)
    pd = attrs.get("pads", [0] * 2 * r)
    pos = [(image[d] + pd[d] + pd[r + d] - (dl[d] * (block[d] - 1) + 1)) // st[d] + 1
           for d in range(r)]
    x = rand(2, 3 * int(np.prod(block)), int(np.prod(pos)))
    check_node("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)], attrs,
               const=(1, 2), rtol=1e-5, atol=1e-6)
