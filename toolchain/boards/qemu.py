"""Run a board bundle's firmware on the QEMU machine with the board's core.

QEMU runs the ``make qemu`` build (picolibc semihosting crt0, the board's flash and RAM
sizes at the emulator's addresses) with semihosting for the output and the exit status,
always under a hard timeout: a firmware that faults or loops makes QEMU hang silently.

QEMU does not model cycles (the DWT cycle counter reads 0).  With ``-icount shift=0`` its
virtual clock advances exactly 1 ns per executed instruction, so the CMSDK timer that
``main.c`` reads around the inference (25 MHz on the MPS2 machines) gives the number of
executed instructions to within 1e9 / 25e6 = 40.

Example::

    >>> run = run_on_qemu("build/kws", {"input": x})                  # doctest: +SKIP
    >>> run.outputs["probs"].shape, run.instructions                   # doctest: +SKIP
    ((1, 12), 12747760)
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.boards.build import INSTALL_HINT, make, require_tool
from toolchain.boards.descriptor import Board, board_of_bundle
from toolchain.boards.project import check_inputs, inputs_source
from toolchain.errors import InputError, SimulationError
from toolchain.graph.ir import np_dtype

#: default hard limit of one QEMU run, seconds
TIMEOUT = 120.0

QEMU_HINT = "install QEMU's Arm system emulator: apt-get install qemu-system-arm"

_EXIT_MEANING = {11: "a NULL argument", 12: "the arena is misaligned", 13: "a kernel failed"}


@dataclass
class QemuRun:
    """What one firmware run printed: outputs by name and the counters."""

    outputs: dict[str, np.ndarray]
    cycles: int  # DWT CYCCNT (0: not modelled by QEMU)
    timer_ticks: int | None
    timer_hz: int | None
    seconds: float
    command: list[str] = field(default_factory=list)
    stdout: str = ""

    @property
    def stack_bytes(self) -> tuple[int, int] | None:
        """(used, size) of the stack: its high-water mark over the run, and its size."""
        for line in self.stdout.splitlines():
            if line.startswith("kiln-stack-bytes "):
                used, size = (int(x) for x in line.split()[1:3])
                return used, size
        return None

    @property
    def kernel_ticks(self) -> list[tuple[int, str, int]]:
        """(index, kernel, timer ticks) per kernel, when built with -DKILN_ENABLE_TIMING."""
        out = []
        for line in self.stdout.splitlines():
            if line.startswith("kiln-kernel-ticks "):
                _, index, name, ticks = line.split()
                out.append((int(index), name, int(ticks)))
        return out

    @property
    def instructions(self) -> int | None:
        """Executed instructions of the inference (``-icount shift=0``: 1 ns each)."""
        if not self.timer_ticks or not self.timer_hz:
            return None
        return round(self.timer_ticks * 1e9 / self.timer_hz)


def qemu_command(board: Board, elf: str | Path, icount: bool = True) -> list[str]:
    """The QEMU command line that runs ``elf`` on ``board``'s machine.

    >>> from toolchain.boards.descriptor import load_board
    >>> " ".join(qemu_command(load_board("nrf52840dk"), "fw.elf"))[:60]
    'qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -display '
    """
    # the semihosting console on a stdio chardev: the firmware's output on QEMU's stdout
    # (by default QEMU 7 writes it to stderr, among its own messages)
    cmd = ["qemu-system-arm", "-machine", board.qemu.machine, "-cpu", board.qemu.cpu,
           "-display", "none", "-monitor", "none", "-serial", "none",
           "-chardev", "stdio,id=kiln0",
           "-semihosting-config", "enable=on,target=native,chardev=kiln0"]
    if icount:
        cmd += ["-icount", "shift=0"]
    return [*cmd, "-kernel", str(elf)]


def parse_output(text: str, meta: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int,
                                                              int | None, int | None]:
    """(outputs by name, cycles, timer ticks, timer Hz) from the firmware's stdout."""
    by_field = {t["field"]: t for t in meta["outputs"]}
    hexes: dict[str, list[str]] = {}
    current: str | None = None
    cycles, ticks, hz = 0, None, None
    for line in text.splitlines():
        if line.startswith("kiln-output "):
            current = line.split()[1]
            hexes[current] = []
        elif line.startswith("kiln-cycles "):
            cycles, current = int(line.split()[1]), None
        elif line.startswith("kiln-timer-ticks "):
            ticks, hz = (int(x) for x in line.split()[1:3])
            current = None
        elif line.startswith("kiln-"):
            current = None
        elif current is not None:
            hexes[current].append(line.strip())
    outputs = {}
    for fld, t in by_field.items():
        if fld not in hexes:
            raise SimulationError(f"the firmware printed no output {t['name']!r} "
                                  f"(kiln-output {fld}); its output ended with:\n"
                                  + "\n".join(text.splitlines()[-5:]))
        data = bytes.fromhex("".join(hexes[fld]))
        if len(data) != t["bytes"]:
            raise SimulationError(f"output {t['name']!r}: the firmware printed {len(data)} "
                                  f"bytes, expected {t['bytes']}")
        outputs[t["name"]] = np.frombuffer(data, np_dtype(t["dtype"])).reshape(t["shape"])
    return outputs, cycles, ticks, hz


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def run_on_qemu(bundle: str | Path, inputs: Mapping[str, np.ndarray], *,
                timeout: float = TIMEOUT, extra_cflags: str = "",
                source: str = "kiln run") -> QemuRun:
    """Embed ``inputs`` in the firmware, build it (``make qemu``), run it on QEMU."""
    from toolchain.bundle.host import read_metadata

    d = Path(bundle)
    meta = read_metadata(d)
    if not meta.get("board"):
        raise InputError(f"{d} is a host bundle, not a board bundle (compile it with "
                         "kiln compile MODEL --board NAME)")
    board = board_of_bundle(meta)
    check_inputs(meta, inputs, "inputs")
    fw = d / "firmware"
    _write_if_changed(fw / "inputs.c", inputs_source(meta, inputs, source))
    extra = {"EXTRA_CFLAGS": extra_cflags} if extra_cflags else {}
    if extra_cflags:  # objects built with other flags must not be reused
        subprocess.run(["make", "-C", str(fw), "clean"], capture_output=True, check=False)
    make(fw, "qemu", extra=extra)
    require_tool("qemu-system-arm", QEMU_HINT)
    cmd = qemu_command(board, fw / "build" / "qemu" / "firmware.elf")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SimulationError(f"QEMU {board.qemu.machine} did not finish within {timeout:.0f} "
                              "s (the firmware hung or faulted, or the model is too slow "
                              f"for the emulator: raise the timeout): {' '.join(cmd)}") from None
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        err = [ln for ln in proc.stdout.splitlines() if ln.startswith("kiln-error")]
        why = _EXIT_MEANING.get(proc.returncode, "see its output")
        raise SimulationError(
            f"the firmware exited with status {proc.returncode} ({why}) on QEMU "
            f"{board.qemu.machine}" + (f": {err[0]}" if err else "")
            + (f"\n{proc.stderr.strip()}" if proc.stderr.strip() else ""))
    outputs, cycles, ticks, hz = parse_output(proc.stdout, meta)
    run = QemuRun(outputs, cycles, ticks, hz, seconds, cmd, proc.stdout)
    stack = run.stack_bytes
    if stack is not None and stack[0] >= stack[1]:
        # QEMU's RAM goes on below the stack; the board's does not: its .bss is there
        raise SimulationError(f"stack overflow: the firmware used all {stack[1]:,} bytes of "
                              f"its stack (and maybe more); raise stack_bytes in board "
                              f"{board.name}'s descriptor")
    return run


__all__ = ["INSTALL_HINT", "QEMU_HINT", "QemuRun", "parse_output", "qemu_command",
           "run_on_qemu"]
