"""Control flow with compile-time conditions: inline ``If``, unroll ``Loop`` and ``Scan``.

Kiln compiles static dataflow graphs, so a control-flow node is resolved while the graph
is built (:func:`toolchain.frontend.onnx_build.build_graph`), after constant folding has
decided what it can about the node's operands:

* ``If`` whose condition is a compile-time constant: the taken branch's nodes replace it;
* ``Loop`` whose trip count ``M`` (and initial ``cond``, when given) are constants: the
  body is repeated, its loop-carried values threaded from one copy to the next; the body's
  ``cond`` output must fold to a constant in every iteration (it decides whether another
  one runs); scan outputs are stacked along a new axis 0 (``Unsqueeze`` + ``Concat``);
* ``Scan`` (opset 9 and later) over inputs of static shape: one body copy per element of
  the sequence axis (``Gather`` of the element), scan outputs stacked along their axes,
  in reverse where a direction says so.

Each copy of a body gets fresh names (``<node>__<then|else|itK>__<name>``); names the body
reads from an enclosing scope resolve to the enclosing values, also from nested bodies.
A condition, trip count or per-iteration condition that is computed at run time is
refused (:class:`~toolchain.errors.ModelError`) naming the node and the operand.

Before / after (``cond`` is the constant ``true``)::

    res = If(cond) then { t = Constant([1, 2]) -> t } else { e = Neg(x) -> e }
    -> If__then__t = Constant([1, 2]); res = Identity(If__then__t)

    y, s = Loop(M=3, "", y0) body(i, c, y_in) { y_out = Add(y_in, one); out y_out, y_out }
    -> it0: y1 = Add(y0, one); it1: y2 = Add(y1, one); it2: y3 = Add(y2, one)
       y = Identity(y3); s = Concat(Unsqueeze(y1, 0), Unsqueeze(y2, 0), Unsqueeze(y3, 0))
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import numpy_helper

from toolchain.errors import ModelError, UnsupportedError
from toolchain.frontend.onnx_nodes import CONTROL_FLOW_OPS
from toolchain.frontend.onnx_upgrade import RawNode
from toolchain.graph.ir import Value
from toolchain.graph.ops.common import ONNX_TO_KILN

#: a Loop or Scan is unrolled into at most this many copies of its body
MAX_UNROLL = 4096


class Scope(Protocol):
    """What unrolling needs from the graph builder."""

    label: str
    values: dict[str, Value]
    graph_inputs: set[str]

    def fresh(self, base: str) -> str: ...

    def constant(self, base: str, array: np.ndarray) -> Value: ...

    def add(self, op: str, name: str, inputs: list[Value | None], out_names: list[str],
            attrs: Mapping[str, Any]) -> list[Value]: ...

    def run_proto(self, node: onnx.NodeProto) -> None: ...


# -- names ----------------------------------------------------------------------------------

def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _bound(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    return names | {o for node in graph.node for o in node.output if o}


def implicit_inputs(node: onnx.NodeProto) -> list[str]:
    """Names that ``node``'s subgraphs (at any depth) read from enclosing scopes.

    >>> from onnx import helper
    >>> then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
    ...                          [helper.make_empty_tensor_value_info("t")])
    >>> implicit_inputs(helper.make_node("If", ["c"], ["y"], then_branch=then,
    ...                                  else_branch=then))
    ['x']
    """
    free: list[str] = []
    for graph in _subgraphs(node):
        bound = _bound(graph)
        refs = [n for inner in graph.node for n in [*inner.input, *implicit_inputs(inner)]]
        refs += [o.name for o in graph.output]
        free += [n for n in refs if n and n not in bound and n not in free]
    return free


def _rename_free(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename, in place, the names ``graph`` reads from enclosing scopes (names the graph
    defines itself shadow ``mapping``)."""
    bound = _bound(graph)
    outer = {k: v for k, v in mapping.items() if k not in bound}
    if not outer:
        return
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in outer:
                node.input[i] = outer[name]
        for sub in _subgraphs(node):
            _rename_free(sub, outer)
    for out in graph.output:
        if out.name in outer:
            out.name = outer[out.name]


def body_nodes(node: onnx.NodeProto, owner: str) -> Iterator[tuple[str, onnx.NodeProto]]:
    """``(name for messages, node)`` of every node in ``node``'s subgraphs, at any depth."""
    for graph in _subgraphs(node):
        for i, inner in enumerate(graph.node):
            name = f"{owner}/{inner.name or f'{inner.op_type}_{i}'}"
            yield name, inner
            yield from body_nodes(inner, name)


