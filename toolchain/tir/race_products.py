"""A tensor intrinsic's element loops run as whole numpy arrays in a race run.

The race checker (:mod:`toolchain.tir.race`) runs each call of a tensor intrinsic as its
declared behaviour, loops over the operands' elements (``behaviour_of_call``), with every
shared access recorded. One ``wgmma`` is 64 x 64 x 64 iterations: run by the TIR
interpreter one element at a time it was two thirds of a race run. :func:`plan_of` takes
such an instrumented loop nest (constant extents, one store or one load in its body) and
:func:`run_plan` runs it as array operations with the same outcome:

* the values: every loop variable an ``arange`` over its own axis, each expression once
  over the whole grid of iterations (the same numpy operations on the same dtypes as the
  interpreter's scalars); an accumulation ``C[o] = C[o] + e`` adds each element's terms
  in iteration order (``np.add.accumulate`` along the terms of one element, rounding after
  each add as the scalar loop does; where elements take different numbers of terms, the
  k-th terms of all elements at once, k in turn); an assignment keeps each element's last
  value;
* the race checker's records: every shared access of every iteration, in the order the
  interpreter makes them (an iteration's loads left to right, then its store), given to
  the tracker in one call (:meth:`~toolchain.tir.race._Tracker.access_batch`);
* an index out of bounds runs the element loops
  instead (the plan touches nothing before it decides), so an error is the interpreter's
  own error with its message. So do an operand that overlaps the output and an
  accumulation of uneven counts of more than 256 terms.

Before (the race checker's instrumented loops of a fill, one element at a time)::

    for i, j in T.grid(16, 16):
        C[i * 32 + j + o] = T.float32(0.0)

after (``kiln_race_product`` runs plan 0 on the arrays and returns False; where it
returns True the loops run as before)::

    if kiln_race_product(0, o, T.address_of(C[0])):
        for i, j in T.grid(16, 16):
            C[i * 32 + j + o] = T.float32(0.0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.tir import ir
from toolchain.tir.functor import post_order_visit

#: the race checker's access hook (``S[kiln_race_access(index, site, thread...)]``)
ACCESS = "kiln_race_access"
#: the extern that runs a plan (``kiln_race_product(plan, free vars..., buffers...)``)
PRODUCT = "kiln_race_product"

_NP = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
       "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
       "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64}
#: the most terms of one element an accumulation with uneven counts adds (one array
#: operation per term): more run as the element loops
_MAX_TERMS = 256
_ARITH = (ir.Add, ir.Sub, ir.Mul, ir.FloorDiv, ir.FloorMod)


class _Fallback(Exception):
    """The plan cannot run this call exactly: the element loops run instead."""


@dataclass(frozen=True)
class Plan:
    """One instrumented loop nest: its loops, its body (a store, or a load evaluated for
    its access), the variables it takes from outside and the buffers it touches."""

    loops: tuple[ir.For, ...]
    body: ir.Stmt
    free: tuple[ir.Var, ...]
    buffers: tuple[ir.Buffer, ...]
    #: the store's ``C[o] + e`` (its ``e``), for an accumulating store; None otherwise
    term: ir.PrimExpr | None

    def call(self, index: int) -> ir.PrimExpr:
        """The ``kiln_race_product`` call that runs this plan (``index`` in the list)."""
        ptrs = [ir.Call("handle", "tir.address_of", [ir.BufferLoad(b, (ir.IntImm(0),))])
                for b in self.buffers]
        return ir.Call("bool", PRODUCT, [ir.IntImm(index), *self.free, *ptrs])


def _supported(e: ir.PrimExpr, loads: list[ir.BufferLoad]) -> bool:
    """Whether the plan's evaluator knows every node of ``e`` (loads collected)."""
    if isinstance(e, (ir.Var, ir.IntImm, ir.FloatImm)):
        return True
    if isinstance(e, (*_ARITH, ir.Min, ir.Max)):
        return _supported(e.a, loads) and _supported(e.b, loads)
    if isinstance(e, ir.Cast):
        return ir.lanes_of(e.dtype) == 1 and ir.element_of(e.dtype) in _NP and \
            _supported(e.value, loads)
    if isinstance(e, ir.BufferLoad):
        loads.append(e)
        return len(e.indices) == 1 and len(e.buffer.shape) == 1 and \
            ir.element_of(e.buffer.dtype) in _NP and _supported(e.indices[0], loads)
    if isinstance(e, ir.Call) and e.op == ACCESS and len(e.args) >= 2 and \
            isinstance(e.args[1], ir.IntImm):
        return all(_supported(a, loads) for a in (e.args[0], *e.args[2:]))
    return False


