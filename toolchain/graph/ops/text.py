"""Text ops: TfIdfVectorizer (OPAQUE), on integer token ids (string pools are not
supported: Kiln has no string dtype).

The attributes define a pool of n-grams: ``pool_int64s[ngram_counts[i] :
ngram_counts[i + 1]]`` holds the n-grams of length ``i + 1`` back to back, and the j-th
n-gram of the whole pool counts into output column ``ngram_indexes[j]``; only lengths in
``[min_gram_length, max_gram_length]`` are counted.  An n-gram of length ``n`` occurs at
start ``s`` with skip ``d − 1`` (``d = 1 … max_skip_count + 1``) when
``X[s + k·d] = gram[k]`` for every ``k < n``; unigrams are counted once (with ``d = 1``).
Each row of ``X`` (``[C]`` or ``[N, C]``) gives a row of ``max(ngram_indexes) + 1`` float32
values: the counts (``TF``), 1 or ``weights[col]`` where the count is not 0 (``IDF``), or
the counts times the weights (``TFIDF``; without weights: the counts).  ``weights`` holds
one value per n-gram of the pool (as the specification and onnxruntime read it; ONNX's
reference reads it per output column, the same where each column has one n-gram): TFIDF
sums ``weight · count`` over a column's n-grams, IDF gives a present n-gram's weight — with
weights, IDF needs one n-gram per column (onnxruntime keeps the weight of the n-gram that
occurs last in the text, which Kiln refuses to guess).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> attrs = {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2,
    ...          "max_skip_count": 0, "ngram_counts": (0, 2), "ngram_indexes": (0, 1, 2),
    ...          "pool_int64s": (7, 8, 7, 8)}
    >>> get_op("TfIdfVectorizer").reference([np.array([7, 8, 7, 9])], attrs)[0].tolist()
    [2.0, 1.0, 1.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import check_dtype, defop, input_value
from toolchain.graph.ops.registry import REQUIRED, Attr, OpDef, PatternKind

MODES = ("TF", "IDF", "TFIDF")


@dataclass(frozen=True)
class NgramPool:
    """The n-grams a TfIdfVectorizer counts: ``grams[j]`` (a tuple of token ids) counts
    into column ``columns[j]`` with weight ``weights[j]`` (empty: no weights)."""

    grams: tuple[tuple[int, ...], ...]
    columns: tuple[int, ...]
    width: int
    skips: int
    mode: str
    weights: tuple[float, ...]


def ngram_pool(where: str, attrs: dict[str, Any]) -> NgramPool:
    """The counted n-grams of a TfIdfVectorizer's attributes; raises naming ``where``."""
    if attrs.get("pool_strings"):
        raise ModelError(f"{where}: pool_strings (string tokens) are not supported; Kiln "
                         "has no string dtype (map tokens to integer ids, pool_int64s)")
    pool = [int(v) for v in attrs["pool_int64s"] or ()]
    counts = [int(v) for v in attrs["ngram_counts"]]
    indexes = [int(v) for v in attrs["ngram_indexes"]]
    lo, hi = attrs["min_gram_length"], attrs["max_gram_length"]
    if not 1 <= lo <= hi:
        raise ModelError(f"{where}: min_gram_length {lo} and max_gram_length {hi} must satisfy "
                         "1 <= min <= max")
    if counts != sorted(counts) or (counts and (counts[0] < 0 or counts[-1] > len(pool))):
        raise ModelError(f"{where}: ngram_counts {counts} must be non-decreasing start "
                         f"offsets into the pool of {len(pool)} ids")
    weights = [float(w) for w in attrs["weights"] or ()]
    if weights and len(weights) != len(indexes):
        raise ModelError(f"{where}: weights has {len(weights)} values; it must have one per "
                         f"entry of ngram_indexes ({len(indexes)})")
    found: dict[tuple[int, ...], tuple[int, float]] = {}
    j = 0
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        if (end - start) % n:
            raise ModelError(f"{where}: the pool's {n}-grams (ids {start}..{end - 1}) are "
                             f"{end - start} ids, not a whole number of {n}-grams")
        for at in range(start, end, n):
            if j >= len(indexes):
                raise ModelError(f"{where}: ngram_indexes has {len(indexes)} entries, fewer "
                                 "than the pool's n-grams")
            if lo <= n <= hi:
                # a repeated n-gram: the last
                found[tuple(pool[at:at + n])] = (indexes[j], weights[j] if weights else 1.0)
            j += 1
    if not indexes or min(indexes) < 0:
        raise ModelError(f"{where}: ngram_indexes {indexes[:8]} must be non-empty and >= 0")
    width = max(indexes) + 1
    columns = [col for col, _ in found.values()]
    if weights and attrs["mode"] == "IDF" and len(set(columns)) < len(columns):
        raise ModelError(f"{where}: mode IDF with weights and several n-grams in one output "
                         "column is ambiguous (which n-gram's weight?); give each n-gram its "
                         "own column in ngram_indexes")
    return NgramPool(tuple(found), tuple(columns), width, attrs["max_skip_count"],
                     attrs["mode"], tuple(w for _, w in found.values()) if weights else ())


