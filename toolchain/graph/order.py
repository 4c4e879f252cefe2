"""Execution-order search: the topological order of a graph's nodes with the smallest peak
of live arena bytes (Serenity, Ahn et al., MLSys 2020; HMCOS).

The memory planner (:mod:`toolchain.graph.memory`) places tensors for one order of the
nodes, and its arena cannot go below that order's **liveness bound**: the largest sum of
buffers live at one step.  A branchy graph has many valid orders, and the order an exporter
writes is often not the best: two long branches interleaved keep both branches' big tensors
alive together.  This module finds the order with the smallest bound, counting what the
planner really allocates:

* a node's arena outputs (not graph inputs/outputs, constants or views of a graph input) from
  its step to the step of their last reader, with the buffer sizes aligned as the planner
  aligns them;
* its kernel scratch, at its step only;
* **in place**: an output that takes over an input dying at that step allocates nothing
  (:func:`~toolchain.graph.memory.inplace_candidates`, the planner's own rule, which depends
  on the order: an input dies at a step only when every other reader ran before).

Search: the bytes live *between* steps depend only on the set of nodes already run, so a
dynamic programme over those sets (the scheduled "frontier" states of Serenity) finds the
order with the smallest peak, level by level (a level = number of nodes run; two ways to the
same set keep the one with the smaller peak).  Four things keep it bounded:

* **components**: nodes that share no node output (independent subgraphs, e.g. heads that
  only share the graph's input) leave nothing live in the arena once each is done, so
  running them one after another, each in its best order, is best: each is searched alone
  (a graph of many independent parts no longer makes one search of their product);
* **segments**: a node that every other node comes before or after (an articulation point of
  the schedule: the end of a residual block, a concat after branches) splits the graph into
  parts whose orders are independent; each part is searched alone;
* **pruning**: states whose peak already reaches the file order's are dropped (only an order
  that beats it is wanted);
* **beam**: a level that holds more than ``beam`` states keeps the ``beam`` best (smallest
  peak, then fewest live bytes): a heuristic on large graphs (``exact`` is then False); a
  part of *n* nodes keeps at most ``max(1, min(beam, budget // n))`` per level, so at most
  ``budget`` states whatever its size.

The result is **never worse than the file order**: a part keeps its file order unless the
search beats it, and only parts that hold the graph's peak are changed.  Ties keep the order
of the file (the search visits nodes in that order), so the result is deterministic.

Example (two branches an exporter interleaved; each branch's big tensor is live while the
other branch's is computed)::

    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x = Value("x", (1, 64, 8, 8), "float32")
    >>> a1, b1 = Value("a1", (1, 64, 8, 8), "float32"), Value("b1", (1, 64, 8, 8), "float32")
    >>> a2, b2 = Value("a2", (1, 64, 1, 1), "float32"), Value("b2", (1, 64, 1, 1), "float32")
    >>> y = Value("y", (1, 64, 1, 1), "float32")
    >>> g = Graph("g", [x], [y], [Node("Exp", "ea", [x], [a1]), Node("Exp", "eb", [x], [b1]),
    ...     Node("GlobalAveragePool", "pa", [a1], [a2]),
    ...     Node("GlobalAveragePool", "pb", [b1], [b2]), Node("Add", "s", [a2, b2], [y])])
    >>> found = search_order(g)
    >>> found.file_peak, found.peak, [g.nodes[i].name for i in found.order]
    (33024, 16896, ['ea', 'pa', 'eb', 'pb', 's'])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Value
from toolchain.graph.memory import (
    MemoryPlan,
    PlanError,
    inplace_candidates,
    input_views,
    plan_memory,
)

#: default states kept per level of the search (see the module docstring, "beam")
BEAM = 256
#: default states kept over all levels of one part: a long part gets a narrower beam
STATE_BUDGET = 100_000


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class OrderSearch:
    """The result of :func:`search_order`: node indices (into ``graph.nodes``) in the chosen
    order, the liveness bound (peak of live arena bytes) of the file's order and of the
    chosen one, whether the search was exact (no level cut to the beam), the states it
    kept, and the independent parts (segments) it split the graph into."""

    order: tuple[int, ...]
    file_peak: int
    peak: int
    exact: bool
    states: int
    segments: int

    @property
    def changed(self) -> bool:
        """Whether the chosen order differs from the file's."""
        return self.order != tuple(range(len(self.order)))


