"""The CPU schedule of ``FusedAttention``: one parallel loop over (batch, head, row block),
and inside it every stage of :mod:`toolchain.topi.nn.attention` for that block of query
rows only.

Keys are padded to whole vectors (the compute's ``key_block`` = the target's float lanes:
``attn_kt_pad``, Kt with zero columns, is written once per call before the row blocks), so
no key loop has a guarded tail. Per row block of ``R`` query rows (``R`` = the largest
divisor of ``Sq`` not above :data:`ROWS`; 1 for a prime ``Sq``), in order:

1. ``attn_score`` — ``R × Skp`` scores: the head-size reduction ``kd`` outside, the
   ``R`` rows × 2 key vectors a register tile (``cache_write`` to ``local``, unrolled:
   one broadcast-FMA per vector and step, no horizontal sums), copied out per tile;
2. ``attn_max`` — ``rfactor`` by the lanes (a vector of partial maxima per row), folded
   in vectors of :data:`_TREE`, then :data:`_TREE` scalars; the mask, window, padding and
   scale are inlined into it and into ``attn_exp``;
3. ``attn_exp`` — ``exp(logit − max)`` vectorized over the keys;
4. ``attn_sum`` — as the max;
5. ``attn_acc`` — the V product: keys outside, ``R`` rows × head-size vectors a register
   tile (a vector FMA of one probability and one contiguous row of ``V``);
6. ``attention`` — ``acc / sum`` written out.

The lowering's buffer compaction shrinks every intermediate to one row block (scores and
exponentials ``R × Skp``, accumulators ``R × Dv``, the partial vectors), allocated inside
the parallel loop: the ``[Sq, Sk]`` matrix is never materialised, and each thread of a
multi-core bundle works on its own blocks. The softmax is exact (two passes over a
row block that stays in cache), not the rescaling online form.

Before (``te.create_prim_func`` of the compute, abridged)::

    for b, h, c, j in T.grid(...):       attn_kt_pad[..] = j < Sk ? Kt[..] : 0
    for b, h, i, j, kd in T.grid(...):   attn_score[b, h, i, j] += Q[..] * attn_kt_pad[..]
    for b, h, i, j in T.grid(...):       attn_logit[..] = ...
    ... one full-size nest per stage ...

After ``schedule_attention_func(func, node, "x86_64-avx2")`` (abridged; R = 8, 32 keys)::

    for b, h, c, j_0 in T.grid(...):
        for j_1 in T.vectorized(8): attn_kt_pad[..] = ...
    for b_h_i_0_fused in T.parallel(B * H * Sq / 8):
        for j_0 in range(2):
            for i_1 in T.unroll(8): for j_1 in T.unroll(2): for j_2 in T.vectorized(8):
                attn_score_local[..] = 0
            for kd in range(D):
                for i_1 in T.unroll(8): for j_1 in T.unroll(2): for j_2 in T.vectorized(8):
                    attn_score_local[..] += Q[..] * attn_kt_pad[.., kd, j]
            ... copy the tile to attn_score ...
        for i_1, j_0 in T.grid(8, 4):
            for j_1 in T.vectorized(8): attn_max_rf[i_1, j_1] = max(.., logit)
        ...
        for j in range(Sk):
            for i_1 in T.unroll(8): for c in T.vectorized(8):
                attn_acc_local[..] += attn_exp[i_1, j] * V[j, c]
        for i_1 in range(8):
            for c_1 in T.vectorized(8): attention[..] = attn_acc[..] / attn_sum[..]
"""

from __future__ import annotations

import math
from typing import Any

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space, divisors
from toolchain.codegen.names import TE_NAMES, sanitize
from toolchain.errors import KilnError
from toolchain.graph.ir import Node
from toolchain.schedules.generic.ops import CpuConfig, cpu_config
from toolchain.schedules.registry import OpSchedule, resolve_target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.schedule import LoopRV
from toolchain.topi.nn.attention import fused_attention

