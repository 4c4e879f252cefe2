"""Bundles of the small models that found bugs (the models-users-bring and the
differential-testing issues): each compiles, builds with the strict flags on the host
target and matches onnxruntime. Each test names the bug it pins."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

from tests.bundle.helpers import assert_matches, compile_run, make_model, run_ort
from tests.tools import needs
from toolchain.errors import KilnWarning

F, I64 = np.float32, np.int64


def _check(model, tmp_path, inputs, target="host"):
    path, got = compile_run(model, tmp_path, inputs, target=target)
    assert_matches(got, run_ort(model, inputs))
    return path


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F)


def test_constant_output_is_written(tmp_path):
    """A graph output that folds to a constant was never written (``_run`` had an empty
    body): the caller read whatever its buffer held."""
    m = make_model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Add", ["s", "one"], ["t"]),
                    h.make_node("Shape", ["x"], ["tail"], start=1),
                    h.make_node("Relu", ["x"], ["y"])],
                   {"x": (F, [2, 3])},
                   {"t": (I64, [2]), "y": (F, [2, 3]), "tail": (I64, [1])},
                   inits={"one": np.array([1, 1], I64)})
    path = _check(m, tmp_path, {"x": _rand(2, 3)})
    run = (path / "src" / "g.c").read_text()
    assert "outputs->t" in run and "outputs->tail" in run


def test_only_output_constant(tmp_path):
    m = make_model([h.make_node("Shape", ["x"], ["s"])], {"x": (F, [4, 5])}, {"s": (I64, [2])})
    _check(m, tmp_path, {"x": _rand(4, 5)})


@pytest.mark.parametrize("op", ["PRelu", "Where"])
def test_select_with_loads_in_one_arm(op, tmp_path):
    """gcc 12 at -O3 with AVX-512 gives the unrolled masked loads of ``x < 0 ? x * s : x``
    in a 3-deep loop nest the mask of the first vector: wrong PRelu/Where on hosts with
    AVX-512. The select loads both values first (no masked load)."""
    if op == "PRelu":
        m = make_model([h.make_node("PRelu", ["x", "s"], ["y"])],
                       {"x": (F, [3, 4, 5]), "s": (F, [3, 4, 5])}, {"y": (F, [3, 4, 5])})
        inputs = {"x": _rand(3, 4, 5), "s": _rand(3, 4, 5, seed=1)}
    else:
        m = make_model([h.make_node("Greater", ["c", "zero"], ["b"]),
                        h.make_node("Where", ["b", "x", "zero"], ["y"])],
                       {"x": (F, [3, 4, 5]), "c": (F, [3, 4, 5])}, {"y": (F, [3, 4, 5])},
                       inits={"zero": np.zeros((), F)})
        inputs = {"x": _rand(3, 4, 5), "c": _rand(3, 4, 5, seed=1)}
    _check(m, tmp_path, inputs)


@pytest.mark.parametrize("tail", ["Relu", "Erf"])
def test_matmul_of_one_tensor_with_itself_then_elementwise(tail, tmp_path):
    """``MatMul(x, x)`` followed by a fused op lost one of its two parameters ('A'
    undeclared in kernels.c)."""
    m = make_model([h.make_node("MatMul", ["x", "x"], ["y"]), h.make_node(tail, ["y"], ["z"])],
                   {"x": (F, [6, 6])}, {"z": (F, [6, 6])})
    _check(m, tmp_path, {"x": _rand(6, 6)})


def test_gather_scalar_index_gives_a_scalar(tmp_path):
    """``Gather(x[5], 2)``: the rank-0 result's dummy index was added to the data index."""
    m = make_model([h.make_node("Gather", ["x", "i"], ["y"])], {"x": (F, [5])}, {"y": (F, [])},
                   inits={"i": np.array(2, I64)})
    _check(m, tmp_path, {"x": _rand(5)})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_with_constant_float_scales(mode, tmp_path):
    """nn.Upsample: Resize with float ``scales`` from an initializer was refused ("computed
    at run time"): fusion passed the scales to the kernel as a weight."""
    m = make_model([h.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)],
                   {"x": (F, [1, 2, 3, 3])}, {"y": (F, [1, 2, 6, 6])},
                   inits={"s": np.array([1, 1, 2, 2], F)})
    path = _check(m, tmp_path, {"x": _rand(1, 2, 3, 3)})
    assert "w_s" not in (path / "src" / "weights.h").read_text()  # the table of arrays


