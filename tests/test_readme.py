"""The README's two commands: the first runs for real, the second is what .ci/run runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.tools import require

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "pip install -e '.[dev]' && "


def _sh_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_ci_runs_exactly_the_readme_test_command():
    test_command = _sh_blocks()[1]
    assert test_command == "pip install -e '.[dev]' && pytest"
    ci_lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci_lines[-1] == test_command


def test_readme_main_command_compiles_runs_and_scores_the_example(tmp_path):
    main_command = _sh_blocks()[0]
    assert main_command.startswith(INSTALL)
    # Already installed in the test environment; build into a temporary folder.
    command = main_command[len(INSTALL):].replace("build/digits", str(tmp_path / "digits"))
    command = command.replace("python ", f"{sys.executable} ")
    proc = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "check passed" in proc.stdout
    kiln = re.search(r"Kiln bundle accuracy: ([0-9.]+)", proc.stdout)
    ort = re.search(r"onnxruntime accuracy: ([0-9.]+)", proc.stdout)
    assert kiln and ort, proc.stdout
    assert kiln.group(1) == ort.group(1)
    assert float(kiln.group(1)) > 0.9


def test_readme_board_commands_compile_run_on_qemu_and_flash(tmp_path):
    """The three commands of "From a model to a board": compile --board, run under QEMU with
    --check, and flash (here with --dry-run: no probe or board in CI)."""
    require("arm-none-eabi-gcc", "picolibc", "make", "qemu-system-arm")
    block = next(b for b in _sh_blocks() if "--board" in b and "kiln flash" in b)
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
    assert [line.split()[1] for line in lines] == ["compile", "run", "flash"]
    out = str(tmp_path / "digits-board")
    for line in lines:
        cmd = line.replace("build/digits-board", out)
        if cmd.startswith("kiln flash"):
            cmd += " --dry-run"
        proc = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, cmd + "\n" + proc.stdout + proc.stderr
        if " run " in f" {cmd} ":
            assert "check passed" in proc.stdout and "QEMU" in proc.stdout
        if cmd.startswith("kiln flash"):
            assert "firmware.elf" in proc.stdout
