"""Layout transformation: run each op in the data layout the target prefers.

Targets name a layout kind (``target_layout``):

* ``"nchw"`` — generic C: everything stays in ONNX's ``NCHW`` (the pass does nothing but
  the ``qconv`` rule's NHWC first convolution, where the target has that kernel);
* ``"nchwc"`` (block 8), ``"nchw8c"``, ``"nchw16c"`` … — AVX CPUs: channel-blocked
  ``NCHW{b}c`` where ``b`` is the largest divisor of the tensor's channel count not above
  the target's block (so every tensor has exactly one blocked form);
* ``"nhwc"`` — Cortex-M (CMSIS-NN): channels last.

Ops with a rule of their own are listed in :data:`PREFERENCE` (a small table); every other
op follows its inputs when its ``OpDef`` has the ``layout_agnostic`` trait, else needs NCHW:

* ``conv`` — 2-D ``Conv`` (plain or depthwise, constant weight): input and output in the
  target layout, the weight **pre-transformed at compile time** (``OIHW{i}i{o}o`` /
  ``OHWI``); becomes ``LayoutConv``;
* ``pool`` — 2-D ``MaxPool``/``AveragePool``/``GlobalAveragePool``/``GlobalMaxPool``:
  target layout; becomes ``LayoutPool``;
* ``follow`` — ``layout_agnostic`` ops (element-wise ops but QuantizeLinear and
  DequantizeLinear, whose ``axis`` is an NCHW axis): they run in the target layout when one
  of their inputs already is, else stay in ``NCHW``; a per-channel constant operand is
  rewritten for that layout at compile time;
* ``qconv`` — ``QConv`` on a target whose layout target has ``int8`` (it declares the
  ``dot_u8s8`` quads of the x86 int8 kernels): the output in ``NCHW{L}c`` when every
  consumer is a QConv whose x86 kernel reads that layout, and the input in the layout its
  producer wrote when the kernel reads it
  (:func:`toolchain.topi.int8_x86.blocked_layouts`); the attributes ``data_layout`` /
  ``out_layout`` say which. A chain of int8 convolutions then hands channel blocks from
  kernel to kernel instead of re-laying NCHW at each kernel's edges;
  On a target whose dense int8 convolution gathers NHWC (``LayoutTarget.nhwc_qconv``: it
  declares the Cortex-M DSP dot intrinsics; in any activation layout, ``nchw`` included)
  a dense ``QConv`` whose input is the model's own NHWC -> NCHW ``Transpose`` (read by it
  alone) reads the transpose's source in ``NHWC`` instead (``data_layout="NHWC"``; the
  transform cancels the transpose in ``simplify``);
* ``qadd`` — ``QAdd`` on such a target follows its inputs into their blocked layout (a
  QConv's output is blocked for a QAdd whose inputs all come from such QConvs or QAdds);
* ``qpool`` — ``QAvgPool`` after such a chain reads its ``NCHW{L}c`` input as it is
  and writes its output in it too (``data_layout``; a QConv's output is blocked for it);
* ``pad`` — a spatial ``Pad`` (constant pads, none on N or C) follows its input;
* ``concat`` — a channel ``Concat`` follows its inputs too, when every input and the output
  have the same form (always for ``NHWC``, axis 3; for ``NCHW{b}c`` when the block is the
  same for all, e.g. 16 + 32 channels with block 8);
* anything else — ``NCHW`` only.

A ``LayoutTransform`` node is inserted only where a producer's layout differs from what a
consumer wants, once per (value, layout) however many consumers share it.  The graph's
inputs and outputs keep the model's layout (a transform back is inserted before each
output that is produced in another layout).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import get_op
from toolchain.graph.passes._util import Namer
from toolchain.graph.passes.layout_ops import POOLS, kernel_to_layout, layout_shape, to_layout

#: the ops with a layout rule of their own (see the module docstring); other ops follow
#: their inputs when ``layout_agnostic`` (an ``OpDef`` trait), else need NCHW
PREFERENCE: dict[str, str] = {
    "Conv": "conv", **{p: "pool" for p in POOLS}, "Concat": "concat", "Pad": "pad",
    "QConv": "qconv", "QAvgPool": "qpool", "QAdd": "qadd",
}


def _preference(op: str) -> str:
    """The layout rule of ``op``: its :data:`PREFERENCE`, else ``"follow"`` for a
    ``layout_agnostic`` op, else ``""`` (NCHW only).

    >>> _preference("Conv"), _preference("Relu"), _preference("QuantizeLinear")
    ('conv', 'follow', '')
    """
    if op in PREFERENCE:
        return PREFERENCE[op]
    return "follow" if get_op(op).layout_agnostic else ""


@dataclass(frozen=True)
class LayoutTarget:
    """A target's layout kind and (for ``nchwc``) its channel block."""

    kind: str  # "nchw" | "nhwc" | "nchwc"
    block: int = 8
    #: the target has the x86 int8 kernels that read and write channel blocks (QConv rule)
    int8: bool = field(default=False, repr=False)
    #: the target's dense int8 convolution gathers an NHWC input as it is (the Cortex-M
    #: DSP kernels): a model's own NHWC -> NCHW transpose before one is folded into it,
    #: whatever the activation layout (``qconv`` rule)
    nhwc_qconv: bool = field(default=False, repr=False)

    def data_layout(self, channels: int) -> str:
        """The layout of a tensor with ``channels`` channels on this target."""
        if self.kind == "nhwc":
            return "NHWC"
        if self.kind == "nchw":
            return "NCHW"
        b = max(d for d in range(1, min(self.block, channels) + 1) if channels % d == 0)
        return f"NCHW{b}c"

    def kernel_layout(self, w_shape: tuple[int, ...]) -> str:
        if self.kind == "nhwc":
            return "OHWI"
        o_lay, i_lay = self.data_layout(w_shape[0]), self.data_layout(w_shape[1])
        return f"OIHW{i_lay[4:-1]}i{o_lay[4:-1]}o"


