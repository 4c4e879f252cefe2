"""The graph pass pipeline: run the passes in order, optionally dumping the graph after each.

Default order (:data:`DEFAULT_PASSES`)::

    expand_recurrent -> quantize_ops -> constant_fold -> simplify -> fold_affine
                     -> fuse_attention -> dead_code_elimination -> transform_layout -> simplify
                     -> dead_code_elimination -> fuse

``expand_recurrent`` comes first: it unrolls ``LSTM``/``GRU``/``RNN`` nodes into MatMuls
and element-wise ops, which every later pass knows (constant weights fold right after).
``quantize_ops`` comes next so that QuantizeLinear/DequantizeLinear pairs around weights are
turned into integer ops before constant folding would fold the weights back into float (it
leaves a graph without QDQ pairs unchanged).

``fuse_attention`` comes after folding and simplification (the scale and mask it looks
for are constants by then, and an inference ``Dropout`` between Softmax and the second
MatMul is gone) and before the layout pass and the second ``simplify``, which merges the
transposes it inserts with the model's own.

``simplify`` runs before ``fold_affine`` so an ``Identity`` or ``Dropout`` between a conv and
its BatchNorm does not block the fold; dead code is removed before layouts are chosen so no
transform is inserted for a dead value; ``simplify`` runs again after the layout pass to
cancel a model's own transposes against the inserted transforms (``NHWC`` models on an
``NHWC`` target); fusion comes last because it wraps everything into ``Fused`` kernels.

With ``dump_dir`` the printed graph (kernel bodies included, see
:func:`~toolchain.graph.passes.fused_op.format_graph`) is written before the first pass as
``00_input.txt`` and after pass *k* as ``NN_<pass>.txt`` (``01_expand_recurrent.txt`` …
``11_fuse.txt``) — what ``kiln compile --dump-ir DIR`` shows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph
from toolchain.graph.passes.constant_fold import constant_fold
from toolchain.graph.passes.dce import dead_code_elimination
from toolchain.graph.passes.expand_recurrent import expand_recurrent
from toolchain.graph.passes.fold_affine import fold_affine
from toolchain.graph.passes.fuse_attention import fuse_attention
from toolchain.graph.passes.fused_op import format_graph
from toolchain.graph.passes.fusion import fuse
from toolchain.graph.passes.layout import LayoutTarget, parse_layout_target, transform_layout
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.passes.simplify import simplify

Pass = Callable[[Graph], Graph]

#: every pass by name (``transform_layout`` gets the pipeline's ``target_layout``)
PASSES: dict[str, Pass] = {
    "expand_recurrent": expand_recurrent,
    "quantize_ops": quantize_ops,
    "constant_fold": constant_fold,
    "simplify": simplify,
    "fold_affine": fold_affine,
    "fuse_attention": fuse_attention,
    "dead_code_elimination": dead_code_elimination,
    "transform_layout": transform_layout,
    "fuse": fuse,
}

#: passes that lower an op no kernel computes: leaving the pass out of a pipeline for a
#: graph holding such an op is refused up front, naming the node
LOWERS: dict[str, tuple[str, ...]] = {
    "expand_recurrent": ("GRU", "LSTM", "RNN"),
    "fuse_attention": ("Attention",),
}
# (the quantizer's preparation pipeline runs without them: it compiles nothing)

DEFAULT_PASSES: tuple[str, ...] = (
    "expand_recurrent", "quantize_ops", "constant_fold", "simplify", "fold_affine",
    "fuse_attention", "dead_code_elimination", "transform_layout", "simplify",
    "dead_code_elimination", "fuse",
)


def run_pipeline(graph: Graph, target_layout: str | LayoutTarget = "nchw",
                 dump_dir: str | os.PathLike[str] | None = None,
                 passes: Sequence[str | Pass] | None = None) -> Graph:
    """Run ``passes`` (names from :data:`PASSES` or functions; default
    :data:`DEFAULT_PASSES`) on ``graph`` and return the result.

    Example::

        >>> import numpy as np
        >>> from toolchain.graph.ir import Node, Value
        >>> x, y, z = (Value(n, (2,), "float32") for n in "xyz")
        >>> g = Graph("g", [x], [z], [Node("Identity", "id", [x], [y]),
        ...                           Node("Relu", "relu", [y], [z])])
        >>> [n.attrs["kernel"] for n in run_pipeline(g).nodes]
        ['fused_relu_0']
    """
    layout = parse_layout_target(target_layout)
    chosen: list[tuple[str, Pass]] = []
    for p in DEFAULT_PASSES if passes is None else passes:
        if callable(p):
            chosen.append((getattr(p, "__name__", "pass"), p))
        elif p in PASSES:
            chosen.append((p, PASSES[p]))
        else:
            raise OptionError(f"unknown graph pass {p!r}; the passes are: {', '.join(PASSES)}")
    out = Path(dump_dir) if dump_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "00_input.txt").write_text(format_graph(graph) + "\n")
    for i, (name, fn) in enumerate(chosen, start=1):
        graph = fn(graph, layout) if fn is transform_layout else fn(graph)
        if out is not None:
            (out / f"{i:02d}_{name}.txt").write_text(format_graph(graph) + "\n")
    return graph


def check_lowered(graph: Graph, chosen: Sequence[str]) -> None:
    """Refuse a compile pipeline (pass names ``chosen``) that leaves out the pass lowering
    an op of ``graph`` to ops with kernels (:data:`LOWERS`), naming the node.

    Example::

        >>> from toolchain.graph.ir import Node, Value
        >>> x, y = Value("x", (1, 2, 4), "float32"), Value("y", (1, 2, 4), "float32")
        >>> g = Graph("g", [x], [y], [Node("Attention", "att", [x, x, x], [y])])
        >>> check_lowered(g, ["fuse"])
        Traceback (most recent call last):
        ...
        toolchain.errors.OptionError: node 'att' (Attention): only the graph pass \
'fuse_attention' lowers Attention to kernels; keep that pass (drop '--skip-pass fuse_attention')
    """
    for pass_name, ops in LOWERS.items():
        if pass_name in chosen:
            continue
        node = next((n for n in graph.nodes if n.op in ops), None)
        if node is not None:
            raise OptionError(
                f"node {node.name!r} ({node.op}): only the graph pass {pass_name!r} lowers "
                f"{node.op} to kernels; keep that pass (drop '--skip-pass {pass_name}')")
