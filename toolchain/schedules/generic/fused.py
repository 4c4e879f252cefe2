"""One kernel for a whole ``Fused`` group (see :mod:`toolchain.graph.passes.fused_op`).

:func:`fused_compute` composes the tensor expressions of the group's inner nodes into one
TE DAG: each inner node's compute (from :mod:`toolchain.topi.registry`) is rebuilt on top
of the tensors its inputs come from, so ``conv -> add -> relu`` is one DAG whose only
placeholders are the group's inputs. :func:`schedule_fused` schedules it:

* **no complex op** (injective chains, a reduction with its injective producers, an
  opaque op): :func:`~toolchain.schedules.generic.ops.schedule_cpu` on the whole DAG — the
  injective stages are inlined, so ``add -> relu`` is one loop;
* **a complex-out-fusable anchor** (conv, dense, matmul — pattern
  ``complex-out-fusable``) whose op has a registered default schedule: that schedule is
  built for the anchor alone, the elementwise tail is appended to its PrimFunc, and the
  tail is then moved into the anchor's output tile: ``reverse_compute_inline`` into the
  block that writes the anchor's output when that block is a plain copy-out (a
  ``cache_write`` tile), else ``reverse_compute_at`` the anchor's outer spatial loop, so
  the bias and activation run while the tile is still in cache. Pooling anchors and ops
  without a registered schedule take the first path.

Kernel parameters are the group's inputs in order, then any constant the computes could
not bake in (its data goes with :attr:`FusedKernel.input_values`), then the outputs.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> from toolchain.graph.passes.fused_op import fused_node
    >>> x, b = Value("x", (2, 8), "float32"), Value("b", (8,), "float32")
    >>> y, z = Value("y", (2, 8), "float32"), Value("z", (2, 8), "float32")
    >>> inner = Graph("fused_add_relu_0", [x, b], [z],
    ...               [Node("Add", "add", [x, b], [y]), Node("Relu", "relu", [y], [z])])
    >>> k = schedule_fused(fused_node(inner, "injective", [x, b]), "c-generic")
    >>> len(k.block_names())  # one loop nest: add was inlined into relu
    1
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.codegen.names import TE_NAMES, sanitize
from toolchain.errors import NoScheduleError, UnsupportedError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import PatternKind, get_op
from toolchain.graph.overlap import AccessOrder
from toolchain.schedules import packing, registry
from toolchain.schedules.generic import access
from toolchain.schedules.generic import ops as cpu_ops
from toolchain.schedules.generic.ops_space import ops_space, tuned_config
from toolchain.schedules.registry import OpSchedule
from toolchain.te.rebind import SwapBuffers, rebind
from toolchain.tir import ir
from toolchain.tir.functor import StmtMutator, post_order_visit
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.schedule import BlockRV, LoopRV
from toolchain.topi.registry import node_compute


@dataclass
class FusedKernel:
    """A fused group's kernel: its schedule and what each parameter stands for."""

    schedule: Schedule
    #: the inner-graph values behind the input parameters (group inputs, then constants)
    input_values: list[Value]
    output_values: list[Value]
    #: the complex-out-fusable inner node whose schedule was reused, if any
    anchor: Node | None = None
    notes: list[str] = field(default_factory=list)
    #: the input value (of ``input_values``) the output may be written over, if any: the
    #: anchor's schedule said so (``OpSchedule.in_place``) and the group is the anchor alone
    in_place: Value | None = None
    #: ``(input value, access order)``: the output may start inside that input
    #: (``OpSchedule.overlap``), the group being the anchor alone
    overlap: tuple[Value, AccessOrder] | None = None

    @property
    def func(self) -> ir.PrimFunc:
        return self.schedule.mod

    def block_names(self) -> list[str]:
        """Blocks of the scheduled kernel, in program order."""
        return [n for n in st.block_names(self.schedule.mod) if n != "root"]


@dataclass
class FusedCompute:
    """The composed TE DAG of a fused group."""

    inputs: list[te.Tensor]
    input_values: list[Value]
    outputs: list[te.Tensor]
    output_values: list[Value]
    #: tensor of every inner value (placeholders for the group inputs)
    env: dict[int, te.Tensor]


