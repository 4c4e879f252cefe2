"""Data movement and layout transforms vs the op registry's numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand, run_te
from toolchain import te
from toolchain.topi import transform

I64 = np.int64


@pytest.mark.parametrize("shape,spec", [((2, 3, 4), [4, -1]), ((2, 3, 4), [0, 12]),
                                        ((6,), [2, 1, 3]), ((1, 5), [5])])
def test_reshape(shape: tuple, spec: list) -> None:
    check_node("Reshape", [rand(*shape), np.array(spec, I64)], const=(1,))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis: int) -> None:
    check_node("Flatten", [rand(2, 3, 5)], {"axis": axis})


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 0, 1), None])
def test_transpose(perm: tuple | None) -> None:
    check_node("Transpose", [rand(2, 3, 5)], {} if perm is None else {"perm": perm})


def test_squeeze_unsqueeze() -> None:
    check_node("Squeeze", [rand(1, 3, 1, 5), np.array([0, 2], I64)], const=(1,))
    check_node("Squeeze", [rand(1, 3, 1, 5), None])
    check_node("Unsqueeze", [rand(3, 5), np.array([0, -1], I64)], const=(1,))
    check_node("Squeeze", [rand(1, 1), None])  # to rank 0
    t = transform.squeeze(te.placeholder((1, 4, 1), name="x"))
    assert [d.value for d in t.shape] == [4]


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis: int) -> None:
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for k, s in enumerate(shapes):
        s[axis] = k + 1
    check_node("Concat", [rand(*s, seed=k) for k, s in enumerate(shapes)], {"axis": axis})


def test_concat_with_empty_input() -> None:
    check_node("Concat", [rand(2, 0), rand(2, 3), rand(2, 1, seed=3)], {"axis": 1})


@pytest.mark.parametrize("split,num,axis,n_out", [([2, 3, 2], None, 1, 3), (None, 3, 1, 3),
                                                  (None, 2, 0, 2), ([1, 4], None, -1, 2)])
def test_split(split: list | None, num: int | None, axis: int, n_out: int) -> None:
    x = rand(4, 7, 5)
    attrs = {"axis": axis} | ({"num_outputs": num} if num else {})
    s = None if split is None else np.array(split, I64)
    check_node("Split", [x, s], attrs, const=(1,), n_out=n_out)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [4], [1], None), ([0, 1], [10, 100], [0, 2], [2, 3]), ([-1], [-2**63], [1], [-2]),
    ([5], [0], [2], [-1]), ([-3, 0], [-1, 2], None, None), ([2], [2], [0], [1]),
])
def test_slice(starts: list, ends: list, axes: list | None, steps: list | None) -> None:
    x = rand(5, 6, 7)
    ins = [x, np.array(starts, I64), np.array(ends, I64),
           None if axes is None else np.array(axes, I64),
           None if steps is None else np.array(steps, I64)]
    while ins[-1] is None:
        ins.pop()
    check_node("Slice", ins, const=(1, 2, 3, 4))


@pytest.mark.parametrize("axis,idx", [(0, [[0, 2], [-1, 1]]), (1, [3, -2, 0]), (2, [1])])
def test_gather(axis: int, idx: list) -> None:
    check_node("Gather", [rand(3, 4, 5), np.array(idx, I64)], {"axis": axis})
    check_node("Gather", [rand(3, 4, 5), np.array(idx, np.int32)], {"axis": axis}, const=(1,))


def test_gather_scalar_index() -> None:
    check_node("Gather", [rand(3, 4), np.array(2, I64)], {"axis": 1})


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads", [[1, 0, 2, 2, 1, 0], [0, 2, 1, 1, 0, 2], [-1, 1, 0, 1, -2, 1]])
def test_pad(mode: str, pads: list) -> None:
    x = rand(3, 4, 5)
    val = np.array(1.5, np.float32) if mode == "constant" else None
    check_node("Pad", [x, np.array(pads, I64), val], {"mode": mode}, const=(1, 2))


def test_pad_axes_and_runtime_value() -> None:
    check_node("Pad", [rand(3, 4), np.array([1, 2], I64), np.array(-7.0, np.float32),
                       np.array([-1], I64)], const=(1, 3))


def test_pad_wrap_larger_than_axis() -> None:
    check_node("Pad", [rand(2, 3), np.array([0, 5, 0, 4], I64)], {"mode": "wrap"}, const=(1,))


@pytest.mark.parametrize("shape,target", [((3, 1), [2, 3, 4]), ((4,), [2, 1, 1]),
                                          ((2, 1, 3), [1])])
def test_expand(shape: tuple, target: list) -> None:
    check_node("Expand", [rand(*shape), np.array(target, I64)], const=(1,))


@pytest.mark.parametrize("reps", [[2, 3], [1, 1], [3, 1]])
def test_tile(reps: list) -> None:
    check_node("Tile", [rand(2, 3), np.array(reps, I64)], const=(1,))
    check_node("Tile", [rand(1, 3), np.array(reps, I64)], const=(1,))


@pytest.mark.parametrize("mode,ctm,nearest", [
    ("nearest", "half_pixel", "round_prefer_floor"), ("nearest", "asymmetric", "floor"),
    ("nearest", "align_corners", "round_prefer_ceil"), ("nearest", "tf_half_pixel_for_nn", "ceil"),
    ("linear", "half_pixel", "round_prefer_floor"), ("linear", "align_corners", "floor"),
    ("linear", "pytorch_half_pixel", "floor"), ("linear", "asymmetric", "floor"),
    ("linear", "half_pixel_symmetric", "floor"),
])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.6, 1.7]])
def test_resize_scales(mode: str, ctm: str, nearest: str, scales: list) -> None:
    x = rand(1, 2, 5, 4)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest}
    check_node("Resize", [x, None, np.array(scales, np.float32)], attrs, const=(2,),
               rtol=1e-5, atol=1e-6)


def test_resize_sizes_axes_and_int() -> None:
    check_node("Resize", [rand(1, 2, 5, 4), None, None, np.array([7, 3], I64)],
               {"mode": "linear", "axes": (2, 3)}, const=(3,))
    x = rand(1, 1, 4, 4, dtype="uint8", lo=0, hi=255)
    check_node("Resize", [x, None, np.array([1, 1, 1.5, 0.75], np.float32)], {"mode": "linear"},
               const=(2,))


@pytest.mark.parametrize("attrs", [
    {"mode": "cubic"}, {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "exclude_outside": 1},
])
def test_resize_cubic_and_exclude_outside(attrs: dict) -> None:
    check_node("Resize", [rand(1, 2, 5, 4), None, np.array([1, 1, 1.6, 0.75], np.float32)],
               attrs, const=(2,), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode: str) -> None:
    roi = np.array([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3], np.float32)
    check_node("Resize", [rand(1, 1, 5, 4), roi, None, np.array([1, 1, 6, 5], I64)],
               {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                "extrapolation_value": -9.0}, const=(1, 3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c,blk", [(8, 4), (6, 4), (3, 8)])
def test_layout_transform_roundtrip(c: int, blk: int) -> None:
    x = te.placeholder((2, c, 3, 5), name="x")
    xv = rand(2, c, 3, 5)
    blocked = transform.layout_transform(x, "NCHW", f"NCHW{blk}c")
    back = transform.layout_transform(blocked, f"NCHW{blk}c", "NCHW", channels=c)
    nhwc = transform.layout_transform(blocked, f"NCHW{blk}c", "NHWC", channels=c)
    nchw2 = transform.layout_transform(nhwc, "NHWC", "NCHW")
    got_b, got_back, got_nhwc, got2 = run_te([x], [blocked, back, nhwc, nchw2], [xv])
    cb = -(-c // blk)
    pad = np.zeros((2, cb * blk, 3, 5), np.float32)
    pad[:, :c] = xv
    np.testing.assert_array_equal(got_b, pad.reshape(2, cb, blk, 3, 5).transpose(0, 1, 3, 4, 2))
    np.testing.assert_array_equal(got_back, xv)
    np.testing.assert_array_equal(got_nhwc, xv.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(got2, xv)


def test_kernel_layout_transform_matches_numpy_packing() -> None:
    w = te.placeholder((6, 5, 3, 3), name="w")
    wv = rand(6, 5, 3, 3)
    (got,) = run_te([w], [transform.kernel_layout_transform(w, 4, 4)], [wv])
    np.testing.assert_array_equal(got, transform.pack_kernel_nchwc(wv, 4, 4))
    assert got.shape == (2, 2, 3, 3, 4, 4)
    np.testing.assert_array_equal(got[1, 0, :, :, 2, 1], wv[5, 2])


def test_shape_and_constant_of_shape() -> None:
    check_node("Shape", [rand(2, 3, 4)], {"start": 1})
    check_node("ConstantOfShape", [np.array([2, 3], I64)],
               {"value": np.array([7], np.int32)}, const=(0,))
