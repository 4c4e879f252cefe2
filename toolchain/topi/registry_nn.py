"""Graph op → compute for the NN ops: Conv, ConvTranspose, MatMul, Gemm, pooling,
normalisations and softmax (see :mod:`toolchain.topi.registry` for the conventions).
"""

from __future__ import annotations

from toolchain import te
from toolchain.graph.ops.nn_common import window_geometry
from toolchain.graph.ops.nn_ext import col2im_plan
from toolchain.graph.ops.pool_ext import unpool_geometry
from toolchain.topi import pool_ext
from toolchain.topi import transform as tf
from toolchain.topi.nn import attention, einsum, grid_sample, norm, norm_ext, pooling, softmax
from toolchain.topi.nn import conv2d as cv
from toolchain.topi.nn import conv2d_transpose as cvt
from toolchain.topi.nn import conv_nd as cvnd
from toolchain.topi.nn import dense as dn
from toolchain.topi.nn import winograd as wg
from toolchain.topi.nn.conv2d_gemm import conv2d_nchw_im2col
from toolchain.topi.registry import ComputeFn, Ctx


def _spatial(ctx: Ctx, nsp: int) -> tuple[list[int], list[int], list[int]]:
    a = ctx.attrs
    return (list(a["strides"] or [1] * nsp), list(a["dilations"] or [1] * nsp),
            list(a["pads"] or [0] * 2 * nsp))


def _conv(ctx: Ctx) -> list[te.Tensor]:
    xs, ws = ctx.shape(0), ctx.shape(1)
    nsp = len(xs) - 2
    strides, dil, pads = _spatial(ctx, nsp)
    geom = window_geometry(xs[2:], ws[2:], strides=strides, dilations=dil, pads=pads,
                           auto_pad=ctx.attrs["auto_pad"])
    algo = ctx.options.get("algorithm", "direct")
    if algo not in ("direct", "winograd2", "winograd4", "nchwc", "im2col"):
        raise ctx.unsupported(f"algorithm {algo!r} is not one of direct, winograd2, "
                              "winograd4, nchwc, im2col")
    if nsp != 2 and algo != "direct":
        raise ctx.unsupported(f"algorithm {algo!r} needs a 2-D convolution")
    if nsp == 2:
        padding = (geom.pads_begin[0], geom.pads_begin[1], geom.pads_end[0], geom.pads_end[1])
        if algo.startswith("winograd"):
            y = _conv_winograd(ctx, int(algo[-1]), padding, strides, dil)
        elif algo == "nchwc":
            y = _conv_nchwc(ctx, padding, strides, dil)
        elif algo == "im2col":  # the explicit GEMM of the tensor-core convolution
            if ctx.attrs["group"] != 1:
                raise ctx.unsupported(f"algorithm 'im2col' needs group 1, got "
                                      f"{ctx.attrs['group']}")
            y = conv2d_nchw_im2col(ctx.tensor(0), ctx.tensor(1), strides, padding, dil,
                                   pixel_multiple=ctx.options.get("pixel_multiple", 1),
                                   window_multiple=ctx.options.get("window_multiple", 1),
                                   channel_multiple=ctx.options.get("channel_multiple", 1))
        else:
            y = cv.conv2d_nchw(ctx.tensor(0), ctx.tensor(1), strides, padding, dil,
                               ctx.attrs["group"])
    else:
        y = cvnd.conv_nd(ctx.tensor(0), ctx.tensor(1), strides,
                         list(geom.pads_begin) + list(geom.pads_end), dil, ctx.attrs["group"])
    bias = ctx.opt_tensor(2)
    return [cv.bias_add(y, bias) if bias is not None else y]


def _conv_winograd(ctx: Ctx, m: int, padding: tuple[int, int, int, int], strides: list[int],
                   dil: list[int]) -> te.Tensor:
    ws = ctx.shape(1)
    if tuple(ws[2:]) != (3, 3) or strides != [1, 1] or dil != [1, 1] or ctx.attrs["group"] != 1:
        raise ctx.unsupported(f"Winograd F({m}x{m}, 3x3) needs a 3x3 kernel, stride 1, "
                              f"dilation 1 and group 1; got kernel {list(ws[2:])}, strides "
                              f"{strides}, dilations {dil}, group {ctx.attrs['group']}; use "
                              "algorithm='direct'")
    u = ctx.packed_tensor(1, lambda w: wg.winograd_weight_transform(w, m), "Winograd")
    return wg.conv2d_winograd_nchw(ctx.tensor(0), u, m, padding)


