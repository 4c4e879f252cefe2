"""A small, deterministic ONNX graph builder for the model zoo.

The zoo's models are written the way exporters write them (PyTorch-style node and value
names such as ``/layer1/layer1.0/conv1/Conv_output_0``, TF-style ``:0`` names, initializers
named ``layer1.0.conv1.weight``), so they also exercise name sanitisation further down.

Weights come from a seeded ``numpy.random.Generator`` and are He-scaled, so activations
stay of order one through deep networks and a relative-error check stays meaningful.

Example::

    >>> b = Builder("tiny", seed=0)
    >>> x = b.input("x", np.float32, [1, 4])
    >>> y = linear(b, x, 4, 2, name="fc")
    >>> b.output(y, "y", np.float32, [1, 2])
    >>> model = b.build(opset=17)
    >>> [n.op_type for n in model.graph.node]
    ['Gemm']
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _ir_version(opset: int) -> int:
    # The IR version a mainstream exporter writes for this opset (ORT accepts these).
    if opset <= 11:
        return 6
    return 8 if opset <= 18 else 9 if opset <= 20 else 10


class Builder:
    """Collects nodes, initializers, inputs and outputs of one ONNX graph.

    Names are scoped (``with b.scope("layer1.0"):``): parameters become
    ``layer1.0.<suffix>`` and nodes ``/layer1.0/<Op>`` with outputs ``<node>_output_0``.
    With ``constant_nodes=True`` small constants (shapes, axes, indices) are ``Constant``
    nodes, one per use, as ``torch.onnx`` writes them; otherwise shared initializers.
    """

    def __init__(self, name: str, seed: int, *, constant_nodes: bool = False) -> None:
        self.name = name
        self.constant_nodes = constant_nodes
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], str] = {}
        self._renamed: dict[str, str] = {}

    # -- naming ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the names of everything created inside the ``with`` block."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _unique(self, base: str) -> str:
        name, i = base, 1
        while name in self._used:
            name, i = f"{base}_{i}", i + 1
        self._used.add(name)
        return name

    # -- graph pieces ----------------------------------------------------------------------
    def input(self, name: str, dtype: type, shape: Sequence[int | str]) -> str:
        """Declare a graph input (a string dimension is symbolic, e.g. ``"batch"``)."""
        self._used.add(name)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def output(self, value: str, name: str, dtype: type, shape: Sequence[int | str]) -> None:
        """Declare ``value`` a graph output, renaming its producer's output to ``name``."""
        for node in self.nodes:
            for i, out in enumerate(node.output):
                if out == value:
                    node.output[i] = name
            for i, inp in enumerate(node.input):
                if inp == value:
                    node.input[i] = name
        self._used.add(name)
        self._renamed[value] = name
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))

    def param(self, suffix: str, array: np.ndarray, dtype: type = np.float32) -> str:
        """Add an initializer named ``<scope>.<suffix>``; returns its name."""
        name = self._unique(".".join([*self._scope, suffix]))
        self.initializers.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def const(self, array: Sequence | np.ndarray, dtype: type = np.int64) -> str:
        """A constant (shapes, axes, clip bounds): a shared initializer or a Constant node."""
        arr = np.asarray(array, dtype)
        if self.constant_nodes:
            return self.op("Constant", [], value=numpy_helper.from_array(arr))
        key = (arr.dtype.str, arr.tobytes(), arr.shape)
        if key not in self._consts:
            name = self._unique(f"onnx::Constant_{len(self._consts)}")
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return self._consts[key]

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1,
           **attrs: Any) -> str | list[str]:
        """Append a node; returns its output name (a list when ``n_out > 1``)."""
        node_name = self._unique("/" + "/".join([*self._scope, op_type]))
        outs = [self._unique(f"{node_name}_output_{i}") for i in range(n_out)]
        inputs = [self._renamed.get(i, i) for i in inputs]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=node_name, **attrs))
        return outs[0] if n_out == 1 else outs

    # -- random weights --------------------------------------------------------------------
    def he(self, shape: Sequence[int], fan_in: int, gain: float = 2.0) -> np.ndarray:
        """Normal weights with variance ``gain / fan_in`` (He init for gain 2)."""
        return self.rng.standard_normal(tuple(shape)) * math.sqrt(gain / fan_in)

    def uniform(self, lo: float, hi: float, n: int) -> np.ndarray:
        return self.rng.uniform(lo, hi, n)

    def normal(self, std: float, shape: int | Sequence[int]) -> np.ndarray:
        return self.rng.normal(0.0, std, shape)

    # -- the model -------------------------------------------------------------------------
    def build(self, opset: int, doc: str = "", *,
              initializers_as_inputs: bool = False) -> onnx.ModelProto:
        """The finished, checked model (opset ``opset`` of the default domain).

        ``initializers_as_inputs`` also lists every initializer among the graph inputs, as
        exporters before IR version 4 did (an input with a default value).
        """
        inputs = list(self.inputs)
        if initializers_as_inputs:
            inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in self.initializers]
        graph = helper.make_graph(self.nodes, self.name, inputs, self.outputs,
                                  initializer=self.initializers, doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="kiln-zoo", producer_version="1",
                                  ir_version=_ir_version(opset))
        onnx.checker.check_model(model, full_check=True)
        return model


