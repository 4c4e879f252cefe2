"""The 128-byte swizzled operand layouts of warpgroup MMA (``wgmma``, sm_90a), in Python.

The ``.wgmma`` kernel (:mod:`toolchain.schedules.gpu.wgmma`) stores its operand tiles as
unswizzled core matrices (descriptor layout type 0). This module states the other layout
the hardware reads, "128B swizzle" (layout type 1), on both of its sides, so that the two
can be checked against each other and against the bank analysis before a kernel uses it:

- :func:`descriptor_address`: the byte the hardware reads for an operand element, given a
  descriptor's fields (start address, leading and stride byte offsets, layout type), for a
  K-major A (``imm-trans`` 0) and an MN-major B (``imm-trans`` 1);
- :func:`sw128_tile_offset`: where a fetch stores element ``(row, col)`` of a tile laid
  out in 128-byte swizzle atoms (8 rows of 128 bytes, 1024 bytes, the tile based on a
  1024-byte boundary), and :func:`sw128_descriptors` the descriptor fields of each
  16-deep product over such a tile;
- :func:`store_ways`: the bank conflicts of a fetch's 16-byte stores (the worst phase),
  for the padded core-matrix tiles the kernel uses today and for the swizzled ones.

The swizzle (``Swizzle<3, 4, 3>`` in CuTe's terms) acts on byte addresses: bits 4-6 (the
16-byte chunk within a 128-byte row) are XORed with bits 7-9 (the row within an aligned
1024-byte group). Before and after, the 16-byte chunks of rows 0-2 of an atom::

    unswizzled:  row 0: 0 1 2 3 4 5 6 7   row 1: 0 1 2 3 4 5 6 7   row 2: 0 1 2 ...
    swizzled:    row 0: 0 1 2 3 4 5 6 7   row 1: 1 0 3 2 5 4 7 6   row 2: 2 3 0 1 ...

>>> [sw128_tile_offset("K", 1, 8 * c, rows=64, cols=64) // 16 % 8 for c in range(8)]
[1, 0, 3, 2, 5, 4, 7, 6]
>>> store_ways("K", rows=128, cols=64, threads=512, layout="sw128")
1
>>> store_ways("MN", rows=32, cols=256, threads=512, layout="core", pad=0)
8
"""

from __future__ import annotations

from toolchain.errors import KilnError

#: bytes of a float16
HALF = 2
#: the swizzle atom: 8 rows of 128 bytes (64 halves), 1024 bytes
ROW_BYTES, ATOM_ROWS, ATOM_BYTES = 128, 8, 1024
#: the descriptor's layout types (bits 62-63)
NO_SWIZZLE, SW128 = 0, 1


def swizzle128(addr: int) -> int:
    """``addr`` with its 16-byte chunk index (bits 4-6) XORed with its row within the
    1024-byte group (bits 7-9): the 128-byte swizzle, on absolute byte addresses."""
    return addr ^ (((addr >> 7) & 7) << 4)


def descriptor_address(major: str, row: int, col: int, *, start: int, lbo: int, sbo: int,
                       mode: int, base_offset: int = 0) -> int:
    """The byte address the hardware reads for element ``(row, col)`` of one 16-deep
    ``wgmma`` operand described by a descriptor with these fields (bytes, not the
    descriptor's 16-byte units).

    ``major`` "K": a K-major A, ``row`` in M (0-63), ``col`` in K (0-15). "MN": an
    MN-major B, ``row`` in K (0-15), ``col`` in N. Layout type 0 (no swizzle): core
    matrices of 8 rows x 16 bytes, each 128 contiguous bytes; ``lbo`` steps between core
    matrices along K, ``sbo`` along M (A) or N (B). Layout type 1 (128B swizzle): rows of
    128 bytes, 8 of them an atom; K-major, 8-row groups of M ``sbo`` apart and the 16
    halves of K consecutive within a row (``lbo`` unused); MN-major, 64 halves of N in a
    row, 8-row groups of K ``sbo`` apart and 64-wide blocks of N ``lbo`` apart; then the
    XOR of :func:`swizzle128`. A non-zero ``base_offset`` (a pattern that does not start
    on a 1024-byte boundary) is refused, as the kernels align their tiles.
    """
    if base_offset:
        raise KilnError("wgmma: a base offset (a swizzle pattern not starting on a 1024-byte "
                        "boundary) is not modelled; align the tile to 1024 bytes")
    if mode == NO_SWIZZLE:
        if major == "K":
            return start + row // 8 * sbo + col // 8 * lbo + row % 8 * 16 + col % 8 * HALF
        return start + col // 8 * sbo + row // 8 * lbo + row % 8 * 16 + col % 8 * HALF
    if mode != SW128:
        raise KilnError(f"wgmma: layout type {mode} is not modelled (0 and 1 are)")
    if major == "K":
        linear = start + row // 8 * sbo + row % 8 * ROW_BYTES + col * HALF
    else:
        linear = (start + col // 64 * lbo + row // 8 * sbo + row % 8 * ROW_BYTES
                  + col % 64 * HALF)
    return swizzle128(linear)


