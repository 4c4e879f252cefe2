"""Several fuzz graphs built as one bundle per target (the CI batch's float graphs).

A float graph's check builds three small bundles (``c-generic`` and both AVX targets, or
the LLVM, GPU-emulation and threaded builds), and for graphs of a few nodes most of a
build is the C compiler's fixed cost. A *batch*
merges a group of graphs into one model whose parts are disjoint (every name of part
``i`` prefixed ``p<i>_``: :func:`tests.node_batch.merge_models`, as the node cases are
batched), builds and runs it once per target, and hands each graph its part's outputs.

Only a clean pass is taken from the batch: a graph passes there when onnxruntime and the
reference executor agree on it and every target's part agrees with onnxruntime
(:func:`tests.fuzz.oracle.check`'s judgement). Anything else — the batch refused or
crashed on a target, a part's outputs off — sends the graph to :func:`check` alone, so
its findings, their report and ``python -m tests.fuzz``'s reproduction line are those
of the graph by itself.

Example::

    >>> from tests.fuzz.graphs import random_model
    >>> batch = FloatBatch([random_model(s) for s in (0, 1)], ("c-generic",))  # doctest: +SKIP
    >>> batch.passes(0)                                                      # doctest: +SKIP
    True
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from tests.fuzz.oracle import compare_outputs, run_on, run_ort, slug
from tests.node_batch import merge_models, part_prefix
from toolchain.errors import TargetError


class FloatBatch:
    """``models`` (``(model, inputs)`` pairs, as :func:`random_model` makes them) built as
    one bundle for each of ``targets`` and run once; :meth:`passes` says whether part
    ``i`` passed there."""

    def __init__(self, models: Sequence[tuple[onnx.ModelProto, dict]],
                 targets: Sequence[str]) -> None:
        self.models = list(models)
        #: per target: each part's outputs under its own names, or None (the batch failed
        #: there); a target this host cannot run is left out, as :func:`check` skips it
        self.outputs: dict[str, list[dict[str, np.ndarray]] | None] = {}
        try:
            merged = merge_models([m for m, _ in self.models], "fuzzbatch")
        except ValueError:
            self.outputs = {t: None for t in targets}
            return
        feeds = {part_prefix(i) + k: v for i, (_, inputs) in enumerate(self.models)
                 for k, v in inputs.items()}
        with tempfile.TemporaryDirectory(prefix="kiln-fuzz-batch-") as tmp, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for target in targets:
                try:
                    got = run_on(merged, feeds, target, Path(tmp) / slug(target))
                except TargetError as exc:
                    if "this host" in str(exc) or "CPU" in str(exc):
                        continue  # skipped alone too
                    self.outputs[target] = None
                    continue
                except Exception:  # noqa: BLE001 - the graphs will be checked alone
                    self.outputs[target] = None
                    continue
                self.outputs[target] = [
                    {k[len(p):]: v for k, v in got.items() if k.startswith(p)}
                    for p in map(part_prefix, range(len(self.models)))]

    def passes(self, i: int) -> bool:
        """Whether part ``i`` is clean: onnxruntime runs it, the reference executor and
        every target's part agree with onnxruntime within the oracle's tolerance."""
        from toolchain.frontend.onnx import from_onnx
        from toolchain.graph.reference import run_graph

        model, inputs = self.models[i]
        if any(parts is None for parts in self.outputs.values()):
            return False
        try:
            want = run_ort(model, inputs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = run_graph(from_onnx(model), inputs)
        except Exception:  # noqa: BLE001 - check() alone says what it is
            return False
        if compare_outputs(ref, want) is not None:
            return False
        for parts in self.outputs.values():
            got = parts[i]
            if set(got) != set(want) or compare_outputs(got, want) is not None:
                return False
        return True
