"""Attention: ONNX ``Attention`` (opset 23–25) and Kiln's one-kernel ``FusedAttention``.

``Attention`` is registered with its shape rule and a numpy reference, for the forms Kiln
compiles: 3-D (``[batch, seq, heads·head_size]`` with ``q_num_heads``/``kv_num_heads``)
or 4-D (``[batch, heads, seq, head_size]``) Q, K, V; multi-head, grouped-query and
multi-query heads; a boolean or additive ``attn_mask`` (its last axis may be shorter than
the key sequence: the rest is masked); ``is_causal``, ``scale``, ``softcap`` and the
``left_window_size``/``right_window_size`` bounds; ``softmax_precision`` (Kiln computes in
at least float32 anyway). A fully masked query row gives a zero row (opset 25's rule).
Nodes that use a KV cache (``past_key``/``past_value``/``present_*``), ``nonpad_kv_seqlen``
or the ``qk_matmul_output`` output are not this op's: the ONNX frontend expands them into
their function body (:func:`covers`).

``FusedAttention(Q, Kt, V, mask?)`` is what the ``fuse_attention`` pass makes of an
``Attention`` node and of the scaled-dot-product pattern exporters write
(``MatMul(Q, Kᵀ) → Div|Mul → Add(mask)|Where(mask) → Softmax → MatMul(·, V)``): Q is
``[B, Hq, Sq, D]``, K comes *transposed* (``[B, Hk, D, Sk]``, what the exported pattern
already holds, and the layout whose rows the kernel reads contiguously), V ``[B, Hk, Sk, Dv]``;
``Hq`` a multiple of ``Hk``. Per row ``i`` of query head ``h``::

    logit[j] = scale · Σ_d Q[h, i, d] · Kt[h / (Hq/Hk), d, j]      (softcap: c·tanh(logit/c))
    logit[j] += mask[..]                       (float mask)
    logit[j] = allowed(i, j) ? logit[j] : fill (bool mask; window: j - i in [-left, right])
    Y[h, i, :] = Σ_j softmax(logit)[j] · V[h / (Hq/Hk), j, :]

``empty`` says what a row whose logits are all ``-inf`` gives: ``"nan"`` (what ``Softmax``
computes, kept for the exported pattern) or ``"zero"`` (``Attention``'s rule).

Example::

    >>> import numpy as np
    >>> q = np.ones((1, 1, 2, 4), np.float32); kt = np.ones((1, 1, 4, 3), np.float32)
    >>> v = np.arange(3, dtype=np.float32).reshape(1, 1, 3, 1)
    >>> get_op = __import__("toolchain.graph.ops", fromlist=["get_op"]).get_op
    >>> ref = get_op("FusedAttention").reference
    >>> ref([q, kt, v], {"scale": 0.5})[0].ravel().tolist()
    [1.0, 1.0]
    >>> ref([q, kt, v], {"scale": 0.5, "right": 0})[0].ravel().tolist()
    [0.0, 0.5]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value
from toolchain.graph.ops.common import check_dtype, defop, input_value
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind

_FLOATS = ("float16", "float32")
#: ``Attention`` inputs and outputs Kiln's form leaves to the ONNX function body
_CACHE_INPUTS = {4: "past_key", 5: "past_value", 6: "nonpad_kv_seqlen"}
_EXTRA_OUTPUTS = {1: "present_key", 2: "present_value", 3: "qk_matmul_output"}


def covers(inputs: Sequence[str], outputs: Sequence[str]) -> bool:
    """Does Kiln's ``Attention`` cover an ONNX node with these input/output names ("" for
    an absent one)? KV-cache inputs and the extra outputs are not covered; such a node is
    expanded into its ONNX function body by the frontend.

    >>> covers(["q", "k", "v"], ["y"]), covers(["q", "k", "v", "", "pk", "pv"], ["y", "a", "b"])
    (True, False)
    """
    return (not any(i < len(inputs) and inputs[i] for i in _CACHE_INPUTS)
            and not any(i < len(outputs) and outputs[i] for i in _EXTRA_OUTPUTS))


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Does ``shape`` broadcast (numpy rules, right-aligned) to ``target`` without
    growing it?

    >>> broadcasts_to((2, 4, 1), (2, 3, 4, 5)), broadcasts_to((3, 1, 1, 1, 1), (2, 3, 4, 5))
    (False, False)
    >>> broadcasts_to((4, 5), (2, 3, 4, 5))
    True
    """
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


# ----------------------------------------------------------------------------- Attention

