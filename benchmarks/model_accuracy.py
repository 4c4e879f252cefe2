"""Print the zoo's model table: size, work, and Kiln's max relative error vs onnxruntime.

    python benchmarks/model_accuracy.py                 # every zoo model, Markdown table
    python benchmarks/model_accuracy.py resnet8 mlp     # some of them
    python benchmarks/model_accuracy.py --per-node ds_cnn  # first node where Kiln and ORT differ

The error is ``max|kiln - ort| / max|ort|`` over every output of the model (see
``toolchain/zoo/harness.py``); the times are one run of each on this machine, single-threaded,
and only say how long the test takes (Kiln's executor is a reference, not a fast path).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolchain.zoo import ZOO, count_macs, parameter_count  # noqa: E402
from toolchain.zoo.harness import compare_with_ort, first_divergence  # noqa: E402


def _kiln_flops(model, input_shapes) -> int | None:
    """Kiln's FLOP total for the model (as ``kiln inspect`` reports it), if available."""
    try:
        from toolchain.frontend.onnx import from_onnx
        from toolchain.graph.ops.registry import get_op
    except ImportError:
        return None
    graph = from_onnx(model, input_shapes=input_shapes)
    return sum(get_op(node.op).flops_of(node) for node in graph.nodes)


def _shape(model, input_shapes) -> str:
    parts = []
    defaults = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in defaults:
            continue
        t = vi.type.tensor_type
        dims = "x".join(str(d.dim_value or d.dim_param) for d in t.shape.dim)
        run_at = (input_shapes or {}).get(vi.name)
        parts.append(f"`{vi.name}` {dims}" + (f" (run at {'x'.join(map(str, run_at))})"
                                              if run_at else ""))
    return ", ".join(parts)


def table(names: list[str]) -> list[str]:
    """Markdown rows, one per model."""
    rows = [
        "| model | opset | input | params | MACs | Kiln FLOPs | FLOPs / 2·MACs "
        "| max rel err | Kiln s | ORT s |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        spec = ZOO[name]
        model = spec.build()
        macs = count_macs(model, spec.input_shapes)
        assert macs == spec.macs, f"{name}: shape inference gives {macs} MACs, hand {spec.macs}"
        try:
            flops = _kiln_flops(model, spec.input_shapes)
            result = compare_with_ort(model, spec.inputs(model), spec.input_shapes)
            err = f"{result.max_rel_err:.1e}" + ("" if result.ok else " FAIL")
            times = f"{result.kiln_s:.2f} | {result.ort_s:.3f}"
        except Exception as exc:  # report and carry on with the other models
            flops, err, times = None, f"error: {type(exc).__name__}: {exc}"[:120], "- | -"
        ratio = f"{flops / (2 * macs):.3f}" if flops else "-"
        rows.append(
            f"| {name} | {model.opset_import[0].version} | {_shape(model, spec.input_shapes)} "
            f"| {parameter_count(model):,} | {macs:,} | {flops or 0:,} | {ratio} "
            f"| {err} | {times} |")
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help=f"zoo models (default: all of {', '.join(ZOO)})")
    parser.add_argument("--per-node", action="store_true",
                        help="compare every intermediate and name the first diverging node")
    args = parser.parse_args(argv)
    names = args.models or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)} (zoo: {', '.join(ZOO)})")
    if args.per_node:
        for name in names:
            spec = ZOO[name]
            model = spec.build()
            where = first_divergence(model, spec.inputs(model), spec.input_shapes)
            print(f"{name}: " + (where or "every intermediate matches onnxruntime"))
        return 0
    print("\n".join(table(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
