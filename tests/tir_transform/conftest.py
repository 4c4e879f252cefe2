"""Build tests use a private cache folder so they never see stale libraries."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kiln-cache")


@pytest.fixture(autouse=True)
def _kiln_cache(_private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This folder's tests build into :func:`_private_cache` (one per worker); the
    variable is restored after each test, so the tests of other folders that run later in
    the same process keep the suite's shared build cache (a session-scoped autouse
    fixture here used to leave the private folder set for the rest of the session)."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(_private_cache))
