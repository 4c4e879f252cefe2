"""LSTM, GRU and RNN, unrolled over the (static) sequence.

Per direction: one stage for the input projection of every step at once
(``xw[t, b, j] = Σ_i X[t, b, i] W[j, i] + Wb[j] + Rb[j]``), then per step a recurrent
projection ``hr_t = H_{t-1} Rᵀ`` (a reduction; skipped for a zero initial state), the cell
state ``C_t`` and the hidden state ``H_t`` (elementwise, the gate nonlinearities inline).
``Y`` gathers the ``H_t``; ``Y_h``/``Y_c`` are the last step's states.  Gates are ordered
i, o, f, c as in ONNX.  A sequence of S steps is about 3·S stages per direction.
:func:`gru_rnn` builds GRU (gates z, r, h; ``linear_before_reset``) and RNN the same way.

Example::

    >>> from collections.abc import Callable, Sequence

from toolchain import te
    >>> x = te.placeholder((3, 2, 4), name="x")
    >>> w = te.placeholder((1, 12, 4), name="w"); r = te.placeholder((1, 12, 3), name="r")
    >>> y, yh, yc = lstm(x, w, r)
    >>> [d.value for d in y.shape], [d.value for d in yh.shape]
    ([3, 1, 2, 3], [1, 2, 3])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolchain import te
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr


class _Cell:
    """One direction of an LSTM: builds its stages step by step."""

    def __init__(self, x: te.Tensor, w: te.Tensor, r: te.Tensor, b: te.Tensor | None,
                 p: te.Tensor | None, clip: float | None, layout: int, d: int) -> None:
        self.x, self.w, self.r, self.b, self.p = x, w, r, b, p
        self.clip, self.layout, self.d = clip, layout, ir.IntImm(d)
        self.dt = x.dtype
        _, self.h4, n_in = const_shape(w, "lstm")
        self.h = self.h4 // 4
        xs = const_shape(x, "lstm")
        self.s, self.nb = (xs[1], xs[0]) if layout else (xs[0], xs[1])
        kk = te.reduce_axis((0, n_in), name="i")

        def proj(t: Expr, bi: Expr, j: Expr) -> Expr:
            src = x[(bi, t, kk)] if layout else x[(t, bi, kk)]
            return te.sum(src * w[(self.d, j, kk)], axis=kk)

        self.xw = te.compute((self.s, self.nb, self.h4), proj, name=f"lstm_xw{d}",
                             tag="reduce")

    def recurrent(self, prev: Callable[[Expr, Expr], Expr], t: int) -> te.Tensor:
        """``H_{t-1} Rᵀ`` for the previous hidden state ``prev(b, k)``."""
        rk = te.reduce_axis((0, self.h), name="k")
        return te.compute((self.nb, self.h4), lambda bi, j: te.sum(
            prev(bi, rk) * self.r[(self.d, j, rk)], axis=rk),
            name=f"lstm_hr{self.d.value}_{t}", tag="reduce")

    def cut(self, v: Expr) -> Expr:
        """``v`` clamped to ±clip (the input of every activation)."""
        if self.clip is None:
            return v
        return te.minimum(te.maximum(v, scalar(-self.clip, self.dt)), scalar(self.clip,
                                                                               self.dt))

    def pre(self, t: int, hr: te.Tensor | None, bi: Expr, gate: int, k: Expr) -> Expr:
        """Pre-activation of ``gate`` (0 i, 1 o, 2 f, 3 c) before the peephole term."""
        jj = k + gate * self.h
        v = self.xw[(ir.IntImm(t), bi, jj)]
        if self.b is not None:
            v = v + self.b[(self.d, jj)] + self.b[(self.d, jj + self.h4)]
        if hr is not None:
            v = v + hr[(bi, jj)]
        return v

    def peep(self, which: int, k: Expr) -> Expr:
        """Peephole weight (0 i, 1 o, 2 f); 0 without ``P``."""
        if self.p is None:
            return scalar(0, self.dt)
        return self.p[(self.d, k + which * self.h)]

    def step(self, t: int, h_prev: Callable[[Expr, Expr], Expr] | None,
             c_prev: Callable[[Expr, Expr], Expr] | None) -> tuple[te.Tensor, te.Tensor]:
        """``(H_t, C_t)`` from the previous states (``None``: zero)."""
        hr = self.recurrent(h_prev, t) if h_prev is not None else None
        dn = self.d.value

        def cell(bi: Expr, k: Expr) -> Expr:
            i_pre, f_pre = self.pre(t, hr, bi, 0, k), self.pre(t, hr, bi, 2, k)
            if c_prev is not None:
                i_pre = i_pre + self.peep(0, k) * c_prev(bi, k)
            new = te.sigmoid(self.cut(i_pre)) * te.tanh(self.cut(self.pre(t, hr, bi, 3, k)))
            if c_prev is None:
                return new
            prev = c_prev(bi, k)
            return te.sigmoid(self.cut(f_pre + self.peep(2, k) * prev)) * prev + new

        ct = te.compute((self.nb, self.h), cell, name=f"lstm_c{dn}_{t}", tag="elemwise")

        def hidden(bi: Expr, k: Expr) -> Expr:
            c = ct[(bi, k)]
            o = te.sigmoid(self.cut(self.pre(t, hr, bi, 1, k) + self.peep(1, k) * c))
            return o * te.tanh(c)

        return te.compute((self.nb, self.h), hidden, name=f"lstm_h{dn}_{t}",
                          tag="elemwise"), ct


def _initial(v: te.Tensor | None, layout: int, d: int) -> Callable[[Expr, Expr], Expr] | None:
    if v is None:
        return None
    dd = ir.IntImm(d)
    return (lambda bi, k: v[(bi, dd, k)]) if layout else (lambda bi, k: v[(dd, bi, k)])


def _reader(t: te.Tensor) -> Callable[[Expr, Expr], Expr]:
    return lambda bi, k: t[(bi, k)]


def _pick(tensors: Sequence[te.Tensor], index: Expr, bi: Expr, k: Expr) -> Expr:
    """``tensors[index][bi, k]`` as a select chain."""
    out = tensors[-1][(bi, k)]
    for n in range(len(tensors) - 2, -1, -1):
        out = te.select(te.equal(index, n), tensors[n][(bi, k)], out)
    return out


def lstm(x: te.Tensor, w: te.Tensor, r: te.Tensor, b: te.Tensor | None = None,
         initial_h: te.Tensor | None = None, initial_c: te.Tensor | None = None,
         p: te.Tensor | None = None, clip: float | None = None, direction: str = "forward",
         layout: int = 0) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """ONNX LSTM with the default activations: ``(Y, Y_h, Y_c)`` (see the module
    docstring)."""
    dirs = const_shape(w, "lstm")[0]
    per_dir: list[list[te.Tensor]] = []
    last_h: list[te.Tensor] = []
    last_c: list[te.Tensor] = []
    for d in range(dirs):
        cell = _Cell(x, w, r, b, p, clip, layout, d)
        h_prev, c_prev = _initial(initial_h, layout, d), _initial(initial_c, layout, d)
        reverse = direction == "reverse" or d == 1
        outs: dict[int, te.Tensor] = {}
        for t in (range(cell.s - 1, -1, -1) if reverse else range(cell.s)):
            ht, ct = cell.step(t, h_prev, c_prev)
            outs[t] = ht
            h_prev, c_prev = _reader(ht), _reader(ct)
            last_h_t, last_c_t = ht, ct
        per_dir.append([outs[t] for t in range(cell.s)])
        last_h.append(last_h_t)
        last_c.append(last_c_t)
    s, nb, h = cell.s, cell.nb, cell.h

    def y_of(*i: Expr) -> Expr:
        t, d, bi, k = (i[1], i[2], i[0], i[3]) if layout else i
        if dirs == 1:
            return _pick(per_dir[0], t, bi, k)
        return te.select(te.equal(d, 0), _pick(per_dir[0], t, bi, k),
                         _pick(per_dir[1], t, bi, k))

    y = te.compute((nb, s, dirs, h) if layout else (s, dirs, nb, h), y_of, name="lstm_y",
                   tag="injective")

    def final(tensors: list[te.Tensor], name: str) -> te.Tensor:
        def f(a: Expr, c: Expr, k: Expr) -> Expr:
            bi, d = (a, c) if layout else (c, a)
            return _pick(tensors, d, bi, k)
        return te.compute((nb, dirs, h) if layout else (dirs, nb, h), f, name=name,
                          tag="injective")

    return y, final(last_h, "lstm_y_h"), final(last_c, "lstm_y_c")



def _proj(x: te.Tensor, w: te.Tensor, b: te.Tensor | None, layout: int, d: int,
          name: str) -> te.Tensor:
    """``X_t Wᵀ + Wb`` for every step at once: ``[S, B, gates·H]``."""
    xs = const_shape(x, name)
    _, gh, n_in = const_shape(w, name)
    s, nb = (xs[1], xs[0]) if layout else (xs[0], xs[1])
    dd = ir.IntImm(d)
    kk = te.reduce_axis((0, n_in), name="i")

    def f(t: Expr, bi: Expr, j: Expr) -> Expr:
        src = x[(bi, t, kk)] if layout else x[(t, bi, kk)]
        acc = te.sum(src * w[(dd, j, kk)], axis=kk)
        return acc

    xw = te.compute((s, nb, gh), f, name=f"{name}_xw{d}", tag="reduce")
    if b is None:
        return xw
    return te.compute(xw.shape, lambda t, bi, j: xw[(t, bi, j)] + b[(dd, j)],
                      name=f"{name}_xwb{d}", tag="elemwise")


def _hidden_proj(prev: Callable[[Expr, Expr], Expr] | None, r: te.Tensor,
                 b: te.Tensor | None, d: int, nb: int, rows: tuple[int, int], name: str
                 ) -> te.Tensor | None:
    """``H Rᵀ + Rb`` over the rows ``[lo, hi)`` of R for ``H = prev(b, k)`` (``None``: a zero
    state, so only ``Rb``; ``None`` when that is zero too)."""
    _, gh, h = const_shape(r, name)
    lo, hi = rows
    dd = ir.IntImm(d)
    acc: te.Tensor | None = None
    if prev is not None:
        k = te.reduce_axis((0, h), name="k")
        acc = te.compute((nb, hi - lo), lambda bi, j: te.sum(
            prev(bi, k) * r[(dd, j + lo, k)], axis=k), name=name, tag="reduce")
    if b is None:
        return acc
    if acc is None:
        return te.compute((nb, hi - lo), lambda bi, j: b[(dd, j + lo + gh)],
                          name=f"{name}_b", tag="injective")
    total = acc
    return te.compute((nb, hi - lo), lambda bi, j: total[(bi, j)] + b[(dd, j + lo + gh)],
                      name=f"{name}_b", tag="elemwise")


def _cut(v: Expr, clip: float | None) -> Expr:
    if clip is None:
        return v
    return te.minimum(te.maximum(v, scalar(-clip, v.dtype)), scalar(clip, v.dtype))


def _at(t: te.Tensor | None, bi: Expr, j: Expr) -> Expr | None:
    return None if t is None else t[(bi, j)]


def _plus(*vs: Expr | None) -> Expr:
    out = [v for v in vs if v is not None]
    acc = out[0]
    for v in out[1:]:
        acc = acc + v
    return acc


def gru_rnn(kind: str, x: te.Tensor, w: te.Tensor, r: te.Tensor, b: te.Tensor | None = None,
            initial_h: te.Tensor | None = None, clip: float | None = None,
            direction: str = "forward", layout: int = 0, linear_before_reset: bool = False
            ) -> tuple[te.Tensor, te.Tensor]:
    """ONNX GRU (``kind="GRU"``) or RNN (``"RNN"``) with the default activations:
    ``(Y, Y_h)``, unrolled like :func:`lstm`."""
    dirs, gh, _ = const_shape(w, kind)
    h = gh // (3 if kind == "GRU" else 1)
    xs = const_shape(x, kind)
    s, nb = (xs[1], xs[0]) if layout else (xs[0], xs[1])
    dt = x.dtype
    one = scalar(1, dt)
    name = kind.lower()
    per_dir: list[list[te.Tensor]] = []
    last: list[te.Tensor] = []
    for d in range(dirs):
        xw = _proj(x, w, b, layout, d, name)
        prev = _initial(initial_h, layout, d)
        outs: dict[int, te.Tensor] = {}
        reverse = direction == "reverse" or d == 1
        for t in (range(s - 1, -1, -1) if reverse else range(s)):
            tt = ir.IntImm(t)
            tag = f"{name}{d}_{t}"
            if kind == "RNN":
                hr = _hidden_proj(prev, r, b, d, nb, (0, h), f"{name}_hr{tag}")

                def step(bi: Expr, k: Expr, hr: te.Tensor | None = hr, xw: te.Tensor = xw,
                         tt: Expr = tt) -> Expr:
                    return te.tanh(_cut(_plus(xw[(tt, bi, k)], _at(hr, bi, k)), clip))

                ht = te.compute((nb, h), _two(step), name=f"{name}_h{tag}", tag="elemwise")
            else:
                ht = _gru_step(xw, r, b, prev, d, nb, h, tt, clip, linear_before_reset,
                               tag, one)
            outs[t] = ht
            prev = _reader(ht)
            final = ht
        per_dir.append([outs[t] for t in range(s)])
        last.append(final)

    def y_of(*i: Expr) -> Expr:
        t, dd, bi, k = (i[1], i[2], i[0], i[3]) if layout else i
        if dirs == 1:
            return _pick(per_dir[0], t, bi, k)
        return te.select(te.equal(dd, 0), _pick(per_dir[0], t, bi, k),
                         _pick(per_dir[1], t, bi, k))

    y = te.compute((nb, s, dirs, h) if layout else (s, dirs, nb, h), y_of,
                   name=f"{name}_y", tag="injective")

    def yh_of(a: Expr, c: Expr, k: Expr) -> Expr:
        bi, dd = (a, c) if layout else (c, a)
        return _pick(last, dd, bi, k)

    yh = te.compute((nb, dirs, h) if layout else (dirs, nb, h), yh_of, name=f"{name}_y_h",
                    tag="injective")
    return y, yh


def _two(fn: Callable[..., Expr]) -> Callable[[Expr, Expr], Expr]:
    """``fn`` seen by te.compute as a function of exactly two indices."""
    return lambda bi, k: fn(bi, k)


def _gru_step(xw: te.Tensor, r: te.Tensor, b: te.Tensor | None,
              prev: Callable[[Expr, Expr], Expr] | None, d: int, nb: int, h: int, tt: Expr,
              clip: float | None, lbr: bool, tag: str, one: Expr) -> te.Tensor:
    """One GRU step: ``H_t`` from ``H_{t-1} = prev`` (``None``: zero)."""
    hr = _hidden_proj(prev, r, b, d, nb, (0, 3 * h if lbr else 2 * h), f"gru_hr{tag}")

    def gate(bi: Expr, k: Expr, g: int) -> Expr:
        return te.sigmoid(_cut(_plus(xw[(tt, bi, k + g * h)], _at(hr, bi, k + g * h)), clip))

    if lbr:
        def cand(bi: Expr, k: Expr) -> Expr:
            rh = _at(hr, bi, k + 2 * h)
            reset = None if rh is None else gate(bi, k, 1) * rh
            return te.tanh(_cut(_plus(xw[(tt, bi, k + 2 * h)], reset), clip))
    else:
        rh: te.Tensor | None = None
        if prev is not None:
            p = prev
            gated = te.compute((nb, h), lambda bi, k: gate(bi, k, 1) * p(bi, k),
                               name=f"gru_rh_in{tag}", tag="elemwise")
            rh = _hidden_proj(_reader(gated), r, None, d, nb, (2 * h, 3 * h), f"gru_rh{tag}")
        rb = (lambda bi, k: b[(ir.IntImm(d), k + 5 * h)]) if b is not None else None

        def cand(bi: Expr, k: Expr) -> Expr:
            return te.tanh(_cut(_plus(xw[(tt, bi, k + 2 * h)], _at(rh, bi, k),
                                      rb(bi, k) if rb is not None else None), clip))

    hc = te.compute((nb, h), cand, name=f"gru_cand{tag}", tag="elemwise")

    def step(bi: Expr, k: Expr) -> Expr:
        z = gate(bi, k, 0)
        new = (one - z) * hc[(bi, k)]
        return new if prev is None else new + z * prev(bi, k)

    return te.compute((nb, h), step, name=f"gru_h{tag}", tag="elemwise")
