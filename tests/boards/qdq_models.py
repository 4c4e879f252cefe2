"""int8 (QDQ) versions of the MLPerf-Tiny-style zoo models for the board tests.

A :class:`QdqModel` is one zoo model quantized either by Kiln itself
(:func:`toolchain.zoo.quantized.kiln_qdq`, what ``kiln quantize`` runs) or by
``onnxruntime.quantization.quantize_static`` (QDQ format, per-channel int8 weights, the zoo
model as it is: onnxruntime keeps BatchNormalization and writes its bias scales with shape
[1] and a scalar zero point). Both use the same 8 seeded random calibration samples
(:func:`toolchain.zoo.quantized.calibration`). The object keeps the QDQ model, the zoo's
sample inputs, the host int8 build's outputs (``c-generic`` bundle), onnxruntime's outputs
on the same QDQ model, and board bundles compiled once each.

Example::

    >>> m = QdqModel(tmp_path, "ds_cnn", "kiln")          # doctest: +SKIP
    >>> bundle, report = m.for_board("nucleo-l4r5zi")     # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from toolchain.zoo.quantized import CALIBRATION_SAMPLES, calibration, kiln_qdq


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

        from toolchain.bundle import compile_model, load_bundle
        from toolchain.zoo import ZOO

        spec = ZOO[name]
        model = spec.build(batch=1) if name == "autoencoder" else spec.build()
        self.name, self.quantizer, self.root = name, quantizer, root
        self.inputs = spec.inputs(model)
        self.qdq = kiln_qdq(model) if quantizer == "kiln" else ort_qdq(model, root)
        self.path = root / f"{name}_{quantizer}_int8.onnx"
        onnx.save(self.qdq, self.path)
        # named as tests/quantize/test_bundle.py names its c-generic bundles of the same
        # Kiln-quantized models (KilnQdqBuilds, "q"): the same sources, so one of the two
        # finds the library in the build cache (the workers share KILN_CACHE_DIR)
        host = compile_model(self.path, "c-generic", root / "host", name="q")
        self.host = load_bundle(host)(self.inputs)
        sess = ort.InferenceSession(str(self.path), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        self.ort = dict(zip(names, sess.run(names, self.inputs), strict=True))
        self.steps = output_steps(self.qdq)
        self.bundles: dict[str, tuple[Path, dict]] = {}
        self.runs: dict[str, Any] = {}
        self.specs: dict[tuple[str, str], Any] = {}

    def for_board(self, board: str) -> tuple[Path, dict]:
        """The board bundle (compiled and linked once), and its size report; boards of one
        target share Kiln's compile (:func:`tests.boards.conftest.compile_for_board`)."""
        from tests.boards.conftest import compile_for_board

        if board not in self.bundles:
            self.bundles[board] = compile_for_board(self.path, board, self.root / board,
                                                    f"{self.name}_int8", self.specs)
        return self.bundles[board]

    def run_on(self, board: str) -> Any:
        """The board bundle's run under QEMU on :attr:`inputs` (run once): the result the
        int8 board tests check and the LLVM-backend build of the model is compared with."""
        from toolchain.boards import run_on_qemu

        if board not in self.runs:
            self.runs[board] = run_on_qemu(self.for_board(board)[0], self.inputs, timeout=180)
        return self.runs[board]