# -- one copy of a body ---------------------------------------------------------------------

def _inline_body(scope: Scope, owner: RawNode, graph: onnx.GraphProto, tag: str,
                 bound: Sequence[Value]) -> list[Value]:
    """Add one copy of ``graph`` with its inputs bound to ``bound``; its output values."""
    prefix = f"{owner.name}__{tag}"
    if len(bound) != len(graph.input):
        raise ModelError(f"{scope.label}: {owner.where()}: its body {graph.name!r} takes "
                         f"{len(graph.input)} inputs, the node gives it {len(bound)}")
    if len(graph.sparse_initializer):
        raise UnsupportedError(f"{scope.label}: {owner.where()}: its body {graph.name!r} has "
                               "a sparse initializer, which Kiln does not support")
    mapping = {info.name: v.name for info, v in zip(graph.input, bound, strict=True)}
    for init in graph.initializer:
        if init.data_type not in ONNX_TO_KILN:
            raise UnsupportedError(
                f"{scope.label}: {owner.where()}: initializer {init.name!r} of its body has "
                f"dtype {onnx.TensorProto.DataType.Name(init.data_type)}, which Kiln does "
                "not support")
        mapping[init.name] = scope.constant(f"{prefix}__{init.name}",
                                            numpy_helper.to_array(init)).name
    for node in graph.node:
        for out in node.output:
            if out:
                mapping[out] = scope.fresh(f"{prefix}__{out}")
    for i, node in enumerate(graph.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.input[:]
        copy.input.extend(mapping.get(n, n) if n else "" for n in node.input)
        del copy.output[:]
        copy.output.extend(mapping[n] if n else "" for n in node.output)
        for sub in _subgraphs(copy):
            _rename_free(sub, mapping)
        copy.name = scope.fresh(f"{prefix}__{node.name or f'{node.op_type}_{i}'}")
        scope.run_proto(copy)
    return [scope.values[mapping.get(o.name, o.name)] for o in graph.output]


def _bind_outputs(scope: Scope, raw: RawNode, values: Sequence[Value]) -> None:
    for i, (name, v) in enumerate(zip(raw.outputs, values, strict=False)):
        if name:
            scope.add("Identity", scope.fresh(f"{raw.name}__out{i}"), [v], [name], {})


def _stack(scope: Scope, raw: RawNode, values: Sequence[Value], axis: int) -> Value:
    """``values`` (same shape) stacked along a new ``axis``."""
    rank = values[0].rank + 1
    axis = axis + rank if axis < 0 else axis
    axes = scope.constant(f"{raw.name}__axes", np.array([axis], np.int64))
    parts = [scope.add("Unsqueeze", scope.fresh(f"{raw.name}__unsqueeze"), [v, axes],
                       [scope.fresh(f"{v.name}__unsqueezed")], {})[0] for v in values]
    return scope.add("Concat", scope.fresh(f"{raw.name}__stack"), list(parts),
                     [scope.fresh(f"{raw.name}__stacked")], {"axis": axis})[0]


def _constant(scope: Scope, raw: RawNode, v: Value, what: str, why: str) -> np.ndarray:
    """The value of ``v``, which must be a compile-time constant."""
    if v.data is not None:
        return np.asarray(v.data)
    hint = (f" ({v.name!r} is an input of the model: make it an initializer, or from Python "
            f"pass from_onnx(..., bind={{{v.name!r}: array}}))"
            if v.name in scope.graph_inputs else "")
    raise ModelError(
        f"{scope.label}: {raw.where()}: {what} {v.name!r} is computed at run time, not a "
        f"compile time constant; Kiln compiles static dataflow graphs and {why}{hint}")


def _flag(array: np.ndarray) -> bool:
    return bool(array.reshape(-1)[0]) if array.size else False


# -- the three ops --------------------------------------------------------------------------

def _expand_if(scope: Scope, raw: RawNode, ins: list[Value | None]) -> None:
    cond = ins[0]
    assert cond is not None  # the checker requires it
    taken = _flag(_constant(scope, raw, cond, "its condition",
                            "inlines an If only when its condition is known at compile "
                            "time, so that one branch can be chosen"))
    branch = "then" if taken else "else"
    values = _inline_body(scope, raw, raw.attrs[f"{branch}_branch"], branch, [])
    _bind_outputs(scope, raw, values)


def _expand_loop(scope: Scope, raw: RawNode, ins: list[Value | None]) -> None:
    why = ("unrolls a Loop only when its trip count and condition are known at compile "
           "time")
    body = raw.attrs["body"]
    trip_v = ins[0] if ins else None
    cond_v = ins[1] if len(ins) > 1 else None
    state = [v for v in ins[2:] if v is not None]
    n_scan = len(body.output) - 1 - len(state)
    trips = None if trip_v is None else int(
        _constant(scope, raw, trip_v, "its trip count", why).reshape(-1)[0])
    go = True if cond_v is None else _flag(_constant(scope, raw, cond_v, "its condition", why))
    if trips is None and cond_v is None:
        raise ModelError(f"{scope.label}: {raw.where()}: the Loop has neither a trip count "
                         "nor a condition, so it never ends")
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    k = 0
    while go and (trips is None or k < trips):
        if k >= MAX_UNROLL:
            raise ModelError(f"{scope.label}: {raw.where()}: the Loop runs more than "
                             f"{MAX_UNROLL} iterations, more than Kiln unrolls")
        it = scope.constant(f"{raw.name}__iter{k}", np.array(k, np.int64))
        flag = scope.constant(f"{raw.name}__cond{k}", np.array(go, np.bool_))
        outs = _inline_body(scope, raw, body, f"it{k}", [it, flag, *state])
        state = outs[1:1 + len(state)]
        for acc, v in zip(scans, outs[1 + len(state):], strict=True):
            acc.append(v)
        if cond_v is not None:
            go = _flag(_constant(scope, raw, outs[0],
                                 f"the condition its body computes in iteration {k},", why))
        k += 1
    if n_scan and k == 0:
        raise ModelError(f"{scope.label}: {raw.where()}: the Loop runs 0 iterations, so its "
                         "scan outputs are empty with a shape Kiln cannot know")
    _bind_outputs(scope, raw, [*state, *(_stack(scope, raw, acc, 0) for acc in scans)])


def _expand_scan(scope: Scope, raw: RawNode, ins: list[Value | None]) -> None:
    body = raw.attrs["body"]
    m = int(raw.attrs["num_scan_inputs"])
    values = [v for v in ins if v is not None]
    n_state = len(values) - m
    state, xs = values[:n_state], values[n_state:]
    k_out = len(body.output) - n_state
    in_axes = [a % x.rank if x.rank else a for a, x in
               zip(raw.attrs.get("scan_input_axes") or (0,) * m, xs, strict=True)]
    in_dirs = raw.attrs.get("scan_input_directions") or (0,) * m
    out_axes = raw.attrs.get("scan_output_axes") or (0,) * k_out
    out_dirs = raw.attrs.get("scan_output_directions") or (0,) * k_out
    lengths = {x.shape[a] for x, a in zip(xs, in_axes, strict=True)}
    if len(lengths) != 1 or 0 in lengths:
        raise ModelError(f"{scope.label}: {raw.where()}: the scan inputs' sequence lengths "
                         f"are {sorted(lengths)}; they must be one length of at least 1")
    length = lengths.pop()
    if length > MAX_UNROLL:
        raise ModelError(f"{scope.label}: {raw.where()}: the Scan runs {length} iterations, "
                         f"more than Kiln unrolls ({MAX_UNROLL})")
    scans: list[list[Value]] = [[] for _ in range(k_out)]
    for t in range(length):
        slices = []
        for x, a, d in zip(xs, in_axes, in_dirs, strict=True):
            index = scope.constant(f"{raw.name}__t{t}", np.array(length - 1 - t if d else t,
                                                                 np.int64))
            slices += scope.add("Gather", scope.fresh(f"{raw.name}__slice"), [x, index],
                                [scope.fresh(f"{x.name}__t{t}")], {"axis": a})
        outs = _inline_body(scope, raw, body, f"it{t}", [*state, *slices])
        state = outs[:n_state]
        for acc, v in zip(scans, outs[n_state:], strict=True):
            acc.append(v)
    stacked = [_stack(scope, raw, acc[::-1] if d else acc, a)
               for acc, a, d in zip(scans, out_axes, out_dirs, strict=True)]
    _bind_outputs(scope, raw, [*state, *stacked])


_EXPANDERS = {"If": _expand_if, "Loop": _expand_loop, "Scan": _expand_scan}
assert set(_EXPANDERS) == set(CONTROL_FLOW_OPS)


def expand_control(scope: Scope, raw: RawNode, ins: list[Value | None]) -> None:
    """Replace the control-flow node ``raw`` (inputs ``ins``) by the copies of its bodies
    that run (see the module docstring)."""
    _EXPANDERS[raw.op](scope, raw, ins)