def attention_dims(node: Node) -> dict[str, int]:
    """Batch, heads, sequence lengths and head sizes of an ``Attention`` node, checked."""
    q, k, v = (input_value(node, i, n) for i, n in enumerate(("Q", "K", "V")))
    a = node.attrs
    rank = len(q.shape)
    if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
        raise ModelError(f"{node.describe()}: Q, K and V must all be 3-D or all 4-D, got "
                         f"shapes {q.shape}, {k.shape}, {v.shape}")
    if rank == 3:
        hq, hk = int(a.get("q_num_heads") or 0), int(a.get("kv_num_heads") or 0)
        if hq <= 0 or hk <= 0:
            raise ModelError(f"{node.describe()}: 3-D Q, K, V need the attributes "
                             "q_num_heads and kv_num_heads (> 0)")
        b, sq, qh = q.shape
        _, sk, kh = k.shape
        if qh % hq or kh % hk or v.shape[2] % hk:
            raise ModelError(f"{node.describe()}: hidden sizes {qh}, {kh}, {v.shape[2]} of "
                             f"Q, K, V are not multiples of q_num_heads {hq} / kv_num_heads "
                             f"{hk}")
        d, dk, dv = qh // hq, kh // hk, v.shape[2] // hk
        kb, vb, vs = k.shape[0], v.shape[0], v.shape[1]
    else:
        b, hq, sq, d = q.shape
        kb, hk, sk, dk = k.shape
        vb, vh, vs, dv = v.shape
        if vh != hk:
            raise ModelError(f"{node.describe()}: K has {hk} heads but V has {vh}")
    if kb != b or vb != b:
        raise ModelError(f"{node.describe()}: batch sizes of Q, K, V differ: {b}, {kb}, {vb}")
    if dk != d:
        raise ModelError(f"{node.describe()}: head size of K ({dk}) differs from Q's ({d})")
    if vs != sk:
        raise ModelError(f"{node.describe()}: K has {sk} positions but V has {vs}")
    if hq % hk:
        raise ModelError(f"{node.describe()}: q_num_heads {hq} is not a multiple of "
                         f"kv_num_heads {hk}")
    return {"rank": rank, "b": b, "hq": hq, "hk": hk, "sq": sq, "sk": sk, "d": d, "dv": dv}


def _attention_infer(node: Node, attrs: Mapping[str, Any]) -> list[TensorType]:
    for i, name in _CACHE_INPUTS.items():
        if node.input(i) is not None:
            raise ModelError(f"{node.describe()}: input {name} (a KV cache) is not supported "
                             "by Kiln's Attention; the ONNX frontend expands such nodes into "
                             "their function body")
    for i, name in _EXTRA_OUTPUTS.items():
        if i < len(node.outputs) and node.outputs[i] is not None:
            raise ModelError(f"{node.describe()}: output {name} is not supported by Kiln's "
                             "Attention; the ONNX frontend expands such nodes into their "
                             "function body")
    dims = attention_dims(node)
    dt = check_dtype(node, input_value(node, 0, "Q"), "input Q", _FLOATS)
    for i, name in ((1, "K"), (2, "V")):
        if input_value(node, i, name).dtype != dt:
            raise ModelError(f"{node.describe()}: {name} has dtype "
                             f"{input_value(node, i, name).dtype}, Q has {dt}")
    mask = node.input(3)
    if mask is not None:
        if mask.dtype not in ("bool", dt):
            raise ModelError(f"{node.describe()}: attn_mask has dtype {mask.dtype}; it must "
                             f"be bool or Q's dtype {dt}")
        full = (dims["b"], dims["hq"], dims["sq"], dims["sk"])
        shape = tuple(mask.shape)
        if not shape or shape[-1] > dims["sk"] or not broadcasts_to(
                shape[:-1] + (1,), full):
            raise ModelError(f"{node.describe()}: attn_mask shape {shape} does not broadcast "
                             f"to (batch, q_num_heads, q_seq, kv_seq) = {full}")
    b, hq, sq, dv = dims["b"], dims["hq"], dims["sq"], dims["dv"]
    out = (b, hq, sq, dv) if dims["rank"] == 4 else (b, sq, hq * dv)
    return [TensorType(out, dt)]


def _window_ok(sq: int, sk: int, left: int, right: int) -> np.ndarray:
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    ok = np.ones((sq, sk), bool)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    return ok


def _softmax_v(logit: np.ndarray, v: np.ndarray, empty: str) -> np.ndarray:
    m = logit.max(axis=-1, keepdims=True)
    if empty == "zero":
        m = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        e = np.exp(logit - m)
        s = e.sum(axis=-1, keepdims=True)
        p = np.where(s == 0, 0.0, e / s) if empty == "zero" else e / s
    return p @ v


def attention_reference(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: Any,
                        attrs: Mapping[str, Any]) -> np.ndarray:
    """``FusedAttention``'s semantics in float64 (see the module docstring)."""
    dt = q.dtype
    q64, kt64, v64 = (np.asarray(a, np.float64) for a in (q, kt, v))
    g = q.shape[1] // kt.shape[1]
    kt64, v64 = np.repeat(kt64, g, axis=1), np.repeat(v64, g, axis=1)
    logit = (q64 @ kt64) * float(attrs["scale"])
    cap = float(attrs.get("softcap") or 0.0)
    if cap > 0:
        logit = cap * np.tanh(logit / cap)
    sq, sk = logit.shape[-2:]
    ok = _window_ok(sq, sk, int(attrs.get("left", -1)), int(attrs.get("right", -1)))
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            ok = ok & mask
        else:
            logit = logit + mask.astype(np.float64)
    fill = float(attrs.get("fill", -math.inf))
    logit = np.where(ok, logit, fill)
    return _softmax_v(logit, v64, str(attrs.get("empty", "nan"))).astype(dt)


