"""Random graphs in ONNX's newer forms, with control flow and symbolic dimensions.

Neither :mod:`tests.fuzz.graphs` (opset 17, the CI batch) nor :mod:`tests.fuzz.wide`
draws these; ``random_modern_model(seed, groups=...)`` builds opset-23 models from the
CI families (at a lower weight, for context) and the groups asked for:

* ``opset18`` (``--opset18``): every reduction with its axes as an input (negative, empty
  with ``noop_with_empty_axes``, none at all), Split by ``num_outputs`` (a shorter last
  chunk), Pad with an ``axes`` input and ``wrap``, LayerNormalization with its ``Mean``
  and ``InvStdDev`` outputs and no bias, GroupNormalization (opset 21: per channel),
  Gelu (both forms), Mish, Resize with ``axes``, ``antialias`` and
  ``keep_aspect_ratio_policy``;
* ``recurrent`` (``--recurrent``, :mod:`tests.fuzz.sequence`): LSTM, GRU and RNN;
* ``attention`` (``--attention``, :mod:`tests.fuzz.sequence`): the exported
  MatMul-scale-mask-Softmax-MatMul pattern with its multi-head Reshapes and Transposes,
  and the Attention op;
* ``control`` (``--control-flow``): If on a constant condition, Loop with a constant trip
  count (a carried value, a scan output, outer-scope reads), Scan (axes, directions);
* ``dynamic`` (with ``--symbolic``): Reshape/Expand/ConstantOfShape by shapes computed
  with Shape, Gather and Concat, the chains that fold only once the dimensions are bound.

``symbolic=True`` (``--symbolic``) declares the first (and sometimes another) dimension
of each graph input symbolic; the oracle binds them from the inputs' shapes
(``input_shapes``), as ``kiln compile --input-shape`` does.

Seeded and pure, like ``random_model``.

>>> m, x = random_modern_model(3, groups=("opset18",))
>>> random_modern_model(3, groups=("opset18",))[0].SerializeToString() == \\
...     m.SerializeToString()
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.fuzz import graphs as g
from tests.fuzz.graphs import F32, Builder, to_model

#: the opset of every model this module makes (Attention is opset 23)
MODERN_OPSET = 23

REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")


def _keep(s: tuple[int, ...], axes: list[int], keep: int) -> tuple[int, ...]:
    ax = {a % len(s) for a in axes}
    return tuple(1 if i in ax else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in ax)


def _reduce18(b: Builder) -> bool:
    """A reduction with its axes as an input (opset 18)."""
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    op = b.choice(list(REDUCTIONS))
    keep = b.randint(0, 1)
    if op == "ReduceProd":  # bounded factors near 1
        x = b.node("Add", [b.node("Tanh", [x], s)[0], b.const(np.array(1.1, F32))], s)[0]
    r = b.rng.random()
    if r < 0.15:  # no axes input: every axis
        b.node(op, [x], (1,) * len(s) if keep else (), keepdims=keep)
        return True
    if r < 0.3:  # an empty axes input: every axis, or the identity with noop_with_empty_axes
        noop = b.randint(0, 1)
        out = s if noop else ((1,) * len(s) if keep else ())
        b.node(op, [x, b.const(np.array([], np.int64))], out, keepdims=keep,
               noop_with_empty_axes=noop)
        return True
    axes = sorted({b.randint(0, len(s) - 1) for _ in range(b.randint(1, len(s)))})
    if op == "ReduceProd" and int(np.prod([s[a] for a in axes])) > 12:
        axes = axes[:1]
    spec = [a - len(s) if b.rng.random() < 0.4 else a for a in axes]
    if b.rng.random() < 0.3:
        spec = spec[::-1]  # axes in any order
    b.node(op, [x, b.const(np.array(spec, np.int64))], _keep(s, axes, keep), keepdims=keep)
    return True


def _split18(b: Builder) -> bool:
    """Split by ``num_outputs`` (opset 18): chunks of ceil(d / n), the last one shorter."""
    picked = g.pick_long_axis(b)
    if picked is None:
        return False
    x, s, axis = picked
    d = s[axis]
    ns = [n for n in range(2, min(d, 5) + 1) if d - (n - 1) * -(-d // n) > 0]
    if not ns:
        return False
    n = b.choice(ns)
    chunk = -(-d // n)
    sizes = [chunk] * (n - 1) + [d - chunk * (n - 1)]
    outs = b.node("Split", [x], None, n_out=n, num_outputs=n,
                  axis=axis - len(s) if b.rng.random() < 0.3 else axis)
    for o, k in zip(outs, sizes, strict=True):
        b.tensors[o] = tuple(k if i == axis else v for i, v in enumerate(s))
    return True


def _pad18(b: Builder) -> bool:
    """Pad with an ``axes`` input (opset 18) and the ``wrap`` mode (opset 19)."""
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    s = b.tensors[x]
    mode = b.choice(["constant", "reflect", "edge", "wrap"])
    axes = sorted({b.randint(0, len(s) - 1) for _ in range(b.randint(1, len(s)))})
    pads = []
    for _ in range(2):
        for a in axes:
            hi = min(2, s[a] - 1) if mode == "reflect" else \
                min(2, s[a]) if mode == "wrap" else 2
            lo = -1 if mode in ("constant", "edge") and s[a] >= 3 else 0
            pads.append(b.randint(lo, max(hi, 0)))
    out = list(s)
    for i, a in enumerate(axes):
        out[a] += pads[i] + pads[i + len(axes)]
    if min(out) < 1:
        return False
    spec = [a - len(s) if b.rng.random() < 0.4 else a for a in axes]
    inputs = [x, b.const(np.array(pads, np.int64))]
    if mode == "constant" and b.rng.random() < 0.5:
        inputs.append(b.const(np.array(float(b.rng.uniform(-1, 1)), F32)))
    else:
        inputs.append("")
    inputs.append(b.const(np.array(spec, np.int64)))
    b.node("Pad", inputs, tuple(out), mode=mode)
    return True


def _norm18(b: Builder) -> bool:
    """LayerNormalization (optional outputs, no bias) and GroupNormalization (opset 21)."""
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    if b.rng.random() < 0.5 and len(s) >= 3:
        c = s[1]
        groups = b.choice([k for k in range(1, c + 1) if c % k == 0])
        b.node("GroupNormalization", [x, b.weight((c,)), b.weight((c,))], s,
               num_groups=groups, epsilon=float(b.choice([1e-5, 1e-3])))
        return True
    axis = b.randint(-len(s), len(s) - 1)
    ns = s[axis % len(s):]
    if b.rng.random() < 0.3:  # Scale broadcasting to the normalised axes
        ns = tuple(1 if b.rng.random() < 0.5 else d for d in ns)
    inputs = [x, b.weight(ns)] + ([b.weight(ns)] if b.rng.random() < 0.6 else [])
    n_out = b.choice([1, 1, 2, 3])
    outs = b.node("LayerNormalization", inputs, None, n_out=n_out, axis=axis, epsilon=1e-5)
    b.tensors[outs[0]] = s
    stat = s[:axis % len(s)] + (1,) * (len(s) - axis % len(s))
    for o in outs[1:]:
        b.tensors[o] = stat
    return True


def _act18(b: Builder) -> bool:
    """Gelu (opset 20, exact or tanh) and Mish."""
    x = b.pick()
    s = b.tensors[x]
    if b.rng.random() < 0.7:
        b.node("Gelu", [x], s, approximate=b.choice(["none", "tanh"]))
    else:
        b.node("Mish", [x], s)
    return True


def _resize18(b: Builder) -> bool:
    """Resize with ``axes`` (scales for the spatial axes only), ``antialias`` on a
    down-scale and ``sizes`` with ``keep_aspect_ratio_policy``."""
    x = b.pick(lambda s: len(s) == 4 and s[2] * s[3] <= 64 and min(s[2:]) >= 2)
    if x is None:
        return False
    n, c, h, w = b.tensors[x]
    mode = b.choice(["nearest", "linear", "cubic"])
    attrs: dict = {"mode": mode, "axes": [2, 3]}
    if b.rng.random() < 0.5:
        sizes = (b.randint(1, 2 * h), b.randint(1, 2 * w))
        policy = b.choice(["stretch", "not_larger", "not_smaller"])
        attrs["keep_aspect_ratio_policy"] = policy
        if policy == "stretch":
            out = sizes
        else:
            pick = min if policy == "not_larger" else max
            sc = pick(sizes[0] / h, sizes[1] / w)
            out = (int(np.floor(h * sc + 0.5)), int(np.floor(w * sc + 0.5)))
        inputs = [x, "", "", b.const(np.array(sizes, np.int64))]
        # the whole-number scales the oracle can agree on: the coordinate map of a
        # fractional one rounds differently in onnxruntime (docs/ops.md, Resize)
        attrs["coordinate_transformation_mode"] = "asymmetric" if mode == "nearest" else \
            "align_corners"
    else:
        scale = b.choice([2.0, 0.5]) if h % 2 == 0 and w % 2 == 0 else 2.0
        out = (int(h * scale), int(w * scale))
        inputs = [x, "", b.const(np.array([scale, scale], F32))]
        attrs["coordinate_transformation_mode"] = b.choice(["half_pixel", "asymmetric"])
        if mode != "nearest" and scale < 1:
            attrs["antialias"] = b.randint(0, 1)
    if mode == "nearest":
        attrs["nearest_mode"] = "floor"
    if min(out) < 1:
        return False
    b.node("Resize", inputs, (n, c) + tuple(out), **attrs)
    return True


# -- control flow ------------------------------------------------------------------------

def _vi(name: str, shape: tuple[int, ...] | None, dtype: int = TensorProto.FLOAT
        ) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _within(b: Builder, s: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``s`` without raising its rank (a body's carried value
    keeps its shape)."""
    out = g.broadcast_shape(b, s)
    return out[len(out) - len(s):] if len(out) > len(s) else out


