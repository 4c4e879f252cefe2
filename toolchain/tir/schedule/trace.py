"""The trace of a schedule: every primitive call, replayable on a fresh PrimFunc.

Handles are recorded by stable names (``b0`` for blocks, ``l1`` for loops) so a trace
prints as the Python that produced it and serialises to JSON (tuning records)::

    b0 = sch.get_block("C")
    l1, l2, l3 = sch.get_loops(b0)
    l4, l5 = sch.split(l1, factors=[None, 32])

``Trace.apply_to(func)`` replays it and returns the new :class:`Schedule`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolchain.errors import ScheduleError

if TYPE_CHECKING:
    from toolchain.tir import ir
    from toolchain.tir.schedule.schedule import Schedule


@dataclass(frozen=True)
class RVRef:
    """A reference to a handle by its trace name."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Instruction:
    """One primitive call: ``outputs = sch.<kind>(*args, **kwargs)``."""

    kind: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: tuple[str, ...]
    output_is_list: bool = False

    def __str__(self) -> str:
        parts = [_py(a) for a in self.args] + [f"{k}={_py(v)}" for k, v in self.kwargs.items()]
        call = f"sch.{self.kind}({', '.join(parts)})"
        if not self.outputs:
            return call
        lhs = ", ".join(self.outputs)
        if self.output_is_list and len(self.outputs) == 1:
            lhs += ","
        return f"{lhs} = {call}"


def _py(v: Any) -> str:
    if isinstance(v, RVRef):
        return v.name
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_py(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _to_json(v: Any) -> Any:
    if isinstance(v, RVRef):
        return {"rv": v.name}
    if isinstance(v, (list, tuple)):
        return [_to_json(x) for x in v]
    if isinstance(v, dict):
        return {"dict": {k: _to_json(x) for k, x in v.items()}}
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    raise ScheduleError(f"trace argument {v!r} ({type(v).__name__}) cannot be saved to JSON; "
                        "use Python numbers, strings and handles as schedule arguments")


def _from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if "rv" in v:
            return RVRef(v["rv"])
        return {k: _from_json(x) for k, x in v["dict"].items()}
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


@dataclass
class Trace:
    """The list of instructions applied so far."""

    instructions: list[Instruction] = field(default_factory=list)

    def append(self, inst: Instruction) -> None:
        self.instructions.append(inst)

    def __len__(self) -> int:
        return len(self.instructions)

    def __str__(self) -> str:
        return "\n".join(str(i) for i in self.instructions)

    def copy(self) -> Trace:
        return Trace(list(self.instructions))

    def apply_to(self, func: ir.PrimFunc, target: Any = None) -> Schedule:
        """Replay every instruction on ``func``; returns the resulting Schedule.

        >>> from toolchain import te
        >>> from toolchain.tir.schedule import Schedule
        >>> A = te.placeholder((64,), name="A")
        >>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
        >>> sch = Schedule(te.create_prim_func([A, B]))
        >>> i, = sch.get_loops(sch.get_block("B"))
        >>> _ = sch.split(i, factors=[None, 16])
        >>> print(sch.trace)
        b0 = sch.get_block('B')
        l1, = sch.get_loops(b0)
        l2, l3 = sch.split(l1, factors=[None, 16])
        >>> again = sch.trace.apply_to(te.create_prim_func([A, B]))
        >>> str(again.mod) == str(sch.mod)
        True
        """
        from toolchain.tir.schedule.schedule import Schedule

        sch = Schedule(func, target=target)
        env: dict[str, Any] = {}

        def resolve(v: Any) -> Any:
            if isinstance(v, RVRef):
                if v.name not in env:
                    raise ScheduleError(f"trace refers to handle {v.name} before it is made")
                return env[v.name]
            if isinstance(v, list):
                return [resolve(x) for x in v]
            if isinstance(v, tuple):
                return tuple(resolve(x) for x in v)
            return v

        for step, inst in enumerate(self.instructions, 1):
            method = getattr(sch, inst.kind, None)
            if method is None:
                raise ScheduleError(f"trace step {step}: unknown primitive {inst.kind!r}")
            out = method(*resolve(list(inst.args)),
                         **{k: resolve(v) for k, v in inst.kwargs.items()})
            flat = list(out) if isinstance(out, (list, tuple)) else ([] if out is None
                                                                    else [out])
            for name, rv in zip(inst.outputs, flat, strict=False):
                env[name] = rv
        return sch

    def as_json(self) -> str:
        """The trace as a JSON string (deterministic)."""
        data = [{"kind": i.kind, "args": _to_json(list(i.args)),
                 "kwargs": {k: _to_json(v) for k, v in i.kwargs.items()},
                 "outputs": list(i.outputs), "output_is_list": i.output_is_list}
                for i in self.instructions]
        return json.dumps(data, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Trace:
        """Inverse of :meth:`as_json`."""
        out = Trace()
        for d in json.loads(text):
            out.append(Instruction(d["kind"], tuple(_from_json(d["args"])),
                                   {k: _from_json(v) for k, v in d["kwargs"].items()},
                                   tuple(d["outputs"]), d["output_is_list"]))
        return out
