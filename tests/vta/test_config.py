"""targets/vta.yaml loading: defaults, derived sizes, strict validation with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.errors import TargetError
from toolchain.vta.config import DEFAULT_PATH, VTAConfig, load_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return path


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = DEFAULT_PATH.read_text()
    assert old in text
    return _write(tmp_path, text.replace(old, new))


def test_default_file_matches_isa_defaults():
    cfg = load_config()
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
    assert (cfg.input_bytes, cfg.weight_bytes, cfg.acc_bytes, cfg.uop_bytes) == (
        32 * 1024, 256 * 1024, 128 * 1024, 32 * 1024)
    assert (cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.out_depth, cfg.uop_depth) == (
        2048, 1024, 2048, 2048, 8192)
    assert (cfg.inp_row_bytes, cfg.wgt_row_bytes, cfg.acc_row_bytes, cfg.out_row_bytes) == (
        16, 256, 64, 16)
    assert cfg.macs_per_step == 256
    assert cfg == VTAConfig()  # the dataclass defaults are the file's values


def test_unknown_key_names_file_key_and_line(tmp_path):
    path = _variant(tmp_path, "  block_out: 16", "  block_out: 16\n  block_mid: 4")
    with pytest.raises(TargetError) as err:
        load_config(path)
    msg = str(err.value)
    line = DEFAULT_PATH.read_text().splitlines().index("  block_out: 16     # BLOCK_OUT: "
                                                       "output channels of one GEMM step") + 2
    assert f"{path}:{line}: unknown key 'gemm.block_mid'" in msg
    assert "block_in" in msg  # lists what is allowed


def test_wrong_type_and_bool_refused(tmp_path):
    with pytest.raises(TargetError, match=r"'buffers.input' must be int, got str '32k'"):
        load_config(_variant(tmp_path, "input: 32768", "input: 32k"))
    with pytest.raises(TargetError, match=r"'gemm.batch' must be int, got bool"):
        load_config(_variant(tmp_path, "batch: 1", "batch: true"))
    with pytest.raises(TargetError, match=r"'alu' must be a mapping"):
        load_config(_variant(tmp_path, "alu:\n  ops: [MIN, MAX, ADD, SHR, MUL]", "alu: 3"))


def test_missing_key_and_bad_kind(tmp_path):
    with pytest.raises(TargetError, match=r"missing key\(s\) dram.latency_cycles"):
        load_config(_variant(tmp_path, "  latency_cycles: 64", ""))
    with pytest.raises(TargetError, match="applies to targets of kind 'vta', not 'c'"):
        load_config(_variant(tmp_path, "kind: vta", "kind: c"))


def test_sizes_validated_against_isa_field_widths(tmp_path):
    with pytest.raises(TargetError, match=r"'buffers.weight' = 524288 bytes gives 2048 rows, "
                                          r"more than the 1024 rows"):
        load_config(_variant(tmp_path, "weight: 262144", "weight: 524288"))
    with pytest.raises(TargetError, match="not a positive multiple of its row size"):
        load_config(_variant(tmp_path, "input: 32768", "input: 32769"))
    with pytest.raises(TargetError, match="exceeds the bus width"):
        load_config(_variant(tmp_path, "bytes_per_cycle: 16", "bytes_per_cycle: 32"))
    with pytest.raises(TargetError, match="unknown op 'DIV'"):
        load_config(_variant(tmp_path, "[MIN, MAX, ADD, SHR, MUL]", "[MIN, DIV]"))


def test_other_gemm_shapes_derive_their_depths(tmp_path):
    text = DEFAULT_PATH.read_text().replace("block_in: 16", "block_in: 32")
    text = text.replace("block_out: 16", "block_out: 32")
    with pytest.raises(TargetError, match=r"disagree with the GEMM core .*write \{o: 32, k: 32\}"):
        load_config(_write(tmp_path, text))  # a copy of the file: its intrinsics too
    cfg = load_config(_write(tmp_path, text.replace("o: 16", "o: 32").replace("k: 16", "k: 32")))
    assert (cfg.inp_row_bytes, cfg.wgt_row_bytes, cfg.acc_row_bytes) == (32, 1024, 128)
    assert (cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth) == (1024, 256, 1024)


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(TargetError, match="cannot read VTA target file"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(TargetError, match="not valid YAML"):
        load_config(_write(tmp_path, "gemm: [1, 2"))
