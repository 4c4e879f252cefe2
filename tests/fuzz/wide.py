"""Random graphs over what :mod:`tests.fuzz.graphs` never draws (``--wide``).

The CI generator (``random_model``) keeps its 17 op families so the CI batch's graphs
and CPU stay as they are; ``random_wide_model(seed)`` draws from those families and from
these, for campaigns:

* more elementwise ops: Softplus, Softsign, Elu, Selu, Celu, ThresholdedRelu, Shrink, the
  trigonometric and hyperbolic functions (their arguments kept in their domains), Floor,
  Ceil, Round, Sign; Sum, Mean, Min and Max of one to three operands; comparisons
  (LessOrEqual, GreaterOrEqual, ...) combined by And/Or/Xor/Not; Mod;
* the same tensor twice in one node (``Add(x, x)``, ``MatMul(x, x)``, ``Concat(x, x)``,
  ``Sum(x, x, x)``) and initializers shared by several nodes;
* casts: float32 → float16, int32, int64, float64, bool and back, and integer arithmetic
  (Add/Sub/Mul, Div and Mod by non-zero constants of either sign, Abs, Neg, Min/Max) on
  int32/int64 between two casts;
* Shape, Size, ConstantOfShape, Range, OneHot, EyeLike (constants the compiler folds),
  ReverseSequence;
* reductions: ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum(Exp), ArgMin,
  ``select_last_index``, reductions over every axis (no ``axes``) and
  ``noop_with_empty_axes``; TopK, CumSum (exclusive, reverse), Hardmax,
  LpNormalization;
* data movement: Trilu, DepthToSpace/SpaceToDepth (DCR, CRD), GatherElements, GatherND
  (``batch_dims`` 0/1), ScatterElements/ScatterND (none/add/mul), Pad with negative pads,
  Slice over several axes at once, Split into equal parts (no ``split`` input), Einsum;
* convolutions and pooling in 1-D and 3-D, ``auto_pad`` (SAME_UPPER, SAME_LOWER, VALID),
  batches of 2–3 images, grouped and dilated ConvTranspose; LpPool, GlobalLpPool, LRN,
  MaxPool's ``Indices`` output; Resize cubic and by ``sizes``;
* MatMul with 1-D operands and broadcast batch dimensions;
* graph inputs of rank 0 to 5 (size-1 and odd dims), a second input that broadcasts to
  the first, the graph input itself as an output.

Seeded and pure, like ``random_model``.

>>> m, x = random_wide_model(3)
>>> random_wide_model(3)[0].SerializeToString() == m.SerializeToString()
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.fuzz import graphs as g
from tests.fuzz.graphs import F32, Builder, to_model


def _bounded(b: Builder, x: str) -> str:
    """``tanh(x)``: an argument in (-1, 1) for the functions that need one."""
    return b.node("Tanh", [x], b.tensors[x])[0]


def _unary_wide(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    op = b.choice(["Softplus", "Softsign", "Elu", "Selu", "Celu", "ThresholdedRelu",
                   "Shrink", "Sin", "Cos", "Atan", "Asinh", "Sinh", "Cosh", "Asin", "Acos",
                   "Atanh", "Acosh", "Tan", "Floor", "Ceil", "Round", "Sign", "Hardmax",
                   "LpNormalization", "Dropout", "Softmax"])
    attrs: dict = {}
    if op in ("Sinh", "Cosh", "Asin", "Acos", "Tan"):
        x = _bounded(b, x)
    elif op in ("Sin", "Cos"):  # a large argument makes them ill-conditioned
        x = b.node("Mul", [_bounded(b, x), b.const(np.array(4.0, F32))], s)[0]
    elif op == "Atanh":
        x = b.node("Mul", [_bounded(b, x), b.const(np.array(0.9, F32))], s)[0]
    elif op == "Acosh":
        x = b.node("Add", [b.node("Abs", [x], s)[0], b.const(np.array(1.0, F32))], s)[0]
    elif op in ("Floor", "Ceil", "Round"):
        x = b.node("Mul", [x, b.const(np.array(2.5, F32))], s)[0]
    if op in ("Elu", "Celu", "ThresholdedRelu"):
        attrs["alpha"] = float(b.choice([0.5, 1.0, 1.7]))
    elif op == "Shrink":
        attrs.update(bias=float(b.choice([0.0, 0.3])), lambd=float(b.choice([0.5, 0.2])))
    elif op in ("Hardmax", "LpNormalization", "Softmax"):
        if not s:
            return False
        attrs["axis"] = b.randint(-len(s), len(s) - 1)
        if op == "LpNormalization":
            attrs["p"] = b.randint(1, 2)
    b.node(op, [x], s, **attrs)
    return True


def _nary(b: Builder) -> bool:
    """Sum/Mean/Min/Max of one to three operands (repeats and broadcasts among them)."""
    x = b.pick()
    s = b.tensors[x]
    op = b.choice(["Sum", "Mean", "Min", "Max"])
    args = [x]
    for _ in range(b.randint(0, 2)):
        r = b.rng.random()
        if r < 0.3:
            args.append(x)
        elif r < 0.6:
            other = b.pick(lambda t: g.broadcastable(s, t))
            args.append(other if other is not None else x)
        else:
            args.append(b.weight(g.broadcast_shape(b, s), 1.0))
    out = tuple(np.broadcast_shapes(*(b.tensors[a] if a in b.tensors else _init_shape(b, a)
                                      for a in args)))
    b.node(op, args, out)
    return True


def _init_shape(b: Builder, name: str) -> tuple[int, ...]:
    for t in b.inits:
        if t.name == name:
            return tuple(t.dims)
    raise KeyError(name)


def _self(b: Builder) -> bool:
    """One tensor as both operands."""
    x = b.pick()
    s = b.tensors[x]
    r = b.rng.random()
    if r < 0.3 and len(s) >= 2 and s[-1] == s[-2]:
        b.node("MatMul", [x, x], s)
    elif r < 0.5 and s:
        axis = b.randint(-len(s), len(s) - 1)
        b.node("Concat", [x, x], tuple(d * 2 if i == axis % len(s) else d
                                       for i, d in enumerate(s)), axis=axis)
    else:
        b.node(b.choice(["Add", "Mul", "Sub", "Max"]), [x, x], s)
    return True


def _logic(b: Builder) -> bool:
    """Comparisons combined by And/Or/Xor/Not, into Where or a Cast to float."""
    x = b.pick()
    s = b.tensors[x]
    ops = ["Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"]
    ws = g.broadcast_shape(b, s)
    c1 = b.node(b.choice(ops), [x, b.weight(ws, 1.0)], None)[0]
    cond, shape = c1, tuple(np.broadcast_shapes(s, ws))
    r = b.rng.random()
    if r < 0.6:
        y = b.pick(lambda t: g.broadcastable(s, t)) or x
        c2 = b.node(b.choice(ops), [y, b.const(np.array(0.1, F32))], None)[0]
        cond = b.node(b.choice(["And", "Or", "Xor"]), [c1, c2], None)[0]
        shape = tuple(np.broadcast_shapes(shape, b.tensors[y]))
    if b.rng.random() < 0.3:
        cond = b.node("Not", [cond], None)[0]
    if b.rng.random() < 0.5:
        b.node("Cast", [cond], shape, to=TensorProto.FLOAT)
    else:
        os_ = g.broadcast_shape(b, s)
        b.node("Where", [cond, x, b.weight(os_, 1.0)],
               tuple(np.broadcast_shapes(shape, s, os_)))
    return True


def _cast(b: Builder) -> bool:
    """float32 to another type and back (float16 rounding, truncation toward zero)."""
    x = b.pick()
    s = b.tensors[x]
    to = b.choice([TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64,
                   TensorProto.DOUBLE, TensorProto.BOOL])
    if to in (TensorProto.INT32, TensorProto.INT64):
        x = b.node("Mul", [x, b.const(np.array(3.0, F32))], s)[0]
    c = b.node("Cast", [x], None, to=to)[0]
    b.node("Cast", [c], s, to=TensorProto.FLOAT)
    return True


def _int_chain(b: Builder) -> bool:
    """Integer arithmetic between two casts: wraps, truncating Div, both Mods."""
    x = b.pick()
    s = b.tensors[x]
    dt, to = b.choice([(np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64)])
    scaled = b.node("Mul", [x, b.const(np.array(b.choice([4.0, 10.0]), F32))], s)[0]
    v = b.node("Cast", [scaled], None, to=to)[0]
    shape = s
    for _ in range(b.randint(1, 3)):
        op = b.choice(["Add", "Sub", "Mul", "Div", "Mod", "Abs", "Neg", "Max", "Min"])
        if op in ("Abs", "Neg"):
            v = b.node(op, [v], None)[0]
            continue
        cs = g.broadcast_shape(b, s)
        shape = tuple(np.broadcast_shapes(shape, cs))
        if op in ("Div", "Mod"):
            k = b.rng.integers(1, 6, cs) * b.rng.choice([-1, 1], cs)
            attrs = {"fmod": b.randint(0, 1)} if op == "Mod" else {}
            v = b.node(op, [v, b.const(k.astype(dt))], None, **attrs)[0]
        else:
            v = b.node(op, [v, b.const(b.rng.integers(-7, 8, cs).astype(dt))], None)[0]
    b.node("Cast", [v], shape, to=TensorProto.FLOAT)
    return True


def _mod_float(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    cs = g.broadcast_shape(b, s)
    d = (b.rng.uniform(0.5, 2.0, cs) * b.rng.choice([-1, 1], cs)).astype(F32)
    # fmod=1: onnxruntime refuses fmod=0 on floats
    b.node("Mod", [x, b.const(d)], tuple(np.broadcast_shapes(s, cs)), fmod=1)
    return True


def _shape_ops(b: Builder) -> bool:
    """Shape, Size, ConstantOfShape, Range, OneHot, EyeLike, ReverseSequence: constants
    computed from shapes (folded at compile time) and a few index-driven ops."""
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    op = b.choice(["ConstantOfShape", "Range", "OneHot", "EyeLike", "Size",
                   "ReverseSequence"])
    if op == "ConstantOfShape":
        shp = b.node("Shape", [x], None, start=b.randint(-len(s), 0))[0]
        v = float(b.rng.uniform(-2, 2))
        cs = b.node("ConstantOfShape", [shp], None,
                    value=helper.make_tensor("v", TensorProto.FLOAT, [1], [v]))[0]
        b.node(b.choice(["Add", "Mul"]), [x, cs], s)
    elif op == "Range":
        n = s[-1]
        st, dl = float(b.randint(-3, 3)), float(b.choice([1, 2, -1, 0.5]))
        r = b.node("Range", [b.const(np.array(st, F32)), b.const(np.array(st + n * dl, F32)),
                             b.const(np.array(dl, F32))], None)[0]
        b.node("Add", [x, r], s)
    elif op == "OneHot":
        if len(s) < 2:  # onnxruntime: indices of rank 1 at least
            return False
        n = s[-1]
        idx = b.rng.integers(-n, n, s[:-1]).astype(np.int64)
        oh = b.node("OneHot", [b.const(idx), b.const(np.array(n, np.int64)),
                               b.const(np.array([-1.0, 2.0], F32))], None, axis=-1)[0]
        b.node("Mul", [x, oh], s)
    elif op == "EyeLike":
        if len(s) != 2:
            return False
        e = b.node("EyeLike", [x], None, k=b.randint(-s[0], s[1]))[0]
        b.node("Add", [x, e], s)
    elif op == "Size":
        n = b.node("Cast", [b.node("Size", [x], None)[0]], None, to=TensorProto.FLOAT)[0]
        b.node("Div", [x, n], s)
    else:
        if len(s) < 2:
            return False
        ba = b.randint(0, 1)
        lens = b.rng.integers(1, s[1 - ba] + 1, s[ba]).astype(np.int64)
        b.node("ReverseSequence", [x, b.const(lens)], s, batch_axis=ba, time_axis=1 - ba)
    return True


def _reduce_wide(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    op = b.choice(["ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                   "ReduceLogSumExp", "ArgMin", "ArgMax", "ReduceSum", "ReduceMean",
                   "ReduceMax"])
    keep = b.randint(0, 1)
    if op in ("ArgMin", "ArgMax"):
        axis = b.randint(-len(s), len(s) - 1)
        out = tuple(1 if i == axis % len(s) else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i != axis % len(s))
        idx = b.node(op, [x], None, axis=axis, keepdims=keep,
                     select_last_index=b.randint(0, 1))[0]
        b.node("Cast", [idx], out, to=TensorProto.FLOAT)
        return True
    if op == "ReduceProd":  # over at most 12 elements: a product of more is ill-conditioned
        x = b.node("Add", [_bounded(b, x), b.const(np.array(1.2, F32))], s)[0]
        small = [i for i, d in enumerate(s) if d <= 12]
        if not small:
            return False
        a = b.choice(small)
        out = tuple(1 if i == a else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i != a)
        b.node(op, [x], out, keepdims=keep, axes=[a - len(s) if b.rng.random() < 0.4 else a])
        return True
    elif op == "ReduceLogSum":
        x = b.node("Add", [b.node("Abs", [x], s)[0], b.const(np.array(0.5, F32))], s)[0]
    r = b.rng.random()
    if r < 0.25:  # every axis
        axes = None
        out = (1,) * len(s) if keep else ()
    elif r < 0.35 and op == "ReduceSum":  # no axes, noop_with_empty_axes: the identity
        b.node(op, [x], s, keepdims=keep, noop_with_empty_axes=1)
        return True
    else:
        axes = sorted({b.randint(0, len(s) - 1) for _ in range(b.randint(1, len(s)))})
        out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i not in axes)
        axes = [a - len(s) if b.rng.random() < 0.4 else a for a in axes]
    if op == "ReduceSum":
        ins = [x] if axes is None else [x, b.const(np.array(axes, np.int64))]
        b.node(op, ins, out, keepdims=keep)
    else:
        attrs = {} if axes is None else {"axes": axes}
        b.node(op, [x], out, keepdims=keep, **attrs)
    return True


def _topk(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    axis = b.randint(-len(s), len(s) - 1)
    k = b.randint(1, s[axis % len(s)])
    out = tuple(k if i == axis % len(s) else d for i, d in enumerate(s))
    vals, idx = b.node("TopK", [x, b.const(np.array([k], np.int64))], None, n_out=2,
                       axis=axis, largest=b.randint(0, 1), sorted=1)
    b.tensors[vals] = out
    if b.rng.random() < 0.5:
        b.node("Cast", [idx], out, to=TensorProto.FLOAT)
    return True


def _cumsum(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    axis = b.randint(-len(s), len(s) - 1)
    ax = b.const(np.array(axis, b.choice([np.int64, np.int32])))
    b.node("CumSum", [x, ax], s, exclusive=b.randint(0, 1), reverse=b.randint(0, 1))
    return True


def _trilu(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    ins = [x]
    if b.rng.random() < 0.7:
        ins.append(b.const(np.array(b.randint(-s[-2], s[-1]), np.int64)))
    b.node("Trilu", ins, s, upper=b.randint(0, 1))
    return True


def _depth_space(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    bs = b.choice([2, 2, 3])
    if c % (bs * bs) == 0 and b.rng.random() < 0.6:
        b.node("DepthToSpace", [x], (n, c // (bs * bs), h * bs, w * bs), blocksize=bs,
               mode=b.choice(["DCR", "CRD"]))
        return True
    if h % bs or w % bs:
        return False
    b.node("SpaceToDepth", [x], (n, c * bs * bs, h // bs, w // bs), blocksize=bs)
    return True


def _gather_wide(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    if b.rng.random() < 0.5:  # GatherElements: indices of x's rank, any length on axis
        axis = b.randint(-len(s), len(s) - 1)
        a = axis % len(s)
        ishape = tuple(b.randint(1, s[a] + 1) if i == a else b.randint(1, d)
                       for i, d in enumerate(s))
        idx = b.rng.integers(-s[a], s[a], ishape).astype(np.int64)
        b.node("GatherElements", [x, b.const(idx)], ishape, axis=axis)
        return True
    batch = 1 if len(s) >= 2 and b.rng.random() < 0.3 else 0
    depth = b.randint(1, len(s) - batch)
    rows = b.choice([(2,), (3,), (2, 2)]) if not batch else (b.randint(1, 3),)
    idx = np.stack([b.rng.integers(-d, d, s[:batch] + rows)
                    for d in s[batch:batch + depth]], axis=-1).astype(np.int64)
    out = s[:batch] + rows + s[batch + depth:]
    b.node("GatherND", [x, b.const(idx)], out, batch_dims=batch)
    return True


def _scatter(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    red = b.choice(["none", "add", "mul"])
    if b.rng.random() < 0.5:  # ScatterElements, distinct positions along the axis
        axis = b.randint(-len(s), len(s) - 1)
        a = axis % len(s)
        ushape = tuple(b.randint(1, d) for d in s)
        idx = np.stack([b.rng.permutation(s[a])[:ushape[a]] for _ in
                        range(int(np.prod(ushape)) // ushape[a])], axis=-1)
        idx = np.moveaxis(idx.reshape((ushape[a],) + tuple(
            d for i, d in enumerate(ushape) if i != a)), 0, a).astype(np.int64)
        if b.rng.random() < 0.3:
            idx = idx - s[a]  # negative indices
        upd = b.pick(lambda t: t == ushape)
        b.node("ScatterElements", [x, b.const(idx), upd or b.weight(ushape, 1.0)], s,
               axis=axis, reduction=red)
        return True
    depth = b.randint(1, len(s))
    flat = b.rng.permutation(int(np.prod(s[:depth])))[:b.randint(1, min(4, int(np.prod(
        s[:depth]))))]
    idx = np.stack(np.unravel_index(flat, s[:depth]), axis=-1).astype(np.int64)
    ushape = (len(flat),) + s[depth:]
    b.node("ScatterND", [x, b.const(idx), b.weight(ushape, 1.0)], s, reduction=red)
    return True


def _pad_negative(b: Builder) -> bool:
    """Pad with some negative (cropping) amounts."""
    x = b.pick(lambda s: len(s) >= 1 and max(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    while True:
        pads = [b.randint(-(d - 1) // 2, 2) for d in s] + [b.randint(-(d - 1) // 2, 2)
                                                           for d in s]
        out = tuple(d + pads[i] + pads[i + len(s)] for i, d in enumerate(s))
        if min(out) >= 1:
            break
    b.node("Pad", [x, b.const(np.array(pads, np.int64))], out,
           mode=b.choice(["constant", "edge"]))
    return True


def _slice_multi(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    axes = sorted({b.randint(0, len(s) - 1) for _ in range(3)})
    starts, ends, steps, out = [], [], [], list(s)
    for a in axes:
        n = s[a]
        step = b.choice([1, 2, 3, -1, -3])
        st = b.randint(-n - 2, n + 1)
        en = b.choice([b.randint(-n - 2, n + 2), 2 ** 62, -(2 ** 62)])
        length = len(range(*slice(st, en, step).indices(n)))
        if length < 1:
            return False
        starts.append(st)
        ends.append(en)
        steps.append(step)
        out[a] = length
    axes = [a - len(s) if b.rng.random() < 0.3 else a for a in axes]
    b.node("Slice", [x, b.const(np.array(starts, np.int64)), b.const(np.array(ends, np.int64)),
                     b.const(np.array(axes, np.int64)), b.const(np.array(steps, np.int64))],
           tuple(out))
    return True


def _split_equal(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    axis = b.randint(0, len(s) - 1)
    parts = [p for p in (2, 3) if s[axis] % p == 0]
    if not parts:
        return False
    p = b.choice(parts)
    outs = b.node("Split", [x], None, n_out=p, axis=axis)
    for o in outs:
        b.tensors[o] = tuple(d // p if i == axis else d for i, d in enumerate(s))
    return True


def _einsum(b: Builder) -> bool:
    x = b.pick(lambda s: 2 <= len(s) <= 3)
    if x is None:
        return False
    s = b.tensors[x]
    if len(s) == 2:
        m, k = s
        eq = b.choice(["ij,jk->ik", "ij->ji", "ij->i", "ij,ij->ij", "ij,j->i", "ii->i"])
        if eq == "ii->i" and m != k:
            return False
        if eq == "ij,jk->ik":
            n = b.randint(1, 6)
            b.node("Einsum", [x, b.weight((k, n))], (m, n), equation=eq)
        elif eq == "ij,ij->ij":
            b.node("Einsum", [x, x], s, equation=eq)
        elif eq == "ij,j->i":
            b.node("Einsum", [x, b.weight((k,))], (m,), equation=eq)
        else:
            b.node("Einsum", [x], {"ij->ji": (k, m), "ij->i": (m,), "ii->i": (m,)}[eq],
                   equation=eq)
        return True
    bb, m, k = s
    eq = b.choice(["bij,bjk->bik", "bij->bji", "bij,jk->bik", "...j,jk->...k"])
    n = b.randint(1, 6)
    if eq == "bij,bjk->bik":
        b.node("Einsum", [x, b.weight((bb, k, n))], (bb, m, n), equation=eq)
    elif eq == "bij->bji":
        b.node("Einsum", [x], (bb, k, m), equation=eq)
    else:
        b.node("Einsum", [x, b.weight((k, n))], (bb, m, n), equation=eq)
    return True


def _matmul_wide(b: Builder) -> bool:
    """MatMul with a 1-D operand or broadcast batch dimensions."""
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    r = b.rng.random()
    n = b.randint(1, 7)
    if len(s) == 1:
        if r < 0.5:
            b.node("MatMul", [x, b.weight((s[0], n))], (n,))
        else:
            b.node("MatMul", [b.weight((n, s[0])), x], (n,))
        return True
    if r < 0.3:  # x @ v: the last axis contracted away
        b.node("MatMul", [x, b.weight((s[-1],))], s[:-1])
    elif r < 0.5:  # v @ x
        b.node("MatMul", [b.weight((s[-2],)), x], s[:-2] + (s[-1],))
    elif r < 0.8 and len(s) <= 3:  # a weight with more batch dims
        batch = b.randint(2, 3)
        b.node("MatMul", [x, b.weight((batch,) + (1,) * (len(s) - 2) + (s[-1], n))],
               (batch,) + s[:-1] + (n,) if len(s) == 2 else
               (batch,) + tuple(np.broadcast_shapes(s[:-2], (1,))) + (s[-2], n))
    else:  # a weight with batch 1 dims
        b.node("MatMul", [x, b.weight((1,) * (len(s) - 2) + (s[-1], n))], s[:-1] + (n,))
    return True


def _padded(b: Builder, mode: str, sp: tuple[int, ...], k: tuple[int, ...],
            st: tuple[int, ...], dl: tuple[int, ...], attrs: dict) -> list[int]:
    """A window's output extents over the spatial extents ``sp`` under ``auto_pad`` ``mode``
    (``NOTSET`` draws explicit pads), its padding attributes added to ``attrs``."""
    if mode == "NOTSET":
        pads = [b.randint(0, kk - 1) for kk in k] + [b.randint(0, kk - 1) for kk in k]
        attrs["pads"] = pads
        return [g.window(d, kk, ss, dd, pads[i], pads[i + len(sp)], False)
                for i, (d, kk, ss, dd) in enumerate(zip(sp, k, st, dl, strict=True))]
    attrs["auto_pad"] = mode
    if mode == "VALID":
        return [g.window(d, kk, ss, dd, 0, 0, False)
                for d, kk, ss, dd in zip(sp, k, st, dl, strict=True)]
    return [-(-d // ss) for d, ss in zip(sp, st, strict=True)]


def _conv_nd(b: Builder) -> bool:
    """Conv over 1 or 3 spatial axes, or ``auto_pad`` on 2."""
    x = b.pick(lambda s: len(s) in (3, 4, 5) and min(s[2:]) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    n, c, sp = s[0], s[1], s[2:]
    groups = b.choice([gg for gg in (1, 2, c) if c % gg == 0])
    m = groups * b.randint(1, 3)
    k = tuple(b.randint(1, min(3, d)) for d in sp)
    st = tuple(b.randint(1, 2) for _ in sp)
    mode = b.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if mode.startswith("SAME") and any(kk < ss for kk, ss in zip(k, st, strict=True)):
        mode = "NOTSET"  # a negative total padding: onnxruntime refuses or differs
    # onnxruntime has no dilations with SAME_*
    dl = tuple(b.randint(1, 2) if d > 4 and not mode.startswith("SAME") else 1 for d in sp)
    attrs = {"kernel_shape": list(k), "strides": list(st), "dilations": list(dl),
             "group": groups}
    out = _padded(b, mode, sp, k, st, dl, attrs)
    if min(out) < 1:
        return False
    ins = [x, b.weight((m, c // groups, *k))]
    if b.rng.random() < 0.6:
        ins.append(b.weight((m,), 0.1))
    b.node("Conv", ins, (n, m, *out), **attrs)
    return True


def _conv_transpose_wide(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) in (3, 4) and max(s[2:]) <= 8)
    if x is None:
        return False
    s = b.tensors[x]
    n, c, sp = s[0], s[1], s[2:]
    groups = b.choice([gg for gg in (1, 2, c) if c % gg == 0])
    mg = b.randint(1, 2)
    k = tuple(b.randint(1, 3) for _ in sp)
    st = tuple(b.randint(1, 3) for _ in sp)
    dl = tuple(b.randint(1, 2) for _ in sp)
    pads = [b.randint(0, kk - 1) for kk in k] + [b.randint(0, kk - 1) for kk in k]
    op = [b.randint(0, ss - 1) for ss in st]  # onnxruntime: below the stride
    out = [ss * (d - 1) + o + ((kk - 1) * dd + 1) - pads[i] - pads[i + len(sp)]
           for i, (d, ss, o, kk, dd) in enumerate(zip(sp, st, op, k, dl, strict=True))]
    if min(out) < 1:
        return False
    ins = [x, b.weight((c, mg, *k))]
    if b.rng.random() < 0.6:
        ins.append(b.weight((mg * groups,), 0.1))
    b.node("ConvTranspose", ins, (n, mg * groups, *out), kernel_shape=list(k),
           strides=list(st), dilations=list(dl), pads=pads, output_padding=op, group=groups)
    return True


def _pool_wide(b: Builder) -> bool:
    """Pooling in 1-D/3-D, ``auto_pad``, LpPool, GlobalLpPool, MaxPool's Indices, LRN."""
    x = b.pick(lambda s: len(s) in (3, 4, 5) and min(s[2:]) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    sp = s[2:]
    op = b.choice(["MaxPool", "AveragePool", "LpPool", "GlobalLpPool", "LRN", "MaxPoolI"])
    if op == "GlobalLpPool":
        b.node(op, [x], s[:2] + (1,) * len(sp), p=b.randint(1, 3))
        return True
    if op == "LRN" and len(s) == 4:  # onnxruntime's LRN is 4-D only
        b.node(op, [x], s, size=b.choice([1, 3, 5]), alpha=float(b.choice([1e-4, 0.1])),
               beta=float(b.choice([0.75, 0.5])), bias=float(b.choice([1.0, 2.0])))
        return True
    k = tuple(b.randint(1, min(3, d)) for d in sp)
    st = tuple(b.randint(1, 2) for _ in sp)
    attrs: dict = {"kernel_shape": list(k), "strides": list(st)}
    mode = b.choice(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]) if op != "MaxPoolI" \
        else "NOTSET"
    if mode.startswith("SAME") and any(kk < ss for kk, ss in zip(k, st, strict=True)):
        mode = "NOTSET"
    out = _padded(b, mode, sp, k, st, (1,) * len(sp), attrs)
    if min(out) < 1:
        return False
    shape = s[:2] + tuple(out)
    if op == "LpPool":
        b.node(op, [x], shape, p=b.randint(1, 3), **attrs)
    elif op == "AveragePool":
        b.node(op, [x], shape, count_include_pad=b.randint(0, 1), **attrs)
    elif op == "MaxPool":
        b.node(op, [x], shape, **attrs)
    else:
        y, idx = b.node("MaxPool", [x], None, n_out=2, **attrs)
        b.tensors[y] = shape
        b.node("Cast", [idx], shape, to=TensorProto.FLOAT)
    return True


