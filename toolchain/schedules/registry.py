"""Which default schedule builds which op on which target: :func:`lookup`.

A schedule function takes ``(node, target)`` — a graph :class:`~toolchain.graph.ir.Node`
and a resolved :class:`~toolchain.target.Target` — and returns either a
:class:`~toolchain.tir.schedule.Schedule` whose PrimFunc's parameters are the node's
compute inputs (the order of ``node_compute(node).input_values``) followed by its outputs,
or an :class:`OpSchedule` when the kernel's parameters differ from that (for example a
convolution whose weights were packed at compile time: its ``input_values`` then name a
new constant value holding the packed data).

The built-in schedules are one explicit table,
:data:`toolchain.schedules.strategy.STRATEGIES`, keyed ``(op, key)``. For a node of op
``Conv`` on ``x86_64-avx2`` (``keys: [x86, cpu]``, kind ``c``) :func:`lookup` tries
``(Conv, x86)``, ``(Conv, cpu)``, ``(Conv, c)``, then the same with op ``*`` (a default
for every op); at each key a schedule added with :func:`register_schedule` (a user's or a
test's) comes before the table's. The target's name is never a key. A target whose
descriptor has no ``keys`` is matched by its kind, and ``cpu`` for the CPU kinds.

Example::

    >>> from toolchain.target import load_target
    >>> @register_schedule("MyOp", "cpu")
    ... def _my_schedule(node, target):
    ...     ...
    >>> lookup("MyOp", load_target("c-generic")) is _my_schedule
    True
    >>> _ = unregister_schedule("MyOp", "cpu")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolchain.errors import NoScheduleError
from toolchain.graph.ir import Node, Value
from toolchain.graph.overlap import AccessOrder
from toolchain.target import Target
from toolchain.target import resolve_target as resolve_target
from toolchain.tir.schedule import Schedule

#: target kinds that ``"cpu"`` stands for
CPU_KINDS = ("c", "llvm")

ScheduleFn = Callable[[Node, Target], "Schedule | OpSchedule | None"]
#: schedules added at run time by :func:`register_schedule` (users, tests); the built-in
#: ones are the table :data:`toolchain.schedules.strategy.STRATEGIES`
_ADDED: dict[tuple[str, str], ScheduleFn] = {}


@dataclass
class OpSchedule:
    """A scheduled kernel of one node and what its parameters stand for.

    ``input_values`` / ``output_values`` are the graph values of the PrimFunc's parameters,
    in order. A value with ``data`` is a compile-time constant (packed weights): a caller
    passes its data, a bundle stores it. ``info`` says what was chosen (algorithm, layout,
    tile sizes), for metadata and benchmarks. ``in_place = k`` is the contract with the
    memory planner: the kernel reads each part of input ``k`` before writing the output
    over it, so the output (of input k's shape) may share input k's buffer (the planner's
    ``overwrite``); None: it may not.  ``overlap`` generalises it to outputs of another
    shape: how the kernel walks input 0 and its output (an
    :class:`~toolchain.graph.overlap.AccessOrder`), from which the planner takes the lead
    by which the output may start before input 0 (the planner's ``overlap``).
    """

    schedule: Schedule
    input_values: list[Value]
    output_values: list[Value]
    info: dict[str, Any] = field(default_factory=dict)
    #: the input the output may be written over (see above), or None
    in_place: int | None = None
    #: how the kernel walks input 0 and its output (see above), or None
    overlap: AccessOrder | None = None


def register_schedule(op_name: str, key: str) -> Callable[[ScheduleFn], ScheduleFn]:
    """Decorator: ``fn(node, target)`` is the default schedule of ``op_name`` on targets
    with ``key`` among their descriptor's ``keys`` (or of that kind; ``"cpu"``: every CPU
    kind), ``op_name="*"`` a default for every op. It comes before the built-in table's
    entry for the same key; a later registration replaces an earlier one.

    >>> @register_schedule("Example", "c")
    ... def _example(node, target):
    ...     return None
    >>> ("Example", "c") in registered()
    True
    >>> _ = unregister_schedule("Example", "c")
    """

    def deco(fn: ScheduleFn) -> ScheduleFn:
        _ADDED[(op_name, key)] = fn
        return fn

    return deco


def unregister_schedule(op_name: str, key: str) -> ScheduleFn | None:
    """Remove a :func:`register_schedule` registration; returns the function."""
    return _ADDED.pop((op_name, key), None)


def _table() -> dict[tuple[str, str], ScheduleFn]:
    from toolchain.schedules.strategy import STRATEGIES  # imports every family's schedules

    return STRATEGIES


def registered() -> list[tuple[str, str]]:
    """Every ``(op_name, key)`` with a schedule (built in or added), sorted."""
    return sorted({*_table(), *_ADDED})


def target_keys(t: Target) -> list[str]:
    """The strategy keys of ``t``, most specific first: its descriptor's ``keys``, its
    kind, and ``cpu`` for the CPU kinds.

    >>> from toolchain.target import load_target
    >>> target_keys(load_target("cortex-m7"))
    ['cortex_m', 'arm', 'cpu', 'c']
    """
    keys = [*t.keys, t.kind] + (["cpu"] if t.kind in CPU_KINDS else [])
    return list(dict.fromkeys(keys))


def lookup(op: str, target: str | Target | None) -> ScheduleFn | None:
    """The schedule function for ``op`` on ``target`` (see the module docstring), or None."""
    t = resolve_target(target)
    table = _table()
    for o in (op, "*"):
        for k in target_keys(t):
            fn = _ADDED.get((o, k)) or table.get((o, k))
            if fn is not None:
                return fn
    return None


def schedule_for(node: Node, target: str | Target | None = None) -> OpSchedule:
    """The default schedule of ``node`` on ``target`` as an :class:`OpSchedule`.

    Raises :class:`~toolchain.errors.NoScheduleError` naming the node and target when no
    schedule is registered for its op (or the one registered returns None: it does not
    handle this configuration).

    >>> from toolchain import te
    >>> from toolchain.graph.ir import Node, Value
    >>> from toolchain.topi.registry import node_compute
    >>> @register_schedule("Relu", "x86")
    ... def _relu(node, target):
    ...     nc = node_compute(node)
    ...     return Schedule(te.create_prim_func(nc.inputs + nc.outputs))
    >>> x = Value("x", (4, 8), "float32"); y = Value("y", (4, 8), "float32")
    >>> s = schedule_for(Node("Relu", "r", [x], [y]), "x86_64-avx2")
    >>> [v.name for v in s.input_values], s.info["schedule"]
    (['x'], '_relu')
    >>> _ = unregister_schedule("Relu", "x86")
    """
    t = resolve_target(target)
    fn = lookup(node.op, t)
    if fn is None:
        ops = sorted({o for o, _ in registered()})
        raise NoScheduleError(f"{node.describe()}: no default schedule for op {node.op!r} on "
                               f"target {t.name!r} (kind {t.kind}); ops with one: "
                               f"{', '.join(ops) or 'none'}")
    out = fn(node, t)
    if out is None:
        raise NoScheduleError(f"{node.describe()}: the default schedule for {node.op!r} on "
                               f"{t.name!r} does not handle this configuration")
    if isinstance(out, OpSchedule):
        return out
    if isinstance(out, Schedule):
        from toolchain.topi.registry import node_compute

        nc = node_compute(node)
        return OpSchedule(out, list(nc.input_values), list(node.outputs),
                          {"schedule": getattr(fn, "__name__", "?")})
    raise TypeError(f"schedule function {fn!r} returned {type(out).__name__}, expected a "
                    "Schedule or OpSchedule")
