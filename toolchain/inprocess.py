"""What one process keeps across compiles, and the keys it keeps it by.

* :class:`ByTarget` — values made for a target, by key, the most recently used kept
  (the lowered kernels of :mod:`toolchain.bundle.compiler`, the accelerator's tile
  choices in :mod:`toolchain.vta.compile`);
* :func:`value_key` — an exact hashable key of a compile input (arrays by digest, floats by
  their bits), :func:`array_digest` — an array's dtype, shape and content digest
  (also what :mod:`toolchain.bundle.reuse` matches fused groups by).

>>> a = value_key({"shift": 3, "scale": 0.5, "w": np.ones(2, np.int8)})
>>> a == value_key({"w": np.ones(2, np.int8), "scale": 0.5, "shift": 3})
True
>>> value_key(0.0) == value_key(-0.0)
False
"""

from __future__ import annotations

import collections
import enum
import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from toolchain.target import Target


class Unkeyable(Exception):
    """A value :func:`value_key` cannot compare exactly (the message names its type)."""


def array_digest(a: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    """``(dtype, shape, blake2b of the bytes)`` of ``a``."""
    a = np.ascontiguousarray(a)
    return (str(a.dtype), a.shape, hashlib.blake2b(memoryview(a).cast("B"),
                                                   digest_size=20).digest())


def value_key(v: Any) -> Any:
    """A hashable key equal for equal values: None, bools, ints and strings as they are,
    floats by their bits (-0.0 and 0.0 differ, every NaN is one key), enums, arrays by
    :func:`array_digest`, numpy scalars, lists, tuples and dicts element by element.
    Anything else raises :class:`Unkeyable`."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return ("f", v.hex())
    if isinstance(v, enum.Enum):
        return (type(v).__name__, v.value)
    if isinstance(v, np.ndarray):
        return ("nd", *array_digest(v))
    if isinstance(v, np.generic):
        return value_key(v.item())
    if isinstance(v, (list, tuple)):
        return tuple(value_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, value_key(x)) for k, x in v.items()))
    raise Unkeyable(type(v).__name__)


class ByTarget:
    """What a process made for a target, by key, across compiles: a value is found only
    for the target it was made for (or an equal one); the ``limit`` most recently used
    are kept. ``put`` with the key None keeps nothing (an input that has no key).

    >>> seen = ByTarget(limit=1)
    >>> from toolchain.target import load_target
    >>> vta, other = load_target("vta"), load_target("c-generic")
    >>> seen.put(("conv", 3), vta, "tiles")
    >>> seen.get(("conv", 3), vta), seen.get(("conv", 3), other), seen.get(("conv", 4), vta)
    ('tiles', None, None)
    >>> seen.put(("conv", 4), vta, "more tiles")
    >>> len(seen), seen.get(("conv", 3), vta)
    (1, None)
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: collections.OrderedDict[Any, tuple[Any, Any]] = \
            collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any, target: Target | None) -> Any | None:
        """The value put for ``key`` and ``target`` (or an equal target), or None."""
        hit = self._entries.get(key) if key is not None else None
        if hit is None or not (hit[0] is target or hit[0] == target):
            return None
        self._entries.move_to_end(key)
        return hit[1]

    def put(self, key: Any, target: Target | None, value: Any) -> None:
        """Keep ``value``, made for ``key`` and ``target``."""
        if key is None:
            return
        self._entries[key] = (target, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every value."""
        self._entries.clear()


__all__ = ["ByTarget", "Unkeyable", "array_digest", "value_key"]
