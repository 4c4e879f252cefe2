"""Load ``targets/vta.yaml`` into a frozen :class:`VTAConfig` with derived sizes.

The loader is strict: an unknown key, a missing key or a value of the wrong type raises
:class:`~toolchain.errors.TargetError` naming the file, the key path and its line.  Derived
sizes (row bytes, buffer depths) are computed once here so the RTL, the functional simulator
and the compiler never recompute them differently.

Example::

    >>> from toolchain.vta.config import load_config
    >>> cfg = load_config()                 # targets/vta.yaml
    >>> cfg.block_in, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.uop_depth
    (16, 2048, 1024, 2048, 8192)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.errors import TargetError

if TYPE_CHECKING:
    from toolchain.target import Target

#: targets/vta.yaml in the source tree
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "targets" / "vta.yaml"

#: ALU op names of the ISA, in opcode order (hw/ISA.md section 2.3)
ALU_OP_NAMES = ("MIN", "MAX", "ADD", "SHR", "MUL")

# Limits implied by the fixed instruction/micro-op field widths (hw/ISA.md section 1).
MAX_UOP_DEPTH = 1 << 13
MAX_INP_DEPTH = 1 << 11
MAX_ACC_DEPTH = 1 << 11
MAX_WGT_DEPTH = 1 << 10

@dataclass(frozen=True)
class VTAConfig:
    """The accelerator's shape and sizes; see hw/ISA.md for what each one means.

    Example::

        >>> cfg = VTAConfig()          # the defaults of targets/vta.yaml
        >>> cfg.inp_row_bytes, cfg.wgt_row_bytes, cfg.acc_row_bytes, cfg.macs_per_step
        (16, 256, 64, 256)
    """

    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    input_bytes: int = 32768
    weight_bytes: int = 262144
    acc_bytes: int = 131072
    uop_bytes: int = 32768
    cmd_queue_depth: int = 64
    token_queue_depth: int = 8
    bus_width_bits: int = 128
    bytes_per_cycle: int = 16
    latency_cycles: int = 64
    alu_ops: tuple[str, ...] = ALU_OP_NAMES
    name: str = "vta"
    source: str = field(default="<defaults>", compare=False)

    # ---- derived sizes -------------------------------------------------------------
    @property
    def inp_row_bytes(self) -> int:
        """Bytes of one INP row (BATCH x BLOCK_IN int8)."""
        return self.batch * self.block_in

    @property
    def wgt_row_bytes(self) -> int:
        """Bytes of one WGT row (BLOCK_OUT x BLOCK_IN int8)."""
        return self.block_out * self.block_in

    @property
    def acc_row_bytes(self) -> int:
        """Bytes of one ACC row (BATCH x BLOCK_OUT int32)."""
        return 4 * self.batch * self.block_out

    @property
    def out_row_bytes(self) -> int:
        """Bytes of one OUT row (BATCH x BLOCK_OUT int8)."""
        return self.batch * self.block_out

    @property
    def inp_depth(self) -> int:
        return self.input_bytes // self.inp_row_bytes

    @property
    def wgt_depth(self) -> int:
        return self.weight_bytes // self.wgt_row_bytes

    @property
    def acc_depth(self) -> int:
        return self.acc_bytes // self.acc_row_bytes

    @property
    def out_depth(self) -> int:
        """OUT has as many rows as ACC (it mirrors it)."""
        return self.acc_depth

    @property
    def uop_depth(self) -> int:
        return self.uop_bytes // 4

    @property
    def macs_per_step(self) -> int:
        """Multiply-accumulates of one GEMM micro-op step (the GEMM core's per-cycle work)."""
        return self.batch * self.block_in * self.block_out

    def row_bytes(self, memory_type: int) -> int:
        """Row (element) bytes of a memory type id: 0 UOP, 1 WGT, 2 INP, 3 ACC, 4 OUT."""
        return (4, self.wgt_row_bytes, self.inp_row_bytes, self.acc_row_bytes,
                self.out_row_bytes)[memory_type]

    def depth(self, memory_type: int) -> int:
        """Depth in rows of the buffer of a memory type id."""
        return (self.uop_depth, self.wgt_depth, self.inp_depth, self.acc_depth,
                self.out_depth)[memory_type]

    def __post_init__(self) -> None:
        _validate(self)


def _validate(cfg: VTAConfig) -> None:
    where = cfg.source
    for key in ("batch", "block_in", "block_out", "cmd_queue_depth", "token_queue_depth",
                "bus_width_bits", "bytes_per_cycle"):
        if getattr(cfg, key) < 1:
            raise TargetError(f"{where}: '{key}' must be >= 1, got {getattr(cfg, key)}")
    if cfg.latency_cycles < 0:
        raise TargetError(f"{where}: 'dram.latency_cycles' must be >= 0")
    if cfg.bus_width_bits % 8:
        raise TargetError(f"{where}: 'dram.bus_width_bits' must be a multiple of 8, "
                          f"got {cfg.bus_width_bits}")
    if cfg.bytes_per_cycle > cfg.bus_width_bits // 8:
        raise TargetError(f"{where}: 'dram.bytes_per_cycle' = {cfg.bytes_per_cycle} exceeds the "
                          f"bus width ({cfg.bus_width_bits // 8} bytes); lower it or widen the bus")
    sizes = [("buffers.input", cfg.input_bytes, cfg.inp_row_bytes, MAX_INP_DEPTH),
             ("buffers.weight", cfg.weight_bytes, cfg.wgt_row_bytes, MAX_WGT_DEPTH),
             ("buffers.accumulator", cfg.acc_bytes, cfg.acc_row_bytes, MAX_ACC_DEPTH),
             ("buffers.uop", cfg.uop_bytes, 4, MAX_UOP_DEPTH)]
    for key, nbytes, row, limit in sizes:
        if nbytes < row or nbytes % row:
            raise TargetError(f"{where}: '{key}' = {nbytes} bytes is not a positive multiple of "
                              f"its row size ({row} bytes)")
        if nbytes // row > limit:
            raise TargetError(
                f"{where}: '{key}' = {nbytes} bytes gives {nbytes // row} rows, more than the "
                f"{limit} rows the ISA's fixed field widths can address (hw/ISA.md section 1); "
                f"use at most {limit * row} bytes")
    for op in cfg.alu_ops:
        if op not in ALU_OP_NAMES:
            raise TargetError(f"{where}: 'alu.ops' has unknown op '{op}'; the ISA defines "
                              f"{', '.join(ALU_OP_NAMES)}")


def config_from_target(target: Target) -> VTAConfig:
    """The :class:`VTAConfig` of an accelerator :class:`~toolchain.target.Target` (kind
    ``vta``; its ``gemm``/``buffers``/``queues``/``dram``/``alu`` keys), validated against the
    ISA's field widths.

    Example::

        >>> from toolchain.target import load_target
        >>> config_from_target(load_target("vta")).wgt_depth
        1024
    """
    if target.kind != "vta" or not target.is_accelerator:
        raise TargetError(f"{target.source}: 'kind' must be 'vta' for an accelerator target, "
                          f"got '{target.kind}'")
    g, b, q, d = target.gemm, target.buffers, target.queues, target.dram
    return VTAConfig(
        batch=g["batch"], block_in=g["block_in"], block_out=g["block_out"],
        input_bytes=b["input"], weight_bytes=b["weight"], acc_bytes=b["accumulator"],
        uop_bytes=b["uop"], cmd_queue_depth=q["cmd_queue_depth"],
        token_queue_depth=q["token_queue_depth"], bus_width_bits=d["bus_width_bits"],
        bytes_per_cycle=d["bytes_per_cycle"], latency_cycles=d["latency_cycles"],
        alu_ops=tuple(target.alu["ops"]), name=target.name, source=target.source,
    )


def load_config(path: str | Path | None = None) -> VTAConfig:
    """Load and validate a VTA target (default ``targets/vta.yaml``; a shipped target name
    or a YAML path) through :func:`~toolchain.target.load_target`, so ``extends:`` variants
    work here too.

    Example::

        >>> load_config().acc_depth
        2048
    """
    from toolchain.target import load_target

    path = Path(path) if path is not None else DEFAULT_PATH
    if path.suffix in (".yaml", ".yml"):
        try:
            path.read_text()
        except OSError as exc:
            raise TargetError(f"cannot read VTA target file {path}: {exc.strerror}") from None
    return config_from_target(load_target(path))
