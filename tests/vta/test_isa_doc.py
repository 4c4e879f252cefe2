"""hw/ISA.md's field tables agree with the encoder (toolchain/vta/isa.py) and with the RTL's
decode functions (hw/rtl/vta_pkg.sv), bit for bit.

The tables of ISA.md sections 2.1-2.3 are parsed; every field is then probed through the
public encoder one bit at a time (each single-bit value must land on exactly the documented
bit), its width through the overflow refusal, the reserved bits through the decoder's
refusal, and the RTL's ``x.field = i[hi:lo]`` lines are compared with the same table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolchain.errors import SimulationError
from toolchain.vta.config import MAX_ACC_DEPTH, MAX_INP_DEPTH, MAX_UOP_DEPTH, MAX_WGT_DEPTH
from toolchain.vta.isa import (
    MEM_OUT,
    MEM_UOP,
    Alu,
    Finish,
    Gemm,
    Load,
    Store,
    Uop,
    decode,
    encode_int,
)

REPO = Path(__file__).resolve().parents[2]
ISA_MD = REPO / "hw" / "ISA.md"
VTA_PKG = REPO / "hw" / "rtl" / "vta_pkg.sv"

_ROW = re.compile(r"^\| \[(\d+)(?::(\d+))?\] \|(.*)$")


def _tables() -> dict[str, list[tuple[int, int, list[str]]]]:
    """Section -> rows (hi, lo, remaining cells) of the bit tables of ISA.md section 2."""
    out: dict[str, list[tuple[int, int, list[str]]]] = {}
    section = None
    for line in ISA_MD.read_text().splitlines():
        if line.startswith("### 2.1"):
            section = "header"
        elif line.startswith("### 2.2"):
            section = "mem"
        elif line.startswith("### 2.3"):
            section = "loop"
        elif line.startswith("Micro-op (32 bits"):
            section = "uop"
        elif line.startswith("### 2.4"):
            section = None
        m = _ROW.match(line)
        if section and m:
            hi = int(m.group(1))
            lo = int(m.group(2)) if m.group(2) else hi
            cells = [c.strip() for c in m.group(3).strip().strip("|").split("|")]
            out.setdefault(section, []).append((hi, lo, cells))
    return out


TABLES = _tables()


def _fields(section: str, column: int | None = None) -> dict[str, tuple[int, int]]:
    """field -> (lo, width) of one table; for 2.3 only rows whose ``column`` (0 GEMM, 1 ALU)
    is neither '—' nor reserved."""
    out = {}
    for hi, lo, cells in TABLES[section]:
        if section == "header":
            name, width = cells[0], hi - lo + 1
        else:
            width, name = int(cells[0]), cells[1]
            assert width == hi - lo + 1, f"ISA.md: {name} is [{hi}:{lo}] but width {width}"
        if name == "reserved":
            continue
        if column is not None:
            meaning = cells[2 + column]
            if meaning == "—" or meaning.startswith("reserved"):
                continue
        out[name] = (lo, width)
    return out


def test_the_doc_tables_were_found():
    assert {"header", "mem", "loop", "uop"} <= TABLES.keys()
    assert len(_fields("mem")) == 10 and len(_fields("uop")) == 3
    assert set(_fields("loop", 0)) - set(_fields("loop", 1)) == {
        "reset", "wgt_factor_out", "wgt_factor_in"}


# a neutral instance per class (every field zero: LOAD UOP runs on the compute engine, so all
# four token flags are legal on it) and how to set one field on it
def _load(**kw):
    return Load(**{"memory_type": MEM_UOP, "y_size": 0, "x_size": 0, **kw})


def _store(**kw):
    return Store(**{"y_size": 0, "x_size": 0, **kw})


def _gemm(**kw):
    return Gemm(**{"uop_end": 0, "iter_out": 0, "iter_in": 0, **kw})


def _alu(**kw):
    return Alu(**{"alu_op": 0, "uop_end": 0, "iter_out": 0, "iter_in": 0, **kw})


CLASSES = {"LOAD": (_load, "mem", None), "STORE": (_store, "mem", None),
           "GEMM": (_gemm, "loop", 0), "ALU": (_alu, "loop", 1)}
BOOLS = ("pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm")


def _probe(make, name: str, bit: int, width: int) -> int:
    """The encoding's difference from the neutral instance when ``name`` = 1 << bit."""
    if name in BOOLS:
        value = True
    elif name == "imm" and bit == width - 1:
        value = -(1 << bit)  # the sign bit
    else:
        value = 1 << bit
    if name == "memory_type" and value == MEM_OUT:  # LOAD OUT is invalid: probe via STORE
        return encode_int(_store()) ^ encode_int(_store()) & 7
    return encode_int(make(**{name: value})) ^ encode_int(make())


SKIP = {("STORE", "pop_next"), ("STORE", "push_next"), ("STORE", "memory_type"),
        *(("STORE", pad) for pad in ("y_pad_top", "y_pad_bottom", "x_pad_left", "x_pad_right"))}


