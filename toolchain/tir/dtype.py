"""dtype strings: ``"float32"``, ``"int8"``, ``"bool"``, ``"handle"``; vectors ``"float32x8"``.

>>> lanes_of("float32x8"), element_of("float32x8"), with_lanes("int32", 4)
(8, 'float32', 'int32x4')
"""

from __future__ import annotations

from functools import cache

# Each answer is remembered per dtype string (there are a few dozen; the IR asks these
# questions hundreds of thousands of times per compile: every node built, every fold).


@cache
def lanes_of(dtype: str) -> int:
    """Number of vector lanes of a dtype string (``"float32x8"`` -> 8, ``"int32"`` -> 1)."""
    if "x" in dtype:
        base, _, n = dtype.rpartition("x")
        if n.isdigit() and base:
            return int(n)
    return 1


@cache
def element_of(dtype: str) -> str:
    """Scalar dtype of a (vector) dtype (``"float32x8"`` -> ``"float32"``)."""
    return dtype.rpartition("x")[0] if lanes_of(dtype) > 1 else dtype


@cache
def with_lanes(dtype: str, lanes: int) -> str:
    """The dtype with ``lanes`` lanes (``with_lanes("float32", 4)`` -> ``"float32x4"``)."""
    base = element_of(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


@cache
def is_float(dtype: str) -> bool:
    """True for float dtypes (scalar or vector)."""
    return element_of(dtype).startswith(("float", "bfloat"))


@cache
def is_int(dtype: str) -> bool:
    """True for signed/unsigned integer dtypes (not bool)."""
    return element_of(dtype).startswith(("int", "uint"))


@cache
def is_bool(dtype: str) -> bool:
    """True for ``bool`` (scalar or vector)."""
    return element_of(dtype) == "bool"


@cache
def bits_of(dtype: str) -> int:
    """Bit width of the element type (``bool`` counts as 8, ``handle`` as 64)."""
    e = element_of(dtype)
    if e in ("bool",):
        return 8
    if e == "handle":
        return 64
    digits = "".join(ch for ch in e if ch.isdigit())
    return int(digits) if digits else 32