def _conv_nchwc(ctx: Ctx, padding: tuple[int, int, int, int], strides: list[int],
                dil: list[int]) -> te.Tensor:
    cb, ob = ctx.options.get("block", (8, 8))
    c, m = ctx.shape(0)[1], ctx.shape(1)[0]
    g = ctx.attrs["group"]
    ib = cb if g == 1 else (1 if c // g == 1 else cb)
    if g > 1 and (c % cb or m % ob or (c // g) % ib):
        raise ctx.unsupported(f"NCHW[x]c with group {g} needs channel counts ({c} in, {m} "
                              f"out) divisible by the blocks {cb}, {ob}; use algorithm='direct'")
    w = ctx.packed_tensor(1, lambda a: tf.pack_kernel_nchwc(a, ib, ob), "NCHW[x]c")
    x = tf.layout_transform(ctx.tensor(0), "NCHW", f"NCHW{cb}c")
    y = cv.conv2d_nchwc(x, w, strides, padding, dil, g)
    return tf.layout_transform(y, f"NCHW{ob}c", "NCHW", channels=m)


def _convt_out(ctx: Ctx, nsp: int) -> tuple[list[int], list[int]]:
    """(output spatial size, begin pads) of a ConvTranspose, by the ONNX rules."""
    a = ctx.attrs
    xs, ws = ctx.shape(0), ctx.shape(1)
    strides, dil, pads = _spatial(ctx, nsp)
    opad = list(a["output_padding"] or [0] * nsp)
    full = [strides[i] * (xs[2 + i] - 1) + opad[i] + (ws[2 + i] - 1) * dil[i] + 1
            for i in range(nsp)]
    out = list(ctx.node.outputs[0].shape[2:])
    if a["output_shape"] or a["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f - o for f, o in zip(full, out, strict=True)]
        if a["auto_pad"] == "SAME_UPPER":
            return out, [t // 2 for t in totals]
        return out, [t - t // 2 for t in totals]
    if a["auto_pad"] == "VALID":
        return out, [0] * nsp
    return out, pads[:nsp]


def _conv_transpose(ctx: Ctx) -> list[te.Tensor]:
    nsp = len(ctx.shape(0)) - 2
    strides, dil, _ = _spatial(ctx, nsp)
    out, pb = _convt_out(ctx, nsp)
    if nsp == 2 and min(pb) >= 0:
        y = cvt.conv2d_transpose_nchw(ctx.tensor(0), ctx.tensor(1), strides,
                                      (pb[0], pb[1], 0, 0), dil, ctx.attrs["group"],
                                      out_hw=out)
    else:  # other ranks, and negative begin pads (output_shape beyond the full result)
        y = cvnd.conv_transpose_nd(ctx.tensor(0), ctx.tensor(1), out, pb, strides, dil,
                                   ctx.attrs["group"])
    bias = ctx.opt_tensor(2)
    return [cv.bias_add(y, bias) if bias is not None else y]


def _matmul(ctx: Ctx) -> list[te.Tensor]:
    return [dn.matmul(ctx.tensor(0), ctx.tensor(1))]


def _gemm(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [dn.gemm(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2), a["alpha"], a["beta"],
                    bool(a["transA"]), bool(a["transB"]))]


def _pool_params(ctx: Ctx) -> tuple[list[int], list[int], list[int], list[int]]:
    a = ctx.attrs
    kernel = list(a["kernel_shape"])
    nsp = len(kernel)
    strides, dil, pads = _spatial(ctx, nsp)
    if a["auto_pad"] != "NOTSET":
        geom = window_geometry(ctx.shape(0)[2:], kernel, strides=strides, dilations=dil,
                               pads=pads, auto_pad=a["auto_pad"])
        pads = list(geom.pads_begin) + list(geom.pads_end)
    return kernel, strides, dil, pads


def _maxpool(ctx: Ctx) -> list[te.Tensor]:
    kernel, strides, dil, pads = _pool_params(ctx)
    ceil = bool(ctx.attrs["ceil_mode"]) and ctx.attrs["auto_pad"] == "NOTSET"
    x = ctx.tensor(0)
    y = pooling.pool(x, "max", kernel, strides, dil, pads, ceil)
    if len(ctx.node.outputs) == 1:
        return [y]
    return [y, pooling.max_pool_indices(x, y, kernel, strides, dil, pads, ceil,
                                        ctx.attrs["storage_order"])]


def _avgpool(ctx: Ctx) -> list[te.Tensor]:
    kernel, strides, dil, pads = _pool_params(ctx)
    a = ctx.attrs
    ceil = bool(a["ceil_mode"]) and a["auto_pad"] == "NOTSET"
    return [pooling.pool(ctx.tensor(0), "avg", kernel, strides, dil, pads, ceil,
                         bool(a["count_include_pad"]))]


def _lppool(ctx: Ctx) -> list[te.Tensor]:
    kernel, strides, dil, pads = _pool_params(ctx)
    a = ctx.attrs
    ceil = bool(a["ceil_mode"]) and a["auto_pad"] == "NOTSET"
    return [norm_ext.lp_pool(ctx.tensor(0), a["p"], kernel, strides, dil, pads, ceil)]


def _global_lp_pool(ctx: Ctx) -> list[te.Tensor]:
    return [norm_ext.lp_pool(ctx.tensor(0), ctx.attrs["p"], list(ctx.shape(0)[2:]))]


def _max_unpool(ctx: Ctx) -> list[te.Tensor]:
    shape = ctx.const(2, "output_shape")
    out, strides, pads = unpool_geometry(ctx.node, ctx.shape(0), ctx.attrs, shape)
    return [pool_ext.max_unpool(ctx.tensor(0), ctx.tensor(1), ctx.attrs["kernel_shape"],
                                strides, pads, out, exact=shape is None)]


def _einsum(ctx: Ctx) -> list[te.Tensor]:
    xs = [ctx.tensor(i) for i in range(len(ctx.node.inputs))]
    shapes = [ctx.shape(i) for i in range(len(ctx.node.inputs))]
    return [einsum.einsum(ctx.attrs["equation"], xs, shapes)]


def _grid_sample(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [grid_sample.grid_sample(ctx.tensor(0), ctx.tensor(1), a["mode"], a["padding_mode"],
                                    bool(a["align_corners"]))]


def _affine_grid(ctx: Ctx) -> list[te.Tensor]:
    size = ctx.ints(1, "size")
    assert size is not None
    return [grid_sample.affine_grid(ctx.tensor(0), tuple(size[2:]),
                                    bool(ctx.attrs["align_corners"]))]


def _col2im(ctx: Ctx) -> list[te.Tensor]:
    image, block = ctx.ints(1, "image_shape"), ctx.ints(2, "block_shape")
    assert image is not None and block is not None
    plan = col2im_plan(ctx.node.describe(), ctx.shape(0), image, block, ctx.attrs)
    return [norm_ext.col2im(ctx.tensor(0), plan)]


def _lrn(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [norm_ext.lrn(ctx.tensor(0), a["size"], a["alpha"], a["beta"], a["bias"])]


def _lp_normalization(ctx: Ctx) -> list[te.Tensor]:
    return [norm_ext.lp_normalize(ctx.tensor(0), ctx.attrs["axis"], ctx.attrs["p"])]


def _global_pool(ctx: Ctx) -> list[te.Tensor]:
    kind = "max" if ctx.node.op == "GlobalMaxPool" else "avg"
    return [pooling.global_pool(ctx.tensor(0), kind)]


def _batchnorm(ctx: Ctx) -> list[te.Tensor]:
    return [norm.batch_norm_inference(*(ctx.tensor(i) for i in range(5)),
                                      epsilon=ctx.attrs["epsilon"])]


_STASH = {1: "float32", 10: "float16", 11: "float64"}


def _layernorm(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    outs = norm.layer_norm(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2), a["axis"],
                           a["epsilon"], _STASH[int(a["stash_type"])])
    return list(outs[: len(ctx.node.outputs)])


def _instancenorm(ctx: Ctx) -> list[te.Tensor]:
    return [norm.instance_norm(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                               ctx.attrs["epsilon"])]


def _softmax(ctx: Ctx) -> list[te.Tensor]:
    fn = softmax.log_softmax if ctx.node.op == "LogSoftmax" else softmax.softmax
    return [fn(ctx.tensor(0), ctx.attrs["axis"])]


def _fused_attention(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [attention.fused_attention(
        ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), ctx.opt_tensor(3), scale=a["scale"],
        softcap=a["softcap"], left=a["left"], right=a["right"], fill=a["fill"],
        empty=a["empty"])]


#: graph op -> its compute: the table :func:`toolchain.topi.registry.computes` reads
COMPUTES: dict[str, ComputeFn] = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "MaxPool": _maxpool,
    "AveragePool": _avgpool,
    "LpPool": _lppool,
    "GlobalLpPool": _global_lp_pool,
    "MaxUnpool": _max_unpool,
    "Einsum": _einsum,
    "GridSample": _grid_sample,
    "AffineGrid": _affine_grid,
    "Col2Im": _col2im,
    "LRN": _lrn,
    "LpNormalization": _lp_normalization,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "BatchNormalization": _batchnorm,
    "LayerNormalization": _layernorm,
    "InstanceNormalization": _instancenorm,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "FusedAttention": _fused_attention,
}
