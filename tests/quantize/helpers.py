"""Shared helpers of the int8 tests: ORT-quantized zoo models and step-level comparisons."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph
from toolchain.graph.ops.common import KILN_TO_ONNX
from toolchain.graph.passes.pipeline import run_pipeline
from toolchain.graph.reference import run_graph
from toolchain.quantize.export import to_onnx

MLPERF_TINY = ("ds_cnn", "resnet8", "mobilenet_v1", "autoencoder")


def float_model(name: str) -> onnx.ModelProto:
    """The zoo model with BatchNorm folded by Kiln's passes (what both quantizers see)."""
    from toolchain.zoo import ZOO

    g = from_onnx(ZOO[name].build())
    g = run_pipeline(g, passes=["constant_fold", "simplify", "fold_affine",
                                "dead_code_elimination"])
    return to_onnx(g)


def random_inputs(graph: Graph, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{v.name: rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
            for _ in range(n)]


def ort_quantize(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], path: str,
                 activation: str = "QInt8") -> onnx.ModelProto:
    """``onnxruntime.quantization.quantize_static`` (QDQ, per-channel int8 weights)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    src = path + ".float.onnx"
    onnx.save(model, src)
    quantize_static(src, path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=getattr(QuantType, activation),
                    weight_type=QuantType.QInt8)
    return onnx.load(path)


INT_OPS = ("QConv", "QGemm", "QAdd", "QAvgPool")


def quantized_outputs(graph: Graph) -> list[str]:
    """Names of the quantized tensors that the graph's final DequantizeLinear nodes read,
    where an integer op computes them (not a float op such as Softmax that onnxruntime's
    quantizer also wraps in Q/DQ)."""
    prod = graph.producers()
    names = []
    for v in graph.outputs:
        p = prod.get(v)
        if p is not None and p.op == "DequantizeLinear":
            src = prod.get(p.inputs[0])
            if src is not None and src.op in INT_OPS:
                names.append(p.inputs[0].name)
    return names


def compare_steps(qdq: onnx.ModelProto, kiln_graph: Graph, inputs: dict[str, np.ndarray]
                  ) -> tuple[int, int, int]:
    """``(elements, exactly equal, max |difference| in quantization steps)`` between
    onnxruntime on the QDQ model and ``run_graph`` of Kiln's integer graph, compared on the
    quantized tensors that feed the model outputs."""
    names = quantized_outputs(kiln_graph)
    assert names, "the graph has no DequantizeLinear before its outputs"
    values = {v.name: v for v in kiln_graph.values()}
    m = onnx.ModelProto()
    m.CopyFrom(qdq)
    del m.graph.output[:]
    for nm in names:
        v = values[nm]
        m.graph.output.append(helper.make_tensor_value_info(nm, KILN_TO_ONNX[v.dtype],
                                                            list(v.shape)))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(names, inputs)
    got = run_graph(kiln_graph.replace(outputs=[values[n] for n in names]), inputs)
    total = equal = worst = 0
    for nm, w in zip(names, want, strict=True):
        d = np.abs(got[nm].astype(np.int64) - w.astype(np.int64))
        total += d.size
        equal += int((d == 0).sum())
        worst = max(worst, int(d.max()))
    return total, equal, worst


def ort_values(qdq: onnx.ModelProto, names: list[str], dtypes: dict[str, str],
               shapes: dict[str, tuple[int, ...]], inputs: dict[str, np.ndarray]
               ) -> dict[str, np.ndarray]:
    """onnxruntime's values of the named tensors (made extra graph outputs)."""
    m = onnx.ModelProto()
    m.CopyFrom(qdq)
    del m.graph.output[:]
    for nm in names:
        m.graph.output.append(helper.make_tensor_value_info(nm, KILN_TO_ONNX[dtypes[nm]],
                                                            list(shapes[nm])))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(names, inputs), strict=True))


def compare_ops(qdq: onnx.ModelProto, kiln_graph: Graph, inputs: dict[str, np.ndarray]
                ) -> dict[str, tuple[int, int, int]]:
    """Per integer op kind: ``(elements, exactly equal, max |difference| in steps)`` of the
    op's reference run on onnxruntime's own int8 inputs, against onnxruntime's output."""
    from toolchain.graph.reference import run_node

    qnodes = [n for n in kiln_graph.nodes if n.op in INT_OPS]
    needed = {v.name: v for n in qnodes for v in (*n.inputs, *n.outputs)
              if v is not None and v.data is None}
    vals = ort_values(qdq, sorted(needed), {k: v.dtype for k, v in needed.items()},
                      {k: v.shape for k, v in needed.items()}, inputs)
    stats: dict[str, list[int]] = {}
    for n in qnodes:
        args = [None if v is None else (v.data if v.data is not None else vals[v.name])
                for v in n.inputs]
        got = run_node(n, args)[0].astype(np.int64)
        d = np.abs(got - vals[n.outputs[0].name].astype(np.int64))
        s = stats.setdefault(n.op, [0, 0, 0])
        s[0] += d.size
        s[1] += int((d == 0).sum())
        s[2] = max(s[2], int(d.max()))
    return {k: (v[0], v[1], v[2]) for k, v in stats.items()}
