"""The README's two commands: the first runs for real, the second is what .ci/run runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
