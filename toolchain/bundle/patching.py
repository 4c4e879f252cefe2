"""Patch stages in bundles: their tile kernels, their scratch, the C loop, and the choice of
a stage that meets a RAM budget (``kiln compile --ram-budget``).

A patch stage (:mod:`toolchain.graph.patch`) is one node of the fused graph, one step of
the memory plan.  Its layers are compiled as **tile kernels** (each layer's kernel for the
tile's shapes, no padding) and its step's scratch holds two ping-pong tile buffers and the
largest tile kernel's own scratch::

    stage scratch:  [ slot 0: tiles 0, 2, 4.. | slot 1: tiles 1, 3.. | kernel scratch ]

The bundle's ``<m>_run`` loops over the tiles: gather the input tile (padding bytes
outside the tensor), run each tile kernel (slot 0 -> 1, 1 -> 0, ...), re-pad the rows
and columns of the new tile that lie outside its tensor, and scatter the last tile into
the stage's output (``templates/bundle/model.c.j2``).

:func:`meet_budget` chooses the stage: every run of consecutive convolutions that holds
the steps the plain plan cannot fit in the budget, every prefix and suffix of it, every
grid up to :data:`MAX_GRID` a side, cheapest in extra multiply-adds first; a candidate is
compiled (its tile kernels scheduled, the whole graph planned again) only when a bound on
its step fits, and the first that meets the budget is taken.

Example: the stage scratch of a 2-layer stage whose tile buffers are 196, 100 and 16 bytes
(slots of 256 and 128 bytes, 64-byte aligned) and a tile kernel needing 48 bytes of scratch::

    >>> from types import SimpleNamespace as K
    >>> from toolchain.graph.patch import PatchLayer, PatchStage
    >>> conv = PatchLayer("c1", (4, 8, 8), (4, 8, 8), (3, 3), (1, 1), (1, 1),
    ...                   (1, 1, 1, 1), 0, 1, "NCHW", 36)
    >>> conv2 = PatchLayer("c2", (4, 8, 8), (4, 4, 4), (3, 3), (2, 2), (1, 1),
    ...                    (1, 1, 1, 1), 0, 1, "NCHW", 36)
    >>> call = PatchCall(PatchStage("p", (conv, conv2), (2, 2)), 0, None, None, 0)
    >>> stage_scratch([K(patch=call, source=K(scratch_bytes=48))], 64)
    {'p': 448}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.memory import MemoryPlan, input_views, plan_memory
from toolchain.graph.ops.registry import get_op
from toolchain.graph.patch import (
    PatchStage,
    apply_stage,
    chains,
    lead_in,
    patch_layer,
    pool_end,
    tile_node,
)

#: the most tiles a side of the grid the choice tries
MAX_GRID = 12
#: the most rows of tiles a grid of one tile a row may have for a stage ending in a global
#: average pool (its tiles sum into the pool: a tile may be one row, MCUNet-style streaming)
MAX_POOL_ROWS = 64
#: the most layers a stage takes
MAX_LAYERS = 16
#: the most candidates compiled in full before the choice gives up
MAX_TRIES = 8


@dataclass(frozen=True)
class PatchCall:
    """A tile kernel of a patch stage: the stage, the layer's position, the kernel's tile
    input and output values, and its multiply-adds over every tile (FLOPs)."""

    stage: PatchStage
    index: int
    tile_in: Value | None
    tile_out: Value | None
    flops: int
    #: the arena of the plan without the stage (None: not known)
    arena_without: int | None = None


def schedule_stage(node: Node, schedule_one: Callable[[Node], tuple[Any, ...]]
                   ) -> list[tuple[Node, Any, list[Value], str, PatchCall]]:
    """The tile kernels of a stage node: per layer ``(tile node, lowered function,
    parameters, how it was scheduled, its PatchCall)``; ``schedule_one`` schedules one
    fused node (``KernelSet.schedule_one``)."""
    stage: PatchStage = node.attrs["patch"]
    sizes = stage.tile_sizes()
    tiles = stage.grid[0] * stage.grid[1]
    out = []
    skip = {stage.absorbs, stage.pool.node if stage.pool else ""}
    convs = [n for n in node.attrs["graph"].nodes if n.name not in skip]
    for i, (n, layer) in enumerate(zip(convs, stage.layers, strict=True)):
        tnode, tx = tile_node(n, layer, i, (sizes[i], sizes[i + 1]), stage.name,
                              stage.full_rows)
        func, params, how, _, _ = schedule_one(tnode)
        flops = get_op("Fused").flops_of(tnode) * tiles
        out.append((tnode, func, params, how,
                    PatchCall(stage, i, tx, tnode.outputs[0], flops,
                              node.attrs.get("arena_without"))))
    return out


def _slots(stage: PatchStage, alignment: int) -> tuple[int, int]:
    return stage.slot_bytes(alignment)


def stage_scratch(kernels: list[Any], alignment: int) -> dict[str, int]:
    """Per stage node: its step's scratch (both slots, the pool's accumulator and the
    largest tile kernel scratch), from its compiled tile kernels (``CompiledKernel.patch``)."""
    out: dict[str, int] = {}
    for k in kernels:
        if k.patch is None:
            continue
        stage = k.patch.stage
        a, b = _slots(stage, alignment)
        b += stage.acc_bytes(alignment)
        own = -(-k.source.scratch_bytes // alignment) * alignment
        out[stage.name] = max(out.get(stage.name, a + b), a + b + own)
    return out


def tile_args(call: PatchCall, base: str, alignment: int) -> dict[int, str]:
    """C expressions of the tile kernel's tile buffers (``base``: the stage scratch's
    address), by value identity, and ``"scratch"`` for its own scratch (key 0)."""
    a, b = _slots(call.stage, alignment)
    slot = [f"{base}", f"{base} + {a}"]
    return {id(call.tile_in): f"(void *)({slot[call.index % 2]})",
            id(call.tile_out): f"(void *)({slot[(call.index + 1) % 2]})",
            0: f"{base} + {a + b + call.stage.acc_bytes(alignment)}"}


def loop_context(call: PatchCall, model: str, src: str, dst: str, base: str,
                 alignment: int) -> dict[str, Any]:
    """What ``model.c.j2`` needs around tile kernel ``call``: on the first, the tile loop
    and the gather; after each, the re-padding of its output (when the next layer pads);
    on the last, the scatter and the loop's end."""
    stage = call.stage
    sizes = stage.tile_sizes()
    layers = stage.layers
    a, b = _slots(stage, alignment)
    slot = [base, f"{base} + {a}"]
    acc = f"(int32_t *)(void *)({base} + {a + b})"
    i = call.index
    ctx: dict[str, Any] = {"first": i == 0, "last": i == len(layers) - 1,
                           "name": stage.name, "grid": list(stage.grid),
                           "rows": f"{model}_{stage.name}_rows",
                           "cols": f"{model}_{stage.name}_cols", "level": i + 1}
    if i == 0:
        x = layers[0]
        c, h, w = x.in_shape
        # 0: NCHW, 1: NHWC, 2: an NHWC source gathered into NCHW tiles (stage.absorbs)
        mode = 2 if stage.absorbs else int(x.in_layout == "NHWC")
        ctx["gather"] = (f"{slot[0]}, (const uint8_t *)({src}), {c}, {h}, {w}, {sizes[0][0]}, "
                         f"{sizes[0][1]}, ry[0], rx[0], {x.itemsize}, {mode}, {x.fill}")
    if i == 0 and stage.pool is not None:
        ctx["pool_zero"] = {"acc": acc, "channels": stage.pool.channels}
    if i + 1 < len(layers) and layers[i + 1].padded:
        nxt = layers[i + 1]
        c, h, w = nxt.in_shape
        ctx["border"] = (f"{slot[(i + 1) % 2]}, {c}, {sizes[i + 1][0]}, {sizes[i + 1][1]}, {h}, "
                         f"{w}, ry[{i + 1}], rx[{i + 1}], {nxt.itemsize}, "
                         f"{int(nxt.in_layout == 'NHWC')}, {nxt.fill}")
    if ctx["last"]:
        y = layers[-1]
        c, h, w = y.out_shape
        n = len(layers)
        ctx["comment"] = stage.describe()
        pool = stage.pool
        if pool is not None:  # each tile adds its own share (tiles moved back overlap)
            th, tw = stage.tile_out()
            ctx["pool_sum"] = (f"{acc}, {slot[n % 2]}, {c}, {sizes[n][0]}, {sizes[n][1]}, "
                               f"ty * {th} - ry[{n}], tx * {tw} - rx[{n}], "
                               f"{int(y.out_layout == 'NHWC')}, {int(pool.signed)}, "
                               f"{pool.x_zero_point}")
            ctx["pool_finish"] = (f"(uint8_t *)({dst}), {acc}, {c}, {pool.multiplier}, "
                                  f"{pool.shift}, {pool.y_zero_point}, {pool.out_min}, "
                                  f"{pool.out_max}")
            return ctx
        ctx["scatter"] = (f"(uint8_t *)({dst}), {slot[n % 2]}, {c}, {sizes[n][0]}, "
                          f"{sizes[n][1]}, {h}, {w}, ry[{n}], rx[{n}], {y.itemsize}, "
                          f"{int(y.out_layout == 'NHWC')}")
    return ctx


