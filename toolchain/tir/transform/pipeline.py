"""The ordered lowering pipeline with numbered phases where users insert passes.

======  ===========================================================================
phase   built-in passes (then the user's passes for that phase, in order)
======  ===========================================================================
0       none: user passes see the scheduled, block-level IR
1       lower_thread_allreduce, lower_init_block, lower_blocks,
        compact_buffer_allocation, lower_mma_fragments, inject_virtual_thread,
        attach_intrinsics
2       flatten_buffer, partition_loops, simplify
3       vectorize_loop, unroll_loop, simplify, inject_double_buffer,
        drain_async_products, storage_rewrite, inject_barriers
4       simplify, remove_noop
======  ===========================================================================

A pass is any function ``PrimFunc -> PrimFunc``. ``lower(func, target=t)`` takes the
resolved :class:`~toolchain.target.Target`: the passes that depend on it (those in
:data:`TARGET_PASSES`) are called as ``pass(func, target=t)``.

``partition_loops`` splits the loops a schedule annotated ``partition`` where the
conditions in their body change value (padded copies: border and interior), so that
``simplify`` folds each piece's conditions and clamps away
(:mod:`toolchain.tir.transform.partition_loop`); other loops pass through.

``inject_barriers`` places ``T.storage_sync('shared')`` (``__syncthreads()``) between the
statements of a GPU kernel whose shared-memory accesses conflict across threads; it runs
last in phase 3, once loops are final and ``storage_rewrite`` has decided which shared
buffers share memory (:mod:`toolchain.tir.transform.inject_barriers`). A function without
shared memory passes through unchanged.

``attach_intrinsics`` specialises every call to a tensor intrinsic declared by a target
descriptor (:mod:`toolchain.intrinsics`: the target's own, and any other loaded) for the
operand strides left by buffer compaction, and records what the kernel's C needs as a
typed :class:`~toolchain.codegen.artifact.CSupport`; it changes nothing in a kernel
without such calls. Before (after ``sch.tensorize(ii, "c-generic.fma_f32_4x4")``)::

    C_local = T.allocate((4, 4), "float32", scope="local")
    kiln_fma_f32_4x4(T.address_of(A[i_0 * 4, k_0 * 4]), T.address_of(B[..]),
                     T.address_of(C_local[0, 0]))

After (``attrs["c_support"]`` holds the definition for these strides, keyed by its name)::

    kiln_fma_f32_4x4_<hash>(T.address_of(A[i_0 * 4, k_0 * 4]), T.address_of(B[..]),
                            T.address_of(C_local[0, 0]))

>>> from toolchain import te
>>> A = te.placeholder((8,), name="A")
>>> B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
>>> seen = []
>>> def spy(f):
...     seen.append(f.name)
...     return f
>>> f = lower(te.create_prim_func([A, B]), passes={2: [spy]})
>>> seen
['main']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolchain.errors import OptionError
from toolchain.intrinsics import attach_intrinsics
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.transform.compact_buffer import compact_buffer_allocation
from toolchain.tir.transform.drain_wgmma import drain_async_products
from toolchain.tir.transform.flatten_buffer import flatten_buffer
from toolchain.tir.transform.inject_barriers import inject_barriers
from toolchain.tir.transform.inject_double_buffer import inject_double_buffer
from toolchain.tir.transform.inject_virtual_thread import inject_virtual_thread
from toolchain.tir.transform.lower_blocks import lower_blocks, lower_init_block
from toolchain.tir.transform.lower_thread_allreduce import lower_thread_allreduce
from toolchain.tir.transform.mma_fragments import lower_mma_fragments
from toolchain.tir.transform.partition_loop import partition_loops
from toolchain.tir.transform.remove_noop import remove_noop
from toolchain.tir.transform.simplify import simplify
from toolchain.tir.transform.storage_rewrite import storage_rewrite
from toolchain.tir.transform.unroll_loop import unroll_loop
from toolchain.tir.transform.vectorize_loop import vectorize_loop

Pass = Callable[[ir.PrimFunc], ir.PrimFunc]

#: Built-in passes that take the target (``pass(func, target=...)``).
TARGET_PASSES: tuple[Pass, ...] = (attach_intrinsics,)

#: The built-in passes of each phase, in order.
PHASES: dict[int, tuple[Pass, ...]] = {
    0: (),
    1: (lower_thread_allreduce, lower_init_block, lower_blocks, compact_buffer_allocation,
        lower_mma_fragments, inject_virtual_thread, attach_intrinsics),
    2: (flatten_buffer, partition_loops, simplify),
    3: (vectorize_loop, unroll_loop, simplify, inject_double_buffer, drain_async_products,
        storage_rewrite, inject_barriers),
    4: (simplify, remove_noop),
}


def _as_func(obj: Any) -> ir.PrimFunc:
    if isinstance(obj, ir.PrimFunc):
        return obj
    func = getattr(obj, "mod", None)
    if isinstance(func, ir.PrimFunc):
        return func
    raise OptionError(f"lower: expected a PrimFunc or a Schedule, got {type(obj).__name__}")


#: the attribute a function lowered with ``stop_after`` keeps ``(target, pass, result)`` in
_STOPPED = "_lowered_until"


def lower(sch_or_func: Any, passes: Mapping[int, Sequence[Pass]] | None = None,
          trace: list[tuple[str, ir.PrimFunc]] | None = None, *,
          target: Target | None = None, stop_after: Pass | None = None) -> ir.PrimFunc:
    """Run the lowering pipeline on a Schedule or PrimFunc and return the lowered PrimFunc.

    ``target`` is the resolved target the function is lowered for (its intrinsics and C
    helpers are the ones the kernel may call); None lowers for whatever targets are loaded.

    ``passes`` maps a phase number (see :data:`PHASES`) to extra passes run after that
    phase's built-ins. If ``trace`` is a list, ``(pass name, function after it)`` is
    appended for every pass (handy to print what each step did).

    ``stop_after``: a built-in pass of :data:`PHASES` after which lowering stops (the
    passes after it, built-in or extra, do not run): what a caller that only reads what
    that pass decided pays (the GPU GEMM search counts shared memory after
    ``storage_rewrite``, before ``inject_barriers``). The function remembers where such a
    lowering stopped (for the same ``target``, without extra passes), and the whole
    lowering of that same function object later starts from there instead of from the
    beginning: the passes are pure, so the result is the same (the GEMM search's chosen
    kernel, lowered for its shared memory, is then lowered in full by the bundle compiler).
    """
    if stop_after is not None and not any(stop_after in fns for fns in PHASES.values()):
        raise OptionError(f"lower: stop_after={getattr(stop_after, '__name__', stop_after)!r}"
                          " is not a built-in pass of the pipeline")
    if passes is not None and not isinstance(passes, Mapping):
        raise OptionError("lower: passes maps a phase number to a list of passes, e.g. "
                          f"{{2: [my_pass]}}; got a {type(passes).__name__}")
    extra = dict(passes or {})
    for phase, fns in extra.items():
        if phase not in PHASES:
            raise OptionError(f"lower: unknown phase {phase!r}; phases are "
                              f"{', '.join(map(str, PHASES))}")
        for fn in fns:
            if not callable(fn):
                raise OptionError(f"lower: phase {phase} pass {fn!r} is not callable; a pass "
                                  "is a function PrimFunc -> PrimFunc")
    start = func = _as_func(sch_or_func)
    plain = not extra and trace is None  # what a stopped lowering may be resumed for
    resume = start.__dict__.get(_STOPPED) if plain and stop_after is None else None
    if resume is not None and resume[0] is target:
        _, skip, func = resume
    else:
        skip = None
    for phase, builtins in PHASES.items():
        for fn in (*builtins, *extra.get(phase, ())):
            if skip is not None:  # already run, up to and with ``skip``
                skip = None if fn is skip else skip
                continue
            out = fn(func, target=target) if fn in TARGET_PASSES and target is not None \
                else fn(func)
            if not isinstance(out, ir.PrimFunc):
                raise OptionError(f"lower: pass {getattr(fn, '__name__', fn)!r} (phase "
                                  f"{phase}) returned {type(out).__name__}, not a PrimFunc")
            func = out
            if trace is not None:
                trace.append((getattr(fn, "__name__", repr(fn)), func))
            if fn is stop_after:
                if plain:
                    object.__setattr__(start, _STOPPED, (target, fn, func))
                return func
    return func

