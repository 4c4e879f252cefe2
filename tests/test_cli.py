"""The CLI skeleton: help, version, exit statuses."""

from __future__ import annotations

import subprocess
import sys

from toolchain import __version__
from toolchain.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert __version__ in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: kiln" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "toolchain", "frobnicate"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_closed_pipe_is_not_a_bug():
    proc = subprocess.run(
        f"{sys.executable} -m toolchain inspect examples/lenet5.onnx --json | head -c 10",
        shell=True, capture_output=True, text=True,
    )
    assert "internal error" not in proc.stderr
    assert "Traceback" not in proc.stderr
