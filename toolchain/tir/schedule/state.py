"""The schedule state (:class:`ScheduleState`) and the tree helpers primitives share.

A :class:`ScheduleState` owns the function being scheduled and the bookkeeping about old
handles; every primitive takes one. The free functions below find, locate, replace and
remove nodes of a PrimFunc. The IR is immutable, so "editing" a function means rebuilding
the path from the root to the edited node. Nodes are found by identity; loops by their
``loop_var`` (which survives rebuilding) and blocks by their unique ``name_hint``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator
from toolchain.tir.schedule.handles import BlockRV, LoopRV


class ScheduleState:
    """What a schedule edits: the current PrimFunc, and what became of old handles.

    Every schedule primitive is a function ``primitive(state, ...)`` (in :mod:`.loops`,
    :mod:`.cache`, ...): it finds its nodes through handles (:meth:`get_loop`,
    :meth:`get_block`), builds the new function with the tree helpers of this module and
    installs it (:meth:`replace`, :meth:`update`). It records the loops it consumes and the
    blocks it removes, so that a stale handle later gets a message naming the step that
    consumed it. :class:`~toolchain.tir.schedule.Schedule` is the user-facing front over
    one state: it runs each primitive inside :meth:`applying` and records the trace.

    ``target`` (a :class:`~toolchain.target.Target` or None) is what the primitives check
    GPU limits and memory scopes against.

    >>> from toolchain import te
    >>> from toolchain.tir.schedule import LoopRV, loops
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    >>> state = ScheduleState(te.create_prim_func([A, B]))
    >>> realize, path = state.get_block("B")
    >>> i = LoopRV(loops_of(path)[0].loop_var)
    >>> with state.applying("split(i)"):
    ...     io, ii = loops.split(state, i, [None, 16])
    >>> fmt_loops(loops_of(state.get_block("B")[1]))
    'i_0(4), i_1(16)'
    >>> state.consumed_by(i.var)
    'split(i)'
    """

    def __init__(self, func: ir.PrimFunc, target: Any = None) -> None:
        if not isinstance(func, ir.PrimFunc):
            raise ScheduleError(f"a schedule expects a PrimFunc (from te.create_prim_func), "
                                f"got {type(func).__name__}")
        root_block(func)
        names = block_names(func)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ScheduleError(f"block names must be unique to be scheduled; repeated: "
                                f"{', '.join(dup)}")
        self._func = func
        self._target = target
        # id(loop var) -> (the var, kept alive so its id is not reused; what consumed it)
        self._consumed: dict[int, tuple[ir.Var, str]] = {}
        self._removed: dict[str, str] = {}
        self._current = ""

    # ------------------------------------------------------------------ the function
    @property
    def func(self) -> ir.PrimFunc:
        """The current PrimFunc."""
        return self._func

    @property
    def target(self) -> Any:
        """The target whose limits the primitives check (None: no target checks)."""
        return self._target

    def replace(self, func: ir.PrimFunc) -> None:
        """Install ``func`` (a primitive's result) as the current function.

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> state.replace(with_root_allocs(state.func, add=(ir.Buffer("T", (8,)),)))
        >>> [b.name for b in root_block(state.func).alloc_buffers]
        ['T']
        """
        if not isinstance(func, ir.PrimFunc):
            raise ScheduleError(f"ScheduleState.replace expects a PrimFunc, got "
                                f"{type(func).__name__}")
        self._func = func

    def update(self, mapping: dict[int, ir.Stmt | None]) -> None:
        """Replace statements of the current function, keyed by ``id`` (see
        :func:`replace_stmts`; ``None`` removes a statement from its sequence).

        >>> from dataclasses import replace as with_
        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> f = loops_of(state.get_block("compute")[1])[0]
        >>> state.update({id(f): with_(f, kind="parallel")})
        >>> print(state.func)  # doctest: +NORMALIZE_WHITESPACE
        @T.prim_func
        def main(A: T.Buffer((8,), "float32"), compute: T.Buffer((8,), "float32")):
            for i in T.parallel(8):
                with T.block("compute"):
                    vi = T.axis.spatial(8, i)
                    T.reads(A[vi])
                    T.writes(compute[vi])
                    compute[vi] = A[vi]
        """
        self.replace(replace_stmts(self._func, mapping))

    # ------------------------------------------------------------------ handles
    def get_loop(self, rv: LoopRV) -> tuple[ir.For, tuple[ir.Stmt, ...]]:
        """The ``For`` a loop handle refers to, and its ancestors (outermost first).

        A consumed handle (split, fuse, tensorize) or one from another function is an
        error that says so:

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> state.get_loop(LoopRV(ir.Var("k")))
        Traceback (most recent call last):
        ...
        toolchain.errors.ScheduleError: loop k is not in this function (a handle from
        another schedule?); get it with sch.get_loops(block)
        """
        if not isinstance(rv, LoopRV):
            raise ScheduleError(f"expected a loop handle (from get_loops/split/fuse), got "
                                f"{rv!r}")
        found = find_loop(self._func, rv.var)
        if found is None:
            how = self.consumed_by(rv.var)
            if how:
                raise ScheduleError(
                    f"loop handle {rv.name} was consumed by {how}; use the new loops "
                    "returned by it")
            raise ScheduleError(f"loop {rv.name} is not in this function (a handle from "
                                "another schedule?); get it with sch.get_loops(block)")
        return found

    def get_block(self, rv: BlockRV | str) -> tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]:
        """The ``BlockRealize`` a block handle (or block name) refers to, and its ancestors.

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> B = te.compute((8,), lambda i: A[i], name="B")
        >>> state = ScheduleState(te.create_prim_func([A, B]))
        >>> realize, path = state.get_block("B")
        >>> realize.block.name_hint, fmt_loops(loops_of(path))
        ('B', 'i(8)')
        >>> state.get_block("C")
        Traceback (most recent call last):
        ...
        toolchain.errors.ScheduleError: no block named 'C'; blocks: B
        """
        if isinstance(rv, str):
            rv = BlockRV(rv)
        if not isinstance(rv, BlockRV):
            raise ScheduleError(f"expected a block handle (from get_block), got {rv!r}")
        found = find_block(self._func, rv.name)
        if found is None:
            how = self.removed_by(rv.name)
            if how:
                raise ScheduleError(f"block handle {rv.name!r} was removed by {how}")
            raise ScheduleError(f"no block named {rv.name!r}; blocks: "
                                f"{', '.join(block_names(self._func))}")
        return found

    def consume_loop(self, var: ir.Var) -> None:
        """Record that the primitive being applied replaced the loop of ``var``.

        :meth:`get_loop` on its handle then names that primitive:

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> i = ir.Var("i")
        >>> with state.applying("split(i, factors=[None, 4]) at step 1"):
        ...     state.consume_loop(i)
        >>> state.get_loop(LoopRV(i))
        Traceback (most recent call last):
        ...
        toolchain.errors.ScheduleError: loop handle i was consumed by
        split(i, factors=[None, 4]) at step 1; use the new loops returned by it
        """
        self._consumed[id(var)] = (var, self._current or "an earlier primitive")

    def consumed_by(self, var: ir.Var) -> str | None:
        """The primitive that consumed the loop of ``var`` (see :meth:`consume_loop`)."""
        entry = self._consumed.get(id(var))
        return entry[1] if entry is not None and entry[0] is var else None

    def remove_block(self, name: str) -> None:
        """Record that the primitive being applied removed block ``name`` (an inlining).

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> with state.applying("compute_inline(B) at step 2"):
        ...     state.remove_block("B")
        >>> state.get_block("B")
        Traceback (most recent call last):
        ...
        toolchain.errors.ScheduleError: block handle 'B' was removed by compute_inline(B) at step 2
        """
        self._removed[name] = self._current or "an earlier primitive"

    def removed_by(self, name: str) -> str | None:
        """The primitive that removed block ``name`` (see :meth:`remove_block`)."""
        return self._removed.get(name)

    def fresh_block_name(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``... whichever no block of the function has.

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> B = te.compute((8,), lambda i: A[i], name="B")
        >>> state = ScheduleState(te.create_prim_func([A, B]))
        >>> state.fresh_block_name("B_init"), state.fresh_block_name("B")
        ('B_init', 'B_1')
        """
        names = set(block_names(self._func))
        name, n = base, 0
        while name in names:
            n += 1
            name = f"{base}_{n}"
        return name

    # ------------------------------------------------------------------ applying
    @property
    def current(self) -> str:
        """The primitive being applied, as messages name it; empty between primitives."""
        return self._current

    @contextmanager
    def applying(self, description: str) -> Iterator[None]:
        """Apply one primitive: ``description`` names it in the records of consumed loops
        and removed blocks, and an error undoes every change made inside.

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> before = state.func
        >>> try:
        ...     with state.applying("compute_inline(compute)"):
        ...         state.replace(with_root_allocs(state.func, add=(ir.Buffer("T", (8,)),)))
        ...         state.remove_block("compute")
        ...         raise ScheduleError("refused")
        ... except ScheduleError:
        ...     pass
        >>> state.func is before, state.removed_by("compute"), state.current
        (True, None, '')
        """
        saved = (self._func, dict(self._consumed), dict(self._removed), self._current)
        self._current = description
        try:
            yield
        except BaseException:
            self._func, self._consumed, self._removed = saved[0], saved[1], saved[2]
            raise
        finally:
            self._current = saved[3]

    def copy(self) -> ScheduleState:
        """An independent state with the same function and records.

        >>> from toolchain import te
        >>> A = te.placeholder((8,), name="A")
        >>> state = ScheduleState(te.create_prim_func([A, te.compute((8,), lambda i: A[i])]))
        >>> other = state.copy()
        >>> other.remove_block("compute")
        >>> state.removed_by("compute") is None
        True
        """
        new = copy.copy(self)
        new._consumed = dict(self._consumed)
        new._removed = dict(self._removed)
        return new


def children(s: ir.Stmt) -> list[ir.Stmt]:
    """Direct child statements of ``s``."""
    if isinstance(s, ir.SeqStmt):
        return list(s.seq)
    if isinstance(s, (ir.For, ir.LetStmt, ir.AttrStmt, ir.Allocate)):
        return [s.body]
    if isinstance(s, ir.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    if isinstance(s, ir.BlockRealize):
        return [s.block]
    if isinstance(s, ir.Block):
        return ([s.init] if s.init is not None else []) + [s.body]
    return []


def walk(s: ir.Stmt, path: tuple[ir.Stmt, ...] = ()) -> Iterator[tuple[ir.Stmt,
                                                                     tuple[ir.Stmt, ...]]]:
    """Pre-order ``(node, ancestors)`` over statements."""
    # an explicit stack, not nested generators: ``yield from`` passed every node up
    # through one generator per level, and the schedule walks whole functions often
    stack = [(s, path)]
    pop, push = stack.pop, stack.append
    while stack:
        node, above = pop()
        yield node, above
        kids = children(node)
        if kids:
            inner = above + (node,)
            for c in reversed(kids):
                push((c, inner))


@dataclass
class _Index:
    """Where each loop and block of one function is (the first in pre-order, as a walk
    finds it), with its ancestors: made in one pass (the pre-order of :func:`walk`) the
    first time a function version is asked, kept on that (immutable) PrimFunc. A schedule
    asks for several loops and blocks of each version between two primitives; each
    question walked the whole function.

    ``nodes`` holds every For, BlockRealize and Block by ``id`` (so that
    :func:`replace_stmts` rebuilds only the ancestors of what it replaces), ``shared`` the
    ids of those met more than once (a statement object at several places: those are
    replaced by a whole walk, as everywhere they are)."""

    loops: dict[ir.Var, tuple[ir.For, tuple[ir.Stmt, ...]]]  # Vars hash by identity
    blocks: dict[str, tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]]
    realizes: list[tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]]  # every one, pre-order
    nodes: dict[int, tuple[ir.Stmt, tuple[ir.Stmt, ...]]]
    shared: set[int]


