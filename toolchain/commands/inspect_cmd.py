"""``kiln inspect``: show a model's nodes, shapes, FLOPs and parameters as Kiln sees them.

The model is imported exactly as every other command imports it (canonical op forms,
static shapes, Shape-driven subgraphs folded), so the table shows what Kiln will compile.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from toolchain.commands._model_args import add_model_arguments, load_graph
from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Value
from toolchain.graph.ops.registry import get_op

HELP = "show the nodes, shapes, FLOPs and parameters of an ONNX model"

EPILOG = """\
examples:
  kiln inspect model.onnx
  kiln inspect model.onnx --json > model.json
  kiln inspect mobilenet.onnx --input-shape input=1,3,224,224
  kiln inspect model.onnx --memory-plan plan.svg

columns: node name, op, output shape(s), output dtype, FLOPs (multiply-adds count 2),
parameter bytes (constant inputs of the node), and the op's pattern kind (how it fuses:
injective, reduction, complex-out-fusable, opaque).  Totals count each constant once.

--json prints the same data with a stable schema ("schema": "kiln.inspect/1"):
  {"schema", "model", "graph", "opset",
   "inputs":  [{"name", "shape", "dtype"}], "outputs": [{"name", "shape", "dtype"}],
   "nodes":   [{"name", "op", "outputs": [{"name", "shape", "dtype"}], "flops",
                "param_bytes", "pattern"}],
   "totals":  {"nodes", "flops", "parameters", "param_bytes"}}
"""

SCHEMA = "kiln.inspect/1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_model_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--memory-plan", metavar="PLAN.svg",
                        help="optimise the graph, plan its memory arena and draw the plan "
                             "(tensor lifetimes x arena offsets) as an SVG picture")


def _tensor(v: Value) -> dict[str, Any]:
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype}


def summarize(graph: Graph, model: str = "") -> dict[str, Any]:
    """The inspect report of ``graph`` as plain data (the ``--json`` schema).

    Example::

        >>> import numpy as np
        >>> from toolchain.graph.ir import Graph, Node, Value
        >>> x, w = Value("x", (1, 4), "float32"), Value.constant("w", np.ones((4, 2), np.float32))
        >>> y = Value("y", (1, 2), "float32")
        >>> g = Graph("g", [x], [y], [Node("MatMul", "mm", [x, w], [y])])
        >>> summarize(g)["totals"]
        {'nodes': 1, 'flops': 16, 'parameters': 8, 'param_bytes': 32}
    """
    nodes = []
    for node in graph.nodes:
        opdef = get_op(node.op)
        consts = {id(v): v for v in node.inputs if v is not None and v.is_constant}
        nodes.append({
            "name": node.name,
            "op": node.op,
            "outputs": [_tensor(o) for o in node.outputs],
            "flops": opdef.flops_of(node),
            "param_bytes": sum(v.nbytes for v in consts.values()),
            "pattern": str(opdef.pattern_of(node)),
        })
    constants = graph.constants()
    return {
        "schema": SCHEMA,
        "model": model,
        "graph": graph.name,
        "opset": graph.opset,
        "inputs": [_tensor(v) for v in graph.inputs],
        "outputs": [_tensor(v) for v in graph.outputs],
        "nodes": nodes,
        "totals": {
            "nodes": len(nodes),
            "flops": sum(n["flops"] for n in nodes),
            "parameters": sum(v.size for v in constants),
            "param_bytes": sum(v.nbytes for v in constants),
        },
    }


def _human(n: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{int(n)} {unit}".rstrip()


def _shape(t: dict[str, Any]) -> str:
    return "[" + ", ".join(map(str, t["shape"])) + "]"


def format_table(report: dict[str, Any]) -> str:
    """The human-readable table of :func:`summarize`'s report."""
    header = ("name", "op", "output shape", "dtype", "FLOPs", "param bytes", "pattern")
    rows = []
    for n in report["nodes"]:
        rows.append((
            n["name"], n["op"], " ".join(_shape(o) for o in n["outputs"]),
            ",".join(dict.fromkeys(o["dtype"] for o in n["outputs"])),
            f"{n['flops']:,}", f"{n['param_bytes']:,}", n["pattern"],
        ))
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    right = {4, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    def decl(ts: list[dict[str, Any]]) -> str:
        return ", ".join(f"{t['name']}: {t['dtype']}{_shape(t)}" for t in ts) or "none"

    t = report["totals"]
    out = [
        f"model:   {report['model']}  (graph {report['graph']!r}, opset {report['opset']})",
        f"inputs:  {decl(report['inputs'])}",
        f"outputs: {decl(report['outputs'])}",
        "",
        line(header),
        line(tuple("-" * w for w in widths)),
        *(line(r) for r in rows),
        "",
        f"totals:  {t['nodes']} nodes, {_human(t['flops'], 'FLOPs')} ({t['flops']:,}), "
        f"{_human(t['parameters'])} parameters ({t['parameters']:,}), "
        f"{_human(t['param_bytes'], 'B')} of parameters ({t['param_bytes']:,} bytes)",
    ]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    if args.memory_plan and Path(args.memory_plan).is_dir():  # before the table
        raise OptionError(f"--memory-plan {args.memory_plan}: is a directory; name the .svg "
                          "file to write")
    graph = load_graph(args)
    report = summarize(graph, model=str(args.model))
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_table(report))
    if args.memory_plan:
        from toolchain.graph.memory import write_memory_plan

        plan = write_memory_plan(graph, args.memory_plan)
        print(f"memory plan: {plan.summary()} -> {args.memory_plan}\n  (the graph's "
              "activations in NCHW, before a target is chosen: kiln compile's arena adds the "
              "target's layout and its kernels' scratch)", file=sys.stderr)
    return 0