def _copy(t: te.Tensor, name: str) -> te.Tensor:
    return te.compute(t.shape, lambda *i: t[i], name=name, tag="injective")


def fused_compute(node: Node, skip: int = 0, seed: dict[int, te.Tensor] | None = None,
                  options: Callable[[Node], dict[str, Any]] | None = None,
                  without: Node | None = None) -> FusedCompute:
    """Compose the computes of ``node``'s inner graph (a ``Fused`` node) into one DAG.

    ``skip`` inner nodes at the front and the inner node ``without`` are left out, and
    ``seed`` maps inner value ids to tensors standing for them (how the tail around a
    separately scheduled anchor is built: every node but the anchor, including an injective
    node listed before it that computes another operand of the tail).
    ``options(inner_node)`` gives the compute options of an inner node (a target's
    algorithm choice, e.g. the Cortex-M DSP QAdd; see :func:`compute_options`).
    """
    inner: Graph = node.attrs["graph"]
    env: dict[int, te.Tensor] = dict(seed or {})
    inputs: list[te.Tensor] = []
    values: list[Value] = []
    for v in inner.inputs:
        if id(v) not in env:
            env[id(v)] = te.placeholder(v.shape or (1,), v.dtype, sanitize(v.name, **TE_NAMES))
        if id(v) in env and isinstance(env[id(v)].op, te.PlaceholderOp):
            inputs.append(env[id(v)])
            values.append(v)
    for n in inner.nodes[skip:]:
        if n is without:
            continue
        nc = node_compute(n, **(options(n) if options else {}))
        mapping = {}
        for ph, v in zip(nc.inputs, nc.input_values, strict=True):
            if id(v) not in env:  # a constant the compute reads as a tensor
                if v.data is None:
                    raise UnsupportedError(f"{node.describe()}: inner value {v.name!r} of "
                                           f"{n.describe()} is neither an input nor constant")
                env[id(v)] = ph
                inputs.append(ph)
                values.append(v)
            mapping[id(ph.buffer)] = env[id(v)]
        for v, t in zip(n.outputs, rebind(nc.outputs, mapping), strict=True):
            env[id(v)] = t
    outs: list[te.Tensor] = []
    for k, v in enumerate(inner.outputs):
        t = env[id(v)]
        if isinstance(t.op, te.PlaceholderOp) or any(t is o for o in outs):
            t = _copy(t, f"output_{k}")
        outs.append(t)
    return FusedCompute(inputs, values, outs, list(inner.outputs), env)


def compute_options(target: Any) -> Callable[[Node], dict[str, Any]] | None:
    """The per-node compute options ``target`` asks of the ops inside fused groups (None:
    the default computes). Cortex-M targets (key ``cortex_m``) compute QAdd with their C
    requantization helper (:func:`toolchain.schedules.cortex_m.int8.compute_options`), every
    other CPU target (key ``cpu``) with ``kiln_x86_requantize``
    (:func:`toolchain.schedules.x86.int8.compute_options`); the same integers.

    >>> compute_options(registry.resolve_target("cuda-sm80")) is None
    True
    """
    from toolchain.schedules.cortex_m import int8 as cortex_m
    from toolchain.schedules.x86 import int8 as x86_int8

    keys = registry.target_keys(target)
    if "cortex_m" in keys:
        return lambda n: cortex_m.compute_options(n, target)
    if "cpu" in keys:
        return lambda n: x86_int8.compute_options(n, target)
    return None




# ---------------------------------------------------------------------------- schedule

def anchor_of(node: Node) -> Node | None:
    """The complex-out-fusable inner node of a ``complex-out-fusable`` group (or None)."""
    if node.attrs.get("pattern") != str(PatternKind.COMPLEX_OUT_FUSABLE):
        return None
    inner: Graph = node.attrs["graph"]
    for n in inner.nodes:
        if get_op(n.op).pattern_of(n) == PatternKind.COMPLEX_OUT_FUSABLE:
            return n
    return None


