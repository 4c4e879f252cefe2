"""Train the digits CNN for real and write ``digits.onnx`` + ``test_set.npz``.

The data is the 8x8 handwritten digits set that scikit-learn ships (1797 images, 10
classes).  scikit-learn is needed only here, to load the data and split it; the training
itself is plain numpy (im2col convolutions, hand-written backward pass, Adam), a few
seconds on one core.  The model is written with ``onnx.helper``.

    pip install scikit-learn        # only for this script
    python examples/digits/train.py

Network (input 1x1x8x8, pixel values scaled to [0, 1])::

    Conv 3x3 (8) -> Relu -> MaxPool 2x2 -> Conv 3x3 (16) -> Relu -> MaxPool 2x2
      -> Flatten -> Gemm (64 -> 10) = logits -> Softmax = probs

Deterministic: the same seed gives the same weights on the same numpy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


# ----------------------------------------------------------------------- layers (numpy)
def im2col(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N*H*W, C*9): 3x3 patches with zero padding 1."""
    n, c, h, w = x.shape
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([p[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=2)
    return cols.transpose(0, 3, 4, 1, 2).reshape(n * h * w, c * 9)


def col2im(cols: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    n, c, h, w = shape
    g = cols.reshape(n, h, w, c, 9).transpose(0, 3, 4, 1, 2)
    p = np.zeros((n, c, h + 2, w + 2), cols.dtype)
    for k in range(9):
        i, j = divmod(k, 3)
        p[:, :, i:i + h, j:j + w] += g[:, :, k]
    return p[:, :, 1:-1, 1:-1]


def conv_forward(x, w, b):
    n, _, h, wd = x.shape
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def conv_backward(dout, cols, x_shape, w):
    d = dout.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (d.T @ cols).reshape(w.shape)
    db = d.sum(axis=0)
    dx = col2im(d @ w.reshape(w.shape[0], -1), x_shape)
    return dx, dw, db


def pool_forward(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = r.max(axis=(3, 5))
    mask = r == out[:, :, :, None, :, None]
    return out, mask


def pool_backward(dout, mask):
    # a tie sends the gradient to every maximum: only all-zero windows tie here, and the
    # Relu before the pool zeroes their gradient anyway
    n, c, h2, _, w2, _ = mask.shape
    return (mask * dout[:, :, :, None, :, None]).reshape(n, c, h2 * 2, w2 * 2)


def forward(params, x):
    c1, cols1 = conv_forward(x, params["w1"], params["b1"])
    r1 = np.maximum(c1, 0)
    p1, m1 = pool_forward(r1)
    c2, cols2 = conv_forward(p1, params["w2"], params["b2"])
    r2 = np.maximum(c2, 0)
    p2, m2 = pool_forward(r2)
    flat = p2.reshape(len(x), -1)
    logits = flat @ params["w3"].T + params["b3"]
    return logits, (x, c1, cols1, m1, p1, c2, cols2, m2, p2, flat)


def backward(params, cache, dlogits):
    x, c1, cols1, m1, p1, c2, cols2, m2, p2, flat = cache
    g = {"w3": dlogits.T @ flat, "b3": dlogits.sum(axis=0)}
    dflat = dlogits @ params["w3"]
    dr2 = pool_backward(dflat.reshape(p2.shape), m2) * (c2 > 0)
    dp1, g["w2"], g["b2"] = conv_backward(dr2, cols2, p1.shape, params["w2"])
    dr1 = pool_backward(dp1, m1) * (c1 > 0)
    _, g["w1"], g["b1"] = conv_backward(dr1, cols1, x.shape, params["w1"])
    return g


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def train(x, y, epochs: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    he = lambda shape, fan_in: (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in))  # noqa: E731
    params = {"w1": he((8, 1, 3, 3), 9), "b1": np.zeros(8), "w2": he((16, 8, 3, 3), 72),
              "b2": np.zeros(16), "w3": he((10, 64), 64), "b3": np.zeros(10)}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    lr, b1, b2, step = 3e-3, 0.9, 0.999, 0
    for epoch in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x), 32):
            idx = order[s:s + 32]
            logits, cache = forward(params, x[idx])
            dlogits = softmax(logits)
            dlogits[np.arange(len(idx)), y[idx]] -= 1.0
            grads = backward(params, cache, dlogits / len(idx))
            step += 1
            for k in params:
                m[k] = b1 * m[k] + (1 - b1) * grads[k]
                v[k] = b2 * v[k] + (1 - b2) * grads[k] ** 2
                mh, vh = m[k] / (1 - b1 ** step), v[k] / (1 - b2 ** step)
                params[k] -= lr * mh / (np.sqrt(vh) + 1e-8)
        acc = (forward(params, x)[0].argmax(axis=1) == y).mean()
        print(f"epoch {epoch + 1:2d}: train accuracy {acc:.4f}")
    return {k: val.astype(np.float32) for k, val in params.items()}


# ----------------------------------------------------------------------------- export
def to_onnx(params: dict[str, np.ndarray]) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool1"),
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool2"),
        helper.make_node("Flatten", ["pool2"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1,
                         name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1, name="softmax"),
    ]
    inits = [numpy_helper.from_array(params[k], n) for k, n in (
        ("w1", "conv1.weight"), ("b1", "conv1.bias"), ("w2", "conv2.weight"),
        ("b2", "conv2.bias"), ("w3", "fc.weight"), ("b3", "fc.bias"))]
    graph = helper.make_graph(
        nodes, "digits",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="kiln examples/digits/train.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float64)[:, None]  # (1797, 1, 8, 8) in [0, 1]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=args.seed,
                                              stratify=y)
    params = train(x_tr, y_tr, args.epochs, args.seed)
    x_te = x_te.astype(np.float32)
    test_acc = (forward({k: p.astype(np.float64) for k, p in params.items()},
                        x_te.astype(np.float64))[0].argmax(axis=1) == y_te).mean()
    print(f"held-out accuracy (numpy, float64): {test_acc:.4f} on {len(y_te)} images")
    onnx.save(to_onnx(params), args.out / "digits.onnx")
    np.savez_compressed(args.out / "test_set.npz", images=x_te, labels=y_te)
    np.savez(args.out / "sample.npz", image=x_te[:1])
    print(f"wrote {args.out / 'digits.onnx'}, {args.out / 'test_set.npz'} and "
          f"{args.out / 'sample.npz'}")


if __name__ == "__main__":
    main()
