"""An assembler-style builder for accelerator programs.

:class:`ProgramBuilder` lays out the DRAM image (named, row-aligned regions, micro-op
kernels) and appends instructions with their dependency flags; :meth:`ProgramBuilder.build`
returns a :class:`~toolchain.vta.program.Program`.  All DRAM arguments are regions plus an
element offset, so the element units of hw/ISA.md section 2.2 are computed in one place.

Example — one 16x16 int8 GEMM step, narrowed to int8 and stored::

    >>> import numpy as np
    >>> b = ProgramBuilder()
    >>> x = b.data("x", np.ones((1, 1, 16), np.int8))        # 1 INP row
    >>> w = b.data("w", np.ones((1, 16, 16), np.int8))       # 1 WGT row
    >>> y = b.alloc("y", (1, 1, 16), "int8")                  # 1 OUT row
    >>> k = b.uops("k", [Uop(acc=0, inp=0, wgt=0)])
    >>> _ = b.load_uops(k, sram_base=0)
    >>> _ = b.load(MEM_INP, 0, x, y_size=1, x_size=1)
    >>> _ = b.load(MEM_WGT, 0, w, y_size=1, x_size=1, push_next=True)
    >>> _ = b.gemm(0, 1, pop_prev=True, push_next=True)
    >>> _ = b.store(0, y, y_size=1, x_size=1, push_prev=True)
    >>> _ = b.finish(pop_next=True)
    >>> prog = b.build()
    >>> len(prog.insns)
    6
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from toolchain.errors import SimulationError
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import (
    MEM_ACC,
    MEM_INP,
    MEM_OUT,
    MEM_UOP,
    MEM_WGT,
    Alu,
    AnyInstruction,
    Finish,
    Gemm,
    Load,
    Store,
    Uop,
    encode_uops,
)
from toolchain.vta.program import Program, Region

__all__ = ["ProgramBuilder", "UopKernel", "Uop", "MEM_UOP", "MEM_WGT", "MEM_INP", "MEM_ACC",
           "MEM_OUT"]


class UopKernel(Region):
    """A region of micro-ops in DRAM; ``len(kernel)`` is the number of micro-ops."""

    def __len__(self) -> int:
        return self.shape[0]


class ProgramBuilder:
    """Build a program: allocate DRAM regions, then emit instructions in fetch order.

    Regions are aligned to the largest row size of the target (every memory type can address
    them).  Dependency flags are keyword arguments of every emitter: ``pop_prev``,
    ``pop_next``, ``push_prev``, ``push_next``.
    """

    def __init__(self, config: VTAConfig | None = None) -> None:
        self.config = config or VTAConfig()
        self.insns: list[AnyInstruction] = []
        self.regions: dict[str, Region] = {}
        self._chunks: list[tuple[int, bytes]] = []
        self._size = 0
        cfg = self.config
        self._align = max(4, cfg.inp_row_bytes, cfg.wgt_row_bytes, cfg.acc_row_bytes)

    # ---- DRAM layout ------------------------------------------------------------------
    def alloc(self, name: str, shape: Sequence[int], dtype: str = "int8") -> Region:
        """Reserve a zero-filled, row-aligned DRAM region."""
        if name in self.regions:
            raise SimulationError(f"DRAM region '{name}' is already defined")
        offset = (self._size + self._align - 1) // self._align * self._align
        region = Region(name, offset, tuple(int(s) for s in shape), np.dtype(dtype).name)
        self._size = offset + region.nbytes
        self.regions[name] = region
        return region

    def data(self, name: str, array: np.ndarray) -> Region:
        """Place an array (stored little-endian, C order) in a new DRAM region."""
        array = np.ascontiguousarray(array)
        region = self.alloc(name, array.shape, array.dtype.name)
        self._chunks.append((region.offset, array.astype(array.dtype.newbyteorder("<"))
                             .tobytes()))
        return region

    def uops(self, name: str, uops: Sequence[Uop]) -> UopKernel:
        """Place a micro-op kernel in DRAM; load it with :meth:`load_uops`."""
        if not uops:
            raise SimulationError(f"micro-op kernel '{name}' is empty")
        region = self.alloc(name, (len(uops),), "uint32")
        kernel = UopKernel(region.name, region.offset, region.shape, region.dtype)
        self.regions[name] = kernel
        self._chunks.append((region.offset, encode_uops(list(uops))))
        return kernel

    # ---- instructions -----------------------------------------------------------------
    def emit(self, insn: AnyInstruction) -> int:
        """Append an instruction; returns its index."""
        self.insns.append(insn)
        return len(self.insns) - 1

    def load(self, memory_type: int, sram_base: int, region: Region, offset: int = 0, *,
             y_size: int = 1, x_size: int = 1, x_stride: int | None = None,
             pad: tuple[int, int, int, int] = (0, 0, 0, 0), **deps: bool) -> int:
        """LOAD ``y_size`` x ``x_size`` elements starting ``offset`` elements into ``region``.

        ``pad`` is (top, bottom, left, right); ``x_stride`` defaults to ``x_size``.
        """
        row = self.config.row_bytes(memory_type)
        top, bottom, left, right = pad
        return self.emit(Load(memory_type=memory_type, sram_base=sram_base,
                              dram_base=region.elem(row) + offset, y_size=y_size,
                              x_size=x_size, x_stride=x_size if x_stride is None else x_stride,
                              y_pad_top=top, y_pad_bottom=bottom, x_pad_left=left,
                              x_pad_right=right, **deps))

    def load_uops(self, kernel: UopKernel, sram_base: int = 0, **deps: bool) -> int:
        """LOAD UOP: bring a whole micro-op kernel into UOP[sram_base:...]."""
        return self.load(MEM_UOP, sram_base, kernel, y_size=1, x_size=len(kernel), **deps)

    def store(self, sram_base: int, region: Region, offset: int = 0, *, y_size: int = 1,
              x_size: int = 1, x_stride: int | None = None, **deps: bool) -> int:
        """STORE OUT rows to ``region`` at element ``offset`` (x_stride defaults to x_size)."""
        row = self.config.out_row_bytes
        return self.emit(Store(sram_base=sram_base, dram_base=region.elem(row) + offset,
                               y_size=y_size, x_size=x_size,
                               x_stride=x_size if x_stride is None else x_stride, **deps))

    def gemm(self, uop_bgn: int, uop_end: int, *, iter_out: int = 1, iter_in: int = 1,
             dst: tuple[int, int] = (0, 0), src: tuple[int, int] = (0, 0),
             wgt: tuple[int, int] = (0, 0), reset: bool = False, **deps: bool) -> int:
        """GEMM over micro-ops [uop_bgn, uop_end); factors are (outer, inner) pairs."""
        return self.emit(Gemm(reset=reset, uop_bgn=uop_bgn, uop_end=uop_end,
                              iter_out=iter_out, iter_in=iter_in, dst_factor_out=dst[0],
                              dst_factor_in=dst[1], src_factor_out=src[0],
                              src_factor_in=src[1], wgt_factor_out=wgt[0],
                              wgt_factor_in=wgt[1], **deps))

    def alu(self, alu_op: int, uop_bgn: int, uop_end: int, *, imm: int | None = None,
            iter_out: int = 1, iter_in: int = 1, dst: tuple[int, int] = (0, 0),
            src: tuple[int, int] = (0, 0), **deps: bool) -> int:
        """ALU op over micro-ops; with ``imm`` the second operand is that immediate."""
        return self.emit(Alu(alu_op=alu_op, use_imm=imm is not None, imm=imm or 0,
                             uop_bgn=uop_bgn, uop_end=uop_end, iter_out=iter_out,
                             iter_in=iter_in, dst_factor_out=dst[0], dst_factor_in=dst[1],
                             src_factor_out=src[0], src_factor_in=src[1], **deps))

    def finish(self, **deps: bool) -> int:
        """FINISH (must be the last instruction)."""
        return self.emit(Finish(**deps))

    # ---- result -----------------------------------------------------------------------
    def dram_image(self) -> np.ndarray:
        """The initial DRAM image (uint8), padded to a whole number of 64-byte lines."""
        size = (self._size + 63) // 64 * 64
        image = np.zeros(max(size, 64), dtype=np.uint8)
        for offset, blob in self._chunks:
            image[offset:offset + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        return image

    def build(self) -> Program:
        """Return the program (instructions are validated by encoding them once)."""
        regions = {n: Region(r.name, r.offset, r.shape, r.dtype) for n, r in self.regions.items()}
        prog = Program(list(self.insns), self.dram_image(), regions, self.config)
        prog.insn_bytes  # noqa: B018 - encodes every instruction, raising on a bad field
        return prog
