"""Default CPU schedules of the integer ops (QConv, QGemm, QAdd, QAvgPool).

The computes (:mod:`toolchain.topi.int8`) are scheduled by the rule-driven CPU scheduler
of :mod:`toolchain.schedules.generic.ops` (inline the zero-point shift and padding, vectorize
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

from typing import Any

from toolchain import te
from toolchain.codegen.names import sanitize
from toolchain.errors import KilnError
from toolchain.graph.ir import Node, Value
from toolchain.schedules.registry import OpSchedule
from toolchain.tir.schedule import Schedule

INT8_OPS = ("QConv", "QGemm", "QAdd", "QAvgPool")


def int8_kernel_name(name: str) -> str:
    """The TE name of an int8 node's kernel: the sanitised node name with ``_int8`` after
    it, or ``q_`` before it where it is empty or starts with a digit.

    >>> int8_kernel_name("/conv1/Conv_quant"), int8_kernel_name("3x3")
    ('_conv1_Conv_quant_int8', 'q_3x3')
    """
    if not name or name[0].isdigit():
        return sanitize(name, unicode=True, lead="q_", empty="q_", reserved=False)
    return sanitize(name, unicode=True, reserved=False) + "_int8"


def schedule_rules(func: Any, target: Any, op: str) -> Schedule:
    """The cpu_ops rule steps, except that a convolution keeps its zero-point-shifted,
    padded input as a stage (attached per output row): the reduction then reads it without
    bounds guards and vectorizes along the row."""
    from toolchain.schedules.generic import ops as cpu_ops

    cfg = cpu_ops.cpu_config(target)
    sch = Schedule(func)
    blocks = block_names(sch)
    # depthwise convolutions, dense layers and unpadded convolutions: the plain rules
    if op != "QConv" or "pad" not in blocks or "conv2d_nchw" not in blocks:
        return cpu_ops.schedule_cpu(func, cfg)
    cpu_ops.inline_stages(sch, {"x_shifted"})
    n, m, y = sch.get_loops(sch.get_block("conv2d_nchw"))[:3]
    sch.reorder(y, m)  # one padded row band serves every output channel
    sch.compute_at(sch.get_block("pad"), y)
    sch.reverse_compute_at(sch.get_block("qconv"), y)  # requantize each row in cache
    cpu_ops.inline_stages(sch, set(block_names(sch)) - {"pad"})
    cpu_ops.rfactor_rows(sch, cfg)
    cpu_ops.attach_stages(sch, cfg)
    cpu_ops.schedule_loops(sch, cfg)
    cpu_ops.parallelize(sch, cfg)
    return sch


def block_names(sch: Schedule) -> list[str]:
    """The names of ``sch``'s blocks, in program order (which stages a compute made)."""
    from toolchain.tir.schedule import state as st

    return list(st.block_names(sch.mod))


def _blocked_pool(func: Any) -> Schedule:
    """QAvgPool over an ``NCHW{B}c`` input: each window summed ``B`` channels at a time, the
    block's lanes innermost and vectorized (``qpool_sum[n, cb, y, x, :] += x[n, cb, y', x',
    :]``); padding and the zero-point shift inlined into the sum."""
    sch = Schedule(func)
    names = block_names(sch)
    for b in ("x_shifted", "pad"):
        if b in names:
            sch.compute_inline(sch.get_block(b))
    acc = sch.get_block("qpool_sum")
    n_red = sum(iv.iter_type == "reduce" for iv in sch.get(acc).iter_vars)  # 1: global
    loops = sch.get_loops(acc)
    e, red = loops[-n_red - 1], loops[-n_red:]
    sch.reorder(*red, e)
    init = sch.decompose_reduction(acc, red[0])
    sch.vectorize(sch.get_loops(acc)[-1])
    sch.vectorize(sch.get_loops(init)[-1])
    return sch


def schedule_int8(node: Node, target: Any) -> OpSchedule:
    """The default schedule of one integer op; packed shift tables become new constants."""
    from toolchain.topi.registry import node_compute

    nc = node_compute(node)
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs), name=int8_kernel_name(node.name))
    try:
        if node.op == "QAvgPool" and node.attrs.get("data_layout", "NCHW") != "NCHW":
            sch, how = _blocked_pool(func), "blocked window sums"
        else:
            sch = schedule_rules(func, target, node.op)
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

