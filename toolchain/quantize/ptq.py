"""Post-training static quantization, end to end (what ``kiln quantize`` runs).

1. import the float model and simplify it with Kiln's passes (constants folded, BatchNorm
   folded into the convolutions and dense layers, dead code removed);
2. run it in the reference executor over the calibration samples and record each
   tensor's range (:mod:`.calibrate`);
3. insert QuantizeLinear/DequantizeLinear pairs (:mod:`.qdq`), with ``integer_io`` make
   the inputs and outputs the int8 tensors themselves (:mod:`.integer_io`), and write the
   QDQ model (:mod:`.export`), checked by ``onnx.checker``.

Example::

    >>> model, report = quantize_model("model.onnx", {"input": samples})  # doctest: +SKIP
    >>> report.float_ops  # doctest: +SKIP
    ['Softmax']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from toolchain.errors import InternalError, ModelError, OptionError
from toolchain.graph.passes.pipeline import run_pipeline
from toolchain.quantize.calibrate import collect_ranges, split_samples
from toolchain.quantize.export import to_onnx
from toolchain.quantize.qdq import QdqResult, insert_qdq

PREPARE_PASSES = ("constant_fold", "simplify", "fold_affine", "dead_code_elimination")


#: ops of a model quantized already (QDQ or operator-oriented): not quantized again
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv",
                           "QLinearMatMul", "ConvInteger", "MatMulInteger"})


def quantize_model(model: str | os.PathLike[str] | bytes | onnx.ModelProto,
                   calibration: Mapping[str, np.ndarray], *, per_channel: bool = True,
                   symmetric_activations: bool = False, activation_dtype: str = "int8",
                   percentile: float | None = None,
                   input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                   integer_io: bool = False, power_of_two_scales: bool = False,
                   ) -> tuple[onnx.ModelProto, QdqResult]:
    """The QDQ ONNX model of ``model`` calibrated on ``calibration`` (arrays by input name,
    first dimension = samples), and what was quantized / left float. ``integer_io``: int8
    inputs and outputs (their scales in ``metadata_props`` as ``kiln.io.NAME``).
    ``power_of_two_scales``: every scale a power of two (:func:`insert_qdq`)."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.quantize.integer_io import integer_io as to_integer_io

    # checked here, not only by the CLI: an int16 zero point with uint8's range, or a
    # percentile under 50 (an inverted range), would give a silently wrong model
    if activation_dtype not in ("int8", "uint8"):
        raise OptionError(f"quantize_model: activation_dtype {activation_dtype!r} is not "
                          "'int8' or 'uint8'")
    if percentile is not None and not 50.0 < percentile <= 100.0:
        raise OptionError(f"quantize_model: percentile {percentile} is not in (50, 100]; "
                          "give e.g. 99.99")
    graph = from_onnx(model, input_shapes=input_shapes)
    quantized = [n for n in graph.nodes if n.op in QUANTIZED_OPS]
    if quantized:  # its scales would collide with the new ones
        ops = ", ".join(sorted({n.op for n in quantized}))
        where = os.fspath(model) if isinstance(model, (str, os.PathLike)) else graph.name
        raise ModelError(f"{where}: the model is already quantized ({len(quantized)} "
                         f"nodes: {ops}); kiln quantize takes a float model, and kiln "
                         "compile takes this one as it is")
    graph = run_pipeline(graph, passes=list(PREPARE_PASSES))
    samples = split_samples(graph, calibration)
    ranges = collect_ranges(graph, samples, percentile)
    result = insert_qdq(graph, ranges, activation_dtype=activation_dtype,
                        symmetric_activations=symmetric_activations, per_channel=per_channel,
                        power_of_two_scales=power_of_two_scales)
    if integer_io:
        result.graph, result.io = to_integer_io(result.graph)
    out = to_onnx(result.graph)
    if result.io:
        props = {f"kiln.io.{name}": f"{scale!r} {zp} {dtype}"
                 for name, (scale, zp, dtype) in sorted(result.io.items())}
        onnx.helper.set_model_props(out, props)
    # the float model passed the frontend's checks, so a model Kiln writes that fails them
    # is a Kiln bug: InternalError (the CLI exits 1 with a bug report), never a user error
    try:
        onnx.checker.check_model(out, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise InternalError(f"the quantized model Kiln wrote fails onnx.checker: {exc}") \
            from None
    except onnx.shape_inference.InferenceError as exc:
        # The model records Kiln's shapes; with ceil_mode pooling ONNX's shape inference
        # keeps a window the specification drops (a known ONNX bug: docs/frontend.md), so
        # its strict check disagrees. Anything else is a Kiln bug, said with where.
        if not any(n.op_type in ("MaxPool", "AveragePool", "LpPool") and any(
                a.name == "ceil_mode" and a.i for a in n.attribute) for n in out.graph.node):
            raise InternalError(f"the quantized model Kiln wrote fails ONNX shape inference: "
                                f"{exc}") from None
        onnx.checker.check_model(out)
    return out, result


def summary(result: QdqResult, samples: int | None = None) -> dict[str, Any]:
    """Counts for the command's report."""
    ops = [n.op for n in result.graph.nodes]
    return {"quantized_nodes": len(result.quantized), "float_ops": result.float_ops,
            "quantize_nodes": ops.count("QuantizeLinear"),
            "dequantize_nodes": ops.count("DequantizeLinear"), "samples": samples}
