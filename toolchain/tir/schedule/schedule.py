"""The interactive :class:`Schedule` (TensorIR style).

A schedule holds the current :class:`~toolchain.tir.ir.PrimFunc` (``sch.mod`` /
``sch.func``), hands out handles to blocks (:class:`BlockRV`) and loops (:class:`LoopRV`),
and applies primitives one call at a time: each call checks its preconditions (raising
:class:`~toolchain.errors.ScheduleError` with the block, loops, extents, the rule and a fix),
transforms the function, and returns new handles. Every call is recorded in ``sch.trace``.

The primitives live one group per module (their docstrings show the IR before, the call,
and the IR after): :mod:`.loops` (split, fuse, reorder, tile, parallel, vectorize, unroll,
bind, annotate, pragma), :mod:`.compute_location` (compute_at, reverse_compute_at,
compute_inline, reverse_compute_inline), :mod:`.cache` (cache_read, cache_write,
set_scope, storage_align), :mod:`.reduction` (decompose_reduction, rfactor) and
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
from toolchain.tir.schedule import cache, compute_location, loops, reduction
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule import tensorize as tensorize_mod
from toolchain.tir.schedule.trace import Instruction, RVRef, Trace


class BlockRV:
    """A handle to a block (by its unique name)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"BlockRV({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockRV) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("block", self.name))


class LoopRV:
    """A handle to a loop (by its loop variable, which survives other transformations)."""

    def __init__(self, var: ir.Var) -> None:
        self.var = var

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"LoopRV({self.var.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LoopRV) and other.var is self.var

    def __hash__(self) -> int:
        return hash(("loop", id(self.var)))


def _describe(v: Any) -> str:
    if isinstance(v, (LoopRV, BlockRV)):
        return v.name
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_describe(x) for x in v) + "]"
    return repr(v)


