"""Code generators: one C-family renderer (:mod:`.cstyle`) with per-dialect subclasses.

>>> from toolchain.codegen import get_renderer
>>> type(get_renderer("c")).__name__
'CRenderer'
"""

from __future__ import annotations

from toolchain.codegen.c import CRenderer
from toolchain.codegen.cstyle import CSource, CStyleRenderer, sanitize
from toolchain.errors import TargetError


def get_renderer(kind: str, **options: object) -> CStyleRenderer:
    """The renderer for a target kind (``"c"``; ``"cuda"`` where available)."""
    if kind == "c":
        return CRenderer(**options)  # type: ignore[arg-type]
    if kind == "cuda":
        try:
            from toolchain.codegen.cuda import CUDARenderer
        except ImportError:
            raise TargetError("no CUDA code generator in this version of Kiln") from None
        return CUDARenderer(**options)  # type: ignore[arg-type]
    raise TargetError(f"no C-family code generator for target kind {kind!r}; use 'c'")


__all__ = ["CRenderer", "CSource", "CStyleRenderer", "get_renderer", "sanitize"]
