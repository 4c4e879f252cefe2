"""Default CPU schedules of the integer ops (QConv, QGemm, QAdd, QAvgPool).

The computes (:mod:`toolchain.topi.int8`) are scheduled by the rule-driven CPU scheduler
of :mod:`toolchain.schedules.cpu_ops` (inline the zero-point shift and padding, vectorize
the innermost contiguous output loop, parallelize the outer loops): the inner loops are
int8 loads, int32 multiply-accumulates and the int64 requantization epilogue. Should a
rule refuse, the plain loop nest of the compute is used, which is always correct.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 16), "int8"); y = Value("y", (1, 4), "int8")
    >>> c = [Value.constant("w", np.ones((4, 16), np.int8)),
    ...      Value.constant("b", np.zeros(4, np.int32)),
    ...      Value.constant("m", np.full(4, 1 << 30, np.int32)),
    ...      Value.constant("s", np.full((4, 2), 1 << 30, np.int32))]
    >>> op = schedule_int8(Node("QGemm", "fc", [x, *c], [y]), "c-generic")
    >>> [v.name for v in op.input_values][:2]
    ['x', 'w']
"""

from __future__ import annotations

import re
from typing import Any

from toolchain import te
from toolchain.errors import KilnError
from toolchain.graph.ir import Node, Value
from toolchain.schedules.registry import OpSchedule, register_schedule
from toolchain.tir.schedule import Schedule

INT8_OPS = ("QConv", "QGemm", "QAdd", "QAvgPool")


def _c_name(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return f"q_{s}" if not s or s[0].isdigit() else f"{s}_int8"


def schedule_int8(node: Node, target: Any) -> OpSchedule:
    """The default schedule of one integer op; packed shift tables become new constants."""
    import toolchain.topi.int8  # noqa: F401  (registers the computes)
    from toolchain.schedules.cpu_ops import schedule_cpu
    from toolchain.topi.registry import node_compute

    nc = node_compute(node)
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs), name=_c_name(node.name))
    try:
        sch = schedule_cpu(func, target)
        how = "cpu_ops rules"
    except KilnError:
        sch = Schedule(func)
        how = "plain loop nest"
    values: list[Value] = []
    for k, v in enumerate(nc.input_values):
        if k in nc.packs:
            v = Value.constant(f"{v.name}_packed", nc.packs[k](v.data))
        values.append(v)
    return OpSchedule(sch, values, list(node.outputs), {"schedule": "int8", "rules": how})


for _op in INT8_OPS:
    register_schedule(_op, "cpu")(schedule_int8)