def _tfidf_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "X")
    check_dtype(node, x, "input 0 (X)", ("int32", "int64"))
    if x.rank not in (1, 2):
        raise ModelError(f"{node.describe()}: X {list(x.shape)} must be [C] or [N, C]")
    pool = ngram_pool(node.describe(), attrs)
    return [TensorType(x.shape[:-1] + (pool.width,), "float32")]


def _tfidf_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0]).astype(np.int64)
    pool = ngram_pool("TfIdfVectorizer", attrs)
    rows = x.reshape(-1, x.shape[-1])
    c = rows.shape[1]
    y = np.zeros((rows.shape[0], pool.width), np.float64)
    for j, (gram, col) in enumerate(zip(pool.grams, pool.columns, strict=True)):
        n, count = len(gram), np.zeros(rows.shape[0], np.float64)
        for d in range(1, 2 if n == 1 else pool.skips + 2):
            starts = c - (n - 1) * d
            if starts <= 0:
                continue
            hit = np.ones((rows.shape[0], starts), bool)
            for k, token in enumerate(gram):
                hit &= rows[:, k * d:k * d + starts] == token
            count += hit.sum(axis=1)
        w = pool.weights[j] if pool.weights else 1.0
        if pool.mode == "TF":
            y[:, col] += count
        elif pool.mode == "TFIDF":
            y[:, col] += w * count
        elif pool.weights:  # IDF: one n-gram per column
            y[:, col] = np.where(count > 0, w, 0.0)
        else:
            y[:, col] = np.maximum(y[:, col], count > 0)
    return [y.astype(np.float32).reshape(x.shape[:-1] + (pool.width,))]


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("TfIdfVectorizer", ("X",), PatternKind.OPAQUE, infer=_tfidf_infer,
          reference=_tfidf_ref,
          attrs=(Attr("max_gram_length", "int", REQUIRED),
                 Attr("max_skip_count", "int", REQUIRED,
                      check=lambda v: None if int(v) >= 0 else f"must be >= 0, got {v}"),
                 Attr("min_gram_length", "int", REQUIRED),
                 Attr("mode", "string", REQUIRED, MODES),
                 Attr("ngram_counts", "ints", REQUIRED),
                 Attr("ngram_indexes", "ints", REQUIRED),
                 Attr("pool_int64s", "ints", ()),
                 Attr("pool_strings", "strings", ()),
                 Attr("weights", "floats", ())),
          flops=lambda node: sum(o.size for o in node.outputs), min_opset=9,
          doc="n-gram counts (TF), presence (IDF) or weighted counts (TFIDF) of integer "
              "token ids against a pool of n-grams, with skips"),
)
