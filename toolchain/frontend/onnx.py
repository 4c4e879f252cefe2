"""ONNX -> Kiln :class:`~toolchain.graph.ir.Graph`.

:func:`from_onnx` turns an ONNX model into a static-shape Kiln graph in canonical form::

    from toolchain.frontend.onnx import from_onnx
    g = from_onnx("model.onnx", input_shapes={"input": (1, 3, 224, 224)})
    print(g)

The steps, each with its own user-facing errors (all :class:`~toolchain.errors.ModelError`):

1. **load** a path, ``bytes`` or ``ModelProto`` (not a file, not ONNX, truncated);
2. **opset**: newer than the installed ``onnx`` knows is refused; older than 11 is raised
   to 11 by ``onnx.version_converter`` or refused when that fails;
3. **external data** is read only from files inside the model's own folder (after
   resolving symlinks and ``..``);
4. **structure**: cycles and dangling inputs are reported with node names (by
   :class:`~toolchain.graph.ir.Graph`); nodes are put in topological order;
5. ``onnx.checker.check_model``, with its message trimmed;
6. ``input_shapes`` overrides (the CLI's ``--input-shape NAME=D,D,...``) and ``bind``
   (graph inputs turned into constants); ONNX function ops that Kiln lacks are expanded
   into their definitions (:mod:`toolchain.frontend.onnx_functions`); then ONNX shape
   inference;
7. every node is parsed, upgraded to the newest op form
   (:mod:`toolchain.frontend.onnx_upgrade`) and validated against the op registry; every
   unsupported op, attribute and dtype is listed in **one**
   :class:`~toolchain.errors.UnsupportedError`;
8. the graph is built node by node with each op's ``infer`` (cross-checked against ONNX
   shape inference), and nodes whose inputs are all constants — including ``Shape`` of a
   static tensor — are folded with the numpy reference, so ``Shape -> Gather -> Concat ->
   Reshape`` chains exported from PyTorch come out with constant shapes.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from toolchain.errors import InputError, ModelError, OptionError, UnsupportedError
from toolchain.frontend import mapped
from toolchain.frontend.onnx_build import (
    NO_FOLD_OPS,
    SHAPE_ONLY_OPS,
    build_graph,
    traced_sizes_hint,
)
from toolchain.frontend.onnx_control import body_nodes, implicit_inputs
from toolchain.frontend.onnx_functions import expand_function_ops
from toolchain.frontend.onnx_nodes import CONTROL_FLOW_OPS, node_problems, parse_node
from toolchain.frontend.onnx_upgrade import RawNode
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import has_op, refusal_reason

#: Oldest opset whose semantics Kiln implements (older models are converted first).
MIN_OPSET = 11

#: ONNX TensorProto data type -> Kiln dtype
ONNX_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.DOUBLE: "float64", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.UINT16: "uint16", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.UINT32: "uint32", onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT64: "uint64", onnx.TensorProto.BOOL: "bool",
}

_MAX_LISTED_PER_OP = 5


def onnx_dtype_name(code: int) -> str:
    """``1 -> 'FLOAT'`` (the ONNX spelling, for messages)."""
    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return f"data type {code}"


def from_onnx(
    model: str | os.PathLike[str] | bytes | onnx.ModelProto,
    *,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    bind: Mapping[str, np.ndarray] | None = None,
    shapes_option: str = "--input-shape",
) -> Graph:
    """Import an ONNX model as a static-shape Kiln graph in canonical form.

    ``input_shapes`` gives static shapes to inputs whose shapes are dynamic
    (``{"input": (1, 3, 224, 224)}``); ``bind`` turns graph inputs into constants with the
    given values (for operands such as a Reshape's shape that arrive as inputs).
    ``shapes_option``: how an error about ``input_shapes`` names them (the CLI's
    ``--input-shape``; :func:`toolchain.load` says ``shape_dict``).

    Example::

        >>> import onnx
        >>> from onnx import helper, TensorProto
        >>> node = helper.make_node("Relu", ["x"], ["y"])
        >>> graph = helper.make_graph(
        ...     [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
        >>> m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        >>> print(from_onnx(m, input_shapes={"x": (2, 4)}))  # doctest: +NORMALIZE_WHITESPACE
        graph g(%x: float32[2, 4]) -> (%y: float32[2, 4]) {
          %y: float32[2, 4] = Relu(%x)  # Relu_0
        }
    """
    proto, label, base_dir = load_model(model, lazy=True)
    proto, opset = _check_opset(proto, label)
    mapped = _load_external_data(proto, label, base_dir)
    proto = _inline_functions(proto, label)
    _sort_nodes(proto, label)
    _run_checker(proto, label)
    sized = _apply_input_shapes(proto, dict(input_shapes or {}), label, shapes_option)
    _apply_bind(proto, dict(bind or {}), label)
    proto = expand_function_ops(proto, opset, label)
    onnx_types = _infer_onnx_types(proto, label)
    constants = _read_initializers(proto, label, mapped)
    raw_nodes = _parse_nodes(proto, opset, constants)
    mark_constant_folds(proto, raw_nodes, constants)
    _validate(proto, raw_nodes, constants, label)
    inputs = _graph_inputs(proto, constants, label)
    name = proto.graph.name or (Path(label).stem if base_dir else "model")
    try:
        return build_graph(
            name, inputs, constants, raw_nodes, declared_outputs(proto),
            onnx_types, opset=opset, label=label,
            metadata={"source": label, "producer": proto.producer_name,
                      "producer_version": proto.producer_version,
                      "ir_version": proto.ir_version},
        )
    except ModelError as exc:
        if sized and "cannot reshape" in str(exc):
            raise ModelError(f"{exc}. {traced_sizes_hint(sized, shapes_option)}") from None
        raise


# -- 1. loading -----------------------------------------------------------------------------

def model_sha256(model: Any) -> str:
    """The sha256 a bundle records for the model it was compiled from: of the file's bytes
    for a path (read a MiB at a time: BERT-base's 434 MB are never in memory twice), of the
    bytes themselves, or of the deterministic serialisation of a ``ModelProto``.

    >>> import hashlib
    >>> model_sha256(b"abc") == hashlib.sha256(b"abc").hexdigest()
    True
    """
    h = hashlib.sha256()
    if isinstance(model, onnx.ModelProto):
        h.update(model.SerializeToString(deterministic=True))
    elif isinstance(model, (bytes, bytearray)):
        h.update(model)
    else:
        try:
            with open(model, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError as exc:
            raise ModelError(f"{model}: cannot read the file ({exc.strerror or exc})") from None
    return h.hexdigest()


def load_model(model: Any, lazy: bool = False) -> tuple[onnx.ModelProto, str, str | None]:
    """``(a private copy of the ModelProto, label for messages, folder or None)``.

    External data is *not* loaded here (see :func:`_load_external_data`). ``lazy``: a
    large file's large initializers are left in the file, as external data that names
    the file itself (:mod:`toolchain.frontend.mapped`; for callers that map or ignore the
    weights).
    """
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy, model.graph.name or "<model>", None
    if isinstance(model, (bytes, bytearray)):
        return _parse(bytes(model), "<model bytes>"), "<model bytes>", None
    if not isinstance(model, (str, os.PathLike)):
        raise OptionError(f"from_onnx expects a path, bytes or onnx.ModelProto, "
                          f"not {type(model).__name__}")
    path = Path(model)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, not an ONNX model file")
    folder = str(path.resolve().parent)
    try:
        if lazy and path.stat().st_size >= mapped.MAP_FILE_BYTES:
            try:
                return mapped.parse_skeleton(path.resolve()), str(path), folder
            except Exception:  # noqa: BLE001 - not protobuf's framing: _parse says why
                pass
        data = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return _parse(data, str(path)), str(path), folder


def _parse(data: bytes, label: str) -> onnx.ModelProto:
    if not data:
        raise ModelError(f"{label}: the file is empty, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        # Every ONNX serialiser writes ir_version (field 1, varint: tag 0x08) first.
        if data[:1] == b"\x08":
            raise ModelError(
                f"{label}: the file starts like an ONNX model but cannot be decoded; it is "
                f"probably truncated or corrupted ({len(data)} bytes; protobuf says: {exc}). "
                "Copy or export the model again."
            ) from None
        raise ModelError(
            f"{label}: not an ONNX model (the file is not an ONNX protobuf: {exc}"
            f"{_format_hint(data)}); Kiln reads binary .onnx files"
        ) from None
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise ModelError(
            f"{label}: not an ONNX model (it has no ir_version or no graph); "
            "Kiln reads binary .onnx files"
        )
    return proto


def _format_hint(data: bytes) -> str:
    """What a non-ONNX file looks like, for the message (empty when unknown)."""
    if data[:4] == b"PK\x03\x04":
        return ("; it is a zip archive, e.g. a PyTorch checkpoint or a numpy .npz: export "
                "the model with torch.onnx.export first")
    if data[4:8] == b"TFL3":
        return "; it is a TensorFlow Lite model: convert it with tf2onnx first"
    head = data[:512]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if text.lstrip().startswith(("<", "ir_version")):
        return "; it is ONNX text format: save the model in binary (onnx.save)"
    if text.isprintable() or all(c.isprintable() or c.isspace() for c in text):
        return "; it is a text file"
    return ""


# -- 2. opset -------------------------------------------------------------------------------

def _check_opset(proto: onnx.ModelProto, label: str) -> tuple[onnx.ModelProto, int]:
    newest = onnx.defs.onnx_opset_version()
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        return proto, newest  # no default-domain ops at all
    opset = versions[0]
    if opset > newest:
        raise ModelError(
            f"{label}: the model uses ONNX opset {opset}, newer than the newest this "
            f"installation supports ({newest}, onnx {onnx.__version__}); Kiln supports opsets "
            f"{MIN_OPSET} to {newest}: re-export the model with opset {newest} or lower "
            f"(e.g. torch.onnx.export(..., opset_version=17)) or upgrade the onnx package"
        )
    if opset < MIN_OPSET:
        scans = [n.name or f"Scan_{i}" for i, n in enumerate(proto.graph.node)
                 if n.op_type == "Scan"]
        if opset < 9 and scans:
            # onnx.version_converter drops Scan-8's batch axis from the graph's inputs and
            # outputs, which changes the model's interface
            raise UnsupportedError(
                f"{label}: node {scans[0]!r} (Scan, opset {opset}): Scan of opset 8 (with a "
                "batch axis and sequence_lens) is not supported; re-export the model with "
                f"opset 9 or later (Kiln supports {MIN_OPSET} to {newest})")
        try:
            from onnx import version_converter

            proto = version_converter.convert_version(proto, MIN_OPSET)
        except Exception as exc:
            msg = _trim(str(exc))
            raise ModelError(
                f"{label}: the model uses ONNX opset {opset}, older than the oldest Kiln "
                f"supports ({MIN_OPSET}), and onnx.version_converter could not upgrade it "
                f"({msg}); re-export the model with an opset from {MIN_OPSET} to {newest}"
            ) from None
        opset = MIN_OPSET
    return proto, opset


def _inline_functions(proto: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Replace calls of model-local functions (e.g. from the PyTorch dynamo exporter) by
    their bodies, so that only ONNX ops remain."""
    if not proto.functions:
        return proto
    try:
        from onnx import inliner

        return inliner.inline_local_functions(proto)
    except Exception as exc:
        raise ModelError(f"{label}: the model's local functions cannot be inlined: "
                         f"{_trim(str(exc))}") from None


# -- 3. external data -----------------------------------------------------------------------

def _external_tensors(proto: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, bool]]:
    """Every tensor of the graph that may keep external data, and whether it is an
    initializer (protobuf's Python objects are made afresh on each access: their ids
    cannot tell)."""
    for tensor in proto.graph.initializer:
        yield tensor, True
    for node in proto.graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t, False
            for tensor in attr.tensors:
                yield tensor, False


def _load_external_data(proto: onnx.ModelProto, label: str, base_dir: str | None
                        ) -> dict[str, np.ndarray]:
    """Read external tensor data, refusing any file outside the model's folder: a large
    initializer of a plain dtype is mapped from its file (returned by name, see
    :mod:`toolchain.frontend.mapped`), any other tensor is read into the proto."""
    arrays: dict[str, np.ndarray] = {}
    for tensor, initializer in _external_tensors(proto):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if base_dir is None:
            raise ModelError(
                f"{label}: tensor {tensor.name!r} keeps its data in external file "
                f"{location!r}, but the model was given in memory; pass the model's path "
                "so that Kiln can find the file next to it"
            )
        base = os.path.realpath(base_dir)
        resolved = os.path.realpath(os.path.join(base, location))
        if not location or os.path.isabs(location) or os.path.commonpath(
                [base, resolved]) != base:
            raise ModelError(
                f"{label}: tensor {tensor.name!r} keeps its data in external file "
                f"{location!r}, which resolves to {resolved}, outside the model's folder "
                f"{base}; Kiln reads external data only from inside the model's folder "
                "(move the file next to the model and use a relative location)"
            )
        if not os.path.isfile(resolved):
            raise ModelError(
                f"{label}: external data file {location!r} of tensor {tensor.name!r} was "
                f"not found (looked for {resolved})"
            )
        offset = int(info.get("offset", 0) or 0)
        size = os.path.getsize(resolved)
        length = int(info["length"]) if info.get("length") else max(size - offset, 0)
        if offset + length > size:
            raise ModelError(
                f"{label}: external data file {location!r} of tensor {tensor.name!r} is too "
                f"short ({size} bytes; the tensor needs bytes {offset}..{offset + length})"
            )
        dtype = ONNX_DTYPES.get(tensor.data_type)
        if (initializer and dtype is not None and mapped.mappable(dtype)
                and length >= mapped.MAP_TENSOR_BYTES):
            try:
                arrays[tensor.name] = mapped.map_tensor(resolved, offset, length, dtype,
                                                        tuple(tensor.dims))
            except ValueError as exc:
                raise ModelError(f"{label}: initializer {tensor.name!r} cannot be read: "
                                 f"{exc}") from None
            continue
        with open(resolved, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return arrays


# -- 4. structure ---------------------------------------------------------------------------

def _sort_nodes(proto: onnx.ModelProto, label: str) -> None:
    """Check for cycles, dangling inputs and doubly-produced tensors (messages from
    :class:`Graph`) and put the nodes in topological order."""
    placeholders: dict[str, Value] = {}

    def value(name: str, const: bool = False) -> Value:
        if name not in placeholders:
            data = np.zeros((), np.float32) if const else None
            placeholders[name] = Value(name, (), "float32", data)
        return placeholders[name]

    for init in proto.graph.initializer:
        value(init.name, const=True)
    for sparse in proto.graph.sparse_initializer:  # refused later, by _validate
        value(sparse.values.name, const=True)
    inputs = [value(i.name) for i in proto.graph.input if i.name not in placeholders]
    names = node_names(proto)
    nodes = []
    for name, node in zip(names, proto.graph.node, strict=True):
        ins = [value(n) if n else None for n in [*node.input, *implicit_inputs(node)]]
        outs = [Value(n, (), "float32") for n in node.output if n]
        for o in outs:
            if o.name in placeholders and placeholders[o.name].is_constant:
                raise ModelError(f"{label}: node {name!r} ({node.op_type}) writes "
                                 f"{o.name!r}, which is an initializer (a constant)")
            placeholders.setdefault(o.name, o)
        nodes.append(Node(node.op_type, name, ins, [placeholders[o.name] for o in outs]))
    outputs = [value(o.name) for o in proto.graph.output]
    try:
        skeleton = Graph(proto.graph.name, inputs, outputs, nodes)
    except ModelError as exc:
        raise ModelError(f"{label}: {exc}") from None
    position = {id(n): i for i, n in enumerate(nodes)}
    order = [position[id(n)] for n in skeleton.nodes]
    if order != list(range(len(order))):
        sorted_nodes = [onnx.NodeProto() for _ in order]
        for dst, src in zip(sorted_nodes, order, strict=True):
            dst.CopyFrom(proto.graph.node[src])
            dst.name = names[src]  # keep the name it had by its original position
        del proto.graph.node[:]
        proto.graph.node.extend(sorted_nodes)


def node_names(proto: onnx.ModelProto) -> list[str]:
    """Unique node names: the model's own, ``<op>_<index>`` for unnamed nodes, and a
    ``__<index>`` suffix for repeated ones."""
    used: set[str] = set()
    names = []
    for index, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        if name in used:
            name = f"{name}__{index}"
        while name in used:
            name += "_"
        used.add(name)
        names.append(name)
    return names


# -- 5. checker -----------------------------------------------------------------------------

def _trim(message: str, limit: int = 400) -> str:
    text = re.sub(r"\s+", " ", message.replace("==> Context:", "; context:")).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: initializers of at least this many elements are left out of the copy of the model that
#: the ONNX checker and shape inference see (see :func:`_light`)
_LIGHT_ELEMENTS = 1 << 14


def _light(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its large initializers turned into typed graph inputs.

    ``onnx.checker`` and ``onnx.shape_inference`` serialise the whole model for their C++
    side and shape inference returns a full copy: on BERT-base (434 MB of weights) that
    was three more copies of the weights at once. Neither needs a weight's values, only
    its type (small constants, which data propagation reads, such as Reshape shapes,
    stay); each initializer's data is read and checked by :func:`_read_initializers`.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> w = numpy_helper.from_array(np.zeros((128, 128), np.float32), "w")
    >>> g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])], [w])
    >>> light = _light(helper.make_model(g))
    >>> len(light.graph.initializer), [i.name for i in light.graph.input]
    (0, ['x', 'w'])
    """
    g = proto.graph
    big = [int(np.prod(t.dims, dtype=np.int64)) >= _LIGHT_ELEMENTS
           or t.data_location == onnx.TensorProto.EXTERNAL for t in g.initializer]
    if not any(big):
        return proto
    light = onnx.ModelProto()
    lg = light.graph
    for src, dst, skip in ((proto, light, "graph"), (g, lg, "initializer")):
        for f, v in src.ListFields():  # every field but the one rebuilt here
            if f.name == skip:
                continue
            if hasattr(v, "extend"):  # repeated
                getattr(dst, f.name).extend(v)
            elif hasattr(v, "CopyFrom"):  # a message
                getattr(dst, f.name).CopyFrom(v)
            else:
                setattr(dst, f.name, v)
    listed = {i.name for i in g.input}
    for t, large in zip(g.initializer, big, strict=True):
        if not large:
            lg.initializer.append(t)
        elif t.name not in listed:
            lg.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    return light


def _run_checker(proto: onnx.ModelProto, label: str) -> None:
    try:
        onnx.checker.check_model(_light(proto))
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelError(f"{label}: the ONNX checker rejects the model: {_trim(str(exc))}") \
            from None


# -- 6. overrides and shape inference -------------------------------------------------------

def _input_protos(proto: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inits = {i.name for i in proto.graph.initializer}
    return {i.name: i for i in proto.graph.input if i.name not in inits}


def _dims(info: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """Dims of a tensor value info (int, symbolic name, or None); None for unknown rank."""
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.shape.dim]


def _apply_input_shapes(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]],
                        label: str, option: str = "--input-shape"
                        ) -> dict[str, tuple[int, ...]]:
    """Set the given input shapes; returns those that sized a symbolic dimension."""
    inputs = _input_protos(proto)
    sized: dict[str, tuple[int, ...]] = {}

    def given(name: str, shape: Any = None) -> str:  # how the caller wrote this shape
        if option == "--input-shape":  # (the CLI's NAME=D,D,... form)
            return f"--input-shape {name}" + ("" if shape is None else
                                              "=" + ",".join(map(str, shape)))
        return f"{option}[{name!r}]" + ("" if shape is None else f" = {tuple(shape)}")

    for name, shape in shapes.items():
        if name not in inputs:
            raise OptionError(
                f"{given(name)}{'=...' if option == '--input-shape' else ''}: the model has "
                f"no input {name!r}; its inputs are: " + (", ".join(inputs) or "none")
            )
        shape = tuple(shape)
        if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
            raise OptionError(f"{given(name)}: dimensions must be integers >= 0, "
                              f"got {list(shape)}")
        dims = _dims(inputs[name])
        if dims is not None and len(dims) != len(shape):
            raise OptionError(
                f"{given(name, shape)}: the model declares "
                f"input {name!r} with rank {len(dims)} ({_fmt_dims(dims)}), not {len(shape)}"
            )
        for i, (d, s) in enumerate(zip(dims or [], shape, strict=False)):
            if isinstance(d, int) and d != s:
                raise OptionError(
                    f"{given(name, shape)}: dimension {i} of "
                    f"input {name!r} is fixed to {d} in the model ({_fmt_dims(dims)})"
                )
        if dims is None or any(not isinstance(d, int) for d in dims):
            sized[name] = tuple(int(d) for d in shape)
        tensor_type = inputs[name].type.tensor_type
        tensor_type.shape.Clear()
        for s in shape:
            tensor_type.shape.dim.add().dim_value = int(s)
    return sized


def _fmt_dims(dims: list[int | str | None] | None) -> str:
    if dims is None:
        return "unknown rank"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _apply_bind(proto: onnx.ModelProto, bind: dict[str, np.ndarray], label: str) -> None:
    inputs = _input_protos(proto)
    for name, array in bind.items():
        if name not in inputs:
            raise OptionError(f"bind: the model has no input {name!r}; its inputs are: "
                              + (", ".join(inputs) or "none"))
        array = np.asarray(array)
        elem = inputs[name].type.tensor_type.elem_type
        want = ONNX_DTYPES.get(elem)
        if want is None or array.dtype != np.dtype(want if want != "bool" else np.bool_):
            raise InputError(f"bind: input {name!r} is {onnx_dtype_name(elem)} in the model, "
                             f"but the bound array has dtype {array.dtype}")
        dims = _dims(inputs[name])
        if dims is not None and (len(dims) != array.ndim or any(
                isinstance(d, int) and d != s for d, s in zip(dims, array.shape, strict=True))):
            raise InputError(f"bind: input {name!r} has shape {_fmt_dims(dims)} in the model, "
                             f"but the bound array has shape {list(array.shape)}")
        proto.graph.initializer.append(numpy_helper.from_array(array, name))
        kept = [i for i in proto.graph.input if i.name != name]
        del proto.graph.input[:]
        proto.graph.input.extend(kept)


OnnxTypes = dict[str, tuple[int, list[int | str | None] | None]]


def declared_outputs(proto: onnx.ModelProto) -> OnnxTypes:
    """The graph outputs as the model declares them: ``name -> (elem_type, dims)``."""
    return {o.name: (o.type.tensor_type.elem_type, _dims(o)) for o in proto.graph.output}


def dynamic_inputs(model: Any) -> dict[str, list[int | str | None] | None]:
    """Runtime inputs of ``model`` (path, bytes or proto) whose shape is not fully static:
    ``name -> dims`` (``None`` for an unknown rank).  ``kiln run`` fills them in from the
    arrays it is given.

    Example::

        >>> from onnx import helper, TensorProto
        >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
        >>> dynamic_inputs(helper.make_model(g))
        {'x': ['N', 4]}
    """
    proto, _, _ = load_model(model, lazy=True)
    result = {}
    for name, info in _input_protos(proto).items():
        dims = _dims(info)
        if dims is None or any(not isinstance(d, int) for d in dims):
            result[name] = dims
    return result


def _infer_onnx_types(proto: onnx.ModelProto, label: str) -> OnnxTypes:
    """ONNX's own shape inference: ``name -> (elem_type, dims)`` of intermediate tensors
    (used to cross-check Kiln's shape rules; graph outputs are checked against the
    model's declarations instead, see :func:`declared_outputs`)."""
    del proto.graph.value_info[:]  # recompute: an exporter's stale value_info is no evidence
    try:
        inferred = onnx.shape_inference.infer_shapes(_light(proto), check_type=False,
                                                     strict_mode=False, data_prop=True)
    except Exception as exc:
        raise ModelError(f"{label}: ONNX shape inference fails on the model: "
                         f"{_trim(str(exc))}") from None
    types: OnnxTypes = {}
    for info in inferred.graph.value_info:
        if info.type.HasField("tensor_type"):
            types[info.name] = (info.type.tensor_type.elem_type, _dims(info))
    return types


# -- 7. nodes -------------------------------------------------------------------------------

def _read_initializers(proto: onnx.ModelProto, label: str,
                       mapped_arrays: Mapping[str, np.ndarray]
                       ) -> dict[str, np.ndarray | str]:
    """Initializer arrays by name (``mapped_arrays`` where the data stayed in a file); an
    unsupported dtype maps to its ONNX type name."""
    result: dict[str, np.ndarray | str] = {}
    for init in proto.graph.initializer:
        if init.data_type not in ONNX_DTYPES:
            result[init.name] = onnx_dtype_name(init.data_type)
            continue
        if init.name in mapped_arrays:
            result[init.name] = mapped_arrays[init.name]
            continue
        try:
            result[init.name] = numpy_helper.to_array(init)
        except Exception as exc:
            raise ModelError(f"{label}: initializer {init.name!r} cannot be read: "
                             f"{_trim(str(exc))}") from None
    return result


def _parse_nodes(proto: onnx.ModelProto, opset: int,
                 constants: dict[str, np.ndarray | str]) -> list[RawNode]:
    versions = {o.domain or "": o.version for o in proto.opset_import}
    versions[""] = versions["ai.onnx"] = opset  # after any version conversion
    used = {n for node in proto.graph.node for n in list(node.input) + list(node.output)}
    used |= set(constants) | {i.name for i in proto.graph.input}

    def new_const(hint: str, array: np.ndarray) -> str:
        name = hint
        while name in used:
            name += "_"
        used.add(name)
        constants[name] = array
        return name

    raw_nodes = []
    for index, (name, node) in enumerate(zip(node_names(proto), proto.graph.node,
                                             strict=True)):
        raw_nodes.append(parse_node(node, name, index, versions.get(node.domain or "", opset),
                                    new_const))
    return raw_nodes


def mark_constant_folds(proto: onnx.ModelProto, raw_nodes: list[RawNode],
                        constants: Mapping[str, np.ndarray | str]) -> None:
    """Fold, then check: a node of an op Kiln lacks whose inputs are all compile-time
    constants (initializers, outputs of foldable nodes, shapes) is marked to be folded
    with ONNX's reference implementation (``RawNode.fold``), so it is refused only if it
    survives folding (``Mod`` of two constants, as PyTorch exports for attention)."""
    static = {n for n, v in constants.items() if not isinstance(v, str)}
    for raw in raw_nodes:
        present = [n for n in raw.inputs if n]
        if raw.op in CONTROL_FLOW_OPS:
            continue  # inlined or unrolled when the graph is built (onnx_control)
        if raw.op in SHAPE_ONLY_OPS or (raw.op not in NO_FOLD_OPS
                                        and all(n in static for n in present)):
            if raw.domain in ("", "ai.onnx") and not has_op(raw.op):
                raw.fold = proto.graph.node[raw.index]
            static.update(n for n in raw.outputs if n)


def _validate(proto: onnx.ModelProto, raw_nodes: list[RawNode],
              constants: dict[str, np.ndarray | str], label: str) -> None:
    """Raise one UnsupportedError listing every unsupported op, attribute and dtype."""
    lines: list[str] = [
        f"sparse initializer {sparse.values.name!r} is not supported; store it as a dense "
        "initializer (onnx.numpy_helper.from_array of the dense array)"
        for sparse in proto.graph.sparse_initializer]
    for name, value in constants.items():
        if isinstance(value, str):
            lines.append(f"initializer {name!r}: dtype {value} is not supported by Kiln")
    for info in _input_protos(proto).values():
        elem = info.type.tensor_type.elem_type
        if not info.type.HasField("tensor_type"):
            lines.append(f"input {info.name!r}: only tensor inputs are supported")
        elif elem not in ONNX_DTYPES:
            lines.append(f"input {info.name!r}: dtype {onnx_dtype_name(elem)} is not "
                         "supported by Kiln")
    by_op: dict[tuple[str, str], list[str]] = {}
    for raw in [*raw_nodes, *_body_raw_nodes(proto, raw_nodes)]:
        for problem in node_problems(raw):
            by_op.setdefault((raw.op, problem), []).append(
                f"node {raw.name!r} (opset {raw.opset})")
    for (op, problem), where in by_op.items():
        shown = ", ".join(where[:_MAX_LISTED_PER_OP])
        more = len(where) - _MAX_LISTED_PER_OP
        lines.append(f"{op}: {problem} — at {shown}"
                     + (f" and {more} more" if more > 0 else ""))
    if lines:
        supported = ", ".join(sorted(_supported_ops()))
        raise UnsupportedError(
            f"{label}: {len(lines)} unsupported feature(s):\n  - " + "\n  - ".join(lines)
            + f"\nKiln supports these ops: {supported}"
        )


def _body_raw_nodes(proto: onnx.ModelProto, raw_nodes: list[RawNode]) -> list[RawNode]:
    """The nodes of control-flow bodies that :func:`_validate` can judge before the bodies
    are inlined: an op Kiln lacks there may still fold once the body's operands are known,
    so it is left to the builder (which refuses it naming the node if it does not fold)."""
    result = []
    for raw in raw_nodes:
        if raw.op not in CONTROL_FLOW_OPS:
            continue
        for name, node in body_nodes(proto.graph.node[raw.index], raw.name):
            inner = parse_node(node, name, -1, raw.opset, lambda hint, array: hint)
            if (has_op(inner.op) or inner.domain not in ("", "ai.onnx")
                    or refusal_reason(inner.op)):
                result.append(inner)
    return result


def _supported_ops() -> list[str]:
    """The ONNX ops a model may use: Kiln's registered ops that the standard domain
    defines (not Kiln's internal ops such as Fused, LayoutConv or QConv)."""
    from toolchain.graph.ops.registry import all_ops

    return [op for op in all_ops() if onnx.defs.has(op)]


def _graph_inputs(proto: onnx.ModelProto, constants: Mapping[str, Any],
                  label: str) -> list[Value]:
    """Runtime inputs with static shapes; all dynamic ones are reported in one error."""
    values, dynamic = [], []
    for info in _input_protos(proto).values():
        if info.name in constants:
            continue
        dims = _dims(info)
        if dims is None or any(not isinstance(d, int) for d in dims):
            dynamic.append((info.name, dims))
            continue
        values.append(Value(info.name, tuple(dims),
                            ONNX_DTYPES[info.type.tensor_type.elem_type]))
    if dynamic:
        parts, flags = [], []
        for name, dims in dynamic:
            parts.append(f"input {name!r} has shape {_fmt_dims(dims)}")
            shown = "D0,D1,..." if dims is None else ",".join(
                str(d) if isinstance(d, int) else "1" for d in dims)
            flags.append(f"--input-shape {name}={shown}")
        raise ModelError(
            f"{label}: Kiln compiles for static shapes, but " + "; ".join(parts)
            + ". Give static shapes on the command line with " + " ".join(flags)
            + " (from Python: from_onnx(..., input_shapes={...}))"
        )
    return values
