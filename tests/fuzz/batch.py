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

The int8 graphs are batched the same way (:class:`Int8Batch`): each graph is quantized
and run by the integer reference on its own, exactly as :func:`tests.fuzz.oracle.check_int8`
does, and only the quantized models are merged; a part passes when every target's outputs
equal its integer reference bit for bit (the float sums the quantizer leaves within their
tolerance, as ``check_int8`` judges them). Anything else checks the graph alone with
``check_int8``.

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

from tests.fuzz.oracle import (
    compare_outputs,
    exact_outputs,
    quantized_reference,
    run_on,
    run_ort,
    slug,
)
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
        self.outputs = run_parts([m for m, _ in self.models],
                                 [inputs for _, inputs in self.models], targets)

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


def run_parts(models: Sequence[onnx.ModelProto], inputs: Sequence[dict[str, np.ndarray]],
              targets: Sequence[str]) -> dict[str, list[dict[str, np.ndarray]] | None]:
    """``models`` merged into one model of disjoint parts, built and run once per target
    (:func:`tests.fuzz.oracle.run_on`): per target each part's outputs under its own
    names, or None where the batch failed (every target None when the models cannot be
    merged). A target this host cannot run is left out, as the oracle skips it."""
    try:
        merged = merge_models(models, "fuzzbatch")
    except ValueError:
        return {t: None for t in targets}
    feeds = {part_prefix(i) + k: v for i, part in enumerate(inputs) for k, v in part.items()}
    outputs: dict[str, list[dict[str, np.ndarray]] | None] = {}
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-batch-") as tmp, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for target in targets:
            try:
                got = run_on(merged, feeds, target, Path(tmp) / slug(target))
            except TargetError as exc:
                if "this host" in str(exc) or "CPU" in str(exc):
                    continue  # skipped alone too
                outputs[target] = None
                continue
            except Exception:  # noqa: BLE001 - the graphs will be checked alone
                outputs[target] = None
                continue
            outputs[target] = [{k[len(p):]: v for k, v in got.items() if k.startswith(p)}
                               for p in map(part_prefix, range(len(models)))]
    return outputs


class Int8Batch:
    """Int8 graphs (``(model, inputs)`` pairs), each quantized and run by the integer
    reference on its own as :func:`~tests.fuzz.oracle.check_int8` does, their quantized
    models built as one bundle for each of ``targets`` and run once; :meth:`passes` says
    whether part ``i`` equals its integer reference there."""

    def __init__(self, models: Sequence[tuple[onnx.ModelProto, dict]],
                 targets: Sequence[str]) -> None:
        self.models = list(models)
        #: per graph: (what its outputs are judged against, the float-computed tensors),
        #: or None where quantizing it or its reference run failed (checked alone)
        self.wanted: list[tuple[dict[str, np.ndarray], set[str]] | None] = []
        qdqs: list[onnx.ModelProto] = []
        for model, inputs in self.models:
            try:
                qdq, want, rounded = quantized_reference(model, inputs)
            except Exception:  # noqa: BLE001 - check_int8 alone says what it is
                self.wanted.append(None)
                continue
            self.wanted.append((want, rounded))
            qdqs.append(qdq)
        self.index = [None if w is None else sum(x is not None for x in self.wanted[:i])
                      for i, w in enumerate(self.wanted)]
        self.outputs = run_parts(qdqs, [inputs for (_, inputs), w in
                                        zip(self.models, self.wanted, strict=True)
                                        if w is not None], targets) if qdqs else {}

    def passes(self, i: int) -> bool:
        """Whether part ``i`` is clean: quantized, and every target's outputs equal its
        integer reference (``check_int8``'s judgement)."""
        wanted, k = self.wanted[i], self.index[i]
        if wanted is None or k is None or not self.outputs or \
                any(parts is None for parts in self.outputs.values()):
            return False
        want, rounded = wanted
        for parts in self.outputs.values():
            got = parts[k]
            if set(got) != set(want) or exact_outputs(got, want, rounded) is not None:
                return False
        return True
