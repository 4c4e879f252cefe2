"""int8 (QDQ) versions of the MLPerf-Tiny-style zoo models for the board tests.

A :class:`QdqModel` is one zoo model quantized either by Kiln itself
(:func:`toolchain.quantize.ptq.quantize_model`, what ``kiln quantize`` runs) or by
``onnxruntime.quantization.quantize_static`` (QDQ format, per-channel int8 weights, the zoo
model as it is: onnxruntime keeps BatchNormalization and writes its bias scales with shape
[1] and a scalar zero point). Both use 8 seeded random calibration samples. The object
keeps the QDQ model, the zoo's sample inputs, the host int8 build's outputs (``c-generic``
bundle), onnxruntime's outputs on the same QDQ model, and board bundles compiled once each.

Example::

    >>> m = QdqModel(tmp_path, "ds_cnn", "kiln")          # doctest: +SKIP
    >>> bundle, report = m.for_board("nucleo-l4r5zi")     # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

CALIBRATION_SEED = 11
CALIBRATION_SAMPLES = 8


def calibration(model: onnx.ModelProto, n: int = CALIBRATION_SAMPLES,
                seed: int = CALIBRATION_SEED) -> dict[str, np.ndarray]:
    """``n`` seeded standard-normal samples per graph input (first axis = samples)."""
    from toolchain.frontend.onnx import from_onnx

    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal((n, *v.shape)).astype(np.float32)
            for v in from_onnx(model).inputs}


def kiln_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ model written by Kiln's post-training quantization."""
    from toolchain.quantize.ptq import quantize_model

    return quantize_model(model, calibration(model))[0]


def ort_qdq(model: onnx.ModelProto, work: Path) -> onnx.ModelProto:
    """The QDQ model written by ``onnxruntime.quantization.quantize_static``."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    cal = calibration(model)
    samples = [{k: v[i] for k, v in cal.items()} for i in range(CALIBRATION_SAMPLES)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    src, dst = work / "float.onnx", work / "ort_qdq.onnx"
    onnx.save(model, src)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return onnx.load(dst)


def output_steps(qdq: onnx.ModelProto) -> dict[str, float]:
    """``{output: quantization step}`` for each graph output written by a per-tensor
    DequantizeLinear (outputs computed by float ops, e.g. the autoencoder's score, are
    left out)."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer}
    steps = {}
    for node in qdq.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] in {
                o.name for o in qdq.graph.output}:
            scale = inits.get(node.input[1])
            if scale is not None and scale.size == 1:
                steps[node.output[0]] = float(scale.reshape(-1)[0])
    return steps


class QdqModel:
    """A zoo model in QDQ int8 form with its host, onnxruntime and board results."""

    def __init__(self, root: Path, name: str, quantizer: str) -> None:
        import onnxruntime as ort

        from tests.models.zoo import ZOO
        from toolchain.bundle import compile_model, load_bundle

        spec = ZOO[name]
        model = spec.build(batch=1) if name == "autoencoder" else spec.build()
        self.name, self.quantizer, self.root = name, quantizer, root
        self.inputs = spec.inputs(model)
        self.qdq = kiln_qdq(model) if quantizer == "kiln" else ort_qdq(model, root)
        self.path = root / f"{name}_{quantizer}_int8.onnx"
        onnx.save(self.qdq, self.path)
        host = compile_model(self.path, "c-generic", root / "host", name=f"{name}_int8")
        self.host = load_bundle(host)(self.inputs)
        sess = ort.InferenceSession(str(self.path), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        self.ort = dict(zip(names, sess.run(names, self.inputs), strict=True))
        self.steps = output_steps(self.qdq)
        self.bundles: dict[str, tuple[Path, dict]] = {}

    def for_board(self, board: str) -> tuple[Path, dict]:
        """The board bundle (compiled and linked once), and its size report."""
        from toolchain.boards import compile_board

        if board not in self.bundles:
            self.bundles[board] = compile_board(self.path, board, self.root / board,
                                                name=f"{self.name}_int8")
        return self.bundles[board]


#: MLPerf Tiny v0.5, microTVM + CMSIS-NN: task and workspace bytes of the int8 models
ANCHORS = {"ds_cnn": ("KWS", 17_232), "mobilenet_v1": ("VWW", 64_800),
           "resnet8": ("IC", 66_112), "autoencoder": ("AD", 1_160)}


def anchor_model(name: str) -> onnx.ModelProto:
    """The zoo model quantized as the MLPerf Tiny int8 reference models are: int8 input and
    output tensors (``quantize_model(..., integer_io=True)``), batch 1; the autoencoder
    returns only its reconstruction (the harness computes the anomaly score from it)."""
    from tests.models.zoo import ZOO
    from toolchain.quantize.ptq import quantize_model

    model = ZOO[name].build(batch=1) if name == "autoencoder" else ZOO[name].build()
    if name == "autoencoder":
        keep = [o for o in model.graph.output if o.name == "reconstruction"]
        del model.graph.output[:]
        model.graph.output.extend(keep)
    return quantize_model(model, calibration(model), integer_io=True)[0]


def arena_report(bundle: Path) -> dict:
    """What the planned arena of a compiled bundle holds: ``arena`` bytes, ``tensors``
    (the arena of the model's tensors alone, kernel scratch left out), the largest kernel
    ``scratch`` as ``(kernel, bytes)``, and ``peak``: the buffers live at the step where
    the arena is fullest, as ``(name, bytes)``."""
    import json

    from toolchain.graph.memory import plan_lifetimes

    meta = json.loads((bundle / "metadata.json").read_text())
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