@pytest.mark.parametrize("cls", sorted(CLASSES))
def test_every_documented_field_bit_is_where_the_doc_says(cls):
    make, section, column = CLASSES[cls]
    documented = {**_fields("header"), **_fields(section, column)}
    covered = 0
    for name, (lo, width) in documented.items():
        if name == "opcode":
            covered |= 7
            continue
        if (cls, name) in SKIP:  # illegal on STORE; the same bits are probed on LOAD
            covered |= ((1 << width) - 1) << lo
            continue
        for bit in range(width):
            got = _probe(make, name, bit, width)
            assert got == 1 << (lo + bit), (
                f"{cls}.{name} bit {bit}: ISA.md says bit {lo + bit}, the encoder sets "
                f"{got:#x}")
        covered |= ((1 << width) - 1) << lo
    # every bit the doc does not give a field is refused by the decoder as reserved
    opcode = {"LOAD": 0, "STORE": 1, "GEMM": 2, "ALU": 4}[cls]
    for bit in range(7, 128):
        if not covered >> bit & 1:
            with pytest.raises(SimulationError, match="reserved bits set"):
                decode(opcode | (MEM_OUT << 7 if cls == "STORE" else 0) | 1 << bit)


@pytest.mark.parametrize("cls", ["GEMM", "ALU", "LOAD"])
def test_documented_widths_are_the_encoders_limits(cls):
    make, section, column = CLASSES[cls]
    for name, (_lo, width) in _fields(section, column).items():
        if name in ("memory_type", "alu_op", "reset", "use_imm"):
            continue
        top = (1 << (width - 1)) - 1 if name == "imm" else (1 << width) - 1
        encode_int(make(**{name: top}))
        with pytest.raises(SimulationError, match=f"field '{name}' = {top + 1} does not fit "
                                                  f"in {width} "):
            encode_int(make(**{name: top + 1}))


def test_finish_has_only_the_header():
    assert encode_int(Finish(pop_prev=True, push_next=True)) == 3 | 1 << 3 | 1 << 6
    for bit in range(7, 128):
        with pytest.raises(SimulationError, match="FINISH has reserved bits set"):
            decode(3 | 1 << bit)


def test_micro_op_table_matches_the_encoder():
    names = {"acc_idx": "acc", "inp_idx": "inp", "wgt_idx": "wgt"}
    for doc_name, (lo, width) in _fields("uop").items():
        name = names[doc_name]
        for bit in range(width):
            assert Uop(**{name: 1 << bit}).encode() == 1 << (lo + bit)
        with pytest.raises(SimulationError, match=f"'{name}' = {1 << width} does not fit"):
            Uop(**{name: 1 << width}).encode()


def _rtl_slices() -> dict[str, tuple[int, int]]:
    """field -> (hi, lo) from vta_pkg.sv's decode functions (``m.x = i[hi:lo];``, ``x: i[n]``
    and ``return u[hi:lo];``)."""
    text = VTA_PKG.read_text()
    out = {}
    for name, hi, lo in re.findall(r"\b[ml]\.(\w+) = i\[(\d+)(?::(\d+))?\];", text):
        out[name] = (int(hi), int(lo or hi))
    for name, hi in re.findall(r"(\w+): i\[(\d+)\]", text):
        out[name] = (int(hi), int(hi))
    for name, hi, lo in re.findall(r"function automatic logic \[\d+:0\] (\w+)\(input logic "
                                   r"\[\d+:0\] [iu]\);\s*return [iu]\[(\d+):(\d+)\];", text):
        out[name] = (int(hi), int(lo))
    return out


def test_rtl_decoders_match_the_doc():
    rtl = _rtl_slices()
    rtl_name = {"memory_type": "mem_type", "opcode": "insn_opcode", "acc_idx": "uop_acc",
                "inp_idx": "uop_inp", "wgt_idx": "uop_wgt"}
    documented = {**_fields("header"), **_fields("mem"), **_fields("loop", 0),
                  **_fields("loop", 1), **_fields("uop")}
    assert len(documented) == 32
    for name, (lo, width) in documented.items():
        key = rtl_name.get(name, name)
        assert key in rtl, f"vta_pkg.sv decodes no field {key} (ISA.md {name})"
        assert rtl[key] == (lo + width - 1, lo), (
            f"{name}: ISA.md [{lo + width - 1}:{lo}], vta_pkg.sv [{rtl[key][0]}:{rtl[key][1]}]")


def test_depth_limits_in_the_doc_are_the_loaders():
    text = " ".join(ISA_MD.read_text().split())
    limits = {name: int(n) for name, n in re.findall(r"(UOP|INP|ACC|WGT) depth ≤ (\d+)", text)}
    assert limits == {"UOP": MAX_UOP_DEPTH, "INP": MAX_INP_DEPTH, "ACC": MAX_ACC_DEPTH,
                      "WGT": MAX_WGT_DEPTH}
    # and each is what its micro-op / instruction field can address
    assert MAX_UOP_DEPTH == 1 << _fields("loop", 0)["uop_bgn"][1]
    uop = _fields("uop")
    assert (MAX_ACC_DEPTH, MAX_INP_DEPTH, MAX_WGT_DEPTH) == tuple(
        1 << uop[f][1] for f in ("acc_idx", "inp_idx", "wgt_idx"))