#: ops whose default schedule is the generic one even as an anchor (no registered kernel)
GENERIC_ANCHORS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                             "LayoutPool"})


def registry_anchor_schedule(anchor: Node, target: Any) -> OpSchedule | None:
    """The registered default schedule of ``anchor`` (conv, dense …), or None when the
    op has no schedule of its own (the generic fallback schedules the whole group better).
    """
    if anchor.op in GENERIC_ANCHORS:
        return None
    t = registry.resolve_target(target)
    fn = registry.lookup(anchor.op, t)
    if fn is None or fn is cpu_ops.default_schedule:
        return None
    try:
        return registry.schedule_for(anchor, t)
    except NoScheduleError:  # declared: the op's schedule does not take this configuration
        return None


def bind_constants(node: Node, anchor: Node) -> tuple[Node, dict[int, Value]]:
    """``anchor`` with the group inputs that are compile-time constants outside the group
    bound to their data, so its schedule can pack weights at compile time (into
    ``weights.c``) instead of on every call; and a map from each bound copy back to the
    inner value it stands for (the kernel parameter keeps the group's own value).

    Before: ``Fused(x, W=const)`` whose inner ``Conv(x', W')`` sees ``W'.data is None``
    (its schedule packs ``W'`` into scratch per call). After: the anchor handed to the
    schedule reads ``Conv(x', W'')`` with ``W''.data = W.data`` (packed once, offline).
    """
    inner: Graph = node.attrs["graph"]
    outer = {id(iv): ov for iv, ov in zip(inner.inputs, node.inputs, strict=False)}
    back: dict[int, Value] = {}
    ins: list[Value | None] = []
    for v in anchor.inputs:
        ov = outer.get(id(v)) if v is not None else None
        if v is not None and v.data is None and ov is not None and ov.data is not None:
            b = Value(v.name, v.shape, v.dtype, ov.data)
            back[id(b)] = v
            ins.append(b)
        else:
            ins.append(v)
    return (anchor.replace(inputs=ins) if back else anchor), back


def _record_binding(node: Node, back: dict[int, Value], fn: Any) -> None:
    """Tell an open :func:`~toolchain.schedules.packing.recording` which group inputs the
    anchor's schedule ``fn`` saw with their data, and whether ``fn`` is value-blind."""
    rec = packing.current()
    if rec is None or not back:
        return
    pos = {id(v): i for i, v in enumerate(node.attrs["graph"].inputs)}
    rec.bound.update((b, pos[id(v)]) for b, v in back.items())
    rec.blind = packing.is_value_blind(fn)


def _as_op_schedule(out: Any, anchor: Node) -> OpSchedule | None:
    if out is None or isinstance(out, OpSchedule):
        return out
    if isinstance(out, Schedule):
        return OpSchedule(out, list(node_compute(anchor).input_values), list(anchor.outputs))
    raise TypeError(f"anchor scheduler returned {type(out).__name__}, expected a Schedule "
                    "or OpSchedule")


def schedule_fused(node: Node, target: Any = None, anchor_scheduler: Any = None,
                   config: cpu_ops.CpuConfig | None = None, bind: bool = False
                   ) -> FusedKernel:
    """Build and schedule the one kernel of a ``Fused`` node (see the module docstring).

    ``target`` is a name, a Target or None (c-generic); ``config`` overrides the vector
    width / cores read from it. ``anchor_scheduler(anchor_node, target)`` returning a
    Schedule or OpSchedule picks the anchor's schedule (default:
    :func:`registry_anchor_schedule`). ``bind=True`` (bundles) hands the anchor the
    group inputs that are constants outside the group with their data
    (:func:`bind_constants`), so weights are packed at compile time; without it every
    group input stays a run-time parameter (kernels tested as functions of the group's
    inputs)."""
    if node.op != "Fused":
        raise UnsupportedError(f"{node.describe()}: schedule_fused needs a 'Fused' node "
                               f"(from the fusion pass), got op {node.op!r}")
    t = registry.resolve_target(target)
    cfg = config or cpu_ops.cpu_config(t)
    anchor = anchor_of(node)
    pick = anchor_scheduler or registry_anchor_schedule
    sa = None
    if anchor is not None:
        bound, back = bind_constants(node, anchor) if bind else (anchor, {})
        _record_binding(node, back, registry.lookup(anchor.op, t)
                        if pick is registry_anchor_schedule else pick)
        sa = _as_op_schedule(pick(bound, t), bound)
        if sa is not None:
            sa = replace(sa, input_values=[back.get(id(v), v) for v in sa.input_values])
    opts = compute_options(t)
    if sa is not None and anchor is not None:
        return _schedule_with_anchor(node, anchor, sa, cfg, opts)
    fc = fused_compute(node, options=opts)
    func = te.create_prim_func(fc.inputs + fc.outputs,
                               name=sanitize(node.attrs["kernel"], **TE_NAMES))
    space = ops_space(node, func, cfg) if config is None else None
    if space is not None:  # the rules' knobs: the target's unless tuned (records)
        cfg = tuned_config(cfg, decide(space))
    return FusedKernel(cpu_ops.schedule_cpu(func, cfg), fc.input_values, fc.output_values)


