"""Target descriptors: loading and strict validation with file/key/line in errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.errors import TargetError
from toolchain.target import load_target, parse_target


def test_shipped_targets_load() -> None:
    cuda = load_target("cuda-sm80")
    assert (cuda.kind, cuda.max_threads_per_block, cuda.max_shared_memory_per_block) == (
        "cuda", 1024, 49152)
    assert "wmma.matrix_a" in cuda.memory_scopes
    c = load_target("c-generic")
    assert c.kind == "c" and c.max_threads_per_block is None


def test_unknown_key_names_file_key_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nkind: cuda\n\nmax_thread_per_block: 1024\n")
    with pytest.raises(TargetError) as e:
        load_target(p)
    assert str(e.value).startswith(f"{p}:4: unknown key 'max_thread_per_block'")
    assert "max_threads_per_block" in str(e.value)


def test_wrong_type_names_key_and_line() -> None:
    with pytest.raises(TargetError, match=r"t.yaml:3: key 'max_threads_per_block' must be an "
                                          r"integer, got str '1k'"):
        parse_target("name: x\nkind: cuda\nmax_threads_per_block: 1k\n", "t.yaml")
    with pytest.raises(TargetError, match="t.yaml:3: key 'warp_size' must be an integer, got "
                                          "bool"):
        parse_target("name: x\nkind: cuda\nwarp_size: true\n", "t.yaml")
    with pytest.raises(TargetError, match="memory_scopes entry 'acc': 'big'"):
        parse_target("name: x\nkind: c\nmemory_scopes:\n  acc: big\n", "t.yaml")


def test_missing_key_and_bad_kind() -> None:
    with pytest.raises(TargetError, match="missing required key 'kind'"):
        parse_target("name: x\n", "t.yaml")
    with pytest.raises(TargetError, match="kind 'fpga' is not one of"):
        parse_target("name: x\nkind: fpga\n", "t.yaml")


def test_unknown_target_lists_known() -> None:
    with pytest.raises(TargetError, match="unknown target 'nope'.*c-generic.*cuda-sm80"):
        load_target("nope")


def test_declared_scope_is_accepted_by_cache_write() -> None:
    from tests.tir import workloads as W
    from toolchain.tir.schedule import Schedule

    t = parse_target("name: acc\nkind: c\nmemory_scopes:\n  acc_buffer: 65536\n", "acc.yaml")
    sch = Schedule(W.matmul(8, 8, 8)[0], target=t)
    sch.cache_write(sch.get_block("C"), 0, "acc_buffer")
    assert 'scope="acc_buffer"' in str(sch.mod)
