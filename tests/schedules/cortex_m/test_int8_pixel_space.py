"""The search space of the one-pixel Cortex-M int8 DSP convolution (``cm_int8_conv1``: odd
channel counts, odd widths in a batch): the default is the heuristic and builds the kernel
it built before, traces round-trip, invalid points are refused before building, every point
is bit-exact with the integer reference (host build), records change the generated kernel,
and the tuned points count fewer instructions under QEMU."""

from __future__ import annotations

import numpy as np
import pytest

from tests.covering import THOROUGH
from tests.schedules.cortex_m.test_int8 import (
    RNG,
    _conv,
    _out,
    _qx,
    _reference,
    _requant,
    _run_host,
)
from tests.tools import needs
from toolchain.autotune.apply import applying, declared, forcing
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.codegen import get_renderer
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.schedules.registry import schedule_for
from toolchain.target import load_target
from toolchain.tir.transform.pipeline import lower


def _space(node, target="cortex-m4"):
    with declared() as seen:
        schedule_for(node, target)
    (space,) = seen
    return space


def _code(node, point=None) -> str:
    if point is None:
        op = schedule_for(node, "cortex-m4")
    else:
        s = _space(node)
        with forcing({s.workload: s.trace({**s.default(), **point})}):
            op = schedule_for(node, "cortex-m4")
    return get_renderer("c", openmp=False).render(
        lower(op.schedule.mod, target=load_target("cortex-m4")), name=None).code


def _batch2_odd_width() -> Node:
    """8 channels (four a call) but a batch of 2 with an odd width: one pixel a step."""
    x = Value("x", (2, 8, 5, 7), "int8")
    w = Value.constant("w", RNG.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8))
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1,
             "x_zero_point": 5, **_out("int8", -3)}
    node = Node("QConv", "conv", [x, w, *_requant(8)], [], attrs)
    out = get_op("QConv").infer(node)[0]
    return node.replace(outputs=(Value("y", out.shape, out.dtype),))


#: (in, out channels, kernel, stride, pads, (h, w)): K = 72 (3 channels), pointwise 5,
#: K = 288 (7 channels, stride 2), one channel, 9 channels (blocks of 3), 15 (3 and 5)
SHAPES = [
    (8, 3, 3, 1, (1, 1, 1, 1), (6, 8)),
    (16, 5, 1, 1, (0, 0, 0, 0), (5, 6)),
    (32, 7, 3, 2, (0, 0, 1, 1), (9, 8)),
    (16, 1, 3, 1, (1, 1, 1, 1), (5, 5)),
    (4, 9, 3, 1, (1, 1, 1, 1), (4, 5)),
    (3, 15, 3, 1, (1, 1, 1, 1), (4, 4)),
]


def test_default_is_the_heuristic_and_traces_round_trip() -> None:
    node = _conv(8, 3, 3, 1, (1, 1, 1, 1), hw=(6, 8))
    s = _space(node)
    assert s.kind == "cm_int8_conv1"
    assert s.default() == {"block": 1, "unroll_k": 1, "zero_point": "im2col",
                           "im2col": "loops"}
    assert s.knob("block").choices == (1, 3)
    assert s.knob("unroll_k").choices == (1, 2)            # 18 calls a row
    assert s.knob("im2col").choices == ("loops", "window")  # K = 72: not all of it
    points = s.valid_points()
    assert len(points) == 16
    for p in points:
        t = s.trace(p)
        assert Trace.from_json(t.to_json()) == t and s.point_of(t) == p
    # forcing the default builds what no tuning builds
    assert _code(node, s.default()) == _code(node)
    # blocks divide the channels, up to BLOCK_CHANNELS; four channels a call: no block
    assert _space(_conv(4, 9, 3, 1, (1, 1, 1, 1), hw=(4, 5))).knob("block").choices == (1, 3)
    assert _space(_conv(3, 15, 3, 1, (1, 1, 1, 1), hw=(4, 4))).knob("block").choices == \
        (1, 3, 5)
    wide = _space(_batch2_odd_width())
    assert wide.workload.endswith("|l4g6|fold=1") and wide.knob("block").choices == (1,)
    # the two-pixel kernel (even channel count) keeps its own space
    assert _space(_conv(8, 4, 3, 1, (1, 1, 1, 1), hw=(6, 8))).kind == "cm_int8_conv"


