"""Weights as C initialisers: exact IEEE-754 / two's-complement bit patterns, fixed width.

Every constant array is written as the unsigned integers of its bytes' values
(``0x3f800000`` is ``1.0f``) inside a union with its real type, so the text is exact (no
decimal rounding), deterministic, endian-independent (a number, not bytes) and quick to
produce for millions of weights.  Eight values a line.

Example::

    >>> import numpy as np
    >>> bits_type(np.dtype("float32")), format_bits(np.array([1.0, -2.0], np.float32))
    ('uint32_t', '  0x3f800000u, 0xc0000000u,\\n')
"""

from __future__ import annotations

import numpy as np

from toolchain.errors import UnsupportedError

#: values per line in ``weights.c``
PER_LINE = 8

_BITS = {1: ("uint8_t", np.uint8), 2: ("uint16_t", np.uint16), 4: ("uint32_t", np.uint32),
         8: ("uint64_t", np.uint64)}


def bits_type(dtype: np.dtype) -> str:
    """The unsigned C type with the size of ``dtype`` (the union's bit-pattern member)."""
    if dtype.itemsize not in _BITS:
        raise UnsupportedError(f"weights of dtype {dtype} ({dtype.itemsize} bytes) cannot be "
                               "stored in a bundle")
    return _BITS[dtype.itemsize][0]


def format_bits(array: np.ndarray, per_line: int = PER_LINE, indent: int = 2) -> str:
    """``0x...u,`` literals of the bit patterns of ``array`` (C order), ``per_line`` a line,
    each line indented and ending in a newline."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype == np.bool_:
        flat = flat.astype(np.uint8)
    size = flat.dtype.itemsize
    if size not in _BITS:
        bits_type(flat.dtype)
    bits = flat.view(_BITS[size][1])
    n, digits = bits.size, 2 * size
    if n == 0:
        return ""
    # big-endian bytes -> hex digits, laid into fixed-width fields of a byte matrix
    hexed = np.frombuffer(bits.astype(bits.dtype.newbyteorder(">")).tobytes().hex().encode(),
                          dtype=np.uint8).reshape(n, digits)
    suffix = b"ull," if size == 8 else b"u,"
    width = 2 + digits + len(suffix) + 1  # one separator after each field
    field = np.empty((n, width), dtype=np.uint8)
    field[:, :2] = np.frombuffer(b"0x", np.uint8)
    field[:, 2:2 + digits] = hexed
    field[:, 2 + digits:-1] = np.frombuffer(suffix, np.uint8)
    field[:, -1] = ord(" ")
    parts = []
    full = n // per_line * per_line
    for chunk, count in ((field[:full], per_line), (field[full:], n - full)):
        if len(chunk) == 0:
            continue
        rows = chunk.reshape(-1, count * width)
        rows[:, -1] = ord("\n")
        pad = np.full((rows.shape[0], indent), ord(" "), dtype=np.uint8)
        parts.append(np.concatenate([pad, rows], axis=1).tobytes().decode("ascii"))
    return "".join(parts)
