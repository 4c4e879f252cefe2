"""Which node of an integer graph runs on the accelerator, and which on the host CPU.

:func:`partition` is the graph pass of an accelerator target (it runs after
``quantize_ops`` and the layout pass, before fusion). For every node it records a
:class:`Placement` — device and a reason in words — and rewrites each integer layer the
accelerator takes into the two ops of :mod:`toolchain.graph.ops.accel`:

* a QConv with ``group = 1``, no dilation, batch 1 and an int8 input, whose program
  :func:`~toolchain.vta.compile.compile_conv2d` builds (square filters, equal strides and
  one padding) or :func:`~toolchain.vta.compile.compile_conv2d_im2col` (any: DS-CNN's
  10x4 first layer, stride 2, pads 4, 1, 5, 1); a QGemm with a 2-D int8 input whose program
  :func:`~toolchain.vta.compile.compile_dense` builds. Where the layer's requantization
  multipliers are all powers of two (``kiln quantize --power-of-two-scales``) and the
  ALU can compute it exactly (:func:`~toolchain.vta.requant.plan_requant`), the
  accelerator runs the whole layer — GEMM, bias, rounding shifts, clamp — and stores
  int8 (one ``VtaConv2d``/``VtaDense`` node with the bias, multipliers and shift table as
  inputs). Otherwise it runs the GEMM and returns int32 accumulators; the host adds the
  bias, the input zero point's correction, requantizes and clamps (``QRequant``, which
  fuses with what follows): Kiln's requantization by a general multiplier needs the high
  half of a 32x32-bit product, which the int32 ALU does not give, so this split is what
  keeps such a layer bit-exact with :func:`toolchain.graph.reference.run_graph`. The
  reason says which, and why;
* everything else stays on the host with the reason: depthwise or grouped convolutions,
  pooling, QAdd (its requantization has the same 64-bit products), float ops, and layers the
  accelerator's schedules refuse at every point of their tiling space — the compiler's
  own message says why.

A convolution whose input channels fill the GEMM's BLOCK_IN lanes badly (an RGB first
layer: 3 channels per tap padded to 16) is also compiled as an im2col GEMM
(:func:`~toolchain.vta.compile.compile_conv2d_im2col`: K = 27 in 2 blocks instead of 9);
the program with the lower modelled cost (:func:`~toolchain.vta.timing.program_cost`) is
kept, and the reason says which. Either way the tiling and the virtual threads (1-4) are
the default search's (:func:`~toolchain.vta.compile.compile_dense`: the layer's whole
tiling space ranked by the predicted cost, the best 8 built).

Before::

    %y = QConv(%x, %w, %b, %m, %s, pads=[1, 1, 1, 1], x_zero_point=-128, ...)

After (multipliers not powers of two)::

    %y_acc = VtaConv2d(%x, %w, pads=[1, 1, 1, 1])          # accelerator
    %y = QRequant(%y_acc, %b_vta, %m, %s, axis=1, ...)    # host

After (power-of-two scales)::

    %y = VtaConv2d(%x, %w, %b_vta, %m, %s, pads=[1, 1, 1, 1], y_zero_point=..., ...)

Example::

    >>> p = partition(graph, load_target("vta"))            # doctest: +SKIP
    >>> [(x.node, x.device) for x in p.placements]          # doctest: +SKIP
    [('conv1', 'accelerator'), ('pool', 'host'), ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.errors import ScheduleError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.qops import qconv_acc
from toolchain.target import Target
from toolchain.vta.compile import (
    CompiledConv2d,
    CompiledDense,
    compile_conv2d,
    compile_conv2d_im2col,
    compile_dense,
)
from toolchain.vta.config import config_from_target
from toolchain.vta.requant import RequantPlan, plan_qadd, plan_requant
from toolchain.vta.timing import program_cost

ACCELERATOR, HOST = "accelerator", "host"

#: why an op that is not an integer GEMM layer stays on the host
HOST_REASONS = {
    "QAdd": "its fixed-point requantization needs 64-bit products the accelerator's "
            "int32 ALU lacks unless its scales are powers of two",
    "QAvgPool": "pooling: the accelerator has no pooling unit",
    "MaxPool": "pooling: the accelerator has no pooling unit",
    "QRequant": "requantization needs 64-bit products the accelerator's int32 ALU lacks",
}


@dataclass(frozen=True)
class Placement:
    """Where node ``node`` (op ``op``) runs and why."""

    node: str
    op: str
    device: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "op": self.op, "device": self.device,
                "reason": self.reason}


@dataclass
class Partition:
    """The rewritten graph, one placement per node of the input graph (in its order) and
    the compiled accelerator layers by the name of their ``VtaConv2d``/``VtaDense`` node."""

    graph: Graph
    placements: list[Placement]
    layers: dict[str, CompiledConv2d | CompiledDense] = field(default_factory=dict)

    def summary(self) -> str:
        """One line per node: device, node, op, reason."""
        width = max((len(p.node) for p in self.placements), default=0)
        return "\n".join(f"  {p.device:<11} {p.node:<{width}}  {p.op}: {p.reason}"
                         for p in self.placements)


def _short(exc: Exception, layer: str) -> str:
    """The first problem of a compiler error, without the layer prefix."""
    text = str(exc).split("; ")[0]
    prefix = f"layer {layer!r}: "
    while text.startswith(prefix):
        text = text[len(prefix):]
    return text[:240]


def _conv_refusal(n: Node) -> str | None:
    """Why the accelerator cannot take QConv ``n`` whatever the sizes, or None."""
    x, w = n.inputs[0], n.inputs[1]
    a = n.attrs
    if x is None or w is None or w.data is None:
        return "the weights are not a constant"
    if int(a["group"]) != 1:
        kind = "depthwise" if int(a["group"]) == x.shape[1] else "grouped"
        return f"{kind} convolution (group {a['group']}): the GEMM core has no grouped mode"
    if x.dtype != "int8":
        return f"{x.dtype} input: the GEMM core multiplies int8"
    if x.shape[0] != 1:
        return f"batch {x.shape[0]}: accelerator convolutions take one image"
    if tuple(a["dilations"]) != (1, 1):
        return f"dilation {list(a['dilations'])}: not supported by the accelerator schedule"
    return None


def _square(n: Node) -> bool:
    """Whether QConv ``n`` has square filters, equal strides and one padding (what the
    direct schedule takes; the im2col GEMM takes any)."""
    w, a = n.inputs[1], n.attrs
    assert w is not None
    return (w.shape[2] == w.shape[3] and a["strides"][0] == a["strides"][1]
            and len(set(a["pads"])) == 1)


def _position_bias(n: Node, acc_shape: tuple[int, ...]) -> np.ndarray:
    """QConv ``n``'s bias with the input zero point's correction folded in: ``[C]`` when
    every output sees all its taps, else ``[C, OH, OW]``."""
    w = np.asarray(n.inputs[1].data)  # type: ignore[union-attr]
    bias = np.asarray(n.inputs[2].data, np.int64)  # type: ignore[union-attr]
    zp = int(n.attrs["x_zero_point"])
    if zp == 0:
        return bias.astype(np.int32)
    x = n.inputs[0]
    assert x is not None
    if not any(n.attrs["pads"]):
        taps = w.astype(np.int64).sum(axis=(1, 2, 3))
        return _int32(bias - zp * taps, n)
    ones = np.ones((1, *x.shape[1:]), np.int8)
    attrs = {**n.attrs, "x_zero_point": 0, "group": 1}
    taps = qconv_acc(ones, w, attrs)[0]                      # [C, OH, OW]
    assert taps.shape == acc_shape[1:]
    return _int32(bias[:, None, None] - zp * taps, n)


def _int32(v: np.ndarray, n: Node) -> np.ndarray:
    if v.min() < -(2**31) or v.max() >= 2**31:
        raise ScheduleError(f"{n.describe()}: the zero-point corrected bias leaves int32")
    return v.astype(np.int32)


def _requant(n: Node, acc: Value, bias: np.ndarray) -> Node:
    keep = ("y_zero_point", "out_min", "out_max", "out_dtype")
    attrs: dict[str, Any] = {"axis": 1, **{k: n.attrs[k] for k in keep}}
    ins = [acc, Value.constant(f"{n.name}_bias_vta", bias), n.inputs[3], n.inputs[4]]
    return Node("QRequant", n.name, ins, list(n.outputs), attrs)


def _plan(n: Node, bias: np.ndarray, acc_bound: np.ndarray, target: Target
          ) -> RequantPlan | str:
    """The requantization of QConv/QGemm ``n`` on the accelerator, or why it stays on the
    host."""
    if n.attrs["out_dtype"] != "int8":
        return f"{n.attrs['out_dtype']} output: the accelerator stores int8"
    missing = {"ADD", "SHR", "MIN", "MAX"} - set(config_from_target(target).alu_ops)
    if missing:
        return f"the target's ALU lacks {', '.join(sorted(missing))}"
    return plan_requant(bias, np.asarray(n.inputs[3].data), np.asarray(n.inputs[4].data),
                        int(n.attrs["y_zero_point"]), int(n.attrs["out_min"]),
                        int(n.attrs["out_max"]), acc_bound)


def _fused(n: Node, op: str, name: str, x: Value, w: Value, bias: np.ndarray,
           attrs: dict[str, Any]) -> Node:
    """``op`` with the requantization inputs: the accelerator layer's int8 output."""
    keep = {k: n.attrs[k] for k in ("y_zero_point", "out_min", "out_max", "out_dtype")}
    ins = [x, w, Value.constant(f"{n.name}_bias_vta", bias), n.inputs[3], n.inputs[4]]
    return Node(op, name, ins, list(n.outputs), {**attrs, **keep})


