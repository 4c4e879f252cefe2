"""Boards: descriptors, firmware projects, QEMU runs, size reports and flashing.

* :func:`load_board` — ``boards/<name>.yaml`` as a validated :class:`Board`;
* :func:`compile_board` — ``kiln compile MODEL --board NAME``: bundle + ``firmware/``,
  refused with the numbers when it cannot fit, size report from the linked ELF;
* :func:`run_on_qemu` — build the firmware with given inputs, run it on the board's QEMU
  machine, return its outputs (``kiln run DIR`` on a board bundle);
* :func:`flash_command` — the probe command line ``kiln flash`` runs.

Example::

    >>> from toolchain.boards import load_board
    >>> load_board("stm32f746g-disco").qemu.machine
    'mps2-an500'
"""

from __future__ import annotations

from toolchain.boards.build import compile_board
from toolchain.boards.descriptor import Board, board_names, load_board, parse_board
from toolchain.boards.flash import flash_command
from toolchain.boards.qemu import run_on_qemu

__all__ = ["Board", "board_names", "compile_board", "flash_command", "load_board",
           "parse_board", "run_on_qemu"]