def _index(func: ir.PrimFunc) -> _Index:
    idx = func.__dict__.get(_INDEX)
    if idx is None:
        idx = _Index({}, {}, [], {}, set())
        loops, blocks, realizes, nodes = idx.loops, idx.blocks, idx.realizes, idx.nodes
        # the pre-order of :func:`walk`, written out: a leaf (a store) is not pushed, and
        # the kinds of statement are told apart by their exact class
        stack: list[tuple[ir.Stmt, tuple[ir.Stmt, ...]]] = [(func.body, ())]
        pop, push = stack.pop, stack.append
        For, Realize, Block, Seq = ir.For, ir.BlockRealize, ir.Block, ir.SeqStmt
        leaves = (ir.BufferStore, ir.Evaluate)
        while stack:
            node, path = pop()
            t = type(node)
            if t is For:
                loops.setdefault(node.loop_var, (node, path))
            elif t is Realize:
                blocks.setdefault(node.block.name_hint, (node, path))
                realizes.append((node, path))
            elif t is Seq:
                inner = path + (node,)
                for c in reversed(node.seq):
                    if type(c) not in leaves:
                        push((c, inner))
                continue
            elif t is not Block:
                kids = children(node)
                if kids:
                    inner = path + (node,)
                    for c in reversed(kids):
                        push((c, inner))
                continue
            key = id(node)
            if key in nodes:
                idx.shared.add(key)
            else:
                nodes[key] = (node, path)
            inner = path + (node,)
            if t is For:
                if type(node.body) not in leaves:
                    push((node.body, inner))
            elif t is Realize:
                push((node.block, inner))
            else:
                if type(node.body) not in leaves:
                    push((node.body, inner))
                if node.init is not None and type(node.init) not in leaves:
                    push((node.init, inner))
        object.__setattr__(func, _INDEX, idx)
    return idx