def parse_layout_target(text: str | LayoutTarget) -> LayoutTarget:
    """``"nchw"``, ``"nhwc"``, ``"nchwc"`` (block 8) or ``"nchw<b>c"`` -> :class:`LayoutTarget`.

    Example::

        >>> parse_layout_target("nchw16c")
        LayoutTarget(kind='nchwc', block=16)
    """
    if isinstance(text, LayoutTarget):
        return text
    t = text.strip().lower()
    if t in ("nchw", "nhwc"):
        return LayoutTarget(t)
    if t == "nchwc":
        return LayoutTarget("nchwc", 8)
    m = re.fullmatch(r"nchw(\d+)c", t)
    if m and int(m.group(1)) >= 1:
        return LayoutTarget("nchwc", int(m.group(1)))
    raise OptionError(f"target layout {text!r} is not one of nchw, nhwc, nchwc, nchw<b>c "
                      "(e.g. nchw8c for AVX2, nchw16c for AVX-512)")


def layout_for_target(target: Any) -> LayoutTarget:
    """The activation layout a :class:`~toolchain.target.Target` declares (its ``layout``
    key: the x86 descriptors ``nchw8c``/``nchw16c``, Cortex-M ``nhwc``); ``NCHW`` where
    it declares none. Read from the descriptor, never guessed from the target's name, so a
    renamed ``extends:`` variant lays out its graph exactly like its base.

    Example::

        >>> from types import SimpleNamespace as T
        >>> layout_for_target(T(name="anything", kind="c", layout="nchw16c"))
        LayoutTarget(kind='nchwc', block=16)
        >>> layout_for_target(T(name="x86_64-avx512", kind="c", layout=None)).kind
        'nchw'
    """
    explicit = getattr(target, "layout", None)
    if not explicit:
        return LayoutTarget("nchw")
    lt = parse_layout_target(explicit)
    has = getattr(target, "has_intrinsic", None)
    int8 = lt.kind == "nchwc" and has is not None and all(
        has(f"dot_u8s8_{n}x4") for n in (8, 16))
    # every dense DSP convolution can fall back to this one (toolchain.schedules.cortex_m)
    nhwc_qconv = has is not None and has("dot_q15q7_1x4")
    return LayoutTarget(lt.kind, lt.block, int8, nhwc_qconv) if int8 or nhwc_qconv else lt


