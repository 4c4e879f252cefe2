"""Scaled dot-product attention as one compute DAG (the ``FusedAttention`` op).

Stages, per batch ``b``, query head ``h`` (key/value head ``h / group``) and query row ``i``
(``j`` runs over the keys, ``d`` over the head size)::

    attn_score[b, h, i, j] = sum_d Q[b, h, i, d] * Kt[b, h/g, d, j]
    attn_logit[b, h, i, j] = mask/window/softcap applied to scale * attn_score   (inlined)
    attn_max[b, h, i]      = max_j attn_logit
    attn_exp[b, h, i, j]   = exp(attn_logit - attn_max)
    attn_sum[b, h, i]      = sum_j attn_exp
    attn_acc[b, h, i, d]   = sum_j attn_exp[b, h, i, j] * V[b, h/g, j, d]
    attention[b, h, i, d]  = attn_acc / attn_sum

Every stage is indexed by the row ``(b, h, i)``, so a schedule can compute all of them for a
block of rows at a time (``toolchain.schedules.generic.attention``): the ``[Sq, Sk]`` score
matrix never exists whole. float16 operands are computed in float32.

Example::

    >>> from toolchain import te
    >>> q = te.placeholder((1, 2, 5, 8), name="q"); kt = te.placeholder((1, 1, 8, 7), name="kt")
    >>> v = te.placeholder((1, 1, 7, 8), name="v")
    >>> out = fused_attention(q, kt, v, None, scale=0.35)
    >>> out.name, [t.name for t in out.op.input_tensors()]
    ('attention', ['attn_acc', 'attn_sum'])
"""

from __future__ import annotations

import math

from toolchain import te
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, lowest

Expr = ir.PrimExpr


def _mask_index(mask: te.Tensor, b: Expr, h: Expr, i: Expr, j: Expr) -> tuple[Expr, ...]:
    shape = const_shape(mask, "attention mask")
    full = (b, h, i, j)[4 - len(shape):]
    return tuple(ir.IntImm(0) if s == 1 else x for s, x in zip(shape, full, strict=True))


def fused_attention(q: te.Tensor, kt: te.Tensor, v: te.Tensor, mask: te.Tensor | None, *,
                    scale: float, softcap: float = 0.0, left: int = -1, right: int = -1,
                    fill: float = -math.inf, empty: str = "nan", key_block: int = 1
                    ) -> te.Tensor:
    """``softmax(scale · Q·Kt (+ mask)) · V`` as the stages of the module docstring.

    ``mask`` (rank ≤ 4, broadcasting to ``[B, Hq, Sq, Sk]``) is added when it is float and
    selects (``fill`` where false) when bool; ``left``/``right`` ≥ 0 keep keys ``j`` with
    ``i - left <= j <= i + right``; ``empty="zero"`` makes a row with no key a zero row.
    ``key_block`` > 1 rounds the key axis of the score, max, exp and sum stages up to a
    multiple of it (a vector width): ``attn_kt_pad`` is Kt with zero columns up to that
    length (``[B, Hk, D, Skp]``, once per call), the extra keys get the logit ``-inf``,
    so they add nothing, and every loop over keys is whole
    vectors without a guarded tail. The V product still runs over the real keys.
    """
    bsz, hq, sq, d = const_shape(q, "attention Q")
    _, hk, _, sk = const_shape(kt, "attention Kt")
    dv = const_shape(v, "attention V")[3]
    group = hq // hk
    acc = "float32" if q.dtype == "float16" else q.dtype
    skp = -(-sk // key_block) * key_block   # keys of the score rows (padded)

    def key(j: Expr) -> Expr:
        return j if skp == sk else te.min(j, sk - 1)

    src = kt
    if skp > sk:  # Kt with zero columns up to skp: the score loops read whole vectors
        src = te.compute((bsz, hk, d, skp), lambda b, h, c, j: te.if_then_else(
            j < sk, kt[b, h, c, key(j)], ir.const(0.0, kt.dtype)), name="attn_kt_pad",
            tag="attention")

    def kt_at(b: Expr, h: Expr, c: Expr, j: Expr) -> Expr:
        return f(src[b, kv_head(h), c, j])

    def kv_head(h: Expr) -> Expr:
        return h if group == 1 else te.floordiv(h, group)

    def f(x: Expr) -> Expr:
        return x if x.dtype == acc else te.cast(x, acc)

    kd = te.reduce_axis((0, d), name="kd")
    score = te.compute((bsz, hq, sq, skp), lambda b, h, i, j: te.sum(
        f(q[b, h, i, kd]) * kt_at(b, h, kd, j), axis=kd), name="attn_score",
        tag="attention")

    def logit(b: Expr, h: Expr, i: Expr, j: Expr) -> Expr:
        x = score[b, h, i, j] * ir.const(scale, acc)
        if softcap > 0:
            x = ir.const(softcap, acc) * te.tanh(x * ir.const(1.0 / softcap, acc))
        conds = []
        if mask is not None:
            m = mask[_mask_index(mask, b, h, i, key(j))]
            if mask.dtype == "bool":
                conds.append(m)
            else:
                x = x + f(m)
        if right >= 0:
            conds.append(j <= i + right)
        if left >= 0:
            conds.append(j + left >= i)
        if conds:
            x = te.select(te.all(*conds), x, ir.const(fill, acc))
        if skp > sk:
            x = te.select(j < sk, x, ir.const(-math.inf, acc))
        return x

    lg = te.compute((bsz, hq, sq, skp), logit, name="attn_logit", tag="attention")
    k1 = te.reduce_axis((0, skp), name="j")
    mx = te.compute((bsz, hq, sq), lambda b, h, i: te.max(lg[b, h, i, k1], axis=k1,
                                                           init=lowest(acc)),
                    name="attn_max", tag="attention")

    def shift(b: Expr, h: Expr, i: Expr) -> Expr:
        m = mx[b, h, i]
        if empty == "zero":  # no key at all: exp(-inf - 0) = 0 instead of NaN
            m = te.select(te.equal(m, ir.const(-math.inf, acc)), ir.const(0.0, acc), m)
        return m

    e = te.compute((bsz, hq, sq, skp), lambda b, h, i, j: te.exp(lg[b, h, i, j] - shift(b, h, i)),
                   name="attn_exp", tag="attention")
    k2 = te.reduce_axis((0, skp), name="j")
    s = te.compute((bsz, hq, sq), lambda b, h, i: te.sum(e[b, h, i, k2], axis=k2),
                   name="attn_sum", tag="attention")
    k3 = te.reduce_axis((0, sk), name="j")
    av = te.compute((bsz, hq, sq, dv), lambda b, h, i, c: te.sum(
        e[b, h, i, k3] * f(v[b, kv_head(h), k3, c]), axis=k3), name="attn_acc",
        tag="attention")

    def out(b: Expr, h: Expr, i: Expr, c: Expr) -> Expr:
        y = av[b, h, i, c] / s[b, h, i]
        if empty == "zero":
            y = te.select(te.equal(s[b, h, i], ir.const(0.0, acc)), ir.const(0.0, acc), y)
        return y if q.dtype == acc else te.cast(y, q.dtype)

    return te.compute((bsz, hq, sq, dv), out, name="attention", tag="attention")