#: the attribute a PrimFunc keeps its :class:`_Index` in (``PrimFunc.__getstate__`` leaves
#: it out of pickles)
_INDEX = "_schedule_index"


def find_loop(func: ir.PrimFunc, var: ir.Var) -> tuple[ir.For, tuple[ir.Stmt, ...]] | None:
    """The ``For`` whose loop var is ``var`` and its ancestors, or None."""
    return _index(func).loops.get(var)


def find_block(func: ir.PrimFunc, name: str) -> tuple[ir.BlockRealize,
                                                      tuple[ir.Stmt, ...]] | None:
    """The ``BlockRealize`` of the block named ``name`` and its ancestors, or None."""
    return _index(func).blocks.get(name)


def all_blocks(func: ir.PrimFunc) -> list[ir.BlockRealize]:
    """Every BlockRealize in program order (the root block included)."""
    return [r for r, _ in _index(func).realizes]


def block_names(func: ir.PrimFunc) -> list[str]:
    """Names of the non-root blocks in program order."""
    return [r.block.name_hint for r in all_blocks(func) if r.block.name_hint != "root"]


def loops_of(path: tuple[ir.Stmt, ...]) -> list[ir.For]:
    """The ``For`` ancestors up to the nearest enclosing block, outermost first."""
    out: list[ir.For] = []
    for node in reversed(path):
        if isinstance(node, ir.Block):
            break
        if isinstance(node, ir.For):
            out.append(node)
    return out[::-1]


