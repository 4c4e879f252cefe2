"""Calibration for ``kiln quantize``: read the samples, run the float model, collect ranges.

Samples come from an ``.npz`` file with one array per model input whose first dimension
counts the samples: for an input of shape ``[1, 49, 10, 1]`` the array may be
``[S, 1, 49, 10, 1]`` or ``[S, 49, 10, 1]`` (the model's batch of 1 added back); an array
of exactly the input's shape is one sample. The float model runs in Kiln's reference
executor (:func:`toolchain.graph.reference.run_graph`) with every intermediate tensor
kept, and each tensor's range is the min/max over all samples (or, with ``percentile``,
the given percentile of ``|x|``-tails on each side — robust against outliers).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", (1, 4), "float32"), Value("y", (1, 4), "float32")
    >>> g = Graph("g", [x], [y], [Node("Relu", "r", [x], [y])])
    >>> samples = split_samples(g, {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)})
    >>> collect_ranges(g, samples)["y"]
    (0.0, 1.0)
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from toolchain.errors import InputError
from toolchain.graph.ir import Graph
from toolchain.graph.reference import run_graph


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file; raises :class:`InputError` saying what is wrong."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise InputError(f"{path}: a single .npy array, not an .npz archive; save "
                                 "the calibration data with numpy.savez(path, NAME=array)")
            return {k: np.asarray(data[k]) for k in data.files}
    except FileNotFoundError:
        raise InputError(f"{path}: calibration file not found") from None
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        why = "" if "pickle" in str(exc) else f" ({exc})"
        raise InputError(f"{path}: not a readable .npz archive{why}; save the calibration "
                         "data with numpy.savez(path, NAME=array)") from None


def split_samples(graph: Graph, arrays: Mapping[str, np.ndarray], where: str = "calibration"
                  ) -> list[dict[str, np.ndarray]]:
    """One input dict per sample (see the module docstring for the accepted layouts)."""
    names = [v.name for v in graph.inputs]
    missing = [n for n in names if n not in arrays]
    extra = [k for k in arrays if k not in names]
    if missing or extra:
        raise InputError(f"{where}: the arrays must be named after the model inputs "
                         f"({', '.join(names)}); missing: {', '.join(missing) or 'none'}, "
                         f"unknown: {', '.join(extra) or 'none'}")
    per_input: dict[str, list[np.ndarray]] = {}
    for v in graph.inputs:
        a = np.asarray(arrays[v.name])
        if a.dtype.kind not in "fiu":
            raise InputError(f"{where}: array {v.name!r} has dtype {a.dtype}; give numbers")
        a = a.astype(np.float32)
        shape = tuple(v.shape)
        if a.shape == shape:
            parts = [a]
        elif a.shape[1:] == shape:
            parts = list(a)
        elif shape and shape[0] == 1 and a.shape[1:] == shape[1:]:
            parts = [a[i:i + 1] for i in range(a.shape[0])]
        else:
            dims = ", ".join(map(str, shape))
            raise InputError(f"{where}: array {v.name!r} has shape {list(a.shape)}; input "
                             f"{v.name!r} is {list(shape)}, so give [S, {dims}] (S samples)")
        per_input[v.name] = parts
    counts = {n: len(p) for n, p in per_input.items()}
    if len(set(counts.values())) != 1:
        raise InputError(f"{where}: the inputs have different sample counts {counts}")
    count = next(iter(counts.values()))
    if count == 0:
        raise InputError(f"{where}: no samples")
    return [{n: per_input[n][i] for n in names} for i in range(count)]


def collect_ranges(graph: Graph, samples: list[dict[str, np.ndarray]],
                   percentile: float | None = None) -> dict[str, tuple[float, float]]:
    """``{tensor name: (min, max)}`` over the samples for every float tensor of the graph
    (inputs and node outputs)."""
    tensors = [v for v in graph.inputs] + [o for n in graph.nodes for o in n.outputs]
    tensors = [v for v in tensors if v.dtype in ("float32", "float16", "float64")]
    probe = graph.replace(outputs=tensors)
    seen: dict[str, list[np.ndarray]] = {v.name: [] for v in tensors}
    for s in samples:
        out = run_graph(probe, s)
        for name, arr in out.items():
            a = np.asarray(arr, np.float64).reshape(-1)
            a = a[np.isfinite(a)]
            seen[name].append(a if percentile is not None else
                              np.array([a.min(), a.max()]) if a.size else a)
    ranges: dict[str, tuple[float, float]] = {}
    for name, parts in seen.items():
        a = np.concatenate(parts) if parts else np.zeros(0)
        if a.size == 0:
            ranges[name] = (0.0, 0.0)
        elif percentile is None:
            ranges[name] = (float(a.min()), float(a.max()))
        else:
            ranges[name] = (float(np.percentile(a, 100.0 - percentile)),
                            float(np.percentile(a, percentile)))
    return ranges


def describe(ranges: Mapping[str, Any]) -> str:
    """A short text summary (for ``--verbose``)."""
    return "\n".join(f"{k}: [{lo:.4g}, {hi:.4g}]" for k, (lo, hi) in sorted(ranges.items()))
