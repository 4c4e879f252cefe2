"""The whole-model zoo: deterministic ONNX builders for Kiln's end-to-end tests and benchmarks.

Every builder returns a checked ``onnx.ModelProto`` whose weights come from a fixed seed,
so the same call gives byte-identical models on every machine.  :data:`ZOO` lists them
with their sample inputs; ``docs/models.md`` describes each one.

Example::

    >>> from toolchain.zoo import ZOO
    >>> spec = ZOO["lenet5"]
    >>> model = spec.build()
    >>> sorted(spec.inputs(model))
    ['input']
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from toolchain.zoo.builder import (
    Builder,
    batchnorm,
    conv,
    linear,
    matmul_add,
    relu6,
    tf_same_pads,
)

F32 = np.float32


# -- small classic nets ------------------------------------------------------------------------
def lenet5(seed: int = 5) -> onnx.ModelProto:
    """LeNet-5 on 1x1x28x28 (MNIST): Conv/Relu/MaxPool twice, three Gemm layers, Softmax."""
    b = Builder("lenet5", seed)
    x = b.input("input", F32, [1, 1, 28, 28])
    x = b.op("Relu", [conv(b, x, 1, 6, 5, pads=[2, 2, 2, 2], name="conv1")])
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Relu", [conv(b, x, 6, 16, 5, pads=[0, 0, 0, 0], name="conv2")])
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x], axis=1)
    x = b.op("Relu", [linear(b, x, 400, 120, gain=2.0, name="fc1")])
    x = b.op("Relu", [linear(b, x, 120, 84, gain=2.0, name="fc2")])
    logits = linear(b, x, 84, 10, name="fc3")
    probs = b.op("Softmax", [logits], axis=1)
    b.output(logits, "logits", F32, [1, 10])
    b.output(probs, "probs", F32, [1, 10])
    return b.build(17, "LeNet-5 (LeCun et al. 1998) with ReLU and max pooling")


def mlp(seed: int = 7) -> onnx.ModelProto:
    """A 784-256-128-10 MLP at opset 13 with a symbolic batch dimension.

    Mixes the TF idiom (MatMul + Add) and the PyTorch one (Gemm, transB=1); Dropout with a
    ratio input (inference: identity); LogSoftmax and Softmax heads.
    """
    b = Builder("mlp", seed)
    x = b.input("input", F32, ["batch", 1, 28, 28])
    x = b.op("Flatten", [x], axis=1)
    x = b.op("Relu", [matmul_add(b, x, 784, 256, gain=2.0, name="dense_1")])
    x = b.op("Tanh", [linear(b, x, 256, 128, name="fc2")])
    x = b.op("Dropout", [x, b.const(0.25, F32)], n_out=1)
    logits = linear(b, x, 128, 10, name="fc3")
    b.output(logits, "logits", F32, ["batch", 10])
    b.output(b.op("LogSoftmax", [logits], axis=-1), "log_probs", F32, ["batch", 10])
    return b.build(13, "MLP for MNIST, opset 13 (exercises the frontend's opset upgrade)")


# -- MLPerf Tiny ------------------------------------------------------------------------------
def ds_cnn(seed: int = 11) -> onnx.ModelProto:
    """DS-CNN keyword spotting (MLPerf Tiny KWS), opset 13, as tf2onnx writes it.

    NHWC input 1x49x10x1 (49 frames x 10 MFCC) transposed to NCHW; Conv 64 (10x4, stride 2,
    TF "SAME" = asymmetric pads) + BN + Relu; four depthwise-separable blocks; AveragePool
    over 25x5; Squeeze with an axes *input*; MatMul + Add to 12 classes; Softmax.
    """
    b = Builder("ds_cnn", seed)
    x = b.input("input_1", F32, [1, 49, 10, 1])
    x = b.op("Transpose", [x], perm=[0, 3, 1, 2])
    pads = tf_same_pads((49, 10), (10, 4), 2)
    x = conv(b, x, 1, 64, (10, 4), stride=2, pads=pads, name="conv_1")
    x = b.op("Relu", [batchnorm(b, x, 64, name="bn_1")])
    for i in range(1, 5):
        with b.scope(f"ds_block_{i}"):
            x = conv(b, x, 64, 64, 3, group=64, bias=False, name="depthwise")
            x = b.op("Relu", [batchnorm(b, x, 64, name="dw_bn")])
            x = conv(b, x, 64, 64, 1, bias=False, name="pointwise")
            x = b.op("Relu", [batchnorm(b, x, 64, name="pw_bn")])
    x = b.op("Dropout", [x])
    x = b.op("AveragePool", [x], kernel_shape=[25, 5], strides=[25, 5])
    x = b.op("Squeeze", [x, b.const([2, 3])])
    logits = matmul_add(b, x, 64, 12, name="dense")
    b.output(logits, "dense/BiasAdd:0", F32, [1, 12])
    b.output(b.op("Softmax", [logits], axis=-1), "dense/Softmax:0", F32, [1, 12])
    return b.build(13, "DS-CNN (Zhang et al. 2017), MLPerf Tiny keyword spotting shape")


def _resnet8_block(b: Builder, x: str, cin: int, cout: int, stride: int, name: str) -> str:
    with b.scope(name):
        y = conv(b, x, cin, cout, 3, stride=stride, bias=False, name="conv1")
        y = b.op("Relu", [batchnorm(b, y, cout, name="bn1")])
        y = conv(b, y, cout, cout, 3, bias=False, name="conv2")
        y = batchnorm(b, y, cout, gamma=(0.3, 0.7), name="bn2")
        if stride != 1 or cin != cout:
            x = conv(b, x, cin, cout, 1, stride=stride, pads=[0, 0, 0, 0], name="shortcut")
        return b.op("Relu", [b.op("Add", [y, x])])


def resnet8(seed: int = 8) -> onnx.ModelProto:
    """ResNet-8 for CIFAR-10 (MLPerf Tiny image classification), 1x3x32x32.

    Conv 16 + BN + Relu, three residual stacks (16, 32/2, 64/2; 1x1 projection shortcuts),
    AveragePool 8x8, Flatten, Gemm to 10 classes, Softmax.
    """
    b = Builder("resnet8", seed)
    x = b.input("input", F32, [1, 3, 32, 32])
    x = conv(b, x, 3, 16, 3, bias=False, name="conv1")
    x = b.op("Relu", [batchnorm(b, x, 16, name="bn1")])
    x = _resnet8_block(b, x, 16, 16, 1, "stack1")
    x = _resnet8_block(b, x, 16, 32, 2, "stack2")
    x = _resnet8_block(b, x, 32, 64, 2, "stack3")
    x = b.op("AveragePool", [x], kernel_shape=[8, 8], strides=[8, 8])
    x = b.op("Flatten", [x], axis=1)
    logits = linear(b, x, 64, 10, name="fc")
    b.output(logits, "logits", F32, [1, 10])
    b.output(b.op("Softmax", [logits], axis=1), "probs", F32, [1, 10])
    return b.build(17, "ResNet-8 (MLPerf Tiny IC, CIFAR-10 shape)")


def mobilenet_v1(seed: int = 25, width: float = 0.25, size: int = 96) -> onnx.ModelProto:
    """MobileNetV1 width 0.25 on 96x96 (MLPerf Tiny visual wake words), TF style.

    NHWC input transposed to NCHW; Conv/depthwise Conv + BN + Clip(0, 6) (ReLU6) with TF
    "SAME" padding (asymmetric for stride 2); AveragePool 3x3; Reshape with a ``0`` / ``-1``
    shape; Gemm to 2 classes; Softmax.
    """
    b = Builder("mobilenet_v1", seed)
    x = b.input("input", F32, [1, size, size, 3])
    x = b.op("Transpose", [x], perm=[0, 3, 1, 2])

    def ch(c: int) -> int:
        return max(8, int(c * width))

    cin, hw = ch(32), size // 2
    x = conv(b, x, 3, cin, 3, stride=2, bias=False, pads=tf_same_pads((size, size), (3, 3), 2),
             name="conv1")
    x = relu6(b, batchnorm(b, x, cin, name="conv1_bn"))
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + \
        [(1024, 2), (1024, 1)]
    for i, (c, s) in enumerate(blocks, start=1):
        cout = ch(c)
        with b.scope(f"block_{i}"):
            pads = tf_same_pads((hw, hw), (3, 3), s)
            x = conv(b, x, cin, cin, 3, stride=s, group=cin, bias=False, pads=pads,
                     name="conv_dw")
            x = relu6(b, batchnorm(b, x, cin, name="conv_dw_bn"))
            x = conv(b, x, cin, cout, 1, bias=False, name="conv_pw")
            x = relu6(b, batchnorm(b, x, cout, name="conv_pw_bn"))
        cin, hw = cout, -(-hw // s)
    x = b.op("AveragePool", [x], kernel_shape=[hw, hw], strides=[hw, hw])
    x = b.op("Reshape", [x, b.const([0, -1])])
    logits = linear(b, x, cin, 2, name="predictions")
    b.output(logits, "logits", F32, [1, 2])
    b.output(b.op("Softmax", [logits], axis=-1), "probs", F32, [1, 2])
    return b.build(17, f"MobileNetV1 width {width} on {size}x{size} (MLPerf Tiny VWW)")


def autoencoder(seed: int = 640, batch: int = 8) -> onnx.ModelProto:
    """Dense autoencoder for anomaly detection (MLPerf Tiny AD), opset 18.

    640 -> 4 x (Gemm 128 + BatchNormalization on [N, C] + Relu) -> 8 -> 4 x 128 -> 640, and
    the anomaly score ``ReduceMean((y - x)^2, axes=[1])`` with axes as an input (opset 18).
    """
    b = Builder("autoencoder", seed)
    inp = b.input("input", F32, [batch, 640])
    x, fin = inp, 640
    for i, fout in enumerate([128] * 4 + [8] + [128] * 4, start=1):
        x = linear(b, x, fin, fout, gain=2.0, name=f"dense_{i}")
        x = b.op("Relu", [batchnorm(b, x, fout, name=f"bn_{i}")])
        fin = fout
    recon = linear(b, x, fin, 640, name="dense_out")
    err = b.op("Pow", [b.op("Sub", [recon, inp]), b.const(2.0, F32)])
    score = b.op("ReduceMean", [err, b.const([1])], keepdims=0)
    b.output(recon, "reconstruction", F32, [batch, 640])
    b.output(score, "anomaly_score", F32, [batch])
    return b.build(18, "Dense autoencoder (MLPerf Tiny anomaly detection, ToyADMOS shape)")


# -- ImageNet-size nets ------------------------------------------------------------------------
def _basic_block(b: Builder, x: str, cin: int, cout: int, stride: int) -> str:
    y = conv(b, x, cin, cout, 3, stride=stride, bias=False, name="conv1")
    y = b.op("Relu", [batchnorm(b, y, cout, name="bn1")])
    y = conv(b, y, cout, cout, 3, bias=False, name="conv2")
    y = batchnorm(b, y, cout, gamma=(0.3, 0.7), name="bn2")
    if stride != 1 or cin != cout:
        with b.scope("downsample"):
            x = conv(b, x, cin, cout, 1, stride=stride, pads=[0, 0, 0, 0], bias=False, name="0")
            x = batchnorm(b, x, cout, gamma=(0.3, 0.7), name="1")
    return b.op("Relu", [b.op("Add", [y, x])])


def resnet18(seed: int = 18) -> onnx.ModelProto:
    """ResNet-18 on 1x3x224x224 as torchvision exports it (about 1.82 GMACs, 11.7 M params).

    Conv 7x7/2 + BN + Relu, MaxPool 3x3/2 (pads 1), four stages of two basic blocks
    (projection shortcut = 1x1 Conv + BN), GlobalAveragePool, Flatten, Gemm to 1000.
    """
    b = Builder("resnet18", seed)
    x = b.input("input", F32, [1, 3, 224, 224])
    x = conv(b, x, 3, 64, 7, stride=2, bias=False, name="conv1")
    x = b.op("Relu", [batchnorm(b, x, 64, name="bn1")])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512], start=1):
        for i in range(2):
            with b.scope(f"layer{stage}"), b.scope(f"{i}"):
                stride = 2 if (i == 0 and stage > 1) else 1
                x = _basic_block(b, x, cin, cout, stride)
            cin = cout
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.output(linear(b, x, 512, 1000, name="fc"), "logits", F32, [1, 1000])
    return b.build(17, "ResNet-18 (He et al. 2016), torchvision layout and names")


def _bottleneck(b: Builder, x: str, cin: int, width: int, stride: int) -> str:
    cout = 4 * width
    y = b.op("Relu", [batchnorm(b, conv(b, x, cin, width, 1, pads=[0, 0, 0, 0], bias=False,
                                        name="conv1"), width, name="bn1")])
    y = b.op("Relu", [batchnorm(b, conv(b, y, width, width, 3, stride=stride, bias=False,
                                        name="conv2"), width, name="bn2")])
    y = conv(b, y, width, cout, 1, pads=[0, 0, 0, 0], bias=False, name="conv3")
    y = batchnorm(b, y, cout, gamma=(0.3, 0.7), name="bn3")
    if stride != 1 or cin != cout:
        with b.scope("downsample"):
            x = conv(b, x, cin, cout, 1, stride=stride, pads=[0, 0, 0, 0], bias=False, name="0")
            x = batchnorm(b, x, cout, gamma=(0.3, 0.7), name="1")
    return b.op("Relu", [b.op("Add", [y, x])])


def resnet50(seed: int = 50) -> onnx.ModelProto:
    """ResNet-50 (v1.5) on 1x3x224x224 as torchvision exports it (about 4.09 GMACs,
    25.6 M params): the ResNet-18 stem, four stages of 3, 4, 6 and 3 bottleneck blocks
    (1x1 reduce, 3x3 with the stage's stride, 1x1 expand x4; projection shortcut =
    1x1 Conv + BN), GlobalAveragePool, Flatten, Gemm to 1000. For compile-time and
    memory benchmarks (``benchmarks/models.py --large``); not in :data:`ZOO`.
    """
    b = Builder("resnet50", seed)
    x = b.input("input", F32, [1, 3, 224, 224])
    x = conv(b, x, 3, 64, 7, stride=2, bias=False, name="conv1")
    x = b.op("Relu", [batchnorm(b, x, 64, name="bn1")])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for i in range(blocks):
            with b.scope(f"layer{stage}"), b.scope(f"{i}"):
                x = _bottleneck(b, x, cin, width, 2 if (i == 0 and stage > 1) else 1)
            cin = 4 * width
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.output(linear(b, x, 2048, 1000, name="fc"), "logits", F32, [1, 1000])
    return b.build(17, "ResNet-50 v1.5 (He et al. 2016), torchvision layout and names")


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_relu6(b: Builder, x: str, cin: int, cout: int, k: int, stride: int, group: int,
                   name: str) -> str:
    with b.scope(name):
        x = conv(b, x, cin, cout, k, stride=stride, group=group, bias=False, name="0")
        return relu6(b, batchnorm(b, x, cout, name="1"))


def mobilenet_v2(seed: int = 2, width: float = 0.35, size: int = 96) -> onnx.ModelProto:
    """MobileNetV2 width 0.35 on 1x3x96x96, torchvision layout (Clip(0, 6) for ReLU6).

    Inverted residual blocks (1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear
    projection, Add when shapes match), 1x1 Conv to 1280, GlobalAveragePool, Flatten, Gemm.
    """
    b = Builder("mobilenet_v2", seed)
    x = b.input("input", F32, [1, 3, size, size])
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    cin = _make_divisible(32 * width)
    with b.scope("features"):
        x = _conv_bn_relu6(b, x, 3, cin, 3, 2, 1, "0")
        idx = 1
        for t, c, n, s in settings:
            cout = _make_divisible(c * width)
            for i in range(n):
                stride, hidden = (s if i == 0 else 1), cin * t
                with b.scope(str(idx)), b.scope("conv"):
                    y, j = x, 0
                    if t != 1:
                        y, j = _conv_bn_relu6(b, y, cin, hidden, 1, 1, 1, "0"), 1
                    y = _conv_bn_relu6(b, y, hidden, hidden, 3, stride, hidden, str(j))
                    y = conv(b, y, hidden, cout, 1, bias=False, name=str(j + 1))
                    y = batchnorm(b, y, cout, gamma=(0.3, 0.7) if cin == cout else (0.6, 1.4),
                                  name=str(j + 2))
                    x = b.op("Add", [x, y]) if (stride == 1 and cin == cout) else y
                cin, idx = cout, idx + 1
        x = _conv_bn_relu6(b, x, cin, 1280, 1, 1, 1, str(idx))
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.output(linear(b, x, 1280, 1000, name="classifier.1"), "logits", F32, [1, 1000])
    return b.build(17, f"MobileNetV2 (Sandler et al. 2018) width {width} on {size}x{size}")


# -- transformer -------------------------------------------------------------------------------
def _split_heads(b: Builder, x: str, shape_src: str, heads: int, perm: list[int]) -> str:
    """PyTorch-style ``x.view(B, T, H, D).permute(...)`` with the shape taken at run time."""
    shape = b.op("Shape", [shape_src])
    dims = [b.op("Unsqueeze", [b.op("Gather", [shape, b.const(i)], axis=0), b.const([0])])
            for i in (0, 1)]
    head_dim = b.const([-1])
    new_shape = b.op("Concat", [*dims, b.const([heads]), head_dim], axis=0)
    return b.op("Transpose", [b.op("Reshape", [x, new_shape])], perm=perm)


def _gelu(b: Builder, x: str, kind: str) -> str:
    if kind == "op":
        return b.op("Gelu", [x])
    # torch.nn.functional.gelu exported at opset < 20: x * 0.5 * (1 + erf(x / sqrt(2)))
    erf = b.op("Erf", [b.op("Div", [x, b.const(math.sqrt(2.0), F32)])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [erf, b.const(1.0, F32)])]),
                        b.const(0.5, F32)])


def _layer_norm(b: Builder, x: str, d: int, name: str) -> str:
    with b.scope(name):
        return b.op("LayerNormalization", [x, b.param("weight", b.uniform(0.8, 1.2, d)),
                                           b.param("bias", b.normal(0.1, d))],
                    axis=-1, epsilon=1e-5)


def _encoder_layer(b: Builder, x: str, d: int, heads: int, ff: int, gelu: str) -> str:
    """Post-norm ``nn.TransformerEncoderLayer`` (batch_first) as torch.onnx writes it."""
    hd = d // heads
    with b.scope("self_attn"):
        qkv = matmul_add(b, x, d, 3 * d, name="in_proj")
        q, k, v = b.op("Split", [qkv, b.const([d, d, d])], n_out=3, axis=-1)
        q = _split_heads(b, q, x, heads, [0, 2, 1, 3])
        k = _split_heads(b, k, x, heads, [0, 2, 3, 1])
        v = _split_heads(b, v, x, heads, [0, 2, 1, 3])
        scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(math.sqrt(hd), F32)])
        ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
        ctx = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        shape = b.op("Shape", [x])
        dims = [b.op("Unsqueeze", [b.op("Gather", [shape, b.const(i)], axis=0), b.const([0])])
                for i in (0, 1)]
        ctx = b.op("Reshape", [ctx, b.op("Concat", [*dims, b.const([d])], axis=0)])
        attn = matmul_add(b, ctx, d, d, name="out_proj")
    x = _layer_norm(b, b.op("Add", [x, attn]), d, "norm1")
    h = _gelu(b, matmul_add(b, x, d, ff, gain=2.0, name="linear1"), gelu)
    h = matmul_add(b, h, ff, d, name="linear2")
    return _layer_norm(b, b.op("Add", [x, h]), d, "norm2")


def transformer_encoder(seed: int = 64, *, batch: int | str = 2, seq: int = 32, d: int = 64,
                        heads: int = 4, layers: int = 2, vocab: int = 100, classes: int = 4,
                        gelu: str = "erf", opset: int = 17) -> onnx.ModelProto:
    """A 2-layer post-norm transformer encoder (d_model 64, 4 heads, FF 256, seq 32).

    int64 token ids -> Gather from an embedding table + learned positions, then per layer:
    fused QKV MatMul + Split, heads split by a PyTorch-style ``Shape -> Gather -> Unsqueeze
    -> Concat -> Reshape`` chain, scaled-dot-product softmax attention, LayerNormalization,
    GELU (``Erf`` form, or the ``Gelu`` op with ``gelu="op"`` at opset >= 20), residual Adds;
    a mean-pooled (ReduceMean over the sequence) Gemm classifier head.  Small constants
    are ``Constant`` nodes, as torch.onnx writes them.  ``batch="batch"`` makes the batch
    dimension symbolic (an export with ``dynamic_axes``).
    """
    b = Builder(f"transformer_encoder_{gelu}", seed, constant_nodes=True)
    tokens = b.input("tokens", np.int64, [batch, seq])
    x = b.op("Gather", [b.param("embed.weight", b.normal(1.0, (vocab, d))), tokens], axis=0)
    x = b.op("Add", [x, b.param("pos_embed", b.normal(0.5, (1, seq, d)))])
    for i in range(layers):
        with b.scope("encoder"), b.scope("layers"), b.scope(str(i)):
            x = _encoder_layer(b, x, d, heads, 4 * d, gelu)
    if opset >= 18:
        pooled = b.op("ReduceMean", [x, b.const([1])], keepdims=0)
    else:
        pooled = b.op("ReduceMean", [x], axes=[1], keepdims=0)
    logits = linear(b, pooled, d, classes, name="head")
    b.output(x, "hidden", F32, [batch, seq, d])
    b.output(logits, "logits", F32, [batch, classes])
    return b.build(opset, f"{layers}-layer transformer encoder, d_model {d}, {heads} heads")


def bert_base(seed: int = 110) -> onnx.ModelProto:
    """The transformer encoder in BERT-base's configuration: 12 layers, d_model 768,
    12 heads, FF 3072, sequence 128, batch 1, a 30522-token embedding (about 109 M
    params, 434 MB of float32 weights). For compile-time and memory benchmarks
    (``benchmarks/models.py --large``); not in :data:`ZOO`."""
    return transformer_encoder(seed, batch=1, seq=128, d=768, heads=12, layers=12,
                               vocab=30522)


def transformer_encoder_gelu(seed: int = 64) -> onnx.ModelProto:
    """The transformer at opset 20 with the ``Gelu`` op and a symbolic batch dimension."""
    return transformer_encoder(seed, batch="batch", gelu="op", opset=20)


# -- an old-style export ------------------------------------------------------------------------
def fcn_opset11(seed: int = 11) -> onnx.ModelProto:
    """A small U-Net-like segmentation net at opset 11, written like a 2019 exporter did.

    Every initializer is also listed as a graph input (an input with a default value, the
    pre-IR-4 habit).  Opset-11 forms the frontend must upgrade: ``Pad`` (reflect) with pads
    as an input, ``ReduceMean``/``Squeeze``/``Unsqueeze`` with axes attributes, ``Split``
    with a ``split`` attribute, ``Resize`` with ``roi``/``scales``/``sizes`` inputs (nearest
    x2 with asymmetric/floor, then linear to a size with pytorch_half_pixel), and ``Softmax``
    with ``axis=1`` on a 4-D tensor, which at opset < 13 means softmax over C*H*W flattened.
    Also a squeeze-excitation gate (Sigmoid, broadcast Mul), a GLU gate, ArgMax.
    """
    b = Builder("fcn_opset11", seed)
    x = b.input("image", F32, [1, 3, 32, 32])
    e1 = b.op("Relu", [conv(b, x, 3, 16, 3, name="enc1")])                    # 16 x 32 x 32
    e2 = b.op("Relu", [conv(b, e1, 16, 32, 3, stride=2, name="enc2")])        # 32 x 16 x 16
    e3 = b.op("Pad", [e2, b.const([0, 0, 1, 1, 0, 0, 1, 1])], mode="reflect")  # 32 x 18 x 18
    e3 = b.op("Relu", [conv(b, e3, 32, 32, 3, stride=2, pads=[0, 0, 0, 0], name="enc3")])
    with b.scope("se"):
        g = b.op("ReduceMean", [e3], axes=[2, 3], keepdims=0)                # 32
        g = b.op("Relu", [linear(b, g, 32, 8, gain=2.0, name="fc1")])
        g = b.op("Sigmoid", [linear(b, g, 8, 32, name="fc2")])
        e3 = b.op("Mul", [e3, b.op("Unsqueeze", [g], axes=[2, 3])])
    empty = b.const(np.zeros(0, F32), F32)
    with b.scope("up1"):
        u = b.op("Resize", [e3, empty, b.const([1.0, 1.0, 2.0, 2.0], F32)], mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        u = conv(b, b.op("Concat", [u, e2], axis=1), 64, 64, 1, name="conv")
        a, gate = b.op("Split", [u], n_out=2, axis=1, split=[32, 32])
        u = b.op("Mul", [a, b.op("Sigmoid", [gate])])                         # 32 x 16 x 16
    with b.scope("up2"):
        u = b.op("Resize", [u, empty, empty, b.const([1, 32, 32, 32])], mode="linear",
                 coordinate_transformation_mode="pytorch_half_pixel")
        logits = conv(b, b.op("Concat", [u, e1], axis=1), 48, 5, 1, name="classifier")
    mask = b.op("Squeeze", [b.op("ArgMax", [logits], axis=1, keepdims=1)], axes=[1])
    probs = b.op("Softmax", [logits], axis=1)
    b.output(logits, "logits", F32, [1, 5, 32, 32])
    b.output(probs, "probs", F32, [1, 5, 32, 32])
    b.output(mask, "mask", np.int64, [1, 32, 32])
    return b.build(11, "U-Net-like segmentation net in opset-11 form",
                   initializers_as_inputs=True)


# -- a vision transformer -----------------------------------------------------------------------
def _vit_block(b: Builder, x: str, seq: int, d: int, heads: int, mlp: int) -> str:
    """A pre-norm ViT block as timm's ``Block`` exports: ``x + attn(norm1(x))``,
    ``x + mlp(norm2(x))``; the fused qkv projection split by ``Reshape → Transpose →
    Gather``, ``q @ kᵀ * scale`` (a ``Mul``), tanh-free exact ``Gelu`` (opset 20)."""
    hd = d // heads
    with b.scope("attn"):
        h = _layer_norm(b, x, d, "norm1")
        qkv = matmul_add(b, h, d, 3 * d, name="qkv")
        qkv = b.op("Reshape", [qkv, b.const([1, seq, 3, heads, hd])])
        qkv = b.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])           # 3, B, H, S, hd
        q, k, v = (b.op("Gather", [qkv, b.const(i)], axis=0) for i in range(3))
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.op("Mul", [b.op("MatMul", [q, kt]), b.const(hd ** -0.5, F32)])
        ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
        ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                               b.const([1, seq, d])])
        x = b.op("Add", [x, matmul_add(b, ctx, d, d, name="proj")])
    with b.scope("mlp"):
        h = _layer_norm(b, x, d, "norm2")
        h = b.op("Gelu", [matmul_add(b, h, d, mlp, gain=2.0, name="fc1")])
        return b.op("Add", [x, matmul_add(b, h, mlp, d, name="fc2")])


def vit_tiny(seed: int = 32, *, image: int = 32, patch: int = 4, d: int = 64, heads: int = 4,
             depth: int = 2, mlp: int = 256, classes: int = 10) -> onnx.ModelProto:
    """A small vision transformer (ViT, Dosovitskiy et al. 2021) as timm exports it.

    32×32 RGB image -> 4×4 patch embedding (a stride-4 ``Conv`` to 64 channels, ``Reshape``
    to ``[1, 64, 64]``, ``Transpose`` to tokens) -> a learned class token ``Expand``-ed to
    the batch and put in front with ``Concat`` -> ``Add`` of a position embedding
    ``[1, 65, 64]`` -> 2 pre-norm encoder blocks (LayerNormalization, 4-head attention,
    GELU MLP of 256) -> final LayerNormalization -> the class token (``Gather`` of position
    0) -> linear head (10 classes). Opset 20 (the ``Gelu`` op).
    """
    b = Builder("vit_tiny", seed, constant_nodes=True)
    x = b.input("pixel_values", F32, [1, 3, image, image])
    n = (image // patch) ** 2
    seq = n + 1
    with b.scope("patch_embed"):
        x = conv(b, x, 3, d, patch, stride=patch, pads=[0, 0, 0, 0], name="proj")
        x = b.op("Transpose", [b.op("Reshape", [x, b.const([1, d, n])])], perm=[0, 2, 1])
    cls = b.op("Expand", [b.param("cls_token", b.normal(0.5, (1, 1, d))),
                          b.const([1, 1, d])])
    x = b.op("Concat", [cls, x], axis=1)
    x = b.op("Add", [x, b.param("pos_embed", b.normal(0.5, (1, seq, d)))])
    for i in range(depth):
        with b.scope("blocks"), b.scope(str(i)):
            x = _vit_block(b, x, seq, d, heads, mlp)
    x = _layer_norm(b, x, d, "norm")
    token = b.op("Gather", [x, b.const(0)], axis=1)                      # [1, d]
    b.output(linear(b, token, d, classes, name="head"), "logits", F32, [1, classes])
    return b.build(20, f"ViT: {image}x{image} image, {patch}x{patch} patches, d {d}, "
                       f"{heads} heads, {depth} blocks")


def _vit_macs(image: int = 32, patch: int = 4, d: int = 64, heads: int = 4, depth: int = 2,
              mlp: int = 256, classes: int = 10) -> int:
    n = (image // patch) ** 2
    s = n + 1
    block = s * d * 3 * d + 2 * s * s * d + s * d * d + 2 * s * d * mlp
    return n * d * 3 * patch * patch + depth * block + d * classes


# -- a recurrent text classifier -----------------------------------------------------------------
def lstm_classifier(seed: int = 16, *, batch: int = 2, seq: int = 16, vocab: int = 100,
                    embed: int = 32, hidden: int = 64, classes: int = 4) -> onnx.ModelProto:
    """An LSTM text classifier as ``torch.onnx`` exports ``nn.LSTM(batch_first=True)``.

    int64 token ids -> embedding ``Gather`` -> ``Transpose`` to ``[seq, batch, embed]`` ->
    one forward ``LSTM`` (hidden 64; ``W``/``R``/``B`` in ONNX's i, o, f, c gate order; no
    initial state, i.e. zeros) -> the last hidden state ``h_n[-1]`` (``Gather`` of ``Y_h``) ->
    ``Gemm(transB=1)`` -> ``Softmax``.  ``Y`` is not used (its output name is empty).
    """
    b = Builder("lstm_classifier", seed, constant_nodes=True)
    tokens = b.input("tokens", np.int64, [batch, seq])
    x = b.op("Gather", [b.param("embedding.weight", b.normal(1.0, (vocab, embed))), tokens],
             axis=0)
    x = b.op("Transpose", [x], perm=[1, 0, 2])
    with b.scope("lstm"):
        w = b.param("W", b.normal(1.0 / math.sqrt(embed), (1, 4 * hidden, embed)))
        r = b.param("R", b.normal(1.0 / math.sqrt(hidden), (1, 4 * hidden, hidden)))
        bias = b.param("B", b.normal(0.1, (1, 8 * hidden)))
        _, y_h, _ = b.op("LSTM", [x, w, r, bias], n_out=3, hidden_size=hidden)
    b.nodes[-1].output[0] = b.nodes[-1].output[2] = ""  # only Y_h is used
    last = b.op("Gather", [y_h, b.const(-1)], axis=0)
    logits = linear(b, last, hidden, classes, name="fc")
    b.output(logits, "logits", F32, [batch, classes])
    b.output(b.op("Softmax", [logits], axis=-1), "probs", F32, [batch, classes])
    return b.build(17, f"LSTM text classifier: vocab {vocab}, embedding {embed}, hidden "
                       f"{hidden}, seq {seq}")


def interleaved_branches(seed: int = 3, *, branches: int = 3, depth: int = 3,
                         width: int = 32) -> onnx.ModelProto:
    """Inception-like: ``branches`` parallel conv stacks (``depth`` 3x3 convs, ``width``
    channels at 32x32, the last one down to 4 channels) joined by a Concat and a 1x1 conv,
    with the nodes written **interleaved** (layer 1 of every branch, then layer 2, ...), as
    an exporter that walks the graph breadth-first does.  The file order keeps every
    branch's 128 KiB activations alive together; running one branch after the other needs
    much less (the order search's demonstration, ``docs/embedded.md``).
    """
    b = Builder("interleaved_branches", seed)
    x = b.input("image", F32, [1, 8, 32, 32])
    heads = [x] * branches
    for layer in range(depth):
        for i in range(branches):
            cin = 8 if layer == 0 else width
            cout = 4 if layer == depth - 1 else width
            y = conv(b, heads[i], cin, cout, 3, name=f"branch{i}.conv{layer}")
            heads[i] = b.op("Relu", [y])
    y = b.op("Concat", heads, axis=1)
    b.output(conv(b, y, 4 * branches, 8, 1, name="head"), "out", F32, [1, 8, 32, 32])
    return b.build(17, f"{branches} conv branches, written interleaved")


# -- the catalogue -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ZooModel:
    """One zoo entry: how to build it, feed it and what to expect of it."""

    name: str
    build: Callable[[], onnx.ModelProto]
    #: shapes for symbolic input dimensions (passed to ``from_onnx(input_shapes=...)``)
    input_shapes: dict[str, tuple[int, ...]] | None = None
    #: multiply-accumulates of Conv/Gemm/MatMul, counted by hand from the architecture
    macs: int = 0
    vocab: int = 0
    slow: bool = False

    def inputs(self, model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic sample inputs: normal floats, or integer ids below ``vocab``."""
        rng = np.random.default_rng(seed)
        out = {}
        defaults = {t.name for t in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name in defaults:
                continue  # an input with a default value (pre-IR-4 style): not fed
            t = vi.type.tensor_type
            shape = (self.input_shapes or {}).get(vi.name) or \
                tuple(d.dim_value for d in t.shape.dim)
            if t.elem_type == onnx.TensorProto.INT64:
                out[vi.name] = rng.integers(0, self.vocab, shape, dtype=np.int64)
            else:
                out[vi.name] = rng.standard_normal(shape).astype(F32)
        return out


def _transformer_macs(batch: int = 2, seq: int = 32, d: int = 64, layers: int = 2) -> int:
    per_layer = seq * d * 3 * d + 2 * seq * seq * d + seq * d * d + 2 * seq * d * 4 * d
    return batch * layers * per_layer + batch * d * 4


def _mobilenet_v2_macs(width: float = 0.35, size: int = 96) -> int:
    c = [_make_divisible(ch * width) for ch in (32, 16, 24, 32, 64, 96, 160, 320)]
    hw = size // 2
    macs = hw * hw * c[0] * 27
    cin = c[0]
    for (t, n, s), cout in zip([(1, 1, 1), (6, 2, 2), (6, 3, 2), (6, 4, 2), (6, 3, 1),
                                (6, 3, 2), (6, 1, 1)], c[1:], strict=True):
        for i in range(n):
            hw_out = -(-hw // s) if i == 0 else hw
            expand = hw * hw * cin * cin * t if t != 1 else 0
            macs += expand + hw_out * hw_out * cin * t * (9 + cout)
            cin, hw = cout, hw_out
    return macs + hw * hw * cin * 1280 + 1280 * 1000


#: every zoo model by name; ``macs`` are independent hand counts (see docs/models.md)
ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("lenet5", lenet5,
             macs=28 * 28 * 6 * 25 + 10 * 10 * 16 * 150 + 400 * 120 + 120 * 84 + 84 * 10),
    ZooModel("mlp", mlp, input_shapes={"input": (4, 1, 28, 28)},
             macs=4 * (784 * 256 + 256 * 128 + 128 * 10)),
    ZooModel("ds_cnn", ds_cnn,
             macs=25 * 5 * 64 * 40 + 4 * (25 * 5 * 64 * 9 + 25 * 5 * 64 * 64) + 64 * 12),
    ZooModel("resnet8", resnet8,
             macs=(32 * 32 * 16 * 27 + 2 * 32 * 32 * 16 * 144
                   + 16 * 16 * 32 * (144 + 288 + 16) + 8 * 8 * 64 * (288 + 576 + 32) + 640)),
    ZooModel("mobilenet_v1", mobilenet_v1, macs=7_489_664),
    ZooModel("autoencoder", autoencoder,
             macs=8 * (640 * 128 + 3 * 128 * 128 + 128 * 8 + 8 * 128 + 3 * 128 * 128
                       + 128 * 640)),
    ZooModel("resnet18", resnet18, macs=1_814_073_344, slow=True),
    ZooModel("mobilenet_v2", mobilenet_v2, macs=_mobilenet_v2_macs()),
    ZooModel("transformer_encoder", transformer_encoder, macs=_transformer_macs(), vocab=100),
    ZooModel("transformer_encoder_gelu", transformer_encoder_gelu,
             input_shapes={"tokens": (2, 32)}, macs=_transformer_macs(), vocab=100),
    ZooModel("lstm_classifier", lstm_classifier, vocab=100,
             macs=2 * 16 * 4 * 64 * (32 + 64) + 2 * 64 * 4),
    ZooModel("vit_tiny", vit_tiny, macs=_vit_macs()),
    ZooModel("fcn_opset11", fcn_opset11,
             macs=(32 * 32 * 16 * 27 + 16 * 16 * 32 * 144 + 8 * 8 * 32 * 288 + 2 * 32 * 8
                   + 16 * 16 * 64 * 64 + 32 * 32 * 5 * 48)),
]}

#: models built to show one feature of the compiler, outside the zoo's tables
DEMOS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("interleaved_branches", interleaved_branches,
             macs=32 * 32 * (3 * (32 * 72 + 32 * 288 + 4 * 288) + 8 * 12)),
]}

