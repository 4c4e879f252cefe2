"""Compile a model for a board: bundle + firmware project, the fit check, the size report.

:func:`compile_board` is ``kiln compile MODEL --board NAME -o DIR``::

    estimate from the ONNX initializers  -> refuse now if the weights alone overflow flash
    build_spec (the board's target)      -> estimate flash (weights + code) and RAM (arena,
                                            outputs, stack); refuse if either overflows
    write the bundle + firmware/         -> make board qemu (arm-none-eabi-gcc)
    linker map of the board link         -> size report in metadata.json["board"]["size"]

A link that overflows a region (the estimate was too low) is refused the same way, with
the linker's numbers.

Example::

    >>> out, report = compile_board("kws.onnx", "nucleo-l4r5zi", "build/kws")  # doctest: +SKIP
    >>> report["flash"]["total"] <= report["flash"]["available"]              # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from toolchain.boards.descriptor import Board, load_board
from toolchain.boards.project import firmware_files
from toolchain.boards.size import size_report
from toolchain.errors import BuildError, OptionError, TargetError

# The estimates are at the low end of what the zoo's fp32 models link to, so that the
# check before compiling never refuses a model that fits; the link (exact) catches the
# rest, with the linker's numbers.
#: flash of picolibc (printf, semihosting), start-up, call sequence, runtime and main
#: (8.9 to 11 KiB in the zoo)
RUNTIME_FLASH_ESTIMATE = 8 * 1024
#: flash per kernel before linking (0.15 to 0.7 KiB per kernel in the zoo)
KERNEL_FLASH_ESTIMATE = 128
#: RAM besides the arena, outputs and stack (picolibc state: tens of bytes on a board)
RUNTIME_RAM_ESTIMATE = 16

INSTALL_HINT = ("install the Arm cross compiler and C library: apt-get install "
                "gcc-arm-none-eabi picolibc-arm-none-eabi")


def require_tool(name: str, hint: str) -> str:
    """The path of ``name`` on PATH, or a :class:`BuildError` saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"{name} is not installed (not on PATH); {hint}")
    return path


def _refuse(board: Board, what: str, flash_need: int, ram_need: int, how: str) -> TargetError:
    f, r = board.flash.size, board.ram.size
    over = []
    if flash_need > f:
        over.append(f"flash needs {flash_need:,} B, the board has {f:,} B "
                    f"({flash_need / f:.1f}x)")
    if ram_need > r:
        over.append(f"RAM needs {ram_need:,} B, the board has {r:,} B ({ram_need / r:.1f}x)")
    return TargetError(f"{what} does not fit board {board.name}: {'; '.join(over)} ({how}). "
                       "Choose a board with more memory or a smaller model (int8 weights are "
                       "4x smaller)")


def estimate(meta: dict[str, Any], board: Board) -> tuple[int, int]:
    """(flash, RAM) bytes the firmware will need, before anything is compiled."""
    outputs = sum(t["bytes"] for t in meta["outputs"])
    inputs = sum(t["bytes"] for t in meta["inputs"])
    flash = (meta["weight_bytes"] + inputs + RUNTIME_FLASH_ESTIMATE
             + KERNEL_FLASH_ESTIMATE * meta["kernel_count"])
    ram = meta["arena_bytes"] + outputs + board.stack_bytes + RUNTIME_RAM_ESTIMATE
    return flash, ram


def _initializer_bytes(model: Any) -> int:
    from toolchain.frontend.onnx import load_model

    proto = load_model(model, lazy=True)[0]
    total = 0
    for t in proto.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        total += n * {1: 4, 11: 8, 7: 8, 10: 2, 3: 1, 2: 1, 6: 4, 5: 2}.get(t.data_type, 4)
    return total


def compiler_cache() -> dict[str, str]:
    """``make``'s ``CC`` for Kiln's firmware builds: the cross compiler through ``ccache``
    where it is installed (``{}`` otherwise: the Makefile's ``arm-none-eabi-gcc``).

    The objects are the compiler's own, byte for byte, whichever build made them first; a
    model's kernels compiled for one board are found again for another board of the same
    core (``ccache`` hashes the preprocessed source, so the other board's section
    ``-D`` flags, which ``kernels.c`` does not read, do not count), and so are the runtime
    and the start-up code of every bundle for that core. The generated Makefile is
    unchanged: ``make`` run by hand compiles with ``arm-none-eabi-gcc`` itself."""
    ccache = shutil.which("ccache")
    return {"CC": f"{ccache} arm-none-eabi-gcc"} if ccache else {}


def make(firmware: Path, *goals: str, extra: dict[str, str] | None = None,
         timeout: float = 600, board: Board | None = None) -> None:
    """``make -C firmware goals`` with the cross compiler (through :func:`compiler_cache`);
    link overflows -> TargetError."""
    require_tool("arm-none-eabi-gcc", INSTALL_HINT)
    require_tool("make", "install make (apt-get install make)")
    cmd = ["make", "-C", str(firmware), "-j2", *goals,
           *(f"{k}={v}" for k, v in {**compiler_cache(), **(extra or {})}.items())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"building the firmware in {firmware} took over {timeout:.0f} s "
                         f"({' '.join(cmd)})") from None
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if "specs" in text and "picolibc" in text and "No such file" in text:
            raise BuildError(f"picolibc is not installed for arm-none-eabi; {INSTALL_HINT}")
        overflow = {}
        for region, n in re.findall(r"region `(\w+)' overflowed by (\d+) bytes", text):
            overflow[region] = max(overflow.get(region, 0), int(n))
        if overflow:
            have = {"flash": board.flash.size, "ram": board.ram.size} if board else {}
            raise TargetError(
                "the firmware does not fit" + (f" board {board.name}" if board else "")
                + ": " + "; ".join(
                    f"{region} overflowed by {n:,} B" + (
                        f" (needs {have[region] + n:,} B, the board has "
                        f"{have[region]:,} B)" if region in have else "")
                    for region, n in overflow.items()) + " (the linked ELF)")
        tail = "\n".join(text.strip().splitlines()[-25:])
        raise BuildError(f"building the firmware failed ({' '.join(cmd)}):\n{tail}")


