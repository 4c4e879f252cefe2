"""The CPU schedule of ``FusedAttention``: one parallel loop over (batch, head, row block),
and inside it every stage of :mod:`toolchain.topi.nn.attention` for that block of query
rows only.

Per row block of ``R`` query rows (``R`` = the largest divisor of ``Sq`` not above
:data:`ROWS`; 1 for a prime ``Sq``), in order:

1. ``attn_score`` — ``R × Sk`` scores: the head-size reduction ``kd`` runs *outside* the
   key loop ``j``, which walks ``Kt[d, :]`` contiguously and is vectorized (each step is a
   vector FMA into a row of scores; no horizontal sums);
2. ``attn_max`` and ``attn_exp`` — the row maximum, then ``exp(logit − max)`` vectorized
   over ``j`` (the mask, window and scale are inlined into both);
3. ``attn_sum`` — the row sums;
4. ``attn_acc`` — ``R × Dv`` accumulators: ``j`` outside, ``d`` inside vectorized (a vector
   FMA of one probability and one contiguous row of ``V``);
5. ``attention`` — ``acc / sum`` written out.

The lowering's buffer compaction shrinks every intermediate to one row block (scores and
exponentials ``R × Sk``, accumulators ``R × Dv``, two ``R``-vectors), allocated inside
the parallel loop: the ``[Sq, Sk]`` matrix is never materialised, and each thread of a
multi-core bundle works on its own blocks. The softmax is exact (two passes over a
row block that stays in cache), not the rescaling online form.

Before (``te.create_prim_func`` of the compute, abridged)::

    for b, h, i, j, kd in T.grid(...):   attn_score[b, h, i, j] += Q[..] * Kt[..]
    for b, h, i, j in T.grid(...):       attn_logit[..] = ...
    ... one full-size nest per stage ...

After ``schedule_attention_func(func, node, "x86_64-avx2")`` (abridged)::

    for b_h_i_0_fused in T.parallel(B * H * ceil(Sq / R)):
        for i_1, kd in T.grid(R, D):
            for j_1 in T.vectorized(8): attn_score[..] += Q[..] * Kt[kd, j]
        for i_1, j in T.grid(R, Sk):   attn_max[..] = max(attn_max[..], logit)
        ...
        for i_1, j in T.grid(R, Sk):
            for c_1 in T.vectorized(8): attn_acc[..] += attn_exp[..] * V[j, c]
        for i_1 in range(R):
            for c_1 in T.vectorized(8): attention[..] = attn_acc[..] / attn_sum[..]
"""

from __future__ import annotations

from typing import Any

from toolchain import te
from toolchain.codegen.names import TE_NAMES, sanitize
from toolchain.errors import KilnError
from toolchain.graph.ir import Node
from toolchain.schedules.generic.ops import CpuConfig, cpu_config
from toolchain.schedules.registry import OpSchedule
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule.schedule import LoopRV
from toolchain.topi.registry import node_compute

#: query rows per block: enough to reuse each loaded row of Kt and V several times, few
#: enough that the block's scores stay in L1/L2 (R × Sk floats)
ROWS = 8


def _extent(sch: Schedule, loop: LoopRV) -> int | None:
    f = sch.get(loop)
    assert isinstance(f, ir.For)
    return int(f.extent.value) if isinstance(f.extent, ir.IntImm) else None


def _vectorize(sch: Schedule, loop: LoopRV, lanes: int) -> None:
    """Vectorize ``loop`` by ``lanes`` (a guarded tail when the extent is not a multiple)."""
    n = _extent(sch, loop)
    if n is None or n < 2 or lanes < 2:
        return
    try:
        if n <= lanes:
            if n & (n - 1) == 0 and n >= 4:
                sch.vectorize(loop)
            return
        _, inner = sch.split(loop, [None, lanes])
        sch.vectorize(inner)
    except KilnError:  # a refusal leaves a correct scalar loop
        return


def schedule_attention_func(func: ir.PrimFunc, node: Node, target: Any = None,
                            config: CpuConfig | None = None, rows: int = ROWS) -> Schedule:
    """Schedule the PrimFunc of a ``FusedAttention`` compute (see the module docstring)."""
    cfg = config or cpu_config(target)
    sch = Schedule(func)
    lanes = cfg.lanes("float32")
    sch.compute_inline(sch.get_block("attn_logit"))
    out = sch.get_block("attention")
    b, h, i, c = sch.get_loops(out)
    sq = _extent(sch, i) or 1
    # a divisor of Sq: a guarded last block would keep the lowering from shrinking the
    # intermediates to one block (its guard differs from stage to stage)
    r = max(k for k in range(1, min(rows, sq) + 1) if sq % k == 0)
    io, ii = sch.split(i, [None, r])
    outer = sch.fuse(b, h, io)
    for name in ("attn_acc", "attn_sum", "attn_exp", "attn_max", "attn_score"):
        sch.compute_at(sch.get_block(name), outer)
    # scores: kd outside j, j vectorized over the contiguous row of Kt
    score = sch.get_block("attn_score")
    sj, skd = sch.get_loops(score)[-2:]   # (a row block of 1 has no row loop)
    sch.reorder(skd, sj)
    sch.decompose_reduction(score, skd)
    _vectorize(sch, sch.get_loops(score)[-1], lanes)
    _vectorize(sch, sch.get_loops(sch.get_block("attn_exp"))[-1], lanes)
    # the V product: j outside d, d vectorized over the contiguous row of V
    acc = sch.get_block("attn_acc")
    ac, aj = sch.get_loops(acc)[-2:]
    sch.reorder(aj, ac)
    sch.decompose_reduction(acc, aj)
    _vectorize(sch, sch.get_loops(acc)[-1], lanes)
    _vectorize(sch, sch.get_loops(out)[-1], lanes)
    if cfg.cores > 1:
        sch.parallel(outer)
    return sch


def schedule_attention(node: Node, target: Any) -> OpSchedule:
    """The strategy-table entry for ``FusedAttention`` on CPUs."""
    nc = node_compute(node)
    func = te.create_prim_func(nc.inputs + nc.outputs,
                               name=sanitize(f"attention_{node.name}", **TE_NAMES))
    sch = schedule_attention_func(func, node, target)
    return OpSchedule(sch, list(nc.input_values), list(node.outputs),
                      {"schedule": "attention", "rows": ROWS})
