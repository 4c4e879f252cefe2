"""The board parts of ``kiln compile --board`` and ``kiln run DIR`` (a board bundle).

``toolchain/commands/compile_cmd.py`` and ``run_cmd.py`` call :func:`compile_command`
and :func:`run_command` when a board is involved; the logic lives here.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from toolchain.boards.build import compile_board
from toolchain.boards.descriptor import load_board
from toolchain.boards.size import format_report
from toolchain.errors import InputError, OptionError


def is_board_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a bundle compiled with ``--board`` (it has a firmware project)."""
    p = Path(path)
    if not (p / "firmware" / "Makefile").is_file() or not (p / "metadata.json").is_file():
        return False
    try:
        return bool(json.loads((p / "metadata.json").read_text()).get("board"))
    except ValueError:
        return False


def compile_command(args: argparse.Namespace, input_shapes: dict) -> int:
    """``kiln compile MODEL --board NAME -o DIR``."""
    board = load_board(args.board)
    if args.target not in ("c-generic", board.target):
        raise OptionError(f"--target {args.target} and --board {board.name} disagree: the "
                          f"board compiles for target {board.target}; drop --target")
    if not Path(args.model).is_file():
        raise InputError(f"model file {args.model} does not exist")
    start = time.perf_counter()
    out, report = compile_board(args.model, board, args.output, input_shapes=input_shapes,
                                name=args.name, dump_ir=args.dump_ir, force=args.force,
                                progress=False if args.no_progress else None)
    meta = json.loads((out / "metadata.json").read_text())
    print(f"wrote {args.output}: model {meta['model']['name']} for board {board.name} "
          f"({board.core}, target {board.target}) in {time.perf_counter() - start:.1f} s")
    print(f"  kernels {meta['kernel_count']}, arena {meta['arena_bytes']:,} B, weights "
          f"{meta['weight_bytes']:,} B")
    if report is not None:
        print("  " + format_report(report).replace("\n", "\n  "))
    print(f"  run on QEMU {board.qemu.machine}: kiln run {args.output} --inputs IN.npz --check")
    if not board.is_emulator:
        print(f"  flash: kiln flash {args.output} --board {board.name}")
    return 0


def run_command(args: argparse.Namespace) -> int:
    """``kiln run DIR`` where DIR is a board bundle: build, run on QEMU, compare."""
    from toolchain.boards.qemu import run_on_qemu
    from toolchain.bundle.host import read_metadata
    from toolchain.commands.run_cmd import _emit, bundle_inputs, check_outputs

    feeds = bundle_inputs(args)
    meta = read_metadata(args.model)
    try:
        run = run_on_qemu(args.model, feeds, source=Path(args.inputs).name)
    except InputError as exc:
        raise InputError(f"--inputs {args.inputs}: {exc}") from None
    _emit(args, run.outputs)
    board = meta["board"]
    counted = (f"{run.instructions:,} instructions (QEMU -icount)" if run.instructions
               else "no instruction count")
    cycles = (f"{run.cycles:,} cycles" if run.cycles else
              "cycles not modelled by QEMU (DWT CYCCNT reads 0)")
    stack = run.stack_bytes
    used = f"; stack {stack[0]:,} of {stack[1]:,} B used" if stack else ""
    print(f"ran on QEMU {board['qemu']['machine']} ({board['name']}) in {run.seconds:.2f} s: "
          f"{counted}; {cycles}{used}")
    return check_outputs(args, meta, feeds, run.outputs)
