"""The strategy table: which default schedule builds which op on which kind of target.

One explicit table, keyed ``(op, key)``: ``key`` is one of the ``keys`` a target
descriptor declares (what the target *is*, most specific first: ``[x86, cpu]``,
``[cortex_m, arm, cpu]``, ``[cpu]``) or its ``kind``; ``op="*"`` is the default for every
op. :func:`toolchain.schedules.registry.lookup` tries the target's keys in order, so a
family entry (``("QConv", "cortex_m")``) wins over the generic CPU one
(``("QConv", "cpu")``). Target names never appear here: a descriptor that
``extends: x86_64-avx512`` under another name inherits its keys and gets the same kernels.

One folder per target family: ``generic/`` (every CPU: portable C), ``x86/``, ``cortex_m/``,
``gpu/`` (the accelerator joins the same way). Adding a family: its folder of computes and
schedules, its entries below, and ``keys: [<family>, cpu]`` in its descriptors
(``docs/targets.md``, "Adding a target").

>>> STRATEGIES[("Conv", "cortex_m")].__name__, STRATEGIES[("Conv", "cpu")].__name__
('schedule_conv2d_m', 'schedule_conv2d')
"""

from __future__ import annotations

from toolchain.schedules.cortex_m import fp32 as cortex_m_fp32
from toolchain.schedules.cortex_m import int8 as cortex_m_int8
from toolchain.schedules.generic import attention, conv2d, dense, fused, ops
from toolchain.schedules.generic import int8 as generic_int8
from toolchain.schedules.gpu import gemm as gpu_gemm
from toolchain.schedules.gpu import generic as gpu_generic
from toolchain.schedules.registry import ScheduleFn
from toolchain.schedules.x86 import int8 as x86_int8

#: ``(op, target key) -> schedule function`` (see the module docstring)
STRATEGIES: dict[tuple[str, str], ScheduleFn] = {
    # generic CPU: every descriptor with key ``cpu``
    **{(op, "cpu"): ops.default_schedule for op in ops.OPS},
    ("*", "cpu"): ops.default_schedule,
    ("Conv", "cpu"): conv2d.schedule_conv2d,
    ("LayoutConv", "cpu"): conv2d.schedule_layout_conv,
    ("MatMul", "cpu"): dense.schedule_dense,
    ("Gemm", "cpu"): dense.schedule_dense,
    ("Fused", "cpu"): fused.fused_schedule,
    ("FusedAttention", "cpu"): attention.schedule_attention,
    ("QAvgPool", "cpu"): generic_int8.schedule_int8,
    # the register-tiled int8 kernels are portable C (c-generic runs them too); their
    # int16-pair and channel-vectorized variants are chosen inside by the intrinsics and
    # vector width the descriptor declares
    **{(op, "cpu"): x86_int8.schedule_x86_int8 for op in ("QConv", "QGemm", "QAdd")},
    # Cortex-M (Armv7E-M DSP): CMSIS-NN-style int8 kernels, fp32 convolutions without
    # whole-tensor scratch
    **{(op, "cortex_m"): cortex_m_int8.schedule_cortex_m for op in ("QConv", "QGemm", "QAdd")},
    ("Conv", "cortex_m"): cortex_m_fp32.schedule_conv2d_m,
    # GPUs (CUDA): a group whose anchor is a GEMM (dense, matmul, batch matmul,
    # convolution as an implicit GEMM) gets shared-memory and register tiles; every other
    # group kernels of one thread per output element
    **{(op, "gpu"): gpu_gemm.schedule_tiled for op in gpu_gemm.GEMM_OPS},
    ("Fused", "gpu"): gpu_generic.fused_schedule,
}