@dataclass
class _Problem:
    """The graph as bit masks: node ``i`` is bit ``i``; arena values are numbered."""

    preds: list[int]  # mask of the nodes producing node i's inputs
    succs: list[tuple[int, ...]]  # nodes reading node i's outputs
    reads: list[tuple[int, ...]]  # arena values node i reads (each once)
    #: per arena output of node i: (aligned bytes, read later?, in-place candidate values)
    writes: list[tuple[tuple[int, bool, tuple[int, ...]], ...]]
    scratch: list[int]
    size: list[int]  # aligned bytes per arena value
    readers: list[int]  # mask of the nodes reading each arena value

    def step(self, i: int, done: int, mem: int) -> tuple[int, int]:
        """(bytes live during node ``i``'s step, bytes live after it) when ``done`` (a
        mask) ran before it and ``mem`` bytes are live."""
        after = done | (1 << i)
        dying = [v for v in self.reads[i] if not self.readers[v] & ~after]
        alloc, kept, taken = self.scratch[i], 0, []
        for size, read_later, hosts in self.writes[i]:
            host = next((h for h in hosts if h in dying and h not in taken), None)
            if host is None:
                alloc += size
            else:
                taken.append(host)
            if read_later:
                kept += size
        return mem + alloc, mem + kept - sum(self.size[v] for v in dying)


def _problem(graph: Graph, alignment: int, scratch: Mapping[str, int],
             overwrite: Mapping[str, frozenset[str]], inplace: bool) -> _Problem:
    external = set(graph.inputs) | set(graph.outputs)
    views = input_views(graph)
    producer = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    index: dict[Value, int] = {}
    for n in graph.nodes:
        for v in n.outputs:
            if v not in external and not v.is_constant and v.name not in views:
                index[v] = len(index)
    readers = [0] * len(index)
    preds, succs, reads, writes = [], [[] for _ in graph.nodes], [], []
    for i, n in enumerate(graph.nodes):
        mask = 0
        for v in n.inputs:
            if v is not None and v in producer:
                mask |= 1 << producer[v]
            if v in index:
                readers[index[v]] |= 1 << i
        preds.append(mask)
        for p in sorted({producer[v] for v in n.inputs if v is not None and v in producer}):
            succs[p].append(i)
        reads.append(tuple(dict.fromkeys(index[v] for v in n.inputs if v in index)))
    for n in graph.nodes:
        declared = overwrite.get(n.name, frozenset())
        writes.append(tuple(
            (_align(v.nbytes, alignment), readers[index[v]] != 0,
             tuple(index[h] for h in (inplace_candidates(n, v, declared) if inplace else ())
                   if h in index))
            for v in n.outputs if v in index))
    size = [_align(v.nbytes, alignment) for v in index]
    return _Problem(preds, [tuple(s) for s in succs], reads, writes,
                    [_align(int(scratch.get(n.name, 0)), alignment) for n in graph.nodes],
                    size, readers)


def _peak(p: _Problem, order: Iterable[int], done: int = 0, mem: int = 0
          ) -> tuple[int, int, int]:
    """(peak, mask after, bytes live after) of running ``order`` from state (done, mem)."""
    peak = 0
    for i in order:
        during, mem = p.step(i, done, mem)
        peak = max(peak, during)
        done |= 1 << i
    return peak, done, mem