def test_invalid_points_are_refused_before_building() -> None:
    node = _conv(8, 3, 3, 1, (1, 1, 1, 1), hw=(6, 8))
    s = _space(node)
    with pytest.raises(InvalidPoint, match="unroll_k=4 is not one of"):
        s.check({"block": 1, "unroll_k": 4, "zero_point": "im2col", "im2col": "loops"})
    with pytest.raises(InvalidPoint):
        with forcing({s.workload: Trace("cm_int8_conv1", (("unroll_k", 3),))}):
            schedule_for(node, "cortex-m4")
    nine = _space(_conv(4, 9, 3, 1, (1, 1, 1, 1), hw=(4, 5)))
    with pytest.raises(InvalidPoint, match="block=9 is not one of"):   # 9 accumulators
        nine.check({"block": 9, "unroll_k": 1, "zero_point": "im2col", "im2col": "loops"})
    with pytest.raises(InvalidPoint, match="im2col='all' is not one of"):   # K = 72 > 64
        s.check({**s.default(), "im2col": "all"})
    with pytest.raises(InvalidPoint, match="space 'cm_int8_conv'"):
        s.point_of(Trace("cm_int8_conv", (("wide", True),)))


def covering(space) -> list[dict]:
    """The default, the point of every knob's last choice, and for each i the point of
    every knob's i-th choice (its last where it has fewer): every value of every knob
    (``KILN_TEST_THOROUGH=1``: every point)."""
    if THOROUGH:
        return space.valid_points()
    out = [space.default()]
    for i in range(max(len(k.choices) for k in space.knobs)):
        p = {k.name: k.choices[min(i, len(k.choices) - 1)] for k in space.knobs}
        if space.is_valid(p) and p not in out:
            out.append(p)
    last = {k.name: k.choices[-1] for k in space.knobs}
    return out + ([last] if space.is_valid(last) and last not in out else [])


@pytest.mark.parametrize("i", range(len(SHAPES)),
                         ids=[f"c{c}-m{m}-k{k}-s{st}" for c, m, k, st, _, _ in SHAPES])
def test_every_knob_value_is_bit_exact_on_the_host(i: int) -> None:
    c, m, k, stride, pads, hw = SHAPES[i]
    node = _conv(c, m, k, stride, pads, hw=hw)
    x = _qx(node.inputs[0].shape, "int8")
    want = _reference(node, x)
    s = _space(node)
    seen = set()
    for p in covering(s):
        seen.update(p.items())
        with forcing({s.workload: s.trace(p)}):
            got, info = _run_host(node, x)
        assert info["intrinsic"] == "cortex-m4.dot_q15q7_1x4", (p, info)
        np.testing.assert_array_equal(got, want, err_msg=str(p))
    assert {(kn.name, v) for kn in s.knobs for v in kn.choices} <= seen


def test_four_channel_calls_in_a_batch_are_bit_exact() -> None:
    node = _batch2_odd_width()
    x = _qx(node.inputs[0].shape, "int8")
    want = _reference(node, x)
    s = _space(node)
    assert s.knob("unroll_k").choices == (1, 3)   # 1 or all three calls
    for p in covering(s):
        with forcing({s.workload: s.trace(p)}):
            got, info = _run_host(node, x)
        assert info["intrinsic"] == "cortex-m4.dot_q15q7_4x24"
        np.testing.assert_array_equal(got, want, err_msg=str(p))


def test_records_change_the_generated_kernel() -> None:
    """A record's point replaces the default: the folded zero point (no subtraction in the
    im2col, the bias minus x_zp * sum w), every channel per step of the row, two steps a
    loop iteration."""
    node = _conv(8, 3, 3, 1, (1, 1, 1, 1), hw=(6, 8))
    s = _space(node)
    base = schedule_for(node, "cortex-m4")
    trace = s.trace({"block": 3, "unroll_k": 2, "zero_point": "bias", "im2col": "loops"})
    with applying({s.workload: trace}) as applied:
        tuned = schedule_for(node, "cortex-m4")
    assert applied == {s.workload: trace}
    w = node.inputs[1].data.astype(np.int64).reshape(3, -1)
    np.testing.assert_array_equal(tuned.input_values[2].data,
                                  base.input_values[2].data - 5 * w.sum(axis=1))
    before, after = _code(node), _code(node, trace.as_dict())
    assert "- 5, 0)" in before and "- 5, 0)" not in after
    assert "ax2 < 18" in before
    calls = [ln for ln in after.splitlines() if "kiln_m4_dot_q15q7_1x4_" in ln and "&w[" in ln]
    assert len(calls) == 6 and "dsp_acc[2]" in calls[2]   # 2 steps x 3 channels, unrolled


