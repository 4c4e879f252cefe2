"""The build cache (``$KILN_CACHE_DIR`` or ``~/.cache/kiln``): kept bounded.

Host builds (kernels, bundles, LLVM objects) are cached by content hash, so rebuilding
what was built before costs nothing. The cache must not grow without bound: after every
new entry :func:`trim` removes entries unused for more than ``KILN_CACHE_MAX_DAYS`` days
(default 30), then the least recently used ones until the cache holds at most
``KILN_CACHE_MAX_MB`` megabytes (default 512). Looking at every entry costs a ``stat`` each
(15 ms for the 2,000 entries a test-suite run leaves), so a process that writes entry after
entry looks again only when it has written a sixteenth of the size limit since it last
looked, or a minute has passed (its first write to a folder always looks): the cache may
overshoot its limit by a sixteenth per writing process, for a minute at most, never more.
A cache hit refreshes its entry's time
(:func:`touch`), so what is used stays. ``kiln cache info`` and ``kiln cache clear`` show
and empty it.

    >>> import os, tempfile
    >>> saved = os.environ.get("KILN_CACHE_DIR")
    >>> os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp()
    >>> _ = (cache_dir() / "bundle-m-0123.so").write_bytes(b"x" * 10)
    >>> info()["files"], info()["bytes"]
    (1, 10)
    >>> clear()
    (1, 10)
    >>> if saved is None: del os.environ["KILN_CACHE_DIR"]
    ... else: os.environ["KILN_CACHE_DIR"] = saved
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from toolchain.errors import OptionError

DEFAULT_MAX_MB = 512
DEFAULT_MAX_DAYS = 30
#: files younger than this are never removed (another process may be writing or loading)
GRACE_SECONDS = 600
#: after a new entry, the folder is looked at again once this process has written this
#: share of the size limit, or after this many seconds, since it last looked
RESCAN_SHARE = 16
RESCAN_SECONDS = 60.0
#: per cache folder: (bytes this process wrote there since it last looked, when it did)
_WRITTEN: dict[str, tuple[int, float]] = {}


def cache_dir() -> Path:
    """Where built libraries are kept: ``$KILN_CACHE_DIR`` or ``~/.cache/kiln``."""
    d = os.environ.get("KILN_CACHE_DIR")
    path = Path(d) if d else Path.home() / ".cache" / "kiln"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _limit(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"${name}={raw!r} is not a number") from None
    if value < 0:
        raise OptionError(f"${name}={raw!r} must be >= 0")
    return value


def limits() -> tuple[int, float]:
    """(max bytes, max age in seconds) from ``$KILN_CACHE_MAX_MB`` / ``$KILN_CACHE_MAX_DAYS``."""
    return (int(_limit("KILN_CACHE_MAX_MB", DEFAULT_MAX_MB) * 1024 * 1024),
            _limit("KILN_CACHE_MAX_DAYS", DEFAULT_MAX_DAYS) * 86400)


def _entries() -> list[tuple[Path, int, float]]:
    out = []
    for p in cache_dir().iterdir():
        try:
            st = p.stat()
        except OSError:  # removed meanwhile by another process
            continue
        if p.is_file():
            out.append((p, st.st_size, st.st_mtime))
    return out


def touch(path: Path) -> None:
    """Mark a cache entry as just used (least-recently-used order)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _due(new: Path, max_bytes: int, now: float) -> bool:
    """Whether the new entry ``new`` brings this process's writes to its folder since it
    last looked there to :data:`RESCAN_SHARE` of the limit or :data:`RESCAN_SECONDS`."""
    folder = str(cache_dir())
    try:
        size = new.stat().st_size
    except OSError:
        size = 0
    written, when = _WRITTEN.get(folder, (0, -RESCAN_SECONDS))
    written += size
    if written * RESCAN_SHARE < max_bytes and now - when < RESCAN_SECONDS:
        _WRITTEN[folder] = (written, when)
        return False
    return True


def trim(new: Path | None = None) -> tuple[int, int]:
    """Remove entries older than the age limit, then the least recently used ones beyond
    the size limit (never one younger than :data:`GRACE_SECONDS`); (files, bytes) freed.

    ``new``: the entry just written, after which the folder is looked at only when due
    (the module's docstring); without it, always."""
    max_bytes, max_age = limits()
    now = time.time()
    if new is not None and not _due(new, max_bytes, now):
        return 0, 0
    _WRITTEN[str(cache_dir())] = (0, now)
    entries = sorted(_entries(), key=lambda e: e[2])  # oldest first
    total = sum(size for _, size, _ in entries)
    files = freed = 0
    for path, size, mtime in entries:
        age = now - mtime
        if age < GRACE_SECONDS or (age <= max_age and total <= max_bytes):
            continue
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        files += 1
        freed += size
    return files, freed


def info() -> dict[str, Any]:
    """The cache's folder, file count, size and limits."""
    entries = _entries()
    max_bytes, max_age = limits()
    return {"path": str(cache_dir()), "files": len(entries),
            "bytes": sum(size for _, size, _ in entries), "max_bytes": max_bytes,
            "max_days": max_age / 86400}


def clear() -> tuple[int, int]:
    """Remove every entry; (files, bytes) removed."""
    files = freed = 0
    for path, size, _ in _entries():
        try:
            path.unlink()
        except OSError:
            continue
        files += 1
        freed += size
    return files, freed


__all__ = ["DEFAULT_MAX_DAYS", "DEFAULT_MAX_MB", "cache_dir", "clear", "info", "limits",
           "touch", "trim"]
