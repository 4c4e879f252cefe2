"""The size report of a linked firmware: flash and RAM use, read from the linker map.

The firmware is compiled with ``-ffunction-sections -fdata-sections``, so the linker map
lists every function and every constant as its own input section with its size and its
object file.  Each is charged to one part:

* flash: ``kernels`` (kernels.o, and the LLVM backend's ``src/kernels/*.o``),
  ``weights`` (weights.o), ``inputs`` (the embedded test inputs, inputs.o), ``runtime``
  (everything else: the call sequence, the Kiln runtime, main, start-up, picolibc,
  libgcc, libm), each split into code (``.text``) and read-only data (``.rodata``), plus
  the initial values of ``.data``;
* RAM: ``arena`` (main.c's ``kiln_arena``), ``outputs`` (the output buffers), ``stack``
  (the ``.stack`` section), ``data`` (``.data``/``.tdata``) and ``bss`` (the rest).

Alignment padding (``*fill*``) is charged to the part before it.  The totals are the sizes
of the output sections, the same numbers ``arm-none-eabi-size -A`` prints.

Example::

    >>> r = parse_map(_EXAMPLE_MAP)
    >>> r["flash"]["kernels"], r["flash"]["weights"], r["ram"]["arena"]
    ({'text': 36, 'rodata': 0}, {'text': 0, 'rodata': 64}, 4096)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from toolchain.errors import BuildError

_FLASH_SECTIONS = (".init", ".text", ".toc")
_RAM_INIT = (".data", ".tdata")
_RAM_SECTIONS = (".preserve", ".data", ".tdata", ".tbss_space", ".bss", ".stack")

_OUT_RE = re.compile(r"^(\.[\w.$]+)(?:\s+0x([0-9a-f]+)\s+0x([0-9a-f]+))?"
                     r"(?:\s+load address 0x[0-9a-f]+)?\s*$")
_IN_RE = re.compile(r"^ (\S+)(?:\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*))?$")
_CONT_RE = re.compile(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$")

_EXAMPLE_MAP = """Linker script and memory map

.text           0x08000000       0x64
 .text.net_conv
                0x08000000       0x24 build/obj/kernels.o
 .rodata.w_conv 0x08000040       0x40 build/obj/weights.o

.bss            0x20000000     0x1000
 .bss.kiln_arena
                0x20000000     0x1000 build/qemu/main.o