def enclosing_block(path: tuple[ir.Stmt, ...]) -> ir.Block | None:
    """The nearest Block ancestor in ``path``."""
    for node in reversed(path):
        if isinstance(node, ir.Block):
            return node
    return None


def loop_ranges(path: tuple[ir.Stmt, ...]) -> dict[ir.Var, ir.Range]:
    """Ranges of every loop var (and block var of enclosing blocks) in ``path``."""
    out: dict[ir.Var, ir.Range] = {}
    for node in path:
        if isinstance(node, ir.For):
            out[node.loop_var] = ir.Range(node.min, node.extent)
        elif isinstance(node, ir.Block):
            for iv in node.iter_vars:
                out[iv.var] = iv.dom
    return out


def blocks_under(s: ir.Stmt) -> list[tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]]:
    """Blocks under ``s`` not nested in another block under ``s``, with paths from ``s``."""
    out: list[tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]] = []
    _blocks_under(s, (), out)
    return out


def _blocks_under(node: ir.Stmt, path: tuple[ir.Stmt, ...],
                  out: list[tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]]) -> None:
    # a module function, not a closure calling itself: that would be a reference cycle
    # (function -> cell -> function) keeping ``out`` and its IR for the cyclic collector
    if isinstance(node, ir.BlockRealize):
        out.append((node, path))
        return
    for c in children(node):
        _blocks_under(c, path + (node,), out)