def sw128_tile_offset(major: str, row: int, col: int, *, rows: int, cols: int) -> int:
    """The byte offset (from a 1024-byte aligned base) where a fetch stores element
    ``(row, col)`` of a ``rows x cols`` operand tile laid out in 128-byte swizzle atoms.

    ``major`` "K" (A, ``rows`` M x ``cols`` K): 64-wide slices of K, each ``rows`` rows of
    128 bytes; "MN" (B, ``rows`` K x ``cols`` N): 64-wide slices of N, each ``rows`` rows
    of 128 bytes. Within a slice, row ``r`` is at ``128 r`` and the 16-byte chunk ``c``
    of it at chunk ``c ^ (r % 8)``.
    """
    if cols % 64 or rows % ATOM_ROWS:
        raise KilnError(f"wgmma: a 128-byte swizzled tile is whole atoms: the contiguous "
                        f"dimension a multiple of 64 halves, the other of 8 rows, not "
                        f"{rows} x {cols}")
    chunk = (col % 64) // 8 ^ (row % 8)
    return col // 64 * rows * ROW_BYTES + row * ROW_BYTES + chunk * 16 + col % 8 * HALF


def sw128_descriptors(major: str, rows: int, cols: int, step: int) -> dict[str, int]:
    """The descriptor fields (bytes) of the ``step``-th 16-deep product over a tile laid
    out by :func:`sw128_tile_offset` (``rows``: the tile's, M for A -- a warpgroup's
    64-row part starts ``64 * 128`` bytes further per warpgroup -- K for B).

    A: start ``128 rows`` per 64 of K plus 32 bytes per 16 of K within it (the XOR then
    applies to the advanced address, as on the device), ``sbo`` 1024, ``lbo`` unused (1
    by convention: 16 bytes). B: start ``step * 2048`` (two 8-row groups of K a step),
    ``sbo`` 1024 (the next 8 rows of K), ``lbo`` ``128 rows`` (the next 64 of N)."""
    if major == "K":
        k0 = 16 * step
        return {"start": k0 // 64 * rows * ROW_BYTES + k0 % 64 * HALF, "lbo": 16,
                "sbo": ATOM_BYTES, "mode": SW128}
    return {"start": step * 2 * ATOM_BYTES, "lbo": rows * ROW_BYTES, "sbo": ATOM_BYTES,
            "mode": SW128}


def core_tile_offset(major: str, row: int, col: int, *, rows: int, cols: int,
                     pad: int = 0) -> int:
    """The byte offset of element ``(row, col)`` in the ``.wgmma`` kernel's unswizzled
    tiles: A (``rows`` M x ``cols`` K) as ``[K / 8][M][8]``, B (``rows`` K x ``cols`` N)
    as ``[N / 8][K][8]``, each 8-wide slice ``pad`` halves longer than its rows."""
    slice_halves = rows * 8 + pad
    return (col // 8 * slice_halves + row * 8 + col % 8) * HALF


def store_ways(major: str, *, rows: int, cols: int, threads: int, layout: str,
               pad: int = 0, vector: int = 8) -> int:
    """The worst bank conflict (1: none) of the fetch that stores a ``rows x cols`` tile,
    ``vector`` halves (16 bytes) a thread, the threads walking the tile row-major (as the
    kernel's fetch, ``spread_fetch``, does): 16-byte stores go 8 threads a phase, and a
    phase is conflict-free when its 8 chunks fall in 8 different groups of 4 banks.
    ``layout`` "core" (:func:`core_tile_offset`, with ``pad``) or "sw128"."""
    if vector * HALF != 16:
        raise KilnError("store_ways models 16-byte stores (vector 8)")
    per_pass = threads * vector
    worst = 1
    for first in range(0, rows * cols, per_pass):
        for phase in range(0, threads, 8):
            groups: dict[int, int] = {}
            for t in range(phase, phase + 8):
                flat = first + t * vector
                if flat >= rows * cols:
                    continue
                r, c = divmod(flat, cols)
                if layout == "sw128":
                    off = sw128_tile_offset(major, r, c, rows=rows, cols=cols)
                else:
                    off = core_tile_offset(major, r, c, rows=rows, cols=cols, pad=pad)
                groups[off // 16 % 8] = groups.get(off // 16 % 8, 0) + 1
            worst = max(worst, *groups.values()) if groups else worst
    return worst


__all__ = ["ATOM_BYTES", "NO_SWIZZLE", "SW128", "core_tile_offset", "descriptor_address",
           "store_ways", "sw128_descriptors", "sw128_tile_offset", "swizzle128"]