"""


def _part(obj: str) -> str:
    path = Path(obj.split("(")[0].strip())
    name = path.name
    if path.parent.name == "kernels" and path.suffix == ".o":
        return "kernels"  # the LLVM backend's kernel objects (src/kernels/<k>.o)
    return {"kernels.o": "kernels", "weights.o": "weights", "inputs.o": "inputs"}.get(
        name, "runtime")


def _entries(text: str) -> tuple[dict[str, int], list[tuple[str, str, int, str]]]:
    """(output section -> size, [(output section, input section, size, object)])."""
    start = text.find("Linker script and memory map")
    if start < 0:
        raise BuildError("linker map has no 'Linker script and memory map' part")
    lines = text[start:].splitlines()
    outs: dict[str, int] = {}
    entries = []
    current = ""
    pending: str | None = None
    for line in lines[1:]:
        if pending is not None:
            m = _CONT_RE.match(line)
            if m:
                entries.append((current, pending, int(m.group(2), 16), m.group(3)))
            pending = None
            continue
        m = _OUT_RE.match(line)
        if m and not line.startswith(" "):
            current = m.group(1)
            if m.group(3) is not None:
                outs[current] = int(m.group(3), 16)
            else:
                pending_out = current
                outs.setdefault(pending_out, 0)
            continue
        if line.startswith(" *fill*"):
            parts = line.split()
            if len(parts) >= 3 and entries and entries[-1][0] == current:
                entries.append((current, entries[-1][1], int(parts[2], 16), entries[-1][3]))
            continue
        m = _IN_RE.match(line)
        if m and not line.startswith("  ") and not m.group(1).startswith("*"):
            if m.group(2) is None:
                pending = m.group(1)
            else:
                entries.append((current, m.group(1), int(m.group(3), 16), m.group(4)))
        elif current in outs and outs[current] == 0:
            m2 = _CONT_RE.match(line)
            if m2 and line.lstrip().startswith("0x") and len(line.split()) == 2:
                outs[current] = int(m2.group(2), 16)
    return outs, entries


def parse_map(text: str) -> dict[str, Any]:
    """The flash/RAM report of a GNU ld map (see the module docstring)."""
    outs, entries = _entries(text)
    flash: dict[str, Any] = {p: {"text": 0, "rodata": 0}
                             for p in ("kernels", "weights", "inputs", "runtime")}
    ram = {"arena": 0, "outputs": 0, "stack": outs.get(".stack", 0), "data": 0, "bss": 0}
    for out, sec, size, obj in entries:
        if out in _FLASH_SECTIONS:
            kind = "rodata" if sec.startswith((".rodata", ".rdata", ".srodata")) else "text"
            flash[_part(obj)][kind] += size
        elif out in _RAM_INIT:
            ram["data"] += size
        elif out in (".bss", ".tbss_space", ".preserve"):
            if sec.startswith(".bss.kiln_arena"):
                ram["arena"] += size
            elif sec.startswith(".bss.kiln_output_"):
                ram["outputs"] += size
            else:
                ram["bss"] += size
    data_init = sum(outs.get(s, 0) for s in _RAM_INIT)
    flash_total = sum(outs.get(s, 0) for s in _FLASH_SECTIONS) + data_init
    ram_total = sum(outs.get(s, 0) for s in _RAM_SECTIONS)
    # what the map lists per input section may miss the odd linker-made bytes: charge any
    # difference to the runtime / .bss so the parts add up to the section sizes
    listed = sum(v["text"] + v["rodata"] for v in flash.values())
    flash["runtime"]["text"] += sum(outs.get(s, 0) for s in _FLASH_SECTIONS) - listed
    ram["bss"] = ram_total - ram["arena"] - ram["outputs"] - ram["stack"] - ram["data"]
    flash["data_init"] = data_init
    flash["total"] = flash_total
    ram["total"] = ram_total
    return {"flash": flash, "ram": ram}


def size_report(map_path: str | Path, flash_available: int, ram_available: int
                ) -> dict[str, Any]:
    """:func:`parse_map` of the map at ``map_path`` with the board's capacities added."""
    p = Path(map_path)
    if not p.is_file():
        raise BuildError(f"no linker map at {p}: build the firmware first (make -C "
                         f"{p.parent.parent.parent} board)")
    report = parse_map(p.read_text(errors="replace"))
    report["flash"]["available"] = flash_available
    report["ram"]["available"] = ram_available
    return report


def format_report(report: dict[str, Any]) -> str:
    """Two lines: flash and RAM use with their parts.

    >>> print(format_report({"flash": {"kernels": {"text": 10, "rodata": 0},
    ...     "weights": {"text": 0, "rodata": 2048}, "inputs": {"text": 0, "rodata": 0},
    ...     "runtime": {"text": 1000, "rodata": 24}, "data_init": 8, "total": 3090,
    ...     "available": 1048576}, "ram": {"arena": 4096, "outputs": 40, "stack": 8192,
    ...     "data": 8, "bss": 100, "total": 12436, "available": 262144}}))
    ... # doctest: +NORMALIZE_WHITESPACE
    flash 3,090 B of 1,048,576 (0.3 %): kernels 10, weights 2,048, runtime 1,024,
      inputs 0, .data init 8
    RAM 12,436 B of 262,144 (4.7 %): arena 4,096, stack 8,192, outputs 40, .data 8, .bss 100
    """
    f, r = report["flash"], report["ram"]

    def part(p: dict[str, int]) -> str:
        return f"{p['text'] + p['rodata']:,}"

    def pct(a: int, b: int) -> str:
        return f"{100.0 * a / b:.1f} %" if b else "?"

    return (f"flash {f['total']:,} B of {f['available']:,} ({pct(f['total'], f['available'])}):"
            f" kernels {part(f['kernels'])}, weights {part(f['weights'])}, runtime "
            f"{part(f['runtime'])},\n  inputs {part(f['inputs'])}, .data init "
            f"{f['data_init']:,}"
            f"\nRAM {r['total']:,} B of {r['available']:,} ({pct(r['total'], r['available'])}):"
            f" arena {r['arena']:,}, stack {r['stack']:,}, outputs {r['outputs']:,}, .data "
            f"{r['data']:,}, .bss {r['bss']:,}")
