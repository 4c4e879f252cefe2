"""Tuning for boards under QEMU: the cost of a kernel is its executed instruction count.

:class:`QemuBuilder` schedules the trial's point for the board's target, renders the
kernel as C, adds a small harness (``templates/autotune/qemu_main.c.j2``: static buffers
for the arguments, the board's CMSDK timer read around one call) and cross-compiles it
with the board's core flags and picolibc semihosting. :class:`QemuRunner` runs the
firmware on the board's QEMU machine with ``-icount shift=0`` — one virtual nanosecond per
instruction — and reads the timer's ticks: the kernel's instructions to within
``1e9 / timer_hz`` (40 on the MPS2 machines). Deterministic: the same kernel counts the
same on every run and every machine, so runs on a Ray cluster agree with local ones.

The board is an emulator board (``qemu:`` section with a timer) whose descriptor names
the tuning target (:func:`board_for`).

Example (needs ``arm-none-eabi-gcc``, picolibc and ``qemu-system-arm``)::

    >>> from toolchain.autotune.tasks import conv_task                 # doctest: +SKIP
    >>> task = conv_task((1, 8, 10, 10), 16, 3, 1, "cortex-m4")         # doctest: +SKIP
    >>> b = QemuBuilder("cortex-m4").build([BuildInput(task.node, task.target,
    ...     task.space.workload, task.space.trace(task.space.default()))])   # doctest: +SKIP
    >>> QemuRunner("cortex-m4").run(b)[0].costs                        # doctest: +SKIP
    [117600.0]
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.autotune.measure import BuildInput, BuildResult, MeasureResult, build_error
from toolchain.errors import KilnError, OptionError

#: the picolibc semihosting link of MACHINE-NOTES.md (flash and RAM at the MPS2 addresses)
LINK = ("--specs=picolibc.specs", "--oslib=semihost", "--crt0=semihost")

#: the optimisation level a board's firmware compiles its kernels with (``KERNEL_OPT`` of
#: templates/firmware/Makefile.j2): a trial is measured as the firmware will run it
#: (at the target's own -O2 a near tie between two points could flip in the firmware)
KERNEL_OPT = "-O3"


def board_for(target: Any) -> Any:
    """The emulator board (QEMU machine with a timer) whose descriptor names ``target``."""
    from toolchain.boards.descriptor import board_names, load_board
    from toolchain.target import resolve_target

    t = resolve_target(target)
    for name in board_names():
        b = load_board(name)
        if b.target == t.name and b.is_emulator and b.qemu is not None \
                and b.qemu.timer_base and b.qemu.timer_hz:
            return b
    raise OptionError(f"--runner qemu: no emulator board in boards/ runs target {t.name!r} "
                      "(a board with a qemu: section and a timer); tune a Cortex-M target "
                      "such as cortex-m4")


def _tools() -> None:
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if shutil.which(tool) is None:
            raise KilnError(f"--runner qemu needs {tool}: apt-get install gcc-arm-none-eabi "
                            "picolibc-arm-none-eabi qemu-system-arm")


class QemuBuilder:
    """Cross-compiles trials into QEMU firmware (see the module docstring). Firmware is
    cached by content in ``work`` (default: a temporary folder)."""

    def __init__(self, target: Any, work: str | Path | None = None) -> None:
        from toolchain.target import resolve_target

        _tools()
        self.target = resolve_target(target)
        self.board = board_for(self.target)
        self.work = Path(work or tempfile.mkdtemp(prefix="kiln-qemu-"))

    def build_one(self, inp: BuildInput) -> BuildResult:
        from toolchain.autotune.apply import forcing
        from toolchain.autotune.features import extract
        from toolchain.codegen import get_renderer
        from toolchain.codegen.artifact import support_of
        from toolchain.codegen.cstyle import c_templates
        from toolchain.schedules.registry import schedule_for
        from toolchain.tir import ir
        from toolchain.tir.transform.pipeline import lower

        t0 = time.perf_counter()
        res = BuildResult(inp.trace)
        try:
            with forcing({inp.workload: inp.trace}):
                s = schedule_for(inp.node, self.target)
            lowered = lower(s.schedule.mod, target=self.target)
            res.features = extract(lowered).tolist()
            src = get_renderer("c", openmp=False).render(lowered, name=None)
            params = []
            r = get_renderer("c", openmp=False)
            for p in lowered.params:
                if not isinstance(p, ir.Buffer):
                    raise KilnError("kernels with scalar parameters cannot be measured")
                count = 1
                for d in p.shape:
                    count *= int(d.value)
                params.append({"ctype": r.ctype(p.dtype), "count": count})
            main = c_templates().get_template("autotune/qemu_main.c.j2").render(
                entry=src.entry, params=params, timer_base=self.board.qemu.timer_base,
                timer_hz=self.board.qemu.timer_hz)
            flags = [*self.board.cpu_flags, "-O2", "-std=gnu11", "-ffp-contract=fast",
                     *[f for f in self.target.cflags if not f.startswith("-march")],
                     KERNEL_OPT, *support_of(lowered).flags, *LINK,
                     f"-Wl,--defsym=__flash={self.board.flash.origin:#x}",
                     f"-Wl,--defsym=__flash_size={self.board.flash.size:#x}",
                     f"-Wl,--defsym=__ram={self.board.ram.origin:#x}",
                     f"-Wl,--defsym=__ram_size={self.board.ram.size:#x}"]
            key = hashlib.sha256("\0".join([src.code, main, *flags]).encode()).hexdigest()[:24]
            d = self.work / key
            elf = d / "kernel.elf"
            if not elf.is_file():
                d.mkdir(parents=True, exist_ok=True)
                (d / "kernel.c").write_text(src.code)
                (d / "main.c").write_text(main)
                cmd = ["arm-none-eabi-gcc", *flags, str(d / "main.c"), str(d / "kernel.c"),
                       "-lm", "-o", str(d / "kernel.tmp")]
                out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise KilnError(f"cross build failed: {out.stderr.strip()[:400]}")
                (d / "kernel.tmp").replace(elf)
            res.lib, res.entry = str(elf), src.entry
        except KilnError as exc:
            res.error = build_error(exc)
        res.seconds = time.perf_counter() - t0
        return res

    def build(self, inputs: Sequence[BuildInput]) -> list[BuildResult]:
        return [self.build_one(i) for i in inputs]

    def close(self) -> None:
        pass


class QemuRunner:
    """Counts a firmware's kernel instructions on the board's QEMU machine."""

    name = "qemu-icount"
    unit = "instructions"

    def __init__(self, target: Any, timeout: float = 60.0) -> None:
        _tools()
        self.board = board_for(target)
        self.timeout = timeout

    def run_one(self, b: BuildResult) -> MeasureResult:
        from toolchain.boards.qemu import qemu_command

        if b.error is not None or b.lib is None:
            return MeasureResult(None, b.error or "not built")
        cmd = qemu_command(self.board, b.lib)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout,
                                 check=False)
        except subprocess.TimeoutExpired:
            return MeasureResult(None, f"run: QEMU timed out after {self.timeout:g} s")
        for line in out.stdout.splitlines():
            if line.startswith("kiln-timer-ticks "):
                ticks, hz = (int(x) for x in line.split()[1:3])
                if out.returncode != 0:
                    break
                return MeasureResult([float(round(ticks * 1e9 / hz))])
        return MeasureResult(None, f"run: the firmware exited with status {out.returncode} "
                                   f"without a count ({(out.stderr or out.stdout)[-200:]})")

    def run(self, builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [self.run_one(b) for b in builds]

    def conditions(self) -> dict[str, Any]:
        """None: instruction counts do not depend on the machine."""
        return {}

    def close(self) -> None:
        pass
