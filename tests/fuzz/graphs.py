"""Random valid ONNX graphs (opset 17, float32) for differential testing.

``random_model(seed)`` builds a graph of a few to a dozen nodes over Kiln's op set with
each op's attribute space: convolutions of every kind (strides, pads, dilations, groups,
depthwise, transposed), pooling with ``ceil_mode`` and padding, broadcasting of every
shape, Slice/Pad/Concat/Split/Gather chains, MatMul/Gemm, the norms, Resize, reductions,
fan-out and re-joins, and intermediate tensors as extra outputs. Shapes are tracked by
the generator itself (ONNX shape inference has known bugs), so every graph it makes is
valid by the ONNX specification; onnxruntime is the judge of that in the oracle.

The generator is seeded and pure: the same seed gives the same model, byte for byte, on
every machine (``numpy.random.default_rng`` and no set iteration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = np.float32
OPSET = 17


@dataclass
class Builder:
    """A graph under construction: nodes, initializers and the shapes of the tensors made
    so far (``tests/fuzz/accel.py`` builds its graphs with it too)."""

    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    #: float32 tensors available as operands: name -> shape
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)
    count: int = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, array: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float = 0.5) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(F32), "w")

    def node(self, op: str, inputs: list[str], shape: tuple[int, ...] | None,
             n_out: int = 1, **attrs) -> list[str]:
        outs = [self.fresh("t") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.fresh(op.lower()),
                                           **attrs))
        if shape is not None:
            for o in outs:
                self.tensors[o] = tuple(shape)
        return outs

    def pick(self, want: Callable[[tuple[int, ...]], bool] = lambda s: True) -> str | None:
        names = [n for n, s in self.tensors.items() if want(s)]
        if not names:
            return None
        # favour recent tensors (chains), keep old ones reachable (fan-out, re-joins)
        k = len(names) - 1 - min(int(self.rng.exponential(1.5)), len(names) - 1)
        return names[k]

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def randint(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))


# -- elementwise --------------------------------------------------------------------------

def _unary(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    op = b.choice(["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "HardSwish", "LeakyRelu",
                   "HardSigmoid", "Clip", "Exp", "Sqrt", "Log", "Reciprocal", "Softmax",
                   "LogSoftmax", "Identity"])
    if op in ("Exp",):
        x = b.node("Tanh", [x], s)[0]  # bounded: exp of a chain's output may overflow
    if op in ("Sqrt", "Log", "Reciprocal"):
        x = b.node("Add", [b.node("Abs", [x], s)[0], b.const(np.array(0.5, F32))], s)[0]
    attrs = {}
    inputs = [x]
    if op == "LeakyRelu":
        attrs["alpha"] = float(b.choice([0.01, 0.2, 1.5]))
    elif op == "HardSigmoid":
        attrs.update(alpha=float(b.choice([0.2, 0.5])), beta=float(b.choice([0.5, 0.1])))
    elif op == "Clip":
        lo = float(b.rng.uniform(-1.0, 0.0))
        inputs += [b.const(np.array(lo, F32)) if b.rng.random() < 0.8 else "",
                   b.const(np.array(lo + float(b.rng.uniform(0.1, 2.0)), F32))]
    elif op in ("Softmax", "LogSoftmax"):
        attrs["axis"] = b.randint(-len(s), len(s) - 1) if s else -1
        if not s:
            return False
    b.node(op, inputs, s, **attrs)
    return True


def broadcast_shape(b: Builder, s: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``s``: a suffix, some dims 1, maybe a leading 1."""
    k = b.randint(0, len(s))
    out = tuple(d if b.rng.random() < 0.6 else 1 for d in s[k:])
    if b.rng.random() < 0.15 and len(out) < 4:
        out = (1,) + out
    return out