@packing.value_blind
def fused_schedule(node: Node, target: Any) -> OpSchedule:
    """The strategy-table entry (what a bundle compiles): a ``Fused`` node's kernel as an
    :class:`OpSchedule`, weights bound and packed at compile time (``bind=True``), with the
    input its output may overwrite (``in_place``) when the anchor's schedule says so.
    Value-blind: it reads no constant itself and shows the anchor's schedule the group's
    constants only through :func:`bind_constants` (recorded for schedule reuse)."""
    k = schedule_fused(node, target, bind=True)
    info = {"schedule": "fused", "kernel": node.attrs["kernel"], "notes": list(k.notes),
            "anchor": k.anchor.op if k.anchor is not None else None}
    host = next((i for i, v in enumerate(k.input_values) if v is k.in_place), None)
    # an overlap's input is input 0 of the kernel, as OpSchedule.overlap says
    lap = k.overlap[1] if k.overlap is not None and k.input_values[:1] == [k.overlap[0]] \
        else None
    return OpSchedule(k.schedule, k.input_values, k.output_values, info, in_place=host,
                      overlap=lap)


class _Rename(StmtMutator):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Block(self, s: ir.Block) -> ir.Stmt:
        out = super().visit_Block(s)
        new = self.names.get(s.name_hint)
        return replace(out, name_hint=new) if new else out


def _root_items(func: ir.PrimFunc) -> tuple[list[ir.Stmt], tuple[ir.Buffer, ...]]:
    root = st.root_block(func)
    body = root.body
    return (list(body.seq) if isinstance(body, ir.SeqStmt) else [body]), root.alloc_buffers


def _split_tail(items: list[ir.Stmt], anchor_buf: ir.Buffer
                ) -> tuple[list[ir.Stmt], list[ir.Stmt]]:
    """The tail's root statements (in order) that do not depend on the anchor's output,
    and those that do. The first run before the anchor: ``Div(conv, Sigmoid(s) + 1)``
    computes ``Sigmoid(s) + 1`` first, so that ``fuse_tail`` may move the Div into the
    anchor's loops (a tail block placed after the anchor and read by such a moved block
    would be read before it is written: a silent wrong output, fuzzer seed 21874)."""
    tainted = {id(anchor_buf.data)}
    before: list[ir.Stmt] = []
    after: list[ir.Stmt] = []
    for item in items:
        reads: set[int] = set()
        writes: set[int] = set()

        def visit(n: Any, reads: set[int] = reads, writes: set[int] = writes) -> None:
            if isinstance(n, ir.Block):
                reads.update(id(r.buffer.data) for r in n.reads)
                writes.update(id(w.buffer.data) for w in n.writes)

        post_order_visit(item, visit)
        if reads & tainted:
            tainted |= writes
            after.append(item)
        else:
            before.append(item)
    return before, after


