"""int8 (QDQ) versions of the MLPerf-Tiny-style zoo models for the board tests.

:class:`Int8Builds` holds the zoo models quantized by Kiln itself
(:func:`toolchain.zoo.quantized.kiln_qdq`, what ``kiln quantize`` runs) and their host
bundles, compiled and run once a session per (target, backend): the board tests' host
builds and ``tests/quantize/test_bundle.py``'s x86 and LLVM bundles are the same ones.

A :class:`QdqModel` is one zoo model quantized either by Kiln itself (an
:class:`Int8Builds` model) or by
``onnxruntime.quantization.quantize_static`` (QDQ format, per-channel int8 weights, the zoo
model as it is: onnxruntime keeps BatchNormalization and writes its bias scales with shape
[1] and a scalar zero point). Both use the same 8 seeded random calibration samples
(:func:`toolchain.zoo.quantized.calibration`). The object keeps the QDQ model, the zoo's
sample inputs, the exact integer outputs the board runs must equal (Kiln's models: the host
int8 build's, a ``c-generic`` bundle; onnxruntime's: Kiln's integer reference), onnxruntime's
outputs on the same QDQ model, and board bundles compiled once each.

Example::

    >>> builds = Int8Builds(tmp_path)                     # doctest: +SKIP
    >>> pkg, outputs = builds.build("ds_cnn", "x86_64-avx2", "llvm")  # doctest: +SKIP
    >>> m = QdqModel(tmp_path, "ds_cnn", "kiln", builds)  # doctest: +SKIP
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


class Int8Builds:
    """Zoo models as Kiln's quantization writes them (``kiln_qdq``) and their bundles, made
    once a session: :meth:`model` quantizes a model once, :meth:`build` compiles it for a
    (target, backend) through ``toolchain.compile`` and runs it on the zoo's sample inputs
    once. Every bundle is named ``q``, so a library of the same sources made by another
    test is found in the build cache. ``batch`` picks the zoo model's batch (``None``: its
    own)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.models: dict[tuple[str, int | None], tuple[Path, onnx.ModelProto, dict]] = {}
        self.builds: dict[tuple[str, int | None, str, str], tuple[Any, dict]] = {}

    def model(self, name: str, batch: int | None = None
              ) -> tuple[Path, onnx.ModelProto, dict[str, np.ndarray]]:
        """The QDQ model's path and the model, and the zoo's sample inputs."""
        from toolchain.zoo import ZOO

        key = name, batch
        if key not in self.models:
            spec = ZOO[name]
            model = spec.build() if batch is None else spec.build(batch=batch)
            qdq = kiln_qdq(model)
            path = self.root / (name if batch is None else f"{name}_b{batch}") / "q.onnx"
            path.parent.mkdir(parents=True)
            onnx.save(qdq, path)
            self.models[key] = path, qdq, spec.inputs(model)
        return self.models[key]

    def build(self, name: str, target: str, backend: str = "c", batch: int | None = None
              ) -> tuple[Any, dict[str, np.ndarray]]:
        """The compiled package (``toolchain.Package``) and its outputs on the sample
        inputs."""
        import toolchain

        key = name, batch, target, backend
        if key not in self.builds:
            path, _, inputs = self.model(name, batch)
            pkg = toolchain.compile(path, target, output=path.parent / f"{target}_{backend}",
                                    backend=backend)
            self.builds[key] = pkg, toolchain.run(pkg, inputs).outputs
        return self.builds[key]


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

    def __init__(self, root: Path, name: str, quantizer: str, builds: Int8Builds) -> None:
        import onnxruntime as ort

        from toolchain.frontend.onnx import from_onnx
        from toolchain.graph.passes.quantize_ops import quantize_ops
        from toolchain.graph.reference import run_graph
        from toolchain.zoo import ZOO

        self.name, self.quantizer, self.root = name, quantizer, root
        batch = 1 if name == "autoencoder" else None
        if quantizer == "kiln":
            # the model and its c-generic host build are tests/quantize/test_bundle.py's
            self.path, self.qdq, self.inputs = builds.model(name, batch)
            self.host = builds.build(name, "c-generic", "c", batch)[1]
        else:
            spec = ZOO[name]
            model = spec.build() if batch is None else spec.build(batch=batch)
            self.inputs = spec.inputs(model)
            self.qdq = ort_qdq(model, root)
            self.path = root / f"{name}_{quantizer}_int8.onnx"
            onnx.save(self.qdq, self.path)
            # the exact integer result: Kiln's integer reference (bit-equal to a c-generic
            # build of this model; the Kiln-quantized models' host builds above are built
            # anyway, for tests/quantize/test_bundle.py)
            self.host = run_graph(quantize_ops(from_onnx(self.qdq)), self.inputs)
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
