"""Compare a bundle's outputs with the reference executor (``kiln run DIR --check``).

Error measure (the same as the model-zoo tests): per output,
``max_abs = max|bundle - reference|`` and ``max_rel = max_abs / max|reference|`` — the error
relative to the output's scale (element-wise relative error means nothing near zero).  An
output passes when ``max_rel <= tolerance`` (default 1e-4; a float16 output, or any float
output of a bundle that stores its tensors in float16 (``--precision fp16``, float32 API),
at least :data:`FLOAT16_TOLERANCE`); integer and boolean outputs must match exactly.

Example::

    >>> import numpy as np
    >>> rows = compare({"y": np.array([1.0, 2.0], np.float32)},
    ...                {"y": np.array([1.0, 2.0001], np.float32)})
    >>> rows[0]["ok"], f"{rows[0]['max_rel']:.1e}"
    (True, '5.0e-05')
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.errors import InputError

#: default largest accepted max_rel per output
TOLERANCE = 1e-4
#: the least tolerance of a float16 output: four float16 ulps (2^-11 each), since the
#: bundle (float32 arithmetic, one rounding per stored tensor) and the reference executor
#: round at different places, and half an ulp alone is above 1e-4
FLOAT16_TOLERANCE = 2e-3


def float16_inside(meta: Mapping[str, Any]) -> bool:
    """Whether a bundle stores its tensors in float16 behind a float32 API
    (``kiln compile --precision fp16``: ``options.precision`` in its metadata).

    >>> float16_inside({"options": {"precision": "fp16"}}), float16_inside({})
    (True, False)
    """
    return (meta.get("options") or {}).get("precision") == "fp16"


def compare(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
            tolerance: float = TOLERANCE, float16: bool = False) -> list[dict[str, Any]]:
    """One row per reference output: name, max_abs, max_rel, ok (and the tolerance applied,
    with ``why`` where it is the float16 one).  ``float16``: the bundle computes in float16
    inside (:func:`float16_inside`), so every float output gets the float16 tolerance."""
    rows = []
    for name, ref in reference.items():
        got = outputs[name]
        if got.shape != ref.shape:
            rows.append({"name": name, "max_abs": float("inf"), "max_rel": float("inf"),
                         "ok": False})
            continue
        exact = not np.issubdtype(ref.dtype, np.floating)
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        both_nan = np.isnan(got.astype(np.float64)) & np.isnan(ref.astype(np.float64))
        diff = np.where(both_nan, 0.0, diff)
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = float(np.nanmax(np.abs(ref.astype(np.float64)))) if ref.size else 0.0
        max_rel = max_abs / scale if scale > 0 else max_abs
        why = ("float16" if ref.dtype == np.float16 else
               "float16 inside" if float16 and not exact else None)
        tol = max(tolerance, FLOAT16_TOLERANCE) if why else tolerance
        ok = max_abs == 0 if exact else bool(max_rel <= tol)
        rows.append({"name": name, "max_abs": max_abs, "max_rel": max_rel, "ok": ok,
                     "tolerance": tol, **({"why": why} if why else {})})
    return rows


def reference_outputs(meta: Mapping[str, Any], inputs: Mapping[str, np.ndarray],
                      model: Any = None) -> dict[str, np.ndarray]:
    """Run the model a bundle was compiled from on the numpy reference executor.

    ``model`` overrides the path recorded in ``metadata.json``; the file must be the same
    model (its sha256 is checked).  ``model`` may also be the ``onnx.ModelProto``."""
    import onnx

    from toolchain.frontend.onnx import from_onnx, load_model, model_sha256
    from toolchain.graph.reference import run_graph

    path = model if model is not None else (meta.get("model") or {}).get("path")
    if not isinstance(path, (str, Path)) and path is not None:
        source: Any = path
    elif not path or not Path(path).is_file():
        raise InputError(f"--check needs the ONNX model the bundle was compiled from; "
                         f"{path or 'no path'} is not a file: pass --model-file MODEL.onnx")
    else:
        source = str(path)
    want = meta["model"].get("sha256")
    # a file's own bytes (Kiln from 0.1 on); a bundle compiled from an in-memory model, or
    # by an older Kiln, recorded the sha256 of the model's deterministic serialisation
    if model_sha256(source) != want and (
            isinstance(source, onnx.ModelProto)
            or model_sha256(load_model(source)[0]) != want):
        label = source if isinstance(source, str) else "the given ModelProto"
        raise InputError(f"--check: {label} is not the model this bundle was compiled from "
                         "(its content changed); recompile the bundle or pass the right "
                         "--model-file")
    shapes = {k: tuple(v) for k, v in (meta.get("options") or {}).get("input_shapes",
                                                                      {}).items()}
    graph = from_onnx(source, input_shapes=shapes or None)
    if any(n.op in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes):
        # a QDQ model: compare with the integer kernels' reference (what the bundle computes
        # bit for bit), not with the float simulation of the Q/DQ pairs
        from toolchain.graph.passes.quantize_ops import quantize_ops

        graph = quantize_ops(graph)
    return run_graph(graph, dict(inputs))


def format_rows(rows: list[dict[str, Any]], tolerance: float = TOLERANCE) -> str:
    """The table ``kiln run --check`` prints."""
    width = max([len(r["name"]) for r in rows] + [6])
    lines = [f"{'output':<{width}}  {'max abs err':>12}  {'max rel err':>12}  "
             f"(tolerance {tolerance:g})"]
    for r in rows:
        own = r.get("tolerance", tolerance)
        lines.append(f"{r['name']:<{width}}  {r['max_abs']:>12.3e}  {r['max_rel']:>12.3e}  "
                     + ("ok" if r["ok"] else "FAIL")
                     + (f" ({r.get('why', 'float16')}: tolerance {own:g})"
                        if own != tolerance else ""))
    return "\n".join(lines)
