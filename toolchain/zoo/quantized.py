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
    (the arena of the model's tensors alone, kernel scratch left out), the largest kernel
    ``scratch`` as ``(kernel, bytes)``, and ``peak``: the buffers live at the step where
    the arena is fullest, as ``(name, bytes)``.

    Example (the ``metadata.json`` of a bundle with one tensor and one kernel scratch)::

        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> plan = {"alignment": 64, "steps": [{}, {}], "tensors": [
        ...     {"name": "x", "kind": "tensor", "size": 64, "first": 0, "last": 1},
        ...     {"name": "conv:acc", "kind": "scratch", "size": 32, "first": 1, "last": 1}]}
        >>> _ = (d / "metadata.json").write_text(json.dumps(
        ...     {"arena_bytes": 128, "memory_plan": plan}))
        >>> report = arena_report(d)
        >>> report["arena"], report["tensors"], report["scratch"], report["peak"]
        (128, 64, ('conv', 32), [('x', 64), ('conv:acc', 32)])
    """
    from toolchain.graph.memory import plan_lifetimes

    meta = json.loads((Path(bundle) / "metadata.json").read_text())
    plan = meta["memory_plan"]
    entries = plan["tensors"]
    root = {t["name"]: t.get("inplace_of") or t["name"] for t in entries}

    def buffer(name: str) -> str:
        while root[name] != name:
            name = root[name]
        return name

    last: dict[str, int] = {}  # a buffer lives until its last in-place member dies
    for t in entries:
        b = buffer(t["name"])
        last[b] = max(last.get(b, t["last"]), t["last"])
    tensors = [(t["name"], t["size"], t["first"], last[t["name"]]) for t in entries
               if t["kind"] == "tensor" and not t.get("inplace_of")]
    only = plan_lifetimes(tensors, alignment=plan["alignment"]).arena_bytes if tensors else 0
    scratch = max(((t["name"].split(":")[0], t["size"]) for t in entries
                   if t["kind"] == "scratch"), key=lambda p: p[1], default=("", 0))
    steps = len(plan["steps"])
    live = [[t for t in entries if not t.get("inplace_of")
             and t["first"] <= s <= last.get(t["name"], t["last"])] for s in range(steps)]
    top = max(range(steps), key=lambda s: sum(t["size"] for t in live[s]), default=0)
    return {"arena": meta["arena_bytes"], "tensors": only, "scratch": scratch,
            "peak": [(t["name"], t["size"]) for t in live[top]] if steps else []}
