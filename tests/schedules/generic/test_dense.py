"""Default MatMul/Gemm schedule on every CPU target that runs here vs the op registry's
numpy reference (max relative error <= 1e-4), incl. odd, non-divisible shapes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.covering import params
from tests.schedules._cpu_targets import HOST_BACKENDS, RUNNABLE, cross_compile_m4
from toolchain.codegen import get_renderer
from toolchain.errors import InputError, UnsupportedError
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops.registry import get_op
from toolchain.schedules import compile_op, make_node, schedule_for
from toolchain.schedules.generic.common import cpu_params
from toolchain.schedules.generic.dense import plan_gemm
from toolchain.target import load_target
from toolchain.tir.transform.pipeline import lower

RTOL = 1e-4


def _check(op, arrays, attrs=None) -> None:
    rng_inputs = [a for a, v in zip(arrays, op.node.inputs, strict=False) if v.data is None]
    got = op(*rng_inputs)[0]
    ref = get_op(op.node.op).reference(list(arrays), {**_defaults(op.node.op), **(attrs or {})})
    ref = np.asarray(ref[0])
    err = np.abs(got - ref).max() / max(1e-30, np.abs(ref).max())
    assert got.shape == ref.shape and err <= RTOL, (op.metadata["info"], err)


def _defaults(op: str) -> dict:
    return {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0} if op == "Gemm" else {}


SHAPES = [(64, 32, 48), (7, 13, 5), (1, 70, 33), (33, 70, 50)]


@pytest.mark.parametrize("m, k, n, target, backend", params(SHAPES, RUNNABLE, HOST_BACKENDS))
def test_matmul_constant_weights(target: str, m: int, k: int, n: int, backend: str) -> None:
    """Every shape on every target, each through one of the two backends (both meet every
    shape and every target: ``tests/covering.py``)."""
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    op = compile_op("MatMul", target, inputs=[(m, k), w], backend=backend)
    assert op.metadata["info"]["packed_b"] is True
    _check(op, [a, w])


@pytest.mark.parametrize("target", RUNNABLE)
def test_matmul_runtime_operands_and_batches(target: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 9, 20)).astype(np.float32)
    b = rng.standard_normal((3, 20, 17)).astype(np.float32)
    op = compile_op("MatMul", target, inputs=[a.shape, b.shape])
    assert op.metadata["info"]["packed_b"] is False
    _check(op, [a, b])
    w = rng.standard_normal((20, 11)).astype(np.float32)
    _check(compile_op("MatMul", target, inputs=[a.shape, w]), [a, w])


@pytest.mark.parametrize("attrs, cshape, target, backend", params([
    pytest.param({"transB": 1}, (19,), id="attrs0-cshape0"),
    pytest.param({"transA": 1, "alpha": 0.5, "beta": 2.0}, (10, 19), id="attrs1-cshape1"),
    pytest.param({"alpha": -1.5}, None, id="attrs2-None"),
], RUNNABLE, HOST_BACKENDS))
def test_gemm(target: str, attrs: dict, cshape, backend: str) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((12, 10) if attrs.get("transA") else (10, 12)).astype(np.float32)
    b = rng.standard_normal((19, 12) if attrs.get("transB") else (12, 19)).astype(np.float32)
    ins = [a.shape, b]
    arrays = [a, b]
    if cshape:
        c = rng.standard_normal(cshape).astype(np.float32)
        ins.append(c)
        arrays.append(c)
    op = compile_op("Gemm", target, inputs=ins, attrs=attrs, backend=backend)
    _check(op, arrays, attrs)


def test_parallel_schedule_matches() -> None:
    t = replace(load_target(RUNNABLE[-1]), cores=2)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 64)).astype(np.float32)
    w = rng.standard_normal((64, 70)).astype(np.float32)
    op = compile_op("MatMul", t, inputs=[a.shape, w])
    assert "parallel" in str(op.op_schedule.schedule.mod)
    _check(op, [a, w])


def test_plan_uses_descriptor_caches_and_registers() -> None:
    big = plan_gemm(1024, 1024, 1024, cpu_params("x86_64-avx512"))
    small = plan_gemm(1024, 1024, 1024, cpu_params("c-generic"))
    assert (big.mr, big.nr) == (8, 32) and small.nr == 8
    assert big.mc * 1024 * 4 <= cpu_params("x86_64-avx512").l2_bytes // 2
    assert big.mc > small.mc


def test_cortex_m4_dense_cross_compiles(tmp_path) -> None:
    node = make_node("MatMul", [(5, 16), np.ones((16, 9), np.float32)])
    s = schedule_for(node, "cortex-m4")
    cross_compile_m4(get_renderer("c", openmp=False).render(lower(s.schedule)).code, tmp_path)


@pytest.mark.parametrize("target", ["cortex-m4", *RUNNABLE])
@pytest.mark.parametrize("a_shape, b_shape", [
    ((1, 4, 1, 4), (1, 4, 4, 1)),   # M = N = 1: every register tile loop has extent 1
    ((2, 1, 6), (2, 6, 5)),         # M = 1
    ((3, 7, 6), (6, 1)),            # N = 1
])
def test_unit_tiles_schedule_only_their_own_loops(target: str, a_shape, b_shape) -> None:
    """A register tile of one row or one column: the initialisation and write-back blocks
    lose their unit loops, and the schedule must not split and vectorize the product's
    shared loops in their place (found by the fuzzer, seed 120069: a ScheduleError on
    cortex-m4, and a vectorized loop around the reduction)."""
    from toolchain.runtime.build import build

    rng = np.random.default_rng(5)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    node = make_node("MatMul", [a_shape, b_shape])
    s = schedule_for(node, target)
    out = np.empty(node.outputs[0].shape, np.float32)
    build(s.schedule, "c-generic")(a, b, out)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-6)


def test_compile_op_errors() -> None:
    op = compile_op("MatMul", "c-generic", inputs=[(2, 3), np.ones((3, 4), np.float32)])
    with pytest.raises(InputError, match=r"takes 1 run-time inputs \(x0\), got 2"):
        op(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    with pytest.raises(InputError, match="input 0 must be a shape tuple"):
        compile_op("MatMul", "c-generic", inputs=["big", (3, 4)])
    with pytest.raises(InputError, match=r"input 'x0' has shape \(3, 3\), expected \(2, 3\)"):
        op(np.ones((3, 3), np.float32))  # (it was numpy's 'cannot reshape array')
    # the right element count in the wrong shape ran as if reshaped (a transposed input
    # gave a silent wrong product)
    with pytest.raises(InputError, match=r"node 'matmul' \(MatMul\): input 'x0' has shape "
                                         r"\(3, 2\), expected \(2, 3\)"):
        op(np.ones((3, 2), np.float32))
    with pytest.raises(InputError, match=r"input 'x0' has shape \(6,\), expected \(2, 3\)"):
        op.bound_args(np.ones(6, np.float32))
    with pytest.raises(InputError, match=r"takes 1 run-time inputs \(x0\), got 2"):
        op.bound_args(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(InputError, match=r"compile_op\(node 'matmul' \(MatMul\)\): a Node "
                                         r"carries its own inputs and attributes"):
        compile_op(op.node, "c-generic", inputs=[(2, 3)])  # inputs= was ignored
    with pytest.raises(InputError, match="a Node carries its own"):
        compile_op(op.node, "c-generic", attrs={"axis": 1})
    with pytest.raises(InputError, match=r"out= takes 1 arrays, got 2"):
        op(np.ones((2, 3), np.float32), out=[np.empty((2, 4), np.float32)] * 2)
    with pytest.raises(InputError, match="attrs must map attribute names to values"):
        compile_op("Softmax", "c-generic", inputs=[(1, 2)], attrs="axis=1")
    # MatMul has a GPU entry (the tiled GEMM); an element-wise op alone has none there
    node = Node("Relu", "r", [Value("x", (2, 3), "float32")], [Value("y", (2, 3), "float32")])
    with pytest.raises(UnsupportedError, match=r"node 'r' \(Relu\): no default schedule "
                                               r"for op 'Relu' on target 'cuda-sm80'"):
        schedule_for(node, "cuda-sm80")


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
def test_x86_dense_compiles_warning_free_with_the_target_flags(target) -> None:
    op = compile_op("Gemm", target, inputs=[(9, 20), np.ones((20, 30), np.float32),
                                            np.ones(30, np.float32)],
                    extra_flags=["-Wall", "-Wextra", "-Werror"])
    assert f"-march={load_target(target).arch}" in op.metadata["build"]["flags"]
