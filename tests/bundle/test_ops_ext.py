"""The ops of ``graph/ops/elementwise_ext.py`` compiled into bundles for the host target
(widest vector ISA the machine runs), built with strict flags and compared with
onnxruntime: activations and unary math, trigonometry, IsNaN/IsInf with the logical ops,
integer Mod/BitShift/BitwiseNot."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import assert_matches, compile_run, make_model, run_ort
from toolchain.target import host_target

F = np.float32
N = helper.make_node


def _check(model, inputs, tmp_path, rtol=2e-5):
    _, got = compile_run(model, tmp_path, inputs, target=host_target())
    assert_matches(got, run_ort(model, inputs), rtol=rtol)


def _sum(names, out):
    nodes, acc = [], names[0]
    for k, n in enumerate(names[1:]):
        nxt = out if k == len(names) - 2 else f"{out}_{k}"
        nodes.append(N("Add", [acc, n], [nxt]))
        acc = nxt
    return nodes


def _x(shape=(2, 3, 37), seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(F)


def test_activations_and_rounding(tmp_path):
    acts = [("Softplus", {}), ("Mish", {}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
            ("Celu", {"alpha": 1.3}), ("ThresholdedRelu", {"alpha": 0.4}),
            ("Shrink", {"bias": 0.3, "lambd": 0.5}), ("Softsign", {})]
    nodes = [N(op, ["x"], [f"a{k}"], **attrs) for k, (op, attrs) in enumerate(acts)]
    nodes += _sum([f"a{k}" for k in range(len(acts))], "y")
    nodes += [N("Mul", ["x", "three"], ["x3"])]
    nodes += [N(op, ["x3"], [f"r{k}"]) for k, op in enumerate(("Ceil", "Floor", "Round", "Sign"))]
    nodes += [N("Mul", ["r0", "r1"], ["r01"]), N("Mul", ["r2", "r3"], ["r23"]),
              N("Sub", ["r01", "r23"], ["z"])]
    m = make_model(nodes, {"x": (F, [2, 3, 37])}, {"y": (F, [2, 3, 37]), "z": (F, [2, 3, 37])},
                   {"three": np.array(3.0, F)}, opset=18)
    x = _x()
    x[0, 0, :6] = [0.5 / 3, 1.5 / 3, -2.5 / 3, 0.0, 40.0, -40.0]  # halves for Round
    _check(m, {"x": x}, tmp_path)


def test_trigonometric_and_hyperbolic(tmp_path):
    unit = [N("Tanh", ["x"], ["t"])]  # in (-1, 1) for Asin, Acos, Atanh
    nodes = unit + [N(op, ["t"], [f"u{k}"]) for k, op in enumerate(("Asin", "Acos", "Atanh"))]
    nodes += [N(op, ["x"], [f"v{k}"]) for k, op in enumerate(
        ("Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh"))]
    nodes += [N("Abs", ["x"], ["ax"]), N("Add", ["ax", "one"], ["ax1"]),
              N("Acosh", ["ax1"], ["w"])]
    nodes += _sum(["u0", "u1", "u2", "v0", "v1", "v3", "v4", "v5", "v6", "w"], "y")
    m = make_model(nodes, {"x": (F, [2, 3, 37])}, {"y": (F, [2, 3, 37]), "v2": (F, [2, 3, 37])},
                   {"one": np.array(1.0, F)}, opset=18)
    _check(m, {"x": _x(seed=1)}, tmp_path)


def test_isnan_isinf_and_logic(tmp_path):
    nodes = [N("Log", ["x"], ["lx"]), N("IsNaN", ["lx"], ["nan"]),
             N("Div", ["x", "zero"], ["dx"]), N("IsInf", ["dx"], ["pinf"], detect_negative=0),
             N("IsInf", ["dx"], ["inf"]), N("LessOrEqual", ["x", "y"], ["le"]),
             N("GreaterOrEqual", ["x", "y"], ["ge"]), N("And", ["nan", "le"], ["a"]),
             N("Or", ["a", "pinf"], ["o"]), N("Xor", ["o", "ge"], ["z"]),
             N("Xor", ["inf", "le"], ["z2"])]
    m = make_model(nodes, {"x": (F, [4, 33]), "y": (F, [33])},
                   {"z": (np.bool_, [4, 33]), "z2": (np.bool_, [4, 33])},
                   {"zero": np.array(0.0, F)}, opset=18)
    x, y = _x((4, 33), seed=2), _x((33,), seed=3)
    y[:5] = x[0, :5]  # equal elements for <= and >=
    _check(m, {"x": x, "y": y}, tmp_path)


def test_integer_mod_bitshift_bitwise(tmp_path):
    nodes = [N("Mod", ["a", "b"], ["m0"]), N("Mod", ["a", "b"], ["m1"], fmod=1),
             N("Mul", ["m0", "m1"], ["m"]),
             N("BitwiseNot", ["a"], ["na"]), N("Add", ["m", "na"], ["y"]),
             N("Cast", ["a"], ["ua"], to=TensorProto.UINT32),
             N("Cast", ["s"], ["us"], to=TensorProto.UINT32),
             N("BitShift", ["ua", "us"], ["l"], direction="LEFT"),
             N("BitShift", ["ua", "us"], ["r"], direction="RIGHT"),
             N("Cast", ["l"], ["li"], to=TensorProto.INT64),
             N("Cast", ["r"], ["ri"], to=TensorProto.INT64), N("Sub", ["li", "ri"], ["z"]),
             N("BitwiseAnd", ["a", "b"], ["ba"]), N("BitwiseOr", ["ba", "s"], ["bo"]),
             N("BitwiseXor", ["bo", "a"], ["w"])]
    rng = np.random.default_rng(4)
    b = rng.integers(1, 9, (35,)) * rng.choice([-1, 1], (35,))
    m = make_model(nodes, {"a": (np.int32, [3, 35]), "s": (np.int32, [3, 35])},
                   {"y": (np.int32, [3, 35]), "z": (np.int64, [3, 35]),
                    "w": (np.int32, [3, 35])},
                   {"b": b.astype(np.int32)}, opset=18)
    a = rng.integers(-1000, 1000, (3, 35)).astype(np.int32)
    s = rng.integers(0, 31, (3, 35)).astype(np.int32)
    _check(m, {"a": a, "s": s}, tmp_path)


def test_reductions_argmin_hardmax_topk(tmp_path):
    ax = {"a1": np.array([1], np.int64), "a02": np.array([0, 2], np.int64),
          "am1": np.array([-1], np.int64), "kk": np.array([3], np.int64)}
    nodes = [N("ReduceProd", ["x", "am1"], ["p"], keepdims=0),
             N("ReduceL1", ["x", "a1"], ["l1"]), N("ReduceL2", ["x", "a02"], ["l2"], keepdims=0),
             N("ReduceSumSquare", ["x", "a1"], ["ss"]),
             N("ReduceLogSumExp", ["x", "am1"], ["lse"], keepdims=0),
             N("Abs", ["x"], ["ax"]), N("ReduceLogSum", ["ax", "a1"], ["ls"]),
             N("ArgMin", ["x"], ["am"], axis=1, keepdims=0),
             N("Hardmax", ["x"], ["h"], axis=1), N("ReduceSum", ["h", "a02"], ["hs"]),
             N("TopK", ["x", "kk"], ["tv", "ti"], axis=1),
             N("TopK", ["x", "kk"], ["bv", "bi"], axis=-1, largest=0)]
    m = make_model(nodes, {"x": (F, [3, 8, 19])},
                   {"p": (F, [3, 8]), "l1": (F, [3, 1, 19]), "l2": (F, [8]),
                    "ss": (F, [3, 1, 19]), "lse": (F, [3, 8]), "ls": (F, [3, 1, 19]),
                    "am": (np.int64, [3, 19]), "hs": (F, [1, 8, 1]), "tv": (F, [3, 3, 19]),
                    "ti": (np.int64, [3, 3, 19]), "bv": (F, [3, 8, 3]),
                    "bi": (np.int64, [3, 8, 3])}, ax, opset=18)
    x = _x((3, 8, 19), seed=5) * 0.5 + 0.1
    _check(m, {"x": x}, tmp_path)


def test_data_movement_gathers_scans(tmp_path):
    consts = {"k": np.array(1, np.int64), "ax": np.array(2, np.int64),
              "depth": np.array(5, np.int64), "vals": np.array([-1.0, 2.0], F),
              "r0": np.array(0.5, F), "r1": np.array(6.5, F), "rd": np.array(1.0, F),
              "sel": np.array([1, 3, -1, 0], np.int64)}
    nodes = [N("DepthToSpace", ["x"], ["d2s"], blocksize=2, mode="CRD"),
             N("SpaceToDepth", ["d2s"], ["s2d"], blocksize=2),
             N("Trilu", ["s2d", "k"], ["tri"], upper=0),
             N("CumSum", ["tri", "ax"], ["cs"], reverse=1, exclusive=1),
             N("Range", ["r0", "r1", "rd"], ["rng"]), N("Add", ["cs", "rng"], ["y"]),
             N("OneHot", ["sel", "depth", "vals"], ["oh"], axis=0),
             N("GatherElements", ["x", "gi"], ["ge"], axis=3),
             N("GatherND", ["x", "ni"], ["gn"], batch_dims=1),
             N("Size", ["x"], ["sz"]),
             N("Sum", ["y", "x", "s2d"], ["sm"]), N("Mean", ["sm", "x"], ["mn"])]
    m = make_model(nodes, {"x": (F, [2, 8, 3, 6]), "gi": (np.int64, [2, 8, 3, 4]),
                           "ni": (np.int64, [2, 5, 2])},
                   {"y": (F, [2, 8, 3, 6]), "oh": (F, [5, 4]), "ge": (F, [2, 8, 3, 4]),
                    "gn": (F, [2, 5, 6]), "sz": (np.int64, []), "mn": (F, [2, 8, 3, 6])},
                   consts, opset=18)
    rng = np.random.default_rng(6)
    x = _x((2, 8, 3, 6), seed=6)
    gi = rng.integers(-6, 6, (2, 8, 3, 4))
    ni = np.stack([rng.integers(-8, 8, (2, 5)), rng.integers(-3, 3, (2, 5))], -1)
    _check(m, {"x": x, "gi": gi, "ni": ni}, tmp_path)


def test_scatters_with_reductions(tmp_path):
    consts = {"ei": np.array([[1, 0, 3], [1, -1, 2]], np.int64),
              "ni": np.array([[[1], [3]], [[0], [-2]]], np.int64)}
    nodes = [N("ScatterElements", ["x", "ei", "eu"], ["se"], axis=1),
             N("ScatterElements", ["x", "ei", "eu"], ["sa"], axis=1, reduction="add"),
             N("ScatterElements", ["x", "ei", "eu"], ["sm"], axis=1, reduction="max"),
             N("ScatterND", ["x", "ni", "nu"], ["sn"]),
             N("ScatterND", ["x", "ni", "nu"], ["snm"], reduction="mul")]
    outs = {n: (F, [4, 5]) for n in ("se", "sa", "sm", "sn", "snm")}
    m = make_model(nodes, {"x": (F, [4, 5]), "eu": (F, [2, 3]), "nu": (F, [2, 2, 5])}, outs,
                   consts, opset=18)
    _check(m, {"x": _x((4, 5), seed=7), "eu": _x((2, 3), seed=8),
               "nu": _x((2, 2, 5), seed=9)}, tmp_path)


def _check_vs_onnx_reference(model, inputs, tmp_path, rtol=2e-5):
    """For ops newer than onnxruntime's opset: ONNX's own reference implementation."""
    from onnx.reference import ReferenceEvaluator

    _, got = compile_run(model, tmp_path, inputs, target=host_target())
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, ReferenceEvaluator(model).run(None, inputs), strict=True))
    assert_matches(got, want, rtol=rtol)


def test_function_ops_expanded_compile_to_bundles(tmp_path):
    """GroupNormalization, MeanVarianceNormalization, RMSNormalization and Swish are left to
    their ONNX function bodies; those expansions compile and run too."""
    rng = np.random.default_rng(10)
    nodes = [N("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=2, epsilon=1e-3),
             N("MeanVarianceNormalization", ["x"], ["v"]),
             N("RMSNormalization", ["x", "rs"], ["r"], axis=-1),
             N("Swish", ["x"], ["w"], alpha=0.7)]
    inits = {"s": rng.standard_normal(4).astype(F), "b": rng.standard_normal(4).astype(F),
             "rs": rng.standard_normal(5).astype(F)}
    shape = [2, 4, 3, 5]
    m = make_model(nodes, {"x": (F, shape)}, {k: (F, shape) for k in "gvrw"}, inits,
                   opset=24)
    _check_vs_onnx_reference(m, {"x": _x(tuple(shape), seed=10)}, tmp_path)


def test_lrn_lp_normalization_lp_pool(tmp_path):
    nodes = [N("LRN", ["x"], ["l"], size=3, alpha=0.2, beta=0.7, bias=1.2),
             N("LpNormalization", ["x"], ["n"], axis=1, p=2),
             N("LpNormalization", ["x"], ["n1"], axis=-1, p=1),
             N("LpPool", ["x"], ["pp"], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1], p=2),
             N("Relu", ["pp"], ["p"]),  # fused onto the pool's output
             N("LpPool", ["x"], ["p3"], kernel_shape=[2, 2], p=3, auto_pad="SAME_UPPER")]
    shape = [2, 6, 9, 9]
    m = make_model(nodes, {"x": (F, shape)},
                   {"l": (F, shape), "n": (F, shape), "n1": (F, shape),
                    "p": (F, [2, 6, 5, 5]), "p3": (F, shape)}, opset=18)
    _check(m, {"x": _x(tuple(shape), seed=11)}, tmp_path)


def test_cumprod(tmp_path):
    """CumProd is opset 26, newer than onnxruntime 1.32: ONNX's reference judges it."""
    nodes = [N("CumProd", ["x", "ax"], ["y"], exclusive=1),
             N("CumProd", ["x", "ax"], ["z"], reverse=1)]
    m = make_model(nodes, {"x": (F, [3, 17])}, {"y": (F, [3, 17]), "z": (F, [3, 17])},
                   {"ax": np.array(1, np.int64)}, opset=26)
    x = (np.random.default_rng(12).uniform(0.6, 1.4, (3, 17))).astype(F)
    _check_vs_onnx_reference(m, {"x": x}, tmp_path)


