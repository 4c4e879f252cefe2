"""Tensor cores for float16 convolutions: the implicit GEMM on ``wmma`` fragments.

A float16 convolution (2-D, NCHW, groups 1) on a target that declares tensor-core
intrinsics (:func:`~toolchain.schedules.gpu.tensorcore.tensor_core_intrinsics`) is
computed as the explicit im2col GEMM of :mod:`toolchain.topi.nn.conv2d_gemm` (Conv's
``algorithm="im2col"``): ``C[co, p] += W[co, k] * im2col[k, p]`` over the output's flat
pixels ``p`` and the flat window ``k = (ci, kh, kw)``. Its two operand stages are kept
out of the GEMM (:func:`~toolchain.schedules.gpu.gemm.operand_stages`) and become the
shared tiles of the tensor-core GEMM kernel
(:func:`~toolchain.schedules.gpu.tensorcore.tile_gemm_wmma`): per step the block gathers
the ``16 kf x BN`` im2col tile straight from the input into shared memory (the padding is
the stage's guard: a window element outside the image is stored as 0) and the ``BM x 16
kf`` weight tile, the warps multiply them on ``wmma`` fragments with float32 sums, and the
float32 output tile is written out through the reshape to NCHW with the group's tail
(bias, ReLU, residual add) folded in. No im2col matrix exists in memory.

It applies (:func:`tensor_core_conv`) where ``N`` (output pixels) is at least 16; ``M``
(output channels), ``N`` and ``K`` (input channels x window) are rounded up to multiples
of the fragment's 16 where they are not (:func:`gemm_multiples`: the extra weight rows and
columns and im2col rows and columns are zeros by the stages' guards, and the write-back
stores only the real channels and pixels);
elsewhere, and where the target has no tensor cores or the group is not float16, the
convolution keeps the SIMT implicit GEMM (or the generic kernel) exactly as before, and
the schedule's ``info["tensor_cores"]`` says why (for float16 convolutions only;
``metadata.json``'s kernel entry carries it as ``tensor_cores``: ``implicit GEMM on
tensor cores`` or the reason). Its tiles (:func:`conv_wmma_tiles`) are the default point
of the tensor-core search space, so ``kiln tune`` and records decide them as a GEMM's.

Before (a 3 x 3 convolution, 16 -> 16 channels, 8 x 8 pixels, padding 1, bias + ReLU;
the direct form every other path computes)::

    conv2d_nchw[n, co, y, x] += pad[n, rc, y + ry, x + rx] * w[co, rc, ry, rx]

after (``algorithm="im2col"`` and the tensor-core GEMM, abridged)::

    for k_0 in range(...):                                   # steps of 16 kf
        im2col_shared[k, p] = if_then_else(0 <= y < 8 and 0 <= x < 8, x[n, ci, y, x], 0)
        conv_weight_rows_shared[co, k] = w[co, k // 9, k % 9 // 3, k % 3]
        kiln_wmma_f16_..(&conv_weight_rows_shared[..], &im2col_shared[..], &C_frag[..])
    ... C_shared (float32) -> relu(C_shared[co, p] + b[co]) stored at out[n, co, p // 8, p % 8]

>>> from toolchain.target import load_target
>>> tensor_core_conv((1, 16, 8, 8), (16, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1,
...                  "float16", load_target("cuda-sm80"))
''
>>> tensor_core_conv((1, 3, 8, 8), (16, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1,
...                  "float16", load_target("cuda-sm80"))   # K = 27, computed as 32
''
>>> tensor_core_conv((1, 16, 3, 3), (16, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1,
...                  "float16", load_target("cuda-sm80"))
'the im2col GEMM is 16 x 9 x 144 (M x N x K): N below 16'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toolchain.graph.ir import Graph, Node
from toolchain.graph.ops.nn_common import attrs_of, window_geometry
from toolchain.schedules.gpu.tensorcore import (
    WmmaTiles,
    choose_wmma_tiles,
    fetch_vector,
    tensor_core_intrinsics,
)
from toolchain.target import Target
from toolchain.topi.nn.conv2d_gemm import im2col_gemm_shape

#: ``info["tensor_cores"]`` of a convolution on tensor cores
ON_TENSOR_CORES = "implicit GEMM on tensor cores"


def tensor_core_conv(data: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                     pads: Sequence[int], dilations: Sequence[int], group: int, dtype: str,
                     target: Target) -> str:
    """Why a convolution of NCHW ``data`` by OIHW ``kernel`` (``pads`` top, left, bottom,
    right) in ``dtype`` keeps its SIMT kernel on ``target``; ``""`` when it gets the
    tensor-core implicit GEMM."""
    tc = tensor_core_intrinsics(target)
    if tc is None:
        return "the target declares no tensor-core intrinsics"
    if dtype != "float16":
        return f"the convolution is {dtype}, not float16"
    if len(data) != 4 or len(kernel) != 4:
        return f"a {len(data) - 2}-D convolution (tensor cores: 2-D only)"
    if group != 1:
        return f"group {group} (tensor cores: group 1 only; depthwise keeps its kernel)"
    m, n, k = im2col_gemm_shape(data, kernel, tuple(strides), tuple(pads), tuple(dilations))
    if n < tc.n:
        return f"the im2col GEMM is {m} x {n} x {k} (M x N x K): N below {tc.n}"
    return ""


def pixel_multiple(data: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                   pads: Sequence[int], dilations: Sequence[int], target: Target) -> int:
    """What the im2col GEMM's pixel axis ``N`` is rounded up to on ``target``: 1 where it
    is a multiple of the fragment's width already, else that width (ResNet-18's 14 x 14 =
    196 pixels computed as 208, 7 x 7 as 64; the extra columns are zeros, never stored)."""
    return gemm_multiples(data, kernel, strides, pads, dilations, target)["pixel_multiple"]


def gemm_multiples(data: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                   pads: Sequence[int], dilations: Sequence[int], target: Target
                   ) -> dict[str, int]:
    """Conv's ``im2col`` options that round the GEMM up to the fragment's shape on
    ``target``: ``pixel_multiple`` (``N``, the pixels), ``window_multiple`` (``K``, input
    channels x window: the stem's 3 x 7 x 7 = 147 as 160) and ``channel_multiple`` (``M``,
    output channels: 24 as 32), each 1 where the size is a multiple already, else the
    fragment's ``n``, ``k`` or ``m``. The extra rows and columns are zeros (the stages'
    guards), and the padded pixels and channels are never stored.

    >>> from toolchain.target import load_target
    >>> gemm_multiples((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3,) * 4, (1, 1),
    ...                load_target("cuda-sm80"))
    {'pixel_multiple': 1, 'window_multiple': 16, 'channel_multiple': 1}
    """
    tc = tensor_core_intrinsics(target)
    assert tc is not None
    m, n, k = im2col_gemm_shape(data, kernel, tuple(strides), tuple(pads), tuple(dilations))
    return {name: 1 if size % unit == 0 else unit for name, size, unit in
            (("pixel_multiple", n, tc.n), ("window_multiple", k, tc.k),
             ("channel_multiple", m, tc.m))}


def conv_of(node: Node) -> Node | None:
    """The convolution a GEMM group is anchored on (the node itself, or the ``Conv`` inside
    a ``Fused`` group), or None."""
    if node.op == "Conv":
        return node
    if node.op == "Fused":
        inner: Graph = node.attrs["graph"]
        convs = [n for n in inner.nodes if n.op == "Conv"]
        return convs[0] if len(convs) == 1 else None
    return None


def conv_plan(node: Node, target: Target) -> tuple[Node | None, Any]:
    """``(the Conv node to compute as an im2col GEMM, its ConvPlan)`` where the group
    ``node`` gets the tensor-core convolution on ``target`` (Conv's
    ``algorithm="im2col"``, the pixels padded to :func:`pixel_multiple`, the tiles of
    :func:`conv_wmma_tiles`); ``(None, why
    not)`` for a convolution that does not; ``(None, "")`` for a group with no convolution
    or one that is not float16 (nothing changes for those, and nothing is noted)."""
    conv = conv_of(node)
    if conv is None or conv.outputs[0].dtype != "float16":
        return None, ""  # float32 (and integer) convolutions: no note, no change
    x, w = conv.inputs[0], conv.inputs[1]
    if x is None or w is None or not x.shape or not w.shape:
        return None, "the convolution's shapes are unknown"
    a = attrs_of(conv)
    nsp = len(x.shape) - 2
    strides = list(a["strides"] or [1] * nsp)
    dil = list(a["dilations"] or [1] * nsp)
    geom = window_geometry(tuple(x.shape[2:]), tuple(w.shape[2:]), strides=strides,
                           dilations=dil, pads=list(a["pads"] or [0] * 2 * nsp),
                           auto_pad=a["auto_pad"])
    pads = (*geom.pads_begin, *geom.pads_end)
    dtypes = {x.dtype, w.dtype, conv.outputs[0].dtype}
    why = tensor_core_conv(tuple(x.shape), tuple(w.shape), strides, pads, dil,
                           int(a["group"]), dtypes.pop() if len(dtypes) == 1 else "mixed",
                           target)
    if why:
        return None, why
    mult = gemm_multiples(tuple(x.shape), tuple(w.shape), strides, pads, dil, target)
    m, n, k = im2col_gemm_shape(tuple(x.shape), tuple(w.shape), strides, pads, dil)

    def up(size: int, unit: int) -> int:
        return -(-size // unit) * unit

    return conv, ConvPlan({"algorithm": "im2col", **mult},
                          conv_wmma_tiles(up(m, mult["channel_multiple"]),
                                          up(n, mult["pixel_multiple"]),
                                          up(k, mult["window_multiple"]), x.shape[0], target))


@dataclass(frozen=True)
class ConvPlan:
    """The tensor-core convolution of a group: Conv's compute options and the kernel's
    tiles (None: the GEMM's own choice)."""

    options: dict[str, Any]
    tiles: WmmaTiles | None


def conv_wmma_tiles(m: int, n: int, k: int, batch: int, target: Target) -> WmmaTiles | None:
    """The tensor-core tiles of an im2col GEMM ``m x n x k`` (``batch`` images: more
    blocks): :func:`~toolchain.schedules.gpu.tensorcore.choose_wmma_tiles`' (the GEMM's
    default caps), then, while the grid has fewer blocks than the target has SMs, smaller:
    half the fragments across a warp, then down, then the warps across and down (the
    occupancy rule of the SIMT kernels, ``docs/cuda.md``). ResNet-18's 7 x 7 stage (512 x
    64 x 4608) gets 1 x 1 warps of 1 x 1 fragments, 128 blocks, where the GEMM's tiles give
    4; None where no tiles divide the shapes.

    >>> from toolchain.target import load_target
    >>> sm90 = load_target("cuda-sm90")
    >>> conv_wmma_tiles(512, 64, 4608, 1, sm90).label()
    '1x1w.1x1f.kf2.db.p8.v8.async'
    >>> conv_wmma_tiles(64, 3136, 576, 1, sm90).label()   # 196 blocks
    '2x1w.2x1f.kf2.db.p8.v8.async'
    """
    tc = tensor_core_intrinsics(target)
    if tc is None:
        return None
    t = choose_wmma_tiles(m, n, k, tc, target)
    if t is None:
        return None

    def blocks(t: WmmaTiles) -> int:
        return m // (t.wy * t.fm * tc.m) * (n // (t.wx * t.fn * tc.n)) * batch

    while target.sm_count and blocks(t) < target.sm_count:
        knob = next((kb for kb in ("fn", "fm", "wx", "wy") if getattr(t, kb) > 1), None)
        if knob is None:
            break
        t = replace(t, **{knob: getattr(t, knob) // 2})
    vector = fetch_vector(t, tc, target.warp_size or 32)
    return replace(t, vector=vector, async_copy=t.async_copy and vector > 1)


def with_conv_tensor_cores(node: Node, target: Target, build: Callable[..., Any],
                           enabled: bool = True) -> Any:
    """The kernels of group ``node`` (an ``OpSchedule``): a float16 convolution the rule
    takes (:func:`conv_plan`) as the im2col GEMM on tensor cores, ``build(conv, options,
    tiles)``; otherwise, or where that gives no tensor-core kernel, ``build()`` (the group
    as before). ``info["tensor_cores"]``: :data:`ON_TENSOR_CORES` or why not (float16
    convolutions only). ``enabled=False``: never the tensor-core convolution."""
    conv, how = conv_plan(node, target)  # the ConvPlan, or why not
    if conv is not None and not enabled:
        conv, how = None, "tensor-core convolutions turned off (conv_tensor_cores=False)"
    if conv is not None:
        got = build(conv, how.options, how.tiles)
        if got.info["schedule"] == "gpu tensor-core gemm":
            got.info["tensor_cores"] = ON_TENSOR_CORES
            return got
        how = "the im2col GEMM got no tensor-core kernel (its tiles did not fit)"
    got = build()
    if how:
        got.info["tensor_cores"] = str(how)
    return got


def schedule_group(node: Node, target: Target, wmma: WmmaTiles | None,
                   im2col: Node | None = None, options: dict[str, Any] | None = None,
                   default: WmmaTiles | None = None) -> Any:
    """The ``OpSchedule`` of group ``node`` under
    :func:`~toolchain.schedules.gpu.generic.schedule_gpu` with the tiled GEMM
    (:func:`~toolchain.schedules.gpu.gemm.try_tile_gemm`; ``wmma``: its tensor-core tiles);
    ``im2col``: that convolution of the group computed with the compute ``options``
    (Conv's ``algorithm="im2col"``: the explicit im2col GEMM), ``default`` its tensor-core
    tiles (the search space's default point)."""
    import functools

    from toolchain import te
    from toolchain.codegen.names import TE_NAMES, sanitize
    from toolchain.schedules.generic.fused import fused_compute
    from toolchain.schedules.gpu.gemm import operand_stages, try_tile_gemm
    from toolchain.schedules.gpu.generic import schedule_gpu
    from toolchain.schedules.registry import OpSchedule
    from toolchain.topi.registry import node_compute

    if node.op == "Fused":
        fc = fused_compute(node, options=None if im2col is None else
                           im2col_options(im2col, options or {}))
        ins, outs, name = fc.inputs, fc.outputs, node.attrs["kernel"]
        in_vals, out_vals = list(fc.input_values), list(fc.output_values)
    else:
        nc = node_compute(node, **({} if im2col is None else options or {}))
        ins, outs, name = nc.inputs, nc.outputs, node.name
        in_vals, out_vals = list(nc.input_values), list(node.outputs)
    func = te.create_prim_func(ins + outs, name=sanitize(name, **TE_NAMES))
    tiled = try_tile_gemm if wmma is None and default is None else functools.partial(
        try_tile_gemm, wmma=wmma, wmma_default=default)
    sch = schedule_gpu(func, target, tiled=tiled, keep=operand_stages)
    return OpSchedule(sch, in_vals, out_vals, {"schedule": kernel_kind(sch.mod)})


def kernel_kind(func: Any) -> str:
    """The label of a scheduled GPU function: ``"gpu tensor-core gemm"`` (a loop bound to
    a thread, a ``shared`` buffer and a tensorized block), ``"gpu tiled gemm"`` (the first
    two) or ``"gpu generic"``. One walk of the statements; the label was read off the
    printed module (``str(sch.mod)``), which cost a whole print per schedule.

    >>> from toolchain.tir import ir
    >>> kernel_kind(ir.PrimFunc((), ir.Evaluate(ir.IntImm(0, "int32"))))
    'gpu generic'
    """
    from toolchain.tir import ir
    from toolchain.tir.schedule.state import walk

    thread = shared = False
    tensorized = "tensorized" in func.attrs
    for p in func.params:
        shared = shared or (isinstance(p, ir.Buffer) and p.scope == "shared")
    for node, _ in walk(func.body):
        if isinstance(node, ir.For):
            thread = thread or node.kind == "thread_binding"
            tensorized = tensorized or "tensorized" in node.annotations
        elif isinstance(node, ir.Block):
            tensorized = tensorized or "tensorized" in node.annotations
            shared = shared or any(b.scope == "shared" for b in node.alloc_buffers)
        elif isinstance(node, ir.Allocate):
            shared = shared or node.buffer.scope == "shared"
    staged = thread and shared
    return "gpu tensor-core gemm" if tensorized and staged else \
        "gpu tiled gemm" if staged else "gpu generic"


def im2col_options(conv: Node, options: dict[str, Any]) -> Callable[[Node], dict[str, Any]]:
    """``fused_compute``'s per-node options: ``options`` (Conv's ``algorithm="im2col"``
    and its ``pixel_multiple``, ``window_multiple``, ``channel_multiple``) for ``conv``
    alone."""
    return lambda n: dict(options) if n is conv else {}


__all__ = ["ON_TENSOR_CORES", "ConvPlan", "conv_of", "conv_plan", "conv_wmma_tiles",
           "gemm_multiples", "im2col_options", "kernel_kind", "pixel_multiple", "schedule_group",
           "tensor_core_conv", "with_conv_tensor_cores"]
