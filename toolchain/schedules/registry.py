"""Which default schedule builds which op on which target: :func:`register_schedule`.

A schedule function takes ``(node, target)`` — a graph :class:`~toolchain.graph.ir.Node`
and a loaded :class:`~toolchain.target.Target` — and returns either a
:class:`~toolchain.tir.schedule.Schedule` whose PrimFunc's parameters are the node's
compute inputs (the order of ``node_compute(node).input_values``) followed by its outputs,
or an :class:`OpSchedule` when the kernel's parameters differ from that (for example a
convolution whose weights were packed at compile time: its ``input_values`` then name a
new constant value holding the packed data).

Lookup order in :func:`schedule_for` for a node of op ``Conv`` on target ``x86_64-avx2``
(kind ``c``): ``(Conv, x86_64-avx2)``, ``(Conv, c)``, ``(Conv, cpu)``, then the same three
with op ``*`` (a default for every op). ``cpu`` matches the CPU kinds ``c`` and ``llvm``.

Example::

    >>> @register_schedule("MyOp", "cpu")
    ... def _my_schedule(node, target):
    ...     ...
    >>> lookup("MyOp", "c-generic") is _my_schedule
    True
    >>> _ = unregister_schedule("MyOp", "cpu")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolchain.errors import UnsupportedError
from toolchain.graph.ir import Node, Value
from toolchain.target import Target, load_target
from toolchain.tir.schedule import Schedule

#: target kinds that ``"cpu"`` stands for
CPU_KINDS = ("c", "llvm")

ScheduleFn = Callable[[Node, Target], "Schedule | OpSchedule | None"]
_SCHEDULES: dict[tuple[str, str], ScheduleFn] = {}


@dataclass
class OpSchedule:
    """A scheduled kernel of one node and what its parameters stand for.

    ``input_values`` / ``output_values`` are the graph values of the PrimFunc's parameters,
    in order. A value with ``data`` is a compile-time constant (packed weights): a caller
    passes its data, a bundle stores it. ``info`` says what was chosen (algorithm, layout,
    tile sizes), for metadata and benchmarks; ``info["in_place"] = k`` says the kernel reads
    each part of input ``k`` before writing the output over it, so the output (of input
    k's shape) may share input k's buffer (the memory planner's ``overwrite``).
    """

    schedule: Schedule
    input_values: list[Value]
    output_values: list[Value]
    info: dict[str, Any] = field(default_factory=dict)


def register_schedule(op_name: str, target_kind: str) -> Callable[[ScheduleFn], ScheduleFn]:
    """Decorator: ``fn(node, target)`` is the default schedule of ``op_name`` on targets
    of kind (or name) ``target_kind``; ``"cpu"`` means every CPU kind, ``op_name="*"`` a
    fallback for every op. A later registration for the same key replaces the earlier one.

    >>> @register_schedule("Example", "c")
    ... def _example(node, target):
    ...     return None
    >>> ("Example", "c") in registered()
    True
    >>> _ = unregister_schedule("Example", "c")
    """

    def deco(fn: ScheduleFn) -> ScheduleFn:
        _SCHEDULES[(op_name, target_kind)] = fn
        return fn

    return deco


def unregister_schedule(op_name: str, target_kind: str) -> ScheduleFn | None:
    """Remove a registration (tests); returns the function that was registered."""
    return _SCHEDULES.pop((op_name, target_kind), None)


def registered() -> list[tuple[str, str]]:
    """Every ``(op_name, target_kind)`` with a schedule, sorted."""
    _load()
    return sorted(_SCHEDULES)


def _load() -> None:
    # the schedule modules register themselves on import; a module another helper has
    # not written yet is simply absent
    import importlib

    for mod in ("cpu_conv2d", "cpu_dense", "cpu_ops", "cpu_int8", "cortex_m_fp32", "fused"):
        try:
            importlib.import_module(f"toolchain.schedules.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"toolchain.schedules.{mod}":
                raise


def resolve_target(target: str | Target | None) -> Target:
    """A :class:`Target` from a name, a Target, or None (``c-generic``)."""
    if target is None:
        return load_target("c-generic")
    if isinstance(target, Target):
        return target
    if target in ("host", "native"):
        from toolchain.target import host_target

        return host_target()
    return load_target(target)


def _keys(op: str, t: Target) -> list[tuple[str, str]]:
    kinds = [t.name, t.kind] + (["cpu"] if t.kind in CPU_KINDS else [])
    return [(o, k) for o in (op, "*") for k in kinds]


def lookup(op: str, target: str | Target | None) -> ScheduleFn | None:
    """The schedule function for ``op`` on ``target`` (see the module docstring), or None."""
    _load()
    t = resolve_target(target)
    for key in _keys(op, t):
        fn = _SCHEDULES.get(key)
        if fn is not None:
            return fn
    return None


def schedule_for(node: Node, target: str | Target | None = None) -> OpSchedule:
    """The default schedule of ``node`` on ``target`` as an :class:`OpSchedule`.

    Raises :class:`~toolchain.errors.UnsupportedError` naming the node and target when no
    schedule is registered for its op.

    >>> from toolchain import te
    >>> from toolchain.graph.ir import Node, Value
    >>> from toolchain.topi.registry import node_compute
    >>> @register_schedule("Relu", "x86_64-avx2")
    ... def _relu(node, target):
    ...     nc = node_compute(node)
    ...     return Schedule(te.create_prim_func(nc.inputs + nc.outputs))
    >>> x = Value("x", (4, 8), "float32"); y = Value("y", (4, 8), "float32")
    >>> s = schedule_for(Node("Relu", "r", [x], [y]), "x86_64-avx2")
    >>> [v.name for v in s.input_values], s.info["schedule"]
    (['x'], '_relu')
    >>> _ = unregister_schedule("Relu", "x86_64-avx2")
    """
    t = resolve_target(target)
    fn = lookup(node.op, t)
    if fn is None:
        ops = sorted({o for o, _ in _SCHEDULES})
        raise UnsupportedError(f"{node.describe()}: no default schedule for op {node.op!r} on "
                               f"target {t.name!r} (kind {t.kind}); ops with one: "
                               f"{', '.join(ops) or 'none'}")
    out = fn(node, t)
    if out is None:
        raise UnsupportedError(f"{node.describe()}: the default schedule for {node.op!r} on "
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
