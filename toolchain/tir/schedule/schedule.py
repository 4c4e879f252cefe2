"""The interactive :class:`Schedule` (TensorIR style).

A schedule holds the current :class:`~toolchain.tir.ir.PrimFunc` (``sch.mod`` /
``sch.func``), hands out handles to blocks (:class:`BlockRV`) and loops (:class:`LoopRV`),
and applies primitives one call at a time: each call checks its preconditions (raising
:class:`~toolchain.errors.ScheduleError` with the block, loops, extents, the rule and a fix),
transforms the function, and returns new handles. Every call is recorded in ``sch.trace``.

A ``Schedule`` is a thin front over a :class:`~toolchain.tir.schedule.state.ScheduleState`
(``sch.state``), which owns the function and the records of consumed loops and removed
blocks. The primitives are functions of that state, one group per module (their
docstrings show the IR before, the call, and the IR after): :mod:`.queries` (get_block,
get_loops, ...), :mod:`.loops` (split, fuse, reorder, tile, parallel, vectorize, unroll,
bind, annotate, pragma), :mod:`.compute_location` (compute_at, reverse_compute_at,
compute_inline, reverse_compute_inline), :mod:`.cache` (cache_read, cache_write,
set_scope, set_dtype, storage_align, transform_layout), :mod:`.reduction`
(decompose_reduction, rfactor) and
:mod:`.tensorize` (blockize, tensorize, TensorIntrin).

>>> from toolchain import te
>>> A = te.placeholder((128,), name="A")
>>> B = te.compute((128,), lambda i: A[i] * 2.0, name="B")
>>> sch = Schedule(te.create_prim_func([A, B]))
>>> (i,) = sch.get_loops(sch.get_block("B"))
>>> io, ii = sch.split(i, factors=[None, 32])
>>> sch.vectorize(ii)
>>> print(sch.mod)  # doctest: +NORMALIZE_WHITESPACE
@T.prim_func
def main(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for i_0 in range(4):
        for i_1 in T.vectorized(32):
            with T.block("B"):
                vi = T.axis.spatial(128, i_0 * 32 + i_1)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * T.float32(2.0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.schedule import cache, compute_location, loops, queries, reduction
from toolchain.tir.schedule import double_buffer as double_buffer_mod
from toolchain.tir.schedule import tensorize as tensorize_mod
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.state import ScheduleState
from toolchain.tir.schedule.trace import Instruction, RVRef, Trace

__all__ = ["BlockRV", "LoopRV", "Schedule"]


def _describe(v: Any) -> str:
    if isinstance(v, (LoopRV, BlockRV)):
        return v.name
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_describe(x) for x in v) + "]"
    return repr(v)


def _primitive(impl: Callable[..., Any]) -> Callable[..., Any]:
    """Make a traced Schedule method from a primitive implementation ``impl(state, ...)``.

    The call runs inside ``state.applying(...)``, so a failed primitive leaves the state as
    it was, and is recorded in the trace only when it succeeds.
    """

    @functools.wraps(impl)
    def method(self: Schedule, *args: Any, **kwargs: Any) -> Any:
        parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in
                                                kwargs.items()]
        what = f"{impl.__name__}({', '.join(parts)}) at step {len(self._trace) + 1}"
        with self._state.applying(what):
            out = impl(self._state, *args, **kwargs)
        self._record(impl.__name__, args, kwargs, out)
        return out

    return method


class Schedule:
    """An interactive schedule of one PrimFunc (see the module docstring).

    ``target`` (a name such as ``"cuda-sm80"``, a :class:`~toolchain.target.Target`, or
    None) supplies the limits checked by ``bind`` and the GPU memory checks and the extra
    memory scopes that ``cache_read``/``cache_write`` accept.
    """

    def __init__(self, func: ir.PrimFunc, target: Any = None) -> None:
        if not isinstance(func, ir.PrimFunc):
            raise ScheduleError(
                f"Schedule expects a PrimFunc (from te.create_prim_func), got "
                f"{type(func).__name__}")
        self._state = ScheduleState(func, _load_target(target))
        self._trace = Trace()
        # trace names of the handles handed out; _keep holds them so their ids stay unique
        self._rv_names: dict[int, str] = {}
        self._keep: list[Any] = []

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> ScheduleState:
        """The :class:`~toolchain.tir.schedule.state.ScheduleState` the primitives edit."""
        return self._state

    @property
    def mod(self) -> ir.PrimFunc:
        """The current PrimFunc (``print(sch.mod)`` shows it)."""
        return self._state.func

    @property
    def func(self) -> ir.PrimFunc:
        """Same as :attr:`mod`."""
        return self._state.func

    @property
    def target(self) -> Any:
        """The :class:`~toolchain.target.Target` the primitives check against, or None."""
        return self._state.target

    @property
    def trace(self) -> Trace:
        """Every primitive applied so far (replay with ``trace.apply_to(func)``)."""
        return self._trace

    def copy(self) -> Schedule:
        """An independent schedule in the same state (handles stay valid in both)."""
        new = Schedule.__new__(Schedule)
        new._state = self._state.copy()
        new._trace = self._trace.copy()
        new._rv_names = dict(self._rv_names)
        new._keep = list(self._keep)
        return new

    def __str__(self) -> str:
        return str(self._state.func)

    # ------------------------------------------------------------------ trace (internal)
    def _record(self, kind: str, args: tuple, kwargs: dict, out: Any) -> None:
        outs = list(out) if isinstance(out, (list, tuple)) else ([] if out is None else [out])
        names = tuple(self._name_rv(o) for o in outs)
        ref = self._ref
        self._trace.append(Instruction(kind, tuple(ref(a) for a in args),
                                       {k: ref(v) for k, v in kwargs.items()}, names,
                                       isinstance(out, (list, tuple))))

    def _ref(self, v: Any) -> Any:
        # a method, not a recursive closure: a closure that calls itself is a reference
        # cycle (function -> cell -> function) holding ``self``, so every Schedule, with
        # all its IR, waited for the cyclic garbage collector instead of being freed at once
        if isinstance(v, (LoopRV, BlockRV)):
            name = self._rv_names.get(id(v))
            if name is None:
                name = self._name_rv(v)
            return RVRef(name)
        if isinstance(v, (list, tuple)):
            return [self._ref(x) for x in v]
        return v

    def _name_rv(self, rv: Any) -> str:
        if id(rv) not in self._rv_names:
            prefix = "b" if isinstance(rv, BlockRV) else "l"
            self._rv_names[id(rv)] = f"{prefix}{len(self._rv_names)}"
            self._keep.append(rv)
        return self._rv_names[id(rv)]

    # ------------------------------------------------------------------ queries
    get_block = _primitive(queries.get_block)
    get_loops = _primitive(queries.get_loops)
    get_child_blocks = _primitive(queries.get_child_blocks)
    get_producers = _primitive(queries.get_producers)
    get_consumers = _primitive(queries.get_consumers)

    def get(self, rv: BlockRV | LoopRV) -> ir.Stmt:
        """The IR node a handle refers to now (a ``Block`` or a ``For``)."""
        if isinstance(rv, LoopRV):
            return self._state.get_loop(rv)[0]
        return self._state.get_block(rv)[0].block

    # ------------------------------------------------------------------ primitives
    split = _primitive(loops.split)
    fuse = _primitive(loops.fuse)
    reorder = _primitive(loops.reorder)
    tile = _primitive(loops.tile)
    parallel = _primitive(loops.parallel)
    vectorize = _primitive(loops.vectorize)
    unroll = _primitive(loops.unroll)
    bind = _primitive(loops.bind)
    annotate = _primitive(loops.annotate)
    unannotate = _primitive(loops.unannotate)
    pragma = _primitive(loops.pragma)
    compute_at = _primitive(compute_location.compute_at)
    reverse_compute_at = _primitive(compute_location.reverse_compute_at)
    compute_inline = _primitive(compute_location.compute_inline)
    reverse_compute_inline = _primitive(compute_location.reverse_compute_inline)
    cache_read = _primitive(cache.cache_read)
    cache_write = _primitive(cache.cache_write)
    set_scope = _primitive(cache.set_scope)
    set_dtype = _primitive(cache.set_dtype)
    double_buffer = _primitive(double_buffer_mod.double_buffer)
    storage_align = _primitive(cache.storage_align)
    transform_layout = _primitive(cache.transform_layout)
    decompose_reduction = _primitive(reduction.decompose_reduction)
    rfactor = _primitive(reduction.rfactor)
    blockize = _primitive(tensorize_mod.blockize)
    tensorize = _primitive(tensorize_mod.tensorize)

    def verify(self, target: Any = None) -> None:
        """Check the GPU launch limits of ``target`` (default: the schedule's target)."""
        from toolchain.tir.schedule.gpu import check_gpu_limits

        t = _load_target(target) or self.target
        if t is not None:
            check_gpu_limits(self._state.func, t)


def _load_target(target: Any) -> Any:
    if target is None:
        return None
    from toolchain.target import Target, resolve_target

    if isinstance(target, (str, Target)):
        return resolve_target(target)
    raise ScheduleError(f"target must be a name like 'cuda-sm80' or a Target, got {target!r}")