class _Rewriter:
    """Walks the graph once, tracking the layout every value was produced in."""

    def __init__(self, graph: Graph, target: LayoutTarget) -> None:
        self.graph, self.target = graph, target
        self.namer = Namer(graph)
        self.variants: dict[Value, dict[str, Value]] = {}
        self.nodes: list[Node] = []
        self.consumers: dict[Value, list[Node]] = {}
        self.producer = {o: n for n in graph.nodes for o in n.outputs}
        for n in graph.nodes:
            for v in n.inputs:
                if v is not None:
                    self.consumers.setdefault(v, []).append(n)

    def layout_of(self, v: Value) -> str:
        """The layout ``v`` was produced in (inputs and constants: NCHW)."""
        return next(iter(self.variants[v])) if v in self.variants else "NCHW"

    def get(self, v: Value, layout: str) -> Value:
        """``v`` in ``layout``, inserting one ``LayoutTransform`` the first time."""
        have = self.variants.setdefault(v, {"NCHW": v})
        if layout not in have:
            src_layout, src = next(iter(have.items()))
            out = v if layout == "NCHW" else self.fresh(v, layout)
            self.nodes.append(Node(
                "LayoutTransform", self.namer(f"{v.name}_to_{layout}"), (src,), (out,),
                {"src_layout": src_layout, "dst_layout": layout}))
            have[layout] = out
        return have[layout]

    def fresh(self, v: Value, layout: str) -> Value:
        return Value(self.namer(f"{v.name}_{layout}"), layout_shape(v.shape, layout), v.dtype)

    def produced(self, v: Value, layout: str) -> Value:
        """Record that the new graph computes ``v`` in ``layout``; its new value."""
        new = v if layout == "NCHW" else self.fresh(v, layout)
        self.variants[v] = {layout: new}
        return new

    # -- per-op rules --------------------------------------------------------------------
    def conv(self, node: Node) -> Node | None:
        x, w = node.inputs[0], node.inputs[1]
        b = node.input(2)
        group = int(node.attrs.get("group", 1))
        if x.rank != 4 or not w.is_constant or (b is not None and not b.is_constant) or \
                group not in (1, x.shape[1]) or not x.dtype.startswith("float"):
            return None
        in_lay, out_lay = (self.target.data_layout(c)
                           for c in (x.shape[1], node.outputs[0].shape[1]))
        k_lay = self.target.kernel_layout(w.shape)
        w_new = Value.constant(self.namer(f"{w.name}_{k_lay}"), kernel_to_layout(w.data, k_lay))
        attrs = dict(node.attrs, data_layout=in_lay, out_layout=out_lay, kernel_layout=k_lay)
        ins = (self.get(x, in_lay), w_new) + ((b,) if b is not None else ())
        out = self.produced(node.outputs[0], out_lay)
        return Node("LayoutConv", node.name, ins, (out,), attrs)

    def qconv(self, node: Node) -> Node | None:
        from toolchain.topi.int8_x86 import blocked_layouts

        if self.target.nhwc_qconv:
            return self.qconv_nhwc_input(node)
        lays = blocked_layouts(node) if self.target.int8 else None
        if lays is None:
            return None
        x, y = node.inputs[0], node.outputs[0]
        data = lays[0] if self.layout_of(x) == lays[0] else "NCHW"
        users = self.consumers.get(y, [])
        out = lays[1] if users and y not in self.graph.outputs and all(
            self.reads_blocked(n, y, lays[1]) for n in users) else "NCHW"
        if (data, out) == ("NCHW", "NCHW"):
            return None
        attrs = dict(node.attrs, data_layout=data, out_layout=out)
        return node.replace(inputs=(self.get(x, data), *node.inputs[1:]),
                            outputs=(self.produced(y, out),), attrs=attrs)

    def qconv_nhwc_input(self, node: Node) -> Node | None:
        """On a target whose dense int8 convolution gathers NHWC (``nhwc_qconv``: the
        Cortex-M DSP kernels, in any activation layout), a dense QConv (group 1) whose
        input is the model's own
        NHWC -> NCHW ``Transpose`` (a TensorFlow export's first convolution) and is read by
        it alone reads that transpose's NHWC source instead (``data_layout="NHWC"``): the
        ``LayoutTransform`` inserted here cancels the transpose in the second ``simplify``,
        so the NCHW copy of the image is never made (the Cortex-M kernel gathers its
        im2col rows channels-last).  Its output stays NCHW."""
        x = node.inputs[0]
        src = self.producer.get(x)
        if src is None or src.op != "Transpose" or x.rank != 4 or \
                tuple(int(p) for p in src.attrs.get("perm", ())) != (0, 3, 1, 2) or \
                int(node.attrs.get("group", 1)) != 1 or \
                node.attrs.get("data_layout", "NCHW") != "NCHW" or \
                self.layout_of(src.inputs[0]) != "NCHW" or x in self.graph.outputs or \
                [n for n in self.consumers.get(x, []) if n is not node] or \
                any(v is x for v in node.inputs[1:]):
            return None
        return node.replace(inputs=(self.get(x, "NHWC"), *node.inputs[1:]),
                            attrs=dict(node.attrs, data_layout="NHWC"))

    def reads_blocked(self, node: Node, v: Value, layout: str) -> bool:
        """Whether ``node`` reads ``v`` in channel-blocked ``layout`` on an int8 target: a
        QConv whose x86 kernel reads it (as its first input only), a QAvgPool
        (:meth:`qpool`), or a QAdd whose every input comes blocked the same way
        (:meth:`qadd`)."""
        from toolchain.topi.int8_x86 import blocked_layouts

        if node.op == "QAdd":
            return all(u is not None and self.writes_blocked(u, layout) for u in node.inputs)
        if node.inputs[0] is not v or any(u is v for u in node.inputs[1:]):
            return False
        if node.op == "QAvgPool":
            return True
        return node.op == "QConv" and (blocked_layouts(node) or ("",))[0] == layout

    def writes_blocked(self, v: Value, layout: str) -> bool:
        """Whether ``v`` is made by a QConv whose x86 kernel can write ``layout`` or by a
        QAdd (which follows its inputs)."""
        from toolchain.topi.int8_x86 import blocked_layouts

        node = self.producer.get(v)
        if node is None:
            return False
        return node.op == "QAdd" or (node.op == "QConv"
                                     and (blocked_layouts(node) or ("", ""))[1] == layout)

    def qadd(self, node: Node) -> Node | None:
        """QAdd (element-wise, the same shape on both sides) follows its inputs into the
        channel-blocked layout of an int8 chain (ResNet-8's residual adds): when one input
        arrives blocked, the other is brought to that layout and the sum is blocked."""
        a, b = node.inputs[0], node.input(1)
        y = node.outputs[0]
        if not self.target.int8 or b is None or a.shape != b.shape or a.shape != y.shape \
                or a.is_constant or b.is_constant:
            return None
        lays = {self.layout_of(v) for v in (a, b)} - {"NCHW"}
        if len(lays) != 1:
            return None
        lay = lays.pop()
        return node.replace(inputs=(self.get(a, lay), self.get(b, lay), *node.inputs[2:]),
                            outputs=(self.produced(y, lay),))

    def qpool(self, node: Node) -> Node | None:
        """QAvgPool reads an input produced channel-blocked by a QConv as it is and writes
        its output in the same layout (window sums a block at a time, as ``LayoutPool``)."""
        x = node.inputs[0]
        lay = self.layout_of(x)
        if not self.target.int8 or lay == "NCHW":
            return None
        return node.replace(inputs=(self.get(x, lay),), attrs=dict(node.attrs, data_layout=lay),
                            outputs=(self.produced(node.outputs[0], lay),))

    def pool(self, node: Node) -> Node | None:
        x = node.inputs[0]
        if x.rank != 4 or len(node.outputs) != 1:
            return None
        lay = self.target.data_layout(x.shape[1])
        attrs = dict(node.attrs, pool=node.op, layout=lay)
        out = self.produced(node.outputs[0], lay)
        return Node("LayoutPool", node.name, (self.get(x, lay),), (out,), attrs)

    def follow(self, node: Node) -> Node | None:
        y = node.outputs[0]
        live = [v for v in node.inputs if v is not None and not v.is_constant]
        if len(node.outputs) != 1 or y.rank != 4 or any(v.shape != y.shape for v in live):
            return None
        if not any(self.layout_of(v) != "NCHW" for v in live):
            return None
        lay = self.target.data_layout(y.shape[1])
        ins = []
        for v in node.inputs:
            if v is None or not v.is_constant:
                ins.append(None if v is None else self.get(v, lay))
                continue
            c = self.constant(v, y, lay)
            if c is None:
                return None
            ins.append(c)
        return node.replace(inputs=tuple(ins), outputs=(self.produced(y, lay),))

    def concat(self, node: Node) -> Node | None:
        """Channel concat in the layout of its inputs, when all share one form: NHWC
        (axis 3), or NCHW{b}c with the same block for every input and the output."""
        y = node.outputs[0]
        if y.rank != 4 or int(node.attrs["axis"]) not in (1, -3) or \
                any(v is None or v.is_constant for v in node.inputs) or \
                all(self.layout_of(v) == "NCHW" for v in node.inputs):
            return None
        lay = self.target.data_layout(y.shape[1])
        if any(self.target.data_layout(v.shape[1]) != lay for v in node.inputs):
            return None
        ins = tuple(self.get(v, lay) for v in node.inputs)
        attrs = dict(node.attrs, axis=3 if lay == "NHWC" else 1)
        return node.replace(inputs=ins, outputs=(self.produced(y, lay),), attrs=attrs)

    def pad(self, node: Node) -> Node | None:
        """A spatial ``Pad`` (nothing added to N or C, constant pads, no ``axes``) follows
        its input: TensorFlow exports pad before most convolutions."""
        x, pads = node.inputs[0], node.input(1)
        if x.rank != 4 or pads is None or not pads.is_constant or node.input(3) is not None \
                or self.layout_of(x) == "NCHW" or len(node.outputs) != 1:
            return None
        p = [int(v) for v in pads.data]
        if p[0] or p[1] or p[4] or p[5]:
            return None
        lay = self.target.data_layout(x.shape[1])
        (h0, w0), (h1, w1) = p[2:4], p[6:8]
        new = [0, h0, w0, 0, 0, h1, w1, 0] if lay == "NHWC" else \
            [0, 0, h0, w0, 0, 0, 0, h1, w1, 0]
        new_pads = Value.constant(self.namer(f"{pads.name}_{lay}"), np.array(new, np.int64))
        ins = (self.get(x, lay), new_pads) + tuple(node.inputs[2:])
        return node.replace(inputs=ins, outputs=(self.produced(node.outputs[0], lay),))

    def constant(self, c: Value, y: Value, layout: str) -> Value | None:
        """A broadcasting constant operand rewritten for ``layout`` (or ``None``)."""
        if c.size == 1:
            return c  # broadcasts the same in every layout
        if c.rank > 4:
            return None
        data = c.data.reshape((1,) * (4 - c.rank) + c.shape)
        if data.shape[1] == 1 and layout != "NHWC":
            data = data[..., None]  # (n, 1, h, w, 1): broadcasts over both channel axes
        else:
            full = tuple(d if d == 1 else y.shape[i] for i, d in enumerate(data.shape))
            if full[1] != y.shape[1]:
                return None
            data = to_layout(data, layout)
        return Value.constant(self.namer(f"{c.name}_{layout}"), data)

    def run(self) -> Graph:
        rules = {"conv": self.conv, "pool": self.pool, "follow": self.follow,
                 "concat": self.concat, "pad": self.pad, "qconv": self.qconv,
                 "qpool": self.qpool, "qadd": self.qadd}
        if self.target.kind == "nchw":  # only the first convolution's NHWC input
            rules = {"qconv": self.qconv}
        for node in self.graph.nodes:
            rule = rules.get(_preference(node.op))
            new = rule(node) if rule is not None else None
            if new is None:  # NCHW-only: every input back in the model's layout
                ins = tuple(v if v is None or v.is_constant else self.get(v, "NCHW")
                            for v in node.inputs)
                new = node.replace(inputs=ins)
            self.nodes.append(new)
        outputs = [v if v.is_constant or v in self.graph.inputs else self.get(v, "NCHW")
                   for v in self.graph.outputs]
        return self.graph.replace(nodes=self.nodes, outputs=outputs)


