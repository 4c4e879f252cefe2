"""Data-movement ops against onnxruntime (Resize also against the ONNX reference evaluator,
whose float64 coordinate arithmetic is what the ONNX node tests were generated with)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from toolchain.graph.ops import get_op

from ._helpers import check_op, rand


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def f32(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


X = rand(2, 3, 4, 5)


@pytest.mark.parametrize("shape,allowzero", [
    (i64(0, -1, 5), 0), (i64(2, 0, -1), 0), (i64(-1), 0), (i64(6, 20), 1), (i64(2, 3, 4, 5), 1),
])
def test_reshape(shape, allowzero):
    check_op("Reshape", [X, shape], dict(allowzero=allowzero), const=[1])


def test_reshape_allowzero_keeps_zero():
    check_op("Reshape", [np.zeros((0, 3), np.float32), i64(3, 0)], dict(allowzero=1), const=[1])


@pytest.mark.parametrize("axis", [0, 1, 2, 4, -1, -4])
def test_flatten(axis):
    check_op("Flatten", [X], dict(axis=axis))


@pytest.mark.parametrize("perm", [None, [0, 2, 3, 1], [3, 1, 0, 2]])
def test_transpose(perm):
    check_op("Transpose", [X], {} if perm is None else dict(perm=perm))


@pytest.mark.parametrize("axis", [0, -2, 3])
def test_concat(axis):
    parts = []
    for i, n in enumerate((1, 2, 3)):
        shape = list(X.shape)
        shape[axis] = n
        parts.append(rand(*shape, seed=i))
    check_op("Concat", parts, dict(axis=axis))


def test_concat_int64():
    check_op("Concat", [i64(1, 2), i64(3)], dict(axis=0))


@pytest.mark.parametrize("split,axis,n", [
    (i64(1, 3, 1), 3, 3), (i64(2, 0, 2), 2, 3), (i64(3), 1, 1),
])
def test_split_sizes(split, axis, n):
    check_op("Split", [X, split], dict(axis=axis), const=[1], n_out=n)


@pytest.mark.parametrize("length,n", [(7, 3), (6, 3), (5, 1)])
def test_split_num_outputs(length, n):
    check_op("Split", [rand(length, 2)], dict(num_outputs=n), n_out=n, opset=18)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    (i64(-1, 10), i64(-2**63, -10**9), i64(1, 2), i64(-1, -2)),
    (i64(1, 0), i64(2**63 - 1, 3), i64(-1, 0), i64(2, 1)),
    (i64(1), i64(3), None, None),
    (i64(3, -7), i64(1, 100), i64(3, 2), i64(-1, 3)),
    (i64(2), i64(2), i64(0), None),
    (i64(0, 0, 0, 0), i64(1, 2, 3, 4), None, i64(1, 1, 2, 3)),
])
def test_slice(starts, ends, axes, steps):
    check_op("Slice", [X, starts, ends, axes, steps], const=[1, 2, 3, 4])


def test_squeeze_unsqueeze():
    y = rand(1, 3, 1, 2)
    check_op("Squeeze", [y, i64(-2)], const=[1])
    check_op("Squeeze", [y, i64(0, 2)], const=[1])
    check_op("Squeeze", [y])
    check_op("Unsqueeze", [rand(3, 2), i64(0, -1, 2)], const=[1])
    check_op("Unsqueeze", [np.array(3.0, np.float32), i64(0)], const=[1])


@pytest.mark.parametrize("indices,axis", [
    (np.array([[0, -1], [2, 1]], np.int64), 1), (np.array(-2, np.int32), -1),
    (np.array([1, 0, 1], np.int64), 0), (np.array([[3]], np.int32), 2),
])
def test_gather(indices, axis):
    check_op("Gather", [X, indices], dict(axis=axis))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode):
    check_op("Pad", [X, i64(1, 0, 2, 3, 0, 2, 1, 4)], dict(mode=mode), const=[1])
    check_op("Pad", [X, i64(1, -1, 2, -2), None, i64(1, 3)], dict(mode=mode), const=[1, 3])
    check_op("Pad", [X, i64(0, 0, -1, 1, 0, 0, 2, -2)], dict(mode=mode), const=[1])


def test_pad_constant_value_and_ints():
    check_op("Pad", [X, i64(1, 0, 2, 3, 0, 2, 1, 4), f32(2.5)], dict(mode="constant"),
             const=[1])
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    check_op("Pad", [ints, i64(1, 2, 0, 1), np.array(-7, np.int32)], const=[1])


def test_expand_and_tile():
    check_op("Expand", [rand(3, 1), i64(2, 1, 4)], const=[1])
    check_op("Expand", [rand(2, 3, 1), i64(3, 1)], const=[1])
    check_op("Tile", [rand(2, 3), i64(2, 3)], const=[1])
    check_op("Tile", [rand(2, 1, 3), i64(1, 4, 0)], const=[1])


# -- Resize ------------------------------------------------------------------------------------

CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
        "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
IMG = rand(1, 2, 5, 7)


@pytest.mark.parametrize("ctm,nearest_mode", list(itertools.product(
    CTMS + ["tf_half_pixel_for_nn"], NEAREST)))
@pytest.mark.parametrize("sizes", [i64(1, 2, 9, 4), i64(1, 2, 10, 21), i64(1, 2, 2, 4)])
def test_resize_nearest_sizes(ctm, nearest_mode, sizes):
    check_op("Resize", [IMG, None, None, sizes],
             dict(mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nearest_mode),
             const=[3])


@pytest.mark.parametrize("mode,ctm", list(itertools.product(["linear", "cubic"], CTMS)))
@pytest.mark.parametrize("sizes", [i64(1, 2, 9, 4), i64(1, 2, 10, 21), i64(1, 2, 3, 3)])
def test_resize_linear_cubic_sizes(mode, ctm, sizes):
    check_op("Resize", [IMG, None, None, sizes],
             dict(mode=mode, coordinate_transformation_mode=ctm), const=[3],
             rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [f32(1, 1, 2, 3), f32(1, 1, 0.5, 0.5), f32(1, 1, 3, 1)])
def test_resize_integer_scales(mode, scales):
    check_op("Resize", [IMG, None, scales], dict(mode=mode), const=[2], rtol=1e-4, atol=1e-5)


def test_resize_cubic_exclude_outside_and_coefficient():
    check_op("Resize", [IMG, None, None, i64(1, 2, 8, 11)],
             dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5), const=[3],
             rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode):
    check_op("Resize", [IMG, f32(0, 0, 0.1, 0.2, 1, 1, 0.9, 1.3), None, i64(1, 2, 6, 8)],
             dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                  extrapolation_value=-3.0), const=[1, 3], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_keep_aspect_ratio_with_axes(policy, mode):
    check_op("Resize", [IMG, None, None, i64(9, 11)],
             dict(mode=mode, axes=[2, 3], keep_aspect_ratio_policy=policy), const=[3],
             rtol=1e-4, atol=1e-5)


def test_resize_nearest_any_rank_and_integer_dtypes():
    check_op("Resize", [rand(2, 3, 4, 5, 6), None, f32(1, 2, 0.5, 3, 1)], dict(mode="nearest"),
             const=[2])
    check_op("Resize", [rand(6), None, f32(2.0)], dict(mode="nearest"), const=[2])
    img8 = (np.abs(IMG) * 50).astype(np.uint8)
    check_op("Resize", [img8, None, f32(1, 1, 2, 1.5)], dict(mode="nearest"), const=[2])
    # integer results: Kiln rounds to nearest like the ONNX reference, onnxruntime truncates
    check_op("Resize", [img8, None, None, i64(1, 2, 10, 14)],
             dict(mode="linear", coordinate_transformation_mode="asymmetric"), const=[3],
             atol=1.0)


def _onnx_reference(inputs, attrs):
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    feeds = {n: a for n, a in zip(names, inputs, strict=True) if a is not None}
    node = helper.make_node("Resize", names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("mode,ctm", list(itertools.product(["nearest", "linear", "cubic"],
                                                            CTMS)))
@pytest.mark.parametrize("scales", [f32(1, 1, 0.6, 0.5), f32(1, 1, 1.7, 2.3)])
def test_resize_fractional_scales_match_onnx_reference(mode, ctm, scales):
    # onnxruntime computes these coordinates in float32 and, for align_corners, divides by
    # the integer output length; the ONNX spec/reference use the real-valued one
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    if mode == "nearest" and ctm != "align_corners":
        # nearest with scales picks its cells in float32 arithmetic, as onnxruntime and
        # PyTorch do (resize_coord_dtype); in float64 the ONNX reference rounds some
        # coordinates (8.5 / 1.7000000477 = 4.99999986) to the cell below
        check_op("Resize", [IMG, None, scales], attrs, const=[2])
        return
    if ctm == "half_pixel_symmetric" and scales[3] == 0.5:
        # here a source coordinate is 1 + 2e-16; the ONNX reference loses that in its padded
        # neighbour search and reads pixel 0, onnxruntime and Kiln read pixel 1
        check_op("Resize", [IMG, None, scales], attrs, const=[2], rtol=1e-4, atol=1e-5)
        return
    expected = _onnx_reference([IMG, None, scales], attrs)
    (got,) = get_op("Resize").reference([IMG, None, scales], attrs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