def _primitive(impl: Callable[..., Any]) -> Callable[..., Any]:
    """Make a traced Schedule method from a primitive implementation ``impl(sch, ...)``."""

    @functools.wraps(impl)
    def method(self: Schedule, *args: Any, **kwargs: Any) -> Any:
        if self._depth:
            return impl(self, *args, **kwargs)
        parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in
                                                kwargs.items()]
        self._current = f"{impl.__name__}({', '.join(parts)}) at step {len(self._trace) + 1}"
        self._depth += 1
        before = self._func
        try:
            out = impl(self, *args, **kwargs)
        except BaseException:
            self._func = before
            raise
        finally:
            self._depth -= 1
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
        st.root_block(func)
        self._func = func
        self._trace = Trace()
        self._consumed: dict[int, str] = {}
        self._removed_blocks: dict[str, str] = {}
        self._rv_names: dict[int, str] = {}
        self._keep: list[Any] = []
        self._depth = 0
        self._current = ""
        self.target = _load_target(target)
        names = st.block_names(func)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ScheduleError(f"block names must be unique to be scheduled; repeated: "
                                f"{', '.join(dup)}")

    # ------------------------------------------------------------------ state
    @property
    def mod(self) -> ir.PrimFunc:
        """The current PrimFunc (``print(sch.mod)`` shows it)."""
        return self._func

    @property
    def func(self) -> ir.PrimFunc:
        """Same as :attr:`mod`."""
        return self._func

    @property
    def trace(self) -> Trace:
        """Every primitive applied so far (replay with ``trace.apply_to(func)``)."""
        return self._trace

    def copy(self) -> Schedule:
        """An independent schedule in the same state (handles stay valid in both)."""
        new = Schedule.__new__(Schedule)
        new.__dict__.update(self.__dict__)
        new._trace = self._trace.copy()
        new._consumed = dict(self._consumed)
        new._removed_blocks = dict(self._removed_blocks)
        new._rv_names = dict(self._rv_names)
        new._keep = list(self._keep)
        return new

    def __str__(self) -> str:
        return str(self._func)

    # ------------------------------------------------------------------ handles (internal)
    def _record(self, kind: str, args: tuple, kwargs: dict, out: Any) -> None:
        def ref(v: Any) -> Any:
            if isinstance(v, (LoopRV, BlockRV)):
                name = self._rv_names.get(id(v))
                if name is None:
                    name = self._name_rv(v)
                return RVRef(name)
            if isinstance(v, (list, tuple)):
                return [ref(x) for x in v]
            return v

        outs = list(out) if isinstance(out, (list, tuple)) else ([] if out is None else [out])
        names = tuple(self._name_rv(o) for o in outs)
        self._trace.append(Instruction(kind, tuple(ref(a) for a in args),
                                       {k: ref(v) for k, v in kwargs.items()}, names,
                                       isinstance(out, (list, tuple))))

    def _name_rv(self, rv: Any) -> str:
        if id(rv) not in self._rv_names:
            prefix = "b" if isinstance(rv, BlockRV) else "l"
            self._rv_names[id(rv)] = f"{prefix}{len(self._rv_names)}"
            self._keep.append(rv)
        return self._rv_names[id(rv)]

    def _loop(self, rv: Any) -> tuple[ir.For, tuple[ir.Stmt, ...]]:
        if not isinstance(rv, LoopRV):
            raise ScheduleError(f"expected a loop handle (from get_loops/split/fuse), got "
                                f"{rv!r}")
        found = st.find_loop(self._func, rv.var)
        if found is None:
            how = self._consumed.get(id(rv.var))
            if how:
                raise ScheduleError(
                    f"loop handle {rv.name} was consumed by {how}; use the new loops "
                    "returned by it")
            raise ScheduleError(f"loop {rv.name} is not in this function (a handle from "
                                "another schedule?); get it with sch.get_loops(block)")
        return found

    def _block(self, rv: Any) -> tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]:
        if isinstance(rv, str):
            rv = BlockRV(rv)
        if not isinstance(rv, BlockRV):
            raise ScheduleError(f"expected a block handle (from get_block), got {rv!r}")
        found = st.find_block(self._func, rv.name)
        if found is None:
            how = self._removed_blocks.get(rv.name)
            if how:
                raise ScheduleError(f"block handle {rv.name!r} was removed by {how}")
            raise ScheduleError(f"no block named {rv.name!r}; blocks: "
                                f"{', '.join(st.block_names(self._func))}")
        return found

    def _consume_loop(self, var: ir.Var) -> None:
        self._consumed[id(var)] = self._current
        self._keep.append(var)

    def _remove_block(self, name: str) -> None:
        self._removed_blocks[name] = self._current

    def _fresh_block_name(self, base: str) -> str:
        names = set(st.block_names(self._func))
        name, n = base, 0
        while name in names:
            n += 1
            name = f"{base}_{n}"
        return name

    # ------------------------------------------------------------------ queries
    @_primitive
    def get_block(self, name: str) -> BlockRV:
        """The block called ``name``: ``sch.get_block("C")``."""
        self._block(BlockRV(name))
        return BlockRV(name)

    @_primitive
    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around ``block`` up to its enclosing block, outermost first."""
        realize, path = self._block(block)
        return [LoopRV(f.loop_var) for f in st.loops_of(path)]

    @_primitive
    def get_child_blocks(self, parent: BlockRV | LoopRV) -> list[BlockRV]:
        """Blocks directly under a block or loop (not nested in another block)."""
        if isinstance(parent, LoopRV):
            node: ir.Stmt = self._loop(parent)[0]
        else:
            node = self._block(parent)[0].block.body
        return [BlockRV(r.block.name_hint) for r, _ in st.blocks_under(node)]

    @_primitive
    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks that write a buffer ``block`` reads (program order)."""
        from toolchain.tir.schedule.compute_location import _writers

        r, _ = self._block(block)
        out: list[str] = []
        for rd in r.block.reads:
            for w, _ in _writers(self._func, rd.buffer, r.block):
                if w.block.name_hint not in out:
                    out.append(w.block.name_hint)
        return [BlockRV(n) for n in out]

    @_primitive
    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks that read a buffer ``block`` writes (program order)."""
        from toolchain.tir.schedule.compute_location import _readers

        r, _ = self._block(block)
        out: list[str] = []
        for w in r.block.writes:
            for rd, _ in _readers(self._func, w.buffer, r.block):
                if rd.block.name_hint not in out:
                    out.append(rd.block.name_hint)
        return [BlockRV(n) for n in out]

    def get(self, rv: BlockRV | LoopRV) -> ir.Stmt:
        """The IR node a handle refers to now (a ``Block`` or a ``For``)."""
        if isinstance(rv, LoopRV):
            return self._loop(rv)[0]
        return self._block(rv)[0].block

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
    storage_align = _primitive(cache.storage_align)
    decompose_reduction = _primitive(reduction.decompose_reduction)
    rfactor = _primitive(reduction.rfactor)
    blockize = _primitive(tensorize_mod.blockize)
    tensorize = _primitive(tensorize_mod.tensorize)

    def verify(self, target: Any = None) -> None:
        """Check the GPU launch limits of ``target`` (default: the schedule's target)."""
        from toolchain.tir.schedule.gpu import check_gpu_limits

        t = _load_target(target) or self.target
        if t is not None:
            check_gpu_limits(self._func, t)


def _load_target(target: Any) -> Any:
    if target is None:
        return None
    from toolchain.target import Target, load_target

    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        return load_target(target)
    raise ScheduleError(f"target must be a name like 'cuda-sm80' or a Target, got {target!r}")
