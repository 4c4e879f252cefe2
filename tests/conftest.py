"""Shared pytest setup."""

from __future__ import annotations

import os

# Keep numeric libraries single-threaded in tests: the CI machine has two cores and the
# suites run generated code that uses them.
os.environ.setdefault("OMP_NUM_THREADS", "1")