def origin_tables(stages: list[PatchStage]) -> list[dict[str, Any]]:
    """Per stage, its tiles' starts in every tensor (rows and columns: C tables)."""
    return [{"name": s.name, "levels": len(s.layers) + 1, "pool": s.pool is not None,
             "rows": s.origins(0), "cols": s.origins(1),
             "gy": s.grid[0], "gx": s.grid[1]} for s in stages]


# ---------------------------------------------------------------------------- the choice
def step_bytes(plan: MemoryPlan) -> list[int]:
    """Bytes of arena tensors and scratch live at each step of ``plan`` (an in-place or
    overlap output counts only the bytes past its input's block)."""
    by_name = {t.name: t for t in plan.tensors}
    live = [0] * len(plan.steps)
    for t in plan.tensors:
        host = by_name.get(t.inplace_of or "")
        for s in range(t.first, t.last + 1):
            size = t.size
            if host is not None and host.first <= s <= host.last:
                lo, hi = t.offset, t.offset + t.size
                size -= max(0, min(hi, host.offset + host.size) - max(lo, host.offset))
            live[s] += max(size, 0)
    return live


def candidates(graph: Graph, over: set[int]) -> list[tuple[int, list[Node], bool]]:
    """(first step, nodes, whether the stage ends in the pool after them) of every chain
    that holds all the steps in ``over`` (those that exceed the budget): a contiguous part
    of a run of :func:`chains`, at most :data:`MAX_LAYERS` long; one that starts the run
    also holds the step of a transpose it takes in
    (:func:`~toolchain.graph.patch.lead_in`), one that ends it also the step of a global
    average pool after it (:func:`~toolchain.graph.patch.pool_end`)."""
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    lo, hi = min(over), max(over)
    out = []
    for run in chains(graph):
        first = pos[run[0].name]
        lead = 1 if lead_in(graph, run[0]) is not None else 0
        pooled = pool_end(graph, run[-1]) is not None
        for a in range(len(run)):
            start = first + a - (lead if a == 0 else 0)
            if start > lo:
                break
            for b in range(max(a + 1, hi - first + 1), min(len(run), a + MAX_LAYERS) + 1):
                out.append((start, run[a:b], False))
            if pooled and len(run) - a <= MAX_LAYERS and hi <= first + len(run):
                out.append((start, run[a:], True))
    return out