# -- layers ------------------------------------------------------------------------------------
def conv(b: Builder, x: str, cin: int, cout: int, k: int | tuple[int, int], *,
         stride: int = 1, pads: Sequence[int] | None = None, group: int = 1,
         bias: bool = True, name: str = "conv") -> str:
    """Conv with He-scaled weights; ``pads`` default to symmetric ``k // 2``."""
    kh, kw = (k, k) if isinstance(k, int) else k
    if pads is None:
        pads = [kh // 2, kw // 2, kh // 2, kw // 2]
    with b.scope(name):
        fan_in = cin // group * kh * kw
        inputs = [x, b.param("weight", b.he((cout, cin // group, kh, kw), fan_in))]
        if bias:
            inputs.append(b.param("bias", b.normal(0.05, cout)))
        return b.op("Conv", inputs, kernel_shape=[kh, kw], strides=[stride, stride],
                    pads=list(pads), group=group, dilations=[1, 1])


def batchnorm(b: Builder, x: str, c: int, *, gamma: tuple[float, float] = (0.6, 1.4),
              name: str = "bn") -> str:
    """Inference BatchNormalization with non-trivial running statistics."""
    with b.scope(name):
        return b.op("BatchNormalization", [
            x,
            b.param("weight", b.uniform(*gamma, c)),
            b.param("bias", b.normal(0.1, c)),
            b.param("running_mean", b.normal(0.2, c)),
            b.param("running_var", b.uniform(0.5, 1.5, c)),
        ], epsilon=1e-5, momentum=0.9)


def relu6(b: Builder, x: str) -> str:
    """ReLU6 the way exporters write it: ``Clip(x, 0, 6)`` with scalar bounds."""
    return b.op("Clip", [x, b.const(0.0, np.float32), b.const(6.0, np.float32)])


def linear(b: Builder, x: str, fin: int, fout: int, *, gain: float = 1.0,
           name: str = "fc") -> str:
    """PyTorch ``nn.Linear`` as exported: ``Gemm(x, W[out, in], b, transB=1)``."""
    with b.scope(name):
        w = b.param("weight", b.he((fout, fin), fin, gain))
        bias = b.param("bias", b.normal(0.05, fout))
        return b.op("Gemm", [x, w, bias], alpha=1.0, beta=1.0, transB=1)


def matmul_add(b: Builder, x: str, fin: int, fout: int, *, gain: float = 1.0,
               name: str = "dense") -> str:
    """A dense layer as TF/Keras exporters and transformer exports write it: MatMul + Add."""
    with b.scope(name):
        w = b.param("kernel", b.he((fin, fout), fin, gain))
        bias = b.param("bias", b.normal(0.05, fout))
        return b.op("Add", [b.op("MatMul", [x, w]), bias])


def tf_same_pads(size: tuple[int, int], k: tuple[int, int], stride: int) -> list[int]:
    """TensorFlow ``padding="SAME"`` as explicit ONNX pads (extra pixel at the end).

    >>> tf_same_pads((96, 96), (3, 3), 2)
    [0, 0, 1, 1]
    """
    begin, end = [], []
    for n, kk in zip(size, k, strict=True):
        out = -(-n // stride)
        total = max((out - 1) * stride + kk - n, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end
