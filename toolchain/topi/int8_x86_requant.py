"""The u8-quad kernels' cheaper requantization (:mod:`toolchain.schedules.x86.int8`,
``docs/int8.md`` steps 25-27): RDBPOT as one add and shift with the output zero point
folded into a per-channel rounding constant (``kiln_x86_requantize_z`` / ``_z1``, the
``on_call_helpers`` of ``targets/c-generic.yaml``), where :func:`requant_rounding_fits`
proves it stays in int32, and accumulators that start from the bias (:func:`bias_init`).
The lane-wise requantization itself is :func:`toolchain.topi.int8_x86.lane_requant`
(``rounded=True``, ``biased=True``, ``right=...``)::

    before:  x86_req = clamp(kiln_x86_requantize_r(acc, bias, mult, ls, rs) + y_zp)
    after:   x86_acc starts from bias
             x86_req = clamp(kiln_x86_requantize_z1(acc, 0, mult, c, rs))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.topi.int8_x86 import acc_bound, pad_shifts, requant_fits_int32


def requant_rounding_fits(node: Any) -> bool:
    """Whether ``kiln_x86_requantize_z`` (the rounding shift with the output zero point
    folded in, :func:`pad_round_shifts`) holds for QConv/QGemm ``node``: it
    :func:`requant_fits_int32`, and for every channel ``h + c - 1`` stays inside int32,
    where ``|h| <= (bound * mult + 2**30) / 2**31`` is the high product and
    ``c = 2**(rs - 1) + y_zp * 2**rs``.

    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 4), "int8"); y = Value("y", (1, 1), "int8")
    >>> def node(rs):
    ...     c = [Value.constant("w", np.full((1, 4), 127, np.int8)),
    ...          Value.constant("b", np.zeros(1, np.int32)),
    ...          Value.constant("m", np.full(1, 1 << 30, np.int32)),
    ...          Value.constant("s", np.array([[1, 2**(30 - rs)]], np.int32))]
    ...     return Node("QGemm", "fc", [x, *c], [y], {"x_zero_point": 0, "y_zero_point": -128})
    >>> [f(node(rs)) for f in (requant_fits_int32, requant_rounding_fits) for rs in (8, 30)]
    [True, True, True, False]
    """
    if not requant_fits_int32(node):
        return False
    bound = acc_bound(node)
    mult = np.abs(np.asarray(node.input(3).data, np.int64))
    rs = pad_shifts(node.input(4).data, 1)[1].astype(np.int64)
    zp = abs(int(node.attrs.get("y_zero_point", 0)))
    h = (bound * mult + 2**30) // 2**31 + 1
    return bool(np.all(h + (zp + 1) * (1 << rs) < 2**31 - 1))


def requant_shifts_right(node: Any) -> bool:
    """Whether every channel of QConv/QGemm ``node`` shifts right (``rs >= 1``: real
    factors below 1/2, every zoo model's), so ``kiln_x86_requantize_z1`` rounds ties away
    from zero with ``h >> 31`` alone (no ``max(.., -rs)``).

    >>> from toolchain.graph.ir import Node, Value
    >>> s = lambda *p: Value.constant("s", np.array([[1, 2**q] for q in p], np.int32))
    >>> [requant_shifts_right(Node("QGemm", "fc", [None] * 4 + [s(*p)], [], {}))
    ...  for p in ((29, 25), (30, 25))]
    [True, False]
    """
    s = node.input(4)
    return s is not None and s.data is not None and bool(
        np.all(pad_shifts(s.data, 1)[1] >= 1))


def pad_round_shifts(s: np.ndarray, zp: int, lanes: int) -> np.ndarray:
    """The ``[2, Mo*L]`` table of ``kiln_x86_requantize_z``: row 0 the rounding constant
    with the output zero point, ``c = 2**rs >> 1 + zp * 2**rs``, row 1 the right shift
    ``rs`` (:func:`pad_shifts`; every left shift must be 0: :func:`requant_rounding_fits`).
    ``(h + c + max(h >> 31, -rs)) >> rs`` is then RDBPOT(h, rs) + zp: adding a multiple of
    ``2**rs`` before an arithmetic shift adds it after.

    >>> pad_round_shifts(np.array([[1, 2**30], [1, 2**27]], np.int32), -128, 4).tolist()
    [[-128, -1020, 0, 0], [0, 3, 0, 0]]
    """
    counts = pad_shifts(s, lanes).astype(np.int64)
    m = int(np.asarray(s).shape[0])
    if np.any(counts[0]):
        raise ValueError("pad_round_shifts: a channel shifts left")
    rs = counts[1]
    c = np.where(np.arange(rs.size) < m, (1 << rs) // 2 + zp * (1 << rs), 0)
    if np.any(np.abs(c) >= 2**31):
        raise ValueError(f"pad_round_shifts: rounding constant leaves int32: {c.tolist()}")
    return np.stack([c, rs]).astype(np.int32)


def bias_init(acc: te.Tensor, bias: te.Tensor) -> te.Tensor:
    """``acc`` (an ``x86_acc`` reduction ``[n, Mo, ..., L]``) with its sums starting from
    ``bias[mo * L + l]`` instead of 0: the bias is then loaded once per accumulator tile
    (the init) instead of added to every requantized vector; :func:`lane_requant` with
    ``biased=True`` adds none.

    >>> a = te.placeholder((1, 2, 4), "int32", "a"); b = te.placeholder((4,), "int32", "b")
    >>> k = te.reduce_axis((0, 4), name="k")
    >>> acc = te.compute((1, 2, 2), lambda n, m, l: te.sum(a[n, m, k], axis=k), name="x86_acc")
    >>> str(bias_init(acc, b).op.body.init)
    'b[i1 * 2 + i2]'
    """
    from toolchain.tir.functor import substitute

    op = acc.op
    lanes = int(acc.shape[-1].value)

    def f(*i: Any) -> Any:
        vmap = dict(zip(op.axis, i, strict=True))
        return te.sum(substitute(op.body.source, vmap), axis=list(op.body.axis),
                      init=bias[i[1] * lanes + i[-1]])

    return te.compute(acc.shape, f, name=op.name, tag=op.tag)
