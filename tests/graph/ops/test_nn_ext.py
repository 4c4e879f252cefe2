"""LRN, LpNormalization, LpPool: references against onnxruntime, dtypes, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer, make_node
from toolchain.errors import ModelError
from toolchain.graph.ops import PatternKind, get_op


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_onnxruntime(size):
    # onnxruntime: odd sizes and float32 only (onnx.reference's LRN loops over the batch
    # axis instead of the channels, so it is no second opinion)
    check_vs_ort("LRN", [data("float32", (2, 5, 3, 4))],
                 {"size": size, "alpha": 0.3, "beta": 0.6, "bias": 1.5}, rtol=1e-6,
                 opset=13)


def test_lrn_even_size_follows_the_spec():
    x = data("float64", (1, 5, 2, 2))
    y = get_op("LRN").reference([x], {"size": 4, "alpha": 0.4, "beta": 0.5, "bias": 2.0})[0]
    for c in range(5):  # channels [c - 1, c + 2] clipped (floor(3/2) = 1, ceil(3/2) = 2)
        s = (x[:, max(0, c - 1):min(5, c + 3)] ** 2).sum(axis=1)
        np.testing.assert_allclose(y[:, c], x[:, c] / (2.0 + 0.1 * s) ** 0.5, rtol=1e-14)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_matches_onnxruntime(axis, p):
    check_vs_ort("LpNormalization", [data("float32", (3, 4, 5))], {"axis": axis, "p": p},
                 rtol=1e-6, atol=1e-7)


def test_lp_normalization_of_zero_is_zero():
    y = get_op("LpNormalization").reference([np.zeros((2, 3), np.float32)], {})[0]
    assert y.tolist() == [[0.0] * 3] * 2


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 1, 2], "p": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "p": 3},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "dilations": [2, 2]},
    {"kernel_shape": [3], "strides": [2]},
])
def test_lp_pool_matches_onnxruntime(attrs):
    shape = (1, 2, 9) if len(attrs["kernel_shape"]) == 1 else (1, 2, 7, 6)
    check_vs_ort("LpPool", [data("float32", shape)], attrs, rtol=1e-5, opset=18)


def test_patterns_dtypes_and_errors():
    assert get_op("LRN").pattern is PatternKind.OPAQUE
    assert get_op("LpPool").pattern is PatternKind.COMPLEX_OUT_FUSABLE
    with pytest.raises(ModelError, match=r"node 'n' \(LRN\): .*'size' is required"):
        get_op("LRN").infer(make_node("LRN", [data("float32", (1, 2, 3))]))
    with pytest.raises(ModelError, match=r"node 'n' \(LpNormalization\): .*'p' = 3 is not one "
                                         "of 1, 2"):
        infer("LpNormalization", [data("float32")], {"p": 3})
    with pytest.raises(ModelError, match=r"node 'n' \(LpPool\): .*int32"):
        infer("LpPool", [data("int32", (1, 1, 4, 4))], {"kernel_shape": [2, 2]})
    with pytest.raises(ModelError, match=r"node 'n' \(LpPool\): X \[1, 1, 4\] must have rank 4"):
        infer("LpPool", [data("float32", (1, 1, 4))], {"kernel_shape": [2, 2]})


@pytest.mark.parametrize("equation, shapes", [
    ("ij->ji", [(3, 4)]), ("...ii ->...i", [(3, 5, 5)]), ("i,i", [(5,), (5,)]),
    ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("ij,jk", [(3, 4), (4, 2)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 2), (2, 3)]),
])
def test_einsum_matches_onnxruntime(equation, shapes):
    ins = [data("float32", s, seed=k) for k, s in enumerate(shapes)]
    check_vs_ort("Einsum", ins, {"equation": equation}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation, shapes, match", [
    ("ij,jk->ik", [(3, 4), (5, 2)], "subscript 'j' has extents 4 and 5"),
    ("ij->ik", [(3, 4)], "output subscripts 'ik' must be distinct letters of the inputs"),
    ("ijk->i", [(3, 4)], "equation term 'ijk' does not match an operand of shape \\[3, 4\\]"),
    ("ij,j->i", [(3, 4)], "equation 'ij,j->i' names 2 operands, but 1 are given"),
])
def test_einsum_errors_name_the_node(equation, shapes, match):
    with pytest.raises(ModelError, match=rf"node 'n' \(Einsum\): {match}"):
        infer("Einsum", [data("float32", s) for s in shapes], {"equation": equation})


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_onnxruntime(mode, padding_mode, align_corners):
    x = data("float32", (2, 3, 4, 5))
    grid = (data("float32", (2, 3, 6, 2), seed=1) / 2).astype(np.float32)  # partly outside
    attrs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    # cubic + border: onnxruntime (as PyTorch) clamps each cubic tap, not the coordinate,
    # and Kiln follows them (ONNX's reference implementation clamps the coordinate first)
    check_vs_ort("GridSample", [x, grid], attrs, rtol=1e-5, atol=1e-5, opset=20)


def test_grid_sample_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(GridSample\): mode 'cubic' is defined for "
                                         "2-D inputs only"):
        infer("GridSample", [data("float32", (1, 1, 2, 2, 2)), data("float32", (1, 1, 1, 1, 3))],
              {"mode": "cubic"})
    with pytest.raises(ModelError, match=r"node 'n' \(GridSample\): X \[1, 1, 2, 2\] .* got "
                                         r"\[1, 3, 3, 3\]"):
        infer("GridSample", [data("float32", (1, 1, 2, 2)), data("float32", (1, 3, 3, 3))])



@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 2, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_matches_onnxruntime(size, align_corners):
    r = len(size) - 2
    theta = data("float32", (size[0], r, r + 1))
    check_vs_ort("AffineGrid", [theta, np.array(size, np.int64)],
                 {"align_corners": align_corners}, const=[1], rtol=1e-5, atol=1e-6, opset=20)



@pytest.mark.parametrize("image, block, attrs", [
    ((5, 5), (1, 5), {}), ((5, 5), (3, 3), {"strides": [2, 2]}),
    ((5, 5), (1, 5), {"pads": [0, 1, 0, 1]}), ((6, 6), (2, 2), {"dilations": [1, 3]}),
])
def test_col2im_matches_onnxruntime(image, block, attrs):
    st, dl = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pd = attrs.get("pads", [0] * 4)
    pos = [(image[d] + pd[d] + pd[2 + d] - (dl[d] * (block[d] - 1) + 1)) // st[d] + 1
           for d in range(2)]
    x = data("float32", (2, 3 * int(np.prod(block)), int(np.prod(pos))))
    check_vs_ort("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)], attrs,
                 const=[1, 2], rtol=1e-5, atol=1e-6, opset=18)


def test_col2im_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(Col2Im\): input \[1, 5, 4\] must be "
                                         r"\[N, C·5, 5\]"):
        infer("Col2Im", [data("float32", (1, 5, 4)), np.array([5, 5], np.int64),
                         np.array([1, 5], np.int64)], const=[1, 2])