def test_einsum(tmp_path):
    nodes = [N("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik"),
             N("Einsum", ["a"], ["d"], equation="...ii->...i"),
             N("Einsum", ["a", "c"], ["z"], equation="bij,j")]
    m = make_model(nodes, {"a": (F, [2, 5, 5]), "b": (F, [2, 5, 3]), "c": (F, [5])},
                   {"y": (F, [2, 5, 3]), "d": (F, [2, 5]), "z": (F, [2, 5])}, opset=18)
    _check(m, {"a": _x((2, 5, 5), 13), "b": _x((2, 5, 3), 14), "c": _x((5,), 15)}, tmp_path)


def test_affine_grid_grid_sample(tmp_path):
    nodes = [N("AffineGrid", ["theta", "size"], ["ag"], align_corners=0),
             N("GridSample", ["x", "ag"], ["a"]),
             N("GridSample", ["x", "g"], ["y"], mode="linear", padding_mode="zeros"),
             N("GridSample", ["x", "g"], ["z"], mode="cubic", padding_mode="reflection",
               align_corners=1),
             N("GridSample", ["x", "g"], ["w"], mode="nearest", padding_mode="border")]
    m = make_model(nodes, {"x": (F, [2, 3, 7, 9]), "g": (F, [2, 5, 6, 2]),
                           "theta": (F, [2, 2, 3])},
                   {k: (F, [2, 3, 5, 6]) for k in "yzwa"},
                   {"size": np.array([2, 3, 5, 6], np.int64)}, opset=20)
    g = (np.random.default_rng(16).uniform(-1.3, 1.3, (2, 5, 6, 2))).astype(F)
    theta = (np.array([[1, 0, 0], [0, 1, 0]], F) + _x((2, 2, 3), 26) * 0.2).astype(F)
    _check(m, {"x": _x((2, 3, 7, 9), 16), "g": g, "theta": theta}, tmp_path)


