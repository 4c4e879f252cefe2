"""Host runtime: :func:`build` (lower -> C -> cc -> shared library) and :class:`Module`."""

from toolchain.runtime.build import build, build_lowered, cache_dir, compile_shared
from toolchain.runtime.module import Module

__all__ = ["Module", "build", "build_lowered", "cache_dir", "compile_shared"]
