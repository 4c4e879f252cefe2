"""Rare ops compiled into bundles for the host target (strict flags) and compared with
onnxruntime: BitCast (fused between float and integer math), STFT, Det, RoiAlign,
DeformConv, the window functions and MelWeightMatrix, GlobalLpPool, MaxUnpool,
TensorScatter, TfIdfVectorizer, MaxRoiPool."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import assert_matches, compile_run, run_ort
from toolchain.target import host_target

F = np.float32
N = helper.make_node


def _model(nodes, inputs, outputs, inits=(), opset=26):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _check(model, inputs, tmp_path, rtol=2e-5):
    _, got = compile_run(model, tmp_path, inputs, target=host_target())
    assert_matches(got, run_ort(model, inputs), rtol=rtol)


def test_bitcast_between_float_and_integer_math(tmp_path):
    """|x| by clearing the sign bit as an int32, and back; int8 -> uint8; float16 (stored as
    16 bits, computed in float32) to and from int16/uint16, bit-exact with NaN, inf, -0
    and a subnormal."""
    nodes = [N("Mul", ["x", "two"], ["x2"]),
             N("BitCast", ["x2"], ["bits"], to=TensorProto.INT32),
             N("BitwiseAnd", ["bits", "mask"], ["cleared"]),
             N("BitCast", ["cleared"], ["y"], to=TensorProto.FLOAT),
             N("BitCast", ["b"], ["u"], to=TensorProto.UINT8),
             N("Mul", ["h", "h2"], ["hh"]), N("BitCast", ["hh"], ["hb"], to=TensorProto.INT16),
             N("BitCast", ["h"], ["hu"], to=TensorProto.UINT16),
             N("BitCast", ["i"], ["hf"], to=TensorProto.FLOAT16), N("Add", ["hf", "hf"], ["hf2"])]
    m = _model(nodes, [("x", TensorProto.FLOAT, [3, 17]), ("b", TensorProto.INT8, [6]),
                       ("h", TensorProto.FLOAT16, [37]), ("i", TensorProto.INT16, [37])],
               [("y", TensorProto.FLOAT, [3, 17]), ("bits", TensorProto.INT32, [3, 17]),
                ("u", TensorProto.UINT8, [6]), ("hb", TensorProto.INT16, [37]),
                ("hu", TensorProto.UINT16, [37]), ("hf2", TensorProto.FLOAT16, [37])],
               [("two", np.array(2.0, F)), ("mask", np.array(0x7FFFFFFF, np.int32)),
                ("h2", np.array(2.0, np.float16))])
    rng = np.random.default_rng(0)
    h = rng.standard_normal(37).astype(np.float16)
    h[:4] = [np.inf, -0.0, np.nan, 6e-8]
    inputs = {"x": rng.standard_normal((3, 17)).astype(F),
              "b": np.array([-128, -1, 0, 1, 77, 127], np.int8), "h": h,
              "i": rng.integers(-30000, 30000, 37).astype(np.int16)}
    _, got = compile_run(m, tmp_path, inputs, target=host_target())
    for name, want in run_ort(m, inputs).items():  # bit-exact, NaN included
        assert got[name].dtype == want.dtype, name
        assert got[name].tobytes() == want.tobytes(), name


def test_stft_with_a_run_time_window_and_without(tmp_path):
    nodes = [N("STFT", ["x", "step", "w"], ["y"]),
             N("STFT", ["c", "step", "", "len"], ["z"], onesided=0)]
    m = _model(nodes, [("x", TensorProto.FLOAT, [2, 30, 1]), ("w", TensorProto.FLOAT, [8]),
                       ("c", TensorProto.FLOAT, [1, 17, 2])],
               [("y", TensorProto.FLOAT, [2, 8, 5, 2]), ("z", TensorProto.FLOAT, [1, 4, 6, 2])],
               [("step", np.array(3, np.int64)), ("len", np.array(6, np.int64))], opset=17)
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((2, 30, 1)).astype(F),
              "w": np.hanning(8).astype(F), "c": rng.standard_normal((1, 17, 2)).astype(F)}
    _check(m, inputs, tmp_path, rtol=1e-4)


def test_det_with_pivoting_and_singular_matrices(tmp_path):
    """Batches of 5x5 (one with a zero leading entry, one singular) and 1x1 against
    onnxruntime; a float64 3x3 against onnx.reference (onnxruntime has no float64 Det)."""
    from onnx.reference import ReferenceEvaluator

    nodes = [N("Det", ["x"], ["d"]), N("Det", ["one"], ["d1"])]
    m = _model(nodes, [("x", TensorProto.FLOAT, [2, 3, 5, 5]),
                       ("one", TensorProto.FLOAT, [4, 1, 1])],
               [("d", TensorProto.FLOAT, [2, 3]), ("d1", TensorProto.FLOAT, [4])], opset=22)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 5)).astype(F)
    x[0, 0, 0, 0] = 0.0
    x[1, 2, 4] = x[1, 2, 1] * 2  # singular
    _check(m, {"x": x, "one": rng.standard_normal((4, 1, 1)).astype(F)}, tmp_path / "f32",
           rtol=1e-4)
    m64 = _model([N("Det", ["x64"], ["d64"])], [("x64", TensorProto.DOUBLE, [3, 3])],
                 [("d64", TensorProto.DOUBLE, [])], opset=22)
    x64 = {"x64": rng.standard_normal((3, 3))}
    _, got = compile_run(m64, tmp_path / "f64", x64, target=host_target())
    want = ReferenceEvaluator(m64).run(None, x64)[0]
    np.testing.assert_allclose(got["d64"], want, rtol=1e-12)


def test_roi_align_both_modes_and_coordinate_modes(tmp_path):
    boxes = np.array([[0.0, 0.0, 7.0, 7.0], [1.5, 2.0, 5.5, 3.0], [-3.0, -2.0, 4.0, 11.0],
                      [6.0, 6.5, 9.5, 12.0]], F)
    nodes = [N("RoiAlign", ["x", "rois", "bi"], ["a"], output_height=3, output_width=2,
               sampling_ratio=2),
             N("RoiAlign", ["x", "rois", "bi"], ["m"], mode="max", output_height=2,
               output_width=4, sampling_ratio=3, spatial_scale=0.75,
               coordinate_transformation_mode="output_half_pixel")]
    m = _model(nodes, [("x", TensorProto.FLOAT, [2, 3, 9, 8]),
                       ("rois", TensorProto.FLOAT, [4, 4]), ("bi", TensorProto.INT64, [4])],
               [("a", TensorProto.FLOAT, [4, 3, 3, 2]), ("m", TensorProto.FLOAT, [4, 3, 2, 4])],
               opset=16)  # onnxruntime 1.32 has RoiAlign kernels up to opset 16
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 8)).astype(F)
    _check(m, {"x": x, "rois": boxes, "bi": np.array([0, 1, 1, 0])}, tmp_path, rtol=1e-4)


def test_deform_conv_grouped_with_mask_and_bias(tmp_path):
    rng = np.random.default_rng(5)
    nodes = [N("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], group=2, offset_group=2,
               strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2]),
             N("DeformConv", ["x", "w1", "off1"], ["z"])]
    m = _model(nodes, [("x", TensorProto.FLOAT, [2, 4, 7, 6]),
                       ("off", TensorProto.FLOAT, [2, 24, 4, 6]),
                       ("mask", TensorProto.FLOAT, [2, 12, 4, 6]),
                       ("off1", TensorProto.FLOAT, [2, 8, 6, 5])],
               [("y", TensorProto.FLOAT, [2, 6, 4, 6]), ("z", TensorProto.FLOAT, [2, 3, 6, 5])],
               [("w", rng.standard_normal((6, 2, 3, 2)).astype(F)),
                ("b", rng.standard_normal(6).astype(F)),
                ("w1", rng.standard_normal((3, 4, 2, 2)).astype(F))], opset=19)
    inputs = {"x": rng.standard_normal((2, 4, 7, 6)).astype(F),
              "off": (rng.standard_normal((2, 24, 4, 6)) * 2).astype(F),
              "mask": rng.random((2, 12, 4, 6)).astype(F),
              "off1": (rng.standard_normal((2, 8, 6, 5)) * 2).astype(F)}
    _check(m, inputs, tmp_path, rtol=1e-4)


def test_float16_forms_match_onnxruntime_and_onnx_reference(tmp_path):
    """Det, STFT, RoiAlign and DeformConv on float16 tensors (computed in float64 and
    rounded once) against onnxruntime and onnx.reference (for Det, which onnx.reference
    cannot run in float16, numpy's float64 determinant)."""
    from onnx.reference import ReferenceEvaluator

    H = np.float16
    rng = np.random.default_rng(6)
    nodes = [N("Det", ["m"], ["d"]), N("STFT", ["s", "step", "w"], ["f"]),
             N("RoiAlign", ["x", "rois", "bi"], ["r"], output_height=2, output_width=2,
               sampling_ratio=2),
             N("DeformConv", ["x", "k", "off"], ["c"])]
    m = _model(nodes, [("m", TensorProto.FLOAT16, [2, 3, 3]), ("s", TensorProto.FLOAT16,
                                                               [1, 16, 1]),
                       ("x", TensorProto.FLOAT16, [1, 2, 5, 5]),
                       ("rois", TensorProto.FLOAT16, [2, 4]),
                       ("off", TensorProto.FLOAT16, [1, 8, 4, 4])],
               [("d", TensorProto.FLOAT16, [2]), ("f", TensorProto.FLOAT16, [1, 3, 5, 2]),
                ("r", TensorProto.FLOAT16, [2, 2, 2, 2]),
                ("c", TensorProto.FLOAT16, [1, 3, 4, 4])],
               [("step", np.array(4, np.int64)), ("w", np.hanning(8).astype(H)),
                ("bi", np.array([0, 0], np.int64)),
                ("k", rng.standard_normal((3, 2, 2, 2)).astype(H))], opset=19)
    inputs = {"m": rng.standard_normal((2, 3, 3)).astype(H),
              "s": rng.standard_normal((1, 16, 1)).astype(H),
              "x": rng.standard_normal((1, 2, 5, 5)).astype(H),
              "rois": np.array([[0.5, 0.5, 3.5, 4.0], [1.0, 0.0, 4.5, 2.5]], H),
              "off": rng.standard_normal((1, 8, 4, 4)).astype(H)}
    _, got = compile_run(m, tmp_path, inputs, target=host_target())
    ort = run_ort(m, inputs)
    # onnx.reference's Det is numpy's, which refuses float16: the float64 determinant
    del m.graph.node[0], m.graph.output[0]
    want = dict(zip(["f", "r", "c"], ReferenceEvaluator(m).run(
        None, {k: v for k, v in inputs.items() if k != "m"}), strict=True))
    want["d"] = np.linalg.det(inputs["m"].astype(np.float64))
    for name, w in want.items():
        assert got[name].dtype == np.float16
        for ref in (w, ort[name]):
            np.testing.assert_allclose(got[name].astype(np.float32), ref.astype(np.float32),
                                       rtol=1e-2, atol=1e-2, err_msg=name)


def test_windows_fold_and_large_ones_compile(tmp_path):
    """A Hann window feeding STFT folds into a constant; a window and a mel filter bank
    too large to fold (over 65,536 elements) run their computes in the bundle."""
    nodes = [N("HannWindow", ["n8"], ["w"]), N("STFT", ["x", "step", "w"], ["s"]),
             N("BlackmanWindow", ["big"], ["bw"], periodic=0), N("Mul", ["v", "bw"], ["vb"]),
             N("MelWeightMatrix", ["mels", "dft", "rate", "lo", "hi"], ["mw"]),
             N("MatMul", ["spec", "mw"], ["mel"])]
    m = _model(nodes, [("x", TensorProto.FLOAT, [1, 24, 1]), ("v", TensorProto.FLOAT, [70000]),
                       ("spec", TensorProto.FLOAT, [3, 513])],
               [("s", TensorProto.FLOAT, [1, 5, 5, 2]), ("vb", TensorProto.FLOAT, [70000]),
                ("mel", TensorProto.FLOAT, [3, 128])],
               [("n8", np.array(8, np.int64)), ("step", np.array(4, np.int64)),
                ("big", np.array(70000, np.int64)), ("mels", np.array(128, np.int64)),
                ("dft", np.array(1024, np.int64)), ("rate", np.array(16000, np.int64)),
                ("lo", np.array(20.0, F)), ("hi", np.array(8000.0, F))], opset=17)
    rng = np.random.default_rng(5)
    inputs = {"x": rng.standard_normal((1, 24, 1)).astype(F),
              "v": rng.standard_normal(70000).astype(F),
              "spec": rng.random((3, 513)).astype(F)}
    _check(m, inputs, tmp_path, rtol=1e-4)


def test_max_pool_unpool_round_trip_and_global_lp_pool(tmp_path):
    """MaxPool's indices into MaxUnpool, back to the pooled input's shape (odd sizes: the
    output_shape input) and to the unpooled shape; GlobalLpPool with p = 2 and 3."""
    nodes = [N("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 0, 0]),
             N("MaxUnpool", ["p", "i", "shape"], ["u"], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 0, 0]),
             N("MaxPool", ["z"], ["q", "j"], kernel_shape=[2], strides=[2]),
             N("MaxUnpool", ["q", "j"], ["v"], kernel_shape=[2], strides=[2]),
             N("GlobalLpPool", ["x"], ["g2"]), N("GlobalLpPool", ["x"], ["g3"], p=3)]
    m = _model(nodes, [("x", TensorProto.FLOAT, [2, 3, 9, 8]),
                       ("z", TensorProto.FLOAT, [1, 4, 10])],
               [("u", TensorProto.FLOAT, [2, 3, 9, 8]), ("v", TensorProto.FLOAT, [1, 4, 10]),
                ("g2", TensorProto.FLOAT, [2, 3, 1, 1]),
                ("g3", TensorProto.FLOAT, [2, 3, 1, 1])],
               [("shape", np.array([2, 3, 9, 8], np.int64))], opset=11)
    rng = np.random.default_rng(6)
    _check(m, {"x": rng.standard_normal((2, 3, 9, 8)).astype(F),
               "z": rng.standard_normal((1, 4, 10)).astype(F)}, tmp_path, rtol=1e-5)


def test_tensor_scatter_kv_cache_update_both_modes(tmp_path):
    """A KV-cache step: the new keys written at run-time positions, linear and circular
    (wrapping past the end), and an int64 cache without write_indices."""
    nodes = [N("TensorScatter", ["k", "new", "pos"], ["lin"]),
             N("TensorScatter", ["k", "new", "pos2"], ["circ"], mode="circular"),
             N("TensorScatter", ["ik", "inew"], ["ints"], axis=1)]
    m = _model(nodes, [("k", TensorProto.FLOAT, [2, 3, 8, 4]),
                       ("new", TensorProto.FLOAT, [2, 3, 3, 4]),
                       ("pos", TensorProto.INT64, [2]), ("pos2", TensorProto.INT64, [2]),
                       ("ik", TensorProto.INT64, [2, 6]), ("inew", TensorProto.INT64, [2, 2])],
               [("lin", TensorProto.FLOAT, [2, 3, 8, 4]),
                ("circ", TensorProto.FLOAT, [2, 3, 8, 4]), ("ints", TensorProto.INT64, [2, 6])],
               opset=24)
    rng = np.random.default_rng(7)
    inputs = {"k": rng.standard_normal((2, 3, 8, 4)).astype(F),
              "new": rng.standard_normal((2, 3, 3, 4)).astype(F),
              "pos": np.array([0, 5], np.int64), "pos2": np.array([6, 3], np.int64),
              "ik": np.arange(12).reshape(2, 6), "inew": -np.arange(4).reshape(2, 2) - 1}
    _check(m, inputs, tmp_path)


def test_tfidf_vectorizer_counts_and_weights(tmp_path):
    """Unigrams to trigrams with skips over a batch of int64 token rows (TF), and TFIDF
    weights with shared output columns over one int32 row."""
    pool = {"ngram_counts": [0, 3, 7], "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 5, 2, 3, 3, 5, 4]}
    nodes = [N("TfIdfVectorizer", ["t"], ["tf"], mode="TF", min_gram_length=1,
               max_gram_length=3, max_skip_count=2, ngram_indexes=list(range(7)), **pool),
             N("TfIdfVectorizer", ["u"], ["w"], mode="TFIDF", min_gram_length=1,
               max_gram_length=2, max_skip_count=1, ngram_indexes=[1, 0, 1, 2, 2, 0, 3],
               weights=[0.5, 2.0, 1.5, 3.0, 1.0, 1.0, 1.0], **pool)]
    m = _model(nodes, [("t", TensorProto.INT64, [3, 12]), ("u", TensorProto.INT32, [10])],
               [("tf", TensorProto.FLOAT, [3, 7]), ("w", TensorProto.FLOAT, [4])], opset=9)
    rng = np.random.default_rng(8)
    _check(m, {"t": rng.integers(2, 8, (3, 12)),
               "u": rng.integers(2, 8, 10).astype(np.int32)}, tmp_path)


def test_max_roi_pool_boxes_inside_and_outside(tmp_path):
    boxes = np.array([[0, 0.0, 0.0, 7.0, 7.0], [1, 1.5, 2.0, 5.5, 3.0],
                      [1, -3.0, -2.0, 4.0, 11.0], [0, 6.0, 6.5, 9.5, 12.0]], F)
    m = _model([N("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2], spatial_scale=0.5)],
               [("x", TensorProto.FLOAT, [2, 3, 9, 8]), ("rois", TensorProto.FLOAT, [4, 5])],
               [("y", TensorProto.FLOAT, [4, 3, 3, 2])], opset=16)
    x = np.random.default_rng(9).standard_normal((2, 3, 9, 8)).astype(F)
    _check(m, {"x": x, "rois": boxes}, tmp_path)


def test_resize_antialias_matches_onnxruntime(tmp_path):
    """Antialias stretches the linear/cubic kernel by 1 / scale on the axes that shrink
    (here 0.3 and 0.45: 8 and 10 taps) and leaves an axis that grows as it is; with
    exclude_outside the taps outside the input get no weight."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 20, 11)).astype(np.float32)
    inits = [("sc", np.array([1, 1, 0.3, 1.7], np.float32)),
             ("sz", np.array([1, 2, 9, 5], np.int64))]
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["lin"], mode="linear", antialias=1),
             helper.make_node("Resize", ["x", "", "", "sz"], ["cub"], mode="cubic",
                              antialias=1, exclude_outside=1),
             helper.make_node("Resize", ["x", "", "", "sz"], ["cub_hp"], mode="cubic",
                              antialias=1, coordinate_transformation_mode="asymmetric")]
    model = _model(nodes, [("x", TensorProto.FLOAT, [1, 2, 20, 11])],
                   [("lin", TensorProto.FLOAT, [1, 2, 6, 18]),
                    ("cub", TensorProto.FLOAT, [1, 2, 9, 5]),
                    ("cub_hp", TensorProto.FLOAT, [1, 2, 9, 5])], inits, opset=19)
    _check(model, {"x": x}, tmp_path, rtol=1e-5)


def test_cubic_resize_keeps_its_weight_tables(tmp_path):
    """Cubic Resize's weight tables (Keys' kernel at four taps, with exclude_outside their
    normalisation: hundreds of IR nodes an entry) are stored once per output coordinate,
    not recomputed inside every tap of every output element (megabytes of C in the ONNX
    node cases); the bundle still matches onnxruntime."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="cubic",
                              exclude_outside=1, cubic_coeff_a=-0.5)]
    model = _model(nodes, [("x", TensorProto.FLOAT, [1, 2, 5, 6])],
                   [("y", TensorProto.FLOAT, [1, 2, 10, 11])],
                   [("sc", np.array([1, 1, 2.0, 1.9], np.float32))], opset=19)
    path, got = compile_run(model, tmp_path, {"x": x}, target=host_target())
    assert_matches(got, run_ort(model, {"x": x}), rtol=2e-5)
    kernels = (path / "src" / "kernels.c").read_text()
    assert "double resize_weight_2[" in kernels and "double resize_weight_3[" in kernels
    assert len(kernels) < 60_000, len(kernels)