def compile_board(model: Any, board: str | Board, output: str | Path, *,
                  input_shapes: dict[str, tuple[int, ...]] | None = None,
                  name: str | None = None, dump_ir: str | Path | None = None,
                  force: bool = False, progress: bool | None = None,
                  build: bool = True, backend: str | None = None,
                  weights: str | None = None, ram_budget: int | None = None
                  ) -> tuple[Path, dict[str, Any] | None]:
    """Compile ``model`` for ``board`` into ``output``; (path, size report or None);
    ``backend="llvm"``: the kernels as object files for the board's triple; ``weights``:
    ``incbin`` (the default) or ``c-array`` (the firmware links its weights: not
    ``external``); ``ram_budget``: the most arena bytes (default: the board's RAM less its
    stack and the runtime's estimate), met by patch-based inference where needed."""
    from toolchain.bundle.compiler import build_spec
    from toolchain.bundle.render import (
        check_destination,
        install_dir,
        render_files,
        staging_dir,
        write_bundle,
    )

    b = board if isinstance(board, Board) else load_board(board)
    if weights == "external":
        raise OptionError(f"--weights external and --board {b.name}: the firmware links the "
                          "weights into flash; use --weights incbin (default) or c-array")
    weights = weights if weights in (None, "c-array") else "incbin"
    out_dir = Path(output).absolute()
    check_destination(out_dir, force)
    if build:  # before anything is compiled or written
        require_board_tools()
    raw = _initializer_bytes(model)
    if raw > b.flash.size:
        label = f"model {Path(model).name}" if isinstance(model, (str, Path)) else "the model"
        raise _refuse(b, label, raw, 0, "estimate from the model's weights alone, "
                      "before compiling")
    default_budget = ram_budget is None
    if ram_budget is None:
        ram_budget = max(b.ram.size - b.stack_bytes - RUNTIME_RAM_ESTIMATE, 1)
    args = {"input_shapes": input_shapes, "name": name, "dump_ir": dump_ir,
            "progress": progress, "backend": backend, "weights": weights}
    try:
        spec = build_spec(model, b.compile_target(), ram_budget=ram_budget, **args)
    except OptionError:
        if not default_budget:
            raise
        # no patch stage fits the board's RAM: the plain bundle, refused below with the
        # board's numbers
        spec = build_spec(model, b.compile_target(), **args)
    files = render_files(spec)
    meta = json.loads(files["metadata.json"])
    flash_need, ram_need = estimate(meta, b)
    if flash_need > b.flash.size or ram_need > b.ram.size:
        raise _refuse(b, f"model {meta['model']['name']}", flash_need, ram_need,
                      f"estimate before linking: weights {meta['weight_bytes']:,} B + code, "
                      f"arena {meta['arena_bytes']:,} B + stack {b.stack_bytes:,} B")
    meta["board"] = board_metadata(b, flash_need, ram_need)
    files["metadata.json"] = json.dumps(meta, indent=2) + "\n"
    files.update(firmware_files(meta, b))
    if not build:
        return write_bundle(files, output, force=force), None
    # built in a staging directory and moved into place only when the firmware links and
    # fits: a failed compile leaves nothing behind (and --force loses nothing)
    stage = staging_dir(out_dir)
    try:
        built = write_bundle(files, stage / "bundle")
        report = build_and_report(built, b)
        install_dir(built, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out_dir, report


def require_board_tools() -> None:
    """Refuse early (naming the tool and how to install it) when the cross compiler, its C
    library (picolibc) or ``make`` is missing."""
    gcc = require_tool("arm-none-eabi-gcc", INSTALL_HINT)
    require_tool("make", "install make (apt-get install make)")
    probe = subprocess.run([gcc, "-print-file-name=picolibc.specs"], capture_output=True,
                           text=True, check=False)
    if not Path(probe.stdout.strip()).is_absolute():
        raise BuildError(f"picolibc is not installed for arm-none-eabi; {INSTALL_HINT}")


def board_metadata(b: Board, flash_need: int, ram_need: int) -> dict[str, Any]:
    """The ``board`` entry of a board bundle's metadata.json (before the link)."""
    from toolchain.boards.descriptor import BOARDS_DIR

    shipped = Path(b.source).resolve() == (BOARDS_DIR / f"{b.name}.yaml").resolve()
    return {"name": b.name, "descriptor": None if shipped else str(Path(b.source).resolve()),
            "core": b.core, "fpu": b.fpu, "float_abi": b.float_abi,
            "target": b.target, "layout": b.layout, "cpu_flags": list(b.cpu_flags),
            "flash": {"origin": b.flash.origin, "size": b.flash.size},
            "ram": {"origin": b.ram.origin, "size": b.ram.size},
            "stack_bytes": b.stack_bytes,
            "qemu": {"machine": b.qemu.machine, "cpu": b.qemu.cpu},
            "estimate": {"flash": flash_need, "ram": ram_need}, "size": None}


def build_and_report(out: Path, b: Board) -> dict[str, Any]:
    """Build both firmware variants; write the board link's size report to metadata.json."""
    fw = out / "firmware"
    make(fw, "board", board=b)  # first alone: an overflow is reported for the board link
    make(fw, "qemu", board=b)
    report = size_report(fw / "build" / "board" / "firmware.map", b.flash.size, b.ram.size)
    meta_path = out / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["board"]["size"] = report
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return report
