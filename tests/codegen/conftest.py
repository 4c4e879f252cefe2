"""Build tests use a private cache folder so they never see stale libraries
(:mod:`tests.private_cache`)."""

from tests.private_cache import private_cache_dir, private_kiln_cache  # noqa: F401