@needs("arm-none-eabi-gcc", "picolibc", "qemu-system-arm")
def test_the_tuned_points_count_fewer_instructions(tmp_path) -> None:
    """Under QEMU (deterministic counts) on 8 -> 3 channels, 3 x 3: the folded zero point,
    the unrolled row and the block of three channels each save instructions (176,440 ->
    132,440 together); on 5 -> 3 (K = 45, padded to 48) the im2col copy unrolled whole
    (its padding tests fold) does."""
    from toolchain.autotune.measure import BuildInput
    from toolchain.autotune.qemu import QemuBuilder, QemuRunner
    from toolchain.autotune.tasks import task_of

    task = task_of(_conv(8, 3, 3, 1, (1, 1, 1, 1), hw=(12, 12)), "cortex-m4")
    s = task.space
    points = [{}, {"zero_point": "bias"}, {"zero_point": "bias", "unroll_k": 2},
              {"zero_point": "bias", "unroll_k": 2, "block": 3}]
    builds = QemuBuilder("cortex-m4", tmp_path).build(
        [BuildInput(task.node, task.target, s.workload, s.trace({**s.default(), **p}))
         for p in points])
    assert [b.error for b in builds] == [None] * 4
    base, fold, unrolled, block = (r.costs[0] for r in QemuRunner("cortex-m4").run(builds))
    assert block < unrolled < fold < base, (base, fold, unrolled, block)
    task = task_of(_conv(5, 3, 3, 1, (1, 1, 1, 1), hw=(12, 12)), "cortex-m4")
    s = task.space
    builds = QemuBuilder("cortex-m4", tmp_path).build(
        [BuildInput(task.node, task.target, s.workload, s.trace({**s.default(), **p}))
         for p in ({}, {"im2col": "all"})])
    base, whole = (r.costs[0] for r in QemuRunner("cortex-m4").run(builds))
    assert whole < 0.8 * base, (base, whole)


def _odd_model():
    """1x3x12x12 -> 3x3 conv 3 -> 7 -> ReLU -> 3x3 conv 7 -> 5 (stride 2) -> ReLU -> 1x1
    conv 5 -> 3, seeded weights: every convolution one pixel a step."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    nodes, inits, x = [], [], "input"
    for i, (c, m, k, s) in enumerate([(3, 7, 3, 1), (7, 5, 3, 2), (5, 3, 1, 1)]):
        w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(m) * 0.1).astype(np.float32),
                                          f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k],
                                   strides=[s, s], pads=[k // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "odd", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [1, 3, 12, 12])], [helper.make_tensor_value_info(
            x, TensorProto.FLOAT, [1, 3, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow
@needs("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
def test_a_tuned_firmware_is_bit_exact_on_qemu(tmp_path) -> None:
    """Every one-pixel convolution at its largest block, its row unrolled as far as it
    goes and the zero point folded (the Arm build's SMLAD/SXTB16 code, not the host's
    portable C): the firmware's integers equal the reference's (slow: a cross build)."""
    import onnx

    from toolchain.autotune.tasks import extract_tasks
    from toolchain.boards import compile_board, run_on_qemu
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph
    from toolchain.quantize.ptq import quantize_model
    from toolchain.zoo.quantized import calibration

    f = _odd_model()
    m = quantize_model(f, calibration(f), integer_io=True)[0]
    path = tmp_path / "odd.onnx"
    onnx.save(m, path)
    tasks = [t for t in extract_tasks(path, "cortex-m4") if t.space.kind == "cm_int8_conv1"]
    assert len(tasks) == 3
    traces = {t.space.workload: t.space.trace(
        {k.name: k.choices[-1] for k in t.space.knobs}) for t in tasks}
    assert all(tr.as_dict()["zero_point"] == "bias" for tr in traces.values())
    with applying(traces) as applied:
        bundle, _ = compile_board(path, "qemu-mps2-an386", tmp_path / "fw", name="odd")
    assert len(applied) == 3
    rng = np.random.default_rng(0)
    inputs = {"input": rng.integers(-128, 128, (1, 3, 12, 12)).astype(np.int8)}
    run = run_on_qemu(bundle, inputs, timeout=120)
    ref = run_graph(quantize_ops(from_onnx(m)), inputs)
    ints = [k for k in ref if ref[k].dtype.kind in "iu"]
    assert ints
    for k in ints:
        np.testing.assert_array_equal(run.outputs[k], ref[k], err_msg=k)