def test_mod_of_constants_is_folded_before_support_is_checked(tmp_path):
    """nn.MultiheadAttention exports ``Mod`` on constants; Kiln refused the whole model
    before folding."""
    m = make_model([h.make_node("Mod", ["a", "b"], ["c"]),
                    h.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
                    h.make_node("Add", ["x", "cf"], ["y"])],
                   {"x": (F, [3])}, {"y": (F, [3])},
                   inits={"a": np.array([5, -7, 9], I64), "b": np.array([3, 3, 4], I64)})
    _check(m, tmp_path, {"x": _rand(3)})


def test_pool_ceil_mode_window_in_end_padding_warns_and_compiles(tmp_path):
    """ONNX shape inference keeps a last ceil-mode window that starts in the end padding;
    the spec and onnxruntime drop it. Kiln crashed on the disagreement (exit 1)."""
    m = make_model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                                pads=[0, 0, 1, 1], ceil_mode=1),
                    h.make_node("Relu", ["y"], ["z"])],
                   {"x": (F, [1, 1, 4, 4])}, {"z": (F, [1, 1, 2, 2])})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _check(m, tmp_path, {"x": _rand(1, 1, 4, 4)})
    msgs = [str(w.message) for w in seen if issubclass(w.category, KilnWarning)]
    assert any("known ONNX bug" in s and "ceil_mode" in s for s in msgs), msgs


def _chain(n: int, ops: list[str]):
    nodes, prev = [], "x"
    for i in range(n):
        nodes.append(h.make_node(ops[i % len(ops)], [prev], [f"t{i}"]))
        prev = f"t{i}"
    return make_model(nodes, {"x": (F, [1, 16])}, {prev: (F, [1, 16])})


