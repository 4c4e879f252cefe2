"""Run compute definitions on numpy arrays and compare them with the op registry.

A PrimFunc is built with ``te.create_prim_func`` and run with ``toolchain.driver.build``
(C) when that module exists, else with the exact TIR interpreter (slow: keep shapes small).

``KILN_TOPI_EXECUTOR`` chooses: ``c`` (every kernel compiled), ``llvm`` (every kernel
compiled in-process by the LLVM backend), ``interp`` (every kernel interpreted) or ``auto``
(default: kernels of fewer than ``AUTO_C_ITERS`` loop iterations are interpreted, which is
faster than a cold C compile; the rest are compiled).
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain import te
from toolchain.graph.ir import Node, Value, dtype_of
from toolchain.graph.ops import get_op
from toolchain.tir import interpreter


def _builder() -> Any:
    if MODE == "interp":
        return None
    try:
        return importlib.import_module("toolchain.driver").build
    except (ImportError, AttributeError):
        return None


MODE = os.environ.get("KILN_TOPI_EXECUTOR", "auto")
BUILD = _builder()
AUTO_C_ITERS = 20000


def work(outputs: Sequence[te.Tensor]) -> int:
    """Loop iterations of every compute reachable from ``outputs``."""
    seen: set[int] = set()
    total = 0
    stack = list(outputs)
    while stack:
        t = stack.pop()
        if id(t) in seen or not isinstance(t.op, te.ComputeOp):
            continue
        seen.add(id(t))
        n = math.prod(int(s.value) for s in t.shape)
        for r in t.op.reduce_axis:
            n *= int(r.dom.extent.value)
        total += n
        stack.extend(t.op.input_tensors())
    return total


def use_c(outputs: Sequence[te.Tensor]) -> bool:
    """Whether :func:`run_te` compiles these outputs (see the module docstring)."""
    if BUILD is None:
        return False
    return MODE in ("c", "llvm") or work(outputs) >= AUTO_C_ITERS


def _shape_of(t: te.Tensor) -> tuple[int, ...]:
    return tuple(int(s.value) for s in t.shape)


def run_te(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
           arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Build ``inputs + outputs`` into a PrimFunc, run it on ``arrays``, return outputs."""
    func = te.create_prim_func(list(inputs) + list(outputs))
    args = [np.ascontiguousarray(a).reshape(_shape_of(t)) for a, t in
            zip(arrays, inputs, strict=True)]
    outs = [np.zeros(_shape_of(t), dtype=np.dtype(t.dtype)) for t in outputs]
    if use_c(outputs):
        BUILD(func, target="c", backend="llvm" if MODE == "llvm" else None)(*args, *outs)
    else:
        interpreter.run(func, *args, *outs)
    return outs


def make_node(op: str, arrays: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
              const: Sequence[int] = (), n_out: int = 1) -> Node:
    """A one-node graph: input ``i`` is a constant when ``i in const`` (else a runtime
    value); output types come from the registry's ``infer``."""
    ins = []
    for i, a in enumerate(arrays):
        if a is None:
            ins.append(None)
        elif i in const:
            ins.append(Value.constant(f"in{i}", np.asarray(a)))
        else:
            ins.append(Value(f"in{i}", np.shape(a), dtype_of(np.asarray(a))))
    attrs = dict(attrs or {})
    dummy = [Value(f"out{k}", (1,), "float32") for k in range(n_out)]
    types = get_op(op).infer(Node(op, "n0", ins, dummy, attrs))
    outs = [Value(f"out{k}", t.shape, t.dtype) for k, t in enumerate(types[:n_out])]
    return Node(op, "n0", ins, outs, attrs)


def run_node(node: Node, arrays: Sequence[np.ndarray | None], **options: Any
             ) -> list[np.ndarray]:
    """Run the registry's compute of ``node`` on ``arrays`` (one per node input); inputs
    the compute packs at compile time are packed with its numpy function."""
    from toolchain.topi.registry import node_compute

    nc = node_compute(node, **options)
    kernel_inputs = {v.name for v in nc.input_values}  # not those read at compile time
    feeds = nc.feeds({v.name: a for v, a in zip(node.inputs, arrays, strict=True)
                      if v is not None and v.name in kernel_inputs})
    outs = run_te(nc.inputs, nc.outputs, feeds)
    return [o.reshape(v.shape) for o, v in zip(outs, node.outputs, strict=True)]


def check_node(op: str, arrays: Sequence[np.ndarray | None],
               attrs: Mapping[str, Any] | None = None, const: Sequence[int] = (),
               n_out: int = 1, rtol: float = 1e-5, atol: float = 1e-6,
               **options: Any) -> list[np.ndarray]:
    """Compare the compute of a one-node graph with the registry's numpy reference
    (``options`` go to ``node_compute``, e.g. ``algorithm="winograd2"``)."""
    node = make_node(op, arrays, attrs, const, n_out)
    got = run_node(node, arrays, **options)
    want = get_op(op).reference(list(arrays), dict(attrs or {}))[:n_out]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype, f"{op} output {k}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{op} output {k}: shape {g.shape} != {w.shape}"
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op} output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{op} output {k}")
    return got


def rand(*shape: int, seed: int = 0, dtype: str = "float32", lo: float = -2.0,
         hi: float = 2.0) -> np.ndarray:
    """Uniform random array (integers for integer dtypes)."""
    rng = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return rng.uniform(lo, hi, size=shape).astype(dtype)