class _Replace(StmtExprMutator):
    def __init__(self, mapping: dict[int, ir.Stmt | None]) -> None:
        self.mapping = mapping

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return e  # statements only

    def visit_stmt(self, s: ir.Stmt) -> ir.Stmt:
        if id(s) in self.mapping:
            return self.mapping[id(s)]  # type: ignore[return-value]
        return super().visit_stmt(s)

    def visit_SeqStmt(self, s: ir.SeqStmt) -> ir.Stmt:
        new = [self.visit_stmt(x) for x in s.seq]
        if all(a is b for a, b in zip(new, s.seq, strict=True)):
            return s
        return ir.seq(*[x for x in new if x is not None])


class _ReplaceChildren(_Replace):
    """One level of :class:`_Replace`: :meth:`rebuild` replaces the direct children of a
    statement per the mapping and does not descend into them."""

    def visit_stmt(self, s: ir.Stmt) -> ir.Stmt:
        return self.mapping.get(id(s), s)  # type: ignore[return-value]

    def rebuild(self, s: ir.Stmt) -> ir.Stmt:
        return StmtExprMutator.visit_stmt(self, s)


def replace_in(s: ir.Stmt, mapping: dict[int, ir.Stmt | None]) -> ir.Stmt:
    """Replace statements (keyed by ``id``) under ``s``; ``None`` removes from a sequence."""
    return _Replace(mapping).visit_stmt(s)


def replace_stmts(func: ir.PrimFunc, mapping: dict[int, ir.Stmt | None]) -> ir.PrimFunc:
    """Replace statements (keyed by ``id``) in ``func``; ``None`` removes from a sequence.

    Loops, blocks and block realizes are found through the function's index and only
    their ancestors are rebuilt; anything else (another kind of statement, one met at
    several places, a statement not in ``func``, ``None`` outside a sequence) takes a walk
    over the whole function. Both give the same function:

    >>> from dataclasses import replace as with_
    >>> from toolchain import te
    >>> A = te.placeholder((8,), name="A")
    >>> f = te.create_prim_func([A, te.compute((8,), lambda i: A[i], name="B")])
    >>> loop = loops_of(find_block(f, "B")[1])[0]
    >>> new = replace_stmts(f, {id(loop): with_(loop, kind="unrolled")})
    >>> str(new) == str(replace_stmts_by_walk(f, {id(loop): with_(loop, kind="unrolled")}))
    True
    >>> find_block(new, "B")[0] is find_block(f, "B")[0]  # under the loop: kept as it was
    True
    """
    body = _replace_on_paths(func, mapping)
    if body is _NOT_LOCATED:
        body = replace_in(func.body, mapping)
    return func.with_body(body)


def replace_stmts_by_walk(func: ir.PrimFunc, mapping: dict[int, ir.Stmt | None]) -> ir.PrimFunc:
    """:func:`replace_stmts` by a walk over the whole function (what it falls back to)."""
    return func.with_body(replace_in(func.body, mapping))


#: what :func:`_replace_on_paths` returns when it cannot place every replaced statement
_NOT_LOCATED: Any = object()