def transform_layout(graph: Graph, target_layout: str | LayoutTarget = "nchw") -> Graph:
    """Rewrite ``graph`` so convolutions, pools and element-wise ops run in the target's
    preferred layout (see the module docstring).

    Before / after (``target_layout="nchw8c"``)::

        graph g(%x: float32[1, 3, 8, 8]) -> (%y: float32[1, 16, 8, 8]) {
          const %w: float32[16, 3, 3, 3]
          %c: float32[1, 16, 8, 8] = Conv(%x, %w, pads=[1, 1, 1, 1])  # conv
          %y: float32[1, 16, 8, 8] = Relu(%c)  # relu
        }
        graph g(%x: float32[1, 3, 8, 8]) -> (%y: float32[1, 16, 8, 8]) {
          const %w_OIHW3i8o: float32[2, 1, 3, 3, 3, 8]
          %x_NCHW3c: float32[1, 1, 8, 8, 3] = LayoutTransform(%x, dst_layout='NCHW3c', ...)
          %c_NCHW8c: float32[1, 2, 8, 8, 8] = LayoutConv(%x_NCHW3c, %w_OIHW3i8o, ...)  # conv
          %y_NCHW8c: float32[1, 2, 8, 8, 8] = Relu(%c_NCHW8c)  # relu
          %y: float32[1, 16, 8, 8] = LayoutTransform(%y_NCHW8c, dst_layout='NCHW', ...)
        }

    Example::

        >>> import numpy as np
        >>> x, c, y = (Value("x", (1, 3, 8, 8), "float32"), Value("c", (1, 16, 8, 8), "float32"),
        ...            Value("y", (1, 16, 8, 8), "float32"))
        >>> w = Value.constant("w", np.ones((16, 3, 3, 3), np.float32))
        >>> g = Graph("g", [x], [y], [Node("Conv", "conv", [x, w], [c], {"pads": (1, 1, 1, 1)}),
        ...                           Node("Relu", "relu", [c], [y])])
        >>> [n.op for n in transform_layout(g, "nchw8c").nodes]
        ['LayoutTransform', 'LayoutConv', 'Relu', 'LayoutTransform']
    """
    target = parse_layout_target(target_layout)
    if target.kind == "nchw" and not target.nhwc_qconv:
        return graph
    return _Rewriter(graph, target).run()