def plan_of(stmt: ir.Stmt) -> Plan | None:
    """The plan of an instrumented loop nest, or None where it is not one a plan runs
    (a loop of a non-constant extent, a body other than one store or load, an
    expression the evaluator does not know)."""
    loops: list[ir.For] = []
    body = stmt
    while isinstance(body, ir.For):
        if ir.const_int(body.min) is None or ir.const_int(body.extent) is None:
            return None
        loops.append(body)
        body = body.body
    if not loops:
        return None
    loads: list[ir.BufferLoad] = []
    term = None
    if isinstance(body, ir.BufferStore):
        buf = body.buffer
        if len(body.indices) != 1 or len(buf.shape) != 1 or \
                ir.element_of(buf.dtype) not in _NP or \
                not _supported(body.value, loads) or not _supported(body.indices[0], loads):
            return None
        value = body.value
        if isinstance(value, ir.Cast) and value.dtype == buf.dtype:
            value = value.value
        own = None
        if isinstance(value, ir.Add) and value.dtype == buf.dtype:
            for mine, other in ((value.a, value.b), (value.b, value.a)):
                if isinstance(mine, ir.BufferLoad) and mine.buffer.data is buf.data:
                    own, term = mine, other
                    break
        # the store's buffer read anywhere but as the accumulation's own load: elements
        # would depend on each other within the call
        if any(ld.buffer.data is buf.data and ld is not own for ld in loads):
            return None
    elif isinstance(body, ir.Evaluate) and isinstance(body.value, ir.BufferLoad):
        if not _supported(body.value, loads):
            return None
    else:
        return None
    bound = {id(lp.loop_var) for lp in loops}
    free: dict[int, ir.Var] = {}
    bufs: dict[int, ir.Buffer] = {}

    def grab(n: object) -> None:
        if isinstance(n, ir.Var) and id(n) not in bound:
            free.setdefault(id(n), n)
        elif isinstance(n, (ir.BufferLoad, ir.BufferStore)):
            bufs.setdefault(id(n.buffer), n.buffer)

    post_order_visit(body, grab)
    return Plan(tuple(loops), body, tuple(free.values()), tuple(bufs.values()), term)


def _cast(x: Any, dtype: str) -> Any:
    """The interpreter's cast, on arrays (a float to an integer type truncates)."""
    t = _NP[ir.element_of(dtype)]
    arr = np.asarray(x)
    if arr.dtype == t:
        return arr
    if np.dtype(t).kind in "iu" and arr.dtype.kind == "f":
        arr = np.trunc(arr)
    return arr.astype(t)


class _Run:
    """One run of a plan: the environment, the arrays, the accesses in order."""

    def __init__(self, plan: Plan, args: tuple[Any, ...]) -> None:
        nfree = len(plan.free)
        self.env: dict[int, Any] = {id(v): a for v, a in zip(plan.free, args[:nfree],
                                                              strict=True)}
        self.arrays: dict[int, np.ndarray] = {
            id(b): a.array for b, a in zip(plan.buffers, args[nfree:], strict=True)}
        n = len(plan.loops)
        self.shape = tuple(ir.const_int(lp.extent) for lp in plan.loops)
        for d, lp in enumerate(plan.loops):
            axis = [1] * n
            axis[d] = self.shape[d]
            lo = ir.const_int(lp.min)
            self.env[id(lp.loop_var)] = np.arange(lo, lo + self.shape[d],
                                                  dtype=np.int64).reshape(axis)
        #: (site, thread, flat indices over the grid) of each shared access, in order
        self.records: list[tuple[int, tuple[Any, ...], np.ndarray]] = []
        #: (buffer, array, indices) of every load; each load's indices by its node
        self.loads: list[tuple[ir.Buffer, np.ndarray, Any]] = []
        self.load_at: dict[int, Any] = {}

    def flat(self, x: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(x), self.shape).ravel()

    def index(self, e: ir.PrimExpr, arr: np.ndarray) -> Any:
        idx = self.ev(e)
        if np.asarray(idx).dtype.kind not in "iu":
            raise _Fallback
        lo, hi = np.min(idx), np.max(idx)
        if lo < 0 or hi >= arr.shape[0]:  # the interpreter's IndexError, from the loops
            raise _Fallback
        return idx

    def ev(self, e: ir.PrimExpr) -> Any:  # noqa: C901 - one branch per node kind
        if isinstance(e, ir.Var):
            return self.env[id(e)]
        if isinstance(e, ir.IntImm):
            return e.value
        if isinstance(e, ir.FloatImm):
            return _NP[e.dtype](float(e.value))
        if isinstance(e, ir.Add):
            return self.ev(e.a) + self.ev(e.b)
        if isinstance(e, ir.Sub):
            return self.ev(e.a) - self.ev(e.b)
        if isinstance(e, ir.Mul):
            return self.ev(e.a) * self.ev(e.b)
        if isinstance(e, ir.FloorDiv):
            return self.ev(e.a) // self.ev(e.b)
        if isinstance(e, ir.FloorMod):
            return self.ev(e.a) % self.ev(e.b)
        if isinstance(e, (ir.Min, ir.Max)):
            fn = np.minimum if isinstance(e, ir.Min) else np.maximum
            return _cast(fn(self.ev(e.a), self.ev(e.b)), e.dtype)
        if isinstance(e, ir.Cast):
            return _cast(self.ev(e.value), e.dtype)
        if isinstance(e, ir.BufferLoad):
            arr = self.arrays[id(e.buffer)]
            idx = self.index(e.indices[0], arr)
            self.loads.append((e.buffer, arr, idx))
            self.load_at[id(e)] = idx
            return arr[idx]
        # a shared access: recorded (the thread is the same for every iteration)
        idx = self.ev(e.args[0])
        thread = tuple(self.ev(a) for a in e.args[2:])
        if any(isinstance(t, np.ndarray) for t in thread):
            raise _Fallback
        self.records.append((int(e.args[1].value), thread, idx))
        return idx


