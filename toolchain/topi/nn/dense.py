"""Matrix products: ``dense`` (weights ``[N, K]``), ``matmul`` (ONNX MatMul: numpy matmul
with 1-D promotion and batch broadcasting), ``batch_matmul`` and ``gemm`` (ONNX Gemm:
``alpha * A' B' + beta * C``).

Each product is one ``te.sum`` over the shared axis ``k``; ``gemm``'s scaling and ``C``
broadcast are a second elementwise stage only when needed (``alpha != 1`` or a ``C``).

Example::

    >>> from toolchain import te
    >>> a = te.placeholder((5, 1, 3, 4), name="a"); b = te.placeholder((2, 4, 6), name="b")
    >>> [d.value for d in matmul(a, b).shape]
    [5, 2, 3, 6]
"""

from __future__ import annotations

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.utils import broadcast_index, broadcast_shape, const_shape, scalar

Expr = ir.PrimExpr


def dense(data: te.Tensor, weight: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """``out[i, j] = Σ_k data[i, k] * weight[j, k]`` (weights stored ``[N, K]``)."""
    m, k = const_shape(data, "dense")
    n, k2 = const_shape(weight, "dense")
    if k != k2:
        raise OptionError(f"dense: data [{m}, {k}] and weight [{n}, {k2}] differ in K")
    odt = out_dtype or data.dtype
    r = te.reduce_axis((0, k), name="k")
    return te.compute((m, n), lambda i, j: te.sum(
        te.cast(data[i, r], odt) * te.cast(weight[j, r], odt), axis=r), name="dense",
        tag="dense")


def matmul(a: te.Tensor, b: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """numpy/ONNX ``matmul``: 1-D operands are promoted (and the axis removed), batch
    dimensions broadcast. A rank-0 result (1-D · 1-D) is a ``(1,)`` tensor."""
    sa, sb = const_shape(a, "matmul"), const_shape(b, "matmul")
    if not sa or not sb:
        raise OptionError("matmul: operands must have rank >= 1")
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    if a2[-1] != b2[-2]:
        raise OptionError(f"matmul: A {list(sa)} has {a2[-1]} columns but B {list(sb)} has "
                          f"{b2[-2]} rows")
    batch = broadcast_shape([a2[:-2], b2[:-2]], "matmul")
    keep_m, keep_n = len(sa) > 1, len(sb) > 1
    out = batch + ((a2[-2],) if keep_m else ()) + ((b2[-1],) if keep_n else ())
    odt = out_dtype or a.dtype
    k = te.reduce_axis((0, a2[-1]), name="k")
    nb = len(batch)

    def f(*idx: Expr) -> Expr:
        bidx = idx[:nb]
        rest = list(idx[nb:]) if out else []
        i = rest.pop(0) if keep_m else ir.IntImm(0)
        j = rest.pop(0) if keep_n else ir.IntImm(0)
        ai = _batch_idx(a, sa, bidx, nb) + ((i, k) if len(sa) > 1 else (k,))
        bi = _batch_idx(b, sb, bidx, nb) + ((k, j) if len(sb) > 1 else (k,))
        return te.sum(te.cast(a[ai], odt) * te.cast(b[bi], odt), axis=k)

    return te.compute(out or (1,), f, name="matmul", tag="matmul")


def _batch_idx(t: te.Tensor, shape: tuple[int, ...], bidx: tuple[Expr, ...], nb: int
               ) -> tuple[Expr, ...]:
    tb = len(shape) - 2
    if tb <= 0:
        return ()
    return tuple(ir.IntImm(0) if shape[d] == 1 else bidx[nb - tb + d] for d in range(tb))


def batch_matmul(a: te.Tensor, b: te.Tensor, transpose_a: bool = False,
                 transpose_b: bool = False, out_dtype: str | None = None) -> te.Tensor:
    """``[B, M, K] x [B, K, N] -> [B, M, N]`` (either batch may be 1 and broadcast);
    ``transpose_*`` read the operand as ``[B, K, M]`` / ``[B, N, K]``."""
    ba, a1, a2 = const_shape(a, "batch_matmul")
    bb, b1, b2 = const_shape(b, "batch_matmul")
    m, ka = (a2, a1) if transpose_a else (a1, a2)
    kb, n = (b2, b1) if transpose_b else (b1, b2)
    if ka != kb or (ba != bb and 1 not in (ba, bb)):
        raise OptionError(f"batch_matmul: shapes {[ba, a1, a2]} and {[bb, b1, b2]} do not "
                          f"match (transpose_a={transpose_a}, transpose_b={transpose_b})")
    odt = out_dtype or a.dtype
    k = te.reduce_axis((0, ka), name="k")

    def f(bt: Expr, i: Expr, j: Expr) -> Expr:
        x = a[(0 if ba == 1 else bt,) + ((k, i) if transpose_a else (i, k))]
        y = b[(0 if bb == 1 else bt,) + ((j, k) if transpose_b else (k, j))]
        return te.sum(te.cast(x, odt) * te.cast(y, odt), axis=k)

    return te.compute((max(ba, bb), m, n), f, name="batch_matmul", tag="batch_matmul")


def gemm(a: te.Tensor, b: te.Tensor, c: te.Tensor | None = None, alpha: float = 1.0,
         beta: float = 1.0, trans_a: bool = False, trans_b: bool = False) -> te.Tensor:
    """ONNX Gemm: ``alpha * A' @ B' + beta * C`` with ``C`` (rank <= 2) broadcast to
    ``[M, N]``."""
    sa, sb = const_shape(a, "gemm"), const_shape(b, "gemm")
    m, ka = sa[::-1] if trans_a else sa
    kb, n = sb[::-1] if trans_b else sb
    if ka != kb:
        raise OptionError(f"gemm: A {list(sa)} (trans_a={trans_a}) and B {list(sb)} "
                          f"(trans_b={trans_b}) differ in K")
    k = te.reduce_axis((0, ka), name="k")
    prod = te.compute((m, n), lambda i, j: te.sum(
        a[(k, i) if trans_a else (i, k)] * b[(j, k) if trans_b else (k, j)], axis=k),
        name="gemm_matmul", tag="dense")
    if alpha == 1.0 and (c is None or beta == 0.0):
        return prod
    dt = a.dtype

    def f(i: Expr, j: Expr) -> Expr:
        v = prod[i, j]
        if alpha != 1.0:
            v = v * scalar(alpha, dt) if ir.is_float(dt) else \
                te.cast(te.cast(v, "float64") * scalar(alpha, "float64"), dt)
        if c is not None and beta != 0.0:
            cv = c[broadcast_index(c, (i, j))]
            if beta != 1.0:
                cv = cv * scalar(beta, dt) if ir.is_float(dt) else \
                    te.cast(te.cast(cv, "float64") * scalar(beta, "float64"), dt)
            v = v + cv
        return v

    return te.compute((m, n), f, name="gemm", tag="broadcast")
