"""Run a zoo model through Kiln and through onnxruntime, and compare.

Shared by ``tests/zoo/test_zoo.py`` and ``benchmarks/model_accuracy.py``. Needs
onnxruntime (a ``dev`` extra), imported only when a function runs it.

Error measure.  For each output, ``max_rel_err = max|kiln - ort| / max|ort|``: the largest
error relative to the output's scale (element-wise relative error means nothing for values
near zero).  An output passes when ``np.allclose(kiln, ort, rtol=1e-4, atol=1e-5 * scale)``.

Example::

    >>> from toolchain.zoo import ZOO
    >>> spec = ZOO["lenet5"]
    >>> model = spec.build()
    >>> result = compare_with_ort(model, spec.inputs(model))
    >>> result.ok
    True
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

RTOL = 1e-4
#: absolute tolerance as a fraction of the output's largest magnitude
ATOL_FRACTION = 1e-5


def run_ort(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of onnxruntime (CPU, one thread, graph optimisations off), keyed by name."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3  # no warnings about initializers listed as inputs
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(inputs)), strict=True))


def run_kiln(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
             input_shapes: Mapping[str, tuple[int, ...]] | None = None
             ) -> dict[str, np.ndarray]:
    """Outputs of Kiln's frontend + numpy reference executor, keyed by name."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    graph = from_onnx(model, input_shapes=dict(input_shapes) if input_shapes else None)
    return run_graph(graph, dict(inputs))


@dataclass
class OutputError:
    """How far one Kiln output is from onnxruntime's."""

    name: str
    shape: tuple[int, ...]
    max_abs_err: float
    scale: float
    ok: bool
    problem: str = ""

    @property
    def max_rel_err(self) -> float:
        return self.max_abs_err / self.scale if self.scale else self.max_abs_err


@dataclass
class Comparison:
    """Kiln vs onnxruntime on one model and one input set."""

    outputs: list[OutputError] = field(default_factory=list)
    kiln_s: float = 0.0
    ort_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def max_rel_err(self) -> float:
        return max(o.max_rel_err for o in self.outputs)

    def describe(self) -> str:
        return "; ".join(
            f"{o.name}{list(o.shape)}: max rel err {o.max_rel_err:.2e} "
            f"(max abs {o.max_abs_err:.2e}, scale {o.scale:.3g})"
            + ("" if o.ok else f" FAIL {o.problem}")
            for o in self.outputs)


def compare_outputs(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]
                    ) -> list[OutputError]:
    """Compare each of ``want``'s outputs with ``got``'s, by name."""
    result = []
    for name, ref in want.items():
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        if name not in got:
            result.append(OutputError(name, ref.shape, np.inf, scale, False,
                                      f"missing from Kiln's outputs {sorted(got)}"))
            continue
        out = np.asarray(got[name])
        if out.shape != ref.shape or out.dtype != ref.dtype:
            result.append(OutputError(name, ref.shape, np.inf, scale, False,
                                      f"Kiln gave {out.dtype}{list(out.shape)}, onnxruntime "
                                      f"{ref.dtype}{list(ref.shape)}"))
            continue
        err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        max_err = float(np.max(err)) if err.size else 0.0
        ok = bool(np.allclose(out, ref, rtol=RTOL, atol=ATOL_FRACTION * scale))
        result.append(OutputError(name, ref.shape, max_err, scale, ok,
                                  "" if ok else f"not allclose(rtol={RTOL}, atol="
                                  f"{ATOL_FRACTION}*scale)"))
    return result


def compare_with_ort(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                     input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Comparison:
    """Run both and compare every output."""
    t0 = time.perf_counter()
    want = run_ort(model, inputs)
    t1 = time.perf_counter()
    got = run_kiln(model, inputs, input_shapes)
    t2 = time.perf_counter()
    return Comparison(compare_outputs(got, want), kiln_s=t2 - t1, ort_s=t1 - t0)


def with_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs are every float node output, in node order.

    Used to find the first node where Kiln and onnxruntime disagree.
    """
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    infos = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    del copy.graph.output[:]
    for node in model.graph.node:
        for out in node.output:
            vi = infos.get(out)
            if vi is not None and vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
                copy.graph.output.append(vi)
    return copy


def first_divergence(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                     input_shapes: Mapping[str, tuple[int, ...]] | None = None
                     ) -> str | None:
    """Describe the first node whose output differs between Kiln and onnxruntime.

    Returns ``None`` when every intermediate agrees.
    """
    full = with_all_outputs(model)
    want = run_ort(full, inputs)
    got = run_kiln(full, inputs, input_shapes)
    producers = {out: node for node in model.graph.node for out in node.output}
    for err in compare_outputs(got, want):
        if not err.ok:
            node = producers[err.name]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            return (f"node {node.name!r} ({node.op_type}, attrs {attrs}, inputs "
                    f"{list(node.input)}) output {err.name!r}{list(err.shape)}: "
                    f"max abs err {err.max_abs_err:.3g} at scale {err.scale:.3g} {err.problem}")
    return None
