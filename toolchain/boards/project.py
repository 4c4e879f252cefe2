"""The firmware project of a board bundle: ``DIR/firmware/`` next to the bundle's sources.

Rendered from ``templates/firmware/*.j2`` and the bundle's ``metadata.json`` alone (so
``kiln run`` can regenerate the inputs without the model)::

    firmware/Makefile         make qemu | make board | make run (arm-none-eabi-gcc)
    firmware/main.c           runs the model once, prints outputs and counters (semihosting)
    firmware/inputs.c         the inputs as const arrays (zeros until `kiln run` writes them)
    firmware/qemu.ld          board's flash/RAM sizes at the QEMU machine's addresses
    firmware/board.ld         board's flash/RAM sizes at the board's own addresses
    firmware/startup.c        vector table + reset handler (copied from boards/startup/)
    firmware/toolchain.cmake  CMake toolchain file for a parent firmware project

Example::

    >>> from toolchain.boards.descriptor import load_board
    >>> meta = {"model": {"name": "net"}, "inputs": [{"name": "x", "field": "x",
    ...         "dtype": "float32", "shape": [2], "bytes": 8}], "outputs": []}
    >>> files = firmware_files(meta, load_board("nrf52840dk"))
    >>> sorted(files)[:3]
    ['firmware/Makefile', 'firmware/board.ld', 'firmware/inputs.c']
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from toolchain import __version__
from toolchain.boards.descriptor import Board
from toolchain.bundle.compiler import c_type
from toolchain.bundle.weights import format_bytes
from toolchain.errors import InputError
from toolchain.graph.ir import np_dtype
from toolchain.target import LIBC_FLAGS

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates" / "firmware"


@functools.cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined, autoescape=False)


def _tensors(meta: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    model = meta["model"]["name"]
    out = []
    for t in meta[kind]:
        out.append({**t, "ctype": c_type(t["dtype"]), "count": math.prod(t["shape"]),
                    "macro": f"{model.upper()}_{kind[:-1].upper()}_{t['field'].upper()}",
                    "comment": f"{t['name']} {t['dtype']}{list(t['shape'])}".replace("*/", "")})
    return out


def inputs_source(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None,
                  source: str = "zeros") -> str:
    """``firmware/inputs.c`` for ``arrays`` (by input name; missing ones are zeros)."""
    inputs = _tensors(meta, "inputs")
    for t in inputs:
        dt = np_dtype(t["dtype"])
        a = (arrays or {}).get(t["name"])
        if a is None:
            a = np.zeros(t["shape"], dt)
        t["chunks"], t["text"] = format_bytes(np.ascontiguousarray(a, dtype=dt))
    ctx = {"version": __version__, "model": meta["model"]["name"], "inputs": inputs,
           "source": source.replace("*/", "")}
    return _env().get_template("inputs.c.j2").render(ctx)


def check_inputs(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray], where: str) -> None:
    """Refuse arrays that are missing, extra, or of another dtype or shape."""
    names = [t["name"] for t in meta["inputs"]]
    missing = [n for n in names if n not in arrays]
    extra = [n for n in arrays if n not in names]
    if missing or extra:
        raise InputError(f"{where}: " + "; ".join(
            ([f"missing input(s) {', '.join(missing)}"] if missing else [])
            + ([f"unknown key(s) {', '.join(extra)}"] if extra else []))
            + f" (the model's inputs: {', '.join(names)})")
    for t in meta["inputs"]:
        a = arrays[t["name"]]
        if a.dtype != np_dtype(t["dtype"]) or list(a.shape) != list(t["shape"]):
            raise InputError(f"{where}: input {t['name']!r} is {a.dtype}{list(a.shape)}, the "
                             f"bundle expects {t['dtype']}{list(t['shape'])}")


def firmware_files(meta: Mapping[str, Any], board: Board) -> dict[str, str]:
    """Every file of the firmware project, by path relative to the bundle directory."""
    env = _env()
    model = meta["model"]["name"]
    q = board.qemu
    ctx = {"version": __version__, "model": model, "MODEL": model.upper(), "board": board.name,
           "inputs": _tensors(meta, "inputs"), "outputs": _tensors(meta, "outputs"),
           "cpu_flags": " ".join(board.cpu_flags), "libc_flags": " ".join(LIBC_FLAGS[board.libc]),
           "qemu_machine": q.machine,
           "qemu_cpu": q.cpu, "timer_base": q.timer_base or 0, "timer_hz": q.timer_hz or 0,
           "kernel_objects": [f"../{o}" for o in meta.get("kernel_objects", ())],
           "weights_mode": (meta.get("weights_storage") or {}).get("mode", "c-array"),
           "defines": [f"{k}={v}" for k, v in sorted(board.defines.items())]}
    mem = {"version": __version__, "board": board.name, "flash_size": board.flash.size,
           "ram_size": board.ram.size, "stack_bytes": board.stack_bytes}
    qemu_ld = env.get_template("memory.ld.j2").render({
        **mem, "what": f"the QEMU {q.machine} link", "flash_origin": q.flash_origin,
        "ram_origin": q.ram_origin,
        "note": "The board's sizes at addresses the emulator has: a model that links here "
                "fits the board."})
    board_ld = env.get_template("memory.ld.j2").render({
        **mem, "what": "the board's own link", "flash_origin": board.flash.origin,
        "ram_origin": board.ram.origin, "note": "Flash and RAM as the chip has them."})
    files = {
        "firmware/Makefile": env.get_template("Makefile.j2").render(ctx),
        "firmware/main.c": env.get_template("main.c.j2").render(ctx),
        "firmware/inputs.c": inputs_source(meta),
        "firmware/qemu.ld": qemu_ld,
        "firmware/board.ld": board_ld,
        "firmware/startup.c": board.startup_path.read_text(),
        "firmware/toolchain.cmake": env.get_template("toolchain.cmake.j2").render(ctx),
    }
    if not any(t["field"] for t in ctx["inputs"]):  # pragma: no cover - models have inputs
        raise InputError(f"model {model} has no inputs")
    return files


def is_board_bundle(path: str | Path) -> bool:
    """Whether ``path`` is a bundle compiled with ``--board``: it has a firmware project and
    its ``metadata.json`` names a board.

    Example::

        >>> is_board_bundle("no/such/dir")
        False
    """
    p = Path(path)
    if not (p / "firmware" / "Makefile").is_file() or not (p / "metadata.json").is_file():
        return False
    try:
        return bool(json.loads((p / "metadata.json").read_text()).get("board"))
    except ValueError:
        return False
