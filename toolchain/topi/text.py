"""TfIdfVectorizer: n-gram counts as a reduction over (skip, start) per row and n-gram.

The pool is known at compile time; the kernel reads it through *lookup trees*: a balanced
tree of selects on the n-gram number (depth ⌈log2 G⌉ for G n-grams, no table in memory).
``counts[r, g]`` sums, over skips ``d`` and starts ``s``, whether ``X[r, s + k·d]`` equals
the n-gram's ``k``-th token for each ``k`` below its length.  When every output column has
at most one n-gram (the usual case) the output gathers its n-gram's count, else it sums the
(weighted) counts of its n-grams, ``mode`` deciding what an n-gram adds.  Cost per row:
G · skips · C · max length compares.  See :mod:`toolchain.graph.ops.text` for the semantics.

Example::

    >>> from toolchain import te
    >>> from toolchain.graph.ops.text import NgramPool
    >>> x = te.placeholder((2, 6), "int64", name="x")
    >>> pool = NgramPool(((4,), (5, 6)), (0, 1), 2, 1, "TF", ())
    >>> [d.value for d in tfidf_vectorizer(x, pool).shape]
    [2, 2]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.graph.ops.text import NgramPool
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_I = "int64"
_F = "float32"


def lookup(values: Sequence[float | int], i: Expr, dtype: str, lo: int = 0) -> Expr:
    """``values[i - lo]`` for a loop variable ``i`` as a balanced tree of selects."""
    if len(values) == 1:
        return scalar(values[0], dtype)
    mid = len(values) // 2
    return te.select(i < lo + mid, lookup(values[:mid], i, dtype, lo),
                     lookup(values[mid:], i, dtype, lo + mid))


def tfidf_vectorizer(x: te.Tensor, pool: NgramPool) -> te.Tensor:
    """ONNX TfIdfVectorizer of integer tokens ``x`` (``[C]`` or ``[N, C]``)."""
    shape = const_shape(x, "tfidf_vectorizer")
    c = shape[-1]
    rows = shape[:-1]
    width = max((len(g) for g in pool.grams), default=1)
    n_grams = max(len(pool.grams), 1)
    grams = pool.grams or ((0,),)
    lengths = [len(g) for g in grams] if pool.grams else [c + 1]  # no n-gram: never fits
    d = te.reduce_axis((0, pool.skips + 1), name="d") if pool.skips else None
    s = te.reduce_axis((0, c), name="s")

    def token(*idx: Expr) -> Expr:
        return te.cast(x[idx], _I)

    def count(*o: Expr) -> Expr:
        row, gi = tuple(o[:-1]), o[-1]
        step: Expr = d + 1 if d is not None else ir.IntImm(1)  # the distance: skip + 1
        n = lookup(lengths, gi, "int32")
        conds = [s + (n - 1) * step < c]
        if d is not None:
            conds.append(te.any(n > 1, te.equal(step, 1)))  # unigrams once, with d = 1
        for k in range(width):
            want = lookup([gr[k] if k < len(gr) else 0 for gr in grams], gi, _I)
            at = te.min(s + k * step, ir.IntImm(c - 1))
            conds.append(te.any(n <= k, te.equal(token(*row, at), want)))
        axes = [s] if d is None else [d, s]
        return te.sum(te.select(te.all(*conds), scalar(1, _F), scalar(0, _F)), axis=axes)

    counts = te.compute(rows + (n_grams,), count, name="tfidf_counts", tag="reduce")
    zero, one = scalar(0, _F), scalar(1, _F)

    def value(row: tuple[Expr, ...], j: Expr) -> Expr:
        """What n-gram ``j`` adds to its column: count, weighted count or presence."""
        got = counts[row + (j,)]
        w = lookup(pool.weights, j, _F) if pool.weights else one
        if pool.mode == "TF":
            return got
        if pool.mode == "TFIDF":
            return got * w if pool.weights else got
        return te.select(got > zero, w, zero)

    cols = list(pool.columns)
    if len(set(cols)) == len(cols):  # one n-gram per column: gather it
        where = [-1] * pool.width
        for j, col in enumerate(cols):
            where[col] = j

        def per_column(*o: Expr) -> Expr:
            j = lookup(where, o[-1], "int32")
            return te.select(j >= 0, value(tuple(o[:-1]), te.max(j, ir.IntImm(0))), zero)

        return te.compute(rows + (pool.width,), per_column, name="tfidf_vectorizer",
                          tag="injective")
    gj = te.reduce_axis((0, n_grams), name="gj")

    def summed(*o: Expr) -> Expr:  # IDF: presence is a max, the other modes sum
        hit = te.equal(lookup(cols, gj, "int32"), o[-1])
        term = te.select(hit, value(tuple(o[:-1]), gj), zero)
        return te.max(term, axis=gj) if pool.mode == "IDF" else te.sum(term, axis=gj)

    return te.compute(rows + (pool.width,), summed, name="tfidf_vectorizer", tag="reduce")
