"""IR nodes, dtypes, structural equality, visitors/mutators, interpreter details."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator, free_vars, substitute
from toolchain.tir.interpreter import run


def test_dtype_helpers() -> None:
    assert ir.lanes_of("float32x8") == 8 and ir.lanes_of("int32") == 1
    assert ir.element_of("float32x8") == "float32"
    assert ir.with_lanes("int32", 4) == "int32x4" and ir.with_lanes("int32x4", 1) == "int32"
    assert ir.is_float("float16x2") and ir.is_int("uint8") and not ir.is_int("bool")


def test_operator_dtypes() -> None:
    i = ir.Var("i")
    x = ir.Var("x", "float32")
    assert (i + 1).dtype == "int32" and (x * 2).dtype == "float32"
    assert (i < 3).dtype == "bool"
    assert ir.Ramp(i, 1, 8).dtype == "int32x8"
    A = ir.Buffer("A", (64,), "float32")
    assert A[ir.Ramp(i, 1, 8)].dtype == "float32x8"
    assert ir.Broadcast(x, 4).dtype == "float32x4"


def test_nodes_are_immutable_and_compare_by_identity() -> None:
    i = ir.Var("i")
    with pytest.raises(dataclasses.FrozenInstanceError):
        i.name = "j"  # type: ignore[misc]
    assert ir.Var("i") is not i and len({i, ir.Var("i")}) == 2
    a, b = ir.Var("a"), ir.Var("b")
    assert ir.structural_equal(i + 1, i + 1)
    assert not ir.structural_equal(a + 1, b + 1)
    assert ir.structural_equal(a + 1, b + 1, map_free_vars=True)


def test_mutator_keeps_identity_when_nothing_changes() -> None:
    i = ir.Var("i")
    A = ir.Buffer("A", (8,))
    loop = ir.For(i, 0, 8, "serial", A.store(A[i] + 1.0, [i]))
    assert StmtExprMutator().visit(loop) is loop

    class One(StmtExprMutator):
        def visit_FloatImm(self, e: ir.FloatImm) -> ir.PrimExpr:
            return ir.FloatImm(2.0)

    new = One().visit(loop)
    assert new is not loop and "A[i] + T.float32(2.0)" in str(new)


def test_substitute_and_free_vars() -> None:
    i, j = ir.Var("i"), ir.Var("j")
    e = substitute(i * 2 + j, {i: j + 1})
    assert str(e) == "(j + 1) * 2 + j"
    assert free_vars(e) == [j]


def test_interpreter_runs_vector_code() -> None:
    A = ir.Buffer("A", (16,), "float32")
    B = ir.Buffer("B", (16,), "float32")
    i = ir.Var("i")
    idx = ir.Ramp(i * 8, 1, 8)
    body = ir.For(i, 0, 2, "serial", ir.BufferStore(B, A[idx] * ir.Broadcast(2.0, 8), (idx,)))
    f = ir.PrimFunc((A, B), body)
    a = np.arange(16, dtype="float32")
    b = np.zeros(16, "float32")
    run(f, a, b)
    np.testing.assert_allclose(b, a * 2)


def test_interpreter_flattened_buffer_aliases_param() -> None:
    A = ir.Buffer("A", (4, 4), "float32")
    flat = ir.Buffer("A", (16,), "float32", data=A.data)
    i = ir.Var("i")
    f = ir.PrimFunc((A,), ir.For(i, 0, 16, "serial", flat.store(flat[i] + 1.0, [i])))
    a = np.zeros((4, 4), "float32")
    run(f, a)
    assert a.sum() == 16


def test_stmt_only_mutator_leaves_expressions() -> None:
    from toolchain.tir.functor import StmtMutator, StmtVisitor

    i = ir.Var("i")
    A = ir.Buffer("A", (8,))
    loop = ir.For(i, 0, 8, "serial", A.store(A[i] + 1.0, [i]))

    class Unroll(StmtMutator):
        def visit_For(self, s: ir.For) -> ir.Stmt:
            return dataclasses.replace(super().visit_For(s), kind="unrolled")

    assert "T.unroll(8)" in str(Unroll().visit(loop))
    seen = []

    class Count(StmtVisitor):
        def visit_BufferStore(self, s: ir.BufferStore) -> None:
            seen.append(s)

    Count().visit(loop)
    assert len(seen) == 1


def test_hand_written_inits_match_the_dataclass_fields() -> None:
    """BinaryOp, IntImm, Cast and Call have their own ``__init__`` (speed): keywords,
    ``dataclasses.replace``, the dtype rules and Python-number operands still work."""
    i = ir.Var("i")
    assert ir.Add(a=i, b=2).b.dtype == "int32" and ir.Add(i, 2.0).dtype == "float32"
    assert ir.LT(i, 3).dtype == "bool" and ir.Add(i, i, dtype="int64").dtype == "int64"
    assert dataclasses.replace(ir.Mul(i, 4), b=ir.IntImm(8)).b.value == 8
    assert ir.IntImm(True, "bool").dtype == "bool"
    assert dataclasses.replace(ir.Cast("int8", i), dtype="int16").dtype == "int16"
    call = ir.Call("float32", "exp", [1.0])
    assert isinstance(call.args, tuple) and isinstance(call.args[0], ir.FloatImm)
    assert [f.name for f in dataclasses.fields(call)] == ["dtype", "op", "args"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.op = "log"  # type: ignore[misc]


def test_mutator_with_its_own_visit_expr_sees_every_operand() -> None:
    """Operands are dispatched inline only where ``visit_expr`` is the plain dispatch; a
    mutator that overrides it still gets every operand of a binary op and a cast."""
    seen: list[str] = []

    class Spy(StmtExprMutator):
        def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
            seen.append(type(e).__name__)
            return super().visit_expr(e)

    i = ir.Var("i")
    Spy().visit_expr(ir.Cast("float32", i * 2 + 1))
    assert seen == ["Cast", "Add", "Mul", "Var", "IntImm", "IntImm"]
    assert not Spy._direct and StmtExprMutator._direct