def _replace_on_paths(func: ir.PrimFunc,
                      mapping: dict[int, ir.Stmt | None]) -> ir.Stmt | None:
    """``func``'s body with ``mapping`` applied, rebuilding only the ancestors of the
    replaced statements (as :class:`_Replace` rebuilds them), or ``_NOT_LOCATED``."""
    body = func.body
    if not mapping:
        return body
    root = body.block if isinstance(body, ir.BlockRealize) else None
    located: list[tuple[ir.Stmt, tuple[ir.Stmt, ...]]] = []
    idx = None
    for key in mapping:
        if key == id(body):  # the root: never inside itself, so at one place
            located.append((body, ()))
            continue
        if root is not None and key == id(root):
            located.append((root, (body,)))
            continue
        if idx is None:
            idx = _index(func)
        hit = idx.nodes.get(key)
        if hit is None or key in idx.shared:
            return _NOT_LOCATED
        located.append(hit)
    new_of: dict[int, ir.Stmt | None] = {}
    todo: dict[int, tuple[int, ir.Stmt]] = {}  # id -> (depth, ancestor to rebuild)
    for node, path in located:
        if any(id(a) in mapping for a in path):
            continue  # inside a replaced statement: the walk never reaches it
        new = mapping[id(node)]
        if new is None and not (path and isinstance(path[-1], ir.SeqStmt)):
            return _NOT_LOCATED  # removed from something not a sequence: as the walk does
        new_of[id(node)] = new
        for depth, a in enumerate(path):
            todo[id(a)] = (depth, a)
    for _, a in sorted(todo.values(), key=lambda t: -t[0]):
        new_of[id(a)] = _rebuilt(a, new_of)
    return new_of.get(id(body), body)


def _rebuilt(s: ir.Stmt, new_of: dict[int, ir.Stmt | None]) -> ir.Stmt:
    """``s`` with its direct children replaced per ``new_of``, built by :class:`_Replace`'s
    own rules (``s`` itself when no child changed)."""
    return _ReplaceChildren(new_of).rebuild(s)


def replace_block(func: ir.PrimFunc, old: ir.Block, new: ir.Block) -> ir.PrimFunc:
    """Replace one Block (keeping its BlockRealize)."""
    return replace_stmts(func, {id(old): new})


def root_block(func: ir.PrimFunc) -> ir.Block:
    """The function's root block."""
    body = func.body
    if isinstance(body, ir.BlockRealize):
        return body.block
    raise ScheduleError(
        f"function {func.name!r} has no root block: it was already lowered; schedule the "
        "function produced by te.create_prim_func instead")


def root_items(func: ir.PrimFunc) -> list[ir.Stmt]:
    """The statements directly under the root block, in order."""
    body = root_block(func).body
    return list(body.seq) if isinstance(body, ir.SeqStmt) else [body]


def root_index(func: ir.PrimFunc, target: ir.Stmt) -> int:
    """The position in :func:`root_items` of the statement that contains ``target``."""
    items = root_items(func)
    if isinstance(target, (ir.For, ir.BlockRealize, ir.Block)):
        idx = _index(func)
        hit = idx.nodes.get(id(target))
        if hit is not None and hit[0] is target and id(target) not in idx.shared:
            # path: the root realize, the root block, [its body's SeqStmt,] the item...
            path = hit[1] + (target,)
            if len(path) > 2 and path[0] is func.body:
                item = path[3] if len(items) > 1 and len(path) > 3 else path[2]
                for k, x in enumerate(items):
                    if x is item:
                        return k
    for k, item in enumerate(items):
        if any(n is target for n, _ in walk(item)):
            return k
    raise ScheduleError("internal: statement not found under the root block")


def insert_root(func: ir.PrimFunc, pos: int, stmt: ir.Stmt,
                alloc: ir.Buffer | None) -> ir.PrimFunc:
    """Insert ``stmt`` at position ``pos`` under the root block, allocating ``alloc``."""
    root = root_block(func)
    items = root_items(func)
    items.insert(pos, stmt)
    allocs = root.alloc_buffers + ((alloc,) if alloc is not None else ())
    new_root = replace(root, body=ir.seq(*items), alloc_buffers=allocs)
    return replace_block(func, root, new_root)


def readers(func: ir.PrimFunc, buf: ir.Buffer, skip: ir.Block | None = None) -> list[tuple[
        ir.BlockRealize, tuple[ir.Stmt, ...]]]:
    """Non-root blocks (other than ``skip``) that read ``buf``, with paths, program order."""
    return [(node, path) for node, path in _index(func).realizes
            if (node.block is not skip and node.block.name_hint != "root"
                and any(rd.buffer is buf for rd in node.block.reads))]