def _branch(b: Builder, x: str, s: tuple[int, ...], name: str) -> onnx.GraphProto:
    """A one-output subgraph computing from the outer-scope tensor ``x`` (and an outer
    initializer) with two or three nodes."""
    ops = ["Relu", "Tanh", "Neg", "Sigmoid", "Abs"]
    t, nodes = x, []
    for _ in range(b.randint(1, 2)):
        o = b.fresh(f"{name}_t")
        nodes.append(helper.make_node(b.choice(ops), [t], [o], name=b.fresh(f"{name}_n")))
        t = o
    w = b.weight(_within(b, s), 1.0)
    out = b.fresh(f"{name}_out")
    nodes.append(helper.make_node(b.choice(["Add", "Mul", "Sub"]), [t, w], [out],
                                  name=b.fresh(f"{name}_n")))
    return helper.make_graph(nodes, b.fresh(name), [], [_vi(out, s)])


def _if(b: Builder) -> bool:
    x = b.pick()
    s = b.tensors[x]
    cond = b.const(np.array(bool(b.rng.random() < 0.5)), "cond")
    b.node("If", [cond], s, then_branch=_branch(b, x, s, "then"),
           else_branch=_branch(b, x, s, "else"))
    return True


def _loop(b: Builder) -> bool:
    """Loop with a constant trip count: one carried value, maybe a scan output, the
    iteration number and an outer tensor read in the body."""
    x = b.pick(lambda s: int(np.prod(s)) <= 512)
    if x is None:
        return False
    s = b.tensors[x]
    trips = b.randint(1, 4)
    it, cin, vin = b.fresh("it"), b.fresh("cin"), b.fresh("vin")
    cout, vout = b.fresh("cout"), b.fresh("vout")
    w = b.weight(_within(b, s), 0.5)
    k = b.const(np.array(0.3, F32))
    itf, a1, a2, a3 = (b.fresh("lb") for _ in range(4))
    nodes = [helper.make_node("Cast", [it], [itf], to=TensorProto.FLOAT),
             helper.make_node("Mul", [vin, w], [a1]),
             helper.make_node("Mul", [itf, k], [a2]),
             helper.make_node("Add", [a1, a2], [a3]),
             helper.make_node("Tanh", [a3], [vout]),
             helper.make_node("Identity", [cin], [cout])]
    outs = [_vi(cout, (), TensorProto.BOOL), _vi(vout, s)]
    scan = b.rng.random() < 0.6
    if scan:
        so = b.fresh("so")
        other = b.pick(lambda t: t == s) or x  # an outer-scope tensor read in the body
        nodes.append(helper.make_node("Add", [vout, other], [so]))
        outs.append(_vi(so, s))
    body = helper.make_graph(nodes, b.fresh("body"), [
        _vi(it, (), TensorProto.INT64), _vi(cin, (), TensorProto.BOOL), _vi(vin, s)], outs)
    cond = b.const(np.array(True)) if b.rng.random() < 0.5 else ""
    res = b.node("Loop", [b.const(np.array(trips, np.int64)), cond, x], None,
                 n_out=2 if scan else 1, body=body)
    b.tensors[res[0]] = s
    if scan:
        b.tensors[res[1]] = (trips,) + s
    return True


