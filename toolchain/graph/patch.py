"""Patch stages: a chain of convolutions run tile by tile (MCUNetV2-style patch inference).

The first layers of a CNN hold its largest activations.  A **patch stage** runs a chain of
them (kernels whose one data input is the previous one's output, each a single 2-D
convolution: dense, depthwise or 1 x 1, stride and dilation any) once per tile of the
chain's *output*: for each tile it computes the region of every earlier tensor the tile
needs (the receptive field: the halo, recomputed by neighbouring tiles), copies the
region of the chain's input into a small buffer, runs each layer on its tile into the
next small buffer, and copies the last tile into the full output.  The full-resolution
tensors inside the chain never exist; the arena holds the chain's input and output, and
two tile buffers (one read, one written: ping-pong) instead.

The tile kernels are the layers' own kernels compiled for the tile's shapes without
padding: the padding is in the tile buffers.  Where a tile's region lies outside its
tensor (the image border) the buffer holds the padding value of the layer that reads it
(the input zero point of an int8 QConv, 0.0 for a float Conv): the gather writes it, and
after each layer the rows and columns outside the next tensor are set to it again (the
kernel computed values there from the halo).  Inside the image the halo holds real
values, so the result is the unpatched one exactly (int8: bit for bit).

Geometry, per axis: the output is cut into ``g`` tiles of ``t = ceil(n / g)`` (the last one
moved back to end at ``n``: every tile has the same shape, one compiled kernel a layer);
an output span ``[a, a + t)`` of a layer with stride ``s``, window ``k``, dilation ``d`` and
leading pad ``p`` reads the input span ``[a s - p, a s - p + (t - 1) s + (k - 1) d + 1)``.

Example: two 3 x 3 convolutions (padding 1) of an 8 x 8 image, the second of stride 2, in
2 x 2 tiles of the 4 x 4 output: each tile needs 5 x 5 of the middle tensor and 7 x 7 of
the input; the tiles start at input row -2 and 2 (rows -2, -1 are padding)::

    >>> conv = PatchLayer("c1", (4, 8, 8), (4, 8, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1),
    ...                   0, 1, "NCHW", 36)
    >>> conv2 = PatchLayer("c2", (4, 8, 8), (4, 4, 4), (3, 3), (2, 2), (1, 1),
    ...                    (1, 1, 1, 1), 0, 1, "NCHW", 36)
    >>> stage = PatchStage("patch_0", (conv, conv2), (2, 2))
    >>> stage.tile_sizes()
    [(7, 7), (5, 5), (2, 2)]
    >>> stage.origins(0)
    [[-2, -1, 0], [2, 3, 2]]
    >>> stage.slot_bytes(), round(stage.overhead(), 3)
    ((196, 100), 0.45)

The same chain in 2 x 1 full-width tiles, ending in a global average pool of its 4 x 4 x 4
output: the tiles hold the real columns only (the kernels keep their column padding), and
a 16-byte int32 accumulator replaces the output::

    >>> pool = PoolEnd("gap", 4, 0, 1 << 30, -4, 0, -128, 127, True)
    >>> rows = PatchStage("patch_0", (conv, conv2), (2, 1), pool=pool)
    >>> rows.tile_sizes(), rows.origins(1), rows.acc_bytes()
    ([(7, 8), (5, 8), (2, 4)], [[0, 0, 0]], 16)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Node, Value

#: ops a patch layer's kernel may be (one node in its fused group)
CONV_OPS = ("QConv", "Conv", "LayoutConv")


@dataclass(frozen=True)
class PatchLayer:
    """One convolution of a patch stage: its fused node, NCHW shapes without the batch
    (``in_shape``, ``out_shape`` stay (C, H, W) when the kernel reads or writes NHWC:
    ``in_layout``, ``out_layout``), window, strides,
    dilations, ONNX pads ``(top, left, bottom, right)``, the padding byte ``fill`` (each
    element of the padding is this byte repeated), the element size and the multiply-adds
    per output pixel (every channel)."""

    node: str
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    window: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]
    fill: int
    itemsize: int
    in_layout: str
    macs_per_pixel: int
    out_layout: str = "NCHW"

    def span(self, axis: int, start: int, size: int) -> tuple[int, int]:
        """(start, size) of the input span an output span of ``axis`` (0: rows) reads."""
        s, k, d = self.strides[axis], self.window[axis], self.dilations[axis]
        return start * s - self.pads[axis], (size - 1) * s + (k - 1) * d + 1

    @property
    def padded(self) -> bool:
        return any(self.pads)


@dataclass(frozen=True)
class PoolEnd:
    """A global int8 average pool (``QAvgPool`` over the whole last tensor) that ends a
    stage: per tile the stage adds the tile's own share of each channel's ``x - x_zp`` to
    an int32 accumulator, and after the last tile requantises it as ``QAvgPool`` does
    (:func:`toolchain.quantize.fixed_point.requantize`, then ``+ y_zp``, clamped)."""

    node: str
    channels: int
    x_zero_point: int
    multiplier: int
    shift: int
    y_zero_point: int
    out_min: int
    out_max: int
    signed: bool


@dataclass(frozen=True)
class PatchStage:
    """A chain of :class:`PatchLayer` run per tile of a ``grid`` (rows, columns) of the last
    layer's output; ``name`` is the stage's node name in the graph."""

    name: str
    layers: tuple[PatchLayer, ...]
    grid: tuple[int, int]
    #: the node of an NHWC -> NCHW transpose in front of the first layer that the stage
    #: takes in ("": none): the gather reads the NHWC tensor and writes NCHW tiles, and
    #: the transposed copy never exists (see :func:`lead_in`)
    absorbs: str = ""
    #: the global average pool the stage ends in (None: it writes the last layer's output)
    pool: PoolEnd | None = None

    def __post_init__(self) -> None:
        out = self.layers[-1].out_shape
        if not (1 <= self.grid[0] <= out[1] and 1 <= self.grid[1] <= out[2]):
            raise OptionError(f"patch grid {self.grid} does not fit the output {out}")

    @property
    def full_rows(self) -> bool:
        """One tile a row of the grid (``grid[1] == 1``): every tile spans its tensors'
        columns, so the tile kernels keep the layers' left and right padding and the tile
        buffers hold the real columns only."""
        return self.grid[1] == 1

    def acc_bytes(self, alignment: int = 1) -> int:
        """Bytes of the pool's int32 accumulator (0 without a pool)."""
        return 0 if self.pool is None else -(-4 * self.pool.channels // alignment) * alignment

    def tile_out(self) -> tuple[int, int]:
        """The output tile's rows and columns."""
        _, h, w = self.layers[-1].out_shape
        return -(-h // self.grid[0]), -(-w // self.grid[1])

    def tile_sizes(self) -> list[tuple[int, int]]:
        """(rows, columns) of the tile of each tensor: the chain's input first, its output
        last."""
        sizes = [self.tile_out()]
        for layer in reversed(self.layers):
            h, w = sizes[0]
            cols = layer.in_shape[2] if self.full_rows else layer.span(1, 0, w)[1]
            sizes.insert(0, (layer.span(0, 0, h)[1], cols))
        return sizes

    def origins(self, axis: int) -> list[list[int]]:
        """Per tile along ``axis`` (0: rows), the start of its span in each tensor (the
        chain's input first); starts below 0 lie in the padding."""
        n = self.layers[-1].out_shape[1 + axis]
        t = self.tile_out()[axis]
        if axis == 1 and self.full_rows:
            return [[0] * (len(self.layers) + 1)]
        sizes = [s[axis] for s in self.tile_sizes()]
        out = []
        for g in range(self.grid[axis]):
            starts = [min(g * t, n - t)]
            for layer, size in zip(reversed(self.layers), reversed(sizes[1:]), strict=True):
                starts.insert(0, layer.span(axis, starts[0], size)[0])
            out.append(starts)
        return out

    def buffer_bytes(self) -> list[int]:
        """Bytes of each tile buffer (the chain's input tile first)."""
        chans = [self.layers[0].in_shape[0], *(x.out_shape[0] for x in self.layers)]
        items = [self.layers[0].itemsize, *(x.itemsize for x in self.layers)]
        return [c * h * w * i for c, (h, w), i in zip(chans, self.tile_sizes(), items,
                                                        strict=True)]

    def slot_bytes(self, alignment: int = 1) -> tuple[int, int]:
        """The two ping-pong buffers: tensor ``i``'s tile lives in slot ``i % 2``."""
        sizes = [-(-b // alignment) * alignment for b in self.buffer_bytes()]
        return max(sizes[0::2]), max(sizes[1::2])

    def macs(self) -> int:
        """Multiply-adds of the patched run (every tile, halos and border included)."""
        tiles = self.grid[0] * self.grid[1]
        return sum(tiles * h * w * x.macs_per_pixel
                   for x, (h, w) in zip(self.layers, self.tile_sizes()[1:], strict=True))

    def full_macs(self) -> int:
        """Multiply-adds of the chain run whole."""
        return sum(x.out_shape[1] * x.out_shape[2] * x.macs_per_pixel for x in self.layers)

    def overhead(self) -> float:
        """Extra multiply-adds of the patched run, as a fraction of the whole run's."""
        return self.macs() / self.full_macs() - 1.0

    def describe(self) -> str:
        """One line for compile summaries."""
        th, tw = self.tile_out()
        return (f"patch stage {self.name}: {len(self.layers)} layers "
                f"({self.layers[0].node} .. {self.layers[-1].node}), "
                f"{self.grid[0]}x{self.grid[1]} tiles of {th}x{tw} output pixels, "
                f"input tile {self.tile_sizes()[0][0]}x{self.tile_sizes()[0][1]}"
                f"{f' (gathered from NHWC: {self.absorbs} taken in)' if self.absorbs else ''}"
                f"{', summed into the pool ' + self.pool.node if self.pool else ''}, "
                f"+{self.overhead():.1%} MACs")

    def halo(self) -> tuple[int, int]:
        """Rows and columns of the chain's input a tile reads beyond its own share (the
        output tile times the chain's total stride): what neighbouring tiles recompute."""
        sy = sx = 1
        for x in self.layers:
            sy, sx = sy * x.strides[0], sx * x.strides[1]
        (ih, iw), (th, tw) = self.tile_sizes()[0], self.tile_out()
        return ih - th * sy, max(iw - tw * sx, 0)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``metadata.json``'s ``patch_stages``)."""
        sizes = self.tile_sizes()
        return {"name": self.name, "layers": [x.node for x in self.layers],
                **({"absorbs": self.absorbs} if self.absorbs else {}),
                **({"pool": self.pool.node} if self.pool else {}),
                "grid": list(self.grid), "tile": list(self.tile_out()),
                "tile_sizes": [list(s) for s in sizes],
                "halo": list(self.halo()),
                "buffer_bytes": self.buffer_bytes(), "macs": self.macs(),
                "full_macs": self.full_macs(), "extra_macs": round(self.overhead(), 6)}


#: elementwise ops a patch layer's kernel may apply after its convolution (with constant
#: scalar operands only: a tile changes no broadcast)
POINTWISE_OPS = ("Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh")


def _one_conv(node: Node) -> Node | None:
    """The convolution a fused node is made of (then only pointwise ops with constant
    scalar operands, each on the previous one's output), or None."""
    if node.op != "Fused" or len(node.outputs) != 1:
        return None
    inner: Graph = node.attrs["graph"]
    if not inner.nodes or inner.nodes[0].op not in CONV_OPS:
        return None
    conv = inner.nodes[0]
    prev = conv.outputs[0]
    for n in inner.nodes[1:]:
        extra = [v for v in n.inputs[1:] if v is not None]
        if (n.op not in POINTWISE_OPS or n.inputs[0] is not prev or len(n.outputs) != 1
                or n.outputs[0].shape != prev.shape
                or any(v.data is None or v.size != 1 for v in extra)):
            return None
        prev = n.outputs[0]
    if prev is not inner.outputs[0]:
        return None
    data = [v for v in node.inputs if v is not None and v.data is None]
    if len(data) != 1 or conv.inputs[0] is not inner.inputs[0] or node.inputs[0] is not data[0]:
        return None  # the data input first, weights (constants) after
    return conv


def _spatial(v: Value, layout: str) -> tuple[int, int, int]:
    """(channels, rows, columns) of a batch-1 4-D tensor in ``layout``."""
    _, a, b, c = (int(d) for d in v.shape)
    return (c, a, b) if layout == "NHWC" else (a, b, c)


def patch_layer(node: Node) -> PatchLayer | None:
    """The :class:`PatchLayer` of a fused node made of one batch-1 2-D convolution (and
    pointwise ops after it), or None when it is not one (another op, several data inputs,
    batch > 1, a layout other than NCHW and NHWC)."""
    conv = _one_conv(node)
    if conv is None:
        return None
    inner: Graph = node.attrs["graph"]
    x, w, y = conv.inputs[0], conv.inputs[1], inner.outputs[0]
    if x is None or w is None or x.rank != 4 or y.rank != 4 or y.shape[0] != 1:
        return None
    layout = conv.attrs.get("data_layout", "NCHW")
    out_layout = conv.attrs.get("out_layout", "NHWC" if conv.op == "LayoutConv" else "NCHW")
    if layout not in ("NCHW", "NHWC") or out_layout not in ("NCHW", "NHWC"):
        return None
    if conv.op == "LayoutConv" and conv.attrs.get("kernel_layout") not in ("OIHW", "OHWI"):
        return None
    (c, h, wd), (m, ho, wo) = _spatial(x, layout), _spatial(y, out_layout)
    pads = tuple(int(p) for p in conv.attrs.get("pads") or (0, 0, 0, 0))
    if len(pads) != 4 or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return None
    if conv.op == "QConv":
        fill = int(conv.attrs.get("x_zero_point", 0)) & 0xFF
    elif x.dtype in ("float32", "float16"):
        fill = 0  # +0.0: every byte zero
    else:
        return None
    if y.dtype != x.dtype:
        return None
    ks = conv.attrs.get("kernel_shape")
    window = (int(ks[0]), int(ks[1])) if ks else (int(w.shape[2]), int(w.shape[3]))
    group = int(conv.attrs.get("group", 1) or 1)
    return PatchLayer(node.name, (c, h, wd), (m, ho, wo), window,
                      tuple(int(s) for s in conv.attrs.get("strides") or (1, 1)),  # type: ignore[arg-type]
                      tuple(int(d) for d in conv.attrs.get("dilations") or (1, 1)),  # type: ignore[arg-type]
                      pads, fill, x.nbytes // x.size,  # type: ignore[arg-type]
                      layout, m * (c // group) * window[0] * window[1], out_layout)


def chains(graph: Graph) -> list[list[Node]]:
    """Maximal runs of consecutive nodes (in ``graph``'s order) that a patch stage may take:
    each a :func:`patch_layer`, each reading the previous one's output, which nothing else
    reads and which is not a graph output, in the layout the previous one writes."""
    readers: dict[int, int] = {}
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None:
                readers[id(v)] = readers.get(id(v), 0) + 1
    outs = {id(v) for v in graph.outputs}
    runs: list[list[Node]] = []
    run: list[Node] = []
    for n in graph.nodes:
        layer = patch_layer(n)
        joins = (layer is not None and run and n.inputs[0] is run[-1].outputs[0]
                 and readers.get(id(run[-1].outputs[0])) == 1
                 and id(run[-1].outputs[0]) not in outs
                 and layer.in_layout == patch_layer(run[-1]).out_layout)  # type: ignore[union-attr]
        if joins:
            run.append(n)
            continue
        if len(run) > 0:
            runs.append(run)
        run = [n] if layer is not None else []
    if run:
        runs.append(run)
    return runs


def lead_in(graph: Graph, first: Node) -> Node | None:
    """The kernel right before ``first`` (a patch layer reading NCHW) that only transposes
    an NHWC tensor to the NCHW one ``first`` alone reads (``Transpose``, perm 0 3 1 2), or
    None: a stage starting at ``first`` may take it in (``PatchStage.absorbs``)."""
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    i = pos.get(first.name, 0)
    layer = patch_layer(first)
    if i == 0 or layer is None or layer.in_layout != "NCHW":
        return None
    prev = graph.nodes[i - 1]
    inner = prev.attrs.get("graph") if prev.op == "Fused" else None
    if (inner is None or len(inner.nodes) != 1 or inner.nodes[0].op != "Transpose"
            or list(inner.nodes[0].attrs.get("perm", ())) != [0, 3, 1, 2]
            or prev.outputs[0] is not first.inputs[0] or len(prev.inputs) != 1
            or prev.outputs[0] in graph.outputs):
        return None
    readers = sum(1 for n in graph.nodes for v in n.inputs if v is prev.outputs[0])
    return prev if readers == 1 else None


def pool_end(graph: Graph, last: Node) -> PoolEnd | None:
    """The :class:`PoolEnd` of the kernel right after ``last`` (a patch layer) when it is
    one int8 global average pool (``QAvgPool``, window the whole tensor, no padding, in
    the layout ``last`` writes) of ``last``'s output, which nothing else reads; else None.
    """
    pos = {n.name: i for i, n in enumerate(graph.nodes)}
    i = pos.get(last.name, len(graph.nodes)) + 1
    layer = patch_layer(last)
    if layer is None or i >= len(graph.nodes):
        return None
    node = graph.nodes[i]
    inner = node.attrs.get("graph") if node.op == "Fused" else None
    if inner is None or len(inner.nodes) != 1 or inner.nodes[0].op != "QAvgPool":
        return None
    pool, y = inner.nodes[0], last.outputs[0]
    a = pool.attrs
    c, h, w = layer.out_shape
    readers = sum(1 for n in graph.nodes for v in n.inputs if v is y)
    if (len(node.inputs) != 1 or node.inputs[0] is not y or readers != 1
            or y in graph.outputs or node.outputs[0] in graph.outputs
            or a.get("data_layout", "NCHW") != layer.out_layout
            or [int(k) for k in a["kernel_shape"]] != [h, w]
            or any(int(p) for p in a.get("pads") or (0, 0, 0, 0))
            or node.outputs[0].size != c or y.dtype not in ("int8", "uint8")):
        return None
    return PoolEnd(node.name, c, int(a.get("x_zero_point", 0)), int(a["multiplier"]),
                   int(a["shift"]), int(a.get("y_zero_point", 0)), int(a.get("out_min", -128)),
                   int(a.get("out_max", 127)), y.dtype == "int8")


def stage_node(stage: PatchStage, nodes: list[Node], arena_without: int | None = None
               ) -> Node:
    """The fused node that runs ``nodes`` (the stage's layers) as one step: its inner graph
    is the layers' fused nodes (so the numpy reference runs it unpatched), its one input
    the chain's input, ``attrs["patch"]`` the stage (``attrs["arena_without"]``: the arena
    of the plan without it, for reports)."""
    inner = Graph(stage.name, [nodes[0].inputs[0]], [nodes[-1].outputs[0]], nodes)
    return Node("Fused", stage.name, (nodes[0].inputs[0],), (nodes[-1].outputs[0],),
                {"graph": inner, "pattern": nodes[0].attrs["pattern"],
                 "kernel": stage.name, "patch": stage, "arena_without": arena_without})


def apply_stage(graph: Graph, stage: PatchStage, arena_without: int | None = None) -> Graph:
    """``graph`` with the stage's layers replaced by one :func:`stage_node`.

    Before (``graph``'s nodes)::  conv_0, dw_1, pw_2, rest...
    After::                       patch_0 (attrs["patch"]: conv_0, dw_1, pw_2 in tiles), rest...
    """
    names = [*([stage.absorbs] if stage.absorbs else []), *(x.node for x in stage.layers),
             *([stage.pool.node] if stage.pool else [])]
    pos = [i for i, n in enumerate(graph.nodes) if n.name in names]
    if len(pos) != len(names) or pos != list(range(pos[0], pos[0] + len(names))):
        raise OptionError(f"{stage.name}: layers {names} are not consecutive nodes")
    nodes = list(graph.nodes)
    node = stage_node(stage, nodes[pos[0]:pos[-1] + 1], arena_without)
    return graph.replace(nodes=[*nodes[:pos[0]], node, *nodes[pos[-1] + 1:]])


def _tile_shape(chw: tuple[int, int, int], layout: str) -> tuple[int, int, int, int]:
    c, h, w = chw
    return (1, h, w, c) if layout == "NHWC" else (1, c, h, w)


def tile_node(node: Node, layer: PatchLayer, index: int, sizes: tuple[tuple[int, int],
              tuple[int, int]], stage: str, full_rows: bool = False) -> tuple[Node, Value]:
    """The layer's fused node on tiles: input ``sizes[0]`` (rows, columns), output
    ``sizes[1]``, no padding (the tile buffer holds it; with ``full_rows``, tiles that
    span every column, the left and right padding stays the kernel's); and the tile
    input's value.

    Before: ``y[1, 8, 48, 48] = QConv(x[1, 3, 96, 96], w, pads=[1, 1, 1, 1], strides=[2, 2])``;
    after (sizes ``(9, 9), (4, 4)``): ``y[1, 8, 4, 4] = QConv(x[1, 3, 9, 9], w, pads=[0, 0, 0, 0],
    strides=[2, 2])``."""
    inner: Graph = node.attrs["graph"]
    conv = inner.nodes[0]
    x = conv.inputs[0]
    assert x is not None
    (ih, iw), (oh, ow) = sizes
    in_shape = _tile_shape((layer.in_shape[0], ih, iw), layer.in_layout)
    out_shape = _tile_shape((layer.out_shape[0], oh, ow), layer.out_layout)
    tx = Value(f"{stage}:tile{index}", in_shape, x.dtype)
    ix = Value(x.name, in_shape, x.dtype)
    last = inner.outputs[0]
    ty = Value(f"{stage}:tile{index + 1}", out_shape, last.dtype)
    new: dict[int, Value] = {id(x): ix}
    body = []
    for n in inner.nodes:
        out = n.outputs[0]
        new[id(out)] = ty if out is last else Value(out.name, out_shape, out.dtype)
        attrs = dict(n.attrs)
        if n is conv:
            attrs["pads"] = ([0, layer.pads[1], 0, layer.pads[3]] if full_rows
                             else [0, 0, 0, 0])
        body.append(n.replace(inputs=tuple(new.get(id(v), v) if v is not None else None
                                           for v in n.inputs),
                              outputs=(new[id(out)],), attrs=attrs))
    name = f"{node.attrs['kernel']}_tile"
    g = Graph(name, [ix, *inner.inputs[1:]], [ty], body)
    return Node("Fused", f"{node.name}:tile", (tx, *node.inputs[1:]), (ty,),
                {"graph": g, "pattern": node.attrs["pattern"], "kernel": name}), tx


__all__ = ["CONV_OPS", "POINTWISE_OPS", "PatchLayer", "PatchStage", "PoolEnd", "apply_stage",
           "chains", "patch_layer", "pool_end", "stage_node", "tile_node"]