def writers(func: ir.PrimFunc, buf: ir.Buffer, skip: ir.Block | None = None) -> list[tuple[
        ir.BlockRealize, tuple[ir.Stmt, ...]]]:
    """Non-root blocks (other than ``skip``) that write ``buf``, with paths, program order."""
    return [(node, path) for node, path in _index(func).realizes
            if (node.block is not skip and node.block.name_hint != "root"
                and any(w.buffer is buf for w in node.block.writes))]


def with_root_allocs(func: ir.PrimFunc, add: tuple[ir.Buffer, ...] = (),
                     remove: tuple[ir.Buffer, ...] = ()) -> ir.PrimFunc:
    """Add/remove buffers in the root block's ``alloc_buffers``."""
    root = root_block(func)
    allocs = tuple(b for b in root.alloc_buffers if b not in remove) + tuple(add)
    return replace_block(func, root, replace(root, alloc_buffers=allocs))


def simplify_bindings(s: ir.Stmt, ranges: dict[ir.Var, ir.Range]) -> ir.Stmt:
    """Simplify every block binding and predicate under ``s`` with the loop ranges."""
    return _SimplifyBindings(ranges).visit_stmt(s)


class _SimplifyBindings(StmtExprMutator):
    # a module class, not one made per call: a class is a reference cycle (type <-> its
    # dict and methods) that only the cyclic collector frees, and costly to create
    def __init__(self, ranges: dict[ir.Var, ir.Range]) -> None:
        self.ranges = dict(ranges)

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return e

    def visit_For(self, f: ir.For) -> ir.Stmt:
        self.ranges[f.loop_var] = ir.Range(f.min, f.extent)
        body = self.visit_stmt(f.body)
        return f if body is f.body else replace(f, body=body)

    def visit_BlockRealize(self, r: ir.BlockRealize) -> ir.Stmt:
        vals = tuple(arith.simplify(v, self.ranges) for v in r.iter_values)
        pred = arith.simplify(r.predicate, self.ranges)
        return ir.BlockRealize(vals, pred, r.block)


def make_loop_nest(loops: list[tuple[ir.Var, ir.PrimExpr]], body: ir.Stmt) -> ir.Stmt:
    """Serial loops ``for v in range(extent)`` around ``body`` (outermost first)."""
    for v, ext in reversed(loops):
        body = ir.For(v, 0, ext, "serial", body)
    return body


def exclusive_nest_top(realize: ir.BlockRealize, path: tuple[ir.Stmt, ...]) -> ir.Stmt:
    """The outermost statement whose subtree contains only this block and its loops."""
    top: ir.Stmt = realize
    for node in reversed(path):
        if isinstance(node, ir.For) and node.body is top:
            top = node
        else:
            break
    return top


def program_order(func: ir.PrimFunc) -> dict[int, int]:
    """Pre-order index of every statement (by id)."""
    return {id(n): k for k, (n, _) in enumerate(walk(func.body))}


def fmt_loops(loops: list[ir.For]) -> str:
    """``i(128), k(64)`` for messages."""
    return ", ".join(f"{f.loop_var.name}({f.extent})" for f in loops) or "(none)"


def const_extent(f: ir.For) -> int | None:
    """The loop's extent if it is a constant."""
    return f.extent.value if isinstance(f.extent, ir.IntImm) else None


def uses(node: Any, var_set: set[ir.Var]) -> bool:
    """True if any Var of ``var_set`` occurs in ``node``."""
    from toolchain.tir.functor import free_vars

    return any(v in var_set for v in free_vars(node))


def map_exprs(s: ir.Stmt, fn: Callable[[ir.PrimExpr], ir.PrimExpr]) -> ir.Stmt:
    """Apply ``fn`` to every top-level expression of every statement under ``s``."""

    class _M(StmtExprMutator):
        def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
            return fn(e)

    return _M().visit_stmt(s)
