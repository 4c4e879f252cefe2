"""Access analysis for the CPU schedules: which loops a block's reads and writes walk,
and how far each loop's step moves in memory (the strides that decide loop order,
vectorization and fusion in :mod:`toolchain.schedules.generic.ops`).

>>> from toolchain import te
>>> from toolchain.tir.schedule import Schedule
>>> A = te.placeholder((4, 8), name="A")
>>> B = te.compute((8, 4), lambda i, j: A[j, i], name="B")
>>> sch = Schedule(te.create_prim_func([A, B]))
>>> realize, path = find_block(sch, "B")
>>> acc = block_access(realize, st.loops_of(path))
>>> sorted(acc.write.values()), sorted(acc.read.values())
([1, 4], [1, 8])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import post_order_visit, substitute, uses_var
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st


def find_block(sch: Schedule, name: str) -> tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]:
    """Block ``name`` of ``sch`` and the path of statements down to it."""
    found = st.find_block(sch.mod, name)
    if found is None:
        raise ScheduleError(f"no block {name!r}")
    return found


def is_reduce(blk: ir.Block) -> bool:
    return any(iv.iter_type == "reduce" for iv in blk.iter_vars)


def loads_of(node: Any, buf: ir.Buffer) -> list[ir.BufferLoad]:
    out: list[ir.BufferLoad] = []
    post_order_visit(node, lambda x: out.append(x) if isinstance(x, ir.BufferLoad)
                     and x.buffer is buf else None)
    return out


def first_accesses(node: Any) -> tuple[ir.BufferStore | None, dict[int, ir.BufferLoad]]:
    """The first ``BufferStore`` under ``node`` and the first ``BufferLoad`` of each
    buffer (by ``id`` of the buffer), in the order of :func:`post_order_visit`: what
    ``loads_of(node, buf)[0]`` gives for every ``buf`` at once, in one walk (a block
    reading several buffers walked its whole body once per buffer).

    >>> from toolchain import te
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + A[3 - i], name="B")
    >>> realize = find_block(Schedule(te.create_prim_func([A, B])), "B")[0]
    >>> store, loads = first_accesses(realize.block.body)
    >>> store.buffer.name, [str(ld) for ld in loads.values()]
    ('B', ['A[vi]'])
    """
    stores: list[ir.BufferStore] = []
    loads: dict[int, ir.BufferLoad] = {}

    def seen(x: Any) -> None:
        if isinstance(x, ir.BufferLoad):
            loads.setdefault(id(x.buffer), x)
        elif isinstance(x, ir.BufferStore):
            stores.append(x)

    post_order_visit(node, seen)
    return (stores[0] if stores else None), loads


def const_shape(buf: ir.Buffer) -> list[int] | None:
    dims = []
    for s in buf.shape:
        if not isinstance(s, ir.IntImm):
            return None
        dims.append(int(s.value))
    return dims


def access_strides(indices: Sequence[ir.PrimExpr], buf: ir.Buffer, vmap: dict[ir.Var, Any],
             loop_vars: Iterable[ir.Var]) -> dict[ir.Var, int | None]:
    """Flat-memory stride of each loop var in ``buf[indices]`` (``None``: not affine).

    ``vmap`` maps block vars to their bindings (expressions of loop vars)."""
    shape = const_shape(buf)
    loop_vars = list(loop_vars)
    if shape is None:
        return dict.fromkeys(loop_vars)
    flat: ir.PrimExpr = ir.IntImm(0)
    for idx, d in zip(indices, shape, strict=True):
        flat = flat * d + substitute(idx, vmap)
    lin = arith.to_lin(arith.simplify(flat))
    out: dict[ir.Var, int | None] = {}
    for v in loop_vars:
        if lin is None:
            out[v] = None
            continue
        coeff, clean = 0, True
        for atom, c in lin.terms.values():
            if atom is v:
                coeff = c
            elif uses_var(atom, v):
                clean = False
        out[v] = coeff if clean else None
    return out


@dataclass
class Access:
    """Strides of one block's output and main (largest) input per enclosing loop var."""

    write: dict[ir.Var, int | None]
    read: dict[ir.Var, int | None]
    reads: list[dict[ir.Var, int | None]]


def block_access(realize: ir.BlockRealize, loops: Sequence[ir.For]) -> Access:
    blk = realize.block
    vmap = {iv.var: v for iv, v in zip(blk.iter_vars, realize.iter_values, strict=True)}
    lvars = [f.loop_var for f in loops]
    out_buf = blk.writes[0].buffer
    store, first_loads = first_accesses(blk.body)
    write = (access_strides(store.indices, out_buf, vmap, lvars) if store is not None
             else dict.fromkeys(lvars))
    reads = []
    main: dict[ir.Var, int | None] = dict.fromkeys(lvars, 0)
    size = -1
    for region in blk.reads:
        if region.buffer is out_buf:
            continue
        load = first_loads.get(id(region.buffer))
        if load is None:
            continue
        s = access_strides(load.indices, region.buffer, vmap, lvars)
        reads.append(s)
        n = math.prod(const_shape(region.buffer) or [1 << 30])
        if n > size:
            size, main = n, s
    return Access(write, main, reads)


def loop_extent(f: ir.For) -> int | None:
    return int(f.extent.value) if isinstance(f.extent, ir.IntImm) else None


def feeds_reduce(realize: ir.BlockRealize, var: ir.Var) -> bool:
    return any(iv.iter_type == "reduce" and uses_var(v, var)
               for iv, v in zip(realize.block.iter_vars, realize.iter_values, strict=True))


def exclusive_loops(sch: Schedule, name: str) -> list[ir.For]:
    """The loops around block ``name`` that hold no other block (innermost suffix)."""
    _, path = find_block(sch, name)
    loops = st.loops_of(path)
    k = len(loops)
    while k > 0 and len(st.blocks_under(loops[k - 1])) == 1:
        k -= 1
    return loops[k:]


__all__ = ["Access", "access_strides", "block_access", "const_shape", "exclusive_loops",
           "feeds_reduce", "find_block", "first_accesses", "is_reduce", "loads_of", "loop_extent"]
