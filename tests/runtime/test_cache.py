"""The build cache stays bounded: age and size limits, least-recently-used order, the
grace period, and ``kiln cache info|clear``."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from toolchain.cli import main
from toolchain.runtime import cache

MB = 1024 * 1024


@pytest.fixture()
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    return cache.cache_dir()


def _entry(d, name: str, size: int, age_s: float):
    p = d / name
    p.write_bytes(b"\0" * size)
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


def test_old_entries_go_then_the_least_recently_used_beyond_the_size(tmp_cache, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "2")
    monkeypatch.setenv("KILN_CACHE_MAX_DAYS", "1")
    ancient = _entry(tmp_cache, "a.so", 1000, 3 * 86400)
    older = _entry(tmp_cache, "b.so", MB, 7200)
    newer = _entry(tmp_cache, "c.so", MB, 3600)
    used = _entry(tmp_cache, "d.so", MB, 5400)
    fresh = _entry(tmp_cache, "e.so", MB, 10)  # within the grace period: never removed
    cache.touch(used)
    files, freed = cache.trim()
    assert not ancient.exists() and not older.exists()
    assert used.exists() and fresh.exists()
    assert not newer.exists()  # 4 MB -> at most 2 MB, least recently used first
    assert (files, freed) == (3, 1000 + 2 * MB)


def test_bad_limits_are_a_user_error(tmp_cache, monkeypatch, capsys):
    monkeypatch.setenv("KILN_CACHE_MAX_DAYS", "-1")
    assert main(["cache", "info"]) == 2
    assert "KILN_CACHE_MAX_DAYS='-1' must be >= 0" in capsys.readouterr().err


def test_kiln_cache_info_and_clear(tmp_cache, capsys):
    _entry(tmp_cache, "x.so", 2048, 0)
    assert main(["cache", "info"]) == 0
    assert f"{tmp_cache}: 1 files, 0.0 MiB" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 files" in capsys.readouterr().out
    assert list(tmp_cache.iterdir()) == []


def test_a_new_build_trims_the_cache(tmp_cache, monkeypatch):
    from toolchain import te
    from toolchain.driver import build

    monkeypatch.setenv("KILN_CACHE_MAX_DAYS", "1")
    stale = _entry(tmp_cache, "stale.so", 10, 5 * 86400)
    a = te.placeholder((4,), name="A")
    b = te.compute((4,), lambda i: a[i] * 3.0 + 1.0, name="B")
    build(te.create_prim_func([a, b]), "c")
    assert not stale.exists()
    assert any(p.suffix == ".so" for p in tmp_cache.iterdir())


def test_a_process_writing_entry_after_entry_looks_again_only_when_due(tmp_cache,
                                                                       monkeypatch):
    """Every build looked at every entry (a stat each, 15 ms for a suite run's cache):
    now its first write to the folder looks, then again after a sixteenth of the size
    limit written by this process or a minute."""
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "1")
    monkeypatch.setenv("KILN_CACHE_MAX_DAYS", "1")
    first = _entry(tmp_cache, "first.so", 10_000, 0)
    stale = _entry(tmp_cache, "stale.so", 10, 5 * 86400)
    assert cache.trim(first) == (1, 10) and not stale.exists()  # the first write looks
    stale = _entry(tmp_cache, "stale.so", 10, 5 * 86400)
    assert cache.trim(_entry(tmp_cache, "small.so", 10_000, 0)) == (0, 0)
    assert stale.exists()  # 20 kB written since: not due
    assert cache.trim(_entry(tmp_cache, "big.so", MB // 16, 0)) == (1, 10)
    stale = _entry(tmp_cache, "stale.so", 10, 5 * 86400)
    assert cache.trim(_entry(tmp_cache, "small2.so", 10, 0)) == (0, 0)
    now = time.time()
    # the cache module's clock only (patching ``time.time`` itself moved every clock of
    # the process: the suite's timing plugin counted a minute of wall time for this test)
    monkeypatch.setattr(cache, "time", SimpleNamespace(time=lambda: now + cache.RESCAN_SECONDS))
    assert cache.trim(_entry(tmp_cache, "later.so", 10, 0)) == (1, 10)  # a minute on
    assert cache.trim() == (0, 0)  # asked for, it always looks
