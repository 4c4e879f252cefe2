"""Random int8-friendly graphs shaped for an accelerator target (``--accelerator``).

The general generator (:mod:`tests.fuzz.graphs`) draws convolutions from their whole
attribute space, so on ``vta`` most layers stay on the host (dilation, grouped, a rank-4
Gemm input; non-square filters run there since session 24, as im2col GEMMs).
``random_accel_model(seed)`` draws from what a GEMM accelerator takes instead, with the
sizes that stress its tiling:

* convolutions with square kernels 1, 3 or 5, strides 1 or 2, symmetric padding (now and
  then a padded 1x1), or, one in four, non-square ones (1x3 ... 10x4, strides 1 or 2 on
  each axis, padding on each side on its own), group 1,
  1–48 channels (multiples of 16 and not), feature maps 1–20 wide and high, biased or not;
* chains of them, with ReLU, residual adds of two equal-shaped tensors, max/average and
  global pooling between;
* Flatten to a 2-D tensor and Gemm (``transB`` 0 or 1) or MatMul with constant weights,
  or a graph whose input is 2-D (1–16 rows) from the start.

Seeded and pure like :func:`~tests.fuzz.graphs.random_model`.

>>> m, x = random_accel_model(3)
>>> random_accel_model(3)[0].SerializeToString() == m.SerializeToString()
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from tests.fuzz.graphs import F32, Builder, to_model

#: keep the flattened features of a Gemm input, and any tensor, small: the campaign runs
#: hundreds of graphs through a functional simulator
MAX_FEATURES = 1024
MAX_ELEMENTS = 8192


def _channels(b: Builder) -> int:
    """1–48 channels, a multiple of the 16-lane blocks a third of the time."""
    return b.choice([16, 32, 48]) if b.rng.random() < 0.3 else b.randint(1, 48)


def _weights(b: Builder, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """Weights of ``shape`` scaled for ``fan_in`` inputs; now and then far larger or
    smaller (wide accumulators, a bias beyond int32 after quantization) or with a
    zero output channel (a zero quantization scale)."""
    w = b.rng.standard_normal(shape) / np.sqrt(fan_in)
    w *= b.choice([1.0] * 6 + [1e-6, 0.01, 30.0])
    if b.rng.random() < 0.1:
        w[b.randint(0, shape[0] - 1)] = 0.0
    return w.astype(F32)


def _out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def _conv(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    if b.rng.random() < 0.25:  # non-square: an im2col GEMM on the accelerator
        kh, kw = b.choice([(1, 3), (3, 1), (3, 5), (5, 3), (10, 4), (2, 3)])
        sh, sw = b.choice([(1, 1), (2, 1), (1, 2), (2, 2)])
        pt, pl = b.randint(0, kh // 2), b.randint(0, kw // 2)
        pb, pr = b.randint(0, kh // 2), b.randint(0, kw // 2)
    else:
        kh = kw = b.choice([1, 3, 3, 5])
        pt = pl = pb = pr = ((1 if b.rng.random() < 0.1 else 0) if kh == 1
                             else b.randint(0, kh // 2))
        sh = sw = b.choice([1, 1, 2])
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    if oh < 1 or ow < 1:
        return False
    m = _channels(b)
    if m * oh * ow > MAX_ELEMENTS:
        return False
    inputs = [x, b.const(_weights(b, (m, c, kh, kw), c * kh * kw), "w")]
    if b.rng.random() < 0.7:
        inputs.append(b.weight((m,), 0.2))
    y = b.node("Conv", inputs, (n, m, oh, ow), kernel_shape=[kh, kw], strides=[sh, sw],
               pads=[pt, pl, pb, pr])[0]
    if b.rng.random() < 0.6:
        b.node("Relu", [y], (n, m, oh, ow))
    return True


def _residual(b: Builder) -> bool:
    """``x + conv(x)`` (a same-shaped 3x3 or 1x1 conv), or the sum of two tensors of one
    shape already made."""
    x = b.pick(lambda s: len(s) == 4)
    if x is None:
        return False
    s = b.tensors[x]
    other = b.pick(lambda t: t == s)
    if other == x or other is None or b.rng.random() < 0.5:
        k = b.choice([1, 3])
        other = b.node("Conv", [x, b.weight((s[1], s[1], k, k), 1.0 / np.sqrt(s[1] * k * k)),
                                b.weight((s[1],), 0.2)], s, kernel_shape=[k, k],
                       pads=[k // 2] * 4)[0]
    y = b.node("Add", [x, other], s)[0]
    if b.rng.random() < 0.5:
        b.node("Relu", [y], s)
    return True


def _pool(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    op = b.choice(["MaxPool", "MaxPool", "AveragePool", "GlobalAveragePool"])
    if op == "GlobalAveragePool":
        b.node(op, [x], (n, c, 1, 1))
        return True
    if h < 2 or w < 2:
        return False
    k, s, p = b.choice([(2, 2, 0), (3, 2, 1), (3, 1, 1)])
    b.node(op, [x], (n, c, _out(h, k, s, p), _out(w, k, s, p)), kernel_shape=[k, k],
           strides=[s, s], pads=[p] * 4)
    return True


def _dense(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 2 or (len(s) == 4 and int(np.prod(s[1:])) <= MAX_FEATURES))
    if x is None:
        return False
    s = b.tensors[x]
    if len(s) == 4:
        s = (s[0], int(np.prod(s[1:])))
        x = b.node("Flatten", [x], s, axis=1)[0]
    rows, k = s
    nn = _channels(b)
    if b.rng.random() < 0.6:
        tb = b.randint(0, 1)
        w = _weights(b, (nn, k), k)  # output channels first, as a zeroed one is
        inputs = [x, b.const(w if tb else np.ascontiguousarray(w.T), "w")]
        if b.rng.random() < 0.8:
            inputs.append(b.weight((nn,), 0.2))
        y = b.node("Gemm", inputs, (rows, nn), transB=tb)[0]
    else:
        w = np.ascontiguousarray(_weights(b, (nn, k), k).T)
        y = b.node("MatMul", [x, b.const(w, "w")], (rows, nn))[0]
    if b.rng.random() < 0.5:
        b.node("Relu", [y], (rows, nn))
    return True


_GENERATORS: tuple[tuple[Callable[[Builder], bool], float], ...] = (
    (_conv, 5.0), (_residual, 1.2), (_pool, 1.0), (_dense, 1.2),
)


def random_accel_model(seed: int, max_nodes: int = 10) -> tuple[onnx.ModelProto, dict]:
    """A random valid model of accelerator-shaped layers and seeded inputs for it."""
    rng = np.random.default_rng(seed)
    b = Builder(rng)
    if rng.random() < 0.15:  # a dense-only graph: rows of features
        shape: tuple[int, ...] = (b.randint(1, 16), b.randint(1, 64))
    else:
        c, h = _channels(b), b.randint(1, 20)
        w = h if rng.random() < 0.6 else b.randint(1, 20)
        while c * h * w > MAX_ELEMENTS:
            c = max(1, c // 2)
        shape = (1, c, h, w)
    b.tensors["x"] = shape
    inputs = {"x": rng.standard_normal(shape).astype(F32)}
    weights = np.array([w for _, w in _GENERATORS])
    target = b.randint(2, max_nodes)
    tries = 0
    while len(b.nodes) < target and tries < 6 * max_nodes:
        tries += 1
        fn = _GENERATORS[int(rng.choice(len(_GENERATORS), p=weights / weights.sum()))][0]
        fn(b)
    return to_model(b, f"accel{seed}", inputs, shape)
