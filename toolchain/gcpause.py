"""Python's cyclic garbage collector paused while a compiler stage builds large IR.

Scheduling, lowering and code generation allocate hundreds of thousands of small objects
(TIR nodes, llvmlite instructions and their names) that live until the stage ends. Each
allocation counts towards the collector's thresholds, so it keeps running collections that
traverse these live objects and find nothing to free: half of the LLVM backend's
translation time (TIR -> LLVM IR) was spent in the collector, and ~0.4 s of the 6 s of
CPU that ResNet-18 takes from its ONNX file to a called LLVM bundle (docs/llvm.md,
"Build time"). Inside :func:`paused_gc` no
collection starts; garbage with reference cycles made there is collected by the first
collection after it (reference counting frees everything else at once, as always).

>>> import gc
>>> with paused_gc():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the ``with`` block (nested blocks and blocks in
    several threads pause it once; it is enabled again when the last one ends, if it was
    enabled before the first)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


__all__ = ["paused_gc"]
