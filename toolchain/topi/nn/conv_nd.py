"""N-D convolution and transposed convolution in the ``NC*`` layout (1-D, 3-D, …).

The 2-D case has its own, layout-aware definitions in :mod:`.conv2d` and
:mod:`.conv2d_transpose`; these generic ones let every ONNX Conv / ConvTranspose rank have
a compute (the registry uses them for ranks other than 4). Same formulas, one spatial
index per axis:

    conv:  out[n, m, *o] = Σ_{rc, *r} pad[n, g(m)*I + rc, *(o*s + r*d)] * w[m, rc, *r]
    convT: out[n, m, *o] = Σ_{rc, *r} [tap real] x[n, c, *((o + pb - r*d) / s)] * w[c, m', *r]

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 2, 9), name="x"); w = te.placeholder((3, 2, 3), name="w")
    >>> [d.value for d in conv_nd(x, w, strides=(2,), pads=(1, 1)).shape]
    [1, 3, 5]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.nn.conv2d import out_size, pad_spatial
from toolchain.topi.utils import const_shape, scalar, window_index

Expr = ir.PrimExpr


def conv_nd(data: te.Tensor, kernel: te.Tensor, strides: Sequence[int] | None = None,
            pads: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
            groups: int = 1, out_dtype: str | None = None) -> te.Tensor:
    """Grouped N-D convolution: data ``[N, C, *S]``, kernel ``[M, C/groups, *K]``;
    ``pads`` is ``[begin..., end...]``."""
    ds, ks = const_shape(data, "conv_nd"), const_shape(kernel, "conv_nd")
    nsp = len(ds) - 2
    n, c = ds[:2]
    m, i = ks[:2]
    if len(ks) != len(ds) or c % groups or m % groups or c // groups != i:
        raise OptionError(f"conv_nd: data {list(ds)} and kernel {list(ks)} do not match "
                          f"(groups = {groups})")
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    pads = list(pads or [0] * 2 * nsp)
    out = [out_size(ds[2 + a], ks[2 + a], strides[a], dilations[a], pads[a], pads[nsp + a])
           for a in range(nsp)]
    if any(o <= 0 for o in out):
        raise OptionError(f"conv_nd: the kernel {list(ks[2:])} does not fit the padded input "
                          f"{list(ds[2:])}")
    odt = out_dtype or data.dtype
    padded = pad_spatial(data, tuple(range(2, 2 + nsp)), pads[:nsp], pads[nsp:])
    rc = te.reduce_axis((0, i), name="rc")
    r = [te.reduce_axis((0, ks[2 + a]), name=f"r{a}") for a in range(nsp)]
    og = m // groups

    def f(*idx: Expr) -> Expr:
        mm = idx[1]
        ci = rc if groups == 1 else te.floordiv(mm, og) * i + rc
        sp = tuple(window_index(idx[2 + a], strides[a], r[a], dilations[a]) for a in range(nsp))
        return te.sum(te.cast(padded[(idx[0], ci) + sp], odt)
                      * te.cast(kernel[(mm, rc) + tuple(r)], odt), axis=[rc, *r])

    return te.compute((n, m, *out), f, name="conv_nd", tag="conv_nd")


def conv_transpose_nd(data: te.Tensor, kernel: te.Tensor, out_spatial: Sequence[int],
                      pads_begin: Sequence[int], strides: Sequence[int] | None = None,
                      dilations: Sequence[int] | None = None, groups: int = 1,
                      out_dtype: str | None = None) -> te.Tensor:
    """Grouped N-D transposed convolution: data ``[N, C, *S]``, kernel
    ``[C, M/groups, *K]`` (ONNX), output ``[N, M, *out_spatial]``; output cell ``o`` is
    full cell ``o + pads_begin``."""
    ds, ks = const_shape(data, "conv_transpose_nd"), const_shape(kernel, "conv_transpose_nd")
    nsp = len(ds) - 2
    c = ds[1]
    mg = ks[1]
    if ks[0] != c or c % groups:
        raise OptionError(f"conv_transpose_nd: kernel {list(ks)} must have the data's {c} "
                          f"channels first, divisible by groups = {groups}")
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    odt = out_dtype or data.dtype
    cg = c // groups
    rc = te.reduce_axis((0, cg), name="rc")
    r = [te.reduce_axis((0, ks[2 + a]), name=f"r{a}") for a in range(nsp)]

    def f(*idx: Expr) -> Expr:
        mm = idx[1]
        conds, src = [], []
        for a in range(nsp):
            t = idx[2 + a] + pads_begin[a] - r[a] * dilations[a]
            q = te.floordiv(t, strides[a])
            conds += [t >= 0, q < ds[2 + a]]
            if strides[a] > 1:
                conds.append(te.equal(te.floormod(t, strides[a]), 0))
            src.append(q)
        ci = rc if groups == 1 else te.floordiv(mm, mg) * cg + rc
        mi = mm if groups == 1 else te.floormod(mm, mg)
        prod = te.cast(data[(idx[0], ci) + tuple(src)], odt) * te.cast(
            kernel[(ci, mi) + tuple(r)], odt)
        return te.sum(te.if_then_else(te.all(*conds), prod, scalar(0, odt)), axis=[rc, *r])

    return te.compute((ds[0], mg * groups, *out_spatial), f, name="conv_transpose_nd",
                      tag="conv_transpose_nd")
