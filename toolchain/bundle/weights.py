"""Weights as C initialisers: the exact bytes, as string literals in fixed-width lines.

A constant array is stored as a union of its typed values and a struct of ``unsigned char``
chunks, each chunk initialised by a string literal of ``\\xHH`` escapes::

    static const union {
      struct { unsigned char c0[4032]; unsigned char c1[64]; } bytes;
      float values[1024];
    } w_conv1_weight KILN_ALIGNED(64) = {{
      "\\x00\\x00\\x80\\x3f..."      (32 bytes a line)
      ...,
      "..."
    }};

Why: the text is exact (no decimal rounding) and deterministic, and compilers parse string
literals ~20x faster than initialiser lists (ResNet-18's 46 MB of weights build in seconds,
not minutes).  Each chunk stays within the 4095-character literal C99 compilers must accept
(so ``-pedantic`` is clean).  The bytes are little-endian: ``weights.c`` stops a big-endian
build with ``#error``.

Example::

    >>> import numpy as np
    >>> chunks, text = format_bytes(np.array([1.0, -2.0], np.float32))
    >>> chunks, text
    ([8], '  "\\\\x00\\\\x00\\\\x80\\\\x3f\\\\x00\\\\x00\\\\x00\\\\xc0"\\n')
"""

from __future__ import annotations

import numpy as np

#: bytes per string-literal line and per chunk (a multiple of 64, below C99's 4095)
PER_LINE = 32
CHUNK = 4032


def _lines(data: bytes, per_line: int, indent: int) -> str:
    """``data`` as indented ``"\\xHH..."`` lines (fixed width, last line shorter)."""
    n = len(data)
    hexed = np.frombuffer(data.hex().encode(), np.uint8).reshape(n, 2)
    cells = np.empty((n, 4), np.uint8)
    cells[:, 0] = ord("\\")
    cells[:, 1] = ord("x")
    cells[:, 2:] = hexed
    parts = []
    full = n // per_line * per_line
    for chunk, count in ((cells[:full], per_line), (cells[full:], n - full)):
        if len(chunk) == 0:
            continue
        rows = chunk.reshape(-1, count * 4)
        head = np.full((rows.shape[0], indent + 1), ord(" "), np.uint8)
        head[:, -1] = ord('"')
        tail = np.array([[ord('"'), ord("\n")]] * rows.shape[0], np.uint8)
        parts.append(np.concatenate([head, rows, tail], axis=1).tobytes().decode("ascii"))
    return "".join(parts)


#: ``\\xHH`` for every byte value: 4 ASCII bytes seen as one uint32 (a fast gather)
_ESCAPES = np.frombuffer("".join(f"\\x{b:02x}" for b in range(256)).encode("ascii"),
                         np.uint32).copy()


#: whole chunks escaped per numpy step (bounds the temporary to ~4 MB)
_BLOCK = 256


def _text(data: np.ndarray, chunk: int, per_line: int, indent: int) -> str:
    """The initialiser text of ``data`` (uint8): whole chunks vectorised in one buffer,
    then the last partial chunk line by line. Each chunk but the last ends ``",\\n"``.

    ResNet-18's weights are ~300 MB of text: the buffer is filled in place (a 4-byte
    ``\\xHH`` gather per byte) and decoded once, with no intermediate full-size copies.
    """
    count = len(data) // chunk if chunk % per_line == 0 else 0
    lines = chunk // per_line
    width = indent + 2 + 4 * per_line + 1  # '  "' + escapes + '"' + newline
    size = lines * width + 1  # + the comma after the chunk
    tail = ",\n".join(_lines(data[s:s + chunk].tobytes(), per_line, indent).rstrip("\n")
                      for s in range(count * chunk, len(data), chunk))
    tail_bytes = (tail + "\n").encode("ascii") if tail else b""
    out = np.empty(count * size + len(tail_bytes), np.uint8)
    chunks = out[:count * size].reshape(count, size)
    grid = chunks[:, :lines * width].reshape(count, lines, width)
    grid[:, :, :indent] = ord(" ")
    grid[:, :, indent] = ord('"')
    for b in range(0, count, _BLOCK):
        e = min(b + _BLOCK, count)
        escaped = _ESCAPES[data[b * chunk:e * chunk]].view(np.uint8)
        grid[b:e, :, indent + 1:-2] = escaped.reshape(e - b, lines, 4 * per_line)
    grid[:, :, -2] = ord('"')
    grid[:, :, -1] = ord("\n")
    chunks[:, -2] = ord(",")
    chunks[:, -1] = ord("\n")
    out[count * size:] = np.frombuffer(tail_bytes, np.uint8)
    if not tail_bytes:  # the last whole chunk ends the text: no comma
        out[-2] = ord("\n")
        return str(memoryview(out)[:-1], "ascii")
    return str(memoryview(out), "ascii")


def format_bytes(array: np.ndarray, chunk: int = CHUNK, per_line: int = PER_LINE,
                 indent: int = 2) -> tuple[list[int], str]:
    """(chunk sizes, initialiser text) for the little-endian bytes of ``array``."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype.byteorder == ">":
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    data = flat.view(np.uint8) if flat.size else np.zeros(max(flat.dtype.itemsize, 1),
                                                          np.uint8)  # C has no empty arrays
    sizes = [min(chunk, len(data) - s) for s in range(0, len(data), chunk)]
    return sizes, _text(data, chunk, per_line, indent)
