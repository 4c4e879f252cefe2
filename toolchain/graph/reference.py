"""The numpy reference executor: runs a :class:`~toolchain.graph.ir.Graph` on numpy arrays.

This is the oracle every other part of Kiln is tested against, so it favours clarity and
exact ONNX semantics over speed: each node runs its op's numpy ``reference`` (from the op
registry) in topological order, and every array a node produces is checked against the
type the graph declares for it.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x = Value("x", (2,), "float32")
    >>> y = Value("y", (2,), "float32")
    >>> g = Graph("g", [x], [y], [Node("Relu", "relu", [x], [y])])
    >>> run_graph(g, {"x": np.array([-1.0, 2.0], np.float32)})
    {'y': array([0., 2.], dtype=float32)}

Two kinds of failure are distinguished:

* the caller's arrays do not match the graph's inputs (a missing or unknown key, a wrong
  dtype or shape): :class:`~toolchain.errors.InputError`, naming the input and what it
  expects;
* an op's reference produces an array that does not match the node's declared output type:
  :class:`InternalError`, a bug in Kiln (the op's ``infer`` and ``reference`` disagree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import InputError, InternalError, KilnError
from toolchain.graph.ir import Graph, Node, Value, dtype_of, np_dtype
from toolchain.graph.ops.registry import get_op


def _readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view, so that an op reference cannot modify graph constants or inputs."""
    view = array.view()
    view.flags.writeable = False
    return view


def _describe_array(array: np.ndarray) -> str:
    try:
        dt = dtype_of(array)
    except KilnError:
        dt = str(array.dtype)
    return f"{dt}[{', '.join(map(str, array.shape))}]"


def run_node(node: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Run one node's reference on ``inputs`` and check the results against its outputs.

    ``inputs`` holds one array per ``node.inputs`` entry (``None`` for an absent optional
    input).  Returns one array per ``node.outputs`` entry.

    Example::

        >>> import numpy as np
        >>> from toolchain.graph.ir import Node, Value
        >>> a, b = Value("a", (2,), "float32"), Value("b", (2,), "float32")
        >>> run_node(Node("Neg", "neg", [a], [b]), [np.ones(2, np.float32)])
        [array([-1., -1.], dtype=float32)]
    """
    opdef = get_op(node.op)
    attrs = opdef.normalize_attrs(node.attrs, where=node.describe())
    try:
        results = list(opdef.reference(list(inputs), attrs))
    except KilnError:
        raise
    except MemoryError:
        sizes = ", ".join(f"{o.name!r} {o.type} ({o.nbytes:,} bytes)" for o in node.outputs)
        raise InputError(f"{node.describe()}: the reference executor cannot hold its "
                         f"output(s) {sizes} in this machine's memory") from None
    except Exception as exc:
        shown = ", ".join("_" if a is None else _describe_array(np.asarray(a)) for a in inputs)
        raise InternalError(
            f"{node.describe()}: the numpy reference of {node.op} failed on inputs ({shown}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if len(results) < len(node.outputs):
        raise InternalError(
            f"{node.describe()}: the reference of {node.op} returned {len(results)} arrays "
            f"but the node has {len(node.outputs)} outputs"
        )
    checked = []
    for out, result in zip(node.outputs, results, strict=False):
        array = np.asarray(result)
        if array.shape != out.shape or array.dtype != np_dtype(out.dtype):
            raise InternalError(
                f"{node.describe()}: the reference produced {_describe_array(array)} for "
                f"output {out.name!r}, but the node declares {out.type} (the op's infer and "
                "reference disagree: a bug in Kiln's op definition)"
            )
        checked.append(array)
    return checked


def check_inputs(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Check ``inputs`` against ``graph.inputs`` and return them as numpy arrays by name.

    Raises :class:`~toolchain.errors.InputError` for a missing or unknown name, a wrong
    dtype or a wrong shape; no implicit conversion is done.

    Example::

        >>> from toolchain.graph.ir import Graph, Value
        >>> x = Value("x", (2,), "float32")
        >>> check_inputs(Graph("g", [x], [x], []), {"x": np.zeros(2)})
        Traceback (most recent call last):
        ...
        toolchain.errors.InputError: input 'x' has dtype float64, but the model expects float32[2]; convert it (e.g. array.astype(np.float32))
    """  # noqa: E501
    expected = {v.name: v for v in graph.inputs}
    listing = ", ".join(f"{v.name} ({v.type})" for v in graph.inputs) or "none"
    unknown = [k for k in inputs if k not in expected]
    if unknown:
        raise InputError(
            f"unknown input {', '.join(repr(k) for k in unknown)}; the model's inputs are: "
            f"{listing}"
        )
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise InputError(
            f"missing input {', '.join(repr(k) for k in missing)}; the model's inputs are: "
            f"{listing}"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, value in expected.items():
        array = np.asarray(inputs[name])
        try:
            got_dtype = dtype_of(array)
        except KilnError:
            got_dtype = str(array.dtype)
        if got_dtype != value.dtype:
            np_name = "bool_" if value.dtype == "bool" else value.dtype
            raise InputError(
                f"input {name!r} has dtype {got_dtype}, but the model expects {value.type}; "
                f"convert it (e.g. array.astype(np.{np_name}))"
            )
        if tuple(array.shape) != value.shape:
            raise InputError(
                f"input {name!r} has shape {list(array.shape)}, but the model expects "
                f"{value.type}"
            )
        arrays[name] = array
    return arrays


def run_graph(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``inputs`` (arrays keyed by input name); outputs keyed by name.

    Nodes run in the graph's topological order; an intermediate array is dropped right
    after its last reader.  The returned arrays are fresh copies that share no memory with
    the inputs or the graph's constants.

    Example::

        >>> import numpy as np
        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, w = Value("x", (1, 2), "float32"), Value.constant("w", np.eye(2, dtype=np.float32))
        >>> y = Value("y", (1, 2), "float32")
        >>> g = Graph("g", [x], [y], [Node("MatMul", "mm", [x, w], [y])])
        >>> run_graph(g, {"x": np.array([[1.0, 2.0]], np.float32)})["y"]
        array([[1., 2.]], dtype=float32)
    """
    arrays = check_inputs(graph, inputs)
    env: dict[Value, np.ndarray] = {v: _readonly(arrays[v.name]) for v in graph.inputs}

    last_use: dict[Value, int] = {}
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last_use[v] = index
    keep = set(graph.outputs) | set(graph.inputs)

    def fetch(v: Value) -> np.ndarray:
        if v in env:
            return env[v]
        if v.data is not None:
            return _readonly(v.data)
        raise InternalError(f"value {v.name!r} is read before it is computed")

    for index, node in enumerate(graph.nodes):
        args = [None if v is None else fetch(v) for v in node.inputs]
        for out, array in zip(node.outputs, run_node(node, args), strict=True):
            env[out] = _readonly(array)
        for v in {v for v in node.inputs if v is not None}:
            if last_use.get(v) == index and v not in keep:
                env.pop(v, None)
    return {v.name: np.array(fetch(v), copy=True) for v in graph.outputs}
