"""Static memory planning: one arena, every intermediate tensor at a fixed offset.

The bundle runs the kernels (the nodes of a fused graph) in their topological order; step
*s* is node *s*.  Lifetimes and rules:

* a tensor lives from the step that produces it to the last step that reads it; the
  inputs and outputs of a step are live together (a kernel reads while it writes);
* graph inputs and outputs belong to the caller and constants are weights: neither is in
  the arena;
* **in place**: an output may take over the buffer of an input of the same size that dies
  at that step, when the kernel writes each output element only after reading the input
  element at the same flat index — ops with the ``in_place`` trait (element-wise ops and
  views, unless their ``OpDef`` says otherwise) whose chain from that input to that output
  keeps the shape (a view: the size); inside a ``Fused`` kernel this is checked along the
  inner graph (so ``conv -> add(residual) -> relu`` may write over the residual);
  and where the kernel itself says so: ``overwrite={node_name: {input_name, ...}}`` names
  inputs a node's scheduled kernel stages before it writes the output over them (a
  Cortex-M pointwise convolution copies each pixel's channels into its im2col row before
  writing that pixel's outputs; a depthwise one pads each channel's plane into a stack
  buffer before writing that channel), with the output of the input's shape and dtype;
* **overlap**: an output of another shape may *start inside* an input that dies at that
  step, ``lead`` bytes before it, where the kernel's schedule declares that lead legal
  (:mod:`toolchain.graph.overlap`: no output byte is written before the last read of the
  input byte at its address): ``overlap={node_name: (input_name, lead)}``.  The pair is
  one buffer of two parts, each with its own lifetime (``TensorPlan.lead``); overlaps are
  taken greedily, each only where the arena shrinks (:func:`plan_memory`);
* **views of graph inputs**: a kernel made only of views (ops with the ``view`` trait:
  Reshape, Flatten, Squeeze, Unsqueeze, Identity) of a graph input (or of such a view) is
  a view of the caller's buffer: its output takes no arena bytes
  and is listed in ``MemoryPlan.views`` (tensor -> the graph input it reads), so a bundle
  passes the caller's pointer on and does not call the kernel.  No kernel may write over
  such a view in place (the caller's input stays as it was);
* **scratch**: ``scratch={node_name: bytes}`` reserves a kernel's workspace (packing
  buffers, ``cache_write`` tiles) for exactly its step, in the same arena.

Offsets come from a **greedy-by-size** placement: buffers sorted by a key (size first),
each put at the best-fitting gap among the already placed buffers whose lifetimes overlap
(the conflict graph).  Several sort keys are tried, then a **local search** moves one buffer
earlier or later in the placement order and keeps the move when the arena does not grow,
until the arena equals the lower bound or the move budget is spent.  All offsets and sizes
are multiples of ``alignment``.

The plan reports three numbers:

* ``arena_bytes`` — the arena the plan needs;
* ``lower_bound`` — the largest sum of (aligned) buffer sizes live at one step: no plan of
  these buffers can be smaller;
* ``naive_bytes`` — every tensor and scratch buffer in its own place (no reuse at all).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, a, b, y = (Value(n, (256,), "float32") for n in ("x", "a", "b", "y"))
    >>> g = Graph("g", [x], [y], [Node("Exp", "e", [x], [a]), Node("Neg", "n", [a], [b]),
    ...                           Node("Tanh", "t", [b], [y])])
    >>> plan = plan_memory(g)
    >>> plan.check()
    >>> plan.arena_bytes, plan.lower_bound, plan.naive_bytes
    (1024, 1024, 2048)
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import get_op

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"


class PlanError(AssertionError):
    """A memory plan violates its invariants: a bug in the planner, not a user error."""


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class TensorPlan:
    """Where one tensor (or scratch buffer) lives: ``[offset, offset + size)`` during steps
    ``first..last`` (inclusive).  ``inplace_of`` names the tensor whose buffer it reuses."""

    name: str
    size: int
    offset: int
    first: int
    last: int
    kind: str = "tensor"  # "tensor" | "scratch"
    inplace_of: str | None = None
    #: an **overlap** pair: the output starts ``lead`` bytes before ``inplace_of``'s start
    #: (the kernel's declared legal offset); 0 for an in-place pair (one buffer)
    lead: int = 0


@dataclass
class MemoryPlan:
    """The result of :func:`plan_memory`."""

    arena_bytes: int
    lower_bound: int
    naive_bytes: int
    alignment: int
    steps: list[str]
    tensors: list[TensorPlan] = field(default_factory=list)
    #: tensors that are views of a graph input (not in the arena): name -> that input's name
    views: dict[str, str] = field(default_factory=dict)
    #: the arena and lower bound of the nodes in the file's order, when the plan's order
    #: was searched (:func:`toolchain.graph.order.plan_in_best_order`); else None
    file_arena_bytes: int | None = None
    file_lower_bound: int | None = None
    #: how the order was found: ``searched``, ``changed``, ``exact``, ``states``, ``segments``
    order_search: dict[str, Any] = field(default_factory=dict)

    def tensor(self, name: str) -> TensorPlan:
        """The placement of the tensor called ``name``."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"the memory plan has no tensor {name!r}")

    def check(self) -> None:
        """Raise :class:`PlanError` unless the plan is valid: aligned offsets, everything
        inside the arena, and no two tensors with overlapping lifetimes overlapping in
        memory, except an in-place or overlap pair at the step where the input dies, the
        output exactly its declared ``lead`` bytes before the input."""
        a = self.alignment
        for t in self.tensors:
            if t.offset % a or t.offset < 0 or t.offset + t.size > self.arena_bytes:
                raise PlanError(f"tensor {t.name!r} at [{t.offset}, {t.offset + t.size}) is "
                                f"misaligned or outside the {self.arena_bytes}-byte arena")
            if not 0 <= t.first <= t.last < max(len(self.steps), 1):
                raise PlanError(f"tensor {t.name!r} has lifetime {t.first}..{t.last} outside "
                                f"the {len(self.steps)} steps")
        by_name = {t.name: t for t in self.tensors}
        for t in self.tensors:
            if t.inplace_of is None:
                continue
            host = by_name[t.inplace_of]
            if t.offset != host.offset - t.lead or t.first != host.last:
                raise PlanError(
                    f"tensor {t.name!r} at {t.offset} (from step {t.first}) is not "
                    f"{t.lead} bytes before {host.name!r} at {host.offset} (last read at "
                    f"step {host.last}), the offset its kernel declared")

        def paired(s: TensorPlan, t: TensorPlan) -> bool:
            """One takes over the other's bytes at the step the other dies (declared)."""
            return s.inplace_of == t.name or t.inplace_of == s.name

        items = sorted((t for t in self.tensors if t.size > 0), key=lambda t: t.offset)
        for i, s in enumerate(items):
            for t in items[i + 1:]:
                if t.offset >= s.offset + s.size:
                    break
                if s.first <= t.last and t.first <= s.last and not paired(s, t):
                    raise PlanError(
                        f"tensors {s.name!r} (steps {s.first}..{s.last}, bytes [{s.offset}, "
                        f"{s.offset + s.size})) and {t.name!r} (steps {t.first}..{t.last}, "
                        f"bytes [{t.offset}, {t.offset + t.size})) are live together and "
                        "overlap")
        if self.arena_bytes < self.lower_bound:
            raise PlanError(f"arena {self.arena_bytes} is below the lower bound "
                            f"{self.lower_bound}")

    def summary(self) -> str:
        """One line: the three numbers and the arena / lower-bound ratio."""
        ratio = self.arena_bytes / self.lower_bound if self.lower_bound else 1.0
        return (f"arena {self.arena_bytes:,} B, lower bound {self.lower_bound:,} B "
                f"(x{ratio:.3f}), naive {self.naive_bytes:,} B, {len(self.tensors)} tensors, "
                f"{len(self.steps)} steps" + self.order_note())

    def order_note(self) -> str:
        """Where the order came from, for :meth:`summary`: the file order's bound and the
        searched one (empty when the order was not searched)."""
        if self.file_lower_bound is None:
            return ""
        if self.order_search.get("changed"):
            return (f"; searched node order (file order: arena {self.file_arena_bytes:,} B, "
                    f"lower bound {self.file_lower_bound:,} B)")
        return "; file node order (the order search found none better)"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for ``metadata.json``)."""
        return {
            "arena_bytes": self.arena_bytes, "lower_bound": self.lower_bound,
            "naive_bytes": self.naive_bytes, "alignment": self.alignment,
            "steps": list(self.steps),
            "tensors": [{"name": t.name, "offset": t.offset, "size": t.size,
                         "first": t.first, "last": t.last, "kind": t.kind,
                         "inplace_of": t.inplace_of, **({"lead": t.lead} if t.lead else {})}
                        for t in self.tensors],
            "views": dict(self.views),
            "file_order": None if self.file_lower_bound is None else {
                "arena_bytes": self.file_arena_bytes, "lower_bound": self.file_lower_bound},
            "order_search": dict(self.order_search),
        }


# -- lifetimes -----------------------------------------------------------------------------
@dataclass(eq=False)
class _Part:
    """One rectangle of a buffer: ``[rel, rel + size)`` from the buffer's offset during
    steps ``first..last``, held by a tensor and the tensors that reuse it in place."""

    rel: int
    size: int  # aligned bytes
    first: int
    last: int
    members: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Buffer:
    """One arena region placed as a whole: a tensor plus the tensors that reuse it in place
    (one part), and the outputs an overlap pair starts inside it (one more part each, at
    the offset their kernel declared)."""

    parts: list[_Part]
    offset: int = 0

    @property
    def size(self) -> int:
        return max(p.rel + p.size for p in self.parts)

    @property
    def first(self) -> int:
        return min(p.first for p in self.parts)

    @property
    def last(self) -> int:
        return max(p.last for p in self.parts)

    @property
    def members(self) -> list[str]:
        return [m for p in self.parts for m in p.members]

    def live_bytes(self, step: int) -> int:
        """Bytes of the buffer in use at ``step`` (the union of its live parts)."""
        spans = sorted((p.rel, p.rel + p.size) for p in self.parts
                       if p.first <= step <= p.last)
        total, end = 0, 0
        for lo, hi in spans:
            total += max(0, hi - max(lo, end))
            end = max(end, hi)
        return total


def _single(size: int, first: int, last: int, name: str) -> _Buffer:
    return _Buffer([_Part(0, size, first, last, [name])])


def _writes_after_reading(op: str, reads: Sequence[Value], out: Value) -> bool:
    """Whether an ``op`` node writes ``out[k]`` only after reading ``reads[i][k]``: the
    op's ``in_place`` trait, with every input read of the output's shape (a view: any)."""
    opdef = get_op(op)
    return bool(opdef.in_place) and (opdef.view or all(v.shape == out.shape for v in reads))


def _elementwise_chain(node: Node, src: Value, dst: Value) -> bool:
    """Whether ``node`` computes ``dst[k]`` from ``src[k]`` (same flat index) only."""
    if src.nbytes != dst.nbytes:
        return False
    if node.op != "Fused":
        return _writes_after_reading(node.op, [src], dst)
    inner: Graph = node.attrs["graph"]
    derived = {src}
    for n in inner.nodes:
        reads = [v for v in n.inputs if v is not None and v in derived]
        if not reads:
            continue
        if (len(n.outputs) != 1 or n.outputs[0].nbytes != src.nbytes
                or not _writes_after_reading(n.op, reads, n.outputs[0])):
            return False
        derived.add(n.outputs[0])
    return dst in derived


def _view_source(node: Node, out: Value, sources: dict[Value, str]) -> str | None:
    """The graph input that ``out`` is a view of, when ``node`` only reshapes a graph input
    (or a view of one, ``sources``) into ``out``; else None."""
    ops = [n.op for n in node.attrs["graph"].nodes] if node.op == "Fused" else [node.op]
    ins = [v for v in node.inputs if v is not None and not v.is_constant]  # not shapes
    if (len(ins) != 1 or len(node.outputs) != 1 or ins[0] not in sources
            or ins[0].nbytes != out.nbytes or not all(get_op(op).view for op in ops)):
        return None
    return sources[ins[0]]


def input_views(graph: Graph) -> dict[str, str]:
    """The tensors that are views of a graph input (module docstring, "views of graph
    inputs"): tensor name -> that input's name.  They take no arena bytes, in any order of
    the nodes (a view depends on the data flow only).

    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, r, y = Value("x", (2, 8), "float32"), *(Value(n, (16,), "float32") for n in "ry")
    >>> shape = Value.constant("shape", [16])
    >>> input_views(Graph("g", [x], [y], [Node("Reshape", "v", [x, shape], [r]),
    ...                                   Node("Exp", "e", [r], [y])]))
    {'r': 'x'}
    """
    external = set(graph.inputs) | set(graph.outputs)
    sources = {v: v.name for v in graph.inputs}
    views: dict[str, str] = {}
    for node in graph.nodes:
        for out in node.outputs:
            if out in external or out.is_constant:
                continue
            src = _view_source(node, out, sources)
            if src is not None:
                sources[out] = views[out.name] = src
    return views


def inplace_candidates(node: Node, out: Value, declared: frozenset[str] = frozenset()
                       ) -> list[Value]:
    """The inputs of ``node`` whose buffer ``out`` may take over *if* they die at the
    node's step (module docstring, "in place"), in input order; ``declared`` names the
    inputs the node's kernel stages before writing over them.  Whether one does depends on
    the order of the nodes: the planner takes the first that is an arena tensor read last
    by this node (:func:`plan_memory`, and the order search of
    :mod:`toolchain.graph.order`).

    >>> from toolchain.graph.ir import Node, Value
    >>> a, b, y = (Value(n, (64,), "float32") for n in ("a", "b", "y"))
    >>> [v.name for v in inplace_candidates(Node("Add", "s", [a, b], [y]), y)]
    ['a', 'b']
    >>> inplace_candidates(Node("Add", "s", [a, a], [y]), y)  # read twice: never
    []
    """
    found = []
    for v in node.inputs:
        if v is None or v.nbytes != out.nbytes or sum(1 for w in node.inputs if w is v) != 1:
            continue
        by_kernel = (v.name in declared and v.shape == out.shape and v.dtype == out.dtype
                     and len(node.outputs) == 1)
        if by_kernel or _elementwise_chain(node, v, out):
            found.append(v)
    return found


def _buffers(graph: Graph, alignment: int, scratch: Mapping[str, int], inplace: bool,
             overwrite: Mapping[str, frozenset[str]], views: Mapping[str, str],
             overlap: Mapping[str, tuple[str, int]]
             ) -> tuple[list[_Buffer], dict[str, tuple[int, int, int, str, str | None, int]]]:
    """Buffers to place, and per tensor name ``(size, first, last, kind, inplace_of,
    lead)``; the outputs in ``views`` take no buffer."""
    external = set(graph.inputs) | set(graph.outputs)
    last: dict[Value, int] = {}
    for s, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last[v] = s
    by_value: dict[Value, tuple[_Buffer, _Part]] = {}
    info: dict[str, tuple[int, int, int, str, str | None, int]] = {}
    buffers: list[_Buffer] = []
    for s, node in enumerate(graph.nodes):
        for out in node.outputs:
            if out in external or out.is_constant or out.name in views:
                continue
            end = max(last.get(out, s), s)
            host = (_inplace_host(node, out, s, by_value, last,
                                  overwrite.get(node.name, frozenset())) if inplace else None)
            lap = (_overlap_host(node, out, s, by_value, last, overlap.get(node.name))
                   if inplace and host is None else None)
            if host is not None:
                buf, part = by_value[host]
                part.last = max(part.last, end)
                part.members.append(out.name)
                info[out.name] = (out.nbytes, s, end, "tensor", host.name, 0)
            elif lap is not None:
                (buf, hpart), lead = by_value[lap[0]], lap[1]
                part = _Part(hpart.rel - lead, _align(out.nbytes, alignment), s, end,
                             [out.name])
                buf.parts.append(part)
                shift = -min(p.rel for p in buf.parts)
                for p in buf.parts:  # the buffer grows in front: every part moves back
                    p.rel += shift
                info[out.name] = (out.nbytes, s, end, "tensor", lap[0].name, lead)
            else:
                buf = _single(_align(out.nbytes, alignment), s, end, out.name)
                part = buf.parts[0]
                buffers.append(buf)
                info[out.name] = (out.nbytes, s, end, "tensor", None, 0)
            by_value[out] = (buf, part)
        if scratch.get(node.name, 0) > 0:
            name = f"{node.name}:scratch"
            buffers.append(_single(_align(scratch[node.name], alignment), s, s, name))
            info[name] = (int(scratch[node.name]), s, s, "scratch", None, 0)
    return buffers, info


def _live_total(buffers: list[_Buffer]) -> int:
    """Bytes live summed over the steps (the overlap search's tie-break)."""
    return sum(b.live_bytes(s) for b in buffers for s in range(b.first, b.last + 1))


def _dies_here(v: Value, step: int, by_value: dict[Value, tuple[_Buffer, _Part]],
               last: dict[Value, int]) -> bool:
    """Whether ``v`` is an arena tensor whose bytes are free after ``step``: read last at
    this step, and the last tensor of its part (no alias of it read later)."""
    got = by_value.get(v)
    if got is None:
        return False
    _, part = got
    return part.last == step and last.get(v) == step and part.members[-1] == v.name


def _inplace_host(node: Node, out: Value, step: int,
                  by_value: dict[Value, tuple[_Buffer, _Part]],
                  last: dict[Value, int], declared: frozenset[str]) -> Value | None:
    """The first of :func:`inplace_candidates` whose buffer ``out`` takes over (or
    ``None``): an arena tensor that dies at this step and is not taken yet."""
    for v in inplace_candidates(node, out, declared):
        if not _dies_here(v, step, by_value, last):
            continue  # not in the arena, or still read later (by another step or alias)
        by_value[v][1].last = -1  # taken: a second output of this step may not take it too
        return v
    return None


def _overlap_host(node: Node, out: Value, step: int,
                  by_value: dict[Value, tuple[_Buffer, _Part]], last: dict[Value, int],
                  declared: tuple[str, int] | None) -> tuple[Value, int] | None:
    """``(input, lead)`` when ``node``'s kernel declared that ``out`` may start ``lead``
    bytes before that input (module docstring, "overlap") and the input dies at this step
    (a single output, so nothing else of this step can start over it too); else None."""
    if declared is None or len(node.outputs) != 1:
        return None
    name, lead = declared
    reads = [v for v in node.inputs if v is not None and v.name == name]
    if len(reads) != 1 or sum(1 for w in node.inputs if w is reads[0]) != 1:
        return None
    v = reads[0]
    if not _dies_here(v, step, by_value, last):
        return None
    return v, lead


# -- placement -----------------------------------------------------------------------------
def _place(order: list[_Buffer], best_fit: bool) -> int:
    """Greedy placement in ``order``; sets ``offset`` on each buffer, returns the arena.
    A buffer of one part takes the best-fitting (or first) gap among the placed parts
    live with it; a buffer of several parts (an overlap pair) the lowest offset where none
    of its parts meets a placed part live at the same time."""
    placed: list[tuple[int, int, int, int]] = []  # (lo, hi, first, last) of placed parts
    arena = 0
    for b in order:
        if len(b.parts) == 1:
            p = b.parts[0]
            spans = sorted((lo, hi) for lo, hi, first, last in placed
                           if first <= p.last and p.first <= last)
            choice, gap_best, end = None, None, 0
            for lo, hi in spans:
                gap = lo - end
                if gap >= p.size and (choice is None or (best_fit and gap < gap_best)):
                    choice, gap_best = end, gap
                    if not best_fit:
                        break
                end = max(end, hi)
            b.offset = end if choice is None else choice
        else:
            b.offset = _fit_parts(b, placed)
        for p in b.parts:
            placed.append((b.offset + p.rel, b.offset + p.rel + p.size, p.first, p.last))
        arena = max(arena, b.offset + b.size)
    return arena


def _fit_parts(b: _Buffer, placed: list[tuple[int, int, int, int]]) -> int:
    """The lowest offset of ``b`` at which no part of it overlaps a placed part that is
    live at the same time (candidates: 0 and every placed part's end, less a part's rel)."""
    pairs = [(p, lo, hi) for p in b.parts for lo, hi, first, last in placed
             if first <= p.last and p.first <= last]
    for x in sorted({0} | {hi - p.rel for p, _, hi in pairs if hi >= p.rel}):
        if all(x + p.rel >= hi or x + p.rel + p.size <= lo for p, lo, hi in pairs):
            return x
    raise PlanError("no offset fits a buffer of several parts")  # the largest end always does


_ORDERS = (
    lambda b: (-b.size, -(b.last - b.first), b.first),
    lambda b: (-b.size * (b.last - b.first + 1), -b.size, b.first),
    lambda b: (-(b.last - b.first), -b.size, b.first),
    lambda b: (b.first, -b.size),
)


def _search(buffers: list[_Buffer], lower: int, moves: int, seed: int) -> list[_Buffer]:
    """The best placement order found: sort keys x (best fit, first fit), then local
    search by moving one buffer to another position in the order."""
    best_order, best_arena, best_fit = None, None, True
    for key in _ORDERS:
        order = sorted(buffers, key=key)
        for fit in (True, False):
            arena = _place(order, fit)
            if best_arena is None or arena < best_arena:
                best_order, best_arena, best_fit = order, arena, fit
    rng = random.Random(seed)
    order = list(best_order)
    for _ in range(moves if len(order) > 1 else 0):
        if best_arena <= lower:
            break
        i, j = rng.randrange(len(order)), rng.randrange(len(order))
        trial = list(order)
        trial.insert(j, trial.pop(i))
        arena = _place(trial, best_fit)
        if arena <= best_arena:
            order, best_arena = trial, arena
    _place(order, best_fit)
    return order


def plan_memory(graph: Graph, *, alignment: int = 64, scratch: Mapping[str, int] | None = None,
                inplace: bool = True, search_moves: int = 400, seed: int = 0,
                overwrite: Mapping[str, Iterable[str]] | None = None,
                overlap: Mapping[str, tuple[str, int]] | None = None) -> MemoryPlan:
    """Plan the arena of ``graph`` (see the module docstring); deterministic for a seed.

    ``scratch`` maps node names to workspace bytes; ``search_moves`` bounds the local
    search (0 keeps the best greedy placement); ``overwrite`` maps node names to the
    inputs their kernels may write their output over (module docstring, "in place");
    ``overlap`` maps node names to ``(input, lead)``: the output may start ``lead`` bytes
    (a multiple of ``alignment``) before that input (module docstring, "overlap").  An
    overlap ties its pair's buffers together for their whole lives, which can cost more
    than it saves, so they are chosen greedily: in step order, repeated until none helps,
    each one is kept when it makes the arena smaller, or keeps it and lowers the bytes
    live summed over the steps (two steps at the peak need two overlaps).  A model whose
    arena no overlap shrinks keeps the plan it has without them.

    A kernel-declared pair (a 1x1 convolution whose kernel stages each pixel's input)::

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a, b, y = (Value(n, (1, 8, 4, 4), "int8") for n in ("x", "a", "b", "y"))
        >>> g = Graph("g", [x], [y], [Node("Neg", "n0", [x], [a]), Node("Conv", "c", [a], [b]),
        ...                           Node("Neg", "n1", [b], [y])])
        >>> plan_memory(g).arena_bytes, plan_memory(g, overwrite={"c": ["a"]}).arena_bytes
        (256, 128)
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise OptionError(f"memory alignment {alignment} must be a power of two")
    scratch = dict(scratch or {})
    names = {n.name for n in graph.nodes}
    unknown = sorted(set(scratch) - names)
    if unknown:
        raise OptionError(f"scratch bytes given for {', '.join(map(repr, unknown))}, which "
                          f"are not nodes of graph {graph.name!r}")
    declared = {k: frozenset(v) for k, v in (overwrite or {}).items()}
    unknown = sorted(set(declared) - names)
    if unknown:
        raise OptionError(f"in-place inputs given for {', '.join(map(repr, unknown))}, which "
                          f"are not nodes of graph {graph.name!r}")
    leads = dict(overlap or {})
    unknown = sorted(set(leads) - names)
    if unknown:
        raise OptionError(f"overlaps given for {', '.join(map(repr, unknown))}, which are "
                          f"not nodes of graph {graph.name!r}")
    for node_name, (_, lead) in leads.items():
        if lead < 0 or lead % alignment:
            raise OptionError(f"overlap lead {lead} of node {node_name!r} must be a "
                              f"non-negative multiple of the alignment {alignment}")
    views = input_views(graph)
    steps = [n.name for n in graph.nodes]
    buffers, info = _buffers(graph, alignment, scratch, inplace, declared, views, {})
    plan = _finish(buffers, info, steps, alignment, search_moves, seed)
    chosen: dict[str, tuple[str, int]] = {}
    best, base = plan, plan
    score = (plan.arena_bytes, _live_total(buffers))
    changed = bool(leads) and inplace
    while changed:  # greedy: add one overlap at a time, keep it when the score drops
        changed = False
        for node in steps:
            if node not in leads or node in chosen:
                continue
            trial_leads = {**chosen, node: leads[node]}
            buffers, info = _buffers(graph, alignment, scratch, inplace, declared, views,
                                     trial_leads)
            if sum(len(b.parts) - 1 for b in buffers) <= len(chosen):
                continue  # its input does not die there: no overlap to make
            trial = _finish(buffers, info, steps, alignment, search_moves, seed)
            trial_score = (trial.arena_bytes, _live_total(buffers))
            if trial_score < score:
                best, chosen, score, changed = trial, trial_leads, trial_score, True
    plan = best if best.arena_bytes < base.arena_bytes else base
    plan.views = views
    return plan


def plan_lifetimes(tensors: Sequence[tuple[str, int, int, int]], *, alignment: int = 64,
                   search_moves: int = 400, seed: int = 0) -> MemoryPlan:
    """Plan raw ``(name, bytes, first_step, last_step)`` lifetimes (no graph, no in-place).

    Example::

        >>> plan = plan_lifetimes([("a", 100, 0, 1), ("b", 100, 1, 2), ("c", 64, 2, 3)])
        >>> plan.arena_bytes, plan.lower_bound, plan.tensor("c").offset
        (256, 256, 0)
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise OptionError(f"memory alignment {alignment} must be a power of two")
    buffers, info = [], {}
    for name, size, first, last in tensors:
        if not 0 <= first <= last or size < 0:
            raise OptionError(f"tensor {name!r}: bad lifetime {first}..{last} or size {size}")
        buffers.append(_single(_align(size, alignment), first, last, name))
        info[name] = (size, first, last, "tensor", None, 0)
    steps = max((last for _, _, _, last in tensors), default=-1) + 1
    return _finish(buffers, info, [f"step{i}" for i in range(steps)], alignment,
                   search_moves, seed)


def replan(tensors: Sequence[TensorPlan], *, alignment: int = 64, overlap: bool = True,
           scratch: bool = True, search_moves: int = 400, seed: int = 0) -> MemoryPlan:
    """Place a plan's tensors (``MemoryPlan.tensors``, in the plan's order) again: an
    in-place tensor stays in its host's buffer; an overlap output stays its ``lead`` bytes
    before its host, or (``overlap=False``) gets a buffer of its own; ``scratch=False``
    leaves the kernels' scratch out.  What the arena would be without the overlaps, or
    holding the tensors alone (``benchmarks/int8_arena.py``).

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> a, b = Value("a", (1, 8, 4, 4), "int8"), Value("b", (1, 16, 4, 4), "int8")
        >>> x, y = Value("x", (1, 8, 4, 4), "int8"), Value("y", (1, 16, 4, 4), "int8")
        >>> g = Graph("g", [x], [y], [Node("Neg", "n0", [x], [a]), Node("Conv", "c", [a], [b]),
        ...                           Node("Neg", "n1", [b], [y])])
        >>> plan = plan_memory(g, overlap={"c": ("a", 0)})
        >>> plan.arena_bytes, replan(plan.tensors, overlap=False).arena_bytes
        (256, 384)
    """
    by_name: dict[str, tuple[_Buffer, _Part]] = {}
    buffers: list[_Buffer] = []
    info: dict[str, tuple[int, int, int, str, str | None, int]] = {}
    for t in tensors:
        if t.kind == "scratch" and not scratch:
            continue
        size = _align(t.size, alignment)
        host = by_name.get(t.inplace_of) if t.inplace_of is not None else None
        if host is not None and t.lead == 0 and host[1].size == size:
            buf, part = host
            part.last = max(part.last, t.last)
            part.members.append(t.name)
            pair = (t.inplace_of, 0)
        elif host is not None and overlap:
            buf, hpart = host
            part = _Part(hpart.rel - t.lead, size, t.first, t.last, [t.name])
            buf.parts.append(part)
            shift = -min(p.rel for p in buf.parts)
            for p in buf.parts:
                p.rel += shift
            pair = (t.inplace_of, t.lead)
        else:
            buf = _single(size, t.first, t.last, t.name)
            part = buf.parts[0]
            buffers.append(buf)
            pair = (None, 0)
        info[t.name] = (t.size, t.first, t.last, t.kind, *pair)
        by_name[t.name] = (buf, part)
    steps = [f"step{i}" for i in range(max((t.last for t in tensors), default=-1) + 1)]
    return _finish(buffers, info, steps, alignment, search_moves, seed)


def _finish(buffers: list[_Buffer],
            info: dict[str, tuple[int, int, int, str, str | None, int]],
            steps: list[str], alignment: int, search_moves: int, seed: int) -> MemoryPlan:
    live = [0] * max(len(steps), 1)
    for b in buffers:
        for s in range(b.first, b.last + 1):
            live[s] += b.live_bytes(s) if len(b.parts) > 1 else b.size
    lower = max(live)
    _search(buffers, lower, search_moves, seed)
    offset = {m: b.offset + p.rel for b in buffers for p in b.parts for m in p.members}
    tensors = [TensorPlan(name, size, offset[name], first, last, kind, host, lead)
               for name, (size, first, last, kind, host, lead) in info.items()]
    arena = max((b.offset + b.size for b in buffers), default=0)
    naive = sum(_align(size, alignment) for size, *_ in info.values())
    return MemoryPlan(arena, lower, naive, alignment, steps, tensors)


# -- picture -------------------------------------------------------------------------------
def render_svg(plan: MemoryPlan, title: str = "memory plan") -> str:
    """The plan as an SVG picture (steps across, arena offsets down), from the jinja2
    template ``templates/memory_plan.svg.j2``: one rectangle per tensor, a legend, and the
    arena / lower bound / naive numbers.  Names are XML-escaped by the template engine."""
    import jinja2

    width, height, left, top = 960, 540, 90, 70
    plot_w, plot_h = width - left - 30, height - top - 70
    steps = max(len(plan.steps), 1)
    scale = plot_h / max(plan.arena_bytes, plan.lower_bound, 1)
    rects = []
    for i, t in enumerate(sorted(plan.tensors, key=lambda t: (t.offset, t.first))):
        hue = (i * 137) % 360
        w = max(plot_w * (t.last - t.first + 1) / steps - 1, 1)
        h = max(t.size * scale, 1)
        fits = int(w // 7)  # characters that fit at font size 11
        label = t.name if len(t.name) <= fits else "…" + t.name[-(fits - 1):]
        rects.append({
            "x": left + plot_w * t.first / steps, "y": top + t.offset * scale, "w": w, "h": h,
            "label": label if h >= 14 and fits >= 4 else "",
            "fill": "#bbbbbb" if t.kind == "scratch" else f"hsl({hue}, 60%, 65%)",
            "kind": "in-place" if t.inplace_of else t.kind,
            "tip": (f"{t.name}: {t.size:,} B at offset {t.offset:,}, steps {t.first}..{t.last}"
                    + (f" ({t.lead:,} B before {t.inplace_of})" if t.lead
                       else f" (in place of {t.inplace_of})" if t.inplace_of else "")),
        })
    ticks = [{"x": left + plot_w * (s + 0.5) / steps, "label": s}
             for s in range(0, steps, max(1, steps // 20))]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    return env.get_template("memory_plan.svg.j2").render(
        plan=plan, title=title, width=width, height=height, left=left, top=top,
        plot_w=plot_w, plot_h=plot_h, rects=rects, ticks=ticks,
        lower_y=top + plan.lower_bound * scale, arena_y=top + plan.arena_bytes * scale,
        ratio=plan.arena_bytes / plan.lower_bound if plan.lower_bound else 1.0)


def write_memory_plan(graph: Graph, path: str | Path, *, target_layout: str = "nchw",
                      alignment: int = 64) -> MemoryPlan:
    """Optimise ``graph`` with the default pass pipeline, plan its memory in the best node
    order (:func:`toolchain.graph.order.plan_in_best_order`, which records the file order's
    numbers too) and draw the plan to ``path`` (what ``kiln inspect MODEL --memory-plan
    plan.svg`` does)."""
    from toolchain.graph.order import plan_in_best_order
    from toolchain.graph.passes import run_pipeline

    fused = run_pipeline(graph, target_layout=target_layout)
    _, plan = plan_in_best_order(fused, alignment=alignment)
    plan.check()
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # like -o: build/plan.svg
        Path(path).write_text(render_svg(plan, title=f"{graph.name}: memory plan"))
    except OSError as exc:
        blocker = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a directory" if blocker else exc.strerror or exc
        raise OptionError(f"cannot write the memory plan picture to {str(path)!r}: "
                          f"{why}; check that the folder can be created and "
                          "is writable") from None
    return plan
