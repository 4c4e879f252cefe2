"""Accelerator programs in memory (:class:`Program`) and on disk (the ``prog.bin`` container).

A program is an instruction list plus the DRAM image it runs against (micro-ops, inputs,
weights, accumulator initial values) and named :class:`Region` s of that image so tools can
read results back.  The file container, documented in ``docs/vta.md``, is::

    offset size  field
    0      8     magic  b"KILNVTA1"
    8      4     header size in bytes (u32, = 64)
    12     4     insn_count (u32)
    16     8     insn_offset: file offset of the instructions (u64, 16-byte aligned)
    24     8     dram_offset: file offset of the DRAM image (u64)
    32     8     dram_size in bytes (u64)
    40     8     meta_offset: file offset of the UTF-8 JSON metadata (u64)
    48     8     meta_size in bytes (u64)
    56     8     reserved (0)

All integers little-endian.  The metadata holds the target shape (batch, block_in, block_out)
and the regions.  Example::

    >>> from toolchain.vta.builder import ProgramBuilder
    >>> b = ProgramBuilder(); _ = b.finish(); prog = b.build()
    >>> Program.from_bytes(prog.to_bytes()).insns == prog.insns
    True
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from toolchain.errors import InputError, SimulationError
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import INSN_BYTES, AnyInstruction, decode_program, encode_program

MAGIC = b"KILNVTA1"
_HEADER = struct.Struct("<8sIIQQQQQQ")
HEADER_BYTES = _HEADER.size  # 64


def _json_object(value: object, what: str, source: str) -> dict:
    """``value`` if it is a JSON object (dict); otherwise a SimulationError naming ``what``."""
    if not isinstance(value, dict):
        kind = {list: "list", str: "string", int: "int", float: "number", bool: "boolean",
                type(None): "null"}.get(type(value), type(value).__name__)
        raise SimulationError(f"{source}: {what} is a JSON {kind}, not an object")
    return value


@dataclass(frozen=True)
class Region:
    """A named tensor in the DRAM image: byte offset, numpy shape and dtype.

    Example::

        >>> r = Region("x", 256, (4, 1, 16), "int8")
        >>> r.nbytes, r.elem(16)
        (64, 16)
    """

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def elem(self, row_bytes: int) -> int:
        """Start of the region in DRAM element units of ``row_bytes`` (hw/ISA.md 2.2)."""
        if self.offset % row_bytes:
            raise SimulationError(f"region '{self.name}' at byte {self.offset} is not aligned "
                                  f"to {row_bytes}-byte rows")
        return self.offset // row_bytes

    def read(self, dram: np.ndarray) -> np.ndarray:
        """The region's contents in a DRAM image (uint8 or int8 bytes: another dtype is
        refused, as :func:`dram_image` does), as an array of its shape and dtype.

        >>> Region("y", 2, (2,), "int8").read(np.array([0, 0, 1, 255], np.uint8)).tolist()
        [1, -1]
        """
        image = dram_image(dram, f"region '{self.name}': DRAM image")
        end = self.offset + self.nbytes
        if end > len(image):
            raise InputError(f"region '{self.name}' (bytes {self.offset}..{end - 1}) lies "
                             f"past the {len(image)}-byte DRAM image")
        raw = image[self.offset:self.offset + self.nbytes]
        return raw.view(np.dtype(self.dtype).newbyteorder("<")).reshape(self.shape).copy()


def dram_image(dram: np.ndarray, what: str = "DRAM image") -> np.ndarray:
    """``dram`` as the flat uint8 array an accelerator run reads (int8 is reinterpreted
    bit for bit). Another dtype raises :class:`~toolchain.errors.InputError`: a cast to
    uint8 would wrap or truncate its values silently.

    >>> dram_image(np.array([[1, -1]], np.int8)).tolist()
    [1, 255]
    """
    a = np.asarray(dram)
    if a.dtype not in (np.uint8, np.int8):
        raise InputError(f"{what}: dtype {a.dtype}, expected uint8 bytes (or int8); pass "
                         "the raw image, e.g. np.frombuffer(data, np.uint8)")
    return a.view(np.uint8).ravel()


@dataclass
class Program:
    """Instructions + initial DRAM image + named regions, for one :class:`VTAConfig`."""

    insns: list[AnyInstruction]
    dram: np.ndarray
    regions: dict[str, Region] = field(default_factory=dict)
    config: VTAConfig = field(default_factory=VTAConfig)

    def __post_init__(self) -> None:
        self.dram = np.ascontiguousarray(dram_image(self.dram, "Program.dram"))

    def __str__(self) -> str:
        """A header line (target, instructions, DRAM bytes, regions) and the listing of
        :func:`~toolchain.vta.disasm.disassemble` (what ``kiln sim --disasm`` prints),
        instead of the dataclass fields with the whole DRAM image."""
        from toolchain.vta.disasm import disassemble

        regions = ", ".join(f"{r.name} @{r.offset} {r.dtype}{list(r.shape)}"
                            for r in self.regions.values()) or "none"
        head = (f"program for {self.config.name}: {len(self.insns)} instructions, "
                f"{len(self.dram)} DRAM bytes; regions: {regions}")
        return head + ("\n" + disassemble(self.insns) if self.insns else "")

    @property
    def insn_bytes(self) -> bytes:
        """The encoded instruction stream."""
        return encode_program(self.insns)

    @property
    def insn_addr(self) -> int:
        """Byte address where a runner places the instructions (after the data image)."""
        return (len(self.dram) + INSN_BYTES - 1) // INSN_BYTES * INSN_BYTES

    def read(self, name: str, dram: np.ndarray | None = None) -> np.ndarray:
        """Read region ``name`` from ``dram`` (default: the initial image)."""
        if name not in self.regions:
            raise SimulationError(f"program has no DRAM region '{name}'; it has "
                                  f"{', '.join(sorted(self.regions)) or 'none'}")
        return self.regions[name].read(self.dram if dram is None else dram)

    # ---- container --------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialise to the ``prog.bin`` container (see the module docstring)."""
        cfg = self.config
        meta = {
            "target": {"name": cfg.name, "batch": cfg.batch, "block_in": cfg.block_in,
                       "block_out": cfg.block_out},
            "regions": {r.name: {"offset": r.offset, "shape": list(r.shape), "dtype": r.dtype}
                        for r in self.regions.values()},
        }
        meta_b = json.dumps(meta, sort_keys=True).encode()
        insns = self.insn_bytes
        insn_off = HEADER_BYTES
        dram_off = insn_off + len(insns)
        meta_off = dram_off + len(self.dram)
        header = _HEADER.pack(MAGIC, HEADER_BYTES, len(self.insns), insn_off, dram_off,
                              len(self.dram), meta_off, len(meta_b), 0)
        return header + insns + self.dram.tobytes() + meta_b

    def save(self, path: str | Path) -> None:
        """Write the container to ``path``."""
        Path(path).write_bytes(self.to_bytes())

    @staticmethod
    def from_bytes(data: bytes, config: VTAConfig | None = None,
                   source: str = "<bytes>") -> Program:
        """Parse a ``prog.bin`` container; checks the target shape against ``config``."""
        config = config or VTAConfig()
        if len(data) < HEADER_BYTES or data[:8] != MAGIC:
            raise SimulationError(f"{source}: not a Kiln VTA program (expected magic "
                                  f"{MAGIC!r} at offset 0)")
        (_m, hsize, count, insn_off, dram_off, dram_size, meta_off, meta_size,
         _r) = _HEADER.unpack_from(data)
        if hsize != HEADER_BYTES:
            raise SimulationError(f"{source}: corrupt program file (header size field is "
                                  f"{hsize}, expected {HEADER_BYTES})")
        end = max(HEADER_BYTES, insn_off + count * INSN_BYTES, dram_off + dram_size,
                  meta_off + meta_size)
        if end > len(data):
            raise SimulationError(f"{source}: truncated or corrupt program file (header says "
                                  f"{end} bytes, file has {len(data)})")
        if end < len(data):
            raise SimulationError(f"{source}: file has {len(data)} bytes but its header "
                                  f"accounts for {end}: trailing data after the container "
                                  "(a corrupt or concatenated file?)")
        try:
            meta = json.loads(data[meta_off:meta_off + meta_size] or b"{}")
        except ValueError as exc:
            raise SimulationError(f"{source}: metadata is not valid JSON: {exc}") from None
        _json_object(meta, "metadata", source)
        target = _json_object(meta.get("target", {}), "metadata 'target'", source)
        _json_object(meta.get("regions", {}), "metadata 'regions'", source)
        for key in ("batch", "block_in", "block_out"):
            if key in target and target[key] != getattr(config, key):
                raise SimulationError(
                    f"{source}: program was built for {key}={target[key]} but the target has "
                    f"{key}={getattr(config, key)}; pass the matching target file")
        try:
            insns = decode_program(data[insn_off:insn_off + count * INSN_BYTES])
        except SimulationError as exc:
            raise SimulationError(f"{source}: {exc}") from None
        dram = np.frombuffer(data, dtype=np.uint8, count=dram_size, offset=dram_off).copy()
        try:
            regions = {n: Region(n, int(r["offset"]), tuple(int(d) for d in r["shape"]),
                                 np.dtype(r["dtype"]).name)
                       for n, r in meta.get("regions", {}).items()}
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SimulationError(f"{source}: malformed region metadata ({exc!r}); expected "
                                  '{"regions": {NAME: {"offset", "shape", "dtype"}}}') from None
        for r in regions.values():
            if r.offset < 0 or r.offset + r.nbytes > dram_size:
                raise SimulationError(f"{source}: region '{r.name}' (bytes {r.offset}.."
                                      f"{r.offset + r.nbytes - 1}) is outside the "
                                      f"{dram_size}-byte DRAM image")
        return Program(insns, dram, regions, config)

    @staticmethod
    def load(path: str | Path, config: VTAConfig | None = None) -> Program:
        """Read a ``prog.bin`` container from ``path``."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SimulationError(f"cannot read program {path}: {exc.strerror}") from None
        return Program.from_bytes(data, config, str(path))