def run_plan(plan: Plan, access_batch: Callable[..., None], args: tuple[Any, ...]) -> bool:
    """Run ``plan`` on the interpreter's arrays (``args``: the free variables' values, then
    ``_Addr`` of each buffer); False when done, True when the element loops must run
    instead (nothing was touched). ``access_batch(columns, indices)`` records the shared
    accesses: ``columns`` the (site, thread) of each, ``indices`` one row an iteration."""
    r = _Run(plan, args)
    body = plan.body
    writes = None
    try:
        if isinstance(body, ir.Evaluate):
            r.ev(body.value)
        else:
            out = r.arrays[id(body.buffer)]
            own = None
            if plan.term is not None:  # C[o] + e: evaluated left to right, as the loops do
                value = body.value.value if isinstance(body.value, ir.Cast) else body.value
                first = r.ev(value.a)
                second = r.ev(value.b)
                term = first if value.a is plan.term else second
                own = r.flat(r.load_at[id(value.b if value.a is plan.term else value.a)])
            else:
                term = r.ev(body.value)
            idx = r.index(body.indices[0], out)
            writes = _writes(r, plan, out, r.flat(idx), term, own)
            for buf, arr, _ in r.loads:  # an operand overlapping the output: one at a time
                if buf.data is not body.buffer.data and np.may_share_memory(arr, out):
                    raise _Fallback
    except _Fallback:
        return True
    if writes is not None:
        at, values = writes
        out[at] = values
    if r.records:
        access_batch([(s, t) for s, t, _ in r.records],
                     np.stack([r.flat(i) for _, _, i in r.records], axis=1))
    return False


def _writes(r: _Run, plan: Plan, out: np.ndarray, at: np.ndarray, value: Any,
            own: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The elements of ``out`` the loops leave and their values."""
    dt = plan.body.buffer.dtype
    if own is None:  # an assignment: each element's last value
        vals = r.flat(_cast(value, dt))
        _, first = np.unique(at[::-1], return_index=True)
        last = at.size - 1 - first
        return at[last], vals[last]
    if not np.array_equal(own, at):
        raise _Fallback
    term = np.asarray(value)
    if term.dtype != out.dtype:  # (the scalar loop would add in another type)
        raise _Fallback
    term = r.flat(term)
    order = np.argsort(at, kind="stable")  # each element's terms, in iteration order
    u, start, counts = np.unique(at[order], return_index=True, return_counts=True)
    term = term[order]
    if counts.min() == counts.max():  # as many terms each: one sequential sum per row
        terms = term.reshape(u.size, counts[0])
        acc = np.add.accumulate(np.concatenate([out[u][:, None], terms], axis=1), axis=1,
                                dtype=out.dtype)
        return u, acc[:, -1]
    if counts.max() > _MAX_TERMS:
        raise _Fallback
    total = out[u]  # (a copy) the r-th term of every element that has one, in turn
    for k in range(int(counts.max())):
        has = counts > k
        total[has] = total[has] + term[start[has] + k]
    return u, total


__all__ = ["ACCESS", "PRODUCT", "Plan", "plan_of", "run_plan"]
