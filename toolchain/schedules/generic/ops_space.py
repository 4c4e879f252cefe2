"""The search space of the rule-driven CPU schedule
(:func:`~toolchain.schedules.generic.ops.schedule_cpu`) of a fused group without a complex
anchor of its own: element-wise chains (GELU's ``Div Erf Add Mul Mul``), reductions,
softmax, layer norm, pooling, transposes and layout transforms.

The rules read a :class:`~toolchain.schedules.generic.ops.CpuConfig`; the knobs are its
fields, each default the target's (so a compile without records is unchanged):

* ``vector_bits`` -- the vector width the rules split and vectorize by: the target's, half
  of it (down to 128 bits), twice or four times it (two or four vectors an iteration:
  independent chains for the compiler to interleave; the rfactored partial sums of a row
  reduction twice as many);
* ``rfactor`` -- step 2 (contiguous row reductions split by the lanes and rfactored) on or
  off, where the kernel has a reduction;
* ``attach`` -- step 3 (intermediates computed under their readers' row loop) on or off,
  where the kernel keeps more than one stage;
* ``unroll_window`` -- reduction windows of at most this many cells unrolled (0, 16, 64),
  where the kernel has a reduction;
* ``tile`` -- the transpose tile edge (8, 16, 32), where the group transposes.

A target with fewer than four float lanes (Cortex-M) declares no space: its kernels are
scalar loops the rules leave alone.

>>> from toolchain import te
>>> from toolchain.graph.ir import Graph, Node, Value
>>> from toolchain.graph.passes.fused_op import fused_node
>>> from toolchain.schedules.generic.ops import CpuConfig
>>> from toolchain.topi.nn import softmax
>>> x, y = Value("x", (4, 64), "float32"), Value("y", (4, 64), "float32")
>>> g = fused_node(Graph("k", [x], [y], [Node("Softmax", "sm", [x], [y], {"axis": -1})]),
...                "opaque", [x])
>>> xp = te.placeholder((4, 64), name="x")
>>> f = te.create_prim_func([xp, softmax.softmax(xp)])
>>> s = ops_space(g, f, CpuConfig(vector_bits=256))
>>> s.default()
{'vector_bits': 256, 'rfactor': True, 'attach': True, 'unroll_window': 16}
>>> tuned_config(CpuConfig(vector_bits=256), {**s.default(), "vector_bits": 512}).lanes("float32")
16
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from toolchain.autotune.space import Knob, Space, with_default
from toolchain.graph.ir import Node
from toolchain.schedules.generic.access import is_reduce
from toolchain.schedules.generic.ops import CpuConfig
from toolchain.tir import ir
from toolchain.tir.schedule import state as st

#: ops whose kernels the transpose rule tiles
TRANSPOSING = frozenset({"Transpose", "LayoutTransform", "DepthToSpace", "SpaceToDepth"})


def _shapes(values: Any) -> str:
    return ",".join(f"{'x'.join(map(str, v.shape))}{v.dtype}" for v in values if v is not None)


def _attr_digest(nodes: Any) -> str:
    """A short digest of the inner nodes' attributes (axes, permutations, epsilons ...):
    groups of the same ops and shapes but other attributes are other workloads."""
    text = repr([(n.op, sorted((k, str(v)) for k, v in n.attrs.items())) for n in nodes])
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def ops_space(node: Node, func: ir.PrimFunc, cfg: CpuConfig) -> Space | None:
    """The knobs of the CPU schedule of ``Fused`` group ``node`` (its PrimFunc ``func``,
    before scheduling) on ``cfg``; None where there is nothing to choose (fewer than four
    float lanes)."""
    if cfg.lanes("float32") < 4:
        return None
    inner = node.attrs["graph"].nodes
    blocks = [r.block for r in st.all_blocks(func) if r.block.name_hint != "root"]
    reduces = any(is_reduce(b) for b in blocks)
    v = cfg.vector_bits
    widths = tuple(w for w in (v // 2, v, 2 * v, 4 * v) if w >= 128)
    knobs = [Knob("vector_bits", widths, v, "the vector width the rules split by")]
    if reduces:
        knobs.append(Knob("rfactor", (True, False), True,
                          "contiguous row reductions rfactored by the lanes"))
    if len(blocks) > 1:
        knobs.append(Knob("attach", (True, False), True,
                          "intermediates computed under their readers' row loop"))
    if reduces:
        knobs.append(Knob("unroll_window", with_default((0, 16, 64), cfg.unroll_window),
                          cfg.unroll_window, "reduction windows up to this many cells "
                          "unrolled"))
    if any(n.op in TRANSPOSING for n in inner):
        knobs.append(Knob("tile", with_default((8, 16, 32), cfg.tile), cfg.tile,
                          "the transpose tile edge"))
    key = (f"cpu_ops|{'-'.join(n.op for n in inner)}|in{_shapes(node.inputs)}|"
           f"out{_shapes(node.outputs)}|a{_attr_digest(inner)}|v{v}c{cfg.cores}")
    seeds = ({"vector_bits": 2 * v}, {"vector_bits": 4 * v}, {"attach": False})
    return Space("cpu_ops", key, tuple(knobs), seeds=seeds)


def tuned_config(cfg: CpuConfig, point: dict[str, Any]) -> CpuConfig:
    """``cfg`` with the knobs of a point of :func:`ops_space` (the default point gives
    ``cfg`` back unchanged)."""
    return replace(cfg, **{k: point[k] for k in ("vector_bits", "rfactor", "attach",
                                                   "unroll_window", "tile") if k in point})
