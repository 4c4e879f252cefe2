"""Build tests use a private cache folder so they never see stale libraries."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _kiln_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    import os

    old = os.environ.get("KILN_CACHE_DIR")
    os.environ["KILN_CACHE_DIR"] = str(tmp_path_factory.mktemp("kiln-cache"))
    yield
    if old is None:
        os.environ.pop("KILN_CACHE_DIR", None)
    else:
        os.environ["KILN_CACHE_DIR"] = old