def _scan(b: Builder) -> bool:
    """Scan over one axis of a tensor with a carried state: both directions, any input
    and output axis."""
    x = b.pick(lambda s: 2 <= len(s) <= 4 and int(np.prod(s)) <= 1024)
    if x is None:
        return False
    s = b.tensors[x]
    axis = b.randint(0, len(s) - 1)
    e = tuple(d for i, d in enumerate(s) if i != axis)
    st, el, nst, so, t1 = (b.fresh("sb") for _ in range(5))
    w = b.weight(_within(b, e), 0.5)
    nodes = [helper.make_node("Mul", [st, w], [t1]),
             helper.make_node("Add", [t1, el], [nst]),
             helper.make_node(b.choice(["Tanh", "Relu", "Sigmoid"]), [nst], [so])]
    body = helper.make_graph(nodes, b.fresh("sbody"), [_vi(st, e), _vi(el, e)],
                             [_vi(nst, e), _vi(so, e)])
    init = b.pick(lambda t: t == e)
    if init is None:
        init = b.weight(e, 0.5)
    oaxis = b.randint(-(len(e) + 1), len(e))
    stacked = list(e)
    stacked.insert(oaxis % (len(e) + 1), s[axis])
    outs = b.node("Scan", [init, x], None, n_out=2, num_scan_inputs=1, body=body,
                  scan_input_axes=[axis - len(s) if b.rng.random() < 0.3 else axis],
                  scan_input_directions=[b.randint(0, 1)],
                  scan_output_axes=[oaxis], scan_output_directions=[b.randint(0, 1)])
    b.tensors[outs[0]] = e
    b.tensors[outs[1]] = tuple(stacked)
    return True


