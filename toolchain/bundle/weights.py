"""A bundle's weights: one blob of aligned arrays, stored three ways (``kiln compile --weights``).

Every constant a kernel reads is placed in one **blob** at an offset aligned to the bundle's
alignment (64 bytes), as its little-endian bytes, in the order the call sequence first uses
it; equal constants are stored once (:class:`~toolchain.bundle.render.Locations`).  Kernels
read ``(void *)(<M>_WEIGHTS_DATA + OFFSET)``.  The blob reaches the program in one of
:data:`MODES`:

``incbin`` (the default)
    ``src/weights.bin`` (the blob's bytes, written straight from the arrays) and
    ``src/weights_blob.S``, an assembly stub whose ``.incbin`` the C compiler's assembler
    copies into the object file: the compiler never parses a weight byte, and the bundle
    holds each weight byte once on disk.
``c-array``
    ``src/weights.c``: the blob as one ``const`` struct of ``unsigned char`` chunks, each
    initialised by a string literal of ``\\xHH`` escapes (:func:`format_bytes`; ~4.2 bytes of
    source a weight byte) for toolchains whose assembler has no ``.incbin`` (MSVC).
``external``
    ``src/weights.bin`` is not linked: the program loads it and hands it to
    ``<m>_set_weights(data, bytes)``, which checks its size, alignment and CRC-32 before
    ``<m>_run`` may use it.  Chosen by ``auto`` when the weights pass
    :data:`EXTERNAL_THRESHOLD` bytes (a 2 GiB object overflows the 32-bit PC-relative
    relocations of the usual code models).

The c-array text: exact (no decimal rounding) and deterministic; compilers parse string
literals ~20x faster than initialiser lists.  Each chunk stays within the 4095-character
literal C99 compilers must accept (so ``-pedantic`` is clean).  The bytes are
little-endian: ``weights.c`` and ``weights_blob.S`` stop a big-endian build with
``#error``.

Example::

    >>> import numpy as np
    >>> chunks, text = format_bytes(np.array([1.0, -2.0], np.float32))
    >>> chunks, text
    ([8], '  "\\\\x00\\\\x00\\\\x80\\\\x3f\\\\x00\\\\x00\\\\x00\\\\xc0"\\n')
    >>> blob = WeightsBlob(align=64)
    >>> blob.add(np.ones(3, np.float32)), blob.add(np.zeros(2, np.int8)), blob.size
    (0, 64, 66)
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from toolchain.errors import OptionError

#: how a bundle stores its weights (``kiln compile --weights``); ``auto``: ``incbin``, or
#: ``external`` when the weights pass :data:`EXTERNAL_THRESHOLD`
MODES = ("auto", "incbin", "c-array", "external")
#: weight bytes above which ``auto`` keeps the weights out of the program (2 GiB: PC-relative
#: relocations reach +-2 GiB; tests lower it to compile a small model in external mode)
EXTERNAL_THRESHOLD = 2**31

#: bytes per string-literal line and per chunk (a multiple of 64, below C99's 4095)
PER_LINE = 32
CHUNK = 4032


def escaped_lines(data: bytes, per_line: int, indent: int) -> str:
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
    tail = ",\n".join(escaped_lines(data[s:s + chunk].tobytes(), per_line, indent).rstrip("\n")
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


def resolve_mode(requested: str | None, weight_bytes: int) -> str:
    """The storage of a bundle's weights: ``requested`` (one of :data:`MODES`; None is
    ``auto``), with ``auto`` resolved by the blob's size.

    >>> resolve_mode(None, 1000), resolve_mode("c-array", 1000)
    ('incbin', 'c-array')
    >>> resolve_mode("auto", EXTERNAL_THRESHOLD + 1)
    'external'
    """
    mode = requested or "auto"
    if mode not in MODES:
        raise OptionError(f"--weights {mode!r}: choose one of {', '.join(MODES)}")
    if mode == "auto":
        # read at call time (a module global), so tests can lower the threshold
        return "external" if weight_bytes > EXTERNAL_THRESHOLD else "incbin"
    return mode


def _le_bytes(array: np.ndarray) -> np.ndarray:
    """The little-endian bytes of ``array`` in C order, as a uint8 view where possible."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype.byteorder == ">":
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    return flat.view(np.uint8)


class WeightsBlob:
    """The weights as one blob: each array at an offset aligned to ``align``, zero bytes
    between them; the arrays are kept by reference (nothing is copied until
    :meth:`write`, which streams them to a file)."""

    def __init__(self, align: int) -> None:
        self.align = align
        #: (offset, little-endian bytes) per array, by offset
        self.entries: list[tuple[int, np.ndarray]] = []
        self.size = 0

    def add(self, array: np.ndarray) -> int:
        """Place ``array`` after the last one (aligned); its offset in the blob."""
        data = _le_bytes(array)
        offset = -(-self.size // self.align) * self.align if self.entries else 0
        self.entries.append((offset, data))
        self.size = offset + len(data)
        return offset

    def pieces(self) -> Iterator[tuple[int, np.ndarray]]:
        """(bytes of zero padding before it, bytes) per array, in order."""
        end = 0
        for offset, data in self.entries:
            yield offset - end, data
            end = offset + len(data)

    def crc32(self) -> int:
        """CRC-32 of the blob (zlib's: IEEE 802.3 polynomial, reflected, as
        ``kiln_crc32`` in ``runtime_c/kiln_runtime.c`` computes it)."""
        crc = 0
        for pad, data in self.pieces():
            crc = zlib.crc32(bytes(pad), crc)
            crc = zlib.crc32(memoryview(data), crc)
        return crc

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The blob's bytes a piece at a time: padding, then an array (a view of it, no
        copy), and so on."""
        for pad, data in self.pieces():
            if pad:
                yield bytes(pad)
            yield memoryview(data)

    def write(self, path: str | Path) -> None:
        """Write the blob to ``path`` one array at a time (no full-size copy in memory)."""
        with open(path, "wb") as f:
            for chunk in self.chunks():
                f.write(chunk)

    def c_pieces(self) -> Iterator[np.ndarray]:
        """The blob as byte arrays for the c-array ``weights.c``: padding and arrays in
        order, one zero byte for an empty blob (C has no empty arrays)."""
        if self.size == 0:
            yield np.zeros(1, np.uint8)
            return
        for pad, data in self.pieces():
            if pad:
                yield np.zeros(pad, np.uint8)
            if len(data):
                yield data
