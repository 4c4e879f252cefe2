"""tensorize: operands of higher rank than the intrinsic, and scalar operands."""

from __future__ import annotations

import pytest

from toolchain import te
from toolchain.errors import ScheduleError
from toolchain.intrinsics import load_intrinsics
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule


def _alu(imm_of):
    A = te.placeholder((4, 1, 16), "int32", "A")
    B = te.compute((4, 1, 16), lambda m, b, o: ir.Max(A[m, b, o], imm_of(m)), name="B")
    return Schedule(te.create_prim_func([A, B]), load_target("vta"))


def test_leading_dims_and_scalar_operand_match() -> None:
    load_intrinsics("vta")
    sch = _alu(lambda m: ir.IntImm(-7, "int32"))
    m, _, o = sch.get_loops(sch.get_block("B"))
    sch.tensorize(o, "vta.alu_max_imm")
    assert 'T.call_extern("int32", "vta.alu_max_imm", T.address_of(A[m, b, 0]), ' \
           "T.address_of(B[m, b, 0]), -7)" in str(sch.mod)


def test_scalar_operand_that_varies_inside_the_tile_is_refused() -> None:
    load_intrinsics("vta")
    sch = _alu(lambda m: ir.IntImm(3, "int32"))
    A = te.placeholder((4, 1, 16), "int32", "A")
    B = te.compute((4, 1, 16), lambda m, b, o: ir.Max(A[m, b, o], o), name="B")
    sch = Schedule(te.create_prim_func([A, B]), load_target("vta"))
    _, _, o = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="scalar operand imm matches o, which changes "
                                            "inside the tile"):
        sch.tensorize(o, "vta.alu_max_imm")


def test_leading_index_moving_inside_the_tile_is_refused() -> None:
    load_intrinsics("vta")
    A = te.placeholder((16, 1, 1), "int32", "A")
    B = te.compute((16, 1, 1), lambda o, b, z: ir.Max(A[o, b, z], ir.IntImm(1, "int32")),
                   name="B")
    sch = Schedule(te.create_prim_func([A, B]), load_target("vta"))
    o = sch.get_loops(sch.get_block("B"))[0]
    with pytest.raises(ScheduleError, match="tensorize"):
        sch.tensorize(o, "vta.alu_max_imm")