def _with_epilogue(compile_fn, args: tuple, kw: dict[str, Any], plan: RequantPlan | str,
                   problems: list[str], name: str):
    """The layer compiled with its requantization (``plan``) where it has one and that
    compiles, else with int32 output; and why the epilogue is not on the accelerator."""
    if not isinstance(plan, str):
        layer = _threads(compile_fn, args, {**kw, "output": "int8", "requant": plan},
                         problems, name)
        if layer is not None:
            return layer, None
        plan = problems[-1]
    return _threads(compile_fn, args, kw, problems, name), plan


def _epilogue_words(host_why: str | None) -> str:
    if host_why is None:
        return ("bias, requantization (rounding shifts: power-of-two scales) and clamp on "
                "the accelerator, int8 out")
    return f"bias, requantization and clamp on the host ({host_why})"


def _conv(n: Node, target: Target, part: Partition) -> tuple[list[Node], str] | str:
    why = _conv_refusal(n)
    if why is not None:
        return why
    x, w = n.inputs[0], n.inputs[1]
    assert x is not None and w is not None
    a = n.attrs
    name = f"{n.name}_vta"
    wt = np.asarray(w.data)
    k, ic, stride, pad = w.shape[2], w.shape[1], int(a["strides"][0]), int(a["pads"][0])
    kw_, sw_, pads = w.shape[3], int(a["strides"][1]), tuple(int(v) for v in a["pads"])
    out_hw = ((x.shape[2] + pads[0] + pads[2] - k) // stride + 1,
              (x.shape[3] + pads[1] + pads[3] - kw_) // sw_ + 1)
    try:
        bias = _position_bias(n, (1, w.shape[0], *out_hw))
    except ScheduleError as exc:
        return str(exc)
    bound = 128 * np.abs(wt.astype(np.int64)).sum(axis=(1, 2, 3))
    plan = _plan(n, bias, bound, target)
    args = (wt, x.shape[2], x.shape[3], 0, target)
    kw = {"stride": stride, "pad": pad, "layer": name, "output": "int32"}
    problems: list[str] = []
    square = _square(n)
    if square:
        layer, host_why = _with_epilogue(compile_conv2d, args, kw, plan, problems, name)
    else:  # the direct schedule's loops take one filter size, stride and padding
        kw.update(stride=(stride, sw_), pad=pads)
        odd = ([f"{k}x{kw_} filters"] * (k != kw_) + [f"strides {stride},{sw_}"] * (
            stride != sw_) + [f"pads {','.join(map(str, pads))}"] * (len(set(pads)) > 1))
        problems.append(f"{', '.join(odd)}: it takes square filters, one stride and the same "
                        "padding on every side")
        layer, host_why = None, None
    direct_problem = problems[-1] if layer is None else None
    bi = config_from_target(target).block_in
    # the im2col GEMM where it fills the GEMM's lanes better, or where the direct form has
    # no schedule (a 1x1 layer with padding, a GEMM core of BATCH > 1, a non-square layer)
    if layer is None or -(-ic * k * k // bi) < k * k * -(-ic // bi):
        flat, flat_why = _with_epilogue(compile_conv2d_im2col, args, kw, plan, problems, name)
        if flat is not None and (layer is None or (flat_why is None, -program_cost(
                flat.program)) > (host_why is None, -program_cost(layer.program))):
            layer, host_why = flat, flat_why
    if layer is None:
        return direct_problem or problems[-1]
    s = layer.conv if isinstance(layer, CompiledDense) else layer.shape
    assert s is not None
    part.layers[name] = layer
    attrs = {"strides": tuple(a["strides"]), "pads": tuple(a["pads"])}
    if host_why is None:
        nodes = [_fused(n, "VtaConv2d", name, x, w, bias, attrs)]
    else:
        acc = Value(f"{n.outputs[0].name}_acc", (1, w.shape[0], *s.out_hw), "int32")
        nodes = [Node("VtaConv2d", name, [x, w], [acc], attrs), _requant(n, acc, bias)]
    t = layer.tiles
    if isinstance(layer, CompiledDense):
        kb = -(-layer.shape.k // bi)
        why_flat = (f"K in {kb} blocks of {bi}, not {k * k} taps x {-(-ic // bi)}"
                    if direct_problem is None else  # the direct form has no schedule
                    f"the direct convolution: {direct_problem}; K in {kb} "
                    f"block{'s' if kb > 1 else ''} of {bi}")
        how = (f"as an im2col GEMM {layer.shape.m}x{layer.shape.k} by {layer.shape.k}x"
               f"{layer.shape.n} ({why_flat}; the host builds the rows as it packs the input; "
               f"tiles {t.tm},{t.tn},{t.tk} split {t.split}")
    else:
        how = f"(tiles {t.toh},{t.toc},{t.tic} split {t.split}"
    geometry = (f"{s.k}x{s.k} conv stride {s.s}" if square else
                f"{k}x{kw_} conv strides {stride},{sw_} pads {','.join(map(str, pads))}")
    what = (f"{geometry}, {s.ic}->{s.oc} channels on {s.h}x{s.w}: GEMM on "
            f"the accelerator {how}, {len(layer.program.insns)} instructions); "
            + _epilogue_words(host_why))
    return nodes, what


def _threads(compile_fn, args: tuple, kw: dict[str, Any], problems: list[str], name: str):
    """``compile_fn(*args, **kw)``, its tiling and virtual threads (1-4) chosen by the
    search over the layer's whole tiling space; None (the problem noted) if no point
    compiles."""
    try:
        return compile_fn(*args, **kw)
    except ScheduleError as exc:
        problems.append(_short(exc, name))
    return None


def _gemm(n: Node, target: Target, part: Partition) -> tuple[list[Node], str] | str:
    x, w = n.inputs[0], n.inputs[1]
    if x is None or w is None or w.data is None:
        return "the weights are not a constant"
    if x.rank != 2 or x.dtype != "int8":
        return f"{x.dtype} input of rank {x.rank}: the accelerator takes a 2-D int8 input"
    name = f"{n.name}_vta"
    wt = np.ascontiguousarray(np.asarray(w.data).T)            # (K, N)
    zp = int(n.attrs["x_zero_point"])
    bias = np.asarray(n.inputs[2].data, np.int64)  # type: ignore[union-attr]
    try:
        bias32 = _int32(bias - zp * np.asarray(w.data, np.int64).sum(axis=1), n)
    except ScheduleError as exc:
        return str(exc)
    plan = _plan(n, bias32, 128 * np.abs(wt.astype(np.int64)).sum(axis=0), target)
    problems: list[str] = []
    layer, host_why = _with_epilogue(compile_dense, (wt, x.shape[0], 0, target),
                                     {"layer": name, "output": "int32"}, plan, problems, name)
    if layer is None:
        return f"M={x.shape[0]} rows: {problems[-1]}"
    part.layers[name] = layer
    if host_why is None:
        nodes = [_fused(n, "VtaDense", name, x, w, bias32, {})]
    else:
        acc = Value(f"{n.outputs[0].name}_acc", (x.shape[0], w.shape[0]), "int32")
        nodes = [Node("VtaDense", name, [x, w], [acc], {}), _requant(n, acc, bias32)]
    s, t = layer.shape, layer.tiles
    what = (f"{s.m}x{s.k} by {s.k}x{s.n}: GEMM on the accelerator (tiles {t.tm},{t.tn},"
            f"{t.tk} split {t.split}, {len(layer.program.insns)} instructions); "
            + _epilogue_words(host_why))
    return nodes, what


def _add(n: Node, target: Target, part: Partition) -> tuple[list[Node], str] | str:
    a, b = n.inputs[0], n.inputs[1]
    if a is None or b is None:
        return "an input is missing"
    if a.dtype != "int8" or b.dtype != "int8" or n.attrs["out_dtype"] != "int8":
        return f"{a.dtype} + {b.dtype} -> {n.attrs['out_dtype']}: the accelerator adds int8"
    if a.rank != 4 or a.shape[0] != 1:
        return f"shape {list(a.shape)}: the accelerator adds one NCHW image"
    got = plan_qadd(n.attrs, a.shape[1])
    if isinstance(got, str):
        return f"{HOST_REASONS['QAdd']} ({got})"
    plan, (da, db) = got
    c, pixels = a.shape[1], int(np.prod(a.shape[2:]))
    w = np.zeros((2 * c, c), np.int8)              # [a; b] channels x output channels
    w[np.arange(c), np.arange(c)] = da
    w[c + np.arange(c), np.arange(c)] = db
    name = f"{n.name}_vta"
    problems: list[str] = []
    layer = _threads(compile_dense, (w, pixels, 0, target),
                     {"layer": name, "requant": plan}, problems, name)
    if layer is None:
        return problems[-1]
    part.layers[name] = layer
    t = layer.tiles
    what = (f"{c} channels on {pixels} pixels: both inputs into the accumulators by a GEMM "
            f"with weights {da} and {db} (K = {2 * c}, tiles {t.tm},{t.tn},{t.tk} split "
            f"{t.split}, {len(layer.program.insns)} instructions), then the rounding shift "
            "and clamp on the accelerator (power-of-two scales), int8 out")
    return [Node("VtaAdd", name, [a, b], list(n.outputs), dict(n.attrs))], what


_LAYERS = {"QConv": _conv, "QGemm": _gemm, "QAdd": _add}


def host_reason(n: Node) -> str:
    """Why node ``n`` (not an integer GEMM layer) runs on the host."""
    if n.op in HOST_REASONS:
        return HOST_REASONS[n.op]
    if n.op.startswith("Layout") or n.op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                             "Transpose", "Concat"):
        return "data movement on the host"
    dtypes = {v.dtype for v in (*n.inputs, *n.outputs) if v is not None}
    if dtypes & {"float32", "float16", "float64", "bfloat16"}:
        return "a float op (the accelerator computes int8 x int8 -> int32)"
    return "not an integer convolution or matrix product"


#: the intrinsics every accelerator layer's schedule tensorizes with (``schedule.py``)
LAYER_INTRINSICS = ("gemm", "gemm_reset", "load_inp", "load_wgt", "store_out", "alu_shr_imm",
                    "alu_min_imm", "alu_max_imm")


def missing_intrinsics(target: Target) -> str | None:
    """Why no layer can run on ``target`` for want of an intrinsic (a variant that dropped
    one), or None.

    >>> from toolchain.target import load_target
    >>> missing_intrinsics(load_target("vta")) is None
    True
    """
    missing = [x for x in LAYER_INTRINSICS if not target.has_intrinsic(x)]
    if not missing:
        return None
    return (f"target {target.name!r} has no intrinsic {', '.join(missing)}: the accelerator's "
            f"layer schedules need {', '.join(LAYER_INTRINSICS)}")


def partition(graph: Graph, target: Target) -> Partition:
    """Place every node of ``graph`` (see the module docstring); the rewritten graph, the
    placements and the compiled accelerator layers."""
    part = Partition(graph, [])
    nodes: list[Node] = []
    lacking = missing_intrinsics(target)
    for n in graph.nodes:
        fn = _LAYERS.get(n.op)
        if fn is None:
            got: tuple[list[Node], str] | str = host_reason(n)
        else:
            got = lacking if lacking is not None else fn(n, target, part)
        if isinstance(got, str):
            part.placements.append(Placement(n.name, n.op, HOST, got))
            nodes.append(n)
        else:
            new, why = got
            part.placements.append(Placement(n.name, n.op, ACCELERATOR, why))
            nodes.extend(new)
    part.graph = graph.replace(nodes=nodes)
    return part
