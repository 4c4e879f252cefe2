"""Schedule each distinct fused group once: reuse a schedule for an equal later group.

BERT-base has 12 equal encoder layers: 183 fused groups, most of them repeats of a few
kernels that differ only in their weights. :class:`KernelCache` merges equal *scheduled*
functions, but only after each group was scheduled; :class:`ScheduleReuse` looks a group
up *before* scheduling it, by :func:`group_key` — the inner graph's ops, attributes,
shapes and dtypes, which inputs are constants, and the values of the inner constants (the
scalars and ``compile_time`` operands that get baked into code). A group equal to an
earlier one gets the earlier one's lowered function, rebound to its own parameters:

* a group input the kernel takes as a parameter -> this group's input at that position;
* weights packed at compile time -> *this* group's weights through the *same* packing
  (the :class:`~toolchain.schedules.packing.Recipe` the earlier schedule recorded);
* a constant of the group that its schedule may have read (not packed through a recipe,
  not handed on as a parameter, or seen by a schedule not marked
  :func:`~toolchain.schedules.packing.value_blind`) -> its values are compared too, so
  groups that differ in a baked constant never share.

A wrong share would be a silent wrong output, so anything this module cannot classify is
not shared (it is scheduled as before); :class:`KernelCache` stays the safety net after
scheduling.

>>> import numpy as np
>>> from toolchain.graph.ir import Graph, Node, Value
>>> from toolchain.graph.passes.fused_op import fused_node
>>> def group(name, c):
...     x, y = Value("x", (4,), "float32"), Value("y", (4,), "float32")
...     inner = Graph(name, [x], [y], [Node("Add", "a", [x, Value.constant("c", c)], [y])])
...     return fused_node(inner, "injective", [Value("in", (4,), "float32")])
>>> one, two = np.ones(4, np.float32), np.full(4, 2, np.float32)
>>> group_key(group("f0", one)) == group_key(group("f1", one))
True
>>> group_key(group("f0", one)) == group_key(group("f0", two))
False
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.overlap import AccessOrder
from toolchain.inprocess import Unkeyable, array_digest, value_key
from toolchain.schedules import packing

#: what scheduling a group gives: (lowered PrimFunc, inner input values, output values, how,
#: the input the output may overwrite, (the input it may start inside, access order))
Hit = tuple[Any, list[Value], list[Value], str, Value | None,
            tuple[Value, AccessOrder] | None]


def group_key(node: Node) -> tuple | None:
    """A hashable key equal for two ``Fused`` nodes that schedule to the same kernel up
    to their weights (see the module docstring), or None where the group holds something
    this cannot compare exactly (never shared)."""
    inner: Graph = node.attrs["graph"]
    try:
        attrs = value_key({k: v for k, v in node.attrs.items() if k not in ("graph", "kernel")})
        ref: dict[int, tuple] = {id(v): ("in", i) for i, v in enumerate(inner.inputs)}
        ins = tuple(None if v is None else (v.shape, v.dtype, v.data is not None)
                    for v in node.inputs)
        body = []
        for k, n in enumerate(inner.nodes):
            args = []
            for v in n.inputs:
                if v is None:
                    args.append(None)
                elif id(v) in ref:
                    args.append(ref[id(v)])
                elif v.data is not None:  # an inner constant: baked into the code
                    args.append(("const", *array_digest(v.data)))
                else:
                    return None
            for j, v in enumerate(n.outputs):
                ref[id(v)] = ("out", k, j)
            body.append((n.op, value_key(n.attrs), tuple(args),
                         tuple((v.shape, v.dtype) for v in n.outputs)))
        outs = tuple(ref.get(id(v)) or ("const", *array_digest(v.data)) for v in inner.outputs)
    except (Unkeyable, TypeError):
        return None
    return (attrs, ins, tuple((v.shape, v.dtype) for v in inner.inputs), tuple(body), outs)


@dataclass
class _Entry:
    """A scheduled group and how to rebind its kernel to an equal group."""

    #: group input position -> digest of its data (the constants the schedule may read)
    valued: dict[int, tuple]
    #: per kernel input: ("in", group input position) | ("packed", position, Recipe, the
    #: packed value) | ("inner", index in inner.constants()) | ("same", Value)
    params: list[tuple]
    outs: list[int]  # positions in node.outputs
    host: int | None  # index into params of the input the output may overwrite
    #: (index into params of the input the output may start inside, the access order)
    overlap: tuple[int, AccessOrder] | None
    func: Any
    how: str
    #: what the caller noted with the schedule (:meth:`ScheduleReuse.remember`)
    note: Any = None


class ScheduleReuse:
    """Per compile: the groups scheduled so far, by :func:`group_key`; ``scheduled`` and
    ``reused`` count the groups scheduled and the groups that took an earlier schedule.

    ``trusted`` is False where the target's ``Fused`` schedule is not
    :func:`~toolchain.schedules.packing.value_blind`: then every constant's values are
    part of the match (groups with different weights are scheduled separately).
    """

    def __init__(self, trusted: bool = True) -> None:
        self.trusted = trusted
        self._entries: dict[tuple, list[_Entry]] = {}
        self.scheduled = 0
        self.reused = 0
        #: the ``note`` remembered with the schedule the last :meth:`find` hit
        self.note: Any = None

    def find(self, node: Node) -> Hit | None:
        """``_schedule``'s result for ``node`` from an equal earlier group, or None."""
        key = group_key(node)
        for e in self._entries.get(key, ()) if key is not None else ():
            if all(node.inputs[i] is not None and node.inputs[i].data is not None
                   and array_digest(node.inputs[i].data) == d for i, d in e.valued.items()):
                got = self._rebind(node, e)
                if got is not None:
                    self.reused += 1
                    self.note = e.note
                    return got
        return None

    def _rebind(self, node: Node, e: _Entry
                ) -> Hit | None:
        inner: Graph = node.attrs["graph"]
        ins: list[Value] = []
        for p in e.params:
            if p[0] == "in":
                ins.append(inner.inputs[p[1]])
            elif p[0] == "packed":
                _, pos, recipe, like = p
                data = recipe.replay(node.inputs[pos].data)
                if data.shape != like.shape or str(data.dtype) != str(like.data.dtype):
                    return None
                ins.append(Value.constant(inner.inputs[pos].name + recipe.suffix, data))
            elif p[0] == "inner":
                ins.append(inner.constants()[p[1]])
            else:
                ins.append(p[1])
        outs = [node.outputs[j] for j in e.outs]
        lap = (ins[e.overlap[0]], e.overlap[1]) if e.overlap is not None else None
        return e.func, ins, outs, e.how, (ins[e.host] if e.host is not None else None), lap

    def remember(self, node: Node, rec: packing.Record, func: Any, ins: list[Value],
                 outs: list[Value], how: str, host: Value | None,
                 lap: tuple[Value, AccessOrder] | None = None, note: Any = None) -> None:
        """Keep ``node``'s schedule (``rec``: what its schedule call packed and bound;
        ``note``: anything the caller wants back with a later hit, :attr:`note` — the
        compile keeps the workloads whose tuning records the schedule took)."""
        self.scheduled += 1
        key = group_key(node)
        if key is None:
            return
        inner: Graph = node.attrs["graph"]
        pos = {id(v): i for i, v in enumerate(inner.inputs)}
        inner_consts = {id(v): k for k, v in enumerate(inner.constants())}
        out_pos = {id(v): j for j, v in enumerate(node.outputs)}
        blind = self.trusted and rec.blind
        seen_free: set[int] = set()  # positions whose values no schedule decision read
        params: list[tuple] = []
        for v in ins:
            r = rec.recipes.get(id(v))
            if id(v) in pos:
                params.append(("in", pos[id(v)]))
                if self.trusted and (pos[id(v)] not in rec.bound.values() or blind):
                    seen_free.add(pos[id(v)])
            elif r is not None and id(r.source) in rec.bound and blind:
                params.append(("packed", rec.bound[id(r.source)], r, v))
                seen_free.add(rec.bound[id(r.source)])
            elif id(v) in inner_consts:  # equal by the key; each group passes its own
                params.append(("inner", inner_consts[id(v)]))
            elif v.data is not None and not blind:
                # made by a schedule whose every bound input is matched by value below:
                # equal in every group this entry matches
                params.append(("same", v))
            else:
                return  # a constant made from something this cannot follow: not shared
        if any(id(v) not in out_pos for v in outs):
            return
        # a bound constant both packed and passed, or passed by a schedule that is not
        # value-blind, keeps its values in the match
        valued = {i: array_digest(v.data) for i, v in enumerate(node.inputs)
                  if v is not None and v.data is not None and i not in seen_free}
        host_i = next((k for k, v in enumerate(ins) if v is host), None) \
            if host is not None else None
        lap_i = next(((k, lap[1]) for k, v in enumerate(ins) if v is lap[0]), None) \
            if lap is not None else None
        self._entries.setdefault(key, []).append(
            _Entry(valued, params, [out_pos[id(v)] for v in outs], host_i, lap_i, func, how,
                   note))


__all__ = ["ScheduleReuse", "group_key"]