def _attention_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    q, k, v, mask = ins[:4]
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    rank = q.ndim
    if rank == 3:
        hq, hk = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
        b = q.shape[0]
        q = q.reshape(b, q.shape[1], hq, -1).transpose(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], hk, -1).transpose(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], hk, -1).transpose(0, 2, 1, 3)
    sk = k.shape[2]
    scale = attrs.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    right = int(attrs.get("right_window_size", -1))
    if int(attrs.get("is_causal", 0)):
        right = 0 if right < 0 else min(right, 0)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape[-1] < sk:  # the missing keys are masked out
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, sk - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_
                          else -np.inf)
    y = attention_reference(q, k.transpose(0, 1, 3, 2), v, mask, {
        "scale": scale, "softcap": attrs.get("softcap", 0.0), "right": right,
        "left": int(attrs.get("left_window_size", -1)), "empty": "zero"})
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return [y]


def _attention_flops(node: Node) -> int:
    d = attention_dims(node)
    pairs = d["b"] * d["hq"] * d["sq"] * d["sk"]
    return pairs * (2 * d["d"] + 2 * d["dv"] + 5)


_ATTENTION = defop(
    "Attention", ("Q", "K", "V", "attn_mask?", "past_key?", "past_value?",
                  "nonpad_kv_seqlen?"),
    PatternKind.OPAQUE, infer=_attention_infer, reference=_attention_ref,
    attrs=(Attr("is_causal", "int", 0, choices=(0, 1)), Attr("kv_num_heads", "int", None),
           Attr("q_num_heads", "int", None), Attr("qk_matmul_output_mode", "int", 0,
                                                  choices=(0, 1, 2, 3)),
           Attr("scale", "float", None), Attr("softcap", "float", 0.0),
           Attr("softmax_precision", "int", None),
           Attr("left_window_size", "int", -1), Attr("right_window_size", "int", -1)),
    num_outputs=(1, 4), flops=_attention_flops, min_opset=23,
    doc="scaled dot-product attention; becomes FusedAttention in the fuse_attention pass")


# ------------------------------------------------------------------------ FusedAttention

def _fused_infer(node: Node, attrs: Mapping[str, Any]) -> list[TensorType]:
    q, kt, v = (input_value(node, i, n) for i, n in enumerate(("Q", "Kt", "V")))
    dt = check_dtype(node, q, "input Q", _FLOATS)
    if any(len(x.shape) != 4 for x in (q, kt, v)):
        raise ModelError(f"{node.describe()}: Q, Kt, V must be 4-D, got {q.shape}, "
                         f"{kt.shape}, {v.shape}")
    b, hq, sq, d = q.shape
    kb, hk, dk, sk = kt.shape
    vb, vh, vs, dv = v.shape
    if (kb, vb) != (b, b) or vh != hk or dk != d or vs != sk or hq % hk:
        raise ModelError(f"{node.describe()}: shapes Q {q.shape}, Kt {kt.shape}, V {v.shape} "
                         "are not [B, Hq, Sq, D], [B, Hk, D, Sk], [B, Hk, Sk, Dv] with Hq a "
                         "multiple of Hk")
    if kt.dtype != dt or v.dtype != dt:
        raise ModelError(f"{node.describe()}: Q, Kt, V must have one dtype, got {dt}, "
                         f"{kt.dtype}, {v.dtype}")
    mask = node.input(3)
    if mask is not None and (mask.dtype not in ("bool", dt)
                             or not broadcasts_to(mask.shape, (b, hq, sq, sk))):
        raise ModelError(f"{node.describe()}: mask {mask.dtype}{list(mask.shape)} must be "
                         f"bool or {dt} and broadcast to {[b, hq, sq, sk]}")
    return [TensorType((b, hq, sq, dv), dt)]


def _fused_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    q, kt, v, mask = ins[:4]
    return [attention_reference(np.asarray(q), np.asarray(kt), np.asarray(v), mask, attrs)]


def _fused_flops(node: Node) -> int:
    q, kt, v = node.inputs[0], node.inputs[1], node.inputs[2]
    assert isinstance(q, Value) and isinstance(kt, Value) and isinstance(v, Value)
    b, hq, sq, d = q.shape
    return b * hq * sq * kt.shape[3] * (2 * d + 2 * v.shape[3] + 5)


_FUSED = defop(
    "FusedAttention", ("Q", "Kt", "V", "mask?"), PatternKind.COMPLEX_OUT_FUSABLE,
    infer=_fused_infer, reference=_fused_ref, flops=_fused_flops,
    attrs=(Attr("scale", "float"), Attr("softcap", "float", 0.0),
           Attr("left", "int", -1), Attr("right", "int", -1),
           Attr("fill", "float", -math.inf), Attr("empty", "string", "nan",
                                                  choices=("nan", "zero"))),
    doc="one-kernel scaled dot-product attention (made by the fuse_attention pass)")

#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_ATTENTION, _FUSED)