def test_eye_like_reverse_sequence(tmp_path):
    nodes = [N("EyeLike", ["x"], ["e"], k=1), N("Add", ["x", "e"], ["y"]),
             N("ReverseSequence", ["s", "lens"], ["r"], batch_axis=0, time_axis=1)]
    m = make_model(nodes, {"x": (F, [4, 6]), "s": (F, [3, 5, 2]), "lens": (np.int64, [3])},
                   {"y": (F, [4, 6]), "r": (F, [3, 5, 2])}, opset=18)
    _check(m, {"x": _x((4, 6), 17), "s": _x((3, 5, 2), 18),
               "lens": np.array([5, 0, 3], np.int64)}, tmp_path)


def test_matmul_integer_qlinear_matmul(tmp_path):
    """uint8/int8 graph inputs (built here: make_model knows float/int32/int64/bool)."""
    rng = np.random.default_rng(19)
    inits = {"zb": np.array(3, np.int8), "sa": np.array(0.02, np.float32),
             "za": np.array(128, np.uint8), "sb": rng.uniform(0.01, 0.1, 7).astype(F),
             "zbc": np.zeros(7, np.int8), "sy": np.array(0.25, np.float32),
             "zy": np.array(5, np.uint8)}
    nodes = [N("MatMulInteger", ["a", "b", "za", "zb"], ["y"]),
             N("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zbc", "sy", "zy"], ["q"])]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 5, 9]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [9, 7])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 5, 7]),
         helper.make_tensor_value_info("q", TensorProto.UINT8, [2, 5, 7])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    inputs = {"a": rng.integers(0, 256, (2, 5, 9)).astype(np.uint8),
              "b": rng.integers(-128, 128, (9, 7)).astype(np.int8)}
    _, got = compile_run(m, tmp_path, inputs, target=host_target())
    assert_matches(got, run_ort(m, inputs))


