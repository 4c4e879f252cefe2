"""Tensor expressions: computes, reductions, symbolic shapes, math; create_prim_func."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.tir.interpreter import run


def _rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def test_matmul_prim_func_structure_and_result() -> None:
    A = te.placeholder((8, 6), name="A")
    B = te.placeholder((6, 4), name="B")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((8, 4), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert C.op.reduce_axis == (k,) and [a.name for a in C.op.axis] == ["i", "j"]
    f = te.create_prim_func([A, B, C])
    assert [p.name for p in f.params] == ["A", "B", "C"]
    text = str(f)
    assert "vk = T.axis.reduce(6, k)" in text and "with T.init():" in text
    assert "T.reads(A[vi, vk], B[vk, vj])" in text
    a, b, c = _rand(8, 6), _rand(6, 4), np.zeros((8, 4), "float32")
    run(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_symbolic_shapes() -> None:
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    f = te.create_prim_func([A, B])
    assert 'A: T.Buffer((m, n), "float32")' in str(f)
    for shape in ((3, 5), (1, 7)):
        a = _rand(*shape)
        b = np.zeros_like(a)
        run(f, a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_scalar_var_param() -> None:
    n = te.var("n")
    s = te.var("s", "float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * s, name="B")
    f = te.create_prim_func([A, B, s])
    assert str(f).startswith('@T.prim_func\ndef main(A: T.Buffer((n,), "float32"), B: '
                             'T.Buffer((n,), "float32"), s: T.float32):')


@pytest.mark.parametrize("red,ref", [(te.sum, np.sum), (te.max, np.max), (te.min, np.min)])
def test_builtin_reductions(red: object, ref: object) -> None:
    A = te.placeholder((5, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    B = te.compute((5,), lambda i: red(A[i, k], axis=k), name="B")
    a, b = _rand(5, 7), np.zeros(5, "float32")
    run(te.create_prim_func([A, B]), a, b)
    np.testing.assert_allclose(b, ref(a, axis=1), rtol=1e-5)


def test_user_defined_reduction_and_multi_axis() -> None:
    prod = te.comm_reducer(lambda x, y: x * y, lambda dt: te.const(1, dt), name="prod")
    A = te.placeholder((3, 4, 5), name="A")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((0, 5), name="k2")
    B = te.compute((3,), lambda i: prod(A[i, k1, k2], axis=[k1, k2]), name="B")
    a = (np.random.default_rng(1).random((3, 4, 5)) + 0.5).astype("float32")
    b = np.zeros(3, "float32")
    run(te.create_prim_func([A, B]), a, b)
    np.testing.assert_allclose(b, a.prod(axis=(1, 2)), rtol=1e-4)


def test_reduction_with_where() -> None:
    A = te.placeholder((6, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=k <= i), name="B")
    a, b = _rand(6, 6), np.zeros(6, "float32")
    run(te.create_prim_func([A, B]), a, b)
    np.testing.assert_allclose(b, np.tril(a).sum(axis=1), rtol=1e-5, atol=1e-6)


def test_math_intrinsics_and_casts() -> None:
    A = te.placeholder((8,), name="A")
    outs = {
        "exp": (te.exp, np.exp), "tanh": (te.tanh, np.tanh), "sigmoid":
        (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))), "erf":
        (te.erf, np.vectorize(math.erf)), "sqrt_abs": (lambda x: te.sqrt(te.abs(x)),
                                                       lambda x: np.sqrt(np.abs(x))),
        "log1": (lambda x: te.log(te.abs(x) + 1.0), lambda x: np.log(np.abs(x) + 1)),
    }
    a = _rand(8)
    for name, (fn, ref) in outs.items():
        B = te.compute((8,), lambda i, fn=fn: fn(A[i]), name=name)
        b = np.zeros(8, "float32")
        run(te.create_prim_func([A, B]), a, b)
        np.testing.assert_allclose(b, ref(a), rtol=1e-5, atol=1e-6, err_msg=name)
    C = te.compute((8,), lambda i: te.cast(A[i] * 10.0, "int32"), name="C")
    assert C.dtype == "int32"
    c = np.zeros(8, "int32")
    run(te.create_prim_func([A, C]), a, c)
    np.testing.assert_array_equal(c, np.trunc(a * 10).astype("int32"))


def test_if_then_else_padding_only_loads_in_bounds() -> None:
    A = te.placeholder((5,), name="A")
    P = te.compute((7,), lambda i: te.if_then_else(te.all(i >= 1, i < 6), A[i - 1], 0.0),
                   name="P")
    f = te.create_prim_func([A, P])
    assert "T.reads(A[T.max(vi - 1, 0):T.min(vi, 5)])" in str(f)
    a, p = _rand(5), np.zeros(7, "float32")
    run(f, a, p)
    np.testing.assert_allclose(p, np.pad(a, 1))


def test_intermediates_are_allocated_in_root() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((4,), lambda i: B[i] * B[i], name="C")
    f = te.create_prim_func([A, C])
    assert 'B = T.alloc_buffer((4,), "float32")' in str(f)
    a, c = _rand(4), np.zeros(4, "float32")
    run(f, a, c)
    np.testing.assert_allclose(c, (a + 1) ** 2, rtol=1e-6)


def test_errors() -> None:
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(OptionError, match="tensor 'A' has 2 dimensions .* indexed with 1"):
        te.compute((4,), lambda i: A[i], name="B")
    with pytest.raises(OptionError, match=r"takes 1 indices \(i\) but the shape \(4, 4\)"):
        te.compute((4, 4), lambda i: A[i, i], name="B")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(OptionError, match="a reduction may only be the whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="B")
    j = te.var("j")
    with pytest.raises(OptionError, match="axis j is not a reduce axis"):
        te.sum(A[0, j], axis=[j])
    B = te.compute((4,), lambda i: A[i, 0], name="B")
    with pytest.raises(OptionError, match="placeholder 'A' is used but is not in the "
                                          "argument list"):
        te.create_prim_func([B])


def test_elementwise_max_min() -> None:
    x, y = ir.Var("x", "float32"), ir.Var("y", "float32")
    assert isinstance(te.max(x, y), ir.Max) and isinstance(te.min(x, 0.0), ir.Min)
    assert str(te.maximum(x, y)) == "T.max(x, y)"


def test_tag_and_attrs_become_block_annotations() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B", tag="elemwise",
                   attrs={"layout": "N"})
    assert "T.block_attr({'layout': 'N', 'tag': 'elemwise'})" in str(te.create_prim_func([A, B]))


@pytest.mark.parametrize("shape, kw, says", [
    ("abc", {}, "the shape 'abc' is not a sequence of dimensions"),
    ((4, "4"), {}, r"dimension 1 of the shape \(4, '4'\) is '4', not an integer"),
    ((4, 2.0), {}, "is 2.0, not an integer"),
    ((-1, 4), {}, "dimension 0 of the shape .* is negative"),
    ((4,), {"dtype": "float99"}, "dtype 'float99' is not one of float16"),
])
def test_placeholder_refuses_a_bad_shape_or_dtype(shape, kw, says) -> None:
    with pytest.raises(OptionError, match=says):
        te.placeholder(shape, name="A", **kw)


def test_placeholder_takes_numpy_integers_and_expressions() -> None:
    n = te.var("n") if hasattr(te, "var") else ir.Var("n")
    assert str(te.placeholder((np.int64(4), n), name="A")) == \
        "Tensor(A, shape=(4, n), dtype=float32)"
    assert te.placeholder(np.array([2, 3]), name="B").shape[1].value == 3