def _schedule_with_anchor(node: Node, anchor: Node, sa: OpSchedule, cfg: cpu_ops.CpuConfig,
                          options: Callable[[Node], dict[str, Any]] | None = None
                          ) -> FusedKernel:
    inner: Graph = node.attrs["graph"]
    fa = sa.schedule.mod
    a_params = [p for p in fa.params if isinstance(p, ir.Buffer)]
    n_in = len(sa.input_values)
    if len(a_params) != n_in + len(sa.output_values) or len(anchor.outputs) != 1:
        raise UnsupportedError(
            f"{node.describe()}: the schedule of anchor {anchor.describe()} has parameters "
            f"{[p.name for p in a_params]}; expected its {n_in} inputs then its "
            f"{len(sa.output_values)} output(s)")
    out_val = anchor.outputs[0]
    if len(inner.nodes) == 1:
        k = sa.in_place
        lap = (sa.input_values[0], sa.overlap) if sa.overlap is not None else None
        return FusedKernel(sa.schedule, list(sa.input_values), [out_val], anchor,
                           in_place=sa.input_values[k] if k is not None else None,
                           overlap=lap)
    # one buffer per value: an anchor that reads one value twice (MatMul(x, x)) reads it
    # through its first buffer, so the kernel keeps one parameter for it
    canon: dict[int, ir.Buffer] = {}
    twice: dict[int, ir.Buffer] = {}
    for v, b in zip(sa.input_values, a_params, strict=False):
        if id(v) in canon:
            twice[id(b)] = canon[id(v)]
        else:
            canon[id(v)] = b
    if twice:
        fa = SwapBuffers(twice).visit(fa)
    canon[id(out_val)] = a_params[n_in]
    seed = te.placeholder(out_val.shape or (1,), out_val.dtype, "anchor_out")
    # the tail: every node but the anchor (a complex op absorbs no producers, so a node
    # listed before it computes another operand of the tail: Slice -> Add(., conv))
    fc = fused_compute(node, seed={id(out_val): seed}, options=options, without=anchor)
    # only the group inputs the tail reads become its parameters (a weight the anchor
    # packed at compile time must not come along as an unused, unpacked parameter)
    tail_nodes = [n for n in inner.nodes if n is not anchor]
    used = {id(v) for n in tail_nodes for v in n.inputs if v is not None}
    used |= {id(v) for v in inner.outputs}
    keep = [k for k, v in enumerate(fc.input_values) if id(v) in used]
    fc = replace(fc, inputs=[fc.inputs[k] for k in keep],
                 input_values=[fc.input_values[k] for k in keep])
    ft = te.create_prim_func([seed, *fc.inputs, *fc.outputs])
    swap = {id(seed.buffer): canon[id(out_val)]}
    for v, t in zip(fc.input_values, fc.inputs, strict=True):
        if id(v) in canon:
            swap[id(t.buffer)] = canon[id(v)]
        else:
            canon[id(v)] = t.buffer
    ft = SwapBuffers(swap).visit(ft)
    taken = set(st.block_names(fa))
    renames = {n: f"{n}_tail" for n in st.block_names(ft) if n in taken and n != "root"}
    if renames:
        ft = _Rename(renames).visit(ft)
    values = [v for v in inner.inputs if id(v) in canon]
    values += [v for v in list(sa.input_values) + fc.input_values
               if id(v) in canon and all(v is not w for w in values)]
    out_bufs = [t.buffer for t in fc.outputs]
    params = tuple(canon[id(v)] for v in values) + tuple(out_bufs)
    a_items, a_allocs = _root_items(fa)
    t_items, t_allocs = _root_items(ft)
    anchor_buf = canon[id(out_val)]
    allocs = a_allocs + t_allocs + ((anchor_buf,) if anchor_buf not in params else ())
    before, after = _split_tail(t_items, anchor_buf)
    root = ir.Block("root", (), (), (), ir.seq(*before, *a_items, *after), None, allocs)
    name = sanitize(node.attrs["kernel"], **TE_NAMES)
    func = ir.PrimFunc(params, ir.BlockRealize((), ir.IntImm(1, "bool"), root), name,
                       {"global_symbol": name})
    tail = [n for n in st.block_names(ft) if n != "root"]
    tail = [renames.get(n, n) for n in tail]
    sch, notes = fuse_tail(Schedule(func), anchor_buf, tail, cfg)
    return FusedKernel(sch, values, fc.output_values, anchor, notes,
                       _tail_keeps_in_place(sa, sch, tail_nodes, tail))