def test_long_elementwise_chains_compile_to_bounded_kernels(tmp_path):
    """A chain of ops that read their input twice (Relu's select) was one kernel whose
    inlined expression doubled at each op (16 Relus: 20 s, 20: > 100 s); a 2,000-node chain
    hit Python's recursion limit. Kernels hold at most MAX_FUSED_DEPTH nodes of a chain."""
    from toolchain.graph.passes.fusion import MAX_FUSED_DEPTH

    m = _chain(40, ["Relu", "Neg", "HardSwish"])
    path = _check(m, tmp_path, {"x": _rand(1, 16)})
    import json
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["kernel_count"] == -(-40 // MAX_FUSED_DEPTH)
    assert len((path / "src" / "kernels.c").read_text()) < 40 * 4000


def test_a_chain_deeper_than_the_recursion_limit_compiles(tmp_path):
    import sys

    n = sys.getrecursionlimit() + 200
    _check(_chain(n, ["Neg", "Relu"]), tmp_path / "deep", {"x": _rand(1, 16)}, "c-generic")


def test_a_tensor_beyond_32_bit_indices_is_refused_naming_it(tmp_path):
    """A 10^13-element output compiled to kernels whose int32 indices overflow."""
    from toolchain.bundle import compile_model
    from toolchain.errors import ModelError

    m = make_model([h.make_node("Expand", ["x", "s"], ["y"]), h.make_node("Relu", ["y"], ["z"])],
                   {"x": (F, [1])}, {"z": (F, [100000, 100000000])},
                   inits={"s": np.array([100000, 100000000], I64)})
    with pytest.raises(ModelError, match=r"tensor 'y' float32\[100000, 100000000\] has "
                                         r"10,000,000,000,000 elements"):
        compile_model(m, "c-generic", tmp_path / "b", progress=False)
    assert not (tmp_path / "b").exists()


def test_a_tensor_too_large_for_memory_is_a_user_error_naming_it(tmp_path, capsys):
    import onnx

    from toolchain.cli import main

    # 400 TB: beyond any address space, so the allocation fails whatever the overcommit
    m = make_model([h.make_node("Expand", ["x", "s"], ["z"])],
                   {"x": (F, [1])}, {"z": (F, [1000000, 100000000])},
                   inits={"s": np.array([1000000, 100000000], I64)})
    onnx.save(m, tmp_path / "big.onnx")
    np.savez(tmp_path / "in.npz", x=np.ones(1, F))
    assert main(["run", str(tmp_path / "big.onnx"), "--inputs", str(tmp_path / "in.npz")]) == 2
    assert "'z' float32[1000000, 100000000] (400,000,000,000,000 bytes)" in \
        capsys.readouterr().err


def test_ops_after_the_ceil_mode_inference_bug_are_not_cross_checked(tmp_path):
    """ONNX propagates its wrong pooled shape to every consumer: a Slice after the pool
    (fuzzer seed 1299) crashed the import though the pool itself was handled."""
    m = make_model([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                                strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1),
                    h.make_node("Slice", ["y", "s", "e", "a"], ["z"]),
                    h.make_node("Abs", ["z"], ["w"])],
                   {"x": (F, [1, 2, 4, 4])}, {"w": (F, [1, 2, 2, 2])},
                   inits={"s": np.array([0], I64), "e": np.array([100], I64),
                          "a": np.array([3], I64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KilnWarning)
        _check(m, tmp_path, {"x": _rand(1, 2, 4, 4)})


def test_a_guarded_concat_load_in_an_unrolled_avx512_loop(tmp_path):
    """Fuzzer seed 10010: gcc 12 -O3 with AVX-512 if-converted the guarded loads of a fused
    Concat (``i < 5 ? x[..] : -x[..]``) into masked loads with the wrong mask: wrong output
    on c-generic and x86_64-avx512 (the host builds with -march=native). Guarded loads are
    now loaded unconditionally from a clamped index and blended."""
    w = (np.random.default_rng(3).standard_normal((10, 2)) * 0.5).astype(F)
    m = make_model([h.make_node("Neg", ["x"], ["xn"]),
                    h.make_node("Concat", ["x", "xn"], ["c"], axis=1),
                    h.make_node("Neg", ["c"], ["n"]), h.make_node("PRelu", ["n", "w"], ["p"]),
                    h.make_node("LeakyRelu", ["p"], ["r"], alpha=0.01)],
                   {"x": (F, [2, 5, 2])}, {"r": (F, [2, 10, 2])}, inits={"w": w})
    for target in ("host", "c-generic"):
        _check(m, tmp_path / target, {"x": _rand(2, 5, 2)}, target)


@pytest.mark.parametrize("target", ["c-generic", "host"])
def test_an_injective_operand_of_a_conv_epilogue_listed_before_the_conv(target, tmp_path):
    """Fuzzer seed 40124: ``Add(Slice(x), Conv(x))`` fuses into one conv group whose
    Slice comes before the conv in node order. The conv's tail was built from the nodes
    *after* the conv only, so the Slice was lost ("inner value ... is neither an input nor
    constant": a model onnxruntime runs, refused). The tail is now every node but the
    conv."""
    model = make_model(
        [h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
         h.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[2, 3], pads=[0, 2, 1, 2],
                     strides=[1, 2]),
         h.make_node("Add", ["s", "c"], ["y"])],
        {"x": (F, [1, 1, 2, 3])}, {"y": (F, [1, 6, 2, 3])},
        {"st": np.array([-2], I64), "en": np.array([4], I64), "ax": np.array([2], I64),
         "sp": np.array([2], I64), "w": _rand(6, 1, 2, 3, seed=1)})
    _check(model, tmp_path, {"x": _rand(1, 1, 2, 3)}, target=target)


@pytest.mark.parametrize("target", ["c-generic", "host"])
@pytest.mark.parametrize("anchor", ["gemm", "conv"])
def test_an_epilogue_operand_computed_apart_from_the_anchor(anchor, target, tmp_path):
    """Fuzzer seeds 21874 and 21732, a silent wrong output: ``Div(Gemm(a), Sigmoid(s) +
    0.5)`` fuses into one group whose tail computes ``Sigmoid(s) + 0.5`` in a loop nest
    placed after the anchor, while the Div moved into the anchor's loops read it before
    it was written (inf on c-generic). Tail nodes that do not depend on the anchor now
    run before it."""
    rng = np.random.default_rng(21874)
    if anchor == "gemm":
        first = h.make_node("Gemm", ["a", "w"], ["g"], alpha=0.5, transA=1)
        shapes = {"a": (F, [1, 15]), "s": (F, [15, 1])}
        out, w = [15, 7], rng.standard_normal((1, 7)).astype(F)
    else:
        first = h.make_node("Conv", ["a", "w"], ["g"], pads=[1, 1, 1, 1])
        shapes = {"a": (F, [1, 3, 6, 6]), "s": (F, [1, 1, 6, 6])}
        out, w = [1, 4, 6, 6], rng.standard_normal((4, 3, 3, 3)).astype(F)
    model = make_model([first, h.make_node("Sigmoid", ["s"], ["sg"]),
                        h.make_node("Add", ["sg", "c"], ["d"]),
                        h.make_node("Div", ["g", "d"], ["y"])],
                       shapes, {"y": (F, out)}, {"w": w, "c": np.array(0.5, F)})
    inputs = {k: rng.standard_normal(v[1]).astype(F) for k, v in shapes.items()}
    _check(model, tmp_path, inputs, target=target)


@pytest.mark.parametrize("target", ["host", "c-generic"])
def test_a_vector_load_at_a_negative_index_is_parenthesised(tmp_path, target):
    """Fuzzer seed 51860 (a segmentation fault, all CPU targets): a Gather with the scalar
    index -1 became one vector load ``*(float32x4_u*)(t13 + i < 0 ? i + 1 : i)``, which C
    parses as ``((t13 + i) < 0) ? ...``: an integer dereferenced as an address. The load's
    offset is now parenthesised like the right operand of ``+``."""
    m = make_model([h.make_node("Gather", ["x", "i"], ["y"], axis=1)],
                   {"x": (F, [8, 1])}, {"y": (F, [8])}, inits={"i": np.array(-1, I64)})
    path = _check(m, tmp_path, {"x": _rand(8, 1)}, target)
    assert "_u*)(x + (" in (path / "src" / "kernels.c").read_text()  # a vector load


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_scales_stay_float32_under_precision_fp16(mode, tmp_path):
    """Fuzzer seed 232013 with ``--precision fp16`` (``c-generic:fp16``): every float32
    constant became float16, Resize's ``scales`` too, and Resize (scales are float32
    only) refused the model. A constant the op takes only as float32 now stays float32;
    the bundle and the reference executor of the float16 graph agree with onnxruntime
    (to float16's rounding)."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.precision import to_fp16
    from toolchain.graph.reference import run_graph

    m = make_model([h.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)],
                   {"x": (F, [1, 2, 3, 4])}, {"y": (F, [1, 2, 6, 12])},
                   inits={"s": np.array([1, 1, 2, 3], F)})
    inputs = {"x": _rand(1, 2, 3, 4)}
    want = run_ort(m, inputs)
    graph = to_fp16(from_onnx(m))
    assert [v.dtype for n in graph.nodes if n.op == "Resize" for v in n.inputs[2:3]] == \
        ["float32"]
    assert_matches(run_graph(graph, inputs), want, rtol=2e-3)
    _, got = compile_run(m, tmp_path, inputs, precision="fp16")
    assert_matches(got, want, rtol=2e-3)


@needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
def test_cortex_m_convolutions_with_unit_loops_compile_and_match(tmp_path):
    """Fuzzer seed 234098 (``--wide`` on ``board:qemu-mps2-an386``): a Conv with one
    output channel, or a 1x1 window over one input channel, stopped the Cortex-M compile
    with an internal ``ScheduleError`` (``compute_at`` elides the accumulator's loop of
    extent 1, and the pixel-rows schedule reordered the loops it expected). Both convs
    of this model now compile; the firmware under QEMU and the reference executor agree
    with onnxruntime."""
    from toolchain.boards import compile_board
    from toolchain.boards.qemu import run_on_qemu
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    rng = np.random.default_rng(234098)
    m = make_model([h.make_node("Conv", ["x", "w1"], ["y"], pads=[2, 0, 1, 0]),
                    h.make_node("Conv", ["x", "w2"], ["z"])],
                   {"x": (F, [1, 1, 3, 8])}, {"y": (F, [1, 1, 4, 8]), "z": (F, [1, 3, 3, 8])},
                   inits={"w1": rng.standard_normal((1, 1, 3, 1)).astype(F),
                          "w2": rng.standard_normal((3, 1, 1, 1)).astype(F)})
    inputs = {"x": rng.standard_normal((1, 1, 3, 8)).astype(F)}
    want = run_ort(m, inputs)
    assert_matches(run_graph(from_onnx(m), inputs), want)
    path, _ = compile_board(m, "qemu-mps2-an386", tmp_path / "fw", build=False)
    assert_matches(run_on_qemu(path, inputs).outputs, want)


def test_composite_reductions_over_no_axis_keep_their_elementwise_step(tmp_path):
    """``noop_with_empty_axes=1`` with empty ``axes`` reduces over no axis, and ONNX's
    composite reductions still apply their element-wise step there (ReduceL1 and ReduceL2
    give |x|, ReduceSumSquare x², ReduceLogSum log x; onnxruntime agrees). The reference
    and the bundles returned x itself: wrong wherever x < 0 or x ≠ 1 (the fuzzer's
    ``--opset18`` seed 1046)."""
    ops = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
           "ReduceProd", "ReduceMean", "ReduceMax")
    nodes = [h.make_node("Abs", ["x"], ["ax"])]
    for op in ops:  # log of |x|: a positive operand
        src = "ax" if op == "ReduceLogSum" else "x"
        nodes.append(h.make_node(op, [src, "none"], [op], noop_with_empty_axes=1,
                                 keepdims=0))
    m = make_model(nodes, {"x": (F, [2, 3])}, {op: (F, [2, 3]) for op in ops},
                   inits={"none": np.array([], I64)}, opset=18)
    x = _rand(2, 3) * 2
    want = run_ort(m, {"x": x})
    assert want["ReduceL2"].min() > 0 and x.min() < 0  # |x|, not x
    _check(m, tmp_path, {"x": x}, target="c-generic")
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    assert_matches(run_graph(from_onnx(m), {"x": x}), want)


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
def test_an_int8_depthwise_convolution_of_one_tap_on_x86(target, tmp_path):
    """Fuzzer seed 302015 (``--int8 --conv-chain``): a quantized depthwise Conv with a 1x1
    kernel (a per-channel scale) went to the x86 depthwise kernel, whose schedule needs a
    reduction loop and found none (``compute_at`` elides the unit ones): an internal
    ``IndexError`` on x86_64-avx2, and on x86_64-avx512, where the layout pass had given
    it a channel-blocked input, a ``ScheduleError``. The generic int8 kernel takes it now;
    the bundle equals the integer reference bit for bit."""
    from tests.fuzz.oracle import quantized_reference
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target(target)):
        pytest.skip(f"this CPU lacks {target}'s features")
    rng = np.random.default_rng(302015)
    m = make_model([h.make_node("Conv", ["x", "w1", "b1"], ["c"], kernel_shape=[3, 3],
                                pads=[1, 1, 1, 1]),
                    h.make_node("Relu", ["c"], ["r"]),
                    h.make_node("Conv", ["r", "w2", "b2"], ["y"], group=8, kernel_shape=[1, 1])],
                   {"x": (F, [1, 2, 6, 7])}, {"y": (F, [1, 8, 6, 7])},
                   inits={"w1": rng.standard_normal((8, 2, 3, 3)).astype(F),
                          "b1": rng.standard_normal(8).astype(F),
                          "w2": rng.standard_normal((8, 1, 1, 1)).astype(F),
                          "b2": rng.standard_normal(8).astype(F)})
    inputs = {"x": rng.standard_normal((1, 2, 6, 7)).astype(F)}
    qdq, want, _ = quantized_reference(m, inputs)
    _, got = compile_run(qdq, tmp_path, inputs, target=target)
    assert want["y"].std() > 0
    np.testing.assert_array_equal(got["y"], want["y"])


def test_normalization_variances_under_precision_fp16(tmp_path):
    """Fuzzer seed 311010 (``--symbolic --opset18 ...`` on ``c-generic:fp16``, NaN):
    GroupNormalization's ONNX body takes the variance as ``E[x²] - E[x]²`` in its float32
    stash, which ``--precision fp16`` makes float16: the two means round to float16 and
    their difference is anything below their rounding, negative too (the square root
    NaN). MeanVarianceNormalization's body does the same with no stash. The frontend now
    writes ``E[(x - E[x])²]``. Values near 1 with a spread of 0.05 (float16 inputs, so
    the input's own rounding is no part of the error), in the bundle and the float16
    reference: GroupNormalization 3.5e-2 off before, 1.4e-3 now; MeanVarianceNormalization
    0.11-0.14 before, 4.4e-3 now."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.precision import to_fp16
    from toolchain.graph.reference import run_graph

    m = make_model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2),
                    h.make_node("MeanVarianceNormalization", ["x"], ["z"])],
                   {"x": (F, [1, 4, 3, 5])}, {"y": (F, [1, 4, 3, 5]), "z": (F, [1, 4, 3, 5])},
                   inits={"s": np.array([1, -1, 0.5, 2], F),
                          "b": np.array([0.5, 0, -1, 0.25], F)}, opset=21)
    x = (1 + 0.05 * _rand(1, 4, 3, 5, seed=311010)).astype(np.float16).astype(F)
    want = run_ort(m, {"x": x})
    assert_matches(run_graph(to_fp16(from_onnx(m)), {"x": x}), want, rtol=1e-2)
    _, got = compile_run(m, tmp_path, {"x": x}, precision="fp16")
    assert_matches(got, want, rtol=1e-2)


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
def test_an_infinite_border_element_in_a_padded_convolution(target, tmp_path):
    """Fuzzer seed 320017 (``--control-flow --opset18 --conv-chain`` on
    ``x86_64-avx512:threads``): the blocked convolution and depthwise kernels padded their
    input as ``x[clamped] * float(inside)``, so an infinite element on the border gave
    ``inf * 0 = NaN`` in the padding and NaN at every output whose window covers both
    (onnxruntime: inf). The padding is a select now; the bundle and the reference executor
    agree with onnxruntime, infinities and all."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target(target)):
        pytest.skip(f"this CPU lacks {target}'s features")
    w = np.abs(_rand(8, 8, 3, 3, seed=320017))
    m = make_model([h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                    h.make_node("Conv", ["x", "dw"], ["z"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                group=8)],
                   {"x": (F, [1, 8, 6, 6])}, {"y": (F, [1, 8, 6, 6]), "z": (F, [1, 8, 6, 6])},
                   inits={"w": w, "dw": w[:, :1]})
    x = _rand(1, 8, 6, 6)
    x[0, :, 0, 0] = np.inf
    want = run_ort(m, {"x": x})
    assert all(np.isinf(v).sum() and not np.isnan(v).any() for v in want.values())
    _, got = compile_run(m, tmp_path, {"x": x}, target=target)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(run_graph(from_onnx(m), {"x": x})[k], v, rtol=1e-4,
                                   atol=1e-5, err_msg=k)
