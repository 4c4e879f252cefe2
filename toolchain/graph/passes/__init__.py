"""Graph-level optimisation: pure ``Graph -> Graph`` passes and their pipeline.

The ops the passes introduce (``Fused``, ``LayoutTransform``, ``LayoutConv``,
``LayoutPool``) are in the op table of :mod:`toolchain.graph.ops.registry`.  See
``docs/passes.md``.

Example::

    >>> from toolchain.graph.passes import run_pipeline, DEFAULT_PASSES
    >>> DEFAULT_PASSES[0], DEFAULT_PASSES[-1]
    ('expand_recurrent', 'fuse')
"""

from __future__ import annotations

from toolchain.graph.passes.constant_fold import constant_fold
from toolchain.graph.passes.dce import dead_code_elimination
from toolchain.graph.passes.expand_recurrent import expand_recurrent
from toolchain.graph.passes.fold_affine import fold_affine
from toolchain.graph.passes.fuse_attention import fuse_attention
from toolchain.graph.passes.fused_op import format_graph, fused_node
from toolchain.graph.passes.fusion import fuse, kernel_name
from toolchain.graph.passes.layout import (
    LayoutTarget,
    layout_for_target,
    parse_layout_target,
    transform_layout,
)
from toolchain.graph.passes.pipeline import DEFAULT_PASSES, PASSES, run_pipeline
from toolchain.graph.passes.simplify import simplify

__all__ = [
    "DEFAULT_PASSES", "PASSES", "LayoutTarget", "constant_fold", "dead_code_elimination",
    "expand_recurrent",
    "fold_affine", "format_graph", "fuse_attention",
    "fuse", "fused_node", "kernel_name", "layout_for_target",
    "parse_layout_target",
    "run_pipeline", "simplify", "transform_layout",
]