#: ImageNet- and BERT-size models for ``benchmarks/models.py --large`` (compile time and
#: memory); kept out of :data:`ZOO`, whose every model the tests compile and run
LARGE: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet50", resnet50, macs=4_089_184_256, slow=True),
    ZooModel("bert_base", bert_base, vocab=30522, slow=True,
             macs=_transformer_macs(batch=1, seq=128, d=768, layers=12)),
]}


def parameter_count(model: onnx.ModelProto) -> int:
    """Number of weight elements (all float initializers)."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT)


def count_macs(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None = None
               ) -> int:
    """Multiply-accumulates of every Conv, Gemm and MatMul, from ONNX shape inference.

    An independent check of both Kiln's FLOP counts and the hand counts in :data:`ZOO`.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in model.graph.input:
        if input_shapes and vi.name in input_shapes:
            for dim, n in zip(vi.type.tensor_type.shape.dim, input_shapes[vi.name],
                              strict=True):
                dim.Clear()
                dim.dim_value = n
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in [*inferred.graph.value_info, *inferred.graph.input,
                         *inferred.graph.output]}
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    total = 0
    for node in inferred.graph.node:
        out = shapes.get(node.output[0], [])  # a recurrent node's Y may be left out
        if node.op_type == "Conv":
            w = shapes[node.input[1]]
            total += int(np.prod(out)) * int(np.prod(w[1:]))
        elif node.op_type == "Gemm":
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            a = shapes[node.input[0]]
            total += int(np.prod(out)) * (a[0] if trans_a else a[1])
        elif node.op_type == "MatMul":
            total += int(np.prod(out)) * shapes[node.input[0]][-1]
        elif node.op_type in ("LSTM", "GRU", "RNN"):  # input and recurrence projections
            dirs, gates_h, inputs = shapes[node.input[1]]
            x = shapes[node.input[0]]
            total += x[0] * x[1] * dirs * gates_h * (inputs + shapes[node.input[2]][-1])
    return total
