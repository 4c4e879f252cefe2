"""A Kiln backend for the ONNX backend test API (``onnx.backend.base.Backend``).

It imports a model with :func:`~toolchain.frontend.onnx.from_onnx` and runs it with the
numpy reference executor (:func:`~toolchain.graph.reference.run_graph`).  It exists to run
the ONNX node conformance tests against Kiln.

Kiln compiles for static shapes, so operands that decide output shapes — a Reshape's
``shape``, a Slice's ``starts``/``ends``, a Pad's ``pads`` … — must be constants.  The
node tests feed some of them as graph inputs; the backend therefore defers the import to
:meth:`KilnBackendRep.run`, where it knows the input values, and *binds* those inputs as
constants (``from_onnx(model, bind=...)``).  Which inputs are bound comes from
:data:`STATIC_OPERANDS`; when the import still needs a compile-time value, it retries
binding every input.

Example::

    >>> import numpy as np
    >>> from onnx import helper, TensorProto
    >>> g = helper.make_graph(
    ...     [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
    ...      helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> KilnBackend.run_model(m, [np.ones((2, 3), np.float32), np.array([6])])[0].shape
    (6,)
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from toolchain.errors import ModelError, UnsupportedError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph
from toolchain.graph.reference import run_graph

#: op -> indices of inputs that must be compile-time constants for static shapes
STATIC_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
    "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "Resize": (1, 2, 3),
    "Upsample": (1,), "Dropout": (1, 2), "TopK": (1,), "OneHot": (1,), "Range": (0, 1, 2),
    "CenterCropPad": (1,), "LSTM": (4,), "GRU": (4,), "RNN": (4,),
    "CumSum": (1,), "CumProd": (1,), "Trilu": (1,),
    "AffineGrid": (1,),
    "Col2Im": (1, 2), "DFT": (1, 2), "STFT": (1, 3), "If": (0,), "Loop": (0, 1),
}


def static_operand_inputs(model: onnx.ModelProto) -> set[str]:
    """Names of graph inputs that some node reads at a :data:`STATIC_OPERANDS` position."""
    inputs = {i.name for i in model.graph.input}
    names = set()
    for node in model.graph.node:
        for i in STATIC_OPERANDS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i] in inputs:
                names.add(node.input[i])
    return names


class KilnBackendRep(BackendRep):
    """A prepared model; the Kiln graph is built on the first :meth:`run`."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self._graphs: dict[tuple, tuple[Graph, set[str]]] = {}
        self._bind_all = False

    def graph_for(self, inputs: Mapping[str, np.ndarray]) -> tuple[Graph, set[str]]:
        """The imported graph for these input values, and the names that were bound."""
        names = set(self.input_names) if self._bind_all else static_operand_inputs(self.model)
        key = tuple((n, inputs[n].dtype.str, inputs[n].shape,
                     np.ascontiguousarray(inputs[n]).tobytes()) for n in sorted(names))
        if key not in self._graphs:
            try:
                graph = from_onnx(self.model, bind={n: inputs[n] for n in names})
            except UnsupportedError:
                raise
            except ModelError as exc:
                # A shape operand computed from inputs (not read directly): bind them all.
                if self._bind_all or "compile time" not in str(exc):
                    raise
                self._bind_all = True
                return self.graph_for(inputs)
            self._graphs[key] = (graph, names)
        return self._graphs[key]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run on ``inputs`` (a list in graph-input order, or a dict by name)."""
        if isinstance(inputs, Mapping):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = {n: np.asarray(a) for n, a in zip(self.input_names, inputs, strict=False)}
        graph, bound = self.graph_for(feeds)
        results = run_graph(graph, {k: v for k, v in feeds.items() if k not in bound})
        names = [n.replace("/", "_").replace(".", "_") or f"out{i}"
                 for i, n in enumerate(self.output_names)]
        outputs = namedtuple("Outputs", names, rename=True)  # noqa: PYI024
        return outputs(*[results[n] for n in self.output_names])


class KilnBackend(Backend):
    """``onnx.backend.base.Backend`` running models with Kiln's numpy reference."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return device == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU",
                **kwargs: Any) -> KilnBackendRep:
        return KilnBackendRep(model)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[Any] | None = None, **kwargs: Any) -> Any:
        raise NotImplementedError("Kiln runs whole models; use run_model")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"
