"""Expand ONNX *function ops* that Kiln does not register into the ops they are defined by.

Many ONNX ops are defined by a function body in their schema (``Swish = X * Sigmoid(alpha
* X)``, ``GroupNormalization``, ``RMSNormalization``, ``CastLike`` …).  When a model uses
such an op and Kiln's registry lacks it, the frontend replaces the node by its body,
recursively, as long as every op of the expansion is registered (otherwise the node is
left alone and reported as unsupported).

Before / after (opset 24, Kiln registers Cast, Mul, Sigmoid …)::

    y = Swish(x)
    -> a = Constant(alpha); ac = Cast(a); ax = Mul(ac, x); s = Sigmoid(ax); y = Mul(x, s)

Context-dependent bodies (whose body depends on input types, like ``CastLike``) are built
from the types ONNX shape inference gives.  The bodies are attached as model-local
functions and inlined with ``onnx.inliner``.  A body written for an older opset is used
only when none of its ops changed between that opset and the model's, or when it is
from opset 18 or later (revisions since then are backward compatible).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx.defs
import onnx.numpy_helper
from onnx import inliner

from toolchain.errors import ModelError
from toolchain.graph.ops import attention
from toolchain.graph.ops.registry import has_op

_DOMAIN = "kiln.expanded"
#: from this opset on, op revisions only add types/attributes/inputs (see _same_semantics)
OPSET_ADDITIVE_ONLY = 18
_MAX_DEPTH = 4

#: registered ops whose Kiln form covers only some ONNX nodes: ``op -> covers(node)``; a
#: node not covered is expanded into its function body like an unregistered op
PARTIAL_FORMS: dict[str, Callable[[onnx.NodeProto], bool]] = {
    "Attention": lambda n: attention.covers(list(n.input), list(n.output)),
}


def _kiln_covers(node: onnx.NodeProto) -> bool:
    return has_op(node.op_type) and PARTIAL_FORMS.get(node.op_type, lambda n: True)(node)


def _schema(op: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None


def _body(node: onnx.NodeProto, opset: int,
          types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    """The schema's function body of ``node`` for ``opset`` (None when there is none)."""
    schema = _schema(node.op_type, opset)
    if schema is None:
        return None
    plain = [v for v in schema.function_opset_versions if v <= opset]
    if schema.has_function and plain:
        return onnx.FunctionProto.FromString(schema.get_function_with_opset_version(max(plain)))
    ctx = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if schema.has_context_dependent_function and ctx:
        if any(name and name not in types for name in node.input):
            return None
        input_types = [types[n].SerializeToString() if n else onnx.TypeProto().
                       SerializeToString() for n in node.input]
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                max(ctx), node.SerializeToString(), input_types)
        except Exception:
            return None
        return onnx.FunctionProto.FromString(data) if data else None
    return None


def _squared(node: onnx.NodeProto | None, made: dict[str, onnx.NodeProto]) -> str | None:
    """The tensor ``node`` squares (``Mul(v, v)``, ``Pow(v, 2)`` by a Constant), or None."""
    if node is None:
        return None
    if node.op_type == "Mul" and len(node.input) == 2 and node.input[0] == node.input[1]:
        return node.input[0]
    two = made.get(node.input[1]) if node.op_type == "Pow" and len(node.input) == 2 else None
    if two is not None and two.op_type == "Constant" and [a.name for a in two.attribute] == [
            "value"] and onnx.numpy_helper.to_array(two.attribute[0].t).tolist() == 2:
        return node.input[0]
    return None


def two_pass_variance(body: onnx.FunctionProto) -> bool:
    """Rewrite ``body``'s variances ``E[x²] - E[x]²`` as ``E[(x - E[x])²]`` in place;
    whether it had one. GroupNormalization's and MeanVarianceNormalization's bodies take
    the first form, which cancels: with float16 tensors inside (``--precision fp16``,
    where the body's float32 stash is float16 too) ``E[x²]`` and ``E[x]²`` are rounded to
    float16 and their difference may be negative (the square root NaN: fuzzer seed
    311010) or any value below their rounding. The second form is never negative and keeps
    the variance's own precision.

    Before / after (GroupNormalization's body)::

        Square = Mul(X3D, X3D);  MeanOfSquare = ReduceMean(Square, Axes2)
        SquareOfMean = Mul(Mean, Mean);  Var = Sub(MeanOfSquare, SquareOfMean)
        ->
        Square__dev = Sub(X3D, Mean);  Square = Mul(Square__dev, Square__dev)
        MeanOfSquare = ReduceMean(Square, Axes2);  Var = Identity(MeanOfSquare)

    (``SquareOfMean``, now unread, is left to dead-code elimination.)
    """
    made = {o: n for n in body.node for o in n.output}
    order = {id(n): k for k, n in enumerate(body.node)}
    devs: dict[int, onnx.NodeProto] = {}
    for node in body.node:
        if node.op_type != "Sub" or len(node.input) != 2:
            continue
        mean_sq, sq_mean = made.get(node.input[0]), made.get(node.input[1])
        mean = made.get(_squared(sq_mean, made) or "")
        square = made.get(mean_sq.input[0]) if mean_sq is not None and \
            mean_sq.op_type == "ReduceMean" else None
        x = _squared(square, made)
        if mean is None or x is None or mean.op_type != "ReduceMean" or \
                mean.input[0] != x or list(mean.input[1:]) != list(mean_sq.input[1:]) or \
                mean.attribute != mean_sq.attribute or order[id(mean)] > order[id(square)]:
            continue
        dev = square.output[0] + "__dev"
        devs[id(square)] = onnx.helper.make_node("Sub", [x, mean.output[0]], [dev])
        square.op_type = "Mul"
        del square.input[:], square.attribute[:]
        square.input.extend([dev, dev])
        node.op_type = "Identity"
        del node.input[1]
    if devs:
        nodes = [m for n in body.node for m in ((devs[id(n)], n) if id(n) in devs else (n,))]
        del body.node[:]
        body.node.extend(nodes)
    return bool(devs)


