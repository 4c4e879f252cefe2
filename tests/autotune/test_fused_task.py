"""A model's tasks measure the kernel the bundle runs: the anchor with its fused tail.

A depthwise ``rw=1`` point is as fast as the default for the convolution alone and 30x
slower once its ReLU6 is fused (a per-pixel write-back loop), so a task timing the anchor
alone picked points that made MobileNetV2 3x slower (docs/tuning.md, session 15)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.autotune.conv_models import bundle_at_point
from toolchain.autotune.measure import BuildInput, build_one
from toolchain.autotune.tasks import extract_tasks

TARGET = "x86_64-avx2"


def dw_clip_model(clipped: int = 1) -> onnx.ModelProto:
    """Depthwise 3x3 stride 2 on 8 x 16 x 16 then ReLU6 (``Clip(0, 6)``), ``clipped``
    times (outputs ``y``, ``y1`` …); with ``clipped > 1`` one more, identical depthwise
    conv without the Clip comes first (output ``z``): one anchor workload, two tails."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 1, 3, 3)) * 0.5
                                      ).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    conv = dict(pads=[1] * 4, strides=[2, 2], kernel_shape=[3, 3], group=8)
    outs = [f"y{i}" if i else "y" for i in range(clipped)]
    # the kernel without a Clip comes first: the task is not merely the first one seen
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["z"], **conv)] if clipped > 1 else []
    for y in outs:
        nodes += [helper.make_node("Conv", ["x", "w", "b"], [f"{y}c"], **conv),
                  helper.make_node("Clip", [f"{y}c", "lo", "hi"], [y])]
    if clipped > 1:
        outs.append("z")
    g = helper.make_graph(
        nodes, "dwclip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 8, 8, 8]) for y in outs],
        inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _source(lib: str) -> str:
    return Path(lib).with_suffix(".c").read_text()  # kept beside the cached library


def test_a_models_task_builds_the_fused_kernel_and_its_record_applies(tmp_path):
    model = dw_clip_model()
    task, = extract_tasks(model, TARGET)
    assert task.node.op == "Fused" and task.space.kind == "depthwise"
    s = task.space
    trace = s.trace(s.canonical({**s.default(), "rw": 1}))
    b = build_one(BuildInput(task.node, task.target, s.workload, trace))
    assert b.error is None
    src = _source(b.lib)
    assert "6.0f" in src and "kiln_fast_minf" in src  # the Clip is in what is timed
    # the record, keyed by the anchor's workload, still steers the bundle, and it is right
    bundle_src, err = bundle_at_point(model, TARGET, tmp_path, {"rw": 1}, seed=3)
    assert err < 1e-5
    # rw=1 writes a row of pixels back in one 2-D loop nest (gcc vectorizes it), not one
    # 8-lane Clip loop per pixel (which gcc unrolls into scalar compares and branches)
    assert bundle_src.count("6.0f);") == 1


def test_anchors_shared_by_several_tails_measure_the_commonest():
    task, = extract_tasks(dw_clip_model(clipped=2), TARGET)
    assert task.weight == 3
    ops = [n.op for n in task.node.attrs["graph"].nodes]
    assert "Clip" in ops  # two of the three kernels run Clip after the conv
