"""What the GEMM-like default schedules (dense, conv2d) read from a target descriptor.

:func:`cpu_params` turns a :class:`~toolchain.target.Target` into a :class:`CpuParams`:
vector lanes per dtype, cache sizes and cores. Missing facts get conservative defaults
(128-bit vectors, 32 KiB L1d, 512 KiB L2, one core), so a bare descriptor still yields a
correct schedule.

>>> p = cpu_params("x86_64-avx512")
>>> p.lanes("float32"), p.l2_bytes >= 256 * 1024
(16, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolchain.target import Target, resolve_target
from toolchain.tir.dtype import bits_of


@dataclass(frozen=True)
class CpuParams:
    """Vector width, caches and cores of a CPU target."""

    #: the descriptor's name, for messages only (schedules read the facts below)
    name: str = "default"
    vector_bits: int = 128
    l1d_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    l3_bytes: int = 8 * 1024 * 1024
    cores: int = 1
    #: vector registers of the ISA (16 for SSE/AVX2/NEON, 32 for AVX-512)
    vector_registers: int = 16

    def lanes(self, dtype: str) -> int:
        """SIMD lanes of ``dtype`` (at least 1)."""
        return max(1, self.vector_bits // max(8, bits_of(dtype)))


def cpu_params(target: str | Target | None) -> CpuParams:
    """The :class:`CpuParams` of ``target`` (a name, a Target, or None for c-generic)."""
    if target is None:
        return CpuParams()
    t = resolve_target(target)
    caches: dict[str, Any] = dict(getattr(t, "caches", None) or {})
    bits = int(getattr(t, "vector_width_bits", None) or 128)
    regs = getattr(t, "vector_registers", None) or (32 if bits >= 512 else 16)
    return CpuParams(
        name=t.name, vector_bits=bits,
        l1d_bytes=int(caches.get("l1d", 32 * 1024)), l2_bytes=int(caches.get("l2", 512 * 1024)),
        l3_bytes=int(caches.get("l3", 8 * 1024 * 1024)),
        cores=int(getattr(t, "cores", None) or 1), vector_registers=int(regs))


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints.

    >>> ceil_div(10, 4)
    3
    """
    return -(-a // b)


def register_tile(lanes: int, registers: int, n: int) -> tuple[int, int]:
    """``(mr, nr)``: rows and columns of the C tile held in vector registers.

    ``nr`` is two vectors when ``n`` is wide enough (one otherwise); ``mr`` fills the
    register file leaving room for the B vectors and a broadcast (BLIS-style 6x2 vectors
    on 16 registers, 14x2 on 32 — capped at 8 rows, which measured as fast here and keeps
    the unrolled code short).

    >>> register_tile(16, 32, 1000), register_tile(8, 16, 1000), register_tile(4, 16, 3)
    ((8, 32), (6, 16), (8, 4))
    """
    nv = 2 if n > lanes else 1
    mr = max(1, min(8, (registers - nv - 1) // nv))
    return mr, nv * lanes
