"""Turn a tensor-expression DAG into a TIR :class:`~toolchain.tir.ir.PrimFunc` with blocks.

Each ``te.compute`` becomes one block under a loop nest (one loop per axis, spatial axes
first, then reduction axes). A reduction block gets an ``init`` statement storing the
identity and a body ``C[...] = combine(C[...], source)``. Tensors that are neither
inputs nor outputs become ``alloc_buffers`` of the root block.

>>> from toolchain import te
>>> A = te.placeholder((8, 8), name="A")
>>> k = te.reduce_axis((0, 8), name="k")
>>> B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
>>> print(te.create_prim_func([A, B]))  # doctest: +NORMALIZE_WHITESPACE
@T.prim_func
def main(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8,), "float32")):
    for i, k in T.grid(8, 8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            vk = T.axis.reduce(8, k)
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolchain.errors import OptionError
from toolchain.te.tensor import AxisVar, ComputeOp, PlaceholderOp, Reduce, Tensor
from toolchain.tir import ir
from toolchain.tir.analysis import access_regions
from toolchain.tir.functor import substitute


def _topo(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()
    for t in outputs:
        _topo_visit(t, seen, order)
    return order


def _topo_visit(t: Tensor, seen: set[int], order: list[Tensor]) -> None:
    # not a closure calling itself (a reference cycle left to the cyclic collector)
    if id(t) in seen:
        return
    seen.add(id(t))
    if isinstance(t.op, ComputeOp):
        for inp in t.op.input_tensors():
            _topo_visit(inp, seen, order)
    order.append(t)


def _block_for(t: Tensor, block_name: str) -> ir.Stmt:
    op = t.op
    assert isinstance(op, ComputeOp)
    body = op.body
    axes: list[AxisVar] = list(op.axis) + list(op.reduce_axis)
    loop_vars = [ir.Var(a.name) for a in axes]
    block_vars = [ir.Var("v" + a.name) for a in axes]
    vmap = dict(zip(axes, block_vars, strict=False))
    out_idx = tuple(block_vars[: len(op.axis)])
    store_of = t.buffer
    if isinstance(body, Reduce):
        src = substitute(body.source, vmap)
        cond = substitute(body.condition, vmap)
        cur = ir.BufferLoad(store_of, out_idx)
        upd = ir.convert(body.combiner.combine(cur, src))
        if not ir.is_const_int(cond, 1):
            upd = ir.Select(cond, upd, cur)
        init = ir.BufferStore(store_of, substitute(body.init, vmap), out_idx)
        stmt: ir.Stmt = ir.BufferStore(store_of, upd, out_idx)
    else:
        init = None
        stmt = ir.BufferStore(store_of, substitute(body, vmap), out_idx)
    iter_vars = tuple(
        ir.IterVar(bv, ir.Range(a.dom.min, a.dom.extent),
                   "reduce" if a.iter_type == "reduce" else "spatial")
        for a, bv in zip(axes, block_vars, strict=False))
    ranges = {iv.var: iv.dom for iv in iter_vars}
    excl = (store_of,) if init is not None else ()
    reads, writes = access_regions(stmt, ranges, exclude_reads=excl)
    if init is not None:  # an init that reads (a bias the accumulators start from)
        init_reads, _ = access_regions(init, ranges, exclude_reads=excl)
        reads = [*reads, *(r for r in init_reads
                           if all(r.buffer is not q.buffer for q in reads))]
    ann = dict(op.attrs)
    if op.tag:
        ann["tag"] = op.tag
    block = ir.Block(block_name, iter_vars, tuple(reads), tuple(writes), stmt, init,
                     annotations=ann)
    realize: ir.Stmt = ir.BlockRealize(tuple(loop_vars), ir.IntImm(1, "bool"), block)
    for lv, a in reversed(list(zip(loop_vars, axes, strict=False))):
        realize = ir.For(lv, a.dom.min, a.dom.extent, "serial", realize)
    return realize


def create_prim_func(args: Sequence[Any], name: str = "main") -> ir.PrimFunc:
    """Build a PrimFunc whose params are ``args`` (Tensors, and scalar ``te.var``s).

    Every compute reachable from the Tensor args becomes a block; computes that are not
    args become intermediate buffers.
    """
    tensors = [a for a in args if isinstance(a, Tensor)]
    for a in args:
        if not isinstance(a, (Tensor, ir.Var)):
            raise OptionError(
                f"create_prim_func: argument {a!r} is neither a tensor nor a te.var")
    order = _topo(tensors)
    arg_ids = {id(t) for t in tensors}
    for t in order:
        if isinstance(t.op, PlaceholderOp) and id(t) not in arg_ids:
            raise OptionError(
                f"create_prim_func: placeholder {t.name!r} is used but is not in the "
                f"argument list; pass it: create_prim_func([{t.name}, ...])")
    used: dict[str, int] = {}
    stmts = []
    for t in order:
        if isinstance(t.op, ComputeOp):
            n = t.op.name
            bname = n if n not in used else f"{n}_{used[n]}"
            used[n] = used.get(n, 0) + 1
            stmts.append(_block_for(t, bname))
    if not stmts:
        raise OptionError("create_prim_func: no te.compute reachable from the arguments")
    allocs = tuple(t.buffer for t in order
                   if isinstance(t.op, ComputeOp) and id(t) not in arg_ids)
    root = ir.Block("root", (), (), (), ir.seq(*stmts), None, allocs)
    params = tuple(a.buffer if isinstance(a, Tensor) else a for a in args)
    return ir.PrimFunc(params, ir.BlockRealize((), ir.IntImm(1, "bool"), root), name,
                       {"global_symbol": name})