#: query rows per block: enough to reuse each loaded row of Kt and V several times, few
#: enough that the block's scores stay in L1/L2 (R × Sk floats)
ROWS = 8
#: width of the second level of the row max / sum fold (a dependent chain of 16 scalar
#: steps per row would cost more than the vector work of a row of 32 keys)
_TREE = 4


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


def _has_pair(sch: Schedule, blk: Any) -> bool:
    """Whether product block ``blk``'s contiguous (last spatial) axis and its reduction
    axis both have a length of 2 or more: a loop of length 1 is gone after
    ``compute_at``, and the block's last two loops are then not that pair."""
    ivs = sch.get(blk).iter_vars
    spatial = [iv for iv in ivs if iv.iter_type == ir.IterType.SPATIAL]
    red = [iv for iv in ivs if iv.iter_type != ir.IterType.SPATIAL]
    return bool(spatial and red) and all(
        isinstance(iv.dom.extent, ir.IntImm) and int(iv.dom.extent.value) >= 2
        for iv in (spatial[-1], red[-1]))


def _plain_reduction(sch: Schedule, blk: Any, lanes: int) -> None:
    """The reduction loop outside the contiguous one, which is vectorized. A block
    without that pair of loops (:func:`_has_pair`; Sq = Dv = 1, a one-query head of width
    1, raised ``ValueError`` or a ``reorder`` error) is left as it is."""
    if not _has_pair(sch, blk):
        return
    spatial, red = sch.get_loops(blk)[-2:]
    sch.reorder(red, spatial)
    init = sch.decompose_reduction(blk, red)
    _vectorize(sch, sch.get_loops(init)[-1], lanes)
    _vectorize(sch, sch.get_loops(blk)[-1], lanes)


