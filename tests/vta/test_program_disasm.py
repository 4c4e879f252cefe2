"""The prog.bin container and the disassembler listing."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from toolchain.errors import SimulationError
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.config import VTAConfig
from toolchain.vta.disasm import disassemble, format_uops
from toolchain.vta.isa import ALU_MAX, ALU_SHR, MEM_ACC, MEM_INP, MEM_WGT, Uop
from toolchain.vta.program import HEADER_BYTES, MAGIC, Program
from toolchain.vta.randprog import random_program


def _small_program() -> Program:
    b = ProgramBuilder()
    x = b.data("x", np.arange(64, dtype=np.int8).reshape(4, 1, 16))
    w = b.data("w", np.ones((2, 16, 16), np.int8))
    y = b.alloc("y", (4, 1, 16), "int8")
    k = b.uops("k", [Uop(acc=0, inp=0, wgt=0), Uop(acc=1, inp=0, wgt=1)])
    b.load_uops(k, sram_base=8)
    b.load(MEM_INP, 0, x, y_size=2, x_size=2, x_stride=2, pad=(1, 0, 0, 1))
    b.load(MEM_WGT, 0, w, y_size=1, x_size=2, push_next=True)
    b.gemm(8, 10, reset=True, iter_out=2, dst=(2, 0))
    b.gemm(8, 10, iter_out=2, iter_in=3, dst=(2, 0), src=(3, 1), wgt=(0, 0), pop_prev=True)
    b.alu(ALU_SHR, 8, 9, imm=3, iter_out=4, dst=(1, 0))
    b.alu(ALU_MAX, 8, 9, iter_in=2, dst=(0, 1), src=(1, 1))
    b.load(MEM_ACC, 20, x, y_size=0, x_size=0, push_next=True)
    b.store(0, y, y_size=2, x_size=2, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


GOLDEN = """\
0000 LOAD   UOP  sram[8:+2) <- dram[256] 1x2 stride 2
0001 LOAD   INP  sram[0:+9) <- dram[0] 2x2 stride 2 pad(t1,b0,l0,r1)
0002 LOAD   WGT  sram[0:+2) <- dram[1] 1x2 stride 2                         push_next
0003 GEMM   reset uop[8:10) out=2x(acc+2,inp+0,wgt+0) in=1x(acc+0,inp+0,wgt+0)
0004 GEMM   uop[8:10) out=2x(acc+2,inp+3,wgt+0) in=3x(acc+0,inp+1,wgt+0)    pop_prev
0005 ALU    SHR  imm=3 uop[8:9) out=4x(dst+1) in=1x(dst+0)
0006 ALU    MAX  acc uop[8:9) out=1x(dst+0,src+1) in=2x(dst+1,src+1)
0007 LOAD   ACC  sram[20:+0) <- dram[0] 0x0 stride 0                        push_next
0008 STORE  OUT  sram[0:+4) -> dram[48] 2x2 stride 2                        pop_prev push_prev
0009 FINISH pop_next"""


def test_disassembler_golden_listing():
    assert disassemble(_small_program().insns) == GOLDEN


def test_uop_listing():
    assert format_uops([Uop(3, 1, 2).encode(), 0], base=8) == (
        "uop 0008: acc=3 inp=1 wgt=2\nuop 0009: acc=0 inp=0 wgt=0")


def test_container_round_trip(tmp_path):
    prog = random_program(3)
    path = tmp_path / "prog.bin"
    prog.save(path)
    data = path.read_bytes()
    assert data[:8] == MAGIC
    hsize, count, insn_off = struct.unpack_from("<IIQ", data, 8)
    assert (hsize, count, insn_off) == (HEADER_BYTES, len(prog.insns), 64)
    assert data[insn_off:insn_off + 16 * count] == prog.insn_bytes
    back = Program.load(path)
    assert back.insns == prog.insns
    np.testing.assert_array_equal(back.dram, prog.dram)
    assert back.regions == prog.regions
    np.testing.assert_array_equal(back.read("inp"), prog.read("inp"))
    assert prog.to_bytes() == back.to_bytes()  # deterministic


def test_container_errors(tmp_path):
    data = _small_program().to_bytes()
    with pytest.raises(SimulationError, match="not a Kiln VTA program"):
        Program.from_bytes(b"ELF" + data[3:])
    with pytest.raises(SimulationError, match="truncated or corrupt"):
        Program.from_bytes(data[:100])
    with pytest.raises(SimulationError, match="built for block_in=16 but the target has "
                                              "block_in=32"):
        Program.from_bytes(data, VTAConfig(block_in=32, input_bytes=32768,
                                           weight_bytes=131072, acc_bytes=131072))
    with pytest.raises(SimulationError, match="cannot read program"):
        Program.load(tmp_path / "missing.bin")
    bad = bytearray(data)
    bad[64 + 15] = 0x80  # reserved bit 127 of instruction 0
    with pytest.raises(SimulationError, match="instruction 0: LOAD has reserved bits set"):
        Program.from_bytes(bytes(bad), source="p.bin")
    meta = b'{"regions": {"x": {"offset": 0}}}'
    hacked = bytearray(data[:-int.from_bytes(data[48:56], "little")] + meta)
    hacked[48:56] = len(meta).to_bytes(8, "little")
    with pytest.raises(SimulationError, match="malformed region metadata"):
        Program.from_bytes(bytes(hacked))
    with pytest.raises(SimulationError, match="no DRAM region 'z'; it has k, w, x, y"):
        _small_program().read("z")


def test_insn_addr_follows_data_image():
    prog = _small_program()
    assert prog.insn_addr % 16 == 0 and prog.insn_addr >= len(prog.dram)


def test_a_program_prints_as_its_listing():
    prog = _small_program()
    text = str(prog)
    head, *listing = text.splitlines()
    assert head.startswith(f"program for {prog.config.name}: {len(prog.insns)} instructions, "
                           f"{len(prog.dram)} DRAM bytes; regions: x @0 int8[4, 1, 16], ")
    assert "\n".join(listing) == disassemble(prog.insns)
    assert "array(" not in text and len(text) < 2000


def _with_meta(data: bytes, meta: bytes) -> bytes:
    """The container ``data`` with its metadata replaced by ``meta``."""
    hacked = bytearray(data[:-int.from_bytes(data[48:56], "little")] + meta)
    hacked[48:56] = len(meta).to_bytes(8, "little")
    return bytes(hacked)


@pytest.mark.parametrize("meta, message", [
    (b"[1, 2]", r"p.bin: metadata is a JSON list, not an object"),
    (b'{"target": 5}', r"p.bin: metadata 'target' is a JSON int, not an object"),
    (b'{"regions": [1]}', r"p.bin: metadata 'regions' is a JSON list, not an object"),
])
def test_container_metadata_of_the_wrong_json_type_is_refused(meta, message):
    with pytest.raises(SimulationError, match=message):
        Program.from_bytes(_with_meta(_small_program().to_bytes(), meta), source="p.bin")


def test_container_region_outside_the_dram_image_is_refused():
    data = _small_program().to_bytes()
    dram_size = int.from_bytes(data[32:40], "little")
    meta = (b'{"regions": {"y": {"offset": %d, "shape": [2, 16], "dtype": "int8"}}}'
            % (dram_size - 16))
    with pytest.raises(SimulationError, match=rf"p.bin: region 'y' \(bytes {dram_size - 16}"
                                              rf"\.\.{dram_size + 15}\) is outside the "
                                              rf"{dram_size}-byte DRAM image"):
        Program.from_bytes(_with_meta(data, meta), source="p.bin")


def test_container_with_trailing_bytes_is_refused():
    data = _small_program().to_bytes()
    with pytest.raises(SimulationError, match=rf"p.bin: file has {len(data) + 3} bytes but its "
                                              rf"header accounts for {len(data)}"):
        Program.from_bytes(data + b"abc", source="p.bin")
    with pytest.raises(SimulationError, match=r"p.bin: corrupt program file \(header size "
                                              r"field is 65, expected 64\)"):
        Program.from_bytes(data[:8] + (65).to_bytes(4, "little") + data[12:], source="p.bin")
