"""Accelerator descriptors (kind vta): targets/vta.yaml is a Target like any other."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolchain.errors import TargetError
from toolchain.intrinsics import load_intrinsics
from toolchain.target import TARGETS_DIR, load_target, parse_target
from toolchain.tir.schedule.tensorize import TensorIntrin
from toolchain.vta import run_fsim
from toolchain.vta.compile import compile_dense
from toolchain.vta.config import config_from_target, load_config


def test_vta_yaml_is_a_target_with_accelerator_fields() -> None:
    t = load_target("vta")
    assert t.kind == "vta" and t.is_accelerator and t.keys == ("vta",)
    assert t.gemm == {"batch": 1, "block_in": 16, "block_out": 16}
    assert t.memory_scopes == {"vta.inp": 32768, "vta.wgt": 262144, "vta.acc": 131072,
                               "vta.uop": 32768, "vta.out": 32768}
    assert t.intrinsics["gemm"]["instruction"] == "GEMM"
    assert t.intrinsics["gemm"]["scopes"] == {"A": "vta.inp", "B": "vta.wgt", "C": "vta.acc"}
    assert config_from_target(t) == load_config()
    assert not load_target("c-generic").is_accelerator


def test_intrinsics_are_registered_from_their_behaviour() -> None:
    names = load_intrinsics(load_target("vta"))
    assert "vta.gemm" in names and "vta.alu_shr_imm" in names
    gemm = TensorIntrin.get("vta.gemm")
    assert [(b.name, [int(d.value) for d in b.shape], b.dtype) for b in gemm.desc.buffers] == [
        ("A", [1, 16], "int8"), ("B", [16, 16], "int8"), ("C", [1, 16], "int32")]
    assert '"vta.gemm"' in str(gemm.impl)
    shr = TensorIntrin.get("vta.alu_shr_imm")
    assert "T.shift_right(A" in str(shr.desc) and str(shr.impl).rstrip().endswith("imm)")


def test_extends_variant_changes_one_size(tmp_path: Path) -> None:
    p = tmp_path / "big.yaml"
    p.write_text("name: vta-big-inp\nkind: vta\nextends: vta\nbuffers:\n  input: 16384\n")
    t = load_target(p)
    assert t.buffers["input"] == 16384 and t.buffers["weight"] == 262144
    assert t.memory_scopes["vta.inp"] == 16384 and t.intrinsics.keys() == \
        load_target("vta").intrinsics.keys()
    cfg = load_config(p)
    assert (cfg.name, cfg.inp_depth, cfg.wgt_depth) == ("vta-big-inp", 1024, 1024)


def test_variant_of_the_gemm_core_rebases_the_inherited_intrinsics(tmp_path: Path) -> None:
    """A variant that changes only ``gemm:`` used to keep vta.yaml's 16-wide intrinsics:
    no loop of the compiler's schedules matched them and every layer stayed on the host
    ("tensorize with 'gemm': loop 0 has extent 8, the intrinsic's loop o has 16")."""
    p = tmp_path / "g.yaml"
    p.write_text("name: vta-2x8x8\nkind: vta\nextends: vta\n"
                 "gemm: {batch: 2, block_in: 8, block_out: 8}\nbuffers: {weight: 65536}\n")
    t = load_target(p)
    assert t.intrinsics["gemm"]["extents"] == {"b": 2, "o": 8, "k": 8}
    assert t.intrinsics["load_wgt"]["extents"] == {"o": 8, "k": 8}
    assert t.intrinsics["alu_shr_imm"]["extents"] == {"b": 2, "o": 8}
    assert load_target("vta").intrinsics["gemm"]["extents"] == {"b": 1, "o": 16, "k": 16}
    # the product: a dense layer compiled for the variant, bit-exact on the simulator
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (40, 20), dtype=np.int8)
    x = rng.integers(-128, 128, (6, 40), dtype=np.int8)
    layer = compile_dense(w, m=6, shift=8, target=t, layer="fc")
    out = layer.read_output(run_fsim(layer.program, layer.image(x), tokens=True).dram)
    ref = np.clip((x.astype(np.int32) @ w.astype(np.int32)) >> 8, -128, 127)
    assert (out == ref).all()


def test_declared_intrinsic_extents_must_match_the_gemm_core() -> None:
    text = _vta_text("  batch: 1 ", "  batch: 2 ")
    with pytest.raises(TargetError, match=r"t.yaml:\d+: intrinsic 'gemm': extents \{b: 1\} "
                                          r"disagree with the GEMM core \(gemm: batch 2\); "
                                          r"write \{b: 2\}"):
        parse_target(text, "t.yaml")


def test_a_variant_without_an_alu_op_is_told_to_drop_its_intrinsics(tmp_path: Path) -> None:
    """The error named vta.yaml's line only, as if the shipped file were wrong."""
    p = tmp_path / "nomul.yaml"
    p.write_text("name: nomul\nkind: vta\nextends: vta\nalu: {ops: [MIN, MAX, ADD, SHR]}\n")
    with pytest.raises(TargetError, match=r"vta.yaml:\d+: intrinsic 'alu_mul_imm': instruction "
                                          r"'ALU.MUL' but 'alu.ops' lists only MIN, MAX, ADD, "
                                          r"SHR \(in .*nomul.yaml; a variant without MUL drops "
                                          r"the intrinsics that use it: drop_intrinsics: "
                                          r"\[alu_mul_imm\]\)"):
        load_target(p)
    p.write_text(p.read_text() + "drop_intrinsics: [alu_mul_imm]\n")
    assert "alu_mul_imm" not in load_target(p).intrinsics


def _vta_text(old: str, new: str) -> str:
    text = (TARGETS_DIR / "vta.yaml").read_text()
    assert old in text
    return text.replace(old, new)


def test_accelerator_errors_name_what_and_where() -> None:
    with pytest.raises(TargetError, match=r"t.yaml: key 'gemm' describes an accelerator; it "
                                          r"applies to targets of kind 'vta', not 'c'"):
        parse_target("name: x\nkind: c\ngemm: {batch: 1, block_in: 16, block_out: 16}\n",
                     "t.yaml")
    with pytest.raises(TargetError, match=r"t.yaml: missing key\(s\) gemm.batch"):
        parse_target("name: x\nkind: vta\n", "t.yaml")
    with pytest.raises(TargetError, match=r"t.yaml:\d+: intrinsic 'gemm': instruction 'GEMV' "
                                          r"is not one of GEMM"):
        parse_target(_vta_text("instruction: GEMM", "instruction: GEMV"), "t.yaml")
    with pytest.raises(TargetError, match=r"intrinsic 'alu_add' is implemented by the "
                                          r"instruction 'ALU.ADD'; drop key 'function'"):
        parse_target(_vta_text("    instruction: ALU.ADD\n  alu_add_imm",
                               "    instruction: ALU.ADD\n    function: f\n  alu_add_imm"),
                     "t.yaml")
    with pytest.raises(TargetError, match=r"instruction 'ALU.MUL' but 'alu.ops' lists only "
                                          r"MIN, MAX, ADD, SHR"):
        parse_target(_vta_text("[MIN, MAX, ADD, SHR, MUL]", "[MIN, MAX, ADD, SHR]"), "t.yaml")
    with pytest.raises(TargetError, match=r"t.yaml:\d+: unknown key 'queues.depth'"):
        parse_target(_vta_text("  token_queue_depth: 8", "  depth: 8"), "t.yaml")