# -- shapes computed in the graph ------------------------------------------------------------

def _shape_chain(b: Builder) -> bool:
    """A Reshape, Expand or ConstantOfShape whose shape the graph computes from
    ``Shape(x)``: folded at compile time once the symbolic dimensions are bound."""
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    s = b.tensors[x]
    shp = b.node("Shape", [x], None)[0]
    r = b.rng.random()
    if r < 0.5:  # keep the first k dims, flatten the rest: [d0..dk-1, -1]
        k = b.randint(1, len(s) - 1)
        head = b.node("Gather", [shp, b.const(np.arange(k, dtype=np.int64))], None, axis=0)[0]
        spec = b.node("Concat", [head, b.const(np.array([-1], np.int64))], None, axis=0)[0]
        b.node("Reshape", [x, spec], s[:k] + (int(np.prod(s[k:])),))
    elif r < 0.75:  # Expand a smaller tensor to x's shape
        small = b.weight(tuple(1 if b.rng.random() < 0.5 else d for d in s[1:]), 1.0)
        e = b.node("Expand", [small, shp], None)[0]
        b.node("Add", [x, e], s)
    else:
        v = float(b.rng.uniform(-2, 2))
        cs = b.node("ConstantOfShape", [shp], None,
                    value=helper.make_tensor("v", TensorProto.FLOAT, [1], [v]))[0]
        b.node("Mul", [x, cs], s)
    return True


def _axes_to_input(b: Builder, node: onnx.NodeProto) -> None:
    """A reduction's ``axes`` attribute (opset 13) moved to its input (opset 18)."""
    if not node.op_type.startswith("Reduce"):
        return
    for i, a in enumerate(node.attribute):
        if a.name == "axes":
            axes = list(a.ints)
            del node.attribute[i]
            node.input.append(b.const(np.array(axes, np.int64)))
            return


