"""Typed kernel artifacts: what a backend hands the bundle, and what a kernel's C needs.

The seam every backend plugs into (``docs/architecture.md``): a backend turns a lowered
:class:`~toolchain.tir.ir.PrimFunc` into a :class:`KernelArtifact`; the bundle renders
artifacts and never parses generated text. What a kernel needs beyond its own body —
headers, helper and intrinsic definitions placed once before it, compiler flags — travels
as a :class:`CSupport`, attached to the lowered function by the lowering pass
:func:`~toolchain.intrinsics.attach_intrinsics` (``func.attrs["c_support"]``) and merged
by identity: two kernels that use the same specialised intrinsic share one
:class:`CDefinition` (same ``key``), whatever their text looks like.

>>> a = CSupport(("string.h",), (CDefinition("kiln_f_1", "static int kiln_f_1(void);"),),
...              ("-mfoo",))
>>> b = CSupport(("immintrin.h", "string.h"), (CDefinition("kiln_f_1", "..."),))
>>> m = a.merge(b)
>>> m.headers, [d.key for d in m.definitions], m.flags
(('string.h', 'immintrin.h'), ['kiln_f_1'], ('-mfoo',))
>>> print(m.render())
#include <string.h>
#include <immintrin.h>
<BLANKLINE>
static int kiln_f_1(void);
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CDefinition:
    """C placed once before the kernels that use it (a specialised intrinsic body, a
    target's helper block); ``key`` is its identity (deduplication never compares text)."""

    key: str
    text: str


@dataclass(frozen=True)
class CSupport:
    """What a kernel's C needs besides its body: ``#include`` headers, definitions (in the
    order they must appear) and compiler flags (e.g. ``-mavx512vnni``)."""

    headers: tuple[str, ...] = ()
    definitions: tuple[CDefinition, ...] = ()
    flags: tuple[str, ...] = ()

    def merge(self, other: CSupport) -> CSupport:
        """Both supports, each header, definition (by key) and flag once, ``self`` first."""
        return merge_support((self, other))

    def has(self, key: str) -> bool:
        """Whether a definition with ``key`` is already here."""
        return any(d.key == key for d in self.definitions)

    def render(self) -> str:
        """The support as C text for a single translation unit (host builds): the
        ``#include`` lines, then each definition, separated by blank lines."""
        parts = []
        if self.headers:
            parts.append("\n".join(f"#include <{h}>" for h in self.headers))
        parts += [d.text for d in self.definitions]
        return "\n\n".join(parts)


@dataclass(frozen=True)
class LLVMDefinition:
    """An LLVM IR module defining one function a kernel calls (a tensor intrinsic's
    ``llvm_impl`` specialised for its operand strides); ``key`` is the function's name.
    The LLVM backend links it into the kernel's module before optimizing."""

    key: str
    text: str


def llvm_support_of(func: Any) -> tuple[LLVMDefinition, ...]:
    """The LLVM definitions a lowered function carries (``attrs["llvm_support"]``)."""
    return tuple(getattr(func, "attrs", {}).get("llvm_support", ()))


def merge_support(items: Iterable[CSupport]) -> CSupport:
    """One :class:`CSupport` for several kernels (a bundle's ``kernels.c``): headers,
    definitions (by key) and flags in first-use order."""
    headers: dict[str, None] = {}
    defs: dict[str, CDefinition] = {}
    flags: dict[str, None] = {}
    for s in items:
        headers.update(dict.fromkeys(s.headers))
        for d in s.definitions:
            defs.setdefault(d.key, d)
        flags.update(dict.fromkeys(s.flags))
    return CSupport(tuple(headers), tuple(defs.values()), tuple(flags))


def support_of(func: Any) -> CSupport:
    """The :class:`CSupport` a lowered function carries (empty when it needs none)."""
    s = getattr(func, "attrs", {}).get("c_support")
    return s if isinstance(s, CSupport) else CSupport()


@dataclass
class KernelArtifact:
    """One kernel as a backend produced it (C; CUDA adds a launch configuration, LLVM
    object code, the accelerator an instruction stream).

    For C: the function's name, parameter declarations and body lines, the vector
    typedefs it uses, the arena scratch it needs, its :class:`CSupport` and the generic
    helper functions it calls (``{kind, type, name}``, see
    ``CStyleRenderer.helper_list``).
    """

    name: str
    params: list[str]
    body: list[str]
    #: vector typedefs it uses: name -> (element dtype, lanes)
    vector_types: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: bytes of arena scratch it needs (0: no ``kiln_scratch`` parameter)
    scratch_bytes: int = 0
    support: CSupport = field(default_factory=CSupport)
    helpers: list[dict[str, str]] = field(default_factory=list)
    #: the backend that produced it
    backend: str = "c"
    #: CUDA: the device kernels the host launches in order, each ``{name, grid, block,
    #: threads, body}`` (grid/block: the launch shape as C expressions); ``params`` are
    #: theirs, ``body`` is empty
    launches: list[dict[str, Any]] = field(default_factory=list)
    #: C element type of each buffer parameter (``float``, ``int8_t``), in order
    param_types: list[str] = field(default_factory=list)
    #: CUDA: byte offset in the kernel's scratch of each trailing scratch parameter
    scratch_offsets: list[int] = field(default_factory=list)
    #: LLVM: the kernel's object code for the target's triple (``params`` is its C
    #: prototype) and the LLVM IR it was compiled from
    object_code: bytes = b""
    llvm_ir: str = ""
    #: C: rendered SPMD for several threads (its last two parameters are ``kiln_thread``
    #: and ``kiln_nthreads``; the bundle runs it through ``kiln_parallel``)
    threaded: bool = False

    @property
    def flags(self) -> list[str]:
        """Compiler flags its intrinsics need."""
        return list(self.support.flags)


__all__ = ["CDefinition", "CSupport", "KernelArtifact", "LLVMDefinition", "llvm_support_of",
           "merge_support", "support_of"]
