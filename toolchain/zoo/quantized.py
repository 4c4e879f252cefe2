"""int8 (QDQ) versions of the zoo models, as the benchmarks and board tests build them.

Kiln's post-training quantization (:func:`toolchain.quantize.ptq.quantize_model`, what
``kiln quantize`` runs) calibrated on :data:`CALIBRATION_SAMPLES` seeded standard-normal
samples (:func:`calibration`): :func:`kiln_qdq` quantizes a model as it is,
:func:`anchor_model` the way the MLPerf Tiny int8 reference models are (int8 input and
output tensors, batch 1), so their arenas compare with the microTVM workspaces in
:data:`ANCHORS`; :func:`arena_report` reads what a compiled bundle's arena holds.

Example::

    >>> from toolchain.zoo import ZOO
    >>> model = ZOO["lenet5"].build()
    >>> {k: v.shape for k, v in calibration(model).items()}
    {'input': (8, 1, 1, 28, 28)}
    >>> sorted({n.op_type for n in kiln_qdq(model).graph.node} & {"QuantizeLinear"})
    ['QuantizeLinear']
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

CALIBRATION_SEED = 11
CALIBRATION_SAMPLES = 8

#: MLPerf Tiny v0.5, microTVM + CMSIS-NN: task and workspace bytes of the int8 models
ANCHORS = {"ds_cnn": ("KWS", 17_232), "mobilenet_v1": ("VWW", 64_800),
           "resnet8": ("IC", 66_112), "autoencoder": ("AD", 1_160)}


def calibration(model: onnx.ModelProto, n: int = CALIBRATION_SAMPLES,
                seed: int = CALIBRATION_SEED) -> dict[str, np.ndarray]:
    """``n`` seeded standard-normal samples per graph input (first axis = samples).

    Example::

        >>> from toolchain.zoo import ZOO
        >>> calibration(ZOO["lenet5"].build(), n=2)["input"].shape   # 2 samples of 1x1x28x28
        (2, 1, 1, 28, 28)
    """
    from toolchain.frontend.onnx import from_onnx

    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal((n, *v.shape)).astype(np.float32)
            for v in from_onnx(model).inputs}


def kiln_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ model written by Kiln's post-training quantization on :func:`calibration`.

    Example::

        >>> from toolchain.zoo import ZOO
        >>> qdq = kiln_qdq(ZOO["lenet5"].build())
        >>> "DequantizeLinear" in {n.op_type for n in qdq.graph.node}
        True
    """
    from toolchain.quantize.ptq import quantize_model

    return quantize_model(model, calibration(model))[0]


def anchor_float(name: str) -> onnx.ModelProto:
    """The float zoo model an MLPerf Tiny anchor is quantized from: batch 1, and the
    autoencoder returns only its reconstruction (the harness computes the anomaly score).

    Example::

        >>> [o.name for o in anchor_float("autoencoder").graph.output]
        ['reconstruction']
    """
    from toolchain.zoo.models import ZOO

    model = ZOO[name].build(batch=1) if name == "autoencoder" else ZOO[name].build()
    if name == "autoencoder":
        keep = [o for o in model.graph.output if o.name == "reconstruction"]
        del model.graph.output[:]
        model.graph.output.extend(keep)
    return model


def anchor_model(name: str) -> onnx.ModelProto:
    """:func:`anchor_float` quantized as the MLPerf Tiny int8 reference models are: int8
    input and output tensors (``quantize_model(..., integer_io=True)``).

    Example::

        >>> m = anchor_model("autoencoder")
        >>> m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT8
        True
    """
    from toolchain.quantize.ptq import quantize_model

    model = anchor_float(name)
    return quantize_model(model, calibration(model), integer_io=True)[0]


def arena_report(bundle: Path) -> dict:
    """What the planned arena of a compiled bundle holds: ``arena`` bytes, ``tensors``
    (the arena of the model's tensors alone, kernel scratch left out), ``no_overlap`` (the
    arena with every overlap output in a buffer of its own: the plan before overlaps,
    :func:`toolchain.graph.memory.replan`), the largest kernel ``scratch`` as
    ``(kernel, bytes)``, and ``peak``: the buffers live at the step where the arena is
    fullest, as ``(name, bytes)`` (an overlap output counts the bytes it adds to its input).

    Example (the ``metadata.json`` of a bundle with one tensor and one kernel scratch)::

        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> plan = {"alignment": 64, "steps": [{}, {}], "tensors": [
        ...     {"name": "x", "kind": "tensor", "size": 64, "first": 0, "last": 1,
        ...      "offset": 0},
        ...     {"name": "conv:acc", "kind": "scratch", "size": 32, "first": 1, "last": 1,
        ...      "offset": 64}]}
        >>> _ = (d / "metadata.json").write_text(json.dumps(
        ...     {"arena_bytes": 128, "memory_plan": plan}))
        >>> report = arena_report(d)
        >>> report["arena"], report["tensors"], report["scratch"], report["peak"]
        (128, 64, ('conv', 32), [('x', 64), ('conv:acc', 32)])
    """
    from toolchain.graph.memory import TensorPlan, replan

    meta = json.loads((Path(bundle) / "metadata.json").read_text())
    plan = meta["memory_plan"]
    align = plan["alignment"]
    entries = [TensorPlan(t["name"], t["size"], t.get("offset", 0), t["first"], t["last"],
                          t["kind"], t.get("inplace_of"), t.get("lead", 0))
               for t in plan["tensors"]]
    has_tensors = any(t.kind == "tensor" for t in entries)
    only = replan(entries, alignment=align, scratch=False).arena_bytes if has_tensors else 0
    before = replan(entries, alignment=align, overlap=False).arena_bytes if entries else 0
    scratch = max(((t.name.split(":")[0], t.size) for t in entries if t.kind == "scratch"),
                  key=lambda p: p[1], default=("", 0))
    steps = len(plan["steps"])

    def occupied(t: TensorPlan, s: int) -> tuple[int, int] | None:
        """The bytes ``t`` holds at step ``s`` that no other tensor listed holds: an
        in-place tensor none at the step its host dies, an overlap output those past its
        host's block."""
        if not t.first <= s <= t.last:
            return None
        host = by_name.get(t.inplace_of or "")
        if host is not None and host.first <= s <= host.last:
            lo, hi = t.offset, t.offset + t.size
            shared = max(0, min(hi, host.offset + host.size) - max(lo, host.offset))
            return (t.offset, t.size - shared) if t.size > shared else None
        return t.offset, t.size

    by_name = {t.name: t for t in entries}
    live = [[(t.name, b[1]) for t in entries if (b := occupied(t, s)) is not None]
            for s in range(steps)]
    top = max(range(steps), key=lambda s: sum(size for _, size in live[s]), default=0)
    return {"arena": meta["arena_bytes"], "tensors": only, "no_overlap": before,
            "scratch": scratch, "peak": live[top] if steps else []}
