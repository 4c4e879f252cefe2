"""Board descriptors: the shipped ones load, and every schema error names file, key, line."""

from __future__ import annotations

import pytest

from toolchain.boards.descriptor import board_names, load_board, parse_board
from toolchain.errors import TargetError

GOOD = """\
name: my-board
core: cortex-m4
fpu: fpv4-sp-d16
float_abi: hard
target: cortex-m4
flash: {origin: 0x08000000, size: 0x100000}
ram: {origin: 0x20000000, size: 0x20000}
qemu: {machine: mps2-an386, cpu: cortex-m4, flash_origin: 0, ram_origin: 0x20000000}
flash_recipe:
  pyocd: {target: stm32f411retx}
"""


def test_shipped_boards():
    assert board_names() == ["nrf52840dk", "nucleo-l4r5zi", "qemu-mps2-an386",
                             "qemu-mps2-an500", "stm32f746g-disco"]
    sizes = {n: (load_board(n).flash.size, load_board(n).ram.size) for n in board_names()}
    assert sizes["nucleo-l4r5zi"] == (2 * 1024 * 1024, 640 * 1024)
    assert sizes["stm32f746g-disco"] == (1024 * 1024, 320 * 1024)
    assert sizes["nrf52840dk"] == (1024 * 1024, 256 * 1024)
    for n in board_names():
        b = load_board(n)
        # M4 boards run on the M4 QEMU machine, M7 boards on the M7 one
        assert b.qemu.machine == {"cortex-m4": "mps2-an386", "cortex-m7": "mps2-an500"}[b.core]
        assert b.qemu.cpu == b.core
        assert b.startup_path.is_file()
        assert b.compile_target().kind == "c"
    assert load_board("stm32f746g-disco").cpu_flags[0] == "-mcpu=cortex-m7"
    assert load_board("nucleo-l4r5zi").flash.origin == 0x08000000
    assert load_board("qemu-mps2-an386").is_emulator
    assert not load_board("nrf52840dk").is_emulator


def test_good_descriptor_parses():
    b = parse_board(GOOD, "my.yaml")
    assert (b.name, b.flash.size, b.ram.origin, b.stack_bytes) == ("my-board", 0x100000,
                                                                    0x20000000, 8192)
    assert b.flash_recipe == {"pyocd": {"target": "stm32f411retx"}}


@pytest.mark.parametrize("text, message", [
    (GOOD + "colour: red\n", "my.yaml:11: unknown key 'colour'; known keys: name,"),
    (GOOD.replace("target: cortex-m4", "target: 4"), "my.yaml:5: key 'target' must be a "
     "string, got int 4"),
    (GOOD.replace("size: 0x20000}", "size: big}"), "my.yaml:7: key 'ram.size' must be an "
     "integer, got str 'big'"),
    (GOOD.replace("ram: {origin", "ram: {start: 1, origin"), "my.yaml:7: unknown key "
     "'ram.start'; known keys: ram.origin, ram.size"),
    (GOOD.replace("ram: {origin: 0x20000000, ", "ram: {"), "my.yaml:7: key 'ram' is missing "
     "'origin'"),
    (GOOD.replace("core: cortex-m4", "core: cortex-a53"), "my.yaml:2: key 'core' = "
     "'cortex-a53' is not one of cortex-m0plus"),
    (GOOD.replace("float_abi: hard", "float_abi: fast"), "my.yaml:4: key 'float_abi' = 'fast'"),
    (GOOD.replace("  pyocd:", "  jlink:"), "my.yaml:10: unknown probe 'flash_recipe.jlink'; "
     "known probes: pyocd, openocd"),
    (GOOD.replace("{target: stm32f411retx}", "{}"), "my.yaml:10: key 'flash_recipe.pyocd' is "
     "missing 'target'"),
    (GOOD + "stack_bytes: -4\n", "my.yaml:11: key 'stack_bytes' must not be negative"),
    (GOOD + "stack_bytes: true\n", "my.yaml:11: key 'stack_bytes' must be an integer, got bool"),
    (GOOD.replace("qemu: {machine: mps2-an386, ", "qemu: {"), "my.yaml:8: key 'qemu' is "
     "missing 'machine'"),
    (GOOD.replace("name: my-board\n", ""), "my.yaml: missing required key 'name'"),
    (GOOD + "startup: nowhere.c\n", "my.yaml:11: start-up file nowhere.c does not exist"),
    ("- a list\n", "my.yaml: a board descriptor must be a mapping"),
    ("name: [\n", "my.yaml: not valid YAML"),
])
def test_descriptor_errors(text, message):
    with pytest.raises(TargetError) as e:
        parse_board(text, "my.yaml")
    assert message in str(e.value)


def test_unknown_board_lists_known_ones():
    with pytest.raises(TargetError, match="unknown board 'nucleo-f401re'.*known boards: "
                       "nrf52840dk, nucleo-l4r5zi"):
        load_board("nucleo-f401re")


def test_board_file_path(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_text(GOOD + "fpu: none\n")
    with pytest.raises(TargetError, match=r"b\.yaml:11: key 'fpu' is given twice \(first "
                       r"on line 3\)"):
        load_board(p)
    p.write_text(GOOD)
    assert load_board(p).source == str(p)
