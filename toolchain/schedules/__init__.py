"""Default schedules per target, and :func:`compile_op`: build and run one op alone.

One folder per target family (``generic/``, ``x86/``, ``cortex_m/``), all listed in one
explicit table, :data:`toolchain.schedules.strategy.STRATEGIES`, keyed by op and by the
keys a target descriptor declares (:func:`toolchain.schedules.registry.lookup`);
:func:`compile_op` looks one up for a node, lowers, compiles and loads it, and returns a
callable :class:`CompiledOp`.

Example::

    >>> import numpy as np
    >>> from toolchain.schedules import compile_op
    >>> w = np.ones((8, 3), np.float32)
    >>> op = compile_op("MatMul", "c-generic", inputs=[(4, 8), w])
    >>> y, = op(np.ones((4, 8), np.float32))
    >>> y.shape, float(y[0, 0])
    ((4, 3), 8.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.errors import InputError, KilnError
from toolchain.gcpause import paused_gc
from toolchain.graph.ir import Node, Value, dtype_of
from toolchain.graph.ops.registry import get_op
from toolchain.schedules.registry import (
    OpSchedule,
    register_schedule,
    resolve_target,
    schedule_for,
)
from toolchain.target import Target

__all__ = ["CompiledOp", "OpSchedule", "compile_op", "make_node", "register_schedule",
           "schedule_for"]


@dataclass
class CompiledOp:
    """One op built for the host: call it with the run-time inputs, get the outputs.

    ``metadata`` holds the target, FLOPs, what the schedule chose (``info``) and the build
    info (compiler, flags, library). Constant inputs (weights, packed at compile time when
    the schedule wants them packed) are bound: pass only the run-time inputs, in node
    input order.
    """

    node: Node
    module: Any
    op_schedule: OpSchedule
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def runtime_inputs(self) -> list[Value]:
        """The kernel inputs a caller passes (those without compile-time data)."""
        return [v for v in self.op_schedule.input_values if v.data is None]

    def __call__(self, *arrays: np.ndarray, out: Sequence[np.ndarray] | None = None
                 ) -> list[np.ndarray]:
        args = self._inputs(arrays)
        outs = list(out) if out is not None else [
            np.empty(v.shape or (1,), dtype=np.dtype(v.dtype))
            for v in self.op_schedule.output_values]
        if len(outs) != len(self.op_schedule.output_values):
            raise InputError(f"{self.node.describe()}: out= takes "
                             f"{len(self.op_schedule.output_values)} arrays, got {len(outs)}")
        self.module(*args, *outs)
        return [o.reshape(v.shape) for o, v in zip(outs, self.op_schedule.output_values,
                                                   strict=True)]

    def bound_args(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """All kernel arguments (constants filled in, fresh outputs) for timing loops."""
        outs = [np.empty(v.shape or (1,), dtype=np.dtype(v.dtype))
                for v in self.op_schedule.output_values]
        return self._inputs(arrays) + outs

    def _inputs(self, arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """The kernel's input arguments: the run-time ``arrays`` (checked: one per run-time
        input, each of its value's shape; a rank-0 value also takes shape ``(1,)``) and the
        constants, in kernel order."""
        want = self.runtime_inputs
        if len(arrays) != len(want):
            raise InputError(f"{self.node.describe()}: takes {len(want)} run-time inputs "
                             f"({', '.join(v.name for v in want)}), got {len(arrays)}")
        given = iter(arrays)
        args = []
        for v in self.op_schedule.input_values:
            if v.data is not None:
                args.append(v.data)
                continue
            a = np.ascontiguousarray(next(given))
            if a.shape != tuple(v.shape) and not (v.shape == () and a.shape == (1,)):
                raise InputError(f"{self.node.describe()}: input {v.name!r} has shape "
                                 f"{a.shape}, expected {tuple(v.shape)}")
            args.append(a.reshape(v.shape or (1,)))
        return args


def _as_value(spec: Any, i: int) -> Value:
    if isinstance(spec, Value):
        return spec
    if isinstance(spec, np.ndarray):
        return Value(f"w{i}", spec.shape, dtype_of(spec), data=spec)
    if (isinstance(spec, tuple | list) and len(spec) == 2 and isinstance(spec[1], str)):
        return Value(f"x{i}", tuple(spec[0]), spec[1])
    if isinstance(spec, tuple | list) and all(isinstance(d, int | np.integer) for d in spec):
        return Value(f"x{i}", tuple(int(d) for d in spec), "float32")
    raise InputError(f"compile_op: input {i} must be a shape tuple (run-time float32 "
                     f"input), a (shape, dtype) pair, a numpy array (constant) or a Value; "
                     f"got {spec!r}")


def make_node(op: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None,
              name: str | None = None) -> Node:
    """A one-op graph node with output types inferred by the op registry.

    >>> make_node("Relu", [(2, 3)]).outputs[0].shape
    (2, 3)
    """
    opdef = get_op(op)
    if attrs is not None and not isinstance(attrs, Mapping):
        raise InputError(f"{op}: attrs must map attribute names to values, e.g. "
                         f"{{'axis': 1}}; got a {type(attrs).__name__}")
    ins = [None if s is None else _as_value(s, i) for i, s in enumerate(inputs)]
    name = name or op.lower()
    probe = Node(op, name, ins, [Value(f"{name}_out{i}", (), "float32")
                                for i in range(_n_outputs(opdef))], dict(attrs or {}))
    types = list(opdef.infer(probe))
    outs = [Value(f"y{i}", t.shape, t.dtype) for i, t in enumerate(types)]
    return probe.replace(outputs=outs)


def _n_outputs(opdef: Any) -> int:
    n = opdef.num_outputs
    return n if isinstance(n, int) else n[0]


def compile_op(op: str | Node, target: str | Target | None = None, *,
               inputs: Sequence[Any] | None = None, attrs: Mapping[str, Any] | None = None,
               name: str | None = None, **build_kwargs: Any) -> CompiledOp:
    """Schedule ``op`` with the default schedule of ``target`` and build it for the host.

    ``op`` is a :class:`~toolchain.graph.ir.Node` or an op type; for an op type,
    ``inputs`` gives each input as a shape tuple (a float32 run-time input), a
    ``(shape, dtype)`` pair, a numpy array (a constant, e.g. weights) or a ``Value``, and
    ``attrs`` its ONNX attributes. ``build_kwargs`` go to :func:`toolchain.build`; the
    descriptor's ``cflags`` are added, and :func:`toolchain.build` adds the flags of any
    tensor intrinsic the schedule used (recorded, with the intrinsics' C bodies, by the
    lowering pipeline's built-in :func:`toolchain.intrinsics.attach_intrinsics` pass).

    >>> op = compile_op("Relu", "c-generic", inputs=[(3,)])
    >>> op(np.array([-1.0, 0.5, 2.0], np.float32))[0].tolist()
    [0.0, 0.5, 2.0]
    """
    from toolchain.runtime.build import build

    t = resolve_target(target)
    if isinstance(op, Node):
        if inputs is not None or attrs is not None:
            raise InputError(f"compile_op({op.describe()}): a Node carries its own inputs "
                             "and attributes; pass inputs= and attrs= only with an op type")
        node = op
    else:
        if inputs is None:
            raise InputError(f"compile_op({op!r}): give inputs=[shapes or arrays]")
        node = make_node(op, inputs, attrs, name)
    # the intrinsics' own flags (-mavx512vnni) come from the lowered kernel's typed support
    flags = [*t.cflags, *build_kwargs.pop("extra_flags", ())]
    with paused_gc():  # scheduling and lowering build large IR (toolchain.gcpause)
        s = schedule_for(node, t)
        mod = build(s.schedule, t, name=name, extra_flags=flags, **build_kwargs)
    try:
        flops = get_op(node.op).flops_of(node)
    except KilnError:
        flops = 0
    meta = {"target": t.name, "op": node.op, "node": node.name, "flops": flops,
            "info": dict(s.info), "build": dict(mod.build_info)}
    return CompiledOp(node, mod, s, meta)