def _components(p: _Problem) -> list[int]:
    """Per node, the index of its connected component (nodes linked through the arena
    values and other node outputs they share), numbered by first node in file order."""
    root = list(range(len(p.preds)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for i, mask in enumerate(p.preds):
        for j in _bits(mask):
            root[find(j)] = find(i)
    number: dict[int, int] = {}
    return [number.setdefault(find(i), len(number)) for i in range(len(p.preds))]


def _segments(p: _Problem) -> list[list[int]]:
    """The nodes in parts whose orders are independent: component by component (in the
    order of their first nodes), each split at every node that all others of its
    component come before or after (each such node a part of its own), in file order."""
    n = len(p.preds)
    anc = [0] * n
    for i in range(n):  # the file order is topological
        m = p.preds[i]
        for j in _bits(p.preds[i]):
            m |= anc[j]
        anc[i] = m
    desc = [0] * n
    for i in reversed(range(n)):
        m = 0
        for s in p.succs[i]:
            m |= desc[s] | (1 << s)
        desc[i] = m
    comp = _components(p)
    comp_size = [0] * (max(comp, default=-1) + 1)
    for c in comp:
        comp_size[c] += 1
    cuts = 0
    for i in range(n):
        if anc[i].bit_count() + desc[i].bit_count() + 1 == comp_size[comp[i]]:
            cuts |= 1 << i
    parts: dict[tuple[int, int, bool], list[int]] = {}
    for i in range(n):
        before = (anc[i] & cuts).bit_count()
        parts.setdefault((comp[i], before, bool(cuts >> i & 1)), []).append(i)
    return [parts[k] for k in sorted(parts)]


def _bits(mask: int) -> Iterable[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _search_part(p: _Problem, part: list[int], done: int, mem: int, bound: int, beam: int,
                 budget: int) -> tuple[list[int] | None, int, bool, int]:
    """(order of ``part`` with a peak below ``bound`` or None, its peak, exact, states)
    from the state (done, mem) before the part."""
    members = 0
    for i in part:
        members |= 1 << i
    beam = max(1, min(beam, budget // len(part)))
    ready = tuple(i for i in part if not p.preds[i] & ~done)
    level: dict[int, tuple[int, int, tuple[int, ...]]] = {done: (0, mem, ready)}
    parent: dict[int, tuple[int, int]] = {}
    exact, states = True, 1
    for _ in part:
        nxt: dict[int, tuple[int, int, tuple[int, ...]]] = {}
        for mask, (peak, live, front) in level.items():
            for i in front:
                during, after = p.step(i, mask, live)
                top = max(peak, during)
                if top >= bound:
                    continue
                new = mask | (1 << i)
                old = nxt.get(new)
                if old is not None and old[0] <= top:
                    continue
                grown = [j for j in front if j != i]
                grown += [s for s in p.succs[i] if members >> s & 1 and not p.preds[s] & ~new]
                nxt[new] = (top, after, tuple(sorted(grown)))
                parent[new] = (mask, i)
        if not nxt:
            return None, bound, exact, states
        if len(nxt) > beam:
            exact = False
            best = sorted(nxt.items(), key=lambda kv: (kv[1][0], kv[1][1]))[:beam]
            nxt = dict(best)
        states += len(nxt)
        level = nxt
    (mask, (peak, _, _)), = level.items()
    order = []
    while mask != done:
        mask, i = parent[mask]
        order.append(i)
    return order[::-1], peak, exact, states


def search_order(graph: Graph, *, alignment: int = 64, scratch: Mapping[str, int] | None = None,
                 overwrite: Mapping[str, Iterable[str]] | None = None, inplace: bool = True,
                 beam: int = BEAM, budget: int = STATE_BUDGET) -> OrderSearch:
    """The order of ``graph``'s nodes with the smallest liveness bound (module docstring),
    never worse than the file's; ``scratch``, ``overwrite`` and ``inplace`` as
    :func:`~toolchain.graph.memory.plan_memory` takes them, ``beam`` the states kept per
    level and ``budget`` per part.

    A chain has one order; the search keeps it::

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a, y = (Value(n, (256,), "float32") for n in ("x", "a", "y"))
        >>> found = search_order(Graph("g", [x], [y], [Node("Exp", "e", [x], [a]),
        ...                                            Node("Neg", "n", [a], [y])]))
        >>> found.order, found.peak, found.changed, found.exact
        ((0, 1), 1024, False, True)
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise OptionError(f"memory alignment {alignment} must be a power of two")
    if beam < 1 or budget < 1:
        raise OptionError(f"order search beam {beam} and budget {budget} must be at least 1")
    declared = {k: frozenset(v) for k, v in (overwrite or {}).items()}
    p = _problem(graph, alignment, dict(scratch or {}), declared, inplace)
    parts = _segments(p)
    # each part's file order, from the state the parts before it reach (the file order
    # itself when the graph is connected; else the components one after another)
    done, mem, file_peaks, starts = 0, 0, [], []
    for part in parts:
        starts.append((done, mem))
        peak, done, mem = _peak(p, part, done, mem)
        file_peaks.append(peak)
    file_peak = _peak(p, range(len(graph.nodes)))[0]
    parts_peak = max(file_peaks, default=0)  # <= file_peak
    found: list[tuple[list[int] | None, int]] = []
    exact, states = True, 0
    for part, (done, mem), peak in zip(parts, starts, file_peaks, strict=True):
        if len(part) < 2 or peak < parts_peak:
            found.append((None, peak))  # one order, or not where the peak is
            continue
        order, best, ok, n = _search_part(p, part, done, mem, peak, beam, budget)
        found.append((order, best))
        exact, states = exact and ok, states + n
    new_peak = max((best for _, best in found), default=0)
    # parts below the new peak keep their file order: no change that gains nothing
    order = tuple(i for part, part_peak, (better, _) in zip(parts, file_peaks, found,
                                                           strict=True)
                  for i in (better if better is not None and part_peak > new_peak else part))
    peak = _peak(p, order)[0]
    if peak >= file_peak:  # nothing gained (components apart, no better part order found)
        order, peak = tuple(range(len(graph.nodes))), file_peak
    return OrderSearch(order, file_peak, peak, exact, states, len(parts))


def order_peak(graph: Graph, order: Sequence[int] | None = None, *, alignment: int = 64,
               scratch: Mapping[str, int] | None = None,
               overwrite: Mapping[str, Iterable[str]] | None = None,
               inplace: bool = True) -> int:
    """The liveness bound of running ``graph``'s nodes in ``order`` (indices; default the
    file's): what :func:`~toolchain.graph.memory.plan_memory` reports as ``lower_bound``
    for the graph in that order.

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a, y = (Value(n, (256,), "float32") for n in ("x", "a", "y"))
        >>> order_peak(Graph("g", [x], [y], [Node("Exp", "e", [x], [a]),
        ...                                  Node("Neg", "n", [a], [y])]))
        1024
    """
    return order_peaks(graph, [range(len(graph.nodes)) if order is None else order],
                       alignment=alignment, scratch=scratch, overwrite=overwrite,
                       inplace=inplace)[0]


def order_peaks(graph: Graph, orders: Iterable[Sequence[int]], *, alignment: int = 64,
                scratch: Mapping[str, int] | None = None,
                overwrite: Mapping[str, Iterable[str]] | None = None,
                inplace: bool = True) -> list[int]:
    """:func:`order_peak` of each order of ``orders``, the graph analysed once (its
    values, sizes and in-place candidates: most of what one order's bound costs), for a
    caller that compares many orders of one graph.

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a, b, y = (Value(n, (256,), "float32") for n in ("x", "a", "b", "y"))
        >>> g = Graph("g", [x], [y], [Node("Exp", "e", [x], [a]), Node("Neg", "n", [x], [b]),
        ...                           Node("Add", "s", [a, b], [y])])
        >>> order_peaks(g, [(0, 1, 2), (1, 0, 2)])
        [2048, 2048]
    """
    declared = {k: frozenset(v) for k, v in (overwrite or {}).items()}
    p = _problem(graph, alignment, dict(scratch or {}), declared, inplace)
    return [_peak(p, order)[0] for order in orders]


def reorder(graph: Graph, order: Sequence[int]) -> Graph:
    """``graph`` with its nodes in ``order`` (indices into ``graph.nodes``), which must be a
    topological order of all of them (:class:`~toolchain.graph.memory.PlanError` if not).

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a, b, y = (Value(n, (4,), "float32") for n in ("x", "a", "b", "y"))
        >>> g = Graph("g", [x], [a, b], [Node("Exp", "e", [x], [a]), Node("Neg", "n", [x], [b])])
        >>> [n.name for n in reorder(g, [1, 0]).nodes]
        ['n', 'e']
    """
    nodes = graph.nodes
    if sorted(order) != list(range(len(nodes))):
        raise PlanError(f"order {list(order)} is not a permutation of the "
                        f"{len(nodes)} nodes of graph {graph.name!r}")
    produced = {v for v in graph.inputs}
    for i in order:
        for v in nodes[i].inputs:
            if v is not None and not v.is_constant and v not in produced:
                raise PlanError(f"order runs {nodes[i].describe()} before the node that "
                                f"produces its input {v.name!r}")
        produced.update(nodes[i].outputs)
    if list(order) == list(range(len(nodes))):
        return graph
    return Graph(graph.name, graph.inputs, graph.outputs, [nodes[i] for i in order],
                 opset=graph.opset, metadata=graph.metadata)


def schedule_for_memory(graph: Graph, *, alignment: int = 64,
                        scratch: Mapping[str, int] | None = None,
                        overwrite: Mapping[str, Iterable[str]] | None = None,
                        beam: int = BEAM) -> Graph:
    """Pass: ``graph`` with its nodes in the order of :func:`search_order` (the same graph
    when the file's order is already best).

    Before (the exporter interleaved two branches; 32.25 KiB live at ``pa``)::

        graph g(%x: float32[1, 64, 8, 8]) -> (%y: float32[1, 64, 1, 1]) {
          %a1 = Exp(%x)  # ea
          %b1 = Exp(%x)  # eb
          %a2 = GlobalAveragePool(%a1)  # pa
          %b2 = GlobalAveragePool(%b1)  # pb
          %y = Add(%a2, %b2)  # s
        }

    After ``schedule_for_memory(g)`` (one branch after the other; 16.5 KiB)::

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a1, b1 = (Value(n, (1, 64, 8, 8), "float32") for n in ("x", "a1", "b1"))
        >>> a2, b2, y = (Value(n, (1, 64, 1, 1), "float32") for n in ("a2", "b2", "y"))
        >>> g = Graph("g", [x], [y], [Node("Exp", "ea", [x], [a1]),
        ...     Node("Exp", "eb", [x], [b1]), Node("GlobalAveragePool", "pa", [a1], [a2]),
        ...     Node("GlobalAveragePool", "pb", [b1], [b2]), Node("Add", "s", [a2, b2], [y])])
        >>> print(schedule_for_memory(g))  # doctest: +NORMALIZE_WHITESPACE
        graph g(%x: float32[1, 64, 8, 8]) -> (%y: float32[1, 64, 1, 1]) {
          %a1: float32[1, 64, 8, 8] = Exp(%x)  # ea
          %a2: float32[1, 64, 1, 1] = GlobalAveragePool(%a1)  # pa
          %b1: float32[1, 64, 8, 8] = Exp(%x)  # eb
          %b2: float32[1, 64, 1, 1] = GlobalAveragePool(%b1)  # pb
          %y: float32[1, 64, 1, 1] = Add(%a2, %b2)  # s
        }
    """
    found = search_order(graph, alignment=alignment, scratch=scratch, overwrite=overwrite,
                         beam=beam)
    return reorder(graph, found.order)


def plan_in_best_order(graph: Graph, *, alignment: int = 64,
                       scratch: Mapping[str, int] | None = None,
                       overwrite: Mapping[str, Iterable[str]] | None = None,
                       inplace: bool = True, search: bool = True, beam: int = BEAM,
                       search_moves: int = 400, seed: int = 0,
                       overlap: Mapping[str, tuple[str, int]] | None = None
                       ) -> tuple[Graph, MemoryPlan]:
    """(graph in the chosen order, its memory plan): the order of :func:`search_order`
    when its planned arena is smaller than the file order's, else the file's order (the
    search minimises the liveness bound; the placement decides the arena, so both are
    planned and compared).  The plan records the file order's numbers
    (``file_lower_bound``, ``file_arena_bytes``) and the search's (``order_search``).
    ``search=False`` plans the file order only (and records it as such).  ``overlap`` is
    :func:`~toolchain.graph.memory.plan_memory`'s (the search itself counts an overlap
    pair as two buffers; both orders are planned with it).

        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, a1, b1 = (Value(n, (1, 64, 8, 8), "float32") for n in ("x", "a1", "b1"))
        >>> a2, b2, y = (Value(n, (1, 64, 1, 1), "float32") for n in ("a2", "b2", "y"))
        >>> g = Graph("g", [x], [y], [Node("Exp", "ea", [x], [a1]),
        ...     Node("Exp", "eb", [x], [b1]), Node("GlobalAveragePool", "pa", [a1], [a2]),
        ...     Node("GlobalAveragePool", "pb", [b1], [b2]), Node("Add", "s", [a2, b2], [y])])
        >>> ordered, plan = plan_in_best_order(g)
        >>> plan.file_arena_bytes, plan.arena_bytes, plan.steps
        (33024, 16896, ['ea', 'pa', 'eb', 'pb', 's'])
    """
    kw = {"alignment": alignment, "scratch": scratch, "overwrite": overwrite,
          "inplace": inplace, "search_moves": search_moves, "seed": seed, "overlap": overlap}
    plan = plan_memory(graph, **kw)
    file_arena, file_bound = plan.arena_bytes, plan.lower_bound
    stats: dict[str, object] = {"searched": False}
    best = graph
    if search and len(graph.nodes) > 1:
        found = search_order(graph, alignment=alignment, scratch=scratch, overwrite=overwrite,
                             inplace=inplace, beam=beam)
        stats = {"searched": True, "exact": found.exact, "states": found.states,
                 "segments": found.segments, "changed": False}
        if found.changed:
            ordered = reorder(graph, found.order)
            trial = plan_memory(ordered, **kw)
            if trial.arena_bytes < file_arena:
                best, plan = ordered, trial
                stats["changed"] = True
    plan.file_arena_bytes, plan.file_lower_bound = file_arena, file_bound
    plan.order_search = stats
    return best, plan


__all__ = ["BEAM", "STATE_BUDGET", "OrderSearch", "order_peak", "order_peaks",
           "plan_in_best_order", "reorder", "schedule_for_memory", "search_order"]