def conv_chain(b: Builder, x: str) -> str:
    """2–4 convolutions from ``x`` (``[1, C, H, W]``), each read by the next alone, with a
    Relu or Clip between: the chain a RAM budget tiles into patches (``NAME:budget``;
    docs/embedded.md, "Patch-based inference"). Returns the chain's output."""
    for _ in range(b.randint(2, 4)):
        n, c, h, w = b.tensors[x]
        k = b.choice([1, 3, 3, 5]) if min(h, w) >= 5 else 1
        st = b.choice([1, 1, 2])
        dl = 2 if k == 3 and min(h, w) >= 8 and b.rng.random() < 0.2 else 1
        p = b.randint(0, (k - 1) * dl // 2 + (k > 1))
        p = min(p, (k - 1) * dl)
        dw = b.rng.random() < 0.25 and c > 1
        m = c if dw else b.randint(2, 8)
        oh = (h + 2 * p - dl * (k - 1) - 1) // st + 1
        ow = (w + 2 * p - dl * (k - 1) - 1) // st + 1
        if min(oh, ow) < 2:
            break
        x = b.node("Conv", [x, b.weight((m, 1 if dw else c, k, k)), b.weight((m,), 0.2)],
                   (n, m, oh, ow), kernel_shape=[k, k], strides=[st, st], pads=[p] * 4,
                   dilations=[dl, dl], group=c if dw else 1)[0]
        if b.rng.random() < 0.7:
            x = b.node("Relu", [x], (n, m, oh, ow))[0] if b.rng.random() < 0.6 else \
                b.node("Clip", [x, b.const(np.array(0.0, F32)), b.const(np.array(6.0, F32))],
                       (n, m, oh, ow))[0]
    return x


Gen = tuple[tuple[Callable[[Builder], bool], float], ...]

#: the groups of op families, by the flag that asks for them
OPSET18: Gen = ((_reduce18, 1.5), (_split18, 1.0), (_pad18, 1.0), (_norm18, 1.2),
                (_act18, 0.8), (_resize18, 0.6))
CONTROL: Gen = ((_if, 1.0), (_loop, 1.2), (_scan, 1.2))
DYNAMIC: Gen = ((_shape_chain, 1.0),)


def _groups() -> dict[str, Gen]:
    from tests.fuzz.sequence import ATTENTION, RECURRENT

    return {"opset18": OPSET18, "recurrent": RECURRENT, "attention": ATTENTION,
            "control": CONTROL, "dynamic": DYNAMIC, "convchain": ()}


#: every group's name (``random_modern_model(groups=)``; ``convchain``: the graph starts
#: with :func:`conv_chain` from a larger image)
GROUPS = ("opset18", "recurrent", "attention", "control", "dynamic", "convchain")


def random_modern_model(seed: int, max_nodes: int = 10,
                        groups: tuple[str, ...] = GROUPS[:4], symbolic: bool = False
                        ) -> tuple[onnx.ModelProto, dict]:
    """A random valid opset-23 model over ``groups`` (:data:`GROUPS`) and the CI families
    (a quarter of their weight), and seeded inputs; ``symbolic``: the inputs' first
    dimension (sometimes another) declared symbolic, and Shape chains drawn too."""
    rng = np.random.default_rng(seed)
    table = _groups()
    unknown = [n for n in groups if n not in table]
    if unknown:
        raise ValueError(f"unknown group(s) {unknown}: choose from {list(GROUPS)}")
    gens: Gen = tuple((fn, w / 4) for fn, w in g.GENERATORS)
    for name in groups + (("dynamic",) if symbolic and "dynamic" not in groups else ()):
        gens += table[name]
    b = Builder(rng)
    seq = "recurrent" in groups or "attention" in groups
    rank = int(rng.choice([3, 3, 3, 4, 2] if seq else [4, 4, 3, 2]))
    shape = {4: (int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(3, 8)),
                 int(rng.integers(3, 8))),
             3: (int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(2, 9))),
             2: (int(rng.integers(1, 6)), int(rng.integers(2, 12)))}[rank]
    if "convchain" in groups:
        shape = (1, int(rng.integers(1, 4)), int(rng.integers(12, 29)),
                 int(rng.integers(12, 29)))
    b.tensors["x"] = shape
    inputs = {"x": rng.standard_normal(shape).astype(F32)}
    if rng.random() < 0.3:
        b.tensors["x2"] = shape
        inputs["x2"] = rng.standard_normal(shape).astype(F32)
    if "convchain" in groups:
        b.tensors.pop("x2", None)
        conv_chain(b, "x")
        for t in list(b.tensors)[:-1]:  # read by the next layer alone
            b.tensors.pop(t)
    g.grow(b, gens, max_nodes)
    for node in b.nodes:  # the CI families' reductions in their opset-18 form
        _axes_to_input(b, node)
    model, feeds = to_model(b, f"modern{seed}", inputs, shape, MODERN_OPSET)
    if symbolic:
        for vi in model.graph.input:
            dims = vi.type.tensor_type.shape.dim
            picked = [0] + ([int(rng.integers(1, len(dims)))] if len(dims) > 1 and
                            rng.random() < 0.4 else [])
            for i in picked:
                dims[i].Clear()
                dims[i].dim_param = "N" if i == 0 else f"{vi.name}_d{i}"
    onnx.checker.check_model(model)
    return model, feeds
