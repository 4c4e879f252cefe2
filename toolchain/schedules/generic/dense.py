"""Default CPU schedule for MatMul and Gemm: packed B panels, cache and register blocking.

The kernel is Goto/BLIS-shaped:

* **B panels** — B is repacked as ``[ceil(N/nr)][K][nr]`` (zero-padded to a multiple of
  ``nr``) so the micro-kernel reads ``nr`` consecutive floats per ``k``. When B is a
  constant (weights) the packing happens at compile time: the kernel takes the packed
  array (``OpSchedule.input_values`` names it ``<B>_packed``).
* **register tile** — an ``mr x nr`` tile of C lives in vector registers
  (``cache_write(..., "local")``), ``k`` runs around it; the tile's rows and vectors are
  unrolled (``mr``/``nr`` from :func:`~toolchain.schedules.generic.common.register_tile`).
* **cache blocking** — rows are blocked by ``mc`` so an ``mc x K`` block of A stays in
  L2 (half the descriptor's ``caches.l2``) while the B panels stream through it.
* **tails** — M and N that are not multiples of the tile are padded inside the kernel (A
  rows copied into a padded block, the result cropped in the epilogue that also applies
  Gemm's ``alpha``/``beta * C``), so the inner loops never carry a guard.
* **parallel** — the outermost block loop runs in parallel when the target has > 1 core.

Before (``MatMul`` 64x32 @ 32x48, c-generic)::

    for i, j, k in T.grid(64, 48, 32):
        C[i, j] = C[i, j] + A[i, k] * B[k, j]

after (sketch)::

    for i_0, j_0, i_1 in T.grid(1, 6, 10):
        for i_2, j_1 in T.grid(6, 2): C_local[...] = 0      # unrolled, vectorized
        for k in range(32):
            for i_2 in T.unroll(6): for j_1 in T.unroll(2):
                C_local[i_2, j_1*4:+4] += A_pad[...] * B_packed[j_0, k, j_1*4:+4]
        ... C_local -> prod

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> w = np.ones((32, 48), np.float32)
    >>> node = Node("MatMul", "mm", [Value("a", (64, 32), "float32"),
    ...                             Value.constant("w", w)], [Value("y", (64, 48), "float32")])
    >>> s = schedule_dense(node, "c-generic")
    >>> s.info["mr"], s.info["nr"], [v.name for v in s.input_values]
    (4, 8, ['a', 'w_packed'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toolchain import te
from toolchain.autotune.apply import decide
from toolchain.autotune.space import Knob, Rule, Space, with_default
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops.nn_common import attrs_of
from toolchain.schedules.generic.common import CpuParams, ceil_div, cpu_params, register_tile
from toolchain.schedules.packing import packed_constant, value_blind
from toolchain.schedules.registry import OpSchedule, resolve_target
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

Expr = ir.PrimExpr


@dataclass(frozen=True)
class GemmPlan:
    """Tile sizes of one GEMM: register tile ``mr x nr``, row block ``mc`` (multiple of
    ``mr``), padded sizes ``mp``/``np_``."""

    m: int
    n: int
    k: int
    mr: int
    nr: int
    mc: int
    lanes: int

    @property
    def mp(self) -> int:
        return ceil_div(self.m, self.mr) * self.mr

    @property
    def np_(self) -> int:
        return ceil_div(self.n, self.nr) * self.nr


def plan_gemm(m: int, n: int, k: int, p: CpuParams, dtype: str = "float32",
              mr: int | None = None, nr: int | None = None) -> GemmPlan:
    """Pick the tiles for an ``m x k @ k x n`` product on ``p``.

    ``mr`` is lowered to a divisor of ``m`` when one is close (no padding), ``m`` itself
    when ``m`` is smaller than a tile. ``mr``/``nr`` given (a tuned point) are taken as
    they are; the row block ``mc`` then follows from them.

    >>> plan_gemm(1024, 1024, 1024, cpu_params("x86_64-avx512"))
    GemmPlan(m=1024, n=1024, k=1024, mr=8, nr=32, mc=128, lanes=16)
    """
    lanes = p.lanes(dtype)
    if mr is None or nr is None:
        h_mr, h_nr = register_tile(lanes, p.vector_registers, n)
        if m <= h_mr:
            h_mr = m
        else:
            for cand in range(h_mr, max(3, h_mr - 3), -1):
                if m % cand == 0:
                    h_mr = cand
                    break
        mr, nr = mr or h_mr, nr or h_nr
    mp = ceil_div(m, mr) * mr
    rows = max(1, (p.l2_bytes // 2) // max(1, k * 4) // mr)
    mc = min(mp, max(1, rows) * mr)
    while mp % mc:
        mc -= mr
    return GemmPlan(m, n, k, mr, nr, mc, lanes)


def gemm_space(plan: GemmPlan, p: CpuParams, workload: str) -> Space:
    """The knobs of the packed GEMM around the heuristic's ``plan`` (its default point):
    ``mr`` (rows of the register tile), ``nr`` (its columns, whole vectors) and
    ``mc_tiles`` (register tiles per cache block of rows: ``mc = mr * mc_tiles``).
    Rules: the tile fits the register file; a cache block divides the padded rows.

    >>> s = gemm_space(plan_gemm(64, 48, 32, cpu_params("c-generic")),
    ...                cpu_params("c-generic"), "gemm|example")
    >>> s.default(), s.is_valid({"mr": 16, "nr": 8, "mc_tiles": 1})
    ({'mr': 4, 'nr': 8, 'mc_tiles': 16}, False)
    """
    lanes = plan.lanes
    top = max(-(-plan.n // lanes) * lanes, plan.nr)
    nrs = with_default([lanes * v for v in (1, 2, 3, 4) if lanes * v <= top], plan.nr)
    tiles = plan.mc // plan.mr

    def need(q: Mapping[str, Any]) -> int:
        vecs = max(1, q["nr"] // lanes)
        return q["mr"] * vecs + vecs + 1

    budget = max(p.vector_registers, need({"mr": plan.mr, "nr": plan.nr}))
    knobs = (
        Knob("mr", with_default(range(1, min(plan.m, 16) + 1), plan.mr), plan.mr,
             "rows of the register tile"),
        Knob("nr", nrs, plan.nr, "columns of the register tile (whole vectors)"),
        Knob("mc_tiles", with_default([1 << e for e in range(9)], tiles), tiles,
             "register tiles per cache block of rows (mc = mr * mc_tiles)"),
    )
    rules = (
        Rule(f"the register tile (mr * nr/{lanes} accumulators, nr/{lanes} B vectors and a "
             f"broadcast) fits {budget} vector registers", lambda q: need(q) <= budget),
        Rule("a cache block of mr * mc_tiles rows divides the rows padded to mr",
             lambda q: (-(-plan.m // q["mr"])) % q["mc_tiles"] == 0),
    )
    return Space("gemm", workload, knobs, rules)


def tuned_gemm(plan: GemmPlan, point: Mapping[str, Any]) -> GemmPlan:
    """``plan`` with the tiles of ``point`` (:func:`gemm_space`)."""
    return replace(plan, mr=point["mr"], nr=point["nr"], mc=point["mr"] * point["mc_tiles"])


def gemm_workload(kind: str, batch: tuple[int, ...], m: int, n: int, k: int, p: CpuParams,
                  extra: str = "") -> str:
    """The key of a GEMM's tuning records (shape and the target capabilities its space
    depends on, never a target's name).

    >>> gemm_workload("dense", (), 1, 1000, 512, cpu_params("x86_64-avx2"), "b=const")
    'gemm|dense|batch=|m1n1000k512|v8r16c1|b=const'
    """
    return (f"gemm|{kind}|batch={'x'.join(map(str, batch))}|m{m}n{n}k{k}|"
            f"v{p.lanes('float32')}r{p.vector_registers}c{p.cores}|{extra}")


@dataclass
class _Operands:
    """A GEMM problem read off a MatMul/Gemm node: batch shape, accessors and epilogue."""

    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    a_at: Any          # (a_tensor, bidx, i, k) -> Expr
    b_at: Any          # (b_tensor, bidx, k, j) -> Expr
    b_batched: bool
    alpha: float = 1.0
    beta: float = 0.0
    c_value: Value | None = None


def _bidx(shape: tuple[int, ...], bidx: tuple[Expr, ...]) -> tuple[Expr, ...]:
    tb = len(shape) - 2
    nb = len(bidx)
    return tuple(ir.IntImm(0) if shape[d] == 1 else bidx[nb - tb + d] for d in range(tb))


def _operands(node: Node) -> _Operands | None:
    a_v, b_v = node.inputs[0], node.inputs[1]
    sa, sb = tuple(a_v.shape), tuple(b_v.shape)
    if len(sa) < 2 or len(sb) < 2 or a_v.dtype != "float32" or b_v.dtype != "float32":
        return None  # 1-D promotion and integer products: generic schedule
    out = tuple(node.outputs[0].shape)
    if node.op == "MatMul":
        return _Operands(
            out[:-2], sa[-2], sb[-1], sa[-1],
            lambda t, b, i, k: t[_bidx(sa, b) + (i, k)],
            lambda t, b, k, j: t[_bidx(sb, b) + (k, j)],
            any(d != 1 for d in sb[:-2]))
    attrs = attrs_of(node)
    ta, tb = bool(attrs["transA"]), bool(attrs["transB"])
    m, k = (sa[1], sa[0]) if ta else sa
    n = sb[0] if tb else sb[1]
    c = node.input(2)
    return _Operands(
        (), m, n, k,
        lambda t, b, i, kk: t[(kk, i) if ta else (i, kk)],
        lambda t, b, kk, j: t[(j, kk) if tb else (kk, j)],
        False, float(attrs["alpha"]), float(attrs["beta"]) if c is not None else 0.0, c)


def _pack_b_const(data: np.ndarray, ops: _Operands, plan: GemmPlan, trans_b: bool
                  ) -> np.ndarray:
    """``[K, N]`` (or ``[N, K]``) constant -> ``[Np/nr, K, nr]`` panels, zero padded."""
    b2 = data.reshape(data.shape[-2:])
    if trans_b:
        b2 = b2.T
    padded = np.zeros((plan.k, plan.np_), np.float32)
    padded[:, :plan.n] = b2
    return np.ascontiguousarray(
        padded.reshape(plan.k, plan.np_ // plan.nr, plan.nr).transpose(1, 0, 2))


def _c_at(c: te.Tensor, cshape: tuple[int, ...], i: Expr, j: Expr) -> Expr:
    full = (1,) * (2 - len(cshape)) + cshape
    idx = (ir.IntImm(0) if full[0] == 1 else i, ir.IntImm(0) if full[1] == 1 else j)
    return c[idx[2 - len(cshape):]] if cshape else c[(0,)]


def gemm_compute(node: Node, plan: GemmPlan, ops: _Operands) -> tuple[list[te.Tensor],
                                                                      list[Value], te.Tensor]:
    """The tensors of the packed GEMM: (kernel inputs + output, input values, product)."""
    a_v, b_v = node.inputs[0], node.inputs[1]
    nr, mp, np_, k = plan.nr, plan.mp, plan.np_, plan.k
    a = te.placeholder(a_v.shape, "float32", "A")
    inputs, values = [a], [a_v]
    trans_b = node.op == "Gemm" and bool(attrs_of(node)["transB"])
    nb = len(ops.batch)
    if b_v.data is not None and not ops.b_batched:
        packed = packed_constant(b_v, "_packed",
                                 lambda w: _pack_b_const(w, ops, plan, trans_b))
        bp = te.placeholder(packed.shape, "float32", "B_packed")
        inputs.append(bp)
        values.append(packed)

        def b_at(bidx: tuple, kk: Expr, j: Expr) -> Expr:
            return bp[j // nr, kk, j % nr]
    else:
        b = te.placeholder(b_v.shape, "float32", "B")
        inputs.append(b)
        values.append(b_v)
        bshape = ops.batch if ops.b_batched else ()
        zero = ir.FloatImm(0.0, "float32")

        def pack(*idx: Expr) -> Expr:
            x, kk, z = idx[-3:]
            j = x * nr + z
            inb = ops.b_at(b, idx[:-3], kk, te.min(j, ops.n - 1))
            return te.if_then_else(j < ops.n, inb, zero) if np_ != ops.n else inb

        bp = te.compute(bshape + (np_ // nr, k, nr), pack, name="B_packed")

        def b_at(bidx: tuple, kk: Expr, j: Expr) -> Expr:
            return bp[(bidx if ops.b_batched else ()) + (j // nr, kk, j % nr)]
    if mp != ops.m:
        zero = ir.FloatImm(0.0, "float32")
        ap = te.compute(ops.batch + (mp, k), lambda *idx: te.if_then_else(
            idx[-2] < ops.m, ops.a_at(a, idx[:-2], te.min(idx[-2], ops.m - 1), idx[-1]),
            zero), name="A_pad")

        def a_at(bidx: tuple, i: Expr, kk: Expr) -> Expr:
            return ap[bidx + (i, kk)]
    else:
        def a_at(bidx: tuple, i: Expr, kk: Expr) -> Expr:
            return ops.a_at(a, bidx, i, kk)
    r = te.reduce_axis((0, k), name="k")
    needs_epilogue = (mp != ops.m or np_ != ops.n or ops.alpha != 1.0 or ops.beta != 0.0)
    prod = te.compute(ops.batch + (mp, np_), lambda *idx: te.sum(
        a_at(idx[:nb], idx[-2], r) * b_at(idx[:nb], r, idx[-1]), axis=r),
        name="C_prod" if needs_epilogue else "C")
    if not needs_epilogue:
        return inputs + [prod], values, prod
    c_t = None
    if ops.c_value is not None and ops.beta != 0.0:
        c_t = te.placeholder(ops.c_value.shape or (1,), "float32", "C_in")
        inputs.append(c_t)
        values.append(ops.c_value)

    def epi(*idx: Expr) -> Expr:
        v = prod[idx]
        if ops.alpha != 1.0:
            v = v * ir.FloatImm(ops.alpha, "float32")
        if c_t is not None:
            cv = _c_at(c_t, tuple(ops.c_value.shape), idx[-2], idx[-1])
            v = v + (cv if ops.beta == 1.0 else cv * ir.FloatImm(ops.beta, "float32"))
        return v

    out = te.compute(ops.batch + (ops.m, ops.n), epi, name="C")
    return inputs + [out], values, prod


def schedule_gemm(sch: Schedule, plan: GemmPlan, p: CpuParams, nbatch: int,
                  prod_name: str) -> None:
    """Block, tile, vectorize and unroll the product (see the module docstring)."""
    blk = sch.get_block(prod_name)
    loops = sch.get_loops(blk)
    bl, (i, j, kk) = loops[:nbatch], loops[nbatch:]
    i0, i1, i2 = sch.split(i, [None, plan.mc // plan.mr, plan.mr])
    j0, j1 = sch.split(j, [None, plan.nr])
    sch.reorder(*bl, i0, j0, i1, kk, i2, j1)
    out = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(out, i1)
    init = sch.decompose_reduction(blk, kk)
    lanes = min(plan.lanes, plan.nr)
    for b in (blk, init, out):
        # the block's own loops: the initialisation and the write-back sit under i1, and a
        # loop of extent 1 of theirs is elided (mr = 1 or nr = 1): never the shared ones
        own = sch.get_loops(b)[nbatch + 3:] if b is not blk else [i2, j1]
        if not own:
            continue
        cv, vl = sch.split(own[-1], [None, lanes])
        sch.vectorize(vl)
        sch.unroll(cv)
        if len(own) > 1:
            sch.unroll(own[-2])
    if p.cores > 1:
        sch.parallel(sch.fuse(*bl, i0, j0))
    _schedule_copies(sch, p, plan, skip=prod_name)


def _schedule_copies(sch: Schedule, p: CpuParams, plan: GemmPlan, skip: str) -> None:
    """Vectorize the packing / padding / epilogue stages along their last axis."""
    for name in ("B_packed", "A_pad", "C"):
        if name == skip:
            continue
        try:
            b = sch.get_block(name)
        except Exception:  # noqa: BLE001 - the stage is absent for this problem
            continue
        loops = sch.get_loops(b)
        last = loops[-1]
        ext = _extent(sch, last)
        lanes = plan.lanes
        if ext is not None and ext % lanes == 0 and ext >= lanes:
            _, v = sch.split(last, [None, lanes])
            sch.vectorize(v)
        if p.cores > 1 and len(loops) > 1:
            sch.parallel(loops[0])


def _extent(sch: Schedule, loop: Any) -> int | None:
    f = sch.get(loop)
    return int(f.extent.value) if isinstance(f.extent, ir.IntImm) else None


def _generic(node: Node, target: Target) -> OpSchedule:
    from toolchain.schedules.generic import ops as cpu_ops
    from toolchain.topi.registry import node_compute

    nc = node_compute(node)
    sch = cpu_ops.schedule_cpu(te.create_prim_func(nc.inputs + nc.outputs), target)
    return OpSchedule(sch, list(nc.input_values), list(node.outputs),
                      {"schedule": "generic", "reason": "1-D or non-float32 product"})


@value_blind
def schedule_dense(node: Node, target: str | Target | None = None) -> OpSchedule:
    """The default CPU schedule of a MatMul / Gemm node (see the module docstring)."""
    t = resolve_target(target)
    ops = _operands(node)
    if ops is None:
        return _generic(node, t)
    p = cpu_params(t)
    plan = plan_gemm(ops.m, ops.n, ops.k, p)
    const_b = node.inputs[1].data is not None and not ops.b_batched
    trans = "".join(f"{k}{int(attrs_of(node)[k])}" for k in ("transA", "transB")) \
        if node.op == "Gemm" else ""
    plan = tuned_gemm(plan, decide(gemm_space(plan, p, gemm_workload(
        node.op.lower(), ops.batch, ops.m, ops.n, ops.k, p,
        f"b={'const' if const_b else 'runtime'}{trans}"))))
    tensors, values, prod = gemm_compute(node, plan, ops)
    sch = Schedule(te.create_prim_func(tensors, name=f"dense_{ops.m}x{ops.n}x{ops.k}"))
    schedule_gemm(sch, plan, p, len(ops.batch), prod.name)
    info = {"schedule": "dense", "mr": plan.mr, "nr": plan.nr, "mc": plan.mc,
            "packed_b": values[1].data is not None, "padded": (plan.mp != ops.m,
                                                              plan.np_ != ops.n)}
    return OpSchedule(sch, values, list(node.outputs), info)