def _stages(graph: Graph, over: set[int]) -> list[PatchStage]:
    """Every candidate stage, cheapest in extra multiply-adds first."""
    found = []
    for _, nodes, pooled in candidates(graph, over):
        layers = tuple(patch_layer(n) for n in nodes)
        lead = lead_in(graph, nodes[0])
        pool = pool_end(graph, nodes[-1]) if pooled else None
        _, h, w = layers[-1].out_shape  # type: ignore[union-attr]
        for gy in range(1, min(MAX_POOL_ROWS if pool else MAX_GRID, h) + 1):
            for gx in range(1, min(MAX_GRID, w) + 1):
                if (gy, gx) != (1, 1) and (gy <= MAX_GRID or gx == 1):
                    found.append(PatchStage("patch_stage_0", layers, (gy, gx),  # type: ignore[arg-type]
                                            lead.name if lead is not None else "", pool))
    return sorted(found, key=lambda s: (s.macs() - s.full_macs(), s.grid[0] * s.grid[1],
                                        s.layers[0].node, len(s.layers), s.grid))


def _step_bound(stage: PatchStage, graph: Graph, alignment: int) -> int:
    """Bytes the stage's step needs at least: its input (when in the arena), its output
    and both slots."""
    first = graph.node(stage.absorbs or stage.layers[0].node)
    last = graph.node(stage.pool.node if stage.pool else stage.layers[-1].node)
    ext = set(graph.inputs) | set(graph.outputs)
    views = input_views(graph)  # views of the caller's input take no arena bytes
    x, y = first.inputs[0], last.outputs[0]
    assert x is not None

    def arena(v: Value) -> int:
        return 0 if v in ext or v.name in views else -(-v.nbytes // alignment) * alignment
    return arena(x) + arena(y) + sum(stage.slot_bytes(alignment)) + stage.acc_bytes(alignment)


def meet_budget(ks: Any, graph: Graph, kernels: list[Any], plan: MemoryPlan, budget: int
                ) -> tuple[Graph, list[Any], MemoryPlan]:
    """The fused graph with the cheapest patch stage whose plan fits ``budget`` arena
    bytes, its kernels and plan (``ks``: the compile's ``KernelSet``, which schedules the
    tile kernels and plans); an :class:`OptionError` naming the smallest arena found when
    none fits."""
    align = plan.alignment
    live = step_bytes(plan)
    over = {s for s, b in enumerate(live) if b > budget}
    best: tuple[int, str] = (plan.arena_bytes, "without a patch stage")
    if over:
        stages = _stages(graph, over)
    else:  # the placement, not one step, is over: any chain may help
        stages = _stages(graph, {max(range(len(live)), key=live.__getitem__)})
    tries = 0
    for stage in stages:
        bound = _step_bound(stage, graph, align)
        if bound > budget:
            best = min(best, (bound, f"at least, with {stage.describe()}"))
            continue
        trial = apply_stage(graph, stage, arena_without=plan.arena_bytes)
        overwrite, overlap = ks.declared(trial)
        estimate = plan_memory(trial, alignment=align, search_moves=0,
                               overwrite=overwrite, overlap=overlap,
                               scratch={stage.name: sum(stage.slot_bytes(align))
                                        + stage.acc_bytes(align)}).arena_bytes
        if estimate > budget:
            best = min(best, (estimate, f"at least, with {stage.describe()}"))
            continue
        tries += 1
        ks.schedule(trial, trial.nodes)
        got = ks.finish(trial)
        if got[2].arena_bytes <= budget:
            return got
        best = min(best, (got[2].arena_bytes, f"with {stage.describe()}"))
        del ks.scheduled[stage.name]
        if tries >= MAX_TRIES:
            break
    where = (f"steps {min(over)}..{max(over)} ({graph.nodes[min(over)].name} .. "
             f"{graph.nodes[max(over)].name}) exceed it" if over else "the placement exceeds it")
    if not stages:
        where += (f"; no chain of at most {MAX_LAYERS} single-convolution kernels holds "
                  "those steps, so no patch stage can help")
    quantized_input = [s for s in sorted(over) if _quantizes_a_float_input(graph, s)]
    if quantized_input:
        s = quantized_input[0]
        where += (f"; step {s} ({graph.nodes[s].name}) quantizes the float model input in the "
                  "arena: a model quantized with kiln quantize --integer-io takes that input "
                  "in int8 from the caller (docs/embedded.md)")
    raise OptionError(
        f"--ram-budget {budget:,} B cannot be met: the plain plan needs an arena of "
        f"{plan.arena_bytes:,} B ({where}); the smallest arena found is {best[0]:,} B "
        f"({best[1]}). Raise the budget, or choose a board with more RAM")


def _quantizes_a_float_input(graph: Graph, step: int) -> bool:
    """Whether kernel ``step`` of the fused ``graph`` quantizes a float graph input (a model
    with float I/O: the int8 copy of the image lives in the arena)."""
    node = graph.nodes[step]
    body = node.attrs.get("graph")
    ops = [n.op for n in body.nodes] if body is not None else [node.op]
    return "QuantizeLinear" in ops and any(
        v in graph.inputs and v.dtype in ("float32", "float16") for v in node.inputs
        if v is not None)


def patch_by_hand(ks: Any, graph: Graph, plan: MemoryPlan, first: str, layers: int,
                  grid: tuple[int, int], pool: bool = False
                  ) -> tuple[Graph, list[Any], MemoryPlan]:
    """``graph`` with the stage of ``layers`` convolutions from node ``first`` in a
    ``grid`` of tiles (``pool``: ending in the global average pool after them), its
    kernels and plan; an :class:`OptionError` when those nodes are not such a chain."""
    for run in chains(graph):
        names = [n.name for n in run]
        if first in names and names.index(first) + layers <= len(run) and layers >= 1:
            nodes = run[names.index(first):names.index(first) + layers]
            lead = lead_in(graph, nodes[0])
            end = pool_end(graph, nodes[-1]) if pool else None
            if pool and end is None:
                raise OptionError(f"patch stage from {first!r}, {layers} layers: no global "
                                  f"average pool reads {nodes[-1].name}'s output alone")
            stage = PatchStage("patch_stage_0", tuple(patch_layer(n) for n in nodes),  # type: ignore[misc]
                               tuple(grid), lead.name if lead is not None else "", end)  # type: ignore[arg-type]
            trial = apply_stage(graph, stage, arena_without=plan.arena_bytes)
            ks.schedule(trial, trial.nodes)
            return ks.finish(trial)  # type: ignore[no-any-return]
    runs = "; ".join(f"{r[0].name} ({len(r)} layers)" for r in chains(graph)) or "none"
    raise OptionError(f"patch stage from {first!r}, {layers} layers: not a chain of "
                      f"convolutions of the graph (chains start at: {runs})")


__all__ = ["patch_by_hand", "MAX_GRID", "MAX_LAYERS", "MAX_POOL_ROWS", "PatchCall", "candidates",
           "loop_context",
           "meet_budget", "origin_tables", "schedule_stage", "stage_scratch", "step_bytes",
           "tile_args"]