def _register_tile(sch: Schedule, blk: Any, copy: Any, lanes: int, vectors: int = 2) -> None:
    """``[row, col, red]`` under the row-block loop (``blk`` accumulating into a ``local``
    buffer that ``copy`` writes out) -> for each group of ``vectors`` column vectors:
    ``red`` outside, then every row and column vector unrolled: the accumulators stay in
    registers."""
    loops = sch.get_loops(blk)
    col, red = loops[-2:]
    rows = loops[-3] if len(loops) >= 4 else None   # a row block of 1 has no row loop
    n = _extent(sch, col) or 0
    v = max(k for k in range(1, vectors + 1) if (n // lanes) % k == 0)
    co, cv, cl = sch.split(col, [None, v, lanes])
    sch.reorder(co, red, *([rows] if rows is not None else []), cv, cl)
    sch.reverse_compute_at(copy, co)
    init = sch.decompose_reduction(blk, red)
    for b in (blk, init, copy):
        inner = sch.get_loops(b)
        inner = inner[inner.index(co) + 1:] if co in inner else inner[2:]
        if b is blk:
            inner = inner[1:]   # the reduction loop stays a loop
        last = inner[-1]
        if (_extent(sch, last) or 0) > lanes:
            outer_part, last = sch.split(last, [None, lanes])
            inner = [*inner[:-1], outer_part]
        else:
            inner = inner[:-1]
        sch.vectorize(last)
        for loop in inner:
            sch.unroll(loop)


#: most query rows a block may take (the space's ``rows``)
MAX_ROWS = 16


def _tile_vectors(cols: int, lanes: int, most: int = 2) -> tuple[int, ...]:
    """The column vectors a register tile over ``cols`` columns may take (dividing the
    vectors, at most 4); the heuristic's is the largest of them up to ``most``."""
    n = cols // lanes if lanes >= 2 and cols % lanes == 0 else 0
    return tuple(k for k in (1, 2, 4) if n and n % k == 0) or (1,)


def attention_space(node: Node, cfg: CpuConfig, registers: int = 16) -> Space:
    """The knobs of the ``FusedAttention`` schedule (kind ``attention``), each default the
    heuristic's:

    * ``rows`` -- query rows per block (divisors of ``Sq`` up to :data:`MAX_ROWS`; the
      heuristic: the largest up to :data:`ROWS`);
    * ``score_vectors`` / ``acc_vectors`` -- key vectors per register tile of the scores,
      head-size vectors per tile of the V product (the heuristic: 2 where they divide);
    * ``fold`` -- the row max and sum folded in vectors of 4 before the scalar steps (the
      heuristic where the lanes exceed 4) or in one scalar chain.

    Rule: a tile's ``rows x vectors`` accumulators, its vectors and a broadcast fit the
    vector registers (or the default's count where that is more).

    >>> from toolchain.graph.ir import Value
    >>> q = Value("q", (1, 2, 32, 16), "float32"); kt = Value("kt", (1, 2, 16, 32), "float32")
    >>> n = Node("FusedAttention", "a", [q, kt, q], [q], {"scale": 0.25})
    >>> s = attention_space(n, CpuConfig(vector_bits=256), 16); s.default()
    {'rows': 8, 'score_vectors': 2, 'acc_vectors': 2, 'fold': True}
    >>> s.knob("rows").choices
    (1, 2, 4, 8, 16)
    """
    lanes = cfg.lanes("float32")
    q, kt, v = (node.inputs[i] for i in range(3))
    sq, sk, dv = int(q.shape[-2]), int(kt.shape[-1]), int(v.shape[-1])
    skp = -(-sk // lanes) * lanes
    rows = divisors(sq, MAX_ROWS)
    row_default = max(k for k in rows if k <= ROWS)
    sv, av = _tile_vectors(skp, lanes), _tile_vectors(dv, lanes)
    knobs = (Knob("rows", rows, row_default, "query rows per block"),
             Knob("score_vectors", sv, max(k for k in sv if k <= 2),
                  "key vectors per register tile of the scores"),
             Knob("acc_vectors", av, max(k for k in av if k <= 2),
                  "head-size vectors per register tile of the V product"),
             Knob("fold", (True, False) if lanes > _TREE else (True,), True,
                  "the row max/sum folded in vectors of 4 before the scalar steps"))

    def need(p: Any) -> int:
        return max(p["rows"] * p[k] + p[k] + 1 for k in ("score_vectors", "acc_vectors"))

    budget = max(registers, need({k.name: k.default for k in knobs}))
    rules = (Rule(f"a tile's rows x vectors accumulators, its vectors and a broadcast fit "
                  f"{budget} vector registers", lambda p: need(p) <= budget),)
    mask = node.input(3) if len(node.inputs) > 3 else None
    key = (f"attention|q{'x'.join(map(str, q.shape))}|kt{'x'.join(map(str, kt.shape))}|"
           f"v{'x'.join(map(str, v.shape))}|mask={'x'.join(map(str, mask.shape)) if mask else 0}"
           f"|v{lanes}r{registers}c{cfg.cores}")
    return Space("attention", key, knobs, rules,
                 seeds=({"rows": 16, "score_vectors": 1, "acc_vectors": 1, "fold": False},
                        {"rows": 16, "score_vectors": 1, "acc_vectors": 1}, {"rows": 4},
                        {"fold": False}))


def schedule_attention_func(func: ir.PrimFunc, node: Node, target: Any = None,
                            config: CpuConfig | None = None, rows: int = ROWS,
                            point: dict[str, Any] | None = None) -> Schedule:
    """Schedule the PrimFunc of a ``FusedAttention`` compute (see the module docstring);
    ``point``: a point of :func:`attention_space` (None: the heuristic's, with ``rows``)."""
    cfg = config or cpu_config(target)
    sch = Schedule(func)
    lanes = cfg.lanes("float32")
    p = point or {"rows": None, "score_vectors": 2, "acc_vectors": 2, "fold": True}
    sch.compute_inline(sch.get_block("attn_logit"))
    # row max and row sum: partial results per vector lane, folded at the end (rfactor
    # must come before the stages are moved into one loop nest)
    partial = []
    for name in ("attn_max", "attn_sum"):
        j = sch.get_loops(sch.get_block(name))[-1]
        n = _extent(sch, j) or 0
        if lanes >= 4 and n % lanes == 0 and n >= 2 * lanes:
            try:
                partial.append(sch.rfactor(sch.split(j, [None, lanes])[1], 3))
                # fold the lanes in vectors of _TREE, then _TREE scalars
                if lanes > _TREE and p["fold"]:
                    k = sch.get_loops(sch.get_block(name))[-1]
                    partial.append(sch.rfactor(sch.split(k, [None, _TREE])[1], 3))
            except KilnError:  # a refusal leaves the split: still correct
                pass
    # register tiles for the two products (cache_write must precede compute_at)
    copies = {}
    for name in ("attn_score", "attn_acc"):
        blk = sch.get_block(name)
        cols = _extent(sch, sch.get_loops(blk)[-2]) or 0
        if lanes >= 2 and cols % lanes == 0 and _has_pair(sch, blk):
            copies[name] = sch.cache_write(blk, 0, "local")
    out = sch.get_block("attention")
    b, h, i, c = sch.get_loops(out)
    sq = _extent(sch, i) or 1
    # a divisor of Sq: a guarded last block would keep the lowering from shrinking the
    # intermediates to one block (its guard differs from stage to stage)
    r = p["rows"] or max(k for k in range(1, min(rows, sq) + 1) if sq % k == 0)
    io, ii = sch.split(i, [None, r])
    outer = sch.fuse(b, h, io)
    stages = [n for n in st.block_names(sch.mod)
              if n not in ("root", "attention", "attn_kt_pad")]
    for name in reversed(stages):  # consumers first
        sch.compute_at(sch.get_block(name), outer)
    for rf in partial:  # init hoisted out of the key loop, then whole vectors of lanes
        init = sch.decompose_reduction(rf, sch.get_loops(rf)[-2])
        _vectorize(sch, sch.get_loops(init)[-1], lanes)
        _vectorize(sch, sch.get_loops(rf)[-1], lanes)
    # scores (kd outside j) and the V product (j outside d): register tiles of rows x
    # vectors accumulated in `local` scope, vectorized over the contiguous key / head axis
    for name in ("attn_score", "attn_acc"):
        blk = sch.get_block(name)
        if name in copies:
            _register_tile(sch, blk, copies[name], lanes,
                           p["score_vectors" if name == "attn_score" else "acc_vectors"])
        else:
            _plain_reduction(sch, blk, lanes)
    _vectorize(sch, sch.get_loops(sch.get_block("attn_exp"))[-1], lanes)
    _vectorize(sch, sch.get_loops(out)[-1], lanes)
    pad = sch.get_block("attn_kt_pad") if "attn_kt_pad" in st.block_names(sch.mod) else None
    if pad is not None:  # padded Kt: once per call, before the row blocks
        pb, ph, pd, pj = sch.get_loops(pad)
        _vectorize(sch, pj, lanes)
        if cfg.cores > 1:
            sch.parallel(sch.fuse(pb, ph, pd))
    if cfg.cores > 1:
        sch.parallel(outer)
    return sch


def schedule_attention(node: Node, target: Any) -> OpSchedule:
    """The strategy-table entry for ``FusedAttention`` on CPUs."""
    cfg = cpu_config(target)
    a = node.attrs
    ins = [v for v in node.inputs if v is not None]
    ph = [te.placeholder(v.shape, v.dtype, sanitize(v.name, **TE_NAMES)) for v in ins]
    out = fused_attention(ph[0], ph[1], ph[2], ph[3] if len(ph) > 3 else None,
                          scale=float(a["scale"]), softcap=float(a.get("softcap", 0.0)),
                          left=int(a.get("left", -1)), right=int(a.get("right", -1)),
                          fill=float(a.get("fill", -math.inf)), empty=str(a.get("empty", "nan")),
                          key_block=cfg.lanes("float32"))
    func = te.create_prim_func([*ph, out], name=sanitize(f"attention_{node.name}", **TE_NAMES))
    regs = int(getattr(resolve_target(target), "vector_registers", None) or 16) \
        if target is not None else 16
    point = decide(attention_space(node, cfg, regs))
    sch = schedule_attention_func(func, node, target, cfg, point=point)
    return OpSchedule(sch, ins, list(node.outputs), {"schedule": "attention", "rows": ROWS})