def _same_semantics(body: onnx.FunctionProto, opset: int) -> bool:
    """Do the body's ops mean the same at the body's opset and at the model's ``opset``?

    Bodies are written for one opset (``Elu``'s for 18); inlined into an opset-22 model
    their nodes are read as opset-22 nodes.  That is right when no op of the body changed
    in between, or when the body is from opset 18 or later: since 18 (where ``Reduce*``
    axes became inputs) op revisions have only added types, attributes with
    backward-compatible defaults, or inputs.
    """
    body_opset = next((o.version for o in body.opset_import if o.domain in ("", "ai.onnx")),
                      opset)
    if body_opset >= OPSET_ADDITIVE_ONLY:
        return True
    for node in body.node:
        old, new = _schema(node.op_type, body_opset), _schema(node.op_type, opset)
        if old is None or new is None or old.since_version != new.since_version:
            return False
    return True


def expandable(op: str, opset: int, depth: int = 0, partial: bool = False) -> bool:
    """Can ``op`` be written with registered ops (through nested function bodies)?

    Optimistic for context-dependent bodies, which are known only per node. With
    ``partial`` an op of :data:`PARTIAL_FORMS` is asked about its function body.

    Example::

        >>> expandable("Relu", 17), expandable("Swish", 24), expandable("Loop", 17)
        (True, True, False)
    """
    if has_op(op) and not (partial and op in PARTIAL_FORMS):
        return True
    if depth >= _MAX_DEPTH:
        return False
    schema = _schema(op, opset)
    if schema is None:
        return False
    if schema.has_function and schema.function_opset_versions:
        body = onnx.FunctionProto.FromString(schema.get_function_with_opset_version(
            max(v for v in schema.function_opset_versions if v <= opset)
            if any(v <= opset for v in schema.function_opset_versions)
            else schema.function_opset_versions[0]))
        return _same_semantics(body, opset) and all(
            n.domain in ("", "ai.onnx") and expandable(n.op_type, opset, depth + 1)
            for n in body.node)
    # Context-dependent bodies are known only per node; try them.
    return schema.has_context_dependent_function


def _fill_default_attributes(node: onnx.NodeProto, opset: int) -> None:
    """Give ``node`` the schema defaults of attributes it leaves out: a body refers to its
    attributes by name, and the inliner knows nothing of the schema's defaults
    (MeanVarianceNormalization's ``axes = [0, 2, 3]``)."""
    schema = _schema(node.op_type, opset)
    given = {a.name for a in node.attribute}
    for name, attr in (schema.attributes.items() if schema else []):
        default = attr.default_value
        if name not in given and default is not None and default.type != 0:
            copy = onnx.AttributeProto()
            copy.CopyFrom(default)
            copy.name = name
            node.attribute.append(copy)


def _value_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    types = {}
    for info in list(inferred.graph.input) + list(inferred.graph.value_info) + list(
            inferred.graph.output):
        types[info.name] = info.type
    for init in proto.graph.initializer:
        types[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, init.dims)
    return types


def expand_function_ops(proto: onnx.ModelProto, opset: int, label: str) -> onnx.ModelProto:
    """Replace unregistered function ops of ``proto`` by their bodies (see module doc).

    Example::

        >>> from onnx import helper, TensorProto
        >>> g = helper.make_graph([helper.make_node("Swish", ["x"], ["y"])], "g",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
        >>> [n.op_type for n in expand_function_ops(m, 24, "m").graph.node]
        ['Constant', 'Cast', 'Mul', 'Sigmoid', 'Mul']
    """
    for _ in range(_MAX_DEPTH):
        candidates = [n for n in proto.graph.node if n.domain in ("", "ai.onnx")
                      and not _kiln_covers(n) and expandable(n.op_type, opset, partial=True)]
        if not candidates:
            return proto
        types = _value_types(proto) if any(
            (s := _schema(n.op_type, opset)) is not None and not s.has_function
            for n in candidates) else {}
        changed = False
        for index, node in enumerate(candidates):
            body = _body(node, opset, types)
            if body is None or not _same_semantics(body, opset) or not all(
                    n.domain in ("", "ai.onnx") and expandable(n.op_type, opset)
                    for n in body.node):
                continue
            _fill_default_attributes(node, opset)
            two_pass_variance(body)
            body.domain, body.name = _DOMAIN, f"{node.op_type}__{index}"
            for imp in body.opset_import:  # read the body as the model's opset (checked)
                if imp.domain in ("", "ai.onnx"):
                    imp.version = opset
            node.domain, node.op_type = _DOMAIN, body.name
            proto.functions.append(body)
            changed = True
        if not changed:
            return proto
        if not any(o.domain == _DOMAIN for o in proto.opset_import):
            proto.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
        try:
            proto = inliner.inline_local_functions(proto)
        except Exception as exc:
            raise ModelError(f"{label}: expanding function ops into their ONNX definitions "
                             f"failed: {exc}") from None
        kept = [o for o in proto.opset_import if o.domain != _DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return proto
