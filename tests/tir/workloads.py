"""Small workloads for schedule tests: a PrimFunc plus a numpy reference.

Each builder returns ``(func, inputs, reference)`` where ``inputs`` are fresh numpy arrays
for every param (outputs zero-filled) and ``reference(*inputs)`` gives the expected output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from toolchain import te
from toolchain.tir import ir
from toolchain.tir.interpreter import run

Workload = tuple[ir.PrimFunc, Callable[[], list[np.ndarray]], Callable[..., np.ndarray]]


def _rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def matmul(m: int = 16, n: int = 16, k: int = 16) -> Workload:
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    func = te.create_prim_func([A, B, C])

    def inputs() -> list[np.ndarray]:
        return [_rand((m, k), 1), _rand((k, n), 2), np.zeros((m, n), "float32")]

    return func, inputs, lambda a, b, c: a @ b


def matmul_relu(m: int = 16, n: int = 16, k: int = 16) -> Workload:
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], 0.0), name="D")
    func = te.create_prim_func([A, B, D])

    def inputs() -> list[np.ndarray]:
        return [_rand((m, k), 1), _rand((k, n), 2), np.zeros((m, n), "float32")]

    return func, inputs, lambda a, b, d: np.maximum(a @ b, 0)


def conv2d(n: int = 1, c: int = 3, h: int = 8, w: int = 8, f: int = 4, kh: int = 3) -> Workload:
    """NCHW conv, stride 1, padding 1, with an explicit padding stage."""
    X = te.placeholder((n, c, h, w), name="X")
    W = te.placeholder((f, c, kh, kh), name="W")
    pad = kh // 2
    P = te.compute((n, c, h + 2 * pad, w + 2 * pad),
                   lambda b, ch, y, x: te.if_then_else(
                       te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
                       X[b, ch, y - pad, x - pad], 0.0), name="P")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")
    Y = te.compute((n, f, h, w), lambda b, o, y, x: te.sum(
        P[b, rc, y + ry, x + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    func = te.create_prim_func([X, W, Y])

    def inputs() -> list[np.ndarray]:
        return [_rand((n, c, h, w), 3), _rand((f, c, kh, kh), 4),
                np.zeros((n, f, h, w), "float32")]

    def ref(x: np.ndarray, wt: np.ndarray, _: Any) -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((n, f, h, w), "float32")
        for dy in range(kh):
            for dx in range(kh):
                out += np.einsum("bchw,oc->bohw", xp[:, :, dy:dy + h, dx:dx + w],
                                 wt[:, :, dy, dx])
        return out

    return func, inputs, ref


def row_sum(m: int = 12, n: int = 20) -> Workload:
    A = te.placeholder((m, n), name="A")
    r = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, r], axis=r), name="B")
    func = te.create_prim_func([A, B])

    def inputs() -> list[np.ndarray]:
        return [_rand((m, n), 5), np.zeros((m,), "float32")]

    return func, inputs, lambda a, b: a.sum(axis=1)


def elementwise_chain(m: int = 16, n: int = 24) -> Workload:
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((m, n), lambda i, j: te.exp(C[i, j] * 0.1), name="D")
    func = te.create_prim_func([A, D])

    def inputs() -> list[np.ndarray]:
        return [_rand((m, n), 6), np.zeros((m, n), "float32")]

    return func, inputs, lambda a, d: np.exp((a * 2 + 1) * np.float32(0.1))


def check(func: ir.PrimFunc, workload: Workload, rtol: float = 1e-4) -> None:
    """Run ``func`` in the interpreter on the workload's inputs and compare with numpy."""
    from toolchain.tir.analysis import verify_well_formed

    assert verify_well_formed(func) == [], verify_well_formed(func)
    _, inputs, ref = workload
    args = inputs()
    run(func, *args)
    expect = ref(*args)
    np.testing.assert_allclose(args[-1], expect, rtol=rtol, atol=1e-4)