def test_dynamic_quantization_pattern(tmp_path):
    """onnxruntime's dynamic quantization of a MatMul: DynamicQuantizeLinear ->
    MatMulInteger -> Cast -> Mul by the two scales."""
    rng = np.random.default_rng(20)
    w = rng.integers(-128, 128, (8, 5)).astype(np.int8)
    nodes = [N("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             N("MatMulInteger", ["xq", "w", "xz", "wz"], ["p"]),
             N("Cast", ["p"], ["pf"], to=TensorProto.FLOAT),
             N("Mul", ["xs", "ws"], ["s"]), N("Mul", ["pf", "s"], ["y"])]
    inits = {"w": w, "wz": np.array(0, np.int8), "ws": np.array(0.02, np.float32)}
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    inputs = {"x": _x((3, 8), 20)}
    _, got = compile_run(m, tmp_path, inputs, target=host_target())
    assert_matches(got, run_ort(m, inputs))


def test_col2im(tmp_path):
    nodes = [N("Col2Im", ["x", "img", "blk"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])]
    m = make_model(nodes, {"x": (F, [2, 12, 16])}, {"y": (F, [2, 3, 7, 7])},
                   {"img": np.array([7, 7], np.int64), "blk": np.array([2, 2], np.int64)},
                   opset=18)
    _check(m, {"x": _x((2, 12, 16), 27)}, tmp_path)


def test_dft(tmp_path):
    nodes = [N("DFT", ["x", "", "ax"], ["f"], onesided=1),
             N("DFT", ["c", "len", "ax"], ["g"], inverse=1),
             N("DFT", ["c", "", "ax"], ["r"], inverse=1, onesided=1)]
    m = make_model(nodes, {"x": (F, [2, 16, 3, 1]), "c": (F, [2, 9, 3, 2])},
                   {"f": (F, [2, 9, 3, 2]), "g": (F, [2, 12, 3, 2]), "r": (F, [2, 16, 3, 1])},
                   {"ax": np.array(1, np.int64), "len": np.array(12, np.int64)}, opset=20)
    _check(m, {"x": _x((2, 16, 3, 1), 28), "c": _x((2, 9, 3, 2), 29)}, tmp_path, rtol=1e-4)


def test_conv_integer_qlinear_conv(tmp_path):
    rng = np.random.default_rng(30)
    inits = {"w": rng.integers(-128, 128, (6, 4, 3, 3)).astype(np.int8),
             "wu": rng.integers(0, 256, (6, 4, 3, 3)).astype(np.uint8),
             "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
             "ws": np.linspace(0.01, 0.05, 6).astype(np.float32), "wz": np.zeros(6, np.int8),
             "wuz": np.array(128, np.uint8), "ys": np.array(0.8, np.float32),
             "yz": np.array(7, np.uint8), "b": (np.arange(-3, 3) * 50).astype(np.int32)}
    nodes = [N("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["q"],
               pads=[1, 1, 1, 1]),
             N("ConvInteger", ["x", "wu", "xz", "wuz"], ["c"], strides=[2, 2])]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 4, 7, 6])],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, [2, 6, 7, 6]),
         helper.make_tensor_value_info("c", TensorProto.INT32, [2, 6, 3, 2])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    inputs = {"x": rng.integers(0, 256, (2, 4, 7, 6)).astype(np.uint8)}
    _, got = compile_run(m, tmp_path, inputs, target=host_target())
    assert_matches(got, run_ort(m, inputs))
