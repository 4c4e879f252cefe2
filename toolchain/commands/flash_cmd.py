"""``kiln flash``: build a board bundle's firmware and write it to the board with a probe."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

HELP = "build a board bundle's firmware and flash it with pyOCD or OpenOCD"

EPILOG = """\
examples:
  kiln compile kws.onnx --board nucleo-l4r5zi -o build/kws
  kiln flash build/kws --board nucleo-l4r5zi                  # pyOCD (the default probe)
  kiln flash build/kws --board nucleo-l4r5zi --probe openocd
  kiln flash build/kws --board nucleo-l4r5zi --dry-run        # print the commands only

The firmware prints its outputs over semihosting: attach with
`pyocd gdbserver --semihosting` (or OpenOCD's `arm semihosting enable`) to see them.
Exit status 2 when the probe tool or the board is missing (the message says what to
install), 0 after a successful flash.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("bundle", metavar="DIR", help="a bundle written by kiln compile --board")
    parser.add_argument("--board", required=True, metavar="NAME|FILE.yaml",
                        help="the board: a name from boards/ or a YAML file (must be the one "
                             "the bundle was compiled for)")
    parser.add_argument("--probe", choices=("pyocd", "openocd"),
                        help="the flashing tool (default: the board's first recipe, pyocd)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the build and flash commands, run nothing")


def run(args: argparse.Namespace) -> int:
    from toolchain.boards.build import make
    from toolchain.boards.descriptor import load_board
    from toolchain.boards.flash import flash_command, run_flash
    from toolchain.boards.project import is_board_bundle
    from toolchain.errors import InputError, OptionError

    board = load_board(args.board)
    d = Path(args.bundle)
    if not d.exists():
        raise InputError(f"{d}: no such directory; write the bundle with kiln compile MODEL "
                         f"--board {board.name} -o {d}")
    if not is_board_bundle(d):
        raise InputError(f"{d} is not a board bundle (no firmware/ project); compile it with "
                         f"kiln compile MODEL --board {board.name} -o {d}")
    compiled_for = json.loads((d / "metadata.json").read_text())["board"]["name"]
    if compiled_for != board.name:
        raise OptionError(f"{d} was compiled for board {compiled_for}, not {board.name}; "
                          f"recompile with --board {board.name}")
    elf = d / "firmware" / "build" / "board" / "firmware.elf"
    cmd = flash_command(board, elf, args.probe)
    if args.dry_run:
        print(f"make -C {d / 'firmware'} board")
        print(shlex.join(cmd))
        return 0
    make(d / "firmware", "board")
    run_flash(board, cmd)
    print(f"flashed {elf} to {board.name} with {cmd[0]}")
    return 0