def _tail_keeps_in_place(sa: OpSchedule, sch: Schedule, tail_nodes: list[Node],
                         tail: list[str]) -> Value | None:
    """The anchor's in-place input (``OpSchedule.in_place``) when the elementwise tail keeps
    the anchor's write order: no tail block is left in ``sch`` (each was inlined, in the
    end into the block writing the anchor's output, so every output element is still
    written where the anchor wrote it) and no tail op reads that input."""
    k = sa.in_place
    if k is None:
        return None
    host = sa.input_values[k]
    if any(st.find_block(sch.mod, n) is not None for n in tail):
        return None
    if any(v is host for n in tail_nodes for v in n.inputs):
        return None
    return host


def _writer(sch: Schedule, buf: ir.Buffer) -> tuple[ir.BlockRealize, tuple[ir.Stmt, ...]] | None:
    found = None
    for r in st.all_blocks(sch.mod):
        if any(w.buffer is buf for w in r.block.writes):
            found = r
    return st.find_block(sch.mod, found.block.name_hint) if found is not None else None


def fuse_tail(sch: Schedule, anchor_buf: ir.Buffer, tail: list[str], cfg: cpu_ops.CpuConfig
              ) -> tuple[Schedule, list[str]]:
    """Move the elementwise tail (blocks ``tail``) into the anchor's output tile.

    Returns the schedule and notes saying where each remaining tail block went."""
    cpu_ops.inline_stages(sch, names=set(tail))
    notes: list[str] = []
    alive = [n for n in tail if st.find_block(sch.mod, n) is not None]
    for name in alive:
        realize, _ = st.find_block(sch.mod, name) or (None, None)
        if realize is None or not any(r.buffer is anchor_buf for r in realize.block.reads):
            continue
        found = _writer(sch, anchor_buf)
        if found is None:
            continue
        w, wpath = found
        if not access.is_reduce(w.block) and cpu_ops.try_primitive(
                sch.reverse_compute_inline, BlockRV(name)) is not None:
            notes.append(f"{name}: inlined into {w.block.name_hint}")
            continue
        loops = [f for f in st.loops_of(wpath)]
        spatial = []
        for f in loops:
            if access.feeds_reduce(w, f.loop_var) or f.kind == "vectorized":
                break
            spatial.append(f)
        for f in reversed(spatial):
            trial = sch.copy()
            if (cpu_ops.try_primitive(trial.reverse_compute_at, BlockRV(name), LoopRV(f.loop_var))
                    and _exact_tile(trial, name, w.block.name_hint, f)):
                sch = trial
                notes.append(f"{name}: computed at loop {f.loop_var.name} of "
                             f"{w.block.name_hint}")
                break
        else:
            notes.append(f"{name}: own loop nest after the anchor")
    left = {n for n in tail if st.find_block(sch.mod, n) is not None}
    cpu_ops.schedule_loops(sch, cfg, names=left)
    cpu_ops.parallelize(sch, cfg, names=left)
    return sch, notes


def _iterations(sch: Schedule, block: str, loop: ir.For, spatial_only: bool) -> int | None:
    realize, path = st.find_block(sch.mod, block) or (None, ())
    if realize is None:
        return None
    loops = st.loops_of(path)
    under = loops[next(k for k, f in enumerate(loops) if f.loop_var is loop.loop_var) + 1:]
    n = 1
    for f in under:
        if spatial_only and access.feeds_reduce(realize, f.loop_var):
            continue
        if access.loop_extent(f) is None:
            return None
        n *= access.loop_extent(f) or 0
    return n


def _exact_tile(sch: Schedule, tail: str, writer: str, loop: ir.For) -> bool:
    """Whether the tail moved under ``loop`` runs exactly once per element the writer
    produces there (a tail region widened by loop fusion would read unwritten data)."""
    a = _iterations(sch, tail, loop, False)
    b = _iterations(sch, writer, loop, True)
    return a is not None and a == b
