"""A private build cache for the tests of a folder: its ``conftest.py`` imports both
fixtures, and every test there builds into one folder of its own (one per worker), so it
never sees a library another folder's tests left in the shared cache."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kiln-cache")


@pytest.fixture(autouse=True)
def private_kiln_cache(private_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder's tests build into :func:`private_cache_dir`; the variable is restored
    after each test, so the tests of other folders that run later in the same process
    keep the suite's shared build cache (a session-scoped autouse fixture here used to
    leave the private folder set for the rest of the session)."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(private_cache_dir))