def _binary(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    op = b.choice(["Add", "Sub", "Mul", "Div", "Max", "Min", "Add", "Mul", "Pow"])
    other = b.pick(lambda t: t != s and broadcastable(s, t)) if b.rng.random() < 0.4 else None
    if other is None:
        cs = broadcast_shape(b, s)
        if op in ("Div", "Pow"):
            y = b.const(b.rng.uniform(0.5, 2.0, cs).astype(F32))
        else:
            y = b.weight(cs, 1.0)
    else:
        y = other
        cs = b.tensors[other]
        if op in ("Div", "Pow"):  # a positive operand
            y = b.node("Add", [b.node("Sigmoid", [y], cs)[0], b.const(np.array(0.5, F32))],
                       cs)[0]
    if op == "Pow":  # a positive base, a bounded exponent
        base = b.node("Add", [b.node("Abs", [x], s)[0], b.const(np.array(0.5, F32))], s)[0]
        args = [base, y]
    else:
        args = [x, y] if b.rng.random() < 0.7 else [y, x]
    b.node(op, args, tuple(np.broadcast_shapes(s, cs)))
    return True


def broadcastable(a: tuple[int, ...], c: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, c)
    except ValueError:
        return False
    return len(c) <= len(a)


def _where(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    cmp = b.choice(["Greater", "Less", "Equal"])
    thr = b.const(np.array(0.0 if cmp != "Equal" else 1.0, F32))
    c = b.node(cmp, [x, thr], None)[0]
    os_ = broadcast_shape(b, s)
    other = b.weight(os_, 1.0)
    args = [c, x, other] if b.rng.random() < 0.5 else [c, other, x]
    b.node("Where", args, tuple(np.broadcast_shapes(s, os_)))
    return True


def _prelu(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    slope = b.choice([(s[1],) + (1,) * (len(s) - 2), s[1:], s, (1,)])
    b.node("PRelu", [x, b.weight(slope, 0.5)], s)
    return True


# -- convolution and pooling ----------------------------------------------------------------

def window(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil: bool) -> int:
    span = size + pb + pe - ((k - 1) * d + 1)
    if span < 0:
        return 0
    if not ceil:
        return span // s + 1
    n = -(-span // s) + 1
    if (n - 1) * s >= size + pb:  # a last window starting in the end padding is dropped
        n -= 1
    return n


def _conv(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4 and s[2] >= 2 and s[3] >= 2)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    depthwise = b.rng.random() < 0.3
    groups = c if depthwise else b.choice([g for g in (1, 2, 3, 4) if c % g == 0])
    m = c * b.randint(1, 2) if depthwise else groups * b.randint(1, 8 // groups + 1)
    k = (b.randint(1, min(3, h)), b.randint(1, min(3, w)))
    st = (b.randint(1, 2), b.randint(1, 2))
    dl = (b.randint(1, 2) if h > 4 else 1, b.randint(1, 2) if w > 4 else 1)
    pads = [b.randint(0, k[0] - 1), b.randint(0, k[1] - 1), b.randint(0, k[0] - 1),
            b.randint(0, k[1] - 1)]
    oh = window(h, k[0], st[0], dl[0], pads[0], pads[2], False)
    ow = window(w, k[1], st[1], dl[1], pads[1], pads[3], False)
    if oh < 1 or ow < 1:
        return False
    inputs = [x, b.weight((m, c // groups, *k))]
    if b.rng.random() < 0.7:
        inputs.append(b.weight((m,), 0.1))
    b.node("Conv", inputs, (n, m, oh, ow), kernel_shape=list(k), strides=list(st),
           dilations=list(dl), pads=pads, group=groups)
    return True


def _conv_transpose(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4 and s[2] <= 8 and s[3] <= 8)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    m = b.randint(1, 4)
    k = (b.randint(1, 3), b.randint(1, 3))
    st = (b.randint(1, 2), b.randint(1, 2))
    pads = [b.randint(0, k[0] - 1), b.randint(0, k[1] - 1), b.randint(0, k[0] - 1),
            b.randint(0, k[1] - 1)]
    op = [b.randint(0, st[0] - 1), b.randint(0, st[1] - 1)]
    oh = st[0] * (h - 1) + op[0] + k[0] - pads[0] - pads[2]
    ow = st[1] * (w - 1) + op[1] + k[1] - pads[1] - pads[3]
    if oh < 1 or ow < 1:
        return False
    b.node("ConvTranspose", [x, b.weight((c, m, *k)), b.weight((m,), 0.1)], (n, m, oh, ow),
           kernel_shape=list(k), strides=list(st), pads=pads, output_padding=op)
    return True


def _pool(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4 and s[2] >= 2 and s[3] >= 2)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    op = b.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
    if op.startswith("Global"):
        b.node(op, [x], (n, c, 1, 1))
        return True
    k = (b.randint(1, min(3, h)), b.randint(1, min(3, w)))
    st = (b.randint(1, 2), b.randint(1, 2))
    pads = [b.randint(0, k[0] - 1), b.randint(0, k[1] - 1), b.randint(0, k[0] - 1),
            b.randint(0, k[1] - 1)]
    ceil = bool(b.rng.random() < 0.4)
    dl = (1, 1)
    attrs = {"kernel_shape": list(k), "strides": list(st), "pads": pads,
             "ceil_mode": int(ceil)}
    if op == "MaxPool" and b.rng.random() < 0.3 and h > 4 and w > 4:
        dl = (2, 2)
        attrs["dilations"] = [2, 2]
    if op == "AveragePool":
        attrs["count_include_pad"] = b.randint(0, 1)
    oh = window(h, k[0], st[0], dl[0], pads[0], pads[2], ceil)
    ow = window(w, k[1], st[1], dl[1], pads[1], pads[3], ceil)
    if oh < 1 or ow < 1:
        return False
    b.node(op, [x], (n, c, oh, ow), **attrs)
    return True


# -- linear algebra and norms -----------------------------------------------------------------

def _matmul(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    kdim = s[-1]
    nn = b.randint(1, 12)
    if len(s) == 2 and b.rng.random() < 0.5:
        ta, tb = b.randint(0, 1), b.randint(0, 1)
        a = b.node("Transpose", [x], (s[1], s[0]))[0] if ta else x
        wshape = (nn, kdim) if tb else (kdim, nn)
        inputs = [a, b.weight(wshape)]
        if b.rng.random() < 0.7:
            inputs.append(b.weight(b.choice([(nn,), (1, nn), (s[0], nn), (1,)]), 0.2))
        b.node("Gemm", inputs, (s[0], nn), transA=ta, transB=tb,
               alpha=float(b.choice([1.0, 0.5])), beta=float(b.choice([1.0, 2.0])))
        return True
    if b.rng.random() < 0.3:  # x @ x^T-like: both operands computed
        perm = list(range(len(s)))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        t = b.node("Transpose", [x], s[:-2] + (s[-1], s[-2]), perm=perm)[0]
        b.node("MatMul", [x, t], s[:-1] + (s[-2],))
        return True
    b.node("MatMul", [x, b.weight((kdim, nn))], s[:-1] + (nn,))
    return True


def _norm(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    op = b.choice(["BatchNormalization", "LayerNormalization", "InstanceNormalization"])
    if op == "BatchNormalization":
        c = s[1]
        var = b.const(b.rng.uniform(0.5, 2.0, (c,)).astype(F32))
        b.node(op, [x, b.weight((c,)), b.weight((c,)), b.weight((c,)), var], s,
               epsilon=1e-5)
    elif op == "LayerNormalization":
        axis = b.randint(-len(s), len(s) - 1)
        ns = s[axis % len(s):]
        b.node(op, [x, b.weight(ns), b.weight(ns)], s, axis=axis, epsilon=1e-5)
    else:
        if len(s) < 3:
            return False
        b.node(op, [x, b.weight((s[1],)), b.weight((s[1],))], s, epsilon=1e-5)
    return True


def _reduce(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    op = b.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ArgMax"])
    keep = b.randint(0, 1)
    if op == "ArgMax":
        axis = b.randint(-len(s), len(s) - 1)
        out = tuple(1 if i == axis % len(s) else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i != axis % len(s))
        idx = b.node("ArgMax", [x], None, axis=axis, keepdims=keep)[0]
        b.node("Cast", [idx], out, to=TensorProto.FLOAT)
        return True
    axes = sorted({b.randint(0, len(s) - 1) for _ in range(b.randint(1, len(s)))})
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    if op == "ReduceSum":
        b.node(op, [x, b.const(np.array(axes, np.int64))], out, keepdims=keep)
    else:
        b.node(op, [x], out, axes=axes, keepdims=keep)
    return True


# -- data movement -----------------------------------------------------------------------------

def _reshape(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    total = int(np.prod(s)) if s else 1
    op = b.choice(["Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"])
    if op == "Reshape":
        divs = [d for d in range(1, total + 1) if total % d == 0]
        a = b.choice(divs)
        rest = total // a
        c = b.choice([d for d in range(1, rest + 1) if rest % d == 0])
        shape = b.choice([(a, rest), (a, c, rest // c), (total,), (1, a, rest)])
        spec = list(shape)
        if b.rng.random() < 0.4:
            spec[b.randint(0, len(spec) - 1)] = -1
        b.node("Reshape", [x, b.const(np.array(spec, np.int64))], shape)
    elif op == "Flatten":
        axis = b.randint(0, len(s))
        b.node("Flatten", [x], (int(np.prod(s[:axis])), int(np.prod(s[axis:]))), axis=axis)
    elif op == "Transpose":
        if len(s) < 2:
            return False
        perm = [int(i) for i in b.rng.permutation(len(s))]
        b.node("Transpose", [x], tuple(s[p] for p in perm), perm=perm)
    elif op == "Squeeze":
        ones = [i for i, d in enumerate(s) if d == 1]
        if not ones:
            return False
        axes = sorted(set(b.choice(ones) for _ in range(2)))
        b.node("Squeeze", [x, b.const(np.array(axes, np.int64))],
               tuple(d for i, d in enumerate(s) if i not in axes))
    else:
        if len(s) >= 5:
            return False
        axis = b.randint(0, len(s))
        b.node("Unsqueeze", [x, b.const(np.array([axis], np.int64))],
               s[:axis] + (1,) + s[axis:])
    return True


def _concat_split(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    axis = b.randint(0, len(s) - 1)
    if b.rng.random() < 0.5:
        other = b.pick(lambda t: len(t) == len(s) and all(
            t[i] == s[i] for i in range(len(s)) if i != axis) and t != s)
        if other is None:
            other = b.node("Neg", [x], s)[0]
        out = tuple(d + (b.tensors[other][axis] if i == axis else 0) for i, d in enumerate(s))
        b.node("Concat", [x, other], out, axis=axis - len(s) if b.rng.random() < 0.3 else axis)
        return True
    if s[axis] < 2:
        return False
    first = b.randint(1, s[axis] - 1)
    sizes = [first, s[axis] - first]
    outs = b.node("Split", [x, b.const(np.array(sizes, np.int64))], None, n_out=2, axis=axis)
    for o, k in zip(outs, sizes, strict=True):
        b.tensors[o] = tuple(k if i == axis else d for i, d in enumerate(s))
    return True


def pick_long_axis(b: Builder) -> tuple[str, tuple[int, ...], int] | None:
    """A tensor with an axis of at least 2 elements, its shape and one such axis (drawn),
    or None."""
    x = b.pick(lambda s: len(s) >= 1 and max(s) >= 2)
    if x is None:
        return None
    s = b.tensors[x]
    return x, s, b.choice([i for i, d in enumerate(s) if d >= 2])


def _slice(b: Builder) -> bool:
    picked = pick_long_axis(b)
    if picked is None:
        return False
    x, s, axis = picked
    n = s[axis]
    step = b.choice([1, 1, 2, -1, -2])
    if step > 0:
        start, end = b.randint(0, n - 1), b.randint(1, n + 2)
        if b.rng.random() < 0.3:
            start -= n  # negative start
        length = len(range(*slice(start, end, step).indices(n)))
    else:
        start, end = b.randint(0, n - 1), b.choice([-n - 5, b.randint(-n, n - 1)])
        length = len(range(*slice(start, end, step).indices(n)))
        if end == -n - 5:
            length = len(range(start if start >= 0 else start + n, -1, step))
    if length < 1:
        return False
    out = tuple(length if i == axis else d for i, d in enumerate(s))
    b.node("Slice", [x, b.const(np.array([start], np.int64)), b.const(np.array([end], np.int64)),
                     b.const(np.array([axis], np.int64)), b.const(np.array([step], np.int64))],
           out)
    return True


def _pad(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    mode = b.choice(["constant", "reflect", "edge"])
    pads = []
    for _ in range(2):
        for d in s:
            hi = min(2, d - 1) if mode == "reflect" else 2
            pads.append(b.randint(0, max(hi, 0)))
    out = tuple(d + pads[i] + pads[i + len(s)] for i, d in enumerate(s))
    inputs = [x, b.const(np.array(pads, np.int64))]
    if mode == "constant" and b.rng.random() < 0.5:
        inputs.append(b.const(np.array(float(b.rng.uniform(-1, 1)), F32)))
    b.node("Pad", inputs, out, mode=mode)
    return True


def _gather(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    axis = b.randint(-len(s), len(s) - 1)
    n = s[axis % len(s)]
    if b.rng.random() < 0.3:
        idx = np.array(b.randint(-n, n - 1), np.int64)
    else:
        idx = b.rng.integers(-n, n, b.choice([(2,), (3,), (2, 2)])).astype(np.int64)
    a = axis % len(s)
    out = s[:a] + idx.shape + s[a + 1:]
    b.node("Gather", [x, b.const(idx)], out, axis=axis)
    return True


def _expand_tile(b: Builder) -> bool:
    x = b.pick(lambda s: 1 <= len(s) <= 3 and int(np.prod(s)) <= 256)
    if x is None:
        return False
    s = b.tensors[x]
    if b.rng.random() < 0.5:
        target = tuple(b.randint(2, 3) if d == 1 else d for d in s)
        if b.rng.random() < 0.4:
            target = (2,) + target
        b.node("Expand", [x, b.const(np.array(target, np.int64))], target)
    else:
        reps = [b.randint(1, 2) for _ in s]
        b.node("Tile", [x, b.const(np.array(reps, np.int64))],
               tuple(d * r for d, r in zip(s, reps, strict=True)))
    return True


def _resize(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 4 and s[2] * s[3] <= 64)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    mode = b.choice(["nearest", "linear"])
    scale = b.choice([2.0, 2.0, 3.0, 0.5]) if min(h, w) >= 2 else 2.0
    attrs = {"mode": mode}
    # integer up-scales, or halving with an even size: onnxruntime computes coordinates in
    # float32 from the integer output length, which agrees with the specification only
    # when scale * size is whole (docs/ops.md, Resize)
    if scale == 0.5 and (h % 2 or w % 2):
        scale = 2.0
    if mode == "nearest":
        attrs["coordinate_transformation_mode"] = b.choice(["asymmetric", "half_pixel"])
        attrs["nearest_mode"] = b.choice(["floor", "round_prefer_floor"])
    else:
        attrs["coordinate_transformation_mode"] = b.choice(
            ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"])
    out = (n, c, int(np.floor(h * scale)), int(np.floor(w * scale)))
    if min(out) < 1:
        return False
    scales = b.const(np.array([1, 1, scale, scale], F32))
    b.node("Resize", [x, "", scales], out, **attrs)
    return True


GENERATORS: tuple[tuple[Callable[[Builder], bool], float], ...] = (
    (_unary, 3.0), (_binary, 3.0), (_where, 0.6), (_prelu, 0.5), (_conv, 2.0),
    (_conv_transpose, 0.6), (_pool, 1.5), (_matmul, 1.2), (_norm, 1.0), (_reduce, 1.0),
    (_reshape, 1.5), (_concat_split, 1.2), (_slice, 1.0), (_pad, 0.8), (_gather, 0.8),
    (_expand_tile, 0.6), (_resize, 0.6),
)
#: the op families the generator draws from (documentation and coverage checks)
FAMILIES = tuple(fn.__name__.lstrip("_") for fn, _ in GENERATORS)


#: the families whose ops Kiln quantizes to integer kernels (``random_model(families=)``
#: for the int8 fuzzer: the whole graph integer, so bundles must be bit-exact)
INT8_FAMILIES = ("conv", "pool", "matmul", "reshape")


def random_model(seed: int, max_nodes: int = 10, families: tuple[str, ...] | None = None
                 ) -> tuple[onnx.ModelProto, dict]:
    """A random valid model and seeded inputs for it (``{name: array}``); ``families``
    restricts the op families drawn from (default: all of :data:`FAMILIES`)."""
    rng = np.random.default_rng(seed)
    gens = tuple((fn, w) for fn, w in GENERATORS
                 if families is None or fn.__name__.lstrip("_") in families)
    b = Builder(rng)
    rank = int(rng.choice([4, 4, 4, 3, 2, 1])) if families is None or "conv" not in families \
        else 4
    shape = {4: (1, int(rng.integers(1, 5)), int(rng.integers(3, 9)), int(rng.integers(3, 9))),
             3: (int(rng.integers(1, 3)), int(rng.integers(2, 7)), int(rng.integers(2, 9))),
             2: (int(rng.integers(1, 6)), int(rng.integers(2, 12))),
             1: (int(rng.integers(2, 16)),)}[rank]
    b.tensors["x"] = shape
    inputs = {"x": rng.standard_normal(shape).astype(F32)}
    if rng.random() < 0.3:
        b.tensors["x2"] = shape
        inputs["x2"] = rng.standard_normal(shape).astype(F32)
    grow(b, gens, max_nodes)
    return to_model(b, f"fuzz{seed}", inputs, shape)


def grow(b: Builder, gens: tuple[tuple[Callable[[Builder], bool], float], ...],
         max_nodes: int) -> None:
    """Add 2 .. ``max_nodes`` nodes to ``b``, each from a generator of ``gens`` drawn by its
    weight (a generator that finds nothing to build adds none; ``6 max_nodes`` draws at
    most), forgetting tensors above 4,096 elements as sources."""
    weights = np.array([w for _, w in gens])
    target = int(b.rng.integers(2, max_nodes + 1))
    tries = 0
    while len(b.nodes) < target and tries < 6 * max_nodes:
        tries += 1
        fn = gens[int(b.rng.choice(len(gens), p=weights / weights.sum()))][0]
        big = [n for n, s in b.tensors.items() if int(np.prod(s)) > 4096]
        for n in big:  # keep tensors small: the fuzzer runs thousands of graphs
            b.tensors.pop(n)
        if not b.tensors:
            break
        fn(b)


def reads(node: onnx.NodeProto) -> list[str]:
    """The tensors ``node`` reads: its inputs and the outer-scope names its subgraphs
    (If, Loop, Scan bodies) read."""
    names = list(node.input)
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            for n in a.g.node:
                names += reads(n)
    return names


def to_model(b: Builder, name: str, inputs: dict[str, np.ndarray], x_shape: tuple[int, ...],
             opset: int = OPSET) -> tuple[onnx.ModelProto, dict]:
    """The model of builder ``b``: the last tensor its nodes produced its output (a Relu of
    the input ``x`` of shape ``x_shape`` where none is left), and (drawn by ``b.rng``) up
    to two earlier ones; the ``inputs`` it uses, checked by ONNX at ``opset``."""
    produced = [o for n in b.nodes for o in n.output if o in b.tensors]
    if not produced:
        b.node("Relu", ["x"], x_shape)
        produced = [b.nodes[-1].output[0]]
    outs = [produced[-1]]
    for o in produced[:-1]:  # intermediate tensors as extra outputs
        if b.rng.random() < 0.2 and len(outs) < 3:
            outs.append(o)
    used_inputs = {i for n in b.nodes for i in reads(n)}
    graph_inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                    for k, v in inputs.items() if k in used_inputs]
    inputs = {k: v for k, v in inputs.items() if k in used_inputs}
    graph = helper.make_graph(
        b.nodes, name, graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(b.tensors[o]))
         for o in outs], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="kiln-fuzz")
    model.ir_version = 8 if opset <= 17 else 10
    onnx.checker.check_model(model)
    return model, inputs
