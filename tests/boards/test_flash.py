"""kiln flash: the exact command lines (--dry-run), and clear errors where the probe tool,
the board or the recipe is missing (exit status 2)."""

from __future__ import annotations

import pytest

from tests.boards.test_firmware import _tiny
from toolchain.boards.descriptor import load_board
from toolchain.boards.flash import flash_command
from toolchain.cli import main
from toolchain.errors import OptionError, TargetError


@pytest.mark.parametrize("board, probe, expected", [
    ("nucleo-l4r5zi", "pyocd", "pyocd flash --target stm32l4r5zitx E"),
    ("nucleo-l4r5zi", "openocd", "openocd -f interface/stlink.cfg -f target/stm32l4x.cfg "
     "-c |program E verify reset exit|"),
    ("stm32f746g-disco", "pyocd", "pyocd flash --target stm32f746nghx E"),
    ("stm32f746g-disco", "openocd", "openocd -f board/stm32f7discovery.cfg "
     "-c |program E verify reset exit|"),
    ("nrf52840dk", "pyocd", "pyocd flash --target nrf52840 E"),
    ("nrf52840dk", "openocd", "openocd -f interface/jlink.cfg -c |transport select swd| "
     "-f target/nrf52.cfg -c |program E verify reset exit|"),
])
def test_flash_commands(board, probe, expected):
    cmd = flash_command(load_board(board), "E", probe)
    assert " ".join(f"|{a}|" if " " in a else a for a in cmd) == expected


def test_flash_refuses_emulators_and_unknown_recipes():
    with pytest.raises(TargetError, match="qemu-mps2-an386 is an emulator .*kiln run"):
        flash_command(load_board("qemu-mps2-an386"), "E")
    b = load_board("nrf52840dk")
    object.__setattr__(b, "flash_recipe", {"openocd": b.flash_recipe["openocd"]})
    with pytest.raises(OptionError, match="--probe pyocd: board nrf52840dk has no pyocd recipe "
                       r"\(its recipes: openocd\)"):
        flash_command(b, "E", "pyocd")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from toolchain.boards import compile_board

    tmp = tmp_path_factory.mktemp("flash")
    path, _ = _tiny(tmp)
    return compile_board(path, "nucleo-l4r5zi", tmp / "b", build=False)[0]


def test_cli_dry_run_prints_exact_commands(bundle, capsys):
    assert main(["flash", str(bundle), "--board", "nucleo-l4r5zi", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    elf = bundle / "firmware" / "build" / "board" / "firmware.elf"
    assert out == [f"make -C {bundle / 'firmware'} board",
                   f"pyocd flash --target stm32l4r5zitx {elf}"]
    assert main(["flash", str(bundle), "--board", "nucleo-l4r5zi", "--probe", "openocd",
                 "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"openocd -f interface/stlink.cfg -f target/stm32l4x.cfg -c 'program {elf} verify "
        "reset exit'")


def test_cli_wrong_board_and_not_a_board_bundle(bundle, tmp_path, capsys):
    assert main(["flash", str(bundle), "--board", "nrf52840dk", "--dry-run"]) == 2
    assert "was compiled for board nucleo-l4r5zi, not nrf52840dk" in capsys.readouterr().err
    assert main(["flash", str(tmp_path), "--board", "nrf52840dk"]) == 2
    assert "is not a board bundle" in capsys.readouterr().err
    assert main(["flash", str(tmp_path / "none"), "--board", "nrf52840dk"]) == 2
    assert f"{tmp_path / 'none'}: no such directory" in capsys.readouterr().err


def test_cli_missing_probe_tool_says_what_to_install(bundle, capsys, monkeypatch):
    import toolchain.boards.build as build
    import toolchain.boards.flash as flash

    monkeypatch.setattr(build, "make", lambda *a, **k: None)  # no cross build needed here
    real_which = flash.shutil.which
    monkeypatch.setattr(flash.shutil, "which",
                        lambda name: None if name in ("pyocd", "openocd") else real_which(name))
    assert main(["flash", str(bundle), "--board", "nucleo-l4r5zi"]) == 2
    err = capsys.readouterr().err
    assert "pyocd is not installed (not on PATH): install it with `pip install pyocd` and the " \
           "device pack with `pyocd pack install stm32l4r5`" in err
    assert main(["flash", str(bundle), "--board", "nucleo-l4r5zi", "--probe", "openocd"]) == 2
    assert "openocd is not installed (not on PATH): install it with `apt-get install " \
           "openocd`" in capsys.readouterr().err


def test_cli_flash_failure_when_no_board_is_connected(bundle, capsys, monkeypatch, tmp_path):
    """A probe tool that finds no board: its failure is reported with exit status 2."""
    import toolchain.boards.build as build

    monkeypatch.setattr(build, "make", lambda *a, **k: None)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pyocd").write_text("#!/bin/sh\necho 'No connected debug probes' >&2\nexit 1\n")
    (fake / "pyocd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    assert main(["flash", str(bundle), "--board", "nucleo-l4r5zi"]) == 2
    err = capsys.readouterr().err
    assert "flashing nucleo-l4r5zi failed (is the board connected over USB" in err
    assert "No connected debug probes" in err
