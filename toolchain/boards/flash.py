"""Flash a board bundle's firmware with a debug probe (pyOCD or OpenOCD).

:func:`flash_command` builds the exact command line from the board descriptor's
``flash_recipe``; :func:`flash_bundle` builds the firmware (``make board``) and runs it.

Example::

    >>> from toolchain.boards.descriptor import load_board
    >>> " ".join(flash_command(load_board("nucleo-l4r5zi"), "fw.elf", "pyocd"))
    'pyocd flash --target stm32l4r5zitx fw.elf'
    >>> flash_command(load_board("nrf52840dk"), "fw.elf", "openocd")[:6]
    ['openocd', '-f', 'interface/jlink.cfg', '-c', 'transport select swd', '-f']
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from toolchain.boards.descriptor import Board
from toolchain.errors import BuildError, OptionError, TargetError

#: what to install for each probe tool
PROBE_INSTALL = {"pyocd": "pip install pyocd", "openocd": "apt-get install openocd"}


def default_probe(board: Board) -> str:
    """The first probe the board's recipe names (pyocd before openocd)."""
    for p in ("pyocd", "openocd"):
        if p in board.flash_recipe:
            return p
    raise TargetError(f"board {board.name} is an emulator (no flash_recipe): nothing to "
                      "flash; run it with kiln run DIR --inputs IN.npz")


def flash_command(board: Board, elf: str | Path, probe: str | None = None) -> list[str]:
    """The command that writes ``elf`` into ``board``'s flash with ``probe``."""
    probe = probe or default_probe(board)
    if probe not in board.flash_recipe:
        known = ", ".join(board.flash_recipe) or "none"
        raise OptionError(f"--probe {probe}: board {board.name} has no {probe} recipe "
                          f"(its recipes: {known})")
    r = board.flash_recipe[probe]
    if probe == "pyocd":
        return ["pyocd", "flash", "--target", r["target"], str(elf)]
    cmd = ["openocd"]
    configs = list(r["config"])
    for i, cfg in enumerate(configs):
        cmd += ["-f", cfg]
        if i == 0 and r.get("transport"):  # after the interface, before the target
            cmd += ["-c", f"transport select {r['transport']}"]
    return [*cmd, "-c", f"program {elf} verify reset exit"]


def flash_hint(board: Board, probe: str) -> str:
    """What to install / set up for ``probe`` on ``board``."""
    text = f"install it with `{PROBE_INSTALL[probe]}`"
    pack = board.flash_recipe.get(probe, {}).get("pack")
    if pack:
        text += f" and the device pack with `pyocd pack install {pack}`"
    return text


def run_flash(board: Board, cmd: list[str], timeout: float = 300) -> None:
    """Run a flash command; a missing tool, probe or board is a clear error (exit 2)."""
    probe = cmd[0]
    if shutil.which(probe) is None:
        raise BuildError(f"{probe} is not installed (not on PATH): {flash_hint(board, probe)}; "
                         f"then connect the {board.name} over USB and run again")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(cmd)} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise BuildError(f"flashing {board.name} failed (is the board connected over USB, "
                         f"and is it the only probe attached?): {' '.join(cmd)} exited with "
                         f"{proc.returncode}:\n{tail}")
