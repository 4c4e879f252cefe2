"""The printer: a golden text for a split/reorder/bind schedule, and expression forms."""

from __future__ import annotations

from tests.tir import workloads as W
from toolchain import te
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

GOLDEN = '''\
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), \
C: T.Buffer((64, 64), "float32")):
    for i_0 in T.thread_binding(4, thread="blockIdx.x"):
        for j_0 in T.thread_binding(4, thread="blockIdx.y"):
            for k in range(64):
                for i_1 in T.thread_binding(16, thread="threadIdx.y"):
                    for j_1 in T.thread_binding(16, thread="threadIdx.x"):
                        with T.block("C"):
                            vi = T.axis.spatial(64, i_0 * 16 + i_1)
                            vj = T.axis.spatial(64, j_0 * 16 + j_1)
                            vk = T.axis.reduce(64, k)
                            T.reads(A[vi, vk], B[vk, vj])
                            T.writes(C[vi, vj])
                            with T.init():
                                C[vi, vj] = T.float32(0.0)
                            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]'''


def _scheduled() -> Schedule:
    sch = Schedule(W.matmul(64, 64, 64)[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 16])
    j0, j1 = sch.split(j, factors=[None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "blockIdx.y")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    return sch


def test_golden_split_reorder_bind() -> None:
    sch = _scheduled()
    assert str(sch.mod) == GOLDEN
    assert str(sch) == GOLDEN
    assert sch.mod.script() == GOLDEN


def test_output_is_deterministic() -> None:
    assert str(_scheduled().mod) == str(_scheduled().mod)


def test_grid_and_unscheduled_func() -> None:
    text = str(W.matmul_relu(8, 8, 8)[0])
    assert "for i, j, k in T.grid(8, 8, 8):" in text
    assert '    # with T.block("root"):\n    C = T.alloc_buffer((8, 8), "float32")' in text
    # the second nest reuses the names i, j: the printer keeps them apart
    assert "for i_1, j_1 in T.grid(8, 8):" in text


def test_expressions() -> None:
    i, j = ir.Var("i"), ir.Var("j")
    x = ir.Var("x", "float32")
    assert str((i + j) * 2) == "(i + j) * 2"
    assert str(i - (j - 1)) == "i - (j - 1)"
    assert str(i // 4 % 3) == "i // 4 % 3"
    assert str(ir.Min(i, j)) == "T.min(i, j)"
    assert str(ir.Div(i, j)) == "T.truncdiv(i, j)"
    assert str(x / 2.0) == "x / T.float32(2.0)"
    assert str(ir.Cast("int8", i)) == 'T.Cast("int8", i)'
    assert str(ir.IntImm(5, "int64")) == "T.int64(5)"
    assert str(ir.Ramp(i * 8, 1, 8)) == "T.Ramp(i * 8, 1, 8)"
    assert str(ir.Broadcast(x, 4)) == "T.Broadcast(x, 4)"
    assert str(te.if_then_else(i < 3, x, 0.0)) == "T.if_then_else(i < 3, x, T.float32(0.0))"
    assert str(ir.Call("float32", "my_fn", [x])) == 'T.call_extern("float32", "my_fn", x)'
    assert str(ir.And(i < 3, j > 1)) == "i < 3 and j > 1"


def test_lowered_statements_print() -> None:
    A = ir.Buffer("A", (16,), "float32")
    buf = ir.Buffer("tmp", (16,), "float32", "local")
    i = ir.Var("i")
    body = ir.Allocate(buf, ir.seq(
        ir.For(i, 0, 2, "serial", buf.store(A[ir.Ramp(i * 8, 1, 8)], [ir.Ramp(i * 8, 1, 8)])),
        ir.IfThenElse(i < 1, ir.Evaluate(ir.Call("int32", "tir.storage_sync",
                                                 [ir.StringImm("shared")])))))
    text = str(ir.PrimFunc((A,), body))
    assert 'tmp = T.allocate((16,), "float32", scope="local")' in text
    assert "tmp[T.Ramp(i * 8, 1, 8)] = A[T.Ramp(i * 8, 1, 8)]" in text
    assert "T.storage_sync('shared')" in text