def _resize_wide(b: Builder) -> bool:
    """Resize cubic, or by ``sizes``, or nearest with ceil/round_prefer_ceil."""
    x = b.pick(lambda s: len(s) == 4 and s[2] * s[3] <= 64)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    mode = b.choice(["cubic", "nearest", "linear"])
    attrs: dict = {"mode": mode}
    fh, fw = b.choice([1, 2, 3]), b.choice([1, 2, 3])
    if mode == "cubic":
        attrs["cubic_coeff_a"] = float(b.choice([-0.75, -0.5]))
        attrs["exclude_outside"] = b.randint(0, 1)
        attrs["coordinate_transformation_mode"] = b.choice(
            ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
    elif mode == "nearest":
        attrs["nearest_mode"] = b.choice(["ceil", "round_prefer_ceil", "floor"])
        attrs["coordinate_transformation_mode"] = b.choice(["asymmetric", "half_pixel",
                                                            "align_corners"])
    out = (n, c, h * fh, w * fw)
    if b.rng.random() < 0.5:
        b.node("Resize", [x, "", "", b.const(np.array(out, np.int64))], out, **attrs)
    else:
        b.node("Resize", [x, "", b.const(np.array([1, 1, fh, fw], F32))], out, **attrs)
    return True


def _reuse(b: Builder) -> bool:
    """An initializer already used by another node as an operand again (shared)."""
    x = b.pick()
    s = b.tensors[x]
    shared = [t.name for t in b.inits if t.data_type == TensorProto.FLOAT and
              g.broadcastable(s, tuple(t.dims))]
    if not shared:
        return False
    w = b.choice(shared)
    op = b.choice(["Add", "Mul", "Sub"])
    args = [x, w] if b.rng.random() < 0.7 else [w, x]
    b.node(op, args, tuple(np.broadcast_shapes(s, _init_shape(b, w))))
    return True


def _rank_change(b: Builder) -> bool:
    """Unsqueeze to rank 5 or Squeeze to rank 0: the ranks the rest never reach."""
    x = b.pick(lambda s: len(s) in (1, 4) or int(np.prod(s)) == 1)
    if x is None:
        return False
    s = b.tensors[x]
    if int(np.prod(s)) == 1 and s and b.rng.random() < 0.5:
        b.node("Reshape", [x, b.const(np.array([], np.int64))], ())
    elif len(s) == 4:
        b.node("Unsqueeze", [x, b.const(np.array([2], np.int64))], s[:2] + (1,) + s[2:])
    else:
        b.node("Unsqueeze", [x, b.const(np.array([0], np.int64))], (1,) + s)
    return True


_WIDE: tuple[tuple[Callable[[Builder], bool], float], ...] = (
    (_unary_wide, 2.5), (_nary, 1.0), (_self, 0.7), (_logic, 0.8), (_cast, 0.8),
    (_int_chain, 0.8), (_mod_float, 0.3), (_shape_ops, 0.6), (_reduce_wide, 1.2), (_topk, 0.5),
    (_cumsum, 0.5), (_trilu, 0.4), (_depth_space, 0.5), (_gather_wide, 0.8),
    (_scatter, 0.6), (_pad_negative, 0.5), (_slice_multi, 0.7), (_split_equal, 0.4),
    (_einsum, 0.5), (_matmul_wide, 0.8), (_conv_nd, 1.2), (_conv_transpose_wide, 0.5),
    (_pool_wide, 1.0), (_resize_wide, 0.4), (_reuse, 0.6), (_rank_change, 0.5),
)
#: the op families only ``--wide`` draws
WIDE_FAMILIES = tuple(fn.__name__.lstrip("_") for fn, _ in _WIDE)


def _input_shape(rng: np.random.Generator) -> tuple[int, ...]:
    rank = int(rng.choice([0, 1, 2, 3, 3, 4, 4, 4, 5]))
    dims = [int(rng.choice([1, 1, 2, 3, 5, 7, 8, 9])) for _ in range(rank)]
    if rank >= 3:
        dims[0] = int(rng.integers(1, 4))  # a batch of 1-3
        dims[1] = int(rng.integers(1, 7))
        for i in range(2, rank):  # spatial axes: at least 2 for most windows
            dims[i] = max(dims[i], int(rng.integers(2, 10 if rank < 5 else 6)))
    return tuple(dims)


def random_wide_model(seed: int, max_nodes: int = 10) -> tuple[onnx.ModelProto, dict]:
    """A random valid model over :data:`~tests.fuzz.graphs.FAMILIES` and
    :data:`WIDE_FAMILIES`, and seeded inputs for it."""
    rng = np.random.default_rng(seed)
    gens = g.GENERATORS + _WIDE
    b = Builder(rng)
    shape = _input_shape(rng)
    b.tensors["x"] = shape
    inputs = {"x": rng.standard_normal(shape).astype(F32)}
    if rng.random() < 0.35:  # a second input, the same shape or one that broadcasts
        s2 = shape if rng.random() < 0.5 else g.broadcast_shape(b, shape)
        b.tensors["x2"] = s2
        inputs["x2"] = rng.standard_normal(s2).astype(F32)
    g.grow(b, gens, max_nodes)
    input_out = bool(rng.random() < 0.1)
    model, feeds = to_model(b, f"wide{seed}", inputs, shape)
    if input_out and "x" in feeds:  # the graph input is an output as well
        model.graph.output.append(helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, list(shape)))
        onnx.checker.check_model(model)
    return model, feeds

